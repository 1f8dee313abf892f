//! Protected paths: refused whatever a grant or an approval says (DESIGN.md, "Policy").
//!
//! Matched on the resolved absolute path, component by component, case-insensitively (always,
//! not only where the filesystem folds case: refusing `.SSH` on ext4 costs nothing, missing it on
//! a case-folding filesystem costs a key). A rule matches a path if its components appear
//! consecutively anywhere in it, so a rule protects the named place and everything beneath.

use ipc_schema::protected::RULES;

use ipc_schema::protected::GIT_INTERNAL;

/// Why a path is protected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Protection {
    /// The protected place, as a path (a rule, or one of gatehouse's directories).
    pub place: String,
    pub why: &'static str,
}

/// gatehouse's own directories (config, data, runtime, checkpoints), passed by the broker.
#[derive(Debug, Clone, Default)]
pub struct Protector {
    dirs: Vec<Vec<Vec<u8>>>,
    dirs_raw: Vec<Vec<u8>>,
}

/// Lower-cases one component for matching: Unicode-aware when it is UTF-8, ASCII otherwise.
fn fold(c: &[u8]) -> Vec<u8> {
    match std::str::from_utf8(c) {
        Ok(s) => s.to_lowercase().into_bytes(),
        Err(_) => c.to_ascii_lowercase(),
    }
}

/// The non-empty components of an absolute path.
pub fn components(abs: &[u8]) -> Vec<&[u8]> {
    abs.split(|&b| b == b'/')
        .filter(|c| !c.is_empty())
        .collect()
}

impl Protector {
    /// `dirs` are absolute directories (canonical where they exist).
    pub fn new(dirs: Vec<Vec<u8>>) -> Protector {
        Protector {
            dirs: dirs
                .iter()
                .map(|d| components(d).into_iter().map(fold).collect())
                .collect(),
            dirs_raw: dirs,
        }
    }

    pub fn dirs(&self) -> &[Vec<u8>] {
        &self.dirs_raw
    }

    /// Why `abs` (an absolute, resolved path) is protected, if it is.
    pub fn check(&self, abs: &[u8]) -> Option<Protection> {
        let comps: Vec<Vec<u8>> = components(abs).into_iter().map(fold).collect();
        for (dir, raw) in self.dirs.iter().zip(&self.dirs_raw) {
            if comps.len() >= dir.len() && comps[..dir.len()] == dir[..] {
                return Some(Protection {
                    place: String::from_utf8_lossy(raw).into_owned(),
                    why: "gatehouse's own directory",
                });
            }
        }
        for (rule, why) in RULES {
            if rule.len() <= comps.len()
                && comps
                    .windows(rule.len())
                    .any(|w| w.iter().zip(rule.iter()).all(|(c, r)| c == r.as_bytes()))
            {
                return Some(Protection {
                    place: rule.join("/"),
                    why,
                });
            }
        }
        if let Some(git) = comps.iter().position(|c| c == b".git") {
            if let Some(name) = comps[git + 1..]
                .iter()
                .find(|c| GIT_INTERNAL.iter().any(|g| c.as_slice() == g.as_bytes()))
            {
                return Some(Protection {
                    place: format!(".git/…/{}", String::from_utf8_lossy(name)),
                    why: "git hooks and config run code",
                });
            }
        }
        None
    }

    /// Like [`Protector::check`], and also refuses creating a non-directory named `.git`: a
    /// `.git` file (`gitdir: ...`) points git at a directory whose hooks would then run.
    pub fn check_new_file(&self, abs: &[u8]) -> Option<Protection> {
        if let Some(p) = self.check(abs) {
            return Some(p);
        }
        let last = components(abs).last().map(|c| fold(c));
        (last.as_deref() == Some(b".git")).then(|| Protection {
            place: ".git".into(),
            why: "a .git file redirects git to another directory",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p() -> Protector {
        Protector::new(vec![b"/home/u/.local/share/gatehouse".to_vec()])
    }

    #[test]
    fn key_material_in_any_case() {
        for path in [
            "/w/.ssh",
            "/w/.ssh/id_ed25519",
            "/w/.SSH/id_rsa",
            "/w/.Ssh/config",
            "/w/sub/.AWS/credentials",
            "/w/.kube/config",
            "/w/.docker/config.json",
            "/w/.Cargo/Credentials.toml",
        ] {
            assert!(p().check(path.as_bytes()).is_some(), "{path}");
        }
        assert!(p().check(b"/w/.kube/cache").is_none());
        assert!(p().check(b"/w/docker/config.json").is_none());
    }

    #[test]
    fn git_hooks_and_config_anywhere() {
        for path in [
            "/w/.git/hooks",
            "/w/.git/hooks/pre-commit",
            "/w/a/b/.git/hooks/pre-commit",
            "/w/.GIT/Hooks/pre-commit",
            "/w/.git/config",
            "/w/.git/modules/sub/config",
            "/w/.git/modules/sub/hooks/post-checkout",
        ] {
            let got = p().check(path.as_bytes());
            assert_eq!(got.unwrap().why, "git hooks and config run code", "{path}");
        }
        assert!(p().check(b"/w/.git/HEAD").is_none());
        assert!(p().check(b"/w/hooks/pre-commit").is_none());
        assert!(p().check(b"/w/config").is_none());
        assert_eq!(
            p().check_new_file(b"/w/sub/.git").unwrap().why,
            "a .git file redirects git to another directory"
        );
    }

    #[test]
    fn gatehouse_dirs_and_start_up_files() {
        let got = p()
            .check(b"/home/u/.local/share/gatehouse/checkpoints/x")
            .unwrap();
        assert_eq!(got.why, "gatehouse's own directory");
        assert!(p().check(b"/home/u/.local/share/gatehousex").is_none());
        assert!(p().check(b"/w/.bashrc").is_some());
        assert!(p().check(b"/w/.config/autostart/x.desktop").is_some());
        assert!(p().check(b"/w/src/main.rs").is_none());
    }

    #[test]
    fn non_utf8_components_fold_ascii() {
        let mut path = b"/w/\xff/.SsH/".to_vec();
        path.extend_from_slice(b"key");
        assert!(p().check(&path).is_some());
        assert!(p().check(b"/w/\xff\xfe").is_none());
    }
}
