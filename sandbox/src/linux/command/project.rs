//! What a command may not change in a writable grant, found by looking at every directory in it
//! before the command starts, and what it planted anyway, found by looking again after it ended.
//!
//! The rule: nothing a command writes may make the user's own tools run it later, outside every
//! sandbox. Before the command, in each writable grant, at any depth:
//! - every git directory (`.git` dirs, the targets of `.git` files, bare-shaped directories with
//!   `HEAD` + `objects/` + `refs/`, `modules/*`, `worktrees/*`) gets its `hooks/`, `config` and
//!   `config.worktree` masked, and is itself pinned;
//! - what those configs (and the user's global git config) point at inside the grant, the
//!   `core.hooksPath` directory, `include.path` files, programs named by `core.fsmonitor`,
//!   `filter.*`, `diff.*.command` and the like, becomes read-only; a target that does not exist
//!   refuses the command (it could be created for git to run);
//! - the table's places (`ipc_schema::protected`) become masked (never read) or read-only;
//! - every directory between the grant's root and any of these is pinned (a mount point cannot
//!   be renamed or removed), so none can be replaced by renaming a parent away.
//!
//! What did not exist cannot be mounted over. So after the command, the same walk runs again: a
//! protected place or a git directory that appeared (created, or moved in) is held: renamed to
//! `NAME.gatehouse-held`, which no tool runs, and reported. A new git directory's config is held
//! only if it names anything beyond what `git init`/`git clone` write, and its hooks only if they
//! are not git's `.sample` files.

use super::gitconfig::{self, Names};
use ipc_schema::protected::{check_components, check_last, folded_components, Guard};
use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The most entries looked at in all writable grants of one command: a bound on the time spent,
/// not a place where checking stops (more refuses the command).
pub(crate) const MAX_ENTRIES: usize = 1_000_000;

/// Suffix of what a command planted and gatehouse set aside.
pub const HELD_SUFFIX: &str = ".gatehouse-held";

/// What the walk found before the command.
#[derive(Debug, Default)]
pub(crate) struct Found {
    /// Never read: masked with an empty file or directory.
    pub masks: Vec<PathBuf>,
    /// Read, never written: bound onto themselves read-only.
    pub read_only: Vec<PathBuf>,
    /// Directories made mount points of themselves.
    pub pins: Vec<PathBuf>,
    /// The git control files among `masks` (hooks, config, config.worktree of each git dir):
    /// the landlock tier leaves them writable and puts back what the command changed.
    pub git_controls: Vec<PathBuf>,
    /// Why the command cannot be protected as it stands (each names what to do).
    pub refusals: Vec<String>,
    pub snapshot: Snapshot,
}

/// What existed before the command, to tell what it added.
#[derive(Debug, Default, Clone)]
pub struct Snapshot {
    grants: Vec<PathBuf>,
    exempt: Vec<PathBuf>,
    /// Table places by identity: inode and change time (a freed inode is reused at once, so
    /// a replaced file can have its predecessor's number; protected places cannot change while
    /// the command runs, so their change time stands).
    places: BTreeMap<PathBuf, (u64, i64, i64)>,
    /// Git dirs by inode (they are pinned: never removed or replaced while the command runs,
    /// while their change time moves with every commit).
    git_dirs: BTreeMap<PathBuf, u64>,
    /// The git control files of the known git dirs as they were (the landlock tier leaves them
    /// writable; what the command changed is set aside and the original put back).
    controls: BTreeMap<PathBuf, Control>,
}

/// A git control file's content and mode, or a hooks directory's files.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Control {
    File(Vec<u8>, u32),
    Dir(BTreeMap<std::ffi::OsString, (Vec<u8>, u32)>),
}

/// The most bytes of git control files kept per command (more refuses the landlock tier's
/// command: its changes could not be put back).
const MAX_CONTROL_BYTES: usize = 16 << 20;

fn read_control(p: &Path) -> Option<Control> {
    use std::os::unix::fs::PermissionsExt;
    let m = std::fs::symlink_metadata(p).ok()?;
    if m.is_file() {
        return Some(Control::File(
            std::fs::read(p).ok()?,
            m.permissions().mode() & 0o7777,
        ));
    }
    if !m.is_dir() {
        return None;
    }
    let mut files = BTreeMap::new();
    for e in std::fs::read_dir(p).ok()?.flatten() {
        let Ok(em) = std::fs::symlink_metadata(e.path()) else {
            continue;
        };
        if em.is_file() {
            let bytes = std::fs::read(e.path()).ok()?;
            files.insert(e.file_name(), (bytes, em.permissions().mode() & 0o7777));
        }
    }
    Some(Control::Dir(files))
}

