//! The console's screen: title bar, the approval card, sessions, helper health, uncertain calls,
//! the live audit tail and a status line. Every text an agent or a tool could have written goes
//! through [`crate::inert`] before it is drawn.

use crate::card;
use crate::inert::escaped;
use crate::servers::{self, Listing};
use crate::state::{Console, Tone, View, SERVER_TOOLS_KEY};
use crate::theme;
use crate::wrap::{inert_runs, wrap};
use ipc_schema::status::{LandlockStatus, LockdownReport, ProcessReport, ProcessState};
use ipc_schema::ui::AuditEntry;
use ratatui::layout::{Constraint, Direction, Layout, Rect};
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Paragraph};
use ratatui::Frame;
use std::time::Instant;
use unicode_width::UnicodeWidthStr;

/// `HH:MM:SSZ` (UTC: the console reads no time zone file).
pub fn clock(unix_ms: u64) -> String {
    let s = unix_ms / 1000;
    format!("{:02}:{:02}:{:02}Z", s / 3600 % 24, s / 60 % 60, s % 60)
}

/// Cuts `s` (already inert) to `width` columns, ending with `…` when something was cut. Used
/// only in the audit tail, which is a summary (`gatehouse audit tail` prints whole rows).
fn fit(s: &str, width: usize) -> String {
    if s.width() <= width {
        return s.to_string();
    }
    let mut out = String::new();
    let mut used = 0;
    for c in s.chars() {
        let w = unicode_width::UnicodeWidthChar::width(c).unwrap_or(0);
        if used + w + 1 > width {
            break;
        }
        out.push(c);
        used += w;
    }
    out.push('…');
    out
}

fn tone_style(t: Tone) -> Style {
    match t {
        Tone::Info => Style::new(),
        Tone::Good => theme::ok(),
        Tone::Warn => theme::warn(),
        Tone::Bad => theme::error(),
    }
}

fn outcome_style(outcome: &str) -> Style {
    match outcome {
        "allow"
        | "done"
        | "ready"
        | "allow once"
        | "allow for this session"
        | "always allow"
        | "opened"
        | "started" => theme::allow(),
        "ask" | "asked" | "proposed" | "pending" | "executing" | "uncertain" | "expired" => {
            theme::warn()
        }
        "deny" | "refused" | "denied" | "killed" | "failed" | "rejected" | "always deny" => {
            theme::deny()
        }
        _ => Style::new(),
    }
}

fn block(title: &str) -> Block<'static> {
    Block::default()
        .borders(Borders::ALL)
        .border_style(theme::dim())
        .title(Span::styled(format!(" {title} "), theme::title()))
}

/// Draws the whole console.
pub fn draw(f: &mut Frame<'_>, c: &mut Console, now: Instant, now_unix_ms: u64) {
    let area = f.area();
    let audit_h = (area.height / 4).clamp(3, 12);
    let rows = Layout::default()
        .direction(Direction::Vertical)
        .constraints([
            Constraint::Length(1),
            Constraint::Min(6),
            Constraint::Length(audit_h),
            Constraint::Length(1),
        ])
        .split(area);
    title_bar(f, rows[0], c);
    if c.view == View::ServerTools {
        tools_view(f, rows[1], c, now);
    } else if area.width >= 110 {
        let cols = Layout::default()
            .direction(Direction::Horizontal)
            .constraints([Constraint::Percentage(36), Constraint::Percentage(64)])
            .split(rows[1]);
        side_panes(f, cols[0], c);
        card_pane(f, cols[1], c, now, now_unix_ms);
    } else {
        let split = Layout::default()
            .direction(Direction::Vertical)
            .constraints([Constraint::Percentage(65), Constraint::Percentage(35)])
            .split(rows[1]);
        card_pane(f, split[0], c, now, now_unix_ms);
        // Narrow: sessions and health side by side under the card (uncertain calls, when there
        // are any, take the sessions' place: they need the person more).
        let cols = Layout::default()
            .direction(Direction::Horizontal)
            .constraints([Constraint::Percentage(45), Constraint::Percentage(55)])
            .split(split[1]);
        if c.uncertain.is_empty() {
            sessions_pane(f, cols[0], c);
        } else {
            uncertain_pane(f, cols[0], c);
        }
        health_pane(f, cols[1], c);
    }
    audit_pane(f, rows[2], c);
    status_line(f, rows[3], c);
}

