//! `write_file`, `edit_file` and `undo` on Windows: a change is checked as the Unix helper
//! checks it (`Fs::locate`), kept in a checkpoint first, and made whole or not at all: a new
//! file beside the target, written and flushed, the target checked again to be the file that
//! was checked, then renamed over it. What a change is (seals, records, diffs, edits) is
//! `fs_change`'s, the same as on Unix.

use crate::config::Fs;
use crate::store::{create_with, read_all};
use crate::walk::{io_error, Place};
use fs_change::{check_expected, diff, keep, seal_of, Entry, Record, State};
use ipc_schema::fs::{
    Access, ChangeKind, ChangePreview, ChangeReceipt, CheckpointId, CreateMode, Edit, FileKind,
    FsError, FsErrorKind, FsPath, FsReply, Seal, CHECKPOINT_MAX_BYTES,
};
use sandbox::windows::beneath::{self, Identity, New, Want};
use std::cell::Cell;
use std::fs::File;
use std::os::windows::io::AsHandle;

/// A file as a change finds it: its contents (when small enough to keep), size and seal.
struct Current {
    data: Option<Vec<u8>>,
    size: u64,
    seal: Seal,
}

/// What a record says a file's mode is: Windows has none to keep.
const MODE: u32 = 0o644;

thread_local! {
    static TMP_COUNTER: Cell<u64> = const { Cell::new(0) };
}

fn raced(shown: &str) -> FsError {
    FsError::new(
        FsErrorKind::Raced,
        format!("{shown}: changed by someone else while the request ran; nothing was done"),
    )
}

/// Replaces (or creates) `name` in `dir` with `content`, whole or not at all; `seen` is the
/// file that was checked there (`None`: nothing was).
fn replace(
    dir: &File,
    name: &str,
    content: &[u8],
    seen: Option<Identity>,
    shown: &str,
) -> Result<(), FsError> {
    let n = TMP_COUNTER.with(|c| {
        c.set(c.get() + 1);
        c.get()
    });
    let short: String = name.chars().take(120).collect();
    let tmp = format!(".{short}.gh-{}-{n}.tmp", std::process::id());
    let io = |e| io_error(shown, e);
    let f = create_with(dir, &tmp, content).map_err(io)?;
    // The write may have taken a while: check again right before the replacement.
    let now = match beneath::open_beneath(dir.as_handle(), name, Want::Any) {
        Ok(h) => beneath::identity(&h).ok(),
        Err(e) if matches!(e.raw_os_error(), Some(2 | 3)) => None,
        Err(e) => {
            let _ = beneath::delete_on_close(&f);
            return Err(io(e));
        }
    };
    let same = match (seen, now) {
        (Some(a), Some(b)) => (a.volume, a.index) == (b.volume, b.index) && b.links == 1,
        (None, None) => true,
        _ => false,
    };
    if !same {
        let _ = beneath::delete_on_close(&f);
        return Err(raced(shown));
    }
    beneath::rename_into(&f, dir.as_handle(), name, seen.is_some()).map_err(|e| {
        let _ = beneath::delete_on_close(&f);
        match e.raw_os_error() {
            Some(80 | 183) => raced(shown),
            _ => io(e),
        }
    })
}

