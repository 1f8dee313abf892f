//! The restricted token: made by the spawner from its own token, checked by the helper on its
//! own.

use super::acl::explicit_access;
use super::ffi::{
    invalid, last, owned, raw, returned, sid_string, token_groups, token_info, Local, OwnedSid,
    WinError,
};
use crate::wincfg::{RestrictedToken, TokenFacts};
use std::os::windows::io::{AsHandle, BorrowedHandle, OwnedHandle};
use windows_sys::core::BOOL;
use windows_sys::Win32::Foundation::{ERROR_SUCCESS, GENERIC_ALL, HANDLE, LUID};
use windows_sys::Win32::Security::Authorization::{
    SetEntriesInAclW, SetSecurityInfo, EXPLICIT_ACCESS_W, GRANT_ACCESS, SE_KERNEL_OBJECT,
};
use windows_sys::Win32::Security::{
    CreateRestrictedToken, IsTokenRestricted, SetTokenInformation, TokenAccessInformation,
    TokenAppContainerSid, TokenDefaultDacl, TokenGroups, TokenIsAppContainer, TokenPrivileges,
    TokenRestrictedSids, TokenUser, ACL, DACL_SECURITY_INFORMATION, DISABLE_MAX_PRIVILEGE,
    LUID_AND_ATTRIBUTES, SECURITY_CAPABILITIES, SID_AND_ATTRIBUTES, TOKEN_ACCESS_INFORMATION,
    TOKEN_ADJUST_DEFAULT, TOKEN_APPCONTAINER_INFORMATION, TOKEN_ASSIGN_PRIMARY, TOKEN_DEFAULT_DACL,
    TOKEN_DUPLICATE, TOKEN_PRIVILEGES, TOKEN_QUERY, TOKEN_USER, WRITE_RESTRICTED,
};
use windows_sys::Win32::System::LibraryLoader::{GetModuleHandleW, GetProcAddress};
use windows_sys::Win32::System::Threading::{GetCurrentProcess, OpenProcessToken};

const MECH: &str = "restricted token";
const CONTAINER: &str = "app container";

/// `SE_GROUP_USE_FOR_DENY_ONLY` (winnt.h): the group only ever denies.
const DENY_ONLY: u32 = 0x10;
/// The one privilege `DISABLE_MAX_PRIVILEGE` keeps (traversal checks).
const SYSTEM: &str = "S-1-5-18";
/// `TOKEN_WRITE_RESTRICTED` in TOKEN_ACCESS_INFORMATION.Flags (winnt.h; no windows-sys constant).
const TOKEN_WRITE_RESTRICTED: u32 = 0x0008;
/// Standard access rights (winnt.h), to open this process's token for its DACL.
const READ_CONTROL: u32 = 0x0002_0000;
const WRITE_DAC: u32 = 0x0004_0000;
const ADMINISTRATORS: &str = "S-1-5-32-544";

fn open_own_token(access: u32) -> Result<OwnedHandle, WinError> {
    let mut h = std::ptr::null_mut();
    // SAFETY: GetCurrentProcess is a pseudo-handle needing no close; `h` receives a new token
    // handle that `owned` takes.
    if unsafe { OpenProcessToken(GetCurrentProcess(), access, &mut h) } == 0 {
        return Err(last(MECH, "OpenProcessToken"));
    }
    owned(h, MECH, "OpenProcessToken")
}

/// The SID text in a `deny only` entry (`S-1-5-32-544 (Administrators)`).
fn sid_of(entry: &str) -> &str {
    entry.split_whitespace().next().unwrap_or(entry)
}

