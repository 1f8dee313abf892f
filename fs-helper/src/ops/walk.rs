//! `search_files` and `grep`: bounded recursive walks.
//!
//! Each directory is opened beneath the grant root with links refused, like every other open. A
//! link met on the way is followed only if its target resolves inside the directory being
//! searched (and then each directory is entered once, by inode, so link loops end). Hidden
//! directories, `.git` and build output are skipped unless asked for; depth, entries, time,
//! matches, bytes and the reply's size are all capped, and the reply says which cap stopped it.

use super::{Fs, Want};
use crate::grant::Grant;
use crate::kernel;
use crate::resolve::{self, Missing, Resolved};
use globset::GlobMatcher;
use ipc_schema::fs::{
    FileKind, FoundPath, FsError, FsErrorKind, FsPath, FsReply, GrepLimits, SearchResults,
    StopReason, WalkLimits,
};
use ipc_schema::fs_walk::{self, Admit, GrepTally, WalkCaps};
use regex::bytes::{Regex, RegexBuilder};
use rustix::fd::AsFd;
use rustix::fs::{AtFlags, Mode, OFlags, Stat};
use std::collections::HashSet;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::Instant;

/// One walk's caps and progress.
struct Walk<'a> {
    fs: &'a Fs,
    grant: &'a Grant,
    base: Vec<Vec<u8>>,
    caps: WalkCaps,
    entries: u64,
    visited: HashSet<(u64, u64)>,
    depth_limited: bool,
    stopped: Option<StopReason>,
}

/// What the walk hands each entry it keeps: where it was found, and what it really is.
struct Found<'r> {
    shown: &'r [Vec<u8>],
    real: &'r [Vec<u8>],
    stat: &'r Stat,
}

impl<'a> Walk<'a> {
    fn new(fs: &'a Fs, base: &Resolved<'a>, l: WalkLimits) -> Walk<'a> {
        Walk {
            fs,
            grant: base.grant,
            base: base.comps.clone(),
            caps: WalkCaps::of(l),
            entries: 0,
            visited: HashSet::new(),
            depth_limited: false,
            stopped: None,
        }
    }

    /// Walks from the base; `visit` returns a reason to stop, if any.
    fn run(&mut self, visit: &mut dyn FnMut(&mut Self, Found<'_>) -> Option<StopReason>) {
        let mut stack = vec![self.base.clone()];
        while let Some(dir) = stack.pop() {
            let Ok(fd) = kernel::open_beneath(
                self.fs.mode,
                self.grant.root_fd.as_fd(),
                &dir,
                OFlags::RDONLY | OFlags::DIRECTORY,
                Mode::empty(),
            ) else {
                continue;
            };
            if let Ok(st) = rustix::fs::fstat(&fd) {
                if !self.visited.insert(kernel::dev_ino(&st)) {
                    continue;
                }
            }
            let mut names = crate::checkpoint::names(fd.as_fd());
            names.sort();
            let mut subdirs = Vec::new();
            for name in names {
                self.entries += 1;
                if self.entries > self.caps.max_entries {
                    self.stopped = Some(StopReason::MaxEntries);
                } else if Instant::now() >= self.caps.deadline {
                    self.stopped = Some(StopReason::Deadline);
                }
                if self.stopped.is_some() {
                    return;
                }
                let Ok(st) = rustix::fs::statat(&fd, name.as_slice(), AtFlags::SYMLINK_NOFOLLOW)
                else {
                    continue;
                };
                let mut shown = dir.clone();
                shown.push(name);
                let (real, st) = if kernel::kind_of(&st) == FileKind::Symlink {
                    match self.follow(&shown) {
                        Some(x) => x,
                        None => continue,
                    }
                } else {
                    (shown.clone(), st)
                };
                if !self.admitted(&real, &st) {
                    continue;
                }
                if kernel::kind_of(&st) == FileKind::Dir && self.enters(&real) {
                    if real.len() - self.base.len() >= self.caps.max_depth {
                        self.depth_limited = true;
                    } else {
                        subdirs.push(real.clone());
                    }
                }
                let found = Found {
                    shown: &shown,
                    real: &real,
                    stat: &st,
                };
                if let Some(reason) = visit(self, found) {
                    self.stopped = Some(reason);
                    return;
                }
            }
            // Depth first, in name order.
            stack.extend(subdirs.into_iter().rev());
        }
    }

    /// A link's target, if it resolves inside the directory being searched.
    fn follow(&self, link: &[Vec<u8>]) -> Option<(Vec<Vec<u8>>, Stat)> {
        let r = resolve::resolve(
            self.fs.mode,
            self.grant,
            link.to_vec(),
            true,
            Missing::Refuse,
        )
        .ok()?;
        let inside =
            r.comps.len() >= self.base.len() && r.comps[..self.base.len()] == self.base[..];
        Some((r.comps, r.stat?)).filter(|_| inside)
    }

    /// Protected paths and what the grant leaves out are passed over silently.
    fn admitted(&self, real: &[Vec<u8>], st: &Stat) -> bool {
        let rel = kernel::join(real);
        let is_dir = kernel::kind_of(st) == FileKind::Dir;
        self.fs
            .protector
            .refuses(&self.grant.absolute(&rel), false)
            .is_none()
            && self.grant.check_scope(&rel, real.len(), is_dir).is_ok()
    }

    fn enters(&self, dir: &[Vec<u8>]) -> bool {
        self.caps
            .enters(dir.last().map(Vec::as_slice).unwrap_or_default())
    }

    /// The path relative to the walk's base.
    fn below_base<'p>(&self, comps: &'p [Vec<u8>]) -> &'p [Vec<u8>] {
        &comps[self.base.len().min(comps.len())..]
    }
}

