//! secrets-helper: open the configured store, lock down, say hello, serve.

use ipc_schema::status::{Hello, LockdownReport};
use ipc_schema::{Body, Role};
use sandbox::helper_args::HelperArgs;
use sandbox::{LockdownError, LockdownOptions, Profile};
use secrets_helper::args::{Config, OPTIONS};
use secrets_helper::serve::{serve, Channel};
use secrets_helper::service::Service;
use std::os::fd::RawFd;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args = HelperArgs::from_env_with(OPTIONS);
    let cfg = match Config::from_args(&args) {
        Ok(c) => c,
        Err(e) => return fatal(&e),
    };
    let channel = match sandbox::process::take_inherited_channel() {
        Ok(c) => c,
        Err(e) => return fatal(&format!("no broker channel: {e}")),
    };
    // Before lockdown: the Secret Service's bus socket cannot be created after it.
    let opened = secrets_helper::open::open(&cfg);
    let report = match lock_down(&args, &opened.keep_fds) {
        Ok(r) => r,
        Err(e) => return fatal(&format!("lockdown failed: {e}")),
    };
    let mut chan = Channel::new(channel);
    let hello = Hello {
        role: Role::Secrets,
        pid: std::process::id(),
        lockdown: report,
    };
    if let Err(e) = chan.send(0, Body::Hello(hello)) {
        return fatal(&e.to_string());
    }
    match serve(chan, Service::new(opened.store, cfg.namespace)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fatal(&e.to_string()),
    }
}

/// The secrets profile, keeping the store's descriptors (the session bus socket) open.
fn lock_down(args: &HelperArgs, store_fds: &[RawFd]) -> Result<LockdownReport, LockdownError> {
    if store_fds.is_empty() || args.skip_lockdown {
        return sandbox::helper_args::lock_down(args, &Profile::Secrets);
    }
    let mut keep_fds = vec![sandbox::process::CHANNEL_FD];
    keep_fds.extend_from_slice(store_fds);
    sandbox::lockdown(
        &Profile::Secrets,
        &LockdownOptions {
            allow_degraded: args.allow_degraded,
            keep_fds,
            keep_env: Vec::new(),
        },
    )
}

fn fatal(msg: &str) -> ExitCode {
    eprintln!("secrets-helper: {msg}");
    ExitCode::from(70)
}
