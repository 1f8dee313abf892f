//! From a requested path to an open file inside a grant: the one way this helper opens
//! anything.
//!
//! `..` is folded on the requested names (never above the root), each remaining name must be
//! plain ([`plain_name`]), and the walk opens one name at a time relative to the handle of the
//! directory before it, with the system told not to follow a reparse point
//! (`beneath::open_beneath`). Any reparse point met (a symbolic link, a junction, a mount
//! point, a cloud placeholder) is refused: links are not followed on Windows. Every handle the
//! walk holds is shared for reading and writing but not for deleting, so no directory on the
//! way can be renamed or removed until the walk lets go. The opened file's own path, as the
//! system gives it ([`beneath::final_path`]: long names, as stored), must lie under the root;
//! the protected table and the grant's globs judge that path, so an 8.3 short name or another
//! spelling in the request changes nothing.

use crate::config::{Fs, Grant, FILE_ATTRIBUTE_REPARSE_POINT};
use crate::names::{is_sep, plain_name, WinPath};
use ipc_schema::fs::{Access, FileKind, FsError, FsErrorKind, FsPath, ResolvedTarget};
use sandbox::windows::beneath::{self, Want};
use std::fs::{File, Metadata};
use std::io;
use std::os::windows::fs::MetadataExt;
use std::os::windows::io::AsHandle;

/// The longest request path accepted (bytes).
const MAX_PATH: usize = 32 * 1024;

/// An open file inside a grant.
pub struct Opened<'g> {
    pub grant: &'g Grant,
    /// The components below the root, as the system names them.
    pub comps: Vec<String>,
    pub file: File,
    pub meta: Metadata,
}

impl Opened<'_> {
    pub fn kind(&self) -> FileKind {
        kind_of(self.meta.file_attributes())
    }

    pub fn path(&self) -> WinPath {
        let mut p = self.grant.root.clone();
        p.comps.extend(self.comps.iter().cloned());
        p
    }

    pub fn shown(&self) -> String {
        self.path().verbatim()
    }

    /// Relative to the root, `/`-separated: what the grant's globs match.
    pub fn relative_slash(&self) -> String {
        self.comps.join("/")
    }

    pub fn target(&self) -> ResolvedTarget {
        ResolvedTarget {
            grant: self.grant.scope.id.clone(),
            root: self.grant.scope.root.clone(),
            relative: self.comps.join(r"\").into_bytes(),
            absolute: self.shown().into_bytes(),
            kind: self.kind(),
        }
    }
}

/// What the attributes say an entry is (a reparse point is shown as a link, never followed).
pub fn kind_of(attributes: u32) -> FileKind {
    const DIRECTORY: u32 = 0x10;
    if attributes & FILE_ATTRIBUTE_REPARSE_POINT != 0 {
        FileKind::Symlink
    } else if attributes & DIRECTORY != 0 {
        FileKind::Dir
    } else {
        FileKind::File
    }
}

fn invalid(m: String) -> FsError {
    FsError::new(FsErrorKind::InvalidPath, m)
}

/// An error of the system, named for `shown`.
pub fn io_error(shown: &str, e: io::Error) -> FsError {
    let kind = match e.raw_os_error() {
        Some(2 | 3) => FsErrorKind::NotFound,
        Some(267) => FsErrorKind::NotADirectory,
        Some(5) => FsErrorKind::NotPermitted,
        _ => FsErrorKind::Io,
    };
    FsError {
        kind,
        message: format!("{shown}: {e}"),
        errno: e.raw_os_error(),
    }
}

