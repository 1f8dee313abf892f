//! fs-helper: open the grants, lock down, say hello, serve.
//!
//! What it can and cannot do: docs/fs-helper.md.

#![forbid(unsafe_code)]

#[cfg(unix)]
mod checkpoint;
#[cfg(unix)]
mod config;
#[cfg(unix)]
mod grant;
#[cfg(unix)]
mod kernel;
#[cfg(unix)]
mod ops;
#[cfg(unix)]
mod probe;
#[cfg(unix)]
mod protect;
#[cfg(unix)]
mod resolve;

#[cfg(unix)]
use ipc_schema::helper::{fatal, Answer, HelperChannel, Request};
#[cfg(unix)]
use ipc_schema::route::BROKER_TO_FS;
#[cfg(unix)]
use ipc_schema::{Body, Role};
#[cfg(unix)]
use sandbox::helper_args::HelperArgs;
#[cfg(unix)]
use sandbox::Profile;
#[cfg(unix)]
use std::process::ExitCode;

#[cfg(unix)]
fn main() -> ExitCode {
    // 1. What the broker grants, opened before lockdown (afterwards only these roots exist).
    let args = HelperArgs::from_env_with(config::OPTIONS);
    let (fs, profile) = match config::Config::from_args(&args).and_then(|c| c.open()) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("fs-helper: {e}");
            return ExitCode::from(64);
        }
    };
    let channel = sandbox::helper_args::take_channel(&args)
        .unwrap_or_else(|e| fatal(Role::Fs, format!("no broker channel: {e}")));

    // 2. Lock down (keeping the roots and the checkpoint dir open).
    let report = sandbox::helper_args::lock_down_keeping(&args, &Profile::Fs(profile), &fs.fds())
        .unwrap_or_else(|e| fatal(Role::Fs, format!("lockdown failed: {e}")));
    fs.store.sweep();

    // 3. Hello.
    let chan = HelperChannel::hello(Role::Fs, channel, report);

    // 4. Serve what the broker may ask (ipc_schema::route::BROKER_TO_FS).
    chan.serve(&BROKER_TO_FS, |req: Request| match req.body {
        Body::Fs(r) => Answer::reply(Body::FsReply(fs.handle(r))),
        _ => req.unserved(Role::Fs),
    });
    ExitCode::SUCCESS
}

/// On Windows: the helper of `fs-helper-windows` (handles, one component per open).
#[cfg(windows)]
fn main() -> std::process::ExitCode {
    fs_helper_windows::main()
}

/// Every path is resolved beneath its grant root with openat2 or a walk of one open per
/// component (Unix), or of handles (Windows): on those only.
#[cfg(not(any(unix, windows)))]
fn main() -> std::process::ExitCode {
    use ipc_schema::platform::{refuse, Missing};
    refuse(
        "fs-helper",
        &[Missing::HelperProcesses, Missing::BeneathResolution],
    )
}
