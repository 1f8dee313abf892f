//! `gatehouse`: the broker and its command line.

mod approvals;
mod audit;
mod client;
mod cmd_approve;
mod cmd_audit;
mod cmd_demo;
mod cmd_fetch;
mod cmd_mcp;
mod cmd_policy;
mod cmd_run;
mod cmd_sandbox;
mod cmd_secret;
mod cmd_ui;
mod cmd_up;
mod dirs;
mod doctor;
mod framed;
mod fronts;
mod gate;
mod head_key;
mod helpers;
mod ledger;
mod policy;
mod provenance;
mod sessions;
mod store;
mod test_hooks;
mod tools;
mod ui_api;

use clap::{Parser, Subcommand};
use dirs::Dirs;
use ipc_schema::status::LockdownReport;
use ipc_schema::{Body, ErrorCode, ErrorReply, Role};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Parser)]
#[command(
    name = "gatehouse",
    version,
    about = "A privilege-separated supervisor for AI agents"
)]
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

#[derive(Subcommand)]
enum Cmd {
    /// Run the broker and its helpers in the foreground (other commands start it when needed).
    Broker(BrokerArgs),
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
    /// Show the policy in force, or apply a new revision of it.
    Policy {
        #[command(subcommand)]
        cmd: cmd_policy::PolicyCmd,
    },
    /// Check the audit log's chain and seal, reading the database directly (no broker needed).
    VerifyAudit,
    /// Read the audit log.
    Audit {
        #[command(subcommand)]
        cmd: cmd_audit::AuditCmd,
    },
    /// List proposals waiting for a decision, and decide them (a console without the console).
    Approve(cmd_approve::ApproveArgs),
    /// Run one command in the exec sandbox, standalone (no broker): `gatehouse sandbox [--allow-write P]... [--allow-read P]... [--allow-domain D]... [--timeout S] -- CMD ARGS`.
    Sandbox(cmd_sandbox::SandboxArgs),
    /// An agent CLI inside the exec sandbox, with gatehouse as its only MCP server and the egress proxy as its only way out: `gatehouse run [--profile NAME] [--allow-domain D]... [--allow-read P]... -- AGENT ARGS`.
    Run(cmd_run::RunArgs),
    /// Internal to a root `gatehouse run`: connects to the gateway socket on request.
    #[command(hide = true)]
    RunConnector,
    /// The MCP server for one agent session, over stdio (what an agent's MCP config launches).
    Mcp(cmd_mcp::McpArgs),
    /// One safe fetch through the broker (policy applies): prints the wrapped text; a refusal exits 3, a network failure 4.
    Fetch(cmd_fetch::FetchArgs),
    /// The console in this terminal, attached to the running broker (started if none runs).
    Ui(cmd_ui::UiArgs),
    /// The broker and its helpers, and the console in this terminal.
    Up(cmd_up::UpArgs),
    /// A scripted agent session on a scratch project that shows every outcome: allowed, asked,
    /// refused, run in the sandbox, carried out once, and the audit log checked.
    Demo(cmd_demo::DemoArgs),
    /// Write-only credentials for the agent's http_request tool: set, delete, list, status.
    Secret {
        #[command(subcommand)]
        cmd: cmd_secret::SecretCmd,
    },
}

#[derive(clap::Args, Clone, Default)]
struct BrokerArgs {
    /// Run helpers with less than their profile needs when the kernel lacks a mechanism; every
    /// such gap is shown by `doctor`.
    #[arg(long)]
    allow_degraded: bool,
    /// Where the helper binaries are (default: beside this binary).
    #[arg(long, hide = true)]
    helper_dir: Option<PathBuf>,
    /// Test builds only: start this helper without its lockdown, to prove the broker refuses it.
    #[cfg(feature = "test-hooks")]
    #[arg(long, value_name = "HELPER")]
    test_unlocked_helper: Option<String>,
    /// Test builds only: one more argument for the net-helper (repeat; e.g. its
    /// `--test-public-addr IP`, `--nameserver IP:PORT`, `--test-extra-root PEM`).
    #[cfg(feature = "test-hooks")]
    #[arg(long, value_name = "ARG", allow_hyphen_values = true)]
    test_net_arg: Vec<std::ffi::OsString>,
    #[command(flatten)]
    gate: gate::GateArgs,
}