fn control_size(c: &Control) -> usize {
    match c {
        Control::File(b, _) => b.len(),
        Control::Dir(f) => f.values().map(|(b, _)| b.len()).sum(),
    }
}

fn write_back(p: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(p, bytes)?;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode))
}

/// Puts a known git dir's control file or hooks back as `was`, setting aside what the command
/// left there instead.
fn restore(p: &Path, was: &Control, held: &mut Vec<Held>) {
    let now = read_control(p);
    if now.as_ref() == Some(was) {
        return;
    }
    let put_back = "changed by the command while it ran (the landlock tier cannot make it read-only); the original was put back";
    match was {
        Control::File(bytes, mode) => {
            if std::fs::symlink_metadata(p).is_ok() {
                hold(p, put_back.into(), held);
            } else {
                held.push(Held {
                    path: p.to_path_buf(),
                    moved_to: None,
                    why: "removed by the command while it ran; the original was put back".into(),
                });
            }
            if let Err(e) = write_back(p, bytes, *mode) {
                held.push(Held {
                    path: p.to_path_buf(),
                    moved_to: None,
                    why: format!(
                        "its original could not be put back ({e}): check it before using git there"
                    ),
                });
            }
        }
        Control::Dir(files) => {
            if !is_dir(p) {
                if std::fs::symlink_metadata(p).is_ok() {
                    hold(p, put_back.into(), held);
                }
                if let Err(e) = std::fs::create_dir(p) {
                    held.push(Held {
                        path: p.to_path_buf(),
                        moved_to: None,
                        why: format!("the hooks directory could not be put back ({e})"),
                    });
                    return;
                }
            }
            let now = match read_control(p) {
                Some(Control::Dir(f)) => f,
                _ => BTreeMap::new(),
            };
            // Anything that is not a regular file the walk holds as a hooks entry; files new
            // or changed are set aside, then the originals written back.
            if let Ok(rd) = std::fs::read_dir(p) {
                for e in rd.flatten() {
                    let name = e.file_name();
                    if already_held(name.as_bytes()) {
                        continue;
                    }
                    let changed = match (now.get(&name), files.get(&name)) {
                        (Some(a), Some(b)) => a != b,
                        _ => true,
                    };
                    if changed {
                        hold(
                            &e.path(),
                            "a git hook written or changed by the command while it ran".into(),
                            held,
                        );
                    }
                }
            }
            for (name, (bytes, mode)) in files {
                let f = p.join(name);
                if std::fs::symlink_metadata(&f).is_err() {
                    if let Err(e) = write_back(&f, bytes, *mode) {
                        held.push(Held {
                            path: f.clone(),
                            moved_to: None,
                            why: format!("the original hook could not be put back ({e})"),
                        });
                    }
                }
            }
        }
    }
}

/// Something a command planted that gatehouse set aside.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    pub path: PathBuf,
    /// Where it is now (`None`: it could not be moved; `why` then says so).
    pub moved_to: Option<PathBuf>,
    pub why: String,
}

impl std::fmt::Display for Held {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.moved_to {
            Some(to) => write!(
                f,
                "{} ({}) held as {}",
                self.path.display(),
                self.why,
                to.display()
            ),
            None => write!(f, "{} ({})", self.path.display(), self.why),
        }
    }
}

#[derive(Default)]
struct Walk {
    grants: Vec<PathBuf>,
    exempt: Vec<PathBuf>,
    home: PathBuf,
    entries: usize,
    found: Found,
    /// Git dirs with their worktree roots (`None`: bare or unknown).
    git: BTreeMap<PathBuf, Option<PathBuf>>,
    /// Table places: path, guard.
    places: Vec<(PathBuf, Guard)>,
    error: Option<String>,
    /// After the command: walk everything, whatever it costs or fails (a command must not be
    /// able to stop the walk early); directories it made unreadable are opened up first.
    after: bool,
    /// After the command: what could not be looked at.
    unchecked: Vec<Held>,
}

fn ino(p: &Path) -> u64 {
    std::fs::symlink_metadata(p).map(|m| m.ino()).unwrap_or(0)
}

fn ident(p: &Path) -> (u64, i64, i64) {
    std::fs::symlink_metadata(p)
        .map(|m| (m.ino(), m.ctime(), m.ctime_nsec()))
        .unwrap_or_default()
}

fn is_dir(p: &Path) -> bool {
    std::fs::symlink_metadata(p).is_ok_and(|m| m.is_dir())
}

fn is_file(p: &Path) -> bool {
    std::fs::symlink_metadata(p).is_ok_and(|m| m.is_file())
}

