//! `delete_path`: a file, a link (never its target), an empty directory, or with `recursive` a
//! whole tree, each entry checked (protected, excluded) before anything is removed.

use super::write::{receipt, seal_whole};
use super::{check_expected, Fs, Want};
use crate::checkpoint::{keep, Entry, Kept, Record, State};
use crate::kernel;
use crate::resolve::{io_error, Missing, Resolved};
use ipc_schema::fs::{
    Access, ChangeKind, FileKind, FsError, FsErrorKind, FsPath, FsReply, Seal, CHECKPOINT_MAX_BYTES,
};
use rustix::fd::AsFd;
use rustix::fs::{AtFlags, Mode, OFlags, Stat};

/// A recursive delete touches at most this many entries.
pub const TREE_MAX: usize = 10_000;
/// And keeps at most this much old content in its checkpoint.
const TREE_KEEP_MAX: u64 = 256 << 20;

/// One entry of a tree, below its top (relative to the grant root).
pub struct TreeEntry {
    pub comps: Vec<Vec<u8>>,
    pub stat: Stat,
}

/// Lists the tree under the directory `top` in post-order (children before their directory),
/// links not followed, refusing past [`TREE_MAX`] entries.
pub fn tree(fs: &Fs, r: &Resolved<'_>) -> Result<Vec<TreeEntry>, FsError> {
    let mut out = Vec::new();
    // (dir comps, children listed yet)
    let mut stack = vec![(
        r.comps.clone(),
        r.stat.expect("an existing directory"),
        false,
    )];
    while let Some((dir, st, listed)) = stack.pop() {
        if listed {
            out.push(TreeEntry {
                comps: dir,
                stat: st,
            });
            continue;
        }
        let fd = kernel::open_beneath(
            fs.mode,
            r.grant.root_fd.as_fd(),
            &dir,
            OFlags::RDONLY | OFlags::DIRECTORY,
            Mode::empty(),
        )
        .map_err(|e| {
            io_error(
                &String::from_utf8_lossy(&r.grant.absolute(&kernel::join(&dir))),
                e,
            )
        })?;
        stack.push((dir.clone(), st, true));
        for name in crate::checkpoint::names(fd.as_fd()) {
            let cst = rustix::fs::statat(&fd, name.as_slice(), AtFlags::SYMLINK_NOFOLLOW)
                .map_err(|e| io_error(&r.shown(), e))?;
            let mut child = dir.clone();
            child.push(name);
            if kernel::kind_of(&cst) == FileKind::Dir {
                stack.push((child, cst, false));
            } else {
                out.push(TreeEntry {
                    comps: child,
                    stat: cst,
                });
            }
            if out.len() + stack.len() > TREE_MAX {
                return Err(FsError::new(
                    FsErrorKind::TooLarge,
                    format!("{}: more than {TREE_MAX} entries", r.shown()),
                ));
            }
        }
    }
    Ok(out)
}

/// Refuses a tree if any entry in it is protected or outside the grant's globs, where it is now
/// (`from`) or where it would be (`to`, for a move).
pub fn check_tree(
    fs: &Fs,
    from: &Resolved<'_>,
    to: Option<&Resolved<'_>>,
    entries: &[TreeEntry],
) -> Result<(), FsError> {
    for e in entries {
        let below = &e.comps[from.comps.len()..];
        let is_dir = kernel::kind_of(&e.stat) == FileKind::Dir;
        for r in std::iter::once(from).chain(to) {
            let mut comps = r.comps.clone();
            comps.extend_from_slice(below);
            let rel = kernel::join(&comps);
            let abs = r.grant.absolute(&rel);
            if let Some(p) = fs.protector.refuses(&abs, true) {
                return Err(FsError::new(
                    FsErrorKind::Protected,
                    format!(
                        "{}: contains {}, which is protected ({}: {})",
                        from.shown(),
                        String::from_utf8_lossy(&abs),
                        p.why,
                        p.place
                    ),
                ));
            }
            r.grant.check_scope(&rel, comps.len(), is_dir)?;
        }
    }
    Ok(())
}

