//! The demo's scratch world, all inside one private temporary directory: a HOME with a planted
//! shell start-up file and SSH key (never the real home), a small project in it, and the data
//! directory of a private gatehouse instance. Removed at the end unless kept.

#[cfg(unix)]
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// A line of the planted key that must never reach the agent.
pub const KEY_MARK: &str = "DEMO-KEY-MATERIAL-NOT-A-REAL-KEY";
pub const BASHRC: &str =
    "# the scratch HOME's shell start-up file, planted by gatehouse demo\nexport PS1='$ '\n";
pub const MAIN_RS: &str =
    "fn main() {\n    println!(\"hello\");\n}\n// TODO: greet the user by name\n";
pub const CHANGELOG: &str = "# Changelog\n\n## Unreleased\n";

pub struct Scratch {
    pub root: PathBuf,
    pub home: PathBuf,
    pub project: PathBuf,
    /// The private instance's `--data-dir`.
    pub data: PathBuf,
    pub keep: bool,
}

/// A new file; `mode` on Unix (Windows: the directory's inherited ACL, the user's alone).
fn write(path: &Path, text: &str, mode: u32) -> Result<(), String> {
    use std::io::Write;
    let mut o = std::fs::OpenOptions::new();
    o.write(true).create_new(true);
    #[cfg(unix)]
    o.mode(mode);
    #[cfg(windows)]
    let _ = mode;
    let mut f = o
        .open(path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    f.write_all(text.as_bytes())
        .map_err(|e| format!("{}: {e}", path.display()))
}

fn dir(path: &Path, mode: u32) -> Result<(), String> {
    #[cfg(unix)]
    let made = std::fs::DirBuilder::new().mode(mode).create(path);
    #[cfg(windows)]
    let made = {
        let _ = mode;
        std::fs::create_dir(path)
    };
    made.map_err(|e| format!("{}: {e}", path.display()))
}

/// A fresh directory in the temporary directory, only this user's (0700; on Windows the
/// temporary directory's ACL, which is the user's profile's).
fn scratch_root() -> Result<PathBuf, String> {
    let tmp = std::env::temp_dir();
    let fail = |e: &dyn std::fmt::Display| {
        format!("cannot make a scratch directory in {}: {e}", tmp.display())
    };
    #[cfg(unix)]
    return nix::unistd::mkdtemp(&tmp.join("gatehouse-demo-XXXXXX")).map_err(|e| fail(&e));
    #[cfg(windows)]
    loop {
        let root = tmp.join(format!("gatehouse-demo-{:08x}", rand::random::<u32>()));
        match std::fs::create_dir(&root) {
            Ok(()) => return Ok(root),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(fail(&e)),
        }
    }
}

impl Scratch {
    pub fn create(keep: bool) -> Result<Scratch, String> {
        let root = scratch_root()?;
        // The broker shows resolved paths; resolve ours the same way (/tmp may be a link).
        let root = std::fs::canonicalize(&root).map_err(|e| format!("{}: {e}", root.display()))?;
        let s = Scratch {
            home: root.join("home"),
            project: root.join("home/project"),
            data: root.join("gatehouse"),
            root,
            keep,
        };
        // The root and the HOME are searchable by others, as most homes are: run as root, the
        // exec sandbox runs commands as an unprivileged id, which a 0700 directory above the
        // project would keep out. What is private stays private: ~/.ssh is 0700 and the key
        // 0600, and the broker makes its own directories 0700.
        #[cfg(unix)]
        std::fs::set_permissions(&s.root, std::fs::Permissions::from_mode(0o755))
            .map_err(|e| format!("{}: {e}", s.root.display()))?;
        dir(&s.home, 0o755)?;
        dir(&s.home.join(".ssh"), 0o700)?;
        write(&s.home.join(".bashrc"), BASHRC, 0o644)?;
        write(
            &s.home.join(".ssh/id_ed25519"),
            &format!("-----BEGIN OPENSSH PRIVATE KEY-----\n{KEY_MARK}\n-----END OPENSSH PRIVATE KEY-----\n"),
            0o600,
        )?;
        dir(&s.project, 0o755)?;
        dir(&s.project.join("src"), 0o755)?;
        write(
            &s.project.join("README.md"),
            "# demo-app\n\nA scratch project made by `gatehouse demo`.\n",
            0o644,
        )?;
        write(&s.project.join("src/main.rs"), MAIN_RS, 0o644)?;
        write(
            &s.project.join("src/lib.rs"),
            "pub fn add(a: i32, b: i32) -> i32 {\n    a + b\n}\n",
            0o644,
        )?;
        write(&s.project.join("CHANGELOG.md"), CHANGELOG, 0o644)?;
        Ok(s)
    }

    pub fn read(&self, path: &Path) -> String {
        std::fs::read_to_string(path).unwrap_or_default()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if !self.keep {
            let _ = std::fs::remove_dir_all(&self.root);
        }
    }
}
