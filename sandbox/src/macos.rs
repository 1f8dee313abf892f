//! macOS: Seatbelt profiles (SBPL), applied with `sandbox_init(3)`.
//!
//! `sandbox_init` is marked deprecated but remains the only public way for a process to confine
//! itself with a custom profile (Chromium and Firefox do the same). The profile binds the
//! calling process and everything it starts, and cannot be lifted.
//!
//! The order follows the Linux lockdown where macOS has an equivalent: close stray descriptors,
//! clear the environment, RLIMIT_CORE 0, `PT_DENY_ATTACH` (no debugger may attach, the
//! counterpart of PR_SET_DUMPABLE 0), then the Seatbelt profile. macOS has no no_new_privs,
//! capabilities, Landlock or seccomp: the report says so (those fields are false); set-id
//! programs cannot be run anyway because every profile but exec denies `process-exec`.
//!
//! The profile text comes from [`crate::seatbelt`] (cfg-independent, golden-tested on Linux in
//! `tests/os_policy_golden.rs`). This file is only compiled here (`cargo check --target
//! x86_64-apple-darwin -p sandbox`); it has not been run on a Mac: see docs/macos.md.

use crate::{FsProfile, LandlockStatus, LockdownError, LockdownOptions, LockdownReport, Profile};
use std::ffi::{c_char, c_int, CStr, CString};
use std::path::Path;

extern "C" {
    /// `int sandbox_init(const char *profile, uint64_t flags, char **errorbuf)` from
    /// libsystem_sandbox; flags 0 means `profile` is SBPL source.
    fn sandbox_init(profile: *const c_char, flags: u64, errorbuf: *mut *mut c_char) -> c_int;
    fn sandbox_free_error(errorbuf: *mut c_char);
}

/// No Landlock on macOS.
pub fn landlock_abi() -> u32 {
    0
}

/// The SBPL source of `profile`, from the one generator ([`crate::seatbelt`]). Grant roots are
/// canonicalized first (on macOS `/tmp` and `/var` are symlinks into `/private`, and Seatbelt
/// matches resolved paths).
pub fn profile_sbpl(profile: &Profile) -> Result<String, LockdownError> {
    let resolved = match profile {
        Profile::Fs(g) => Profile::Fs(canonical_roots(g)?),
        Profile::Broker(g) => Profile::Broker(canonical_roots(g)?),
        other => other.clone(),
    };
    // The home from the user database, not HOME: helpers start with an empty environment.
    let home = match profile {
        Profile::Secrets(_) => {
            let uid = nix::unistd::getuid();
            let user = nix::unistd::User::from_uid(uid)
                .ok()
                .flatten()
                .ok_or_else(|| LockdownError::Seatbelt {
                    profile: "secrets",
                    reason: format!(
                        "uid {uid} has no entry in the user database, so the keychain directory is unknown"
                    ),
                })?;
            Some(canonical(&user.dir)?)
        }
        _ => None,
    };
    crate::seatbelt::helper_profile(&resolved, home.as_deref()).map_err(|e| {
        LockdownError::Seatbelt {
            profile: profile.name(),
            reason: e.to_string(),
        }
    })
}

/// The argv that runs `program args` under `spec`'s Seatbelt profile: `/usr/bin/sandbox-exec -p
/// PROFILE -- program args...` (the exec helper's per-command sandbox on macOS). The paths in
/// `spec` must already be resolved.
pub fn sandbox_exec_argv(
    spec: &crate::seatbelt::CommandSpec,
    program: &std::ffi::OsStr,
    args: &[std::ffi::OsString],
) -> Result<Vec<std::ffi::OsString>, crate::seatbelt::SbplError> {
    let sbpl = crate::seatbelt::command_profile(spec)?;
    let mut argv: Vec<std::ffi::OsString> = vec![
        "/usr/bin/sandbox-exec".into(),
        "-p".into(),
        sbpl.into(),
        "--".into(),
    ];
    argv.push(program.to_os_string());
    argv.extend(args.iter().cloned());
    Ok(argv)
}