/// `CreateRestrictedToken` from this process's token, as `spec` says, with a default DACL that
/// lets the restricted process open its own process, thread and token (objects it creates get
/// that DACL; without the restricting SIDs in it, the second access check refuses the process
/// its own objects).
pub(crate) fn create(
    spec: &RestrictedToken,
    capability: &OwnedSid,
) -> Result<OwnedHandle, WinError> {
    if !spec.disable_max_privilege {
        return Err(invalid(
            MECH,
            "a token that keeps its privileges is not built",
        ));
    }
    // The new token's handle has the access of this one: WRITE_DAC to set the token object's
    // DACL below, ADJUST_DEFAULT for its default DACL.
    let base = open_own_token(
        TOKEN_DUPLICATE
            | TOKEN_QUERY
            | TOKEN_ASSIGN_PRIMARY
            | TOKEN_ADJUST_DEFAULT
            | READ_CONTROL
            | WRITE_DAC,
    )?;
    let disable: Vec<OwnedSid> = spec
        .deny_only
        .iter()
        .map(|d| OwnedSid::parse(sid_of(d)))
        .collect::<Result<_, _>>()?;
    let restricting: Vec<OwnedSid> = spec
        .restricting
        .iter()
        .map(|s| OwnedSid::parse(&s.0))
        .collect::<Result<_, _>>()?;
    if !spec
        .restricting
        .iter()
        .any(|s| OwnedSid::parse(&s.0).is_ok())
    {
        return Err(invalid(MECH, "no restricting SID"));
    }
    let as_attrs = |sids: &[OwnedSid]| -> Vec<SID_AND_ATTRIBUTES> {
        sids.iter()
            .map(|s| SID_AND_ATTRIBUTES {
                Sid: s.as_psid(),
                Attributes: 0,
            })
            .collect()
    };
    let disable_attrs = as_attrs(&disable);
    let restrict_attrs = as_attrs(&restricting);
    let mut flags = DISABLE_MAX_PRIVILEGE;
    if spec.write_restricted {
        flags |= WRITE_RESTRICTED;
    }
    let mut new = std::ptr::null_mut();
    // SAFETY: the SID arrays point into OwnedSids alive for the call; their counts are their
    // lengths; `new` receives a new token handle that `owned` takes.
    let ok = unsafe {
        CreateRestrictedToken(
            raw(base.as_handle()),
            flags,
            disable_attrs.len() as u32,
            disable_attrs.as_ptr(),
            0,
            std::ptr::null(),
            restrict_attrs.len() as u32,
            restrict_attrs.as_ptr(),
            &mut new,
        )
    };
    if ok == 0 {
        return Err(last(MECH, "CreateRestrictedToken"));
    }
    let token = owned(new, MECH, "CreateRestrictedToken")?;
    set_dacls(token.as_handle(), capability, None)?;
    Ok(token)
}

/// kernelbase's `CreateAppContainerToken` (Windows 8 and later): a lowbox token made from a
/// base token, in the AppContainer and with the capabilities `SECURITY_CAPABILITIES` names,
/// with the AppContainer's named-object directories made for it. Not in the SDK's import
/// libraries, so looked up by name, as Chromium's lowbox does.
type CreateAppContainerToken =
    unsafe extern "system" fn(HANDLE, *const SECURITY_CAPABILITIES, *mut HANDLE) -> BOOL;

/// The lowbox token of `base` (a token [`create`] made) in the AppContainer `container`, with no
/// capability: every access must then pass a third check, against ACEs that name `container`
/// (or ALL APPLICATION PACKAGES), and the network is refused. Its DACLs as [`create`] sets
/// them, with `container` added (without it the process could not query its own token).
pub(crate) fn lowbox(
    base: BorrowedHandle<'_>,
    container: &OwnedSid,
    capability: &OwnedSid,
) -> Result<OwnedHandle, WinError> {
    let name: Vec<u16> = "kernelbase.dll\0".encode_utf16().collect();
    // SAFETY: a NUL-terminated name; kernelbase is loaded in every process (kernel32 forwards
    // to it), and the module handle is not owned (GetModuleHandleW adds no reference).
    let module = unsafe { GetModuleHandleW(name.as_ptr()) };
    if module.is_null() {
        return Err(last(CONTAINER, "GetModuleHandleW(kernelbase.dll)"));
    }
    // SAFETY: a valid module handle and a NUL-terminated ANSI name.
    let Some(found) =
        (unsafe { GetProcAddress(module, c"CreateAppContainerToken".as_ptr().cast()) })
    else {
        return Err(invalid(
            CONTAINER,
            "kernelbase.dll has no CreateAppContainerToken (every Windows from 8 on has it)",
        ));
    };
    // SAFETY: the export has this signature (BOOL (HANDLE, PSECURITY_CAPABILITIES, PHANDLE),
    // as Chromium's restricted_token_utils declares it); both are plain function pointers.
    let make: CreateAppContainerToken = unsafe { std::mem::transmute(found) };
    let caps = SECURITY_CAPABILITIES {
        AppContainerSid: container.as_psid(),
        Capabilities: std::ptr::null_mut(),
        CapabilityCount: 0,
        Reserved: 0,
    };
    let mut new = std::ptr::null_mut();
    // SAFETY: a valid token handle; `caps` and the SID it points to outlive the call; no
    // capability array (count 0); `new` receives a new token handle that `owned` takes.
    if unsafe { make(raw(base), &caps, &mut new) } == 0 {
        return Err(last(CONTAINER, "CreateAppContainerToken"));
    }
    let token = owned(new, CONTAINER, "CreateAppContainerToken")?;
    set_dacls(token.as_handle(), capability, Some(container))?;
    Ok(token)
}

