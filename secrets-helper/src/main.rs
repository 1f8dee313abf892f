//! secrets-helper: open the configured store, lock down, say hello, serve.
//!
//! On macOS and Windows the stores are built and lockdown goes through the sandbox crate's
//! API for that OS, but the helper cannot serve yet: handing it the broker channel
//! (`sandbox::process`) exists on Linux only. There it locks down, then refuses to go on.

#![forbid(unsafe_code)]

use ipc_schema::status::LockdownReport;
use sandbox::{LockdownError, Profile};
use secrets_helper::args::{Config, HelperArgs, OPTIONS};
use std::process::ExitCode;

fn main() -> ExitCode {
    let args = HelperArgs::from_env_with(OPTIONS);
    let cfg = match Config::from_args(&args) {
        Ok(c) => c,
        Err(e) => return fatal(&e),
    };
    run(&args, cfg)
}

#[cfg(target_os = "linux")]
fn run(args: &HelperArgs, cfg: Config) -> ExitCode {
    use ipc_schema::status::Hello;
    use ipc_schema::{Body, Role};
    use secrets_helper::serve::{serve, Channel};
    use secrets_helper::service::Service;

    let channel = match sandbox::process::take_inherited_channel() {
        Ok(c) => c,
        Err(e) => return fatal(&format!("no broker channel: {e}")),
    };
    // Before lockdown: the Secret Service's bus socket cannot be created after it.
    let opened = secrets_helper::open::open(&cfg);
    let report = match lock_down(args, cfg.store, &opened.keep_fds) {
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

/// The secrets profile of the configured store (only the kernel keyring backend may make
/// keyring calls), keeping the store's descriptors (the session bus socket) open.
#[cfg(target_os = "linux")]
fn lock_down(
    args: &HelperArgs,
    store: ipc_schema::secrets::StoreKind,
    store_fds: &[i32],
) -> Result<LockdownReport, LockdownError> {
    sandbox::helper_args::lock_down_keeping(args, &Profile::Secrets(store), store_fds)
}

#[cfg(not(target_os = "linux"))]
fn run(args: &HelperArgs, cfg: Config) -> ExitCode {
    // Opened before lockdown, as on Linux (these stores touch nothing until a request).
    let _opened = secrets_helper::open::open(&cfg);
    if let Err(e) = lock_down(args, cfg.store) {
        return fatal(&format!("lockdown failed: {e}"));
    }
    fatal(&format!(
        "cannot serve on {}: the broker channel is handed over by sandbox::process, which exists on Linux only so far",
        std::env::consts::OS
    ))
}

/// The secrets profile through the sandbox crate: Seatbelt on macOS; on Windows, where
/// lockdown is not implemented and always refuses, only `--allow-degraded` runs without it,
/// and the report says so (DESIGN.md rule 8).
#[cfg(not(target_os = "linux"))]
fn lock_down(
    args: &HelperArgs,
    store: ipc_schema::secrets::StoreKind,
) -> Result<LockdownReport, LockdownError> {
    degrade_unsupported(
        sandbox::helper_args::lock_down(args, &Profile::Secrets(store)),
        args.allow_degraded,
    )
}

/// An OS without lockdown for this profile: refused, unless `allow_degraded`, when the
/// process runs unconfined and every field of the report says so.
#[cfg_attr(target_os = "linux", allow(dead_code))]
fn degrade_unsupported(
    result: Result<LockdownReport, LockdownError>,
    allow_degraded: bool,
) -> Result<LockdownReport, LockdownError> {
    match result {
        Err(e @ LockdownError::Unsupported(profile)) if allow_degraded => Ok(LockdownReport {
            profile: profile.to_string(),
            stray_fds_closed: false,
            env_cleared: false,
            core_dumps_off: false,
            dumpable_off: false,
            no_new_privs: false,
            capabilities_dropped: false,
            landlock_abi: 0,
            landlock_min_abi: 0,
            landlock: ipc_schema::status::LandlockStatus::NotEnforced,
            seccomp_filter: false,
            seccomp_allowed_syscalls: 0,
            namespaces: Vec::new(),
            degraded: vec![format!(
                "no OS lockdown at all ({e}); running only because of --allow-degraded"
            )],
        }),
        other => other,
    }
}

fn fatal(msg: &str) -> ExitCode {
    eprintln!("secrets-helper: {msg}");
    ExitCode::from(70)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_os_without_lockdown_is_refused_unless_degraded_is_allowed() {
        let refused = degrade_unsupported(Err(LockdownError::Unsupported("secrets")), false);
        assert_eq!(
            refused.unwrap_err().to_string(),
            "this platform has no lockdown for the secrets profile yet"
        );
        let report = degrade_unsupported(Err(LockdownError::Unsupported("secrets")), true).unwrap();
        assert_eq!(
            report.degraded,
            vec!["no OS lockdown at all (this platform has no lockdown for the secrets profile yet); running only because of --allow-degraded"]
        );
        assert!(!report.seccomp_filter && !report.no_new_privs && !report.env_cleared);
        // Any other lockdown failure stays fatal even with --allow-degraded.
        let other = degrade_unsupported(Err(LockdownError::MultiThreaded(2)), true);
        assert!(matches!(other, Err(LockdownError::MultiThreaded(2))));
    }
}
