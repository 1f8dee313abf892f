//! The exec sandbox: every command in a sandbox of its own (DESIGN.md, "The exec sandbox").
//!
//! [`prepare`] checks a [`SandboxSpec`] and computes everything (grants, masks, mounts,
//! environment, program, limits, seccomp and Landlock rules) without creating anything; the
//! caller can then apply its command policy to [`Prepared::program`]. [`Prepared::spawn`] makes
//! one `clone` with new user, mount, pid, network, IPC and UTS namespaces. The child is the
//! sandbox's init (pid 1): it maps the caller's uid and gid, builds a fresh root (tmpfs) holding
//! the system directories read-only, the grants, a private `/tmp`, a home, a minimal `/dev` and a
//! new `/proc`, masks protected paths, pivots into it, and forks the command, which starts a new
//! session, gets its limits, drops every capability, and applies Landlock and the seccomp
//! denylist before `exec`. When the command ends, init exits and the kernel kills everything
//! left in the pid namespace. Killing init (timeout, stop) kills the whole sandbox.
//!
//! The caller (the exec-helper, or `gatehouse sandbox`) must not be root: see [`identity`].

mod child;
pub(crate) mod denylist;
/// The environment rules are portable (the Windows exec-helper applies the same ones).
pub use crate::command_env as env;
pub mod fdpass;
mod flat;
mod gitconfig;
pub mod identity;
mod landlock_rules;
pub mod not_held;
mod plan;
pub mod policy;
#[cfg(feature = "test-hooks")]
pub mod probe;
pub mod project;
mod protected;
pub mod watch;

pub use denylist::refused_syscall_count;
pub use ipc_schema::exec::{
    GrantAccess, Hide, Limits, PathGrant, SandboxReport, PROXY_BRIDGE_PORT,
};
pub use ipc_schema::tier::ConfinementTier;
pub use landlock_rules::{kernel_abi as landlock_kernel_abi, FULL_ABI as LANDLOCK_FULL_ABI};
pub use protected::{GIT_PROTECTED, NOT_GRANTABLE};
pub use watch::{Kill, Stream, Watch};

use child::Record;
use plan::{cpath, cstr, Cover, Layout, Op, Plan};
use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

/// What a command runs with.
pub struct SandboxSpec {
    /// The program (a path, or a name looked up in the sandbox's `PATH`) and its arguments.
    pub argv: Vec<String>,
    /// Absolute; must lie inside a grant.
    pub cwd: PathBuf,
    pub grants: Vec<PathGrant>,
    /// Variables asked for (filtered by [`env::build`]).
    pub env: Vec<(String, String)>,
    /// The user's home: a fresh tmpfs unless a grant covers it (and the command's `HOME`
    /// unless `state_home` is given).
    pub home: PathBuf,
    /// A directory gatehouse keeps for this command's state (an agent's login and settings
    /// under `gatehouse run`), made its `HOME` instead of `home`. The caller grants it; it is
    /// not a user's home, so no login shell ever reads what is written there. It must lie
    /// directly in one of `protect` (gatehouse's agent-state directory), which no other grant
    /// may then hold.
    pub state_home: Option<PathBuf>,
    pub network: Network,
    pub limits: Limits,
    /// An agent session (`gatehouse run`): `limits` are checked against a long run's time and
    /// output ceilings, not a command's.
    pub long_run: bool,
    /// More paths to mask and never grant (gatehouse's config, data and runtime directories).
    pub protect: Vec<PathBuf>,
    /// Run with less than the full sandbox when the kernel lacks a mechanism (each gap is named
    /// in [`SandboxReport::degraded`]).
    pub allow_degraded: bool,
    /// What else is masked in the grants (an agent's grant's exclude globs, secret files).
    pub hide: Hide,
    /// The confinement to run under: the exec helper's, chosen once at its lockdown.
    pub tier: ConfinementTier,
}

/// The command's network.
pub enum Network {
    None,
    /// Through the egress proxy: a listener on 127.0.0.1:[`PROXY_BRIDGE_PORT`] inside hands each
    /// connection to `connector` (see `ipc_schema::exec`).
    Proxy {
        connector: OwnedFd,
        token: String,
    },
}

/// Why a command was not started.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    Refused(String),
    #[error("{program}: command not found in the sandbox (searched {searched})")]
    NotFound { program: String, searched: String },
    #[error("{0}")]
    Kernel(String),
    /// The machine refuses the sandbox's user namespace; says which check and the remedy.
    #[error("cannot create the sandbox's namespaces: {0}")]
    Namespaces(crate::linux::userns::Diagnosis),
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: io::Error,
    },
}

fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> SandboxError {
    let what = what.into();
    move |source| SandboxError::Io { what, source }
}

/// The system directories every command sees read-only (those that exist; symbolic links such
/// as `/bin -> usr/bin` are recreated as links).
pub const SYSTEM_DIRS: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt", "/nix",
];

/// Device nodes bound into the sandbox's `/dev`.
const DEVICES: &[&str] = &["null", "zero", "full", "random", "urandom"];

/// The stack of the command process between its start and its exec (see child.rs).
const COMMAND_STACK: usize = 128 * 1024;

/// Sizes of the sandbox's own filesystems.
const ROOT_TMPFS: &str = "mode=0755,size=1m,nr_inodes=4096";
const TMP_TMPFS: &str = "mode=1777,size=1g";
const HOME_TMPFS: &str = "mode=0700,size=512m";
const SHM_TMPFS: &str = "mode=1777,size=256m";
const DEV_TMPFS: &str = "mode=0755,size=64k,nr_inodes=64";

/// A sandbox ready to start.
pub struct Prepared {
    plan: Plan,
    connector: Option<OwnedFd>,
    /// The connector of [`Prepared::bridge_unix_socket`].
    unix_connector: Option<OwnedFd>,
    /// The sandbox's end of [`Prepared::stdio_socket`].
    stdio: Option<OwnedFd>,
    /// `argv[0]` resolved in the sandbox's view (symbolic links followed): what a command policy
    /// judges.
    pub program: PathBuf,
    pub report: SandboxReport,
    /// What the writable grants held before, for [`Sandboxed::sweep`].
    snapshot: project::Snapshot,
    /// The landlock tier's proxy bridge listener (on the host's loopback).
    listener: Option<OwnedFd>,
    /// The landlock tier's private directory (the command's tmp and home).
    private: Option<flat::PrivateDir>,
}

impl std::fmt::Debug for Prepared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prepared")
            .field("program", &self.program)
            .field("report", &self.report)
            .finish()
    }
}

struct Grant {
    path: PathBuf,
    write: bool,
    is_dir: bool,
}

