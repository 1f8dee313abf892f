//! What the file helpers' listings and walks do the same on every OS (the Unix helper and the
//! Windows one): the limits a request comes to, which directories a walk passes over, a page
//! of a listing, and grep's reading of one file's lines. The opening of each directory and file
//! is each OS's own.

use crate::fs::{
    GrepLimits, GrepMatch, GrepResults, ResolvedTarget, StopReason, WalkLimits, READ_CHUNK_MAX,
};
use std::time::{Duration, Instant};

/// Directory names a walk skips unless `include_skipped_dirs` (besides every hidden one).
const SKIPPED_DIRS: &[&str] = &[
    "target",
    "node_modules",
    "__pycache__",
    "dist",
    "build",
    "venv",
];
/// A walk stops before its reply could outgrow a frame.
pub const REPLY_BYTES: usize = 768 * 1024;
/// Grep lines are cut here.
const LINE_MAX: usize = 1024;
/// A page of a listing: entries by default, at most, and bytes before the reply could
/// outgrow a frame.
const LIST_DEFAULT: u32 = 1000;
const LIST_MAX: u32 = 5000;
const PAGE_BYTES: usize = 768 * 1024;
/// A directory with more entries than this is refused rather than sorted in memory.
pub const DIR_MAX: usize = 1_000_000;

/// `v`, or `default` for 0, at most `max`.
pub fn clamp(v: u64, default: u64, max: u64) -> u64 {
    if v == 0 {
        default
    } else {
        v.min(max)
    }
}

/// How many bytes a read of `length` (0: the most one call returns) from `offset` returns of
/// a file of `size` bytes.
pub fn read_span(offset: u64, length: u32, size: u64) -> usize {
    let want = match length {
        0 => READ_CHUNK_MAX,
        n => n.min(READ_CHUNK_MAX),
    } as u64;
    want.min(size.saturating_sub(offset)) as usize
}

/// A walk's caps, from the request's limits.
#[derive(Debug, Clone, Copy)]
pub struct WalkCaps {
    pub max_depth: usize,
    pub max_entries: u64,
    pub deadline: Instant,
    pub include_skipped: bool,
}

impl WalkCaps {
    pub fn of(l: WalkLimits) -> WalkCaps {
        WalkCaps {
            max_depth: clamp(l.max_depth as u64, 32, 64) as usize,
            max_entries: clamp(l.max_entries as u64, 100_000, 1_000_000),
            deadline: Instant::now()
                + Duration::from_millis(clamp(l.max_millis as u64, 5_000, 30_000)),
            include_skipped: l.include_skipped_dirs,
        }
    }

    /// Whether the walk enters the directory `name`: not hidden, not build output, unless asked.
    pub fn enters(&self, name: &[u8]) -> bool {
        self.include_skipped
            || !(name.starts_with(b".") || SKIPPED_DIRS.iter().any(|s| s.as_bytes() == name))
    }
}

/// One page of a listing, entry by entry in order.
#[derive(Debug)]
pub struct Page {
    offset: u32,
    limit: u32,
    taken: u32,
    bytes: usize,
    /// Entries offered so far.
    pub total: u32,
    /// Where the next page starts, once this one is full.
    pub next_offset: Option<u32>,
}

impl Page {
    /// The page from `offset` of at most `limit` entries (0: the default).
    pub fn new(offset: u32, limit: u32) -> Page {
        Page {
            offset,
            limit: match limit {
                0 => LIST_DEFAULT,
                n => n.min(LIST_MAX),
            },
            taken: 0,
            bytes: 0,
            total: 0,
            next_offset: None,
        }
    }

    /// Counts one entry of `name_len` bytes; whether it belongs on this page.
    pub fn offer(&mut self, name_len: usize) -> bool {
        self.total += 1;
        if self.total <= self.offset || self.next_offset.is_some() {
            return false;
        }
        if self.taken >= self.limit || self.bytes >= PAGE_BYTES {
            self.next_offset = Some(self.total - 1);
            return false;
        }
        self.taken += 1;
        self.bytes += name_len + 32;
        true
    }
}

/// What grep does with a file of a given size, before reading it.
#[derive(Debug, PartialEq, Eq)]
pub enum Admit {
    Read,
    /// Counted as skipped (too large for one file).
    Skip,
    /// The bytes left would not hold it.
    Stop(StopReason),
}

