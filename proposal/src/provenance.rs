//! Provenance: which parts of a proposed call came from outside text the session read.
//!
//! Every page and http reply a session receives is remembered as fingerprints, with where it
//! came from. Fingerprints follow MOSS's winnowing: the text is normalised, every `K`-character
//! gram is hashed, and of each window of `W` consecutive gram hashes the minimum is kept. Beside
//! them, the exact hashes of its tokens and lines of [`EXACT_MIN`] characters or more are kept,
//! for values too short for the guarantee (a URL, a flag, a one-line command).
//!
//! Normalisation (both sides alike): the HTML entities `&amp; &lt; &gt; &quot; &apos; &nbsp;`
//! and numeric ones are decoded, and every run of whitespace becomes one space. Case is kept.
//!
//! The guarantee: when a proposal's argument shares a run of at least [`GUARANTEE`] (32)
//! normalised characters with remembered outside text, the match is found. Why: that run holds
//! `W` whole grams of the outside text, one of which winnowing kept, and every gram of an
//! argument is looked up. Shared runs from `K` (20) characters up may be found; shorter ones are
//! not, unless a whole value or line of 8 characters or more equals a whole token or line of the
//! outside text. Paraphrase, re-encoding (base64, escapes other than those entities, changed
//! case) and text the session read by other means (files, command output) are not caught.
//!
//! Memory is bounded per session: at most [`MAX_ENTRIES`] hashes (12 bytes each) and
//! [`MAX_SOURCES`] sources; the oldest sources are forgotten first, and a proposal says how many
//! were.

use ipc_schema::fs::{Edit, FsPath};
use ipc_schema::tool::{ToolCall, ToolId, ToolName, ToolResult};
use ipc_schema::ui::{LineRange, MatchedPart, OutsideMatch, OutsideSource, OutsideText as Found};
use std::collections::{BTreeMap, BTreeSet, HashSet, VecDeque};

/// Gram length, in normalised characters.
pub const K: usize = 20;
/// Winnowing window, in grams.
pub const W: usize = 13;
/// Shared runs at least this long (normalised characters) are always found.
pub const GUARANTEE: usize = K + W - 1;
// SECURITY.md and the cards state 32: keep them true.
const _: () = assert!(GUARANTEE == 32);
/// Values, tokens and lines at least this long (normalised characters) are matched whole.
pub const EXACT_MIN: usize = 8;
/// Hashes kept per session (fingerprints and exact values together): 3 MiB.
pub const MAX_ENTRIES: usize = 1 << 18;
/// Sources kept per session.
pub const MAX_SOURCES: usize = 256;
/// A source URL or argument name longer than this is cut on the card (and says so): with
/// [`MATCHES_MAX`], this keeps the findings a small part of the proposal's frame.
const NAME_MAX: usize = 512;
/// Matches listed on one proposal; more are counted.
const MATCHES_MAX: usize = 64;
/// Line ranges listed per match; more are merged across the smallest gaps (which may claim a
/// few lines too many, never too few).
const RANGES_MAX: usize = 64;
/// Lines longer than this are not indexed whole (their grams cover them).
const LINE_MAX: usize = 4096;

/// The Mersenne prime 2^61 - 1: the modulus of the rolling hash.
const P: u64 = (1 << 61) - 1;

fn mulmod(a: u64, b: u64) -> u64 {
    let x = (a as u128) * (b as u128);
    let s = ((x as u64) & P) + (x >> 61) as u64;
    let s = (s & P) + (s >> 61);
    if s >= P {
        s - P
    } else {
        s
    }
}

/// splitmix64's finaliser: spreads a polynomial hash so that window minima are uniform.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Polynomial hashing modulo 2^61 - 1 with a random base and key per session, so that a page's
/// author cannot choose text whose grams all get kept (to fill the cap faster) or collide.
struct Hasher {
    base: u64,
    /// `base^(K-1)`: what the outgoing character weighs in the rolling hash.
    top: u64,
    key: u64,
}

