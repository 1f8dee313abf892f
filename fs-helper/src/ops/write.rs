//! `write_file`, and the whole-or-nothing replacement that edits and undo use too.
//!
//! A file is replaced by writing a temporary file beside it (same permissions), fsync, a re-check
//! that the name still holds the file that was checked, rename, and fsync of the directory. Where
//! a rename would change more than the contents (the file belongs to another owner or group, or
//! its directory refuses a new file) the file is rewritten in place instead, and the receipt says
//! so. Files with a second hard link never get here: they are refused before.

use super::{check_expected, Fs, Want};
use crate::checkpoint::{keep, seal_of, Entry, State};
use crate::kernel;
use crate::resolve::{io_error, Missing, Resolved};
use ipc_schema::fs::{
    Access, ChangeKind, ChangePreview, ChangeReceipt, CreateMode, FileKind, FsError, FsErrorKind,
    FsPath, FsReply, Seal, CHECKPOINT_MAX_BYTES,
};
use rustix::fd::{AsFd, OwnedFd};
use rustix::fs::{AtFlags, Mode, OFlags, RenameFlags, Stat};
use rustix::io::Errno;
use std::sync::atomic::{AtomicU64, Ordering};

/// Permissions of a file that did not exist.
const NEW_FILE_MODE: u32 = 0o644;
const NEW_DIR_MODE: u32 = 0o755;

static TMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// How a replacement was made.
pub struct Replaced {
    pub in_place: Option<String>,
}

/// The file's current contents (whole, if at most `limit` bytes) and its stat.
pub struct Current {
    pub data: Option<Vec<u8>>,
    pub stat: Stat,
    pub seal: Option<Seal>,
}

/// Reads what is at `r` now (a regular file), keeping contents up to `limit` bytes.
pub fn read_current(fs: &Fs, r: &Resolved<'_>, limit: u64) -> Result<Current, FsError> {
    let (fd, stat) = fs.open_checked(r, OFlags::RDONLY)?;
    let size = stat.st_size as u64;
    if size > limit {
        return Ok(Current {
            data: None,
            stat,
            seal: None,
        });
    }
    let data =
        kernel::pread_up_to(fd.as_fd(), 0, size as usize).map_err(|e| io_error(&r.shown(), e))?;
    Ok(Current {
        seal: Some(seal_of(&data)),
        data: Some(data),
        stat,
    })
}

pub use fs_change::diff;

fn tmp_name(name: &[u8]) -> Vec<u8> {
    let n = TMP_COUNTER.fetch_add(1, Ordering::Relaxed);
    let mut t = b".".to_vec();
    t.extend_from_slice(&name[..name.len().min(180)]);
    t.extend_from_slice(format!(".gh-{}-{n}.tmp", std::process::id()).as_bytes());
    t
}

/// Checks, right before use, that `name` in `dir` still is what was checked (`seen`; `None`:
/// nothing was there).
pub fn recheck(
    dir: &OwnedFd,
    name: &[u8],
    seen: Option<&Stat>,
    shown: &str,
) -> Result<(), FsError> {
    let now = rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW);
    match (seen, &now) {
        (Some(a), Ok(b)) if kernel::same_file(a, b) => Ok(()),
        (None, Err(Errno::NOENT)) => Ok(()),
        _ => Err(raced(shown)),
    }
}

pub fn raced(shown: &str) -> FsError {
    FsError::new(
        FsErrorKind::Raced,
        format!("{shown}: changed by someone else while the request ran; nothing was done"),
    )
}

