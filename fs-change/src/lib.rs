//! What a change to a file is, the same on every OS: the seal of contents, the checkpoint
//! record a change leaves (its on-disk form, postcard), whether old contents can be kept, the
//! diff an approval card shows, the application of an edit, and the check that a file is still
//! what the human was shown; the checks of a write, an edit and an undo that do not depend on
//! the OS, and the checkpoints' names, expiry and listing order. The Unix and the Windows
//! fs-helper each open, write and rename with their own system calls; what they decide and
//! record is this crate's.

#![forbid(unsafe_code)]

use ipc_schema::fs::{
    ChangeKind, ChangeReceipt, CheckpointId, CheckpointInfo, CreateMode, Edit, FsError,
    FsErrorKind, GrantId, ResolvedTarget, Restorability, Seal, CHECKPOINT_MAX_BYTES,
    CHECKPOINT_TTL_SECS, WRITE_MAX,
};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::time::{SystemTime, UNIX_EPOCH};

/// A preview's diff is cut here so the reply fits a frame.
const DIFF_MAX: usize = 512 * 1024;

pub fn seal_of(data: &[u8]) -> Seal {
    Seal {
        len: data.len() as u64,
        sha256: Sha256::digest(data).into(),
    }
}

/// The seal of contents read in chunks (`next` gives the next one; empty at the end), for a
/// file too large to hold.
pub fn seal_chunks<E>(mut next: impl FnMut() -> Result<Vec<u8>, E>) -> Result<Seal, E> {
    let (mut h, mut len) = (Sha256::new(), 0u64);
    loop {
        let chunk = next()?;
        if chunk.is_empty() {
            return Ok(Seal {
                len,
                sha256: h.finalize().into(),
            });
        }
        len += chunk.len() as u64;
        h.update(&chunk);
    }
}

pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

pub fn now_unix() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// What was (or is) at one path.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub enum State {
    Absent,
    /// A regular file; `blob` is the kept copy (none if too large or binary), `seal` its
    /// contents (for the state after a write or edit).
    File {
        mode: u32,
        blob: Option<u32>,
        seal: Option<Seal>,
    },
    Dir {
        mode: u32,
    },
    Symlink {
        target: Vec<u8>,
    },
    /// Whatever inode `(dev, ino)` is: what a move leaves at its destination.
    Inode {
        dev: u64,
        ino: u64,
    },
    /// A FIFO, socket or device, or a hard-linked file: recorded, not kept.
    Unkept,
}

/// One path a change touched.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct Entry {
    pub grant: GrantId,
    pub relative: Vec<u8>,
    pub before: State,
    pub after: State,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct Record {
    pub info: CheckpointInfo,
    /// For a recursive delete, parents come before children.
    pub entries: Vec<Entry>,
    /// The change finished and `after` states are recorded.
    pub sealed: bool,
}

/// Old contents of one file for a checkpoint: kept, or why not.
pub enum Kept {
    Blob(Vec<u8>),
    Not(String),
}

/// Decides whether `data` (the whole old file, or `None` when it was not read because of its
/// `size`) can be kept.
pub fn keep(data: Option<Vec<u8>>, size: u64) -> Kept {
    match data {
        _ if size > CHECKPOINT_MAX_BYTES => Kept::Not(format!(
            "the old file was {size} bytes, over the {} MiB checkpoint limit",
            CHECKPOINT_MAX_BYTES >> 20
        )),
        None => Kept::Not("the old file could not be read".into()),
        Some(d) if d.contains(&0) => {
            Kept::Not("the old file was binary; binary files are not checkpointed".into())
        }
        Some(d) => Kept::Blob(d),
    }
}

pub fn mark_unrestorable(rec: &mut Record, reason: String) {
    if rec.info.restorability == Restorability::Restorable {
        rec.info.restorability = Restorability::Unrestorable { reason };
    }
}

