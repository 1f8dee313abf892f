//! Third-party MCP servers on the tool path: each session's servers, started on first use in
//! the exec sandbox (one sandbox per server per session, for the life of the connection), their
//! stdio socket handed to the servers-helper (the one process that parses what a server writes),
//! their tools pinned to the definition the human approved.
//!
//! A tool is offered only when its definition's digest equals its pin. A new tool, or one the
//! server now describes otherwise, is held: not offered, its calls refused, until the human
//! approves the definition (`UiRequest::ApproveServerTools`, bound to the digests the human was
//! shown). A server that breaks the protocol, floods, or exits loses its connection; its sandbox
//! is stopped, and its next use starts it again (at most [`RESTARTS_PER_MINUTE`] times a minute),
//! without touching any other session.

use super::fs::EffectAnswer;
use super::{failed, refused, Conn};
use crate::helpers::HelperSlot;
use crate::sessions::SessionRef;
use crate::tools::exec::{stop_run, watch_run};
use crate::Ctx;
use audit_store::chain::{AuditEvent, AuditKind};
use audit_store::pins::{digest, Pin};
use ipc_schema::exec::{ExecReply, ExecRequest, RunId};
use ipc_schema::secrets::{SecretValue, SecretsReply, SecretsRequest};
use ipc_schema::servers::{
    CallOutput, ConnId, ContentItem, ServerEvent, ServerName, ServerToolName, ServersReply,
    ServersRequest, ToolDef,
};
use ipc_schema::tool::{
    Action, Failure, HeldTool, OfferedTool, ProfileName, RefusalKind, ServerCall, ServerOutput,
    ServerTools, SessionId, ToolId, ToolReply, ToolResult,
};
use ipc_schema::{Body, ErrorCode, Role};
use policy::compile::Policy;
use policy::servers::{McpServer, Reach, StdioServer};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::time::{Duration, Instant};

/// Starts of one server in one session in a minute (the first included); more are refused until
/// the minute has passed.
pub const RESTARTS_PER_MINUTE: usize = 5;
/// How long a start (sandbox, handshake, first list) may take.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// A listing older than this is refreshed before tools are offered (besides
/// `notifications/tools/list_changed`, which marks it stale at once).
const RELIST_AFTER: Duration = Duration::from_secs(300);

/// What a connection runs on: a sandbox of the exec-helper, or the relay to a remote server.
#[derive(Clone, Copy)]
enum Backing {
    Sandbox(RunId),
    Remote,
}

/// Ends a connection: a sandbox is stopped (its end detaches it); a remote connection is
/// detached, which ends its relay.
async fn stop(ctx: &Rc<Ctx>, conn: ConnId, backing: Backing) {
    match backing {
        Backing::Sandbox(run) => {
            if let Ok(exec) = slot(ctx, Role::Exec) {
                stop_run(&exec, run).await
            }
        }
        Backing::Remote => {
            if let Ok(servers) = slot(ctx, Role::Servers) {
                let _ = servers
                    .call(Body::Servers(ServersRequest::Detach { conn }))
                    .await;
            }
        }
    }
}

/// One server's running connection for one session.
struct Live {
    conn: ConnId,
    /// The profile of the session it runs for.
    profile: ProfileName,
    backing: Backing,
    /// The values of the secrets in its environment: scrubbed from what it returns.
    scrub: Rc<Vec<SecretValue>>,
    tools: Vec<ToolDef>,
    listed: Instant,
    /// `notifications/tools/list_changed` came, or the connection ended (then `gone` says why).
    stale: Rc<Cell<bool>>,
    gone: Rc<RefCell<Option<String>>>,
}

#[derive(Default)]
struct Slot {
    live: Option<Live>,
    starts: Vec<Instant>,
}

type Key = (SessionId, ServerName);
type PinKey = (ProfileName, ServerName, ServerToolName);
/// A server's tools, and when they were listed.
type Listing = (Instant, Vec<ToolDef>);

#[derive(Default)]
pub struct Servers {
    slots: RefCell<HashMap<Key, Rc<tokio::sync::Mutex<Slot>>>>,
    next_conn: Cell<u64>,
    pins: RefCell<Option<HashMap<PinKey, Pin>>>,
    /// What each server of each profile last listed (for the console and the CLI).
    seen: RefCell<HashMap<(ProfileName, ServerName), Listing>>,
}

fn slot(ctx: &Ctx, role: Role) -> Result<std::sync::Arc<HelperSlot>, String> {
    ctx.helpers
        .slot(role)
        .cloned()
        .ok_or_else(|| format!("there is no {role}"))
}

async fn pins(ctx: &Rc<Ctx>) -> Result<(), String> {
    if ctx.servers.pins.borrow().is_some() {
        return Ok(());
    }
    let rows = ctx
        .gate
        .store
        .read(audit_store::pins::load)
        .await
        .map_err(|e| format!("reading the pinned tools: {e}"))?;
    let map = rows
        .into_iter()
        .map(|p| ((p.profile.clone(), p.server.clone(), p.def.name.clone()), p))
        .collect();
    *ctx.servers.pins.borrow_mut() = Some(map);
    Ok(())
}

