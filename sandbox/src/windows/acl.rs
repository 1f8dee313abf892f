//! Explicit ACEs on grant roots for a profile's capability SID, and their removal. The broker
//! calls [`apply_aces`] when a grant is made (or before spawning a command) and
//! [`remove_aces`] when it goes; the ACEs are exactly those `wincfg` renders (parsed back from
//! their SDDL, so the listing is what is applied).

use super::ffi::{invalid, last, returned, wide, wide_to_string, Local, OwnedSid, WinError};
use crate::wincfg::{parse_ace, PathAce};
use std::path::{Path, PathBuf};
use windows_sys::Win32::Foundation::{ERROR_SUCCESS, HANDLE};
use windows_sys::Win32::Security::Authorization::{
    ConvertSecurityDescriptorToStringSecurityDescriptorW, GetNamedSecurityInfoW, SetEntriesInAclW,
    SetNamedSecurityInfoW, ACCESS_MODE, DENY_ACCESS, EXPLICIT_ACCESS_W, GRANT_ACCESS,
    NO_MULTIPLE_TRUSTEE, REVOKE_ACCESS, SDDL_REVISION_1, SE_FILE_OBJECT, TRUSTEE_IS_SID,
    TRUSTEE_IS_UNKNOWN, TRUSTEE_W,
};
use windows_sys::Win32::Security::{
    GetSecurityDescriptorControl, ACL, DACL_SECURITY_INFORMATION,
    PROTECTED_DACL_SECURITY_INFORMATION, PSECURITY_DESCRIPTOR, PSID, SE_DACL_PROTECTED,
    SUB_CONTAINERS_AND_OBJECTS_INHERIT,
};

const MECH: &str = "file ACE";

pub(crate) fn explicit_access(
    sid: PSID,
    mask: u32,
    mode: ACCESS_MODE,
    inherit: u32,
) -> EXPLICIT_ACCESS_W {
    EXPLICIT_ACCESS_W {
        grfAccessPermissions: mask,
        grfAccessMode: mode,
        grfInheritance: inherit,
        Trustee: TRUSTEE_W {
            pMultipleTrustee: std::ptr::null_mut(),
            MultipleTrusteeOperation: NO_MULTIPLE_TRUSTEE,
            TrusteeForm: TRUSTEE_IS_SID,
            TrusteeType: TRUSTEE_IS_UNKNOWN,
            // With TRUSTEE_IS_SID the name field carries the SID pointer.
            ptstrName: sid.cast(),
        },
    }
}

/// An ACE this process added, to be removed with [`remove_aces`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppliedAce {
    pub path: PathBuf,
    pub sid: String,
}

/// The path's DACL, owned with its security descriptor.
struct Dacl {
    acl: *mut ACL,
    /// Protected from inheritance (`SE_DACL_PROTECTED`): a private directory's.
    protected: bool,
    _sd: Local,
}

fn read_dacl(path: &Path) -> Result<(Vec<u16>, Dacl), WinError> {
    let w = wide(MECH, path.as_os_str())?;
    let mut acl: *mut ACL = std::ptr::null_mut();
    let mut sd: PSECURITY_DESCRIPTOR = std::ptr::null_mut();
    // SAFETY: `w` is NUL-terminated; the call returns a LocalAlloc'ed security descriptor in
    // `sd` (freed by `Local`) and `acl` points inside it.
    let r = unsafe {
        GetNamedSecurityInfoW(
            w.as_ptr(),
            SE_FILE_OBJECT,
            DACL_SECURITY_INFORMATION,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            &mut acl,
            std::ptr::null_mut(),
            &mut sd,
        )
    };
    if r != ERROR_SUCCESS {
        return Err(returned(MECH, "GetNamedSecurityInfoW", r));
    }
    let sd = Local(sd);
    let (mut control, mut revision) = (0u16, 0u32);
    // SAFETY: `sd.0` is the descriptor just returned, alive in `sd`; the outputs are locals.
    if unsafe { GetSecurityDescriptorControl(sd.0, &mut control, &mut revision) } == 0 {
        return Err(last(MECH, "GetSecurityDescriptorControl"));
    }
    Ok((
        w,
        Dacl {
            acl,
            protected: control & SE_DACL_PROTECTED != 0,
            _sd: sd,
        },
    ))
}

