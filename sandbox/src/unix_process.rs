//! What Linux and macOS share of process plumbing: how a child ended, in words, and the walk up
//! a process's parents (each system reads a parent its own way: `/proc/PID/status` on Linux,
//! `proc_pidinfo` on macOS).

use std::io;

/// Whether `pid` descends from `ancestor` (or is it), by walking up its parents with `parent`.
/// A process on the way that exits mid-walk (its children are then reparented) restarts the
/// walk, a few times; `pid` itself gone, or its parent unreadable, is an error. Orphans are
/// reparented to the nearest subreaper (the exec sandbox's init is one), else to pid 1, which
/// ends the walk.
pub fn walk_parents(
    pid: u32,
    ancestor: u32,
    parent: impl Fn(u32) -> io::Result<u32>,
) -> io::Result<bool> {
    const RESTARTS: usize = 4;
    // pid_max is at most 2^22 on Linux (99,999 on macOS): no chain of parents is longer.
    const MAX_DEPTH: usize = 1 << 22;
    let mut last = None;
    'walk: for _ in 0..RESTARTS {
        let mut p = pid;
        for _ in 0..MAX_DEPTH {
            if p == ancestor {
                return Ok(true);
            }
            if p <= 1 {
                return Ok(false);
            }
            match parent(p) {
                Ok(pp) => p = pp,
                Err(e) if p == pid => return Err(e),
                Err(e) => {
                    last = Some(e);
                    continue 'walk;
                }
            }
        }
        return Err(io::Error::other(format!(
            "pid {pid}: the chain of parents does not end"
        )));
    }
    Err(last.unwrap_or_else(|| io::Error::other("the walk did not settle")))
}

/// How a child ended, in words (`exited with status 3`, `killed by SIGKILL`).
pub fn describe_exit(status: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    if let Some(code) = status.code() {
        format!("exited with status {code}")
    } else if let Some(sig) = status.signal() {
        let name = nix::sys::signal::Signal::try_from(sig)
            .map(|s| s.as_str().to_string())
            .unwrap_or_else(|_| format!("signal {sig}"));
        format!("killed by {name}")
    } else {
        "ended".to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_walk_ends_at_the_ancestor_at_init_or_at_an_error() {
        // 40 -> 30 -> 20 -> 1
        let parent = |p: u32| match p {
            40 => Ok(30),
            30 => Ok(20),
            20 => Ok(1),
            _ => Err(io::Error::other(format!("no pid {p}"))),
        };
        assert!(walk_parents(40, 20, parent).unwrap());
        assert!(walk_parents(40, 40, parent).unwrap());
        assert!(!walk_parents(40, 7, parent).unwrap());
        assert_eq!(
            walk_parents(5, 20, parent).unwrap_err().to_string(),
            "no pid 5"
        );
        // A parent that vanishes mid-walk every time: the walk gives up with its error.
        let vanishing = |p: u32| {
            if p == 40 {
                Ok(30)
            } else {
                Err(io::Error::other("gone"))
            }
        };
        assert_eq!(
            walk_parents(40, 20, vanishing).unwrap_err().to_string(),
            "gone"
        );
    }

    #[test]
    fn exits_in_words() {
        use std::os::unix::process::ExitStatusExt;
        let code = std::process::ExitStatus::from_raw(3 << 8);
        assert_eq!(describe_exit(code), "exited with status 3");
        let killed = std::process::ExitStatus::from_raw(libc::SIGKILL);
        assert_eq!(describe_exit(killed), "killed by SIGKILL");
    }
}