/// Whether `dir` is shaped like a git directory (what git's discovery accepts).
fn git_shaped(dir: &Path) -> bool {
    is_file(&dir.join("HEAD"))
        && ((is_dir(&dir.join("objects")) && is_dir(&dir.join("refs")))
            || is_file(&dir.join("commondir")))
}

impl Walk {
    fn writable(&self, p: &Path) -> bool {
        self.grants.iter().any(|g| p.starts_with(g))
            && !self.exempt.iter().any(|e| p.starts_with(e))
    }

    fn fail(&mut self, msg: String) {
        self.error.get_or_insert(msg);
    }

    fn tree(&mut self, root: &Path) {
        // Each directory with its folded components: every entry is judged by the rules that
        // end at its own name (its parents were judged on the way down).
        let mut stack = vec![(
            root.to_path_buf(),
            folded_components(root.as_os_str().as_bytes()),
        )];
        while let Some((dir, comps)) = stack.pop() {
            if self.error.is_some() {
                return;
            }
            if dir != root && git_shaped(&dir) {
                self.git_dir(&dir, None);
                continue;
            }
            let rd = match std::fs::read_dir(&dir) {
                Ok(rd) => rd,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) if self.after => {
                    use std::os::unix::fs::PermissionsExt;
                    let opened = std::fs::symlink_metadata(&dir).is_ok_and(|m| {
                        std::fs::set_permissions(
                            &dir,
                            std::fs::Permissions::from_mode(m.mode() & 0o7777 | 0o700),
                        )
                        .is_ok()
                    });
                    match std::fs::read_dir(&dir) {
                        Ok(rd) if opened => rd,
                        _ => {
                            self.unchecked.push(Held {
                                path: dir.clone(),
                                moved_to: None,
                                why: format!("the command left it unreadable ({e}), so it was not checked for git hooks"),
                            });
                            continue;
                        }
                    }
                }
                Err(e) => {
                    return self.fail(format!(
                        "cannot look inside {} ({e}); a command may write there, so gatehouse must see what it holds",
                        dir.display()
                    ))
                }
            };
            for e in rd.flatten() {
                self.entries += 1;
                if self.entries > MAX_ENTRIES && !self.after {
                    return self.fail(format!(
                        "the writable grants hold more than {MAX_ENTRIES} entries; gatehouse checks every directory a command may write, so grant a smaller directory"
                    ));
                }
                let path = e.path();
                let Ok(ft) = e.file_type() else { continue };
                // Exempt places are directories: nothing below one is ever reached.
                if ft.is_dir() && self.exempt.iter().any(|x| path.starts_with(x)) {
                    continue;
                }
                let name = ipc_schema::protected::fold(e.file_name().as_bytes());
                if name == b".git" {
                    if ft.is_dir() {
                        self.git_dir(&path, Some(dir.clone()));
                    } else if ft.is_file() {
                        self.git_file(&path, &dir);
                    }
                    continue;
                }
                if let Some(p) = check_last(&comps, &name) {
                    self.places.push((path.clone(), p.guard));
                    // A read-only place may hold a never-read one (`.codex/auth.json`).
                    if p.guard == Guard::NoAccess {
                        continue;
                    }
                }
                if ft.is_dir() {
                    let mut child = comps.clone();
                    child.push(name);
                    stack.push((path, child));
                }
            }
        }
    }

    /// A `.git` file: `gitdir: PATH`. Read-only itself; its target, if writable, is a git dir.
    fn git_file(&mut self, file: &Path, worktree: &Path) {
        self.found.read_only.push(file.to_path_buf());
        let Ok(text) = std::fs::read_to_string(file) else {
            return self.fail(format!("cannot read {}", file.display()));
        };
        let Some(target) = text.lines().next().and_then(|l| l.strip_prefix("gitdir:")) else {
            return;
        };
        let target = worktree.join(target.trim());
        if let Ok(real) = std::fs::canonicalize(&target) {
            if self.writable(&real) && git_shaped(&real) {
                self.git_dir(&real, Some(worktree.to_path_buf()));
            }
        }
    }

    fn git_dir(&mut self, g: &Path, worktree: Option<PathBuf>) {
        if self.git.contains_key(g) {
            return;
        }
        self.git.insert(g.to_path_buf(), worktree.clone());
        let admin = is_file(&g.join("commondir"));
        let make = |p: &Path, dir: bool| {
            if dir {
                format!("mkdir {}", p.display())
            } else {
                format!("touch {}", p.display())
            }
        };
        for (name, dir) in [("hooks", true), ("config", false)] {
            let p = g.join(name);
            if std::fs::symlink_metadata(&p).is_ok() {
                self.found.git_controls.push(p.clone());
                self.found.masks.push(p);
            } else if !admin {
                self.found.refusals.push(format!(
                    "{} does not exist, so it cannot be masked, and a command could create it for git on the host to run: create it (`{}`, as `git init` does) and run again",
                    p.display(),
                    make(&p, dir)
                ));
            }
        }
        let cw = g.join("config.worktree");
        if std::fs::symlink_metadata(&cw).is_ok() {
            self.found.git_controls.push(cw.clone());
            self.found.masks.push(cw);
        }
        let base = worktree.clone().unwrap_or_else(|| g.to_path_buf());
        for cfg in [g.join("config"), g.join("config.worktree")] {
            if is_file(&cfg) && !self.after {
                self.config(&cfg, &base, 0);
            }
        }
        for sub in ["modules", "worktrees"] {
            let d = g.join(sub);
            if is_dir(&d) {
                self.admin_dirs(&d);
            }
        }
    }

    /// Git dirs below `.git/modules` (names may nest) and `.git/worktrees`.
    fn admin_dirs(&mut self, dir: &Path) {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return;
        };
        for e in rd.flatten() {
            let p = e.path();
            if !e.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            if git_shaped(&p) {
                self.git_dir(&p, None);
            } else {
                self.admin_dirs(&p);
            }
        }
    }

    fn resolve(&self, value: &str, base: &Path) -> PathBuf {
        if let Some(rest) = value.strip_prefix("~/") {
            self.home.join(rest)
        } else {
            base.join(value)
        }
    }

    /// What the config at `cfg` points at inside the writable grants: read-only, or the
    /// command refused when it does not exist yet.
    fn config(&mut self, cfg: &Path, base: &Path, depth: usize) {
        if depth > 10 {
            return self.fail(format!("{}: includes nest too deep", cfg.display()));
        }
        let text = match std::fs::read(cfg) {
            Ok(t) => String::from_utf8_lossy(&t).into_owned(),
            Err(e) => return self.fail(format!("cannot read {}: {e}", cfg.display())),
        };
        let entries = match gitconfig::parse(&text) {
            Ok(e) => e,
            Err(e) => {
                return self.fail(format!(
                "cannot read the git config {} ({e}); gatehouse must know what it makes git run",
                cfg.display()
            ))
            }
        };
        let cfg_dir = cfg.parent().unwrap_or(base).to_path_buf();
        for e in entries {
            let Some(kind) = gitconfig::names(&e) else {
                continue;
            };
            let (target, what) = match kind {
                Names::Program => match gitconfig::program_path(&e.value) {
                    Some(p) => (self.resolve(&p, base), "the program"),
                    None => continue,
                },
                Names::Dir => (self.resolve(e.value.trim(), base), "the directory"),
                Names::File => {
                    let v = e.value.trim();
                    let b = if e.section.starts_with("include") {
                        &cfg_dir
                    } else {
                        base
                    };
                    (self.resolve(v, b), "the file")
                }
            };
            let target = std::fs::canonicalize(&target).unwrap_or(target);
            if !self.writable(&target) {
                continue;
            }
            let key = match &e.subsection {
                Some(s) => format!("{}.{s}.{}", e.section, e.name),
                None => format!("{}.{}", e.section, e.name),
            };
            if std::fs::symlink_metadata(&target).is_err() {
                self.found.refusals.push(format!(
                    "{} sets {key} to {what} {}, which does not exist inside the writable grant: a command could create it for git on the host to run; create it or remove the setting, and run again",
                    cfg.display(),
                    target.display()
                ));
                continue;
            }
            self.found.read_only.push(target.clone());
            if kind == Names::File && e.section.starts_with("include") && is_file(&target) {
                self.config(&target, base, depth + 1);
            }
        }
    }
}

