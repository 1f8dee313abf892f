//! The spawner's loop on macOS: one kqueue over the router's channel (a byte stream of
//! length-prefixed records: `record_stream`) and the exits of the helpers it started
//! (`EVFILT_PROC`, `NOTE_EXIT`).
//!
//! As on Linux, anything on the channel that is not a [`SpawnRequest`] it can act on ends the
//! spawner: a record that does not decode, a descriptor (the router never sends one), a kill or
//! status of a process it did not start. A helper is reaped only here, after its exit event, so
//! a pid it kills is never one the system has given to another process. When the channel
//! closes, every helper it started is killed and reaped before it exits. macOS has no
//! `PR_SET_PDEATHSIG`: a helper whose spawner died some other way finds its broker channel
//! closed (the router holds the other end) and exits. Compiled here, never run.

use crate::record_stream::{send_record, Inbox};
use crate::ServeError;
use ipc_schema::spawn::{self, SpawnReply, SpawnRequest};
use ipc_schema::status::LockdownReport;
use ipc_schema::Role;
use nix::errno::Errno;
use nix::sys::event::{EvFlags, EventFilter, FilterFlag, KEvent, Kqueue};
use sandbox::process::{descends_from, describe_exit, kill, observe, reap, spawn_helper};
use std::collections::BTreeSet;
use std::ffi::OsString;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

struct Spawner {
    chan: OwnedFd,
    kq: Kqueue,
    inbox: Inbox,
    helper_dir: PathBuf,
    allow_degraded: bool,
    router: u32,
    /// Started and not yet reaped.
    live: BTreeSet<u32>,
    /// Reaped already: a kill of one of these crossed its `Ended` on the way.
    ended: BTreeSet<u32>,
}

/// Serves the router on `chan` (a `SOCK_STREAM` socket) until it closes.
pub fn serve(
    chan: OwnedFd,
    helper_dir: PathBuf,
    allow_degraded: bool,
    lockdown: LockdownReport,
) -> Result<(), ServeError> {
    let kq = Kqueue::new().map_err(|e| ServeError::Io("kqueue".into(), e.into()))?;
    let watch = KEvent::new(
        chan.as_raw_fd() as usize,
        EventFilter::EVFILT_READ,
        EvFlags::EV_ADD,
        FilterFlag::empty(),
        0,
        0,
    );
    kq.kevent(&[watch], &mut [], None)
        .map_err(|e| ServeError::Io("watching the router's channel".into(), e.into()))?;
    let mut s = Spawner {
        chan,
        kq,
        inbox: Inbox::default(),
        helper_dir,
        allow_degraded,
        router: nix::unistd::getppid().as_raw() as u32,
        live: BTreeSet::new(),
        ended: BTreeSet::new(),
    };
    let ready = SpawnReply::Ready {
        pid: std::process::id(),
        lockdown,
    };
    let result = s.send(&ready, None).and_then(|()| s.run());
    s.kill_all();
    result
}

impl Spawner {
    fn run(&mut self) -> Result<(), ServeError> {
        let mut events = [KEvent::new(
            0,
            EventFilter::EVFILT_READ,
            EvFlags::empty(),
            FilterFlag::empty(),
            0,
            0,
        ); 16];
        loop {
            let n = match self.kq.kevent(&[], &mut events, None) {
                Ok(n) => n,
                Err(Errno::EINTR) => continue,
                Err(e) => return Err(ServeError::Io("kevent".into(), e.into())),
            };
            let mut chan_ready = false;
            for ev in &events[..n] {
                match ev.filter() {
                    Ok(EventFilter::EVFILT_PROC) => self.reaped(ev.ident() as u32)?,
                    Ok(EventFilter::EVFILT_READ) => chan_ready = true,
                    _ => {}
                }
            }
            if chan_ready && !self.read()? {
                return Ok(());
            }
        }
    }

