//! macOS process plumbing for the spawner: starting a helper with exactly one inherited socket
//! (`posix_spawn`), reaping and signalling it, and reading what the system says of a process
//! from outside: whether a Seatbelt profile confines it (`sandbox_check`), its user and its
//! parent (`proc_pidinfo`).
//!
//! macOS has no pidfds: the spawner watches its helpers' exits with kqueue (`EVFILT_PROC`) and
//! reaps each only in its own loop, so a pid it signals is one it has not reaped yet, which no
//! other process can have been given. Compiled here, never run (docs/macos.md).

use ipc_schema::status::MacConfinement;
use std::ffi::{c_char, c_int, CString, OsString};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

pub use crate::unix_channel::{take_inherited_channel, CHANNEL_FD};
pub use crate::unix_process::describe_exit;

extern "C" {
    /// `int sandbox_check(pid_t pid, const char *operation, enum sandbox_filter_type type,
    /// ...)` from libsystem_sandbox: with no operation and `SANDBOX_FILTER_NONE` (0), 1 when
    /// the process runs under a profile, 0 when it does not.
    fn sandbox_check(pid: libc::pid_t, operation: *const c_char, filter_type: c_int, ...) -> c_int;
    /// `int posix_spawn_file_actions_addinherit_np(posix_spawn_file_actions_t *, int)`
    /// (libSystem, macOS 10.7+): keep `fd` open across the spawn despite
    /// `POSIX_SPAWN_CLOEXEC_DEFAULT`.
    fn posix_spawn_file_actions_addinherit_np(
        actions: *mut libc::posix_spawn_file_actions_t,
        fd: c_int,
    ) -> c_int;
}

/// The signals macOS numbers, 1 to 31 (`NSIG` in <sys/signal.h>).
const NSIG: c_int = 32;

/// Starts `program args` with `channel` as its fd 3, stdin and stdout on /dev/null, stderr
/// inherited (the broker's log), every other descriptor closed (`POSIX_SPAWN_CLOEXEC_DEFAULT`),
/// an empty environment, every signal at its default and none blocked. Returns its pid; the
/// caller reaps it ([`reap`]).
pub fn spawn_helper(program: &Path, args: &[OsString], channel: OwnedFd) -> io::Result<u32> {
    let cstr =
        |b: &[u8]| CString::new(b).map_err(|_| io::Error::other("a NUL byte in an argument"));
    let path = cstr(program.as_os_str().as_bytes())?;
    let mut owned = vec![path.clone()];
    for a in args {
        owned.push(cstr(a.as_bytes())?);
    }
    let mut argv: Vec<*mut c_char> = owned.iter().map(|c| c.as_ptr().cast_mut()).collect();
    argv.push(std::ptr::null_mut());
    let envp: [*mut c_char; 1] = [std::ptr::null_mut()];
    let devnull = c"/dev/null";
    let chan = channel.as_raw_fd();
    let check = |r: c_int| {
        if r == 0 {
            Ok(())
        } else {
            Err(io::Error::from_raw_os_error(r))
        }
    };

    let mut actions: libc::posix_spawn_file_actions_t = std::ptr::null_mut();
    let mut attr: libc::posix_spawnattr_t = std::ptr::null_mut();
    // SAFETY: `actions` and `attr` are initialised here before any other use and destroyed
    // below on every path; every pointer passed (paths, argv, envp, signal sets) points into
    // values that live until after posix_spawn returns; argv and envp end with a null pointer.
    unsafe {
        check(libc::posix_spawn_file_actions_init(&mut actions))?;
        if let Err(e) = check(libc::posix_spawnattr_init(&mut attr)) {
            libc::posix_spawn_file_actions_destroy(&mut actions);
            return Err(e);
        }
        let result = (|| {
            check(libc::posix_spawn_file_actions_addopen(
                &mut actions,
                0,
                devnull.as_ptr(),
                libc::O_RDONLY,
                0,
            ))?;
            check(libc::posix_spawn_file_actions_addopen(
                &mut actions,
                1,
                devnull.as_ptr(),
                libc::O_WRONLY,
                0,
            ))?;
            check(posix_spawn_file_actions_addinherit_np(&mut actions, 2))?;
            if chan == CHANNEL_FD {
                check(posix_spawn_file_actions_addinherit_np(&mut actions, chan))?;
            } else {
                check(libc::posix_spawn_file_actions_adddup2(
                    &mut actions,
                    chan,
                    CHANNEL_FD,
                ))?;
            }
            // Every signal that has a disposition to reset (SIGKILL and SIGSTOP have none).
            let mut all: libc::sigset_t = std::mem::zeroed();
            let mut none: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut all);
            for sig in 1..NSIG {
                if sig != libc::SIGKILL && sig != libc::SIGSTOP {
                    libc::sigaddset(&mut all, sig);
                }
            }
            libc::sigemptyset(&mut none);
            check(libc::posix_spawnattr_setsigdefault(&mut attr, &all))?;
            check(libc::posix_spawnattr_setsigmask(&mut attr, &none))?;
            let flags = libc::POSIX_SPAWN_CLOEXEC_DEFAULT
                | libc::POSIX_SPAWN_SETSIGDEF
                | libc::POSIX_SPAWN_SETSIGMASK;
            check(libc::posix_spawnattr_setflags(
                &mut attr,
                flags as libc::c_short,
            ))?;
            let mut pid: libc::pid_t = 0;
            check(libc::posix_spawn(
                &mut pid,
                path.as_ptr(),
                &actions,
                &attr,
                argv.as_ptr(),
                envp.as_ptr(),
            ))?;
            Ok(pid as u32)
        })();
        libc::posix_spawnattr_destroy(&mut attr);
        libc::posix_spawn_file_actions_destroy(&mut actions);
        result
    }
}