impl Hasher {
    fn new() -> Hasher {
        let base = rand::random::<u64>() % (P - 1024) + 512;
        let mut top = 1;
        for _ in 0..K - 1 {
            top = mulmod(top, base);
        }
        Hasher {
            base,
            top,
            key: rand::random(),
        }
    }

    /// The hash of every `K`-gram of `chars`, in order.
    fn grams(&self, chars: &[u32]) -> Vec<u64> {
        if chars.len() < K {
            return Vec::new();
        }
        let mut out = Vec::with_capacity(chars.len() - K + 1);
        let mut h = 0;
        for &c in &chars[..K] {
            h = (mulmod(h, self.base) + c as u64) % P;
        }
        out.push(mix(h ^ self.key));
        for i in K..chars.len() {
            let gone = mulmod(chars[i - K] as u64, self.top);
            h = (h + P - gone) % P;
            h = (mulmod(h, self.base) + chars[i] as u64) % P;
            out.push(mix(h ^ self.key));
        }
        out
    }

    /// The hash of a whole value (a different domain from grams).
    fn exact(&self, chars: &[u32]) -> u64 {
        let mut h = 0;
        for &c in chars {
            h = (mulmod(h, self.base) + c as u64) % P;
        }
        mix(h ^ self.key.rotate_left(32) ^ (chars.len() as u64).wrapping_mul(0x9e37_79b9))
    }
}

/// Robust winnowing: the minimum of each window of `W` hashes (the rightmost on ties); a text
/// with fewer than `W` grams keeps its minimum.
fn winnow(hashes: &[u64]) -> Vec<u64> {
    let mut out = Vec::new();
    if hashes.is_empty() {
        return out;
    }
    let w = W.min(hashes.len());
    let mut window: VecDeque<usize> = VecDeque::new();
    let mut last = usize::MAX;
    for i in 0..hashes.len() {
        while window.back().is_some_and(|&b| hashes[b] >= hashes[i]) {
            window.pop_back();
        }
        window.push_back(i);
        if i + 1 >= w {
            let start = i + 1 - w;
            while window.front().is_some_and(|&f| f < start) {
                window.pop_front();
            }
            let m = window[0];
            if m != last {
                out.push(hashes[m]);
                last = m;
            }
        }
    }
    out
}

/// Normalised text: its characters, and for each the byte range of the original it stands for.
struct Normal {
    chars: Vec<u32>,
    spans: Vec<(usize, usize)>,
}

fn entity(s: &str) -> Option<(char, usize)> {
    let end = s.as_bytes().iter().take(12).position(|&b| b == b';')?;
    let name = &s[1..end];
    let c = match name {
        "amp" => '&',
        "lt" => '<',
        "gt" => '>',
        "quot" => '"',
        "apos" => '\'',
        "nbsp" => ' ',
        _ => {
            let n = name.strip_prefix('#')?;
            let v = match n.strip_prefix(['x', 'X']) {
                Some(hex) => u32::from_str_radix(hex, 16).ok()?,
                None => n.parse().ok()?,
            };
            char::from_u32(v)?
        }
    };
    Some((c, end + 1))
}

/// `spans`: whether to keep each character's byte range (only arguments need them, to name
/// lines; outside text is only hashed).
fn normalise(s: &str, spans: bool) -> Normal {
    let mut n = Normal {
        chars: Vec::with_capacity(s.len()),
        spans: Vec::with_capacity(if spans { s.len() } else { 0 }),
    };
    let mut i = 0;
    // A decoded `&#32;` is a space too; a literal space after a decoded one still collapses.
    let mut last_was_space = false;
    while i < s.len() {
        let c = s[i..].chars().next().expect("i is on a char boundary");
        let (c, len) = match c {
            '&' => entity(&s[i..]).unwrap_or(('&', 1)),
            c => (c, c.len_utf8()),
        };
        if c.is_whitespace() && n.chars.last() == Some(&(' ' as u32)) && last_was_space {
            if let Some(l) = n.spans.last_mut() {
                l.1 = i + len;
            }
        } else {
            n.chars.push(if c.is_whitespace() {
                ' ' as u32
            } else {
                c as u32
            });
            if spans {
                n.spans.push((i, i + len));
            }
        }
        last_was_space = c.is_whitespace();
        i += len;
    }
    n
}