/// Replaces the regular file at `r` (or creates it, if `r` is missing and its parent exists)
/// with `content`, whole or not at all.
pub fn replace(fs: &Fs, r: &Resolved<'_>, content: &[u8], mode: u32) -> Result<Replaced, FsError> {
    let shown = r.shown();
    let Some((parent, name)) = r.split_last() else {
        return Err(FsError::new(
            FsErrorKind::IsADirectory,
            format!("{shown}: is the grant root"),
        ));
    };
    let dir = fs.open_parent(r.grant, parent)?;
    let seen = r.stat.as_ref();
    recheck(&dir, name, seen, &shown)?;
    let mut in_place = seen.and_then(|st| {
        if st.st_uid != fs.euid {
            Some(format!(
                "it belongs to uid {}; a new file would belong to gatehouse's user",
                st.st_uid
            ))
        } else if st.st_gid != fs.egid {
            Some(format!(
                "it belongs to group {}; a new file would not",
                st.st_gid
            ))
        } else {
            None
        }
    });
    if in_place.is_none() {
        let tmp = tmp_name(name);
        match rustix::fs::openat(
            &dir,
            tmp.as_slice(),
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        ) {
            Ok(fd) => {
                let result = write_and_rename(&dir, fd, &tmp, name, content, mode, seen, &shown);
                if result.is_err() {
                    let _ = rustix::fs::unlinkat(&dir, tmp.as_slice(), AtFlags::empty());
                }
                return result.map(|()| Replaced { in_place: None });
            }
            Err(Errno::ACCESS | Errno::PERM | Errno::ROFS) if seen.is_some() => {
                in_place = Some("its directory does not allow new files".into());
            }
            Err(e) => return Err(io_error(&shown, e)),
        }
    }
    // In place: same inode, not atomic. Only ever for an existing, singly linked regular file.
    let fd = rustix::fs::openat(
        &dir,
        name,
        OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY,
        Mode::empty(),
    )
    .map_err(|e| io_error(&shown, e))?;
    let st = rustix::fs::fstat(&fd).map_err(|e| io_error(&shown, e))?;
    if !seen.is_some_and(|s| kernel::same_file(s, &st)) || st.st_nlink != 1 {
        return Err(raced(&shown));
    }
    let io = |e| io_error(&shown, e);
    rustix::fs::ftruncate(&fd, 0).map_err(io)?;
    kernel::write_all(fd.as_fd(), content).map_err(io)?;
    rustix::fs::fsync(&fd).map_err(io)?;
    Ok(Replaced { in_place })
}

#[allow(clippy::too_many_arguments)]
fn write_and_rename(
    dir: &OwnedFd,
    fd: OwnedFd,
    tmp: &[u8],
    name: &[u8],
    content: &[u8],
    mode: u32,
    seen: Option<&Stat>,
    shown: &str,
) -> Result<(), FsError> {
    let io = |e| io_error(shown, e);
    kernel::write_all(fd.as_fd(), content).map_err(io)?;
    rustix::fs::fchmod(&fd, kernel::mode(mode)).map_err(io)?;
    rustix::fs::fsync(&fd).map_err(io)?;
    drop(fd);
    // The write may have taken a while: check again right before the replacement.
    recheck(dir, name, seen, shown)?;
    let flags = if seen.is_none() {
        RenameFlags::NOREPLACE
    } else {
        RenameFlags::empty()
    };
    match rustix::fs::renameat_with(dir, tmp, dir, name, flags) {
        Ok(()) => {}
        Err(Errno::EXIST) => {
            return Err(FsError::new(
                FsErrorKind::Raced,
                format!("{shown}: appeared while the request ran; nothing was done"),
            ))
        }
        Err(e) => return Err(io(e)),
    }
    rustix::fs::fsync(dir).map_err(io)
}

/// Creates the missing directories at the end of `r`'s parent path; returns the entries a
/// checkpoint needs to remove them again.
fn create_parents(fs: &Fs, r: &Resolved<'_>) -> Result<Vec<Entry>, FsError> {
    let mut made = Vec::new();
    let n = r.comps.len();
    for i in (n - r.missing)..(n - 1) {
        let dir = fs.open_parent(r.grant, &r.comps[..i])?;
        let shown =
            String::from_utf8_lossy(&r.grant.absolute(&kernel::join(&r.comps[..=i]))).into_owned();
        match rustix::fs::mkdirat(&dir, r.comps[i].as_slice(), kernel::mode(NEW_DIR_MODE)) {
            Ok(()) => made.push(Entry {
                grant: r.grant.id.clone(),
                relative: kernel::join(&r.comps[..=i]),
                before: State::Absent,
                after: State::Dir { mode: NEW_DIR_MODE },
            }),
            Err(Errno::EXIST) => {
                return Err(FsError::new(
                    FsErrorKind::Raced,
                    format!("{shown}: appeared while the request ran"),
                ))
            }
            Err(e) => return Err(io_error(&shown, e)),
        }
    }
    Ok(made)
}

