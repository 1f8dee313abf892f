//! The broker channel on Windows: one duplex byte pipe per helper, made by the spawner just
//! before the spawn. The spawner keeps the server end; the client end is the one handle in the
//! helper's handle list (`take_inherited_handle` adopts it there).
//!
//! No other process can take either end: the pipe is created as the first and only instance
//! (`FILE_FLAG_FIRST_PIPE_INSTANCE`, at most one instance, so a process that squatted the name
//! first makes the creation fail rather than stand in the middle), it refuses remote clients, and
//! its one client is connected before the name could be used by anyone else. Its name only has
//! to be unique.
//!
//! The router's end is synchronous for a caller that reads and writes from one thread (the
//! tests), overlapped for the router, which serves every channel with tokio ([`async_server`]).
//! The helper's end is synchronous for a helper that reads a
//! request, then writes its reply ([`ChannelIo::Blocking`]: Windows serialises synchronous reads
//! and writes on one handle, so a pending read would hold up a reply written from another
//! thread), and overlapped for a helper that answers out of order from tasks
//! ([`ChannelIo::Overlapped`], adopted by [`async_pipe`] into tokio).

use super::ffi::{last, owned, wide, WinError};
use std::hash::{BuildHasher, Hasher};
use std::os::windows::io::{AsRawHandle, OwnedHandle};
use windows_sys::Win32::Foundation::{ERROR_PIPE_CONNECTED, GENERIC_READ, GENERIC_WRITE};
use windows_sys::Win32::Storage::FileSystem::{
    CreateFileW, FILE_FLAG_FIRST_PIPE_INSTANCE, FILE_FLAG_OVERLAPPED, OPEN_EXISTING,
    PIPE_ACCESS_DUPLEX,
};
use windows_sys::Win32::System::Pipes::{
    ConnectNamedPipe, CreateNamedPipeW, PIPE_READMODE_BYTE, PIPE_REJECT_REMOTE_CLIENTS,
    PIPE_TYPE_BYTE, PIPE_WAIT,
};

const MECH: &str = "broker channel";
/// Each direction's buffer: a frame larger than this simply takes more than one write.
const BUFFER: u32 = 64 * 1024;

/// How the helper does I/O on its end of the channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChannelIo {
    /// Blocking reads and writes from one thread (`ipc_schema::helper::HelperChannel::serve`).
    Blocking,
    /// Overlapped: the helper adopts it with [`async_pipe`].
    Overlapped,
}

/// A connected duplex pipe: `(the router's end, the helper's end)`, each opened as its side
/// does I/O. Neither is inheritable; the spawn's handle list makes the helper's end inherited
/// by that one child.
pub fn channel_pair(
    io: ChannelIo,
    router: ChannelIo,
) -> Result<(OwnedHandle, OwnedHandle), WinError> {
    // Unique per process and call; std's per-process random hash keys make it unguessable too
    // (not needed for safety: see the module comment).
    static SERIAL: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let serial = SERIAL.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(serial);
    let name = format!(
        r"\\.\pipe\gatehouse-channel-{}-{serial}-{:016x}",
        std::process::id(),
        h.finish()
    );
    let wname = wide(MECH, name.as_ref())?;
    // SAFETY: `wname` is a NUL-terminated UTF-16 string that outlives the call; no security
    // attributes (the creator's default DACL, not inheritable).
    let server = unsafe {
        CreateNamedPipeW(
            wname.as_ptr(),
            PIPE_ACCESS_DUPLEX
                | FILE_FLAG_FIRST_PIPE_INSTANCE
                | match router {
                    ChannelIo::Blocking => 0,
                    ChannelIo::Overlapped => FILE_FLAG_OVERLAPPED,
                },
            PIPE_TYPE_BYTE | PIPE_READMODE_BYTE | PIPE_WAIT | PIPE_REJECT_REMOTE_CLIENTS,
            1,
            BUFFER,
            BUFFER,
            0,
            std::ptr::null(),
        )
    };
    let server = owned(server, MECH, "CreateNamedPipeW")?;
    let flags = match io {
        ChannelIo::Blocking => 0,
        ChannelIo::Overlapped => FILE_FLAG_OVERLAPPED,
    };
    // SAFETY: as above; not inheritable, no template.
    let client = unsafe {
        CreateFileW(
            wname.as_ptr(),
            GENERIC_READ | GENERIC_WRITE,
            0,
            std::ptr::null(),
            OPEN_EXISTING,
            flags,
            std::ptr::null_mut(),
        )
    };
    let client = owned(client, MECH, "CreateFileW(pipe client)")?;
    // The client is connected already (CreateFileW succeeded on the one instance); this only
    // confirms it (ERROR_PIPE_CONNECTED). An overlapped server would need an OVERLAPPED for the
    // call, and the confirmation adds nothing, so it is skipped there.
    if router == ChannelIo::Overlapped {
        return Ok((server, client));
    }
    // SAFETY: `server` is the open pipe created above; no OVERLAPPED (synchronous handle).
    if unsafe { ConnectNamedPipe(server.as_raw_handle(), std::ptr::null_mut()) } == 0 {
        let e = last(MECH, "ConnectNamedPipe");
        if e.code() != Some(ERROR_PIPE_CONNECTED) {
            return Err(e);
        }
    }
    Ok((server, client))
}