/// GENERIC_ALL for the user, SYSTEM, RESTRICTED, the capability SID and the AppContainer's, if
/// any: as the token's default DACL (what the child's own process and thread objects get) and on
/// the token object itself (so the helper can query its own token to verify it).
fn set_dacls(
    token: BorrowedHandle<'_>,
    capability: &OwnedSid,
    container: Option<&OwnedSid>,
) -> Result<(), WinError> {
    let user_buf = token_info(token, TokenUser, "GetTokenInformation(TokenUser)")?;
    // SAFETY: token_info filled the buffer with a TOKEN_USER; its SID lives in the same buffer.
    let user_sid = unsafe { (*(user_buf.as_ptr() as *const TOKEN_USER)).User.Sid };
    let system = OwnedSid::parse(SYSTEM)?;
    let restricted = OwnedSid::parse(crate::wincfg::RESTRICTED)?;
    let entries: Vec<EXPLICIT_ACCESS_W> = [
        user_sid,
        system.as_psid(),
        restricted.as_psid(),
        capability.as_psid(),
    ]
    .into_iter()
    .chain(container.map(OwnedSid::as_psid))
    .map(|sid| explicit_access(sid, GENERIC_ALL, GRANT_ACCESS, 0))
    .collect();
    let mut acl: *mut ACL = std::ptr::null_mut();
    // SAFETY: `entries` and the SIDs they point to outlive the call; no old ACL; `acl`
    // receives a LocalAlloc'ed ACL that `Local` frees.
    let r = unsafe {
        SetEntriesInAclW(
            entries.len() as u32,
            entries.as_ptr(),
            std::ptr::null(),
            &mut acl,
        )
    };
    if r != ERROR_SUCCESS {
        return Err(returned(MECH, "SetEntriesInAclW(default DACL)", r));
    }
    let _acl = Local(acl.cast());
    let dd = TOKEN_DEFAULT_DACL { DefaultDacl: acl };
    // SAFETY: `dd` points to the ACL alive in `_acl`; the size is the struct's.
    let ok = unsafe {
        SetTokenInformation(
            raw(token),
            TokenDefaultDacl,
            (&dd as *const TOKEN_DEFAULT_DACL).cast(),
            std::mem::size_of::<TOKEN_DEFAULT_DACL>() as u32,
        )
    };
    if ok == 0 {
        return Err(last(MECH, "SetTokenInformation(TokenDefaultDacl)"));
    }
    // SAFETY: a valid token handle and ACL; owner, group and SACL are not set (null).
    let r = unsafe {
        SetSecurityInfo(
            raw(token),
            SE_KERNEL_OBJECT,
            DACL_SECURITY_INFORMATION,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            acl,
            std::ptr::null(),
        )
    };
    if r != ERROR_SUCCESS {
        return Err(returned(MECH, "SetSecurityInfo(token DACL)", r));
    }
    Ok(())
}