/// Why a listed tool is not offered (`None`: it is pinned as listed).
fn held_why(
    ctx: &Ctx,
    profile: &ProfileName,
    server: &ServerName,
    def: &ToolDef,
) -> Option<String> {
    let pins = ctx.servers.pins.borrow();
    let key = (profile.clone(), server.clone(), def.name.clone());
    audit_store::pins::held_why(pins.as_ref().and_then(|p| p.get(&key)), def)
}

/// The session's connection to `s`, started (or restarted) if it has none, its listing fresh.
/// `fresh`: list again even if nothing said the list changed (what the console shows).
async fn live_tools(
    ctx: &Rc<Ctx>,
    sid: &SessionId,
    profile: &ProfileName,
    s: &McpServer,
    fresh: bool,
) -> Result<Vec<ToolDef>, String> {
    let cell = ctx
        .servers
        .slots
        .borrow_mut()
        .entry((sid.clone(), s.name.clone()))
        .or_default()
        .clone();
    let mut slot = cell.lock().await;
    if let Some(l) = &slot.live {
        if let Some(why) = l.gone.borrow().clone() {
            tracing::warn!(server = %s.name, session = %sid, "connection lost: {why}");
        }
    }
    if slot
        .live
        .as_ref()
        .is_some_and(|l| l.gone.borrow().is_some())
    {
        slot.live = None;
    }
    if slot.live.is_none() {
        let now = Instant::now();
        slot.starts
            .retain(|t| now.duration_since(*t) < Duration::from_secs(60));
        if slot.starts.len() >= RESTARTS_PER_MINUTE {
            return Err(format!(
                "the server {} was started {RESTARTS_PER_MINUTE} times in the last minute and ended each time; it is not started again for now",
                s.name
            ));
        }
        slot.starts.push(now);
        let live = tokio::time::timeout(START_TIMEOUT, start(ctx, sid, profile, s))
            .await
            .map_err(|_| {
                format!(
                    "the server {} did not start within {} s",
                    s.name,
                    START_TIMEOUT.as_secs()
                )
            })??;
        slot.live = Some(live);
    }
    let l = slot.live.as_mut().expect("set above");
    if fresh || l.stale.get() || l.listed.elapsed() > RELIST_AFTER {
        l.stale.set(false);
        l.tools = list_tools(ctx, l.conn).await?;
        l.listed = Instant::now();
    }
    let tools = l.tools.clone();
    // What the console and the CLI approve against: the newest listing of any session, never
    // an older one a session kept (an approval must match what the server says now).
    let mut seen = ctx.servers.seen.borrow_mut();
    let key = (profile.clone(), s.name.clone());
    if seen.get(&key).is_none_or(|(at, _)| *at <= l.listed) {
        seen.insert(key, (l.listed, tools.clone()));
    }
    Ok(tools)
}

async fn list_tools(ctx: &Rc<Ctx>, conn: ConnId) -> Result<Vec<ToolDef>, String> {
    let servers = slot(ctx, Role::Servers)?;
    match servers
        .call(Body::Servers(ServersRequest::ListTools { conn }))
        .await
    {
        Ok(Body::ServersReply(ServersReply::Tools(list))) => {
            for d in &list.dropped {
                tracing::warn!(%conn, "a listed tool is not offered: {d}");
            }
            Ok(list.tools)
        }
        Ok(Body::Error(e)) => Err(e.message),
        Ok(other) => Err(format!(
            "the servers-helper answered a listing with {:?}",
            other.kind()
        )),
        Err(e) => Err(e.to_string()),
    }
}

