//! `move_path` on Windows: one rename between two places inside grants
//! (`NtSetInformationFile` relative to the destination directory's handle). A directory's whole
//! tree is checked at its old and its new place, so a move can neither carry something
//! protected out of its protection (`.git` to `x`, then `x/hooks`) nor build a protected path
//! (`evil` to `sub/.git`).

use crate::config::Fs;
use crate::store::read_all;
use crate::walk::io_error;
use fs_change::{keep, Entry, Record, State};
use ipc_schema::fs::{
    Access, ChangeKind, FsError, FsErrorKind, FsPath, FsReply, CHECKPOINT_MAX_BYTES,
};
use sandbox::windows::beneath::{self, Identity, Want};
use std::os::windows::io::AsHandle;

fn inode(id: Identity) -> State {
    State::Inode {
        dev: id.volume as u64,
        ino: id.index,
    }
}

impl Fs {
    pub fn move_path(
        &self,
        from: &FsPath,
        to: &FsPath,
        overwrite: bool,
    ) -> Result<FsReply, FsError> {
        let src = self.locate(from, Access::Delete)?;
        let dst = self.locate(to, Access::Write)?;
        let (src_shown, dst_shown) = (src.shown(), dst.shown());
        let Some((_, src_meta, src_id)) = &src.target else {
            return Err(FsError::new(
                FsErrorKind::NotFound,
                format!("{src_shown}: no such file or directory"),
            ));
        };
        let src_id = *src_id;
        if dst.missing > 1 {
            return Err(FsError::new(
                FsErrorKind::NotFound,
                format!("{dst_shown}: its directory does not exist"),
            ));
        }
        if dst.target.is_some() && !overwrite {
            return Err(FsError::new(
                FsErrorKind::AlreadyExists,
                format!("{dst_shown}: already exists (set overwrite to replace it)"),
            ));
        }
        // The tree at its old place, and each entry again at its new one.
        if src_meta.is_dir() {
            for (comps, is_dir) in self.tree(src.grant, &src.comps)? {
                let rel = &comps[src.comps.len()..];
                let mut abs = dst.grant.root.clone();
                abs.comps.extend(dst.comps.iter().chain(rel).cloned());
                let shown = abs.verbatim();
                if let Some(p) = self.protector.refuses(shown.as_bytes(), true) {
                    return Err(FsError::new(
                        FsErrorKind::Protected,
                        format!(
                            "{shown} (where {src_shown} would put it) is protected ({}: {})",
                            p.why, p.place
                        ),
                    ));
                }
                let new: Vec<String> = dst.comps.iter().chain(rel).cloned().collect();
                (dst.grant.scope).check_scope(new.join("/").as_bytes(), new.len(), is_dir)?;
            }
        }
        let mut rec = self.store.begin(ChangeKind::Move, src.target())?;
        rec.info.moved_to = Some(dst.target());
        let dst_before = match &dst.target {
            None => State::Absent,
            Some((f, m, _)) => {
                let data = (m.len() <= CHECKPOINT_MAX_BYTES)
                    .then(|| read_all(f).ok())
                    .flatten();
                State::File {
                    mode: 0o644,
                    blob: self.store.add_blob(&mut rec, keep(data, m.len()))?,
                    seal: None,
                }
            }
        };
        rec.entries = vec![
            Entry {
                grant: src.grant.scope.id.clone(),
                relative: src.comps.join(r"\").into_bytes(),
                before: inode(src_id),
                after: State::Absent,
            },
            Entry {
                grant: dst.grant.scope.id.clone(),
                relative: dst.comps.join(r"\").into_bytes(),
                before: dst_before,
                after: inode(src_id),
            },
        ];
        self.store.save(&rec)?;
        let created = dst.target.is_none();
        // Our own handles (not shared for deleting) would refuse the rename.
        drop((src, dst));
        let done = self.rename(&rec, src_id, overwrite);
        if let Err(e) = done {
            self.store.discard(&rec);
            return Err(e);
        }
        rec.sealed = true;
        self.store.save(&rec)?;
        Ok(FsReply::Changed(fs_change::receipt(
            rec, None, created, None,
        )))
    }

    /// Renames the first entry's path of a move record to the second's (or, with `back`, the
    /// second's to the first's), both located afresh: the name moved must still be `id`.
    fn rename_entries(
        &self,
        from: &Entry,
        to: &Entry,
        id: Identity,
        replace: bool,
    ) -> Result<(), FsError> {
        let path = |e: &Entry| FsPath::InGrant {
            grant: e.grant.clone(),
            path: e.relative.clone(),
        };
        let (fg, fc) = self.names(&path(from))?;
        let (tg, tc) = self.names(&path(to))?;
        let shown = format!(
            r"{}\{} -> {}\{}",
            fg.root.verbatim(),
            fc.join(r"\"),
            tg.root.verbatim(),
            tc.join(r"\")
        );
        let io = |e| io_error(&shown, e);
        let (fname, fparent) = fc.split_last().expect("below the root");
        let (tname, tparent) = tc.split_last().expect("below the root");
        let parent = |g, p: &[String]| -> Result<std::fs::File, FsError> {
            match self.descend(g, p, false)?.pop() {
                Some(d) => Ok(d),
                None => beneath::open_beneath(g.handle.as_handle(), "", Want::Dir).map_err(io),
            }
        };
        let (sdir, ddir) = (parent(fg, fparent)?, parent(tg, tparent)?);
        let f = beneath::open_to_change(sdir.as_handle(), fname).map_err(io)?;
        let now = beneath::identity(&f).map_err(io)?;
        if (now.volume, now.index) != (id.volume, id.index) {
            return Err(FsError::new(
                FsErrorKind::Raced,
                format!(
                    "{shown}: replaced by another file while the request ran; nothing was done"
                ),
            ));
        }
        beneath::rename_into(&f, ddir.as_handle(), tname, replace).map_err(|e| {
            match e.raw_os_error() {
                Some(80 | 183) => FsError::new(
                    FsErrorKind::Raced,
                    format!(
                        "{shown}: the destination appeared while the request ran; nothing was done"
                    ),
                ),
                Some(17) => FsError::new(
                    FsErrorKind::Unsupported,
                    format!(
                        "{shown}: the two places are on different volumes; move_path only renames"
                    ),
                ),
                _ => io(e),
            }
        })
    }

    fn rename(&self, rec: &Record, id: Identity, overwrite: bool) -> Result<(), FsError> {
        let [src, dst] = rec.entries.as_slice() else {
            return Err(FsError::new(
                FsErrorKind::Io,
                "a move checkpoint has two entries",
            ));
        };
        self.rename_entries(src, dst, id, overwrite)
    }

    /// Undo of a move: the moved file or directory back to its old name, then what it replaced.
    pub(crate) fn move_back(&self, rec: &Record) -> Result<(), FsError> {
        let [src, dst] = rec.entries.as_slice() else {
            return Err(FsError::new(
                FsErrorKind::Io,
                "a move checkpoint has two entries",
            ));
        };
        let State::Inode { dev, ino } = dst.after else {
            return Err(FsError::new(
                FsErrorKind::Io,
                "a move checkpoint names no file",
            ));
        };
        let id = Identity {
            volume: dev as u32,
            index: ino,
            links: 1,
        };
        self.rename_entries(dst, src, id, false)?;
        match &dst.before {
            State::Absent => Ok(()),
            _ => self.restore(rec, dst),
        }
    }
}
