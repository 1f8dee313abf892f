//! `gatehouse-broker`: the daemon, one per user (or per `--data-dir`). `gatehouse broker ARGS`
//! execs this binary with the same arguments; the command line, fronts and the demo start it in
//! the background when none runs.

#![forbid(unsafe_code)]

#[cfg(any(unix, windows))]
use clap::Parser;
#[cfg(any(unix, windows))]
use gatehouse_client::Dirs;
#[cfg(any(unix, windows))]
use std::path::PathBuf;
#[cfg(any(unix, windows))]
use std::process::ExitCode;

#[cfg(any(unix, windows))]
#[derive(Parser)]
#[command(
    name = "gatehouse-broker",
    version,
    about = "The gatehouse broker and its helpers, in the foreground (other commands start it when needed)",
    args_override_self = true
)]
#[cfg(any(unix, windows))]
struct Cli {
    /// A private instance: config, data and sockets all under DIR (tests, demos).
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// Accepted for `gatehouse --json broker`; the broker prints nothing to parse.
    #[arg(long, hide = true)]
    json: bool,
    #[command(flatten)]
    args: broker::BrokerArgs,
}

#[cfg(any(unix, windows))]
/// An error, on one line of stderr, made inert ([`ipc_schema::inert::escaped`]).
fn fail(msg: &str) -> ExitCode {
    eprintln!("gatehouse: {}", ipc_schema::inert::escaped(msg));
    ExitCode::from(1)
}

#[cfg(any(unix, windows))]
fn main() -> ExitCode {
    let cli = Cli::parse();
    let dirs = match cli.data_dir.as_ref().map(std::path::absolute) {
        None => match Dirs::from_env() {
            Ok(d) => d,
            Err(e) => return fail(&e),
        },
        Some(Ok(d)) => Dirs::under(&d),
        Some(Err(e)) => return fail(&format!("--data-dir: {e}")),
    };
    match broker::run_broker(dirs, cli.args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(&e),
    }
}

/// The broker starts and confines its helpers with Linux, macOS and Windows mechanisms; this
/// build has no counterpart for them, so it refuses rather than run unconfined.
#[cfg(not(any(unix, windows)))]
fn main() -> std::process::ExitCode {
    use ipc_schema::platform::{refuse, Missing};
    refuse(
        "gatehouse-broker",
        &[
            Missing::HelperProcesses,
            Missing::CommandSandbox,
            Missing::KernelKeyring,
        ],
    )
}
