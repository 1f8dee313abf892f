//! The router's end of the spawner channel on macOS: a `SOCK_STREAM` pair carrying
//! length-prefixed records, a helper's channel attached to its `Started` record's bytes
//! (`crate::record_stream`). Compiled here, never run.

use super::{drive, Link, Transport};
use crate::record_stream::Inbox;
use ipc_schema::spawn::{self, frame_record, SpawnReply, SpawnRequest};
use ipc_schema::status::LockdownReport;
use sandbox::process::spawn_helper;
use std::ffi::OsString;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use tokio::io::{AsyncWriteExt, Interest};
use tokio::net::UnixStream;

/// The spawner, started but not yet served (before the router's runtime exists).
pub struct Spawner {
    chan: OwnedFd,
    pid: u32,
    lockdown: LockdownReport,
}

impl Spawner {
    /// Starts `program --helper-dir DIR [--allow-degraded]` with a stream channel as fd 3 and
    /// waits for its first record (`Ready`). Blocking; call it before the router locks down.
    pub fn start(program: &Path, helper_dir: &Path, allow_degraded: bool) -> io::Result<Spawner> {
        let (ours, theirs) = std::os::unix::net::UnixStream::pair()?;
        let mut args: Vec<OsString> = vec!["--helper-dir".into(), helper_dir.as_os_str().into()];
        if allow_degraded {
            args.push("--allow-degraded".into());
        }
        // Not reaped by the router (its profile has no use for it); it ends with the router's
        // end of the channel.
        let child = spawn_helper(program, &args, OwnedFd::from(theirs))?;
        let ours = OwnedFd::from(ours);
        let mut inbox = Inbox::default();
        let record = loop {
            if let Some(r) = inbox.next_record()? {
                break r;
            }
            if inbox.fill(&ours)? == 0 {
                return Err(io::Error::other(format!(
                    "{} exited before it was ready",
                    program.display()
                )));
            }
        };
        if inbox.take_descriptor().is_some() || !inbox.is_empty() {
            return Err(io::Error::other("its first record came with more"));
        }
        match spawn::decode::<SpawnReply>(&record) {
            Ok(SpawnReply::Ready { pid, lockdown }) if pid == child => Ok(Spawner {
                chan: ours,
                pid,
                lockdown,
            }),
            Ok(other) => Err(io::Error::other(format!(
                "its first record was {other:?}, not Ready"
            ))),
            Err(e) => Err(io::Error::other(format!("its first record: {e}"))),
        }
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// What the spawner's hardening did, by its own account.
    pub fn lockdown(&self) -> &LockdownReport {
        &self.lockdown
    }

    /// The handle the router uses, and the future that serves the channel (spawn it on the
    /// runtime; it ends, with the reason, when the spawner is gone).
    pub fn serve(self) -> io::Result<(Link, impl std::future::Future<Output = String>)> {
        let std = std::os::unix::net::UnixStream::from(self.chan);
        std.set_nonblocking(true)?;
        let chan = Stream {
            sock: UnixStream::from_std(std)?,
            inbox: Inbox::default(),
        };
        let (link, rx, state) = Link::new(self.pid);
        Ok((link, drive(chan, rx, state)))
    }
}

/// The macOS channel: records on a byte stream, descriptors queued as they come.
struct Stream {
    sock: UnixStream,
    inbox: Inbox,
}

impl Transport for Stream {
    async fn write(&mut self, req: &SpawnRequest) -> io::Result<()> {
        let rec = spawn::encode(req).map_err(io::Error::other)?;
        // The router sends no descriptor: a plain write of the framed record.
        self.sock.write_all(&frame_record(&rec)).await
    }

    /// Cancel-safe: what a read brought stays in the inbox until a whole record is there.
    async fn read(&mut self) -> io::Result<Option<(SpawnReply, Option<OwnedFd>)>> {
        loop {
            if let Some(record) = self.inbox.next_record()? {
                let reply = spawn::decode::<SpawnReply>(&record).map_err(io::Error::other)?;
                let fd = match reply {
                    SpawnReply::Started { .. } => {
                        Some(self.inbox.take_descriptor().ok_or_else(|| {
                            io::Error::other("Started came without the helper's channel")
                        })?)
                    }
                    _ => None,
                };
                self.inbox.no_stray_descriptor()?;
                return Ok(Some((reply, fd)));
            }
            self.sock.readable().await?;
            let inbox = &mut self.inbox;
            let sock = &self.sock;
            match sock.try_io(Interest::READABLE, || inbox.fill(sock.as_fd())) {
                Ok(0) if self.inbox.is_empty() => return Ok(None),
                Ok(0) => return Err(io::Error::other("the spawner's last record was cut short")),
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                    ) => {}
                Err(e) => return Err(e),
            }
        }
    }
}