/// Checks `spec` and plans the sandbox. Creates nothing on the host but its staging directory.
pub fn prepare(mut spec: SandboxSpec) -> Result<Prepared, SandboxError> {
    let uid = nix::unistd::geteuid().as_raw();
    let gid = nix::unistd::getegid().as_raw();
    if uid == 0 || gid == 0 {
        return Err(SandboxError::Refused(
            "commands never run as root: the caller must first become an unprivileged user (sandbox::linux::command::identity)".into(),
        ));
    }
    if spec.argv.is_empty() || spec.argv[0].is_empty() {
        return Err(SandboxError::Invalid("no command given".into()));
    }
    if spec.argv.iter().any(|a| a.contains('\0')) {
        return Err(SandboxError::Invalid(
            "an argument contains a NUL byte".into(),
        ));
    }
    spec.limits
        .check_with(spec.long_run)
        .map_err(SandboxError::Invalid)?;
    let mut degraded = Vec::new();
    let abi = landlock_rules::kernel_abi();
    if spec.tier == ConfinementTier::Landlock {
        let proxy = matches!(spec.network, Network::Proxy { .. });
        if let Some(why) = flat::refusal(abi, proxy) {
            return Err(SandboxError::Kernel(why));
        }
    }
    if abi < landlock_rules::FULL_ABI && !spec.allow_degraded {
        return Err(SandboxError::Kernel(format!(
            "the kernel offers Landlock ABI {abi}; commands need ABI {} (scoped abstract sockets and signals). Start with --allow-degraded to run with less",
            landlock_rules::FULL_ABI
        )));
    }

    // Grants: absolute, resolved, allowed.
    let homes = protected::homes(&spec.home);
    let protect: Vec<PathBuf> = spec
        .protect
        .iter()
        .map(|p| std::fs::canonicalize(p).unwrap_or_else(|_| p.clone()))
        .collect();
    // An agent's own state directory: the one grant allowed inside gatehouse's agent-state
    // directory (one of `protect`), whose other entries (other agents' logins) no grant may
    // show. That directory cannot be listed by the agent's user, so instead of masking each
    // other entry, a grant that would show it is refused.
    let state = match &spec.state_home {
        None => None,
        Some(h) => {
            let h = std::fs::canonicalize(h).map_err(io_err(format!(
                "the agent's state directory {}",
                h.display()
            )))?;
            let Some(root) = h.parent().filter(|r| protect.iter().any(|p| p == r)) else {
                return Err(SandboxError::Refused(format!(
                    "the agent's state directory {} is not in gatehouse's agent-state directory",
                    h.display()
                )));
            };
            let root = root.to_path_buf();
            Some((h, root))
        }
    };
    let mut grants: Vec<Grant> = Vec::new();
    for g in &spec.grants {
        if !g.path.is_absolute() {
            return Err(SandboxError::Invalid(format!(
                "grant {} is not an absolute path",
                g.path.display()
            )));
        }
        let path = std::fs::canonicalize(&g.path)
            .map_err(io_err(format!("grant {}", g.path.display())))?;
        let own_state = state.as_ref().is_some_and(|(h, _)| *h == path);
        let refusal = match &state {
            _ if own_state => None,
            Some((_, root)) if root.starts_with(&path) => Some(format!(
                "it holds gatehouse's agent-state directory {}, where other agents keep their logins; grant the directories the agent needs",
                root.display()
            )),
            _ => protected::refuse_grant(&path, &protect),
        };
        if let Some(why) = refusal {
            return Err(SandboxError::Refused(format!(
                "cannot grant {}: {why}",
                g.path.display()
            )));
        }
        let write = g.access == GrantAccess::ReadWrite;
        if write && !own_state {
            if let Some(why) = protected::refuse_write_grant(&path, &homes, &protect) {
                return Err(SandboxError::Refused(format!(
                    "cannot grant {} read-write: {why}",
                    g.path.display()
                )));
            }
        }
        let is_dir = std::fs::metadata(&path)
            .map_err(io_err(format!("grant {}", path.display())))?
            .is_dir();
        match grants.iter_mut().find(|x| x.path == path) {
            Some(x) => x.write |= write,
            None => grants.push(Grant {
                path,
                write,
                is_dir,
            }),
        }
    }
    // Parents before children, so a nested grant is mounted on top of its parent.
    grants.sort_by_key(|g| g.path.components().count());

    let cwd = std::fs::canonicalize(&spec.cwd)
        .map_err(io_err(format!("working directory {}", spec.cwd.display())))?;
    if !grants.iter().any(|g| g.is_dir && cwd.starts_with(&g.path)) {
        return Err(SandboxError::Refused(format!(
            "the working directory {} is not inside any grant",
            cwd.display()
        )));
    }
    // The sandbox's own state directory is the one place inside a protected directory it may
    // work in (a third-party server starts there).
    let in_own_state = state.as_ref().is_some_and(|(h, _)| cwd.starts_with(h));
    if !in_own_state && protected::refuse_grant(&cwd, &protect).is_some() {
        return Err(SandboxError::Refused(format!(
            "the working directory {} is a protected path",
            cwd.display()
        )));
    }

    // Masks: protected paths made visible by a (read-only) grant, and .git in every grant.
    let grant_paths: Vec<PathBuf> = grants.iter().map(|g| g.path.clone()).collect();
    let mut masks: Vec<PathBuf> = Vec::new();
    for m in protected::masks(&grant_paths, &homes, &protect) {
        // A protected link is masked where it points, when that is visible at all.
        match std::fs::canonicalize(&m) {
            Ok(real) if grant_paths.iter().any(|g| real.starts_with(g)) => masks.push(real),
            _ => {}
        }
    }
    // Read-only grants: the git dirs at their top and one level down keep hooks and config
    // hidden. Writable grants: everything `project` finds at any depth.
    for g in grants.iter().filter(|g| g.is_dir && !g.write) {
        let mut found = protected::git_dirs(&g.path);
        if g.path.file_name().is_some_and(|n| n == ".git") {
            found.push(g.path.clone());
        }
        for dir in found {
            for name in GIT_PROTECTED {
                let p = dir.join(name);
                if std::fs::symlink_metadata(&p).is_ok() {
                    masks.push(p);
                }
            }
        }
    }
    let mut exempt: Vec<PathBuf> = protect.clone();
    if let Some((h, _)) = &state {
        exempt.push(h.clone());
    }
    let writable: Vec<PathBuf> = grants
        .iter()
        .filter(|g| g.write && g.is_dir)
        .map(|g| g.path.clone())
        .collect();
    let found = project::before(&writable, &exempt, &spec.home).map_err(SandboxError::Refused)?;
    if let Some(first) = found.refusals.first() {
        let more = found.refusals.len() - 1;
        return Err(SandboxError::Refused(if more == 0 {
            first.clone()
        } else {
            format!(
                "{first} (and {more} more: {})",
                found.refusals[1..].join("; ")
            )
        }));
    }
    masks.extend(found.masks.iter().cloned());
    let dirs: Vec<PathBuf> = grants
        .iter()
        .filter(|g| g.is_dir)
        .map(|g| g.path.clone())
        .collect();
    masks.extend(project::hidden(&dirs, &exempt, &spec.hide).map_err(SandboxError::Refused)?);
    // A state home is the agent's own: nothing in it is masked.
    masks.retain(|m| !exempt[protect.len()..].iter().any(|e| m.starts_with(e)));
    masks.sort();
    masks.dedup();
    // A mask inside another is hidden already (and its path does not exist under the outer
    // mask, so mounting it would fail).
    let outer = masks.clone();
    masks.retain(|m| !outer.iter().any(|o| o != m && m.starts_with(o)));

    // The environment and the program.
    let user = identity::user_name(uid);
    let (network, connector, token) = match std::mem::replace(&mut spec.network, Network::None) {
        Network::None => (false, None, None),
        Network::Proxy { connector, token } => {
            if token.is_empty()
                || !token
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.~".contains(&b))
            {
                return Err(SandboxError::Invalid(
                    "the proxy token must be non-empty and URL-safe (letters, digits, - _ . ~)"
                        .into(),
                ));
            }
            (true, Some(connector), Some(token))
        }
    };
    if spec.tier == ConfinementTier::Landlock {
        return flat_prepare(
            spec,
            Checked {
                uid,
                gid,
                abi,
                degraded,
                user,
                grants,
                cwd,
                masks,
                found,
                connector,
                token,
            },
        );
    }
    let built = env::build(
        &spec.env,
        &env::SandboxEnv {
            home: spec.state_home.as_deref().unwrap_or(&spec.home),
            tmp: Path::new("/tmp"),
            user: &user,
            proxy_url: token.as_ref().map(|t| proxy_url(t, PROXY_BRIDGE_PORT)),
        },
    );

    let stage = staging_dir()?;
    let mut layout = Layout::new(stage.clone());
    let mut ops: Vec<(Op, String)> = Vec::new();
    let mut slots = 0usize;

    // Identity: the caller's uid and gid, and nothing else, exist inside.
    ops.push((
        Op::WriteFile {
            path: cstr("/proc/self/setgroups"),
            data: cstr("deny"),
        },
        "denying setgroups in the sandbox's user namespace".into(),
    ));
    ops.push((
        Op::WriteFile {
            path: cstr("/proc/self/uid_map"),
            data: cstr(&format!("{uid} {uid} 1")),
        },
        format!("mapping uid {uid} into the sandbox"),
    ));
    ops.push((
        Op::WriteFile {
            path: cstr("/proc/self/gid_map"),
            data: cstr(&format!("{gid} {gid} 1")),
        },
        format!("mapping gid {gid} into the sandbox"),
    ));
    ops.push((Op::MakePrivate, "making all mounts private".into()));

    // Phase 1, in the host's view: take a detached copy of every tree the sandbox shows.
    enum Placed {
        Tree(usize, PathBuf),
        Link(PathBuf, PathBuf),
    }
    let mut system: Vec<Placed> = Vec::new();
    let ro = child_attr::RDONLY | child_attr::NOSUID | child_attr::NODEV;
    for d in SYSTEM_DIRS {
        let p = Path::new(d);
        if grants.iter().any(|g| p.starts_with(&g.path)) {
            continue; // a grant covers it
        }
        let Ok(meta) = std::fs::symlink_metadata(p) else {
            continue;
        };
        if meta.file_type().is_symlink() {
            if let Ok(target) = std::fs::read_link(p) {
                system.push(Placed::Link(p.to_path_buf(), target));
            }
        } else if meta.is_dir() {
            ops.push((
                Op::CloneTree {
                    src: cpath(p),
                    slot: slots,
                    attr_set: ro,
                },
                format!("copying {d} read-only"),
            ));
            system.push(Placed::Tree(slots, p.to_path_buf()));
            slots += 1;
        }
    }
    let mut grant_slots = Vec::new();
    for g in &grants {
        let attr = if g.write {
            child_attr::NOSUID | child_attr::NODEV
        } else {
            ro
        };
        ops.push((
            Op::CloneTree {
                src: cpath(&g.path),
                slot: slots,
                attr_set: attr,
            },
            format!(
                "copying grant {} {}",
                g.path.display(),
                if g.write { "read-write" } else { "read-only" }
            ),
        ));
        grant_slots.push(slots);
        slots += 1;
    }

    // Phase 2: the new root, built under the stage.
    ops.push((
        Op::Mount {
            src: Some(cstr("tmpfs")),
            target: cpath(&stage),
            fstype: Some(cstr("tmpfs")),
            flags: libc::MS_NOSUID | libc::MS_NODEV,
            data: Some(cstr(ROOT_TMPFS)),
        },
        "mounting the sandbox's root (tmpfs)".into(),
    ));
    for s in &system {
        match s {
            Placed::Link(link, target) => ops.push((
                Op::Symlink {
                    target: cpath(target),
                    link: cpath(&layout.staged(link)),
                },
                format!("linking {} -> {}", link.display(), target.display()),
            )),
            Placed::Tree(slot, p) => {
                layout.mkdir_p(p, &mut ops);
                ops.push((
                    Op::MoveTree {
                        slot: *slot,
                        target: cpath(&layout.staged(p)),
                    },
                    format!("attaching {} read-only", p.display()),
                ));
                layout.mounted(p, Cover::Host);
            }
        }
    }
    let tmp = Path::new("/tmp");
    let tmp_private = !grants.iter().any(|g| tmp.starts_with(&g.path));
    if tmp_private {
        fresh_tmpfs(
            &mut layout,
            &mut ops,
            tmp,
            TMP_TMPFS,
            libc::MS_NOSUID | libc::MS_NODEV,
        );
    }
    layout.mkdir_p(Path::new("/var"), &mut ops);
    let var_tmp = Path::new("/var/tmp");
    if grants.iter().any(|g| g.path.starts_with(var_tmp)) {
        // A grant under /var/tmp keeps its name: /var/tmp is a private tmpfs of its own here
        // (a link to /tmp would move the grant, and the working directory, under /tmp).
        if layout.cover(var_tmp) == Cover::Fresh {
            fresh_tmpfs(
                &mut layout,
                &mut ops,
                var_tmp,
                TMP_TMPFS,
                libc::MS_NOSUID | libc::MS_NODEV,
            );
        }
    } else if layout.cover(Path::new("/var")) == Cover::Fresh {
        ops.push((
            Op::Symlink {
                target: cstr("../tmp"),
                link: cpath(&layout.staged(Path::new("/var/tmp"))),
            },
            "linking /var/tmp -> /tmp".into(),
        ));
    }
    let home_private = !grants.iter().any(|g| spec.home.starts_with(&g.path));
    if home_private {
        fresh_tmpfs(
            &mut layout,
            &mut ops,
            &spec.home,
            HOME_TMPFS,
            libc::MS_NOSUID | libc::MS_NODEV,
        );
    }
    build_dev(&mut layout, &mut ops);
    layout.mkdir_p(Path::new("/proc"), &mut ops);
    ops.push((
        Op::Mount {
            src: Some(cstr("proc")),
            target: cpath(&layout.staged(Path::new("/proc"))),
            fstype: Some(cstr("proc")),
            flags: libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            data: None,
        },
        "mounting /proc for the sandbox's pid namespace (this fails when the host's /proc is partly hidden, as in some containers)".into(),
    ));
    for (g, slot) in grants.iter().zip(&grant_slots) {
        if g.is_dir {
            layout.mkdir_p(&g.path, &mut ops);
        } else {
            layout.touch(&g.path, 0o644, &mut ops);
        }
        ops.push((
            Op::MoveTree {
                slot: *slot,
                target: cpath(&layout.staged(&g.path)),
            },
            format!("attaching grant {}", g.path.display()),
        ));
        layout.mounted(&g.path, Cover::Host);
    }
    // Pins: a mount point cannot be renamed or removed, so no protected place (nor a git dir)
    // can be replaced by moving it, or a directory above it, away. Shallow first, so that each
    // later mount lands on top of the earlier ones.
    let mut pins = found.pins.clone();
    pins.sort_by_key(|p| p.components().count());
    for d in &pins {
        let s = cpath(&layout.staged(d));
        ops.push((
            Op::Mount {
                src: Some(s.clone()),
                target: s,
                fstype: None,
                flags: libc::MS_BIND | libc::MS_REC,
                data: None,
            },
            format!("pinning {}", d.display()),
        ));
    }
    // Read, never written: bound onto themselves read-only.
    for p in &found.read_only {
        let s = cpath(&layout.staged(p));
        ops.push((
            Op::Mount {
                src: Some(s.clone()),
                target: s.clone(),
                fstype: None,
                flags: libc::MS_BIND | libc::MS_REC,
                data: None,
            },
            format!("binding {} for read-only", p.display()),
        ));
        ops.push((
            Op::remount_read_only(s, libc::MS_NOSUID | libc::MS_NODEV),
            format!("making {} read-only", p.display()),
        ));
    }
    if !masks.is_empty() {
        let mask_dir = layout.staged(Path::new("/.gatehouse-mask-dir"));
        let mask_file = layout.staged(Path::new("/.gatehouse-mask-file"));
        ops.push((
            Op::Mkdir {
                path: cpath(&mask_dir),
                mode: 0,
            },
            "creating the directory mask".into(),
        ));
        ops.push((
            Op::Touch {
                path: cpath(&mask_file),
                mode: 0,
            },
            "creating the file mask".into(),
        ));
        for m in &masks {
            let is_dir = std::fs::metadata(m).map(|x| x.is_dir()).unwrap_or(false);
            let target = cpath(&layout.staged(m));
            ops.push((
                Op::Mount {
                    src: Some(cpath(if is_dir { &mask_dir } else { &mask_file })),
                    target: target.clone(),
                    fstype: None,
                    flags: libc::MS_BIND,
                    data: None,
                },
                format!("masking {}", m.display()),
            ));
            ops.push((
                Op::remount_read_only(target, libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC),
                format!("making the mask on {} read-only", m.display()),
            ));
        }
        ops.push((
            Op::Remove {
                path: cpath(&mask_dir),
                dir: true,
            },
            "removing the directory mask's source".into(),
        ));
        ops.push((
            Op::Remove {
                path: cpath(&mask_file),
                dir: false,
            },
            "removing the file mask's source".into(),
        ));
    }
    ops.push((
        Op::PivotRoot {
            root: cpath(&stage),
        },
        "switching to the sandbox's root".into(),
    ));
    ops.push((
        Op::remount_read_only(cstr("/"), libc::MS_NOSUID | libc::MS_NODEV),
        "making the sandbox's root read-only".into(),
    ));

    // Landlock, in the sandbox's view.
    use landlock_rules::{Rule, ACCESS_FS_IOCTL_DEV, ACCESS_FS_WRITE_FILE, READ, WRITE};
    let mut rules = vec![Rule {
        path: cstr("/"),
        is_dir: true,
        access: READ,
    }];
    for g in grants.iter().filter(|g| g.write) {
        rules.push(Rule {
            path: cpath(&g.path),
            is_dir: g.is_dir,
            access: READ | WRITE,
        });
    }
    if tmp_private {
        rules.push(Rule {
            path: cstr("/tmp"),
            is_dir: true,
            access: READ | WRITE,
        });
    }
    if home_private {
        rules.push(Rule {
            path: cpath(&spec.home),
            is_dir: true,
            access: READ | WRITE,
        });
    }
    rules.push(Rule {
        path: cstr("/dev"),
        is_dir: true,
        access: READ | ACCESS_FS_WRITE_FILE | ACCESS_FS_IOCTL_DEV,
    });
    rules.push(Rule {
        path: cstr("/dev/shm"),
        is_dir: true,
        access: READ | WRITE,
    });
    let tcp = if network {
        landlock_rules::Tcp::Open
    } else {
        landlock_rules::Tcp::Closed
    };
    let ll = landlock_rules::plan(abi, tcp, true, rules);
    degraded.extend(ll.missing.iter().cloned());
    let landlock_abi = if ll.plan.is_some() { ll.abi } else { 0 };

    // The program, as the sandbox will see it.
    let path_var = path_of(&built);
    let (exec_path, program) = resolve_program(&spec.argv[0], &path_var, &cwd, &|p| {
        layout.cover(p) == Cover::Host
    })?;

    let (ops, op_text): (Vec<Op>, Vec<String>) = ops.into_iter().unzip();
    let mut plan = command_plan(&spec, &cwd, &exec_path, &built, ll.plan, network);
    plan.ops = ops;
    plan.op_text = op_text;
    plan.slots = vec![-1; slots];
    let mut report = report(&spec, &exec_path, (uid, gid), landlock_abi, built, degraded);
    report.namespaces = ["user", "mount", "pid", "net", "ipc", "uts"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    report.masked = masks;
    Ok(prepared(plan, connector, program, report, found.snapshot))
}

/// The report of a planned command (no namespaces, nothing masked yet).
fn report(
    spec: &SandboxSpec,
    exec_path: &Path,
    (uid, gid): (u32, u32),
    landlock_abi: u32,
    built: env::Built,
    degraded: Vec<String>,
) -> SandboxReport {
    SandboxReport {
        program: exec_path.to_string_lossy().into_owned(),
        tier: spec.tier,
        namespaces: Vec::new(),
        uid,
        gid,
        landlock_abi,
        seccomp_denylist: true,
        masked: Vec::new(),
        env_dropped: built.dropped,
        degraded,
    }
}

fn prepared(
    plan: Plan,
    connector: Option<OwnedFd>,
    program: PathBuf,
    report: SandboxReport,
    snapshot: project::Snapshot,
) -> Prepared {
    Prepared {
        plan,
        connector,
        unix_connector: None,
        stdio: None,
        program,
        report,
        snapshot,
        listener: None,
        private: None,
    }
}

/// The `PATH` the command gets.
fn path_of(built: &env::Built) -> String {
    built
        .vars
        .iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.clone())
        .unwrap_or_default()
}

