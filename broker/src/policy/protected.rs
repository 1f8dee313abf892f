//! Protected paths, checked again by the broker on the resolved path (the fs-helper checks them
//! too: DESIGN rule 10, every layer re-checks). Refused whatever a grant, a rule or an approval
//! says.
//!
//! Same table as the fs-helper's (`ipc_schema::protected`) and the same semantics (a rule's
//! components appearing consecutively anywhere in the path, matched case-insensitively; `hooks`
//! and `config` anywhere below a `.git`), so the two layers cannot disagree.

use ipc_schema::protected::RULES;

use ipc_schema::protected::GIT_INTERNAL;

fn fold(c: &[u8]) -> Vec<u8> {
    match std::str::from_utf8(c) {
        Ok(s) => s.to_lowercase().into_bytes(),
        Err(_) => c.to_ascii_lowercase(),
    }
}

fn components(abs: &[u8]) -> Vec<Vec<u8>> {
    abs.split(|&b| b == b'/')
        .filter(|c| !c.is_empty() && *c != b".")
        .map(fold)
        .collect()
}

/// gatehouse's own directories plus the fixed table.
#[derive(Debug, Clone, Default)]
pub struct Protected {
    dirs: Vec<(Vec<Vec<u8>>, String)>,
}

impl Protected {
    pub fn new(own_dirs: &[std::path::PathBuf]) -> Protected {
        use std::os::unix::ffi::OsStrExt;
        let mut dirs = Vec::new();
        for d in own_dirs {
            // Both as given and canonical: a data dir reached through a link is still ours.
            let mut forms = vec![d.clone()];
            if let Ok(c) = std::fs::canonicalize(d) {
                forms.push(c);
            }
            for f in forms {
                dirs.push((
                    components(f.as_os_str().as_bytes()),
                    d.display().to_string(),
                ));
            }
        }
        Protected { dirs }
    }

    /// Why `abs` (absolute, resolved) is protected, if it is.
    pub fn check(&self, abs: &[u8]) -> Option<String> {
        let comps = components(abs);
        for (dir, shown) in &self.dirs {
            if !dir.is_empty() && comps.len() >= dir.len() && comps[..dir.len()] == dir[..] {
                return Some(format!("{shown} is gatehouse's own directory"));
            }
        }
        for (rule, why) in RULES {
            if rule.len() <= comps.len()
                && comps
                    .windows(rule.len())
                    .any(|w| w.iter().zip(rule.iter()).all(|(c, r)| c == r.as_bytes()))
            {
                return Some(format!("{} is protected ({why})", rule.join("/")));
            }
        }
        if let Some(git) = comps.iter().position(|c| c == b".git") {
            if let Some(name) = comps[git + 1..]
                .iter()
                .find(|c| GIT_INTERNAL.iter().any(|g| c.as_slice() == g.as_bytes()))
            {
                return Some(format!(
                    ".git/…/{} is protected (git hooks and config run code)",
                    String::from_utf8_lossy(name)
                ));
            }
        }
        None
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
        ] {
            assert!(p.check(path.as_bytes()).is_some(), "{path}");
        }
        for path in [
            "/w/proj/src/main.rs",
            "/w/proj/.git/objects/ab",
            "/w/.sshd_notes",
            "/home/u/.local/share/other",
        ] {
            assert_eq!(p.check(path.as_bytes()), None, "{path}");
        }
    }
}
