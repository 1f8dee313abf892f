//! The router's end of the spawner channel on Linux: a `SOCK_SEQPACKET` pair, one record per
//! message, a helper's channel attached to its `Started` record (`SCM_RIGHTS`).

use super::{drive, Link, Transport};
use ipc_schema::spawn::{self, SpawnReply, SpawnRequest, MAX_SPAWN_MESSAGE};
use ipc_schema::status::LockdownReport;
use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
use sandbox::linux::command::fdpass::recv_with_fds;
use sandbox::process::spawn_helper;
use std::collections::VecDeque;
use std::ffi::OsString;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use tokio::io::Interest;
use tokio::net::UnixDatagram;

/// The spawner, started but not yet served (before the router's runtime exists).
pub struct Spawner {
    chan: OwnedFd,
    pid: u32,
    lockdown: LockdownReport,
    // Kept so the spawner is not reaped by accident; the router never waits for it (it cannot:
    // wait4 is not in its filter), it dies with the router (PR_SET_PDEATHSIG).
    _child: std::process::Child,
}

impl Spawner {
    /// Starts `program --helper-dir DIR [--allow-degraded]` with a `SOCK_SEQPACKET` channel as fd 3 and waits for
    /// its first record (`Ready`). Blocking; call it before the router locks down.
    pub fn start(program: &Path, helper_dir: &Path, allow_degraded: bool) -> io::Result<Spawner> {
        let (ours, theirs) = socketpair(
            AddressFamily::Unix,
            SockType::SeqPacket,
            None,
            SockFlag::SOCK_CLOEXEC,
        )
        .map_err(io::Error::from)?;
        let mut args: Vec<OsString> = vec!["--helper-dir".into(), helper_dir.as_os_str().into()];
        if allow_degraded {
            args.push("--allow-degraded".into());
        }
        let spawned = spawn_helper(program, &args, theirs, &[])?;
        let mut buf = vec![0u8; MAX_SPAWN_MESSAGE + 1];
        let mut fds = VecDeque::new();
        let n = recv_with_fds(ours.as_fd(), &mut buf, &mut fds)?;
        if n == 0 {
            return Err(io::Error::other(format!(
                "{} exited before it was ready",
                program.display()
            )));
        }
        match spawn::decode::<SpawnReply>(&buf[..n]) {
            Ok(SpawnReply::Ready { pid, lockdown })
                if pid == spawned.child.id() && fds.is_empty() =>
            {
                Ok(Spawner {
                    chan: ours,
                    pid,
                    lockdown,
                    _child: spawned.child,
                })
            }
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
        // A SOCK_SEQPACKET socket behaves as a connected datagram socket for recv and send
        // (one record each), which is all tokio's datagram type does with it; descriptors go
        // through recvmsg inside `try_io`.
        let std = std::os::unix::net::UnixDatagram::from(self.chan);
        std.set_nonblocking(true)?;
        let fd = UnixDatagram::from_std(std)?;
        let (link, rx, state) = Link::new(self.pid);
        let chan = Seqpacket {
            fd,
            buf: vec![0u8; MAX_SPAWN_MESSAGE + 1],
        };
        Ok((link, drive(chan, rx, state)))
    }
}

/// The Linux channel: one record per `SOCK_SEQPACKET` message, a helper's channel attached.
struct Seqpacket {
    fd: UnixDatagram,
    buf: Vec<u8>,
}

impl Transport for Seqpacket {
    async fn write(&mut self, req: &SpawnRequest) -> io::Result<()> {
        write_record(&self.fd, req).await
    }

    async fn read(&mut self) -> io::Result<Option<(SpawnReply, Option<OwnedFd>)>> {
        read_record(&self.fd, &mut self.buf).await
    }
}

async fn write_record(fd: &UnixDatagram, req: &SpawnRequest) -> io::Result<()> {
    let rec = spawn::encode(req).map_err(io::Error::other)?;
    loop {
        fd.writable().await?;
        match fd.try_send(&rec) {
            Ok(n) if n == rec.len() => return Ok(()),
            Ok(n) => {
                return Err(io::Error::other(format!(
                    "{n} of {} bytes of a record went",
                    rec.len()
                )))
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                ) => {}
            Err(e) => return Err(e),
        }
    }
}

async fn read_record(
    fd: &UnixDatagram,
    buf: &mut [u8],
) -> io::Result<Option<(SpawnReply, Option<OwnedFd>)>> {
    loop {
        fd.readable().await?;
        let mut fds = VecDeque::new();
        match fd.try_io(Interest::READABLE, || {
            recv_with_fds(fd.as_fd(), buf, &mut fds)
        }) {
            Ok(0) => return Ok(None),
            Ok(n) => {
                if fds.len() > 1 {
                    return Err(io::Error::other("more than one descriptor on a record"));
                }
                let reply = spawn::decode::<SpawnReply>(&buf[..n]).map_err(io::Error::other)?;
                return Ok(Some((reply, fds.pop_front())));
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                ) => {}
            Err(e) => return Err(e),
        }
    }
}
