//! `delete_path` on Windows: a file, an empty directory, or with `recursive` a whole tree, each
//! entry checked (protected, excluded, no reparse point) before anything is removed, and kept
//! in a checkpoint (text files' contents, directories) so that undo can put it back.

use crate::config::{Fs, Grant};
use crate::store::read_all;
use crate::walk::{io_error, kind_of, Place};
use fs_change::{check_expected, keep, Entry, Kept, State};
use ipc_schema::fs::{
    Access, ChangeKind, FileKind, FsError, FsErrorKind, FsPath, FsReply, Seal, CHECKPOINT_MAX_BYTES,
};
use sandbox::windows::beneath::{self, New, Want};
use std::fs::File;
use std::os::windows::fs::MetadataExt;
use std::os::windows::io::AsHandle;

/// A recursive delete touches at most this many entries (the Unix helper's cap).
const TREE_MAX: usize = 10_000;
/// And keeps at most this much old content in its checkpoint.
const TREE_KEEP_MAX: u64 = 256 << 20;

impl Fs {
    /// The directory at `top` and everything under it, children before their directory, each
    /// checked as a delete: no reparse point, nothing protected or outside the grant's globs.
    pub(crate) fn tree(
        &self,
        grant: &Grant,
        top: &[String],
    ) -> Result<Vec<(Vec<String>, bool)>, FsError> {
        let (mut out, mut stack) = (Vec::new(), vec![(top.to_vec(), false)]);
        while let Some((dir, listed)) = stack.pop() {
            if listed {
                out.push((dir, true));
                continue;
            }
            let shown = || format!(r"{}\{}", grant.root.verbatim(), dir.join(r"\"));
            let handle = match self.descend(grant, &dir, false)?.pop() {
                Some(h) => h,
                None => return Err(FsError::new(FsErrorKind::BadRequest, "the grant root")),
            };
            stack.push((dir.clone(), true));
            for l in beneath::list_dir(&handle).map_err(|e| io_error(&shown(), e))? {
                let name = String::from_utf16(&l.name).map_err(|_| {
                    FsError::new(
                        FsErrorKind::InvalidPath,
                        format!("{}: holds a name that is not Unicode", shown()),
                    )
                })?;
                let mut child = dir.clone();
                child.push(name);
                let mut abs = grant.root.clone();
                abs.comps.extend(child.iter().cloned());
                let (abs, kind) = (abs.verbatim(), kind_of(l.attributes));
                if kind == FileKind::Symlink {
                    return Err(FsError::new(
                        FsErrorKind::OutsideGrant,
                        format!("{abs}: a link or junction inside the tree; gatehouse on Windows does not delete through one"),
                    ));
                }
                if let Some(p) = self.protector.refuses(abs.as_bytes(), true) {
                    return Err(FsError::new(
                        FsErrorKind::Protected,
                        format!("{abs} is protected ({}: {})", p.why, p.place),
                    ));
                }
                (grant.scope).check_scope(
                    child.join("/").as_bytes(),
                    child.len(),
                    kind == FileKind::Dir,
                )?;
                if out.len() + stack.len() >= TREE_MAX {
                    return Err(FsError::new(
                        FsErrorKind::TooLarge,
                        format!("{}: more than {TREE_MAX} entries", shown()),
                    ));
                }
                match kind {
                    FileKind::Dir => stack.push((child, false)),
                    _ => out.push((child, false)),
                }
            }
        }
        Ok(out)
    }

    pub fn delete_path(
        &self,
        path: &FsPath,
        recursive: bool,
        expected: Option<Seal>,
    ) -> Result<FsReply, FsError> {
        let p: Place<'_> = self.locate(path, Access::Delete)?;
        let shown = p.shown();
        let Some((file, meta, _)) = &p.target else {
            return Err(FsError::new(
                FsErrorKind::NotFound,
                format!("{shown}: no such file or directory"),
            ));
        };
        let grant = p.grant;
        let entries = match meta.is_dir() {
            true => self.tree(grant, &p.comps)?,
            false => vec![(p.comps.clone(), false)],
        };
        if meta.is_dir() && entries.len() > 1 && !recursive {
            return Err(FsError::new(
                FsErrorKind::NotEmpty,
                format!("{shown}: a directory with entries; set recursive to delete it whole"),
            ));
        }
        let current = match meta.is_dir() {
            true => None,
            false => Some(crate::store::seal_file(file).map_err(|e| io_error(&shown, e))?),
        };
        check_expected(expected, current, &shown)?;
        let mut rec = self.store.begin(ChangeKind::Delete, p.target())?;
        drop(p);
        let mut kept_bytes = 0u64;
        for (comps, is_dir) in &entries {
            let before = match is_dir {
                true => State::Dir { mode: 0o755 },
                false => {
                    let f = self.descend(grant, comps, false)?.pop().expect("a file");
                    let (size, links) = (
                        f.metadata().map(|m| m.len()).unwrap_or(0),
                        beneath::link_count(&f).unwrap_or(2),
                    );
                    let kept = match links {
                        1 if kept_bytes + size <= TREE_KEEP_MAX && size <= CHECKPOINT_MAX_BYTES => {
                            keep(read_all(&f).ok(), size)
                        }
                        1 => Kept::Not(format!(
                            "over the {} MiB a delete keeps",
                            TREE_KEEP_MAX >> 20
                        )),
                        _ => Kept::Not("a file with more than one name is not kept".into()),
                    };
                    kept_bytes += size;
                    State::File {
                        mode: 0o644,
                        blob: self.store.add_blob(&mut rec, kept)?,
                        seal: None,
                    }
                }
            };
            rec.entries.push(Entry {
                grant: grant.scope.id.clone(),
                relative: comps.join(r"\").into_bytes(),
                before,
                after: State::Absent,
            });
        }
        self.store.save(&rec)?;
        // Children before their directory; a failure leaves the checkpoint unsealed.
        for (comps, _) in &entries {
            remove(self, grant, comps)?;
        }
        rec.sealed = true;
        self.store.save(&rec)?;
        Ok(FsReply::Changed(fs_change::receipt(rec, None, false, None)))
    }

    /// Makes the directory `comps` again (undo of a delete, parents first).
    pub(crate) fn make_dir(&self, grant: &Grant, comps: &[String]) -> Result<(), FsError> {
        let shown = format!(r"{}\{}", grant.root.verbatim(), comps.join(r"\"));
        let (name, parent) = comps.split_last().expect("below the root");
        let dir = parent_handle(self, grant, parent)?;
        beneath::create_beneath(dir.as_handle(), name, New::Dir)
            .map(drop)
            .map_err(|e| io_error(&shown, e))
    }
}

fn parent_handle(fs: &Fs, grant: &Grant, parent: &[String]) -> Result<File, FsError> {
    match fs.descend(grant, parent, false)?.pop() {
        Some(d) => Ok(d),
        None => beneath::open_beneath(grant.handle.as_handle(), "", Want::Dir)
            .map_err(|e| io_error(&grant.root.verbatim(), e)),
    }
}

/// Removes the file or (empty) directory `comps`, the name itself.
pub(crate) fn remove(fs: &Fs, grant: &Grant, comps: &[String]) -> Result<(), FsError> {
    let shown = format!(r"{}\{}", grant.root.verbatim(), comps.join(r"\"));
    let (name, parent) = comps.split_last().expect("below the root");
    let dir = parent_handle(fs, grant, parent)?;
    let f = beneath::open_to_change(dir.as_handle(), name).map_err(|e| io_error(&shown, e))?;
    if f.metadata()
        .is_ok_and(|m| m.file_attributes() & beneath::REPARSE_POINT != 0)
    {
        return Err(FsError::new(
            FsErrorKind::Raced,
            format!("{shown}: became a link while the request ran"),
        ));
    }
    beneath::delete_on_close(&f).map_err(|e| io_error(&shown, e))
}