/// The global git configs of the user whose home is `home`.
fn global_configs(home: &Path) -> Vec<PathBuf> {
    let xdg = std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| home.join(".config"));
    vec![
        PathBuf::from("/etc/gitconfig"),
        home.join(".gitconfig"),
        xdg.join("git/config"),
    ]
}

/// Walks the writable grants (`exempt`: subtrees gatehouse keeps for itself, not walked).
pub(crate) fn before(grants: &[PathBuf], exempt: &[PathBuf], home: &Path) -> Result<Found, String> {
    let mut w = Walk {
        grants: grants.to_vec(),
        exempt: exempt.to_vec(),
        home: home.to_path_buf(),
        ..Walk::default()
    };
    for g in grants {
        if exempt.iter().any(|e| g.starts_with(e)) {
            continue;
        }
        if is_dir(g) {
            if git_shaped(g) {
                w.git_dir(g, None);
            } else {
                w.tree(g);
            }
        }
    }
    // The user's own configs may point into a grant too (a hooks directory for every repo).
    let worktrees: Vec<PathBuf> = w.git.values().flatten().cloned().collect();
    for cfg in global_configs(home) {
        if is_file(&cfg) {
            for base in worktrees.iter().chain(grants.iter().take(1)) {
                w.config(&cfg, base, 0);
            }
        }
    }
    if let Some(e) = w.error.take() {
        return Err(e);
    }
    let mut found = std::mem::take(&mut w.found);
    found.refusals.sort();
    found.refusals.dedup();
    for (p, guard) in &w.places {
        // A link is protected where it points, when the command could write there; a mount
        // on it would follow it anyway, and fail where it points outside the view. Replacing
        // the link itself is what the walk after the command sees (its inode changes).
        let is_link = std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_symlink());
        let p = if is_link {
            match std::fs::canonicalize(p) {
                Ok(real) if w.writable(&real) => real,
                _ => continue,
            }
        } else {
            p.clone()
        };
        match guard {
            Guard::NoAccess => found.masks.push(p),
            Guard::NoWrite => found.read_only.push(p),
        }
    }
    found.masks.sort();
    found.masks.dedup();
    found.read_only.sort();
    found.read_only.dedup();
    // Nothing inside a mask needs more; read-only inside read-only is covered.
    let masks = found.masks.clone();
    found
        .read_only
        .retain(|p| !masks.iter().any(|m| p.starts_with(m)));
    let ro = found.read_only.clone();
    found
        .read_only
        .retain(|p| !ro.iter().any(|r| r != p && p.starts_with(r)));
    // Pins: each git dir, and every directory between a grant's root and anything protected.
    let mut pins: BTreeSet<PathBuf> = w.git.keys().cloned().collect();
    for p in found
        .masks
        .iter()
        .chain(&found.read_only)
        .chain(w.git.keys())
    {
        let Some(root) = grants.iter().filter(|g| p.starts_with(g)).max() else {
            continue;
        };
        let mut a = p.parent();
        while let Some(d) = a {
            if d == root.as_path() || !d.starts_with(root) {
                break;
            }
            pins.insert(d.to_path_buf());
            a = d.parent();
        }
    }
    // Inside a read-only bind nothing can be renamed anyway, and a pin there would be copied
    // into the bind as a writable mount.
    found.pins = pins
        .into_iter()
        .filter(|p| !masks.iter().any(|m| p.starts_with(m)))
        .filter(|p| !found.read_only.iter().any(|r| p.starts_with(r)))
        .collect();
    found.snapshot = Snapshot {
        grants: grants.to_vec(),
        exempt: exempt.to_vec(),
        places: w
            .places
            .iter()
            .map(|(p, _)| p)
            .chain(&found.masks)
            .map(|p| (p.clone(), ident(p)))
            .collect(),
        git_dirs: w.git.keys().map(|g| (g.clone(), ino(g))).collect(),
        controls: BTreeMap::new(),
    };
    Ok(found)
}

