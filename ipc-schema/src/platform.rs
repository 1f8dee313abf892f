//! What a gatehouse program needs from its OS and does not have on this one: the one typed
//! refusal every program built for macOS or Windows gives where its Linux mechanisms have no
//! counterpart yet. A program that cannot confine itself or check its peers there does not
//! start (DESIGN.md rule 8); it never runs with the piece silently left out.

use std::fmt;

/// One OS mechanism a program relies on, which this build has on Linux only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Missing {
    /// Starting helpers with exactly one inherited channel, tracking them by pidfd and reading
    /// their kernel status from /proc (`sandbox::process`, the spawner).
    HelperProcesses,
    /// Resolving every path beneath a grant root with `openat2(RESOLVE_BENEATH |
    /// RESOLVE_NO_SYMLINKS)` (the fs-helper).
    BeneathResolution,
    /// A sandbox per command (namespaces, Landlock and seccomp for each command the exec
    /// helper or `gatehouse run` starts).
    CommandSandbox,
    /// The kernel keyring, where the broker keeps its audit key.
    KernelKeyring,
    /// A front's connection to the broker (Unix sockets with SO_PEERCRED / LOCAL_PEERCRED). On
    /// Windows the broker serves named pipes, `gatehouse_client::Client` and the MCP front
    /// connect to them, but the console's and the notifier's loops are not built there.
    LocalSockets,
    /// The desktop notification bus (D-Bus).
    SessionBus,
}

impl Missing {
    fn what(self) -> &'static str {
        match self {
            Missing::HelperProcesses => {
                "starting helpers with one inherited channel, tracked by pidfd, with their status from /proc"
            }
            Missing::BeneathResolution => {
                "path resolution beneath a grant root (openat2 RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)"
            }
            Missing::CommandSandbox => {
                "a sandbox for each command (namespaces, Landlock, seccomp)"
            }
            Missing::KernelKeyring => "the kernel keyring for the audit key",
            Missing::LocalSockets => {
                "a front's connection to the broker with the peer checked by the OS (on Windows: the console's and the notifier's loops over named pipes)"
            }
            Missing::SessionBus => "the desktop notification bus (D-Bus)",
        }
    }
}

/// `program` needs `missing`, which this build has on Linux only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unsupported {
    pub program: &'static str,
    pub missing: &'static [Missing],
}

impl fmt::Display for Unsupported {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: refusing to start on {}: this build has only on Linux: ",
            self.program,
            std::env::consts::OS
        )?;
        for (i, m) in self.missing.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            f.write_str(m.what())?;
        }
        Ok(())
    }
}

impl std::error::Error for Unsupported {}

/// Ends `program` with the refusal on stderr and exit status [`crate::exit::FATAL_EXIT`].
pub fn refuse(program: &'static str, missing: &'static [Missing]) -> ! {
    eprintln!("{}", Unsupported { program, missing });
    std::process::exit(crate::exit::FATAL_EXIT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_refusal_names_every_missing_piece() {
        let u = Unsupported {
            program: "fs-helper",
            missing: &[Missing::HelperProcesses, Missing::BeneathResolution],
        };
        let s = u.to_string();
        assert!(s.starts_with(&format!(
            "fs-helper: refusing to start on {}: ",
            std::env::consts::OS
        )));
        assert!(s.contains("pidfd") && s.contains("RESOLVE_BENEATH"), "{s}");
    }
}
