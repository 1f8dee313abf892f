//! Spawning, verifying and supervising the helpers, and calling them.
//!
//! A helper is routed to only after its hello arrived, its own report says it locked down, and
//! the OS agrees, as the spawner reads it from outside: on Linux `/proc/<pid>/status`
//! (`Seccomp: 2`, `NoNewPrivs: 1`, no effective capabilities); on Windows the helper's token,
//! job, mitigations and process descriptor (`sandbox::wincfg::verify_observed`). A helper that
//! breaks the protocol is killed. A helper that exits is restarted
//! with backoff, and every call in flight to it fails with [`CallError::Crashed`].

use crate::BrokerOptions;
use ipc_schema::codec::MAX_FRAME;
use ipc_schema::route::{Channel, RouteError, RouteState};
use ipc_schema::status::{LockdownReport, ProcStatus, ProcessReport, ProcessState};
use ipc_schema::{Body, Envelope, Role};
use spawner::link::Link as Spawner;
use std::collections::HashMap;
use std::ffi::OsString;
#[cfg(unix)]
use std::os::fd::{AsFd, OwnedFd};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncWriteExt, BufWriter};
#[cfg(unix)]
use tokio::net::UnixStream;
use tokio::sync::{mpsc, oneshot, watch};
use zeroize::Zeroize;

/// How long a helper has to lock down and say hello.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a call waits for a (re)starting helper before failing.
pub(crate) const READY_WAIT: Duration = Duration::from_secs(10);
const BACKOFF_MIN: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(5);
/// How long a helper whose channel refused a write has to exit before it is killed.
const WRITE_FAILED_GRACE: Duration = Duration::from_secs(1);
/// A helper that ran this long without dying resets its backoff.
const HEALTHY_AFTER: Duration = Duration::from_secs(30);

/// Why a call to a helper did not get an answer.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CallError {
    #[error("{role} is not available: {reason}")]
    Unavailable { role: Role, reason: String },
    #[error("{role} stopped while handling this call ({how}); whether it took effect is unknown. The helper is being restarted")]
    Crashed { role: Role, how: String },
}

/// A descriptor that travels with a frame (`SCM_RIGHTS`). On Windows a socket (the egress
/// proxy's client connections) or a pipe end (a remote server's connection for the
/// servers-helper), which the writer duplicates into the helper's process
/// (`sandbox::windows::{socket_into, pipe_into}`) and names after the frame; a sandbox's
/// connector (an agent's or a stdio server's) is not built there.
#[cfg(unix)]
pub type Passed = OwnedFd;
#[cfg(windows)]
pub enum Passed {
    Socket(std::os::windows::io::OwnedSocket),
    Pipe(std::os::windows::io::OwnedHandle),
}
#[cfg(windows)]
impl From<std::net::TcpStream> for Passed {
    fn from(s: std::net::TcpStream) -> Passed {
        Passed::Socket(s.into())
    }
}

/// What the writer duplicates a passed handle into: on Windows the helper's process (a handle
/// that may do only that, from the spawner), for a helper whose channel takes handles (the
/// net-helper's sockets, the servers-helper's pipes).
#[cfg(unix)]
type PassInto = ();
#[cfg(windows)]
type PassInto = Option<std::os::windows::io::OwnedHandle>;

/// One end of a sandbox's connector or a third-party server's stdio. None exists on Windows
/// (not built there: [`connector_pair`] refuses).
#[cfg(unix)]
pub type Connector = OwnedFd;
#[cfg(windows)]
pub enum Connector {}

/// A connector's end as what travels with a frame.
#[cfg(unix)]
pub fn pass(c: Connector) -> Passed {
    c
}
#[cfg(windows)]
pub fn pass(c: Connector) -> Passed {
    match c {}
}

/// A connected pair for a sandbox's connector or a third-party server's stdio (`socketpair`,
/// which reaches no one): one end passes to a helper, the broker keeps the other. Refused on
/// Windows, where only sockets are passed.
#[cfg(unix)]
pub fn connector_pair() -> Result<(Connector, Connector), String> {
    std::os::unix::net::UnixStream::pair()
        .map(|(ours, theirs)| (ours.into(), theirs.into()))
        .map_err(|e| format!("socketpair: {e}"))
}
#[cfg(windows)]
pub fn connector_pair() -> Result<(Connector, Connector), String> {
    Err("not built for Windows: a sandbox's connector (an agent's on Linux, a stdio server's) is a socket passed out of the sandbox, which the Windows tier has no counterpart for".into())
}

