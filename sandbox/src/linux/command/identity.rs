//! Which host user a command acts as.
//!
//! A command never has root's powers toward the host. A user namespace alone does not give that:
//! mapped to host uid 0, a command without any capability still owns every root-owned file
//! (`/etc/shadow` is mode 640 root:shadow, readable by its owner). So when gatehouse runs as
//! root, the process that spawns sandboxes first becomes an unprivileged host user, and the
//! sandbox maps that user only.

use std::io;
use std::path::{Path, PathBuf};

/// The overflow user and group: what a command runs as when gatehouse runs as root and nothing
/// better is known.
pub const NOBODY: (u32, u32) = (65534, 65534);

/// The home used inside the sandbox when the user has none on this machine.
pub const FALLBACK_HOME: &str = "/home/sandbox";

/// For a process running as root: the user to run a command as for `working_root`: its owner
/// when that is not root, else `nobody`.
pub fn run_as_for(working_root: &Path) -> (u32, u32) {
    use std::os::unix::fs::MetadataExt;
    match std::fs::metadata(working_root) {
        Ok(m) if m.uid() != 0 => (m.uid(), m.gid()),
        _ => NOBODY,
    }
}

/// Becomes `uid`/`gid` for good (real, effective and saved ids; no supplementary groups), after
/// clearing the capability bounding set while that is still possible. Needs root.
pub fn become_user(uid: u32, gid: u32) -> io::Result<()> {
    use nix::unistd::{setgroups, setresgid, setresuid, Gid, Uid};
    if uid == 0 || gid == 0 {
        return Err(io::Error::other(
            "refusing to run commands as root (uid or gid 0)",
        ));
    }
    let has_setpcap = ::caps::has_cap(
        None,
        ::caps::CapSet::Effective,
        ::caps::Capability::CAP_SETPCAP,
    )
    .map_err(|e| io::Error::other(format!("reading capabilities: {e}")))?;
    if has_setpcap {
        ::caps::clear(None, ::caps::CapSet::Bounding)
            .map_err(|e| io::Error::other(format!("clearing the bounding set: {e}")))?;
    }
    setgroups(&[]).map_err(|e| io::Error::other(format!("setgroups: {e}")))?;
    let g = Gid::from_raw(gid);
    setresgid(g, g, g).map_err(|e| io::Error::other(format!("setresgid({gid}): {e}")))?;
    let u = Uid::from_raw(uid);
    setresuid(u, u, u).map_err(|e| io::Error::other(format!("setresuid({uid}): {e}")))?;
    // Going back must be impossible now.
    if nix::unistd::setuid(Uid::from_raw(0)).is_ok() {
        return Err(io::Error::other("could regain uid 0 after dropping it"));
    }
    // Changing uid made the kernel mark us non-dumpable, which hands our /proc/self files to
    // root: then neither we nor our sandboxes could write their own uid_map. Lockdown (and the
    // sandbox's init, once its map is written) set it back to 0.
    nix::sys::prctl::set_dumpable(true)
        .map_err(|e| io::Error::other(format!("PR_SET_DUMPABLE: {e}")))?;
    Ok(())
}

/// The login name of `uid`, or `user<uid>`.
pub fn user_name(uid: u32) -> String {
    nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
        .ok()
        .flatten()
        .map(|u| u.name)
        .unwrap_or_else(|| format!("user{uid}"))
}

/// The home directory of `uid` as the sandbox shows it: the path from the password database
/// when it is an absolute directory other than `/`, else [`FALLBACK_HOME`].
pub fn home_of(uid: u32) -> PathBuf {
    let home = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
        .ok()
        .flatten()
        .map(|u| u.dir);
    match home {
        Some(h) if h.is_absolute() && h != Path::new("/") && h.is_dir() => h,
        _ => PathBuf::from(FALLBACK_HOME),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_root_owned_working_root_runs_as_nobody_another_as_its_owner() {
        let d = tempfile::tempdir().unwrap();
        if nix::unistd::geteuid().is_root() {
            assert_eq!(run_as_for(d.path()), NOBODY);
            std::os::unix::fs::chown(d.path(), Some(1234), Some(5678)).unwrap();
            assert_eq!(run_as_for(d.path()), (1234, 5678));
        } else {
            let me = (
                nix::unistd::geteuid().as_raw(),
                nix::unistd::getegid().as_raw(),
            );
            assert_eq!(run_as_for(d.path()), me);
        }
        assert_eq!(run_as_for(Path::new("/nonexistent/x")), NOBODY);
    }

    #[test]
    fn becoming_root_is_refused() {
        let e = become_user(0, 0).unwrap_err();
        assert_eq!(
            e.to_string(),
            "refusing to run commands as root (uid or gid 0)"
        );
    }

    #[test]
    fn a_home_that_is_not_a_directory_falls_back() {
        assert_eq!(home_of(4_000_000_000), PathBuf::from(FALLBACK_HOME));
    }
}
