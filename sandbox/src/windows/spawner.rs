//! The handles between the router and the spawner on Windows, where a pipe carries none.
//!
//! The router starts the spawner ([`start_spawner`]) with two inherited handles: its end of
//! their channel, and a handle to the router's own process with `PROCESS_DUP_HANDLE` only. For
//! each helper, the spawner makes the helper's channel, gives the helper its end, and
//! duplicates the other into the router ([`duplicate_into`]); the router adopts it by the value
//! the spawner sends ([`adopt_duplicated_pipe`]). The spawner is the one process gatehouse
//! starts unconfined (it makes each helper's restricted token and job from its own token), so
//! a handle that lets it act in the router's process gives it nothing it lacked.

use super::channel::{channel_pair, ChannelIo, HELPER_ENV};
use super::ffi::{invalid, last, owned, raw, WinError};
use super::spawn::{env_from_allowlist, spawn_unconfined, ConfinedChild, SpawnSpec};
use std::ffi::OsString;
use std::os::windows::io::{AsHandle, AsRawHandle, BorrowedHandle, FromRawHandle, OwnedHandle};
use std::path::Path;
use windows_sys::Win32::Foundation::{
    DuplicateHandle, GetHandleInformation, DUPLICATE_SAME_ACCESS, HANDLE,
};
use windows_sys::Win32::Storage::FileSystem::{GetFileType, FILE_TYPE_PIPE};
use windows_sys::Win32::System::Threading::{GetCurrentProcess, PROCESS_DUP_HANDLE};

const MECH: &str = "spawner handles";

/// The switch naming the inherited handle to the router's process.
pub const ROUTER_HANDLE: &str = "--router-handle";

/// A spawner the router started, and the router's end of their channel (overlapped: adopt it
/// with `async_server`).
pub struct StartedSpawner {
    pub child: ConfinedChild,
    pub channel: OwnedHandle,
}

/// Starts the spawner binary `program` with `--channel-handle N --router-handle M` before
/// `args`: its end of a fresh channel (overlapped at both ends: both serve with tokio) and a
/// handle to this
/// process with `PROCESS_DUP_HANDLE` are the only handles it inherits, with `stderr`.
pub fn start_spawner(
    program: &Path,
    args: &[OsString],
    stderr: BorrowedHandle<'_>,
) -> Result<StartedSpawner, WinError> {
    let (ours, theirs) = channel_pair(ChannelIo::Overlapped, ChannelIo::Overlapped)?;
    let mut me = std::ptr::null_mut();
    // SAFETY: the current-process pseudo-handle, duplicated into this process as a real handle
    // with PROCESS_DUP_HANDLE only; `me` receives it and `owned` takes it.
    let ok = unsafe {
        DuplicateHandle(
            GetCurrentProcess(),
            GetCurrentProcess(),
            GetCurrentProcess(),
            &mut me,
            PROCESS_DUP_HANDLE,
            0,
            0,
        )
    };
    if ok == 0 {
        return Err(last(MECH, "DuplicateHandle(this process)"));
    }
    let me = owned(me, MECH, "DuplicateHandle(this process)")?;
    let mut all: Vec<OsString> = vec![
        crate::helper_args::CHANNEL_HANDLE.into(),
        (theirs.as_raw_handle() as usize).to_string().into(),
        ROUTER_HANDLE.into(),
        (me.as_raw_handle() as usize).to_string().into(),
    ];
    all.extend(args.iter().cloned());
    let spec = SpawnSpec {
        program,
        args: all,
        cwd: None,
        env: env_from_allowlist(HELPER_ENV),
        inherit: vec![theirs.as_handle(), me.as_handle()],
        stdin: None,
        stdout: None,
        stderr: Some(stderr),
    };
    let child = spawn_unconfined(&spec)?;
    // Its copies are its own now; ours would keep the channel from ever ending.
    drop(theirs);
    drop(me);
    Ok(StartedSpawner {
        child,
        channel: ours,
    })
}

/// Duplicates `handle` into `target` (a process handle with `PROCESS_DUP_HANDLE`), with the
/// same access, not inheritable; returns its value there. This process's copy stays its own.
pub fn duplicate_into(
    target: BorrowedHandle<'_>,
    handle: BorrowedHandle<'_>,
) -> Result<u64, WinError> {
    duplicate_raw(
        raw(handle),
        target,
        None,
        "DuplicateHandle(into the router)",
    )
}

/// Duplicates `handle` (a handle of this process, valid for the call) into `target` (a process
/// handle with `PROCESS_DUP_HANDLE`), not inheritable, with `access` or (`None`) the same
/// access; its value there. This process's copy stays its own.
pub(crate) fn duplicate_raw(
    handle: HANDLE,
    target: BorrowedHandle<'_>,
    access: Option<u32>,
    call: &'static str,
) -> Result<u64, WinError> {
    let mut theirs: HANDLE = std::ptr::null_mut();
    // SAFETY: valid source and target process handles and a valid handle of this process;
    // `theirs` receives a value in the target's handle table, which this process never uses as
    // its own.
    let ok = unsafe {
        DuplicateHandle(
            GetCurrentProcess(),
            handle,
            raw(target),
            &mut theirs,
            access.unwrap_or(0),
            0,
            if access.is_none() {
                DUPLICATE_SAME_ACCESS
            } else {
                0
            },
        )
    };
    if ok == 0 {
        return Err(last(MECH, call));
    }
    Ok(theirs as usize as u64)
}

/// The handle `value` names in this process, refused unless it is one (fits a pointer) and
/// open (`GetHandleInformation`; `call` names the check in the error). Not yet owned: the
/// caller checks what it is before adopting it.
pub(crate) fn open_handle(
    value: u64,
    mechanism: &'static str,
    call: &'static str,
) -> Result<HANDLE, WinError> {
    let h = usize::try_from(value)
        .map_err(|_| invalid(mechanism, format!("{value:#x} is not a handle value")))?
        as HANDLE;
    let mut flags = 0;
    // SAFETY: GetHandleInformation only reads the handle table; an invalid value fails with
    // ERROR_INVALID_HANDLE and touches nothing.
    if unsafe { GetHandleInformation(h, &mut flags) } == 0 {
        return Err(last(mechanism, call));
    }
    Ok(h)
}

/// Adopts the pipe handle the spawner duplicated into this process, by the value it sent.
/// Refused unless the value names an open handle of this process that is a pipe.
pub fn adopt_duplicated_pipe(value: u64) -> Result<OwnedHandle, WinError> {
    adopt_pipe(value, MECH, "the helper's channel")
}

/// A pipe handle another process duplicated into this one for it alone, by its value; refused
/// unless the value names an open handle of this process that is a pipe. `what` names it in
/// the refusal.
pub(crate) fn adopt_pipe(
    value: u64,
    mechanism: &'static str,
    what: &'static str,
) -> Result<OwnedHandle, WinError> {
    let h = open_handle(value, mechanism, "GetHandleInformation")?;
    // SAFETY: as above, an open handle; GetFileType only queries it.
    if unsafe { GetFileType(h) } != FILE_TYPE_PIPE {
        return Err(invalid(
            mechanism,
            format!("handle {value:#x} sent as {what} is not a pipe"),
        ));
    }
    // SAFETY: the sender (the spawner for the router, the router for a helper) duplicated this
    // handle into this process for this one use, so nothing else here owns it; it is open and a
    // pipe (checked above). A sender that sent the value of a handle this process already owns
    // could make it be closed twice, but each sender is the less confined (or the more trusted)
    // process and could act in this one anyway.
    Ok(unsafe { OwnedHandle::from_raw_handle(h) })
}
