//! `list_dir` and `stat`.

use super::{need_dir, Fs, Want};
use crate::checkpoint::names;
use crate::kernel;
use crate::resolve::{io_error, Missing};
use ipc_schema::fs::{
    Access, DirEntry, FileKind, FileStat, FsError, FsErrorKind, FsPath, FsReply, Listing,
};
use ipc_schema::fs_walk::{Page, DIR_MAX};
use rustix::fd::AsFd;
use rustix::fs::{AtFlags, OFlags};

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
    let mut page = Page::new(offset, limit);
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
        if !page.offer(name.len()) {
            continue;
        }
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
        total: page.total,
        next_offset: page.next_offset,
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
        mode: kernel::mode_bits(&st),
        nlink: kernel::links(&st),
        modified_unix_nanos: st.st_mtime as i128 * 1_000_000_000 + st.st_mtime_nsec as i128,
    }))
}
