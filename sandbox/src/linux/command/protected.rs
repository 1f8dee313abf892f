//! Protected paths (DESIGN.md, "Policy"): what a command never reads or writes, whatever it was
//! granted. Home directories are not mounted at all unless granted; these masks matter when a
//! grant contains a home directory (or lies inside one), and for `.git` inside any grant.

use ipc_schema::protected::Guard;
use std::path::{Path, PathBuf};

/// Places a command never reads: the [`Guard::NoAccess`] rules of the one table every layer
/// checks (`ipc_schema::protected::RULES`: key material and credentials, browser and mail
/// profiles, places that run code at login, shell start-up files), consecutive path components
/// matched case-insensitively wherever they appear. The read-only rules matter only where a
/// command may write: `project` applies them in writable grants.
fn rules() -> impl Iterator<Item = &'static [&'static str]> {
    ipc_schema::protected::RULES
        .iter()
        .filter(|r| r.guard == Guard::NoAccess)
        .map(|r| r.path)
        .chain(OWN_DIRS.iter().copied())
}

/// gatehouse's own config and data dirs at their default places under a home. The dirs of the
/// instance in use are masked through `--protect` as well; these cover another instance's
/// default dirs inside a granted home.
const OWN_DIRS: &[&[&str]] = &[&[".config", "gatehouse"], &[".local", "share", "gatehouse"]];

// Under any `.git` directory: hooks run code when the user next uses git there; the config can
// name programs to run (`core.hooksPath`, `core.fsmonitor`, filters) and may hold credentials.
pub use ipc_schema::protected::GIT_INTERNAL as GIT_PROTECTED;

/// Top-level places a grant may not name: kernel interfaces, devices, and runtime sockets
/// (D-Bus, the user's agents, gatehouse's own sockets).
pub const NOT_GRANTABLE: &[&str] = &["/proc", "/sys", "/dev", "/run"];

/// The home directories on this machine a grant could expose: the caller's, `/root`, and each
/// directory under `/home`.
pub(crate) fn homes(own: &Path) -> Vec<PathBuf> {
    let mut out = vec![own.to_path_buf(), PathBuf::from("/root")];
    if let Ok(rd) = std::fs::read_dir("/home") {
        out.extend(rd.flatten().map(|e| e.path()));
    }
    out.sort();
    out.dedup();
    out
}

/// The protected place `path` is in, if any (a rule, or `.git/.../hooks|config`), and its guard.
pub(crate) fn protected_place(path: &Path) -> Option<(String, Guard)> {
    use std::os::unix::ffi::OsStrExt;
    let comps = ipc_schema::protected::folded_components(path.as_os_str().as_bytes());
    if let Some(own) = OWN_DIRS.iter().find(|r| {
        comps
            .windows(r.len())
            .any(|w| w.iter().zip(r.iter()).all(|(c, x)| c == x.as_bytes()))
    }) {
        return Some((own.join("/"), Guard::NoAccess));
    }
    ipc_schema::protected::check_components(&comps).map(|p| (p.place, p.guard))
}

/// Why `path` (absolute, resolved) may not be granted at all, if it may not.
pub(crate) fn refuse_grant(path: &Path, extra: &[PathBuf]) -> Option<String> {
    if path == Path::new("/") {
        return Some(
            "/ would expose every home directory; grant the directories the command needs".into(),
        );
    }
    for top in NOT_GRANTABLE {
        if path.starts_with(top) {
            return Some(format!("{top} is never granted to a command"));
        }
    }
    for p in extra {
        if path.starts_with(p) {
            return Some(format!("{} is gatehouse's own directory", p.display()));
        }
    }
    protected_place(path)
        .filter(|(_, g)| *g == Guard::NoAccess)
        .map(|(place, _)| format!("it is inside a protected place ({place})"))
}