/// Settings the broker runs with.
pub struct BrokerOptions {
    pub allow_degraded: bool,
    pub helper_dir: PathBuf,
    /// Test builds only: the helper told to skip its lockdown.
    pub test_unlocked: Option<Role>,
    /// Policy, audit and ledger settings.
    pub gate: gate::GateOptions,
    /// Arguments the broker core adds for a helper (the fs-helper's grants).
    pub extra_helper_args:
        std::sync::Mutex<std::collections::HashMap<Role, Vec<std::ffi::OsString>>>,
    shutting_down: AtomicBool,
}

impl BrokerOptions {
    pub fn shutting_down(&self) -> bool {
        self.shutting_down.load(Ordering::SeqCst)
    }
}

/// What every task of the broker shares.
pub struct Ctx {
    pub opts: Arc<BrokerOptions>,
    pub helpers: Arc<helpers::Helpers>,
    pub broker_lockdown: LockdownReport,
    pub dirs: Dirs,
    /// Policy, approvals, ledger and audit.
    pub gate: gate::Gate,
}

/// A helper call's failure, as a reply.
pub fn call_error_reply(e: &helpers::CallError) -> ErrorReply {
    let code = match e {
        helpers::CallError::Unavailable { .. } => ErrorCode::HelperUnavailable,
        helpers::CallError::Crashed { .. } => ErrorCode::HelperCrashed,
    };
    ErrorReply::new(code, e.to_string())
}

const EXIT_FAILURE: u8 = 1;
const EXIT_USAGE: u8 = 2;

/// What every subcommand gets from the global options.
pub struct Global {
    pub dirs: Dirs,
    /// `--data-dir`, absolute, to pass on to a broker started in the background.
    pub data_dir: Option<PathBuf>,
    pub json: bool,
}

