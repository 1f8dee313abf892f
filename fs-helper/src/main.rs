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

use ipc_schema::helper::{fatal, Answer, HelperChannel, Request};
use ipc_schema::route::BROKER_TO_FS;
use ipc_schema::{Body, Role};
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
    let channel = sandbox::process::take_inherited_channel()
        .unwrap_or_else(|e| fatal(Role::Fs, format!("no broker channel: {e}")));

    // 2. Lock down.
    let profile = Profile::Fs(opened.profile.clone());
    let report = sandbox::helper_args::lock_down_keeping(&args, &profile, &opened.fds())
        .unwrap_or_else(|e| fatal(Role::Fs, format!("lockdown failed: {e}")));
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
    let chan = HelperChannel::hello(Role::Fs, channel, report);

    // 4. Serve what the broker may ask (ipc_schema::route::BROKER_TO_FS).
    chan.serve(&BROKER_TO_FS, |req: Request| match req.body {
        Body::Fs(r) => Answer::reply(Body::FsReply(fs.handle(r))),
        _ => req.unserved(Role::Fs),
    });
    ExitCode::SUCCESS
}
