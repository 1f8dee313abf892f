//! `edit_file`: exact string replacement, or a unified diff, on a UTF-8 text file.

use super::write::{checkpointed_replace, diff, read_current};
use super::{check_expected, need_file, Fs, Want};
use crate::resolve::Missing;
use ipc_schema::fs::{
    Access, ChangeKind, ChangePreview, Edit, FsError, FsErrorKind, FsPath, FsReply, Seal,
    CHECKPOINT_MAX_BYTES,
};

pub fn edit_file(
    fs: &Fs,
    path: &FsPath,
    edit: &Edit,
    expected: Option<Seal>,
    dry_run: bool,
) -> Result<FsReply, FsError> {
    let r = fs.target(path, Want::new(Access::Edit, Missing::Refuse))?;
    need_file(&r)?;
    let shown = r.shown();
    let cur = read_current(fs, &r, CHECKPOINT_MAX_BYTES)?;
    let Some(data) = &cur.data else {
        return Err(FsError::new(
            FsErrorKind::TooLarge,
            format!(
                "{shown}: {} bytes; edit_file works on text files up to {} MiB",
                cur.stat.st_size,
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
    check_expected(expected, cur.seal, &shown)?;
    let (new, replacements) = apply(text, edit, &shown)?;
    if new.len() as u64 > CHECKPOINT_MAX_BYTES {
        return Err(FsError::new(
            FsErrorKind::TooLarge,
            format!(
                "{shown}: the edited file would be over {} MiB",
                CHECKPOINT_MAX_BYTES >> 20
            ),
        ));
    }
    if dry_run {
        let name = String::from_utf8_lossy(&r.relative()).into_owned();
        return Ok(FsReply::Preview(ChangePreview {
            target: r.target(),
            current: cur.seal,
            proposed: crate::checkpoint::seal_of(new.as_bytes()),
            diff: diff(data, new.as_bytes(), &name),
            replacements,
        }));
    }
    let mut receipt = checkpointed_replace(fs, &r, ChangeKind::Edit, Some(cur), new.as_bytes())?;
    receipt.replacements = replacements;
    Ok(FsReply::Changed(receipt))
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
