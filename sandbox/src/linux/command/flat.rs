//! The landlock tier ([`ConfinementTier::Landlock`]): a command confined without namespaces,
//! for machines that refuse unprivileged user namespaces (docs/exec-helper.md, "The landlock
//! tier").
//!
//! The command sees the host's own filesystem, and Landlock alone decides what it reaches:
//! read and execute on the system directories the namespace tier mounts ([`SYSTEM_DIRS`]),
//! read on `/proc`, the same few device nodes, the grants as granted, and a private directory
//! of its own (its `TMPDIR` and, unless a grant or `state_home` gives one, its `HOME`). Landlock
//! cannot take a subtree out of a rule, so what must stay hidden inside a rule's tree (a
//! protected place, a `hide` entry, a read-only place or grant inside a writable one) is
//! decomposed around: its ancestors get only what they may pass on to it (listing, or reading),
//! and each sibling on the way gets the rule's full rights. One consequence: no new entry can be
//! made directly in those ancestors. Git's control files in a writable grant are the exception:
//! the root keeps its rights (agents create files there), and `project`'s sweep after the run
//! puts back whatever the command changed in them.
//!
//! Network: none (Landlock refuses TCP connect and bind, the denylist every socket family but
//! Unix), or the proxy through a listener on the host's loopback whose port is the one TCP
//! port the command may connect to (see [`Prepared`]). The process tree is ended by init as
//! subreaper (child.rs).
//!
//! [`ConfinementTier::Landlock`]: ipc_schema::tier::ConfinementTier::Landlock
//! [`Prepared`]: super::Prepared

use super::landlock_rules::{
    Rule, Tcp, ACCESS_FS_IOCTL_DEV, ACCESS_FS_READ_DIR, ACCESS_FS_READ_FILE, ACCESS_FS_WRITE_FILE,
    READ, WRITE,
};
use super::plan::cpath;
use super::{SandboxError, DEVICES, SYSTEM_DIRS};
use std::path::{Path, PathBuf};

/// The most Landlock rules one command's decomposition may need (more refuses the command).
const MAX_RULES: usize = 20_000;

/// How long [`super::Sandboxed::kill`] gives init to end the tree before killing init itself.
pub(super) const KILL_GRACE_MS: u16 = 500;

/// The landlock tier needs these kernel features whatever `allow_degraded` says: Landlock itself
/// (nothing else would confine the filesystem), TCP rules when the command has the proxy
/// (nothing else would keep it off the host's network), and the children files of `/proc`
/// (the tree kill walks them).
pub(super) fn refusal(abi: u32, proxy: bool) -> Option<String> {
    if abi == 0 {
        return Some("the landlock tier needs Landlock, which this kernel does not offer (or it is not enabled: add landlock to the lsm= boot parameter)".into());
    }
    if proxy && abi < 4 {
        return Some(format!(
            "the kernel offers Landlock ABI {abi}; a command with the proxy in the landlock tier needs ABI 4 (TCP rules), or it would reach the host's network"
        ));
    }
    if !Path::new("/proc/thread-self/children").exists() {
        return Some("the landlock tier ends a command's processes through /proc/PID/task/TID/children, which this kernel lacks (CONFIG_PROC_CHILDREN)".into());
    }
    None
}

/// A directory of the command's own (mode 0700): its `tmp` and `home`, removed with everything
/// in it when dropped.
#[derive(Debug)]
pub(super) struct PrivateDir {
    pub path: PathBuf,
}

/// The name every private directory starts with: `gatehouse-cmd.PID.STAMP`, PID the exec
/// helper's that made it.
const PRIVATE_PREFIX: &str = "gatehouse-cmd.";