/// `chars` without leading and trailing spaces.
fn trimmed(chars: &[u32]) -> &[u32] {
    let sp = ' ' as u32;
    let a = chars.iter().position(|&c| c != sp).unwrap_or(chars.len());
    let b = chars.iter().rposition(|&c| c != sp).map_or(a, |b| b + 1);
    &chars[a..b]
}

/// The token variants of outside text worth matching whole: whitespace- and quote-delimited
/// tokens, those without surrounding punctuation, and what follows a `=` or `(` (`href=URL`,
/// `[text](URL)`).
fn tokens(chars: &[u32], mut put: impl FnMut(&[u32])) {
    let delim = |c: u32| {
        char::from_u32(c)
            .is_some_and(|c| c.is_whitespace() || matches!(c, '"' | '\'' | '<' | '>' | '`'))
    };
    for tok in chars.split(|&c| delim(c)) {
        if tok.len() < EXACT_MIN {
            continue;
        }
        put(tok);
        let lead = |c: &u32| matches!(char::from_u32(*c), Some('(' | '[' | '{'));
        let trail = |c: &u32| {
            matches!(
                char::from_u32(*c),
                Some('.' | ',' | ';' | ':' | '!' | '?' | ')' | ']' | '}')
            )
        };
        let a = tok.iter().position(|c| !lead(c)).unwrap_or(tok.len());
        let b = tok.iter().rposition(|c| !trail(c)).map_or(a, |b| b + 1);
        let bare = &tok[a..b.max(a)];
        if bare.len() >= EXACT_MIN && bare.len() != tok.len() {
            put(bare);
        }
        // `href=URL`, `--output=PATH`, `[text](URL)`.
        if let Some(at) = bare
            .iter()
            .position(|&c| c == '=' as u32 || c == '(' as u32)
        {
            if bare.len() - at > EXACT_MIN {
                put(&bare[at + 1..]);
            }
        }
    }
}

/// Sorted hashes with the serial of the source each came from (a hash may appear once per
/// source). Two flat arrays: 12 bytes an entry.
#[derive(Default)]
struct Table {
    hashes: Vec<u64>,
    owners: Vec<u32>,
}

impl Table {
    fn len(&self) -> usize {
        self.hashes.len()
    }

    /// Merges `new` (sorted, without duplicates) in, owned by `owner`.
    fn insert(&mut self, owner: u32, new: &[u64]) {
        let n = self.hashes.len() + new.len();
        let (mut hashes, mut owners) = (Vec::with_capacity(n), Vec::with_capacity(n));
        let (mut i, mut j) = (0, 0);
        while i < self.hashes.len() || j < new.len() {
            if j == new.len() || (i < self.hashes.len() && self.hashes[i] <= new[j]) {
                hashes.push(self.hashes[i]);
                owners.push(self.owners[i]);
                i += 1;
            } else {
                hashes.push(new[j]);
                owners.push(owner);
                j += 1;
            }
        }
        self.hashes = hashes;
        self.owners = owners;
    }

    fn remove(&mut self, gone: &HashSet<u32>) {
        let mut k = 0;
        for i in 0..self.hashes.len() {
            if !gone.contains(&self.owners[i]) {
                self.hashes[k] = self.hashes[i];
                self.owners[k] = self.owners[i];
                k += 1;
            }
        }
        self.hashes.truncate(k);
        self.owners.truncate(k);
    }

    fn owners_of(&self, h: u64) -> &[u32] {
        let a = self.hashes.partition_point(|&x| x < h);
        let b = a + self.hashes[a..].partition_point(|&x| x == h);
        &self.owners[a..b]
    }