/// The proxy's address as the command's proxy variables give it.
fn proxy_url(token: &str, port: u16) -> String {
    format!("http://gatehouse:{token}@127.0.0.1:{port}")
}

/// The plan of what both tiers' command process does (no ops yet), sealed.
fn command_plan(
    spec: &SandboxSpec,
    cwd: &Path,
    exec_path: &Path,
    built: &env::Built,
    landlock: Option<landlock_rules::LandlockPlan>,
    inet: bool,
) -> Plan {
    let flat = spec.tier == ConfinementTier::Landlock;
    let mut plan = Plan {
        ops: Vec::new(),
        op_text: Vec::new(),
        slots: Vec::new(),
        keep_fds: Vec::new(),
        report_fd: -1,
        stdout_w: -1,
        stderr_w: -1,
        stdio: -1,
        hostname: cstr("gatehouse"),
        landlock,
        bridge: None,
        unix_bridge: None,
        cwd: cpath(cwd),
        exec_path: cpath(exec_path),
        argv: spec.argv.iter().map(|a| cstr(a)).collect(),
        argv_ptrs: Vec::new(),
        envp: built
            .vars
            .iter()
            .map(|(k, v)| cstr(&format!("{k}={v}")))
            .collect(),
        envp_ptrs: Vec::new(),
        rlimits: rlimits(&spec.limits),
        seccomp: denylist::program(spec.tier, inet),
        dev_null: cstr("/dev/null"),
        command_stack: vec![0; COMMAND_STACK],
        flat,
        bridge_listener: -1,
        kill_stack: if flat {
            vec![0; KILL_STACK]
        } else {
            Vec::new()
        },
    };
    plan.seal();
    plan
}