/// The broker's ends of a helper's channel: a Unix socket's halves; on Windows the halves of
/// the pipe the spawner duplicated into this process.
#[cfg(unix)]
type ChannelRead = tokio::net::unix::OwnedReadHalf;
#[cfg(unix)]
type ChannelWrite = tokio::net::unix::OwnedWriteHalf;
#[cfg(windows)]
type ChannelRead = tokio::io::ReadHalf<tokio::net::windows::named_pipe::NamedPipeServer>;
#[cfg(windows)]
type ChannelWrite = tokio::io::WriteHalf<tokio::net::windows::named_pipe::NamedPipeServer>;

/// The helpers that run on this OS. The others' slots stay refused, with the reason, so a
/// call to one fails at once and `doctor` says why.
#[cfg(unix)]
pub(crate) fn not_built_here(_role: Role) -> Option<&'static str> {
    None
}
#[cfg(windows)]
pub(crate) fn not_built_here(_role: Role) -> Option<&'static str> {
    None
}

/// A request for a helper: its body, and the descriptor to pass with it.
struct Message {
    body: Body,
    fd: Option<Passed>,
}

/// Who gets a helper's answer.
enum Waiter {
    /// A task awaiting [`HelperSlot::call`].
    Task(oneshot::Sender<Result<Body, CallError>>),
    /// A continuation run by the relay loop itself ([`HelperSlot::call_with`]): no task and no
    /// channel per call on the hot path.
    Forward(Box<dyn FnOnce(Result<Body, CallError>) + Send>),
}

impl Waiter {
    fn complete(self, result: Result<Body, CallError>) {
        match self {
            Waiter::Task(tx) => {
                let _ = tx.send(result);
            }
            Waiter::Forward(f) => f(result),
        }
    }
}

type Pending = HashMap<u64, Waiter>;

struct Live {
    pid: u32,
    tx: mpsc::UnboundedSender<Outgoing>,
}

/// A frame for the helper, and the descriptor that travels with it (`SCM_RIGHTS`, on the
/// frame's first byte: see `ipc_schema::fdpass`). The route tables say which requests may
/// bring one (`Flags::FD`); the helper refuses any other.
struct Outgoing {
    frame: Vec<u8>,
    fd: Option<Passed>,
}

struct SlotState {
    live: Option<Live>,
    pending: Pending,
    next_id: u64,
    state: ProcessState,
    restarts: u32,
    lockdown: Option<LockdownReport>,
    /// The kernel's view (Linux); Windows' outside view is checked, and its report shown.
    kernel: Option<ProcStatus>,
    last_pid: u32,
    /// A planned restart (new grants): why. No new call is sent meanwhile; the helper is
    /// killed once the calls in flight have their answers.
    restart_requested: Option<String>,
}

/// One supervised helper.
pub struct HelperSlot {
    role: Role,
    /// Starts, kills and reports on the helper: the router itself can do none of that.
    spawner: Spawner,
    st: Mutex<SlotState>,
    ready: watch::Sender<bool>,
    /// Set once the supervisor has reaped the last process and stopped (shutdown).
    down: std::sync::atomic::AtomicBool,
}

