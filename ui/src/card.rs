//! An approval card: exactly what the broker sent about a proposal, inert, wrapped to the
//! pane's width (never cut), with the keys that decide it.
//!
//! The order puts what decides the meaning first (tool, target, effect, rule), then the
//! arguments and the diff, then the digest the decision will be bound to.

use crate::theme;
use crate::wrap::{inert_runs, line_text, wrap, Run, CONTINUATION};
use ipc_schema::ui::{Choice, LineRange, MatchedPart, OutsideText, Proposal};
use ratatui::style::Style;
use ratatui::text::{Line, Span};

/// The decision keys, in the order the card shows them.
pub const KEYS: [(char, Choice); 5] = [
    ('a', Choice::AllowOnce),
    ('s', Choice::AllowSession),
    ('A', Choice::AlwaysAllow),
    ('d', Choice::Deny),
    ('D', Choice::AlwaysDeny),
];

/// The key that makes `choice`.
pub fn key_for(choice: Choice) -> char {
    KEYS.iter()
        .find(|(_, c)| *c == choice)
        .map(|(k, _)| *k)
        .expect("every choice has a key")
}

/// The choice a key makes, if it is a decision key.
pub fn choice_for(key: char) -> Option<Choice> {
    KEYS.iter().find(|(k, _)| *k == key).map(|(_, c)| *c)
}

/// Width of the label column ("Arguments " plus a space).
const LABEL: usize = 11;

fn label_spans(label: &str) -> Vec<Span<'static>> {
    vec![Span::styled(format!("{label:<LABEL$}"), theme::label())]
}

fn cont_spans(indent: usize) -> Vec<Span<'static>> {
    vec![
        Span::raw(" ".repeat(indent.saturating_sub(2))),
        Span::styled(format!("{CONTINUATION} "), theme::dim()),
    ]
}

/// One labelled field, its value made inert and wrapped under the value column.
fn field(out: &mut Vec<Line<'static>>, label: &str, value: &str, style: Style, width: usize) {
    let runs = inert_runs(value, style, theme::escape());
    out.extend(wrap(&runs, width, label_spans(label), cont_spans(LABEL)));
}

/// The gutter mark of a line that holds outside text.
pub const OUTSIDE_MARK: &str = "▌";

/// The heading of the card's outside-text section.
pub const OUTSIDE_HEADING: &str = "From outside text this session read:";

/// A multi-line block (arguments, diff): each of its lines wrapped on its own under an indent.
/// Lines for which `marked(line number)` holds (1-based) carry [`OUTSIDE_MARK`] in the gutter,
/// on each of their wrapped rows.
fn block(
    out: &mut Vec<Line<'static>>,
    text: &str,
    width: usize,
    style_of: impl Fn(&str) -> Style,
    marked: impl Fn(u32) -> bool,
) {
    for (i, line) in text.split('\n').enumerate() {
        let runs: Vec<Run> = inert_runs(line, style_of(line), theme::escape());
        let (first, cont) = if marked(i as u32 + 1) {
            (
                vec![Span::styled(format!("{OUTSIDE_MARK} "), theme::outside())],
                vec![
                    Span::styled(format!("{OUTSIDE_MARK} "), theme::outside()),
                    Span::styled(format!("{CONTINUATION} "), theme::dim()),
                ],
            )
        } else {
            (vec![Span::raw("  ")], cont_spans(4))
        };
        out.extend(wrap(&runs, width, first, cont));
    }
}

fn in_ranges(ranges: &[LineRange], line: u32) -> bool {
    ranges.iter().any(|r| (r.first..=r.last).contains(&line))
}