/// What is at `comps` now, for a checkpoint: a symlink's target, a small text file's contents.
fn before_state(
    fs: &Fs,
    rec: &mut Record,
    r: &Resolved<'_>,
    comps: &[Vec<u8>],
    st: &Stat,
    kept_bytes: &mut u64,
) -> Result<State, FsError> {
    let mode = kernel::mode_bits(st);
    Ok(match kernel::kind_of(st) {
        FileKind::Dir => State::Dir { mode },
        FileKind::Symlink => {
            let fd = kernel::open_beneath(
                fs.mode,
                r.grant.root_fd.as_fd(),
                comps,
                kernel::LINK_ITSELF,
                Mode::empty(),
            )
            .map_err(|e| io_error(&r.shown(), e))?;
            let target = kernel::read_link(fs.mode, r.grant.root_fd.as_fd(), comps, fd.as_fd())
                .map_err(|e| io_error(&r.shown(), e))?;
            State::Symlink { target }
        }
        FileKind::File if kernel::links(st) == 1 => {
            let size = st.st_size as u64;
            let data = if size <= CHECKPOINT_MAX_BYTES && *kept_bytes + size <= TREE_KEEP_MAX {
                let fd = kernel::open_beneath(
                    fs.mode,
                    r.grant.root_fd.as_fd(),
                    comps,
                    OFlags::RDONLY | OFlags::NONBLOCK,
                    Mode::empty(),
                )
                .map_err(|e| io_error(&r.shown(), e))?;
                let now = rustix::fs::fstat(&fd).map_err(|e| io_error(&r.shown(), e))?;
                if !kernel::same_file(&now, st) {
                    return Err(FsError::new(
                        FsErrorKind::Raced,
                        format!(
                            "{}: changed while the request ran; nothing was done",
                            r.shown()
                        ),
                    ));
                }
                kernel::pread_up_to(fd.as_fd(), 0, size as usize).ok()
            } else {
                None
            };
            let kept = keep(data, size);
            if let Kept::Blob(d) = &kept {
                *kept_bytes += d.len() as u64;
            }
            let blob = fs.store.add_blob(rec, kept)?;
            State::File {
                mode,
                blob,
                seal: None,
            }
        }
        FileKind::File => {
            crate::checkpoint::mark_unrestorable(
                rec,
                "a deleted file had other hard links; it was not read".into(),
            );
            State::Unkept
        }
        other => {
            crate::checkpoint::mark_unrestorable(
                rec,
                format!("a deleted {} cannot be kept", super::kind_name(other)),
            );
            State::Unkept
        }
    })
}

pub fn delete_path(
    fs: &Fs,
    path: &FsPath,
    recursive: bool,
    expected: Option<Seal>,
) -> Result<FsReply, FsError> {
    let r = fs.target(path, Want::new(Access::Delete, Missing::Refuse))?;
    let shown = r.shown();
    if r.comps.is_empty() {
        return Err(FsError::new(
            FsErrorKind::BadRequest,
            format!(
                "{shown}: the root of grant {} cannot be deleted",
                r.grant.id
            ),
        ));
    }
    let st = r.stat.expect("Missing::Refuse");
    let entries = if r.kind() == FileKind::Dir {
        let all = tree(fs, &r)?;
        if all.len() > 1 && !recursive {
            return Err(FsError::new(
                FsErrorKind::NotEmpty,
                format!("{shown}: directory not empty (delete it with recursive)"),
            ));
        }
        check_tree(fs, &r, None, &all)?;
        all
    } else {
        vec![TreeEntry {
            comps: r.comps.clone(),
            stat: st,
        }]
    };
    if expected.is_some() {
        let current = match r.kind() {
            FileKind::File if kernel::links(&st) == 1 => Some(seal_whole(fs, &r)?),
            _ => None,
        };
        check_expected(expected, current, &shown)?;
    }
    let mut rec = fs.store.begin(ChangeKind::Delete, r.target(), None)?;
    let mut kept_bytes = 0;
    let made = entries.iter().try_for_each(|e| {
        let before = before_state(fs, &mut rec, &r, &e.comps, &e.stat, &mut kept_bytes)?;
        rec.entries.push(Entry {
            grant: r.grant.id.clone(),
            relative: kernel::join(&e.comps),
            before,
            after: State::Absent,
        });
        Ok(())
    });
    if let Err(e) = made.and_then(|()| fs.store.save(&rec)) {
        fs.store.discard(&rec);
        return Err(e);
    }
    for (removed, e) in entries.iter().enumerate() {
        if let Err(err) = remove(fs, &r, e) {
            if removed == 0 {
                fs.store.discard(&rec);
                return Err(err);
            }
            // Part of the tree is gone: keep the checkpoint so that undo can bring it back.
            rec.entries.truncate(removed);
            rec.sealed = true;
            fs.store.save(&rec)?;
            return Err(FsError::new(
                err.kind,
                format!(
                    "{}; {removed} of {} entries were deleted, checkpoint {} restores them",
                    err.message,
                    entries.len(),
                    rec.info.id
                ),
            ));
        }
    }
    // One fsync of the top's directory makes the removal of the top durable; what was below it
    // is unreachable from then on either way.
    let (_, parent) = r.comps.split_last().expect("below the root");
    let dir = fs.open_parent(r.grant, parent)?;
    rustix::fs::fsync(&dir).map_err(|e| io_error(&shown, e))?;
    rec.sealed = true;
    fs.store.save(&rec)?;
    Ok(FsReply::Changed(receipt(rec, None, false, None)))
}

/// Removes one entry after checking that its name still holds the inode that was checked.
fn remove(fs: &Fs, r: &Resolved<'_>, e: &TreeEntry) -> Result<(), FsError> {
    let (name, parent) = e.comps.split_last().expect("below the root");
    let shown = String::from_utf8_lossy(&r.grant.absolute(&kernel::join(&e.comps))).into_owned();
    let dir = fs.open_parent(r.grant, parent)?;
    match rustix::fs::statat(&dir, name.as_slice(), AtFlags::SYMLINK_NOFOLLOW) {
        Ok(now) if kernel::same_file(&now, &e.stat) => {}
        _ => {
            return Err(FsError::new(
                FsErrorKind::Raced,
                format!("{shown}: changed by someone else while the request ran"),
            ))
        }
    }
    let flags = if kernel::kind_of(&e.stat) == FileKind::Dir {
        AtFlags::REMOVEDIR
    } else {
        AtFlags::empty()
    };
    rustix::fs::unlinkat(&dir, name.as_slice(), flags).map_err(|err| io_error(&shown, err))
}
