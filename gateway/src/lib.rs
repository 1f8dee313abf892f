//! The MCP gateway: one agent session's MCP server over stdio (`gatehouse mcp`).
//!
//! The gateway is the agent's only way to act: it turns MCP JSON-RPC into typed
//! [`ipc_schema::tool::ToolCall`]s on its one broker connection, so the broker never parses JSON
//! from an agent. [`run`] reads top to bottom: lock down (the broker connection was opened
//! before; after this the process has no filesystem, no network, no exec and can open no
//! socket), open the session, serve until the client closes stdin. One thread does it all,
//! waiting on stdin and the broker with `poll`. stdout carries only protocol messages; logs go
//! to stderr.
//!
//! Both MCP eras are served (see [`era`]); the JSON-RPC layer is strict (see [`jsonrpc`]).

#![forbid(unsafe_code)]

pub mod args;
#[cfg(any(unix, windows))]
pub mod broker;
pub mod catalog;
pub mod era;
pub mod jsonrpc;
pub mod lines;
#[cfg(windows)]
pub mod pipe;
#[cfg(feature = "test-hooks")]
pub mod probe;
pub mod render;
#[cfg(any(unix, windows))]
pub mod server;

#[cfg(any(unix, windows))]
use broker::{BrokerLink, SessionError};
use ipc_schema::tool::{ProfileName, ResumeToken};
#[cfg(any(unix, windows))]
use sandbox::{LockdownError, LockdownReport};
#[cfg(unix)]
use sandbox::{LockdownOptions, Profile};
#[cfg(unix)]
use std::os::fd::{AsFd, RawFd};
#[cfg(unix)]
use std::os::unix::net::UnixStream;
use std::time::Duration;

/// The default time a call waits for the human before it returns a tool error.
pub const DEFAULT_APPROVAL_WAIT: Duration = Duration::from_secs(120);
/// How often a waiting call reports progress (when the client asked for progress).
pub const PROGRESS_EVERY: Duration = Duration::from_secs(5);

/// How `gatehouse mcp` runs.
#[derive(Debug, Clone)]
pub struct Options {
    pub approval_wait: Duration,
    /// Where relative paths start (the directory `gatehouse mcp` was started in).
    pub base: args::PathBase,
    /// A session token from `gatehouse run` (never logged).
    pub token: Option<ResumeToken>,
    /// The named session profile (`--profile`); `None`: the default profile (or, with a token,
    /// the profile the session was opened with).
    pub profile: Option<ProfileName>,
    /// Run with less than the gateway profile needs when the kernel lacks a mechanism.
    pub allow_degraded: bool,
    /// Test builds only: serve without the lockdown (the positive control of the lockdown tests).
    #[cfg(feature = "test-hooks")]
    pub skip_lockdown: bool,
}

