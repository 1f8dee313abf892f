//! `gatehouse ui`: the human's console, attached to the running broker over the ui socket
//! (starting the broker in the background when none runs). The console library connects,
//! takes the terminal, and locks this process down before it reads the first frame.
//!
//! Also the broker's side of the console's live audit tail ([`audit_tail`]).

use crate::{client, Global};
use ipc_schema::ui::AuditEntry;
use std::io::IsTerminal;
use std::os::fd::RawFd;
use std::os::unix::net::UnixStream;
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
    #[cfg(feature = "test-hooks")]
    #[arg(long)]
    pub test_skip_lockdown: bool,
    /// Test builds only: after the lockdown, try `open:PATH`, `connect:PATH` or `exec:PATH` and
    /// show what happened in the status line.
    #[cfg(feature = "test-hooks")]
    #[arg(long, value_name = "OP:PATH")]
    pub test_probe: Option<String>,
}

impl UiArgs {
    /// The same options as `gatehouse ui` arguments (for `up` and `demo`, which start it).
    pub fn to_args(&self) -> Vec<String> {
        let mut v = Vec::new();
        if self.allow_degraded {
            v.push("--allow-degraded".into());
        }
        if self.exit_after_decision {
            v.push("--exit-after-decision".into());
        }
        #[cfg(feature = "test-hooks")]
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
    let inherited = match ui::fds::open_fds() {
        Ok(f) => f,
        Err(e) => return fail(&format!("cannot list open descriptors: {e}")),
    };
    let stream = match connect(g) {
        Ok(s) => s,
        Err(e) => return fail(&e),
    };
    let opts = ui::RunOptions {
        title: format!("broker at {}", g.dirs.runtime.display()),
        exit_after_decision: args.exit_after_decision,
        allow_degraded: args.allow_degraded,
        inherited_fds: inherited.into_iter().filter(|fd: &RawFd| *fd > 2).collect(),
        #[cfg(feature = "test-hooks")]
        test: ui::probe::TestHooks {
            skip_lockdown: args.test_skip_lockdown,
            probe: args.test_probe.clone(),
        },
    };
    match ui::run(stream, opts) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(&e.to_string()),
    }
}

/// A connection on the ui socket, starting the broker if none answers.
fn connect(g: &Global) -> Result<UnixStream, String> {
    let path = g.dirs.ui_socket();
    if let Ok(s) = UnixStream::connect(&path) {
        return Ok(s);
    }
    // Starts the broker and waits until the socket answers (that probe connection is closed at
    // once; a ui connection holds nothing until it asks).
    client::Client::connect_or_start(g.data_dir.as_deref(), &g.dirs, &path, &[])
        .map_err(|e| e.to_string())?;
    UnixStream::connect(&path)
        .map_err(|e| format!("cannot reach the broker at {}: {e}", path.display()))
}

/// The most entries one tail reply carries (each is a redacted summary; this keeps a reply far
/// below the frame limit).
const TAIL_MAX: u32 = 500;
/// Text budget of one reply, so that a few very long details cannot reach the frame limit.
const TAIL_BYTES: usize = 256 * 1024;

/// Audit entries after `after`, oldest first: the newest `limit` of them (at most [`TAIL_MAX`],
/// and at most about [`TAIL_BYTES`] of text).
pub fn audit_tail(
    conn: &rusqlite::Connection,
    after: u64,
    limit: u32,
) -> rusqlite::Result<Vec<AuditEntry>> {
    let mut stmt = conn.prepare(crate::store::AUDIT_AFTER_NEWEST_FIRST)?;
    let after = i64::try_from(after).unwrap_or(i64::MAX);
    let rows = stmt.query_map(
        rusqlite::params![after, limit.min(TAIL_MAX)],
        crate::store::audit_entry,
    )?;
    let mut out = Vec::new();
    let mut bytes = 0usize;
    for row in rows {
        let e = row?;
        bytes += e.kind.len()
            + e.actor.len()
            + e.outcome.len()
            + e.detail.len()
            + e.session.as_ref().map_or(0, String::len)
            + e.tool.as_ref().map_or(0, String::len)
            + e.target.as_ref().map_or(0, String::len);
        // Newest first: like LIMIT, the budget keeps the newest entries (a tail; the seq
        // numbers show the gap, and `gatehouse audit tail` prints everything).
        out.push(e);
        if bytes > TAIL_BYTES {
            break;
        }
    }
    out.reverse();
    Ok(out)
}