/// Why `path` may not be granted read-write, if it may not: a writable grant must not contain a
/// home directory (a command could create start-up files there that no mask covers, since
/// masks cover only what exists) nor gatehouse's own directories.
pub(crate) fn refuse_write_grant(
    path: &Path,
    homes: &[PathBuf],
    extra: &[PathBuf],
) -> Option<String> {
    for h in homes {
        if h.starts_with(path) && h.is_dir() {
            return Some(format!(
                "it contains the home directory {}, where a command could create start-up files; grant the project directories instead",
                h.display()
            ));
        }
    }
    for p in extra {
        if p.starts_with(path) {
            return Some(format!(
                "it contains {}, gatehouse's own directory",
                p.display()
            ));
        }
    }
    protected_place(path)
        .map(|(place, _)| format!("it is inside {place}, which commands may read but never write"))
}

/// The existing protected places directly in `dir`: each entry whose name (case-insensitively)
/// starts a rule, followed down the rule's remaining components.
fn protected_entries(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().to_lowercase();
        for rule in rules().filter(|r| r[0] == name) {
            let mut p = e.path();
            for c in &rule[1..] {
                p.push(c);
            }
            if std::fs::symlink_metadata(&p).is_ok() {
                out.push(p);
            }
        }
    }
}

/// What to mask inside `grants`: the protected places at the top of each grant and at the top
/// of each home directory a grant shows, and gatehouse's own directories.
pub(crate) fn masks(grants: &[PathBuf], homes: &[PathBuf], extra: &[PathBuf]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for g in grants {
        if std::fs::metadata(g).is_ok_and(|m| m.is_dir()) {
            protected_entries(g, &mut out);
        }
        for h in homes {
            if h.starts_with(g) && h != g {
                protected_entries(h, &mut out);
            } else if g.starts_with(h) && g != h {
                // A grant inside a home: the rules that reach into it (~/.config for
                // .config/autostart) are checked where they land.
                for rule in rules().filter(|r| r.len() > 1) {
                    let mut p = h.clone();
                    for c in rule.iter() {
                        p.push(c);
                    }
                    if p.starts_with(g) && std::fs::symlink_metadata(&p).is_ok() {
                        out.push(p);
                    }
                }
            }
        }
        for p in extra {
            if p.starts_with(g) && p != g && std::fs::symlink_metadata(p).is_ok() {
                out.push(p.clone());
            }
        }
    }
    out.sort();
    out.dedup();
    // A mask inside another mask is hidden already.
    let mut kept: Vec<PathBuf> = Vec::new();
    for p in out {
        if !kept.iter().any(|k| p.starts_with(k)) {
            kept.push(p);
        }
    }
    kept
}

/// The `.git` directories in `root` and one level below it (a directory of projects).
/// Deeper repositories are not found: see docs/exec-helper.md, "Honest limits".
pub(crate) fn git_dirs(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let top = root.join(".git");
    if is_real_dir(&top) {
        out.push(top);
    }
    if let Ok(rd) = std::fs::read_dir(root) {
        for e in rd.flatten() {
            if e.file_type().map(|t| t.is_dir()).unwrap_or(false) && e.file_name() != ".git" {
                let g = e.path().join(".git");
                if is_real_dir(&g) {
                    out.push(g);
                }
            }
        }
    }
    out
}

