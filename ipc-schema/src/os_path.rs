//! A path as the bytes gatehouse carries it on the wire, and back: one conversion for every
//! crate. On Unix the bytes are the path's own bytes, exactly. On other systems they are the
//! standard library's encoding of the name (`OsStr::as_encoded_bytes`, WTF-8 on Windows); the
//! way back borrows when the bytes are UTF-8, which every Windows name without an unpaired
//! UTF-16 surrogate is, and shows any other bytes with U+FFFD (such a name can be carried and
//! compared, never opened: no file helper runs on Windows yet).

use std::borrow::Cow;
use std::path::Path;

/// Whether `b` separates a path's components on this OS: `/`, and on Windows `\` as well
/// (`std::path::is_separator` for one byte of a path's bytes).
pub fn is_separator(b: u8) -> bool {
    b == b'/' || (cfg!(windows) && b == b'\\')
}

/// The bytes of `p`.
pub fn of(p: &Path) -> &[u8] {
    p.as_os_str().as_encoded_bytes()
}

/// The path the bytes `b` name.
#[cfg(unix)]
pub fn to_path(b: &[u8]) -> Cow<'_, Path> {
    use std::os::unix::ffi::OsStrExt;
    Cow::Borrowed(Path::new(std::ffi::OsStr::from_bytes(b)))
}

/// The path the bytes `b` name (see the module docs for bytes that are not UTF-8).
#[cfg(not(unix))]
pub fn to_path(b: &[u8]) -> Cow<'_, Path> {
    match String::from_utf8_lossy(b) {
        Cow::Borrowed(s) => Cow::Borrowed(Path::new(s)),
        Cow::Owned(s) => Cow::Owned(s.into()),
    }
}

/// Makes a rename in the directory `dir` durable, every writer's last step after the rename of
/// its temporary file. On Unix that is an fsync of the directory. Windows has no directory
/// handle to flush (opening one needs backup semantics, and NTFS journals the rename itself),
/// so there is nothing to do there.
pub fn sync_dir(dir: &Path) -> std::io::Result<()> {
    #[cfg(unix)]
    return std::fs::File::open(dir)?.sync_all();
    #[cfg(not(unix))]
    {
        let _ = dir;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        for s in ["/w/proj/src/main.rs", "relative/x", "", "/ünï/cödé"] {
            let p = Path::new(s);
            assert_eq!(of(p), s.as_bytes());
            assert_eq!(to_path(of(p)).as_ref(), p);
        }
    }

    #[cfg(unix)]
    #[test]
    fn unix_bytes_are_exact() {
        let b = b"/w/\xff\xfe";
        assert_eq!(of(&to_path(b)), b);
    }

    #[cfg(not(unix))]
    #[test]
    fn other_bytes_are_shown_replaced() {
        assert_eq!(
            to_path(b"C:\\w\\\xff").as_ref(),
            Path::new("C:\\w\\\u{fffd}")
        );
    }
}
