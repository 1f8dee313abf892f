//! The console drawn on ratatui's test backend: hostile text renders inert and complete, cards
//! scroll instead of cutting, the keys are on the card, and diffs are coloured.

use ipc_schema::tool::{ProposalId, SessionId, ToolName};
use ipc_schema::ui::{Proposal, ProposalDigest, UiReply, UiRequest};
use ipc_schema::{Body, Envelope};
use ratatui::backend::TestBackend;
use ratatui::buffer::Buffer;
use ratatui::style::Color;
use ratatui::Terminal;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use ui::state::{Console, Key, Options};

const NOW_MS: u64 = 1_750_000_000_000;

fn proposal(id: u64, target: &str, arguments: &str, diff: Option<&str>) -> Proposal {
    Proposal {
        id: ProposalId(id),
        digest: ProposalDigest([0xab; 32]),
        session: SessionId("5e5510a1d2c3b4a5".into()),
        tool: ToolName::WriteFile.into(),
        target: target.into(),
        arguments: arguments.into(),
        diff: diff.map(str::to_string),
        effect: "replace 12 bytes with 40 bytes".into(),
        rule: "tools.write_file default (policy revision 0)".into(),
        policy_revision: 0,
        created_unix_ms: NOW_MS,
        expires_unix_ms: NOW_MS + 120_000,
        outside_text: Default::default(),
        mode: ipc_schema::mode::SessionMode::Ask,
    }
}

/// A console that has subscribed and been told about `pending`, as the broker would.
fn console_with(pending: Vec<Proposal>, now: Instant) -> Console {
    started(pending, now).0
}

/// Like [`console_with`], with the other requests the console made at its start.
fn started(pending: Vec<Proposal>, now: Instant) -> (Console, Vec<Envelope>) {
    let mut c = Console::new(Options {
        title: "test".into(),
        ..Options::default()
    });
    c.start(now);
    let out = c.take_outbox();
    let id_of = |want: fn(&Body) -> bool| out.iter().find(|e| want(&e.body)).expect("asked").id;
    let sub = id_of(|b| matches!(b, Body::Ui(UiRequest::Subscribe)));
    let list = id_of(|b| matches!(b, Body::Ui(UiRequest::ListPending)));
    c.on_frame(Envelope::new(sub, Body::UiReply(UiReply::Subscribed)), now);
    c.on_frame(
        Envelope::new(list, Body::UiReply(UiReply::Pending(pending))),
        now,
    );
    (c, out)
}

fn draw(c: &mut Console, term: &mut Terminal<TestBackend>, now: Instant) {
    term.draw(|f| ui::view::draw(f, c, now, NOW_MS)).unwrap();
}

/// Each screen row as text (a wide character's trailing cell is skipped).
fn rows(buf: &Buffer) -> Vec<String> {
    let area = buf.area;
    (0..area.height)
        .map(|y| {
            (0..area.width)
                .map(|x| buf[(x, y)].symbol().to_string())
                .collect::<String>()
        })
        .collect()
}

/// No cell holds anything a terminal would interpret.
fn assert_inert(buf: &Buffer) {
    for (i, cell) in buf.content().iter().enumerate() {
        for ch in cell.symbol().chars() {
            let c = ch as u32;
            let bad = c < 0x20
                || c == 0x7f
                || (0x80..0xa0).contains(&c)
                || matches!(ch, '\u{200e}' | '\u{200f}' | '\u{061c}')
                || (0x202a..=0x202e).contains(&c)
                || (0x2066..=0x2069).contains(&c);
            assert!(!bad, "cell {i} holds U+{c:04X}");
        }
    }
}

const HOSTILE_TARGET: &str =
    "/home/u/proj/\x1b]0;pwned\x07evil\u{202E}hs.txt\r/etc/passwd \x1b[2J\x1b[31mAPPROVED";
const HOSTILE_TARGET_SHOWN: &str =
    "/home/u/proj/\\x1b]0;pwned\\x07evil\\u{202E}hs.txt\\r/etc/passwd \\x1b[2J\\x1b[31mAPPROVED";

/// 10,002 characters with a numbered mark every 6, so any gap or reordering shows.
fn long_line() -> String {
    (0..1667).map(|i| format!("{i:05}|")).collect()
}