impl PrivateDir {
    pub fn create(under: &Path) -> Result<PrivateDir, SandboxError> {
        use std::os::unix::fs::DirBuilderExt;
        static SWEPT: std::sync::Once = std::sync::Once::new();
        SWEPT.call_once(|| sweep_stale(under));
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        for attempt in 0..100u32 {
            let path = under.join(format!(
                "{PRIVATE_PREFIX}{}.{:08x}",
                std::process::id(),
                stamp.wrapping_add(attempt.wrapping_mul(0x9e37_79b9))
            ));
            match std::fs::DirBuilder::new().mode(0o700).create(&path) {
                Ok(()) => {
                    let dir = PrivateDir { path };
                    for sub in ["tmp", "home"] {
                        std::fs::DirBuilder::new()
                            .mode(0o700)
                            .create(dir.path.join(sub))
                            .map_err(super::io_err(format!(
                                "creating the command's private {sub}"
                            )))?;
                    }
                    return Ok(dir);
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => {
                    return Err(SandboxError::Io {
                        what: format!(
                            "creating the command's private directory in {}",
                            under.display()
                        ),
                        source: e,
                    })
                }
            }
        }
        Err(SandboxError::Kernel(format!(
            "no free name for the command's private directory in {}",
            under.display()
        )))
    }

    pub fn tmp(&self) -> PathBuf {
        self.path.join("tmp")
    }

    pub fn home(&self) -> PathBuf {
        self.path.join("home")
    }
}

impl Drop for PrivateDir {
    fn drop(&mut self) {
        // What the command left unreadable or unwritable is opened up first (it is ours).
        if std::fs::remove_dir_all(&self.path).is_err() {
            open_up(&self.path);
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

/// Removes what an exec helper that was killed (SIGKILL, its parent's death) could not: the
/// private directories in `under` that this user owns and whose helper no longer runs. Where
/// the pid is alive (that helper, or a process that reused its pid) the directory is left.
/// Once per helper, before its first command.
fn sweep_stale(under: &Path) {
    use std::os::unix::fs::MetadataExt;
    let me = nix::unistd::geteuid().as_raw();
    let Ok(entries) = std::fs::read_dir(under) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(PRIVATE_PREFIX))
            .and_then(|rest| rest.split_once('.'))
            .and_then(|(pid, _)| pid.parse::<i32>().ok())
            .filter(|p| *p > 0)
        else {
            continue;
        };
        let ours = e
            .metadata()
            .is_ok_and(|m| m.is_dir() && m.uid() == me && m.mode() & 0o777 == 0o700);
        let gone = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None)
            == Err(nix::errno::Errno::ESRCH);
        if ours && gone {
            drop(PrivateDir { path: e.path() });
        }
    }
}

fn open_up(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                open_up(&e.path());
            }
        }
    }
}

/// Something a rule's tree must not pass on whole: a path and the rights it may have at most
/// (0: hidden; [`READ`]: read-only).
pub(super) struct Hole {
    pub path: PathBuf,
    pub rights: u64,
}

/// What the planner gives the landlock tier.
pub(super) struct Roots<'a> {
    /// Grants: path, writable, is a directory.
    pub grants: Vec<(PathBuf, bool, bool)>,
    pub private: &'a PrivateDir,
    pub holes: Vec<Hole>,
}

/// The command's Landlock rules (host paths), and what the decomposition hid.
pub(super) fn rules(roots: &Roots<'_>) -> Result<(Vec<Rule>, Vec<PathBuf>), SandboxError> {
    let mut out: Vec<Rule> = Vec::new();
    let add = |path: &Path, is_dir: bool, access: u64, out: &mut Vec<Rule>| {
        decompose(path, is_dir, access, &roots.holes, out)
    };
    for d in SYSTEM_DIRS {
        let p = Path::new(d);
        // A link (`/bin -> usr/bin`) leads into a directory of the list.
        if std::fs::symlink_metadata(p).is_ok_and(|m| m.is_dir()) {
            add(p, true, READ, &mut out)?;
        }
    }
    // /proc as the namespace tier mounts it: readable, never executable or writable.
    add(
        Path::new("/proc"),
        true,
        ACCESS_FS_READ_FILE | ACCESS_FS_READ_DIR,
        &mut out,
    )?;
    for d in DEVICES {
        add(
            &Path::new("/dev").join(d),
            false,
            ACCESS_FS_READ_FILE | ACCESS_FS_WRITE_FILE | ACCESS_FS_IOCTL_DEV,
            &mut out,
        )?;
    }
    add(&roots.private.path, true, READ | WRITE, &mut out)?;
    for (path, write, is_dir) in &roots.grants {
        let access = if *write { READ | WRITE } else { READ };
        add(path, *is_dir, access, &mut out)?;
    }
    if out.len() > MAX_RULES {
        return Err(SandboxError::Refused(format!(
            "hiding what the grants hide needs {} Landlock rules, more than {MAX_RULES}: grant smaller directories, or fewer exclusions",
            out.len()
        )));
    }
    let mut hidden: Vec<PathBuf> = roots
        .holes
        .iter()
        .filter(|h| h.rights == 0)
        .map(|h| h.path.clone())
        .collect();
    hidden.sort();
    hidden.dedup();
    Ok((out, hidden))
}

