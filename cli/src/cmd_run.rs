//! `gatehouse run`: an agent CLI (Claude Code, Codex, any program) inside the exec sandbox, with
//! gatehouse as its way to act on the machine and the egress proxy as its only way out.
//!
//! Order: on the ui channel (this is the user's own command) check the profile by opening the
//! first session; when root, start the gateway connector (below); drop root; give the agent its
//! own state directory as `HOME`; build the sandbox as `gatehouse sandbox` does (the working
//! directory read-only, or read-write with `--own-tools write`; `--allow-read` grants; the
//! agent's program and interpreter read-only; protected paths masked; the proxy for the recipe's
//! provider hosts and `--allow-domain`), plus a Unix socket inside its private `/tmp` whose
//! connections the sandbox's init process passes out to this process.
//!
//! Each connection on that socket that presents the run's token (a random value gatehouse put
//! in `/tmp/gatehouse-token` inside the sandbox) becomes a session of its own: this process
//! opens a fresh session of the run's profile on the ui channel, connects to the broker's
//! gateway socket, and forwards the opening frame with that session's one-use launch token in
//! place of the run's token; then it relays bytes. Anything else is refused. When the agent
//! ends, every session's token is revoked (`LaunchRequest::End`, an audit row each).
//!
//! The agent is told where gatehouse is in its own terms (recipe.rs): the generated MCP config
//! (`$GATEHOUSE_MCP_CONFIG`, passing `gatehouse mcp --gateway-socket ... --token-file ...` as
//! arguments, since clients such as Codex start servers with a filtered environment), Claude
//! Code's and Codex's own flags. The runtime directory, and with it `ui.sock`, stays masked: the
//! agent has no path to the ui channel.
//!
//! Run as root, this process becomes an unprivileged user before it builds the sandbox and can
//! then no longer connect to the broker's sockets (0600, the broker's uid). A connector child,
//! started before root is dropped, does that one thing for it: on each byte it reads from its
//! stdin socket, it connects to the gateway socket and passes the connection back
//! (`gatehouse run-connector`, hidden; it ends with the run).

mod local;
mod program;
mod recipe;

use crate::cmd_sandbox::{self, refused, Stop};
use crate::Global;
use gatehouse_client::Client;
use ipc_schema::codec::{read_frame, write_frame, MAX_FRAME};
use ipc_schema::exec::{GrantAccess, Limits, PathGrant};
use ipc_schema::tool::{ProfileName, ResumeToken, SessionId, ToolCall};
use ipc_schema::ui::{LaunchReply, LaunchRequest, UiReply, UiRequest};
use ipc_schema::{Body, Envelope, ErrorCode, ErrorReply};
use recipe::{Agent, OwnTools};
use sandbox::linux::command::{
    self,
    fdpass::{recv_with_fds, send_with_fd},
    identity, Network, SandboxSpec,
};
use std::collections::VecDeque;
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};

const WHO: &str = "gatehouse run";
/// Inside the sandbox (its private `/tmp`, seen by nothing outside it).
pub const GATEWAY_SOCKET_INSIDE: &str = "/tmp/gatehouse-gateway.sock";
pub const TOKEN_FILE_INSIDE: &str = "/tmp/gatehouse-token";
pub const MCP_CONFIG_INSIDE: &str = "/tmp/gatehouse-mcp.json";
pub const MCP_CONFIG_ENV: &str = "GATEHOUSE_MCP_CONFIG";
/// An agent session may run long: a day, not the 10 minutes of one command.
const RUN_TIMEOUT_MS: u64 = 24 * 3600 * 1000;
/// The agent's output is relayed as it comes; this only bounds what `--json` collects.
const RUN_OUTPUT_MAX: u64 = 64 << 20;

