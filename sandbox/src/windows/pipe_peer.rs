//! A named pipe's client as Windows knows it: its process id from the pipe, its user from that
//! process's token. The counterpart of SO_PEERCRED for the endpoints the fronts connect to.

use super::ffi::{last, owned, raw, sid_string, token_info, WinError};
use std::os::windows::io::{AsHandle, BorrowedHandle};
use windows_sys::Win32::Security::{TokenUser, TOKEN_QUERY, TOKEN_USER};
use windows_sys::Win32::System::Pipes::{GetNamedPipeClientProcessId, GetNamedPipeServerProcessId};
use windows_sys::Win32::System::Threading::{
    GetCurrentProcess, OpenProcess, OpenProcessToken, PROCESS_QUERY_LIMITED_INFORMATION,
};

const MECH: &str = "named pipe peer";

/// The user SID of the process `process` (a handle with query rights).
fn user_of(process: BorrowedHandle<'_>) -> Result<String, WinError> {
    let mut token = std::ptr::null_mut();
    // SAFETY: a process handle we borrow with query rights; `token` receives a new handle that
    // `owned` takes.
    if unsafe { OpenProcessToken(raw(process), TOKEN_QUERY, &mut token) } == 0 {
        return Err(last(MECH, "OpenProcessToken"));
    }
    let token = owned(token, MECH, "OpenProcessToken")?;
    let buf = token_info(
        token.as_handle(),
        TokenUser,
        "GetTokenInformation(TokenUser)",
    )?;
    // SAFETY: token_info filled `buf` with a TOKEN_USER whose SID points into `buf`, which
    // outlives the read.
    let sid = unsafe { (*(buf.as_ptr() as *const TOKEN_USER)).User.Sid };
    sid_string(sid)
}

/// This process's user SID.
pub fn current_user() -> Result<String, WinError> {
    // SAFETY: the current-process pseudo-handle is always valid and needs no closing.
    let me = unsafe { BorrowedHandle::borrow_raw(GetCurrentProcess()) };
    user_of(me)
}

/// The client process id and user SID of the server end `pipe`.
pub fn client(pipe: BorrowedHandle<'_>) -> Result<(u32, String), WinError> {
    let mut pid = 0u32;
    // SAFETY: a pipe handle we borrow; the call writes only `pid`.
    if unsafe { GetNamedPipeClientProcessId(raw(pipe), &mut pid) } == 0 {
        return Err(last(MECH, "GetNamedPipeClientProcessId"));
    }
    process_user(pid)
}

/// The server process id and user SID of the client end `pipe`.
pub fn server(pipe: BorrowedHandle<'_>) -> Result<(u32, String), WinError> {
    let mut pid = 0u32;
    // SAFETY: a pipe handle we borrow; the call writes only `pid`.
    if unsafe { GetNamedPipeServerProcessId(raw(pipe), &mut pid) } == 0 {
        return Err(last(MECH, "GetNamedPipeServerProcessId"));
    }
    process_user(pid)
}

fn process_user(pid: u32) -> Result<(u32, String), WinError> {
    // SAFETY: opens the peer process with query rights only; `owned` takes the handle (or
    // turns a null into the error).
    let process = owned(
        unsafe { OpenProcess(PROCESS_QUERY_LIMITED_INFORMATION, 0, pid) },
        MECH,
        "OpenProcess",
    )?;
    Ok((pid, user_of(process.as_handle())?))
}