    /// Reads what the router sent and acts on every whole record. `false`: the channel ended.
    fn read(&mut self) -> Result<bool, ServeError> {
        let n = match self.inbox.fill(&self.chan) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => return Ok(true),
            Err(e) => return Err(ServeError::Io("reading the router's channel".into(), e)),
        };
        if self.inbox.take_descriptor().is_some() {
            return Err(ServeError::Protocol("it sent a descriptor".into()));
        }
        loop {
            let record = self
                .inbox
                .next_record()
                .map_err(|e| ServeError::Protocol(format!("a bad record: {e}")))?;
            let Some(record) = record else { break };
            let req: SpawnRequest = spawn::decode(&record)
                .map_err(|e| ServeError::Protocol(format!("a bad record: {e}")))?;
            self.handle(req)?;
        }
        if n == 0 && !self.inbox.is_empty() {
            return Err(ServeError::Protocol("its last record was cut short".into()));
        }
        Ok(n != 0)
    }

    fn handle(&mut self, req: SpawnRequest) -> Result<(), ServeError> {
        match req {
            SpawnRequest::Start { id, kind, args } => self.start(id, kind, args),
            SpawnRequest::Kill { pid } => {
                let live = self.live.contains(&pid);
                if crate::rules::kill_target(pid, live, self.ended.contains(&pid))? {
                    // Not reaped yet, so the pid is still this child's.
                    let _ = kill(pid);
                }
                Ok(())
            }
            SpawnRequest::Status { id, pid } => {
                let observed = crate::rules::observable(pid, self.live.contains(&pid), self.router)
                    .and_then(|()| observe(pid).map_err(|e| format!("pid {pid}: {e}")));
                self.send(&SpawnReply::ObservedMac { id, observed }, None)
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
        let (pid, ours) = match start_helper(&self.helper_dir, kind, &args) {
            Ok(started) => started,
            Err(reason) => return self.send(&SpawnReply::NotStarted { id, reason }, None),
        };
        self.live.insert(pid);
        let exit = KEvent::new(
            pid as usize,
            EventFilter::EVFILT_PROC,
            EvFlags::EV_ADD | EvFlags::EV_ONESHOT,
            FilterFlag::NOTE_EXIT,
            0,
            0,
        );
        let watched = self.kq.kevent(&[exit], &mut [], None);
        self.send(&SpawnReply::Started { id, pid }, Some(ours.as_fd()))?;
        match watched {
            Ok(_) => Ok(()),
            // Already gone (a zombie has no exit left to report): reap it now.
            Err(Errno::ESRCH) => self.reaped(pid),
            Err(e) => {
                let _ = kill(pid);
                let _ = self.reaped(pid);
                Err(ServeError::Io(format!("watching helper {pid}"), e.into()))
            }
        }
    }

    /// Reaps `pid` after its exit and tells the router how it ended.
    fn reaped(&mut self, pid: u32) -> Result<(), ServeError> {
        if !self.live.remove(&pid) {
            return Ok(());
        }
        let how = match reap(pid) {
            Ok(status) => describe_exit(status),
            Err(e) => format!("could not be reaped: {e}"),
        };
        self.ended.insert(pid);
        self.send(&SpawnReply::Ended { pid, how }, None)
    }

    fn send(&self, reply: &SpawnReply, fd: Option<BorrowedFd<'_>>) -> Result<(), ServeError> {
        let rec = spawn::encode(reply)
            .map_err(|e| ServeError::Io("encoding a reply".into(), io::Error::other(e)))?;
        send_record(self.chan.as_fd(), &rec, fd)
            .map_err(|e| ServeError::Io("writing to the router".into(), e))
    }

    fn kill_all(&mut self) {
        for &pid in &self.live {
            let _ = kill(pid);
        }
        for pid in std::mem::take(&mut self.live) {
            let _ = reap(pid);
        }
    }
}

/// Starts the helper binary of `kind` from `dir` with its channel as fd 3 and an empty
/// environment. Returns its pid and the router's end of its channel.
fn start_helper(dir: &Path, kind: Role, args: &[OsString]) -> Result<(u32, OwnedFd), String> {
    if !kind.is_helper() {
        return Err(format!("{kind} is not a helper the spawner starts"));
    }
    let program = dir.join(kind.name());
    let (ours, theirs) = std::os::unix::net::UnixStream::pair()
        .map_err(|e| format!("cannot create a socket pair: {e}"))?;
    let pid = spawn_helper(&program, args, OwnedFd::from(theirs))
        .map_err(|e| format!("cannot start {}: {e}", program.display()))?;
    Ok((pid, OwnedFd::from(ours)))
}
