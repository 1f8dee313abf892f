//! Lockdown profiles for every gatehouse process, and the few process operations that need
//! `unsafe` (spawning a helper with exactly one inherited socket, pidfds, adopting that socket).
//! All of gatehouse's `unsafe` lives in this crate; each block says what makes it sound.
//!
//! A helper's `main` calls [`lockdown`] with its [`Profile`] before it reads its first request.
//! Every step is fatal on failure unless the broker was started with `--allow-degraded`, and even
//! then only the steps the kernel cannot do are skipped, each one named in the report.

use std::path::PathBuf;

pub use ipc_schema::status::{LandlockStatus, LockdownReport, ProcStatus};

#[cfg(unix)]
pub mod bridge;
pub mod command_env;
pub mod endpoint;
pub mod helper_args;
#[cfg(target_os = "linux")]
pub mod linux;
pub mod peer;
pub mod program_path;
pub mod seatbelt;
#[cfg(unix)]
pub mod unix_channel;
#[cfg(unix)]
pub mod unix_process;
pub mod wincfg;
#[cfg(target_os = "linux")]
pub use linux::{landlock_abi, lockdown, lockdown_router, lockdown_spawner, process};

#[cfg(target_os = "macos")]
pub mod macos;
#[cfg(target_os = "macos")]
#[path = "macos_process.rs"]
pub mod process;
#[cfg(target_os = "macos")]
pub use macos::{harden_broker, landlock_abi, lockdown, lockdown_router, lockdown_spawner};

#[cfg(windows)]
pub mod windows;
#[cfg(windows)]
pub use windows::{harden_broker, landlock_abi, lockdown};

/// Which process is being locked down, with what that kind needs.
#[derive(Debug, Clone, PartialEq)]
pub enum Profile {
    /// File helper: only the granted roots (read-only grants read-only) and its checkpoint dir.
    Fs(FsProfile),
    /// Network helper: no filesystem after start; may create inet sockets.
    Net,
    /// Command helper: may fork, exec and unshare; each command gets its own sandbox.
    Exec,
    /// Keyring helper: no network, no exec; only what its store (the backend config.toml names)
    /// needs.
    Secrets(ipc_schema::secrets::StoreKind),
    /// The human's console: its terminal and its broker socket, nothing else.
    Ui,
    /// An agent's MCP gateway: stdio and its broker socket, nothing else.
    Gateway,
    /// The servers-helper: the broker channel and the stdio sockets of third-party MCP servers
    /// the broker passes it, nothing else (no files, no new sockets, no exec).
    Servers,
    /// The broker proper (the router): its own config, data and runtime directories
    /// (`read_write`) and the few system files it reads (`read_only`); no exec, no new
    /// sockets, no signals to anyone.
    Broker(FsProfile),
}

impl Profile {
    /// The profile's short name, as shown by `doctor`.
    pub fn name(&self) -> &'static str {
        match self {
            Profile::Fs(_) => "fs",
            Profile::Net => "net",
            Profile::Exec => "exec",
            Profile::Secrets(_) => "secrets",
            Profile::Ui => "ui",
            Profile::Gateway => "gateway",
            Profile::Servers => "servers",
            Profile::Broker(_) => "broker",
        }
    }
}

/// The directories the fs-helper may touch.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct FsProfile {
    /// Grant roots with read access only.
    pub read_only: Vec<PathBuf>,
    /// Grant roots with read and write access, and the checkpoint directory.
    pub read_write: Vec<PathBuf>,
}

/// How strict to be, and what to keep.
#[derive(Debug, Clone, Default)]
pub struct LockdownOptions {
    /// Run with less than the profile's minimum when the kernel lacks a mechanism, recording
    /// each missing piece in [`LockdownReport::degraded`]. Off unless the broker was started
    /// with `--allow-degraded`.
    pub allow_degraded: bool,
    /// File descriptors to keep open besides 0, 1 and 2 (the channel to the broker).
    pub keep_fds: Vec<i32>,
    /// Environment variables to keep (everything else is removed).
    pub keep_env: Vec<String>,
}

/// A lockdown step failed. Each variant names the mechanism, so the message tells the user
/// what their kernel or system lacks.
#[derive(Debug, thiserror::Error)]
pub enum LockdownError {
    #[error("closing inherited file descriptors failed: {0}")]
    CloseFds(std::io::Error),
    #[error("setting resource limit {what} failed: {source}")]
    Rlimit {
        what: &'static str,
        source: std::io::Error,
    },
    #[error("prctl({what}) failed: {source}")]
    Prctl {
        what: &'static str,
        source: std::io::Error,
    },
    #[error("dropping capabilities failed: {0}")]
    Capabilities(String),
    #[error("Landlock ABI {found} is below the {needed} the {profile} profile needs (start with --allow-degraded to run with less)")]
    LandlockTooOld {
        profile: &'static str,
        found: u32,
        needed: u32,
    },
    #[error("Landlock ruleset for the {profile} profile failed: {reason}")]
    Landlock {
        profile: &'static str,
        reason: String,
    },
    #[error("seccomp filter for the {profile} profile failed: {reason}")]
    Seccomp {
        profile: &'static str,
        reason: String,
    },
    #[error("this platform has no lockdown for the {0} profile yet")]
    Unsupported(&'static str),
    #[error("lockdown must run before the process starts a second thread, but it has {0} threads (Landlock, capabilities and no_new_privs would bind only the calling thread)")]
    MultiThreaded(usize),
    #[error("cannot tell whether the process is single-threaded: {0}")]
    ThreadCount(std::io::Error),
    #[error("clearing the environment failed: {0}")]
    Environment(String),
    /// Windows: the process was not started confined (or the system would not apply a piece),
    /// and each missing piece is named; `--allow-degraded` runs with them listed instead.
    #[error("the {profile} profile is not confined on this system, refusing to run: {missing}")]
    NotConfined {
        profile: &'static str,
        missing: String,
    },
    #[error("Windows {mechanism} failed: {reason}")]
    Windows {
        mechanism: &'static str,
        reason: String,
    },
    #[error("Seatbelt profile for the {profile} profile failed: {reason}")]
    Seatbelt {
        profile: &'static str,
        reason: String,
    },
}
