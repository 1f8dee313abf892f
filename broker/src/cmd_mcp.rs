//! `gatehouse mcp`: the MCP server for one agent session (what an agent's MCP configuration
//! launches). Connects to the broker's gateway socket, starting the broker in the background
//! when none runs, then hands the connection to the gateway library, which locks this process
//! down before it reads the agent's first byte. The gateway runs in its own process: this one.

use crate::{client, Global};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::UnixStream;
use std::process::ExitCode;
use std::time::Duration;

/// The variable `gatehouse run` passes a session token in (removed before serving).
pub const TOKEN_ENV: &str = "GATEHOUSE_SESSION_TOKEN";
/// The variable `gatehouse run` names the gateway socket in (inside its sandbox, where the
/// runtime directory is hidden): connect there and nowhere else, and never start a broker.
pub const SOCKET_ENV: &str = "GATEHOUSE_GATEWAY_SOCKET";

#[derive(clap::Args)]
pub struct McpArgs {
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
    /// Test builds only: serve without the lockdown (the positive control of lockdown tests).
    #[cfg(feature = "test-hooks")]
    #[arg(long)]
    test_skip_lockdown: bool,
}

fn fail(code: u8, msg: &str) -> ExitCode {
    eprintln!("gatehouse mcp: {msg}");
    ExitCode::from(code)
}

pub fn run(g: &Global, args: McpArgs) -> ExitCode {
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
    let token = match std::env::var_os(TOKEN_ENV) {
        None => None,
        Some(t) => {
            // Not left in the environment of anything this process might start.
            std::env::remove_var(TOKEN_ENV);
            match t.into_string() {
                Ok(t) if !t.trim().is_empty() => Some(ipc_schema::tool::ResumeToken(t)),
                Ok(_) => return fail(1, &format!("{TOKEN_ENV} is set but empty: refusing to start a session without the token `gatehouse run` gave")),
                Err(_) => return fail(1, &format!("{TOKEN_ENV} is not valid text")),
            }
        }
    };
    let base = std::env::current_dir()
        .ok()
        .map(|d| d.as_os_str().as_bytes().to_vec());
    let stream = match connect(g) {
        Ok(s) => s,
        Err(e) => return fail(1, &e),
    };
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

/// A connection on the gateway socket, starting the broker if none answers; or, under
/// `gatehouse run`, on the socket [`SOCKET_ENV`] names (which leads to the broker through
/// `gatehouse run`), with no fallback: a broker started inside the sandbox would be the
/// agent's own.
fn connect(g: &Global) -> Result<UnixStream, String> {
    if let Some(p) = std::env::var_os(SOCKET_ENV) {
        let path = std::path::PathBuf::from(p);
        if !path.is_absolute() {
            return Err(format!(
                "{SOCKET_ENV} must be an absolute path, not {}",
                path.display()
            ));
        }
        return UnixStream::connect(&path).map_err(|e| {
            format!(
                "cannot reach the gateway at {} ({SOCKET_ENV}): {e}; is `gatehouse run` still running?",
                path.display()
            )
        });
    }
    let path = g.dirs.gateway_socket();
    if let Ok(s) = UnixStream::connect(&path) {
        return Ok(s);
    }
    // Starts the broker and waits until the socket answers (that probe connection is closed
    // at once and opens no session).
    client::Client::connect_or_start(g.data_dir.as_deref(), &g.dirs, &path, &[])
        .map_err(|e| e.to_string())?;
    UnixStream::connect(&path)
        .map_err(|e| format!("cannot reach the broker at {}: {e}", path.display()))
}