fn canonical_roots(g: &FsProfile) -> Result<FsProfile, LockdownError> {
    let all = |v: &[std::path::PathBuf]| {
        v.iter()
            .map(|p| canonical(p))
            .collect::<Result<Vec<_>, _>>()
    };
    Ok(FsProfile {
        read_only: all(&g.read_only)?,
        read_write: all(&g.read_write)?,
    })
}

fn canonical(path: &Path) -> Result<std::path::PathBuf, LockdownError> {
    std::fs::canonicalize(path).map_err(|e| LockdownError::Seatbelt {
        profile: "seatbelt",
        reason: format!("grant root {}: {e}", path.display()),
    })
}

/// Locks the calling process down with `profile`'s Seatbelt profile (see the module docs).
pub fn lockdown(
    profile: &Profile,
    opts: &LockdownOptions,
) -> Result<LockdownReport, LockdownError> {
    // Built first: it reads the user database and resolves grant roots, which must happen
    // before the environment is cleared and the sandbox applies. The exec helper takes none
    // (macOS refuses a sandbox inside a sandbox, and each of its commands gets its own:
    // seatbelt::NotNestable).
    let sbpl = match profile {
        Profile::Exec => None,
        p => Some(profile_sbpl(p)?),
    };
    close_stray_fds(&opts.keep_fds)?;
    clear_env(&opts.keep_env);
    no_core_dumps()?;
    deny_attach()?;
    // The gateway under `gatehouse run` starts inside the agent's own Seatbelt profile, and
    // macOS applies no profile inside another (sandbox_init fails): it keeps the agent's, so it
    // can do what the agent can and no more (docs/macos.md). Any other process already confined
    // fails in `apply`, closed.
    let inside = *profile == Profile::Gateway
        && crate::process::observe(std::process::id()).is_ok_and(|c| c.sandboxed);
    match &sbpl {
        Some(_) if inside => eprintln!(
            "gatehouse: the gateway keeps the Seatbelt profile it started in (the agent's): macOS applies none inside another"
        ),
        Some(sbpl) => apply(profile.name(), sbpl)?,
        None => {}
    }
    Ok(LockdownReport {
        profile: profile.name().to_string(),
        stray_fds_closed: true,
        env_cleared: true,
        core_dumps_off: true,
        dumpable_off: true,
        no_new_privs: false,
        // SAFETY: geteuid has no arguments and cannot fail.
        capabilities_dropped: unsafe { libc::geteuid() } != 0,
        landlock_abi: 0,
        landlock_min_abi: 0,
        landlock: LandlockStatus::NotEnforced,
        seccomp_filter: false,
        seccomp_allowed_syscalls: 0,
        namespaces: Vec::new(),
        exec_tier: None,
        exec_tier_why: None,
        degraded: Vec::new(),
        windows: None,
    })
}

/// The spawner on macOS: stray descriptors closed but the router's channel, the environment
/// emptied, no core dumps, no debugger. No profile: it must start helpers, each of which
/// applies its own. (`SIGPIPE` is ignored by Rust's runtime, so a write to a router that is
/// gone fails with `EPIPE`; its helpers start with every signal at its default.)
pub fn lockdown_spawner(keep_fd: i32) -> Result<LockdownReport, LockdownError> {
    close_stray_fds(&[keep_fd])?;
    clear_env(&[]);
    no_core_dumps()?;
    deny_attach()?;
    let mut report = LockdownReport::nothing_yet("spawner");
    report.stray_fds_closed = true;
    report.env_cleared = true;
    report.core_dumps_off = true;
    report.dumpable_off = true;
    Ok(report)
}

/// The router on macOS: no core dumps, no debugger, then the broker's Seatbelt profile (read
/// and write only its own directories, `dirs`; no network, no exec). It keeps every descriptor
/// and its environment (it holds its listening sockets, the audit log and the spawner's
/// channel). Like the Linux router's, `allow_degraded` changes nothing here: every step holds or
/// the broker refuses to start.
pub fn lockdown_router(
    dirs: &FsProfile,
    _allow_degraded: bool,
) -> Result<LockdownReport, LockdownError> {
    let profile = Profile::Broker(dirs.clone());
    let sbpl = profile_sbpl(&profile)?;
    no_core_dumps()?;
    deny_attach()?;
    apply(profile.name(), &sbpl)?;
    let mut report = LockdownReport::nothing_yet("broker");
    report.core_dumps_off = true;
    report.dumpable_off = true;
    Ok(report)
}

