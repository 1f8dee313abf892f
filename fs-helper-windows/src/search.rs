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
    FileKind, FoundPath, FsError, FsErrorKind, FsPath, FsReply, GrepLimits, SearchResults,
    StopReason, WalkLimits,
};
use ipc_schema::fs_walk::{self, Admit, GrepTally, WalkCaps};
use regex::bytes::{Regex, RegexBuilder};
use sandbox::windows::beneath::{self, Want};
use std::fs::File;
use std::os::windows::fs::MetadataExt;
use std::os::windows::io::AsHandle;
use std::path::Path;
use std::rc::Rc;
use std::time::Instant;

fn bad(what: &str, e: impl std::fmt::Display) -> FsError {
    FsError::new(FsErrorKind::BadRequest, format!("bad {what}: {e}"))
}

/// One entry the walk keeps: its components below the grant root, what it is, and the
/// directory handle it was listed in.
struct Found<'a> {
    comps: &'a [String],
    kind: FileKind,
    dir: &'a File,
}

struct Walk<'a> {
    fs: &'a Fs,
    grant: &'a Grant,
    base: usize,
    caps: WalkCaps,
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
            caps: WalkCaps::of(l),
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
                if self.entries > self.caps.max_entries {
                    self.stopped = Some(StopReason::MaxEntries);
                } else if Instant::now() >= self.caps.deadline {
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
                    if child.len() - self.base >= self.caps.max_depth {
                        self.depth_limited = true;
                    } else {
                        subdirs.push((child.clone(), Some(dir.clone())));
                    }
                }
                let found = Found {
                    comps: &child,
                    kind,
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
        self.caps.enters(name.as_bytes())
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
            if bytes > fs_walk::REPLY_BYTES {
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
            tally: GrepTally::new(caps, base.target()),
        };
        let deadline = WalkCaps::of(limits).deadline;
        match base.kind() {
            FileKind::File => {
                // One named file: the glob does not apply.
                g.glob = None;
                let comps = base.comps.clone();
                g.tally.out.stopped = g.search(&comps, base.file, deadline);
            }
            FileKind::Dir => {
                let mut walk = Walk::new(self, &base, limits);
                let deadline = walk.caps.deadline;
                walk.run(base, &mut |f| g.file(&f, deadline));
                g.tally.out.depth_limited = walk.depth_limited;
                g.tally.out.stopped = walk.stopped;
            }
            _ => {
                return Err(FsError::new(
                    FsErrorKind::OutsideGrant,
                    format!("{}: a reparse point is not followed", base.shown()),
                ))
            }
        }
        Ok(FsReply::Grep(g.tally.out))
    }
}

/// Grep's pattern, and its caps and tallies (shared with the Unix helper).
struct Grepper {
    regex: Regex,
    glob: Option<GlobMatcher>,
    tally: GrepTally,
}

impl Grepper {
    fn file(&mut self, f: &Found<'_>, deadline: Instant) -> Option<StopReason> {
        let name = f.comps.last().map(String::as_str).unwrap_or_default();
        if f.kind != FileKind::File || self.glob.as_ref().is_some_and(|g| !g.is_match(name)) {
            return None;
        }
        // Decided on the opened handle: a file (not what replaced it), with one name.
        let opened = beneath::open_beneath(f.dir.as_handle(), name, Want::Any).ok();
        let Some(file) = opened.filter(|h| {
            h.metadata()
                .is_ok_and(|m| kind_of(m.file_attributes()) == FileKind::File)
        }) else {
            self.tally.out.files_skipped += 1;
            return None;
        };
        self.search(f.comps, file, deadline)
    }

    /// One file's lines, if it has one name and fits the caps.
    fn search(&mut self, comps: &[String], file: File, deadline: Instant) -> Option<StopReason> {
        let size = file.metadata().map(|m| m.len()).unwrap_or(u64::MAX);
        if beneath::link_count(&file).ok() != Some(1) {
            self.tally.out.files_skipped += 1;
            return None;
        }
        match self.tally.admit(size) {
            Admit::Read => {}
            Admit::Skip => return None,
            Admit::Stop(why) => return Some(why),
        }
        let Ok(data) = crate::store::read_at(&file, 0, size as usize) else {
            self.tally.out.files_skipped += 1;
            return None;
        };
        let regex = &self.regex;
        let relative = comps.join(r"\");
        (self.tally).lines(relative.as_bytes(), &data, |l| regex.is_match(l), deadline)
    }
}