/// A unified diff of two texts, or `None` if either is not UTF-8.
pub fn diff(old: &[u8], new: &[u8], name: &str) -> Option<String> {
    let (old, new) = (
        std::str::from_utf8(old).ok()?,
        std::str::from_utf8(new).ok()?,
    );
    let mut d = similar::TextDiff::from_lines(old, new)
        .unified_diff()
        .context_radius(3)
        .header(&format!("a/{name}"), &format!("b/{name}"))
        .to_string();
    if d.len() > DIFF_MAX {
        let mut cut = DIFF_MAX;
        while !d.is_char_boundary(cut) {
            cut -= 1;
        }
        d.truncate(cut);
        d.push_str("\n[diff cut at 512 KiB]\n");
    }
    Some(d)
}

/// Checks a seal the caller expects against the file now.
pub fn check_expected(
    expected: Option<Seal>,
    current: Option<Seal>,
    shown: &str,
) -> Result<(), FsError> {
    match expected {
        Some(e) if Some(e) != current => Err(FsError::new(
            FsErrorKind::ChangedSince,
            format!(
                "{shown}: changed since it was shown ({} now); nothing was done",
                match current {
                    Some(c) => format!("{} bytes, sha256 {}", c.len, hex(&c.sha256[..6])),
                    None => "absent".into(),
                }
            ),
        )),
        _ => Ok(()),
    }
}

/// The edited text and how many replacements (or hunks) were applied.
pub fn apply(text: &str, edit: &Edit, shown: &str) -> Result<(String, u32), FsError> {
    match edit {
        Edit::Replace {
            old,
            new,
            replace_all,
        } => {
            if old.is_empty() {
                return Err(FsError::new(
                    FsErrorKind::BadRequest,
                    "the text to replace is empty",
                ));
            }
            let n = text.matches(old.as_str()).count();
            match (n, replace_all) {
                (0, _) => Err(FsError::new(
                    FsErrorKind::NoMatch,
                    format!("{shown}: the text to replace does not occur in the file"),
                )),
                (1, _) | (_, true) => Ok((text.replace(old.as_str(), new), n as u32)),
                (n, false) => Err(FsError::new(
                    FsErrorKind::AmbiguousMatch,
                    format!(
                        "{shown}: the text to replace occurs {n} times; give more context or set replace_all"
                    ),
                )),
            }
        }
        Edit::UnifiedDiff(d) => apply_unified(text, d, shown),
    }
}

/// One hunk: the old lines it expects and the new lines it leaves, without line endings.
struct Hunk<'d> {
    header: &'d str,
    old_start: usize,
    old: Vec<&'d str>,
    new: Vec<&'d str>,
    /// The hunk's last new line has no newline (`\ No newline at end of file`).
    new_no_eol: bool,
}

fn parse_hunks<'d>(d: &'d str, shown: &str) -> Result<Vec<Hunk<'d>>, FsError> {
    let bad = |m: String| FsError::new(FsErrorKind::DiffDoesNotApply, format!("{shown}: {m}"));
    let mut hunks: Vec<Hunk<'d>> = Vec::new();
    let mut last_sign = ' ';
    for line in d.lines() {
        if let Some(rest) = line.strip_prefix("@@ -") {
            let start = rest
                .split([',', ' '])
                .next()
                .and_then(|s| s.parse::<usize>().ok())
                .ok_or_else(|| bad(format!("bad hunk header {line:?}")))?;
            hunks.push(Hunk {
                header: line,
                old_start: start,
                old: Vec::new(),
                new: Vec::new(),
                new_no_eol: false,
            });
            continue;
        }
        let Some(h) = hunks.last_mut() else {
            continue; // `---`, `+++`, `diff --git`, `index` lines before the first hunk
        };
        if line.starts_with("\\") {
            if last_sign != '-' {
                h.new_no_eol = true;
            }
            continue;
        }
        let (sign, body) = match line.chars().next() {
            Some(c @ (' ' | '-' | '+')) => (c, &line[1..]),
            None => (' ', ""),
            Some(_) => return Err(bad(format!("unexpected line in a hunk: {line:?}"))),
        };
        last_sign = sign;
        if sign != '+' {
            h.old.push(body);
        }
        if sign != '-' {
            h.new.push(body);
        }
    }
    if hunks.is_empty() {
        return Err(bad("the diff has no hunks (no `@@` line)".into()));
    }
    Ok(hunks)
}

