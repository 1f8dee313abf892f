//! `read_file`: one page of a regular file.

use super::{need_file, Fs, Want};
use crate::kernel;
use crate::resolve::io_error;
use ipc_schema::fs::{FileChunk, FsError, FsPath, FsReply};
use rustix::fd::AsFd;
use rustix::fs::OFlags;

pub fn read_file(fs: &Fs, path: &FsPath, offset: u64, length: u32) -> Result<FsReply, FsError> {
    let r = fs.target(path, Want::READ)?;
    need_file(&r)?;
    let (fd, st) = fs.open_checked(&r, OFlags::RDONLY)?;
    let size = st.st_size as u64;
    let n = ipc_schema::fs_walk::read_span(offset, length, size);
    let data = kernel::pread_up_to(fd.as_fd(), offset, n).map_err(|e| io_error(&r.shown(), e))?;
    Ok(FsReply::File(FileChunk {
        target: r.target(),
        offset,
        eof: offset.saturating_add(data.len() as u64) >= size,
        data,
        file_size: size,
    }))
}