/// Rules giving `access` to `path` and everything under it except the holes, which get at most
/// their rights: each ancestor of a hole gets what it may pass on, each sibling on the way down
/// the full rights.
fn decompose(
    path: &Path,
    is_dir: bool,
    access: u64,
    holes: &[Hole],
    out: &mut Vec<Rule>,
) -> Result<(), SandboxError> {
    if access == 0 {
        return Ok(());
    }
    if out.len() > MAX_RULES {
        return Ok(()); // refused by the caller
    }
    let inner: Vec<&Hole> = holes.iter().filter(|h| h.path.starts_with(path)).collect();
    if inner.is_empty() {
        out.push(Rule {
            path: cpath(path),
            is_dir,
            access,
        });
        return Ok(());
    }
    if let Some(h) = inner.iter().find(|h| h.path == path) {
        let below: Vec<Hole> = inner
            .iter()
            .filter(|x| x.path != path)
            .map(|x| Hole {
                path: x.path.clone(),
                rights: x.rights,
            })
            .collect();
        return decompose(path, is_dir, access & h.rights, &below, out);
    }
    let passed = inner
        .iter()
        .fold(READ, |m, h| m & (h.rights | ACCESS_FS_READ_DIR));
    if access & passed != 0 {
        out.push(Rule {
            path: cpath(path),
            is_dir: true,
            access: access & passed,
        });
    }
    let rd = std::fs::read_dir(path).map_err(super::io_err(format!(
        "listing {} to hide what it holds",
        path.display()
    )))?;
    let owned: Vec<Hole> = inner
        .iter()
        .map(|h| Hole {
            path: h.path.clone(),
            rights: h.rights,
        })
        .collect();
    for e in rd.flatten() {
        let Ok(ft) = e.file_type() else { continue };
        // A link is judged where it leads (Landlock follows it); a rule on it would give its
        // target.
        if ft.is_symlink() {
            continue;
        }
        decompose(&e.path(), ft.is_dir(), access, &owned, out)?;
    }
    Ok(())
}

/// The threads and processes of `uid` now (what `RLIMIT_NPROC` counts outside a user namespace
/// of its own): processes whose `/proc` entry the user owns, with their threads.
pub(super) fn user_tasks(uid: u32) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return 0;
    };
    let mut n = 0u64;
    for e in rd.flatten() {
        let name = e.file_name();
        if !name.to_string_lossy().bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        if e.metadata().is_ok_and(|m| m.uid() == uid) {
            n += std::fs::read_dir(e.path().join("task")).map_or(1, |t| t.count() as u64);
        }
    }
    n
}