/// Starts `s` for session `sid`: its sandbox (or the relay to a remote server), the handshake,
/// the first listing; then the task that watches its events.
async fn start(
    ctx: &Rc<Ctx>,
    sid: &SessionId,
    profile: &ProfileName,
    s: &McpServer,
) -> Result<Live, String> {
    let servers = slot(ctx, Role::Servers)?;
    let conn = ConnId(ctx.servers.next_conn.get() + 1);
    ctx.servers.next_conn.set(conn.0);
    let gone = Rc::new(RefCell::new(None::<String>));
    let stale = Rc::new(Cell::new(false));
    let tier = crate::exec_tier::in_force(ctx);
    let line = policy::servers::start_line(s, profile.as_str(), tier);
    let mut scrub = Rc::new(Vec::new());
    let (stdio, backing, link) = match &s.reach {
        Reach::Stdio(x) => {
            let (fd, run, values) = start_sandbox(ctx, sid, profile, s, x, conn, &gone).await?;
            scrub = values;
            (fd, Backing::Sandbox(run), None)
        }
        Reach::Remote(r) => {
            let (fd, link) =
                super::remote::open(ctx, sid, &s.name, r, s.call_timeout, gone.clone())?;
            row(sid, &s.name, "started", line.clone(), None);
            (fd, Backing::Remote, Some(link))
        }
    };
    let attached = servers
        .call_with_fd(
            Body::Servers(ServersRequest::Attach {
                conn,
                server: s.name.clone(),
            }),
            stdio,
        )
        .await;
    let hello = match attached {
        Ok(Body::ServersReply(ServersReply::Attached(h))) => h,
        other => {
            stop(ctx, conn, backing).await;
            let why = match other {
                Ok(Body::Error(e)) => e.message,
                Ok(o) => format!("the servers-helper answered with {:?}", o.kind()),
                Err(e) => e.to_string(),
            };
            // The relay's own reason (a refused credential, an HTTP status) says more.
            let why = gone.borrow().clone().unwrap_or(why);
            return Err(format!("the server {}: {why}", s.name));
        }
    };
    if let Some(link) = &link {
        *link.version.borrow_mut() = Some(hello.protocol_version.clone());
    }
    tracing::info!(server = %s.name, session = %sid, "{} {} speaks MCP {}", hello.name, hello.version, hello.protocol_version);
    // Its events: a changed list marks the listing stale; a broken connection stops it.
    {
        let (ctx, servers, gone, stale) =
            (ctx.clone(), servers.clone(), gone.clone(), stale.clone());
        tokio::task::spawn_local(async move {
            loop {
                let ev = servers
                    .call(Body::Servers(ServersRequest::Watch { conn }))
                    .await;
                match ev {
                    Ok(Body::ServersReply(ServersReply::Event(ServerEvent::ToolsChanged))) => {
                        stale.set(true)
                    }
                    Ok(Body::ServersReply(ServersReply::Event(ServerEvent::Closed(why)))) => {
                        gone.borrow_mut().get_or_insert(why);
                        break;
                    }
                    other => {
                        gone.borrow_mut()
                            .get_or_insert(format!("watching it failed: {other:?}"));
                        break;
                    }
                }
            }
            stop(&ctx, conn, backing).await;
        });
    }
    let tools = list_tools(ctx, conn).await.inspect_err(|_| {
        let ctx = ctx.clone();
        tokio::task::spawn_local(async move { stop(&ctx, conn, backing).await });
    })?;
    Ok(Live {
        conn,
        profile: profile.clone(),
        backing,
        scrub,
        tools,
        listed: Instant::now(),
        stale,
        gone,
    })
}

