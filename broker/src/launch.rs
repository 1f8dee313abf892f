//! `LaunchRequest::Command`: a command the human started with `gatehouse sandbox`, carried out
//! the way an agent's `run_command` is: this broker checks it, its exec-helper builds the
//! sandbox and runs it, and the audit log gets a row at its start and at its end. Only the ui
//! channel carries the request (ipc_schema::route::UI_TO_BROKER; the gateway's table has no
//! such row, and a gateway that sends one is killed).
//!
//! The output goes to the ui peer as it comes (`LaunchReply::Output`), the end last
//! (`LaunchReply::CommandEnded`). One command per connection at a time; `StopCommand` (Ctrl-C)
//! and the connection closing both kill its sandbox.
//!
//! With `--allow-domain` the command's only way out is the egress proxy of this broker's
//! net-helper, as for any sandbox: a proxy session of its own (`ProxyOpen`, a fresh token), a
//! connected pair whose one end goes to the exec-helper with the `Start` (the sandbox's bridge
//! passes each client connection through it) and whose other end this broker reads, handing
//! each connection to the net-helper (`ProxyConnection`, the descriptor with the frame). Every
//! connection's end is an audit row and a `LaunchReply::Egress` to the console, before the
//! command's end.
//!
//! Nothing here forks, execs or opens a socket: the exec-helper does all of it (the connected
//! pair is `socketpair`, which reaches no one).

use crate::fronts::Replier;
use crate::helpers::Connector;
use crate::tools::exec::{stop_run, watch_run};
use crate::tools::Conn;
use crate::Ctx;
use audit_store::chain::{AuditEvent, AuditKind};
use ipc_schema::exec::{AgentRun, ExecReply, ExecRequest, NetworkMode, RunId};
use ipc_schema::net::{NetReply, NetRequest, ProxyLimits, ProxySession};
use ipc_schema::tool::{ProfileName, ResumeToken, SessionId, ToolCall};
use ipc_schema::ui::{AgentLaunch, CommandLaunch, LaunchReply, NotStarted, UiReply};
use ipc_schema::{Body, ErrorCode, ErrorReply, Role};
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

/// Who the audit rows name as the actor: the human, through the console's channel.
const ACTOR: &str = "ui";
/// The tool name on the rows, beside the agent's `run_command`: a command, or an agent.
const TOOLS: [&str; 2] = ["gatehouse sandbox", "gatehouse run"];

/// How long the end of a command waits for the records of connections still being relayed.
const EGRESS_DRAIN: Duration = Duration::from_secs(2);

thread_local! {
    /// Numbers the proxy sessions of launched commands (`sandbox-N`, in their egress rows).
    static PROXY_SESSIONS: Cell<u64> = const { Cell::new(0) };
}

/// The command a ui connection runs (`RunId(u64::MAX)` while its start is under way).
fn running(conn: &Conn) -> Option<RunId> {
    conn.launched_run.get()
}

fn set_running(conn: &Conn, run: Option<RunId>) {
    conn.launched_run.set(run);
}

fn launch_reply(r: LaunchReply) -> Body {
    Body::UiReply(UiReply::Launch(r))
}

/// A launch refused before its command started. It carries the tier the exec helper reported
/// (the one the command would have run in), like every other row about the exec sandbox.
fn refusal_row(ctx: &Ctx, tool: &str, argv: &[String], why: &str) {
    crate::audit::record(
        AuditEvent::new(AuditKind::Refusal, ACTOR, "refused")
            .tool(tool)
            .target(format!("{argv:?}"))
            .detail(why.to_string())
            .tier(crate::exec_tier::in_force(ctx)),
    );
}

