//! Handing a connected socket or a pipe end from the router to a helper on Windows, where a
//! pipe carries no handles (Linux: `SCM_RIGHTS`).
//!
//! The helper's process descriptor lets no other process of the user open it for more than
//! waiting on it, so the router cannot open it by pid (which is what `WSADuplicateSocketW`
//! does). Instead the spawner, which made the helper and holds a full handle to it, duplicates
//! into the router a handle to the helper with `PROCESS_DUP_HANDLE` (and the limited query
//! that lets the router check whose it is) and nothing else ([`process_for_handles_into`],
//! [`adopt_helper_process`]); only for a helper whose channel takes handles (the net-helper's
//! sockets, the servers-helper's pipes).
//! The router duplicates each client socket (or pipe end) into the helper through it
//! ([`socket_into`], [`pipe_into`]) and sends the value after the frame; the helper adopts it
//! ([`adopt_passed_socket`], [`adopt_passed_pipe`]), refusing a value that is not an open
//! stream socket (or pipe) of its own.
//!
//! A socket handle duplicated into another process is what `WSADuplicateSocketW` makes for the
//! system's own providers, and what inheritance gives a child; a layered service provider
//! installed on the machine (deprecated since Windows 8) could keep state in the router that the
//! helper's copy lacks. Never run on a real Windows machine; under Wine the whole path runs
//! (`broker/tests/windows_broker.rs`).

use super::ffi::{invalid, last, raw, WinError};
use super::spawn::ConfinedChild;
use super::spawner::{duplicate_raw, open_handle};
use ipc_schema::helper::Passed;
use std::os::windows::io::{
    AsRawSocket, BorrowedHandle, BorrowedSocket, FromRawHandle, FromRawSocket, OwnedHandle,
};
use windows_sys::Win32::Foundation::HANDLE;
use windows_sys::Win32::Networking::WinSock::{
    bind, getsockopt, listen, setsockopt, WSASocketW, WSAStartup, AF_INET, FROM_PROTOCOL_INFO,
    INVALID_SOCKET, IPPROTO_TCP, SOCKADDR, SOCKADDR_IN, SOCKET, SOCK_STREAM, SOL_SOCKET, SOMAXCONN,
    SO_ACCEPTCONN, SO_EXCLUSIVEADDRUSE, SO_TYPE, WSADATA, WSAENOTSOCK, WSAPROTOCOL_INFOW,
    WSA_FLAG_NO_HANDLE_INHERIT, WSA_FLAG_OVERLAPPED,
};
use windows_sys::Win32::System::Threading::{
    GetProcessId, PROCESS_DUP_HANDLE, PROCESS_QUERY_LIMITED_INFORMATION,
};

const MECH: &str = "socket hand-over";

/// What the router's handle to a helper may do: duplicate handles into it (and out of it: the
/// router is the more trusted of the two) and say whose it is. Not read or write its memory,
/// not end it (the spawner does that).
const HELPER_ACCESS: u32 = PROCESS_DUP_HANDLE | PROCESS_QUERY_LIMITED_INFORMATION;

/// The spawner: duplicates a handle to `child` with [`HELPER_ACCESS`] into `router` (a process
/// handle with `PROCESS_DUP_HANDLE`); its value there.
pub fn process_for_handles_into(
    router: BorrowedHandle<'_>,
    child: &ConfinedChild,
) -> Result<u64, WinError> {
    duplicate_raw(
        raw(child.process()),
        router,
        Some(HELPER_ACCESS),
        "DuplicateHandle(the helper, into the router)",
    )
}

/// The router: adopts the helper handle the spawner sent by `value`, refused unless it is an
/// open handle of this process to the process `pid`.
pub fn adopt_helper_process(value: u64, pid: u32) -> Result<OwnedHandle, WinError> {
    let h = open_handle(value, MECH, "GetHandleInformation(the helper's process)")?;
    // SAFETY: an open handle (above); GetProcessId only queries it, and fails (0) for a handle
    // that is not a process or lacks the query right.
    let got = unsafe { GetProcessId(h) };
    if got != pid {
        return Err(invalid(
            MECH,
            format!("handle {value:#x} the spawner sent is not the helper's process {pid} (it names process {got})"),
        ));
    }
    // SAFETY: the spawner duplicated it into this process for the router alone, so nothing
    // else here owns it; it is open and the helper's process (checked above).
    Ok(unsafe { OwnedHandle::from_raw_handle(h) })
}

