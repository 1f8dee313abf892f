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
    FileKind, FoundPath, FsError, FsErrorKind, FsPath, FsReply, GrepLimits, GrepMatch, GrepResults,
    SearchResults, StopReason, WalkLimits,
};
use regex::bytes::{Regex, RegexBuilder};
use rustix::fd::AsFd;
use rustix::fs::{AtFlags, Mode, OFlags, Stat};
use std::collections::HashSet;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::{Duration, Instant};

/// Directory names skipped unless `include_skipped_dirs` (besides every hidden one).
const SKIPPED_DIRS: &[&str] = &[
    "target",
    "node_modules",
    "__pycache__",
    "dist",
    "build",
    "venv",
];
/// Stop before a reply could outgrow a frame.
const REPLY_BYTES: usize = 768 * 1024;
/// Grep lines are cut here.
const LINE_MAX: usize = 1024;

fn clamp(v: u64, default: u64, max: u64) -> u64 {
    if v == 0 {
        default
    } else {
        v.min(max)
    }
}

/// One walk's caps and progress.
struct Walk<'a> {
    fs: &'a Fs,
    grant: &'a Grant,
    base: Vec<Vec<u8>>,
    max_depth: usize,
    max_entries: u64,
    deadline: Instant,
    include_skipped: bool,
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
            max_depth: clamp(l.max_depth as u64, 32, 64) as usize,
            max_entries: clamp(l.max_entries as u64, 100_000, 1_000_000),
            deadline: Instant::now()
                + Duration::from_millis(clamp(l.max_millis as u64, 5_000, 30_000)),
            include_skipped: l.include_skipped_dirs,
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
                if !self.visited.insert((st.st_dev, st.st_ino)) {
                    continue;
                }
            }
            let mut names = crate::checkpoint::names(fd.as_fd());
            names.sort();
            let mut subdirs = Vec::new();
            for name in names {
                self.entries += 1;
                if self.entries > self.max_entries {
                    self.stopped = Some(StopReason::MaxEntries);
                } else if Instant::now() >= self.deadline {
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
                    if real.len() - self.base.len() >= self.max_depth {
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
        let name = dir.last().map(Vec::as_slice).unwrap_or_default();
        self.include_skipped
            || !(name.starts_with(b".") || SKIPPED_DIRS.iter().any(|s| s.as_bytes() == name))
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
        if bytes > REPLY_BYTES {
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

/// Grep's own caps and tallies.
struct Grepper {
    regex: Regex,
    glob: Option<GlobMatcher>,
    max_matches: usize,
    bytes_left: u64,
    max_file_bytes: u64,
    reply_bytes: usize,
    out: GrepResults,
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
        if f.stat.st_nlink > 1 || size > self.max_file_bytes {
            self.out.files_skipped += 1;
            return None;
        }
        if size > self.bytes_left {
            return Some(StopReason::MaxBytes);
        }
        let Ok(fd) = kernel::open_beneath(
            fs.mode,
            grant.root_fd.as_fd(),
            f.real,
            OFlags::RDONLY | OFlags::NONBLOCK,
            Mode::empty(),
        ) else {
            self.out.files_skipped += 1;
            return None;
        };
        // Decide on the opened descriptor: the same regular, singly linked file the walk saw.
        match rustix::fs::fstat(&fd) {
            Ok(st) if kernel::same_file(&st, f.stat) && st.st_nlink == 1 => {}
            _ => {
                self.out.files_skipped += 1;
                return None;
            }
        }
        let Ok(data) = kernel::pread_up_to(fd.as_fd(), 0, size as usize) else {
            self.out.files_skipped += 1;
            return None;
        };
        self.bytes_left -= data.len() as u64;
        if data[..data.len().min(8192)].contains(&0) {
            self.out.files_skipped += 1;
            return None;
        }
        self.out.files_searched += 1;
        let relative = kernel::join(f.shown);
        for (i, line) in data.split(|&b| b == b'\n').enumerate() {
            if i % 4096 == 0 && Instant::now() >= deadline {
                return Some(StopReason::Deadline);
            }
            if !self.regex.is_match(line) {
                continue;
            }
            if self.out.matches.len() >= self.max_matches {
                return Some(StopReason::MaxMatches);
            }
            let cut = line.len().min(LINE_MAX);
            self.reply_bytes += relative.len() + cut + 24;
            if self.reply_bytes > REPLY_BYTES {
                return Some(StopReason::ReplyFull);
            }
            self.out.matches.push(GrepMatch {
                relative: relative.clone(),
                line_number: i as u64 + 1,
                line: line[..cut].to_vec(),
                line_truncated: cut < line.len(),
            });
        }
        None
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
        max_matches: clamp(caps.max_matches as u64, 500, 5_000) as usize,
        bytes_left: clamp(caps.max_bytes, 64 << 20, 1 << 30),
        max_file_bytes: clamp(caps.max_file_bytes, 8 << 20, 64 << 20),
        reply_bytes: 0,
        out: GrepResults {
            base: base.target(),
            matches: Vec::new(),
            files_searched: 0,
            files_skipped: 0,
            secret_files_withheld: 0,
            depth_limited: false,
            stopped: None,
        },
    };
    let deadline_for = |l: &WalkLimits| {
        Instant::now() + Duration::from_millis(clamp(l.max_millis as u64, 5_000, 30_000))
    };
    match base.kind() {
        FileKind::File => {
            let deadline = deadline_for(&limits);
            let st = base.stat.expect("a file has a stat");
            let found = Found {
                shown: &base.comps,
                real: &base.comps,
                stat: &st,
            };
            // One named file: the glob does not apply.
            g.glob = None;
            g.out.stopped = g.file(fs, base.grant, &found, deadline);
        }
        FileKind::Dir => {
            let mut walk = Walk::new(fs, &base, limits);
            let deadline = walk.deadline;
            let grant = walk.grant;
            walk.run(&mut |_, f| g.file(fs, grant, &f, deadline));
            g.out.depth_limited = walk.depth_limited;
            g.out.stopped = walk.stopped;
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
    Ok(FsReply::Grep(g.out))
}