/// Makes a change to the file at `r` under a checkpoint: keeps the old contents, replaces, and
/// seals the result. Shared by write and edit.
pub fn checkpointed_replace(
    fs: &Fs,
    r: &Resolved<'_>,
    change: ChangeKind,
    old: Option<Current>,
    content: &[u8],
) -> Result<ChangeReceipt, FsError> {
    let mode = old
        .as_ref()
        .map_or(NEW_FILE_MODE, |c| kernel::mode_bits(&c.stat));
    let before = old
        .as_ref()
        .map(|c| (c.stat.st_size as u64, c.data.clone()));
    let target = r.target();
    let store = &fs.store;
    let mut rec = store.begin(change, target, None)?;
    let before_state = match before {
        None => State::Absent,
        Some((size, data)) => {
            let blob = store.add_blob(&mut rec, keep(data, size))?;
            State::File {
                mode,
                blob,
                seal: None,
            }
        }
    };
    let created = r.stat.is_none();
    rec.entries.push(Entry {
        grant: r.grant.id.clone(),
        relative: r.relative(),
        before: before_state,
        after: State::Absent,
    });
    store.save(&rec)?;
    let result = create_parents(fs, r).and_then(|made| {
        let replaced = replace(fs, r, content, mode)?;
        Ok((made, replaced))
    });
    let (made, replaced) = match result {
        Ok(x) => x,
        Err(e) => {
            fs.store.discard(&rec);
            return Err(e);
        }
    };
    let seal = seal_of(content);
    let file = rec.entries.pop().expect("one entry");
    rec.entries.extend(made);
    rec.entries.push(Entry {
        after: State::File {
            mode,
            blob: None,
            seal: Some(seal),
        },
        ..file
    });
    rec.sealed = true;
    rec.info.target.kind = FileKind::File;
    fs.store.save(&rec)?;
    Ok(receipt(rec, Some(seal), created, replaced.in_place))
}

pub use fs_change::receipt;

pub fn write_file(
    fs: &Fs,
    path: &FsPath,
    content: Vec<u8>,
    create: CreateMode,
    create_parents: bool,
    expected: Option<Seal>,
    dry_run: bool,
) -> Result<FsReply, FsError> {
    fs_change::check_write_size(content.len())?;
    let missing = if create_parents {
        Missing::WithParents
    } else {
        Missing::Last
    };
    let r = fs.target(path, Want::new(Access::Write, missing))?;
    let shown = r.shown();
    match r.kind() {
        FileKind::File | FileKind::Missing => {
            fs_change::check_create(r.kind() == FileKind::File, create, &shown)?
        }
        _ => super::need_file(&r)?,
    }
    let old = match r.kind() {
        FileKind::File => Some(read_current(fs, &r, CHECKPOINT_MAX_BYTES)?),
        _ => None,
    };
    let current = match &old {
        Some(c) if c.seal.is_none() && (expected.is_some() || dry_run) => Some(seal_whole(fs, &r)?),
        Some(c) => c.seal,
        None => None,
    };
    check_expected(expected, current, &shown)?;
    if dry_run {
        let old_bytes = old
            .as_ref()
            .and_then(|c| c.data.as_deref())
            .unwrap_or_default();
        let name = String::from_utf8_lossy(&r.relative()).into_owned();
        return Ok(FsReply::Preview(ChangePreview {
            target: r.target(),
            current,
            proposed: seal_of(&content),
            diff: diff(old_bytes, &content, &name),
            replacements: 0,
        }));
    }
    checkpointed_replace(fs, &r, ChangeKind::Write, old, &content).map(FsReply::Changed)
}

/// The seal of a file too large to keep (streamed, not held).
pub fn seal_whole(fs: &Fs, r: &Resolved<'_>) -> Result<Seal, FsError> {
    let (fd, _) = fs.open_checked(r, OFlags::RDONLY)?;
    let mut off = 0u64;
    fs_change::seal_chunks(|| {
        let chunk = kernel::pread_up_to(fd.as_fd(), off, 1 << 20)?;
        off += chunk.len() as u64;
        Ok(chunk)
    })
    .map_err(|e| io_error(&r.shown(), e))
}
