//! `edit_file`: exact string replacement, or a unified diff, on a UTF-8 text file.

use super::write::{checkpointed_replace, diff, read_current};
use super::{need_file, Fs, Want};
use crate::resolve::Missing;
use ipc_schema::fs::{
    Access, ChangeKind, ChangePreview, Edit, FsError, FsPath, FsReply, Seal, CHECKPOINT_MAX_BYTES,
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
    let current = cur.seal.unwrap_or_else(|| crate::checkpoint::seal_of(&[]));
    let size = cur.stat.st_size as u64;
    let (new, replacements) =
        fs_change::edited(cur.data.as_deref(), size, expected, current, edit, &shown)?;
    let data = cur
        .data
        .as_deref()
        .expect("edited refuses a file it could not keep");
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