#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// The session profile of the policy (`[profile.NAME]` in policy.toml) the agent's sessions
    /// run under; without it, the default profile.
    #[arg(long, value_name = "NAME")]
    profile: Option<String>,
    /// A directory (or file) the agent may read besides the working directory; repeatable.
    #[arg(long = "allow-read", value_name = "PATH")]
    read: Vec<PathBuf>,
    #[command(flatten)]
    proxy: cmd_sandbox::ProxyArgs,
    /// Do not allow the recipe's provider hosts (only `--allow-domain` ones).
    #[arg(long)]
    no_recipe_domains: bool,
    /// What the agent's own tools may do with the project: `read` (the default: the project is
    /// read-only inside the sandbox and the agent's own shell and editors are turned off, so
    /// every change goes through gatehouse's tools) or `write` (its own tools may change the
    /// project, inside the sandbox).
    #[arg(long, value_enum, default_value_t = OwnTools::Read)]
    own_tools: OwnTools,
    /// Pass this variable of this process's environment to the agent even though its name
    /// looks like a secret (its API key); repeatable. The recipe's key variables pass when set.
    #[arg(long = "pass-env", value_name = "NAME")]
    pass_env: Vec<String>,
    /// Pass this variable too (NAME takes this process's value); secret-looking names, LD_* and
    /// the sandbox's own variables are refused (use --pass-env for a key).
    #[arg(long = "env", value_name = "NAME[=VALUE]")]
    env: Vec<String>,
    /// Seconds a call waits for the human before the agent is told "proposal N is waiting, call
    /// again" (default: the recipe's, below its client's own timeout).
    #[arg(long, value_name = "SECS", value_parser = clap::value_parser!(u64).range(1..=86_400))]
    approval_wait: Option<u64>,
    /// Pass the agent's output to this terminal byte for byte. Without it, output bound for a
    /// terminal has its control characters and escape sequences shown as visible escapes (what
    /// the agent prints is its model's to choose); output to a pipe or file is never changed.
    #[arg(long)]
    raw_output: bool,
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

/// The run's ui connection and the sessions opened on it; every session's token is revoked on
/// drop, however the run ends. If this process is killed outright, each token still dies with
/// its gateway connection (the broker revokes a presented token when its gateway disconnects),
/// and the broker revokes a ui connection's launched sessions when it closes.
struct Launch {
    ui: Mutex<Client>,
    profile: Option<ProfileName>,
    /// The secret-looking variables the agent gets by name: on each session's audit row.
    passed_env: Vec<String>,
    sessions: Mutex<Vec<SessionId>>,
    /// The session opened at start (to check the profile), for the first connection.
    spare: Mutex<Option<ResumeToken>>,
    /// That session's id: the run's egress rows are written under it.
    first: Option<SessionId>,
}

impl Launch {
    fn open(
        g: &Global,
        profile: Option<ProfileName>,
        passed_env: Vec<String>,
    ) -> Result<Launch, Stop> {
        let ui = g
            .ui_client()
            .map_err(|e| refused(format!("cannot reach the broker: {e}")))?;
        let mut l = Launch {
            ui: Mutex::new(ui),
            profile,
            passed_env,
            sessions: Mutex::new(Vec::new()),
            spare: Mutex::new(None),
            first: None,
        };
        let token = l.session()?;
        l.first = l.sessions.lock().expect("not poisoned").first().cloned();
        *l.spare.lock().expect("not poisoned") = Some(token);
        Ok(l)
    }

