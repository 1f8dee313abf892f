//! Exec profile only: an empty network namespace for the exec helper.
//!
//! Every command the exec helper runs inherits its seccomp filter, and commands need inet
//! sockets inside their own network namespaces (the egress proxy bridge listens on loopback
//! TCP there), so the exec helper's filter cannot forbid inet sockets the way the other
//! profiles' filters do. Instead the helper itself moves into a network namespace of its own,
//! with nothing in it but a loopback interface that is down: whatever socket it creates reaches
//! nothing. An unprivileged process can only create one inside a user namespace it owns, so it
//! gets one of those too, in which only its own uid and gid are mapped (to themselves): files
//! and processes look as before, root is not mapped, and the capabilities the new namespace
//! grants are dropped by the next steps of the lockdown.

use super::userns::{classify, Diagnosis, Facts, Step};

/// Enters a new user and network namespace and maps the caller's uid and gid to themselves.
/// Must run while the process is single-threaded and still dumpable (its `/proc/self` maps are
/// writable only then). A failure says which check refused it (`userns::classify`).
pub(crate) fn isolate_network() -> Result<(), Diagnosis> {
    let refused = |step: Step, e: std::io::Error| {
        classify(step, e.raw_os_error().unwrap_or(0), &Facts::read())
    };
    // SAFETY: geteuid and getegid have no arguments and cannot fail.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    // SAFETY: unshare takes flags only; the caller checked that the process is single-threaded,
    // which CLONE_NEWUSER requires.
    if unsafe { libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNET) } != 0 {
        return Err(refused(Step::Create, std::io::Error::last_os_error()));
    }
    let write = |file: &str, data: String, step: Step| {
        std::fs::write(format!("/proc/self/{file}"), data).map_err(|e| refused(step, e))
    };
    // An unprivileged gid_map needs setgroups denied first; it stays denied below, too.
    write("setgroups", "deny".into(), Step::Setgroups)?;
    write("uid_map", format!("{uid} {uid} 1"), Step::UidMap)?;
    write("gid_map", format!("{gid} {gid} 1"), Step::GidMap)?;
    Ok(())
}
