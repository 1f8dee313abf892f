//! The small owned wrappers every other module builds on: Win32 errors that name the mechanism,
//! NUL-terminated UTF-16 strings, SIDs and `LocalAlloc`ed buffers freed on drop, token queries.
//! Handles are `std::os::windows::io::OwnedHandle` (closed on drop).

use std::ffi::{c_void, OsStr};
use std::os::windows::ffi::OsStrExt;
use std::os::windows::io::{AsRawHandle, BorrowedHandle, FromRawHandle, OwnedHandle};
use windows_sys::Win32::Foundation::{LocalFree, HANDLE, INVALID_HANDLE_VALUE};
use windows_sys::Win32::Security::Authorization::{ConvertSidToStringSidW, ConvertStringSidToSidW};
use windows_sys::Win32::Security::{
    GetTokenInformation, PSID, SID_AND_ATTRIBUTES, TOKEN_GROUPS, TOKEN_INFORMATION_CLASS,
};

/// A Windows confinement step failed. Each variant names the mechanism (the restricted token,
/// the job object, ...) and the call, so the message says what this system refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WinError {
    #[error("{mechanism}: {call} failed with Win32 error {code} ({})", std::io::Error::from_raw_os_error(*code as i32))]
    Call {
        mechanism: &'static str,
        call: &'static str,
        code: u32,
    },
    #[error("{mechanism}: {reason}")]
    Invalid {
        mechanism: &'static str,
        reason: String,
    },
}

impl WinError {
    /// The Win32 error code, when a call failed.
    pub fn code(&self) -> Option<u32> {
        match self {
            WinError::Call { code, .. } => Some(*code),
            WinError::Invalid { .. } => None,
        }
    }

    /// The mechanism that failed (`restricted token`, `job object`, ...).
    pub fn mechanism(&self) -> &'static str {
        match self {
            WinError::Call { mechanism, .. } | WinError::Invalid { mechanism, .. } => mechanism,
        }
    }
}

/// The calling thread's last Win32 error, as a [`WinError::Call`].
pub(crate) fn last(mechanism: &'static str, call: &'static str) -> WinError {
    let code = std::io::Error::last_os_error().raw_os_error().unwrap_or(0) as u32;
    WinError::Call {
        mechanism,
        call,
        code,
    }
}

/// A Win32 error returned as a value (the `SetEntriesInAclW` family).
pub(crate) fn returned(mechanism: &'static str, call: &'static str, code: u32) -> WinError {
    WinError::Call {
        mechanism,
        call,
        code,
    }
}

pub(crate) fn invalid(mechanism: &'static str, reason: impl Into<String>) -> WinError {
    WinError::Invalid {
        mechanism,
        reason: reason.into(),
    }
}

/// `s` as a NUL-terminated UTF-16 string; an interior NUL would silently cut it short, so it is
/// refused.
pub(crate) fn wide(mechanism: &'static str, s: &OsStr) -> Result<Vec<u16>, WinError> {
    let mut w: Vec<u16> = s.encode_wide().collect();
    if w.contains(&0) {
        return Err(invalid(mechanism, format!("{s:?} contains a NUL")));
    }
    w.push(0);
    Ok(w)
}

/// Takes ownership of a handle a call just returned, or the call's error when it returned
/// none.
pub(crate) fn owned(
    h: HANDLE,
    mechanism: &'static str,
    call: &'static str,
) -> Result<OwnedHandle, WinError> {
    if h.is_null() || h == INVALID_HANDLE_VALUE {
        return Err(last(mechanism, call));
    }
    // SAFETY: `h` is a valid handle the caller just received from a creating call; nothing else
    // owns it, so the OwnedHandle is its only closer.
    Ok(unsafe { OwnedHandle::from_raw_handle(h) })
}

pub(crate) fn raw(h: BorrowedHandle<'_>) -> HANDLE {
    h.as_raw_handle()
}

/// Memory Windows allocated with `LocalAlloc` on our behalf (SIDs, ACLs, security
/// descriptors, strings), freed once with `LocalFree`.
pub(crate) struct Local(pub(crate) *mut c_void);

impl Drop for Local {
    fn drop(&mut self) {
        if !self.0.is_null() {
            // SAFETY: the pointer came from a call documented to allocate it with LocalAlloc
            // and hand it to the caller; it is freed here once and never used after.
            unsafe { LocalFree(self.0) };
        }
    }
}

/// A SID parsed from its string form, owned.
pub struct OwnedSid(Local);

