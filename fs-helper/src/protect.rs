//! Protected paths: refused whatever a grant or an approval says (DESIGN.md, "Policy").
//!
//! The table and the matcher are `ipc_schema::protected`, the same the broker and the exec
//! sandbox apply: matched on the resolved absolute path, component by component,
//! case-insensitively (always, not only where the filesystem folds case: refusing `.SSH` on
//! ext4 costs nothing, missing it on a case-folding filesystem costs a key). Writes are refused
//! in every protected place; reads only where the place is never read (keys, credentials).
//!
//! Added here, where the directory can be looked at: nothing the tools write may turn a
//! directory into a git directory whose config or hooks git would then run (a bare repository
//! is any directory with `HEAD`, `objects/` and `refs/`; git finds one above the user's working
//! directory without any `.git`).

pub use ipc_schema::protected::Protection;

/// gatehouse's own directories (config, data, runtime, checkpoints), passed by the broker.
#[derive(Debug, Clone, Default)]
pub struct Protector {
    inner: ipc_schema::protected::Protector,
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
            inner: ipc_schema::protected::Protector::new(dirs),
        }
    }

    pub fn dirs(&self) -> Vec<Vec<u8>> {
        self.inner.dirs()
    }

    /// Why `abs` (an absolute, resolved path) is protected, if it is, whatever the access.
    #[cfg(test)]
    pub fn check(&self, abs: &[u8]) -> Option<Protection> {
        self.inner.check(abs)
    }

    /// Why an access to `abs` is refused: every protected place refuses a write, only
    /// `Guard::NoAccess` places a read.
    pub fn refuses(&self, abs: &[u8], writes: bool) -> Option<Protection> {
        self.inner.refuses(abs, writes)
    }

    /// Like a write check, and also refuses creating a non-directory named `.git`
    /// (`ipc_schema::protected::Protector::check_new_file`).
    pub fn check_new_file(&self, abs: &[u8]) -> Option<Protection> {
        self.inner.check_new_file(abs)
    }

    /// `ipc_schema::protected::git_shape`.
    pub fn git_shape(
        comps: &[Vec<u8>],
        exists: impl Fn(&[Vec<u8>], &str) -> bool,
    ) -> Option<Protection> {
        ipc_schema::protected::git_shape(comps, exists)
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
            assert!(p().refuses(path.as_bytes(), false).is_some(), "{path}");
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
    fn a_bare_repository_cannot_be_assembled() {
        let c = |s: &str| -> Vec<Vec<u8>> { s.split('/').map(|x| x.as_bytes().to_vec()).collect() };
        let has = |present: &'static [&'static str]| {
            move |dir: &[Vec<u8>], name: &str| {
                let mut p = crate::kernel::join(dir);
                if !p.is_empty() {
                    p.push(b'/');
                }
                p.extend_from_slice(name.as_bytes());
                present.iter().any(|x| x.as_bytes() == p.as_slice())
            }
        };
        // evil/ has HEAD: its config and hooks are refused, other files are not.
        let head = has(&["evil/HEAD"]);
        assert!(Protector::git_shape(&c("evil/config"), head).is_some());
        assert!(Protector::git_shape(&c("evil/hooks/post-checkout"), head).is_some());
        assert!(Protector::git_shape(&c("evil/Config"), head).is_some());
        assert!(Protector::git_shape(&c("evil/description"), head).is_none());
        assert!(Protector::git_shape(&c("other/config"), head).is_none());
        // The other order: HEAD beside a config.
        let cfg = has(&["evil/config"]);
        assert!(Protector::git_shape(&c("evil/HEAD"), cfg).is_some());
        assert!(Protector::git_shape(&c("src/HEAD"), cfg).is_none());
        // A project file named config, with no HEAD beside it, is fine.
        assert!(Protector::git_shape(&c("app/config"), has(&[])).is_none());
    }

    #[test]
    fn files_that_run_code_are_read_only() {
        assert!(p().refuses(b"/w/.vscode/tasks.json", false).is_none());
        assert!(p().refuses(b"/w/.vscode/tasks.json", true).is_some());
        assert!(p().check_new_file(b"/w/.claude/commands/x.md").is_some());
        assert!(p().refuses(b"/w/.codex/auth.json", false).is_some());
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
