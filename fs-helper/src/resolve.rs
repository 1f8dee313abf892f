//! From a requested path to a canonical one inside a grant.
//!
//! The resolver walks the request one component at a time, each step an `O_PATH | O_NOFOLLOW`
//! open beneath the grant root (see [`crate::kernel`]). A link it meets is read and spliced into
//! the walk: a relative target continues from the link's directory, an absolute one must lie under
//! the grant's own root, and `..` pops the canonical stack but never above the root. What comes out
//! is a path with no links and no `..`, which every later open uses again with the kernel refusing
//! any link: if something was swapped for a link meanwhile, that open fails (`Raced`), it does not
//! follow it.

use crate::grant::Grant;
use crate::kernel::{self, OpenMode};
use ipc_schema::fs::{FileKind, FsError, FsErrorKind};
use rustix::fd::AsFd;
use rustix::fs::{Mode, Stat};
use rustix::io::Errno;
use std::collections::VecDeque;

/// How many links one resolution may follow (the kernel's own limit).
const MAX_LINKS: u32 = 40;
/// The longest request path accepted.
const MAX_PATH: usize = 4096;

/// What may be absent at the end of the path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Missing {
    Refuse,
    /// The last component may not exist yet (its parent must).
    Last,
    /// Any tail of the path may not exist yet (a write that creates parents).
    WithParents,
}

/// A canonical path inside a grant.
#[derive(Debug)]
pub struct Resolved<'g> {
    pub grant: &'g Grant,
    /// Plain names, no links (as of the walk), no `..`.
    pub comps: Vec<Vec<u8>>,
    /// What the last component is (not followed if it is a link and the walk was told not
    /// to); `None` if it does not exist.
    pub stat: Option<Stat>,
    /// How many trailing components do not exist (0 when `stat` is `Some`).
    pub missing: usize,
}

impl Resolved<'_> {
    pub fn relative(&self) -> Vec<u8> {
        kernel::join(&self.comps)
    }

    pub fn absolute(&self) -> Vec<u8> {
        self.grant.absolute(&self.relative())
    }

    pub fn kind(&self) -> FileKind {
        self.stat
            .as_ref()
            .map_or(FileKind::Missing, kernel::kind_of)
    }

    /// For messages.
    pub fn shown(&self) -> String {
        String::from_utf8_lossy(&self.absolute()).into_owned()
    }

    pub fn target(&self) -> ipc_schema::fs::ResolvedTarget {
        ipc_schema::fs::ResolvedTarget {
            grant: self.grant.id.clone(),
            root: self.grant.root.clone(),
            relative: self.relative(),
            absolute: self.absolute(),
            kind: self.kind(),
        }
    }

    /// The parent directory's components and the last name (`None` for the root itself).
    pub fn split_last(&self) -> Option<(&[Vec<u8>], &[u8])> {
        self.comps
            .split_last()
            .map(|(last, parent)| (parent, last.as_slice()))
    }
}

/// The components of a path relative to a grant root, as the request wrote them.
pub fn request_components(path: &[u8], grant: &Grant) -> Result<Vec<Vec<u8>>, FsError> {
    let shown = String::from_utf8_lossy(path);
    if path.len() > MAX_PATH {
        return Err(FsError::new(
            FsErrorKind::InvalidPath,
            format!("a path of {} bytes is longer than {MAX_PATH}", path.len()),
        ));
    }
    if path.contains(&0) {
        return Err(FsError::new(
            FsErrorKind::InvalidPath,
            format!("{shown}: a path cannot contain a NUL byte"),
        ));
    }
    if path.first() == Some(&b'/') {
        return Err(FsError::new(
            FsErrorKind::InvalidPath,
            format!(
                "{shown}: a path in grant {} is relative to its root {}",
                grant.id,
                String::from_utf8_lossy(&grant.root)
            ),
        ));
    }
    Ok(split(path))
}

fn split(path: &[u8]) -> Vec<Vec<u8>> {
    path.split(|&b| b == b'/')
        .filter(|c| !c.is_empty() && *c != b".")
        .map(<[u8]>::to_vec)
        .collect()
}

fn os_error(shown: &str, e: Errno) -> FsError {
    let (kind, what) = match e {
        Errno::NOENT => (FsErrorKind::NotFound, "no such file or directory"),
        Errno::NOTDIR => (FsErrorKind::NotADirectory, "a component is not a directory"),
        Errno::LOOP => (
            FsErrorKind::Raced,
            "a link appeared on the resolved path while the request ran; nothing was done",
        ),
        Errno::XDEV => (
            FsErrorKind::OutsideGrant,
            "the kernel refused to leave the grant root",
        ),
        Errno::ACCESS | Errno::PERM => (FsErrorKind::Io, "permission denied"),
        _ => (FsErrorKind::Io, "operating-system error"),
    };
    let mut err = FsError::new(kind, format!("{shown}: {what} ({e})"));
    err.errno = Some(e.raw_os_error());
    err
}

