//! `edit_file`: exact string replacement, or a unified diff, on a UTF-8 text file.

use super::write::{checkpointed_replace, diff, read_current};
use super::{check_expected, need_file, Fs, Want};
use crate::resolve::Missing;
use fs_change::apply;
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
