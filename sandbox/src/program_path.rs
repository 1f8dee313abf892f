//! Where a command's program is, as Windows' `CreateProcess` and its shell look for it ([`find`]),
//! or as a Unix shell does ([`which`]): the one lookup the exec-helper (what it starts) and
//! `gatehouse run` (which agent it starts) share on each OS. [`find`] is pure path logic, so it
//! is tested on every OS.

use std::path::{Component, Path, PathBuf};

/// `name` as given (relative to `cwd`) when it holds a directory, else in the absolute
/// directories of `path_var` (a relative entry would depend on the working directory), in
/// order; in each, `name` itself when it has an extension, then `name.EXT` for each of `exts`.
pub fn find(name: &str, path_var: &str, cwd: &Path, exts: &[&str]) -> Option<PathBuf> {
    let has_dir = name.contains(['\\', '/']) || Path::new(name).is_absolute();
    let bases: Vec<PathBuf> = if has_dir {
        vec![joined(cwd, name)]
    } else {
        std::env::split_paths(path_var)
            .filter(|d| d.is_absolute())
            .map(|d| d.join(name))
            .collect()
    };
    for base in bases {
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

/// `name` resolved against `cwd` by its components (`.` dropped, `..` taking one away): a
/// Windows working directory is often a `\\?\` path, in which Windows reads `.` and `..`
/// literally.
fn joined(cwd: &Path, name: &str) -> PathBuf {
    let mut p = cwd.to_path_buf();
    for c in Path::new(name).components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                p.pop();
            }
            other => p.push(other),
        }
    }
    p
}

/// The extension of `p`, in lower case ("" for none).
pub fn extension(p: &Path) -> String {
    p.extension()
        .map(|e| e.to_string_lossy().to_ascii_lowercase())
        .unwrap_or_default()
}

/// Unix: `name` as the shell finds it: as given (relative to `cwd`, `.` components dropped) when
/// it holds a `/`, else the first executable file of that name in the absolute directories of
/// `path_var` (a relative entry would depend on the working directory).
#[cfg(unix)]
pub fn which(name: &str, path_var: &str, cwd: &Path) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let runnable = |p: &PathBuf| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if name.contains('/') {
        return std::path::absolute(cwd.join(name)).ok().filter(runnable);
    }
    std::env::split_paths(path_var)
        .filter(|d| d.is_absolute())
        .map(|d| d.join(name))
        .find(runnable)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    #[test]
    fn which_finds_executables_only_in_absolute_path_entries_or_by_path() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let (a, b) = (d.path().join("a"), d.path().join("b"));
        std::fs::create_dir_all(&a).unwrap();
        std::fs::create_dir_all(&b).unwrap();
        let exe = |p: &Path, mode: u32| {
            std::fs::write(p, b"#!/bin/sh\n").unwrap();
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
        };
        exe(&a.join("tool"), 0o644);
        exe(&b.join("tool"), 0o755);
        let path = format!("{}:{}", a.display(), b.display());
        // The first entry's file is not executable: the second's is the one.
        assert_eq!(which("tool", &path, Path::new("/")), Some(b.join("tool")));
        assert_eq!(which("missing", &path, Path::new("/")), None);
        // A relative entry is never searched, wherever the caller stands.
        assert_eq!(which("tool", "b", d.path()), None);
        // A name with a `/` is taken relative to `cwd`, its `.` dropped; not executable: none.
        assert_eq!(which("./b/tool", "", d.path()), Some(b.join("tool")));
        assert_eq!(which("a/tool", "", d.path()), None);
    }

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
        // `.` and `..` are resolved here, not left to Windows (which takes them literally
        // after `\\?\`).
        std::fs::create_dir(dir.join("sub")).unwrap();
        let sep = std::path::MAIN_SEPARATOR;
        let found = find(&format!(".{sep}sub{sep}..{sep}tool"), "", dir, &["exe"]);
        assert_eq!(found, Some(dir.join("tool.exe")));
        assert_eq!(extension(Path::new("A.CMD")), "cmd");
        assert_eq!(extension(Path::new("a")), "");
    }
}