/// A stdio server's sandbox, with the proxy when it has a network list, and the task that
/// logs its stderr and detaches it when it ends. Returns its stdio socket.
async fn start_sandbox(
    ctx: &Rc<Ctx>,
    sid: &SessionId,
    profile: &ProfileName,
    s: &McpServer,
    x: &StdioServer,
    conn: ConnId,
    gone: &Rc<RefCell<Option<String>>>,
) -> Result<(crate::helpers::Passed, RunId, Rc<Vec<SecretValue>>), String> {
    let exec = slot(ctx, Role::Exec)?;
    let servers = slot(ctx, Role::Servers)?;
    if let Some(why) = crate::exec_tier::refusal(ctx).await {
        return Err(format!("the server {} is not started: {why}", s.name));
    }
    if crate::running_as_root() {
        // Its state directory would have to belong to the user commands run as (nobody),
        // which this broker, without capabilities after its lockdown, cannot give it.
        return Err(format!(
            "the server {} is not started: a broker running as root does not run third-party stdio servers yet; run gatehouse as your own user",
            s.name
        ));
    }
    let owner = crate::launch::run_as_owner(ctx);
    let state = ctx
        .dirs
        .ensure_agent_home(&format!("mcp-{profile}-{}", s.name), owner, false)
        .map_err(|e| format!("the server's state directory: {e}"))?;
    let proxy = if x.network.is_empty() {
        None
    } else {
        let hosts = x.network.iter().map(|h| h.to_string()).collect();
        Some(crate::launch::Proxy::open(ctx, "mcp", hosts).await?)
    };
    let mut spec = policy::servers::spec(x, &state, proxy.as_ref().map(|p| p.token.clone()));
    let tier = crate::exec_tier::in_force(ctx);
    let line = policy::servers::start_line(s, profile.as_str(), tier);
    let secrets = match server_secrets(ctx, x).await {
        Ok(v) => v,
        Err(why) => {
            if let Some(p) = &proxy {
                p.close().await;
            }
            row(sid, &s.name, "refused", format!("{line}: {why}"), tier);
            return Err(format!("the server {} is not started: {why}", s.name));
        }
    };
    let mut scrub = Vec::new();
    if let Some(u) = spec.user.as_mut() {
        for (var, value) in secrets {
            // Passed by name like `--pass-env`: the sandbox's filter of secret-looking names
            // is for what nobody named.
            let text = String::from_utf8(value.expose().to_vec())
                .map_err(|_| format!("the server {}: the value of {var} is not text", s.name))?;
            u.pass_env.push((var, text));
            scrub.push(value);
        }
    }
    let scrub = Rc::new(scrub);
    if let Some(p) = &proxy {
        spec.network = p.network();
    }
    // Windows: its ACEs in a command slot of its own (held while it runs); nothing elsewhere.
    let started = match crate::exec_aces::hold(ctx, &spec) {
        Ok(aces) => {
            spec.slot = aces.slot();
            let proxied = proxy.as_ref().map(|p| (p.net.clone(), p.session.clone()));
            (start_with_stdio(ctx, &exec, spec, proxied).await).map(|s| (s, aces))
        }
        Err(why) => Err((None, why)),
    };
    let ((run, stdio, relay), aces) = match started {
        Ok(s) => s,
        Err((run, why)) => {
            if let Some(run) = run {
                stop_run(&exec, run).await;
            }
            if let Some(p) = &proxy {
                p.close().await;
            }
            row(sid, &s.name, "refused", format!("{line}: {why}"), tier);
            return Err(format!("the server {} did not start: {why}", s.name));
        }
    };
    row(sid, &s.name, "started", format!("{run}: {line}"), tier);
    // Windows: the proxy's loopback listener hands the server's connections to the net-helper
    // while it runs (on Linux they come through the connector's relay).
    #[cfg(windows)]
    let listening = proxy.as_ref().and_then(|p| p.listening(ctx, None, None));
    // Its stderr goes to the log (its secrets scrubbed), never to the agent; its end ends the
    // connection.
    let (gone, name, sid, values) = (gone.clone(), s.name.clone(), sid.clone(), scrub.clone());
    let proxy = proxy.map(Rc::new);
    tokio::task::spawn_local(async move {
        let end = watch_run(&exec, run, |_, stderr| {
            let mut stderr = String::from_utf8_lossy(&stderr).into_owned();
            ipc_schema::secrets::scrub_text(&values, &mut stderr);
            for line in stderr.lines().take(64) {
                tracing::info!(server = %name, "stderr: {}", ipc_schema::inert::escaped(line));
            }
            true
        })
        .await;
        let why = match end {
            Ok(e) => format!("its sandbox ended: {}", e.outcome.describe()),
            Err(e) => e,
        };
        gone.borrow_mut().get_or_insert(why.clone());
        let _ = servers
            .call(Body::Servers(ServersRequest::Detach { conn }))
            .await;
        let _ = relay.await;
        #[cfg(windows)]
        if let Some((task, stop)) = listening {
            stop.notify_one();
            let _ = task.await;
        }
        drop(aces);
        if let Some(p) = proxy {
            p.close().await;
        }
        row(&sid, &name, "ended", format!("{run}: {why}"), tier);
    });
    Ok((stdio, run, scrub))
}

/// What a `Start` was answered with: the run, or why it did not start.
fn started(answer: Result<Body, crate::helpers::CallError>) -> Result<RunId, String> {
    match answer {
        Ok(Body::ExecReply(ExecReply::Started { run, .. })) => Ok(run),
        Ok(Body::Error(e)) => Err(e.message),
        Ok(o) => Err(format!(
            "the exec-helper answered a start with {:?}",
            o.kind()
        )),
        Err(e) => Err(e.to_string()),
    }
}

/// A failed start: the run to stop, if it started, and why.
type NotStarted = (Option<RunId>, String);

/// Starts the server's sandbox with the connector, then takes the stdio socket it passes out;
/// the relay also carries the proxy's connections (`proxied`: the net-helper and session).
#[cfg(unix)]
async fn start_with_stdio(
    ctx: &Rc<Ctx>,
    exec: &HelperSlot,
    spec: ipc_schema::exec::CommandSpec,
    proxied: Option<(std::sync::Arc<HelperSlot>, String)>,
) -> Result<(RunId, crate::helpers::Passed, tokio::task::JoinHandle<()>), NotStarted> {
    let (ours, theirs) = crate::helpers::connector_pair()
        .map_err(|e| (None, format!("the server's connector: {e}")))?;
    let start = Body::Exec(ExecRequest::Start(Box::new(spec)));
    let run = started(exec.call_with_fd(start, crate::helpers::pass(theirs)).await)
        .map_err(|why| (None, why))?;
    let (stdio_tx, stdio_rx) = tokio::sync::oneshot::channel();
    let relay = crate::launch::relay(ctx.clone(), ours, proxied, None, None, Some(stdio_tx));
    let relay = tokio::task::spawn_local(relay);
    match tokio::time::timeout(Duration::from_secs(10), stdio_rx).await {
        Ok(Ok(fd)) => Ok((run, fd, relay)),
        _ => Err((Some(run), "its sandbox passed no stdio socket".into())),
    }
}