    fn heap_bytes(&self) -> usize {
        self.hashes.capacity() * 8 + self.owners.capacity() * 4
    }
}

struct Held {
    serial: u32,
    source: OutsideSource,
    entries: usize,
}

/// A session's memory of the outside text it read.
pub struct OutsideText {
    hasher: Hasher,
    grams: Table,
    exact: Table,
    sources: VecDeque<Held>,
    next: u32,
    forgotten: u64,
}

impl Default for OutsideText {
    fn default() -> Self {
        OutsideText::new()
    }
}

/// The hashes one text contributes.
struct Prints {
    grams: Vec<u64>,
    exact: Vec<u64>,
}

impl OutsideText {
    pub fn new() -> OutsideText {
        OutsideText {
            hasher: Hasher::new(),
            grams: Table::default(),
            exact: Table::default(),
            sources: VecDeque::new(),
            next: 0,
            forgotten: 0,
        }
    }

    fn prints(&self, text: &str) -> Prints {
        let n = normalise(text, false);
        let mut grams = winnow(&self.hasher.grams(&n.chars));
        grams.sort_unstable();
        grams.dedup();
        let mut exact = Vec::new();
        tokens(&n.chars, |t| exact.push(self.hasher.exact(t)));
        for line in text.split('\n') {
            if line.len() > LINE_MAX * 4 {
                continue;
            }
            let l = normalise(line, false);
            let t = trimmed(&l.chars);
            if (EXACT_MIN..=LINE_MAX).contains(&t.len()) {
                exact.push(self.hasher.exact(t));
            }
        }
        exact.sort_unstable();
        exact.dedup();
        Prints { grams, exact }
    }

    /// Remembers `text` as read from `source`, forgetting the oldest sources as the caps need.
    pub fn remember(&mut self, mut source: OutsideSource, text: &str) {
        cut_name(&mut source.url);
        let mut text = text;
        let mut prints = self.prints(text);
        // A text over the whole cap keeps its first part (said on the card).
        while prints.grams.len() + prints.exact.len() > MAX_ENTRIES {
            let mut cut = text.len() / 2;
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            text = &text[..cut];
            source.partial = true;
            prints = self.prints(text);
        }
        let entries = prints.grams.len() + prints.exact.len();
        let mut gone = HashSet::new();
        let mut held = self.grams.len() + self.exact.len();
        while held + entries > MAX_ENTRIES || self.sources.len() >= MAX_SOURCES {
            let Some(old) = self.sources.pop_front() else {
                break;
            };
            held -= old.entries;
            gone.insert(old.serial);
            self.forgotten += 1;
        }
        if !gone.is_empty() {
            self.grams.remove(&gone);
            self.exact.remove(&gone);
        }
        let serial = self.next;
        self.next = self.next.wrapping_add(1);
        self.grams.insert(serial, &prints.grams);
        self.exact.insert(serial, &prints.exact);
        self.sources.push_back(Held {
            serial,
            source,
            entries,
        });
    }

    /// Remembers what a `fetch_url` or `http_request` gave the session: the page's text (inside
    /// the wrapper), the URLs it went through, and (http) the reply's headers.
    pub fn remember_result(&mut self, tool: ToolName, call: u64, now_ms: u64, r: &ToolResult) {
        let (page, headers) = match r {
            ToolResult::Fetched(p) => (p, &[][..]),
            ToolResult::HttpResponse(h) => (&h.page, &h.headers[..]),
            _ => return,
        };
        let mut text = String::from(wrapped_body(&page.text));
        for u in page.redirects.iter().chain([&page.final_url]) {
            text.push('\n');
            text.push_str(u);
        }
        for (k, v) in headers {
            text.push_str(&format!("\n{k}: {v}\n{v}"));
        }
        let source = OutsideSource {
            tool: tool.into(),
            url: page.final_url.clone(),
            call,
            read_unix_ms: now_ms,
            partial: false,
        };
        self.remember(source, &text);
    }

