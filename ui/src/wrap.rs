//! Hard wrapping of inert text into lines that fit the pane, so that nothing is cut off: every
//! character of the input appears on some line, and a continuation line starts with a visible
//! marker so a wrapped line cannot pass for two lines.

use crate::inert::pieces;
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use unicode_width::{UnicodeWidthChar, UnicodeWidthStr};

/// The mark at the start of a continuation line.
pub const CONTINUATION: &str = "↪";

/// Text to wrap: a run with one style; an `atomic` run (an escape) is not broken across lines
/// unless it is wider than a whole line.
#[derive(Debug, Clone)]
pub struct Run {
    pub text: String,
    pub style: Style,
    pub atomic: bool,
}

/// Agent-controlled text as runs: plain parts in `style`, escapes in `escape_style`.
pub fn inert_runs(s: &str, style: Style, escape_style: Style) -> Vec<Run> {
    pieces(s)
        .into_iter()
        .map(|p| Run {
            style: if p.escape { escape_style } else { style },
            atomic: p.escape,
            text: p.text,
        })
        .collect()
}

/// Wraps `runs` to `width` columns. The first line starts with `first`, every further line
/// with `cont` (which should hold [`CONTINUATION`]). Zero-width characters stay with the
/// character before them.
pub fn wrap(
    runs: &[Run],
    width: usize,
    first: Vec<Span<'static>>,
    cont: Vec<Span<'static>>,
) -> Vec<Line<'static>> {
    let first_w: usize = first.iter().map(|s| s.content.width()).sum();
    let cont_w: usize = cont.iter().map(|s| s.content.width()).sum();
    // Always leave room for at least two columns of text (a wide character).
    let width = width.max(first_w + 2).max(cont_w + 2);

    let mut lines = Vec::new();
    let mut spans = first;
    let mut used = first_w;
    let mut has_text = false;
    let mut buf = String::new();
    let mut buf_style = Style::default();

    let flush = |spans: &mut Vec<Span<'static>>, buf: &mut String, style: Style| {
        if !buf.is_empty() {
            spans.push(Span::styled(std::mem::take(buf), style));
        }
    };

    for run in runs {
        if buf_style != run.style {
            flush(&mut spans, &mut buf, buf_style);
            buf_style = run.style;
        }
        let run_w = run.text.width();
        let units: Vec<String> = if run.atomic && cont_w + run_w <= width {
            vec![run.text.clone()]
        } else {
            // Each character with the zero-width characters that follow it.
            let mut out: Vec<String> = Vec::new();
            for c in run.text.chars() {
                match out.last_mut() {
                    Some(last) if c.width() == Some(0) => last.push(c),
                    _ => out.push(c.to_string()),
                }
            }
            out
        };
        for unit in units {
            let w = unit.width();
            if has_text && used + w > width {
                flush(&mut spans, &mut buf, buf_style);
                lines.push(Line::from(std::mem::replace(&mut spans, cont.clone())));
                used = cont_w;
            }
            buf.push_str(&unit);
            used += w;
            has_text = true;
        }
    }
    flush(&mut spans, &mut buf, buf_style);
    lines.push(Line::from(spans));
    lines
}

/// The text of a line, for tests and measurements.
pub fn line_text(line: &Line<'_>) -> String {
    line.spans.iter().map(|s| s.content.as_ref()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plain(s: &str) -> Vec<Run> {
        inert_runs(s, Style::default(), Style::default())
    }

    fn texts(lines: &[Line<'_>]) -> Vec<String> {
        lines.iter().map(line_text).collect()
    }

    #[test]
    fn long_text_wraps_completely_with_markers() {
        let lines = wrap(
            &plain("abcdefghij"),
            6,
            vec![Span::raw("> ")],
            vec![Span::raw("↪ ")],
        );
        assert_eq!(texts(&lines), ["> abcd", "↪ efgh", "↪ ij"]);
    }

    #[test]
    fn escapes_are_not_split_when_they_fit() {
        let lines = wrap(&plain("abc\x1bdef"), 6, vec![], vec![Span::raw("↪ ")]);
        assert_eq!(texts(&lines), ["abc", "↪ \\x1b", "↪ def"]);
    }

    #[test]
    fn wide_characters_never_straddle_the_edge() {
        let lines = wrap(&plain("日本語です"), 5, vec![], vec![Span::raw("↪")]);
        assert_eq!(texts(&lines), ["日本", "↪語で", "↪す"]);
        for l in &lines {
            assert!(line_text(l).width() <= 5);
        }
    }

    #[test]
    fn empty_text_is_one_line() {
        let lines = wrap(&plain(""), 10, vec![Span::raw("x")], vec![]);
        assert_eq!(texts(&lines), ["x"]);
    }
}