fn is_real_dir(p: &Path) -> bool {
    std::fs::symlink_metadata(p)
        .map(|m| m.is_dir())
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grants_of_protected_places_are_refused() {
        let r = |p: &str| refuse_grant(Path::new(p), &[PathBuf::from("/data/gh")]);
        assert!(r("/").unwrap().contains("every home"));
        assert_eq!(r("/proc/1").unwrap(), "/proc is never granted to a command");
        assert_eq!(
            r("/run/user/1000").unwrap(),
            "/run is never granted to a command"
        );
        assert_eq!(
            r("/home/a/.ssh").unwrap(),
            "it is inside a protected place (.ssh)"
        );
        assert_eq!(
            r("/w/x/.SSH/keys").unwrap(),
            "it is inside a protected place (.ssh)"
        );
        assert_eq!(
            r("/home/a/.config/autostart").unwrap(),
            "it is inside a protected place (.config/autostart)"
        );
        assert_eq!(
            r("/data/gh/run").unwrap(),
            "/data/gh is gatehouse's own directory"
        );
        assert!(r("/p/.git/hooks").unwrap().contains(".git/…/hooks"));
        assert!(r("/p/.git/modules/x/config")
            .unwrap()
            .contains(".git/…/config"));
        assert_eq!(r("/home/a/project"), None);
        assert_eq!(r("/home/a/.config"), None);
        assert_eq!(r("/p/.git"), None);
        assert_eq!(r("/home/a/.sshfoo"), None, "whole components only");
    }

    #[test]
    fn every_rule_of_the_shared_table_is_protected_here_too() {
        // The exec sandbox once kept its own copy of the table and it drifted (no macOS
        // Library/ entries); now every shared rule must refuse a grant here as well.
        for rule in ipc_schema::protected::RULES {
            let p = Path::new("/w")
                .join(rule.path.join("/").replace('*', "x"))
                .join("inner");
            assert_eq!(
                protected_place(&p).map(|(place, _)| place),
                Some(rule.path.join("/")),
                "{} ({}) is not protected in the exec sandbox",
                p.display(),
                rule.why
            );
        }
        assert_eq!(
            protected_place(Path::new("/w/Library/Keychains/login.keychain-db")),
            Some(("library/keychains".to_string(), Guard::NoAccess))
        );
        assert_eq!(protected_place(Path::new("/w/Library/Fonts")), None);
    }

    #[test]
    fn write_grants_may_not_contain_a_home() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home/a");
        std::fs::create_dir_all(home.join("proj")).unwrap();
        let homes = vec![home.clone()];
        assert!(refuse_write_grant(&home, &homes, &[])
            .unwrap()
            .contains("home directory"));
        assert!(refuse_write_grant(dir.path(), &homes, &[]).is_some());
        assert_eq!(refuse_write_grant(&home.join("proj"), &homes, &[]), None);
    }

    #[test]
    fn masks_cover_existing_protected_paths_inside_grants_only() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home/a");
        std::fs::create_dir_all(home.join(".SSH")).unwrap();
        std::fs::create_dir_all(home.join("proj")).unwrap();
        std::fs::create_dir_all(home.join(".config/autostart")).unwrap();
        std::fs::write(home.join(".bashrc"), "x").unwrap();
        let homes = vec![home.clone()];
        // The home itself granted: its protected entries are masked, in any case.
        let m = masks(std::slice::from_ref(&home), &homes, &[]);
        assert_eq!(
            m,
            vec![
                home.join(".SSH"),
                home.join(".bashrc"),
                home.join(".config/autostart")
            ]
        );
        // A project inside the home: nothing protected is visible.
        assert!(masks(&[home.join("proj")], &homes, &[]).is_empty());
        // ~/.config granted: its autostart is masked.
        assert_eq!(
            masks(&[home.join(".config")], &homes, &[]),
            vec![home.join(".config/autostart")]
        );
        // The parent of the home granted: same masks as the home.
        assert_eq!(masks(&[dir.path().join("home")], &homes, &[]).len(), 3);
        // Any granted directory: its own top-level protected entries.
        let other = tempfile::tempdir().unwrap();
        std::fs::write(other.path().join(".netrc"), "x").unwrap();
        assert_eq!(
            masks(&[other.path().to_path_buf()], &[], &[]),
            vec![other.path().join(".netrc")]
        );
    }

    #[test]
    fn git_dirs_are_found_at_the_root_and_one_level_down() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join(".git/hooks")).unwrap();
        std::fs::create_dir_all(dir.path().join("sub/.git")).unwrap();
        std::fs::create_dir_all(dir.path().join("a/b/.git")).unwrap();
        let mut g = git_dirs(dir.path());
        g.sort();
        assert_eq!(
            g,
            vec![dir.path().join(".git"), dir.path().join("sub/.git")]
        );
    }
}
