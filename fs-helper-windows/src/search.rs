//! `search_files` and `grep` on Windows: bounded walks, with the Linux helper's caps and
//! reply shapes.
//!
//! Each directory is opened relative to its parent's handle by one plain name, as every other
//! open ([`beneath::open_beneath`]). A reparse point met on the way (link, junction) is passed
//! over, never entered or read. Hidden directories and build output are skipped unless asked
//! for; what the protected table refuses to read and what the grant leaves out are passed
//! over silently; a file with more than one name is not read (another name may lie outside the
//! grant). Depth, entries, time, matches, bytes and the reply's size are capped, and the reply
//! says which cap stopped it.

use crate::config::{Fs, Grant};
use crate::walk::{kind_of, Opened};
use globset::GlobMatcher;
use ipc_schema::fs::{
    FileKind, FoundPath, FsError, FsErrorKind, FsPath, FsReply, GrepLimits, GrepMatch, GrepResults,
    SearchResults, StopReason, WalkLimits,
};
use regex::bytes::{Regex, RegexBuilder};
use sandbox::windows::beneath::{self, Want};
use std::fs::File;
use std::os::windows::fs::{FileExt, MetadataExt};
use std::os::windows::io::AsHandle;
use std::path::Path;
use std::rc::Rc;
use std::time::{Duration, Instant};

/// Directory names skipped unless `include_skipped_dirs` (besides every hidden one): the Linux
/// helper's list.
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

fn bad(what: &str, e: impl std::fmt::Display) -> FsError {
    FsError::new(FsErrorKind::BadRequest, format!("bad {what}: {e}"))
}

/// One entry the walk keeps: its components below the grant root, what it is, its size, and
/// the directory handle it was listed in.
struct Found<'a> {
    comps: &'a [String],
    kind: FileKind,
    size: u64,
    dir: &'a File,
}

struct Walk<'a> {
    fs: &'a Fs,
    grant: &'a Grant,
    base: usize,
    max_depth: usize,
    max_entries: u64,
    deadline: Instant,
    include_skipped: bool,
    entries: u64,
    depth_limited: bool,
    stopped: Option<StopReason>,
}

impl<'a> Walk<'a> {
    fn new(fs: &'a Fs, base: &Opened<'a>, l: WalkLimits) -> Walk<'a> {
        Walk {
            fs,
            grant: base.grant,
            base: base.comps.len(),
            max_depth: clamp(l.max_depth as u64, 32, 64) as usize,
            max_entries: clamp(l.max_entries as u64, 100_000, 1_000_000),
            deadline: Instant::now()
                + Duration::from_millis(clamp(l.max_millis as u64, 5_000, 30_000)),
            include_skipped: l.include_skipped_dirs,
            entries: 0,
            depth_limited: false,
            stopped: None,
        }
    }

    /// Walks from `base` (an open directory), depth first in name order; `visit` returns a
    /// reason to stop, if any.
    fn run(&mut self, base: Opened<'_>, visit: &mut dyn FnMut(Found<'_>) -> Option<StopReason>) {
        // Each pending directory with the handle of the directory it was listed in.
        let root = Rc::new(base.file);
        let mut stack: Vec<(Vec<String>, Option<Rc<File>>)> = vec![(base.comps, None)];
        while let Some((comps, parent)) = stack.pop() {
            let dir = match (&parent, comps.last()) {
                (Some(p), Some(name)) => {
                    match beneath::open_beneath(p.as_handle(), name, Want::Dir) {
                        Ok(f) => Rc::new(f),
                        Err(_) => continue, // gone, or replaced by a file, since it was listed
                    }
                }
                _ => root.clone(),
            };
            let Ok(mut listed) = beneath::list_dir(&dir) else {
                continue;
            };
            listed.sort_by_cached_key(|l| String::from_utf16_lossy(&l.name));
            let mut subdirs = Vec::new();
            for l in listed {
                self.entries += 1;
                if self.entries > self.max_entries {
                    self.stopped = Some(StopReason::MaxEntries);
                } else if Instant::now() >= self.deadline {
                    self.stopped = Some(StopReason::Deadline);
                }
                if self.stopped.is_some() {
                    return;
                }
                let (Ok(name), kind) = (String::from_utf16(&l.name), kind_of(l.attributes)) else {
                    continue;
                };
                if kind == FileKind::Symlink || crate::names::plain_name(&name).is_err() {
                    continue;
                }
                let mut child = comps.clone();
                child.push(name);
                if !self.admitted(&child, kind) {
                    continue;
                }
                if kind == FileKind::Dir && self.enters(&child) {
                    if child.len() - self.base >= self.max_depth {
                        self.depth_limited = true;
                    } else {
                        subdirs.push((child.clone(), Some(dir.clone())));
                    }
                }
                let found = Found {
                    comps: &child,
                    kind,
                    size: l.size,
                    dir: &dir,
                };
                if let Some(reason) = visit(found) {
                    self.stopped = Some(reason);
                    return;
                }
            }
            stack.extend(subdirs.into_iter().rev());
        }
    }

    /// Protected places and what the grant leaves out are passed over silently.
    fn admitted(&self, comps: &[String], kind: FileKind) -> bool {
        let mut abs = self.grant.root.clone();
        abs.comps.extend(comps.iter().cloned());
        (self.fs.protector)
            .refuses(abs.verbatim().as_bytes(), false)
            .is_none()
            && (self.grant.scope)
                .check_scope(
                    comps.join("/").as_bytes(),
                    comps.len(),
                    kind == FileKind::Dir,
                )
                .is_ok()
    }

    fn enters(&self, dir: &[String]) -> bool {
        let name = dir.last().map(String::as_str).unwrap_or_default();
        self.include_skipped || !(name.starts_with('.') || SKIPPED_DIRS.contains(&name))
    }
}

