//! Everything the sandbox's init process and the command will do, computed in the parent
//! before `clone`, so that the children only make syscalls with data prepared here (nothing
//! allocates between `clone` and `exec`, which keeps this safe even in a multi-threaded parent).

use super::landlock_rules::LandlockPlan;
use std::ffi::{CString, OsStr};
use std::os::raw::c_int;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// One step of building the filesystem view (or of the identity setup before it).
pub(crate) enum Op {
    /// Write `data` to `path` (uid_map, gid_map, setgroups).
    WriteFile {
        path: CString,
        data: CString,
    },
    /// Make every mount private, so nothing done here propagates to the host (and back).
    MakePrivate,
    /// Clone the tree at `src` (host view) into a detached mount with `attr_set` applied
    /// recursively; the descriptor goes into `slots[slot]`.
    CloneTree {
        src: CString,
        slot: usize,
        attr_set: u64,
    },
    /// `mount(2)`.
    Mount {
        src: Option<CString>,
        target: CString,
        fstype: Option<CString>,
        flags: libc::c_ulong,
        data: Option<CString>,
    },
    Mkdir {
        path: CString,
        mode: libc::mode_t,
    },
    /// Create an empty file (a mount point for a file).
    Touch {
        path: CString,
        mode: libc::mode_t,
    },
    Symlink {
        target: CString,
        link: CString,
    },
    /// Attach the tree in `slots[slot]` at `target`.
    MoveTree {
        slot: usize,
        target: CString,
    },
    Remove {
        path: CString,
        dir: bool,
    },
    /// Make `root` the root: `pivot_root(".", ".")` from inside it, then detach the old root.
    PivotRoot {
        root: CString,
    },
}

impl Op {
    /// The user-namespace step this op is, for the ops whose refusal means the machine refuses
    /// user namespaces (the id maps, and the first mount in the new namespace); `None` for the
    /// others, whose failure is reported as it is.
    pub fn userns_step(&self) -> Option<crate::linux::userns::Step> {
        use crate::linux::userns::Step;
        match self {
            Op::WriteFile { path, .. } => match path.to_bytes() {
                p if p.ends_with(b"/setgroups") => Some(Step::Setgroups),
                p if p.ends_with(b"/uid_map") => Some(Step::UidMap),
                p if p.ends_with(b"/gid_map") => Some(Step::GidMap),
                _ => None,
            },
            Op::MakePrivate => Some(Step::Mount),
            _ => None,
        }
    }

    /// Makes the bind mount at `target` read-only, with the other attributes in `flags`
    /// (`MS_NOSUID`, `MS_NODEV`, `MS_NOEXEC`): a bind remount replaces them all at once.
    pub fn remount_read_only(target: CString, flags: libc::c_ulong) -> Op {
        Op::Mount {
            src: None,
            target,
            fstype: None,
            flags: libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY | flags,
            data: None,
        }
    }
}

/// Everything the children need, prepared.
pub(crate) struct Plan {
    pub ops: Vec<Op>,
    /// What each op does, for error messages (parallel to `ops`).
    pub op_text: Vec<String>,
    pub slots: Vec<c_int>,
    /// Descriptors the init process keeps (sorted); everything else it closes first.
    pub keep_fds: Vec<c_int>,
    pub report_fd: c_int,
    /// The command's stdout pipe; -1 when `stdio` takes its place.
    pub stdout_w: c_int,
    pub stderr_w: c_int,
    /// One socket as the command's stdin and stdout (`Prepared::stdio_socket`), or -1.
    pub stdio: c_int,
    pub hostname: CString,
    pub landlock: Option<LandlockPlan>,
    /// The proxy connector and the bridge port.
    pub bridge: Option<(c_int, u16)>,
    /// A Unix socket path inside the sandbox whose connections go to this connector (see
    /// `Prepared::bridge_unix_socket`).
    pub unix_bridge: Option<(c_int, CString)>,
    pub cwd: CString,
    pub exec_path: CString,
    pub argv: Vec<CString>,
    pub argv_ptrs: Vec<*const libc::c_char>,
    pub envp: Vec<CString>,
    pub envp_ptrs: Vec<*const libc::c_char>,
    pub rlimits: Vec<(libc::__rlimit_resource_t, libc::rlimit)>,
    pub seccomp: Vec<libc::sock_filter>,
    pub dev_null: CString,
    /// The stack the command process runs on until its exec (it shares init's memory).
    pub command_stack: Vec<u8>,
    /// The landlock tier: no namespaces; init is the command's subreaper and ends its whole
    /// process tree (see `flat`).
    pub flat: bool,
    /// The landlock tier's proxy listener on the host's loopback, bound by the parent (-1: init
    /// listens on the bridge port inside its own network namespace).
    pub bridge_listener: c_int,
    /// Room for the pids init walks when it ends the command's tree (allocated here, as init
    /// may not allocate).
    pub kill_stack: Vec<libc::pid_t>,
}