/// The body rows of the card pane (between its top border and the scroll rule), borders cut.
fn card_body_rows(screen: &[String], viewport: u16) -> Vec<String> {
    let top = screen
        .iter()
        .position(|r| r.contains("Approval 1 of"))
        .expect("card pane title");
    screen[top + 1..top + 1 + viewport as usize]
        .iter()
        .map(|r| {
            let inner: Vec<char> = r.chars().collect();
            // The card is the full width below 110 columns: cut the two border cells.
            inner[1..inner.len() - 1].iter().collect::<String>()
        })
        .collect()
}

#[test]
fn a_hostile_card_renders_inert_and_complete_through_scrolling() {
    let now = Instant::now();
    let arguments = format!(
        "{{\"content\":\"\\u001b\",\"note\":\"\x1b[8m hidden\u{2066}\"}}\n{}",
        long_line()
    );
    let diff = "--- a/x\n+++ b/x\n@@ -1 +1 @@\n-old\r\x1b[1A\n+new\u{202E}";
    let p = proposal(7, HOSTILE_TARGET, &arguments, Some(diff));
    let mut c = console_with(vec![p.clone()], now);
    let mut term = Terminal::new(TestBackend::new(100, 40)).unwrap();
    let later = now + Duration::from_secs(2);
    draw(&mut c, &mut term, later);
    assert!(
        c.body_lines > c.viewport,
        "the card must need scrolling for this test"
    );

    // Page through the whole card, remembering every body line by its line number.
    let mut seen: BTreeMap<u16, String> = BTreeMap::new();
    loop {
        let screen = rows(term.backend().buffer());
        assert_inert(term.backend().buffer());
        for (i, row) in card_body_rows(&screen, c.viewport).into_iter().enumerate() {
            seen.insert(c.scroll + i as u16, row.trim_end().to_string());
        }
        let before = c.scroll;
        c.on_key(Key::PageDown, later);
        draw(&mut c, &mut term, later);
        if c.scroll == before {
            break;
        }
    }
    assert_eq!(
        seen.len(),
        c.body_lines as usize,
        "every line of the card was on screen"
    );
    let lines: Vec<String> = seen.into_values().collect();
    let all = lines.join("\n");

    // The target, escapes visible, wrapped under its label with continuation marks.
    let target: String = lines
        .iter()
        .skip_while(|l| !l.starts_with("Target"))
        .take_while(|l| !l.starts_with("Effect"))
        .map(|l| {
            l.trim_start_matches("Target")
                .trim_start()
                .trim_start_matches("↪ ")
                .to_string()
        })
        .collect();
    assert_eq!(target, HOSTILE_TARGET_SHOWN);

    // The arguments: the first line with its escapes, then the 10,000-character line whole.
    let args: Vec<&String> = lines
        .iter()
        .skip_while(|l| !l.starts_with("Arguments"))
        .skip(1)
        .take_while(|l| !l.starts_with("Diff"))
        .collect();
    assert_eq!(
        args[0].trim(),
        "{\"content\":\"\\u001b\",\"note\":\"\\x1b[8m hidden\\u{2066}\"}"
    );
    let long: String = args[1..]
        .iter()
        .map(|l| l.trim_start().trim_start_matches("↪ "))
        .collect();
    assert_eq!(
        long,
        long_line(),
        "the 10,000-character line is complete and in order"
    );
    assert!(
        args[2].trim_start().starts_with("↪ "),
        "wrapped lines are marked"
    );

    // The diff, line for line, with its escapes.
    for shown in [
        "--- a/x",
        "+++ b/x",
        "@@ -1 +1 @@",
        "-old\\r\\x1b[1A",
        "+new\\u{202E}",
    ] {
        assert!(
            lines.iter().any(|l| l.trim() == shown),
            "diff line {shown:?} missing from:\n{all}"
        );
    }
}