    /// A fresh session of the run's profile: its one-use launch token.
    fn session(&self) -> Result<ResumeToken, Stop> {
        let req = Body::Ui(UiRequest::Launch(LaunchRequest::Open {
            profile: self.profile.clone(),
            passed_env: self.passed_env.clone(),
        }));
        let reply = self.ui.lock().expect("not poisoned").request(req);
        match reply {
            Ok(Body::UiReply(UiReply::Launch(LaunchReply::Opened { session, token, .. }))) => {
                self.sessions.lock().expect("not poisoned").push(session);
                Ok(token)
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

    /// Writes one egress record to the audit log, under the run's first session.
    fn egress(&self, record: ipc_schema::net::EgressRecord) {
        let Some(session) = self.first.clone() else {
            return;
        };
        let req = Body::Ui(UiRequest::Launch(LaunchRequest::Egress { session, record }));
        match self.ui.lock().expect("not poisoned").request(req) {
            Ok(Body::Pong) => {}
            Ok(Body::Error(e)) => {
                eprintln!("{WHO}: the audit row of a proxy connection: {}", e.message)
            }
            Ok(other) => eprintln!(
                "{WHO}: the audit row of a proxy connection: unexpected answer {:?}",
                other.kind()
            ),
            Err(e) => eprintln!("{WHO}: the audit row of a proxy connection: {e}"),
        }
    }

    /// The token for the next connection: the spare one first.
    fn next_token(&self) -> Result<ResumeToken, Stop> {
        if let Some(t) = self.spare.lock().expect("not poisoned").take() {
            return Ok(t);
        }
        self.session()
    }
}

impl Drop for Launch {
    fn drop(&mut self) {
        self.end_all();
    }
}

impl Launch {
    /// Ends every session the run opened (their tokens revoked); the relay threads may still
    /// hold the run, so this is said at the run's end and not left to the last drop.
    fn end_all(&self) {
        let sessions = std::mem::take(&mut *self.sessions.lock().expect("not poisoned"));
        let mut ui = self.ui.lock().expect("not poisoned");
        for session in sessions {
            let end = Body::Ui(UiRequest::Launch(LaunchRequest::End { session }));
            match ui.request(end) {
                Ok(Body::UiReply(UiReply::Launch(LaunchReply::Ended { .. }))) => {}
                Ok(Body::Error(e)) => {
                    eprintln!("{WHO}: revoking a session's token: {}", e.message)
                }
                Ok(other) => eprintln!(
                    "{WHO}: revoking a session's token: unexpected answer {:?}",
                    other.kind()
                ),
                Err(e) => eprintln!("{WHO}: revoking a session's token: {e}"),
            }
        }
    }
}

/// How this run reaches the broker's gateway socket for each new agent connection.
enum Upstream {
    /// Not root: connect ourselves.
    Direct(PathBuf),
    /// Root dropped: ask the connector child (kept so that it ends with us).
    Connector(Mutex<(UnixStream, std::process::Child)>),
}

impl Upstream {
    fn connect(&self) -> Result<UnixStream, String> {
        match self {
            Upstream::Direct(p) => UnixStream::connect(p)
                .map_err(|e| format!("cannot reach the broker's gateway at {}: {e}", p.display())),
            Upstream::Connector(c) => {
                let guard = c.lock().map_err(|_| "the connector lock is poisoned")?;
                let sock = &guard.0;
                (&*sock)
                    .write_all(b"c")
                    .map_err(|e| format!("the gateway connector is gone: {e}"))?;
                let mut fds = VecDeque::new();
                let mut b = [0u8; 1];
                match recv_with_fds(sock.as_fd(), &mut b, &mut fds) {
                    Ok(1) if b[0] == b'c' => fds
                        .pop_front()
                        .map(UnixStream::from)
                        .ok_or_else(|| "the gateway connector sent no connection".to_string()),
                    Ok(_) => Err("the gateway connector could not reach the broker".into()),
                    Err(e) => Err(format!("the gateway connector is gone: {e}")),
                }
            }
        }
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        if let Upstream::Connector(c) = self {
            if let Ok(g) = c.get_mut() {
                let _ = g.0.shutdown(std::net::Shutdown::Both);
                let _ = g.1.wait();
            }
        }
    }
}

/// `gatehouse run-connector` (hidden): started by a root `gatehouse run` with a socket as
/// stdin; for each byte read there, one connection to the gateway socket, passed back with
/// SCM_RIGHTS (byte `c`), or byte `e` if the broker cannot be reached. Ends at end of input.
pub fn connector(g: &Global) -> ExitCode {
    let Ok(fd) = std::io::stdin().as_fd().try_clone_to_owned() else {
        return ExitCode::from(1);
    };
    let chan = UnixStream::from(fd);
    let path = g.dirs.gateway_socket();
    let mut b = [0u8; 1];
    loop {
        match (&chan).read(&mut b) {
            Ok(0) | Err(_) => return ExitCode::SUCCESS,
            Ok(_) => {}
        }
        let sent = match UnixStream::connect(&path) {
            Ok(s) => send_with_fd(chan.as_fd(), b"c", s.as_fd()).map(|_| ()),
            Err(e) => {
                eprintln!("{WHO}: connector: {}: {e}", path.display());
                (&chan).write_all(b"e")
            }
        };
        if sent.is_err() {
            return ExitCode::from(1);
        }
    }
}

fn start_connector(g: &Global, exe: &Path) -> Result<Upstream, Stop> {
    let (ours, theirs) = UnixStream::pair().map_err(|e| refused(format!("socket pair: {e}")))?;
    let mut cmd = std::process::Command::new(exe);
    if let Some(d) = &g.data_dir {
        cmd.arg("--data-dir").arg(d);
    }
    let child = cmd
        .arg("run-connector")
        .stdin(std::process::Stdio::from(OwnedFd::from(theirs)))
        .stdout(std::process::Stdio::null())
        .spawn()
        .map_err(|e| refused(format!("starting the gateway connector: {e}")))?;
    Ok(Upstream::Connector(Mutex::new((ours, child))))
}

/// A random token for this run's connections (hex of 32 random bytes).
fn run_token() -> String {
    use rand::RngCore;
    let mut b = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut b);
    hex::encode(b)
}

/// The directory of this agent's login and state, created 0700 for `owner`. When root runs the
/// agent as another uid (a project's owner, or nobody), that uid gets a directory of its own
/// (`<agent>-uid<N>`): a login made in one user's project is never handed to another user.
fn agent_home(g: &Global, agent: Agent, argv0: &str, owner: (u32, u32)) -> Result<PathBuf, Stop> {
    let mut name = match agent {
        Agent::Generic => Path::new(argv0)
            .file_name()
            .and_then(|n| n.to_str())
            .filter(|n| {
                n.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
                    && !n.starts_with('.')
            })
            .unwrap_or("agent")
            .to_string(),
        a => a.name().to_string(),
    };
    if owner.0 != nix::unistd::geteuid().as_raw() {
        name = format!("{name}-uid{}", owner.0);
    }
    let root = g.dirs.agents();
    let dir = root.join(name);
    for d in [&root, &dir] {
        use std::os::unix::fs::{DirBuilderExt, MetadataExt};
        match std::fs::DirBuilder::new()
            .mode(0o700)
            .recursive(d == &root)
            .create(d)
        {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(refused(format!("creating {}: {e}", d.display()))),
        }
        let want = if d == &dir {
            owner
        } else {
            (
                nix::unistd::geteuid().as_raw(),
                nix::unistd::getegid().as_raw(),
            )
        };
        let meta =
            std::fs::symlink_metadata(d).map_err(|e| refused(format!("{}: {e}", d.display())))?;
        if !meta.is_dir() {
            return Err(refused(format!("{} is not a directory", d.display())));
        }
        if meta.uid() != want.0 {
            if nix::unistd::geteuid().is_root() {
                std::os::unix::fs::lchown(d, Some(want.0), Some(want.1))
                    .map_err(|e| refused(format!("{}: {e}", d.display())))?;
            } else {
                return Err(refused(format!(
                    "{} belongs to uid {}, not to this user",
                    d.display(),
                    meta.uid()
                )));
            }
        }
        // Closed to everyone but its owner, whatever an earlier hand left it as.
        if d == &dir && meta.mode() & 0o077 != 0 {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o700))
                .map_err(|e| refused(format!("{}: {e}", d.display())))?;
        }
    }
    // When the agent runs as another uid (root dropped), it must be able to pass through to
    // its home: the agents' root and, for a --data-dir instance, the instance's root get
    // search permission for others (0711: nothing in them can be listed, and the data, config
    // and runtime dirs inside stay 0700).
    if owner.0 != nix::unistd::geteuid().as_raw() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let mut passable = vec![root.clone()];
        if g.data_dir.is_some() {
            passable.extend(root.parent().map(Path::to_path_buf));
        }
        for d in passable {
            let meta =
                std::fs::metadata(&d).map_err(|e| refused(format!("{}: {e}", d.display())))?;
            if meta.uid() == nix::unistd::geteuid().as_raw() {
                let mode = (meta.mode() & 0o7777) | 0o011;
                std::fs::set_permissions(&d, std::fs::Permissions::from_mode(mode))
                    .map_err(|e| refused(format!("{}: {e}", d.display())))?;
            }
        }
    }
    Ok(dir)
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
    let argv0 = args.argv[0].clone();
    let agent = Agent::for_program(&argv0);

    // The secret-looking variables passed by name: each `--pass-env NAME`, then the recipe's
    // key variables that are set. Known before the first session, whose audit row names them.
    let mut keys = cmd_sandbox::pass_env_args(&args.pass_env)?;
    for name in agent.key_vars() {
        if let Ok(v) = std::env::var(name) {
            if !keys.iter().any(|(k, _)| k == name) {
                keys.push((name.to_string(), v));
            }
        }
    }
    let key_names: Vec<String> = keys.iter().map(|(k, _)| k.clone()).collect();

    // While we may still be root: the sessions' channel, the connector, the agent's home.
    let launch = Launch::open(g, profile, key_names)?;
    let root = nix::unistd::geteuid().is_root();
    let upstream = if root {
        start_connector(g, &exe)?
    } else {
        Upstream::Direct(g.dirs.gateway_socket())
    };
    let owner = if root {
        identity::run_as_for(&cwd)
    } else {
        (
            nix::unistd::geteuid().as_raw(),
            nix::unistd::getegid().as_raw(),
        )
    };
    let root_owned = {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(&cwd).is_ok_and(|m| m.uid() == 0)
    };
    if root && args.own_tools == OwnTools::Write && root_owned {
        // The agent would run as nobody (never root toward the host) in a project root owns:
        // its own tools could not write it, and would fail one by one with EACCES.
        return Err(refused(format!(
            "{} belongs to root and the agent never runs as root, so with --own-tools write its own tools could not change it. Run without --own-tools write (changes then go through gatehouse's tools, which can), or give the project to a user (chown) and run as that user",
            cwd.display()
        )));
    }
    let state_home = agent_home(g, agent, &argv0, owner)?;

    // Never root toward the host (as `gatehouse sandbox`): the agent runs as the owner of the
    // working directory, or nobody. The connections above keep the broker's user.
    if root {
        identity::become_user(owner.0, owner.1)
            .map_err(|e| refused(format!("cannot drop root before sandboxing: {e}")))?;
    }
    let uid = nix::unistd::geteuid().as_raw();
    let home = identity::home_of(uid);
    if let Some(why) = ipc_schema::protected::implicit_root_refusal(&cwd, Some(&home)) {
        return Err(refused(format!(
            "the current directory {} cannot be the agent's working directory: {why}. cd into the project first",
            cwd.display()
        )));
    }

    let project = match args.own_tools {
        OwnTools::Read => GrantAccess::Read,
        OwnTools::Write => GrantAccess::ReadWrite,
    };
    let mut grants = vec![
        PathGrant {
            path: cwd.clone(),
            access: project,
        },
        PathGrant {
            path: state_home.clone(),
            access: GrantAccess::ReadWrite,
        },
    ];
    for p in &args.read {
        let abs = std::path::absolute(p).map_err(|e| refused(format!("{}: {e}", p.display())))?;
        grants.push(PathGrant {
            path: abs,
            access: GrantAccess::Read,
        });
    }
    // The agent starts `gatehouse mcp` from its MCP config: this very binary, read-only, and
    // `gatehouse-mcp` beside it, which that command execs.
    let mcp_exe = exe
        .parent()
        .map(|d| d.join(gatehouse_client::MCP_BIN))
        .and_then(|m| std::fs::canonicalize(m).ok());
    for bin in std::iter::once(exe.clone()).chain(mcp_exe) {
        if !bin.starts_with(&cwd) {
            grants.push(PathGrant {
                path: bin,
                access: GrantAccess::Read,
            });
        }
    }
    let path_var = std::env::var("PATH").unwrap_or_else(|_| command::env::DEFAULT_PATH.into());
    let Some(visible) = program::visible(&argv0, &path_var, &cwd) else {
        // A path to a file that is there but not executable: say so, as exec would.
        if argv0.contains('/') && Path::new(&argv0).is_file() {
            return Err(Stop(
                format!(
                    "could not run: {}: Permission denied (it is not executable)",
                    std::path::absolute(&argv0)
                        .unwrap_or_else(|_| PathBuf::from(&argv0))
                        .display()
                ),
                cmd_sandbox::EXIT_NOT_EXECUTABLE,
            ));
        }
        return Err(Stop(
            format!("{argv0}: not found in PATH"),
            cmd_sandbox::EXIT_NOT_FOUND,
        ));
    };
    for p in &visible.grants {
        grants.push(PathGrant {
            path: p.clone(),
            access: GrantAccess::Read,
        });
    }

    // The environment: the allowlist, the recipe's settings, --env, the endpoint variables;
    // the keys are added after planning (they pass the secret-name filter by name only).
    let mut env = command::env::inherited_from_process();
    env.extend(cmd_sandbox::env_args(&args.env)?);
    let mut domains = args.proxy.domains.clone();
    let mut recipe_domains: Vec<String> = Vec::new();
    if !args.no_recipe_domains {
        recipe_domains.extend(agent.domains().iter().map(|d| d.to_string()));
    }
    for name in agent.endpoint_vars() {
        if let Ok(v) = std::env::var(name) {
            if let Some(host) = url::Url::parse(&v)
                .ok()
                .and_then(|u| u.host_str().map(String::from))
            {
                if !args.no_recipe_domains {
                    recipe_domains.push(host);
                }
            }
            env.push((name.to_string(), v));
        }
    }
    for d in &recipe_domains {
        if !domains.contains(d) {
            domains.push(d.clone());
        }
    }

    let approval_wait = args
        .approval_wait
        .unwrap_or(agent.approval_wait().as_secs());
    let mcp_args: Vec<String> = [
        "mcp",
        "--gateway-socket",
        GATEWAY_SOCKET_INSIDE,
        "--token-file",
        TOKEN_FILE_INSIDE,
        "--approval-wait",
        &approval_wait.to_string(),
    ]
    .map(String::from)
    .to_vec();
    let setup = agent.setup(
        &recipe::Wiring {
            exe: &exe_text,
            mcp_config: MCP_CONFIG_INSIDE,
            mcp_args: &mcp_args,
        },
        args.own_tools,
    );
    env.extend(setup.env.iter().cloned());
    let exec_text = visible
        .exec
        .to_str()
        .ok_or_else(|| refused(format!("{}: the path is not UTF-8", visible.exec.display())))?
        .to_string();
    let mut argv = vec![exec_text];
    argv.extend(setup.leading.iter().cloned());
    argv.extend(args.argv[1..].iter().cloned());
    argv.extend(setup.trailing.iter().cloned());

    let mut proxy = args.proxy;
    proxy.domains = domains;
    // Every connection through the proxy becomes an audit row of the run (sent on the ui
    // channel by a thread started once the sessions are shared).
    let (records, egress_rows) = std::sync::mpsc::channel();
    let (network, egress) =
        match local::open_proxy(WHO, &proxy, args.allow_degraded, Some(records))? {
            None => (Network::None, None),
            Some((connector, token, egress)) => (Network::Proxy { connector, token }, egress),
        };
    // gatehouse's own dirs and the other agents' homes are never shown; this agent's is.
    let mut protect = vec![
        g.dirs.config.clone(),
        g.dirs.data.clone(),
        g.dirs.runtime.clone(),
    ];
    if let Ok(rd) = std::fs::read_dir(g.dirs.agents()) {
        protect.extend(rd.flatten().map(|e| e.path()).filter(|p| p != &state_home));
    }
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
        // What the agent reads goes to its model's provider: secret files stay out of sight.
        hide: command::Hide {
            exclude: Vec::new(),
            sensitive: true,
        },
        argv: argv.clone(),
        cwd: cwd.clone(),
        grants,
        env,
        home,
        state_home: Some(state_home.clone()),
        network,
        limits,
        protect,
        allow_degraded: args.allow_degraded,
    };
    let mut prepared = command::prepare(spec).map_err(|e| {
        if let Some(why) = command::policy::builtin_denial(&argv, Path::new(&argv[0])) {
            return refused(why);
        }
        match e {
            command::SandboxError::NotFound { .. } => {
                Stop(e.to_string(), cmd_sandbox::EXIT_NOT_FOUND)
            }
            other => refused(other),
        }
    })?;
    if let Some(why) = command::policy::builtin_denial(&argv, &prepared.program) {
        return Err(refused(why));
    }
    for (name, value) in &keys {
        prepared.pass_named_secret(name, value).map_err(refused)?;
    }

    // The gateway bridge: the socket inside, the token and MCP config beside it, the variables.
    let token = run_token();
    let (ours, theirs) = UnixStream::pair().map_err(|e| refused(format!("socket pair: {e}")))?;
    prepared
        .bridge_unix_socket(Path::new(GATEWAY_SOCKET_INSIDE), OwnedFd::from(theirs))
        .map_err(refused)?;
    prepared
        .add_tmp_file(Path::new(TOKEN_FILE_INSIDE), &token)
        .map_err(refused)?;
    prepared
        .add_tmp_file(
            Path::new(MCP_CONFIG_INSIDE),
            &mcp_config(&exe_text, &mcp_args),
        )
        .map_err(refused)?;
    for (name, value) in [
        (gatehouse_client::SOCKET_ENV, GATEWAY_SOCKET_INSIDE),
        (gatehouse_client::TOKEN_ENV, token.as_str()),
        (MCP_CONFIG_ENV, MCP_CONFIG_INSIDE),
    ] {
        prepared.set_gatehouse_var(name, value).map_err(refused)?;
    }
    let launch = Arc::new(launch);
    let audit_launch = launch.clone();
    let egress_audit = std::thread::spawn(move || {
        for record in egress_rows {
            audit_launch.egress(record);
        }
    });
    let relay = Relay {
        launch: launch.clone(),
        upstream: Arc::new(upstream),
        token: ResumeToken(token),
    };
    std::thread::spawn(move || relay.serve(ours));

    for d in &prepared.report.degraded {
        eprintln!("{WHO}: degraded: {d}");
    }
    say_setup(
        agent,
        &state_home,
        &recipe_domains,
        &proxy.domains,
        &keys,
        args.own_tools,
    );
    if !g.json {
        cmd_sandbox::say_env(WHO, &prepared.report.env_dropped, &keys, false);
    }
    let _ = std::io::stderr().flush();
    let sb = prepared.spawn().map_err(refused)?;
    // The agent's output is escaped on a terminal as a command's is: the sandbox gives the
    // agent pipes, never a terminal, so no agent draws a full-screen interface through
    // `gatehouse run`, and what it prints is its model's to choose (an OSC 52 clipboard
    // write, a screen clear). `--raw-output` passes it byte for byte.
    let output = if g.json {
        cmd_sandbox::Output::Capture
    } else {
        cmd_sandbox::Output::relay(args.raw_output)
    };
    let mut outcome = local::supervise(sb, &watch_limits, output)?;
    outcome.passed = keys.iter().map(|(k, _)| k.clone()).collect();
    if let Some(e) = egress {
        e.close();
    }
    // Every proxy connection's row is written before the sessions end.
    let _ = egress_audit.join();
    launch.end_all();
    Ok(cmd_sandbox::report(WHO, outcome, &watch_limits, g.json))
}