/// A helper the spawner started confined, and the router's end of its channel (opened as
/// `spawn_helper`'s `router` said).
pub struct SpawnedHelper {
    /// Owns the job: dropping it kills the helper and anything it started.
    pub child: super::ConfinedChild,
    pub channel: std::fs::File,
}

/// The environment a helper gets: only what the C runtime and the user's stores need to be
/// found (the Windows directory, the user's profile folders); Wine's own variables under Wine.
pub const HELPER_ENV: &[&str] = &[
    "SystemRoot",
    "windir",
    "USERPROFILE",
    "APPDATA",
    "LOCALAPPDATA",
    "WINEPREFIX",
    "WINEDEBUG",
];

/// The Windows counterpart of Linux's `process::spawn_helper`: starts `program` confined by
/// `policy` with a fresh [`channel_pair`]'s helper end (`io`; the router's end as `router`
/// says) as its one inherited handle (named by
/// `--channel-handle`, before `args`), no stdin or stdout, `stderr` as its stderr (the
/// spawner's log), and the environment [`HELPER_ENV`] allows.
pub fn spawn_helper(
    policy: &crate::wincfg::WindowsPolicy,
    program: &std::path::Path,
    args: &[std::ffi::OsString],
    io: ChannelIo,
    router: ChannelIo,
    stderr: std::os::windows::io::BorrowedHandle<'_>,
    opts: super::SpawnOptions,
) -> Result<SpawnedHelper, WinError> {
    use std::os::windows::io::AsHandle;
    let (server, client) = channel_pair(io, router)?;
    let mut all: Vec<std::ffi::OsString> = vec![
        crate::helper_args::CHANNEL_HANDLE.into(),
        (client.as_raw_handle() as usize).to_string().into(),
    ];
    all.extend(args.iter().cloned());
    let spec = super::SpawnSpec {
        program,
        args: all,
        cwd: None,
        env: super::env_from_allowlist(HELPER_ENV),
        inherit: vec![client.as_handle()],
        stdin: None,
        stdout: None,
        stderr: Some(stderr),
    };
    let child = super::spawn(policy, &spec, opts)?;
    // The helper holds its end now; this process must not keep it open (EOF would never come).
    drop(client);
    Ok(SpawnedHelper {
        child,
        channel: std::fs::File::from(server),
    })
}

/// Adopts the helper's end of an overlapped channel ([`ChannelIo::Overlapped`], taken with
/// `helper_args::take_channel`) into the current tokio runtime.
pub fn async_pipe(
    channel: std::fs::File,
) -> std::io::Result<tokio::net::windows::named_pipe::NamedPipeClient> {
    use std::os::windows::io::IntoRawHandle;
    let handle = channel.into_raw_handle();
    // SAFETY: `handle` is the open client end of a named pipe that this process owns alone (the
    // File it came from is consumed); tokio takes ownership and closes it. tokio requires it to
    // be opened overlapped: the spawner opens it so for every helper that calls this (the
    // helper's kind decides, `ChannelIo`), and a helper given a blocking end would only block
    // its runtime, not touch memory it does not own.
    unsafe { tokio::net::windows::named_pipe::NamedPipeClient::from_raw_handle(handle) }
}