impl Plan {
    /// Points the `*_ptrs` arrays at the strings (call after the strings are final).
    pub fn seal(&mut self) {
        self.argv_ptrs = self.argv.iter().map(|s| s.as_ptr()).collect();
        self.argv_ptrs.push(std::ptr::null());
        self.envp_ptrs = self.envp.iter().map(|s| s.as_ptr()).collect();
        self.envp_ptrs.push(std::ptr::null());
        self.keep_fds.sort_unstable();
        self.keep_fds.dedup();
    }
}

pub(crate) fn cpath(p: &Path) -> CString {
    cbytes(p.as_os_str())
}

pub(crate) fn cbytes(s: &OsStr) -> CString {
    // Paths come from the filesystem or were checked for NUL by the caller.
    CString::new(s.as_bytes()).unwrap_or_else(|_| CString::new("/nonexistent-nul").expect("no NUL"))
}

pub(crate) fn cstr(s: &str) -> CString {
    CString::new(s).unwrap_or_else(|_| CString::new("").expect("no NUL"))
}

/// What covers a path in the sandbox's view.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Cover {
    /// A tree from the host: the path exists inside exactly when it exists on the host.
    Host,
    /// A fresh tmpfs: the path exists only if the planner created it.
    Fresh,
}

/// Tracks the mounts placed so far and the directories created on fresh filesystems, so that
/// `mkdir -p` is planned only where needed.
pub(crate) struct Layout {
    pub stage: PathBuf,
    mounts: Vec<(PathBuf, Cover)>,
    created: Vec<PathBuf>,
}

impl Layout {
    pub fn new(stage: PathBuf) -> Layout {
        Layout {
            stage,
            mounts: vec![(PathBuf::from("/"), Cover::Fresh)],
            created: vec![PathBuf::from("/")],
        }
    }

    /// The host path of `inside` while the new root is being built under the stage.
    pub fn staged(&self, inside: &Path) -> PathBuf {
        let rel = inside.strip_prefix("/").unwrap_or(inside);
        if rel.as_os_str().is_empty() {
            self.stage.clone()
        } else {
            self.stage.join(rel)
        }
    }

    pub fn cover(&self, p: &Path) -> Cover {
        self.mounts
            .iter()
            .filter(|(m, _)| p.starts_with(m))
            .max_by_key(|(m, _)| m.components().count())
            .map(|(_, c)| *c)
            .unwrap_or(Cover::Fresh)
    }

    pub fn mounted(&mut self, at: &Path, cover: Cover) {
        self.mounts.push((at.to_path_buf(), cover));
        if cover == Cover::Fresh {
            self.created.push(at.to_path_buf());
        }
    }

    /// Ops creating `dir` and its missing parents on fresh filesystems.
    pub fn mkdir_p(&mut self, dir: &Path, plan: &mut Vec<(Op, String)>) {
        let mut chain: Vec<PathBuf> = dir.ancestors().map(Path::to_path_buf).collect();
        chain.reverse();
        for d in chain {
            if self.created.contains(&d) || self.cover(&d) == Cover::Host {
                continue;
            }
            plan.push((
                Op::Mkdir {
                    path: cpath(&self.staged(&d)),
                    mode: 0o755,
                },
                format!("creating {} in the sandbox", d.display()),
            ));
            self.created.push(d);
        }
    }

    /// A file mount point on a fresh filesystem (its parent is created as needed).
    pub fn touch(&mut self, file: &Path, mode: libc::mode_t, plan: &mut Vec<(Op, String)>) {
        if let Some(parent) = file.parent() {
            self.mkdir_p(parent, plan);
        }
        if self.cover(file) == Cover::Host || self.created.iter().any(|c| c == file) {
            return;
        }
        plan.push((
            Op::Touch {
                path: cpath(&self.staged(file)),
                mode,
            },
            format!("creating {} in the sandbox", file.display()),
        ));
        self.created.push(file.to_path_buf());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mkdir_p_creates_only_on_fresh_filesystems() {
        let mut l = Layout::new(PathBuf::from("/stage"));
        l.mounted(Path::new("/usr"), Cover::Host);
        let mut ops = Vec::new();
        l.mkdir_p(Path::new("/home/a/proj"), &mut ops);
        let texts: Vec<&str> = ops.iter().map(|(_, t)| t.as_str()).collect();
        assert_eq!(
            texts,
            vec![
                "creating /home in the sandbox",
                "creating /home/a in the sandbox",
                "creating /home/a/proj in the sandbox"
            ]
        );
        ops.clear();
        l.mkdir_p(Path::new("/usr/local/x"), &mut ops);
        assert!(ops.is_empty(), "inside a host tree nothing is created");
        l.mkdir_p(Path::new("/home/a/other"), &mut ops);
        assert_eq!(ops.len(), 1);
        assert_eq!(
            l.staged(Path::new("/home/a")),
            PathBuf::from("/stage/home/a")
        );
        assert_eq!(l.staged(Path::new("/")), PathBuf::from("/stage"));
    }
}