/// The router: duplicates `socket` into the helper behind `helper` (from
/// [`adopt_helper_process`]); its value there, which the helper adopts with
/// [`adopt_passed_socket`]. Ours stays ours (the caller drops it once the frame is written).
pub fn socket_into(
    helper: BorrowedHandle<'_>,
    socket: BorrowedSocket<'_>,
) -> Result<Passed, WinError> {
    duplicate_raw(
        socket.as_raw_socket() as usize as HANDLE,
        helper,
        None,
        "DuplicateHandle(a socket, into the helper)",
    )
    .map(Passed)
}

/// The router: duplicates a pipe end (a remote server's connection, from `channel_pair`)
/// into the helper behind `helper`; its value there, which the helper adopts
/// with [`adopt_passed_pipe`]. Ours stays ours (the caller drops it once the frame is written).
pub fn pipe_into(helper: BorrowedHandle<'_>, pipe: BorrowedHandle<'_>) -> Result<Passed, WinError> {
    duplicate_raw(
        raw(pipe),
        helper,
        None,
        "DuplicateHandle(a pipe, into the helper)",
    )
    .map(Passed)
}

/// The helper: adopts the pipe end the router duplicated into this process, by the value that
/// came after its frame ([`pipe_into`]). Refused unless the value names an open handle of this
/// process that is a pipe.
pub fn adopt_passed_pipe(passed: Passed) -> Result<OwnedHandle, WinError> {
    super::spawner::adopt_pipe(passed.0, MECH, "the passed pipe")
}

/// Winsock started for this process (reference-counted: std's own start changes nothing).
fn winsock() -> Result<(), WinError> {
    // SAFETY: WSADATA is plain integers and byte arrays, for which all zeroes is a value.
    let mut data: WSADATA = unsafe { std::mem::zeroed() };
    // SAFETY: WSAStartup writes `data` only.
    let rc = unsafe { WSAStartup(0x0202, &mut data) };
    if rc != 0 {
        return Err(WinError::Call {
            mechanism: MECH,
            call: "WSAStartup",
            code: rc as u32,
        });
    }
    Ok(())
}

/// The router: a listening socket on `127.0.0.1:port` that no other socket can bind beside
/// (`SO_EXCLUSIVEADDRUSE`, set before the bind: without it a process of the user could bind the
/// same address with `SO_REUSEADDR` and take the connections, and the proxy token in them).
/// `Err` with the Win32 error of the bind when the port is taken (`WSAEADDRINUSE`, or
/// `WSAEACCES` for a port the system reserved).
pub fn exclusive_loopback_listener(port: u16) -> Result<std::net::TcpListener, WinError> {
    winsock()?;
    // SAFETY: plain arguments and no protocol info; the result is checked. Not inheritable (as
    // std makes its sockets): no process the router starts gets it.
    let s = unsafe {
        WSASocketW(
            AF_INET as i32,
            SOCK_STREAM,
            IPPROTO_TCP,
            std::ptr::null(),
            0,
            WSA_FLAG_OVERLAPPED | WSA_FLAG_NO_HANDLE_INHERIT,
        )
    };
    if s == INVALID_SOCKET {
        return Err(last(MECH, "socket"));
    }
    // SAFETY: `s` is a socket this function just made and owns; nothing else holds it, so the
    // listener (or the drop on an error below) closes it exactly once.
    let listener = unsafe { std::net::TcpListener::from_raw_socket(s as u64) };
    let one: i32 = 1;
    // SAFETY: `one` is an int, valid for reads of its size, for the duration of the call.
    let rc = unsafe {
        setsockopt(
            s,
            SOL_SOCKET,
            SO_EXCLUSIVEADDRUSE,
            (&one as *const i32).cast(),
            std::mem::size_of::<i32>() as i32,
        )
    };
    if rc != 0 {
        return Err(last(MECH, "setsockopt(SO_EXCLUSIVEADDRUSE)"));
    }
    // SAFETY: SOCKADDR_IN is plain integers, for which all zeroes is a value.
    let mut addr: SOCKADDR_IN = unsafe { std::mem::zeroed() };
    addr.sin_family = AF_INET;
    addr.sin_port = port.to_be();
    addr.sin_addr.S_un.S_addr = u32::from(std::net::Ipv4Addr::LOCALHOST).to_be();
    // SAFETY: `addr` is a SOCKADDR_IN valid for reads of its size during the call.
    let rc = unsafe {
        bind(
            s,
            (&addr as *const SOCKADDR_IN).cast::<SOCKADDR>(),
            std::mem::size_of::<SOCKADDR_IN>() as i32,
        )
    };
    if rc != 0 {
        return Err(last(MECH, "bind"));
    }
    // SAFETY: a bound socket of ours.
    if unsafe { listen(s, SOMAXCONN as i32) } != 0 {
        return Err(last(MECH, "listen"));
    }
    Ok(listener)
}

