//! `gatehouse run`: an agent CLI (Claude Code, Codex, any program) inside the exec sandbox, with
//! gatehouse as its way to act on the machine and the egress proxy as its only way out.
//!
//! Order: ask the broker (ui channel: this is the user's own command) for a fresh session of the
//! profile and its one-use launch token; open one connection to the broker's gateway socket;
//! drop root if we are root; build the sandbox exactly as `gatehouse sandbox` does (the working
//! directory read-write, `--allow-read` grants, protected paths masked, the proxy for
//! `--allow-domain`), plus a Unix socket inside its private `/tmp` whose connections the
//! sandbox's init process passes out to this process. The first such connection that opens this
//! run's session (it presents the launch token) is relayed to the broker over the gateway
//! connection opened before; anything else is refused. When the agent ends, the token is
//! revoked (`LaunchRequest::End`, an audit row).
//!
//! The agent finds its way in through the environment: `GATEHOUSE_GATEWAY_SOCKET`,
//! `GATEHOUSE_SESSION_TOKEN` and `GATEHOUSE_MCP_CONFIG` (a ready-made MCP config in the private
//! `/tmp` that starts `gatehouse mcp`). The runtime directory, and with it `ui.sock`, stays
//! masked: the agent has no path to the ui channel.

use crate::cmd_sandbox::{self, refused, Stop};
use crate::{client::Client, Global};
use ipc_schema::codec::{read_frame, write_frame, MAX_FRAME};
use ipc_schema::exec::{GrantAccess, Limits, PathGrant};
use ipc_schema::tool::{ProfileName, ResumeToken, SessionId, ToolCall};
use ipc_schema::ui::{LaunchReply, LaunchRequest, UiReply, UiRequest};
use ipc_schema::{Body, Envelope, ErrorCode, ErrorReply};
use sandbox::linux::command::{self, fdpass::recv_with_fds, identity, Network, SandboxSpec};
use std::collections::VecDeque;
use std::io::Write;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};

const WHO: &str = "gatehouse run";
/// Inside the sandbox (its private `/tmp`, seen by nothing outside it).
pub const GATEWAY_SOCKET_INSIDE: &str = "/tmp/gatehouse-gateway.sock";
pub const MCP_CONFIG_INSIDE: &str = "/tmp/gatehouse-mcp.json";
pub const MCP_CONFIG_ENV: &str = "GATEHOUSE_MCP_CONFIG";
/// An agent session may run long: a day, not the 10 minutes of one command.
const RUN_TIMEOUT_MS: u64 = 24 * 3600 * 1000;
/// The agent's output is relayed as it comes; this only bounds what `--json` collects.
const RUN_OUTPUT_MAX: u64 = 64 << 20;

#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// The session profile of the policy (`[profile.NAME]` in policy.toml) the agent's session
    /// runs under; without it, the default profile.
    #[arg(long, value_name = "NAME")]
    profile: Option<String>,
    /// A directory (or file) the agent may read besides the working directory (e.g. its own
    /// config directory); repeatable.
    #[arg(long = "allow-read", value_name = "PATH")]
    read: Vec<PathBuf>,
    #[command(flatten)]
    proxy: cmd_sandbox::ProxyArgs,
    /// Run with less than the full sandbox if this kernel lacks a mechanism (each gap is printed).
    #[arg(long)]
    allow_degraded: bool,
    /// The agent program and its arguments.
    #[arg(last = true, required = true, value_name = "AGENT")]
    argv: Vec<String>,
}

pub fn run(g: &Global, args: RunArgs) -> ExitCode {
    match run_inner(g, args) {
        Ok(code) => code,
        Err(Stop(msg, code)) => {
            eprintln!("{WHO}: {msg}");
            ExitCode::from(code)
        }
    }
}

/// The run's session, held on the ui channel; ended (token revoked) on drop, however the run
/// ends. If this process is killed outright, the token still dies with the agent's gateway
/// connection (the broker revokes a presented token when its gateway disconnects).
struct Launch {
    ui: Client,
    session: SessionId,
}

impl Launch {
    fn open(g: &Global, profile: Option<ProfileName>) -> Result<(Launch, ResumeToken), Stop> {
        let mut ui = g
            .ui_client()
            .map_err(|e| refused(format!("cannot reach the broker: {e}")))?;
        match ui.request(Body::Ui(UiRequest::Launch(LaunchRequest::Open { profile }))) {
            Ok(Body::UiReply(UiReply::Launch(LaunchReply::Opened { session, token, .. }))) => {
                Ok((Launch { ui, session }, token))
            }
            Ok(Body::Error(e)) => Err(refused(format!(
                "the broker refused the session: {}",
                e.message
            ))),
            Ok(other) => Err(refused(format!(
                "unexpected answer to the session request: {:?}",
                other.kind()
            ))),
            Err(e) => Err(refused(format!("asking the broker for a session: {e}"))),
        }
    }
}