/// Maps an OS error on `shown` to a typed failure.
pub fn io_error(shown: &str, e: Errno) -> FsError {
    os_error(shown, e)
}

/// Resolves `request` (components from [`request_components`]) in `grant`.
pub fn resolve<'g>(
    mode: OpenMode,
    grant: &'g Grant,
    request: Vec<Vec<u8>>,
    follow_last: bool,
    missing: Missing,
) -> Result<Resolved<'g>, FsError> {
    let requested = String::from_utf8_lossy(&kernel::join(&request)).into_owned();
    let shown_req = String::from_utf8_lossy(&grant.absolute(requested.as_bytes())).into_owned();
    let mut queue: VecDeque<Vec<u8>> = request.into();
    let mut stack: Vec<Vec<u8>> = Vec::new();
    let mut links = 0u32;
    let root = grant.root_fd.as_fd();
    while let Some(c) = queue.pop_front() {
        if c == b".." {
            if stack.pop().is_none() {
                return Err(FsError::new(
                    FsErrorKind::OutsideGrant,
                    format!(
                        "{shown_req}: `..` climbs above the root of grant {}",
                        grant.id
                    ),
                ));
            }
            continue;
        }
        if !kernel::is_plain_name(&c) {
            return Err(FsError::new(
                FsErrorKind::InvalidPath,
                format!("{shown_req}: a name is longer than 255 bytes"),
            ));
        }
        stack.push(c);
        let last = queue.is_empty();
        let fd = match kernel::open_beneath(mode, root, &stack, kernel::LINK_ITSELF, Mode::empty())
        {
            Ok(fd) => fd,
            Err(Errno::NOENT) if missing == Missing::Last && last => {
                return Ok(Resolved {
                    grant,
                    comps: stack,
                    stat: None,
                    missing: 1,
                })
            }
            Err(Errno::NOENT) if missing == Missing::WithParents => {
                let rest: Vec<Vec<u8>> = queue.into();
                if rest.iter().any(|c| c == b"..") {
                    return Err(FsError::new(
                        FsErrorKind::InvalidPath,
                        format!("{shown_req}: `..` after a directory that does not exist"),
                    ));
                }
                let missing = rest.len() + 1;
                stack.extend(rest);
                return Ok(Resolved {
                    grant,
                    comps: stack,
                    stat: None,
                    missing,
                });
            }
            Err(e) => {
                let at =
                    String::from_utf8_lossy(&grant.absolute(&kernel::join(&stack))).into_owned();
                return Err(os_error(&at, e));
            }
        };
        let st = rustix::fs::fstat(&fd).map_err(|e| os_error(&shown_req, e))?;
        let kind = kernel::kind_of(&st);
        if kind == FileKind::Symlink && (!last || follow_last) {
            links += 1;
            if links > MAX_LINKS {
                return Err(FsError::new(
                    FsErrorKind::InvalidPath,
                    format!("{shown_req}: more than {MAX_LINKS} links"),
                ));
            }
            let target = kernel::read_link(mode, root, &stack, fd.as_fd())
                .map_err(|e| os_error(&shown_req, e))?;
            let link_at = grant.absolute(&kernel::join(&stack));
            stack.pop();
            let mut spliced = if target.first() == Some(&b'/') {
                stack.clear();
                let comps = split(&target);
                let root = crate::protect::components(&grant.root);
                if comps.len() < root.len() || comps[..root.len()] != root[..] {
                    return Err(FsError::new(
                        FsErrorKind::OutsideGrant,
                        format!(
                            "{shown_req}: the link {} points to {}, outside grant {}",
                            String::from_utf8_lossy(&link_at),
                            String::from_utf8_lossy(&target),
                            grant.id
                        ),
                    ));
                }
                comps[root.len()..].to_vec()
            } else {
                split(&target)
            };
            spliced.extend(queue.drain(..));
            queue = spliced.into();
            continue;
        }
        if !last && kind != FileKind::Dir {
            return Err(FsError::new(
                FsErrorKind::NotADirectory,
                format!(
                    "{shown_req}: {} is not a directory",
                    String::from_utf8_lossy(&grant.absolute(&kernel::join(&stack)))
                ),
            ));
        }
        if last {
            return Ok(Resolved {
                grant,
                comps: stack,
                stat: Some(st),
                missing: 0,
            });
        }
    }
    // The walk ended on a directory it had already entered: the root (an empty request), after
    // a `..`, or at a link to `.`.
    let fd = kernel::open_beneath(mode, root, &stack, kernel::PATH_ONLY, Mode::empty())
        .map_err(|e| os_error(&shown_req, e))?;
    let st = rustix::fs::fstat(&fd).map_err(|e| os_error(&shown_req, e))?;
    Ok(Resolved {
        grant,
        comps: stack,
        stat: Some(st),
        missing: 0,
    })
}
