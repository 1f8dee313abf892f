//! `gatehouse`: the command line. The daemon is `gatehouse-broker` and the MCP front
//! `gatehouse-mcp`, separate binaries beside this one: `gatehouse broker` and `gatehouse mcp`
//! exec them with the arguments they were given (same pid), and the commands that need a broker
//! start `gatehouse-broker` in the background.

#![forbid(unsafe_code)]

#[cfg(any(unix, windows))]
mod cmd_approve;
#[cfg(any(unix, windows))]
mod cmd_audit;
#[cfg(any(unix, windows))]
mod cmd_demo;
#[cfg(any(unix, windows))]
mod cmd_export;
#[cfg(any(unix, windows))]
mod cmd_fetch;
#[cfg(any(unix, windows))]
mod cmd_mcp_server;
#[cfg(any(unix, windows))]
mod cmd_policy;
#[cfg(any(unix, windows))]
mod cmd_policy_replay;
#[cfg(any(unix, windows))]
mod cmd_run;
#[cfg(any(unix, windows))]
mod cmd_sandbox;
#[cfg(any(unix, windows))]
mod cmd_secret;
#[cfg(any(unix, windows))]
mod cmd_session;
#[cfg(target_os = "linux")]
mod cmd_setup;
#[cfg(windows)]
#[path = "cmd_setup_windows.rs"]
mod cmd_setup;
#[cfg(any(unix, windows))]
mod cmd_ui;
#[cfg(any(unix, windows))]
mod cmd_up;
#[cfg(any(unix, windows))]
mod doctor;
#[cfg(any(unix, windows))]
mod private_helper;

#[cfg(any(unix, windows))]
use clap::{Parser, Subcommand};
#[cfg(any(unix, windows))]
use gatehouse_client::Dirs;
#[cfg(any(unix, windows))]
use ipc_schema::{Body, Role};
#[cfg(any(unix, windows))]
use std::ffi::OsString;
#[cfg(any(unix, windows))]
use std::path::PathBuf;
#[cfg(any(unix, windows))]
use std::process::ExitCode;
#[cfg(any(unix, windows))]
use std::time::{Duration, Instant};

#[cfg(any(unix, windows))]
#[derive(Parser)]
#[command(
    name = "gatehouse",
    version,
    about = "A privilege-separated supervisor for AI agents"
)]
#[cfg(any(unix, windows))]
struct Cli {
    /// A private instance: config, data and sockets all under DIR (tests, demos).
    #[arg(long, global = true, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// Machine-readable output.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    cmd: Cmd,
}

