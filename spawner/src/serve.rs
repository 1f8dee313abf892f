//! The spawner's loop: one channel (the router's), the pidfds of the helpers it started.
//!
//! Anything on the channel that is not a [`SpawnRequest`] it can act on ends the spawner: a
//! record that does not decode, a descriptor (the router never sends one), a kill or status of
//! a process it did not start. When the channel closes (the router is gone) or breaks, every
//! helper it started is killed and reaped before it exits; helpers also die with it
//! (`PR_SET_PDEATHSIG`).

use crate::ServeError;
use ipc_schema::spawn::{self, SpawnReply, SpawnRequest, MAX_SPAWN_MESSAGE};
use ipc_schema::status::LockdownReport;
use ipc_schema::Role;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use sandbox::linux::command::fdpass::{recv_with_fds, send_with_fd};
use sandbox::process::{
    descends_from, describe_exit, pidfd_send_signal, read_proc_status, spawn_helper,
};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::ffi::OsString;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::Child;

struct Helper {
    child: Child,
    pidfd: OwnedFd,
}

struct Spawner {
    chan: OwnedFd,
    helper_dir: PathBuf,
    /// Whether a helper may be started with `--allow-degraded` (fixed at start).
    allow_degraded: bool,
    router: u32,
    live: BTreeMap<u32, Helper>,
    /// Helpers reaped already: a kill of one of these crossed its `Ended` on the way.
    ended: BTreeSet<u32>,
}

/// Serves the router on `chan` (a `SOCK_SEQPACKET` socket) until it closes.
pub fn serve(
    chan: OwnedFd,
    helper_dir: PathBuf,
    allow_degraded: bool,
    lockdown: LockdownReport,
) -> Result<(), ServeError> {
    let mut s = Spawner {
        chan,
        helper_dir,
        allow_degraded,
        router: nix::unistd::getppid().as_raw() as u32,
        live: BTreeMap::new(),
        ended: BTreeSet::new(),
    };
    let result = s.send(
        &SpawnReply::Ready {
            pid: std::process::id(),
            lockdown,
        },
        None,
    );
    let result = result.and_then(|()| s.run());
    s.kill_all();
    result
}