/// What the run set up, on stderr before the agent starts (names only, never a value).
fn say_setup(
    agent: Agent,
    home: &Path,
    recipe_domains: &[String],
    domains: &[String],
    keys: &[(String, String)],
    own: OwnTools,
) {
    eprintln!(
        "{WHO}: {} recipe; its login and state: {}",
        agent.name(),
        home.display()
    );
    if domains.is_empty() {
        eprintln!("{WHO}: no network (add hosts with --allow-domain)");
    } else {
        eprintln!(
            "{WHO}: egress allowed to {}{}",
            domains.join(", "),
            if recipe_domains.is_empty() {
                String::new()
            } else {
                " (the recipe's hosts: drop them with --no-recipe-domains)".to_string()
            }
        );
    }
    if !keys.is_empty() {
        let names: Vec<&str> = keys.iter().map(|(k, _)| k.as_str()).collect();
        eprintln!("{WHO}: passing {} to the agent", names.join(", "));
    }
    eprintln!(
        "{WHO}: {}",
        match own {
            OwnTools::Read => "the project is read-only to the agent's own tools; changes go through gatehouse (--own-tools write to change that)",
            OwnTools::Write => "the agent's own tools may change the project (--own-tools write)",
        }
    );
}

/// The MCP config the agent is pointed at: gatehouse as its one server, reached through the
/// run's socket and token file (passed as arguments: a client may filter the environment).
/// The file holds no secret.
fn mcp_config(exe: &str, args: &[String]) -> String {
    serde_json::json!({
        "mcpServers": {
            "gatehouse": {
                "command": exe,
                "args": args,
            }
        }
    })
    .to_string()
}

