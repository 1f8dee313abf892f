//! The listening sockets for the fronts (console and gateways), and what the broker does with
//! each frame they send.
//!
//! Who is talking is the socket they connected to (ui.sock, gateway.sock or notify.sock; on
//! Windows the pipe of that name) and what the OS says of the peer (SO_PEERCRED; the pipe
//! client's process and token): a peer of another user is dropped before it can send anything.
//! A peer that sends a malformed or oversized frame, or a message its role may not send, is
//! killed (SIGKILL through a pidfd opened at accept; on Windows `TerminateProcess` through a
//! process handle opened at accept) and disconnected; the broker goes on serving the others.
//!
//! No process under the spawner (a helper, or a command the exec-helper runs) may be a peer of
//! these sockets: in the exec sandbox's Landlock tier a command can reach them by path (no mount
//! namespace hides them) and passes the uid check. The spawner, which may read `/proc`, walks
//! each peer's parents before the broker reads its first frame ([`not_sandboxed`]; on Windows it
//! asks whether the peer is in a helper's job); a peer under it, one whose pid the kernel does
//! not give, or one whose ancestry cannot be read is killed.
//!
//! A `gatehouse run` agent's gateway connections come another way: through its command's
//! connector (`crate::launch`), from the socket inside its sandbox. The kernel vouches for
//! where they come from (only that sandbox holds the connector), not for the uid (the agent
//! runs as the sandbox's user); each must open its session with the run's token, which becomes
//! a fresh session of the run's profile ([`serve_launched`]). On Windows, where nothing passes
//! a connection out of a sandbox, they come on a pipe the broker makes for the run
//! ([`accept_run`]): first instance of a name drawn per run, its DACL naming this user and the
//! command SID; the peer must be this user's, in the exec sandbox (the spawner's lineage check,
//! the other way round), and must open its session with the run's token.

use crate::Ctx;
use ipc_schema::codec::{encode, MAX_FRAME};
use ipc_schema::route::{Channel, RouteError, RouteState};
use ipc_schema::{Body, Envelope, ErrorCode, ErrorReply, Role};
use sandbox::endpoint::Listener;
#[cfg(target_os = "linux")]
use sandbox::process::{pidfd_open, pidfd_send_signal};
#[cfg(unix)]
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
#[cfg(unix)]
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::rc::Rc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, BufWriter};
#[cfg(unix)]
use tokio::net::UnixStream;
use tokio::sync::mpsc;

/// A front endpoint made before the lockdown, not yet accepting: a bound Unix socket; on
/// Windows the pipe's name (pipes are made when listening starts: the Windows lockdown, a job
/// and mitigations, does not forbid making them).
#[cfg(unix)]
pub type Prepared = OwnedFd;
#[cfg(windows)]
pub type Prepared = String;

/// Makes the socket at `path` (0600) and binds it, without listening yet: the router makes no
/// socket after its lockdown, so both are made before it, and a client that connects before
/// [`listen`] is refused, as when no broker runs.
#[cfg(unix)]
pub fn prepare(path: &Path) -> std::io::Result<Prepared> {
    use nix::sys::socket::{bind, socket, AddressFamily, SockFlag, SockType, UnixAddr};
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    #[cfg(target_os = "linux")]
    let fd = socket(
        AddressFamily::Unix,
        SockType::Stream,
        SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
        None,
    )?;
    // macOS's socket(2) takes no flags: set them on the new descriptor.
    #[cfg(not(target_os = "linux"))]
    let fd = {
        use nix::fcntl::{fcntl, FcntlArg, FdFlag, OFlag};
        let fd = socket(
            AddressFamily::Unix,
            SockType::Stream,
            SockFlag::empty(),
            None,
        )?;
        fcntl(&fd, FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC))?;
        fcntl(&fd, FcntlArg::F_SETFL(OFlag::O_NONBLOCK))?;
        fd
    };
    bind(fd.as_raw_fd(), &UnixAddr::new(path)?)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    Ok(fd)
}

/// The pipe name `path` holds (`gatehouse_client::Dirs` names each front's pipe).
#[cfg(windows)]
pub fn prepare(path: &Path) -> std::io::Result<Prepared> {
    path.to_str()
        .map(str::to_string)
        .ok_or_else(|| std::io::Error::other("a pipe name that is not text"))
}

/// Starts listening on a socket from [`prepare`]: the endpoint layer every OS shares
/// (`sandbox::endpoint`), which names each connection's peer.
#[cfg(unix)]
pub fn listen(fd: Prepared) -> std::io::Result<Listener> {
    nix::sys::socket::listen(&fd, nix::sys::socket::Backlog::MAXCONN)?;
    Listener::from_std(std::os::unix::net::UnixListener::from(fd))
}