/// `LaunchRequest::Command` from the ui connection `conn`.
pub fn command(
    ctx: &Rc<Ctx>,
    conn: &Rc<Conn>,
    id: u64,
    launch: Box<CommandLaunch>,
    reply: &Replier,
) {
    let refuse = |reason: String, why: NotStarted| {
        reply.send(id, launch_reply(LaunchReply::Refused { reason, why }))
    };
    let tool = TOOLS[usize::from(launch.agent.is_some())];
    let checked = (|| {
        if running(conn).is_some() {
            return Err("this connection already runs a command".to_string());
        }
        let agent = launch.agent.as_ref();
        let agent = agent.map(|a| Run::new(ctx, &launch, a)).transpose()?;
        let run = agent.as_ref().zip(launch.agent.as_ref());
        let home = ipc_schema::protected::user_home();
        let spec = policy::launch::command_spec(
            &launch,
            home.as_deref(),
            run.map(|(r, a)| r.agent_run(a)),
        )?;
        let slot = ctx.helpers.slot(Role::Exec).cloned();
        let slot = slot.ok_or("there is no exec-helper")?;
        Ok((agent.map(Rc::new), spec, slot))
    })();
    let (agent, spec, slot) = match checked {
        Ok(c) => c,
        Err(why) => {
            refusal_row(ctx, tool, &launch.argv, &why);
            return refuse(why, NotStarted::Refused);
        }
    };
    let passed: Vec<String> = launch.pass_env.iter().map(|(k, _)| k.clone()).collect();
    let (conn, reply, ctx) = (conn.clone(), reply.clone(), ctx.clone());
    let domains = launch.domains.clone();
    // Held until the start is answered, so that a second Command cannot race this one.
    set_running(&conn, Some(RunId(u64::MAX)));
    tokio::task::spawn_local(async move {
        let mut spec = spec;
        let argv = spec.argv.clone();
        let refused_as = |reason: String, why: NotStarted| {
            set_running(&conn, None);
            refusal_row(&ctx, tool, &argv, &reason);
            reply.send(id, launch_reply(LaunchReply::Refused { reason, why }));
        };
        let refused = |reason: String| refused_as(reason, NotStarted::Refused);
        // The tier the exec helper runs commands under must be one the policy allows.
        if let Some(why) = crate::exec_tier::refusal(&ctx).await {
            return refused(why);
        }
        // The proxy first: a bad --allow-domain refuses the command before anything runs.
        let mut proxy = None;
        if !domains.is_empty() {
            let kind = if agent.is_some() { "run" } else { "sandbox" };
            match Proxy::open(&ctx, kind, domains).await {
                Ok(p) => {
                    spec.network = p.network();
                    proxy = Some(p);
                }
                Err(why) => return refused(why),
            }
        }
        // The connector: the sandbox's end goes with the Start, ours is read by `relay`.
        let mut connector = None;
        if spec.needs_connector() {
            match crate::helpers::connector_pair() {
                Ok((ours, theirs)) => connector = Some((theirs, ours)),
                Err(e) => {
                    if let Some(p) = &proxy {
                        p.close().await;
                    }
                    return refused(format!("the command's connector: {e}"));
                }
            }
        }
        let line = policy::launch::start_line(
            &spec,
            &passed,
            proxy.as_ref().map(|p| (&p.domains[..], p.session.as_str())),
            crate::exec_tier::in_force(&ctx),
        );
        // Windows: the command's ACEs on its grants (held until it ended); nothing elsewhere.
        let _aces = match crate::exec_aces::hold(&ctx, &spec) {
            Ok(held) => held,
            Err(why) => {
                if let Some(p) = &proxy {
                    p.close().await;
                }
                return refused(why);
            }
        };
        spec.slot = _aces.slot();
        // Windows and macOS: the agent's token file (and on Windows its pipe, which only its
        // slot's commands may open), made before it starts and gone after.
        #[cfg(not(target_os = "linux"))]
        #[cfg_attr(target_os = "macos", allow(unused_mut))]
        let mut run_pipe = match (agent.as_ref())
            .map(|a| a.open_place(_aces.slot()))
            .transpose()
        {
            Ok(p) => p,
            Err(why) => {
                if let Some(p) = &proxy {
                    p.close().await;
                }
                return refused(why);
            }
        };
        let start = Body::Exec(ExecRequest::Start(Box::new(spec)));
        let (started, ours) = match connector {
            None => (slot.call(start).await, None),
            Some((sandbox_end, ours)) => (
                slot.call_with_fd(start, crate::helpers::pass(sandbox_end))
                    .await,
                Some(ours),
            ),
        };
        let (run, sandbox) = match started {
            Ok(Body::ExecReply(ExecReply::Started { run, sandbox })) => (run, sandbox),
            other => {
                let (reason, why) = match other {
                    Ok(Body::Error(e)) => not_started(e),
                    Ok(other) => (
                        format!("the exec-helper answered a start with {:?}", other.kind()),
                        NotStarted::Refused,
                    ),
                    Err(e) => (e.to_string(), NotStarted::Refused),
                };
                if let Some(p) = &proxy {
                    p.close().await;
                }
                return refused_as(reason, why);
            }
        };
        set_running(&conn, Some(run));
        // Windows: the agent's gateway connections, on its pipe until it ended.
        #[cfg(windows)]
        let serving = run_pipe
            .as_mut()
            .and_then(|p| p.listener.take())
            .zip(agent.clone())
            .map(|(l, a)| tokio::task::spawn_local(crate::fronts::accept_run(ctx.clone(), l, a)));
        // The proxy's connections, relayed until the sandbox (the connector's other holder) is
        // gone; each one's end is a row and a reply.
        let relay = ours.map(|ours| {
            tokio::task::spawn_local(relay(
                ctx.clone(),
                ours,
                proxy.as_ref().map(|p| (p.net.clone(), p.session.clone())),
                agent.clone(),
                Some((reply.clone(), id)),
                None,
            ))
        });
        // Windows: the proxy's connections come to the broker's loopback listener.
        #[cfg(windows)]
        let (relay, listening) = match proxy
            .as_ref()
            .and_then(|p| p.listening(&ctx, Some((reply.clone(), id)), agent.clone()))
        {
            Some((task, stop)) => (Some(task), Some(stop)),
            None => (relay, None),
        };
        let tier = Some(sandbox.tier);
        let row = |outcome: &'static str, detail: String| {
            crate::audit::record(
                AuditEvent::new(AuditKind::Execution, ACTOR, outcome)
                    .tool(tool)
                    .target(format!("{argv:?}"))
                    .detail(detail)
                    .tier(tier),
            )
        };
        row("started", format!("{run}: {line}; as uid {}", sandbox.uid));
        let mut watched =
            reply.send_checked(id, launch_reply(LaunchReply::CommandStarted { sandbox }));
        if !watched {
            stop_run(&slot, run).await;
        }
        // Once the ui peer is gone nobody watches the command: it is stopped.
        let end = watch_run(&slot, run, |stdout, stderr| {
            if watched && !(stdout.is_empty() && stderr.is_empty()) {
                let out = launch_reply(LaunchReply::Output { stdout, stderr });
                watched = reply.send_checked(id, out);
            }
            watched
        })
        .await;
        set_running(&conn, None);
        #[cfg(windows)]
        if let Some(stop) = listening {
            stop.notify_one();
        }
        // Windows: no new connection on the agent's pipe; its token file goes (drop).
        #[cfg(windows)]
        if let Some(serving) = serving {
            serving.abort();
        }
        #[cfg(not(target_os = "linux"))]
        drop(run_pipe);
        if let Some(relay) = relay {
            // The sandbox is gone, so its end of the connector is closed: the relay hands over
            // no more connections and waits (up to EGRESS_DRAIN) for the ones it handed over.
            let _ = relay.await;
        }
        if let Some(p) = &proxy {
            p.close().await;
        }
        // The agent is gone: the sessions it opened end with it.
        if let Some(agent) = &agent {
            for session in agent.sessions.take() {
                crate::sessions::revoke(&ctx.gate, session, ACTOR, "run ended").await;
            }
        }
        match end {
            Ok(end) => {
                row(
                    "ended",
                    format!(
                        "{run}: {}; {} ms; output dropped {} + {} bytes; {} set aside",
                        end.outcome.describe(),
                        end.elapsed_ms,
                        end.stdout_dropped,
                        end.stderr_dropped,
                        end.held.len() as u64 + end.held_more
                    ),
                );
                reply.send(id, launch_reply(LaunchReply::CommandEnded(end)));
            }
            Err(why) => {
                row("uncertain", why.clone());
                reply.send(
                    id,
                    Body::Error(ErrorReply::new(ErrorCode::HelperCrashed, why)),
                );
            }
        }
    });
}