#[cfg(any(unix, windows))]
#[derive(Subcommand)]
enum Cmd {
    /// Run the broker and its helpers in the foreground (other commands start it when needed):
    /// execs `gatehouse-broker` with these arguments (`gatehouse broker --help` lists them).
    #[command(disable_help_flag = true)]
    Broker(PassOn),
    /// Show what each process really enforces on this kernel; exit 1 if anything is missing.
    Doctor,
    /// Round trips to the broker or, with --helper, through it to a helper.
    Ping {
        /// fs, net, exec or secrets.
        #[arg(long)]
        helper: Option<String>,
        #[arg(long, default_value_t = 1)]
        count: u32,
    },
    /// Stop the running broker and its helpers.
    Stop,
    /// The policy's third-party MCP servers: list, add, remove, and their tools (approve).
    McpServer {
        #[command(subcommand)]
        cmd: cmd_mcp_server::McpServerCmd,
    },
    /// Show the policy in force, or apply a new revision of it.
    Policy {
        #[command(subcommand)]
        cmd: cmd_policy::PolicyCmd,
    },
    /// Check the audit log's chain and seal, reading the database directly (no broker needed).
    VerifyAudit(cmd_audit::VerifyArgs),
    /// Read the audit log.
    Audit {
        #[command(subcommand)]
        cmd: cmd_audit::AuditCmd,
    },
    /// List proposals waiting for a decision, and decide them (a console without the console).
    Approve(cmd_approve::ApproveArgs),
    #[cfg(any(unix, windows))]
    /// Run one command in the exec sandbox, through the broker's exec-helper (started when none runs), every record in its audit log: `gatehouse sandbox [--allow-write P]... [--allow-read P]... [--allow-domain D]... [--timeout S] -- CMD ARGS`.
    Sandbox(cmd_sandbox::SandboxArgs),
    #[cfg(any(unix, windows))]
    /// An agent CLI inside the exec sandbox, with gatehouse as its only MCP server and the egress proxy as its only way out: `gatehouse run [--profile NAME] [--mode ask|full-access|unattended] [--allow-domain D]... [--allow-read P]... -- AGENT ARGS`.
    Run(cmd_run::RunArgs),
    /// The MCP server for one agent session, over stdio (what an agent's MCP config launches):
    /// execs `gatehouse-mcp` with these arguments (`gatehouse mcp --help` lists them).
    #[command(disable_help_flag = true)]
    Mcp(PassOn),
    /// One safe fetch through the broker (policy applies): prints the wrapped text; a refusal exits 3, a network failure 4.
    Fetch(cmd_fetch::FetchArgs),
    /// The console in this terminal, attached to the running broker (started if none runs).
    Ui(cmd_ui::UiArgs),
    /// The broker and its helpers, and the console in this terminal.
    Up(cmd_up::UpArgs),
    /// Desktop notifications (and a `[notify] command` hook) for cards that wait while no
    /// console is attached; it can watch, never decide: execs `gatehouse-notify` with these
    /// arguments (`gatehouse notify --help` lists them). Run it in your desktop session.
    #[command(disable_help_flag = true)]
    Notify(PassOn),
    /// A scripted agent session on a scratch project that shows every outcome: allowed, asked,
    /// refused, run in the sandbox, carried out once, and the audit log checked.
    Demo(cmd_demo::DemoArgs),
    /// The broker's sessions and their modes: list, and `mode ID ask|full-access|unattended`.
    Session {
        #[command(subcommand)]
        cmd: cmd_session::SessionCmd,
    },
    /// Write-only credentials for the agent's http_request tool: set, delete, list, status.
    Secret {
        #[command(subcommand)]
        cmd: cmd_secret::SecretCmd,
    },
    /// Machine setup gatehouse needs on some systems: `setup apparmor` (Ubuntu's user
    /// namespace restriction), `setup network-filters` (Windows). Prints what it would do
    /// unless given --yes.
    #[cfg(not(target_os = "macos"))]
    Setup {
        #[command(subcommand)]
        cmd: cmd_setup::SetupCmd,
    },
}

#[cfg(any(unix, windows))]
/// The arguments of a command another binary carries out, passed on unchanged.
#[derive(clap::Args)]
struct PassOn {
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "ARGS"
    )]
    args: Vec<OsString>,
}

#[cfg(any(unix, windows))]
const EXIT_FAILURE: u8 = 1;
#[cfg(any(unix, windows))]
const EXIT_USAGE: u8 = 2;

#[cfg(any(unix, windows))]
/// What every subcommand gets from the global options.
pub struct Global {
    pub dirs: Dirs,
    /// `--data-dir`, absolute, to pass on to a broker started in the background.
    pub data_dir: Option<PathBuf>,
    pub json: bool,
}

#[cfg(any(unix, windows))]
impl Global {
    /// A connection on the console's socket, starting the broker if none runs.
    pub fn ui_client(&self) -> Result<gatehouse_client::Client, gatehouse_client::ClientError> {
        gatehouse_client::Client::connect_or_start(
            self.data_dir.as_deref(),
            &self.dirs,
            &self.dirs.ui_socket(),
            &[],
        )
    }
}