/// Windows: serves a pipe named after a fresh run for the exec-helper alone (the slot's SID and
/// this user in its DACL; each client's process checked to be the exec-helper's), which
/// connects to it twice before the server starts: the server's stdin, then its stdout. Those
/// two are relayed to one end of a pair whose other end goes to the servers-helper.
#[cfg(windows)]
async fn start_with_stdio(
    _ctx: &Rc<Ctx>,
    exec: &HelperSlot,
    mut spec: ipc_schema::exec::CommandSpec,
    _proxied: Option<(std::sync::Arc<HelperSlot>, String)>,
) -> Result<(RunId, crate::helpers::Passed, tokio::task::JoinHandle<()>), NotStarted> {
    let no = |why: String| (None, why);
    let name =
        ipc_schema::exec::RunName::parse(&hex::encode(rand::random::<[u8; 16]>())).map_err(no)?;
    let slot = spec.slot.ok_or_else(|| no("no command slot".into()))?;
    let server = spec.user.as_mut().and_then(|u| u.server.as_mut());
    server
        .ok_or_else(|| no("not a server's Start".into()))?
        .run_name = Some(name.clone());
    let pipe = name.server_pipe();
    let sid = sandbox::wincfg::slot_sid(slot);
    let mut listener = sandbox::endpoint::Listener::bind_also_for(&pipe, Some(&sid.0))
        .map_err(|e| no(format!("the server's stdio pipe {pipe}: {e}")))?;
    let exec_pid = exec.live_pid();
    let accepting = tokio::task::spawn_local(async move {
        let mut conns = Vec::new();
        while conns.len() < 2 {
            let (conn, peer) = listener.accept().await.map_err(|e| e.to_string())?;
            if peer.pid.is_none() || peer.pid != exec_pid {
                return Err(format!(
                    "process {:?} connected to the server's stdio pipe, not the exec-helper ({exec_pid:?})",
                    peer.pid
                ));
            }
            conns.push(conn);
        }
        let stdout = conns.pop().expect("two connections");
        Ok((conns.pop().expect("two connections"), stdout))
    });
    let abort = accepting.abort_handle();
    let start = Body::Exec(ExecRequest::Start(Box::new(spec)));
    let run = started(exec.call(start).await).map_err(|why| {
        abort.abort();
        (None, why)
    })?;
    let (mut stdin, mut stdout) =
        match tokio::time::timeout(Duration::from_secs(10), accepting).await {
            Ok(Ok(Ok(c))) => c,
            Ok(Ok(Err(why))) => return Err((Some(run), why)),
            _ => {
                abort.abort();
                return Err((
                    Some(run),
                    "the exec-helper did not connect the server's stdio".into(),
                ));
            }
        };
    let (mut rd, mut wr, theirs) =
        super::remote::pair().map_err(|e| (Some(run), format!("the server's connection: {e}")))?;
    // Either end ends both: the server closing its stdout, or the servers-helper its end.
    let relay = tokio::task::spawn_local(async move {
        tokio::select! {
            _ = tokio::io::copy(&mut rd, &mut stdin) => {}
            _ = tokio::io::copy(&mut stdout, &mut wr) => {}
        }
    });
    Ok((run, theirs, relay))
}

/// The values of the server's `secrets`, each given by the secrets-helper only when what the
/// server may reach lies within the secret's hosts.
async fn server_secrets(
    ctx: &Rc<Ctx>,
    x: &StdioServer,
) -> Result<Vec<(String, SecretValue)>, String> {
    let mut out = Vec::new();
    for (var, name) in &x.secrets {
        let secrets = slot(ctx, Role::Secrets)?;
        let req = SecretsRequest::ServerEnv {
            name: name.clone(),
            reach: x.network.clone(),
        };
        match secrets.call(Body::Secrets(req)).await {
            Ok(Body::SecretsReply(SecretsReply::ServerEnv(v))) => out.push((var.clone(), v)),
            Ok(Body::SecretsReply(SecretsReply::Failed(e))) => {
                return Err(format!("{var} from credential {name}: {}", e.message))
            }
            Ok(other) => return Err(format!("the secrets-helper answered {:?}", other.kind())),
            Err(e) => return Err(e.to_string()),
        }
    }
    Ok(out)
}

/// A server's row; `tier` is the exec sandbox's, for a stdio server (which runs in it).
pub(super) fn row(
    sid: &SessionId,
    server: &ServerName,
    outcome: &str,
    detail: String,
    tier: Option<ipc_schema::tier::ConfinementTier>,
) {
    crate::audit::record(
        AuditEvent::new(AuditKind::Execution, "broker", outcome)
            .session(sid.0.clone())
            .tool(format!("mcp_server {server}"))
            .detail(detail)
            .tier(tier),
    );
}

fn session_policy(ctx: &Rc<Ctx>, session: &SessionRef) -> Result<Rc<Policy>, String> {
    let profile = session.borrow().profile.clone();
    ctx.gate.policy.borrow().profile(&profile)
}

