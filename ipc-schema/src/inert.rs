//! Text from agents, tools and remote servers, made inert for a terminal.
//!
//! This is the one implementation every process of gatehouse uses before a person reads such
//! text: the console (`ui`, through its re-export), and every command of the `gatehouse` CLI
//! (`audit tail`, `approve`, `policy show`, `fetch`, `doctor`, its error messages).
//!
//! Control characters, ANSI escape sequences (their ESC byte), C1 controls, bidirectional
//! overrides and isolates, and other invisible format characters become visible escapes such as
//! `\x1b`, `\n` or `\u{202E}`, so the terminal never interprets them and the person sees that they
//! are there. Combining marks are limited to a short run after a visible character, so they
//! cannot be stacked over neighbouring lines.
//!
//! Three forms:
//!
//! - [`escaped`] / [`pieces`]: one record, one line. Every line break (`\n`, `\r`, U+0085,
//!   U+2028, U+2029, VT, FF) is escaped, so text cannot start a new line that passes for another
//!   record (an audit row, a card field).
//! - [`escaped_lines`]: text that is multi-line by nature (a fetched page, a policy document):
//!   `\n` (and `\r\n`) and `\t` stay as they are, everything else is escaped as above. A lone
//!   `\r`, which could return the cursor and overwrite what the line showed, is escaped.
//! - [`StreamEscaper`]: the same as [`escaped_lines`] for a byte stream that arrives in chunks
//!   (a command's output), keeping a partial UTF-8 character (or a `\r` that may begin `\r\n`)
//!   across chunks; bytes that are not UTF-8 become `\xNN`.

use unicode_width::UnicodeWidthChar;

/// A run of text that is either shown as it is or is the visible escape of one character.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Piece {
    pub text: String,
    /// `text` stands for a character that could not be shown as itself.
    pub escape: bool,
}

/// How many zero-width combining characters may follow one visible character before the rest
/// are escaped: enough for real scripts, too few to stack marks over neighbouring lines.
const MAX_COMBINING_RUN: usize = 3;

/// Characters that change how text around them is displayed, or are invisible: shown escaped
/// wherever they appear.
fn is_invisible_format(c: char) -> bool {
    matches!(c,
        // soft hyphen; Arabic number signs and letter mark; Syriac abbreviation mark
        '\u{00AD}' | '\u{0600}'..='\u{0605}' | '\u{061C}' | '\u{06DD}' | '\u{070F}' | '\u{08E2}'
        // Mongolian vowel separator; zero-width space, joiners, LRM and RLM
        | '\u{180E}' | '\u{200B}'..='\u{200F}'
        // line and paragraph separators; bidi embeddings and overrides (LRE RLE PDF LRO RLO)
        | '\u{2028}'..='\u{202E}'
        // word joiner, invisible operators, bidi isolates (LRI RLI FSI PDI), deprecated formats
        | '\u{2060}'..='\u{206F}'
        // byte order mark / zero-width no-break space; interlinear annotation
        | '\u{FEFF}' | '\u{FFF9}'..='\u{FFFB}'
        // Kaithi, Egyptian, shorthand and musical format controls
        | '\u{110BD}' | '\u{110CD}' | '\u{13430}'..='\u{1343F}' | '\u{1BCA0}'..='\u{1BCA3}'
        | '\u{1D173}'..='\u{1D17A}'
        // tag characters: invisible, and used to smuggle ASCII past people
        | '\u{E0000}'..='\u{E007F}'
        // variation selectors beyond the first block (the first block is common in emoji)
        | '\u{E0100}'..='\u{E01EF}'
    )
}

/// Whether `\n` and `\t` are kept as themselves (multi-line text) or escaped (one line).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Breaks {
    Escape,
    Keep,
}

/// What the characters just shown mean for the next one: combining marks may only follow a
/// visible character, and only a few of them.
#[derive(Debug, Clone, Copy, Default)]
struct Context {
    zero_width_run: usize,
    after_visible: bool,
}

impl Context {
    /// The visible escape for `c`, or `None` if `c` may be shown as itself; updates the context
    /// for the character after `c`.
    fn escape(&mut self, c: char, breaks: Breaks) -> Option<String> {
        let esc = self.escape_for(c, breaks);
        if esc.is_some() || matches!(c, '\n' | '\t') {
            *self = Context::default();
        } else if c.width() == Some(0) {
            self.zero_width_run += 1;
        } else {
            self.zero_width_run = 0;
            self.after_visible = true;
        }
        esc
    }

