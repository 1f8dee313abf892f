//! Step 6: drop every capability.

use crate::LockdownError;
use ::caps::{CapSet, Capability};

const PR_SET_SECUREBITS: libc::c_int = 28;
const PR_GET_SECUREBITS: libc::c_int = 27;

/// What dropping capabilities achieved.
pub(crate) struct Dropped {
    /// Effective, permitted, inheritable and ambient sets are empty.
    pub all_sets_empty: bool,
}

/// Empties the effective, permitted, inheritable and ambient sets. With CAP_SETPCAP (root) it
/// first clears the bounding set and locks the securebits so that uid 0 gains nothing from
/// execve; without it (an unprivileged user) the bounding set stays as it is, which is inert: the
/// process holds no capability, and no_new_privs stops execve from granting any.
pub(crate) fn drop_all() -> Result<Dropped, LockdownError> {
    let err = |what: &str, e: ::caps::errors::CapsError| {
        LockdownError::Capabilities(format!("{what}: {e}"))
    };
    let can_setpcap = ::caps::has_cap(None, CapSet::Effective, Capability::CAP_SETPCAP)
        .map_err(|e| err("reading the effective set", e))?;
    if can_setpcap {
        ::caps::clear(None, CapSet::Bounding).map_err(|e| err("clearing the bounding set", e))?;
        lock_securebits()?;
    }
    ::caps::clear(None, CapSet::Ambient).map_err(|e| err("clearing the ambient set", e))?;
    ::caps::clear(None, CapSet::Inheritable).map_err(|e| err("clearing the inheritable set", e))?;
    // Clearing the permitted set clears the effective set with it (effective ⊆ permitted).
    ::caps::clear(None, CapSet::Permitted).map_err(|e| err("clearing the permitted set", e))?;

    let mut all_sets_empty = true;
    for set in [
        CapSet::Effective,
        CapSet::Permitted,
        CapSet::Inheritable,
        CapSet::Ambient,
    ] {
        let left = ::caps::read(None, set).map_err(|e| err("reading back", e))?;
        if !left.is_empty() {
            all_sets_empty = false;
        }
    }
    if !all_sets_empty {
        return Err(LockdownError::Capabilities(
            "capabilities are still held after dropping them".into(),
        ));
    }
    if can_setpcap
        && !::caps::read(None, CapSet::Bounding)
            .map_err(|e| err("reading the bounding set", e))?
            .is_empty()
    {
        return Err(LockdownError::Capabilities(
            "the bounding set is not empty after clearing it".into(),
        ));
    }
    Ok(Dropped { all_sets_empty })
}

/// Sets and locks SECBIT_NOROOT (uid 0 gets no capabilities from execve), SECBIT_NO_SETUID_FIXUP
/// and SECBIT_NO_CAP_AMBIENT_RAISE, so that a process running as root cannot regain what it
/// dropped by executing a program. Needs CAP_SETPCAP.
fn lock_securebits() -> Result<(), LockdownError> {
    let bits = libc::SECBIT_NOROOT
        | libc::SECBIT_NOROOT_LOCKED
        | libc::SECBIT_NO_SETUID_FIXUP
        | libc::SECBIT_NO_SETUID_FIXUP_LOCKED
        | libc::SECBIT_NO_CAP_AMBIENT_RAISE
        | libc::SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED
        | libc::SECBIT_KEEP_CAPS_LOCKED;
    // SAFETY: PR_SET_SECUREBITS takes an integer bit mask and touches no memory of ours.
    let r = unsafe { libc::prctl(PR_SET_SECUREBITS, bits as libc::c_ulong, 0, 0, 0) };
    if r != 0 {
        return Err(LockdownError::Prctl {
            what: "PR_SET_SECUREBITS",
            source: std::io::Error::last_os_error(),
        });
    }
    // SAFETY: PR_GET_SECUREBITS takes no argument and returns the mask.
    let now = unsafe { libc::prctl(PR_GET_SECUREBITS, 0, 0, 0, 0) };
    if now < 0 || now & bits != bits {
        return Err(LockdownError::Prctl {
            what: "PR_SET_SECUREBITS",
            source: std::io::Error::other(format!("securebits read back as {now:#x}")),
        });
    }
    Ok(())
}
