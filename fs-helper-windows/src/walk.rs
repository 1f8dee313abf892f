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

use crate::config::{Fs, Grant};
use crate::names::{is_sep, plain_name, WinPath};
use ipc_schema::fs::{Access, FileKind, FsError, FsErrorKind, FsPath, ResolvedTarget};
use sandbox::windows::beneath::{self, Want};
use std::fs::{File, Metadata};
use std::io;
use std::os::windows::fs::MetadataExt;
use std::os::windows::io::AsHandle;

/// The longest request path accepted (bytes).
const MAX_PATH: usize = 32 * 1024;

/// Where a change lands (`Fs::locate`).
pub struct Place<'g> {
    pub grant: &'g Grant,
    /// Below the root: what exists as the system names it, then the names still to be made.
    pub comps: Vec<String>,
    /// How many trailing names do not exist yet (0: the target exists).
    pub missing: usize,
    /// The deepest existing directory on the way: the target's parent when `missing` is 0 or 1.
    pub dir: File,
    /// The target, if it exists: a file with one name.
    pub target: Option<(File, Metadata, beneath::Identity)>,
}

impl Place<'_> {
    fn shown_with(&self, comps: &[String]) -> String {
        let mut p = self.grant.root.clone();
        p.comps.extend(comps.iter().cloned());
        p.verbatim()
    }

    pub fn shown(&self) -> String {
        self.shown_with(&self.comps)
    }

    pub fn target(&self) -> ResolvedTarget {
        ResolvedTarget {
            grant: self.grant.scope.id.clone(),
            root: self.grant.scope.root.clone(),
            relative: self.comps.join(r"\").into_bytes(),
            absolute: self.shown().into_bytes(),
            kind: match &self.target {
                Some((_, m, _)) if m.is_dir() => FileKind::Dir,
                Some(_) => FileKind::File,
                None => FileKind::Missing,
            },
        }
    }
}

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
    if attributes & beneath::REPARSE_POINT != 0 {
        FileKind::Symlink
    } else if attributes & beneath::DIRECTORY != 0 {
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

    /// The grant `path` names and its components below the root: `..` folded (never above the
    /// root), each a plain name.
    pub(crate) fn names<'a>(&'a self, path: &FsPath) -> Result<(&'a Grant, Vec<String>), FsError> {
        let (grant, asked) = self.split(path)?;
        let mut comps: Vec<String> = Vec::new();
        for c in asked {
            if c == ".." {
                if comps.pop().is_none() {
                    return Err(FsError::new(
                        FsErrorKind::OutsideGrant,
                        format!(
                            "{}: `..` leaves grant {}",
                            grant.root.verbatim(),
                            grant.scope.id
                        ),
                    ));
                }
                continue;
            }
            plain_name(&c).map_err(invalid)?;
            comps.push(c);
        }
        Ok((grant, comps))
    }

    /// Opens `comps` one at a time beneath the root, every step but the last a directory, any
    /// reparse point refused. With `stop_at_missing`, a name that is not there ends the descent
    /// (the handles of what exists are returned); otherwise it is an error.
    pub(crate) fn descend(
        &self,
        grant: &Grant,
        comps: &[String],
        stop_at_missing: bool,
    ) -> Result<Vec<File>, FsError> {
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
            let f = match beneath::open_beneath(parent.as_handle(), name, want) {
                Ok(f) => f,
                Err(e) if stop_at_missing && matches!(e.raw_os_error(), Some(2 | 3)) => break,
                Err(e) => return Err(io_error(&shown, e)),
            };
            let attrs = f
                .metadata()
                .map_err(|e| io_error(&shown, e))?
                .file_attributes();
            if attrs & beneath::REPARSE_POINT != 0 {
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
        Ok(held)
    }

    /// The components below `grant`'s root of the open `file`, as the system names it; refused
    /// if the system places it outside the root.
    fn placed(&self, grant: &Grant, file: &File) -> Result<Vec<String>, FsError> {
        let root_shown = grant.root.verbatim();
        let at = beneath::final_path(file).map_err(|e| io_error(&root_shown, e))?;
        let at_shown = at.display().to_string();
        at.to_str()
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
            })
    }

    /// Opens `path` for `access` and checks, in this order: the names, the walk (no reparse
    /// point, every step a directory), where the system says the file is, the protected
    /// table, the grant's shape and globs, its capabilities.
    pub fn open(&self, path: &FsPath, access: Access) -> Result<Opened<'_>, FsError> {
        let (grant, comps) = self.names(path)?;
        let mut held = self.descend(grant, &comps, false)?;
        // The root itself is opened afresh (an empty name relative to its handle), not the
        // held handle duplicated: a listing's position belongs to the open file, which a
        // duplicate shares.
        let file = match held.pop() {
            Some(f) => f,
            None => beneath::open_beneath(grant.handle.as_handle(), "", Want::Any)
                .map_err(|e| io_error(&grant.root.verbatim(), e))?,
        };
        drop(held);
        let meta = file
            .metadata()
            .map_err(|e| io_error(&grant.root.verbatim(), e))?;
        let comps = self.placed(grant, &file)?;
        let o = Opened {
            grant,
            comps,
            file,
            meta,
        };
        self.check(&o, access)?;
        Ok(o)
    }

    /// Where a change to `path` lands: the file if it exists, else the deepest directory on the
    /// way that does (and how many names after it do not), checked as a change of `access`
    /// (the protected table as a write, with the no-`.git`-file and git-shape checks, the
    /// grant's shape, globs and capability).
    pub fn locate(&self, path: &FsPath, access: Access) -> Result<Place<'_>, FsError> {
        let (grant, asked) = self.names(path)?;
        if asked.is_empty() {
            return Err(FsError::new(
                FsErrorKind::IsADirectory,
                format!("{}: is the grant root", grant.root.verbatim()),
            ));
        }
        let mut held = self.descend(grant, &asked, true)?;
        let found = held.len();
        let target = (found == asked.len()).then(|| held.pop()).flatten();
        let dir = match held.pop() {
            Some(d) => d,
            None => beneath::open_beneath(grant.handle.as_handle(), "", Want::Dir)
                .map_err(|e| io_error(&grant.root.verbatim(), e))?,
        };
        drop(held);
        // The existing part as the system names it, then the names still to be made.
        let mut comps = self.placed(grant, &dir)?;
        if comps.len() != found - usize::from(target.is_some()) {
            return Err(FsError::new(
                FsErrorKind::Raced,
                format!("{}: moved while the request ran", grant.root.verbatim()),
            ));
        }
        let mut place = Place {
            grant,
            missing: asked.len() - found,
            dir,
            target: None,
            comps: Vec::new(),
        };
        match target {
            Some(f) => {
                let meta = f
                    .metadata()
                    .map_err(|e| io_error(&grant.root.verbatim(), e))?;
                comps = self.placed(grant, &f)?;
                // A delete takes a directory, or a file with another name (it changes no
                // contents); every other change a file with one name.
                let deletes = access == Access::Delete;
                if kind_of(meta.file_attributes()) != FileKind::File && !deletes {
                    return Err(FsError::new(
                        FsErrorKind::IsADirectory,
                        format!("{}: is not a file", place.shown_with(&comps)),
                    ));
                }
                let id =
                    beneath::identity(&f).map_err(|e| io_error(&place.shown_with(&comps), e))?;
                if id.links > 1 && !deletes {
                    return Err(FsError::new(
                        FsErrorKind::HardLinked,
                        format!("{}: has {} hard links; another name for it may lie outside the grant, so it is never opened", place.shown_with(&comps), id.links),
                    ));
                }
                place.target = Some((f, meta, id));
            }
            None => comps.extend(asked[found..].iter().cloned()),
        }
        place.comps = comps;
        self.check_change(&place, access)?;
        Ok(place)
    }

    /// The checks of a change: the protected table as a write (and no new file named `.git`,
    /// no git-shaped directory assembled), the grant's shape and globs, its capability.
    fn check_change(&self, p: &Place<'_>, access: Access) -> Result<(), FsError> {
        let shown = p.shown();
        let refused = match p.target {
            Some(_) => self.protector.refuses(shown.as_bytes(), true),
            None => self.protector.check_new_file(shown.as_bytes()),
        };
        let bytes: Vec<Vec<u8>> = p.comps.iter().map(|c| c.as_bytes().to_vec()).collect();
        let exists = |dir: &[Vec<u8>], name: &str| {
            let mut names: Vec<String> = (dir.iter())
                .map(|c| String::from_utf8_lossy(c).into_owned())
                .collect();
            names.push(name.to_string());
            self.descend(p.grant, &names, false).is_ok()
        };
        let refused = refused.or_else(|| ipc_schema::protected::git_shape(&bytes, exists));
        if let Some(pr) = refused {
            return Err(FsError::new(
                FsErrorKind::Protected,
                format!("{shown} is protected ({}: {})", pr.why, pr.place),
            ));
        }
        let is_dir = (p.target.as_ref()).is_some_and(|(_, m, _)| m.is_dir());
        (p.grant.scope).check_scope(p.comps.join("/").as_bytes(), p.comps.len(), is_dir)?;
        p.grant.scope.check_caps(access, &shown)
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