#[cfg(any(unix, windows))]
fn main() -> ExitCode {
    let cli = Cli::parse();
    let (data_dir, dirs) = match Dirs::for_data_dir(cli.data_dir.as_deref()) {
        Ok(d) => d,
        Err(e) => return fail(&e),
    };
    let g = Global {
        dirs,
        data_dir,
        json: cli.json,
    };
    match cli.cmd {
        Cmd::Broker(p) => exec_sibling(&g, gatehouse_client::BROKER_BIN, p.args),
        Cmd::Doctor => doctor_cmd(&g),
        Cmd::Ping { helper, count } => ping_cmd(&g, helper, count),
        Cmd::Stop => stop(&g),
        Cmd::Policy { cmd } => cmd_policy::run(&g, cmd),
        Cmd::McpServer { cmd } => cmd_mcp_server::run(&g, cmd),
        Cmd::VerifyAudit(a) => cmd_audit::verify(&g, a),
        Cmd::Audit { cmd } => cmd_audit::run(&g, cmd),
        Cmd::Approve(args) => cmd_approve::run(&g, args),
        #[cfg(any(unix, windows))]
        Cmd::Sandbox(args) => cmd_sandbox::run(&g, args),
        #[cfg(any(unix, windows))]
        Cmd::Run(args) => cmd_run::run(&g, args),
        Cmd::Mcp(p) => exec_sibling(&g, gatehouse_client::MCP_BIN, p.args),
        Cmd::Fetch(args) => cmd_fetch::run(&g, args),
        Cmd::Ui(args) => cmd_ui::run(&g, args),
        Cmd::Up(args) => cmd_up::run(&g, args),
        Cmd::Notify(p) => exec_sibling(&g, gatehouse_client::NOTIFY_BIN, p.args),
        Cmd::Demo(args) => cmd_demo::run(&g, args),
        Cmd::Secret { cmd } => cmd_secret::run(&g, cmd),
        Cmd::Session { cmd } => cmd_session::run(&g, cmd),
        #[cfg(not(target_os = "macos"))]
        Cmd::Setup { cmd } => cmd_setup::run(&g, cmd),
    }
}

#[cfg(any(unix, windows))]
fn doctor_cmd(g: &Global) -> ExitCode {
    let mut c = match g.ui_client() {
        Ok(c) => c,
        Err(e) => return fail(&e.to_string()),
    };
    match c.request(Body::Doctor) {
        Ok(Body::DoctorReport(mut r)) => {
            doctor::add_namespaces(&mut r);
            if g.json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&r).expect("serializable")
                );
            } else {
                print!("{}", doctor::render(&r));
            }
            if r.problems.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(EXIT_FAILURE)
            }
        }
        Ok(other) => fail(&format!("unexpected reply {:?}", other.kind())),
        Err(e) => fail(&e.to_string()),
    }
}

