//! The gatehouse broker: supervisor, router, policy, approvals, ledger, audit. This crate holds
//! the daemon only (`gatehouse-broker`, which `gatehouse broker` execs); the command line and
//! the demo are the `gatehouse-cli` crate, the policy engine `gatehouse-policy`, the database
//! `audit-store`.

#![forbid(unsafe_code)]
// The daemon runs on Linux (its helpers started through the spawner; Landlock and seccomp on
// itself), macOS (the same Unix path with the macOS spawner and a Seatbelt profile on itself:
// compiled, never run) and Windows (the spawner on a pipe; a job and mitigations on itself).
// Elsewhere the crate is empty and gatehouse-broker refuses to start
// (ipc_schema::platform::Missing).
#![cfg(any(unix, windows))]

mod approvals;
mod audit;
mod broker;
mod doctor;
mod exec_aces;
mod exec_tier;
mod fronts;
mod gate;
mod head_key;
mod helpers;
mod launch;
mod ledger;
use proposal::provenance;
pub mod secrets_link;
mod sessions;
mod test_hooks;
mod tools;
mod ui_api;

use gatehouse_client::Dirs;
use ipc_schema::status::LockdownReport;
use ipc_schema::{ErrorCode, ErrorReply, Role};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// The arguments of `gatehouse-broker` (and of `gatehouse broker`, which passes them on).
#[derive(clap::Args, Clone, Default)]
pub struct BrokerArgs {
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
    /// Test builds only: right after the broker's own lockdown, try what it forbids and print
    /// the outcomes (`report`: opening a file outside its directories, making sockets, with the
    /// same tried before the lockdown as the positive control; `spawn`: starting a program),
    /// then exit.
    #[cfg(feature = "test-hooks")]
    #[arg(long, value_name = "report|spawn")]
    test_probe_lockdown: Option<String>,
    /// Test builds only: one more argument for the net-helper (repeat; e.g. its
    /// `--test-public-addr IP`, `--nameserver IP:PORT`, `--test-extra-root PEM`).
    #[cfg(feature = "test-hooks")]
    #[arg(long, value_name = "ARG", allow_hyphen_values = true)]
    test_net_arg: Vec<std::ffi::OsString>,
    /// Test builds only: a port the egress proxy of `gatehouse sandbox` commands allows
    /// besides 443 (a plain-text test server's).
    #[cfg(feature = "test-hooks")]
    #[arg(long, value_name = "PORT")]
    test_proxy_port: Option<u16>,
    /// Test builds only: that proxy does not require a tunnel's TLS SNI to match its CONNECT
    /// host (for plain-text test servers).
    #[cfg(feature = "test-hooks")]
    #[arg(long)]
    test_no_sni_check: bool,
    #[command(flatten)]
    gate: gate::GateArgs,
}

/// Settings the broker runs with.
pub struct BrokerOptions {
    pub allow_degraded: bool,
    pub helper_dir: PathBuf,
    /// Test builds only: the helper told to skip its lockdown.
    pub test_unlocked: Option<Role>,
    /// Test builds only: `--test-probe-lockdown`.
    pub test_probe: Option<String>,
    /// Policy, audit and ledger settings.
    pub gate: gate::GateOptions,
    /// The egress proxy of launched commands: ports besides 443 (test builds only; empty in a
    /// release build) and whether a tunnel's SNI must match its CONNECT host (always, in a
    /// release build).
    pub proxy_ports: Vec<u16>,
    pub proxy_sni_check: bool,
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
    /// What the router's own lockdown did.
    pub broker_lockdown: LockdownReport,
    /// The process that starts helpers, and what its hardening did by its own account.
    pub spawner: spawner::link::Link,
    pub spawner_lockdown: LockdownReport,
    /// Read before the lockdown (the router's filter has no uname or Landlock calls).
    pub kernel: KernelFacts,
    pub dirs: Dirs,
    /// Policy, approvals, ledger and audit.
    pub gate: gate::Gate,
    /// Third-party MCP servers: each session's connections, the pinned tools.
    pub servers: tools::servers::Servers,
    /// The human asked the broker to stop (`UiRequest::StopBroker`): the same orderly stop as
    /// SIGTERM.
    pub stop_requested: tokio::sync::Notify,
}

/// What `doctor` says of the kernel, read once at start.
pub struct KernelFacts {
    pub release: String,
    pub landlock_abi: u32,
}