/// Creates the pipe, first instance of its name and for this user only (a process that took
/// the name first makes this fail: the broker refuses to start rather than serve beside it).
#[cfg(windows)]
pub fn listen(name: Prepared) -> std::io::Result<Listener> {
    Listener::bind(&name)
}

/// Accepts front connections for `role` forever.
pub async fn accept_loop(ctx: Rc<Ctx>, mut listener: Listener, role: Role) {
    loop {
        match listener.accept().await {
            Ok((stream, peer)) => {
                #[cfg(unix)]
                let (rd, wr) = stream.into_split();
                #[cfg(windows)]
                let (rd, wr) = tokio::io::split(stream);
                tokio::task::spawn_local(serve_front(ctx.clone(), rd, wr, Ok(peer), role, None));
            }
            Err(e) => {
                tracing::error!("accept on the {role} socket failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// Windows: serves the pipe of a `gatehouse run` agent (`crate::launch`) until the task is
/// aborted (the agent ended). Each connection is a gateway front bound to the run: this user's
/// (the DACL also names the command SID, whose token is the user's), admitted only with the
/// run's token ([`serve_front`]).
#[cfg(windows)]
pub async fn accept_run(ctx: Rc<Ctx>, mut listener: Listener, run: Rc<crate::launch::Run>) {
    loop {
        match listener.accept().await {
            Ok((stream, peer)) => {
                let (rd, wr) = tokio::io::split(stream);
                let run = Some(run.clone());
                let front = serve_front(ctx.clone(), rd, wr, Ok(peer), Role::Gateway, run);
                tokio::task::spawn_local(front);
            }
            Err(e) => {
                tracing::error!("accept on a run's gateway pipe failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

struct Peer {
    role: Role,
    pid: Option<u32>,
    /// Opened at accept, so a kill reaches this process even if its pid is reused.
    process: Option<PeerProcess>,
}

/// A front's process, as the broker holds it: a pidfd on Linux, a process handle on Windows;
/// on macOS its pid and start time (`sandbox::process::ProcessRef`: a kill is sent only while
/// the pid still names the process that started then).
#[cfg(target_os = "linux")]
struct PeerProcess(OwnedFd);
#[cfg(target_os = "macos")]
use sandbox::process::ProcessRef as PeerProcess;
#[cfg(windows)]
use sandbox::windows::PeerProcess;

#[cfg(target_os = "linux")]
impl PeerProcess {
    fn open(pid: u32) -> std::io::Result<PeerProcess> {
        pidfd_open(pid).map(PeerProcess)
    }

    fn running(&self) -> bool {
        pidfd_send_signal(&self.0, 0).is_ok()
    }

    fn kill(&self) -> std::io::Result<()> {
        pidfd_send_signal(&self.0, libc::SIGKILL)
    }
}

impl Peer {
    fn kill(&self, reason: &str) {
        crate::audit::peer_killed(self.role.name(), self.pid, reason);
        let pid = self
            .pid
            .map(|p| p.to_string())
            .unwrap_or_else(|| "?".into());
        match &self.process {
            Some(p) => {
                // Logged before the kill, so whoever sees the peer die finds the reason in the
                // log already.
                tracing::error!(peer = %self.role, pid, "killed: {reason}");
                let _ = p.kill();
            }
            None => {
                tracing::error!(peer = %self.role, pid, "disconnected (no handle to kill it): {reason}")
            }
        }
    }
}

/// Serves an agent's gateway connection that came through the connector of `run`'s command.
#[cfg(unix)]
pub fn serve_launched(
    ctx: Rc<Ctx>,
    stream: std::os::unix::net::UnixStream,
    run: Rc<crate::launch::Run>,
) {
    let stream = match stream
        .set_nonblocking(true)
        .and_then(|()| UnixStream::from_std(stream))
    {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!("an agent's gateway connection: {e}");
            return;
        }
    };
    let cred = sandbox::peer::of_unix_socket(stream.as_fd());
    let (rd, wr) = stream.into_split();
    tokio::task::spawn_local(serve_front(ctx, rd, wr, cred, Role::Gateway, Some(run)));
}

async fn serve_front(
    ctx: Rc<Ctx>,
    rd: impl AsyncRead + Unpin + 'static,
    wr: impl AsyncWrite + Unpin + 'static,
    cred: std::io::Result<sandbox::peer::Peer>,
    role: Role,
    run: Option<Rc<crate::launch::Run>>,
) {
    // Who the kernel says connected (SO_PEERCRED, through the one peer check every endpoint
    // uses); a peer of another uid is dropped unread.
    let cred = match cred {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!("{role} peer without credentials: {e}");
            return;
        }
    };
    // A run's agent on Linux may be another uid (nobody, under a root broker); on Windows it
    // is always this user, under a restricted token.
    if run.is_none() || cfg!(windows) {
        let admitted = sandbox::peer::current_user()
            .and_then(|me| sandbox::peer::admit(&me, &cred).map_err(std::io::Error::other));
        if let Err(why) = admitted {
            tracing::warn!("refused a {role} connection: {why}");
            return;
        }
    }
    let pid = cred.pid;
    let peer = Peer {
        role,
        pid,
        process: pid.and_then(|p| PeerProcess::open(p).ok()),
    };
    if run.is_none() {
        if let Err(why) = not_sandboxed(&ctx, &peer).await {
            match why {
                Some(why) => peer.kill(&why),
                None => tracing::debug!(peer = %role, "a peer left before it was checked"),
            }
            return;
        }
    }
    // Windows: a run's pipe admits the user's processes by its DACL; only one in the exec
    // sandbox (under gatehouse's spawner) is served, whatever token it brings.
    #[cfg(windows)]
    if run.is_some() {
        if let Err(why) = in_sandbox(&ctx, &peer).await {
            use audit_store::chain::{AuditEvent, AuditKind};
            crate::audit::record(
                AuditEvent::new(AuditKind::Refusal, role.name(), "refused")
                    .detail(format!("a connection to a run's gateway pipe: {why}")),
            );
            return tracing::warn!("refused a connection to a run's gateway pipe: {why}");
        }
    }

    let mut rd = ipc_schema::framed::FrameReader::new(rd, MAX_FRAME);
    let (tx, mut rx) = mpsc::unbounded_channel::<Vec<u8>>();
    tokio::task::spawn_local(async move {
        let mut w = BufWriter::with_capacity(64 * 1024, wr);
        while let Some(frame) = rx.recv().await {
            if w.write_all(&frame).await.is_err() {
                return;
            }
            while let Ok(more) = rx.try_recv() {
                if w.write_all(&more).await.is_err() {
                    return;
                }
            }
            if w.flush().await.is_err() {
                return;
            }
        }
    });
    let reply = Replier { tx };
    let conn = Rc::new(crate::tools::Conn::default());
    // Every frame is checked against this channel's table, with what was sent before (an
    // OpenSession or a DescribeAgent once): anything else kills the peer.
    let table = Channel::to_broker(role).table();
    let mut route = RouteState::default();
    let mut first = true;

    loop {
        let mut env = match rd.next().await {
            Ok(Some(env)) => env,
            Ok(None) => break,
            // A peer that closed with replies unread resets the connection: a disconnect,
            // not a protocol violation.
            Err(ipc_schema::FrameError::Io(e)) => {
                tracing::debug!(peer = %role, "connection ended: {e}");
                break;
            }
            Err(e) => {
                peer.kill(&format!("sent a bad frame: {e}"));
                break;
            }
        };
        if let Err(e) = table.check(&mut route, &env.body) {
            peer.kill(&match e {
                RouteError::NotPermitted { kind, .. } => format!(
                    "sent a {:?} message, which the {role} may not send",
                    kind.body_kind()
                ),
                other => format!("broke the order of its channel: {other}"),
            });
            break;
        }
        if let (Some(run), true) = (&run, first) {
            // The run's token opens a fresh session of the run's profile; anything else is
            // refused and the connection closed, as a wrong launch token is.
            if let Err(why) = run.admit(&ctx, &mut env.body).await {
                reply.send(
                    env.id,
                    Body::Error(ErrorReply::new(ErrorCode::Refused, why)),
                );
                break;
            }
        }
        first = false;
        dispatch(&ctx, role, env, &reply, &conn);
    }
    match role {
        Role::Gateway => crate::tools::connection_closed(&ctx, &conn),
        Role::Ui => crate::ui_api::connection_closed(&ctx, &conn),
        Role::Notifier => ctx
            .gate
            .approvals
            .borrow_mut()
            .connection_closed(crate::ui_api::conn_key(&conn)),
        _ => {}
    }
}

/// `Ok` when the peer does not run under gatehouse's spawner; `Err(Some(why))` when it must be
/// killed, `Err(None)` when it has gone already (a connect-and-close probe).
async fn not_sandboxed(ctx: &Ctx, peer: &Peer) -> Result<(), Option<String>> {
    let Some(pid) = peer.pid else {
        return Err(Some(
            "its pid is not visible to the broker (another pid namespace), so whether it runs under gatehouse's spawner cannot be told".into(),
        ));
    };
    let alive = || peer.process.as_ref().is_some_and(PeerProcess::running);
    match ctx.spawner.lineage(pid).await {
        Ok(false) if alive() => Ok(()),
        // Gone before or during the check: nothing to serve, nothing to kill.
        Ok(false) => Err(None),
        Ok(true) => Err(Some(
            "it runs under gatehouse's spawner (a helper, or a command in the exec sandbox), which may never be a front".into(),
        )),
        Err(_) if !alive() => Err(None),
        Err(e) => Err(Some(format!(
            "whether it runs under gatehouse's spawner cannot be told ({e})"
        ))),
    }
}

/// Windows: `Ok` if `peer` runs under gatehouse's spawner (in the exec sandbox: a command's job
/// is nested in the exec-helper's), else why not.
#[cfg(windows)]
async fn in_sandbox(ctx: &Ctx, peer: &Peer) -> Result<(), String> {
    let pid = peer.pid.ok_or("its process id is not known")?;
    match ctx.spawner.lineage(pid).await {
        Ok(true) => Ok(()),
        Ok(false) => Err(format!(
            "pid {pid} is not in the run's sandbox (not under gatehouse's exec-helper)"
        )),
        Err(e) => Err(format!(
            "whether pid {pid} is in the run's sandbox cannot be told ({e})"
        )),
    }
}

/// Sends replies to one front.
#[derive(Clone)]
pub struct Replier {
    tx: mpsc::UnboundedSender<Vec<u8>>,
}

impl Replier {
    pub fn send(&self, id: u64, body: Body) {
        let frame = match encode(&Envelope::new(id, body)) {
            Ok(f) => f,
            Err(e) => encode(&Envelope::new(
                id,
                Body::Error(ErrorReply::new(
                    ErrorCode::Internal,
                    format!("the reply could not be sent: {e}"),
                )),
            ))
            .expect("a short error always encodes"),
        };
        let _ = self.tx.send(frame);
    }

    /// A replier whose frames the test reads from the receiver.
    #[cfg(test)]
    pub fn for_test() -> (Replier, mpsc::UnboundedReceiver<Vec<u8>>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (Replier { tx }, rx)
    }

    /// Like [`Replier::send`]; `false` once the front has gone (subscriptions drop it).
    pub fn send_checked(&self, id: u64, body: Body) -> bool {
        if self.tx.is_closed() {
            return false;
        }
        self.send(id, body);
        true
    }
}

fn dispatch(
    ctx: &Rc<Ctx>,
    role: Role,
    env: Envelope,
    reply: &Replier,
    conn: &Rc<crate::tools::Conn>,
) {
    let id = env.id;
    match env.body {
        Body::Ping { target: None } => reply.send(id, Body::Pong),
        Body::Ping {
            target: Some(target),
        } => match ctx.helpers.slot(target) {
            Some(slot) => {
                let reply = reply.clone();
                slot.call_with(Body::Ping { target: None }, move |answer| {
                    let body = match answer {
                        Ok(Body::Pong) => Body::Pong,
                        Ok(other) => Body::Error(ErrorReply::new(
                            ErrorCode::Internal,
                            format!("{target} answered a ping with {:?}", other.kind()),
                        )),
                        Err(e) => Body::Error(crate::call_error_reply(&e)),
                    };
                    reply.send(id, body);
                });
            }
            None => reply.send(
                id,
                Body::Error(ErrorReply::new(
                    ErrorCode::Invalid,
                    format!(
                        "{target} is not a helper; only helpers can be pinged through the broker"
                    ),
                )),
            ),
        },
        Body::Doctor => {
            let ctx = ctx.clone();
            let reply = reply.clone();
            tokio::task::spawn_local(async move {
                ctx.helpers.settle(Duration::from_secs(10)).await;
                let mut report = crate::doctor::report(&ctx).await;
                crate::doctor::add_fs_status(&ctx, &mut report).await;
                crate::doctor::add_secrets_status(&ctx, &mut report).await;
                reply.send(id, Body::DoctorReport(report));
            });
        }
        Body::Ui(req) => crate::ui_api::handle(ctx, conn, id, req, reply),
        Body::ToolCall(call) => crate::tools::handle(ctx, conn, id, call, reply),
        Body::Notify(ipc_schema::notify::NotifyRequest::Watch) => ctx
            .gate
            .approvals
            .borrow_mut()
            .watch(reply.clone(), id, crate::ui_api::conn_key(conn)),
        other => {
            // The route table admitted a kind this broker does not serve for this role.
            reply.send(
                id,
                Body::Error(ErrorReply::new(
                    ErrorCode::Internal,
                    format!(
                        "the broker does not serve {:?} from the {role}",
                        other.kind()
                    ),
                )),
            );
        }
    }
}
