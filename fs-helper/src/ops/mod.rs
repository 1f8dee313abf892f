//! The helper's state and one module per request kind.

mod delete;
mod edit;
mod list;
mod moving;
mod read;
mod undo;
mod walk;
pub mod write;

use crate::checkpoint::CheckpointStore;
use crate::grant::{Grant, Grants};
use crate::kernel::{self, OpenMode};
use crate::protect::Protector;
use crate::resolve::{self, Missing, Resolved};
use ipc_schema::fs::{
    Access, FileKind, FsError, FsErrorKind, FsPath, FsReply, FsRequest, FsStatus, Resolver,
};
use rustix::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use rustix::fs::{Mode, OFlags, Stat};

/// Everything a request may use.
pub struct Fs {
    pub grants: Grants,
    pub protector: Protector,
    pub mode: OpenMode,
    /// Why openat2 is not used, when it is not.
    pub mode_note: Option<String>,
    pub store: CheckpointStore,
    /// The helper's own uid and gid (a file of another owner is rewritten in place).
    pub euid: u32,
    pub egid: u32,
}

/// How a request names its target.
#[derive(Debug, Clone, Copy)]
pub struct Want {
    pub access: Access,
    pub missing: Missing,
    /// The request will open the file (special files and hard-linked files are refused).
    pub opens: bool,
    /// Follow a link in the last component (not for delete, or the ends of a move).
    pub follow_last: bool,
}

impl Want {
    pub const READ: Want = Want {
        access: Access::Read,
        missing: Missing::Refuse,
        opens: true,
        follow_last: true,
    };

    pub fn new(access: Access, missing: Missing) -> Want {
        Want {
            access,
            missing,
            opens: access != Access::Delete,
            follow_last: access != Access::Delete,
        }
    }
}

impl Fs {
    /// The descriptors lockdown must keep open: the grant roots and the checkpoint dir.
    pub fn fds(&self) -> Vec<RawFd> {
        let roots = self.grants.0.iter().map(|g| g.root_fd.as_raw_fd());
        roots.chain([self.store.dir_fd()]).collect()
    }

    /// Answers one request. Never panics on bad input: every refusal is a typed [`FsError`].
    pub fn handle(&self, req: FsRequest) -> FsReply {
        let result = match req {
            FsRequest::Status => Ok(FsReply::Status(self.status())),
            FsRequest::Resolve { path, access } => {
                let missing = match access {
                    Access::Write => Missing::WithParents,
                    _ => Missing::Refuse,
                };
                self.target(&path, Want::new(access, missing))
                    .map(|r| FsReply::Resolved(r.target()))
            }
            FsRequest::ReadFile {
                path,
                offset,
                length,
            } => read::read_file(self, &path, offset, length),
            FsRequest::ListDir {
                path,
                offset,
                limit,
            } => list::list_dir(self, &path, offset, limit),
            FsRequest::Stat { path } => list::stat(self, &path),
            FsRequest::SearchFiles { path, glob, limits } => {
                walk::search_files(self, &path, &glob, limits)
            }
            FsRequest::Grep {
                path,
                regex,
                glob,
                case_insensitive,
                limits,
                grep,
            } => walk::grep(
                self,
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
            } => write::write_file(
                self,
                &path,
                content,
                create,
                create_parents,
                expected,
                dry_run,
            ),
            FsRequest::EditFile {
                path,
                edit,
                expected,
                dry_run,
            } => edit::edit_file(self, &path, &edit, expected, dry_run),
            FsRequest::DeletePath {
                path,
                recursive,
                expected,
            } => delete::delete_path(self, &path, recursive, expected),
            FsRequest::MovePath {
                from,
                to,
                overwrite,
            } => moving::move_path(self, &from, &to, overwrite),
            FsRequest::Undo { checkpoint } => undo::undo(self, &checkpoint),
            FsRequest::ListCheckpoints { limit } => {
                self.store.list(limit).map(FsReply::Checkpoints)
            }
            FsRequest::TestProbe(p) => Ok(crate::probe::run(p)),
        };
        result.unwrap_or_else(FsReply::Failed)
    }

    fn status(&self) -> FsStatus {
        FsStatus {
            resolver: match &self.mode_note {
                None => Resolver::Openat2,
                Some(reason) => Resolver::ComponentWalk {
                    reason: reason.clone(),
                },
            },
            grants: self.grants.0.iter().map(|g| g.info()).collect(),
            protected_dirs: self.protector.dirs().to_vec(),
            checkpoints: self.store.count(),
        }
    }