fn bad(what: &str, e: impl std::fmt::Display) -> FsError {
    FsError::new(FsErrorKind::BadRequest, format!("bad {what}: {e}"))
}

fn base_dir<'f>(fs: &'f Fs, path: &FsPath) -> Result<Resolved<'f>, FsError> {
    let r = fs.target(path, Want::READ)?;
    super::need_dir(&r)?;
    Ok(r)
}

pub fn search_files(
    fs: &Fs,
    path: &FsPath,
    glob: &str,
    limits: WalkLimits,
) -> Result<FsReply, FsError> {
    let base = base_dir(fs, path)?;
    let on_path = glob.contains('/');
    let matcher = ipc_schema::grant_glob::glob(glob)
        .map_err(|e| bad("glob", e))?
        .compile_matcher();
    let mut matches = Vec::new();
    let mut bytes = 0usize;
    let mut walk = Walk::new(fs, &base, limits);
    walk.run(&mut |w, f| {
        let below = w.below_base(f.shown);
        let subject = if on_path {
            kernel::join(below)
        } else {
            below.last().cloned().unwrap_or_default()
        };
        if !matcher.is_match(Path::new(OsStr::from_bytes(&subject))) {
            return None;
        }
        if matches.len() >= 10_000 {
            return Some(StopReason::MaxMatches);
        }
        bytes += f.shown.iter().map(|c| c.len() + 1).sum::<usize>() + 8;
        if bytes > fs_walk::REPLY_BYTES {
            return Some(StopReason::ReplyFull);
        }
        matches.push(FoundPath {
            relative: kernel::join(f.shown),
            kind: kernel::kind_of(f.stat),
        });
        None
    });
    Ok(FsReply::Search(SearchResults {
        base: base.target(),
        matches,
        depth_limited: walk.depth_limited,
        stopped: walk.stopped,
    }))
}

/// Grep's pattern, and its caps and tallies (shared with the Windows helper).
struct Grepper {
    regex: Regex,
    glob: Option<GlobMatcher>,
    tally: GrepTally,
}

impl Grepper {
    fn file(
        &mut self,
        fs: &Fs,
        grant: &Grant,
        f: &Found<'_>,
        deadline: Instant,
    ) -> Option<StopReason> {
        if kernel::kind_of(f.stat) != FileKind::File {
            return None;
        }
        let name = f.shown.last().map(Vec::as_slice).unwrap_or_default();
        if let Some(g) = &self.glob {
            if !g.is_match(Path::new(OsStr::from_bytes(name))) {
                return None;
            }
        }
        let size = f.stat.st_size as u64;
        if f.stat.st_nlink > 1 {
            self.tally.out.files_skipped += 1;
            return None;
        }
        match self.tally.admit(size) {
            Admit::Read => {}
            Admit::Skip => return None,
            Admit::Stop(why) => return Some(why),
        }
        let Ok(fd) = kernel::open_beneath(
            fs.mode,
            grant.root_fd.as_fd(),
            f.real,
            OFlags::RDONLY | OFlags::NONBLOCK,
            Mode::empty(),
        ) else {
            self.tally.out.files_skipped += 1;
            return None;
        };
        // Decide on the opened descriptor: the same regular, singly linked file the walk saw.
        match rustix::fs::fstat(&fd) {
            Ok(st) if kernel::same_file(&st, f.stat) && st.st_nlink == 1 => {}
            _ => {
                self.tally.out.files_skipped += 1;
                return None;
            }
        }
        let Ok(data) = kernel::pread_up_to(fd.as_fd(), 0, size as usize) else {
            self.tally.out.files_skipped += 1;
            return None;
        };
        let regex = &self.regex;
        (self.tally).lines(
            &kernel::join(f.shown),
            &data,
            |l| regex.is_match(l),
            deadline,
        )
    }
}

pub fn grep(
    fs: &Fs,
    path: &FsPath,
    regex: &str,
    glob: Option<&str>,
    case_insensitive: bool,
    limits: WalkLimits,
    caps: GrepLimits,
) -> Result<FsReply, FsError> {
    let base = fs.target(path, Want::READ)?;
    let regex = RegexBuilder::new(regex)
        .case_insensitive(case_insensitive)
        .size_limit(1 << 20)
        .dfa_size_limit(1 << 20)
        .build()
        .map_err(|e| bad("regex", e))?;
    let glob = match glob {
        Some(g) => Some(
            ipc_schema::grant_glob::glob(g)
                .map_err(|e| bad("glob", e))?
                .compile_matcher(),
        ),
        None => None,
    };
    let mut g = Grepper {
        regex,
        glob,
        tally: GrepTally::new(caps, base.target()),
    };
    match base.kind() {
        FileKind::File => {
            let deadline = WalkCaps::of(limits).deadline;
            let st = base.stat.expect("a file has a stat");
            let found = Found {
                shown: &base.comps,
                real: &base.comps,
                stat: &st,
            };
            // One named file: the glob does not apply.
            g.glob = None;
            g.tally.out.stopped = g.file(fs, base.grant, &found, deadline);
        }
        FileKind::Dir => {
            let mut walk = Walk::new(fs, &base, limits);
            let deadline = walk.caps.deadline;
            let grant = walk.grant;
            walk.run(&mut |_, f| g.file(fs, grant, &f, deadline));
            g.tally.out.depth_limited = walk.depth_limited;
            g.tally.out.stopped = walk.stopped;
        }
        other => {
            return Err(FsError::new(
                FsErrorKind::SpecialFile,
                format!(
                    "{}: is a {}, not a file or directory",
                    base.shown(),
                    super::kind_name(other)
                ),
            ))
        }
    }
    Ok(FsReply::Grep(g.tally.out))
}
