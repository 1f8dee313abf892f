//! The broker proper (the router): the process that parses every frame the agent's gateway and
//! the console send, holds the policy and writes the audit log. It runs a tokio current-thread
//! runtime, the audit store's writer thread and SQLite; it starts no process (the spawner does),
//! makes no socket after start (its listening sockets are bound before lockdown, helper channels
//! come from the spawner; a launched command's connector is a `socketpair`, which reaches no one
//! but the exec-helper it is handed to), and the only signal it sends is SIGKILL through a pidfd to a front
//! that broke the protocol (the spawner kills helpers on its request).
//!
//! Checked against `strace -f` of the broker through `gatehouse demo` and the integration tests.
//! What it may open is Landlock's business (its own directories only).

use super::profiles::{base, event_loop, no_executable_memory, threads};
use super::{Arg, Policy};
use libc::{EACCES, F_GETLK, F_OFD_GETLK, F_OFD_SETLK, F_OFD_SETLKW, F_SETLK, F_SETLKW};

pub(super) fn broker(p: &mut Policy) {
    base(p);
    no_executable_memory(p);
    threads(p);
    event_loop(p);
    own_files(p);
    for cmd in [
        F_SETLK,
        F_SETLKW,
        F_GETLK,
        F_OFD_SETLK,
        F_OFD_SETLKW,
        F_OFD_GETLK,
    ] {
        p.allow_if(
            libc::SYS_fcntl,
            &[Arg::Eq(1, cmd as u32)],
            "SQLite's POSIX advisory locks on the audit database, its journal and WAL index",
        );
    }
    #[cfg(target_arch = "x86_64")]
    p.allow(
        &[libc::SYS_access],
        "SQLite checks whether a journal or WAL file exists",
    );
    p.allow(
        &[libc::SYS_faccessat, libc::SYS_faccessat2],
        "SQLite checks whether a journal or WAL file exists",
    );
    p.allow(
        &[libc::SYS_geteuid, libc::SYS_getuid],
        "SQLite gives new journal files the database's owner when running as root; the broker names its own uid in doctor",
    );
    p.allow(
        &[libc::SYS_getcwd],
        "making relative paths of a policy or a session's directory absolute",
    );
    p.allow(
        &[libc::SYS_flock],
        "releasing the lock file that names the running broker (taken before lockdown) at exit",
    );
    p.allow(
        &[libc::SYS_accept4],
        "accepting console and gateway connections on the sockets bound before lockdown",
    );
    p.allow_if(
        libc::SYS_socketpair,
        &[Arg::Eq(0, libc::AF_UNIX as u32)],
        "the connector of a command the human launched (gatehouse sandbox, gatehouse run): one end goes to the exec-helper, the other is read here",
    );
    p.allow_if(
        libc::SYS_getsockopt,
        &[
            Arg::Eq(1, libc::SOL_SOCKET as u32),
            Arg::Eq(2, libc::SO_PEERCRED as u32),
        ],
        "who connected: the peer's uid from the kernel (DESIGN rule 1)",
    );
    p.allow(
        &[libc::SYS_shutdown],
        "half-closing a front's connection after its last answer",
    );
    p.allow_if(
        libc::SYS_ioctl,
        &[Arg::Eq(1, libc::FIONBIO as u32)],
        "set_nonblocking on std sockets handed to tokio",
    );
    p.allow(
        &[libc::SYS_pidfd_open],
        "a pidfd for each front at accept, so the front that breaks the protocol is the one killed (never a reused pid)",
    );
    p.allow_if(
        libc::SYS_pidfd_send_signal,
        &[Arg::Eq(1, libc::SIGKILL as u32)],
        "killing a front that sent a malformed or forbidden frame (DESIGN rule 3); SIGKILL only",
    );
    p.allow_if(
        libc::SYS_pidfd_send_signal,
        &[Arg::Eq(1, 0)],
        "signal 0 (sends nothing) to a front's pidfd: whether the peer the spawner's lineage check judged still runs",
    );
    p.allow(
        &[libc::SYS_listen],
        "the two sockets bound before lockdown start listening once the audit log is open; no socket can be made after lockdown",
    );
    // No socket(2): a socket the router makes could connect anywhere. Refused with EACCES rather
    // than killed, so a library that probes (glibc's NSS, syslog) gets an error it handles.
    p.refuse(
        &[libc::SYS_socket],
        EACCES,
        "no new sockets after start: refused, not killed, for libraries that probe",
    );
}

/// Its own files: the audit database with its journal and WAL, the policy. Which paths is
/// Landlock's business (its config, data and runtime directories only).
fn own_files(p: &mut Policy) {
    #[cfg(target_arch = "x86_64")]
    p.allow(
        &[libc::SYS_open],
        "opening its own files (Landlock: only its own directories)",
    );
    p.allow(
        &[libc::SYS_openat],
        "opening its own files (Landlock: only its own directories)",
    );
    p.allow(
        &[libc::SYS_newfstatat, libc::SYS_statx, libc::SYS_fstat],
        "file sizes for SQLite; canonical paths of grant roots and working directories",
    );
    #[cfg(target_arch = "x86_64")]
    p.allow(
        &[libc::SYS_readlink],
        "canonical paths (realpath) of grant roots and working directories",
    );
    p.allow(
        &[libc::SYS_readlinkat],
        "canonical paths (realpath) of grant roots and working directories",
    );
    p.allow(
        &[libc::SYS_lseek, libc::SYS_pread64, libc::SYS_pwrite64],
        "SQLite reads and writes pages at offsets",
    );
    p.allow(
        &[libc::SYS_fsync, libc::SYS_fdatasync],
        "durable audit rows and ledger transitions (synchronous=FULL)",
    );
    p.allow(
        &[libc::SYS_ftruncate],
        "SQLite truncates its journal and WAL",
    );
    #[cfg(target_arch = "x86_64")]
    p.allow(
        &[libc::SYS_unlink, libc::SYS_rename, libc::SYS_mkdir],
        "std::fs and SQLite call these older forms on x86_64",
    );
    p.allow(
        &[libc::SYS_unlinkat],
        "SQLite deletes its journal; the sockets are removed at shutdown",
    );
    p.allow(
        &[libc::SYS_renameat, libc::SYS_renameat2],
        "a new policy revision replaces the old file atomically",
    );
    p.allow(
        &[libc::SYS_mkdirat],
        "creating its own subdirectories on first use",
    );
    p.allow(
        &[libc::SYS_fchmod, libc::SYS_fchown],
        "its files are 0600; SQLite gives a journal the database's owner when run as root",
    );
}