/// `ToolCall::ListServerTools`: what the session's servers offer now.
pub async fn list(ctx: &Rc<Ctx>, conn: &Rc<Conn>) -> Body {
    let session = match super::session_for(ctx, conn) {
        Ok(s) => s,
        Err(r) => return Body::ToolReply(r),
    };
    let policy = match session_policy(ctx, &session) {
        Ok(p) => p,
        // With an invalid policy every call is refused; no server tool is offered.
        Err(_) => return Body::ToolReply(ToolReply::ServerTools(ServerTools::default())),
    };
    if let Err(e) = pins(ctx).await {
        return Body::Error(ipc_schema::ErrorReply::new(ErrorCode::Internal, e));
    }
    let (sid, profile) = {
        let s = session.borrow();
        (s.id.clone(), s.profile.clone())
    };
    let mut out = ServerTools::default();
    for s in &policy.servers {
        let tools = match live_tools(ctx, &sid, &profile, s, false).await {
            Ok(t) => t,
            Err(why) => {
                out.unavailable
                    .push(format!("the server {}: {why}", s.name));
                continue;
            }
        };
        for def in tools {
            if let Some(why) = held_why(ctx, &profile, &s.name, &def) {
                out.held.push(HeldTool {
                    server: s.name.clone(),
                    tool: def.name.clone(),
                    why,
                });
                continue;
            }
            let standing = policy::servers::standing(&policy, &s.name, &def.name);
            if standing.action == Action::Deny {
                continue;
            }
            out.offered.push(OfferedTool {
                server: s.name.clone(),
                def,
                action: standing.action,
                rule: standing.rule,
            });
        }
    }
    Body::ToolReply(ToolReply::ServerTools(out))
}

/// The profile names the server, it lists the tool, and the tool is pinned as listed.
pub async fn check_offered(
    ctx: &Rc<Ctx>,
    session: &SessionRef,
    policy: &Policy,
    c: &ServerCall,
) -> Result<(), ToolReply> {
    let Some(s) = policy.servers.iter().find(|s| s.name == c.server) else {
        return Err(refused(
            RefusalKind::Denied,
            format!("profile {} has no server {}", policy.profile, c.server),
            None,
            None,
        ));
    };
    pins(ctx)
        .await
        .map_err(|e| failed(ErrorCode::Internal, e))?;
    let (sid, profile) = {
        let s = session.borrow();
        (s.id.clone(), s.profile.clone())
    };
    let tools = live_tools(ctx, &sid, &profile, s, false)
        .await
        .map_err(|why| failed(ErrorCode::HelperUnavailable, why))?;
    let Some(def) = tools.iter().find(|d| d.name == c.tool) else {
        return Err(refused(
            RefusalKind::NotAvailable,
            format!("the server {} does not list a tool {}", c.server, c.tool),
            None,
            None,
        ));
    };
    if let Some(why) = held_why(ctx, &profile, &s.name, def) {
        return Err(refused(
            RefusalKind::Held,
            format!(
                "{} is held: {why}. The human approves its definition in the console or with `gatehouse mcp-server tools {}`",
                c.offered_name(),
                c.server
            ),
            None,
            None,
        ));
    }
    Ok(())
}

/// Whether the user marked the tool read-only in the policy (then it skips the ledger).
pub fn marked_read_only(policy: &Policy, c: &ServerCall) -> bool {
    policy
        .servers
        .iter()
        .any(|s| s.name == c.server && s.read_only.contains(&c.tool))
}

/// Whether the call's server is a stdio server (it runs in the exec sandbox).
pub fn runs_in_exec_sandbox(policy: &Policy, c: &ServerCall) -> bool {
    policy
        .servers
        .iter()
        .any(|s| s.name == c.server && matches!(s.reach, Reach::Stdio(_)))
}

enum Outcome {
    Done(CallOutput),
    Refused(String),
    /// The call may have reached the server.
    Unknown(String),
    NeverSent(String),
}

