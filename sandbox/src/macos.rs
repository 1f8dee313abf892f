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
//! These profiles are compiled in CI (`cargo check --target x86_64-apple-darwin`) but have not
//! been run on a Mac yet; the keychain rules of the secrets profile in particular need checking
//! against the keyring backend once it exists.

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

/// Rules every profile starts with: deny everything, then what any Rust program needs once it
/// is running (its own signals, reading sysctls such as hw.ncpu). I/O on descriptors the process
/// already holds needs no rule.
const COMMON: &str = r#"(version 1)
(deny default)
(allow signal (target self))
(allow sysctl-read)
"#;

/// The SBPL source of `profile`. Grant roots are canonicalized (on macOS `/tmp` and `/var` are
/// symlinks into `/private`, and Seatbelt matches resolved paths).
pub fn profile_sbpl(profile: &Profile) -> Result<String, LockdownError> {
    let mut s = String::from(COMMON);
    match profile {
        Profile::Fs(grants) => fs_rules(&mut s, grants)?,
        Profile::Net => s.push_str(
            r#"; fetches, the proxy's upstream connections and DNS over UDP
(allow system-socket)
(allow network-outbound (remote ip))
(allow network-bind (local ip))
"#,
        ),
        Profile::Exec => s.push_str(
            r#"; commands: read and run the system, write only to temporary directories; each
; command gets its own, narrower sandbox from the exec sandbox
(allow process-fork)
(allow process-exec)
(allow process-info* (target same-sandbox))
(allow signal (target same-sandbox))
(allow file-read*)
(allow file-write* (subpath "/private/tmp") (subpath "/private/var/folders") (literal "/dev/null"))
(allow file-ioctl (literal "/dev/null"))
(allow ipc-posix-shm)
(allow mach-lookup
  (global-name "com.apple.system.notification_center")
  (global-name "com.apple.system.opendirectoryd.libinfo")
  (global-name "com.apple.system.logger"))
"#,
        ),
        Profile::Secrets(_) => secrets_rules(&mut s)?,
        Profile::Ui => s.push_str(
            r#"; the terminal the console runs in
(allow file-ioctl (regex #"^/dev/tty"))
(allow file-read-data file-write-data (regex #"^/dev/tty"))
"#,
        ),
        Profile::Gateway | Profile::Servers => {}
        // The router: its own directories, read-write, as a grant would be.
        Profile::Broker(dirs) => fs_rules(&mut s, dirs)?,
    }
    Ok(s)
}

fn fs_rules(s: &mut String, grants: &FsProfile) -> Result<(), LockdownError> {
    for (roots, rule) in [
        (&grants.read_only, "(allow file-read*"),
        (&grants.read_write, "(allow file-read* file-write*"),
    ] {
        for root in roots {
            let path = canonical(root)?;
            s.push_str(&format!("{rule} (subpath {}))\n", sbpl_string(&path)));
            // Resolving a path needs the metadata of every directory above it.
            for parent in Path::new(&path).ancestors().skip(1) {
                let p = parent.to_string_lossy();
                s.push_str(&format!(
                    "(allow file-read-metadata (literal {}))\n",
                    sbpl_string(&p)
                ));
            }
        }
    }
    Ok(())
}

fn secrets_rules(s: &mut String) -> Result<(), LockdownError> {
    let home = std::env::var("HOME").map_err(|_| LockdownError::Seatbelt {
        profile: "secrets",
        reason: "HOME is not set, so the keychain directory is unknown".into(),
    })?;
    let keychains = canonical(&Path::new(&home).join("Library/Keychains"))?;
    s.push_str(&format!(
        r#"; the login keychain, through the Security framework's daemons
(allow mach-lookup
  (global-name "com.apple.SecurityServer")
  (global-name "com.apple.securityd.xpc")
  (global-name "com.apple.security.agent"))
(allow file-read* file-write* (subpath {}))
(allow ipc-posix-shm-read-data ipc-posix-shm-write-data
  (ipc-posix-name "com.apple.AppleDatabaseChanged"))
"#,
        sbpl_string(&keychains)
    ));
    Ok(())
}

fn canonical(path: &Path) -> Result<String, LockdownError> {
    std::fs::canonicalize(path)
        .map(|p| p.to_string_lossy().into_owned())
        .map_err(|e| LockdownError::Seatbelt {
            profile: "seatbelt",
            reason: format!("grant root {}: {e}", path.display()),
        })
}

/// An SBPL string literal.
fn sbpl_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    out
}

/// Locks the calling process down with `profile`'s Seatbelt profile (see the module docs).
pub fn lockdown(
    profile: &Profile,
    opts: &LockdownOptions,
) -> Result<LockdownReport, LockdownError> {
    // Built first: it reads HOME and resolves grant roots, which must happen before the
    // environment is cleared and the sandbox applies.
    let sbpl = profile_sbpl(profile)?;
    close_stray_fds(&opts.keep_fds)?;
    clear_env(&opts.keep_env);
    no_core_dumps()?;
    deny_attach()?;
    apply(profile.name(), &sbpl)?;
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
    })
}

/// The broker on macOS: no core dumps, no debugger. Not sandboxed (see the Linux counterpart).
pub fn harden_broker() -> Result<LockdownReport, LockdownError> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_are_escaped() {
        assert_eq!(sbpl_string(r#"/a"b\c"#), r#""/a\"b\\c""#);
    }

    #[test]
    fn every_profile_denies_by_default() {
        for p in [Profile::Net, Profile::Exec, Profile::Ui, Profile::Gateway] {
            let s = profile_sbpl(&p).unwrap();
            assert!(s.starts_with("(version 1)\n(deny default)"), "{s}");
        }
        let gw = profile_sbpl(&Profile::Gateway).unwrap();
        assert!(!gw.contains("network") && !gw.contains("file-"), "{gw}");
    }
}