impl Snapshot {
    /// Keeps the content of `controls` (git control files the command can write: the landlock
    /// tier), so that every later look puts back what changed. Only where the command can
    /// change them: a change made by someone else while it runs is undone too.
    pub(crate) fn keep_controls(&mut self, controls: &[PathBuf]) -> Result<(), String> {
        self.controls = controls
            .iter()
            .filter_map(|p| read_control(p).map(|c| (p.clone(), c)))
            .collect();
        let kept: usize = self.controls.values().map(control_size).sum();
        if kept > MAX_CONTROL_BYTES {
            return Err(format!(
                "the git control files (hooks, config) in the writable grants hold {kept} bytes, more than {MAX_CONTROL_BYTES}; gatehouse keeps a copy of each to put back what a command changes"
            ));
        }
        Ok(())
    }

    /// Whether there is anything to look at after (or while) the command runs.
    pub fn writable(&self) -> bool {
        self.grants
            .iter()
            .any(|g| !self.exempt.iter().any(|e| g.starts_with(e)))
    }
}

/// Whether `name` is something gatehouse already set aside (`NAME.gatehouse-held[-N]`).
fn already_held(name: &[u8]) -> bool {
    let s = String::from_utf8_lossy(name);
    match s.rfind(HELD_SUFFIX) {
        Some(i) => {
            let rest = &s[i + HELD_SUFFIX.len()..];
            rest.is_empty()
                || (rest.starts_with('-') && rest[1..].bytes().all(|b| b.is_ascii_digit()))
        }
        None => false,
    }
}