/// Merges `entry` into the path's DACL (`SetEntriesInAclW` keeps the canonical order: explicit
/// denies before explicit allows) and writes it back; inheritable entries propagate to what is
/// below.
fn merge(path: &Path, entry: &EXPLICIT_ACCESS_W) -> Result<(), WinError> {
    let (w, old) = read_dacl(path)?;
    let mut new: *mut ACL = std::ptr::null_mut();
    // SAFETY: `entry` (and the SID it points to, owned by the caller) and `old.acl` outlive the
    // call; `new` receives a LocalAlloc'ed ACL that `Local` frees.
    let r = unsafe { SetEntriesInAclW(1, entry, old.acl, &mut new) };
    if r != ERROR_SUCCESS {
        return Err(returned(MECH, "SetEntriesInAclW", r));
    }
    let _new = Local(new.cast());
    // A protected DACL stays protected: without the flag, setting it would let the parent's
    // inheritable ACEs in (a private directory would then grant what its parent grants).
    let what = match old.protected {
        true => DACL_SECURITY_INFORMATION | PROTECTED_DACL_SECURITY_INFORMATION,
        false => DACL_SECURITY_INFORMATION,
    };
    // SAFETY: `w` is NUL-terminated, `new` a valid ACL alive in `_new`; only the DACL is set.
    let r = unsafe {
        SetNamedSecurityInfoW(
            w.as_ptr(),
            SE_FILE_OBJECT,
            what,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            new,
            std::ptr::null(),
        )
    };
    if r != ERROR_SUCCESS {
        return Err(returned(MECH, "SetNamedSecurityInfoW", r));
    }
    Ok(())
}

/// Adds each ACE. On a failure, the ACEs added so far are removed again, so a grant is applied
/// whole or not at all, and the error names the path.
pub fn apply_aces(aces: &[PathAce]) -> Result<Vec<AppliedAce>, WinError> {
    let mut applied = Vec::new();
    for a in aces {
        let r = (|| {
            let spec = parse_ace(&a.sddl).map_err(|e| invalid(MECH, e))?;
            let sid = OwnedSid::parse(&spec.sid)?;
            let mode = if spec.deny { DENY_ACCESS } else { GRANT_ACCESS };
            let inherit = if spec.inherit {
                SUB_CONTAINERS_AND_OBJECTS_INHERIT
            } else {
                0
            };
            merge(
                &a.path,
                &explicit_access(sid.as_psid(), spec.mask, mode, inherit),
            )?;
            Ok(AppliedAce {
                path: a.path.clone(),
                sid: spec.sid,
            })
        })();
        match r {
            Ok(done) => applied.push(done),
            Err(e) => {
                let _ = remove_aces(&applied);
                return Err(match e {
                    WinError::Call { call, code, .. } => WinError::Invalid {
                        mechanism: MECH,
                        reason: format!(
                            "{}: {call} failed with Win32 error {code}",
                            a.path.display()
                        ),
                    },
                    other => other,
                });
            }
        }
    }
    Ok(applied)
}

/// Removes every ACE naming the SID from each path (`REVOKE_ACCESS`: allows and denies alike;
/// the SID is gatehouse's own, so nothing else names it). Tries every path and returns the
/// first error.
pub fn remove_aces(applied: &[AppliedAce]) -> Result<(), WinError> {
    let mut first = None;
    for a in applied {
        let r = OwnedSid::parse(&a.sid).and_then(|sid| {
            merge(
                &a.path,
                &explicit_access(sid.as_psid(), 0, REVOKE_ACCESS, 0),
            )
        });
        if let Err(e) = r {
            first.get_or_insert(e);
        }
    }
    first.map_or(Ok(()), Err)
}