fn title_bar(f: &mut Frame<'_>, area: Rect, c: &Console) {
    let conn = match &c.disconnected {
        None => Span::styled("● connected", theme::ok()),
        Some(_) => Span::styled("✕ broker connection lost", theme::error()),
    };
    let waiting = c.proposals.len();
    let line = Line::from(vec![
        Span::styled(" gatehouse console ", theme::key()),
        Span::raw(" "),
        Span::styled(escaped(&c.opts.title), theme::dim()),
        Span::raw("  "),
        conn,
        Span::raw("  "),
        Span::styled(
            format!("{waiting} waiting"),
            if waiting > 0 {
                theme::warn()
            } else {
                theme::dim()
            },
        ),
        Span::styled(
            format!(
                "  {} session{}",
                c.sessions.len(),
                if c.sessions.len() == 1 { "" } else { "s" }
            ),
            theme::dim(),
        ),
    ]);
    f.render_widget(Paragraph::new(line), area);
}

fn status_line(f: &mut Frame<'_>, area: Rect, c: &Console) {
    let line = match &c.status {
        Some((text, tone)) => Line::from(Span::styled(
            fit(&escaped(text), area.width as usize),
            tone_style(*tone),
        )),
        None if c.view == View::ServerTools => Line::from(Span::styled(
            format!(" Tab/n next tool · p previous · j/k ↑↓ PgUp PgDn scroll · a approve · A approve all held · r list again · Esc/{SERVER_TOOLS_KEY} back · q quit"),
            theme::dim(),
        )),
        None => Line::from(Span::styled(
            format!(" Tab/n next card · p previous · j/k ↑↓ PgUp PgDn scroll · {SERVER_TOOLS_KEY} server tools · {} session mode ({}{} mark) · q quit", crate::modes::MODE_KEY, crate::modes::SESSION_PREV, crate::modes::SESSION_NEXT),
            theme::dim(),
        )),
    };
    f.render_widget(Paragraph::new(line), area);
}

fn card_pane(f: &mut Frame<'_>, area: Rect, c: &mut Console, now: Instant, now_ms: u64) {
    let Some(p) = c.selected().cloned() else {
        c.viewport = 0;
        c.body_lines = 0;
        let mut lines = vec![
            Line::from(Span::styled("No proposals waiting.", theme::title())),
            Line::from(Span::styled(
                "A call the policy asks about appears here as a card; nothing is decided until you press one of its keys.",
                theme::dim(),
            )),
        ];
        if !c.recent.is_empty() {
            lines.push(Line::from(""));
            lines.push(Line::from(Span::styled("Decided here:", theme::label())));
            for d in &c.recent {
                lines.push(Line::from(vec![
                    Span::styled(format!("  {} ", d.proposal), theme::dim()),
                    Span::styled(
                        d.choice.as_str().to_string(),
                        if d.choice.allows() {
                            theme::allow()
                        } else {
                            theme::deny()
                        },
                    ),
                    Span::raw(format!("  {} {}", d.tool, escaped(&d.target))),
                ]));
            }
        }
        let inner = block("Approvals");
        let para = Paragraph::new(lines).wrap(ratatui::widgets::Wrap { trim: false });
        f.render_widget(para.block(inner), area);
        return;
    };
    let idx = c.selected_index().unwrap_or(1);
    let expires = card::expiry(p.expires_unix_ms, now_ms);
    let outer = Block::default()
        .borders(Borders::ALL)
        .border_style(theme::focus_border())
        .title(Span::styled(
            format!(" Approval {idx} of {} ", c.proposals.len()),
            theme::title(),
        ))
        .title_top(Line::from(Span::styled(format!(" {expires} "), theme::warn())).right_aligned());
    let inner = outer.inner(area);
    f.render_widget(outer, area);
    if inner.width == 0 || inner.height == 0 {
        return;
    }

    let keys = card::keys(inner.width, c.armed(now), c.confirming());
    let body = card::body(&p, inner.width);
    let keys_h = (keys.len() as u16 + 1).min(inner.height.saturating_sub(1));
    let body_h = inner.height - keys_h;
    c.viewport = body_h;
    c.body_lines = body.len() as u16;
    c.scroll = c.scroll.min(c.body_lines.saturating_sub(body_h));

    let body_area = Rect {
        height: body_h,
        ..inner
    };
    let visible: Vec<Line<'static>> = body
        .into_iter()
        .skip(c.scroll as usize)
        .take(body_h as usize)
        .collect();
    f.render_widget(Paragraph::new(visible), body_area);

    let rule_area = Rect {
        y: inner.y + body_h,
        height: 1,
        ..inner
    };
    let total = c.body_lines;
    let first = c.scroll + 1;
    let last = (c.scroll + body_h).min(total);
    let more = total > last;
    let scroll_text = if total <= body_h {
        String::new()
    } else if more {
        format!(
            " lines {first}–{last} of {total}: ↓ {} more (j, PgDn) ",
            total - last
        )
    } else {
        format!(" lines {first}–{last} of {total}: end of card ")
    };
    let rule_w = (inner.width as usize).saturating_sub(scroll_text.width());
    let rule = Line::from(vec![
        Span::styled("─".repeat(rule_w), theme::dim()),
        Span::styled(scroll_text, if more { theme::warn() } else { theme::dim() }),
    ]);
    f.render_widget(Paragraph::new(rule), rule_area);
    let keys_area = Rect {
        y: inner.y + body_h + 1,
        height: keys_h.saturating_sub(1),
        ..inner
    };
    let keys = if c.is_deciding() {
        vec![Line::from(Span::styled(
            "decision sent; waiting for the broker…",
            theme::dim(),
        ))]
    } else {
        keys
    };
    f.render_widget(Paragraph::new(keys), keys_area);
}