#[test]
fn escapes_are_styled_apart_from_text_and_diffs_are_coloured() {
    let now = Instant::now();
    let p = proposal(1, "/p/a\x1bb", "{}", Some("-gone\n+here"));
    let mut c = console_with(vec![p], now);
    let mut term = Terminal::new(TestBackend::new(120, 40)).unwrap();
    draw(&mut c, &mut term, now);
    let buf = term.backend().buffer().clone();
    let screen = rows(&buf);
    let find = |needle: &str| -> (u16, u16) {
        for (y, r) in screen.iter().enumerate() {
            if let Some(byte) = r.find(needle) {
                return (r[..byte].chars().count() as u16, y as u16);
            }
        }
        panic!("{needle:?} not on screen:\n{}", screen.join("\n"));
    };
    let (x, y) = find("\\x1bb");
    assert_eq!(buf[(x, y)].bg, Color::LightMagenta, "an escape is marked");
    assert_ne!(
        buf[(x + 4, y)].bg,
        Color::LightMagenta,
        "the text after it is not"
    );
    let (x, y) = find("-gone");
    assert_eq!(buf[(x, y)].fg, Color::Red);
    let (x, y) = find("+here");
    assert_eq!(buf[(x, y)].fg, Color::Green);
}

#[test]
fn the_card_shows_every_key_and_what_it_does() {
    let now = Instant::now();
    let mut c = console_with(vec![proposal(3, "/p/a", "{}", None)], now);
    let mut term = Terminal::new(TestBackend::new(120, 30)).unwrap();
    draw(&mut c, &mut term, now + Duration::from_secs(1));
    let screen = rows(term.backend().buffer()).join("\n");
    for shown in [
        " a  allow once",
        " s  allow for this session",
        " A  always allow",
        " d  deny",
        " D  always deny",
        "Approval 1 of 1",
        "expires in 2:00",
        "Target     /p/a",
        "Rule       tools.write_file default (policy revision 0)",
        "proposal #3",
    ] {
        assert!(screen.contains(shown), "{shown:?} missing:\n{screen}");
    }
    // Until the card has been on screen a moment, the card says its keys are not live yet.
    draw(&mut c, &mut term, now);
    let screen = rows(term.backend().buffer()).join("\n");
    assert!(screen.contains("keys work in a moment"), "{screen}");
}

#[test]
fn a_narrow_terminal_still_shows_the_whole_target() {
    let now = Instant::now();
    let target = format!("/very/long/{}/file.txt", "segment/".repeat(40));
    let mut c = console_with(vec![proposal(9, &target, "{}", None)], now);
    let mut term = Terminal::new(TestBackend::new(60, 40)).unwrap();
    draw(&mut c, &mut term, now);
    let screen = rows(term.backend().buffer());
    let joined: String = card_body_rows(&screen, c.viewport)
        .iter()
        .skip_while(|l| !l.starts_with("Target"))
        .take_while(|l| !l.starts_with("Effect"))
        .map(|l| {
            l.trim_start_matches("Target")
                .trim()
                .trim_start_matches("↪ ")
                .to_string()
        })
        .collect();
    assert_eq!(joined, target);
}