/// A launched command's egress proxy: its session on the broker's net-helper.
pub(crate) struct Proxy {
    pub net: Arc<crate::helpers::HelperSlot>,
    pub session: String,
    pub token: String,
    domains: Vec<String>,
    /// Windows: where the command reaches the proxy (`127.0.0.1`, a port of
    /// `ipc_schema::net::LOOPBACK_PROXY_PORTS`), until its accepting starts.
    #[cfg(windows)]
    listener: RefCell<Option<(std::net::TcpListener, u16)>>,
}

impl Proxy {
    /// Opens the session on the net-helper.
    /// `kind` names the session in the rows: `sandbox-N` for a command, `run-N` for an agent.
    pub async fn open(ctx: &Ctx, kind: &str, domains: Vec<String>) -> Result<Proxy, String> {
        let Some(net) = ctx.helpers.slot(Role::Net).cloned() else {
            return Err("there is no net-helper for the egress proxy".into());
        };
        let n = PROXY_SESSIONS.with(|c| {
            c.set(c.get() + 1);
            c.get()
        });
        let proxy = Proxy {
            net,
            session: format!("{kind}-{n}"),
            token: hex::encode(rand::random::<[u8; 16]>()),
            domains,
            #[cfg(windows)]
            listener: RefCell::new(Some(loopback_listener()?)),
        };
        let open = ProxySession {
            session: proxy.session.clone(),
            token: proxy.token.clone(),
            allow: proxy.domains.clone(),
            ports: ctx.opts.proxy_ports.clone(),
            sni_check: ctx.opts.proxy_sni_check,
            limits: ProxyLimits::default(),
        };
        match proxy.net.call(Body::Net(NetRequest::ProxyOpen(open))).await {
            Ok(Body::NetReply(NetReply::ProxyOpened { .. })) => {}
            Ok(Body::NetReply(NetReply::Refused(r))) => {
                return Err(format!("--allow-domain: {}", r.reason))
            }
            Ok(Body::Error(e)) => return Err(format!("the egress proxy: {}", e.message)),
            Ok(other) => {
                return Err(format!(
                    "the net-helper answered ProxyOpen with {:?}",
                    other.kind()
                ))
            }
            Err(e) => return Err(format!("the egress proxy: {e}")),
        }
        Ok(proxy)
    }