impl Drop for Launch {
    fn drop(&mut self) {
        let end = Body::Ui(UiRequest::Launch(LaunchRequest::End {
            session: self.session.clone(),
        }));
        match self.ui.request(end) {
            Ok(Body::UiReply(UiReply::Launch(LaunchReply::Ended { .. }))) => {}
            Ok(Body::Error(e)) => eprintln!("{WHO}: revoking the session's token: {}", e.message),
            Ok(other) => eprintln!(
                "{WHO}: revoking the session's token: unexpected answer {:?}",
                other.kind()
            ),
            Err(e) => eprintln!("{WHO}: revoking the session's token: {e}"),
        }
    }
}

fn run_inner(g: &Global, args: RunArgs) -> Result<ExitCode, Stop> {
    // Blocked before any thread starts, so that the signalfd of `supervise` sees them.
    cmd_sandbox::stop_signals()
        .thread_block()
        .map_err(|e| refused(format!("blocking signals: {e}")))?;
    let cwd = std::env::current_dir()
        .and_then(std::fs::canonicalize)
        .map_err(|e| refused(format!("cannot tell the current directory: {e}")))?;
    let profile = match args.profile.as_deref().map(ProfileName::parse) {
        None => None,
        Some(Ok(p)) => Some(p),
        Some(Err(e)) => return Err(refused(format!("--profile: {e}"))),
    };
    let exe = std::env::current_exe()
        .and_then(std::fs::canonicalize)
        .map_err(|e| refused(format!("cannot find this program: {e}")))?;
    let exe_text = exe
        .to_str()
        .ok_or_else(|| refused(format!("{}: the path is not UTF-8", exe.display())))?
        .to_string();

    // While we may still be root: the session, and the one gateway connection the agent gets.
    let (launch, token) = Launch::open(g, profile)?;
    let gateway_path = g.dirs.gateway_socket();
    let upstream = UnixStream::connect(&gateway_path).map_err(|e| {
        refused(format!(
            "cannot reach the broker's gateway at {}: {e}",
            gateway_path.display()
        ))
    })?;

    // Never root toward the host (as `gatehouse sandbox`): the agent runs as the owner of the
    // working directory, or nobody. The connections above keep the broker's user.
    if nix::unistd::geteuid().is_root() {
        let (uid, gid) = identity::run_as_for(&cwd);
        identity::become_user(uid, gid)
            .map_err(|e| refused(format!("cannot drop root before sandboxing: {e}")))?;
    }
    let uid = nix::unistd::geteuid().as_raw();
    let home = identity::home_of(uid);
    if let Some(why) = cmd_sandbox::implicit_root_refusal(&cwd, &home) {
        return Err(refused(format!(
            "the current directory {} cannot be the agent's working directory: {why}. cd into the project first",
            cwd.display()
        )));
    }

    let mut grants = vec![PathGrant {
        path: cwd.clone(),
        access: GrantAccess::ReadWrite,
    }];
    for p in &args.read {
        let abs = std::path::absolute(p).map_err(|e| refused(format!("{}: {e}", p.display())))?;
        grants.push(PathGrant {
            path: abs,
            access: GrantAccess::Read,
        });
    }
    // The agent starts `gatehouse mcp` from the MCP config: this very binary, read-only.
    if !exe.starts_with(&cwd) {
        grants.push(PathGrant {
            path: exe.clone(),
            access: GrantAccess::Read,
        });
    }

    let (network, egress) = match cmd_sandbox::open_proxy(&args.proxy, args.allow_degraded)? {
        None => (Network::None, None),
        Some((connector, token, egress)) => (Network::Proxy { connector, token }, egress),
    };
    // The sandbox's rlimits are a command's (checked against the ceilings); the time and
    // output limits, which this process enforces while it watches, are an agent session's.
    let limits = Limits::default();
    let watch_limits = Limits {
        timeout_ms: RUN_TIMEOUT_MS,
        stdout_max: RUN_OUTPUT_MAX,
        stderr_max: RUN_OUTPUT_MAX,
        ..limits
    };
    let spec = SandboxSpec {
        argv: args.argv.clone(),
        cwd: cwd.clone(),
        grants,
        env: command::env::inherited_from_process(),
        home,
        network,
        limits,
        protect: vec![
            g.dirs.config.clone(),
            g.dirs.data.clone(),
            g.dirs.runtime.clone(),
        ],
        allow_degraded: args.allow_degraded,
    };
    let mut prepared = command::prepare(spec).map_err(|e| {
        let argv0 = Path::new(args.argv.first().map(String::as_str).unwrap_or(""));
        if let Some(why) = command::policy::builtin_denial(&args.argv, argv0) {
            return refused(why);
        }
        match e {
            command::SandboxError::NotFound { .. } => {
                Stop(e.to_string(), cmd_sandbox::EXIT_NOT_FOUND)
            }
            other => refused(other),
        }
    })?;
    if let Some(why) = command::policy::builtin_denial(&args.argv, &prepared.program) {
        return Err(refused(why));
    }

    // The gateway bridge: the socket inside, the MCP config beside it, and the variables.
    let (ours, theirs) = UnixStream::pair().map_err(|e| refused(format!("socket pair: {e}")))?;
    let socket = Path::new(GATEWAY_SOCKET_INSIDE);
    prepared
        .bridge_unix_socket(socket, OwnedFd::from(theirs))
        .map_err(refused)?;
    prepared
        .add_tmp_file(Path::new(MCP_CONFIG_INSIDE), &mcp_config(&exe_text))
        .map_err(refused)?;
    for (name, value) in [
        (crate::cmd_mcp::SOCKET_ENV, GATEWAY_SOCKET_INSIDE),
        (crate::cmd_mcp::TOKEN_ENV, token.0.as_str()),
        (MCP_CONFIG_ENV, MCP_CONFIG_INSIDE),
    ] {
        prepared.set_gatehouse_var(name, value).map_err(refused)?;
    }
    let relay = Relay {
        upstream: Arc::new(Mutex::new(Some(upstream))),
        token,
    };
    std::thread::spawn(move || relay.serve(ours));

    for d in &prepared.report.degraded {
        eprintln!("{WHO}: degraded: {d}");
    }
    eprintln!(
        "{WHO}: the agent's MCP config is ${MCP_CONFIG_ENV} ({MCP_CONFIG_INSIDE}); for Claude Code: claude --mcp-config ${MCP_CONFIG_ENV} --strict-mcp-config"
    );
    let _ = std::io::stderr().flush();
    let sb = prepared.spawn().map_err(refused)?;
    let outcome = cmd_sandbox::supervise(sb, &watch_limits, g.json)?;
    if let Some(e) = egress {
        e.close();
    }
    drop(launch);
    Ok(cmd_sandbox::report(WHO, outcome, &watch_limits, g.json))
}

