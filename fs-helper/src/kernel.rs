//! The one way the helper opens anything under a grant: relative to the grant root's descriptor,
//! a canonical path of plain names, with the kernel refusing every link on the way.
//!
//! With openat2 that is `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS`; where
//! the kernel lacks openat2 it is a walk of one `openat(O_NOFOLLOW)` per component, which refuses
//! the same things. Either way `..` never reaches the kernel (the resolver folds it on the
//! canonical path it tracks), so a link or `..` that would leave the root fails at open time.

use ipc_schema::fs::FileKind;
use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use rustix::fs::{openat, openat2, statat, AtFlags, FileType, Mode, OFlags, ResolveFlags, Stat};
use rustix::io::Errno;

/// How paths are opened on this kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenMode {
    Openat2,
    ComponentWalk,
}

/// Finds out whether openat2 works here, using `dir` (any directory the helper holds). Must run
/// before lockdown: afterwards an unknown syscall is fatal, not ENOSYS.
pub fn probe_openat2(dir: BorrowedFd<'_>) -> Result<(), String> {
    match openat2(
        dir,
        ".",
        OFlags::PATH | OFlags::CLOEXEC,
        Mode::empty(),
        beneath(),
    ) {
        Ok(_) => Ok(()),
        Err(Errno::NOSYS) => Err("the kernel has no openat2 (ENOSYS)".into()),
        Err(e) => Err(format!("openat2 failed on a probe: {e}")),
    }
}

fn beneath() -> ResolveFlags {
    ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS
}

/// True if `c` is one plain name: not empty, not `.` or `..`, no `/` or NUL, at most 255 bytes.
pub fn is_plain_name(c: &[u8]) -> bool {
    !c.is_empty()
        && c != b"."
        && c != b".."
        && c.len() <= 255
        && !c.iter().any(|&b| b == b'/' || b == 0)
}

/// Opens `comps` (plain names, checked) beneath `root`. A link anywhere on the way, including
/// the last component unless `flags` has `O_PATH | O_NOFOLLOW`, fails with `ELOOP`.
pub fn open_beneath(
    mode: OpenMode,
    root: BorrowedFd<'_>,
    comps: &[Vec<u8>],
    flags: OFlags,
    create_mode: Mode,
) -> Result<OwnedFd, Errno> {
    if comps.iter().any(|c| !is_plain_name(c)) {
        return Err(Errno::INVAL);
    }
    // openat2 refuses O_PATH with any flag but O_DIRECTORY, O_NOFOLLOW and O_CLOEXEC.
    let flags = if flags.contains(OFlags::PATH) {
        flags | OFlags::CLOEXEC
    } else {
        flags | OFlags::CLOEXEC | OFlags::NOCTTY
    };
    let Some((last, dirs)) = comps.split_last() else {
        return openat(root, ".", flags, create_mode);
    };
    match mode {
        OpenMode::Openat2 => openat2(root, join(comps), flags, create_mode, beneath()),
        OpenMode::ComponentWalk => {
            let mut cur = openat(
                root,
                ".",
                OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
                Mode::empty(),
            )?;
            for c in dirs {
                cur = match openat(
                    &cur,
                    c.as_slice(),
                    OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                    Mode::empty(),
                ) {
                    // O_DIRECTORY on a link says ENOTDIR; openat2 says ELOOP. Say the same.
                    Err(Errno::NOTDIR) if is_link_at(cur.as_fd(), c) => return Err(Errno::LOOP),
                    other => other?,
                };
            }
            openat(&cur, last.as_slice(), flags | OFlags::NOFOLLOW, create_mode)
        }
    }
}

fn is_link_at(dir: BorrowedFd<'_>, name: &[u8]) -> bool {
    statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)
        .map(|st| FileType::from_raw_mode(st.st_mode) == FileType::Symlink)
        .unwrap_or(false)
}

/// `a/b/c` from components.
pub fn join(comps: &[Vec<u8>]) -> Vec<u8> {
    comps.join(&b'/')
}