    /// How the command reaches this proxy: through its connector (Linux), or on the broker's
    /// loopback port (Windows).
    #[cfg(unix)]
    pub fn network(&self) -> NetworkMode {
        NetworkMode::Proxy {
            token: self.token.clone(),
        }
    }
    #[cfg(windows)]
    pub fn network(&self) -> NetworkMode {
        let port = self.listener.borrow().as_ref().map_or(0, |(_, p)| *p);
        NetworkMode::LoopbackProxy {
            token: self.token.clone(),
            port,
        }
    }

    /// Windows: accepts the command's connections on the loopback listener, each handed to the
    /// net-helper as on Linux ([`hand_over`], its row under the agent's first session if the
    /// command is one), until the returned `Notify` is notified (the command ended); then waits
    /// up to [`EGRESS_DRAIN`] for the records of those handed over. `None` once taken.
    /// `peer`: the console that launched the command, told of each connection's end (none for
    /// a third-party server's).
    #[cfg(windows)]
    pub(crate) fn listening(
        &self,
        ctx: &Rc<Ctx>,
        peer: Option<(Replier, u64)>,
        agent: Option<Rc<Run>>,
    ) -> Option<(tokio::task::JoinHandle<()>, Rc<tokio::sync::Notify>)> {
        let (listener, port) = self.listener.borrow_mut().take()?;
        let stop = Rc::new(tokio::sync::Notify::new());
        let (net, session, tier) = (
            self.net.clone(),
            self.session.clone(),
            crate::exec_tier::in_force(ctx),
        );
        let stopped = stop.clone();
        let task = tokio::task::spawn_local(async move {
            let listener = match listener
                .set_nonblocking(true)
                .and_then(|()| tokio::net::TcpListener::from_std(listener))
            {
                Ok(l) => l,
                Err(e) => {
                    return tracing::error!(%session, "the proxy's listener on port {port}: {e}")
                }
            };
            let mut handed = tokio::task::JoinSet::new();
            loop {
                tokio::select! {
                    got = listener.accept() => match got {
                        Ok((sock, _)) => match sock.into_std() {
                            Ok(s) => {
                                let under = agent.as_ref().and_then(|a| a.sessions.borrow().first().cloned());
                                hand_over(&mut handed, &net, &session, under, tier, peer.clone(), s.into())
                            }
                            Err(e) => tracing::warn!(%session, "a proxy connection: {e}"),
                        },
                        Err(e) => tracing::warn!(%session, "accepting on the proxy's port {port}: {e}"),
                    },
                    _ = stopped.notified() => break,
                }
            }
            // No more connections: the port is free again.
            drop(listener);
            drain(handed).await;
        });
        Some((task, stop))
    }

