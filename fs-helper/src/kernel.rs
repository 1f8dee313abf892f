//! The one way the helper opens anything under a grant: relative to the grant root's descriptor,
//! a canonical path of plain names, with the kernel refusing every link on the way.
//!
//! With openat2 that is `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS`; where
//! the kernel lacks openat2 (and on macOS, which has none) it is a walk of one
//! `openat(O_NOFOLLOW)` per component, which refuses the same things. Either way `..` never
//! reaches the kernel (the resolver folds it on the canonical path it tracks), so a link or `..`
//! that would leave the root fails at open time.
//!
//! Linux's `O_PATH` (a descriptor to stat and to open beneath, no I/O) has no macOS twin: there
//! [`PATH_ONLY`] is a read-only open for events only (`O_EVTONLY`), non-blocking so that a FIFO
//! never waits for a writer, and [`LINK_ITSELF`] adds `O_SYMLINK` (open a link, not its target).

use ipc_schema::fs::FileKind;
use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use rustix::fs::{openat, statat, AtFlags, FileType, Mode, OFlags, RawMode, Stat};
#[cfg(target_os = "linux")]
use rustix::fs::{openat2, ResolveFlags};
use rustix::io::Errno;

/// A descriptor for naming only: to stat, to open beneath, never to read or write.
#[cfg(target_os = "linux")]
pub const PATH_ONLY: OFlags = OFlags::PATH;
/// [`PATH_ONLY`] of a link itself, not of what it points to.
#[cfg(target_os = "linux")]
pub const LINK_ITSELF: OFlags = OFlags::PATH.union(OFlags::NOFOLLOW);
/// A descriptor for naming only (`O_EVTONLY`: for events, no data read; `O_NONBLOCK`: a FIFO
/// does not wait for its writer).
#[cfg(not(target_os = "linux"))]
pub const PATH_ONLY: OFlags = OFlags::NONBLOCK.union(OFlags::from_bits_retain(EVTONLY));
/// [`PATH_ONLY`] of a link itself (`O_SYMLINK`), not of what it points to.
#[cfg(not(target_os = "linux"))]
pub const LINK_ITSELF: OFlags = PATH_ONLY.union(OFlags::SYMLINK);
/// `O_EVTONLY` of <sys/fcntl.h>, which rustix does not name.
#[cfg(not(target_os = "linux"))]
const EVTONLY: u32 = libc::O_EVTONLY as u32;

/// How paths are opened on this kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenMode {
    #[cfg(target_os = "linux")]
    Openat2,
    ComponentWalk,
}

/// Finds out whether openat2 works here, using `dir` (any directory the helper holds). Must run
/// before lockdown: afterwards an unknown syscall is fatal, not ENOSYS.
#[cfg(not(target_os = "linux"))]
pub fn probe_openat2(_dir: BorrowedFd<'_>) -> Result<OpenMode, String> {
    Err("this system has no openat2".into())
}

/// Finds out whether openat2 works here, using `dir` (any directory the helper holds). Must run
/// before lockdown: afterwards an unknown syscall is fatal, not ENOSYS.
#[cfg(target_os = "linux")]
pub fn probe_openat2(dir: BorrowedFd<'_>) -> Result<OpenMode, String> {
    match openat2(
        dir,
        ".",
        OFlags::PATH | OFlags::CLOEXEC,
        Mode::empty(),
        beneath(),
    ) {
        Ok(_) => Ok(OpenMode::Openat2),
        Err(Errno::NOSYS) => Err("the kernel has no openat2 (ENOSYS)".into()),
        Err(e) => Err(format!("openat2 failed on a probe: {e}")),
    }
}