fn apply_unified(text: &str, d: &str, shown: &str) -> Result<(String, u32), FsError> {
    let hunks = parse_hunks(d, shown)?;
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    let strip = |l: &str| l.strip_suffix('\n').unwrap_or(l).to_string();
    let matches_at = |pos: usize, old: &[&str]| {
        pos + old.len() <= lines.len()
            && old
                .iter()
                .enumerate()
                .all(|(k, o)| strip(lines[pos + k]) == *o)
    };
    let mut out = String::with_capacity(text.len());
    let mut cursor = 0usize;
    for (i, h) in hunks.iter().enumerate() {
        // `-a,0` inserts after line a; otherwise the hunk starts at line a.
        let expected = if h.old.is_empty() {
            h.old_start
        } else {
            h.old_start.saturating_sub(1)
        };
        let pos = if expected >= cursor && matches_at(expected, &h.old) {
            expected
        } else {
            let found: Vec<usize> = (cursor..=lines.len())
                .filter(|&p| matches_at(p, &h.old))
                .take(2)
                .collect();
            match found.as_slice() {
                [p] => *p,
                [] => {
                    return Err(FsError::new(
                        FsErrorKind::DiffDoesNotApply,
                        format!(
                            "{shown}: hunk {} ({}) does not match the file",
                            i + 1,
                            h.header
                        ),
                    ))
                }
                _ => {
                    return Err(FsError::new(
                        FsErrorKind::DiffDoesNotApply,
                        format!(
                            "{shown}: hunk {} ({}) matches at several places and not at its line",
                            i + 1,
                            h.header
                        ),
                    ))
                }
            }
        };
        out.extend(lines[cursor..pos].iter().copied());
        for (k, l) in h.new.iter().enumerate() {
            out.push_str(l);
            if !(k + 1 == h.new.len() && h.new_no_eol) {
                out.push('\n');
            }
        }
        cursor = pos + h.old.len();
    }
    out.extend(lines[cursor..].iter().copied());
    Ok((out, hunks.len() as u32))
}

/// What the agent is told of a change made under `rec` (now sealed).
pub fn receipt(
    rec: Record,
    seal: Option<Seal>,
    created: bool,
    in_place: Option<String>,
) -> ChangeReceipt {
    ChangeReceipt {
        entries: rec.entries.len() as u32,
        checkpoint: rec.info,
        seal,
        created,
        in_place,
        replacements: 0,
    }
}

/// Refuses content over the write limit (`WRITE_MAX`: a frame must hold it).
pub fn check_write_size(len: usize) -> Result<(), FsError> {
    let over = format!(
        "{len} bytes is over the {} KiB write limit",
        WRITE_MAX >> 10
    );
    (len <= WRITE_MAX as usize)
        .then_some(())
        .ok_or(FsError::new(FsErrorKind::TooLarge, over))
}

/// Refuses what `create` forbids, given whether the file is there.
pub fn check_create(exists: bool, create: CreateMode, shown: &str) -> Result<(), FsError> {
    match (exists, create) {
        (true, CreateMode::MustNotExist) => Err(FsError::new(
            FsErrorKind::AlreadyExists,
            format!("{shown}: already exists"),
        )),
        (false, CreateMode::MustExist) => Err(FsError::new(
            FsErrorKind::NotFound,
            format!("{shown}: no such file"),
        )),
        _ => Ok(()),
    }
}

