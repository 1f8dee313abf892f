//! `gatehouse-spawner --helper-dir DIR`: started by the broker with its channel as fd 3; starts
//! the helpers the broker asks for, from DIR. Lock down, say ready, serve.
#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let helper_dir = match parse_args() {
        Ok(d) => d,
        Err(e) => return fail(&e),
    };
    let lockdown = match sandbox::lockdown_spawner(sandbox::process::CHANNEL_FD) {
        Ok(r) => r,
        Err(e) => return fail(&format!("lockdown failed: {e}")),
    };
    let chan = match sandbox::process::take_inherited_channel() {
        Ok(c) => std::os::fd::OwnedFd::from(c),
        Err(e) => return fail(&e.to_string()),
    };
    match spawner::serve(chan, helper_dir, lockdown) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(&e.to_string()),
    }
}

/// The one argument: where the helper binaries are (fixed for the spawner's life).
fn parse_args() -> Result<PathBuf, String> {
    let mut args = std::env::args_os().skip(1);
    match (args.next(), args.next(), args.next()) {
        (Some(flag), Some(dir), None) if flag == "--helper-dir" => {
            let dir = PathBuf::from(dir);
            if !dir.is_absolute() {
                return Err(format!("--helper-dir {}: not absolute", dir.display()));
            }
            Ok(dir)
        }
        _ => Err("usage: gatehouse-spawner --helper-dir DIR (started by the gatehouse broker)".into()),
    }
}

fn fail(msg: &str) -> ExitCode {
    eprintln!("gatehouse-spawner: {msg}");
    ExitCode::from(2)
}
