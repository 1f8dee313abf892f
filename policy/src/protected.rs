//! Protected paths, checked again by the broker on the resolved path (the fs-helper checks them
//! too: DESIGN rule 10, every layer re-checks). Refused whatever a grant, a rule or an approval
//! says.
//!
//! The table and the matcher are the fs-helper's and the exec sandbox's too
//! (`ipc_schema::protected`), so the layers cannot disagree; this adds only the broker's own
//! directories, as given and canonical.

use ipc_schema::protected::Protector;

/// gatehouse's own directories plus the fixed table.
#[derive(Debug, Clone, Default)]
pub struct Protected {
    inner: Protector,
}

impl Protected {
    pub fn new(own_dirs: &[std::path::PathBuf]) -> Protected {
        let mut dirs = Vec::new();
        for d in own_dirs {
            // Both as given and canonical: a data dir reached through a link is still ours.
            dirs.push(ipc_schema::os_path::of(d).to_vec());
            if let Ok(c) = std::fs::canonicalize(d) {
                dirs.push(ipc_schema::os_path::of(&c).to_vec());
            }
        }
        Protected {
            inner: Protector::new(dirs),
        }
    }

    /// Why an access to `abs` (absolute, resolved) is refused, if it is: a write (`writes`) is
    /// refused in every protected place, a read only where the place is never read.
    pub fn check(&self, abs: &[u8], writes: bool) -> Option<String> {
        self.inner.refuses(abs, writes).map(|p| {
            if p.why == "gatehouse's own directory" {
                format!("{} is gatehouse's own directory", p.place)
            } else if p.refuses(false) {
                format!("{} is protected ({})", p.place, p.why)
            } else {
                format!("{} is protected from writes ({})", p.place, p.why)
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protected_places_in_any_case_and_depth() {
        let p = Protected::new(&["/home/u/.local/share/gatehouse".into()]);
        for path in [
            "/w/.ssh/id_ed25519",
            "/w/.SSH",
            "/w/.Ssh/config",
            "/home/u/.bashrc",
            "/w/proj/.git/hooks/pre-commit",
            "/w/proj/vendor/x/.git/config",
            "/home/u/.config/autostart/x.desktop",
            "/home/u/.local/share/gatehouse/gatehouse.db",
            "/home/u/.local/share/GATEHOUSE",
            "/home/u/.codex/auth.json",
        ] {
            assert!(p.check(path.as_bytes(), false).is_some(), "{path}");
        }
        for path in [
            "/w/proj/src/main.rs",
            "/w/proj/.git/objects/ab",
            "/w/.sshd_notes",
            "/home/u/.local/share/other",
        ] {
            assert_eq!(p.check(path.as_bytes(), true), None, "{path}");
        }
        assert_eq!(p.check(b"/w/proj/.vscode/tasks.json", false), None);
        assert_eq!(
            p.check(b"/w/proj/.vscode/tasks.json", true).unwrap(),
            ".vscode is protected from writes (editor tasks and settings run programs)"
        );
    }
}