/// The MCP config the agent is pointed at: gatehouse as its one server (the session token and
/// socket come from the environment, so this file holds no secret).
fn mcp_config(exe: &str) -> String {
    serde_json::json!({
        "mcpServers": {
            "gatehouse": {
                "command": exe,
                "args": ["mcp"],
            }
        }
    })
    .to_string()
}

/// Hands the agent's gateway connections to the broker: the first one that opens this run's
/// session (presenting the launch token) is relayed over the connection opened before root was
/// dropped; every other one gets a refusal and is closed. So the agent has exactly one session,
/// the one of its profile, and cannot open a session of another profile.
struct Relay {
    upstream: Arc<Mutex<Option<UnixStream>>>,
    token: ResumeToken,
}

impl Relay {
    /// Runs until the sandbox is gone (its end of `connector` closes).
    fn serve(self, connector: UnixStream) {
        let mut fds = VecDeque::new();
        loop {
            let mut b = [0u8; 16];
            match recv_with_fds(connector.as_fd(), &mut b, &mut fds) {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            while let Some(fd) = fds.pop_front() {
                let agent = UnixStream::from(fd);
                let upstream = self.upstream.clone();
                let token = self.token.clone();
                std::thread::spawn(move || relay_one(agent, &upstream, &token));
            }
        }
    }
}

fn relay_one(agent: UnixStream, upstream: &Mutex<Option<UnixStream>>, token: &ResumeToken) {
    let refuse = |id: u64, why: &str| {
        let e = Body::Error(ErrorReply::new(ErrorCode::Refused, why));
        let _ = write_frame(&mut &agent, &Envelope::new(id, e));
    };
    let first = match read_frame(&mut &agent, MAX_FRAME) {
        Ok(Some(env)) => env,
        _ => return,
    };
    let opens_ours = matches!(
        &first.body,
        Body::ToolCall(ToolCall::OpenSession { resume: Some(t), .. }) if t.0 == token.0
    );
    if !opens_ours {
        return refuse(
            first.id,
            "gatehouse run: the gateway must first open the run's session with the launch token in GATEHOUSE_SESSION_TOKEN",
        );
    }
    let Some(up) = upstream.lock().ok().and_then(|mut u| u.take()) else {
        return refuse(
            first.id,
            "gatehouse run: this run's session is already in use or has ended (one gateway session per run)",
        );
    };
    if write_frame(&mut &up, &first).is_err() {
        return;
    }
    let (Ok(agent2), Ok(up2)) = (agent.try_clone(), up.try_clone()) else {
        return;
    };
    // Each direction until its reader ends; then both sockets are shut, so the broker sees the
    // gateway leave (and revokes the token) as soon as the agent's gateway goes.
    let back = std::thread::spawn(move || {
        let _ = std::io::copy(&mut &up2, &mut &agent2);
        let _ = agent2.shutdown(std::net::Shutdown::Both);
        let _ = up2.shutdown(std::net::Shutdown::Both);
    });
    let _ = std::io::copy(&mut &agent, &mut &up);
    let _ = up.shutdown(std::net::Shutdown::Both);
    let _ = agent.shutdown(std::net::Shutdown::Both);
    let _ = back.join();
}