/// What a stat says a file is.
pub fn kind_of(st: &Stat) -> FileKind {
    match FileType::from_raw_mode(st.st_mode) {
        FileType::RegularFile => FileKind::File,
        FileType::Directory => FileKind::Dir,
        FileType::Symlink => FileKind::Symlink,
        FileType::Fifo => FileKind::Fifo,
        FileType::Socket => FileKind::Socket,
        FileType::CharacterDevice => FileKind::CharDevice,
        FileType::BlockDevice => FileKind::BlockDevice,
        FileType::Unknown => FileKind::Socket,
    }
}

/// The same inode (device and inode number).
pub fn same_file(a: &Stat, b: &Stat) -> bool {
    a.st_dev == b.st_dev && a.st_ino == b.st_ino
}

/// Writes all of `data` at the descriptor's position.
pub fn write_all(fd: BorrowedFd<'_>, mut data: &[u8]) -> Result<(), Errno> {
    while !data.is_empty() {
        match rustix::io::write(fd, data) {
            Ok(0) => return Err(Errno::IO),
            Ok(n) => data = &data[n..],
            Err(Errno::INTR) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Reads up to `max` bytes from `offset` (fewer only at end of file).
pub fn pread_up_to(fd: BorrowedFd<'_>, offset: u64, max: usize) -> Result<Vec<u8>, Errno> {
    let mut buf = vec![0u8; max];
    let mut got = 0;
    while got < max {
        match rustix::io::pread(fd, &mut buf[got..], offset + got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(Errno::INTR) => {}
            Err(e) => return Err(e),
        }
    }
    buf.truncate(got);
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn root(dir: &std::path::Path) -> OwnedFd {
        rustix::fs::open(dir, OFlags::PATH | OFlags::DIRECTORY, Mode::empty()).unwrap()
    }

    fn comps(s: &str) -> Vec<Vec<u8>> {
        s.split('/').map(|c| c.as_bytes().to_vec()).collect()
    }

    #[test]
    fn both_modes_refuse_links_on_the_way_and_at_the_end() {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir(t.path().join("d")).unwrap();
        std::fs::write(t.path().join("d/f"), b"x").unwrap();
        symlink("d", t.path().join("ld")).unwrap();
        symlink("/etc/hostname", t.path().join("d/out")).unwrap();
        let r = root(t.path());
        for mode in [OpenMode::Openat2, OpenMode::ComponentWalk] {
            let ok = open_beneath(
                mode,
                r.as_fd(),
                &comps("d/f"),
                OFlags::RDONLY,
                Mode::empty(),
            );
            assert!(ok.is_ok(), "{mode:?}");
            let via_link = open_beneath(
                mode,
                r.as_fd(),
                &comps("ld/f"),
                OFlags::RDONLY,
                Mode::empty(),
            );
            assert_eq!(via_link.unwrap_err(), Errno::LOOP, "{mode:?}");
            let last_link = open_beneath(
                mode,
                r.as_fd(),
                &comps("d/out"),
                OFlags::RDONLY,
                Mode::empty(),
            );
            assert_eq!(last_link.unwrap_err(), Errno::LOOP, "{mode:?}");
            let link_itself = open_beneath(
                mode,
                r.as_fd(),
                &comps("d/out"),
                OFlags::PATH | OFlags::NOFOLLOW,
                Mode::empty(),
            )
            .unwrap();
            let st = rustix::fs::fstat(&link_itself).unwrap();
            assert_eq!(kind_of(&st), FileKind::Symlink);
            let dotdot = open_beneath(
                mode,
                r.as_fd(),
                &comps("d/../d/f"),
                OFlags::RDONLY,
                Mode::empty(),
            );
            assert_eq!(dotdot.unwrap_err(), Errno::INVAL, "{mode:?}");
        }
    }

    #[test]
    fn plain_names() {
        assert!(is_plain_name(b"a"));
        assert!(is_plain_name(&[0xff, 0xfe]));
        for bad in [&b""[..], b".", b"..", b"a/b", b"a\0b", &[b'x'; 256][..]] {
            assert!(!is_plain_name(bad), "{bad:?}");
        }
    }
}
