//! `gatehouse-spawner --helper-dir DIR`: started by the broker with its channel as fd 3; starts
//! the helpers the broker asks for, from DIR. Lock down, say ready, serve.
#![forbid(unsafe_code)]

#[cfg(target_os = "linux")]
use std::path::PathBuf;
use std::process::ExitCode;

#[cfg(not(target_os = "linux"))]
fn main() -> ExitCode {
    use ipc_schema::platform::{refuse, Missing};
    refuse("gatehouse-spawner", &[Missing::HelperProcesses])
}

#[cfg(target_os = "linux")]
fn main() -> ExitCode {
    let (helper_dir, allow_degraded) = match parse_args() {
        Ok(a) => a,
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
    match spawner::serve(chan, helper_dir, allow_degraded, lockdown) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(&e.to_string()),
    }
}

/// Where the helper binaries are, and whether helpers may run degraded: both fixed for the
/// spawner's life, so the router cannot later ask for a helper with less confinement than the
/// broker was started with.
#[cfg(target_os = "linux")]
fn parse_args() -> Result<(PathBuf, bool), String> {
    let usage = "usage: gatehouse-spawner --helper-dir DIR [--allow-degraded] (started by the gatehouse broker)";
    let mut args = std::env::args_os().skip(1);
    let (Some(flag), Some(dir)) = (args.next(), args.next()) else {
        return Err(usage.into());
    };
    if flag != "--helper-dir" {
        return Err(usage.into());
    }
    let dir = PathBuf::from(dir);
    if !dir.is_absolute() {
        return Err(format!("--helper-dir {}: not absolute", dir.display()));
    }
    match (args.next(), args.next()) {
        (None, None) => Ok((dir, false)),
        (Some(a), None) if a == "--allow-degraded" => Ok((dir, true)),
        _ => Err(usage.into()),
    }
}

#[cfg(target_os = "linux")]
fn fail(msg: &str) -> ExitCode {
    eprintln!("gatehouse-spawner: {msg}");
    ExitCode::from(2)
}