    /// A third-party server's result (`ToolResult::Server`) the session is about to receive.
    pub fn remember_server(&mut self, tool: ToolId, call: u64, now_ms: u64, wrapped: &str) {
        let source = OutsideSource {
            url: format!("mcp:{tool}"),
            tool,
            call,
            read_unix_ms: now_ms,
            partial: false,
        };
        self.remember(source, wrapped_body(wrapped));
    }

    /// How many sources were forgotten to bound memory.
    pub fn forgotten(&self) -> u64 {
        self.forgotten
    }

    /// Heap held by the fingerprints and sources (from the buffers' capacities).
    pub fn heap_bytes(&self) -> usize {
        self.grams.heap_bytes()
            + self.exact.heap_bytes()
            + self.sources.capacity() * std::mem::size_of::<Held>()
            + self
                .sources
                .iter()
                .map(|h| h.source.url.capacity())
                .sum::<usize>()
    }

    /// Which of `call`'s argument strings appear in remembered outside text; `diff` is the
    /// proposal's diff, whose lines showing matched text are named too.
    pub fn check(&self, call: &ToolCall, diff: Option<&str>) -> Found {
        let mut found = Found {
            sources_forgotten: self.forgotten,
            ..Found::default()
        };
        if self.sources.is_empty() {
            return found;
        }
        let mut all: Vec<(String, MatchedPart, Vec<LineRange>, u32)> = Vec::new();
        for arg in arguments(call) {
            for (serial, part) in self.check_value(&arg) {
                let diff_lines = match (&part, diff) {
                    (MatchedPart::Lines(r), Some(d)) => diff_lines(call, &arg, r, d),
                    _ => Vec::new(),
                };
                let mut name = arg.name.clone();
                cut_name(&mut name);
                all.push((name, part, diff_lines, serial));
            }
        }
        let listed = all.len().min(MATCHES_MAX);
        found.matches_not_listed = (all.len() - listed) as u32;
        let mut index: BTreeMap<u32, u32> = BTreeMap::new();
        for (_, _, _, serial) in &all[..listed] {
            index.insert(*serial, 0);
        }
        for (i, (serial, slot)) in index.iter_mut().enumerate() {
            *slot = i as u32;
            if let Some(h) = self.sources.iter().find(|h| h.serial == *serial) {
                found.sources.push(h.source.clone());
            }
        }
        found.matches = all
            .into_iter()
            .take(listed)
            .map(|(argument, part, diff_lines, serial)| OutsideMatch {
                argument,
                part,
                diff_lines,
                source: index[&serial],
            })
            .collect();
        found
    }

    /// The sources (by serial) whose text `arg` holds, and which part.
    fn check_value(&self, arg: &Argument) -> Vec<(u32, MatchedPart)> {
        let n = normalise(&arg.value, true);
        let mut whole: BTreeSet<u32> = BTreeSet::new();
        let mut lines: BTreeMap<u32, BTreeSet<u32>> = BTreeMap::new();
        let line_starts: Vec<usize> = std::iter::once(0)
            .chain(arg.value.match_indices('\n').map(|(i, _)| i + 1))
            .collect();
        let line_of = |byte: usize| line_starts.partition_point(|&s| s <= byte) as u32;

        // Runs shared with outside text, found through the grams.
        let mut hits: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
        for (i, h) in self.hasher.grams(&n.chars).into_iter().enumerate() {
            for &o in self.grams.owners_of(h) {
                hits.entry(o).or_default().push(i);
            }
        }
        for (serial, at) in hits {
            let set = lines.entry(serial).or_default();
            // Inside a copied run a kept gram starts at least every `W` characters.
            let mut region = (at[0], at[0] + K);
            for &p in &at[1..] {
                if p <= region.1 - K + W {
                    region.1 = p + K;
                } else {
                    mark(&n, region, &line_of, set);
                    region = (p, p + K);
                }
            }
            mark(&n, region, &line_of, set);
        }

        // Whole values and whole lines.
        match arg.shape {
            Shape::Value => {
                let t = trimmed(&n.chars);
                if t.len() >= EXACT_MIN {
                    whole.extend(self.exact.owners_of(self.hasher.exact(t)));
                }
                // `--url=VALUE` whose VALUE is a token of the page: part of the value.
                if let Some(eq) = t.iter().position(|&c| c == '=' as u32) {
                    let v = &t[eq + 1..];
                    if v.len() >= EXACT_MIN {
                        for &o in self.exact.owners_of(self.hasher.exact(v)) {
                            lines.entry(o).or_default();
                        }
                    }
                }
            }
            Shape::Text => {
                for (i, line) in arg.value.split('\n').enumerate() {
                    let l = normalise(line, false);
                    let t = trimmed(&l.chars);
                    if (EXACT_MIN..=LINE_MAX).contains(&t.len()) {
                        for &o in self.exact.owners_of(self.hasher.exact(t)) {
                            lines.entry(o).or_default().insert(i as u32 + 1);
                        }
                    }
                }
            }
        }

        let mut out = Vec::new();
        let serials: BTreeSet<u32> = whole.iter().chain(lines.keys()).copied().collect();
        for s in serials {
            let part = match arg.shape {
                Shape::Value if whole.contains(&s) => MatchedPart::WholeValue,
                Shape::Value => MatchedPart::PartOfValue,
                Shape::Text => MatchedPart::Lines(ranges(&lines[&s])),
            };
            out.push((s, part));
        }
        out
    }
}

