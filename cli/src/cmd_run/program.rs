//! Making the agent's own program visible in its sandbox, read-only, wherever it is installed.
//!
//! The sandbox shows the system trees (`/usr`, `/opt`, ...) and the grants, nothing of a home.
//! An agent installed under a home (a user npm prefix, `~/.local/bin`, nvm) would not be found,
//! so the run grants, read-only: the npm package the program belongs to (its whole
//! `node_modules/<package>` directory: native binaries of nested optional dependencies live
//! there), or else the program file alone; and the same for the interpreter its `#!` line names
//! (`/usr/bin/env node` is looked up in `PATH`). No directory that holds a home is granted.

use crate::cmd_sandbox::{self, Stop};
#[cfg(target_os = "linux")]
use sandbox::linux::command::SYSTEM_DIRS;
use sandbox::program_path::which;
#[cfg(target_os = "macos")]
use sandbox::seatbelt::SYSTEM_DIRS;
use std::io::Read;
use std::path::{Path, PathBuf};

/// The agent's program as the run starts it: the head of its argv (the resolved program) and
/// the paths to grant read-only; or why not (exit 126 not executable, 127 not found).
pub fn resolve(argv0: &str, path_var: &str, cwd: &Path) -> Result<Resolved, Stop> {
    let Some(v) = visible(argv0, path_var, cwd) else {
        // A path to a file that is there but not executable: say so, as exec would.
        if argv0.contains('/') && Path::new(argv0).is_file() {
            return Err(Stop(
                format!(
                    "could not run: {}: Permission denied (it is not executable)",
                    std::path::absolute(argv0)
                        .unwrap_or_else(|_| PathBuf::from(argv0))
                        .display()
                ),
                cmd_sandbox::EXIT_NOT_EXECUTABLE,
            ));
        }
        return Err(Stop(
            format!("{argv0}: not found in PATH"),
            cmd_sandbox::EXIT_NOT_FOUND,
        ));
    };
    let exec = v
        .exec
        .to_str()
        .ok_or_else(|| {
            cmd_sandbox::refused(format!("{}: the path is not UTF-8", v.exec.display()))
        })?
        .to_string();
    Ok(Resolved {
        exec: vec![exec],
        grants: v.grants,
    })
}

/// What [`resolve`] found.
pub struct Resolved {
    pub exec: Vec<String>,
    pub grants: Vec<PathBuf>,
}

/// The program to exec inside (its resolved path, so no link outside the grants is needed)
/// and the paths to grant read-only so that it and its interpreter run.
pub struct Visible {
    pub exec: PathBuf,
    pub grants: Vec<PathBuf>,
}

pub fn visible(argv0: &str, path_var: &str, cwd: &Path) -> Option<Visible> {
    let found = which(argv0, path_var, cwd)?;
    let exec = std::fs::canonicalize(&found).ok()?;
    let mut grants = Vec::new();
    add_grant(&exec, cwd, &mut grants);
    if let Some(interp) = interpreter(&exec, path_var, cwd) {
        if let Ok(real) = std::fs::canonicalize(&interp) {
            add_grant(&real, cwd, &mut grants);
        }
    }
    Some(Visible { exec, grants })
}

/// Shown anyway: a system tree, or the working directory (granted already).
fn already_visible(p: &Path, cwd: &Path) -> bool {
    p.starts_with(cwd) || SYSTEM_DIRS.iter().any(|d| p.starts_with(d))
}

fn add_grant(real: &Path, cwd: &Path, out: &mut Vec<PathBuf>) {
    if already_visible(real, cwd) {
        return;
    }
    let g = npm_package(real).unwrap_or_else(|| real.to_path_buf());
    if !out.contains(&g) {
        out.push(g);
    }
}

/// The `node_modules/<package>` (or `node_modules/@scope/package`) directory holding `p`, the
/// outermost one (a global install nests its dependencies inside).
fn npm_package(p: &Path) -> Option<PathBuf> {
    let comps: Vec<_> = p.components().collect();
    let i = comps.iter().position(|c| c.as_os_str() == "node_modules")?;
    let scoped = comps
        .get(i + 1)
        .is_some_and(|c| c.as_os_str().to_string_lossy().starts_with('@'));
    let end = i + if scoped { 3 } else { 2 };
    // The package directory itself, not a file directly in node_modules.
    (end < comps.len()).then(|| comps[..end].iter().collect())
}

/// The interpreter a `#!` line names (through `env`, looked up in `path_var`).
fn interpreter(program: &Path, path_var: &str, cwd: &Path) -> Option<PathBuf> {
    let mut head = [0u8; 256];
    let n = std::fs::File::open(program).ok()?.read(&mut head).ok()?;
    let line = head[..n].strip_prefix(b"#!")?;
    let line = line.split(|&b| b == b'\n').next()?;
    let line = std::str::from_utf8(line).ok()?;
    let mut words = line.split_whitespace();
    let first = words.next()?;
    if Path::new(first).file_name().is_some_and(|n| n == "env") {
        let name = words.find(|w| !w.starts_with('-'))?;
        return which(name, path_var, cwd);
    }
    Some(PathBuf::from(first))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_npm_program_is_granted_its_whole_package() {
        assert_eq!(
            npm_package(Path::new(
                "/home/u/.npm-global/lib/node_modules/@openai/codex/bin/codex.js"
            )),
            Some(PathBuf::from(
                "/home/u/.npm-global/lib/node_modules/@openai/codex"
            ))
        );
        assert_eq!(
            npm_package(Path::new("/home/u/p/lib/node_modules/tool/cli.js")),
            Some(PathBuf::from("/home/u/p/lib/node_modules/tool"))
        );
        assert_eq!(npm_package(Path::new("/home/u/.local/bin/claude")), None);
        assert_eq!(npm_package(Path::new("/x/node_modules/file.js")), None);
    }

    #[test]
    fn a_script_under_a_home_is_granted_with_its_interpreter() {
        let d = tempfile::tempdir().unwrap();
        let bin = d.path().join("prefix/lib/node_modules/agent/bin");
        std::fs::create_dir_all(&bin).unwrap();
        let node_dir = d.path().join("nodejs/bin");
        std::fs::create_dir_all(&node_dir).unwrap();
        let node = node_dir.join("mynode");
        std::fs::write(&node, b"\x7fELF").unwrap();
        let cli = bin.join("cli.js");
        std::fs::write(&cli, "#!/usr/bin/env -S mynode --flag\nrun()\n").unwrap();
        for p in [&node, &cli] {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let links = d.path().join("prefix/bin");
        std::fs::create_dir_all(&links).unwrap();
        std::os::unix::fs::symlink(&cli, links.join("agent")).unwrap();
        let path = format!("{}:{}:/usr/bin", links.display(), node_dir.display());
        let v = visible("agent", &path, Path::new("/nonexistent-cwd")).unwrap();
        let real = |p: &Path| std::fs::canonicalize(p).unwrap();
        assert_eq!(v.exec, real(&cli));
        assert_eq!(
            v.grants,
            vec![
                real(&d.path().join("prefix/lib/node_modules/agent")),
                real(&node)
            ]
        );
        // A system program needs nothing.
        let v = visible("sh", "/usr/bin:/bin", Path::new("/nonexistent-cwd")).unwrap();
        assert!(v.grants.is_empty());
        assert!(visible("no-such-agent-xyz", &path, Path::new("/")).is_none());
    }
}
