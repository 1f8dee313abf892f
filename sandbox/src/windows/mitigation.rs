//! Process mitigation policies a process reads and sets on itself, and the spawner reads of a
//! helper (`GetProcessMitigationPolicy` / `SetProcessMitigationPolicy`), by the names `wincfg`
//! lists.

use super::ffi::{invalid, last, WinError};
use crate::wincfg::CHILD_PROCESS_RESTRICTED;
use windows_sys::Win32::Foundation::HANDLE;
use windows_sys::Win32::System::Threading::{
    GetCurrentProcess, GetProcessMitigationPolicy, ProcessChildProcessPolicy,
    ProcessDynamicCodePolicy, ProcessExtensionPointDisablePolicy, ProcessImageLoadPolicy,
    ProcessStrictHandleCheckPolicy, ProcessSystemCallDisablePolicy, SetProcessMitigationPolicy,
    PROCESS_MITIGATION_POLICY,
};

const MECH: &str = "process mitigations";

/// For one policy name: the class, the flags to set, the bit that shows it in force. Every
/// PROCESS_MITIGATION_*_POLICY struct is one 32-bit flags word.
fn class_of(name: &str) -> Option<(PROCESS_MITIGATION_POLICY, u32, u32)> {
    Some(match name {
        // ProhibitDynamicCode
        "PROCESS_CREATION_MITIGATION_POLICY_PROHIBIT_DYNAMIC_CODE_ALWAYS_ON" => {
            (ProcessDynamicCodePolicy, 0x1, 0x1)
        }
        // RaiseExceptionOnInvalidHandleReference | HandleExceptionsPermanentlyEnabled
        "PROCESS_CREATION_MITIGATION_POLICY_STRICT_HANDLE_CHECKS_ALWAYS_ON" => {
            (ProcessStrictHandleCheckPolicy, 0x3, 0x1)
        }
        // DisableExtensionPoints
        "PROCESS_CREATION_MITIGATION_POLICY_EXTENSION_POINT_DISABLE_ALWAYS_ON" => {
            (ProcessExtensionPointDisablePolicy, 0x1, 0x1)
        }
        // NoRemoteImages
        "PROCESS_CREATION_MITIGATION_POLICY_IMAGE_LOAD_NO_REMOTE_ALWAYS_ON" => {
            (ProcessImageLoadPolicy, 0x1, 0x1)
        }
        // DisallowWin32kSystemCalls
        "PROCESS_CREATION_MITIGATION_POLICY_WIN32K_SYSTEM_CALL_DISABLE_ALWAYS_ON" => {
            (ProcessSystemCallDisablePolicy, 0x1, 0x1)
        }
        // NoChildProcessCreation
        CHILD_PROCESS_RESTRICTED => (ProcessChildProcessPolicy, 0x1, 0x1),
        _ => return None,
    })
}

/// Whether the named policy is in force for this process. A system that answers without
/// filling the buffer (Wine's stub) reads as "not in force": the word starts at 0.
pub fn in_force(name: &str) -> Result<bool, WinError> {
    // SAFETY: GetCurrentProcess returns a pseudo-handle that needs no close.
    in_force_in(unsafe { GetCurrentProcess() }, name)
}

/// Whether the named policy is in force for `process` (a handle with
/// PROCESS_QUERY_INFORMATION, or the current-process pseudo-handle).
pub(crate) fn in_force_in(process: HANDLE, name: &str) -> Result<bool, WinError> {
    let (class, _, bit) =
        class_of(name).ok_or_else(|| invalid(MECH, format!("unknown mitigation {name}")))?;
    let mut flags = 0u32;
    // SAFETY: a process handle as above; `flags` is the 4-byte struct the class fills.
    let ok =
        unsafe { GetProcessMitigationPolicy(process, class, (&mut flags as *mut u32).cast(), 4) };
    if ok == 0 {
        return Err(last(MECH, "GetProcessMitigationPolicy"));
    }
    Ok(flags & bit != 0)
}

/// Sets the named policy on this process. Callers read it back with [`in_force`]: a call that
/// succeeds is not evidence that the policy holds.
pub fn set(name: &str) -> Result<(), WinError> {
    let (class, flags, _) =
        class_of(name).ok_or_else(|| invalid(MECH, format!("unknown mitigation {name}")))?;
    // SAFETY: `flags` is the 4-byte struct the class expects, alive for the call.
    if unsafe { SetProcessMitigationPolicy(class, (&flags as *const u32).cast(), 4) } == 0 {
        return Err(last(MECH, "SetProcessMitigationPolicy"));
    }
    Ok(())
}

/// Makes each named policy hold for this process: already in force (set at spawn), or set now
/// and read back. Returns one line per policy that does not hold, saying why.
pub fn ensure(names: &[&'static str]) -> Vec<String> {
    let mut missing = Vec::new();
    for &name in names {
        let short = name
            .trim_start_matches("PROCESS_CREATION_MITIGATION_POLICY_")
            .trim_start_matches("PROCESS_CREATION_");
        match in_force(name) {
            Ok(true) => continue,
            Ok(false) => {}
            Err(e) => {
                missing.push(format!("mitigation {short}: cannot read it: {e}"));
                continue;
            }
        }
        if let Err(e) = set(name) {
            missing.push(format!(
                "mitigation {short}: not set at spawn, and setting it failed: {e}"
            ));
            continue;
        }
        match in_force(name) {
            Ok(true) => {}
            Ok(false) => missing.push(format!(
                "mitigation {short}: SetProcessMitigationPolicy succeeded but the policy is not in force"
            )),
            Err(e) => missing.push(format!("mitigation {short}: set, but cannot read it back: {e}")),
        }
    }
    missing
}