#[cfg(any(unix, windows))]
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    #[error("cannot lock the gateway down: {0}")]
    Lockdown(#[from] LockdownError),
    #[error(transparent)]
    Session(#[from] SessionError),
    #[error(transparent)]
    Serve(#[from] server::ServeError),
    #[cfg(windows)]
    #[error("cannot reach the broker at {0}: {1}")]
    Connect(String, std::io::Error),
}

/// The connection to the broker, once open: a Unix socket; on Windows the name of the broker's
/// gateway pipe, which [`run`] opens itself (overlapped, on a thread of its own).
#[cfg(unix)]
pub type Connection = UnixStream;
#[cfg(windows)]
pub type Connection = String;

#[cfg(unix)]
/// Locks the calling process down with the gateway profile, keeping stdio and `keep`.
pub fn lock_down(keep: &[RawFd], allow_degraded: bool) -> Result<LockdownReport, LockdownError> {
    sandbox::lockdown(
        &Profile::Gateway,
        &LockdownOptions {
            allow_degraded,
            keep_fds: keep.to_vec(),
            keep_env: Vec::new(),
        },
    )
}

/// On Windows the gateway is not started by gatehouse's spawner (the agent's client starts it),
/// so it has no restricted token; it hardens what a process can on itself: a job that admits
/// no child process, the self-settable mitigations (`sandbox::windows::harden_front`). Nothing
/// is kept open for it to close: Windows has no stray-descriptor step.
#[cfg(windows)]
pub fn lock_down(_keep: &[()], allow_degraded: bool) -> Result<LockdownReport, LockdownError> {
    sandbox::windows::harden_front(allow_degraded)
}

#[cfg(any(unix, windows))]
/// Locks down, opens the session on `broker` (already connected) and serves MCP on stdin and
/// stdout until the client closes stdin. Must be called while the process has one thread.
pub fn run(broker: Connection, opts: Options) -> Result<(), GatewayError> {
    #[cfg(unix)]
    let mut link = BrokerLink::new(broker);
    // The pipe is opened before the lockdown, as the socket is on Unix.
    #[cfg(windows)]
    let mut link = BrokerLink::new(
        pipe::Pipe::connect(&broker).map_err(|e| GatewayError::Connect(broker.clone(), e))?,
    );

    #[cfg(feature = "test-hooks")]
    let skip = opts.skip_lockdown;
    #[cfg(not(feature = "test-hooks"))]
    let skip = false;
    if skip {
        eprintln!("gatehouse mcp: TEST BUILD: running WITHOUT lockdown (--test-skip-lockdown)");
    } else {
        #[cfg(unix)]
        let report = lock_down(&[link.fd()], opts.allow_degraded)?;
        #[cfg(windows)]
        let report = lock_down(&[], opts.allow_degraded)?;
        let degraded = if report.degraded.is_empty() {
            String::new()
        } else {
            format!("; DEGRADED: {}", report.degraded.join("; "))
        };
        #[cfg(unix)]
        eprintln!(
            "gatehouse mcp: locked down (seccomp allowlist of {} syscalls, Landlock ABI {}){degraded}",
            report.seccomp_allowed_syscalls, report.landlock_abi,
        );
        #[cfg(windows)]
        eprintln!(
            "gatehouse mcp: hardened (a job that admits no child process; mitigations: {}){degraded}",
            report
                .windows
                .as_ref()
                .map(|w| w.mitigations.join(", "))
                .unwrap_or_default(),
        );
    }

    let session = match link.open_session(opts.token, opts.profile) {
        Ok(s) => s,
        Err(e) => {
            // The client may hide this process's stderr: it is told in MCP too.
            // (The caller says it on stderr.)
            let _ = serve_refusal(&e.to_string());
            return Err(e.into());
        }
    };
    eprintln!(
        "gatehouse mcp: session {} {} (profile {})",
        session.session,
        if session.resumed {
            "carried on"
        } else {
            "opened"
        },
        session.profile
    );

    let cfg = server::Config {
        approval_wait: opts.approval_wait,
        progress_every: PROGRESS_EVERY,
        base: opts.base,
    };
    let stdout = std::io::BufWriter::with_capacity(256 * 1024, std::io::stdout().lock());
    // stdin is read with read(2) on its descriptor: std's buffered Stdin would hide bytes from
    // poll.
    #[cfg(unix)]
    let stdin = std::io::stdin();
    let view = session
        .tools
        .iter()
        .map(|t| {
            (
                t.tool,
                catalog::Standing {
                    action: t.action,
                    rule: t.rule.clone(),
                },
            )
        })
        .collect();
    let server = server::Server::new(stdout, link, cfg).with_view(view);
    #[cfg(unix)]
    server.serve(stdin.as_fd())?;
    #[cfg(windows)]
    server.serve()?;
    Ok(())
}

/// The JSON-RPC error code of a server that cannot serve this session at all.
pub const REFUSED_SESSION: i64 = -32001;

/// Answers every request read from stdin with `reason` as a JSON-RPC error until stdin closes,
/// so that a client which hides the server's stderr (most do) still shows why gatehouse would
/// not serve it. Notifications and responses get no answer.
pub fn serve_refusal(reason: &str) -> std::io::Result<()> {
    use std::io::{Read, Write};
    let error = jsonrpc::RpcError::new(REFUSED_SESSION, format!("gatehouse: {reason}"));
    let mut split = lines::LineSplitter::new(lines::MAX_LINE);
    let mut stdin = std::io::stdin().lock();
    let mut out = std::io::stdout().lock();
    let mut buf = vec![0u8; 64 * 1024];
    let mut events = Vec::new();
    loop {
        let n = stdin.read(&mut buf)?;
        if n == 0 {
            split.finish(&mut events);
        } else {
            split.push(&buf[..n], &mut events);
        }
        for ev in events.drain(..) {
            let id = match ev {
                lines::LineEvent::Line(l) => match jsonrpc::parse_line(&l) {
                    Ok(Some(jsonrpc::Incoming::Request { id, .. })) => id.0,
                    Ok(_) => continue,
                    Err(r) => r.id,
                },
                lines::LineEvent::TooLong { id, .. } => id,
            };
            let mut line = serde_json::to_vec(&jsonrpc::error(&id, &error))?;
            line.push(b'\n');
            out.write_all(&line)?;
            out.flush()?;
        }
        if n == 0 {
            return Ok(());
        }
    }
}
