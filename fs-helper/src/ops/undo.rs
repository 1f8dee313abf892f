//! `undo`: put back what a checkpoint kept, through the same resolution and checks as any write,
//! and only if every path it touched is still exactly as the change left it.

use super::write::{replace, seal_whole};
use super::{kind_name, Fs};
use crate::checkpoint::{Entry, Record, State};
use crate::kernel;
use crate::resolve::{self, io_error, Missing, Resolved};
use ipc_schema::fs::{Access, ChangeKind, CheckpointId, FileKind, FsError, FsErrorKind, FsReply};
use rustix::fs::{AtFlags, RenameFlags};

pub fn undo(fs: &Fs, id: &CheckpointId) -> Result<FsReply, FsError> {
    let mut rec = fs.store.load(id)?;
    fs_change::check_undoable(&rec)?;
    for e in &rec.entries {
        let r = locate(fs, e)?;
        let now = describe(fs, &r);
        if !is(fs, &r, &e.after) {
            return Err(FsError::new(
                FsErrorKind::ChangedSince,
                format!(
                    "{}: changed since checkpoint {id} (it is now {now}); undo would overwrite that, so nothing was restored",
                    r.shown()
                ),
            ));
        }
    }
    if rec.info.change == ChangeKind::Move {
        move_back(fs, &rec)?;
    } else {
        for e in rec.entries.iter().rev() {
            restore(fs, &rec, e)?;
        }
    }
    rec.info.undone = true;
    fs.store.save(&rec)?;
    Ok(FsReply::Undone(rec.info))
}

/// Resolves an entry's path now, and checks it as a write.
fn locate<'f>(fs: &'f Fs, e: &Entry) -> Result<Resolved<'f>, FsError> {
    let grant = fs.grants.by_id(&e.grant)?;
    let comps = resolve::request_components(&e.relative, grant)?;
    let r = resolve::resolve(fs.mode, grant, comps, false, Missing::WithParents)?;
    fs.check(&r, Access::Write)?;
    Ok(r)
}

fn describe(fs: &Fs, r: &Resolved<'_>) -> String {
    match (r.kind(), r.stat) {
        (FileKind::Missing, _) => "absent".into(),
        (FileKind::File, Some(st)) => match seal_whole(fs, r) {
            Ok(s) => format!(
                "a file of {} bytes, sha256 {}",
                s.len,
                crate::checkpoint::hex(&s.sha256[..6])
            ),
            Err(_) => format!("a file of {} bytes", st.st_size),
        },
        (k, _) => format!("a {}", kind_name(k)),
    }
}

/// True if what is at `r` is `state`.
fn is(fs: &Fs, r: &Resolved<'_>, state: &State) -> bool {
    match (state, r.stat) {
        (State::Absent, st) => st.is_none(),
        (_, None) => false,
        (State::File { seal: Some(s), .. }, Some(_)) => {
            r.kind() == FileKind::File && seal_whole(fs, r).is_ok_and(|now| now == *s)
        }
        (State::Dir { .. }, Some(_)) => r.kind() == FileKind::Dir,
        (State::Inode { dev, ino }, Some(st)) => kernel::dev_ino(&st) == (*dev, *ino),
        (State::Symlink { target }, Some(_)) => {
            r.kind() == FileKind::Symlink && read_link(fs, r).is_ok_and(|t| t == *target)
        }
        (State::File { seal: None, .. } | State::Unkept, Some(_)) => false,
    }
}

fn read_link(fs: &Fs, r: &Resolved<'_>) -> Result<Vec<u8>, FsError> {
    let (parent, name) = r.split_last().expect("below the root");
    let dir = fs.open_parent(r.grant, parent)?;
    rustix::fs::readlinkat(&dir, name, Vec::new())
        .map(|t| t.into_bytes())
        .map_err(|e| io_error(&r.shown(), e))
}

/// Makes the path of `e` hold its `before` state again.
fn restore(fs: &Fs, rec: &Record, e: &Entry) -> Result<(), FsError> {
    let r = locate(fs, e)?;
    let shown = r.shown();
    let Some((parent, name)) = r.split_last() else {
        return Err(FsError::new(
            FsErrorKind::BadRequest,
            format!("{shown}: is a grant root"),
        ));
    };
    let dir = || fs.open_parent(r.grant, parent);
    let io = |err| io_error(&shown, err);
    match &e.before {
        State::Absent => {
            let Some(seen) = r.stat else { return Ok(()) };
            let dir = dir()?;
            match rustix::fs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(now) if kernel::same_file(&now, &seen) => {}
                _ => {
                    return Err(FsError::new(
                        FsErrorKind::Raced,
                        format!("{shown}: changed by someone else during the undo"),
                    ))
                }
            }
            let flags = if r.kind() == FileKind::Dir {
                AtFlags::REMOVEDIR
            } else {
                AtFlags::empty()
            };
            rustix::fs::unlinkat(&dir, name, flags).map_err(io)?;
            rustix::fs::fsync(&dir).map_err(io)
        }
        State::File {
            mode,
            blob: Some(n),
            ..
        } => {
            let data = fs.store.blob(&rec.info.id, *n)?;
            replace(fs, &r, &data, *mode).map(|_| ())
        }
        State::Dir { mode } if r.stat.is_none() => {
            rustix::fs::mkdirat(&dir()?, name, kernel::mode(*mode)).map_err(io)
        }
        State::Dir { .. } => Ok(()),
        State::Symlink { target } => {
            rustix::fs::symlinkat(target.as_slice(), &dir()?, name).map_err(io)
        }
        State::File { blob: None, .. } | State::Unkept | State::Inode { .. } => Err(FsError::new(
            FsErrorKind::Unrestorable,
            format!("{shown}: its old contents were not kept"),
        )),
    }
}

fn move_back(fs: &Fs, rec: &Record) -> Result<(), FsError> {
    let [src, dst] = rec.entries.as_slice() else {
        return Err(FsError::new(
            FsErrorKind::Io,
            "a move checkpoint has two entries",
        ));
    };
    let (s, d) = (locate(fs, src)?, locate(fs, dst)?);
    let (sp, sname) = s.split_last().expect("below the root");
    let (dp, dname) = d.split_last().expect("below the root");
    let shown = format!("{} -> {}", d.shown(), s.shown());
    let (sdir, ddir) = (fs.open_parent(s.grant, sp)?, fs.open_parent(d.grant, dp)?);
    rustix::fs::renameat_with(&ddir, dname, &sdir, sname, RenameFlags::NOREPLACE)
        .map_err(|e| io_error(&shown, e))?;
    rustix::fs::fsync(&sdir).map_err(|e| io_error(&shown, e))?;
    rustix::fs::fsync(&ddir).map_err(|e| io_error(&shown, e))?;
    restore(fs, rec, dst)
}
