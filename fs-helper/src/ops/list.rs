//! `list_dir` and `stat`.

use super::{need_dir, Fs, Want};
use crate::checkpoint::names;
use crate::kernel;
use crate::resolve::{io_error, Missing};
use ipc_schema::fs::{
    Access, DirEntry, FileKind, FileStat, FsError, FsErrorKind, FsPath, FsReply, Listing,
};
use rustix::fd::AsFd;
use rustix::fs::{AtFlags, OFlags};

const LIST_DEFAULT: u32 = 1000;
const LIST_MAX: u32 = 5000;
/// A directory with more entries than this is refused rather than sorted in memory.
const DIR_MAX: usize = 1_000_000;
/// Stop a page before its reply could outgrow a frame.
const PAGE_BYTES: usize = 768 * 1024;

pub fn list_dir(fs: &Fs, path: &FsPath, offset: u32, limit: u32) -> Result<FsReply, FsError> {
    let r = fs.target(path, Want::READ)?;
    need_dir(&r)?;
    let (fd, _) = fs.open_checked(&r, OFlags::RDONLY | OFlags::DIRECTORY)?;
    let mut all = names(fd.as_fd());
    if all.len() > DIR_MAX {
        return Err(FsError::new(
            FsErrorKind::TooLarge,
            format!("{}: more than {DIR_MAX} entries", r.shown()),
        ));
    }
    all.sort();
    let rel = r.relative();
    let depth = r.comps.len() + 1;
    let mut entries = Vec::new();
    let mut total = 0u32;
    let mut bytes = 0usize;
    let mut next_offset = None;
    let limit = match limit {
        0 => LIST_DEFAULT,
        n => n.min(LIST_MAX),
    };
    for name in all {
        let Ok(st) = rustix::fs::statat(&fd, name.as_slice(), AtFlags::SYMLINK_NOFOLLOW) else {
            continue; // gone since the directory was read
        };
        let kind = kernel::kind_of(&st);
        let child = child_path(&rel, &name);
        if r.grant
            .check_scope(&child, depth, kind == FileKind::Dir)
            .is_err()
        {
            continue;
        }
        total += 1;
        if total <= offset || next_offset.is_some() {
            continue;
        }
        if entries.len() as u32 >= limit || bytes >= PAGE_BYTES {
            next_offset = Some(total - 1);
            continue;
        }
        bytes += name.len() + 32;
        entries.push(DirEntry {
            protected: fs
                .protector
                .refuses(&r.grant.absolute(&child), false)
                .is_some(),
            size: if kind == FileKind::File {
                st.st_size as u64
            } else {
                0
            },
            name,
            kind,
        });
    }
    Ok(FsReply::Listing(Listing {
        dir: r.target(),
        entries,
        total,
        next_offset,
    }))
}

/// `parent/name` relative to the grant root.
pub fn child_path(parent: &[u8], name: &[u8]) -> Vec<u8> {
    let mut p = parent.to_vec();
    if !p.is_empty() {
        p.push(b'/');
    }
    p.extend_from_slice(name);
    p
}

pub fn stat(fs: &Fs, path: &FsPath) -> Result<FsReply, FsError> {
    let want = Want {
        opens: false,
        ..Want::new(Access::Read, Missing::Refuse)
    };
    let r = fs.target(path, want)?;
    let st = r
        .stat
        .ok_or_else(|| io_error(&r.shown(), rustix::io::Errno::NOENT))?;
    Ok(FsReply::Stat(FileStat {
        target: r.target(),
        size: st.st_size as u64,
        mode: st.st_mode & 0o7777,
        nlink: st.st_nlink,
        modified_unix_nanos: st.st_mtime as i128 * 1_000_000_000 + st.st_mtime_nsec as i128,
    }))
}