/// Cuts `s` to [`NAME_MAX`] bytes, saying how much was cut.
fn cut_name(s: &mut String) {
    if s.len() > NAME_MAX {
        let mut cut = NAME_MAX;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        let more = s.len() - cut;
        s.truncate(cut);
        s.push_str(&format!("…[{more} more bytes not shown]"));
    }
}

/// Adds the lines a normalised region `[a, b)` covers (spaces at its ends aside).
fn mark(
    n: &Normal,
    (mut a, mut b): (usize, usize),
    line_of: &impl Fn(usize) -> u32,
    set: &mut BTreeSet<u32>,
) {
    let sp = ' ' as u32;
    while a < b && n.chars[a] == sp {
        a += 1;
    }
    while b > a && n.chars[b - 1] == sp {
        b -= 1;
    }
    if a < b {
        set.extend(line_of(n.spans[a].0)..=line_of(n.spans[b - 1].1 - 1));
    }
}

/// Line numbers as ranges, at most [`RANGES_MAX`] (merged across the smallest gaps).
fn ranges(lines: &BTreeSet<u32>) -> Vec<LineRange> {
    let mut out: Vec<LineRange> = Vec::new();
    for &l in lines {
        match out.last_mut() {
            Some(r) if r.last + 1 == l => r.last = l,
            _ => out.push(LineRange { first: l, last: l }),
        }
    }
    while out.len() > RANGES_MAX {
        let i = (1..out.len())
            .min_by_key(|&i| out[i].first - out[i - 1].last)
            .expect("more than one range");
        out[i - 1].last = out[i].last;
        out.remove(i);
    }
    out
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Shape {
    /// One value: matched whole, or in part.
    Value,
    /// Lines of text: matched lines are named.
    Text,
}

struct Argument {
    name: String,
    value: String,
    shape: Shape,
}

fn path_text(p: &FsPath) -> String {
    match p {
        FsPath::InGrant { path, .. } | FsPath::Absolute(path) => {
            String::from_utf8_lossy(path).into_owned()
        }
    }
}

/// Each string inside `v` with its JSON pointer (`/to`, `/items/0/text`).
fn json_strings(v: &serde_json::Value, at: String, f: &mut dyn FnMut(String, &str)) {
    match v {
        serde_json::Value::String(s) => f(if at.is_empty() { "/".into() } else { at }, s),
        serde_json::Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                json_strings(x, format!("{at}/{i}"), f);
            }
        }
        serde_json::Value::Object(o) => {
            for (k, x) in o {
                json_strings(
                    x,
                    format!("{at}/{}", k.replace('~', "~0").replace('/', "~1")),
                    f,
                );
            }
        }
        _ => {}
    }
}