/// Waits for `pid` (a child of this process) and reaps it.
pub fn reap(pid: u32) -> io::Result<std::process::ExitStatus> {
    use std::os::unix::process::ExitStatusExt;
    let mut status: c_int = 0;
    loop {
        // SAFETY: waitpid writes the status into the c_int we own.
        let r = unsafe { libc::waitpid(pid as libc::pid_t, &mut status, 0) };
        if r == pid as libc::pid_t {
            return Ok(std::process::ExitStatus::from_raw(status));
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Sends `SIGKILL` to `pid`: a child not yet reaped (see the module's note) or a process held
/// by [`ProcessRef`].
pub fn kill(pid: u32) -> io::Result<()> {
    // SAFETY: kill takes two integers and touches no memory.
    if unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// What `proc_pidinfo(PROC_PIDTBSDINFO)` says of `pid`.
fn bsd_info(pid: u32) -> io::Result<libc::proc_bsdinfo> {
    let size = std::mem::size_of::<libc::proc_bsdinfo>() as c_int;
    // SAFETY: an all-zero proc_bsdinfo is a valid value (integers and byte arrays).
    let mut info: libc::proc_bsdinfo = unsafe { std::mem::zeroed() };
    // SAFETY: proc_pidinfo writes at most `size` bytes into `info`, which we own.
    let got = unsafe {
        libc::proc_pidinfo(
            pid as c_int,
            libc::PROC_PIDTBSDINFO,
            0,
            (&mut info as *mut libc::proc_bsdinfo).cast(),
            size,
        )
    };
    if got != size {
        let e = io::Error::last_os_error();
        return Err(io::Error::other(format!("proc_pidinfo of pid {pid}: {e}")));
    }
    Ok(info)
}

/// What the system says of `pid` from outside: whether a Seatbelt profile confines it, and its
/// user.
pub fn observe(pid: u32) -> io::Result<MacConfinement> {
    let info = bsd_info(pid)?;
    // SAFETY: a null operation with SANDBOX_FILTER_NONE takes no further arguments and reads
    // nothing of ours.
    let r = unsafe { sandbox_check(pid as libc::pid_t, std::ptr::null(), 0) };
    let sandboxed = match r {
        0 => false,
        1 => true,
        other => {
            return Err(io::Error::other(format!(
                "sandbox_check of pid {pid} answered {other}"
            )))
        }
    };
    Ok(MacConfinement {
        sandboxed,
        uid: info.pbi_uid,
    })
}

/// Whether `pid` descends from `ancestor` (or is it), by walking up `pbi_ppid`
/// ([`crate::unix_process::walk_parents`]).
pub fn descends_from(pid: u32, ancestor: u32) -> io::Result<bool> {
    crate::unix_process::walk_parents(pid, ancestor, |p| bsd_info(p).map(|i| i.pbi_ppid))
}

/// Another process, held without a pidfd (macOS has none): its pid and its start time, read
/// when it is opened. A signal goes only while the pid still names a process that started at
/// that time, so a pid the system gave to a new process after this one ended is left alone (a
/// reuse between that check and the signal, microseconds, is not excluded).
pub struct ProcessRef {
    pid: u32,
    started: (u64, u64),
}

impl ProcessRef {
    pub fn open(pid: u32) -> io::Result<ProcessRef> {
        let info = bsd_info(pid)?;
        Ok(ProcessRef {
            pid,
            started: (info.pbi_start_tvsec, info.pbi_start_tvusec),
        })
    }

    fn same(&self) -> bool {
        bsd_info(self.pid).is_ok_and(|i| (i.pbi_start_tvsec, i.pbi_start_tvusec) == self.started)
    }

    /// Whether the process still runs.
    pub fn running(&self) -> bool {
        self.same()
    }

    /// `SIGKILL`, if the pid still names the process.
    pub fn kill(&self) -> io::Result<()> {
        if !self.same() {
            return Err(io::Error::from_raw_os_error(libc::ESRCH));
        }
        kill(self.pid)
    }
}