fn ranges_text(r: &[LineRange]) -> String {
    r.iter()
        .map(|r| {
            if r.first == r.last {
                r.first.to_string()
            } else {
                format!("{}-{}", r.first, r.last)
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// `HH:MM:SS UTC` of a unix time in milliseconds.
fn utc_time(ms: u64) -> String {
    let s = ms / 1000;
    format!("{:02}:{:02}:{:02} UTC", s / 3600 % 24, s / 60 % 60, s % 60)
}

/// The section naming each argument that holds outside text, and where that text was read.
fn outside_section(out: &mut Vec<Line<'static>>, o: &OutsideText, width: usize) {
    if o.matches.is_empty() && o.matches_not_listed == 0 && o.sources_forgotten == 0 {
        return;
    }
    out.push(Line::from(Span::styled(OUTSIDE_HEADING, theme::outside())));
    let mark = || vec![Span::styled(format!("  {OUTSIDE_MARK} "), theme::outside())];
    for m in &o.matches {
        let mut what = match &m.part {
            MatchedPart::WholeValue => format!("{}: the whole value", m.argument),
            MatchedPart::PartOfValue => format!("{}: part of the value", m.argument),
            MatchedPart::Lines(r) => format!("{}: lines {}", m.argument, ranges_text(r)),
        };
        if !m.diff_lines.is_empty() {
            what.push_str(&format!(
                " (diff lines {}, marked {OUTSIDE_MARK})",
                ranges_text(&m.diff_lines)
            ));
        }
        let from = match o.sources.get(m.source as usize) {
            Some(s) => format!(
                "from {} {} (call {} of the session, {}{})",
                s.tool.name(),
                s.url,
                s.call,
                utc_time(s.read_unix_ms),
                if s.partial {
                    "; only its first part is remembered"
                } else {
                    ""
                }
            ),
            None => "from a source the broker did not name".into(),
        };
        let runs = inert_runs(&what, theme::title(), theme::escape());
        out.extend(wrap(&runs, width, mark(), cont_spans(6)));
        let runs = inert_runs(&from, Style::new(), theme::escape());
        out.extend(wrap(&runs, width, vec![Span::raw("    ")], cont_spans(6)));
    }
    if o.matches_not_listed > 0 {
        let t = format!("  and {} more matches not listed", o.matches_not_listed);
        out.extend(wrap(
            &inert_runs(&t, theme::warn(), theme::escape()),
            width,
            Vec::new(),
            cont_spans(4),
        ));
    }
    if o.sources_forgotten > 0 {
        let t = format!(
            "  {} earlier source{} this session read {} forgotten to bound memory: text from {} is not recognised",
            o.sources_forgotten,
            if o.sources_forgotten == 1 { "" } else { "s" },
            if o.sources_forgotten == 1 { "was" } else { "were" },
            if o.sources_forgotten == 1 { "it" } else { "them" },
        );
        out.extend(wrap(
            &inert_runs(&t, theme::warn(), theme::escape()),
            width,
            Vec::new(),
            cont_spans(4),
        ));
    }
}

fn diff_style(line: &str) -> Style {
    if line.starts_with("+++") || line.starts_with("---") {
        theme::title()
    } else if line.starts_with('+') {
        theme::added()
    } else if line.starts_with('-') {
        theme::removed()
    } else if line.starts_with("@@") {
        theme::hunk()
    } else {
        Style::new()
    }
}

/// `m:ss` (or `h:mm:ss`) until `expires`, or that it has expired.
pub fn expiry(expires_unix_ms: u64, now_unix_ms: u64) -> String {
    if now_unix_ms >= expires_unix_ms {
        return "expired: no answer means deny".into();
    }
    let s = (expires_unix_ms - now_unix_ms).div_ceil(1000);
    if s >= 3600 {
        format!("expires in {}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
    } else {
        format!("expires in {}:{:02}", s / 60, s % 60)
    }
}

/// The card's scrollable body for a pane `width` columns wide.
pub fn body(p: &Proposal, width: u16) -> Vec<Line<'static>> {
    let width = width as usize;
    let mut out = Vec::new();
    let mut head = vec![
        Run {
            text: p.tool.name(),
            style: theme::tool(),
            atomic: true,
        },
        Run {
            text: format!("  proposal {}  ", p.id),
            style: theme::title(),
            atomic: true,
        },
        Run {
            text: "session ".into(),
            style: theme::dim(),
            atomic: false,
        },
    ];
    head.extend(inert_runs(&p.session.0, theme::dim(), theme::escape()));
    out.extend(wrap(&head, width, Vec::new(), cont_spans(2)));
    field(&mut out, "Target", &p.target, theme::title(), width);
    field(&mut out, "Effect", &p.effect, Style::new(), width);
    field(&mut out, "Rule", &p.rule, Style::new(), width);
    field(&mut out, "Mode", p.mode.as_str(), Style::new(), width);
    outside_section(&mut out, &p.outside_text, width);
    // Arguments whose outside text no diff line shows (argv, URL, paths): the arguments carry
    // the mark instead.
    let args_marked = p
        .outside_text
        .matches
        .iter()
        .any(|m| m.diff_lines.is_empty());
    out.push(Line::from(label_spans("Arguments")));
    block(
        &mut out,
        &p.arguments,
        width,
        |_| Style::new(),
        |_| args_marked,
    );
    match &p.diff {
        Some(d) => {
            let diff_marks: Vec<LineRange> = p
                .outside_text
                .matches
                .iter()
                .flat_map(|m| m.diff_lines.iter().copied())
                .collect();
            out.push(Line::from(label_spans("Diff")));
            block(
                &mut out,
                d.strip_suffix('\n').unwrap_or(d),
                width,
                diff_style,
                |l| in_ranges(&diff_marks, l),
            );
        }
        None => field(
            &mut out,
            "Diff",
            "none (not a file change)",
            theme::dim(),
            width,
        ),
    }
    field(
        &mut out,
        "Digest",
        &format!(
            "{} (policy revision {}); the decision is bound to exactly this card",
            hex::encode(&p.digest.0[..8]),
            p.policy_revision
        ),
        theme::dim(),
        width,
    );
    out
}

/// The key legend under the card. While `armed` is false (the card has only just appeared)
/// the keys are shown dimmed and say so; `confirm` asks for a second press.
pub fn keys(width: u16, armed: bool, confirm: Option<Choice>) -> Vec<Line<'static>> {
    if let Some(c) = confirm {
        let k = key_for(c);
        return vec![Line::from(vec![
            Span::styled(
                format!("{} is remembered from now on: press ", c.as_str()),
                theme::warn(),
            ),
            Span::styled(format!(" {k} "), theme::key()),
            Span::styled(" again to confirm, Esc to cancel", theme::warn()),
        ])];
    }
    let mut items: Vec<Vec<Span<'static>>> = KEYS
        .iter()
        .map(|(k, c)| {
            let style = if c.allows() {
                theme::allow()
            } else {
                theme::deny()
            };
            vec![
                Span::styled(format!(" {k} "), theme::key()),
                Span::styled(format!(" {}  ", c.as_str()), style),
            ]
        })
        .collect();
    if !armed {
        items.push(vec![Span::styled(
            "(keys work in a moment: the card just appeared)",
            theme::dim(),
        )]);
    }
    // Lay the items out in as many lines as the width needs; an item is never split.
    let mut lines = Vec::new();
    let mut cur: Vec<Span<'static>> = Vec::new();
    let mut used = 0usize;
    for item in items {
        let w: usize = item
            .iter()
            .map(|s| unicode_width::UnicodeWidthStr::width(s.content.as_ref()))
            .sum();
        if used > 0 && used + w > width as usize {
            lines.push(Line::from(std::mem::take(&mut cur)));
            used = 0;
        }
        used += w;
        cur.extend(item);
    }
    if !cur.is_empty() {
        lines.push(Line::from(cur));
    }
    lines
}

/// The whole card as plain text (for `--json`-less logs and tests).
pub fn plain_text(p: &Proposal, width: u16) -> String {
    body(p, width)
        .iter()
        .map(line_text)
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_choice_has_one_key_and_back() {
        for (k, c) in KEYS {
            assert_eq!(key_for(c), k);
            assert_eq!(choice_for(k), Some(c));
        }
        assert_eq!(choice_for('\n'), None, "Enter chooses nothing");
        assert_eq!(choice_for(' '), None);
        assert_eq!(choice_for('y'), None);
    }

    #[test]
    fn the_heading_wraps_rather_than_cutting_the_session() {
        let p = Proposal {
            id: ipc_schema::tool::ProposalId(12),
            digest: ipc_schema::ui::ProposalDigest([0; 32]),
            session: ipc_schema::tool::SessionId("0123456789abcdef0123456789abcdef".into()),
            tool: ipc_schema::tool::ToolName::MovePath.into(),
            target: "/a -> /b".into(),
            arguments: "{}".into(),
            diff: None,
            effect: "move".into(),
            rule: "r".into(),
            policy_revision: 0,
            created_unix_ms: 0,
            expires_unix_ms: 0,
            outside_text: Default::default(),
            mode: ipc_schema::mode::SessionMode::Ask,
        };
        let lines: Vec<String> = body(&p, 24).iter().map(line_text).collect();
        let head: String = lines
            .iter()
            .take_while(|l| !l.starts_with("Target"))
            .map(|l| l.trim_start_matches("↪ ").to_string())
            .collect();
        assert_eq!(
            head,
            "move_path  proposal #12  session 0123456789abcdef0123456789abcdef"
        );
        assert!(lines
            .iter()
            .all(|l| unicode_width::UnicodeWidthStr::width(l.as_str()) <= 24));
    }

    #[test]
    fn expiry_counts_down_and_says_deny() {
        assert_eq!(expiry(10_000, 0), "expires in 0:10");
        assert_eq!(expiry(125_500, 0), "expires in 2:06");
        assert_eq!(expiry(3_700_000, 0), "expires in 1:01:40");
        assert_eq!(expiry(5, 5), "expired: no answer means deny");
    }

    #[test]
    fn key_legend_wraps_without_splitting_an_item() {
        let wide = keys(200, true, None);
        assert_eq!(wide.len(), 1);
        let narrow = keys(30, true, None);
        assert!(narrow.len() >= 3);
        let all: String = narrow.iter().map(line_text).collect();
        for (k, c) in KEYS {
            assert!(all.contains(&format!(" {k}  {}", c.as_str())), "{all}");
        }
    }
}
