//! A grant's include and exclude globs, as every layer applies them (the broker's policy, the
//! fs-helper's tools and the exec sandbox's masks): `*` stays within one component, `**`
//! crosses, `\` escapes; matched on the path relative to the grant's root, and an exclude
//! matching any parent excludes everything beneath it.

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
