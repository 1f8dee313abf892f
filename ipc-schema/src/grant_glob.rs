//! A grant's include and exclude globs, as every layer applies them (the broker's policy, the
//! fs-helper's tools and the exec sandbox's masks): `*` stays within one component, `**`
//! crosses, `\` escapes; matched on the path relative to the grant's root, and an exclude
//! matching any parent excludes everything beneath it.

use crate::fs::{Access, Caps, FsError, FsErrorKind, GrantConfig};
use globset::{Glob, GlobBuilder, GlobSet, GlobSetBuilder};
use std::path::Path;

/// One glob, built the way grants use it (also for the fs-helper's search globs).
pub fn glob(pattern: &str) -> Result<Glob, globset::Error> {
    GlobBuilder::new(pattern)
        .literal_separator(true)
        .backslash_escape(true)
        .build()
}

/// The compiled set of `patterns` (`what` names them in errors).
pub fn set(patterns: &[String], what: &str) -> Result<GlobSet, String> {
    let mut b = GlobSetBuilder::new();
    for p in patterns {
        b.add(glob(p).map_err(|e| format!("{what}: bad glob {p:?}: {e}"))?);
    }
    b.build().map_err(|e| format!("{what}: {e}"))
}

/// Whether `rel` (relative to the grant's root) or any of its parents matches `exclude`.
pub fn excluded(exclude: &GlobSet, rel: &Path) -> bool {
    let mut prefix = Some(rel);
    while let Some(p) = prefix.filter(|p| !p.as_os_str().is_empty()) {
        if exclude.is_match(p) {
            return true;
        }
        prefix = p.parent();
    }
    false
}

/// One grant's shape and globs, and the checks that follow from them: what the fs-helper on
/// each OS applies to every path it resolves. Its fields are the grant's (`Deref`).
#[derive(Debug)]
pub struct Scope {
    config: GrantConfig,
    include_set: Option<GlobSet>,
    exclude_set: GlobSet,
}

impl std::ops::Deref for Scope {
    type Target = GrantConfig;
    fn deref(&self) -> &GrantConfig {
        &self.config
    }
}

/// What a helper checks of a grant on its own, whatever the OS: the id is 1-64 of
/// `A-Z a-z 0-9 _ . -`, and the grant has a capability.
pub fn check_config(c: &GrantConfig) -> Result<(), String> {
    let id = &c.id.0;
    if id.is_empty()
        || id.len() > 64
        || !id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b))
    {
        return Err(format!(
            "grant {id:?}: the id must be 1-64 of A-Z a-z 0-9 _ . -"
        ));
    }
    if c.caps == Caps::default() {
        return Err(format!("grant {id}: no capabilities"));
    }
    Ok(())
}

impl Scope {
    /// The grant `c` (checked by the helper's configuration); compiles its globs.
    pub fn new(c: GrantConfig) -> Result<Scope, String> {
        let build =
            |pats: &[String]| -> Result<GlobSet, String> { set(pats, &format!("grant {}", c.id)) };
        let include_set = match c.include.is_empty() {
            true => None,
            false => Some(build(&c.include)?),
        };
        let exclude_set = build(&c.exclude)?;
        Ok(Scope {
            config: c,
            include_set,
            exclude_set,
        })
    }

    pub fn info(&self) -> GrantConfig {
        self.config.clone()
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
        let path = crate::os_path::to_path(rel);
        let path = path.as_ref();
        if excluded(&self.exclude_set, path) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn excludes_cover_what_is_beneath_and_stars_stay_in_a_component() {
        let s = set(&["secret/**".into(), "*.pem".into()], "t").unwrap();
        assert!(excluded(&s, Path::new("secret/key.pem")));
        assert!(excluded(&s, Path::new("secret/a/b")));
        assert!(excluded(&s, Path::new("a.pem")));
        assert!(!excluded(&s, Path::new("sub/a.pem")));
        assert!(!excluded(&s, Path::new("secretive/x")));
        assert!(set(&["a[".into()], "t").is_err());
    }
}