impl Fs {
    /// The grant a path names and its requested components (`..` not folded yet).
    fn split<'a>(&'a self, path: &FsPath) -> Result<(&'a Grant, Vec<String>), FsError> {
        let (bytes, grant) = match path {
            FsPath::InGrant { grant, path } => (path, Some(grant)),
            FsPath::Absolute(p) => (p, None),
        };
        let shown = String::from_utf8_lossy(bytes);
        if bytes.len() > MAX_PATH {
            return Err(invalid(format!(
                "a path of {} bytes is longer than {MAX_PATH}",
                bytes.len()
            )));
        }
        let text = std::str::from_utf8(bytes)
            .map_err(|_| invalid(format!("{shown}: not Unicode (Windows names are)")))?;
        if text.contains('\0') {
            return Err(invalid(format!("{shown}: a path cannot contain a NUL")));
        }
        match grant {
            Some(id) => {
                let g = (self.grants.iter().find(|g| &g.scope.id == id)).ok_or_else(|| {
                    FsError::new(
                        FsErrorKind::NoGrant,
                        format!("there is no grant named {id}"),
                    )
                })?;
                if text.bytes().next().is_some_and(is_sep) || WinPath::parse(text).is_some() {
                    return Err(invalid(format!(
                        "{shown}: a path in grant {id} is relative to its root {}",
                        g.root.verbatim()
                    )));
                }
                let comps = text
                    .split(|c: char| c.is_ascii() && is_sep(c as u8))
                    .filter(|c| !c.is_empty() && *c != ".")
                    .map(String::from)
                    .collect();
                Ok((g, comps))
            }
            None => {
                let p = WinPath::parse(text)
                    .ok_or_else(|| invalid(format!("{shown}: not an absolute path on a drive")))?;
                // The longest root that is a prefix of the path as written (`..` not folded).
                let best = (self.grants.iter())
                    .filter_map(|g| p.under(&g.root).map(|rest| (g, rest)))
                    .max_by_key(|(g, _)| g.root.comps.len());
                match best {
                    Some((g, rest)) => Ok((g, rest.to_vec())),
                    None => Err(FsError::new(
                        FsErrorKind::NoGrant,
                        format!("{shown}: not inside any grant"),
                    )),
                }
            }
        }
    }

    /// Opens `path` for `access` and checks, in this order: the names, the walk (no reparse
    /// point, every step a directory), where the system says the file is, the protected
    /// table, the grant's shape and globs, its capabilities.
    pub fn open(&self, path: &FsPath, access: Access) -> Result<Opened<'_>, FsError> {
        let (grant, asked) = self.split(path)?;
        let root_shown = grant.root.verbatim();
        let mut comps: Vec<String> = Vec::new();
        for c in asked {
            if c == ".." {
                if comps.pop().is_none() {
                    return Err(FsError::new(
                        FsErrorKind::OutsideGrant,
                        format!("{}: `..` leaves grant {}", root_shown, grant.scope.id),
                    ));
                }
                continue;
            }
            plain_name(&c).map_err(invalid)?;
            comps.push(c);
        }
        let mut held: Vec<File> = Vec::new();
        for (i, name) in comps.iter().enumerate() {
            let parent = held.last().unwrap_or(&grant.handle);
            let want = if i + 1 == comps.len() {
                Want::Any
            } else {
                Want::Dir
            };
            let mut so_far = grant.root.clone();
            so_far.comps.extend(comps[..=i].iter().cloned());
            let shown = so_far.verbatim();
            let f = beneath::open_beneath(
                std::os::windows::io::AsHandle::as_handle(parent),
                name,
                want,
            )
            .map_err(|e| io_error(&shown, e))?;
            let attrs = f
                .metadata()
                .map_err(|e| io_error(&shown, e))?
                .file_attributes();
            if attrs & FILE_ATTRIBUTE_REPARSE_POINT != 0 {
                let tag = beneath::reparse_tag(&f).unwrap_or(0);
                return Err(FsError::new(
                    FsErrorKind::OutsideGrant,
                    format!(
                        "{shown} is a link, junction or other reparse point (tag {tag:#x}); gatehouse on Windows does not follow them"
                    ),
                ));
            }
            held.push(f);
        }
        // The root itself is opened afresh (an empty name relative to its handle), not the
        // held handle duplicated: a listing's position belongs to the open file, which a
        // duplicate shares.
        let file = match held.pop() {
            Some(f) => f,
            None => beneath::open_beneath(grant.handle.as_handle(), "", Want::Any)
                .map_err(|e| io_error(&root_shown, e))?,
        };
        drop(held);
        let meta = file.metadata().map_err(|e| io_error(&root_shown, e))?;
        let at = beneath::final_path(&file).map_err(|e| io_error(&root_shown, e))?;
        let at_shown = at.display().to_string();
        let comps = at
            .to_str()
            .and_then(WinPath::parse)
            .and_then(|p| p.under(&grant.root).map(<[String]>::to_vec))
            .ok_or_else(|| {
                FsError::new(
                    FsErrorKind::OutsideGrant,
                    format!(
                        "the system places it at {at_shown}, outside grant {}",
                        grant.scope.id
                    ),
                )
            })?;
        let o = Opened {
            grant,
            comps,
            file,
            meta,
        };
        self.check(&o, access)?;
        Ok(o)
    }

    /// The protected table (on the system's path), the grant's shape and globs, its
    /// capabilities.
    pub fn check(&self, o: &Opened<'_>, access: Access) -> Result<(), FsError> {
        let shown = o.shown();
        if let Some(p) = self
            .protector
            .refuses(shown.as_bytes(), access != Access::Read)
        {
            return Err(FsError::new(
                FsErrorKind::Protected,
                format!("{shown} is protected ({}: {})", p.why, p.place),
            ));
        }
        (o.grant.scope).check_scope(
            o.relative_slash().as_bytes(),
            o.comps.len(),
            o.kind() == FileKind::Dir,
        )?;
        o.grant.scope.check_caps(access, &shown)
    }
}