#[cfg(target_os = "linux")]
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
/// the last component unless `flags` has [`LINK_ITSELF`], fails with `ELOOP`.
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
    let flags = if flags.contains(PATH_ONLY) {
        flags | OFlags::CLOEXEC
    } else {
        flags | OFlags::CLOEXEC | OFlags::NOCTTY
    };
    let Some((last, dirs)) = comps.split_last() else {
        return openat(root, ".", flags, create_mode);
    };
    match mode {
        #[cfg(target_os = "linux")]
        OpenMode::Openat2 => openat2(root, join(comps), flags, create_mode, beneath()),
        OpenMode::ComponentWalk => {
            let mut cur = openat(
                root,
                ".",
                PATH_ONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
                Mode::empty(),
            )?;
            for c in dirs {
                cur = match openat(
                    &cur,
                    c.as_slice(),
                    PATH_ONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                    Mode::empty(),
                ) {
                    // O_DIRECTORY on a link says ENOTDIR; openat2 says ELOOP. Say the same.
                    Err(Errno::NOTDIR) if is_link_at(cur.as_fd(), c) => return Err(Errno::LOOP),
                    other => other?,
                };
            }
            // A link at the end is opened itself only when asked for (`LINK_ITSELF`: on Linux
            // `O_PATH | O_NOFOLLOW`, on macOS `O_SYMLINK`, which `O_NOFOLLOW` would override).
            let last_flags = if flags.contains(LINK_ITSELF) {
                flags
            } else {
                flags | OFlags::NOFOLLOW
            };
            openat(&cur, last.as_slice(), last_flags, create_mode)
        }
    }
}

/// The target of the link at `comps` beneath `root`, `link` being it opened with
/// [`LINK_ITSELF`]. Linux reads it through the descriptor; macOS cannot (no `readlinkat` of an
/// empty path), so it reads the name in its parent after checking that the name still is that
/// link (`ELOOP` if it changed).
pub fn read_link(
    mode: OpenMode,
    root: BorrowedFd<'_>,
    comps: &[Vec<u8>],
    link: BorrowedFd<'_>,
) -> Result<Vec<u8>, Errno> {
    #[cfg(target_os = "linux")]
    {
        let _ = (mode, root, comps);
        rustix::fs::readlinkat(link, "", Vec::new()).map(|t| t.into_bytes())
    }
    #[cfg(not(target_os = "linux"))]
    {
        let (name, parent) = comps.split_last().ok_or(Errno::INVAL)?;
        let dir = open_beneath(
            mode,
            root,
            parent,
            PATH_ONLY | OFlags::DIRECTORY,
            Mode::empty(),
        )?;
        let named = statat(&dir, name.as_slice(), AtFlags::SYMLINK_NOFOLLOW)?;
        if !same_file(&named, &rustix::fs::fstat(link)?) {
            return Err(Errno::LOOP);
        }
        rustix::fs::readlinkat(&dir, name.as_slice(), Vec::new()).map(|t| t.into_bytes())
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

// The stat fields' widths differ (macOS: a 16-bit mode and link count, a signed 32-bit device),
// so these conversions are identities on Linux.

/// The permission bits of `st` (and set-id and sticky).
#[allow(clippy::useless_conversion)]
pub fn mode_bits(st: &Stat) -> u32 {
    u32::from(st.st_mode) & 0o7777
}

/// The mode for permission bits `bits` (as [`mode_bits`] gives them).
#[allow(clippy::unnecessary_cast)]
pub fn mode(bits: u32) -> Mode {
    Mode::from_raw_mode((bits & 0o7777) as RawMode)
}

/// The device and inode number, as the checkpoint records them.
#[allow(clippy::unnecessary_cast)]
pub fn dev_ino(st: &Stat) -> (u64, u64) {
    (st.st_dev as u64, st.st_ino as u64)
}

/// How many names the inode has.
#[allow(clippy::useless_conversion)]
pub fn links(st: &Stat) -> u64 {
    u64::from(st.st_nlink)
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
        rustix::fs::open(dir, PATH_ONLY | OFlags::DIRECTORY, Mode::empty()).unwrap()
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
        let modes: &[OpenMode] = &[
            #[cfg(target_os = "linux")]
            OpenMode::Openat2,
            OpenMode::ComponentWalk,
        ];
        for &mode in modes {
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
            let link_itself =
                open_beneath(mode, r.as_fd(), &comps("d/out"), LINK_ITSELF, Mode::empty()).unwrap();
            let st = rustix::fs::fstat(&link_itself).unwrap();
            assert_eq!(kind_of(&st), FileKind::Symlink);
            assert_eq!(
                read_link(mode, r.as_fd(), &comps("d/out"), link_itself.as_fd()).unwrap(),
                b"/etc/hostname"
            );
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