impl KernelFacts {
    #[cfg(unix)]
    fn read() -> KernelFacts {
        KernelFacts {
            release: nix::sys::utsname::uname()
                .map(|u| u.release().to_string_lossy().into_owned())
                .unwrap_or_default(),
            landlock_abi: sandbox::landlock_abi(),
        }
    }

    /// Windows has no Landlock (ABI 0); the release is the OS's name only.
    #[cfg(windows)]
    fn read() -> KernelFacts {
        KernelFacts {
            release: "Windows".into(),
            landlock_abi: sandbox::landlock_abi(),
        }
    }
}

/// A helper call's failure, as a reply.
pub fn call_error_reply(e: &helpers::CallError) -> ErrorReply {
    let code = match e {
        helpers::CallError::Unavailable { .. } => ErrorCode::HelperUnavailable,
        helpers::CallError::Crashed { .. } => ErrorCode::HelperCrashed,
    };
    ErrorReply::new(code, e.to_string())
}

/// The helper binaries the broker starts, each expected beside it.
const HELPER_ROLES: [Role; 5] = Role::HELPERS;

/// Names every helper binary missing from `dir`, and how to build them.
fn missing_helpers(dir: &std::path::Path) -> Option<String> {
    let missing: Vec<&str> = HELPER_ROLES
        .iter()
        .filter(|r| helpers::not_built_here(**r).is_none())
        .map(|r| r.name())
        .chain([broker::SPAWNER_BINARY])
        .filter(|n| {
            !dir.join(format!("{n}{}", std::env::consts::EXE_SUFFIX))
                .is_file()
        })
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

/// Runs the broker for `dirs` until it is told to stop (SIGINT or SIGTERM; Ctrl-C or Ctrl-Break
/// on Windows); `Err`: why it refused or stopped.
pub fn run_broker(dirs: Dirs, args: BrokerArgs) -> Result<(), String> {
    #[cfg(feature = "test-hooks")]
    let test_unlocked = match args.test_unlocked_helper.as_deref().map(Role::from_short) {
        None => None,
        Some(Some(r)) if r.is_helper() => Some(r),
        Some(_) => return Err("--test-unlocked-helper takes fs, net, exec or secrets".into()),
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
            None => return Err("cannot find the directory of this binary".into()),
        },
    };
    // Before anything is opened or logged: a broker without its helpers refuses at once, with
    // what to do (a `cargo run --bin gatehouse-broker` builds only this binary).
    if let Some(msg) = missing_helpers(&helper_dir) {
        return Err(msg);
    }
    // A broker started from `gatehouse run` or `sandbox` inherits their blocked stop signals
    // (signal masks survive fork and exec): it must still stop on SIGTERM as `gatehouse stop`
    // asks, so the mask is cleared before any thread starts.
    #[cfg(unix)]
    unblock_stop_signals()?;
    let gate = args.gate.options(args.allow_degraded)?;
    let opts = Arc::new(BrokerOptions {
        allow_degraded: args.allow_degraded,
        helper_dir,
        test_unlocked,
        #[cfg(feature = "test-hooks")]
        test_probe: args.test_probe_lockdown.clone(),
        #[cfg(not(feature = "test-hooks"))]
        test_probe: None,
        gate,
        #[cfg(feature = "test-hooks")]
        proxy_ports: args.test_proxy_port.into_iter().collect(),
        #[cfg(not(feature = "test-hooks"))]
        proxy_ports: Vec::new(),
        #[cfg(feature = "test-hooks")]
        proxy_sni_check: !args.test_no_sni_check,
        #[cfg(not(feature = "test-hooks"))]
        proxy_sni_check: true,
        extra_helper_args: Default::default(),
        shutting_down: AtomicBool::new(false),
    });
    #[cfg(feature = "test-hooks")]
    helpers::set_extra_args(&opts, Role::Net, args.test_net_arg.clone());
    broker::run(dirs, opts)
}

#[cfg(unix)]
fn unblock_stop_signals() -> Result<(), String> {
    let mut stop = nix::sys::signal::SigSet::empty();
    for s in [
        nix::sys::signal::Signal::SIGTERM,
        nix::sys::signal::Signal::SIGINT,
        nix::sys::signal::Signal::SIGHUP,
    ] {
        stop.add(s);
    }
    stop.thread_unblock()
        .map_err(|e| format!("unblocking the stop signals: {e}"))
}

/// Whether this broker runs as root (Unix); never on Windows, which has no uid 0.
pub(crate) fn running_as_root() -> bool {
    #[cfg(unix)]
    return nix::unistd::geteuid().is_root();
    #[cfg(windows)]
    false
}