/// A free name beside `p` to set it aside under.
fn held_name(p: &Path) -> PathBuf {
    let mut base = p.as_os_str().to_owned();
    base.push(HELD_SUFFIX);
    let mut candidate = PathBuf::from(&base);
    let mut n = 2;
    while std::fs::symlink_metadata(&candidate).is_ok() {
        let mut b = base.clone();
        b.push(format!("-{n}"));
        candidate = PathBuf::from(b);
        n += 1;
    }
    candidate
}

fn hold(p: &Path, why: String, out: &mut Vec<Held>) {
    let to = held_name(p);
    match std::fs::rename(p, &to) {
        Ok(()) => out.push(Held {
            path: p.to_path_buf(),
            moved_to: Some(to),
            why,
        }),
        Err(e) => out.push(Held {
            path: p.to_path_buf(),
            moved_to: None,
            why: format!("{why}; it could not be set aside ({e}): remove it before using git or your editor there"),
        }),
    }
}

/// What the command planted since `snap` was taken, set aside (run after every process of the
/// command has ended).
pub fn after(snap: &Snapshot) -> Vec<Held> {
    let mut w = Walk {
        grants: snap.grants.clone(),
        exempt: snap.exempt.clone(),
        after: true,
        ..Walk::default()
    };
    for g in &snap.grants {
        if snap.exempt.iter().any(|e| g.starts_with(e)) || !is_dir(g) {
            continue;
        }
        if git_shaped(g) {
            w.git_dir(g, None);
        } else {
            w.tree(g);
        }
    }
    let mut held = std::mem::take(&mut w.unchecked);
    // Known git dirs' control files first: what the command changed is put back.
    for (p, was) in &snap.controls {
        let g = p.parent().unwrap_or(p);
        if snap.git_dirs.get(g).is_some_and(|i| *i == ino(g)) {
            restore(p, was, &mut held);
        }
    }
    // Table places that are new (or replaced): the outermost of each.
    let mut new_places: Vec<PathBuf> = w
        .places
        .iter()
        .filter(|(p, _)| snap.places.get(p).is_none_or(|i| *i != ident(p)))
        .map(|(p, _)| p.clone())
        .collect();
    new_places.sort();
    let mut last: Option<PathBuf> = None;
    for p in new_places {
        if last.as_ref().is_some_and(|l| p.starts_with(l)) {
            continue;
        }
        let why = check_components(&folded_components(p.as_os_str().as_bytes()))
            .map(|x| format!("created by the command; {}", x.why))
            .unwrap_or_else(|| "created by the command".into());
        hold(&p, why, &mut held);
        last = Some(p);
    }
    // Git dirs: new ones (or moved in) get their config and hooks judged; known ones only a
    // config.worktree that was not there to mask.
    for g in w.git.keys() {
        let known = snap.git_dirs.get(g).is_some_and(|i| *i == ino(g));
        let configs: &[&str] = if known {
            &["config.worktree"]
        } else {
            &["config", "config.worktree"]
        };
        for name in configs {
            let cfg = g.join(name);
            if known && snap.places.contains_key(&cfg) {
                continue;
            }
            if std::fs::symlink_metadata(&cfg).is_err() {
                continue;
            }
            let inert = is_file(&cfg)
                && std::fs::read(&cfg).ok().is_some_and(|t| {
                    gitconfig::parse(&String::from_utf8_lossy(&t))
                        .is_ok_and(|es| es.iter().all(gitconfig::inert))
                });
            if !inert {
                hold(
                    &cfg,
                    "a git config written by the command that names more than a fresh repository's settings".into(),
                    &mut held,
                );
            }
        }
        if known {
            continue;
        }
        let hooks = g.join("hooks");
        if is_dir(&hooks) {
            if let Ok(rd) = std::fs::read_dir(&hooks) {
                for e in rd.flatten() {
                    let n = e.file_name();
                    if !n.as_bytes().ends_with(b".sample") && !already_held(n.as_bytes()) {
                        hold(
                            &e.path(),
                            "a git hook written by the command".into(),
                            &mut held,
                        );
                    }
                }
            }
        } else if std::fs::symlink_metadata(&hooks).is_ok() {
            hold(
                &hooks,
                "a git hooks entry written by the command".into(),
                &mut held,
            );
        }
    }
    held
}

/// Whether `path` is a PEM-style file (`*.pem`, `*.crt`, `*.key`, `*.asc`) that holds no
/// private key by content: a CA bundle or a public certificate, which programs need (a TLS
/// client's trust store) and which discloses nothing. Unreadable counts as secret.
fn certificate_only(path: &Path) -> bool {
    let name = path.as_os_str().as_bytes().to_ascii_lowercase();
    if ![&b".pem"[..], b".crt", b".key", b".asc"]
        .iter()
        .any(|e| name.ends_with(e))
    {
        return false;
    }
    use std::io::Read;
    let mut head = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(64 << 10).read_to_end(&mut head))
        .is_ok()
        && ipc_schema::protected::secret_content(&head).is_none()
}