    /// Ends the session: tunnels still open are closed, later connections refused.
    pub async fn close(&self) {
        let close = NetRequest::ProxyClose {
            session: self.session.clone(),
        };
        let _ = self.net.call(Body::Net(close)).await;
    }
}

/// Reads the broker's end of the connector: each descriptor the sandbox passes out comes with
/// one byte naming its listener. A proxy client (`CONNECTOR_PROXY`) goes to the net-helper as a
/// `ProxyConnection`, whose answer (the connection's end) becomes an audit row and a
/// `LaunchReply::Egress`; an agent's gateway connection (`CONNECTOR_GATEWAY`) is served as a
/// gateway front bound to the run; a third-party server's stdio socket (`CONNECTOR_STDIO`,
/// once) goes to `stdio`. Anything else is closed. Returns once the sandbox is gone and every
/// handed-over proxy connection has its record, or [`EGRESS_DRAIN`] after the sandbox went.
/// `peer`: the console that launched the command, told of each connection's end.
#[cfg(unix)]
pub(crate) async fn relay(
    ctx: Rc<Ctx>,
    connector: Connector,
    proxy: Option<(Arc<crate::helpers::HelperSlot>, String)>,
    agent: Option<Rc<Run>>,
    peer: Option<(Replier, u64)>,
    mut stdio: Option<tokio::sync::oneshot::Sender<Connector>>,
) {
    use ipc_schema::exec::{CONNECTOR_GATEWAY, CONNECTOR_PROXY, CONNECTOR_STDIO};
    use std::collections::VecDeque;
    let sock = std::os::unix::net::UnixStream::from(connector);
    let sock = match sock
        .set_nonblocking(true)
        .and_then(|()| tokio::net::UnixStream::from_std(sock))
    {
        Ok(s) => s,
        Err(e) => {
            tracing::error!("the command's connector: {e}");
            return;
        }
    };
    // Every connection's row names the tier the sandbox runs in.
    let tier = crate::exec_tier::in_force(&ctx);
    let mut handed = tokio::task::JoinSet::new();
    let mut fds = VecDeque::new();
    loop {
        // One byte per read: each byte names the descriptor that came with it.
        let mut b = [0u8; 1];
        let got = sock
            .async_io(tokio::io::Interest::READABLE, || {
                ipc_schema::fdpass::recv_with_fds(&sock, &mut b, &mut fds)
            })
            .await;
        let n = match got {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let fd = fds.pop_front();
        // A byte without its descriptor, or more than one descriptor: not what a sandbox's
        // bridge sends; whatever came is closed.
        let Some(fd) = fd.filter(|_| n == 1 && fds.is_empty()) else {
            tracing::warn!("the command's connector sent a byte without one descriptor");
            fds.clear();
            continue;
        };
        match (b[0], &proxy, &agent) {
            (CONNECTOR_STDIO, _, None) if stdio.is_some() => {
                if let Some(tx) = stdio.take() {
                    let _ = tx.send(fd);
                }
            }
            (CONNECTOR_PROXY, Some((net, session)), _) => {
                let under = agent
                    .as_ref()
                    .and_then(|a| a.sessions.borrow().first().cloned());
                hand_over(&mut handed, net, session, under, tier, peer.clone(), fd);
            }
            (CONNECTOR_GATEWAY, _, Some(agent)) => {
                let stream = std::os::unix::net::UnixStream::from(fd);
                crate::fronts::serve_launched(ctx.clone(), stream, agent.clone());
            }
            (other, _, _) => {
                tracing::warn!(
                    "the command's connector named listener {other:#04x}, which it does not have"
                );
            }
        }
    }
    drain(handed).await;
}

/// Hands one client connection of a command to its proxy session on the net-helper
/// (`ProxyConnection`, the connection with the frame); its end becomes an audit row (under the
/// agent's first session, if any) and a `LaunchReply::Egress` to `peer`.
fn hand_over(
    handed: &mut tokio::task::JoinSet<()>,
    net: &Arc<crate::helpers::HelperSlot>,
    session: &str,
    under: Option<SessionId>,
    tier: Option<ipc_schema::tier::ConfinementTier>,
    peer: Option<(Replier, u64)>,
    conn: crate::helpers::Passed,
) {
    let (net, session) = (net.clone(), session.to_string());
    handed.spawn_local(async move {
        let req = Body::Net(NetRequest::ProxyConnection {
            session: session.clone(),
        });
        match net.call_with_fd(req, conn).await {
            Ok(Body::NetReply(NetReply::ProxyDone(record))) => {
                egress_row(under, &record, tier);
                if let Some((reply, id)) = peer {
                    reply.send(id, launch_reply(LaunchReply::Egress(record)));
                }
            }
            // No record: the connection's end is in the log, not the audit log.
            other => tracing::warn!(%session, "egress proxy: {other:?}"),
        }
    });
}

/// Waits up to [`EGRESS_DRAIN`] for the records of the connections handed over.
async fn drain(mut handed: tokio::task::JoinSet<()>) {
    let drained = tokio::time::timeout(EGRESS_DRAIN, async {
        while handed.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!(
            "{} proxy connections still open after the command ended; closing them",
            handed.len()
        );
    }
}

/// Windows: a listener on `127.0.0.1` on the first free port of the egress proxy's range, no
/// other socket allowed beside it (`sandbox::windows::exclusive_loopback_listener`).
#[cfg(windows)]
fn loopback_listener() -> Result<(std::net::TcpListener, u16), String> {
    let ports = ipc_schema::net::LOOPBACK_PROXY_PORTS;
    let mut last = String::new();
    for port in ports.clone() {
        match sandbox::windows::exclusive_loopback_listener(port) {
            Ok(l) => return Ok((l, port)),
            // WSAEADDRINUSE, or WSAEACCES for a port the system keeps for itself: the next.
            Err(e) if matches!(e.code(), Some(10048 | 10013)) => last = e.to_string(),
            Err(e) => return Err(format!("the egress proxy's listener: {e}")),
        }
    }
    Err(format!(
        "the egress proxy's listener: every port of 127.0.0.1:{}-{} is taken (the last: {last})",
        ports.start(),
        ports.end()
    ))
}

/// No connector exists on Windows ([`crate::helpers::connector_pair`] refuses there).
#[cfg(windows)]
pub(crate) async fn relay(
    _ctx: Rc<Ctx>,
    connector: Connector,
    _proxy: Option<(Arc<crate::helpers::HelperSlot>, String)>,
    _agent: Option<Rc<Run>>,
    _peer: Option<(Replier, u64)>,
    _stdio: Option<tokio::sync::oneshot::Sender<Connector>>,
) {
    match connector {}
}

/// Who a sandbox's own directory belongs to: this broker's user, or, for a broker started as
/// root, the user its exec-helper runs commands as (nobody).
#[cfg(target_os = "linux")]
pub(crate) fn run_as_owner(_ctx: &Ctx) -> (u32, u32) {
    let uid = nix::unistd::geteuid().as_raw();
    if uid == 0 {
        sandbox::linux::command::identity::NOBODY
    } else {
        // The group is used only by a root caller's chown: none happens here.
        (uid, u32::MAX)
    }
}

/// macOS: the exec-helper runs commands as the broker's own user (it does not change users).
#[cfg(target_os = "macos")]
pub(crate) fn run_as_owner(_ctx: &Ctx) -> (u32, u32) {
    (nix::unistd::geteuid().as_raw(), u32::MAX)
}

/// Windows has no uids: sandboxes' own directories are not made there
/// (`Dirs::ensure_agent_home` refuses), so this names no one.
#[cfg(windows)]
pub(crate) fn run_as_owner(_ctx: &Ctx) -> (u32, u32) {
    (u32::MAX, u32::MAX)
}

/// `gatehouse run`'s side of a command: the run's token (in the agent's sandbox only) and the
/// sessions its agent opened with it, each a fresh session of the run's profile.
pub struct Run {
    token: String,
    profile: ProfileName,
    /// `gatehouse run --mode` (`None`: the profile's): the human's choice, from the ui channel.
    mode: Option<ipc_schema::mode::SessionMode>,
    /// The names of the variables passed by name (the session rows list them).
    passed_env: Vec<String>,
    sessions: RefCell<Vec<SessionId>>,
    /// Windows and macOS: the run's gateway and files (`RunName::place`).
    #[cfg(not(target_os = "linux"))]
    place: ipc_schema::exec::RunPlace,
}

/// Windows and macOS: a run's token file, removed when this is dropped (the run ended, or did
/// not start); on Windows also its pipe, listening until its serving starts (on macOS the
/// exec-helper listens for the command: `sandbox::bridge`).
#[cfg(not(target_os = "linux"))]
pub(crate) struct RunPipe {
    #[cfg(windows)]
    listener: Option<sandbox::endpoint::Listener>,
    token_file: std::path::PathBuf,
}

#[cfg(not(target_os = "linux"))]
impl Drop for RunPipe {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_file(&self.token_file) {
            tracing::warn!(
                "removing the run's token file {}: {e}",
                self.token_file.display()
            );
        }
    }
}

impl Run {
    /// Checks the agent's side of `l`: a long run, a known profile, a state directory of its
    /// own in gatehouse's agent-state directory.
    fn new(ctx: &Ctx, l: &CommandLaunch, a: &AgentLaunch) -> Result<Run, String> {
        let profile = policy::launch::agent_profile(l, a, &ctx.dirs.agents())?;
        if let Ok(all) = &ctx.gate.policy.borrow().current {
            if all.get(&profile).is_none() {
                return Err(policy::unknown_profile(&profile, all));
            }
        }
        Ok(Run {
            token: hex::encode(rand::random::<[u8; 32]>()),
            profile,
            mode: a.mode,
            passed_env: l.pass_env.iter().map(|(k, _)| k.clone()).collect(),
            sessions: RefCell::new(Vec::new()),
            #[cfg(not(target_os = "linux"))]
            place: a
                .run_name
                .as_ref()
                .ok_or("a run on Windows or macOS must be named")?
                .place(&a.state_home),
        })
    }

    #[cfg(target_os = "linux")]
    fn agent_run(&self, a: &AgentLaunch) -> AgentRun {
        policy::launch::agent_run(a, &self.token)
    }
    #[cfg(not(target_os = "linux"))]
    fn agent_run(&self, a: &AgentLaunch) -> AgentRun {
        policy::launch::agent_run_at(a, &self.token, &self.place)
    }

    /// Windows and macOS: writes the run's token file (a new file, this user's only on macOS:
    /// one already there refuses the run) in the agent's state directory. On Windows, first
    /// makes the run's pipe (the first instance of its name: a process that took the name
    /// first refuses the run; this user and the SID of the run's command slot only, so no
    /// command of another slot, a third-party server say, opens it).
    #[cfg(not(target_os = "linux"))]
    fn open_place(&self, _slot: Option<ipc_schema::exec::CommandSlot>) -> Result<RunPipe, String> {
        use std::io::Write as _;
        #[cfg(windows)]
        let listener = {
            let sid = sandbox::wincfg::slot_sid(_slot.ok_or("no command slot for the run")?);
            sandbox::endpoint::Listener::bind_also_for(&self.place.gateway, Some(&sid.0))
                .map_err(|e| format!("the run's gateway pipe {}: {e}", self.place.gateway))?
        };
        let file = &self.place.token_file;
        let at = |e: std::io::Error| format!("the run's token file {}: {e}", file.display());
        let mut new = std::fs::OpenOptions::new();
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut new, 0o600);
        let mut f = new.write(true).create_new(true).open(file).map_err(at)?;
        // From here the file is the run's: dropping `pipe` removes it.
        let pipe = RunPipe {
            #[cfg(windows)]
            listener: Some(listener),
            token_file: file.clone(),
        };
        f.write_all(self.token.as_bytes()).map_err(at)?;
        Ok(pipe)
    }

    /// The first frame of an agent's gateway connection: an `OpenSession` with the run's token,
    /// which becomes the one-use token of a fresh session of the run's profile (its row names
    /// the variables passed by name). `Err`: why the connection is refused.
    pub async fn admit(&self, ctx: &Rc<Ctx>, body: &mut Body) -> Result<(), String> {
        let Body::ToolCall(ToolCall::OpenSession {
            resume: Some(t), ..
        }) = body
        else {
            return Err("gatehouse run: the gateway must first open a session with the run's token (gatehouse mcp --token-file, as in the MCP config gatehouse run wrote)".into());
        };
        if !policy::launch::same_secret(t.0.as_bytes(), self.token.as_bytes()) {
            return Err("gatehouse run: that is not this run's token".into());
        }
        let (session, token) =
            open_session(ctx, &self.profile, self.mode, &self.passed_env).await?;
        self.sessions.borrow_mut().push(session);
        *t = token;
        Ok(())
    }
}