impl HelperSlot {
    fn new(role: Role, spawner: Spawner) -> Self {
        HelperSlot {
            role,
            spawner,
            st: Mutex::new(SlotState {
                live: None,
                pending: HashMap::new(),
                next_id: 1,
                state: ProcessState::Starting,
                restarts: 0,
                lockdown: None,
                kernel: None,
                last_pid: 0,
                restart_requested: None,
            }),
            ready: watch::channel(false).0,
            down: std::sync::atomic::AtomicBool::new(false),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, SlotState> {
        self.st.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn unavailable_reason(&self) -> String {
        match &self.lock().state {
            ProcessState::Refused { reason } => reason.clone(),
            ProcessState::Starting => "it is starting".into(),
            ProcessState::Ready => "it is restarting".into(),
        }
    }

    /// Sends `body` now if the helper is ready, registering `waiter` for the answer; gives
    /// both back otherwise.
    fn try_send(&self, msg: Message, waiter: Waiter) -> Result<(), Box<(Message, Waiter)>> {
        let mut st = self.lock();
        if st.restart_requested.is_some() {
            return Err(Box::new((msg, waiter)));
        }
        let Some(live) = &st.live else {
            return Err(Box::new((msg, waiter)));
        };
        if live.tx.is_closed() {
            // Its relay's writer stopped (the helper is going): nothing is sent, so the call
            // waits for the restart like any call to a helper that is not ready.
            self.ready.send_replace(false);
            return Err(Box::new((msg, waiter)));
        }
        let Message { body, fd } = msg;
        let tx = live.tx.clone();
        let id = st.next_id;
        st.next_id += 1;
        let env = Envelope::new(id, body);
        let frame = match if sent_secrets(self.role) {
            ipc_schema::codec::encode_exact(&env)
        } else {
            ipc_schema::codec::encode(&env)
        } {
            Ok(f) => f,
            Err(e) => {
                drop(st);
                waiter.complete(Err(CallError::Unavailable {
                    role: self.role,
                    reason: format!("the request cannot be sent: {e}"),
                }));
                return Ok(());
            }
        };
        if tx.send(Outgoing { frame, fd }).is_err() {
            drop(st);
            waiter.complete(Err(CallError::Crashed {
                role: self.role,
                how: "its channel closed".into(),
            }));
            return Ok(());
        }
        st.pending.insert(id, waiter);
        Ok(())
    }

    /// Sends `body` to the helper and waits for its reply. Waits up to [`READY_WAIT`] for a
    /// helper that is (re)starting; fails at once for one that was refused.
    pub async fn call(&self, body: Body) -> Result<Body, CallError> {
        self.call_message(Message { body, fd: None }).await
    }

    /// [`HelperSlot::call`] with a descriptor that travels with the frame (a request whose
    /// route carries `Flags::FD`). If the helper is restarted before the frame is sent, the
    /// descriptor goes to the new one; if the call fails, it is closed.
    pub async fn call_with_fd(&self, body: Body, fd: Passed) -> Result<Body, CallError> {
        self.call_message(Message { body, fd: Some(fd) }).await
    }

    async fn call_message(&self, msg: Message) -> Result<Body, CallError> {
        let deadline = Instant::now() + READY_WAIT;
        let mut ready = self.ready.subscribe();
        let mut msg = msg;
        loop {
            let (otx, orx) = oneshot::channel();
            match self.try_send(msg, Waiter::Task(otx)) {
                Ok(()) => {
                    return orx.await.unwrap_or_else(|_| {
                        Err(CallError::Crashed {
                            role: self.role,
                            how: "its channel closed".into(),
                        })
                    })
                }
                Err(back) => msg = back.0,
            }
            // A refused helper's reason first: a slot this OS never runs is down from the
            // start, and its call must say why, not that gatehouse is stopping.
            let refused = matches!(self.lock().state, ProcessState::Refused { .. });
            if self.down.load(std::sync::atomic::Ordering::SeqCst) && !refused {
                return Err(CallError::Unavailable {
                    role: self.role,
                    reason: "gatehouse is stopping".into(),
                });
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || refused {
                return Err(CallError::Unavailable {
                    role: self.role,
                    reason: self.unavailable_reason(),
                });
            }
            let _ = tokio::time::timeout(left, ready.wait_for(|r| *r)).await;
        }
    }

    /// Like [`HelperSlot::call`], but `done` receives the answer straight from the relay loop
    /// when the helper is ready (the hot path); otherwise a task waits as `call` does.
    pub fn call_with(
        self: &Arc<Self>,
        body: Body,
        done: impl FnOnce(Result<Body, CallError>) + Send + 'static,
    ) {
        let msg = Message { body, fd: None };
        if let Err(back) = self.try_send(msg, Waiter::Forward(Box::new(done))) {
            let (msg, waiter) = *back;
            let slot = self.clone();
            tokio::task::spawn_local(async move { waiter.complete(slot.call_message(msg).await) });
        }
    }

    /// The running helper's pid, if one runs.
    pub fn live_pid(&self) -> Option<u32> {
        self.lock().live.as_ref().map(|l| l.pid)
    }

    pub fn report(&self) -> ProcessReport {
        let st = self.lock();
        ProcessReport {
            name: self.role.name().to_string(),
            pid: st.live.as_ref().map(|l| l.pid).unwrap_or(st.last_pid),
            state: st.state.clone(),
            restarts: st.restarts,
            lockdown: st.lockdown.clone(),
            kernel: st.kernel.clone(),
        }
    }

    pub fn is_ready(&self) -> bool {
        matches!(self.lock().state, ProcessState::Ready)
    }

    pub fn is_settled(&self) -> bool {
        !matches!(self.lock().state, ProcessState::Starting)
    }

    /// Restarts the helper (with the arguments in force then) once its calls in flight have
    /// finished; calls made meanwhile wait for the new one. Landlock rules cannot widen, so a
    /// grant change needs a fresh process.
    pub fn restart_when_idle(&self, why: &str) {
        {
            let mut st = self.lock();
            if st.live.is_none() {
                return; // starting or refused: the next start takes the new arguments anyway
            }
            st.restart_requested = Some(why.to_string());
        }
        self.ready.send_replace(false);
        self.kill_if_idle();
    }

    fn kill_if_idle(&self) {
        let st = self.lock();
        if st.restart_requested.is_some() && st.pending.is_empty() {
            if let Some(live) = &st.live {
                self.spawner.kill(live.pid);
            }
        }
    }

    /// Kills the running helper (shutdown).
    pub fn kill(&self) {
        if let Some(live) = &self.lock().live {
            self.spawner.kill(live.pid);
        }
    }

    fn fail_pending(&self, how: &str) {
        let pending = std::mem::take(&mut self.lock().pending);
        for (_, waiter) in pending {
            waiter.complete(Err(CallError::Crashed {
                role: self.role,
                how: how.to_string(),
            }));
        }
    }
}

/// All helpers.
pub struct Helpers {
    slots: HashMap<Role, Arc<HelperSlot>>,
}

impl Helpers {
    /// Creates the slots and starts a supervisor task for each helper. Must run on the thread
    /// that stays alive for the broker's lifetime: helpers get SIGKILL when their spawning
    /// thread exits (PR_SET_PDEATHSIG).
    pub fn start(opts: Arc<BrokerOptions>, spawner: Spawner) -> Arc<Helpers> {
        let mut slots = HashMap::new();
        for role in Role::HELPERS {
            slots.insert(role, Arc::new(HelperSlot::new(role, spawner.clone())));
        }
        let helpers = Arc::new(Helpers { slots });
        for role in Role::HELPERS {
            let slot = helpers.slots[&role].clone();
            let opts = opts.clone();
            tokio::task::spawn_local(supervise(slot, opts));
        }
        helpers
    }

    pub fn slot(&self, role: Role) -> Option<&Arc<HelperSlot>> {
        self.slots.get(&role)
    }

    pub fn reports(&self) -> Vec<ProcessReport> {
        Role::HELPERS
            .iter()
            .map(|r| self.slots[r].report())
            .collect()
    }

    /// Waits until no helper is still starting, or `max` passes.
    pub async fn settle(&self, max: Duration) {
        let deadline = Instant::now() + max;
        while Instant::now() < deadline && !self.slots.values().all(|s| s.is_settled()) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits until every helper has exited and been reaped, or `max` passes.
    pub async fn wait_all_down(&self, max: Duration) {
        let deadline = Instant::now() + max;
        while Instant::now() < deadline
            && self.slots.values().any(|s| {
                s.lock().live.is_some() || !s.down.load(std::sync::atomic::Ordering::SeqCst)
            })
        {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    pub fn kill_all(&self) {
        for s in self.slots.values() {
            s.kill();
        }
    }
}

async fn supervise(slot: Arc<HelperSlot>, opts: Arc<BrokerOptions>) {
    if let Some(why) = not_built_here(slot.role) {
        slot.lock().state = ProcessState::Refused {
            reason: why.to_string(),
        };
        slot.down.store(true, std::sync::atomic::Ordering::SeqCst);
        return;
    }
    let mut backoff = BACKOFF_MIN;
    loop {
        let started = Instant::now();
        let how = run_once(&slot, &opts).await;
        {
            let mut st = slot.lock();
            st.live = None;
            if !matches!(st.state, ProcessState::Refused { .. }) {
                st.state = ProcessState::Starting;
            }
        }
        slot.ready.send_replace(false);
        slot.fail_pending(&how);
        crate::audit::helper(
            audit_store::chain::AuditKind::HelperExit,
            slot.role.name(),
            "exited",
            how.clone(),
        );
        if opts.shutting_down() {
            slot.down.store(true, std::sync::atomic::Ordering::SeqCst);
            return;
        }
        let planned = slot.lock().restart_requested.take();
        if let Some(why) = planned {
            tracing::info!(helper = %slot.role, "restarting: {why}");
            crate::audit::helper(
                audit_store::chain::AuditKind::HelperRestart,
                slot.role.name(),
                "restarting",
                why,
            );
            slot.lock().restarts += 1;
            continue;
        }
        tracing::warn!(helper = %slot.role, "{how}; restarting in {backoff:?}");
        crate::audit::helper(
            audit_store::chain::AuditKind::HelperRestart,
            slot.role.name(),
            "restarting",
            format!("after {backoff:?}: {how}"),
        );
        if started.elapsed() > HEALTHY_AFTER {
            backoff = BACKOFF_MIN;
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(BACKOFF_MAX);
        slot.lock().restarts += 1;
    }
}

/// Arguments the broker passes to a helper.
fn helper_args(role: Role, opts: &BrokerOptions) -> Vec<OsString> {
    let mut args = Vec::new();
    if opts.allow_degraded {
        args.push("--allow-degraded".into());
    }
    if opts.test_unlocked == Some(role) {
        args.push("--test-skip-lockdown".into());
    }
    if let Some(extra) = opts
        .extra_helper_args
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(&role)
    {
        args.extend(extra.iter().cloned());
    }
    args
}

/// Sets the arguments the broker core adds for `role` (used from its next start).
pub fn set_extra_args(opts: &BrokerOptions, role: Role, args: Vec<OsString>) {
    opts.extra_helper_args
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(role, args);
}

/// Starts the helper once (through the spawner), serves it until it exits, and says how it
/// ended.
async fn run_once(slot: &Arc<HelperSlot>, opts: &BrokerOptions) -> String {
    let role = slot.role;
    let started = match slot.spawner.start(role, helper_args(role, opts)).await {
        Ok(s) => s,
        Err(e) => {
            let reason = format!("cannot start {role}: {e}");
            slot.lock().state = ProcessState::Refused {
                reason: reason.clone(),
            };
            return reason;
        }
    };
    let pid = started.pid;
    slot.lock().last_pid = pid;
    tracing::info!(helper = %role, pid, "started");

    // The spawner reports the exit once it has reaped the helper; a watch channel lets both
    // the relay loop and the wait below see the same exit.
    let (exit_tx, exit_rx) = watch::channel(None::<String>);
    let ended = started.ended;
    tokio::task::spawn_local(async move {
        let how = ended
            .await
            .unwrap_or_else(|_| "ended (the spawner is gone)".to_string());
        let _ = exit_tx.send(Some(how));
    });
    let exited = {
        let exit_rx = exit_rx.clone();
        move || {
            let mut rx = exit_rx.clone();
            async move {
                let _ = rx.wait_for(|how| how.is_some()).await;
            }
        }
    };
    let broke = match adopt(started.channel) {
        Ok((rd, wr, into)) => serve(slot, opts, (rd, wr, into), pid, &exited).await,
        Err(e) => Some(format!("channel setup failed: {e}")),
    };
    if let Some(reason) = &broke {
        slot.spawner.kill(pid);
        tracing::error!(helper = %role, pid, "killed: {reason}");
    }
    exited().await;
    let status = exit_rx
        .borrow()
        .clone()
        .unwrap_or_else(|| "ended".to_string());
    match broke {
        Some(reason) => format!("{role} (pid {pid}) was killed by the broker: {reason}"),
        None => format!("{role} (pid {pid}) {status}"),
    }
}

/// The broker's end of a helper's channel, as the spawner handed it over, ready for tokio.
#[cfg(unix)]
fn adopt(
    channel: spawner::link::HelperChannel,
) -> std::io::Result<(ChannelRead, ChannelWrite, PassInto)> {
    let sock = std::os::unix::net::UnixStream::from(channel);
    sock.set_nonblocking(true)?;
    let (rd, wr) = UnixStream::from_std(sock)?.into_split();
    Ok((rd, wr, ()))
}
#[cfg(windows)]
fn adopt(
    channel: spawner::link::HelperChannel,
) -> std::io::Result<(ChannelRead, ChannelWrite, PassInto)> {
    let (rd, wr) = tokio::io::split(sandbox::windows::async_server(channel.pipe)?);
    Ok((rd, wr, channel.process))
}

/// Whether `report` matches the OS's view of the helper, as the spawner read it (the router
/// reads no /proc and opens no other process). The kernel's view is kept for `doctor`,
/// whatever the verdict.
#[cfg(target_os = "linux")]
fn verify_outside(
    slot: &HelperSlot,
    report: &LockdownReport,
    kernel: ProcStatus,
    allow_degraded: bool,
) -> Result<(), String> {
    slot.lock().kernel = Some(kernel.clone());
    report.verify(slot.role, &kernel, allow_degraded)
}

/// On macOS: the hello's lockdown steps, and the system's word (read by the spawner with
/// `sandbox_check`) that a Seatbelt profile confines the helper.
#[cfg(target_os = "macos")]
fn verify_outside(
    slot: &HelperSlot,
    report: &LockdownReport,
    outside: spawner::link::KernelView,
    allow_degraded: bool,
) -> Result<(), String> {
    report.verify_macos(slot.role, &outside, allow_degraded)
}

/// On Windows: the token, job, mitigations and process descriptor the spawner reads through
/// its handles must be what the hello says, and both must meet the role's policy.
#[cfg(windows)]
fn verify_outside(
    slot: &HelperSlot,
    report: &LockdownReport,
    observed: spawner::link::KernelView,
    allow_degraded: bool,
) -> Result<(), String> {
    use sandbox::{wincfg, Profile};
    let profile = match slot.role {
        Role::Net => Profile::Net,
        Role::Exec => Profile::Exec,
        // Its grant roots' ACEs are applied by the broker (`Gate::grant_fs_aces`); the token,
        // job and mitigations checked here do not depend on them.
        Role::Fs => Profile::Fs(sandbox::FsProfile::default()),
        // The one store gatehouse has on Windows.
        Role::Secrets => Profile::Secrets(ipc_schema::secrets::StoreKind::CredentialManager),
        Role::Servers => Profile::Servers,
        other => return Err(format!("{other} has no Windows policy")),
    };
    let policy = wincfg::helper_policy(&profile).map_err(|e| e.to_string())?;
    wincfg::verify_observed(&policy, report, &observed, allow_degraded)
}

/// Verifies the hello, then relays replies until the helper exits (`None`) or breaks the
/// protocol (`Some(reason)`: the caller kills it).
async fn serve<F>(
    slot: &Arc<HelperSlot>,
    opts: &BrokerOptions,
    (rd, wr, pass_into): (ChannelRead, ChannelWrite, PassInto),
    pid: u32,
    exited: &impl Fn() -> F,
) -> Option<String>
where
    F: std::future::Future<Output = ()>,
{
    let role = slot.role;
    let mut rd = if answers_with_secrets(role) {
        ipc_schema::framed::FrameReader::wiping(rd, MAX_FRAME)
    } else {
        ipc_schema::framed::FrameReader::new(rd, MAX_FRAME)
    };

    // Every frame from the helper is checked against its channel's table (the hello first and
    // once among them); anything else ends the helper.
    let table = Channel::to_broker(role).table();
    let mut route = RouteState::default();
    let hello = tokio::select! {
        r = tokio::time::timeout(HELLO_TIMEOUT, rd.next()) => r,
        _ = exited() => return None,
    };
    if let Ok(Ok(Some(env))) = &hello {
        if let Err(e) = table.check(&mut route, &env.body) {
            return Some(refusal(role, e));
        }
    }
    let report = match hello {
        Err(_) => return Some(format!("no hello within {HELLO_TIMEOUT:?}")),
        Ok(Err(e)) => return Some(format!("bad hello frame: {e}")),
        Ok(Ok(None)) => return None,
        Ok(Ok(Some(Envelope {
            body: Body::Hello(h),
            ..
        }))) => {
            if h.role != role {
                return Some(format!("it says it is {}, not {role}", h.role));
            }
            h.lockdown
        }
        Ok(Ok(Some(other))) => {
            return Some(format!(
                "its first message was {:?}, not a hello",
                other.body.kind()
            ))
        }
    };
    // A helper that refuses (the machine lacks what it needs) says why and exits: before its
    // /proc entry is gone.
    if let Some(reason) = report.refusal(role) {
        slot.lock().state = ProcessState::Refused {
            reason: reason.clone(),
        };
        return Some(reason);
    }
    slot.lock().lockdown = Some(report.clone());
    let outside = match slot.spawner.status(pid).await {
        Ok(k) => k,
        Err(e) => return Some(format!("cannot read its status: {e}")),
    };
    if let Err(reason) = verify_outside(slot, &report, outside, opts.allow_degraded) {
        slot.lock().state = ProcessState::Refused {
            reason: reason.clone(),
        };
        return Some(reason);
    }

    let (tx, mut rx) = mpsc::unbounded_channel::<Outgoing>();
    {
        let mut st = slot.lock();
        st.live = Some(Live { pid, tx });
        st.state = ProcessState::Ready;
    }
    slot.ready.send_replace(true);
    tracing::info!(helper = %role, pid, "locked down and ready");
    crate::audit::helper(
        audit_store::chain::AuditKind::HelperStart,
        role.name(),
        "ready",
        format!("pid {pid}"),
    );

    let wipe = sent_secrets(role);
    #[cfg(unix)]
    let () = pass_into;
    let writer = async move {
        // Frames that may carry a secret are written straight to the socket (a write buffer
        // would keep a copy) and zeroed once written.
        let mut w = BufWriter::with_capacity(if wipe { 0 } else { 64 * 1024 }, wr);
        while let Some(first) = rx.recv().await {
            let mut next = Some(first);
            while let Some(Outgoing { mut frame, fd }) = next.take() {
                let sent = match fd {
                    None => w.write_all(&frame).await,
                    #[cfg(unix)]
                    Some(fd) => write_with_fd(&mut w, &frame, fd).await,
                    #[cfg(windows)]
                    Some(passed) => {
                        write_with_handle(&mut w, &frame, passed, pass_into.as_ref()).await
                    }
                };
                if wipe {
                    frame.zeroize();
                }
                if sent.is_err() {
                    return;
                }
                next = rx.try_recv().ok();
            }
            if w.flush().await.is_err() {
                return;
            }
        }
    };
    tokio::pin!(writer);
    let exit = exited();
    tokio::pin!(exit);
    // Once the helper has exited, the replies it wrote before dying are still in the socket:
    // they are read to the end (its end is closed, so the end comes at once) and answer their
    // calls, instead of those calls failing as "whether it took effect is unknown". Anything
    // else read then (a torn frame, a kind it may not send) ends the reading: it is dead.
    let mut dead = false;
    loop {
        let frame = if dead {
            match tokio::time::timeout(WRITE_FAILED_GRACE, rd.next()).await {
                Ok(Ok(Some(env))) => Ok(Some(env)),
                _ => return None,
            }
        } else {
            tokio::select! {
                f = rd.next() => f,
                _ = &mut writer => {
                    // A write failed: the helper died or stopped reading. Nothing more can
                    // reach it, so no call waits on it: new calls wait for the restart, and the
                    // calls in flight fail once it has exited (at once if it died; killed if it
                    // lingers), after the replies it wrote before are read.
                    slot.ready.send_replace(false);
                    match tokio::time::timeout(WRITE_FAILED_GRACE, &mut exit).await {
                        Ok(()) => {
                            dead = true;
                            continue;
                        }
                        Err(_) => return Some("it stopped taking requests (a write to its channel failed)".into()),
                    }
                }
                _ = &mut exit => {
                    dead = true;
                    continue;
                }
            }
        };
        let env = match frame {
            Ok(Some(env)) => env,
            Ok(None) => return None,
            // A helper that died with requests unread resets the connection: that is an exit,
            // seen through the pidfd, not a protocol violation.
            Err(ipc_schema::FrameError::Io(_)) => return None,
            Err(e) => return Some(format!("sent a bad frame: {e}")),
        };
        if let Err(e) = table.check(&mut route, &env.body) {
            if dead {
                return None;
            }
            return Some(refusal(role, e));
        }
        let waiter = slot.lock().pending.remove(&env.id);
        match waiter {
            Some(waiter) => {
                waiter.complete(Ok(env.body));
                slot.kill_if_idle();
            }
            None if dead => return None,
            None => {
                return Some(format!(
                    "answered request {} that it was never sent",
                    env.id
                ))
            }
        }
    }
}

/// Writes `frame` with `fd` attached: what is buffered goes first, then one `sendmsg` carries
/// the descriptor with the frame's first bytes, then the rest (`ipc_schema::fdpass`'s rule).
#[cfg(unix)]
async fn write_with_fd(
    w: &mut BufWriter<ChannelWrite>,
    frame: &[u8],
    fd: OwnedFd,
) -> std::io::Result<()> {
    w.flush().await?;
    let sock: &UnixStream = w.get_ref().as_ref();
    let n = sock
        .async_io(tokio::io::Interest::WRITABLE, || {
            ipc_schema::fdpass::send_with_fd(sock, frame, fd.as_fd())
        })
        .await?;
    // The kernel holds its own reference to the descriptor once sendmsg returned.
    drop(fd);
    w.get_mut().write_all(&frame[n..]).await
}

/// Windows: the frame, then the value of `passed` duplicated into the helper's process (see
/// `ipc_schema::helper::Passed`). A helper that takes no handles, or a duplication that fails,
/// fails the write: the helper is then restarted, and the call fails as for a dead helper.
#[cfg(windows)]
async fn write_with_handle(
    w: &mut BufWriter<ChannelWrite>,
    frame: &[u8],
    passed: Passed,
    into: Option<&std::os::windows::io::OwnedHandle>,
) -> std::io::Result<()> {
    use std::os::windows::io::{AsHandle, AsSocket};
    let Some(helper) = into else {
        return Err(std::io::Error::other(
            "a handle for a helper whose channel takes none",
        ));
    };
    let theirs = match &passed {
        Passed::Socket(s) => sandbox::windows::socket_into(helper.as_handle(), s.as_socket()),
        Passed::Pipe(p) => sandbox::windows::pipe_into(helper.as_handle(), p.as_handle()),
    }
    .map_err(std::io::Error::other)?;
    // The helper's copy is its own now; ours closes here.
    drop(passed);
    w.write_all(frame).await?;
    w.write_all(&theirs.0.to_le_bytes()).await
}

/// Why a helper's frame ends it, in the words the log has always used for a kind it may not
/// send.
fn refusal(role: Role, e: RouteError) -> String {
    match e {
        RouteError::NotPermitted { kind, .. } => {
            format!(
                "sent a {:?} message, which {role} may not send",
                kind.body_kind()
            )
        }
        RouteError::FirstExpected { kind, .. } => {
            format!("its first message was {:?}, not a hello", kind.body_kind())
        }
        other => format!("broke its channel's order: {other}"),
    }
}

/// The helper that answers with secrets: the secrets-helper's credential headers. Its frames
/// are read into a wiping buffer (rule 9: routing leaves no secret in the broker's memory).
fn answers_with_secrets(role: Role) -> bool {
    role == Role::Secrets
}

/// The helper that is sent secrets: the net-helper gets credential headers with
/// `http_request`. Frames to it are encoded in one allocation, written unbuffered and zeroed
/// after the write. (Its answers are scrubbed of the credential, so they are read as usual.)
fn sent_secrets(role: Role) -> bool {
    role == Role::Net
}