/// Adopts the router's overlapped end of a channel ([`ChannelIo::Overlapped`] as `router`, or
/// a handle the spawner duplicated from one) into the current tokio runtime.
pub fn async_server(
    channel: OwnedHandle,
) -> std::io::Result<tokio::net::windows::named_pipe::NamedPipeServer> {
    use std::os::windows::io::IntoRawHandle;
    let handle = channel.into_raw_handle();
    // SAFETY: `handle` is an open pipe handle that this process owns alone (the OwnedHandle it
    // came from is consumed); tokio takes ownership and closes it. tokio requires it to be
    // overlapped: every router end is made so (`channel_pair`'s `router`), and a blocking one
    // would only block the runtime, not touch memory it does not own.
    unsafe { tokio::net::windows::named_pipe::NamedPipeServer::from_raw_handle(handle) }
}

/// A named pipe server instance for a front endpoint (`crate::endpoint`): the first instance
/// of `name` when `first`, remote clients refused, and a protected DACL granting this process's
/// user alone (the default DACL of a pipe grants everyone read access), and read and write to
/// `also` (a SID) if given: a `gatehouse run` agent's pipe, which its write-restricted token
/// opens only if its restricting SID is granted the write too.
pub(crate) fn user_only_pipe(
    name: &str,
    first: bool,
    also: Option<&str>,
) -> std::io::Result<tokio::net::windows::named_pipe::NamedPipeServer> {
    use super::ffi::Local;
    use windows_sys::Win32::Security::Authorization::{
        ConvertStringSecurityDescriptorToSecurityDescriptorW, SDDL_REVISION_1,
    };
    use windows_sys::Win32::Security::SECURITY_ATTRIBUTES;
    const MECH: &str = "front endpoint";
    let me = super::pipe_peer::current_user().map_err(std::io::Error::other)?;
    let mut sddl = format!("D:P(A;;GA;;;{me})");
    if let Some(sid) = also {
        if !sid.starts_with("S-1-") || !sid[4..].bytes().all(|b| b.is_ascii_digit() || b == b'-') {
            return Err(std::io::Error::other(format!("{sid:?} is not a SID")));
        }
        sddl.push_str(&format!("(A;;GRGW;;;{sid})"));
    }
    let sddl = wide(MECH, sddl.as_ref()).map_err(std::io::Error::other)?;
    let mut sd = std::ptr::null_mut();
    // SAFETY: `sddl` is a NUL-terminated UTF-16 string that outlives the call; `sd` receives a
    // LocalAlloc'ed descriptor, freed by `Local` below.
    if unsafe {
        ConvertStringSecurityDescriptorToSecurityDescriptorW(
            sddl.as_ptr(),
            SDDL_REVISION_1,
            &mut sd,
            std::ptr::null_mut(),
        )
    } == 0
    {
        return Err(std::io::Error::other(last(
            MECH,
            "ConvertStringSecurityDescriptorToSecurityDescriptorW",
        )));
    }
    let sd = Local(sd);
    let mut sa = SECURITY_ATTRIBUTES {
        nLength: std::mem::size_of::<SECURITY_ATTRIBUTES>() as u32,
        lpSecurityDescriptor: sd.0,
        bInheritHandle: 0,
    };
    // SAFETY: `sa` and the descriptor it points to (owned by `sd`) live until the call returns;
    // the pipe copies the descriptor, so freeing it afterwards is sound.
    unsafe {
        tokio::net::windows::named_pipe::ServerOptions::new()
            .first_pipe_instance(first)
            .reject_remote_clients(true)
            .create_with_security_attributes_raw(name, (&mut sa as *mut SECURITY_ATTRIBUTES).cast())
    }
}