impl Spawner {
    fn run(&mut self) -> Result<(), ServeError> {
        let mut buf = vec![0u8; MAX_SPAWN_MESSAGE + 1];
        loop {
            let (chan_ready, exited) = self.wait()?;
            for pid in exited {
                self.reap(pid)?;
            }
            if !chan_ready {
                continue;
            }
            let mut fds = VecDeque::new();
            let n = match recv_with_fds(self.chan.as_fd(), &mut buf, &mut fds) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(ServeError::Io("reading the router's channel".into(), e)),
            };
            if n == 0 {
                return Ok(());
            }
            if !fds.is_empty() {
                return Err(ServeError::Protocol("it sent a descriptor".into()));
            }
            let req: SpawnRequest = spawn::decode(&buf[..n])
                .map_err(|e| ServeError::Protocol(format!("a bad record: {e}")))?;
            self.handle(req)?;
        }
    }

    /// Waits for the channel or a helper's exit: (channel readable or closed, pids that exited).
    fn wait(&self) -> Result<(bool, Vec<u32>), ServeError> {
        let pids: Vec<u32> = self.live.keys().copied().collect();
        let mut fds = Vec::with_capacity(pids.len() + 1);
        fds.push(PollFd::new(self.chan.as_fd(), PollFlags::POLLIN));
        for pid in &pids {
            fds.push(PollFd::new(self.live[pid].pidfd.as_fd(), PollFlags::POLLIN));
        }
        loop {
            match poll(&mut fds, PollTimeout::NONE) {
                Ok(_) => break,
                Err(nix::errno::Errno::EINTR) => continue,
                Err(e) => return Err(ServeError::Io("poll".into(), e.into())),
            }
        }
        let ready = |f: &PollFd| f.revents().is_some_and(|r| !r.is_empty());
        let exited = pids
            .iter()
            .zip(&fds[1..])
            .filter(|(_, f)| ready(f))
            .map(|(p, _)| *p)
            .collect();
        Ok((ready(&fds[0]), exited))
    }

    fn handle(&mut self, req: SpawnRequest) -> Result<(), ServeError> {
        match req {
            SpawnRequest::Start { id, kind, args } => self.start(id, kind, args),
            SpawnRequest::Kill { pid } => {
                let live = self.live.get(&pid);
                if crate::rules::kill_target(pid, live.is_some(), self.ended.contains(&pid))? {
                    // ESRCH cannot happen (the pidfd pins the process until it is reaped);
                    // anything else shows when the exit does not come.
                    if let Some(h) = live {
                        let _ = pidfd_send_signal(&h.pidfd, libc::SIGKILL);
                    }
                }
                Ok(())
            }
            SpawnRequest::Status { id, pid } => {
                let status =
                    crate::rules::observable(pid, self.live.contains_key(&pid), self.router)
                        .and_then(|()| {
                            read_proc_status(pid).map_err(|e| format!("/proc/{pid}/status: {e}"))
                        });
                self.send(&SpawnReply::Status { id, status }, None)
            }
            SpawnRequest::Lineage { id, pid } => {
                // Any pid may be asked about: the answer says only whether it is one of ours.
                let under = descends_from(pid, std::process::id())
                    .map_err(|e| format!("the ancestry of pid {pid}: {e}"));
                self.send(&SpawnReply::Lineage { id, under }, None)
            }
        }
    }

    fn start(&mut self, id: u64, kind: Role, args: Vec<OsString>) -> Result<(), ServeError> {
        if let Some(reason) = crate::rules::degraded_refusal(self.allow_degraded, kind, &args) {
            return self.send(&SpawnReply::NotStarted { id, reason }, None);
        }
        match start_helper(&self.helper_dir, kind, &args) {
            Ok((helper, ours)) => {
                let pid = helper.child.id();
                self.live.insert(pid, helper);
                self.send(&SpawnReply::Started { id, pid }, Some(ours.as_fd()))
            }
            Err(reason) => self.send(&SpawnReply::NotStarted { id, reason }, None),
        }
    }

    fn reap(&mut self, pid: u32) -> Result<(), ServeError> {
        let Some(mut h) = self.live.remove(&pid) else {
            return Ok(());
        };
        // The pidfd is readable: the process has exited, so wait() does not block.
        let how = match h.child.wait() {
            Ok(status) => describe_exit(status),
            Err(e) => format!("could not be reaped: {e}"),
        };
        self.ended.insert(pid);
        self.send(&SpawnReply::Ended { pid, how }, None)
    }

    fn send(&self, reply: &SpawnReply, fd: Option<BorrowedFd<'_>>) -> Result<(), ServeError> {
        let rec = spawn::encode(reply)
            .map_err(|e| ServeError::Io("encoding a reply".into(), io::Error::other(e)))?;
        let sent = match fd {
            Some(fd) => send_with_fd(self.chan.as_fd(), &rec, fd),
            None => nix::sys::socket::send(
                std::os::fd::AsRawFd::as_raw_fd(&self.chan),
                &rec,
                nix::sys::socket::MsgFlags::MSG_NOSIGNAL,
            )
            .map_err(io::Error::from),
        };
        match sent {
            Ok(n) if n == rec.len() => Ok(()),
            Ok(n) => Err(ServeError::Io(
                "writing to the router".into(),
                io::Error::other(format!("{n} of {} bytes of a record went", rec.len())),
            )),
            Err(e) => Err(ServeError::Io("writing to the router".into(), e)),
        }
    }

    fn kill_all(&mut self) {
        for h in self.live.values() {
            let _ = pidfd_send_signal(&h.pidfd, libc::SIGKILL);
        }
        for (_, mut h) in std::mem::take(&mut self.live) {
            let _ = h.child.wait();
        }
    }
}

/// Starts the helper binary of `kind` from `dir`: its channel as fd 3, an empty environment,
/// killed when the spawner dies. Returns it and the router's end of its channel.
fn start_helper(dir: &Path, kind: Role, args: &[OsString]) -> Result<(Helper, OwnedFd), String> {
    if !kind.is_helper() {
        return Err(format!("{kind} is not a helper the spawner starts"));
    }
    let program = dir.join(kind.name());
    let (ours, theirs) = std::os::unix::net::UnixStream::pair()
        .map_err(|e| format!("cannot create a socket pair: {e}"))?;
    let spawned = spawn_helper(&program, args, OwnedFd::from(theirs), &[])
        .map_err(|e| format!("cannot start {}: {e}", program.display()))?;
    Ok((
        Helper {
            child: spawned.child,
            pidfd: spawned.pidfd,
        },
        OwnedFd::from(ours),
    ))
}
