//! The router's end of the spawner channel.
//!
//! [`Spawner::start`] runs before the router locks itself down (it forks and execs); the rest
//! runs on the router's tokio runtime, where [`Link::drive`] reads the spawner's records and
//! writes the router's requests.

use ipc_schema::spawn::{self, SpawnReply, SpawnRequest, MAX_SPAWN_MESSAGE};
use ipc_schema::status::{LockdownReport, ProcStatus};
use ipc_schema::Role;
use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
use sandbox::linux::command::fdpass::recv_with_fds;
use sandbox::process::spawn_helper;
use std::collections::{HashMap, VecDeque};
use std::ffi::OsString;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::sync::{Arc, Mutex};
use tokio::io::Interest;
use tokio::net::UnixDatagram;
use tokio::sync::{mpsc, oneshot};

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
        let (tx, rx) = mpsc::unbounded_channel();
        let state = Arc::new(Mutex::new(State::default()));
        let link = Link {
            tx,
            state: state.clone(),
            pid: self.pid,
        };
        Ok((link, drive(fd, rx, state)))
    }
}

/// A helper the spawner started.
pub struct Started {
    pub pid: u32,
    /// The router's end of the helper's channel.
    pub channel: OwnedFd,
    /// Resolves with how the helper ended (or why nobody can tell any more).
    pub ended: oneshot::Receiver<String>,
}

/// What a `Start` gets back: the pid, the channel, the exit to come.
type StartReply = oneshot::Sender<Result<(u32, OwnedFd, oneshot::Receiver<String>), String>>;

/// Where the answer to a `Status` or `Lineage` goes.
type Answer<T> = oneshot::Sender<Result<T, String>>;

#[derive(Default)]
struct State {
    next_id: u64,
    starts: HashMap<u64, StartReply>,
    statuses: HashMap<u64, Answer<ProcStatus>>,
    lineages: HashMap<u64, Answer<bool>>,
    ended: HashMap<u32, oneshot::Sender<String>>,
    /// Set once the spawner is gone: why.
    closed: Option<String>,
}

impl State {
    fn id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }
}

/// The router's handle on the spawner. Cheap to clone.
#[derive(Clone)]
pub struct Link {
    tx: mpsc::UnboundedSender<SpawnRequest>,
    state: Arc<Mutex<State>>,
    pid: u32,
}

impl Link {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The spawner's pid.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Asks for a helper of `kind` with `args`.
    pub async fn start(&self, kind: Role, args: Vec<OsString>) -> Result<Started, String> {
        let (tx, rx) = oneshot::channel();
        let id = {
            let mut st = self.lock();
            if let Some(why) = &st.closed {
                return Err(why.clone());
            }
            let id = st.id();
            st.starts.insert(id, tx);
            id
        };
        self.send(SpawnRequest::Start { id, kind, args })?;
        let (pid, channel, ended) = rx.await.map_err(|_| "the spawner is gone".to_string())??;
        Ok(Started {
            pid,
            channel,
            ended,
        })
    }

    /// `SIGKILL`s a helper it started; its `ended` resolves once it is reaped.
    pub fn kill(&self, pid: u32) {
        let _ = self.send(SpawnRequest::Kill { pid });
    }

    /// The kernel's view of `pid` (a helper, the router, the spawner).
    pub async fn status(&self, pid: u32) -> Result<ProcStatus, String> {
        self.ask(|st| &mut st.statuses, |id| SpawnRequest::Status { id, pid })
            .await
    }

    /// Whether `pid` runs under the spawner (a helper, or a process a helper started).
    pub async fn lineage(&self, pid: u32) -> Result<bool, String> {
        self.ask(
            |st| &mut st.lineages,
            |id| SpawnRequest::Lineage { id, pid },
        )
        .await
    }