/// The path's DACL in SDDL (`D:...`), as Windows renders it: what `doctor` and the tests read
/// back to see what is really there.
pub fn dacl_sddl(path: &Path) -> Result<String, WinError> {
    let w = wide(MECH, path.as_os_str())?;
    let mut sd: PSECURITY_DESCRIPTOR = std::ptr::null_mut();
    // SAFETY: as in read_dacl; only the descriptor is kept (freed by `_sd`).
    let r = unsafe {
        GetNamedSecurityInfoW(
            w.as_ptr(),
            SE_FILE_OBJECT,
            DACL_SECURITY_INFORMATION,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            &mut sd,
        )
    };
    if r != ERROR_SUCCESS {
        return Err(returned(MECH, "GetNamedSecurityInfoW", r));
    }
    let _sd = Local(sd);
    dacl_text(sd, MECH)
}

/// The DACL of a descriptor `sd` (valid for the call) as SDDL.
fn dacl_text(sd: PSECURITY_DESCRIPTOR, mechanism: &'static str) -> Result<String, WinError> {
    let mut text: *mut u16 = std::ptr::null_mut();
    // SAFETY: a valid descriptor; `text` receives a LocalAlloc'ed string freed by `owner`.
    let ok = unsafe {
        ConvertSecurityDescriptorToStringSecurityDescriptorW(
            sd,
            SDDL_REVISION_1,
            DACL_SECURITY_INFORMATION,
            &mut text,
            std::ptr::null_mut(),
        )
    };
    if ok == 0 {
        return Err(super::ffi::last(
            mechanism,
            "ConvertSecurityDescriptorToStringSecurityDescriptorW",
        ));
    }
    let owner = Local(text.cast());
    Ok(wide_to_string(text, &owner))
}

/// A security descriptor made from SDDL, freed when dropped (`LocalFree`).
pub(crate) struct OwnedSd(Local);

impl OwnedSd {
    pub(crate) fn from_sddl(sddl: &str) -> Result<OwnedSd, WinError> {
        use windows_sys::Win32::Security::Authorization::ConvertStringSecurityDescriptorToSecurityDescriptorW;
        let w = wide("process security", sddl.as_ref())?;
        let mut sd: PSECURITY_DESCRIPTOR = std::ptr::null_mut();
        // SAFETY: `w` is a NUL-terminated UTF-16 string that outlives the call; `sd` receives a
        // LocalAlloc'ed descriptor that `Local` frees.
        if unsafe {
            ConvertStringSecurityDescriptorToSecurityDescriptorW(
                w.as_ptr(),
                SDDL_REVISION_1,
                &mut sd,
                std::ptr::null_mut(),
            )
        } == 0
        {
            return Err(super::ffi::last(
                "process security",
                "ConvertStringSecurityDescriptorToSecurityDescriptorW",
            ));
        }
        Ok(OwnedSd(Local(sd)))
    }

    pub(crate) fn as_ptr(&self) -> PSECURITY_DESCRIPTOR {
        self.0 .0
    }
}

/// The DACL of a kernel object (a process), as SDDL, read through `handle` (which needs
/// `READ_CONTROL`; the current-process pseudo-handle has it).
pub(crate) fn object_dacl_sddl(handle: HANDLE) -> Result<String, WinError> {
    use windows_sys::Win32::Security::Authorization::{GetSecurityInfo, SE_KERNEL_OBJECT};
    const PMECH: &str = "process security";
    let mut sd: PSECURITY_DESCRIPTOR = std::ptr::null_mut();
    // SAFETY: a valid handle; only the descriptor is asked for, LocalAlloc'ed and freed by `_sd`.
    let r = unsafe {
        GetSecurityInfo(
            handle,
            SE_KERNEL_OBJECT,
            DACL_SECURITY_INFORMATION,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            &mut sd,
        )
    };
    if r != ERROR_SUCCESS {
        return Err(returned(PMECH, "GetSecurityInfo", r));
    }
    let _sd = Local(sd);
    dacl_text(sd, PMECH)
}
