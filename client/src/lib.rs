//! What the command line, `gatehouse-mcp` and the broker share, and nothing more: where one
//! gatehouse instance keeps its config, data and sockets ([`Dirs`]), who holds its lock
//! ([`running_broker_pid`]), and how a front reaches the broker ([`Client`]), starting
//! `gatehouse-broker` in the background when none runs. No policy, no database, no sandbox:
//! `gatehouse-mcp` links this and must stay small.

#![forbid(unsafe_code)]

// Unix sockets to the broker (named pipes on Windows are not built: platform::Missing::LocalSockets).
#[cfg(unix)]
pub mod client;
pub mod dirs;

#[cfg(unix)]
pub use client::{Client, ClientError, SideWriter};
pub use dirs::Dirs;

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

/// The broker daemon's binary, looked for beside the running one.
pub const BROKER_BIN: &str = "gatehouse-broker";
/// The MCP front's binary (what an agent's MCP config starts), beside the running one.
pub const MCP_BIN: &str = "gatehouse-mcp";
/// The notifier's binary (`gatehouse notify`), beside the running one.
pub const NOTIFY_BIN: &str = "gatehouse-notify";

/// The variable `gatehouse run` passes a session token in (removed before serving).
pub const TOKEN_ENV: &str = ipc_schema::exec::AGENT_TOKEN_ENV;
/// The variable `gatehouse run` names the gateway socket in (inside its sandbox, where the
/// runtime directory is hidden): connect there and nowhere else, and never start a broker.
pub const SOCKET_ENV: &str = ipc_schema::exec::AGENT_SOCKET_ENV;
/// The variable `gatehouse run` names the agent's MCP config in (inside its sandbox).
pub const MCP_CONFIG_ENV: &str = ipc_schema::exec::AGENT_MCP_CONFIG_ENV;

/// `name` in the directory of the running binary: gatehouse's binaries are installed (and
/// built) side by side, and each finds the others there, never on `PATH`.
pub fn sibling(name: &str) -> Result<PathBuf, String> {
    std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(|d| d.join(name)))
        .ok_or_else(|| "cannot find the directory of this binary".to_string())
}

/// The pid of the broker holding `lock`, if one runs.
pub fn running_broker_pid(lock: &Path) -> Option<u32> {
    let mut f = File::open(lock).ok()?;
    // If we can take the lock, nobody holds it.
    if probe_shared(&f) {
        return None;
    }
    let mut s = String::new();
    f.read_to_string(&mut s).ok()?;
    s.trim().parse().ok()
}

/// Whether a shared lock on `f` can be had now (kept only as long as this check).
#[cfg(not(unix))]
fn probe_shared(_f: &File) -> bool {
    // No broker runs where it cannot lock its file (the broker refuses to start there).
    true
}

/// Whether a shared lock on `f` can be had now (kept only as long as this check).
#[cfg(unix)]
fn probe_shared(f: &File) -> bool {
    nix::fcntl::Flock::lock(
        f.try_clone().expect("dup lock fd"),
        nix::fcntl::FlockArg::LockSharedNonblock,
    )
    .map(|l| {
        let _ = l.unlock();
        true
    })
    .unwrap_or(false)
}
