//! The router's end of the spawner channel.
//!
//! `Spawner::start` starts the spawner and waits for its `Ready`: on Linux before the router
//! locks itself down (it forks and execs; blocking), on Windows on the router's runtime (the
//! channel is an overlapped pipe). The rest runs on the router's tokio runtime, where the
//! future `Spawner::serve` returns reads the spawner's records and writes the router's
//! requests. How records and helpers' channels cross is each system's (`linux`: a
//! `SOCK_SEQPACKET` pair, descriptors attached; `macos`: a stream pair, length-prefixed
//! records, descriptors attached; `windows`: a pipe, length-prefixed records, channels
//! duplicated into this process); what they mean is here.

use ipc_schema::spawn::{SpawnReply, SpawnRequest};
use ipc_schema::Role;
use std::collections::HashMap;
use std::ffi::OsString;
use std::sync::{Arc, Mutex};
use tokio::sync::{mpsc, oneshot};

#[cfg(target_os = "linux")]
mod linux;
#[cfg(target_os = "macos")]
mod macos;
#[cfg(windows)]
mod windows;
#[cfg(target_os = "linux")]
pub use linux::Spawner;
#[cfg(target_os = "macos")]
pub use macos::Spawner;
#[cfg(windows)]
pub use windows::Spawner;

/// The router's end of a helper's channel.
#[cfg(unix)]
pub type HelperChannel = std::os::fd::OwnedFd;
/// The router's end of a helper's channel (overlapped: `sandbox::windows::async_server`).
#[cfg(windows)]
pub struct HelperChannel {
    pub pipe: std::os::windows::io::OwnedHandle,
    /// For a helper whose channel takes handles (the net-helper), a handle to its process that
    /// may duplicate handles into it and nothing more (`sandbox::windows::socket_into`).
    pub process: Option<std::os::windows::io::OwnedHandle>,
}

/// What the spawner reads of a helper for `Status`: `/proc/PID/status` on Linux.
#[cfg(target_os = "linux")]
pub type KernelView = ipc_schema::status::ProcStatus;
/// What the spawner reads of a helper for `Status` on macOS: its Seatbelt confinement and user.
#[cfg(target_os = "macos")]
pub type KernelView = ipc_schema::status::MacConfinement;
/// What the spawner reads of a helper for `Status`: its token, job and mitigations, from
/// outside (which the helper's hello must match: `sandbox::wincfg::verify_observed`).
#[cfg(windows)]
pub type KernelView = Box<ipc_schema::status::WindowsConfinement>;

/// A helper the spawner started.
pub struct Started {
    pub pid: u32,
    /// The router's end of the helper's channel.
    pub channel: HelperChannel,
    /// Resolves with how the helper ended (or why nobody can tell any more).
    pub ended: oneshot::Receiver<String>,
}

/// What a `Start` gets back: the pid, the channel, the exit to come.
type StartReply = oneshot::Sender<Result<(u32, HelperChannel, oneshot::Receiver<String>), String>>;

/// Where the answer to a `Status` or `Lineage` goes.
type Answer<T> = oneshot::Sender<Result<T, String>>;

#[derive(Default)]
struct State {
    next_id: u64,
    starts: HashMap<u64, StartReply>,
    statuses: HashMap<u64, Answer<KernelView>>,
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
    /// A link to the spawner `pid`, the requests it queues, and the state `drive` answers.
    fn new(
        pid: u32,
    ) -> (
        Link,
        mpsc::UnboundedReceiver<SpawnRequest>,
        Arc<Mutex<State>>,
    ) {
        let (tx, rx) = mpsc::unbounded_channel();
        let state = Arc::new(Mutex::new(State::default()));
        let link = Link {
            tx,
            state: state.clone(),
            pid,
        };
        (link, rx, state)
    }

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

    /// Kills a helper it started (`SIGKILL`; on Windows its job); its `ended` resolves once it
    /// is gone.
    pub fn kill(&self, pid: u32) {
        let _ = self.send(SpawnRequest::Kill { pid });
    }