/// Makes the directories missing on the way to `p`'s target (all but its last name); returns
/// the entries that remove them again, and the target's directory.
fn make_parents(p: &Place<'_>) -> Result<(Vec<Entry>, File), FsError> {
    let (mut dir, mut made) = (None::<File>, Vec::new());
    let first = p.comps.len() - p.missing;
    for i in first..p.comps.len() - 1 {
        let parent = dir.as_ref().unwrap_or(&p.dir);
        let shown = format!(r"{}\{}", p.grant.root.verbatim(), p.comps[..=i].join(r"\"));
        let d = beneath::create_beneath(parent.as_handle(), &p.comps[i], New::Dir).map_err(
            |e| match e.raw_os_error() {
                Some(80 | 183) => raced(&shown),
                _ => io_error(&shown, e),
            },
        )?;
        made.push(Entry {
            grant: p.grant.scope.id.clone(),
            relative: p.comps[..=i].join(r"\").into_bytes(),
            before: State::Absent,
            after: State::Dir { mode: 0o755 },
        });
        dir = Some(d);
    }
    let dir = match dir {
        Some(d) => d,
        None => beneath::open_beneath(p.dir.as_handle(), "", Want::Dir)
            .map_err(|e| io_error(&p.shown(), e))?,
    };
    Ok((made, dir))
}

impl Fs {
    /// The file at `p` now, whole if it is at most `limit` bytes, and its seal.
    fn current(&self, p: &Place<'_>, limit: u64) -> Result<Option<Current>, FsError> {
        let Some((f, meta, _)) = &p.target else {
            return Ok(None);
        };
        let io = |e| io_error(&p.shown(), e);
        if meta.len() > limit {
            return Ok(Some(Current {
                data: None,
                size: meta.len(),
                seal: crate::store::seal_file(f).map_err(io)?,
            }));
        }
        let data = read_all(f).map_err(io)?;
        Ok(Some(Current {
            seal: seal_of(&data),
            data: Some(data),
            size: meta.len(),
        }))
    }

    /// Makes a change to the file at `p` under a checkpoint: keeps the old contents, replaces,
    /// and seals the result.
    fn checkpointed_replace(
        &self,
        p: Place<'_>,
        change: ChangeKind,
        old: Option<(Option<Vec<u8>>, u64)>,
        content: &[u8],
    ) -> Result<ChangeReceipt, FsError> {
        let shown = p.shown();
        let mut rec = self.store.begin(change, p.target())?;
        let before = match old {
            None => State::Absent,
            Some((data, size)) => State::File {
                mode: MODE,
                blob: self.store.add_blob(&mut rec, keep(data, size))?,
                seal: None,
            },
        };
        let relative = p.comps.join(r"\").into_bytes();
        let file = Entry {
            grant: p.grant.scope.id.clone(),
            relative,
            before,
            after: State::Absent,
        };
        rec.entries.push(file.clone());
        self.store.save(&rec)?;
        let seen = p.target.as_ref().map(|(_, _, id)| *id);
        let name = p.comps.last().expect("below the root").clone();
        let created = seen.is_none();
        // Our own handle to the target would refuse the rename over it.
        let result = make_parents(&p).and_then(|(made, dir)| {
            drop(p);
            replace(&dir, &name, content, seen, &shown).map(|()| made)
        });
        let made = match result {
            Ok(m) => m,
            Err(e) => {
                self.store.discard(&rec);
                return Err(e);
            }
        };
        let seal = seal_of(content);
        rec.entries.pop();
        rec.entries.extend(made);
        rec.entries.push(Entry {
            after: State::File {
                mode: MODE,
                blob: None,
                seal: Some(seal),
            },
            ..file
        });
        rec.sealed = true;
        rec.info.target.kind = FileKind::File;
        self.store.save(&rec)?;
        Ok(fs_change::receipt(rec, Some(seal), created, None))
    }

    #[allow(clippy::too_many_arguments)]
    pub fn write_file(
        &self,
        path: &FsPath,
        content: Vec<u8>,
        create: CreateMode,
        create_parents: bool,
        expected: Option<Seal>,
        dry_run: bool,
    ) -> Result<FsReply, FsError> {
        fs_change::check_write_size(content.len())?;
        let p = self.locate(path, Access::Write)?;
        let shown = p.shown();
        if p.missing > 1 && !create_parents {
            return Err(FsError::new(
                FsErrorKind::NotFound,
                format!("{shown}: its directory does not exist (create_parents is off)"),
            ));
        }
        fs_change::check_create(p.target.is_some(), create, &shown)?;
        let cur = self.current(&p, CHECKPOINT_MAX_BYTES)?;
        check_expected(expected, cur.as_ref().map(|c| c.seal), &shown)?;
        if dry_run {
            let old = cur
                .as_ref()
                .and_then(|c| c.data.as_deref())
                .unwrap_or_default();
            return Ok(FsReply::Preview(ChangePreview {
                target: p.target(),
                current: cur.as_ref().map(|c| c.seal),
                proposed: seal_of(&content),
                diff: diff(old, &content, &p.comps.join("/")),
                replacements: 0,
            }));
        }
        let old = cur.map(|c| (c.data, c.size));
        self.checkpointed_replace(p, ChangeKind::Write, old, &content)
            .map(FsReply::Changed)
    }

    pub fn edit_file(
        &self,
        path: &FsPath,
        edit: &Edit,
        expected: Option<Seal>,
        dry_run: bool,
    ) -> Result<FsReply, FsError> {
        let p = self.locate(path, Access::Edit)?;
        let shown = p.shown();
        let Some(Current { data, size, seal }) = self.current(&p, CHECKPOINT_MAX_BYTES)? else {
            return Err(FsError::new(
                FsErrorKind::NotFound,
                format!("{shown}: no such file"),
            ));
        };
        let (new, replacements) =
            fs_change::edited(data.as_deref(), size, expected, seal, edit, &shown)?;
        let data = data.expect("edited refuses a file it could not keep");
        if dry_run {
            return Ok(FsReply::Preview(ChangePreview {
                target: p.target(),
                current: Some(seal),
                proposed: seal_of(new.as_bytes()),
                diff: diff(&data, new.as_bytes(), &p.comps.join("/")),
                replacements,
            }));
        }
        let old = Some((Some(data), size));
        let mut receipt = self.checkpointed_replace(p, ChangeKind::Edit, old, new.as_bytes())?;
        receipt.replacements = replacements;
        Ok(FsReply::Changed(receipt))
    }

    /// Puts back what a write or edit replaced, if every path is still exactly as the change
    /// left it (through the same checks as a write).
    pub fn undo(&self, id: &CheckpointId) -> Result<FsReply, FsError> {
        let mut rec = self.store.load(id)?;
        fs_change::check_undoable(&rec)?;
        for e in &rec.entries {
            if !self.holds(e)? {
                return Err(FsError::new(
                    FsErrorKind::ChangedSince,
                    format!(
                        "{}: changed since checkpoint {id}; undo would overwrite that, so nothing was restored",
                        String::from_utf8_lossy(&e.relative)
                    ),
                ));
            }
        }
        if rec.info.change == ChangeKind::Move {
            self.move_back(&rec)?;
        } else {
            for e in rec.entries.iter().rev() {
                self.restore(&rec, e)?;
            }
        }
        rec.info.undone = true;
        self.store.save(&rec)?;
        Ok(FsReply::Undone(rec.info))
    }

    /// Whether the path of `e` is still as the change left it.
    fn holds(&self, e: &Entry) -> Result<bool, FsError> {
        let path = entry_path(e, &e.relative);
        Ok(match &e.after {
            State::Dir { .. } => self
                .open(&path, Access::Read)
                .is_ok_and(|o| o.kind() == FileKind::Dir),
            State::File { seal: Some(s), .. } => {
                let p = self.locate(&path, Access::Write)?;
                self.current(&p, 0)?.is_some_and(|c| c.seal == *s)
            }
            // What a move put there: still that file or directory.
            State::Inode { dev, ino } => {
                let (grant, comps) = self.names(&path)?;
                let held = self.descend(grant, &comps, true)?;
                (held.len() == comps.len())
                    && (held.last().and_then(|f| beneath::identity(f).ok()))
                        .is_some_and(|i| (i.volume as u64, i.index) == (*dev, *ino))
            }
            // What a delete removed: still absent.
            State::Absent => {
                let (grant, comps) = self.names(&path)?;
                self.descend(grant, &comps, true)?.len() < comps.len()
            }
            _ => false,
        })
    }

    pub(crate) fn restore(&self, rec: &Record, e: &Entry) -> Result<(), FsError> {
        let path = entry_path(e, &e.relative);
        match &e.before {
            State::File { blob: Some(n), .. } => {
                let data = self.store.blob(&rec.info.id, *n)?;
                let p = self.locate(&path, Access::Write)?;
                let (shown, seen) = (p.shown(), p.target.as_ref().map(|(_, _, id)| *id));
                let name = p.comps.last().expect("below the root").clone();
                let dir = beneath::open_beneath(p.dir.as_handle(), "", Want::Dir)
                    .map_err(|e| io_error(&shown, e))?;
                drop(p);
                replace(&dir, &name, &data, seen, &shown)
            }
            // What a delete removed, parents first.
            State::Dir { .. } => {
                let (grant, comps) = self.names(&path)?;
                self.make_dir(grant, &comps)
            }
            // What the change made (the file, then each directory, deepest first): deleted.
            State::Absent => {
                let rel = String::from_utf8_lossy(&e.relative).into_owned();
                let (parent, name) = rel.rsplit_once('\\').unwrap_or(("", &rel));
                let dir = self.open(&entry_path(e, parent.as_bytes()), Access::Read)?;
                let shown = format!(r"{}\{name}", dir.shown());
                let f = beneath::open_to_change(dir.file.as_handle(), name)
                    .map_err(|e| io_error(&shown, e))?;
                beneath::delete_on_close(&f).map_err(|e| io_error(&shown, e))
            }
            _ => Err(FsError::new(
                FsErrorKind::Unrestorable,
                format!(
                    "{}: its old contents were not kept",
                    String::from_utf8_lossy(&e.relative)
                ),
            )),
        }
    }
}

fn entry_path(e: &Entry, relative: &[u8]) -> FsPath {
    FsPath::InGrant {
        grant: e.grant.clone(),
        path: relative.to_vec(),
    }
}
