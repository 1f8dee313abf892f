//! `gatehouse-spawner --helper-dir DIR`: started by the broker with its channel as fd 3; starts
//! the helpers the broker asks for, from DIR. Lock down, say ready, serve.
//!
//! On Windows: `gatehouse-spawner --channel-handle N --router-handle M --helper-dir DIR`, the
//! two inherited handles `sandbox::windows::start_spawner` passes (`spawner::windows`).
#![forbid(unsafe_code)]

#[cfg(any(target_os = "linux", target_os = "macos"))]
use std::path::PathBuf;
use std::process::ExitCode;

#[cfg(not(any(target_os = "linux", target_os = "macos", windows)))]
fn main() -> ExitCode {
    use ipc_schema::platform::{refuse, Missing};
    refuse("gatehouse-spawner", &[Missing::HelperProcesses])
}

#[cfg(any(target_os = "linux", target_os = "macos"))]
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
#[cfg(any(target_os = "linux", target_os = "macos"))]
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

#[cfg(any(target_os = "linux", target_os = "macos"))]
fn fail(msg: &str) -> ExitCode {
    eprintln!("gatehouse-spawner: {msg}");
    ExitCode::from(2)
}

#[cfg(windows)]
fn main() -> ExitCode {
    use sandbox::windows as w;
    let usage = "usage: gatehouse-spawner --channel-handle N --router-handle M --helper-dir DIR [--allow-degraded] (started by the gatehouse broker)";
    let args: Vec<String> = match std::env::args_os()
        .skip(1)
        .map(|a| a.into_string())
        .collect()
    {
        Ok(a) => a,
        Err(_) => return fail(usage),
    };
    let (channel, router, dir, degraded) = match args.as_slice() {
        [c, cv, r, rv, d, dv, rest @ ..]
            if c == sandbox::helper_args::CHANNEL_HANDLE
                && r == w::ROUTER_HANDLE
                && d == "--helper-dir"
                && (rest.is_empty() || rest == ["--allow-degraded"]) =>
        {
            (cv, rv, std::path::PathBuf::from(dv), !rest.is_empty())
        }
        _ => return fail(usage),
    };
    if !dir.is_absolute() {
        return fail(&format!("--helper-dir {}: not absolute", dir.display()));
    }
    // 1. Lock down (what a process that must create processes can do to itself).
    let lockdown = match w::harden_spawner(degraded) {
        Ok(r) => r,
        Err(e) => return fail(&format!("lockdown failed: {e}")),
    };
    // 2. The two handles the router passed, adopted once each.
    let chan = match w::take_inherited_handle(channel) {
        Ok(h) => std::fs::File::from(h),
        Err(e) => return fail(&format!("no router channel: {e}")),
    };
    let router = match w::take_inherited_router(router) {
        Ok(h) => h,
        Err(e) => return fail(&format!("no router handle: {e}")),
    };
    // 3. Say ready and serve.
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return fail(&format!("cannot start its runtime: {e}")),
    };
    let served = rt.block_on(async move {
        let pipe = w::async_pipe(chan)
            .map_err(|e| spawner::ServeError::Io("adopting the router's channel".into(), e))?;
        spawner::windows::serve(pipe, router, dir, degraded, lockdown).await
    });
    // Not waiting for the threads that wait on helpers: exiting closes every job handle this
    // process holds, and each job's kill-on-close ends its helper's tree.
    rt.shutdown_background();
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(&e.to_string()),
    }
}

#[cfg(windows)]
fn fail(msg: &str) -> ExitCode {
    eprintln!("gatehouse-spawner: {msg}");
    ExitCode::from(2)
}