    /// The spawner's view of `pid` (on Linux a helper, the router or the spawner; on Windows a
    /// helper).
    pub async fn status(&self, pid: u32) -> Result<KernelView, String> {
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

/// How records cross: each system's channel.
trait Transport {
    /// Writes one request.
    async fn write(&mut self, req: &SpawnRequest) -> std::io::Result<()>;
    /// The next reply and the helper channel that came with it; `None` at the end. Must be
    /// cancel-safe: it is raced against the router's requests.
    async fn read(&mut self) -> std::io::Result<Option<(SpawnReply, Option<HelperChannel>)>>;
}

/// Reads the spawner's records and writes the router's requests until the channel ends; then
/// fails everything outstanding and returns why.
async fn drive(
    mut chan: impl Transport,
    mut rx: mpsc::UnboundedReceiver<SpawnRequest>,
    state: Arc<Mutex<State>>,
) -> String {
    let why = loop {
        tokio::select! {
            req = rx.recv() => {
                let Some(req) = req else { break "the router dropped the spawner link".to_string() };
                if let Err(e) = chan.write(&req).await {
                    break format!("writing to the spawner: {e}");
                }
            }
            got = chan.read() => {
                match got {
                    Ok(None) => break "the spawner exited".to_string(),
                    Ok(Some((reply, channel))) => {
                        if let Err(e) = dispatch(&state, reply, channel) {
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

/// Answers whoever waits for `reply`. `channel` is the helper channel that came with it (a
/// descriptor attached on Linux; a handle duplicated into this process on Windows, adopted by
/// the transport from `StartedDuplicated`). The other system's records break the protocol.
fn dispatch(
    state: &Mutex<State>,
    reply: SpawnReply,
    mut channel: Option<HelperChannel>,
) -> Result<(), String> {
    let mut st = state.lock().unwrap_or_else(|e| e.into_inner());
    let carries = channel.is_some();
    let result = match reply {
        #[cfg(unix)]
        SpawnReply::Started { id, pid } => started(&mut st, id, pid, channel.take()),
        #[cfg(windows)]
        SpawnReply::StartedDuplicated { id, pid, .. } => started(&mut st, id, pid, channel.take()),
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
        #[cfg(target_os = "linux")]
        SpawnReply::Status { id, status } => answer(&mut st.statuses, id, status),
        #[cfg(windows)]
        SpawnReply::Observed { id, observed } => answer(&mut st.statuses, id, observed),
        #[cfg(target_os = "macos")]
        SpawnReply::ObservedMac { id, observed } => answer(&mut st.statuses, id, observed),
        SpawnReply::Lineage { id, under } => answer(&mut st.lineages, id, under),
        SpawnReply::Ready { .. } => Err("a second Ready".to_string()),
        #[cfg(unix)]
        SpawnReply::StartedDuplicated { .. } | SpawnReply::Observed { .. } => {
            Err("a Windows spawner's record".to_string())
        }
        #[cfg(not(target_os = "macos"))]
        SpawnReply::ObservedMac { .. } => Err("a macOS spawner's record".to_string()),
        #[cfg(not(target_os = "linux"))]
        SpawnReply::Status { .. } => Err("a Linux spawner's record".to_string()),
        #[cfg(windows)]
        SpawnReply::Started { .. } => Err("a Unix spawner's record".to_string()),
    };
    if carries && channel.is_some() {
        return Err("a helper channel on a record that carries none".into());
    }
    result
}

fn started(
    st: &mut State,
    id: u64,
    pid: u32,
    channel: Option<HelperChannel>,
) -> Result<(), String> {
    let channel = channel.ok_or("Started without the helper's channel")?;
    let tx = st.starts.remove(&id).ok_or("Started for no request")?;
    // Registered now, before any `Ended` of this pid can be read.
    let (etx, erx) = oneshot::channel();
    st.ended.insert(pid, etx);
    let _ = tx.send(Ok((pid, channel, erx)));
    Ok(())
}

fn answer<T>(
    waiting: &mut HashMap<u64, Answer<T>>,
    id: u64,
    value: Result<T, String>,
) -> Result<(), String> {
    let tx = waiting.remove(&id).ok_or("an answer to no request")?;
    let _ = tx.send(value);
    Ok(())
}