/// An `int` socket option of `s` (which may not be a socket: then the call fails).
fn int_option(s: SOCKET, name: i32, what: &'static str) -> Result<i32, WinError> {
    let mut v: i32 = 0;
    let mut len = std::mem::size_of::<i32>() as i32;
    // SAFETY: `v` and `len` are valid for writes of an int; an invalid socket fails with
    // WSAENOTSOCK and writes nothing.
    let rc = unsafe { getsockopt(s, SOL_SOCKET, name, (&mut v as *mut i32).cast(), &mut len) };
    if rc != 0 {
        return Err(last(MECH, what));
    }
    Ok(v)
}

/// The helper: adopts the socket the router duplicated into this process, by the value that
/// came after its frame. Refused unless the value names an open handle of this process that is
/// a connected (not listening) stream socket; a socket refused is closed.
///
/// Windows' Winsock takes a socket handle it has not seen (one inherited or duplicated in) on
/// its first use. Wine's keeps a table of the sockets this process made and refuses any other
/// (`WSAENOTSOCK`), and its documented way in, `WSADuplicateSocketW` for this process, opens
/// this process by pid, which a helper's descriptor refuses. So under Wine only, the handle is
/// registered as Wine's `WSASocketW(FROM_PROTOCOL_INFO)` takes the handle `WSADuplicateSocketW`
/// made ([`register_under_wine`]); on Windows a socket Winsock does not take is refused.
pub fn adopt_passed_socket(passed: Passed) -> Result<std::net::TcpStream, WinError> {
    let value = passed.0;
    let h = open_handle(value, MECH, "GetHandleInformation(the passed socket)")? as usize;
    winsock()?;
    let what = "getsockopt(SO_TYPE) of the passed handle";
    let s = match int_option(h as SOCKET, SO_TYPE, what) {
        Ok(_) => h as SOCKET,
        Err(e) if e.code() == Some(WSAENOTSOCK as u32) && super::running_under_wine() => {
            register_under_wine(h as SOCKET)?
        }
        Err(e) => return Err(e),
    };
    // SAFETY: the router duplicated this socket into this process for this request alone (under
    // Wine `register_under_wine` returns the same handle), so nothing else here owns it; Winsock
    // knows it as a socket (above). Dropped, it is closed.
    let stream = unsafe { std::net::TcpStream::from_raw_socket(s as u64) };
    if int_option(s, SO_TYPE, what)? != SOCK_STREAM {
        return Err(invalid(
            MECH,
            format!("handle {value:#x} is not a stream socket"),
        ));
    }
    if int_option(s, SO_ACCEPTCONN, "getsockopt(SO_ACCEPTCONN)")? != 0 {
        return Err(invalid(
            MECH,
            format!("handle {value:#x} is a listening socket, not a connection"),
        ));
    }
    Ok(stream)
}

/// Wine only: a socket handle this process's Winsock does not know, made known the way Wine's
/// `WSASocketW` takes a socket from `WSADuplicateSocketW` (the handle in `dwServiceFlags3`,
/// `0xff00ff00` in `dwServiceFlags4`: Wine's own convention, dlls/ws2_32/socket.c), which
/// registers it in this process's table and returns it.
fn register_under_wine(raw: SOCKET) -> Result<SOCKET, WinError> {
    let value = u32::try_from(raw)
        .map_err(|_| invalid(MECH, format!("{raw:#x} is not a handle Wine can register")))?;
    // SAFETY: WSAPROTOCOL_INFOW is plain integers, GUIDs and arrays: all zeroes is a value.
    let mut info: WSAPROTOCOL_INFOW = unsafe { std::mem::zeroed() };
    info.dwServiceFlags3 = value;
    info.dwServiceFlags4 = 0xff00_ff00;
    // SAFETY: `info` is valid for reads during the call.
    let s = unsafe {
        WSASocketW(
            FROM_PROTOCOL_INFO,
            FROM_PROTOCOL_INFO,
            FROM_PROTOCOL_INFO,
            &info,
            0,
            WSA_FLAG_OVERLAPPED,
        )
    };
    if s == INVALID_SOCKET {
        return Err(last(MECH, "WSASocketW(FROM_PROTOCOL_INFO), under Wine"));
    }
    Ok(s)
}