/// How many pids the landlock tier's init can hold while it walks the command's tree at once
/// (more are found on its next walk).
const KILL_STACK: usize = 16 * 1024;

/// What `prepare` checked and found, for the landlock tier's own planning.
struct Checked {
    uid: u32,
    gid: u32,
    abi: u32,
    degraded: Vec<String>,
    user: String,
    grants: Vec<Grant>,
    cwd: PathBuf,
    masks: Vec<PathBuf>,
    found: project::Found,
    connector: Option<OwnedFd>,
    token: Option<String>,
}

/// The landlock tier's plan (see `flat`): the same checks, environment, limits and filters,
/// the host's filesystem under Landlock rules instead of a view of mounts.
fn flat_prepare(spec: SandboxSpec, c: Checked) -> Result<Prepared, SandboxError> {
    let Checked {
        uid,
        gid,
        abi,
        mut degraded,
        user,
        grants,
        cwd,
        masks,
        mut found,
        connector,
        token,
    } = c;
    let writable = |p: &Path| grants.iter().any(|g| g.write && p.starts_with(&g.path));
    // Git's control files in writable grants stay writable here: keep them to put back.
    let writable_controls: Vec<PathBuf> = found
        .git_controls
        .iter()
        .filter(|p| writable(p))
        .cloned()
        .collect();
    found
        .snapshot
        .keep_controls(&writable_controls)
        .map_err(SandboxError::Refused)?;
    let stage = staging_dir()?;
    // Every command's private directory is there, owned by the same user: a grant holding it
    // would show the others'.
    if let Some(g) = grants.iter().find(|g| stage.starts_with(&g.path)) {
        return Err(SandboxError::Refused(format!(
            "cannot grant {} in the landlock tier: it holds {}, where other commands keep their private directories; grant a directory inside it",
            g.path.display(),
            stage.display()
        )));
    }
    let private = flat::PrivateDir::create(&stage)?;
    // The proxy bridge listens on the host's loopback, on a port of the helper's bridge block
    // (the kernel's choice where it has none).
    let listener = match &connector {
        Some(_) => Some(crate::linux::bridge_ports::listen().map_err(io_err(
            "listening on the host's loopback for the proxy bridge",
        ))?),
        None => None,
    };
    let port = match &listener {
        Some(l) => Some(
            l.local_addr()
                .map_err(io_err("reading the proxy bridge's port"))?
                .port(),
        ),
        None => None,
    };
    // Holes: what is masked (but git's control files in writable grants, which the sweep
    // restores), what is read-only in a writable grant, and read-only grants inside writable
    // ones.
    let mut holes: Vec<flat::Hole> = masks
        .iter()
        .filter(|m| !(found.git_controls.contains(m) && writable(m)))
        .map(|m| flat::Hole {
            path: m.clone(),
            rights: 0,
        })
        .collect();
    holes.extend(found.read_only.iter().map(|p| flat::Hole {
        path: p.clone(),
        rights: landlock_rules::READ,
    }));
    holes.extend(
        grants
            .iter()
            .filter(|g| !g.write && writable(&g.path))
            .map(|g| flat::Hole {
                path: g.path.clone(),
                rights: landlock_rules::READ,
            }),
    );
    let roots = flat::Roots {
        grants: grants
            .iter()
            .map(|g| (g.path.clone(), g.write, g.is_dir))
            .collect(),
        private: &private,
        holes,
    };
    let (rules, hidden) = flat::rules(&roots)?;
    let ll = landlock_rules::plan(abi, flat::tcp(port), false, rules);
    degraded.extend(ll.missing.iter().cloned());
    let landlock_abi = if ll.plan.is_some() { ll.abi } else { 0 };

    let home_granted = grants.iter().any(|g| spec.home.starts_with(&g.path));
    let home = match &spec.state_home {
        Some(h) => h.clone(),
        None if home_granted => spec.home.clone(),
        None => private.home(),
    };
    let built = env::build(
        &spec.env,
        &env::SandboxEnv {
            home: &home,
            tmp: &private.tmp(),
            user: &user,
            proxy_url: match (&token, port) {
                (Some(t), Some(p)) => Some(proxy_url(t, p)),
                _ => None,
            },
        },
    );
    let path_var = path_of(&built);
    let readable = |p: &Path| {
        let in_system = SYSTEM_DIRS.iter().any(|d| p.starts_with(d));
        let in_grant = grants.iter().any(|g| p.starts_with(&g.path));
        (in_system || in_grant) && !hidden.iter().any(|h| p.starts_with(h))
    };
    let (exec_path, program) = resolve_program(&spec.argv[0], &path_var, &cwd, &readable)?;
    let mut plan = command_plan(&spec, &cwd, &exec_path, &built, ll.plan, port.is_some());
    if let Some(l) = &listener {
        plan.bridge_listener = l.as_raw_fd();
    }
    // Outside a user namespace of its own, RLIMIT_NPROC counts every process and thread of the
    // user on the host: the command gets its processes on top of what the user runs now.
    let running = flat::user_tasks(uid);
    for (res, lim) in plan.rlimits.iter_mut() {
        if *res == libc::RLIMIT_NPROC {
            *lim = hard_capped(*res, spec.limits.processes.saturating_add(running));
        }
    }
    let mut report = report(&spec, &exec_path, (uid, gid), landlock_abi, built, degraded);
    report.masked = hidden;
    let mut p = prepared(plan, connector, program, report, found.snapshot);
    p.listener = listener.map(OwnedFd::from);
    p.private = Some(private);
    Ok(p)
}