/// The argument strings of a call, named as the card names them.
fn arguments(call: &ToolCall) -> Vec<Argument> {
    let arg = |name: &str, value: String, shape| Argument {
        name: name.to_string(),
        value,
        shape,
    };
    let path = |name: &str, p: &FsPath| arg(name, path_text(p), Shape::Value);
    let text =
        |name: &str, t: &[u8]| arg(name, String::from_utf8_lossy(t).into_owned(), Shape::Text);
    match call {
        // Every string in a third-party call's arguments, by its JSON pointer.
        ToolCall::Server(c) => {
            let mut v = Vec::new();
            json_strings(&c.arguments.value(), String::new(), &mut |name, s| {
                let shape = if s.contains('\n') {
                    Shape::Text
                } else {
                    Shape::Value
                };
                v.push(arg(&name, s.to_string(), shape));
            });
            v
        }
        ToolCall::OpenSession { .. }
        | ToolCall::DescribeAgent(_)
        | ToolCall::Withdraw(_)
        | ToolCall::ListServerTools
        | ToolCall::UndoChange(_) => {
            vec![]
        }
        ToolCall::ReadFile(a) => vec![path("path", &a.path)],
        ToolCall::ListDir(a) => vec![path("path", &a.path)],
        ToolCall::SearchFiles(a) => vec![
            path("path", &a.path),
            arg("glob", a.glob.clone(), Shape::Value),
        ],
        ToolCall::Grep(a) => {
            let mut v = vec![
                path("path", &a.path),
                arg("regex", a.regex.clone(), Shape::Value),
            ];
            v.extend(a.glob.clone().map(|g| arg("glob", g, Shape::Value)));
            v
        }
        ToolCall::WriteFile(a) => vec![path("path", &a.path), text("content", &a.content)],
        ToolCall::EditFile(a) => {
            let mut v = vec![path("path", &a.path)];
            match &a.edit {
                Edit::Replace { old, new, .. } => {
                    v.push(text("old", old.as_bytes()));
                    v.push(text("new", new.as_bytes()));
                }
                Edit::UnifiedDiff(d) => v.push(text("diff", d.as_bytes())),
            }
            v
        }
        ToolCall::DeletePath(a) => vec![path("path", &a.path)],
        ToolCall::MovePath(a) => vec![path("from", &a.from), path("to", &a.to)],
        ToolCall::FetchUrl(a) => vec![arg("url", a.url.clone(), Shape::Value)],
        ToolCall::HttpRequest(a) => {
            let mut v = vec![arg("url", a.url.clone(), Shape::Value)];
            for (k, val) in &a.headers {
                v.push(arg(&format!("header {k}"), val.clone(), Shape::Value));
            }
            v.push(text("body", &a.body));
            v
        }
        ToolCall::RunCommand(a) => {
            let mut v: Vec<Argument> = a
                .argv
                .iter()
                .enumerate()
                .map(|(i, x)| {
                    let shape = if x.contains('\n') {
                        Shape::Text
                    } else {
                        Shape::Value
                    };
                    arg(&format!("argv[{i}]"), x.clone(), shape)
                })
                .collect();
            v.push(path("cwd", &a.cwd));
            v
        }
    }
}

/// The body of a net-helper's wrapped text (between `<external-NONCE source="...">` and
/// `</external-NONCE>`): the notice and the wrapper are gatehouse's, not the page's. Text that
/// is not wrapped that way is taken whole.
pub fn wrapped_body(text: &str) -> &str {
    let Some(open) = text.find("\n<external-") else {
        return text;
    };
    let tag = &text[open + 2..];
    let Some(nonce_end) = tag.find([' ', '>']) else {
        return text;
    };
    let close = format!("\n</{}>", &tag[..nonce_end]);
    let Some(body_start) = tag.find('\n').map(|i| open + 2 + i + 1) else {
        return text;
    };
    match text.rfind(&close) {
        Some(end) if end >= body_start => &text[body_start..end],
        _ => text,
    }
}