impl Global {
    /// A connection on the console's socket, starting the broker if none runs.
    pub fn ui_client(&self) -> Result<client::Client, client::ClientError> {
        client::Client::connect_or_start(
            self.data_dir.as_deref(),
            &self.dirs,
            &self.dirs.ui_socket(),
            &[],
        )
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let data_dir = match cli.data_dir.as_ref().map(std::path::absolute) {
        None => None,
        Some(Ok(d)) => Some(d),
        Some(Err(e)) => return fail(&format!("--data-dir: {e}")),
    };
    let dirs = match &data_dir {
        Some(d) => Dirs::under(d),
        None => match Dirs::from_env() {
            Ok(d) => d,
            Err(e) => return fail(&e),
        },
    };
    let g = Global {
        dirs,
        data_dir,
        json: cli.json,
    };
    match cli.cmd {
        Cmd::Broker(args) => run_broker(g.dirs, args),
        Cmd::Doctor => doctor_cmd(&g),
        Cmd::Ping { helper, count } => ping_cmd(&g, helper, count),
        Cmd::Stop => stop(&g.dirs),
        Cmd::Policy { cmd } => cmd_policy::run(&g, cmd),
        Cmd::VerifyAudit => cmd_audit::verify(&g),
        Cmd::Audit { cmd } => cmd_audit::run(&g, cmd),
        Cmd::Approve(args) => cmd_approve::run(&g, args),
        Cmd::Sandbox(args) => cmd_sandbox::run(&g, args),
        Cmd::Run(args) => cmd_run::run(&g, args),
        Cmd::RunConnector => cmd_run::connector(&g),
        Cmd::Mcp(args) => cmd_mcp::run(&g, args),
        Cmd::Fetch(args) => cmd_fetch::run(&g, args),
        Cmd::Ui(args) => cmd_ui::run(&g, args),
        Cmd::Up(args) => cmd_up::run(&g, args),
        Cmd::Demo(args) => cmd_demo::run(&g, args),
        Cmd::Secret { cmd } => cmd_secret::run(&g, cmd),
    }
}

fn doctor_cmd(g: &Global) -> ExitCode {
    let mut c = match g.ui_client() {
        Ok(c) => c,
        Err(e) => return fail(&e.to_string()),
    };
    match c.request(Body::Doctor) {
        Ok(Body::DoctorReport(r)) => {
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

/// An error, on one line of stderr. Messages carry paths, arguments and replies that agents,
/// tools and servers chose, so they are made inert ([`ipc_schema::inert::escaped`]): no line
/// break, no terminal escape, no bidi override reaches the terminal.
fn fail(msg: &str) -> ExitCode {
    eprintln!("gatehouse: {}", ipc_schema::inert::escaped(msg));
    ExitCode::from(EXIT_FAILURE)
}

fn stop(dirs: &Dirs) -> ExitCode {
    let Some(pid) = broker::running_broker_pid(&dirs.lock_file()) else {
        println!("no broker is running for {}", dirs.runtime.display());
        return ExitCode::SUCCESS;
    };
    if let Err(e) = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGTERM,
    ) {
        return fail(&format!("cannot signal broker pid {pid}: {e}"));
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if broker::running_broker_pid(&dirs.lock_file()).is_none() {
            println!("broker {pid} stopped");
            return ExitCode::SUCCESS;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    fail(&format!("broker {pid} did not stop within 10 s"))
}

mod broker;

/// The helper binaries the broker starts, each expected beside it.
const HELPER_ROLES: [Role; 4] = [Role::Fs, Role::Net, Role::Exec, Role::Secrets];

/// Names every helper binary missing from `dir`, and how to build them.
fn missing_helpers(dir: &std::path::Path) -> Option<String> {
    let missing: Vec<&str> = HELPER_ROLES
        .iter()
        .map(|r| r.name())
        .filter(|n| !dir.join(n).is_file())
        .collect();
    if missing.is_empty() {
        return None;
    }
    Some(format!(
        "cannot start: {} not found in {} (the broker starts each helper from the directory of its own binary). Build them all with `cargo build --release --workspace`, or run `./scripts/demo.sh`, which does",
        missing.join(", "),
        dir.display()
    ))
}

fn run_broker(dirs: Dirs, args: BrokerArgs) -> ExitCode {
    #[cfg(feature = "test-hooks")]
    let test_unlocked = match args.test_unlocked_helper.as_deref().map(Role::from_short) {
        None => None,
        Some(Some(r)) if r.is_helper() => Some(r),
        Some(_) => return fail("--test-unlocked-helper takes fs, net, exec or secrets"),
    };
    #[cfg(not(feature = "test-hooks"))]
    let test_unlocked = None;
    let helper_dir = match args.helper_dir.clone() {
        Some(d) => d,
        None => match std::env::current_exe()
            .ok()
            .and_then(|e| e.parent().map(PathBuf::from))
        {
            Some(d) => d,
            None => return fail("cannot find the directory of this binary"),
        },
    };
    // Before anything is opened or logged: a broker without its helpers refuses at once, with
    // what to do (a `cargo run --bin gatehouse` builds only this binary).
    if let Some(msg) = missing_helpers(&helper_dir) {
        return fail(&msg);
    }
    // A broker started from `gatehouse run` or `sandbox` inherits their blocked stop signals
    // (signal masks survive fork and exec): it must still stop on SIGTERM as `gatehouse stop`
    // asks, so the mask is cleared before any thread starts.
    let mut stop = nix::sys::signal::SigSet::empty();
    for s in [
        nix::sys::signal::Signal::SIGTERM,
        nix::sys::signal::Signal::SIGINT,
        nix::sys::signal::Signal::SIGHUP,
    ] {
        stop.add(s);
    }
    if let Err(e) = stop.thread_unblock() {
        return fail(&format!("unblocking the stop signals: {e}"));
    }
    let gate = match args.gate.options(args.allow_degraded) {
        Ok(g) => g,
        Err(e) => return fail(&e),
    };
    let opts = Arc::new(BrokerOptions {
        allow_degraded: args.allow_degraded,
        helper_dir,
        test_unlocked,
        gate,
        extra_helper_args: Default::default(),
        shutting_down: AtomicBool::new(false),
    });
    #[cfg(feature = "test-hooks")]
    helpers::set_extra_args(&opts, Role::Net, args.test_net_arg.clone());
    match broker::run(dirs, opts) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(&e),
    }
}