/// Mount flags for `mount_setattr`.
mod child_attr {
    pub const RDONLY: u64 = 0x1;
    pub const NOSUID: u64 = 0x2;
    pub const NODEV: u64 = 0x4;
}

/// Where the new root is assembled: a directory of the host (in the sandbox's private mount
/// namespace, so covering it hides nothing from anyone else).
fn staging_dir() -> Result<PathBuf, SandboxError> {
    for d in ["/tmp", "/mnt", "/var/tmp"] {
        if std::fs::symlink_metadata(d).is_ok_and(|m| m.is_dir()) {
            return Ok(PathBuf::from(d));
        }
    }
    Err(SandboxError::Kernel(
        "no directory to assemble the sandbox's root on (/tmp, /mnt and /var/tmp are missing)"
            .into(),
    ))
}

fn fresh_tmpfs(
    layout: &mut Layout,
    ops: &mut Vec<(Op, String)>,
    at: &Path,
    data: &str,
    flags: libc::c_ulong,
) {
    layout.mkdir_p(at, ops);
    ops.push((
        Op::Mount {
            src: Some(cstr("tmpfs")),
            target: cpath(&layout.staged(at)),
            fstype: Some(cstr("tmpfs")),
            flags,
            data: Some(cstr(data)),
        },
        format!("mounting a private {} (tmpfs)", at.display()),
    ));
    layout.mounted(at, Cover::Fresh);
}

