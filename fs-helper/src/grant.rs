//! Directory grants: what the broker allows under each root, and the checks that follow from it.

use ipc_schema::fs::{FsError, FsErrorKind, GrantConfig, GrantId};
pub use ipc_schema::grant_glob::Scope;
use rustix::fd::OwnedFd;

/// One grant, with its root held open (`O_PATH`) since before lockdown; its checks are the
/// shared [`Scope`]'s (the Windows fs-helper applies the same).
#[derive(Debug)]
pub struct Grant {
    pub scope: Scope,
    pub root_fd: OwnedFd,
}

impl std::ops::Deref for Grant {
    type Target = Scope;
    fn deref(&self) -> &Scope {
        &self.scope
    }
}

impl Grant {
    /// The grant `c` (checked by `config`), its root opened as `root_fd`; compiles its globs.
    pub fn new(c: GrantConfig, root_fd: OwnedFd) -> Result<Grant, String> {
        Ok(Grant {
            scope: Scope::new(c)?,
            root_fd,
        })
    }

    /// `root/relative` as bytes.
    pub fn absolute(&self, rel: &[u8]) -> Vec<u8> {
        let mut out = self.root.clone();
        if !rel.is_empty() {
            if out.last() != Some(&b'/') {
                out.push(b'/');
            }
            out.extend_from_slice(rel);
        }
        out
    }
}

/// All grants, in the order given.
#[derive(Debug, Default)]
pub struct Grants(pub Vec<Grant>);

impl Grants {
    pub fn by_id(&self, id: &GrantId) -> Result<&Grant, FsError> {
        self.0.iter().find(|g| &g.id == id).ok_or_else(|| {
            FsError::new(
                FsErrorKind::NoGrant,
                format!("there is no grant named {id}"),
            )
        })
    }

    /// The grant whose root is a component-wise prefix of `abs` (as written), longest root
    /// first, and the rest of the path.
    pub fn for_absolute<'a>(&self, abs: &'a [u8]) -> Result<(&Grant, Vec<&'a [u8]>), FsError> {
        let shown = String::from_utf8_lossy(abs);
        if abs.first() != Some(&b'/') {
            return Err(FsError::new(
                FsErrorKind::InvalidPath,
                format!("{shown}: not an absolute path"),
            ));
        }
        let comps: Vec<&[u8]> = abs
            .split(|&b| b == b'/')
            .filter(|c| !c.is_empty() && *c != b".")
            .collect();
        let mut best: Option<(&Grant, usize)> = None;
        for g in &self.0 {
            let root = crate::protect::components(&g.root);
            if root.len() <= comps.len()
                && root[..] == comps[..root.len()]
                && best.is_none_or(|(_, n)| root.len() > n)
            {
                best = Some((g, root.len()));
            }
        }
        match best {
            Some((g, n)) => Ok((g, comps[n..].to_vec())),
            None => Err(FsError::new(
                FsErrorKind::NoGrant,
                format!("{shown}: not inside any grant"),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipc_schema::fs::Caps;
    use rustix::fs::Mode;

    fn grant(id: &str, root: &str, include: &[&str], exclude: &[&str], recursive: bool) -> Grant {
        let fd = rustix::fs::open("/", crate::kernel::PATH_ONLY, Mode::empty()).unwrap();
        let c = GrantConfig {
            id: GrantId(id.into()),
            root: root.as_bytes().to_vec(),
            caps: Caps {
                read: true,
                ..Caps::default()
            },
            recursive,
            confirmed: false,
            include: include.iter().map(|s| s.to_string()).collect(),
            exclude: exclude.iter().map(|s| s.to_string()).collect(),
        };
        Grant::new(c, fd).unwrap()
    }

    #[test]
    fn longest_root_wins_and_dotdot_is_not_folded() {
        let gs = Grants(vec![
            grant("outer", "/w", &[], &[], true),
            grant("inner", "/w/sub", &[], &[], true),
        ]);
        let (g, rest) = gs.for_absolute(b"/w/sub/./x").unwrap();
        assert_eq!(g.id.0, "inner");
        assert_eq!(rest, vec![&b"x"[..]]);
        let (g, rest) = gs.for_absolute(b"/w/subway/x").unwrap();
        assert_eq!(g.id.0, "outer");
        assert_eq!(rest.len(), 2);
        let err = gs.for_absolute(b"/w2/x").unwrap_err();
        assert_eq!(err.kind, FsErrorKind::NoGrant);
        let err = gs.for_absolute(b"/other/../w/x").unwrap_err();
        assert_eq!(err.kind, FsErrorKind::NoGrant);
        let (_, rest) = gs.for_absolute(b"/w/../etc/passwd").unwrap();
        assert_eq!(rest[0], b"..");
    }

    #[test]
    fn excludes_cover_subtrees_and_includes_only_files() {
        let g = grant("g", "/w", &["**/*.rs"], &["target", "**/secret*"], true);
        assert!(g.check_scope(b"src/main.rs", 2, false).is_ok());
        assert!(g.check_scope(b"src", 1, true).is_ok());
        let e = g.check_scope(b"README.md", 1, false).unwrap_err();
        assert_eq!(e.kind, FsErrorKind::Excluded);
        let e = g.check_scope(b"target/debug/x.rs", 3, false).unwrap_err();
        assert_eq!(e.kind, FsErrorKind::Excluded);
        let e = g.check_scope(b"a/secrets/b.rs", 3, false).unwrap_err();
        assert_eq!(e.kind, FsErrorKind::Excluded);
        let flat = grant("f", "/w", &[], &[], false);
        assert!(flat.check_scope(b"a", 1, true).is_ok());
        let e = flat.check_scope(b"a/b", 2, false).unwrap_err();
        assert_eq!(e.kind, FsErrorKind::NotRecursive);
    }
}