    fn escape_for(&self, c: char, breaks: Breaks) -> Option<String> {
        if breaks == Breaks::Keep && matches!(c, '\n' | '\t') {
            return None;
        }
        let named = match c {
            '\n' => Some("\\n"),
            '\r' => Some("\\r"),
            '\t' => Some("\\t"),
            '\x1b' => Some("\\x1b"),
            _ => None,
        };
        if let Some(n) = named {
            return Some(n.to_string());
        }
        let code = c as u32;
        if code < 0x20 || code == 0x7f {
            return Some(format!("\\x{code:02x}"));
        }
        if (0x80..0xa0).contains(&code) || is_invisible_format(c) {
            return Some(format!("\\u{{{code:04X}}}"));
        }
        match c.width() {
            // Other control characters (none are left after the above, but be safe).
            None => Some(format!("\\u{{{code:04X}}}")),
            Some(0) if !self.after_visible || self.zero_width_run >= MAX_COMBINING_RUN => {
                Some(format!("\\u{{{code:04X}}}"))
            }
            _ => None,
        }
    }
}

/// `s` as inert pieces for one line: plain runs and single-character escapes, in order.
/// Concatenating the pieces' texts gives what the screen shows; it holds no line break.
pub fn pieces(s: &str) -> Vec<Piece> {
    let mut out: Vec<Piece> = Vec::new();
    let mut plain = String::new();
    let mut ctx = Context::default();
    for c in s.chars() {
        match ctx.escape(c, Breaks::Escape) {
            Some(esc) => {
                if !plain.is_empty() {
                    out.push(Piece {
                        text: std::mem::take(&mut plain),
                        escape: false,
                    });
                }
                out.push(Piece {
                    text: esc,
                    escape: true,
                });
            }
            None => plain.push(c),
        }
    }
    if !plain.is_empty() {
        out.push(Piece {
            text: plain,
            escape: false,
        });
    }
    out
}

/// `s` on one line, with every unshowable character (line breaks included) replaced by its
/// visible escape. For any field of a record a person reads: a path, an argument, a reason.
pub fn escaped(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut ctx = Context::default();
    for c in s.chars() {
        match ctx.escape(c, Breaks::Escape) {
            Some(esc) => out.push_str(&esc),
            None => out.push(c),
        }
    }
    out
}

/// `s`, multi-line by nature (a fetched page, a policy document), with its line breaks (`\n`,
/// `\r\n`) and tabs kept and every other unshowable character escaped as by [`escaped`]. A lone
/// `\r` is escaped: it would move the cursor back over what the line already showed.
pub fn escaped_lines(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut ctx = Context::default();
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\r' && chars.peek() == Some(&'\n') {
            out.push('\r');
            continue;
        }
        match ctx.escape(c, Breaks::Keep) {
            Some(esc) => out.push_str(&esc),
            None => out.push(c),
        }
    }
    out
}

/// [`escaped_lines`] for a byte stream read in chunks, such as a command's output on its way to
/// a terminal. A UTF-8 character split across chunks is kept until its end arrives, and so is a
/// final `\r` (it may be the start of `\r\n`); bytes that are not UTF-8 are shown as `\xNN`, so a
/// raw C1 byte (0x9b is CSI to some terminals) is never passed on.
///
/// ```
/// use ipc_schema::inert::StreamEscaper;
/// let mut esc = StreamEscaper::new();
/// let mut out = Vec::new();
/// esc.push(b"ok\n\x1b[2J\xe2\x80", &mut out);
/// esc.push(b"\xaeend", &mut out);
/// esc.finish(&mut out);
/// assert_eq!(out, b"ok\n\\x1b[2J\\u{202E}end");
/// ```
#[derive(Debug, Default)]
pub struct StreamEscaper {
    /// The start of a UTF-8 character whose other bytes have not arrived (at most 3 bytes).
    partial: Vec<u8>,
    /// The last chunk ended with `\r`, not yet shown: `\r\n` passes, a lone `\r` is escaped.
    held_cr: bool,
    ctx: Context,
}

impl StreamEscaper {
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends the inert form of `chunk` to `out`. What may still change meaning with the next
    /// chunk (a partial character, a final `\r`) is held back until [`push`](Self::push) or
    /// [`finish`](Self::finish) is called again.
    pub fn push(&mut self, chunk: &[u8], out: &mut Vec<u8>) {
        if self.partial.is_empty() {
            self.decode(chunk, out);
        } else {
            // The held start of a character, completed (or not) by this chunk.
            let mut bytes = std::mem::take(&mut self.partial);
            bytes.extend_from_slice(chunk);
            self.decode(&bytes, out);
        }
    }