fn side_panes(f: &mut Frame<'_>, area: Rect, c: &Console) {
    let has_uncertain = !c.uncertain.is_empty();
    let sessions_h = (c.sessions.len() as u16 + 3).clamp(4, (area.height / 3).max(4));
    let mut constraints = vec![Constraint::Length(sessions_h), Constraint::Min(3)];
    if has_uncertain {
        constraints.push(Constraint::Length(
            (c.uncertain.len() as u16 * 2 + 2)
                .min(area.height / 3)
                .max(3),
        ));
    }
    let parts = Layout::default()
        .direction(Direction::Vertical)
        .constraints(constraints)
        .split(area);
    sessions_pane(f, parts[0], c);
    health_pane(f, parts[1], c);
    if has_uncertain {
        uncertain_pane(f, parts[2], c);
    }
}

/// Agent text for a one-line column: inert, cut to `width` columns ending in `…`, never in the
/// middle of an escape (a half escape would read as something else).
fn fit_inert(s: &str, width: usize) -> String {
    let shown = escaped(s);
    if shown.width() <= width {
        return shown;
    }
    let mut out = String::new();
    let mut used = 0;
    'pieces: for p in crate::inert::pieces(s) {
        if p.escape {
            // Escapes are ASCII: one column per byte.
            if used + p.text.len() + 1 > width {
                break;
            }
            used += p.text.len();
            out.push_str(&p.text);
            continue;
        }
        for c in p.text.chars() {
            let w = unicode_width::UnicodeWidthChar::width(c).unwrap_or(0);
            if used + w + 1 > width {
                break 'pieces;
            }
            out.push(c);
            used += w;
        }
    }
    out.push('…');
    out
}

fn sessions_pane(f: &mut Frame<'_>, area: Rect, c: &Console) {
    let mut lines = vec![Line::from(Span::styled(
        "  session  agent                profile      mode         state  started    calls waiting",
        theme::dim(),
    ))];
    if c.sessions.is_empty() {
        lines.push(Line::from(Span::styled(
            "no agent sessions yet",
            theme::dim(),
        )));
    }
    // The session a mode change (M) acts on when no card is shown.
    let target = c.mode_target().map(|(s, _)| s);
    for s in &c.sessions {
        let id = escaped(&s.session.0);
        let short: String = id.chars().take(8).collect();
        // The agent's name is the agent's own text: shown inert and cut to its column (the
        // audit log's "described" row has it whole).
        let agent = match &s.agent {
            Some(a) => Span::raw(format!("{:<20} ", fit_inert(a, 20))),
            None => Span::styled(format!("{:<20} ", "(unnamed)"), theme::dim()),
        };
        let mode_style = match s.mode {
            ipc_schema::mode::SessionMode::Ask => Style::new(),
            _ => theme::warn(),
        };
        lines.push(Line::from(vec![
            Span::raw(if target.as_ref() == Some(&s.session) {
                "▸ "
            } else {
                "  "
            }),
            Span::raw(format!("{short:<8} ")),
            agent,
            Span::raw(format!("{:<12} ", fit_inert(s.profile.as_str(), 12))),
            Span::styled(format!("{:<12} ", s.mode.as_str()), mode_style),
            if s.connected {
                Span::styled("● live ", theme::ok())
            } else {
                Span::styled("○ gone ", theme::dim())
            },
            Span::raw(format!("{} {:>5} ", clock(s.started_unix_ms), s.calls)),
            Span::styled(
                format!("{:>7}", s.pending),
                if s.pending > 0 {
                    theme::warn()
                } else {
                    Style::new()
                },
            ),
        ]));
    }
    f.render_widget(Paragraph::new(lines).block(block("Sessions")), area);
}