/// A minimal `/dev`: null, zero, full, random, urandom, a private devpts, shm, and the usual
/// links; then read-only.
fn build_dev(layout: &mut Layout, ops: &mut Vec<(Op, String)>) {
    let dev = Path::new("/dev");
    fresh_tmpfs(
        layout,
        ops,
        dev,
        DEV_TMPFS,
        libc::MS_NOSUID | libc::MS_NOEXEC,
    );
    for d in DEVICES {
        let p = dev.join(d);
        layout.touch(&p, 0o666, ops);
        ops.push((
            Op::Mount {
                src: Some(cpath(&p)),
                target: cpath(&layout.staged(&p)),
                fstype: None,
                flags: libc::MS_BIND,
                data: None,
            },
            format!("binding {}", p.display()),
        ));
    }
    let pts = dev.join("pts");
    layout.mkdir_p(&pts, ops);
    ops.push((
        Op::Mount {
            src: Some(cstr("devpts")),
            target: cpath(&layout.staged(&pts)),
            fstype: Some(cstr("devpts")),
            flags: libc::MS_NOSUID | libc::MS_NOEXEC,
            data: Some(cstr("newinstance,ptmxmode=0666,mode=0620")),
        },
        "mounting a private /dev/pts".into(),
    ));
    let shm = dev.join("shm");
    layout.mkdir_p(&shm, ops);
    ops.push((
        Op::Mount {
            src: Some(cstr("tmpfs")),
            target: cpath(&layout.staged(&shm)),
            fstype: Some(cstr("tmpfs")),
            flags: libc::MS_NOSUID | libc::MS_NODEV,
            data: Some(cstr(SHM_TMPFS)),
        },
        "mounting a private /dev/shm".into(),
    ));
    for (link, target) in [
        ("ptmx", "pts/ptmx"),
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ] {
        ops.push((
            Op::Symlink {
                target: cstr(target),
                link: cpath(&layout.staged(&dev.join(link))),
            },
            format!("linking /dev/{link}"),
        ));
    }
    ops.push((
        Op::remount_read_only(
            cpath(&layout.staged(dev)),
            libc::MS_NOSUID | libc::MS_NOEXEC,
        ),
        "making /dev read-only".into(),
    ));
}

/// `argv0` as the sandbox will find it: the path to exec, and the resolved program (links
/// followed) for the command policy. Only host trees shown in the sandbox are searched.
/// `visible`: whether a host path (resolved) is there for the command.
fn resolve_program(
    argv0: &str,
    path_var: &str,
    cwd: &Path,
    visible: &dyn Fn(&Path) -> bool,
) -> Result<(PathBuf, PathBuf), SandboxError> {
    use std::os::unix::fs::PermissionsExt;
    let candidates: Vec<PathBuf> = if argv0.contains('/') {
        // Joined and without `.` components: `./x` reads as `/work/x`.
        vec![cwd.join(argv0).components().collect()]
    } else {
        path_var
            .split(':')
            .filter(|d| d.starts_with('/'))
            .map(|d| Path::new(d).join(argv0))
            .collect()
    };
    for c in &candidates {
        let Ok(real) = std::fs::canonicalize(c) else {
            continue;
        };
        if !visible(&real) {
            continue;
        }
        let Ok(meta) = std::fs::metadata(&real) else {
            continue;
        };
        // A path named outright is executed even without an execute bit, so that the command
        // fails the way a shell would say (permission denied, 126), not "not found".
        if meta.is_file() && (argv0.contains('/') || meta.permissions().mode() & 0o111 != 0) {
            return Ok((c.clone(), real));
        }
    }
    Err(SandboxError::NotFound {
        program: argv0.to_string(),
        searched: if argv0.contains('/') {
            cwd.join(argv0).display().to_string()
        } else {
            format!("PATH={path_var}")
        },
    })
}

/// The limits as rlimits, each capped at the current hard limit (raising one needs a
/// capability the sandbox does not have).
fn rlimits(l: &Limits) -> Vec<(libc::__rlimit_resource_t, libc::rlimit)> {
    let wanted = [
        (libc::RLIMIT_NPROC, l.processes),
        (libc::RLIMIT_FSIZE, l.file_size),
        (libc::RLIMIT_NOFILE, l.open_files),
        (libc::RLIMIT_AS, l.memory),
        (libc::RLIMIT_CORE, 0),
    ];
    wanted
        .iter()
        .map(|&(res, want)| (res, hard_capped(res, want)))
        .collect()
}

/// `want` as both limits of `res`, capped at the current hard limit.
fn hard_capped(res: libc::__rlimit_resource_t, want: u64) -> libc::rlimit {
    let mut cur = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we own.
    let hard = if unsafe { libc::getrlimit(res, &mut cur) } == 0 {
        cur.rlim_max
    } else {
        libc::RLIM_INFINITY
    };
    let v = want.min(hard);
    libc::rlimit {
        rlim_cur: v,
        rlim_max: v,
    }
}

/// What the report socket says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// The sandbox could not be built; the command did not start.
    SetupFailed { message: String },
    /// `execve` failed (the command did not start).
    ExecFailed { errno: i32, message: String },
    /// The sandbox is built; the command has started (it execs next).
    Started,
    /// The command ended with this wait status; the sandbox is being torn down.
    Exited { status: i32 },
}

/// A running sandbox.
pub struct Sandboxed {
    /// The host pid of the sandbox's init process.
    pub pid: u32,
    pidfd: OwnedFd,
    /// The read ends of the command's stdout and stderr (blocking, close-on-exec); no stdout
    /// when the command's stdout is its [`Prepared::stdio_socket`].
    pub stdout: Option<OwnedFd>,
    pub stderr: OwnedFd,
    events: OwnedFd,
    op_text: Vec<String>,
    /// Which ops are user-namespace steps (parallel to `op_text`).
    op_userns: Vec<Option<crate::linux::userns::Step>>,
    pub report: SandboxReport,
    reaped: bool,
    snapshot: project::Snapshot,
    /// The landlock tier: init ends the tree itself (see [`Sandboxed::kill`]).
    flat: bool,
    /// The landlock tier's private directory, removed once the sandbox is reaped.
    private: Option<flat::PrivateDir>,
}

/// A path in the sandbox's private `/tmp`, one name deep: nothing of the host is there, so
/// what gatehouse puts there for the command is seen by the command alone. In the landlock
/// tier, `/tmp/NAME` is `NAME` in the command's private tmp directory (`tmp`).
fn private_tmp_path(path: &Path, tmp: Option<&Path>) -> Result<CString, SandboxError> {
    use std::os::unix::ffi::OsStrExt;
    let name = path
        .strip_prefix("/tmp")
        .ok()
        .filter(|n| n.components().count() == 1)
        .and_then(|n| n.to_str())
        .filter(|n| !n.starts_with('.'));
    let mapped = match (tmp, name) {
        (Some(t), Some(n)) => t.join(n),
        _ => path.to_path_buf(),
    };
    let path = mapped.as_path();
    let bytes = path.as_os_str().as_bytes();
    // sockaddr_un holds 108 bytes with the NUL.
    if name.is_none() || bytes.len() >= 100 || bytes.contains(&0) {
        return Err(SandboxError::Invalid(format!(
            "{}: must be /tmp/NAME (the sandbox's private /tmp), shorter than 100 bytes",
            path.display()
        )));
    }
    Ok(cpath(path))
}

