//! Text from agents and tools, made inert for a terminal.
//!
//! Everything an agent controls (paths, arguments, diffs, audit details) reaches the screen only
//! through [`pieces`]: control characters, ANSI escape sequences (their ESC byte), bidirectional
//! overrides and other invisible format characters become visible escapes such as `\x1b` or
//! `\u{202E}`, so the terminal never interprets them and the person sees that they are there.
//! Escapes are marked ([`Piece::escape`]) so the console can style them apart from literal text
//! that merely looks like an escape.

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

/// The visible escape for `c`, or `None` if `c` may be shown as itself (given how many
/// zero-width characters directly precede it).
fn escape_for(c: char, zero_width_run: usize, after_visible: bool) -> Option<String> {
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
        Some(0) if !after_visible || zero_width_run >= MAX_COMBINING_RUN => {
            Some(format!("\\u{{{code:04X}}}"))
        }
        _ => None,
    }
}

/// `s` as inert pieces: plain runs and single-character escapes, in order. Concatenating the
/// pieces' texts gives what the screen shows.
pub fn pieces(s: &str) -> Vec<Piece> {
    let mut out: Vec<Piece> = Vec::new();
    let mut plain = String::new();
    let mut zero_run = 0usize;
    let mut after_visible = false;
    for c in s.chars() {
        match escape_for(c, zero_run, after_visible) {
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
                zero_run = 0;
                after_visible = false;
            }
            None => {
                if c.width() == Some(0) {
                    zero_run += 1;
                } else {
                    zero_run = 0;
                    after_visible = true;
                }
                plain.push(c);
            }
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

/// `s` with every unshowable character replaced by its visible escape (one line, no styling).
pub fn escaped(s: &str) -> String {
    pieces(s).into_iter().map(|p| p.text).collect()
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
}
