//! `move_path`: one rename between two places inside grants. A directory's whole tree is checked
//! at both its old and its new place, so a move can neither carry something protected out of its
//! protection (`.git` to `x`, then `x/hooks`) nor build a protected path (`evil` to `sub/.git`).

use super::delete::{check_tree, tree};
use super::write::{raced, receipt, recheck};
use super::{Fs, Want};
use crate::checkpoint::{keep, Entry, State};
use crate::kernel;
use crate::resolve::{io_error, Missing};
use ipc_schema::fs::{
    Access, ChangeKind, FileKind, FsError, FsErrorKind, FsPath, FsReply, CHECKPOINT_MAX_BYTES,
};
use rustix::fd::AsFd;
use rustix::fs::{OFlags, RenameFlags};
use rustix::io::Errno;

pub fn move_path(fs: &Fs, from: &FsPath, to: &FsPath, overwrite: bool) -> Result<FsReply, FsError> {
    let src = fs.target(from, Want::new(Access::Delete, Missing::Refuse))?;
    let dst = fs.target(
        to,
        Want {
            opens: false,
            follow_last: false,
            ..Want::new(Access::Write, Missing::Last)
        },
    )?;
    let (src_shown, dst_shown) = (src.shown(), dst.shown());
    if src.comps.is_empty() || dst.comps.is_empty() {
        return Err(FsError::new(
            FsErrorKind::BadRequest,
            format!("{src_shown} -> {dst_shown}: a grant root cannot be moved or replaced"),
        ));
    }
    let src_st = src.stat.expect("Missing::Refuse");
    // A moved non-directory lands under the destination's name: `.git` as a file is refused.
    if kernel::kind_of(&src_st) != FileKind::Dir {
        super::refuse_new_file(fs, &dst)?;
    }
    match dst.kind() {
        FileKind::Missing => {}
        _ if !overwrite => {
            return Err(FsError::new(
                FsErrorKind::AlreadyExists,
                format!("{dst_shown}: already exists (set overwrite to replace it)"),
            ))
        }
        FileKind::Dir => {
            return Err(FsError::new(
                FsErrorKind::IsADirectory,
                format!("{dst_shown}: is a directory; name the full destination path"),
            ))
        }
        FileKind::File | FileKind::Symlink => {}
        other => {
            return Err(FsError::new(
                FsErrorKind::SpecialFile,
                format!(
                    "{dst_shown}: is a {}; it is not replaced",
                    super::kind_name(other)
                ),
            ))
        }
    }
    if kernel::kind_of(&src_st) == FileKind::Dir {
        let entries = tree(fs, &src)?;
        check_tree(fs, &src, Some(&dst), &entries)?;
    }

    let mut rec = fs
        .store
        .begin(ChangeKind::Move, src.target(), Some(dst.target()))?;
    let dst_before = match dst.stat {
        None => Ok(State::Absent),
        Some(st) if kernel::kind_of(&st) == FileKind::Symlink => {
            let (parent, name) = dst.split_last().expect("below the root");
            let dir = fs.open_parent(dst.grant, parent)?;
            rustix::fs::readlinkat(&dir, name, Vec::new())
                .map(|t| State::Symlink {
                    target: t.into_bytes(),
                })
                .map_err(|e| io_error(&dst_shown, e))
        }
        Some(st) if kernel::links(&st) > 1 => {
            crate::checkpoint::mark_unrestorable(
                &mut rec,
                "the replaced file had other hard links; it was not read".into(),
            );
            Ok(State::Unkept)
        }
        Some(st) => {
            let size = st.st_size as u64;
            let data = if size <= CHECKPOINT_MAX_BYTES {
                fs.open_checked(&dst, OFlags::RDONLY)
                    .and_then(|(fd, _)| {
                        kernel::pread_up_to(fd.as_fd(), 0, size as usize)
                            .map_err(|e| io_error(&dst_shown, e))
                    })
                    .ok()
            } else {
                None
            };
            fs.store
                .add_blob(&mut rec, keep(data, size))
                .map(|blob| State::File {
                    mode: kernel::mode_bits(&st),
                    blob,
                    seal: None,
                })
        }
    };
    let dst_before = match dst_before.and_then(|s| fs.store.save(&rec).map(|()| s)) {
        Ok(s) => s,
        Err(e) => {
            fs.store.discard(&rec);
            return Err(e);
        }
    };

    let done = rename(fs, &src, &dst, &src_st, overwrite);
    if let Err(e) = done {
        fs.store.discard(&rec);
        return Err(e);
    }
    let (dev, ino) = kernel::dev_ino(&src_st);
    let moved = State::Inode { dev, ino };
    rec.entries = vec![
        Entry {
            grant: src.grant.id.clone(),
            relative: src.relative(),
            before: moved.clone(),
            after: State::Absent,
        },
        Entry {
            grant: dst.grant.id.clone(),
            relative: dst.relative(),
            before: dst_before,
            after: moved,
        },
    ];
    rec.sealed = true;
    fs.store.save(&rec)?;
    Ok(FsReply::Changed(receipt(
        rec,
        None,
        dst.stat.is_none(),
        None,
    )))
}

fn rename(
    fs: &Fs,
    src: &crate::resolve::Resolved<'_>,
    dst: &crate::resolve::Resolved<'_>,
    src_st: &rustix::fs::Stat,
    overwrite: bool,
) -> Result<(), FsError> {
    let (sp, sname) = src.split_last().expect("below the root");
    let (dp, dname) = dst.split_last().expect("below the root");
    let sdir = fs.open_parent(src.grant, sp)?;
    let ddir = fs.open_parent(dst.grant, dp)?;
    recheck(&sdir, sname, Some(src_st), &src.shown())?;
    recheck(&ddir, dname, dst.stat.as_ref(), &dst.shown())?;
    let flags = if overwrite && dst.stat.is_some() {
        RenameFlags::empty()
    } else {
        RenameFlags::NOREPLACE
    };
    let shown = format!("{} -> {}", src.shown(), dst.shown());
    match rustix::fs::renameat_with(&sdir, sname, &ddir, dname, flags) {
        Ok(()) => {}
        Err(Errno::XDEV) => {
            return Err(FsError::new(
                FsErrorKind::Unsupported,
                format!(
                    "{shown}: the two places are on different filesystems; move_path only renames"
                ),
            ))
        }
        Err(Errno::EXIST) => return Err(raced(&dst.shown())),
        Err(e) => return Err(io_error(&shown, e)),
    }
    rustix::fs::fsync(&ddir).map_err(|e| io_error(&shown, e))?;
    rustix::fs::fsync(&sdir).map_err(|e| io_error(&shown, e))
}