fn lockdown_summary(l: &LockdownReport) -> String {
    let landlock = match l.landlock {
        LandlockStatus::FullyEnforced => "landlock",
        LandlockStatus::PartiallyEnforced => "landlock (partial)",
        LandlockStatus::NotEnforced => "no landlock",
    };
    let seccomp = if l.seccomp_filter {
        if l.seccomp_allowed_syscalls > 0 {
            format!("seccomp {} calls", l.seccomp_allowed_syscalls)
        } else {
            "seccomp".to_string()
        }
    } else {
        "no seccomp".to_string()
    };
    let mut s = format!("{seccomp}, {landlock}");
    // The exec helper's confinement tier: where user namespaces are refused, `landlock`.
    if let Some(tier) = l.exec_tier {
        s.push_str(&format!(", tier {tier}"));
    }
    if !l.degraded.is_empty() {
        s.push_str(", DEGRADED");
    }
    s
}

fn process_line(p: &ProcessReport) -> Line<'static> {
    let (state, style) = match &p.state {
        ProcessState::Ready => ("ready".to_string(), theme::ok()),
        ProcessState::Starting => ("starting".to_string(), theme::warn()),
        ProcessState::Refused { reason } => {
            (format!("refused: {}", escaped(reason)), theme::error())
        }
    };
    let detail = match (&p.lockdown, p.name.as_str()) {
        (_, "broker") => "no_new_privs, not dumpable".to_string(),
        (Some(l), _) => lockdown_summary(l),
        (None, _) => String::new(),
    };
    let mut spans = vec![
        Span::raw(format!("{:<15}", escaped(&p.name))),
        Span::styled(format!("{state:<9}"), style),
    ];
    if !detail.is_empty() {
        spans.push(Span::styled(detail, theme::dim()));
    }
    if p.restarts > 0 {
        spans.push(Span::styled(
            format!(
                "{}{} restart{}",
                if spans.len() > 2 { ", " } else { "" },
                p.restarts,
                if p.restarts == 1 { "" } else { "s" }
            ),
            theme::warn(),
        ));
    }
    Line::from(spans)
}

fn health_pane(f: &mut Frame<'_>, area: Rect, c: &Console) {
    let mut lines = Vec::new();
    match &c.doctor {
        None => lines.push(Line::from(Span::styled("asking the broker…", theme::dim()))),
        Some(d) => {
            for p in &d.processes {
                lines.push(process_line(p));
            }
            if let Some(l) = &c.opts.lockdown {
                lines.push(Line::from(vec![
                    Span::raw(format!("{:<15}", "ui (this)")),
                    Span::styled(format!("{:<9}", "ready"), theme::ok()),
                    Span::styled(lockdown_summary(l), theme::dim()),
                ]));
            }
            for problem in &d.problems {
                lines.extend(wrap(
                    &inert_runs(problem, theme::error(), theme::escape()),
                    area.width.saturating_sub(2) as usize,
                    vec![Span::styled("✕ ", theme::error())],
                    vec![Span::raw("  ")],
                ));
            }
            if d.problems.is_empty() {
                lines.push(Line::from(Span::styled(
                    "every required protection is enforced",
                    theme::ok(),
                )));
            }
        }
    }
    f.render_widget(Paragraph::new(lines).block(block("Helper health")), area);
}

fn uncertain_pane(f: &mut Frame<'_>, area: Rect, c: &Console) {
    let width = area.width.saturating_sub(2) as usize;
    let mut lines = Vec::new();
    for u in &c.uncertain {
        let text = format!("ledger {} {} {}: {}", u.id, u.tool, u.target, u.reason);
        lines.extend(wrap(
            &inert_runs(&text, theme::warn(), theme::escape()),
            width,
            vec![Span::styled("? ", theme::warn())],
            vec![Span::raw("  ")],
        ));
    }
    let b = block("Uncertain: check whether these happened").border_style(theme::warn());
    f.render_widget(Paragraph::new(lines).block(b), area);
}

