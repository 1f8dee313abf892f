//! exec-helper: lock down, say hello, serve.
//!
//! Each command runs in a sandbox of its own (`sandbox::linux::command`): new user, mount, pid,
//! network, IPC and UTS namespaces, a filesystem view of its grants, Landlock and a seccomp
//! denylist. This process only starts sandboxes (one small `clone` each), watches them, and
//! reports their output and end to the broker. See docs/exec-helper.md.

#![forbid(unsafe_code)]

mod config;
mod serve;
mod start;

use ipc_schema::status::Hello;
use ipc_schema::Role;
use sandbox::helper_args::{lock_down, HelperArgs};
use std::process::ExitCode;

fn main() -> ExitCode {
    let args = HelperArgs::from_env_with(config::OPTIONS);
    let channel = match sandbox::process::take_inherited_channel() {
        Ok(c) => c,
        Err(e) => return fatal(&format!("no broker channel: {e}")),
    };
    // Before the lockdown: becoming an unprivileged user needs the root we may still have.
    let config = match config::Config::from_args(&args) {
        Ok(c) => c,
        Err(e) => return fatal(&e),
    };
    let report = match lock_down(&args, &sandbox::Profile::Exec) {
        Ok(r) => r,
        Err(e) => return fatal(&format!("lockdown failed: {e}")),
    };
    let hello = Hello {
        role: Role::Exec,
        pid: std::process::id(),
        lockdown: report,
    };
    match serve::serve(channel, hello, config) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fatal(&e),
    }
}

fn fatal(msg: &str) -> ExitCode {
    eprintln!("exec-helper: {msg}");
    ExitCode::from(70)
}