async fn call(ctx: &Rc<Ctx>, session: &SessionRef, c: &ServerCall) -> Outcome {
    let policy = match session_policy(ctx, session) {
        Ok(p) => p,
        Err(e) => return Outcome::NeverSent(e),
    };
    let Some(s) = policy.servers.iter().find(|s| s.name == c.server) else {
        return Outcome::NeverSent(format!(
            "profile {} has no server {}",
            policy.profile, c.server
        ));
    };
    let key = (session.borrow().id.clone(), c.server.clone());
    let cell = ctx.servers.slots.borrow().get(&key).cloned();
    let live = match cell {
        Some(cell) => cell
            .lock()
            .await
            .live
            .as_ref()
            .map(|l| (l.conn, l.scrub.clone())),
        None => None,
    };
    let Some((conn, scrub)) = live else {
        return Outcome::NeverSent(format!("the server {} is not running", c.server));
    };
    let Ok(servers) = slot(ctx, Role::Servers) else {
        return Outcome::NeverSent("there is no servers-helper".into());
    };
    let req = ServersRequest::CallTool {
        conn,
        tool: c.tool.clone(),
        arguments: c.arguments.clone(),
        timeout_ms: s.call_timeout.as_millis() as u64,
    };
    match servers.call(Body::Servers(req)).await {
        Ok(Body::ServersReply(ServersReply::Called(mut out))) => {
            for item in &mut out.content {
                if let ContentItem::Text(t) = item {
                    ipc_schema::secrets::scrub_text(&scrub, t);
                }
            }
            if let Some(j) = out.structured.take() {
                // Scrubbing inside a JSON string keeps it valid JSON (the marker is plain text).
                let mut text = j.as_str().to_string();
                ipc_schema::secrets::scrub_text(&scrub, &mut text);
                out.structured = ipc_schema::servers::JsonText::try_from(text).ok();
            }
            Outcome::Done(out)
        }
        Ok(Body::Error(e)) => match e.code {
            ErrorCode::Invalid | ErrorCode::HelperUnavailable => Outcome::NeverSent(e.message),
            ErrorCode::Refused => Outcome::Refused(e.message),
            _ => Outcome::Unknown(e.message),
        },
        Ok(other) => Outcome::Unknown(format!(
            "the servers-helper answered with {:?}",
            other.kind()
        )),
        Err(e) => Outcome::Unknown(e.to_string()),
    }
}

/// A result as the agent gets it: wrapped as outside text, remembered for later proposals.
fn result(session: &SessionRef, c: &ServerCall, out: CallOutput) -> ToolResult {
    let mut body = String::new();
    for item in &out.content {
        if !body.is_empty() {
            body.push('\n');
        }
        match item {
            ContentItem::Text(t) => body.push_str(t),
            ContentItem::Omitted(what) => body.push_str(&format!("[gatehouse: {what}]")),
        }
    }
    if let Some(s) = &out.structured {
        if body.is_empty() {
            body.push_str(s.as_str());
        }
    }
    if out.truncated {
        body.push_str("\n[gatehouse: the result was cut to its first part]");
    }
    let source = format!("mcp:{}", c.offered_name());
    let (_, text) = ipc_schema::outside::wrap(&source, &body, rand::random);
    let tool = ToolId::Server(c.server.clone(), c.tool.clone());
    {
        let mut s = session.borrow_mut();
        let n = s.calls;
        s.outside
            .remember_server(tool, n, audit_store::now_ms() as u64, &text);
    }
    ToolResult::Server(ServerOutput {
        is_error: out.is_error,
        text,
    })
}

/// A call of a tool the user marked read-only.
pub async fn execute(
    ctx: &Rc<Ctx>,
    session: &SessionRef,
    c: &ServerCall,
) -> Result<ToolResult, ToolReply> {
    match call(ctx, session, c).await {
        Outcome::Done(out) => Ok(result(session, c, out)),
        Outcome::Refused(why) => Err(refused(RefusalKind::NotAvailable, why, None, None)),
        Outcome::Unknown(why) | Outcome::NeverSent(why) => {
            Err(failed(ErrorCode::HelperUnavailable, why))
        }
    }
}

/// An effectful call (already `executing` in the ledger).
pub async fn execute_effect(ctx: &Rc<Ctx>, session: &SessionRef, c: &ServerCall) -> EffectAnswer {
    match call(ctx, session, c).await {
        Outcome::Done(out) => EffectAnswer::Done(Box::new(result(session, c, out))),
        Outcome::Refused(why) => EffectAnswer::Failed(Failure::new(ErrorCode::Refused, why)),
        Outcome::NeverSent(why) => {
            EffectAnswer::NeverSent(Failure::new(ErrorCode::HelperUnavailable, why))
        }
        Outcome::Unknown(why) => EffectAnswer::Unknown(format!("the server {}: {why}", c.server)),
    }
}

/// The tools `server` of `profile` lists now (started under a session of the console's own
/// when no agent's session runs it), each with why it is held, if it is.
pub async fn inspect(
    ctx: &Rc<Ctx>,
    profile: &ProfileName,
    server: &ServerName,
) -> Result<Vec<(ToolDef, [u8; 32], Option<String>, Option<ToolDef>)>, String> {
    let policy = ctx.gate.policy.borrow().profile(profile)?;
    let Some(s) = policy.servers.iter().find(|s| s.name == *server) else {
        return Err(format!("profile {profile} has no server {server}"));
    };
    pins(ctx).await?;
    // A session that runs it already (the agent's) lists it afresh; else the console's own.
    let sid = running_for(ctx, profile, server)
        .unwrap_or_else(|| SessionId(format!("console-{profile}")));
    let tools = live_tools(ctx, &sid, profile, s, true).await?;
    let pins = ctx.servers.pins.borrow();
    Ok(tools
        .into_iter()
        .map(|d| {
            let why = held_why(ctx, profile, server, &d);
            let pinned = pins
                .as_ref()
                .and_then(|p| p.get(&(profile.clone(), server.clone(), d.name.clone())))
                .map(|p| p.def.clone());
            let dg = digest(&d);
            (d, dg, why, pinned)
        })
        .collect())
}

