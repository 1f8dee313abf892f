//! `gatehouse-mcp` (also reached as `gatehouse mcp`, which execs it): the MCP server for one
//! agent session, what an agent's MCP configuration launches. Connects to the broker's gateway
//! socket, starting `gatehouse-broker` in the background when none runs, then hands the
//! connection to the gateway library, which locks this process down before it reads the agent's
//! first byte. This process parses what the agent sends, so it links the gateway and the
//! client plumbing and nothing of the broker: no policy engine, no database, no demo.

#![forbid(unsafe_code)]

#[cfg(any(unix, windows))]
use clap::Parser;
#[cfg(any(unix, windows))]
use gatehouse_client::{Client, Dirs, SOCKET_ENV, TOKEN_ENV};
#[cfg(any(unix, windows))]
use gateway::Connection;
#[cfg(any(unix, windows))]
use ipc_schema::inert::escaped;
#[cfg(unix)]
use std::os::unix::net::UnixStream;
#[cfg(any(unix, windows))]
use std::path::{Path, PathBuf};
#[cfg(any(unix, windows))]
use std::process::ExitCode;
#[cfg(any(unix, windows))]
use std::time::Duration;

#[cfg(any(unix, windows))]
/// The arguments of `gatehouse mcp`, which passes its own (and `--data-dir`) on unchanged.
#[derive(Parser)]
#[command(
    name = "gatehouse-mcp",
    version,
    about = "The MCP server for one agent session, over stdio (what an agent's MCP config launches)",
    args_override_self = true
)]
#[cfg(any(unix, windows))]
struct McpArgs {
    /// A private instance: config, data and sockets all under DIR (tests, demos).
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// Accepted for `gatehouse --json mcp`; the MCP protocol is JSON already.
    #[arg(long, hide = true)]
    json: bool,
    /// A named session profile of the policy (`[profile.NAME]` in policy.toml); without it the
    /// session gets the policy's top level (the `default` profile).
    #[arg(long, value_name = "NAME")]
    profile: Option<String>,
    /// Seconds a call waits for the human's decision before it returns a tool error naming the
    /// proposal (calling again with the same arguments then returns the decision).
    #[arg(long, value_name = "SECS", default_value_t = 120,
          value_parser = clap::value_parser!(u64).range(1..=86_400))]
    approval_wait: u64,
    /// Run with less than the gateway's lockdown needs when the kernel lacks a mechanism (said
    /// on stderr).
    #[arg(long)]
    allow_degraded: bool,
    /// Under `gatehouse run`: the socket the run relays (inside its sandbox), as the MCP
    /// configs `gatehouse run` writes pass it; needs --token-file.
    #[arg(long, value_name = "PATH", requires = "token_file")]
    gateway_socket: Option<PathBuf>,
    /// Under `gatehouse run`: the file holding the run's token; needs --gateway-socket.
    #[arg(long, value_name = "PATH", requires = "gateway_socket")]
    token_file: Option<PathBuf>,
    /// Test builds only: serve without the lockdown (the positive control of lockdown tests).
    #[cfg(feature = "test-hooks")]
    #[arg(long)]
    test_skip_lockdown: bool,
}

#[cfg(any(unix, windows))]
fn fail(code: u8, msg: &str) -> ExitCode {
    eprintln!("gatehouse mcp: {}", escaped(msg));
    ExitCode::from(code)
}

#[cfg(any(unix, windows))]
/// A refusal before any session exists: said on stderr and, since most clients hide the
/// server's stderr, as the JSON-RPC error of every request the client sends (in the gateway's
/// lockdown: this process reads the agent's input).
fn refuse(msg: &str, allow_degraded: bool) -> ExitCode {
    eprintln!("gatehouse mcp: {}", escaped(msg));
    if let Err(e) = gateway::lock_down(&[], allow_degraded) {
        eprintln!("gatehouse mcp: {}", escaped(&e.to_string()));
        return ExitCode::from(1);
    }
    let _ = gateway::serve_refusal(msg);
    ExitCode::from(1)
}

#[cfg(any(unix, windows))]
/// What `gatehouse`'s global options give every command: the instance's directories and, for a
/// broker started in the background, `--data-dir` made absolute.
struct Global {
    dirs: Dirs,
    data_dir: Option<PathBuf>,
}

#[cfg(any(unix, windows))]
fn main() -> ExitCode {
    let args = McpArgs::parse();
    let data_dir = match args.data_dir.as_ref().map(std::path::absolute) {
        None => None,
        Some(Ok(d)) => Some(d),
        Some(Err(e)) => return fail(1, &format!("--data-dir: {e}")),
    };
    let dirs = match &data_dir {
        Some(d) => Dirs::under(d),
        None => match Dirs::from_env() {
            Ok(d) => d,
            Err(e) => return fail(1, &e),
        },
    };
    run(&Global { dirs, data_dir }, args)
}

#[cfg(any(unix, windows))]
fn run(g: &Global, args: McpArgs) -> ExitCode {
    // The name is checked here; whether the policy has that profile, the broker says when the
    // session opens (before the first MCP message is read).
    let profile = match args
        .profile
        .as_deref()
        .map(ipc_schema::tool::ProfileName::parse)
    {
        None => None,
        Some(Ok(p)) => Some(p),
        Some(Err(e)) => return fail(2, &format!("--profile: {e}")),
    };
    let run = match RunLink::find(args.gateway_socket.as_deref(), args.token_file.as_deref()) {
        Ok(r) => r,
        Err(e) => return refuse(&e, args.allow_degraded),
    };
    let base = std::env::current_dir()
        .ok()
        .map(|d| ipc_schema::os_path::of(&d).to_vec());
    let stream = match connect(g, run.as_ref()) {
        Ok(s) => s,
        Err(e) => return refuse(&e, args.allow_degraded),
    };
    let token = run.map(|r| r.token);
    let opts = gateway::Options {
        approval_wait: Duration::from_secs(args.approval_wait),
        base: gateway::args::PathBase(base),
        token,
        profile,
        allow_degraded: args.allow_degraded,
        #[cfg(feature = "test-hooks")]
        skip_lockdown: args.test_skip_lockdown,
    };
    match gateway::run(stream, opts) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(1, &e.to_string()),
    }
}

