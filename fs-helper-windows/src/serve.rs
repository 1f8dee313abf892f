//! Lock down, hello, serve; one function per request kind the helper answers on Windows.

use crate::config::{self, Fs};
use crate::walk::{io_error, kind_of, Opened};
use ipc_schema::fs::{
    Access, DirEntry, FileChunk, FileKind, FileStat, FsError, FsErrorKind, FsPath, FsReply,
    FsRequest, FsStatus, Listing, Resolver,
};
use ipc_schema::fs_walk::{Page, DIR_MAX};
use ipc_schema::helper::{fatal, Answer, Request};
use ipc_schema::route::BROKER_TO_FS;
use ipc_schema::{Body, Role};
use sandbox::helper_args::HelperArgs;
use sandbox::windows::beneath;
use std::os::windows::fs::MetadataExt;
use std::process::ExitCode;

/// What `Status` says of the resolver.
const RESOLVER: &str = "Windows: one NtCreateFile per component relative to its parent's handle, reparse points refused, the system's path of the result checked";

/// The fs-helper's `main` on Windows: open the grants, lock down, hello, serve.
pub fn main() -> ExitCode {
    // 1. What the broker grants, each root opened (and held) before lockdown.
    let args = HelperArgs::from_env_with(&["--config"]);
    let fs = match config::open(&args) {
        Ok(fs) => fs,
        Err(e) => {
            eprintln!("fs-helper: {e}");
            return ExitCode::from(64);
        }
    };
    fs.store.sweep();
    let channel = sandbox::helper_args::take_channel(&args)
        .unwrap_or_else(|e| fatal(Role::Fs, format!("no broker channel: {e}")));

    // 2. Lock down: the check of the restricted token and job the spawner made (refused,
    //    naming what is missing, unless --allow-degraded).
    let profile = sandbox::Profile::Fs(sandbox::FsProfile::default());
    let report = sandbox::helper_args::lock_down(&args, &profile)
        .unwrap_or_else(|e| fatal(Role::Fs, format!("lockdown failed: {e}")));

    // 3. Hello.
    let chan = ipc_schema::helper::HelperChannel::hello(Role::Fs, channel, report);

    // 4. Serve what the broker may ask (ipc_schema::route::BROKER_TO_FS).
    chan.serve(&BROKER_TO_FS, |req: Request| match req.body {
        Body::Fs(r) => Answer::reply(Body::FsReply(fs.handle(r).unwrap_or_else(FsReply::Failed))),
        _ => req.unserved(Role::Fs),
    });
    ExitCode::SUCCESS
}

impl Fs {
    /// Answers one request. Never panics on bad input: every refusal is a typed [`FsError`].
    pub fn handle(&self, req: FsRequest) -> Result<FsReply, FsError> {
        match req {
            FsRequest::Status => Ok(FsReply::Status(FsStatus {
                resolver: Resolver::ComponentWalk {
                    reason: RESOLVER.into(),
                },
                grants: self.grants.iter().map(|g| g.scope.info()).collect(),
                protected_dirs: self.protector.dirs(),
                checkpoints: self.store.count(),
            })),
            FsRequest::Resolve { path, access } => match access {
                Access::Read => Ok(FsReply::Resolved(self.open(&path, access)?.target())),
                Access::Write | Access::Edit | Access::Delete => {
                    Ok(FsReply::Resolved(self.locate(&path, access)?.target()))
                }
            },
            FsRequest::ReadFile {
                path,
                offset,
                length,
            } => self.read_file(&path, offset, length),
            FsRequest::ListDir {
                path,
                offset,
                limit,
            } => self.list_dir(&path, offset, limit),
            FsRequest::Stat { path } => self.stat(&path),
            FsRequest::SearchFiles { path, glob, limits } => {
                self.search_files(&path, &glob, limits)
            }
            FsRequest::Grep {
                path,
                regex,
                glob,
                case_insensitive,
                limits,
                grep,
            } => self.grep(
                &path,
                &regex,
                glob.as_deref(),
                case_insensitive,
                limits,
                grep,
            ),
            FsRequest::WriteFile {
                path,
                content,
                create,
                create_parents,
                expected,
                dry_run,
            } => self.write_file(&path, content, create, create_parents, expected, dry_run),
            FsRequest::EditFile {
                path,
                edit,
                expected,
                dry_run,
            } => self.edit_file(&path, &edit, expected, dry_run),
            FsRequest::DeletePath {
                path,
                recursive,
                expected,
            } => self.delete_path(&path, recursive, expected),
            FsRequest::MovePath {
                from,
                to,
                overwrite,
            } => self.move_path(&from, &to, overwrite),
            FsRequest::Undo { checkpoint } => self.undo(&checkpoint),
            FsRequest::ListCheckpoints { limit } => {
                Ok(FsReply::Checkpoints(self.store.list(limit)))
            }
            FsRequest::TestProbe(_) => Err(FsError::new(
                FsErrorKind::Unsupported,
                "test probes are not built into the fs-helper on Windows",
            )),
        }
    }

