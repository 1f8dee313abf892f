//! `gatehouse`: the broker and its command line.

mod client;
mod dirs;
mod doctor;
mod fronts;
mod head_key;
mod helpers;
mod store;

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
#[command(name = "gatehouse", version, about = "A privilege-separated supervisor for AI agents")]
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
}

/// Settings the broker runs with.
pub struct BrokerOptions {
    pub allow_degraded: bool,
    pub helper_dir: PathBuf,
    /// Test builds only: the helper told to skip its lockdown.
    pub test_unlocked: Option<Role>,
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
        client::Client::connect_or_start(self.data_dir.as_deref(), &self.dirs, &self.dirs.ui_socket(), &[])
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
                println!("{}", serde_json::to_string_pretty(&r).expect("serializable"));
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

fn fail(msg: &str) -> ExitCode {
    eprintln!("gatehouse: {msg}");
    ExitCode::from(EXIT_FAILURE)
}

fn stop(dirs: &Dirs) -> ExitCode {
    let Some(pid) = broker::running_broker_pid(&dirs.lock_file()) else {
        println!("no broker is running for {}", dirs.runtime.display());
        return ExitCode::SUCCESS;
    };
    if let Err(e) = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::Signal::SIGTERM) {
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
        None => match std::env::current_exe().ok().and_then(|e| e.parent().map(PathBuf::from)) {
            Some(d) => d,
            None => return fail("cannot find the directory of this binary"),
        },
    };
    let opts = Arc::new(BrokerOptions {
        allow_degraded: args.allow_degraded,
        helper_dir,
        test_unlocked,
        shutting_down: AtomicBool::new(false),
    });
    match broker::run(dirs, opts) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(&e),
    }
}