    /// Appends what was held back: an unfinished character as `\xNN` escapes, a final `\r` as
    /// `\r`. The escaper can be used again afterwards, as if new.
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        for b in std::mem::take(&mut self.partial) {
            self.flush_cr(out);
            self.escape_byte(b, out);
        }
        self.flush_cr(out);
        self.ctx = Context::default();
    }

    fn decode(&mut self, mut bytes: &[u8], out: &mut Vec<u8>) {
        while !bytes.is_empty() {
            match std::str::from_utf8(bytes) {
                Ok(s) => {
                    self.text(s, out);
                    return;
                }
                Err(e) => {
                    let (valid, rest) = bytes.split_at(e.valid_up_to());
                    self.text(std::str::from_utf8(valid).unwrap_or_default(), out);
                    match e.error_len() {
                        None => {
                            self.partial = rest.to_vec();
                            return;
                        }
                        Some(n) => {
                            for &b in &rest[..n] {
                                self.flush_cr(out);
                                self.escape_byte(b, out);
                            }
                            bytes = &rest[n..];
                        }
                    }
                }
            }
        }
    }

    fn text(&mut self, s: &str, out: &mut Vec<u8>) {
        for c in s.chars() {
            self.char(c, out);
        }
    }

    fn char(&mut self, c: char, out: &mut Vec<u8>) {
        if self.held_cr {
            self.held_cr = false;
            if c == '\n' {
                out.extend_from_slice(b"\r\n");
                self.ctx = Context::default();
                return;
            }
            out.extend_from_slice(b"\\r");
            self.ctx = Context::default();
        }
        if c == '\r' {
            self.held_cr = true;
            return;
        }
        match self.ctx.escape(c, Breaks::Keep) {
            Some(esc) => out.extend_from_slice(esc.as_bytes()),
            None => {
                let mut buf = [0u8; 4];
                out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            }
        }
    }

    fn flush_cr(&mut self, out: &mut Vec<u8>) {
        if std::mem::take(&mut self.held_cr) {
            out.extend_from_slice(b"\\r");
        }
    }

    fn escape_byte(&mut self, b: u8, out: &mut Vec<u8>) {
        out.extend_from_slice(format!("\\x{b:02x}").as_bytes());
        self.ctx = Context::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_and_ansi_become_visible_escapes() {
        assert_eq!(
            escaped("a\x1b[31mred\x1b[0m\r\n\tb\x07\x7f"),
            "a\\x1b[31mred\\x1b[0m\\r\\n\\tb\\x07\\x7f"
        );
        assert_eq!(escaped("\u{85}\u{9b}"), "\\u{0085}\\u{009B}");
    }

    #[test]
    fn bidi_overrides_and_invisibles_are_escaped() {
        assert_eq!(escaped("evil\u{202E}txt.exe"), "evil\\u{202E}txt.exe");
        assert_eq!(
            escaped("\u{2066}a\u{2069}\u{200B}\u{FEFF}\u{E0041}"),
            "\\u{2066}a\\u{2069}\\u{200B}\\u{FEFF}\\u{E0041}"
        );
    }

    #[test]
    fn ordinary_text_is_kept_including_wide_and_combining() {
        let s = "naïve café 日本語 e\u{301} ünïcödé";
        assert_eq!(escaped(s), s);
        assert_eq!(escaped_lines(s), s);
        assert!(pieces(s).iter().all(|p| !p.escape));
    }

    #[test]
    fn stacked_combining_marks_are_cut_off_visibly() {
        let zalgo = format!("a{}", "\u{301}".repeat(6));
        assert_eq!(
            escaped(&zalgo),
            format!("a{}{}", "\u{301}".repeat(3), "\\u{0301}".repeat(3))
        );
        // A combining mark with nothing to sit on is escaped.
        assert_eq!(escaped("\u{301}x"), "\\u{0301}x");
        // Nor may it sit on a line break in multi-line text.
        assert_eq!(escaped_lines("a\n\u{301}"), "a\n\\u{0301}");
    }

    #[test]
    fn pieces_mark_escapes_apart_from_lookalike_text() {
        let p = pieces("\\x1b\x1b");
        assert_eq!(
            p,
            vec![
                Piece {
                    text: "\\x1b".into(),
                    escape: false
                },
                Piece {
                    text: "\\x1b".into(),
                    escape: true
                }
            ]
        );
    }

    #[test]
    fn pieces_and_escaped_agree() {
        for s in [
            "a\x1b]52;c;aGk=\x07b",
            "x\u{202E}y\n   42 12:00:00Z decision",
            "e\u{301}\u{301}\u{301}\u{301}\u{301}",
            "",
        ] {
            let joined: String = pieces(s).into_iter().map(|p| p.text).collect();
            assert_eq!(joined, escaped(s), "{s:?}");
        }
    }

    /// Every character that could end a line, or move the cursor to another, is escaped in a
    /// one-line field: a record stays one line whatever it holds.
    #[test]
    fn a_one_line_field_holds_no_line_break_of_any_kind() {
        let s = "a\nb\rc\u{0b}d\u{0c}e\u{85}f\u{2028}g\u{2029}h\x1bEi\x1b[1Bj";
        let e = escaped(s);
        assert_eq!(
            e,
            "a\\nb\\rc\\x0bd\\x0ce\\u{0085}f\\u{2028}g\\u{2029}h\\x1bEi\\x1b[1Bj"
        );
        assert!(e.chars().all(|c| !c.is_control()));
        assert_eq!(e.lines().count(), 1);
    }

    #[test]
    fn multi_line_text_keeps_newlines_and_tabs_and_escapes_the_rest() {
        let s = "line 1\tok\r\nline 2 \x1b[2J\x1b]52;c;aGk=\x07\nover\rwrite\u{202E}\u{9b}1m";
        assert_eq!(
            escaped_lines(s),
            "line 1\tok\r\nline 2 \\x1b[2J\\x1b]52;c;aGk=\\x07\nover\\rwrite\\u{202E}\\u{009B}1m"
        );
        // A trailing lone \r is escaped too.
        assert_eq!(escaped_lines("a\r"), "a\\r");
    }

    fn stream(chunks: &[&[u8]]) -> Vec<u8> {
        let mut e = StreamEscaper::new();
        let mut out = Vec::new();
        for c in chunks {
            e.push(c, &mut out);
        }
        e.finish(&mut out);
        out
    }

    #[test]
    fn the_stream_escaper_matches_escaped_lines_however_the_bytes_are_cut() {
        let s =
            "ok\tcafé 日本語 e\u{301}\r\nESC\x1b[2J OSC\x1b]52;c;aGk=\x07 \u{202E}bidi\u{2066}\n\
                 lone\rcr \u{85}\u{9b} tag\u{E0041} 🎉 end\r";
        let want = escaped_lines(s);
        let bytes = s.as_bytes();
        assert_eq!(String::from_utf8(stream(&[bytes])).unwrap(), want);
        // Every single split point, and one byte at a time.
        for cut in 0..=bytes.len() {
            let got = stream(&[&bytes[..cut], &bytes[cut..]]);
            assert_eq!(String::from_utf8(got).unwrap(), want, "cut at {cut}");
        }
        let singles: Vec<&[u8]> = bytes.chunks(1).collect();
        assert_eq!(String::from_utf8(stream(&singles)).unwrap(), want);
        // Two cuts inside a four-byte character.
        let emoji = "a🎉b".as_bytes();
        assert_eq!(
            stream(&[&emoji[..2], &emoji[2..3], &emoji[3..]]),
            "a🎉b".as_bytes()
        );
    }

    #[test]
    fn the_stream_escaper_shows_bytes_that_are_not_utf8() {
        // A raw C1 CSI byte, a lone continuation byte, an overlong form, a cut-off character.
        assert_eq!(stream(&[b"a\x9b2Jb"]), b"a\\x9b2Jb");
        assert_eq!(stream(&[b"\x80x"]), b"\\x80x");
        assert_eq!(stream(&[b"\xc0\xafx"]), b"\\xc0\\xafx");
        assert_eq!(stream(&[b"x\xe2\x80"]), b"x\\xe2\\x80");
        // A character start followed, in the next chunk, by something that does not continue it.
        assert_eq!(stream(&[b"x\xe2", b"\x80y"]), b"x\\xe2\\x80y");
        assert_eq!(stream(&[b"x\xe2", b"yz"]), b"x\\xe2yz");
        assert_eq!(stream(&[b"x\xf0\x9f", b"\x8e"]), b"x\\xf0\\x9f\\x8e");
        assert_eq!(
            stream(&[b"x\xf0\x9f", b"\x8e", b"\x89!"]),
            "x🎉!".as_bytes()
        );
        // A \r held at a chunk's end, then not followed by \n.
        assert_eq!(stream(&[b"a\r", b"b"]), b"a\\rb");
        assert_eq!(stream(&[b"a\r", b"\nb"]), b"a\r\nb");
        assert_eq!(stream(&[b"a\r", b"\xff"]), b"a\\r\\xff");
    }

    #[test]
    fn the_stream_escaper_keeps_no_more_than_one_character() {
        let mut e = StreamEscaper::new();
        let mut out = Vec::new();
        e.push(b"abc\xe2\x80", &mut out);
        assert_eq!(out, b"abc");
        assert!(e.partial.len() <= 3);
        e.finish(&mut out);
        assert_eq!(out, b"abc\\xe2\\x80");
        // Reusable after finish.
        out.clear();
        e.push(b"\xe2\x80\xaeq", &mut out);
        e.finish(&mut out);
        assert_eq!(out, b"\\u{202E}q");
    }
}