/// What `hide` masks in the grants `dirs` (the first is the one its exclude globs are relative
/// to): every existing match, at any depth; an excluded directory whole.
pub(crate) fn hidden(
    dirs: &[PathBuf],
    exempt: &[PathBuf],
    hide: &ipc_schema::exec::Hide,
) -> Result<Vec<PathBuf>, String> {
    if hide.exclude.is_empty() && !hide.sensitive {
        return Ok(Vec::new());
    }
    let exclude = ipc_schema::grant_glob::set(&hide.exclude, "exclude")?;
    let mut out = Vec::new();
    let mut entries = 0usize;
    for (i, root) in dirs.iter().enumerate() {
        if exempt.iter().any(|e| root.starts_with(e)) {
            continue;
        }
        let mut stack = vec![(root.clone(), folded_components(root.as_os_str().as_bytes()))];
        while let Some((dir, comps)) = stack.pop() {
            let Ok(rd) = std::fs::read_dir(&dir) else {
                continue;
            };
            for e in rd.flatten() {
                entries += 1;
                if entries > MAX_ENTRIES {
                    return Err(format!(
                        "the grants hold more than {MAX_ENTRIES} entries; gatehouse looks at each to hide what the grant excludes, so grant a smaller directory"
                    ));
                }
                let path = e.path();
                let Ok(ft) = e.file_type() else { continue };
                if ft.is_dir() && exempt.iter().any(|x| path.starts_with(x)) {
                    continue;
                }
                let name = ipc_schema::protected::fold(e.file_name().as_bytes());
                // Never-read places are masked whole already.
                if check_last(&comps, &name).is_some_and(|p| p.guard == Guard::NoAccess) {
                    continue;
                }
                let rel = path.strip_prefix(root).unwrap_or(&path);
                let excluded = i == 0 && !hide.exclude.is_empty() && exclude.is_match(rel);
                let secret = hide.sensitive
                    && ft.is_file()
                    && ipc_schema::protected::sensitive(path.as_os_str().as_bytes()).is_some()
                    && !certificate_only(&path);
                if excluded || secret {
                    out.push(path);
                } else if ft.is_dir() {
                    let mut child = comps.clone();
                    child.push(name);
                    stack.push((path, child));
                }
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn git_init(dir: &Path) {
        std::fs::create_dir_all(dir.join(".git/objects")).unwrap();
        std::fs::create_dir_all(dir.join(".git/refs")).unwrap();
        std::fs::create_dir_all(dir.join(".git/hooks")).unwrap();
        std::fs::write(dir.join(".git/HEAD"), "ref: refs/heads/main\n").unwrap();
        std::fs::write(dir.join(".git/config"), "[core]\n\tbare = false\n").unwrap();
    }

    #[test]
    fn git_dirs_at_any_depth_are_masked_and_their_parents_pinned() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().canonicalize().unwrap();
        git_init(&root);
        git_init(&root.join("a/b/c"));
        std::fs::create_dir_all(root.join(".git/modules/sub/objects")).unwrap();
        std::fs::create_dir_all(root.join(".git/modules/sub/refs")).unwrap();
        std::fs::create_dir_all(root.join(".git/modules/sub/hooks")).unwrap();
        std::fs::write(root.join(".git/modules/sub/HEAD"), "x\n").unwrap();
        std::fs::write(root.join(".git/modules/sub/config"), "[core]\n").unwrap();
        std::fs::create_dir_all(root.join("vendor/sub")).unwrap();
        std::fs::write(
            root.join("vendor/sub/.git"),
            "gitdir: ../../.git/modules/sub\n",
        )
        .unwrap();
        std::fs::create_dir_all(root.join("deep/x/.vscode")).unwrap();
        let f = before(std::slice::from_ref(&root), &[], &root).unwrap();
        assert!(f.refusals.is_empty(), "{:?}", f.refusals);
        for m in [
            ".git/hooks",
            ".git/config",
            "a/b/c/.git/hooks",
            "a/b/c/.git/config",
            ".git/modules/sub/hooks",
            ".git/modules/sub/config",
        ] {
            assert!(
                f.masks.contains(&root.join(m)),
                "{m} not masked: {:?}",
                f.masks
            );
        }
        assert!(f.read_only.contains(&root.join("deep/x/.vscode")));
        assert!(f.read_only.contains(&root.join("vendor/sub/.git")));
        for p in [
            "a",
            "a/b",
            "a/b/c",
            "a/b/c/.git",
            "deep",
            "deep/x",
            "vendor",
            "vendor/sub",
        ] {
            assert!(
                f.pins.contains(&root.join(p)),
                "{p} not pinned: {:?}",
                f.pins
            );
        }
    }

    #[test]
    fn what_a_config_points_into_the_grant_is_read_only_or_refused() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().canonicalize().unwrap();
        git_init(&root);
        std::fs::create_dir_all(root.join(".husky")).unwrap();
        std::fs::create_dir_all(root.join("tools")).unwrap();
        std::fs::write(root.join("tools/fsm"), "#!/bin/sh\n").unwrap();
        std::fs::write(
            root.join(".git/config"),
            "[core]\n\thooksPath = .husky\n\tfsmonitor = tools/fsm\n[filter \"x\"]\n\tclean = ./tools/clean\n",
        )
        .unwrap();
        let f = before(std::slice::from_ref(&root), &[], &root).unwrap();
        assert!(f.read_only.contains(&root.join(".husky")));
        assert!(f.read_only.contains(&root.join("tools/fsm")));
        assert_eq!(f.refusals.len(), 1, "{:?}", f.refusals);
        assert!(
            f.refusals[0].contains("filter.x.clean"),
            "{}",
            f.refusals[0]
        );
        assert!(f.refusals[0].contains("tools/clean"), "{}", f.refusals[0]);
    }

    #[test]
    fn links_are_protected_where_they_point_inside_the_grant_only() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().canonicalize().unwrap();
        std::fs::create_dir_all(root.join("shared/vscode")).unwrap();
        std::os::unix::fs::symlink(root.join("shared/vscode"), root.join(".vscode")).unwrap();
        std::os::unix::fs::symlink("/nonexistent-outside/envrc", root.join(".envrc")).unwrap();
        let f = before(std::slice::from_ref(&root), &[], &root).unwrap();
        assert_eq!(f.read_only, vec![root.join("shared/vscode")]);
        assert!(f.masks.is_empty() && f.refusals.is_empty(), "{f:?}");
        // The link replaced by a directory: set aside after the command.
        std::fs::remove_file(root.join(".envrc")).unwrap();
        std::fs::write(root.join(".envrc"), "curl x | sh\n").unwrap();
        let held = after(&f.snapshot);
        assert_eq!(held.len(), 1, "{held:?}");
        assert_eq!(held[0].path, root.join(".envrc"));
    }

    #[test]
    fn what_appeared_during_the_command_is_held() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().canonicalize().unwrap();
        git_init(&root);
        let f = before(std::slice::from_ref(&root), &[], &root).unwrap();
        // The command: a new repo with a planted hook and config, a fresh clean repo, a
        // settings dir, and a renamed-in bare repo.
        git_init(&root.join("new"));
        std::fs::write(root.join("new/.git/hooks/post-checkout"), "#!/bin/sh\n").unwrap();
        std::fs::write(root.join("new/.git/hooks/pre-commit.sample"), "#!/bin/sh\n").unwrap();
        std::fs::write(root.join("new/.git/config"), "[core]\n\tpager = sh evil\n").unwrap();
        git_init(&root.join("clean"));
        std::fs::create_dir_all(root.join("sub/.vscode")).unwrap();
        std::fs::write(root.join("sub/.vscode/tasks.json"), "{}").unwrap();
        std::fs::create_dir_all(root.join("bare/objects")).unwrap();
        std::fs::create_dir_all(root.join("bare/refs")).unwrap();
        std::fs::write(root.join("bare/HEAD"), "x\n").unwrap();
        std::fs::write(root.join("bare/config"), "[core]\n\tfsmonitor = ./x\n").unwrap();
        let held = after(&f.snapshot);
        let paths: Vec<PathBuf> = held.iter().map(|h| h.path.clone()).collect();
        assert_eq!(
            paths,
            vec![
                root.join("sub/.vscode"),
                root.join("bare/config"),
                root.join("new/.git/config"),
                root.join("new/.git/hooks/post-checkout"),
            ],
            "{held:?}"
        );
        assert!(root
            .join("new/.git/hooks/post-checkout.gatehouse-held")
            .exists());
        assert!(root.join("new/.git/hooks/pre-commit.sample").exists());
        assert!(
            root.join("clean/.git/config").exists(),
            "a fresh repo's config is kept"
        );
        assert!(root.join("sub/.vscode.gatehouse-held/tasks.json").exists());
        // Nothing new: nothing held.
        let f2 = before(std::slice::from_ref(&root), &[], &root).unwrap();
        assert!(after(&f2.snapshot).is_empty());
    }
}