impl Prepared {
    /// Where the command's `/tmp/NAME` is on the host: the same path in the namespace tier
    /// (its `/tmp` is its own), `NAME` in its private tmp directory in the landlock tier (also
    /// its `TMPDIR`). What names such a path to the command (an agent's config naming its
    /// gateway socket) must use this.
    pub fn tmp_path(&self, path: &Path) -> Result<PathBuf, SandboxError> {
        use std::os::unix::ffi::OsStrExt;
        let c = private_tmp_path(path, self.private_tmp().as_deref())?;
        Ok(PathBuf::from(std::ffi::OsStr::from_bytes(c.as_bytes())))
    }

    fn private_tmp(&self) -> Option<PathBuf> {
        self.private.as_ref().map(|p| p.tmp())
    }

    /// Listens on the Unix socket `socket` (in the sandbox's private `/tmp`) from the sandbox's
    /// init process, and passes each accepted connection to `connector` (one byte carrying the
    /// descriptor, as the proxy bridge does). This is how `gatehouse run` gives its agent the
    /// broker's gateway channel without showing it the runtime directory: the socket exists
    /// only inside this sandbox's mount namespace.
    pub fn bridge_unix_socket(
        &mut self,
        socket: &Path,
        connector: OwnedFd,
    ) -> Result<(), SandboxError> {
        let path = private_tmp_path(socket, self.private_tmp().as_deref())?;
        self.plan.unix_bridge = Some((-1, path));
        self.unix_connector = Some(connector);
        Ok(())
    }

    /// Makes one end of a new Unix stream socket pair the command's stdin and stdout (a stdio
    /// server's, such as a third-party MCP server), instead of `/dev/null` and the stdout pipe;
    /// returns the other end. Stderr stays a pipe ([`Sandboxed::stderr`]) and
    /// [`Sandboxed::stdout`] is `None`. Only the command (and what it starts) holds the
    /// sandbox's end once [`Prepared::spawn`] returns: the init process closes its copy as soon
    /// as the command has started, and the caller's is closed in `spawn`. So closing the
    /// returned end is EOF on the command's stdin, and the returned end reads EOF once the
    /// command's processes are gone (or have closed their stdout).
    pub fn stdio_socket(&mut self) -> Result<UnixStream, SandboxError> {
        use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
        if self.stdio.is_some() {
            return Err(SandboxError::Invalid(
                "the command already has a stdio socket".into(),
            ));
        }
        let (ours, theirs) = socketpair(
            AddressFamily::Unix,
            SockType::Stream,
            None,
            SockFlag::SOCK_CLOEXEC,
        )
        .map_err(|e| io_err("creating the stdio socket")(e.into()))?;
        // The command dup2s this onto 0 and 1; a descriptor that already is 0, 1 or 2 would be
        // overwritten before it is copied (or keep its close-on-exec flag), so move it above.
        // (`try_clone` is `F_DUPFD_CLOEXEC` from 3; dropping `theirs` frees the low one.)
        let theirs = if theirs.as_raw_fd() < 3 {
            theirs
                .try_clone()
                .map_err(io_err("moving the stdio socket"))?
        } else {
            theirs
        };
        self.stdio = Some(theirs);
        Ok(UnixStream::from(ours))
    }

    /// Creates `path` (in the sandbox's private `/tmp`, mode 0644) holding `data`, before the
    /// command starts.
    pub fn add_tmp_file(&mut self, path: &Path, data: &str) -> Result<(), SandboxError> {
        let at = private_tmp_path(path, self.private_tmp().as_deref())?;
        let data = CString::new(data)
            .map_err(|_| SandboxError::Invalid(format!("{}: data with NUL", path.display())))?;
        self.plan.ops.push(Op::Touch {
            path: at.clone(),
            mode: 0o644,
        });
        self.plan
            .op_text
            .push(format!("creating {}", path.display()));
        self.plan.ops.push(Op::WriteFile { path: at, data });
        self.plan
            .op_text
            .push(format!("writing {}", path.display()));
        Ok(())
    }

    /// Sets gatehouse's own variable `name` (it must start with `GATEHOUSE_`) in the command's
    /// environment. Not subject to the secret-name filter, which keeps the caller's secrets
    /// out: this value is one gatehouse made for this sandbox (a launch token).
    pub fn set_gatehouse_var(&mut self, name: &str, value: &str) -> Result<(), SandboxError> {
        let valid = name.strip_prefix("GATEHOUSE_").is_some_and(|rest| {
            !rest.is_empty()
                && rest
                    .bytes()
                    .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
        });
        if !valid || value.contains('\0') {
            return Err(SandboxError::Invalid(format!(
                "{name}: not a gatehouse variable (GATEHOUSE_ and upper-case letters, digits, _)"
            )));
        }
        self.put_var(name, value);
        Ok(())
    }

    /// Sets `name=value` in the planned environment, replacing an earlier value.
    fn put_var(&mut self, name: &str, value: &str) {
        let prefix = format!("{name}=");
        self.plan
            .envp
            .retain(|v| !v.as_bytes().starts_with(prefix.as_bytes()));
        self.plan.envp.push(cstr(&format!("{name}={value}")));
        self.plan.seal();
    }

    /// Passes `name=value` to the command although the name looks like a secret: only for a
    /// variable the user named for this command (`gatehouse run --pass-env`, or an agent
    /// recipe's key variable, said on screen). `LD_*` and the sandbox's own names still never
    /// pass.
    pub fn pass_named_secret(&mut self, name: &str, value: &str) -> Result<(), SandboxError> {
        match env::refusal(name, value) {
            None | Some(env::LOOKS_SECRET) => {}
            Some(why) => return Err(SandboxError::Invalid(format!("{name}: {why}"))),
        }
        self.put_var(name, value);
        Ok(())
    }
}