/// Hands the agent's gateway connections to the broker: each one that opens a session with the
/// run's token gets a fresh session of the run's profile (its own launch token put in place of
/// the run's) on a connection of its own; anything else gets a refusal and is closed. So the
/// agent has as many sessions as it opens, all of the run's profile, and cannot open a session
/// of another profile.
struct Relay {
    launch: Arc<Launch>,
    upstream: Arc<Upstream>,
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
                let launch = self.launch.clone();
                let upstream = self.upstream.clone();
                let token = self.token.clone();
                std::thread::spawn(move || relay_one(agent, &launch, &upstream, &token));
            }
        }
    }
}

fn relay_one(agent: UnixStream, launch: &Launch, upstream: &Upstream, token: &ResumeToken) {
    let refuse = |id: u64, why: &str| {
        let e = Body::Error(ErrorReply::new(ErrorCode::Refused, why));
        let _ = write_frame(&mut &agent, &Envelope::new(id, e));
    };
    let mut first = match read_frame(&mut &agent, MAX_FRAME) {
        Ok(Some(env)) => env,
        _ => return,
    };
    let Body::ToolCall(ToolCall::OpenSession {
        resume: Some(t), ..
    }) = &mut first.body
    else {
        return refuse(
            first.id,
            "gatehouse run: the gateway must first open a session with the run's token (gatehouse mcp --token-file, as in the MCP config gatehouse run wrote)",
        );
    };
    if !subtle_eq(t.0.as_bytes(), token.0.as_bytes()) {
        return refuse(first.id, "gatehouse run: that is not this run's token");
    }
    let up = match upstream.connect() {
        Ok(u) => u,
        Err(e) => return refuse(first.id, &format!("gatehouse run: {e}")),
    };
    match launch.next_token() {
        Ok(session_token) => *t = session_token,
        Err(Stop(why, _)) => return refuse(first.id, &format!("gatehouse run: {why}")),
    }
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

/// Compares two byte strings in time independent of where they differ.
fn subtle_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