#[test]
fn hostile_audit_rows_and_session_ids_render_inert() {
    let now = Instant::now();
    let (mut c, out) = started(vec![], now);
    let audit = out
        .iter()
        .find(|e| matches!(e.body, Body::Ui(UiRequest::AuditTail { .. })))
        .expect("the console polls the audit log");
    let sessions = out
        .iter()
        .find(|e| matches!(e.body, Body::Ui(UiRequest::ListSessions)))
        .expect("the console polls sessions");
    c.on_frame(
        Envelope::new(
            audit.id,
            Body::UiReply(UiReply::Audit(vec![
                ipc_schema::ui::AuditEntry {
                    seq: 41,
                    ts_unix_ms: NOW_MS,
                    kind: ipc_schema::ui::AuditKind::ToolCall,
                    session: Some("s".into()),
                    actor: "gateway".into(),
                    tool: Some("run_command".into()),
                    target: Some("/p/\x1b[2Jx\u{202E}y".into()),
                    outcome: "allow\x07".into(),
                    detail: "d\r\n".into(),
                    mode: None,
                    tier: Some(ipc_schema::tier::ConfinementTier::Landlock),
                },
                ipc_schema::ui::AuditEntry {
                    seq: 42,
                    ts_unix_ms: NOW_MS,
                    kind: ipc_schema::ui::AuditKind::Decision,
                    session: Some("s".into()),
                    actor: "gateway".into(),
                    tool: Some("write_file".into()),
                    target: Some("/p/w".into()),
                    outcome: "allowed by mode".into(),
                    detail: "ran without a card".into(),
                    mode: Some(ipc_schema::mode::SessionMode::FullAccess),
                    tier: None,
                },
            ])),
        ),
        now,
    );
    c.on_frame(
        Envelope::new(
            sessions.id,
            Body::UiReply(UiReply::Sessions(vec![ipc_schema::ui::SessionSummary {
                session: SessionId("\x1b[31mred".into()),
                profile: ipc_schema::tool::ProfileName::parse("research").unwrap(),
                agent: Some("\x1b[2Jclaude\u{202E}-code 1.0".into()),
                connected: true,
                started_unix_ms: NOW_MS,
                calls: 4,
                pending: 1,
                mode: ipc_schema::mode::SessionMode::Unattended,
            }])),
        ),
        now,
    );
    let mut term = Terminal::new(TestBackend::new(140, 30)).unwrap();
    draw(&mut c, &mut term, now);
    assert_inert(term.backend().buffer());
    let screen = rows(term.backend().buffer()).join("\n");
    assert!(screen.contains("/p/\\x1b[2Jx\\u{202E}y"), "{screen}");
    assert!(screen.contains("allow\\x07"), "{screen}");
    // Each row shows its session's mode, when it has one.
    let line = |seq: &str| {
        screen
            .lines()
            .find(|l| l.contains(seq))
            .unwrap_or_else(|| panic!("no audit row {seq}: {screen}"))
            .to_string()
    };
    assert!(
        line("   42 ").contains("decision       [full-access] allowed"),
        "{screen}"
    );
    for m in ["[ask]", "[full-access]", "[unattended]"] {
        assert!(
            !line("   41 ").contains(m),
            "a row without a mode: {screen}"
        );
    }
    // A row about something run in the exec sandbox shows its tier; others none.
    assert!(line("   41 ").contains("[tier landlock] "), "{screen}");
    assert!(!line("   42 ").contains("[tier"), "{screen}");
    assert!(screen.contains("\\x1b[31m"), "{screen}");
    // The sessions pane names the agent (inert) and the profile.
    assert!(
        screen.contains("\\x1b[2Jclaude…"),
        "the agent's name, escapes visible, cut to its column between escapes: {screen}"
    );
    assert!(screen.contains("research"), "{screen}");
}

#[test]
fn uncertain_calls_are_shown_for_the_person_to_check() {
    let now = Instant::now();
    let (mut c, out) = started(vec![], now);
    let ask = out
        .iter()
        .find(|e| matches!(e.body, Body::Ui(UiRequest::ListUncertain)))
        .expect("the console asks for uncertain calls");
    c.on_frame(
        Envelope::new(
            ask.id,
            Body::UiReply(UiReply::Uncertain(vec![ipc_schema::ui::LedgerCall {
                id: 12,
                session: SessionId("s".into()),
                tool: ToolName::WriteFile.into(),
                target: "/p/out\u{202E}txt".into(),
                summary: "{}".into(),
                state: ipc_schema::ui::CallState::Uncertain,
                reason: "gatehouse stopped while carrying it out. Check whether it happened."
                    .into(),
                updated_unix_ms: NOW_MS,
            }])),
        ),
        now,
    );
    for width in [140, 90] {
        let mut term = Terminal::new(TestBackend::new(width, 40)).unwrap();
        draw(&mut c, &mut term, now);
        assert_inert(term.backend().buffer());
        let screen = rows(term.backend().buffer()).join("\n");
        assert!(
            screen.contains("Uncertain: check whether"),
            "{width}: {screen}"
        );
        assert!(
            screen.contains("ledger 12 write_file /p/out"),
            "{width}: {screen}"
        );
        assert!(screen.contains("\\u{202E}"), "{width}: {screen}");
    }
}

