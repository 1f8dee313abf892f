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

/// The checks every spawner makes of the router's requests, whatever its system: one place, so
/// that no spawner is more lenient than another.
#[cfg_attr(not(any(unix, windows)), allow(dead_code))]
mod rules {
    use crate::ServeError;
    use ipc_schema::Role;
    use std::ffi::OsString;

    /// The helpers' switch for running with less than their profile needs.
    const DEGRADED: &str = "--allow-degraded";

    /// Why a `Start` of `kind` with `args` is refused before anything starts: `--allow-degraded`
    /// asked of a spawner started without it (fixed at its start, so the router cannot later
    /// ask for a helper with less confinement than the broker was started with).
    pub(crate) fn degraded_refusal(
        allow_degraded: bool,
        kind: Role,
        args: &[OsString],
    ) -> Option<String> {
        (!allow_degraded && args.iter().any(|a| a == DEGRADED)).then(|| {
            format!("{DEGRADED} was asked for {kind}, but the broker was not started with it")
        })
    }

    /// What a `Kill` of `pid` does: `Ok(true)` kill it (a helper this spawner started and has
    /// not reaped), `Ok(false)` nothing (reaped already: the kill crossed its `Ended`), and a
    /// broken protocol for any other pid.
    pub(crate) fn kill_target(pid: u32, live: bool, ended: bool) -> Result<bool, ServeError> {
        if live {
            Ok(true)
        } else if ended {
            Ok(false)
        } else {
            Err(ServeError::Protocol(format!(
                "it asked to kill pid {pid}, which this spawner did not start"
            )))
        }
    }

    /// Whether a `Status` of `pid` may be answered on Linux and macOS: a helper this spawner
    /// runs, the router or the spawner itself.
    #[cfg(unix)]
    pub(crate) fn observable(pid: u32, live: bool, router: u32) -> Result<(), String> {
        if live || pid == router || pid == std::process::id() {
            Ok(())
        } else {
            Err(format!(
                "pid {pid} is not a helper this spawner runs, nor the router"
            ))
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn what_the_router_may_ask() {
            let args: Vec<OsString> = vec!["--x".into(), DEGRADED.into()];
            assert_eq!(
                degraded_refusal(false, Role::Fs, &args).unwrap(),
                "--allow-degraded was asked for fs-helper, but the broker was not started with it"
            );
            assert!(degraded_refusal(true, Role::Fs, &args).is_none());
            assert!(degraded_refusal(false, Role::Fs, &args[..1]).is_none());
            assert!(kill_target(7, true, false).unwrap());
            assert!(!kill_target(7, false, true).unwrap());
            assert_eq!(
                kill_target(7, false, false).unwrap_err().to_string(),
                "the router broke the protocol: it asked to kill pid 7, which this spawner did not start"
            );
            #[cfg(unix)]
            {
                assert!(observable(7, true, 1).is_ok());
                assert!(observable(1, false, 1).is_ok());
                assert!(observable(std::process::id(), false, 1).is_ok());
                assert_eq!(
                    observable(7, false, 1).unwrap_err(),
                    "pid 7 is not a helper this spawner runs, nor the router"
                );
            }
        }
    }
}