    /// Resolves `path` and checks, in this order: protected paths, the grant's shape and globs,
    /// its capabilities, and what the file is (special files and hard links are never opened).
    pub fn target(&self, path: &FsPath, want: Want) -> Result<Resolved<'_>, FsError> {
        let (grant, comps) = match path {
            FsPath::InGrant { grant, path } => {
                let g = self.grants.by_id(grant)?;
                (g, resolve::request_components(path, g)?)
            }
            FsPath::Absolute(abs) => {
                if abs.contains(&0) {
                    return Err(FsError::new(
                        FsErrorKind::InvalidPath,
                        "a path cannot contain a NUL byte",
                    ));
                }
                let (g, rest) = self.grants.for_absolute(abs)?;
                (g, rest.into_iter().map(<[u8]>::to_vec).collect())
            }
        };
        let r = resolve::resolve(self.mode, grant, comps, want.follow_last, want.missing)?;
        self.check(&r, want.access)?;
        if want.opens {
            refuse_unopenable(r.stat.as_ref(), &r.shown())?;
            if r.kind() == FileKind::Missing {
                refuse_new_file(self, &r)?;
            }
        }
        Ok(r)
    }

    /// The checks of [`Fs::target`] on an already resolved path.
    pub fn check(&self, r: &Resolved<'_>, access: Access) -> Result<(), FsError> {
        let abs = r.absolute();
        let shown = r.shown();
        let kind = r.kind();
        let writes = access != Access::Read;
        let git_shape = || {
            let exists = |dir: &[Vec<u8>], name: &str| {
                let mut c = dir.to_vec();
                c.push(name.as_bytes().to_vec());
                kernel::open_beneath(
                    self.mode,
                    r.grant.root_fd.as_fd(),
                    &c,
                    kernel::LINK_ITSELF,
                    Mode::empty(),
                )
                .is_ok()
            };
            Protector::git_shape(&r.comps, exists)
        };
        let refused = self
            .protector
            .refuses(&abs, writes)
            .or_else(|| writes.then(git_shape).flatten());
        if let Some(p) = refused {
            return Err(protected(&shown, p));
        }
        r.grant
            .check_scope(&r.relative(), r.comps.len(), kind == FileKind::Dir)?;
        r.grant.check_caps(access, &shown)
    }

    /// Opens a resolved path again for use, beneath its root with every link refused, and
    /// decides on the opened descriptor: it must be the very file the resolution saw.
    pub fn open_checked(
        &self,
        r: &Resolved<'_>,
        flags: OFlags,
    ) -> Result<(OwnedFd, Stat), FsError> {
        let shown = r.shown();
        let fd = kernel::open_beneath(
            self.mode,
            r.grant.root_fd.as_fd(),
            &r.comps,
            flags | OFlags::NONBLOCK,
            Mode::empty(),
        )
        .map_err(|e| resolve::io_error(&shown, e))?;
        let st = rustix::fs::fstat(&fd).map_err(|e| resolve::io_error(&shown, e))?;
        if let Some(seen) = &r.stat {
            if !kernel::same_file(seen, &st) {
                return Err(FsError::new(
                    FsErrorKind::Raced,
                    format!(
                        "{shown}: replaced by another file while the request ran; nothing was done"
                    ),
                ));
            }
        }
        refuse_unopenable(Some(&st), &shown)?;
        Ok((fd, st))
    }

    /// Opens the directory holding a resolved path (for creating, renaming, unlinking in it).
    pub fn open_parent(&self, grant: &Grant, parent: &[Vec<u8>]) -> Result<OwnedFd, FsError> {
        kernel::open_beneath(
            self.mode,
            grant.root_fd.as_fd(),
            parent,
            OFlags::RDONLY | OFlags::DIRECTORY,
            Mode::empty(),
        )
        .map_err(|e| {
            resolve::io_error(
                &String::from_utf8_lossy(&grant.absolute(&kernel::join(parent))),
                e,
            )
        })
    }
}

/// A new regular file may not be named `.git` (see [`Protector::check_new_file`]).
pub fn refuse_new_file(fs: &Fs, r: &Resolved<'_>) -> Result<(), FsError> {
    match fs.protector.check_new_file(&r.absolute()) {
        Some(p) => Err(protected(&r.shown(), p)),
        None => Ok(()),
    }
}

fn protected(shown: &str, p: crate::protect::Protection) -> FsError {
    FsError::new(
        FsErrorKind::Protected,
        format!(
            "{shown}: protected ({}: {}); refused whatever a grant or an approval says",
            p.why, p.place
        ),
    )
}

/// FIFOs, sockets and devices are never opened (a FIFO would hang, a device may act on open),
/// nor regular files with a second hard link (the other name may be outside the grant).
pub fn refuse_unopenable(st: Option<&Stat>, shown: &str) -> Result<(), FsError> {
    let Some(st) = st else { return Ok(()) };
    match kernel::kind_of(st) {
        FileKind::Fifo | FileKind::Socket | FileKind::CharDevice | FileKind::BlockDevice => {
            Err(FsError::new(
                FsErrorKind::SpecialFile,
                format!(
                    "{shown}: a {} is not a regular file; it is never opened",
                    kind_name(kernel::kind_of(st))
                ),
            ))
        }
        FileKind::File if st.st_nlink > 1 => Err(FsError::new(
            FsErrorKind::HardLinked,
            format!(
                "{shown}: has {} hard links; another name for it may lie outside the grant, so it is never opened",
                st.st_nlink
            ),
        )),
        _ => Ok(()),
    }
}

pub fn kind_name(k: FileKind) -> &'static str {
    match k {
        FileKind::File => "file",
        FileKind::Dir => "directory",
        FileKind::Symlink => "symbolic link",
        FileKind::Fifo => "FIFO",
        FileKind::Socket => "socket",
        FileKind::CharDevice => "character device",
        FileKind::BlockDevice => "block device",
        FileKind::Missing => "missing file",
    }
}

/// Refuses anything but a regular file.
pub fn need_file(r: &Resolved<'_>) -> Result<(), FsError> {
    match r.kind() {
        FileKind::File => Ok(()),
        FileKind::Dir => Err(FsError::new(
            FsErrorKind::IsADirectory,
            format!("{}: is a directory", r.shown()),
        )),
        FileKind::Missing => Err(FsError::new(
            FsErrorKind::NotFound,
            format!("{}: no such file", r.shown()),
        )),
        other => Err(FsError::new(
            FsErrorKind::SpecialFile,
            format!(
                "{}: is a {}, not a regular file",
                r.shown(),
                kind_name(other)
            ),
        )),
    }
}

/// Refuses anything but a directory.
pub fn need_dir(r: &Resolved<'_>) -> Result<(), FsError> {
    match r.kind() {
        FileKind::Dir => Ok(()),
        other => Err(FsError::new(
            FsErrorKind::NotADirectory,
            format!("{}: is a {}, not a directory", r.shown(), kind_name(other)),
        )),
    }
}

pub use fs_change::check_expected;