/// The TCP rule of the command's ruleset.
pub(super) fn tcp(proxy_port: Option<u16>) -> Tcp {
    match proxy_port {
        Some(p) => Tcp::ConnectOnly(p),
        None => Tcp::Closed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A killed helper's private directory is removed by the next helper's sweep; one whose
    /// helper still runs, one not made as a private directory is (mode), and a file are kept.
    #[test]
    fn a_killed_helpers_private_directory_is_swept_and_nothing_else() {
        use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
        let under = tempfile::tempdir().unwrap();
        // A pid that ran and was reaped: no process has it (the kernel hands pids out in order,
        // so it is not reused this soon).
        let dead = std::process::Command::new("true").spawn().unwrap();
        let dead_pid = dead.id();
        let mut dead = dead;
        dead.wait().unwrap();
        let mk = |name: String, mode: u32| {
            let p = under.path().join(name);
            std::fs::DirBuilder::new().mode(0o700).create(&p).unwrap();
            for sub in ["tmp", "home"] {
                std::fs::DirBuilder::new()
                    .mode(0o700)
                    .create(p.join(sub))
                    .unwrap();
            }
            // What a command left behind, unwritable.
            std::fs::write(p.join("tmp/left"), "x").unwrap();
            std::fs::set_permissions(p.join("tmp"), std::fs::Permissions::from_mode(0o500))
                .unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
            p
        };
        let stale = mk(format!("{PRIVATE_PREFIX}{dead_pid}.0000abcd"), 0o700);
        let live = mk(
            format!("{PRIVATE_PREFIX}{}.0000abcd", std::process::id()),
            0o700,
        );
        let other_mode = mk(format!("{PRIVATE_PREFIX}{dead_pid}.0000beef"), 0o755);
        let file = under
            .path()
            .join(format!("{PRIVATE_PREFIX}{dead_pid}.0000f11e"));
        std::fs::write(&file, "x").unwrap();
        sweep_stale(under.path());
        assert!(!stale.exists(), "the killed helper's directory is gone");
        assert!(live.join("tmp/left").exists(), "a running helper's is kept");
        assert!(other_mode.exists() && file.exists());
        for kept in [&live, &other_mode] {
            std::fs::set_permissions(kept.join("tmp"), std::fs::Permissions::from_mode(0o700))
                .unwrap();
        }
    }

    fn texts(rules: &[Rule]) -> Vec<(String, u64)> {
        let mut v: Vec<(String, u64)> = rules
            .iter()
            .map(|r| (r.path.to_string_lossy().into_owned(), r.access))
            .collect();
        v.sort();
        v
    }

    #[test]
    fn holes_are_decomposed_around() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().canonicalize().unwrap();
        std::fs::create_dir_all(root.join("a/deep")).unwrap();
        std::fs::write(root.join("a/secret"), "x").unwrap();
        std::fs::write(root.join("a/ok"), "x").unwrap();
        std::fs::create_dir_all(root.join("b")).unwrap();
        std::fs::create_dir_all(root.join(".vscode")).unwrap();
        std::os::unix::fs::symlink("/etc", root.join("link")).unwrap();
        let holes = vec![
            Hole {
                path: root.join("a/secret"),
                rights: 0,
            },
            Hole {
                path: root.join(".vscode"),
                rights: READ,
            },
        ];
        let mut out = Vec::new();
        decompose(&root, true, READ | WRITE, &holes, &mut out).unwrap();
        let s = |p: &str| root.join(p).to_string_lossy().into_owned();
        assert_eq!(
            texts(&out),
            texts(&[
                Rule {
                    path: cpath(&root),
                    is_dir: true,
                    access: ACCESS_FS_READ_DIR
                },
                Rule {
                    path: cpath(&root.join(".vscode")),
                    is_dir: true,
                    access: READ
                },
                Rule {
                    path: cpath(&root.join("a")),
                    is_dir: true,
                    access: ACCESS_FS_READ_DIR
                },
                Rule {
                    path: cpath(&root.join("a/deep")),
                    is_dir: true,
                    access: READ | WRITE
                },
                Rule {
                    path: cpath(&root.join("a/ok")),
                    is_dir: false,
                    access: READ | WRITE
                },
                Rule {
                    path: cpath(&root.join("b")),
                    is_dir: true,
                    access: READ | WRITE
                },
            ]),
            "{:?}",
            texts(&out)
        );
        assert!(!texts(&out).iter().any(|(p, _)| *p == s("link")));
        // Only a read-only hole: the ancestors keep reading.
        let mut out = Vec::new();
        decompose(&root, true, READ | WRITE, &holes[1..], &mut out).unwrap();
        assert!(
            texts(&out).contains(&(root.to_string_lossy().into_owned(), READ)),
            "{:?}",
            texts(&out)
        );
    }
}