/// A session of `profile` whose connection to `server` is live and not in use right now.
fn running_for(ctx: &Ctx, profile: &ProfileName, server: &ServerName) -> Option<SessionId> {
    let slots = ctx.servers.slots.borrow();
    slots.iter().find_map(|((sid, name), cell)| {
        let slot = cell.try_lock().ok()?;
        let live = slot.live.as_ref()?;
        let up = name == server && live.profile == *profile && live.gone.borrow().is_none();
        up.then(|| sid.clone())
    })
}

/// The human approved these definitions (each named by the digest they were shown): pinned,
/// with an audit row each. A digest that no longer matches what the server lists is refused.
pub async fn approve(
    ctx: &Rc<Ctx>,
    profile: &ProfileName,
    server: &ServerName,
    approved: &[(ServerToolName, [u8; 32])],
) -> Result<u32, String> {
    let seen = ctx
        .servers
        .seen
        .borrow()
        .get(&(profile.clone(), server.clone()))
        .map(|(_, tools)| tools.clone())
        .ok_or_else(|| {
            format!("the server {server} of profile {profile} has not listed its tools yet")
        })?;
    let mut pins_new = Vec::new();
    for (tool, dg) in approved {
        let Some(def) = seen.iter().find(|d| d.name == *tool) else {
            return Err(format!("the server {server} does not list {tool} now"));
        };
        if digest(def) != *dg {
            return Err(format!(
                "{tool}: the server describes it otherwise than what was shown; look again"
            ));
        }
        pins_new.push(Pin {
            profile: profile.clone(),
            server: server.clone(),
            def: def.clone(),
            digest: *dg,
            approved_ms: audit_store::now_ms(),
        });
    }
    let n = pins_new.len() as u32;
    let stored = pins_new.clone();
    ctx.gate
        .store
        .txn(move |tx, audit| {
            for p in &stored {
                audit_store::pins::put(tx, p)?;
                audit.push(
                    AuditEvent::new(AuditKind::Policy, "ui", "pinned")
                        .tool(ipc_schema::servers::offered_name(&p.server, &p.def.name))
                        .detail(format!(
                            "profile {}: definition {} approved",
                            p.profile,
                            hex::encode(&p.digest[..8])
                        )),
                );
            }
            Ok(())
        })
        .await
        .map_err(|e| e.to_string())?;
    pins(ctx).await?;
    if let Some(map) = ctx.servers.pins.borrow_mut().as_mut() {
        for p in pins_new {
            map.insert((p.profile.clone(), p.server.clone(), p.def.name.clone()), p);
        }
    }
    Ok(n)
}

/// A session ended: its servers are stopped.
pub fn session_closed(ctx: &Rc<Ctx>, sid: &SessionId) {
    let cells: Vec<_> = {
        let mut slots = ctx.servers.slots.borrow_mut();
        let keys: Vec<Key> = slots.keys().filter(|(s, _)| s == sid).cloned().collect();
        keys.into_iter().filter_map(|k| slots.remove(&k)).collect()
    };
    for cell in cells {
        let ctx = ctx.clone();
        tokio::task::spawn_local(async move {
            if let Some(l) = cell.lock().await.live.take() {
                stop(&ctx, l.conn, l.backing).await;
            }
        });
    }
}

/// `doctor`'s line for each server of each profile: how it is confined, how many of its tools
/// are pinned, how many its last listing held, how many sessions run it.
pub fn doctor_lines(ctx: &Ctx) -> Vec<String> {
    let Ok(all) = ctx.gate.policy.borrow().current.clone() else {
        return Vec::new();
    };
    let pins = ctx.servers.pins.borrow();
    let seen = ctx.servers.seen.borrow();
    let slots = ctx.servers.slots.borrow();
    let mut out = Vec::new();
    for (profile, policy) in &all.profiles {
        for s in &policy.servers {
            let pinned = pins.as_ref().map_or(0, |p| {
                p.keys()
                    .filter(|(pr, sv, _)| pr == profile && *sv == s.name)
                    .count()
            });
            let held = seen
                .get(&(profile.clone(), s.name.clone()))
                .map(|(_, tools)| {
                    tools
                        .iter()
                        .filter(|d| held_why(ctx, profile, &s.name, d).is_some())
                        .count()
                });
            let sessions = slots.keys().filter(|(_, n)| *n == s.name).count();
            let confinement = policy::servers::confinement(s, crate::running_as_root());
            out.push(format!(
                "mcp server {} (profile {profile}): {confinement}; {pinned} tool(s) pinned; {}; {sessions} session(s)",
                s.name,
                match held {
                    Some(h) => format!("{h} held in its last listing"),
                    None => "not listed since the broker started".into(),
                }
            ));
        }
    }
    out
}