/// Grep's caps and tallies over a walk, and its reading of each file's lines.
#[derive(Debug)]
pub struct GrepTally {
    max_matches: usize,
    bytes_left: u64,
    max_file_bytes: u64,
    reply_bytes: usize,
    pub out: GrepResults,
}

impl GrepTally {
    /// Nothing found yet under `base`.
    pub fn new(caps: GrepLimits, base: ResolvedTarget) -> GrepTally {
        GrepTally {
            max_matches: clamp(caps.max_matches as u64, 500, 5_000) as usize,
            bytes_left: clamp(caps.max_bytes, 64 << 20, 1 << 30),
            max_file_bytes: clamp(caps.max_file_bytes, 8 << 20, 64 << 20),
            reply_bytes: 0,
            out: GrepResults {
                base,
                matches: Vec::new(),
                files_searched: 0,
                files_skipped: 0,
                secret_files_withheld: 0,
                depth_limited: false,
                stopped: None,
            },
        }
    }

    /// Whether a file of `size` bytes is read.
    pub fn admit(&mut self, size: u64) -> Admit {
        if size > self.max_file_bytes {
            self.out.files_skipped += 1;
            Admit::Skip
        } else if size > self.bytes_left {
            Admit::Stop(StopReason::MaxBytes)
        } else {
            Admit::Read
        }
    }

    /// The matching lines of one file's contents `data` (found at `relative`): a binary file
    /// (NUL in the first 8 KiB) is skipped and counted; each line `is_match` accepts becomes a
    /// match, cut at 1 KiB. Returns why to stop, if a cap was met.
    pub fn lines(
        &mut self,
        relative: &[u8],
        data: &[u8],
        is_match: impl Fn(&[u8]) -> bool,
        deadline: Instant,
    ) -> Option<StopReason> {
        self.bytes_left = self.bytes_left.saturating_sub(data.len() as u64);
        if data[..data.len().min(8192)].contains(&0) {
            self.out.files_skipped += 1;
            return None;
        }
        self.out.files_searched += 1;
        for (i, line) in data.split(|&b| b == b'\n').enumerate() {
            if i % 4096 == 0 && Instant::now() >= deadline {
                return Some(StopReason::Deadline);
            }
            if !is_match(line) {
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
                relative: relative.to_vec(),
                line_number: i as u64 + 1,
                line: line[..cut].to_vec(),
                line_truncated: cut < line.len(),
            });
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_takes_its_share_and_says_where_the_next_starts() {
        let mut p = Page::new(2, 3);
        let taken: Vec<bool> = (0..7).map(|_| p.offer(10)).collect();
        assert_eq!(taken, [false, false, true, true, true, false, false]);
        assert_eq!((p.total, p.next_offset), (7, Some(5)));
        let mut all = Page::new(0, 0);
        assert!((0..1000).all(|_| all.offer(1)));
        assert!(!all.offer(1));
    }

    #[test]
    fn reads_are_capped_by_the_chunk_and_the_file() {
        assert_eq!(read_span(0, 0, 10), 10);
        assert_eq!(read_span(4, 3, 10), 3);
        assert_eq!(read_span(20, 3, 10), 0);
        assert_eq!(read_span(0, 0, u64::MAX), READ_CHUNK_MAX as usize);
    }

    #[test]
    fn grep_counts_binary_files_and_stops_at_its_caps() {
        let base = ResolvedTarget {
            grant: crate::fs::GrantId("g".into()),
            root: vec![],
            relative: vec![],
            absolute: vec![],
            kind: crate::fs::FileKind::Dir,
        };
        let caps = GrepLimits {
            max_matches: 2,
            ..GrepLimits::default()
        };
        let mut g = GrepTally::new(caps, base);
        let later = Instant::now() + Duration::from_secs(60);
        let hit = |l: &[u8]| l.starts_with(b"x");
        assert_eq!(g.lines(b"bin", b"x\0x\n", hit, later), None);
        assert_eq!((g.out.files_skipped, g.out.matches.len()), (1, 0));
        assert_eq!(
            g.lines(b"a", b"x1\ny\nx3\nx4\n", hit, later),
            Some(StopReason::MaxMatches)
        );
        let lines: Vec<u64> = g.out.matches.iter().map(|m| m.line_number).collect();
        assert_eq!(lines, [1, 3]);
        assert_eq!(g.admit(9 << 20), Admit::Skip);
        assert_eq!(g.admit(1), Admit::Read);
    }
}
