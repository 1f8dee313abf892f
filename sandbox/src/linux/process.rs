//! Spawning helpers with exactly one inherited socket, pidfds, and reading what the kernel says
//! about a process.

use crate::ProcStatus;
use std::ffi::OsString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};

pub use crate::unix_channel::{take_inherited_channel, CHANNEL_FD};
pub use crate::unix_process::describe_exit;

/// A helper process the broker started.
pub struct SpawnedHelper {
    pub child: Child,
    /// Becomes readable when the process exits; signals sent through it cannot hit a reused pid.
    pub pidfd: OwnedFd,
}

/// Starts `program` with `channel` as its fd 3, stdin and stdout on /dev/null, stderr inherited
/// (the broker's log), every other descriptor closed at exec, the environment exactly `env`, and
/// SIGKILL delivered to it if the spawning thread dies (the broker spawns from its main thread).
pub fn spawn_helper(
    program: &Path,
    args: &[OsString],
    channel: OwnedFd,
    env: &[(OsString, OsString)],
) -> io::Result<SpawnedHelper> {
    let mut cmd = Command::new(program);
    cmd.args(args)
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    let raw = channel.as_raw_fd();
    let parent = std::process::id();
    // SAFETY: the closure runs in the forked child between fork and exec, where only
    // async-signal-safe functions may be called. It calls prctl, getppid, dup2, fcntl and the
    // close_range syscall, all async-signal-safe, allocates nothing and takes no locks.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
                return Err(io::Error::last_os_error());
            }
            // The broker may have died between fork and prctl; then nobody would kill us.
            if libc::getppid() as u32 != parent {
                return Err(io::Error::other("the broker exited during spawn"));
            }
            if raw == CHANNEL_FD {
                let flags = libc::fcntl(raw, libc::F_GETFD);
                if flags < 0 || libc::fcntl(raw, libc::F_SETFD, flags & !libc::FD_CLOEXEC) < 0 {
                    return Err(io::Error::last_os_error());
                }
            } else if libc::dup2(raw, CHANNEL_FD) < 0 {
                // dup2 leaves the new descriptor without FD_CLOEXEC, so it survives exec.
                return Err(io::Error::last_os_error());
            }
            // Mark everything above the channel close-on-exec rather than closing it here, so
            // std's own exec-error pipe keeps working; exec closes them all.
            if libc::syscall(
                libc::SYS_close_range,
                (CHANNEL_FD + 1) as libc::c_uint,
                libc::c_uint::MAX,
                libc::CLOSE_RANGE_CLOEXEC as libc::c_uint,
            ) != 0
            {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = cmd.spawn()?;
    drop(channel);
    let pidfd = match pidfd_open(child.id()) {
        Ok(fd) => fd,
        Err(e) => {
            let mut child = child;
            let _ = child.kill();
            let _ = child.wait();
            return Err(e);
        }
    };
    Ok(SpawnedHelper { child, pidfd })
}

/// A pidfd for `pid` (Linux 5.3+).
pub fn pidfd_open(pid: u32) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1; it touches
    // no memory of ours.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0 as libc::c_uint) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this descriptor to us; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// Sends `signal` to the process behind `pidfd` (never to a recycled pid).
pub fn pidfd_send_signal(pidfd: &OwnedFd, signal: i32) -> io::Result<()> {
    // SAFETY: pidfd_send_signal reads only its arguments; a null siginfo is allowed.
    let r = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            signal,
            std::ptr::null::<libc::siginfo_t>(),
            0 as libc::c_uint,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// What `/proc/<pid>/status` says about seccomp, no_new_privs, capabilities and uid.
pub fn read_proc_status(pid: u32) -> io::Result<ProcStatus> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    parse_proc_status(&text)
        .ok_or_else(|| io::Error::other(format!("/proc/{pid}/status lacks an expected field")))
}

fn parse_proc_status(text: &str) -> Option<ProcStatus> {
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name).and_then(|v| v.strip_prefix(':')))
            .map(|v| v.trim().to_string())
    };
    Some(ProcStatus {
        seccomp: field("Seccomp")?.parse().ok()?,
        no_new_privs: field("NoNewPrivs")? == "1",
        cap_eff: u64::from_str_radix(&field("CapEff")?, 16).ok()?,
        cap_prm: u64::from_str_radix(&field("CapPrm")?, 16).ok()?,
        uid: field("Uid")?.split_whitespace().next()?.parse().ok()?,
    })
}

/// Whether `pid` descends from `ancestor` (or is it), by walking `PPid` up `/proc`
/// ([`crate::unix_process::walk_parents`]).
pub fn descends_from(pid: u32, ancestor: u32) -> io::Result<bool> {
    crate::unix_process::walk_parents(pid, ancestor, |p| {
        let text = std::fs::read_to_string(format!("/proc/{p}/status"))?;
        parent_of(&text).ok_or_else(|| io::Error::other(format!("/proc/{p}/status has no PPid")))
    })
}

fn parent_of(status: &str) -> Option<u32> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("PPid:"))
        .and_then(|v| v.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_our_own_status() {
        let st = read_proc_status(std::process::id()).unwrap();
        assert_eq!(st.uid, nix::unistd::getuid().as_raw());
    }

    #[test]
    fn lineage_follows_parents_and_ends_at_init() {
        let me = std::process::id();
        let parent = nix::unistd::getppid().as_raw() as u32;
        let mut child = Command::new("sleep").arg("5").spawn().unwrap();
        let c = child.id();
        assert!(descends_from(c, me).unwrap());
        assert!(descends_from(c, parent).unwrap());
        assert!(descends_from(me, me).unwrap());
        // Not the other way round, and not a sibling's line.
        assert!(!descends_from(me, c).unwrap());
        assert!(!descends_from(parent, me).unwrap());
        child.kill().unwrap();
        child.wait().unwrap();
        // A pid that is gone (reaped) is an error, not an answer.
        assert_eq!(
            descends_from(c, me).unwrap_err().kind(),
            io::ErrorKind::NotFound
        );
        assert_eq!(parent_of("Name:\tx\nPPid:\t17\n"), Some(17));
        assert_eq!(parent_of("Name:\tx\n"), None);
    }

    #[test]
    fn parse_rejects_missing_fields() {
        assert!(parse_proc_status("Name: x\nSeccomp: 2\n").is_none());
        let full = "Uid:\t1000\t1000\t1000\t1000\nCapPrm:\t0000000000000000\nCapEff:\t0000000000000000\nNoNewPrivs:\t1\nSeccomp:\t2\n";
        let st = parse_proc_status(full).unwrap();
        assert_eq!(st.seccomp, 2);
        assert!(st.no_new_privs);
        assert_eq!(st.uid, 1000);
    }
}