#[cfg(any(unix, windows))]
fn ping_cmd(g: &Global, helper: Option<String>, count: u32) -> ExitCode {
    let target = match helper.as_deref().map(Role::from_short) {
        None => None,
        Some(Some(r)) if r.is_helper() => Some(r),
        Some(_) => {
            eprintln!("gatehouse: --helper takes fs, net, exec or secrets");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let mut c = match g.ui_client() {
        Ok(c) => c,
        Err(e) => return fail(&e.to_string()),
    };
    let start = Instant::now();
    for _ in 0..count {
        match c.request(Body::Ping { target }) {
            Ok(Body::Pong) => {}
            Ok(Body::Error(e)) => return fail(&format!("{:?}: {}", e.code, e.message)),
            Ok(other) => return fail(&format!("unexpected reply {:?}", other.kind())),
            Err(e) => return fail(&e.to_string()),
        }
    }
    let per = start.elapsed() / count.max(1);
    if g.json {
        println!(
            "{}",
            serde_json::json!({"count": count, "mean_us": per.as_secs_f64() * 1e6})
        );
    } else {
        println!("{count} pongs, {per:?} per round trip");
    }
    ExitCode::SUCCESS
}

#[cfg(any(unix, windows))]
/// An error, on one line of stderr. Messages carry paths, arguments and replies that agents,
/// tools and servers chose, so they are made inert ([`ipc_schema::inert::escaped`]): no line
/// break, no terminal escape, no bidi override reaches the terminal.
fn fail(msg: &str) -> ExitCode {
    eprintln!("gatehouse: {}", ipc_schema::inert::escaped(msg));
    ExitCode::from(EXIT_FAILURE)
}

#[cfg(any(unix, windows))]
fn stop(g: &Global) -> ExitCode {
    let dirs = &g.dirs;
    let Some(pid) = gatehouse_client::running_broker_pid(&dirs.lock_file()) else {
        println!("no broker is running for {}", dirs.runtime.display());
        return ExitCode::SUCCESS;
    };
    if let Err(e) = ask_to_stop(g, pid) {
        return fail(&e);
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if gatehouse_client::running_broker_pid(&dirs.lock_file()).is_none() {
            println!("broker {pid} stopped");
            return ExitCode::SUCCESS;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    fail(&format!("broker {pid} did not stop within 10 s"))
}

/// SIGTERM: the broker's orderly stop.
#[cfg(unix)]
fn ask_to_stop(_g: &Global, pid: u32) -> Result<(), String> {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .map_err(|e| format!("cannot signal broker pid {pid}: {e}"))
}

/// Windows has no SIGTERM: the same orderly stop is asked on the console's pipe
/// (`UiRequest::StopBroker`).
#[cfg(windows)]
fn ask_to_stop(g: &Global, pid: u32) -> Result<(), String> {
    use ipc_schema::ui::{UiReply, UiRequest};
    let mut c = gatehouse_client::Client::connect(&g.dirs.ui_socket())
        .map_err(|e| format!("broker pid {pid}: {e}"))?;
    match c.request(Body::Ui(UiRequest::StopBroker)) {
        Ok(Body::UiReply(UiReply::Stopping { .. })) => Ok(()),
        Ok(other) => Err(format!("unexpected reply {:?}", other.kind())),
        Err(e) => Err(format!("broker pid {pid}: {e}")),
    }
}

#[cfg(any(unix, windows))]
/// Replaces this process with `name` from beside this binary, given `--data-dir` (if any) and
/// `args`: the pid stays the same, which the lock file and whoever started us rely on. Returns
/// only if the exec failed. (On Windows, which has no exec, runs it and waits.)
fn exec_sibling(g: &Global, name: &str, args: Vec<OsString>) -> ExitCode {
    #[cfg(unix)]
    use std::os::unix::process::CommandExt;
    let exe = match gatehouse_client::sibling(name) {
        Ok(e) => e,
        Err(e) => return fail(&e),
    };
    if !exe.is_file() {
        return fail(&format!(
            "cannot start: {name} not found in {} (gatehouse's binaries run side by side). Build them all with `cargo build --release --workspace`, or run `./scripts/demo.sh`, which does",
            exe.parent().map(|d| d.display().to_string()).unwrap_or_default()
        ));
    }
    let mut cmd = std::process::Command::new(&exe);
    if let Some(d) = &g.data_dir {
        cmd.arg("--data-dir").arg(d);
    }
    if g.json {
        cmd.arg("--json");
    }
    #[cfg(unix)]
    let e = cmd.args(args).exec();
    // Windows has no exec: the sibling runs as a child with this console and stdio, and its
    // exit code is this process's.
    #[cfg(windows)]
    let e = match cmd.args(args).status() {
        Ok(status) => {
            return ExitCode::from(u8::try_from(status.code().unwrap_or(1)).unwrap_or(1));
        }
        Err(e) => e,
    };
    fail(&format!("cannot run {}: {e}", exe.display()))
}

/// The broker starts and confines its helpers with Linux, macOS and Windows mechanisms; this
/// build has no counterpart for them, so it refuses rather than run unconfined.
#[cfg(not(any(unix, windows)))]
fn main() -> std::process::ExitCode {
    use ipc_schema::platform::{refuse, Missing};
    refuse(
        "gatehouse",
        &[
            Missing::HelperProcesses,
            Missing::CommandSandbox,
            Missing::KernelKeyring,
        ],
    )
}