/// Reads this process's token.
pub fn own_token_facts() -> Result<TokenFacts, WinError> {
    let token = open_own_token(TOKEN_QUERY)?;
    token_facts(token.as_handle())
}

/// What the token of another process says: the spawner's view of a helper it started (a
/// process handle with PROCESS_QUERY_(LIMITED_)INFORMATION).
pub(crate) fn process_token_facts(process: BorrowedHandle<'_>) -> Result<TokenFacts, WinError> {
    let mut h = std::ptr::null_mut();
    // SAFETY: a valid process handle; `h` receives a new token handle that `owned` takes.
    if unsafe { OpenProcessToken(raw(process), TOKEN_QUERY, &mut h) } == 0 {
        return Err(last(MECH, "OpenProcessToken(of the helper)"));
    }
    let token = owned(h, MECH, "OpenProcessToken")?;
    token_facts(token.as_handle())
}

/// Reads a token (opened with TOKEN_QUERY).
pub(crate) fn token_facts(t: BorrowedHandle<'_>) -> Result<TokenFacts, WinError> {
    // SAFETY: a valid token handle with TOKEN_QUERY.
    let restricted = unsafe { IsTokenRestricted(raw(t)) } != 0;
    // An unrestricted token has no restricting SIDs by definition; asking anyway would make a
    // system that cannot list them (Wine) look like a read failure instead of "not restricted".
    let restricting_sids = if restricted {
        let rs = token_info(
            t,
            TokenRestrictedSids,
            "GetTokenInformation(TokenRestrictedSids)",
        )?;
        token_groups(&rs)
            .iter()
            .map(|g| sid_string(g.Sid))
            .collect::<Result<_, _>>()?
    } else {
        Vec::new()
    };
    // Whether the restricting SIDs are checked for writes only: TOKEN_WRITE_RESTRICTED in
    // TokenAccessInformation's flags (Windows 8 and later). Read only for a restricted token;
    // a failure is kept as the reason, so the verdict can name it.
    let write_restricted = if restricted {
        token_info(
            t,
            TokenAccessInformation,
            "GetTokenInformation(TokenAccessInformation)",
        )
        .map(|buf| {
            // SAFETY: token_info filled the buffer with a TOKEN_ACCESS_INFORMATION (its
            // pointers point into the same buffer; only the Flags integer is read).
            let flags = unsafe { (*(buf.as_ptr() as *const TOKEN_ACCESS_INFORMATION)).Flags };
            flags & TOKEN_WRITE_RESTRICTED != 0
        })
        .map_err(|e| e.to_string())
    } else {
        Ok(false)
    };
    let groups = token_info(t, TokenGroups, "GetTokenInformation(TokenGroups)")?;
    let mut administrators_usable = false;
    for g in token_groups(&groups) {
        if sid_string(g.Sid)? == ADMINISTRATORS && g.Attributes & DENY_ONLY == 0 {
            administrators_usable = true;
        }
    }
    let privs = token_info(t, TokenPrivileges, "GetTokenInformation(TokenPrivileges)")?;
    let tp = privs.as_ptr() as *const TOKEN_PRIVILEGES;
    // SAFETY: token_info filled the buffer with a TOKEN_PRIVILEGES followed by its
    // PrivilegeCount entries, all inside `privs`, which outlives the slice.
    let list: &[LUID_AND_ATTRIBUTES] = unsafe {
        std::slice::from_raw_parts(
            std::ptr::addr_of!((*tp).Privileges).cast::<LUID_AND_ATTRIBUTES>(),
            (*tp).PrivilegeCount as usize,
        )
    };
    let privileges = list.iter().map(|p| privilege_name(&p.Luid)).collect();
    let app_container = app_container_of(t).map_err(|e| e.to_string());
    Ok(TokenFacts {
        app_container,
        restricted,
        restricting_sids,
        privileges,
        administrators_usable,
        write_restricted,
    })
}

