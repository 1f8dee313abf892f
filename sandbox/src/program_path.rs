//! Where a command's program is, as Windows' `CreateProcess` and its shell look for it: the one
//! lookup the exec-helper (what it starts) and `gatehouse run` (which agent it starts) share.
//! Pure path logic, so it is tested on every OS.

use std::path::{Path, PathBuf};

/// `name` as given (relative to `cwd`) when it holds a directory, else in the absolute
/// directories of `path_var` (a relative entry would depend on the working directory), in
/// order; in each, `name` itself when it has an extension, then `name.EXT` for each of `exts`.
pub fn find(name: &str, path_var: &str, cwd: &Path, exts: &[&str]) -> Option<PathBuf> {
    let has_dir = name.contains(['\\', '/']) || Path::new(name).is_absolute();
    let dirs: Vec<PathBuf> = if has_dir {
        vec![cwd.to_path_buf()]
    } else {
        std::env::split_paths(path_var)
            .filter(|d| d.is_absolute())
            .collect()
    };
    for dir in dirs {
        let base = dir.join(name);
        if base.extension().is_some() && base.is_file() {
            return Some(base);
        }
        for ext in exts {
            let mut with = base.clone().into_os_string();
            with.push(".");
            with.push(ext);
            let with = PathBuf::from(with);
            if with.is_file() {
                return Some(with);
            }
        }
    }
    None
}

/// The extension of `p`, in lower case ("" for none).
pub fn extension(p: &Path) -> String {
    p.extension()
        .map(|e| e.to_string_lossy().to_ascii_lowercase())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_is_found_with_its_extensions_in_absolute_path_entries_only() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path();
        std::fs::write(dir.join("tool.exe"), b"MZ").unwrap();
        std::fs::write(dir.join("go.bat"), b"@echo").unwrap();
        std::fs::write(dir.join("notes.txt"), b"x").unwrap();
        let path = std::env::join_paths([dir]).unwrap();
        let path = path.to_str().unwrap();
        assert_eq!(
            find("tool", path, dir, &["exe"]),
            Some(dir.join("tool.exe"))
        );
        assert_eq!(find("go", path, dir, &["exe"]), None);
        assert_eq!(
            find("go", path, dir, &["exe", "bat"]),
            Some(dir.join("go.bat"))
        );
        // A name with an extension is itself, whatever it is (the caller judges it).
        assert_eq!(
            find("notes.txt", path, dir, &["exe"]),
            Some(dir.join("notes.txt"))
        );
        // A relative PATH entry is never searched; a name with a directory is the cwd's.
        assert_eq!(find("tool", ".", dir, &["exe"]), None);
        let sub = format!(".{}tool", std::path::MAIN_SEPARATOR);
        let found = find(&sub, "", dir, &["exe"]).map(|p| std::fs::canonicalize(p).unwrap());
        assert_eq!(
            found,
            Some(std::fs::canonicalize(dir.join("tool.exe")).unwrap())
        );
        assert_eq!(extension(Path::new("A.CMD")), "cmd");
        assert_eq!(extension(Path::new("a")), "");
    }
}