/// A fresh session of `profile` and its one-use launch token, stored (hashed) like any
/// resumable session, so the agent's gateway carries on with it; its row names the variables
/// passed by name (never a value).
async fn open_session(
    ctx: &Rc<Ctx>,
    profile: &ProfileName,
    mode: Option<ipc_schema::mode::SessionMode>,
    passed_env: &[String],
) -> Result<(SessionId, ResumeToken), String> {
    let mut detail = format!("gatehouse run; profile {profile}");
    if !passed_env.is_empty() {
        detail.push_str(&format!(
            "; secret-looking variables passed by name: {}",
            passed_env.join(", ")
        ));
    }
    crate::sessions::create(
        &ctx.gate,
        profile,
        mode,
        ACTOR,
        "launch token issued",
        detail,
    )
    .await
    .map(|(id, token, _)| (id, token))
    .map_err(|(_, why)| format!("gatehouse run: {why}"))
}

/// One connection through an egress proxy ended: its audit row (under the agent's first
/// session, when it opened one; the line names the proxy session either way).
fn egress_row(
    session: Option<SessionId>,
    record: &ipc_schema::net::EgressRecord,
    tier: Option<ipc_schema::tier::ConfinementTier>,
) {
    let outcome = policy::launch::egress_outcome(record);
    let mut row = AuditEvent::new(AuditKind::Egress, ACTOR, outcome)
        .target(record.target.clone())
        .detail(record.audit_line())
        .tier(tier);
    if let Some(session) = session {
        row = row.session(session.0);
    }
    crate::audit::record(row);
}