    /// Sends the request `req(id)` and waits for its answer, registered in `waiting`'s map.
    async fn ask<T>(
        &self,
        waiting: impl FnOnce(&mut State) -> &mut HashMap<u64, Answer<T>>,
        req: impl FnOnce(u64) -> SpawnRequest,
    ) -> Result<T, String> {
        let (tx, rx) = oneshot::channel();
        let id = {
            let mut st = self.lock();
            if let Some(why) = &st.closed {
                return Err(why.clone());
            }
            let id = st.id();
            waiting(&mut st).insert(id, tx);
            id
        };
        self.send(req(id))?;
        rx.await.map_err(|_| "the spawner is gone".to_string())?
    }

    fn send(&self, req: SpawnRequest) -> Result<(), String> {
        self.tx
            .send(req)
            .map_err(|_| "the spawner channel is closed".to_string())
    }
}

/// Reads the spawner's records and writes the router's requests until the channel ends; then
/// fails everything outstanding and returns why.
async fn drive(
    fd: UnixDatagram,
    mut rx: mpsc::UnboundedReceiver<SpawnRequest>,
    state: Arc<Mutex<State>>,
) -> String {
    let mut buf = vec![0u8; MAX_SPAWN_MESSAGE + 1];
    let why = loop {
        tokio::select! {
            req = rx.recv() => {
                let Some(req) = req else { break "the router dropped the spawner link".to_string() };
                if let Err(e) = write_record(&fd, &req).await {
                    break format!("writing to the spawner: {e}");
                }
            }
            got = read_record(&fd, &mut buf) => {
                match got {
                    Ok(None) => break "the spawner exited".to_string(),
                    Ok(Some((reply, fd))) => {
                        if let Err(e) = dispatch(&state, reply, fd) {
                            break format!("the spawner broke the protocol: {e}");
                        }
                    }
                    Err(e) => break format!("reading from the spawner: {e}"),
                }
            }
        }
    };
    let mut st = state.lock().unwrap_or_else(|e| e.into_inner());
    st.closed = Some(why.clone());
    for (_, tx) in st.starts.drain() {
        let _ = tx.send(Err(why.clone()));
    }
    for (_, tx) in st.statuses.drain() {
        let _ = tx.send(Err(why.clone()));
    }
    for (_, tx) in st.lineages.drain() {
        let _ = tx.send(Err(why.clone()));
    }
    for (_, tx) in st.ended.drain() {
        let _ = tx.send(format!("unknown: {why}"));
    }
    why
}

fn dispatch(
    state: &Mutex<State>,
    reply: SpawnReply,
    mut fd: Option<OwnedFd>,
) -> Result<(), String> {
    let mut st = state.lock().unwrap_or_else(|e| e.into_inner());
    let carries = fd.is_some();
    let result = match reply {
        SpawnReply::Started { id, pid } => {
            let channel = fd.take().ok_or("Started without the helper's channel")?;
            let tx = st.starts.remove(&id).ok_or("Started for no request")?;
            // Registered now, before any `Ended` of this pid can be read.
            let (etx, erx) = oneshot::channel();
            st.ended.insert(pid, etx);
            let _ = tx.send(Ok((pid, channel, erx)));
            Ok(())
        }
        SpawnReply::NotStarted { id, reason } => {
            let tx = st.starts.remove(&id).ok_or("NotStarted for no request")?;
            let _ = tx.send(Err(reason));
            Ok(())
        }
        SpawnReply::Ended { pid, how } => {
            if let Some(tx) = st.ended.remove(&pid) {
                let _ = tx.send(how);
            }
            Ok(())
        }
        SpawnReply::Status { id, status } => {
            let tx = st.statuses.remove(&id).ok_or("Status for no request")?;
            let _ = tx.send(status);
            Ok(())
        }
        SpawnReply::Lineage { id, under } => {
            let tx = st.lineages.remove(&id).ok_or("Lineage for no request")?;
            let _ = tx.send(under);
            Ok(())
        }
        SpawnReply::Ready { .. } => Err("a second Ready".to_string()),
        SpawnReply::StartedDuplicated { .. } | SpawnReply::Observed { .. } => {
            Err("a Windows spawner's record".to_string())
        }
    };
    if carries && fd.is_some() {
        return Err("a descriptor on a record that carries none".into());
    }
    result
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