    fn read_file(&self, path: &FsPath, offset: u64, length: u32) -> Result<FsReply, FsError> {
        let o = self.open(path, Access::Read)?;
        need(&o, FileKind::File)?;
        let links = beneath::link_count(&o.file).map_err(|e| io_error(&o.shown(), e))?;
        if links > 1 {
            return Err(FsError::new(
                FsErrorKind::HardLinked,
                format!("{}: has {links} hard links; another name for it may lie outside the grant, so it is never opened", o.shown()),
            ));
        }
        let size = o.meta.len();
        let n = ipc_schema::fs_walk::read_span(offset, length, size);
        let data =
            crate::store::read_at(&o.file, offset, n).map_err(|e| io_error(&o.shown(), e))?;
        Ok(FsReply::File(FileChunk {
            target: o.target(),
            offset,
            eof: offset.saturating_add(data.len() as u64) >= size,
            data,
            file_size: size,
        }))
    }

    fn list_dir(&self, path: &FsPath, offset: u32, limit: u32) -> Result<FsReply, FsError> {
        let o = self.open(path, Access::Read)?;
        need(&o, FileKind::Dir)?;
        let mut all = beneath::list_dir(&o.file).map_err(|e| io_error(&o.shown(), e))?;
        if all.len() > DIR_MAX {
            return Err(FsError::new(
                FsErrorKind::TooLarge,
                format!("{}: more than {DIR_MAX} entries", o.shown()),
            ));
        }
        let named = |l: &beneath::Listed| String::from_utf16_lossy(&l.name);
        all.sort_by_cached_key(named);
        let depth = o.comps.len() + 1;
        let (mut entries, mut page) = (Vec::new(), Page::new(offset, limit));
        for l in &all {
            // A name that is not valid UTF-16 could not be named back to the helper: left out.
            let Ok(name) = String::from_utf16(&l.name) else {
                continue;
            };
            let kind = kind_of(l.attributes);
            let child = match o.relative_slash().as_str() {
                "" => name.clone(),
                rel => format!("{rel}/{name}"),
            };
            let scope = o
                .grant
                .scope
                .check_scope(child.as_bytes(), depth, kind == FileKind::Dir);
            if scope.is_err() {
                continue;
            }
            if !page.offer(name.len()) {
                continue;
            }
            let abs = format!(r"{}\{name}", o.shown());
            entries.push(DirEntry {
                protected: self.protector.refuses(abs.as_bytes(), false).is_some(),
                size: if kind == FileKind::File { l.size } else { 0 },
                name: name.into_bytes(),
                kind,
            });
        }
        Ok(FsReply::Listing(Listing {
            dir: o.target(),
            entries,
            total: page.total,
            next_offset: page.next_offset,
        }))
    }

    fn stat(&self, path: &FsPath) -> Result<FsReply, FsError> {
        let o = self.open(path, Access::Read)?;
        // Windows has no permission bits: read-only (FILE_ATTRIBUTE_READONLY) or not, as the
        // C runtime's `stat` reports them.
        let mode = match (o.kind(), o.meta.permissions().readonly()) {
            (FileKind::Dir, _) => 0o755,
            (_, true) => 0o444,
            (_, false) => 0o644,
        };
        // 100 ns ticks since 1601 to nanoseconds since 1970.
        let ticks = o.meta.last_write_time() as i128;
        Ok(FsReply::Stat(FileStat {
            target: o.target(),
            size: if o.kind() == FileKind::File {
                o.meta.len()
            } else {
                0
            },
            mode,
            nlink: beneath::link_count(&o.file).map_err(|e| io_error(&o.shown(), e))?,
            modified_unix_nanos: (ticks - 116_444_736_000_000_000) * 100,
        }))
    }
}

pub(crate) fn need(o: &Opened<'_>, kind: FileKind) -> Result<(), FsError> {
    match (o.kind(), kind) {
        (k, w) if k == w => Ok(()),
        (FileKind::Dir, _) => Err(FsError::new(
            FsErrorKind::IsADirectory,
            format!("{} is a directory", o.shown()),
        )),
        _ => Err(FsError::new(
            FsErrorKind::NotADirectory,
            format!("{} is not a directory", o.shown()),
        )),
    }
}