impl Fs {
    pub fn search_files(
        &self,
        path: &FsPath,
        glob: &str,
        limits: WalkLimits,
    ) -> Result<FsReply, FsError> {
        let base = self.open(path, ipc_schema::fs::Access::Read)?;
        crate::serve::need(&base, FileKind::Dir)?;
        let on_path = glob.contains('/');
        let matcher = ipc_schema::grant_glob::glob(glob)
            .map_err(|e| bad("glob", e))?
            .compile_matcher();
        let target = base.target();
        let mut walk = Walk::new(self, &base, limits);
        let below = walk.base;
        let (mut matches, mut bytes) = (Vec::new(), 0usize);
        walk.run(base, &mut |f| {
            let under = &f.comps[below..];
            let subject = match on_path {
                true => under.join("/"),
                false => under.last().cloned().unwrap_or_default(),
            };
            if !matcher.is_match(Path::new(&subject)) {
                return None;
            }
            if matches.len() >= 10_000 {
                return Some(StopReason::MaxMatches);
            }
            let relative = f.comps.join(r"\");
            bytes += relative.len() + 8;
            if bytes > REPLY_BYTES {
                return Some(StopReason::ReplyFull);
            }
            matches.push(FoundPath {
                relative: relative.into_bytes(),
                kind: f.kind,
            });
            None
        });
        Ok(FsReply::Search(SearchResults {
            base: target,
            matches,
            depth_limited: walk.depth_limited,
            stopped: walk.stopped,
        }))
    }

    #[allow(clippy::too_many_arguments)]
    pub fn grep(
        &self,
        path: &FsPath,
        regex: &str,
        glob: Option<&str>,
        case_insensitive: bool,
        limits: WalkLimits,
        caps: GrepLimits,
    ) -> Result<FsReply, FsError> {
        let base = self.open(path, ipc_schema::fs::Access::Read)?;
        let regex = RegexBuilder::new(regex)
            .case_insensitive(case_insensitive)
            .size_limit(1 << 20)
            .dfa_size_limit(1 << 20)
            .build()
            .map_err(|e| bad("regex", e))?;
        let glob = match glob {
            Some(g) => Some(
                (ipc_schema::grant_glob::glob(g).map_err(|e| bad("glob", e))?).compile_matcher(),
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
        let deadline =
            Instant::now() + Duration::from_millis(clamp(limits.max_millis as u64, 5_000, 30_000));
        match base.kind() {
            FileKind::File => {
                // One named file: the glob does not apply.
                g.glob = None;
                let comps = base.comps.clone();
                g.out.stopped = g.search(&comps, base.file, deadline);
            }
            FileKind::Dir => {
                let mut walk = Walk::new(self, &base, limits);
                let deadline = walk.deadline;
                walk.run(base, &mut |f| g.file(&f, deadline));
                g.out.depth_limited = walk.depth_limited;
                g.out.stopped = walk.stopped;
            }
            _ => {
                return Err(FsError::new(
                    FsErrorKind::OutsideGrant,
                    format!("{}: a reparse point is not followed", base.shown()),
                ))
            }
        }
        Ok(FsReply::Grep(g.out))
    }
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
    fn file(&mut self, f: &Found<'_>, deadline: Instant) -> Option<StopReason> {
        let name = f.comps.last().map(String::as_str).unwrap_or_default();
        if f.kind != FileKind::File || self.glob.as_ref().is_some_and(|g| !g.is_match(name)) {
            return None;
        }
        if f.size > self.max_file_bytes {
            self.out.files_skipped += 1;
            return None;
        }
        // Decided on the opened handle: a file (not what replaced it), with one name.
        let opened = beneath::open_beneath(f.dir.as_handle(), name, Want::Any).ok();
        let Some(file) = opened.filter(|h| {
            h.metadata()
                .is_ok_and(|m| kind_of(m.file_attributes()) == FileKind::File)
                && beneath::link_count(h).is_ok_and(|n| n == 1)
        }) else {
            self.out.files_skipped += 1;
            return None;
        };
        self.search(f.comps, file, deadline)
    }

    fn search(&mut self, comps: &[String], file: File, deadline: Instant) -> Option<StopReason> {
        let size = file.metadata().map(|m| m.len()).unwrap_or(u64::MAX);
        if size > self.max_file_bytes || beneath::link_count(&file).ok() != Some(1) {
            self.out.files_skipped += 1;
            return None;
        }
        if size > self.bytes_left {
            return Some(StopReason::MaxBytes);
        }
        let mut data = vec![0u8; size as usize];
        let mut got = 0;
        while got < data.len() {
            match file.seek_read(&mut data[got..], got as u64) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(_) => {
                    self.out.files_skipped += 1;
                    return None;
                }
            }
        }
        data.truncate(got);
        self.bytes_left -= data.len() as u64;
        if data[..data.len().min(8192)].contains(&0) {
            self.out.files_skipped += 1;
            return None;
        }
        self.out.files_searched += 1;
        let relative = comps.join(r"\").into_bytes();
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
