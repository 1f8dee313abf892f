//! `gatehouse ui`: the human's console, attached to the running broker over the ui socket
//! (starting the broker in the background when none runs). The console library connects,
//! takes the terminal, and locks this process down before it reads the first frame.

use crate::Global;
use std::io::IsTerminal;
use std::process::ExitCode;

#[derive(clap::Args, Clone, Debug, Default)]
pub struct UiArgs {
    /// Run the console with less than its lockdown needs when the kernel lacks a mechanism.
    #[arg(long)]
    pub allow_degraded: bool,
    /// Quit after the first decision the broker accepts (`gatehouse demo --interactive`).
    #[arg(long, hide = true)]
    pub exit_after_decision: bool,
    /// Test builds only: run the console without its lockdown.
    #[cfg(all(unix, feature = "test-hooks"))]
    #[arg(long)]
    pub test_skip_lockdown: bool,
    /// Test builds only: after the lockdown, try `open:PATH`, `connect:PATH` or `exec:PATH` and
    /// show what happened in the status line.
    #[cfg(all(unix, feature = "test-hooks"))]
    #[arg(long, value_name = "OP:PATH")]
    pub test_probe: Option<String>,
}

impl UiArgs {
    /// The same options as `gatehouse ui` arguments (for `up` and `demo`, which start it).
    #[cfg(unix)]
    pub fn to_args(&self) -> Vec<String> {
        let mut v = Vec::new();
        if self.allow_degraded {
            v.push("--allow-degraded".into());
        }
        if self.exit_after_decision {
            v.push("--exit-after-decision".into());
        }
        #[cfg(all(unix, feature = "test-hooks"))]
        {
            if self.test_skip_lockdown {
                v.push("--test-skip-lockdown".into());
            }
            if let Some(p) = &self.test_probe {
                v.push("--test-probe".into());
                v.push(p.clone());
            }
        }
        v
    }
}

fn fail(msg: &str) -> ExitCode {
    eprintln!("gatehouse ui: {}", ipc_schema::inert::escaped(msg));
    ExitCode::from(crate::EXIT_FAILURE)
}

/// `--json` asks for machine-readable output, which a console is not.
pub fn refuse_json(cmd: &str) -> ExitCode {
    eprintln!(
        "gatehouse {cmd}: --json does not apply to the console; for machines use `gatehouse approve --json` (proposals and decisions) and `gatehouse audit tail --json`"
    );
    ExitCode::from(crate::EXIT_USAGE)
}

pub fn run(g: &Global, args: UiArgs) -> ExitCode {
    if g.json {
        return refuse_json("ui");
    }
    // Before anything else, so that no broker is started for a console that cannot run.
    if !std::io::stdin().is_terminal() || !std::io::stdout().is_terminal() {
        return fail(&ui::UiError::NotATerminal.to_string());
    }
    // What this process inherited: the lockdown closes all of it but stdio.
    #[cfg(unix)]
    let inherited = match ui::fds::open_fds() {
        Ok(f) => f,
        Err(e) => return fail(&format!("cannot list open descriptors: {e}")),
    };
    let link = match connect(g) {
        Ok(s) => s,
        Err(e) => return fail(&e),
    };
    let opts = ui::RunOptions {
        title: format!("broker at {}", g.dirs.runtime.display()),
        exit_after_decision: args.exit_after_decision,
        allow_degraded: args.allow_degraded,
        #[cfg(unix)]
        inherited_fds: inherited.into_iter().filter(|fd| *fd > 2).collect(),
        #[cfg(all(unix, feature = "test-hooks"))]
        test: ui::probe::TestHooks {
            skip_lockdown: args.test_skip_lockdown,
            probe: args.test_probe.clone(),
        },
    };
    match ui::run(link, opts) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(&e.to_string()),
    }
}

/// A connection on the ui endpoint, starting the broker if none answers.
fn connect(g: &Global) -> Result<ui::link::Link, String> {
    let path = g.dirs.ui_socket();
    if let Ok(l) = open(&path) {
        return Ok(l);
    }
    // Starts the broker and waits until the endpoint answers (that probe connection is closed
    // at once; a ui connection holds nothing until it asks).
    gatehouse_client::Client::connect_or_start(g.data_dir.as_deref(), &g.dirs, &path, &[])
        .map_err(|e| e.to_string())?;
    open(&path).map_err(|e| format!("cannot reach the broker at {}: {e}", path.display()))
}

#[cfg(unix)]
fn open(path: &std::path::Path) -> std::io::Result<ui::link::Link> {
    ui::link::Link::new(std::os::unix::net::UnixStream::connect(path)?)
}

/// The broker's ui pipe, refused unless this user's process serves it, opened overlapped.
#[cfg(windows)]
fn open(path: &std::path::Path) -> std::io::Result<ui::link::Link> {
    let name = path
        .to_str()
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a pipe name"))?;
    let (reader, writer, _server) = sandbox::endpoint::connect_duplex(name)?;
    ui::link::Link::new(reader, writer)
}