/// An edit of the file whose contents are `data` (`None`: too large to keep, `size` bytes) and
/// seal `current`: a UTF-8 text, still what `expected` says, the edit applied, the result
/// within the checkpoint limit. The edited text and how many replacements (or hunks).
pub fn edited(
    data: Option<&[u8]>,
    size: u64,
    expected: Option<Seal>,
    current: Seal,
    edit: &Edit,
    shown: &str,
) -> Result<(String, u32), FsError> {
    let Some(data) = data else {
        return Err(FsError::new(
            FsErrorKind::TooLarge,
            format!(
                "{shown}: {size} bytes; edit_file works on text files up to {} MiB",
                CHECKPOINT_MAX_BYTES >> 20
            ),
        ));
    };
    let text = match std::str::from_utf8(data) {
        Ok(t) if !t.contains('\0') => t,
        _ => {
            return Err(FsError::new(
                FsErrorKind::NotText,
                format!("{shown}: not UTF-8 text; edit_file changes text files only"),
            ))
        }
    };
    check_expected(expected, Some(current), shown)?;
    let (new, n) = apply(text, edit, shown)?;
    if new.len() as u64 > CHECKPOINT_MAX_BYTES {
        return Err(FsError::new(
            FsErrorKind::TooLarge,
            format!(
                "{shown}: the edited file would be over {} MiB",
                CHECKPOINT_MAX_BYTES >> 20
            ),
        ));
    }
    Ok((new, n))
}

/// A new checkpoint's record (unsealed, no entries yet), made now.
pub fn new_record(
    counter: u64,
    change: ChangeKind,
    target: ResolvedTarget,
    moved_to: Option<ResolvedTarget>,
) -> Record {
    let created = now_unix();
    Record {
        info: CheckpointInfo {
            id: CheckpointId(format!("ck-{created}-{}-{counter}", std::process::id())),
            change,
            target,
            moved_to,
            created_unix: created,
            expires_unix: created + CHECKPOINT_TTL_SECS,
            restorability: Restorability::Restorable,
            undone: false,
        },
        entries: Vec::new(),
        sealed: false,
    }
}

/// Whether `id` can name a checkpoint at all (`ck-` and digits and dashes: nothing a path
/// could be made of); the error for one that does not exist.
pub fn checkpoint_named(id: &CheckpointId) -> Result<(), FsError> {
    let plausible = id.0.len() <= 64
        && id.0.starts_with("ck-")
        && id.0[3..].bytes().all(|b| b.is_ascii_digit() || b == b'-');
    plausible
        .then_some(())
        .ok_or_else(|| no_such_checkpoint(id))
}

pub fn no_such_checkpoint(id: &CheckpointId) -> FsError {
    FsError::new(
        FsErrorKind::NoSuchCheckpoint,
        format!("there is no checkpoint {id} (never made, expired after 7 days, or removed)"),
    )
}

/// Whether the checkpoint `id` (its record, if it reads) is past its expiry at `now`; an
/// unreadable one by the creation time in its id.
pub fn expired(id: &str, rec: Option<&Record>, now: u64) -> bool {
    match rec {
        Some(r) => r.info.expires_unix <= now,
        None => (id.split('-').nth(1))
            .and_then(|s| s.parse::<u64>().ok())
            .is_none_or(|t| t + CHECKPOINT_TTL_SECS <= now),
    }
}

/// The checkpoints to list: unexpired, newest first, at most `limit` (0: 50; at most 500).
pub fn newest_first(mut infos: Vec<CheckpointInfo>, limit: u32) -> Vec<CheckpointInfo> {
    let limit = match limit {
        0 => 50,
        n => n.min(500),
    } as usize;
    let now = now_unix();
    let seq = |i: &CheckpointInfo| {
        (i.id.0.rsplit('-').next())
            .and_then(|s| s.parse::<u64>().ok())
            .unwrap_or(0)
    };
    infos.retain(|i| i.expires_unix > now);
    infos.sort_by_key(|i| std::cmp::Reverse((i.created_unix, seq(i))));
    infos.truncate(limit);
    infos
}

