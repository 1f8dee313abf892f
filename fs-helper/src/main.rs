//! fs-helper: open the grants, lock down, say hello, serve.
//!
//! What it can and cannot do: docs/fs-helper.md.

#![forbid(unsafe_code)]

mod checkpoint;
mod config;
mod grant;
mod kernel;
mod ops;
mod probe;
mod protect;
mod resolve;

use ipc_schema::helper::HelperChannel;
use ipc_schema::status::Hello;
use ipc_schema::{Body, ErrorCode, ErrorReply, Role};
use sandbox::helper_args::HelperArgs;
use sandbox::Profile;
use std::process::ExitCode;

fn main() -> ExitCode {
    // 1. What the broker grants, opened before lockdown (afterwards only these roots exist).
    let args = HelperArgs::from_env_with(config::OPTIONS);
    let opened = match config::Config::from_args(&args).and_then(|c| c.open()) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("fs-helper: {e}");
            return ExitCode::from(64);
        }
    };
    let channel = match sandbox::process::take_inherited_channel() {
        Ok(c) => c,
        Err(e) => return fatal(&format!("no broker channel: {e}")),
    };

    // 2. Lock down.
    let profile = Profile::Fs(opened.profile.clone());
    let report = match sandbox::helper_args::lock_down_keeping(&args, &profile, &opened.fds()) {
        Ok(r) => r,
        Err(e) => return fatal(&format!("lockdown failed: {e}")),
    };
    let fs = ops::Fs {
        store: checkpoint::CheckpointStore::new(opened.checkpoint_fd, opened.mode),
        grants: opened.grants,
        protector: opened.protector,
        mode: opened.mode,
        mode_note: opened.mode_note,
        euid: opened.euid,
        egid: opened.egid,
    };
    fs.store.sweep();

    // 3. Hello.
    let mut chan = match HelperChannel::new(Role::Fs, channel) {
        Ok(c) => c,
        Err(e) => return fatal(&format!("broker channel: {e}")),
    };
    let hello = Hello {
        role: Role::Fs,
        pid: std::process::id(),
        lockdown: report,
    };
    if let Err(e) = chan.hello(hello) {
        return fatal(&e.to_string());
    }

    // 4. Serve.
    match chan.serve(|body| match body {
        Body::Fs(req) => Body::FsReply(fs.handle(req)),
        other => Body::Error(ErrorReply::new(
            ErrorCode::Invalid,
            format!("the fs-helper does not serve {:?}", other.kind()),
        )),
    }) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fatal(&e.to_string()),
    }
}

fn fatal(msg: &str) -> ExitCode {
    eprintln!("fs-helper: {msg}");
    ExitCode::from(70)
}