impl Prepared {
    /// Starts the sandbox; the command runs as soon as init has built it.
    pub fn spawn(mut self) -> Result<Sandboxed, SandboxError> {
        use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
        let (ev_parent, ev_child) = socketpair(
            AddressFamily::Unix,
            SockType::SeqPacket,
            None,
            SockFlag::SOCK_CLOEXEC,
        )
        .map_err(|e| io_err("creating the report socket")(e.into()))?;
        // With a stdio socket, the command's stdout is that socket: no pipe.
        let stdout = match self.stdio {
            Some(_) => None,
            None => Some(
                nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
                    .map_err(|e| io_err("creating the stdout pipe")(e.into()))?,
            ),
        };
        let (err_r, err_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
            .map_err(|e| io_err("creating the stderr pipe")(e.into()))?;
        let plan = &mut self.plan;
        plan.report_fd = ev_child.as_raw_fd();
        plan.stdout_w = stdout.as_ref().map_or(-1, |(_, w)| w.as_raw_fd());
        plan.stderr_w = err_w.as_raw_fd();
        plan.stdio = self.stdio.as_ref().map_or(-1, |s| s.as_raw_fd());
        plan.keep_fds = vec![plan.report_fd, plan.stderr_w];
        for fd in [plan.stdout_w, plan.stdio] {
            if fd >= 0 {
                plan.keep_fds.push(fd);
            }
        }
        if let Some(c) = &self.connector {
            plan.bridge = Some((c.as_raw_fd(), PROXY_BRIDGE_PORT));
            plan.keep_fds.push(c.as_raw_fd());
        }
        if let Some(l) = &self.listener {
            plan.bridge_listener = l.as_raw_fd();
            plan.keep_fds.push(l.as_raw_fd());
        }
        if let Some(c) = &self.unix_connector {
            if let Some((fd, _)) = &mut plan.unix_bridge {
                *fd = c.as_raw_fd();
            }
            plan.keep_fds.push(c.as_raw_fd());
        }
        plan.seal();

        let flat = plan.flat;
        // The landlock tier: no namespaces at all.
        let flags = if flat {
            libc::CLONE_PIDFD | libc::SIGCHLD
        } else {
            libc::CLONE_NEWUSER
                | libc::CLONE_NEWNS
                | libc::CLONE_NEWPID
                | libc::CLONE_NEWNET
                | libc::CLONE_NEWIPC
                | libc::CLONE_NEWUTS
                | libc::CLONE_PIDFD
                | libc::SIGCHLD
        };
        let mut pidfd: libc::c_int = -1;
        // SAFETY: a fork-like clone (no CLONE_VM, no new stack): the child gets a copy of our
        // memory and continues here with ret == 0; `pidfd` receives the child's pidfd
        // (CLONE_PIDFD uses the parent_tid argument).
        let ret = unsafe {
            libc::syscall(
                libc::SYS_clone,
                flags as libc::c_ulong,
                0usize,
                &mut pidfd as *mut libc::c_int,
                0usize,
                0usize,
            )
        };
        if ret == 0 {
            // SAFETY: we are the child of the clone above; init_main only reads the plan
            // prepared before it and never returns.
            unsafe { child::init_main(plan) }
        }
        if ret < 0 && flat {
            return Err(io_err("starting the sandbox's init process")(
                io::Error::last_os_error(),
            ));
        }
        if ret < 0 {
            let e = io::Error::last_os_error().raw_os_error().unwrap_or(0);
            use crate::linux::userns::{classify, Facts, Step};
            return Err(SandboxError::Namespaces(classify(
                Step::Create,
                e,
                &Facts::read(),
            )));
        }
        // SAFETY: CLONE_PIDFD stored a new descriptor that nothing else owns.
        let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd as RawFd) };
        drop(ev_child);
        let stdout = stdout.map(|(r, _w)| r);
        drop(err_w);
        drop(self.connector.take());
        drop(self.unix_connector.take());
        drop(self.listener.take());
        // Only the command may hold the sandbox's end of the stdio socket, or its peer would
        // never see EOF.
        drop(self.stdio.take());
        Ok(Sandboxed {
            pid: ret as u32,
            pidfd,
            stdout,
            stderr: err_r,
            events: ev_parent,
            op_text: std::mem::take(&mut self.plan.op_text),
            op_userns: self.plan.ops.iter().map(|o| o.userns_step()).collect(),
            report: self.report.clone(),
            reaped: false,
            snapshot: std::mem::take(&mut self.snapshot),
            flat,
            private: self.private.take(),
        })
    }
}

impl Sandboxed {
    /// Readable when the sandbox's init process has exited (the whole sandbox is gone).
    pub fn pidfd(&self) -> BorrowedFd<'_> {
        self.pidfd.as_fd()
    }

    /// Readable when an [`Event`] can be read (or the sandbox is gone).
    pub fn events_fd(&self) -> BorrowedFd<'_> {
        self.events.as_fd()
    }

    /// Kills the sandbox: init, and with it every process in the pid namespace. In the
    /// landlock tier, init is asked (SIGTERM) to end the command's whole tree and exit, and is
    /// killed after a short grace if it has not (then what it had not ended yet may be left:
    /// it cannot happen while init runs, which never blocks for the command).
    pub fn kill(&self) -> io::Result<()> {
        if self.reaped {
            return Ok(());
        }
        let signal = |sig| match crate::process::pidfd_send_signal(&self.pidfd, sig) {
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => Ok(()),
            r => r,
        };
        if !self.flat {
            return signal(libc::SIGKILL);
        }
        signal(libc::SIGTERM)?;
        let mut fds = [nix::poll::PollFd::new(
            self.pidfd.as_fd(),
            nix::poll::PollFlags::POLLIN,
        )];
        let gone = matches!(
            nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(flat::KILL_GRACE_MS)),
            Ok(n) if n > 0
        );
        if gone {
            Ok(())
        } else {
            signal(libc::SIGKILL)
        }
    }

    /// The next event; `None` once the sandbox is gone and every event was read. Blocks until
    /// one arrives unless the socket was made non-blocking (then `WouldBlock`).
    pub fn read_event(&self) -> io::Result<Option<Event>> {
        let mut r = Record::default();
        // SAFETY: receives at most size_of::<Record>() bytes into a value we own; any bit
        // pattern is a valid Record.
        let n = unsafe {
            libc::recv(
                self.events.as_raw_fd(),
                &mut r as *mut Record as *mut libc::c_void,
                std::mem::size_of::<Record>(),
                0,
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        if n == 0 {
            return Ok(None);
        }
        Ok(Some(self.describe(r)))
    }

    fn describe(&self, r: Record) -> Event {
        let cause = io::Error::from_raw_os_error(r.errno);
        match r.kind {
            child::EV_EXITED => Event::Exited { status: r.value },
            child::EV_STARTED => Event::Started,
            child::EV_EXEC_FAILED => Event::ExecFailed {
                errno: r.errno,
                message: format!("{}: {cause}", self.report.program),
            },
            _ => {
                let what = self
                    .op_text
                    .get(r.stage as usize)
                    .cloned()
                    .unwrap_or_else(|| child::stage_text(r.stage, r.value));
                let message = match self.op_userns.get(r.stage as usize).copied().flatten() {
                    // The machine refused the namespace after creating it: say which check.
                    Some(step) if r.errno != 0 => {
                        use crate::linux::userns::{classify, Facts};
                        let d = classify(step, r.errno, &Facts::read());
                        format!("{what}: {cause}: {d}")
                    }
                    _ => format!("{what}: {cause}"),
                };
                Event::SetupFailed { message }
            }
        }
    }

    /// After the command: what it planted in its writable grants that the user's tools would
    /// run (a new git dir's hooks and config, editor and agent settings), set aside under
    /// `NAME.gatehouse-held` (see `project`). Waits for the sandbox to end first: when its init
    /// process has been reaped, the kernel has ended every process of the command.
    pub fn sweep(&mut self) -> io::Result<Vec<project::Held>> {
        self.reap()?;
        Ok(project::after(&self.snapshot))
    }

    /// The same look while the command still runs (what it is writing at that moment may be
    /// set aside under it; nothing is lost, it is renamed).
    pub fn sweep_running(&self) -> Vec<project::Held> {
        project::after(&self.snapshot)
    }

    /// Whether the command has writable grants to look at.
    pub fn sweeps(&self) -> bool {
        self.snapshot.writable()
    }

    /// Reaps the init process (call once its pidfd is readable, or after [`Sandboxed::kill`]).
    pub fn reap(&mut self) -> io::Result<()> {
        if self.reaped {
            return Ok(());
        }
        let pid = nix::unistd::Pid::from_raw(self.pid as i32);
        loop {
            match nix::sys::wait::waitpid(pid, None) {
                Err(nix::errno::Errno::EINTR) => continue,
                Err(e) => return Err(e.into()),
                Ok(_) => break,
            }
        }
        self.reaped = true;
        // Every process of the command is gone: nothing writes there any more.
        drop(self.private.take());
        Ok(())
    }
}

impl Drop for Sandboxed {
    fn drop(&mut self) {
        if !self.reaped {
            let _ = self.kill();
            let _ = self.reap();
        }
    }
}