impl OwnedSid {
    pub fn parse(text: &str) -> Result<OwnedSid, WinError> {
        let w = wide("SID", OsStr::new(text))?;
        let mut sid: PSID = std::ptr::null_mut();
        // SAFETY: `w` is NUL-terminated and outlives the call; `sid` receives a LocalAlloc'ed
        // SID that `Local` frees.
        if unsafe { ConvertStringSidToSidW(w.as_ptr(), &mut sid) } == 0 {
            return Err(last("SID", "ConvertStringSidToSidW"));
        }
        Ok(OwnedSid(Local(sid)))
    }

    /// Valid for as long as `self` lives.
    pub fn as_psid(&self) -> PSID {
        self.0 .0
    }
}

/// The string form (`S-1-...`) of a SID.
pub(crate) fn sid_string(sid: PSID) -> Result<String, WinError> {
    let mut out: *mut u16 = std::ptr::null_mut();
    // SAFETY: `sid` points to a valid SID (the callers pass SIDs inside token buffers or
    // OwnedSids that outlive the call); `out` receives a LocalAlloc'ed NUL-terminated string.
    if unsafe { ConvertSidToStringSidW(sid, &mut out) } == 0 {
        return Err(last("SID", "ConvertSidToStringSidW"));
    }
    let owner = Local(out.cast());
    Ok(wide_to_string(out, &owner))
}

/// Reads a NUL-terminated UTF-16 string that `_owner` keeps alive.
pub(crate) fn wide_to_string(p: *const u16, _owner: &Local) -> String {
    let mut len = 0;
    // SAFETY: `p` is a NUL-terminated string Windows returned, alive while `_owner` is; the
    // loop stops at its terminator.
    unsafe {
        while *p.add(len) != 0 {
            len += 1;
        }
        String::from_utf16_lossy(std::slice::from_raw_parts(p, len))
    }
}

/// `GetTokenInformation(class)` into an 8-aligned buffer (enough for every TOKEN_* struct).
pub(crate) fn token_info(
    token: BorrowedHandle<'_>,
    class: TOKEN_INFORMATION_CLASS,
    call: &'static str,
) -> Result<Vec<u64>, WinError> {
    let mut len = 0u32;
    // SAFETY: a size query: no buffer, length 0; the call writes only `len`.
    unsafe { GetTokenInformation(raw(token), class, std::ptr::null_mut(), 0, &mut len) };
    if len == 0 {
        return Err(last("restricted token", call));
    }
    let mut buf = vec![0u64; (len as usize).div_ceil(8)];
    // SAFETY: `buf` holds at least `len` writable bytes and is 8-aligned.
    let ok =
        unsafe { GetTokenInformation(raw(token), class, buf.as_mut_ptr().cast(), len, &mut len) };
    if ok == 0 {
        return Err(last("restricted token", call));
    }
    Ok(buf)
}

/// The groups of a `TOKEN_GROUPS` that [`token_info`] filled (`TokenGroups`,
/// `TokenRestrictedSids`); the SIDs they point to live in the same buffer.
pub(crate) fn token_groups(buf: &[u64]) -> &[SID_AND_ATTRIBUTES] {
    let tg = buf.as_ptr() as *const TOKEN_GROUPS;
    // SAFETY: GetTokenInformation wrote a TOKEN_GROUPS at the start of `buf` followed by its
    // GroupCount entries, all inside `buf`; the slice borrows `buf`, so it cannot outlive it.
    unsafe {
        std::slice::from_raw_parts(
            std::ptr::addr_of!((*tg).Groups).cast::<SID_AND_ATTRIBUTES>(),
            (*tg).GroupCount as usize,
        )
    }
}

/// Whether this process runs under Wine (ntdll exports `wine_get_version`, which Windows'
/// ntdll does not). Tests use it to tell "Wine does not enforce this" from a failure; nothing
/// in the confinement itself trusts it.
pub fn running_under_wine() -> bool {
    use windows_sys::Win32::System::LibraryLoader::{GetModuleHandleW, GetProcAddress};
    let ntdll: Vec<u16> = "ntdll.dll\0".encode_utf16().collect();
    // SAFETY: a NUL-terminated name; ntdll is loaded in every process, and the module handle is
    // not owned (GetModuleHandleW adds no reference).
    let module = unsafe { GetModuleHandleW(ntdll.as_ptr()) };
    if module.is_null() {
        return false;
    }
    // SAFETY: a valid module handle and a NUL-terminated ANSI name; the result is only compared
    // with None, never called.
    unsafe { GetProcAddress(module, c"wine_get_version".as_ptr().cast()) }.is_some()
}