/// The AppContainer SID of a token that is in one (`TokenIsAppContainer`, then
/// `TokenAppContainerSid`); `None` for one that is not.
fn app_container_of(t: BorrowedHandle<'_>) -> Result<Option<String>, WinError> {
    let is = token_info(
        t,
        TokenIsAppContainer,
        "GetTokenInformation(TokenIsAppContainer)",
    )?;
    // SAFETY: token_info filled at least a DWORD (the class's size) at the start of `is`.
    if unsafe { *(is.as_ptr() as *const u32) } == 0 {
        return Ok(None);
    }
    let info = token_info(
        t,
        TokenAppContainerSid,
        "GetTokenInformation(TokenAppContainerSid)",
    )?;
    // SAFETY: token_info filled the buffer with a TOKEN_APPCONTAINER_INFORMATION whose SID
    // points into the same buffer.
    let sid =
        unsafe { (*(info.as_ptr() as *const TOKEN_APPCONTAINER_INFORMATION)).TokenAppContainer };
    if sid.is_null() {
        return Err(invalid(
            CONTAINER,
            "the token says it is in an AppContainer but names none",
        ));
    }
    sid_string(sid).map(Some)
}

/// The well-known privileges by LUID (winnt.h, `SE_*_PRIVILEGE`, fixed values on every Windows).
/// Named from this table rather than with `LookupPrivilegeNameW`, which asks the LSA over RPC:
/// a fully restricted token may not reach it, and the check must not fail for that reason.
const PRIVILEGES: &[&str] = &[
    "SeCreateTokenPrivilege",
    "SeAssignPrimaryTokenPrivilege",
    "SeLockMemoryPrivilege",
    "SeIncreaseQuotaPrivilege",
    "SeMachineAccountPrivilege",
    "SeTcbPrivilege",
    "SeSecurityPrivilege",
    "SeTakeOwnershipPrivilege",
    "SeLoadDriverPrivilege",
    "SeSystemProfilePrivilege",
    "SeSystemtimePrivilege",
    "SeProfileSingleProcessPrivilege",
    "SeIncreaseBasePriorityPrivilege",
    "SeCreatePagefilePrivilege",
    "SeCreatePermanentPrivilege",
    "SeBackupPrivilege",
    "SeRestorePrivilege",
    "SeShutdownPrivilege",
    "SeDebugPrivilege",
    "SeAuditPrivilege",
    "SeSystemEnvironmentPrivilege",
    "SeChangeNotifyPrivilege",
    "SeRemoteShutdownPrivilege",
    "SeUndockPrivilege",
    "SeSyncAgentPrivilege",
    "SeEnableDelegationPrivilege",
    "SeManageVolumePrivilege",
    "SeImpersonatePrivilege",
    "SeCreateGlobalPrivilege",
    "SeTrustedCredManAccessPrivilege",
    "SeRelabelPrivilege",
    "SeIncreaseWorkingSetPrivilege",
    "SeTimeZonePrivilege",
    "SeCreateSymbolicLinkPrivilege",
    "SeDelegateSessionUserImpersonatePrivilege",
];

/// The name of a privilege LUID; an unknown one by its value (still counted as held).
fn privilege_name(luid: &LUID) -> String {
    // The table starts at SE_CREATE_TOKEN_PRIVILEGE, LUID 2.
    match (
        luid.HighPart,
        usize::try_from(luid.LowPart)
            .ok()
            .and_then(|l| l.checked_sub(2)),
    ) {
        (0, Some(i)) if i < PRIVILEGES.len() => PRIVILEGES[i].to_string(),
        _ => format!("privilege LUID {}:{}", luid.HighPart, luid.LowPart),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn privilege_luids_name_the_well_known_privileges() {
        let name = |low| {
            privilege_name(&LUID {
                LowPart: low,
                HighPart: 0,
            })
        };
        assert_eq!(name(2), "SeCreateTokenPrivilege");
        // SE_CHANGE_NOTIFY_PRIVILEGE, the one DISABLE_MAX_PRIVILEGE keeps.
        assert_eq!(name(23), crate::wincfg::CHANGE_NOTIFY);
        assert_eq!(name(36), "SeDelegateSessionUserImpersonatePrivilege");
        assert_eq!(name(37), "privilege LUID 0:37");
        assert_eq!(name(1), "privilege LUID 0:1");
    }
}