/// Lines of the proposal's diff that show the matched `lines` of `arg`.
fn diff_lines(call: &ToolCall, arg: &Argument, lines: &[LineRange], diff: &str) -> Vec<LineRange> {
    let diff = diff.strip_suffix('\n').unwrap_or(diff);
    let matched = |l: u32| lines.iter().any(|r| (r.first..=r.last).contains(&l));
    let mut marked = BTreeSet::new();
    if matches!(call, ToolCall::WriteFile(_)) {
        // The content is the new file: follow the hunks' new-side line numbers.
        let mut new_line: Option<u32> = None;
        for (i, l) in diff.split('\n').enumerate() {
            if l.starts_with("@@") {
                new_line = l
                    .split(' ')
                    .find_map(|w| w.strip_prefix('+'))
                    .and_then(|w| w.split(',').next())
                    .and_then(|n| n.parse().ok());
                continue;
            }
            let Some(n) = new_line.as_mut() else { continue };
            if l.starts_with('+') && !l.starts_with("+++") {
                if matched(*n) {
                    marked.insert(i as u32 + 1);
                }
                *n += 1;
            } else if l.starts_with(' ') {
                *n += 1;
            }
        }
    } else {
        // An edit's text lands somewhere in the file: match diff lines by their text.
        let (prefix, from_diff) = match arg.name.as_str() {
            "new" => ('+', false),
            "old" => ('-', false),
            "diff" => (' ', true),
            _ => return Vec::new(),
        };
        let mut wanted: HashSet<(char, &str)> = HashSet::new();
        for (i, l) in arg.value.split('\n').enumerate() {
            let l = l.strip_suffix('\r').unwrap_or(l);
            if !matched(i as u32 + 1) || l.trim().is_empty() {
                continue;
            }
            if from_diff {
                let mut c = l.chars();
                if let Some(p @ ('+' | '-' | ' ')) = c.next() {
                    wanted.insert((p, c.as_str()));
                }
            } else {
                wanted.insert((prefix, l));
            }
        }
        for (i, l) in diff.split('\n').enumerate() {
            if l.starts_with("+++") || l.starts_with("---") {
                continue;
            }
            let mut c = l.chars();
            if let Some(p) = c.next() {
                if wanted.contains(&(p, c.as_str())) {
                    marked.insert(i as u32 + 1);
                }
            }
        }
    }
    ranges(&marked)
}

/// One line for the audit log: which arguments, lines and sources (no content; queries cut
/// from URLs).
pub fn audit_note(found: &Found) -> String {
    if found.matches.is_empty() && found.matches_not_listed == 0 {
        return String::new();
    }
    let mut parts = Vec::new();
    for m in &found.matches {
        let src = &found.sources[m.source as usize];
        parts.push(format!(
            "{} {} from {} {} (call {})",
            m.argument,
            part_text(&m.part),
            src.tool.name(),
            crate::args::redact_url(&src.url),
            src.call
        ));
    }
    if found.matches_not_listed > 0 {
        parts.push(format!("{} more not listed", found.matches_not_listed));
    }
    format!("; outside text: {}", parts.join(", "))
}

/// `whole value`, `part of the value`, `lines 3-5, 9`.
pub fn part_text(p: &MatchedPart) -> String {
    match p {
        MatchedPart::WholeValue => "whole value".into(),
        MatchedPart::PartOfValue => "part of the value".into(),
        MatchedPart::Lines(r) => {
            let list: Vec<String> = r
                .iter()
                .map(|r| {
                    if r.first == r.last {
                        r.first.to_string()
                    } else {
                        format!("{}-{}", r.first, r.last)
                    }
                })
                .collect();
            let word = if r.len() == 1 && r[0].first == r[0].last {
                "line"
            } else {
                "lines"
            };
            format!("{word} {}", list.join(", "))
        }
    }
}

#[cfg(test)]
mod tests;