/// The exec-helper's refusal, and whether it was "not found" (the CLI exits 127 for that).
fn not_started(e: ErrorReply) -> (String, NotStarted) {
    let why = if e.code == ErrorCode::NotFound {
        NotStarted::NotFound
    } else {
        NotStarted::Refused
    };
    (e.message, why)
}

/// `LaunchRequest::StopCommand`: kills the sandbox of this connection's command.
pub fn stop_command(ctx: &Rc<Ctx>, conn: &Rc<Conn>, id: u64, reply: &Replier) {
    let run = running(conn).filter(|r| r.0 != u64::MAX);
    let (Some(run), Some(slot)) = (run, ctx.helpers.slot(Role::Exec).cloned()) else {
        return reply.send(
            id,
            Body::Error(ErrorReply::new(
                ErrorCode::Invalid,
                "this connection runs no command",
            )),
        );
    };
    let reply = reply.clone();
    tokio::task::spawn_local(async move {
        stop_run(&slot, run).await;
        reply.send(id, Body::Pong);
    });
}

/// The ui connection closed: its command, if it runs one, is stopped.
pub fn connection_closed(ctx: &Rc<Ctx>, conn: &Rc<Conn>) {
    let Some(run) = running(conn).filter(|r| r.0 != u64::MAX) else {
        return;
    };
    if let Some(slot) = ctx.helpers.slot(Role::Exec).cloned() {
        tokio::task::spawn_local(async move { stop_run(&slot, run).await });
    }
}