fn audit_line(e: &AuditEntry, width: usize) -> Line<'static> {
    let mut rest = String::new();
    if let Some(t) = &e.tool {
        rest.push_str(t);
        rest.push(' ');
    }
    if let Some(t) = &e.target {
        rest.push_str(&escaped(t));
        rest.push(' ');
    }
    rest.push_str(&escaped(&e.detail));
    let mut head = format!("{:>5} {} {:<14} ", e.seq, clock(e.ts_unix_ms), e.kind);
    // The session's mode, as the row has it under its hash (rows of no session have none).
    if let Some(m) = e.mode {
        head.push_str(&format!("[{m}] "));
    }
    // A row about something run in the exec sandbox: its tier, as the row has it.
    if let Some(t) = e.tier {
        head.push_str(&format!("[tier {t}] "));
    }
    let outcome = format!("{:<9} ", escaped(&e.outcome));
    let room = width.saturating_sub(head.width() + outcome.width());
    Line::from(vec![
        Span::styled(head, theme::dim()),
        Span::styled(outcome, outcome_style(&e.outcome)),
        Span::raw(fit(&rest, room)),
    ])
}

fn audit_pane(f: &mut Frame<'_>, area: Rect, c: &Console) {
    let inner_h = area.height.saturating_sub(2) as usize;
    let width = area.width.saturating_sub(2) as usize;
    let lines: Vec<Line<'static>> = c
        .audit
        .iter()
        .skip(c.audit.len().saturating_sub(inner_h))
        .map(|e| audit_line(e, width))
        .collect();
    f.render_widget(Paragraph::new(lines).block(block("Audit log (live)")), area);
}

/// The held-tools pane: the servers and their tools on one side, the selected tool's definition
/// (and diff) with its keys on the other.
fn tools_view(f: &mut Frame<'_>, area: Rect, c: &mut Console, now: Instant) {
    let parts = if area.width >= 110 {
        Layout::default()
            .direction(Direction::Horizontal)
            .constraints([Constraint::Percentage(36), Constraint::Percentage(64)])
            .split(area)
    } else {
        Layout::default()
            .direction(Direction::Vertical)
            .constraints([Constraint::Percentage(35), Constraint::Percentage(65)])
            .split(area)
    };
    tools_list(f, parts[0], c);
    tools_detail(f, parts[1], c, now);
}

fn tools_list(f: &mut Frame<'_>, area: Rect, c: &Console) {
    let width = area.width.saturating_sub(2) as usize;
    let pane = &c.tools;
    let mut lines: Vec<Line<'static>> = Vec::new();
    let mut selected_line = None;
    let sel = pane.selected().map(|(i, _, t)| (i, t.def.name.clone()));
    match &pane.policy {
        None => lines.push(Line::from(Span::styled(
            "asking the broker for the policy…",
            theme::dim(),
        ))),
        Some(Err(e)) => lines.extend(wrap(
            &inert_runs(e, theme::error(), theme::escape()),
            width,
            vec![Span::styled("✕ ", theme::error())],
            vec![Span::raw("  ")],
        )),
        Some(Ok(_)) if pane.entries.is_empty() => lines.push(Line::from(Span::styled(
            "The policy in force names no third-party MCP servers (gatehouse mcp-server add).",
            theme::dim(),
        ))),
        Some(Ok(_)) => {}
    }
    for (i, e) in pane.entries.iter().enumerate() {
        lines.push(Line::from(Span::styled(
            format!("{} (profile {})", e.server, e.profile),
            theme::label(),
        )));
        lines.extend(wrap(
            &inert_runs(&e.reach, theme::dim(), theme::escape()),
            width,
            vec![Span::raw("  ")],
            vec![Span::raw("    ")],
        ));
        match &e.listing {
            Listing::Asking => lines.push(Line::from(Span::styled(
                "  asking the server for its tools…",
                theme::dim(),
            ))),
            Listing::Failed(why) => lines.extend(wrap(
                &inert_runs(why, theme::error(), theme::escape()),
                width,
                vec![Span::styled("  ✕ ", theme::error())],
                vec![Span::raw("    ")],
            )),
            Listing::Tools(v) if v.is_empty() => {
                lines.push(Line::from(Span::styled("  lists no tools", theme::dim())))
            }
            Listing::Tools(v) => {
                for t in v {
                    let is_sel = sel.as_ref() == Some(&(i, t.def.name.clone()));
                    if is_sel {
                        selected_line = Some(lines.len());
                    }
                    lines.push(servers::list_row(
                        &t.def.name,
                        &servers::ToolState::of(t),
                        is_sel,
                    ));
                }
            }
        }
        if let Some((text, tone)) = &e.notice {
            lines.extend(wrap(
                &inert_runs(text, tone_style(*tone), theme::escape()),
                width,
                vec![Span::raw("  ")],
                vec![Span::raw("    ")],
            ));
        }
    }
    // Keep the selected row in view.
    let inner_h = area.height.saturating_sub(2) as usize;
    let skip = match selected_line {
        Some(l) if l >= inner_h => l + 1 - inner_h,
        _ => 0,
    };
    let lines: Vec<Line<'static>> = lines.into_iter().skip(skip).collect();
    let held = pane.held_count();
    let title = format!(
        "Third-party server tools: {held} held{}",
        if c.proposals.is_empty() {
            String::new()
        } else {
            format!(" · {} proposal(s) waiting: Esc", c.proposals.len())
        }
    );
    let b = block(&title).border_style(if held > 0 {
        theme::warn()
    } else {
        theme::dim()
    });
    f.render_widget(Paragraph::new(lines).block(b), area);
}