/// Refuses to undo a checkpoint undone already, one whose old state was not kept, or one whose
/// change did not finish.
pub fn check_undoable(rec: &Record) -> Result<(), FsError> {
    let id = &rec.info.id;
    if rec.info.undone {
        return Err(FsError::new(
            FsErrorKind::BadRequest,
            format!("checkpoint {id} was undone already"),
        ));
    }
    if let Restorability::Unrestorable { reason } = &rec.info.restorability {
        return Err(FsError::new(
            FsErrorKind::Unrestorable,
            format!("checkpoint {id} cannot be restored: {reason}"),
        ));
    }
    if !rec.sealed {
        return Err(FsError::new(
            FsErrorKind::Unrestorable,
            format!("checkpoint {id} cannot be restored: its change did not finish (the helper stopped during it)"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn replace(old: &str, new: &str, all: bool) -> Edit {
        Edit::Replace {
            old: old.into(),
            new: new.into(),
            replace_all: all,
        }
    }

    #[test]
    fn exact_replacement() {
        assert_eq!(
            apply("a b a", &replace("b", "c", false), "f").unwrap(),
            ("a c a".into(), 1)
        );
        let e = apply("a b a", &replace("a", "c", false), "f").unwrap_err();
        assert_eq!(e.kind, FsErrorKind::AmbiguousMatch);
        assert_eq!(
            apply("a b a", &replace("a", "c", true), "f").unwrap(),
            ("c b c".into(), 2)
        );
        assert_eq!(
            apply("x", &replace("y", "z", false), "f").unwrap_err().kind,
            FsErrorKind::NoMatch
        );
    }

    #[test]
    fn unified_diffs_apply_exactly_or_not_at_all() {
        let old = "one\ntwo\nthree\nfour\n";
        let d =
            "--- a/f\n+++ b/f\n@@ -2,2 +2,3 @@\n two\n-three\n+THREE\n+three and a half\n four\n";
        let (new, n) = apply(old, &Edit::UnifiedDiff(d.into()), "f").unwrap();
        assert_eq!(new, "one\ntwo\nTHREE\nthree and a half\nfour\n");
        assert_eq!(n, 1);
        // The line numbers are off by one: found by its unique context.
        let shifted = "@@ -3,2 +3,2 @@\n one\n-two\n+2\n";
        let (new, _) = apply(old, &Edit::UnifiedDiff(shifted.into()), "f").unwrap();
        assert_eq!(new, "one\n2\nthree\nfour\n");
        let wrong = "@@ -1,1 +1,1 @@\n-zero\n+0\n";
        let e = apply(old, &Edit::UnifiedDiff(wrong.into()), "f").unwrap_err();
        assert_eq!(e.kind, FsErrorKind::DiffDoesNotApply);
        let e = apply(old, &Edit::UnifiedDiff("not a diff".into()), "f").unwrap_err();
        assert_eq!(e.kind, FsErrorKind::DiffDoesNotApply);
    }

    #[test]
    fn diffs_keep_a_missing_final_newline() {
        let old = "a\nb";
        let d = "@@ -1,2 +1,2 @@\n-a\n+A\n b\n\\ No newline at end of file\n";
        let (new, _) = apply(old, &Edit::UnifiedDiff(d.into()), "f").unwrap();
        assert_eq!(new, "A\nb");
        let add_eol = "@@ -2 +2 @@\n-b\n\\ No newline at end of file\n+b\n";
        let (new, _) = apply(old, &Edit::UnifiedDiff(add_eol.into()), "f").unwrap();
        assert_eq!(new, "a\nb\n");
        let insert = "@@ -0,0 +1 @@\n+first\n";
        let (new, _) = apply("x\n", &Edit::UnifiedDiff(insert.into()), "f").unwrap();
        assert_eq!(new, "first\nx\n");
    }
}
