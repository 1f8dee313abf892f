//! Windows: the agent's program as `gatehouse run` starts it.
//!
//! A command there reads as the user (a write-restricted token restricts writes only:
//! docs/SECURITY.md), so nothing is granted to make the program visible; what matters is what
//! `CreateProcess` starts: a `.exe` or `.com`, as given or found in `PATH`. An agent installed
//! with npm (`claude.cmd`, `codex.cmd`) is a batch shim, which `CreateProcess` runs only
//! through `cmd.exe`, and cmd reads the arguments again (an `&` or `|` in a prompt would run a
//! command). So the run starts what the shim would, node and the package's script, read from
//! the shim npm wrote (`"%dp0%\node_modules\...\cli.js"`); any other batch file is refused.

use crate::cmd_sandbox::{self, refused, Stop};
use sandbox::program_path::{extension, find};
use std::path::{Path, PathBuf};

/// What [`resolve`] found: the head of the agent's argv; nothing to grant on Windows.
pub struct Resolved {
    pub exec: Vec<String>,
    pub grants: Vec<PathBuf>,
}

/// The extensions looked for when the name has none, in `PATHEXT`'s usual order.
const EXTENSIONS: [&str; 4] = ["com", "exe", "bat", "cmd"];

/// The most of a shim this reads (npm's are under 1 KiB).
const SHIM_MAX: u64 = 64 * 1024;

/// The agent's program as the run starts it, or why not (126: a batch file that is not an
/// npm shim; 127: not found).
pub fn resolve(argv0: &str, path_var: &str, cwd: &Path) -> Result<Resolved, Stop> {
    let found = find(argv0, path_var, cwd, &EXTENSIONS).ok_or_else(|| {
        Stop(
            format!("{argv0}: not found in PATH"),
            cmd_sandbox::EXIT_NOT_FOUND,
        )
    })?;
    let ext = extension(&found);
    if ext == "exe" || ext == "com" {
        return Ok(Resolved {
            exec: vec![text(&found)?],
            grants: Vec::new(),
        });
    }
    let shim = std::fs::read(&found).map_err(|e| refused(format!("{}: {e}", found.display())))?;
    let script = (shim.len() as u64 <= SHIM_MAX)
        .then(|| npm_script(&String::from_utf8_lossy(&shim)))
        .flatten();
    let dir = found.parent().unwrap_or(Path::new(""));
    let Some(script) = script.map(|s| dir.join(s)).filter(|s| s.is_file()) else {
        return Err(Stop(
            format!(
                "{} is not a program Windows starts directly (a batch file or script), and gatehouse run does not start one through cmd.exe (which would read the agent's arguments again); name the program it runs",
                found.display()
            ),
            cmd_sandbox::EXIT_NOT_EXECUTABLE,
        ));
    };
    // npm's shim prefers a node.exe beside it, else the one in PATH.
    let node = Some(dir.join("node.exe"))
        .filter(|n| n.is_file())
        .or_else(|| find("node.exe", path_var, cwd, &[]))
        .ok_or_else(|| {
            Stop(
                format!(
                    "{} is an npm shim for {}, and node.exe is not in PATH",
                    found.display(),
                    script.display()
                ),
                cmd_sandbox::EXIT_NOT_FOUND,
            )
        })?;
    Ok(Resolved {
        exec: vec![text(&node)?, text(&script)?],
        grants: Vec::new(),
    })
}

fn text(p: &Path) -> Result<String, Stop> {
    p.to_str()
        .map(str::to_string)
        .ok_or_else(|| refused(format!("{}: the path is not valid Unicode", p.display())))
}

/// The script an npm shim runs, relative to the shim's directory: the quoted
/// `"%dp0%\...js"` of npm's cmd-shim (`.js`, `.cjs` or `.mjs`), without `..`.
fn npm_script(shim: &str) -> Option<PathBuf> {
    const AT: &str = "\"%dp0%\\";
    let start = shim.find(AT)? + AT.len();
    let mut rest = &shim[start..];
    // Skip the `node.exe` test: the script is the first quoted path that is one.
    loop {
        let end = rest.find('"')?;
        let rel = &rest[..end];
        let is_script = [".js", ".cjs", ".mjs"]
            .iter()
            .any(|e| rel.to_ascii_lowercase().ends_with(e));
        if is_script && !rel.split(['\\', '/']).any(|c| c == "..") && !rel.contains('%') {
            return Some(rel.split(['\\', '/']).collect());
        }
        let next = rest[end..].find(AT)? + end + AT.len();
        rest = &rest[next..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What npm 10's cmd-shim writes for `@openai/codex`.
    const CODEX_SHIM: &str = "@ECHO off\r\nGOTO start\r\n:find_dp0\r\nSET dp0=%~dp0\r\nEXIT /b\r\n:start\r\nSETLOCAL\r\nCALL :find_dp0\r\n\r\nIF EXIST \"%dp0%\\node.exe\" (\r\n  SET \"_prog=%dp0%\\node.exe\"\r\n) ELSE (\r\n  SET \"_prog=node\"\r\n  SET PATHEXT=%PATHEXT:;.JS;=;%\r\n)\r\n\r\nendLocal & goto #_undefined_# 2>NUL || title %COMSPEC% & \"%_prog%\"  \"%dp0%\\node_modules\\@openai\\codex\\bin\\codex.js\" %*\r\n";

    #[test]
    fn an_npm_shim_names_its_script() {
        assert_eq!(
            npm_script(CODEX_SHIM),
            Some(
                ["node_modules", "@openai", "codex", "bin", "codex.js"]
                    .iter()
                    .collect()
            )
        );
        assert_eq!(npm_script("@echo off\r\nrun.exe %*\r\n"), None);
        assert_eq!(npm_script("\"%dp0%\\..\\evil.js\" %*"), None);
    }

    #[test]
    fn programs_batch_files_and_shims() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path();
        let path = dir.to_string_lossy().to_string();
        std::fs::write(dir.join("agent.exe"), b"MZ").unwrap();
        std::fs::write(dir.join("node.exe"), b"MZ").unwrap();
        let script = dir.join(r"node_modules\@openai\codex\bin");
        std::fs::create_dir_all(&script).unwrap();
        std::fs::write(script.join("codex.js"), "//").unwrap();
        std::fs::write(dir.join("codex.cmd"), CODEX_SHIM).unwrap();
        std::fs::write(dir.join("other.cmd"), "@echo off\r\ntool.exe %*\r\n").unwrap();

        let r = resolve("agent", &path, dir).ok().unwrap();
        assert_eq!(r.exec, vec![dir.join("agent.exe").to_string_lossy()]);
        let r = resolve("codex", &path, dir).ok().unwrap();
        assert_eq!(
            r.exec,
            vec![
                dir.join("node.exe").to_string_lossy().to_string(),
                script.join("codex.js").to_string_lossy().to_string()
            ]
        );
        let Err(Stop(why, code)) = resolve("other", &path, dir) else {
            panic!("a batch file that is not a shim ran")
        };
        assert_eq!(code, cmd_sandbox::EXIT_NOT_EXECUTABLE);
        assert!(
            why.contains("is not a program Windows starts directly"),
            "{why}"
        );
        let Err(Stop(why, code)) = resolve("nothing-here", &path, dir) else {
            panic!("found a program that is not there")
        };
        assert_eq!(
            (why.as_str(), code),
            ("nothing-here: not found in PATH", 127)
        );
    }
}