#[cfg(any(unix, windows))]
/// How this `gatehouse mcp` opens its session: with a token (from `gatehouse run`, or one to carry
/// a session on) and, inside `gatehouse run`, the run's socket. Found from `--gateway-socket` and
/// `--token-file` (what the MCP configs `gatehouse run` writes pass, as clients such as Codex and
/// the official SDKs start servers with a filtered environment), else from the variables.
struct RunLink {
    /// The run's socket inside its sandbox; `None`: the broker's own gateway socket.
    socket: Option<PathBuf>,
    token: ipc_schema::tool::ResumeToken,
}

#[cfg(any(unix, windows))]
impl RunLink {
    fn find(socket: Option<&Path>, token_file: Option<&Path>) -> Result<Option<RunLink>, String> {
        // Not left in the environment of anything this process might start.
        let env_token = std::env::var_os(TOKEN_ENV);
        std::env::remove_var(TOKEN_ENV);
        let (socket, token) = match (socket, token_file) {
            (Some(s), Some(file)) => {
                let t = std::fs::read_to_string(file).map_err(|e| {
                    format!(
                        "cannot read the run's token {}: {e}; is this `gatehouse mcp` inside `gatehouse run`?",
                        file.display()
                    )
                })?;
                (Some(s.to_path_buf()), t)
            }
            _ => match (std::env::var_os(SOCKET_ENV), env_token) {
                (None, None) => return Ok(None),
                (Some(_), None) => return Err(format!("{SOCKET_ENV} is set but {TOKEN_ENV} is not: the client dropped it from the environment; use the MCP config `gatehouse run` wrote (it passes --gateway-socket and --token-file)")),
                (socket, Some(t)) => (
                    socket.map(PathBuf::from),
                    t.into_string()
                        .map_err(|_| format!("{TOKEN_ENV} is not valid text"))?,
                ),
            },
        };
        let token = token.trim().to_string();
        if token.is_empty() {
            return Err(format!("the session token is empty ({TOKEN_ENV} or --token-file): refusing to start a session without the token `gatehouse run` gave"));
        }
        if let Some(s) = socket.as_ref().filter(|s| !s.is_absolute()) {
            return Err(format!(
                "the run's socket must be an absolute path, not {}",
                s.display()
            ));
        }
        Ok(Some(RunLink {
            socket,
            token: ipc_schema::tool::ResumeToken(token),
        }))
    }
}

#[cfg(unix)]
/// A connection on the gateway socket, starting the broker if none answers; or, under
/// `gatehouse run`, on the run's socket (which leads to the broker through `gatehouse run`),
/// with no fallback: a broker started inside the sandbox would be the agent's own.
fn connect(g: &Global, run: Option<&RunLink>) -> Result<Connection, String> {
    if let Some(socket) = run.and_then(|r| r.socket.as_ref()) {
        return UnixStream::connect(socket).map_err(|e| {
            format!(
                "cannot reach the gateway at {}: {e}; is `gatehouse run` still running?",
                socket.display()
            )
        });
    }
    let path = g.dirs.gateway_socket();
    if let Ok(s) = UnixStream::connect(&path) {
        return Ok(s);
    }
    // Starts the broker and waits until the socket answers (that probe connection is closed
    // at once and opens no session).
    Client::connect_or_start(g.data_dir.as_deref(), &g.dirs, &path, &[])
        .map_err(|e| e.to_string())?;
    UnixStream::connect(&path)
        .map_err(|e| format!("cannot reach the broker at {}: {e}", path.display()))
}

/// On Windows: the name of the broker's gateway pipe, once a broker answers there (started in
/// the background if none does); or, under `gatehouse run`, the run's pipe, with no fallback (a
/// broker started inside the sandbox would be the agent's own). The gateway opens it, and
/// talks only to a pipe this user's process serves.
#[cfg(windows)]
fn connect(g: &Global, run: Option<&RunLink>) -> Result<Connection, String> {
    if let Some(socket) = run.and_then(|r| r.socket.as_ref()) {
        return socket
            .to_str()
            .filter(|s| s.starts_with(r"\\.\pipe\"))
            .map(str::to_string)
            .ok_or_else(|| {
                format!(
                    "the run's gateway ({}) is not a pipe name",
                    socket.display()
                )
            });
    }
    let path = g.dirs.gateway_socket();
    if Client::connect(&path).is_err() {
        Client::connect_or_start(g.data_dir.as_deref(), &g.dirs, &path, &[])
            .map_err(|e| e.to_string())?;
    }
    path.to_str()
        .map(str::to_string)
        .ok_or_else(|| format!("{} is not a pipe name", path.display()))
}

/// `gatehouse mcp` reaches the broker over a Unix socket checked by the kernel, or a named pipe
/// whose server's token is checked on Windows; elsewhere there is neither.
#[cfg(not(any(unix, windows)))]
fn main() -> std::process::ExitCode {
    use ipc_schema::platform::{refuse, Missing};
    refuse("gatehouse-mcp", &[Missing::LocalSockets])
}
