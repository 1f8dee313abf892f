//! The spawner: the one process of gatehouse that may start helpers.
//!
//! The broker proper (the router) parses every frame the agent's gateway sends, so it is the
//! process most worth confining (the lesson of OpenSSH's privilege separation). A confined
//! router can neither fork nor exec, so before it locks itself down it starts this small process,
//! which keeps the rights helpers need at start and does three things on the router's request
//! (the table is in `ipc_schema::spawn`): start a helper of a named kind from its fixed
//! directory, kill one it started, and read the kernel's view of one (`/proc/PID/status`).
//!
//! `serve` is the spawner's side on Linux, `serve_macos` on macOS (a byte-stream channel,
//! helpers' exits by kqueue, their confinement read with `sandbox_check`: compiled, never run),
//! `windows` on Windows (helpers in jobs, their channels duplicated into the router, their
//! status read from outside); `link` is the router's on all three (with the feature `link`).
#![forbid(unsafe_code)]

#[cfg(all(
    feature = "link",
    any(target_os = "linux", target_os = "macos", windows)
))]
pub mod link;
// pidfds, /proc and PR_SET_PDEATHSIG.
#[cfg(target_os = "linux")]
mod serve;
#[cfg(windows)]
pub mod windows;
// The channel as a byte stream with descriptors: macOS's (tested on Linux too).
#[cfg(any(target_os = "macos", all(test, unix)))]
mod record_stream;

#[cfg(target_os = "macos")]
mod serve_macos;

#[cfg(target_os = "linux")]
pub use serve::serve;
#[cfg(target_os = "macos")]
pub use serve_macos::serve;

/// Why the spawner stopped serving.
#[derive(Debug)]
pub enum ServeError {
    Protocol(String),
    Io(String, std::io::Error),
}

impl std::fmt::Display for ServeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ServeError::Protocol(m) => write!(f, "the router broke the protocol: {m}"),
            ServeError::Io(what, e) => write!(f, "{what}: {e}"),
        }
    }
}