/// A card whose arguments hold outside text: content lines 2-3 shown on diff lines 5-6, and a
/// path taken whole from a page whose URL is hostile.
fn proposal_with_outside_text() -> Proposal {
    use ipc_schema::ui::{LineRange, MatchedPart, OutsideMatch, OutsideSource, OutsideText};
    let diff = "--- a/run.sh\n+++ b/run.sh\n@@ -0,0 +1,4 @@\n+#!/bin/sh\n+copied line one from the page\n+copied line two from the page\n+echo mine\n";
    let mut p = proposal(
        5,
        "/p/run.sh",
        "{\"path\":{\"path\":\"/p/run.sh\"}}",
        Some(diff),
    );
    p.outside_text = OutsideText {
        sources: vec![OutsideSource {
            tool: ToolName::FetchUrl.into(),
            url: "https://evil.example/\x1b[2Jinstall\u{202E}".into(),
            call: 2,
            read_unix_ms: NOW_MS,
            partial: false,
        }],
        matches: vec![
            OutsideMatch {
                argument: "content".into(),
                part: MatchedPart::Lines(vec![LineRange { first: 2, last: 3 }]),
                diff_lines: vec![LineRange { first: 5, last: 6 }],
                source: 0,
            },
            OutsideMatch {
                argument: "path".into(),
                part: MatchedPart::WholeValue,
                diff_lines: vec![],
                source: 0,
            },
        ],
        matches_not_listed: 0,
        sources_forgotten: 2,
    };
    p
}

#[test]
fn outside_text_is_listed_and_its_lines_marked_and_a_card_without_shows_none() {
    let now = Instant::now();
    let mut c = console_with(vec![proposal_with_outside_text()], now);
    let mut term = Terminal::new(TestBackend::new(120, 50)).unwrap();
    draw(&mut c, &mut term, now);
    let buf = term.backend().buffer().clone();
    assert_inert(&buf);
    let screen = rows(&buf);
    let all = screen.join("\n");
    let find = |needle: &str| -> (u16, u16) {
        for (y, r) in screen.iter().enumerate() {
            if let Some(byte) = r.find(needle) {
                return (r[..byte].chars().count() as u16, y as u16);
            }
        }
        panic!("{needle:?} not on screen:\n{all}");
    };
    let (x, y) = find(ui::card::OUTSIDE_HEADING);
    assert_eq!(buf[(x, y)].fg, Color::LightYellow, "the section stands out");
    let section_at = y;
    assert!(
        section_at < find("Arguments").1,
        "the section comes before the arguments"
    );
    assert!(
        all.contains("content: lines 2-3 (diff lines 5-6, marked ▌)"),
        "{all}"
    );
    assert!(all.contains("path: the whole value"), "{all}");
    // The source, inert.
    assert!(
        all.contains("from fetch_url https://evil.example/\\x1b[2Jinstall\\u{202E} (call 2"),
        "{all}"
    );
    assert!(
        all.contains("2 earlier sources this session read were forgotten to bound memory"),
        "{all}"
    );
    // The copied diff lines carry the mark in their gutter; the others do not.
    for marked in ["+copied line one", "+copied line two"] {
        let (x, y) = find(marked);
        assert_eq!(buf[(x - 2, y)].symbol(), "▌", "{marked} is marked:\n{all}");
        assert_eq!(buf[(x - 2, y)].fg, Color::LightYellow);
    }
    for plain in ["+#!/bin/sh", "+echo mine", "@@ -0,0 +1,4 @@"] {
        let (x, y) = find(plain);
        assert_eq!(
            buf[(x - 2, y)].symbol(),
            " ",
            "{plain} is not marked:\n{all}"
        );
    }
    // The path match has no diff line: the arguments carry the mark.
    let (x, y) = find("{\"path\":{\"path\":\"/p/run.sh\"}}");
    assert_eq!(buf[(x - 2, y)].symbol(), "▌", "{all}");

    // Negative control: the same card without findings shows no section and no mark.
    let mut p = proposal_with_outside_text();
    p.outside_text = Default::default();
    let mut c = console_with(vec![p], now);
    let mut term = Terminal::new(TestBackend::new(120, 50)).unwrap();
    draw(&mut c, &mut term, now);
    let screen = rows(term.backend().buffer());
    let all = screen.join("\n");
    assert!(all.contains("+copied line one"), "{all}");
    assert!(!all.contains(ui::card::OUTSIDE_HEADING), "{all}");
    assert!(!all.contains('▌'), "{all}");
}