/// The broker on macOS: no core dumps, no debugger. Not sandboxed (see the Linux counterpart).
/// Both always hold, so `allow_degraded` (the Windows signature's) changes nothing.
pub fn harden_broker(_allow_degraded: bool) -> Result<LockdownReport, LockdownError> {
    no_core_dumps()?;
    deny_attach()?;
    Ok(LockdownReport {
        profile: "broker".to_string(),
        stray_fds_closed: false,
        env_cleared: false,
        core_dumps_off: true,
        dumpable_off: true,
        no_new_privs: false,
        // SAFETY: geteuid has no arguments and cannot fail.
        capabilities_dropped: unsafe { libc::geteuid() } != 0,
        landlock_abi: 0,
        landlock_min_abi: 0,
        landlock: LandlockStatus::NotEnforced,
        seccomp_filter: false,
        seccomp_allowed_syscalls: 0,
        namespaces: Vec::new(),
        exec_tier: None,
        exec_tier_why: None,
        degraded: Vec::new(),
        windows: None,
    })
}

fn apply(profile: &'static str, sbpl: &str) -> Result<(), LockdownError> {
    let source = CString::new(sbpl).map_err(|_| LockdownError::Seatbelt {
        profile,
        reason: "the profile contains a NUL byte".into(),
    })?;
    let mut error: *mut c_char = std::ptr::null_mut();
    // SAFETY: `source` is a NUL-terminated string that outlives the call; `error` is a valid
    // out-pointer that sandbox_init sets to a string it allocated, or leaves null.
    let r = unsafe { sandbox_init(source.as_ptr(), 0, &mut error) };
    if r == 0 {
        return Ok(());
    }
    let reason = if error.is_null() {
        "sandbox_init failed".to_string()
    } else {
        // SAFETY: sandbox_init set `error` to a NUL-terminated string it owns; we copy it and
        // hand it back with sandbox_free_error, exactly once.
        unsafe {
            let text = CStr::from_ptr(error).to_string_lossy().into_owned();
            sandbox_free_error(error);
            text
        }
    };
    Err(LockdownError::Seatbelt { profile, reason })
}

fn close_stray_fds(keep: &[i32]) -> Result<(), LockdownError> {
    // macOS has no close_range: list /dev/fd, then close (the listing's own descriptor shows up
    // too and is already closed when we get to it; EBADF for it is expected).
    let open: Vec<i32> = std::fs::read_dir("/dev/fd")
        .map_err(LockdownError::CloseFds)?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    for fd in open {
        if fd > 2 && !keep.contains(&fd) {
            // SAFETY: closing a descriptor number; the process is expected to hold no Rust
            // object owning it (lockdown runs first in main).
            unsafe { libc::close(fd) };
        }
    }
    Ok(())
}

fn clear_env(keep: &[String]) {
    let drop: Vec<_> = std::env::vars_os()
        .map(|(k, _)| k)
        .filter(|k| !keep.iter().any(|n| k == n.as_str()))
        .collect();
    for k in drop {
        std::env::remove_var(k);
    }
}

fn no_core_dumps() -> Result<(), LockdownError> {
    let zero = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: setrlimit reads the struct we pass by reference.
    if unsafe { libc::setrlimit(libc::RLIMIT_CORE, &zero) } != 0 {
        return Err(LockdownError::Rlimit {
            what: "RLIMIT_CORE",
            source: std::io::Error::last_os_error(),
        });
    }
    Ok(())
}

fn deny_attach() -> Result<(), LockdownError> {
    const PT_DENY_ATTACH: c_int = 31;
    // SAFETY: PT_DENY_ATTACH takes no address or data and only marks the calling process.
    if unsafe { libc::ptrace(PT_DENY_ATTACH, 0, std::ptr::null_mut(), 0) } != 0 {
        return Err(LockdownError::Prctl {
            what: "ptrace(PT_DENY_ATTACH)",
            source: std::io::Error::last_os_error(),
        });
    }
    Ok(())
}
