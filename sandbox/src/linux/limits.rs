//! Steps 3 to 5: no core dumps, not dumpable, no new privileges; and the single-thread check
//! that makes the per-thread steps (capabilities, no_new_privs, Landlock) cover the process.

use crate::LockdownError;
use std::io;

/// How many threads the process has, from `/proc/self/status`.
pub(crate) fn thread_count() -> Result<usize, LockdownError> {
    let status =
        std::fs::read_to_string("/proc/self/status").map_err(LockdownError::ThreadCount)?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| {
            LockdownError::ThreadCount(io::Error::other("/proc/self/status has no Threads: line"))
        })
}

/// Refuses to go on unless this is the only thread: Landlock's `restrict_self`, `capset` and
/// `PR_SET_NO_NEW_PRIVS` bind only the calling thread (Landlock ABI < 8 has no way to reach the
/// others), so a lockdown after a thread was started would leave that thread free.
pub(crate) fn require_single_thread() -> Result<(), LockdownError> {
    match thread_count()? {
        1 => Ok(()),
        n => Err(LockdownError::MultiThreaded(n)),
    }
}

/// Sets RLIMIT_CORE to 0 (soft and hard), so a crash writes no memory image (which could hold
/// requests, file contents or secrets) and the limit cannot be raised again.
pub(crate) fn no_core_dumps() -> Result<(), LockdownError> {
    let zero = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: setrlimit reads the rlimit struct we pass by reference and nothing else.
    if unsafe { libc::setrlimit(libc::RLIMIT_CORE, &zero) } != 0 {
        return Err(LockdownError::Rlimit {
            what: "RLIMIT_CORE",
            source: io::Error::last_os_error(),
        });
    }
    let mut now = libc::rlimit {
        rlim_cur: 1,
        rlim_max: 1,
    };
    // SAFETY: getrlimit writes into the rlimit struct we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_CORE, &mut now) } != 0 {
        return Err(LockdownError::Rlimit {
            what: "RLIMIT_CORE",
            source: io::Error::last_os_error(),
        });
    }
    if now.rlim_cur != 0 || now.rlim_max != 0 {
        return Err(LockdownError::Rlimit {
            what: "RLIMIT_CORE",
            source: io::Error::other("the limit is still above 0 after setting it"),
        });
    }
    Ok(())
}

/// PR_SET_DUMPABLE 0: no core dumps, no ptrace attach by other processes of the same user, and
/// `/proc/<pid>/` files (mem, environ, fd, maps) become owned by root.
pub(crate) fn not_dumpable() -> Result<(), LockdownError> {
    set_and_check(
        "PR_SET_DUMPABLE",
        libc::PR_SET_DUMPABLE,
        libc::PR_GET_DUMPABLE,
        0,
    )
}

/// PR_SET_NO_NEW_PRIVS 1: execve can never grant privileges again (set-id bits and file
/// capabilities are ignored). Required for an unprivileged seccomp filter and Landlock.
pub(crate) fn no_new_privs() -> Result<(), LockdownError> {
    set_and_check(
        "PR_SET_NO_NEW_PRIVS",
        libc::PR_SET_NO_NEW_PRIVS,
        libc::PR_GET_NO_NEW_PRIVS,
        1,
    )
}

fn set_and_check(
    what: &'static str,
    set: libc::c_int,
    get: libc::c_int,
    value: libc::c_ulong,
) -> Result<(), LockdownError> {
    // SAFETY: these prctl options take integer arguments only and touch no memory of ours.
    if unsafe {
        libc::prctl(
            set,
            value,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
        )
    } != 0
    {
        return Err(LockdownError::Prctl {
            what,
            source: io::Error::last_os_error(),
        });
    }
    // SAFETY: as above; the getter returns the value as the result.
    let now = unsafe {
        libc::prctl(
            get,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
        )
    };
    if now < 0 || now as libc::c_ulong != value {
        return Err(LockdownError::Prctl {
            what,
            source: io::Error::other(format!("reads back as {now}, not {value}")),
        });
    }
    Ok(())
}