fn tools_detail(f: &mut Frame<'_>, area: Rect, c: &mut Console, now: Instant) {
    let outer = Block::default()
        .borders(Borders::ALL)
        .border_style(theme::focus_border())
        .title(Span::styled(" Tool definition ", theme::title()));
    let inner = outer.inner(area);
    f.render_widget(outer, area);
    if inner.width == 0 || inner.height == 0 {
        return;
    }
    let pane = &c.tools;
    let keys = servers::keys(pane, now);
    let body = match pane.selected() {
        Some((_, e, t)) => servers::detail(&e.profile, &e.server, t, inner.width),
        None => vec![Line::from(Span::styled(
            "No tool selected. A tool a server lists that you have not approved, or that it now describes otherwise, is held: not offered to agents, its calls refused, until you approve the definition here.",
            theme::dim(),
        ))],
    };
    let keys_h = (keys.len() as u16 + 1).min(inner.height.saturating_sub(1));
    let body_h = inner.height - keys_h;
    let pane = &mut c.tools;
    pane.viewport = body_h;
    pane.body_lines = body.len() as u16;
    pane.scroll = pane.scroll.min(pane.body_lines.saturating_sub(body_h));
    let visible: Vec<Line<'static>> = body
        .into_iter()
        .skip(pane.scroll as usize)
        .take(body_h as usize)
        .collect();
    let wrap_body = pane.selected().is_none();
    let mut para = Paragraph::new(visible);
    if wrap_body {
        para = para.wrap(ratatui::widgets::Wrap { trim: false });
    }
    f.render_widget(
        para,
        Rect {
            height: body_h,
            ..inner
        },
    );
    let total = pane.body_lines;
    let last = (pane.scroll + body_h).min(total);
    let scroll_text = if total <= body_h {
        String::new()
    } else if total > last {
        format!(" ↓ {} more lines (j, PgDn) ", total - last)
    } else {
        " end of definition ".to_string()
    };
    let rule_w = (inner.width as usize).saturating_sub(scroll_text.width());
    f.render_widget(
        Paragraph::new(Line::from(vec![
            Span::styled("─".repeat(rule_w), theme::dim()),
            Span::styled(scroll_text, theme::warn()),
        ])),
        Rect {
            y: inner.y + body_h,
            height: 1,
            ..inner
        },
    );
    f.render_widget(
        Paragraph::new(keys).wrap(ratatui::widgets::Wrap { trim: false }),
        Rect {
            y: inner.y + body_h + 1,
            height: keys_h.saturating_sub(1),
            ..inner
        },
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipc_schema::tier::ConfinementTier;

    #[test]
    fn the_exec_helpers_tier_is_in_its_health_line() {
        let mut l = LockdownReport::nothing_yet("exec");
        l.seccomp_filter = true;
        l.landlock = LandlockStatus::FullyEnforced;
        assert_eq!(lockdown_summary(&l), "seccomp, landlock");
        l.exec_tier = Some(ConfinementTier::Landlock);
        assert_eq!(lockdown_summary(&l), "seccomp, landlock, tier landlock");
        l.exec_tier = Some(ConfinementTier::Namespaces);
        assert_eq!(lockdown_summary(&l), "seccomp, landlock, tier namespaces");
    }
}
