//! Directory grants: what the broker allows under each root, and the checks that follow from it.

use globset::GlobSet;
use ipc_schema::fs::{Access, Caps, FsError, FsErrorKind, GrantConfig, GrantId};
use rustix::fd::OwnedFd;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// One grant, with its root held open (`O_PATH`) since before lockdown.
#[derive(Debug)]
pub struct Grant {
    pub id: GrantId,
    /// Canonical absolute root (no links), as bytes.
    pub root: Vec<u8>,
    pub root_fd: OwnedFd,
    pub caps: Caps,
    pub recursive: bool,
    pub confirmed: bool,
    pub include: Vec<String>,
    pub exclude: Vec<String>,
    include_set: Option<GlobSet>,
    exclude_set: GlobSet,
}

impl Grant {
    /// The grant `c` (checked by `config`), its root opened as `root_fd`; compiles its globs.
    pub fn new(c: GrantConfig, root_fd: OwnedFd) -> Result<Grant, String> {
        let build = |pats: &[String]| -> Result<GlobSet, String> {
            ipc_schema::grant_glob::set(pats, &format!("grant {}", c.id))
        };
        let include_set = match c.include.is_empty() {
            true => None,
            false => Some(build(&c.include)?),
        };
        let exclude_set = build(&c.exclude)?;
        Ok(Grant {
            id: c.id,
            root: c.root,
            root_fd,
            caps: c.caps,
            recursive: c.recursive,
            confirmed: c.confirmed,
            include: c.include,
            exclude: c.exclude,
            include_set,
            exclude_set,
        })
    }

    pub fn info(&self) -> GrantConfig {
        GrantConfig {
            id: self.id.clone(),
            root: self.root.clone(),
            caps: self.caps,
            recursive: self.recursive,
            confirmed: self.confirmed,
            include: self.include.clone(),
            exclude: self.exclude.clone(),
        }
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

    /// Refuses `rel` (canonical, `is_dir` if it names a directory) if the grant's shape or globs
    /// leave it out. Excludes apply to a path and everything under it; includes apply to files.
    pub fn check_scope(&self, rel: &[u8], depth: usize, is_dir: bool) -> Result<(), FsError> {
        let shown = String::from_utf8_lossy(rel);
        if !self.recursive && depth > 1 {
            return Err(FsError::new(
                FsErrorKind::NotRecursive,
                format!(
                    "{shown}: grant {} is not recursive; only its top-level entries are granted",
                    self.id
                ),
            ));
        }
        let path = Path::new(OsStr::from_bytes(rel));
        if ipc_schema::grant_glob::excluded(&self.exclude_set, path) {
            return Err(FsError::new(
                FsErrorKind::Excluded,
                format!(
                    "{shown}: excluded by grant {} ({})",
                    self.id,
                    self.exclude.join(", ")
                ),
            ));
        }
        if let (Some(inc), false) = (&self.include_set, is_dir || rel.is_empty()) {
            if !inc.is_match(path) {
                return Err(FsError::new(
                    FsErrorKind::Excluded,
                    format!(
                        "{shown}: not among the files grant {} includes ({})",
                        self.id,
                        self.include.join(", ")
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Refuses `access` if the grant lacks the capability for it.
    pub fn check_caps(&self, access: Access, shown: &str) -> Result<(), FsError> {
        let (has, name) = match access {
            Access::Read => (self.caps.read, "read"),
            Access::Write => (self.caps.write, "write"),
            Access::Edit => (self.caps.edit, "edit"),
            Access::Delete => (self.caps.delete, "delete"),
        };
        if has {
            return Ok(());
        }
        Err(FsError::new(
            FsErrorKind::NotPermitted,
            format!("{shown}: grant {} does not allow {name}", self.id),
        ))
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
    use rustix::fs::{Mode, OFlags};

    fn grant(id: &str, root: &str, include: &[&str], exclude: &[&str], recursive: bool) -> Grant {
        let fd = rustix::fs::open("/", OFlags::PATH, Mode::empty()).unwrap();
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
