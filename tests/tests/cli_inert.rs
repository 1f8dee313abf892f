// Drives the Linux binaries (ipc_schema::platform::Missing elsewhere).
#![cfg(target_os = "linux")]
//! What a person reads from the `gatehouse` CLI is inert, as in the console: an agent's
//! `run_command` (and a file path) carrying a newline and a made-up audit row, a screen clear
//! (ESC [2J), an OSC 52 clipboard write and a right-to-left override must not add a line to
//! `gatehouse audit tail` or `gatehouse approve`, nor reach the terminal as raw bytes; the same
//! text must be there, as visible escapes (the positive control: the test does not pass because
//! nothing was printed). `--json` stays exact JSON. And `gatehouse fetch` prints a hostile page
//! with its line breaks kept and everything else escaped.

#![forbid(unsafe_code)]

mod broker_core_support;

use broker_core_support::{abs, audit_rows, policy_with, read_call, Instance};
use gatehouse_tests::{http_response, TestWebServer};
use ipc_schema::tool::{RunCommand, ToolCall, ToolReply};

/// A newline and a line that looks like an audit row, then a screen clear, an OSC 52 clipboard
/// write (terminated by BEL) and a right-to-left override.
const HOSTILE: &str = "evil\n    42 12:00:00Z decision       ui         allowed   deadbeef run_command rm\x1b[2J\x1b]52;c;aGFja2Vk\x07\u{202E}txt.exe";
/// `HOSTILE` as `ipc_schema::inert::escaped` shows it.
const SHOWN: &str = "evil\\n    42 12:00:00Z decision       ui         allowed   deadbeef run_command rm\\x1b[2J\\x1b]52;c;aGFja2Vk\\x07\\u{202E}txt.exe";

fn text(b: &[u8]) -> String {
    String::from_utf8(b.to_vec()).expect("the CLI prints UTF-8")
}

/// No byte a terminal would act on: ESC, BEL, CR, other C0 and C1 controls, bidi controls.
fn assert_no_raw_controls(what: &str, s: &str) {
    for (i, c) in s.char_indices() {
        let bad = (c.is_control() && c != '\n')
            || matches!(c, '\u{200E}' | '\u{200F}' | '\u{061C}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{2028}' | '\u{2029}');
        assert!(
            !bad,
            "{what}: raw {c:?} at byte {i} in:\n{}",
            s.escape_debug()
        );
    }
}

fn run_call(inst: &Instance, argv: &[&str]) -> ToolCall {
    ToolCall::RunCommand(RunCommand {
        argv: argv.iter().map(|s| s.to_string()).collect(),
        cwd: abs(&inst.project),
        timeout_secs: 0,
    })
}

#[test]
fn hostile_agent_text_is_one_inert_line_per_record_in_audit_tail_and_approve() {
    let inst = Instance::new(Some(&policy_with("run_command = \"ask\"", "")));
    let b = inst.start(&[]);
    let mut gw = b.gateway();

    // A file path that is the hostile text: refused or failed, and audited with it.
    let bad_path = inst.file(HOSTILE);
    let _ = gw.call(read_call(&bad_path));

    // A command whose argv[0] (and an argument) is the hostile text: a proposal.
    let id = gw.send(run_call(&inst, &[HOSTILE, HOSTILE]));
    match gw.next_for(id) {
        Some(ToolReply::AwaitingApproval(_)) => {}
        other => panic!("run_command did not ask: {other:?}; log:\n{}", b.log()),
    }

    // `gatehouse approve`: one proposal, exactly the card's lines (header, effect, rule, mode,
    // arguments, digest, expiry), the hostile text escaped inside them.
    let out = inst.cli(&["approve"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let listing = text(&out.stdout);
    assert_no_raw_controls("approve", &listing);
    let lines: Vec<&str> = listing.lines().collect();
    assert_eq!(lines.len(), 7, "{listing}");
    assert!(lines[0].starts_with("proposal "), "{listing}");
    for l in &lines[1..] {
        assert!(
            l.starts_with("  "),
            "a line that is no field of the card: {l}"
        );
    }
    assert!(
        lines[0].contains(&format!("run_command on {SHOWN} in ")),
        "the target, escaped: {listing}"
    );
    assert!(listing.contains("\\u{202E}txt.exe"), "{listing}");
    assert!(
        lines[2].starts_with("  rule:")
            && lines[3] == "  mode:      ask"
            && lines[4].starts_with("  arguments:"),
        "{listing}"
    );

    // `--json` is exact: the target holds the hostile text as it is, and JSON escapes its
    // control characters (no raw ESC, BEL or newline in the output).
    let out = inst.cli(&["--json", "approve"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let raw = text(&out.stdout);
    assert!(!raw.contains('\x1b') && !raw.contains('\x07'), "{raw}");
    let list: serde_json::Value = serde_json::from_str(&raw).expect("JSON");
    let target = list[0]["target"].as_str().expect("a target");
    assert!(target.starts_with(&format!("{HOSTILE} in ")), "{target:?}");

    // Deciding through the CLI prints the card again, inert, then the decision.
    let pid = list[0]["id"].as_u64().expect("an id").to_string();
    let out = inst.cli(&["approve", &pid, "deny"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let decided = text(&out.stdout);
    assert_no_raw_controls("approve ID deny", &decided);
    assert_eq!(decided.lines().count(), 8, "{decided}");
    assert!(decided.contains(SHOWN), "{decided}");
    assert!(
        decided.ends_with(&format!("proposal {pid}: deny\n")),
        "{decided}"
    );
    match gw.final_for(id) {
        Some(ToolReply::Refused(_)) => {}
        other => panic!("a denied call: {other:?}"),
    }

    // `gatehouse audit tail`: exactly one line per row (the same rows, in the same order, as
    // `--json` gives), each starting with its seq and time; none added by the agent's text.
    let out = inst.cli(&["audit", "tail", "-n", "100000"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let tail = text(&out.stdout);
    assert_no_raw_controls("audit tail", &tail);
    let lines: Vec<&str> = tail.lines().collect();
    // Rows written after the text tail was read (the broker goes on) are left out.
    let last: u64 = lines
        .last()
        .and_then(|l| l.split_whitespace().next())
        .and_then(|w| w.parse().ok())
        .expect("the last line starts with its seq");
    let rows: Vec<serde_json::Value> = audit_rows(&inst)
        .into_iter()
        .filter(|r| r["seq"].as_u64().is_some_and(|s| s <= last))
        .collect();
    assert_eq!(lines.len(), rows.len(), "{tail}");
    for (line, row) in lines.iter().zip(&rows) {
        let mut words = line.split_whitespace();
        assert_eq!(
            words.next().and_then(|w| w.parse::<u64>().ok()),
            row["seq"].as_u64(),
            "{line}"
        );
        let time = words.next().unwrap_or_default();
        assert!(time.len() == 9 && time.ends_with('Z'), "{line}");
    }
    // Positive control: the hostile rows are there, escaped: the read's path and the
    // command's proposal and decision.
    let hostile: Vec<&&str> = lines.iter().filter(|l| l.contains(SHOWN)).collect();
    assert!(hostile.len() >= 2, "the hostile rows, escaped:\n{tail}");
    assert!(
        hostile.iter().any(|l| l.contains(" run_command ")),
        "{tail}"
    );
    assert!(hostile.iter().any(|l| l.contains(" read_file ")), "{tail}");
    // And `--json` holds the exact text.
    assert!(
        rows.iter().any(|r| r["target"]
            .as_str()
            .is_some_and(|t| t.starts_with(&format!("{HOSTILE} in ")))),
        "{rows:?}"
    );
}

/// A page with a screen clear, an OSC 52 clipboard write, a carriage return that would
/// overwrite its line, a C1 CSI, a bidi override and CRLF line ends.
const PAGE: &str = "first line\r\n\x1b[2Jcleared?\x1b]52;c;aGFja2Vk\x07\nsafe\rFAKE\n\u{9b}31mred \u{202E}txt.exe\n\tindented\n";
const PAGE_SHOWN: &str = "first line\r\n\\x1b[2Jcleared?\\x1b]52;c;aGFja2Vk\\x07\nsafe\\rFAKE\n\\u{009B}31mred \\u{202E}txt.exe\n\tindented\n";

#[test]
fn a_fetched_page_keeps_its_lines_and_shows_everything_else_escaped() {
    let server = TestWebServer::start("127.0.0.2", |_| {
        http_response("200 OK", "text/plain; charset=utf-8", PAGE)
    });
    let b = gatehouse_tests::BrokerUnderTest::start(&[
        "--test-net-arg=--test-public-addr",
        "--test-net-arg=127.0.0.2",
    ]);
    let url = server.url("/hostile.txt");

    // --json first: the exact text reaches the page's reader (the agent, a program).
    let out = b.cli(&["--json", "fetch", &url, "--yes"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    let exact = v["text"].as_str().expect("text");
    assert!(
        exact.contains(PAGE),
        "not the page byte for byte: {exact:?}"
    );

    let out = b.cli(&["fetch", &url, "--yes"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let shown = text(&out.stdout);
    assert_no_raw_controls_but_tabs_and_crlf("fetch", &shown);
    assert!(shown.contains(PAGE_SHOWN), "{}", shown.escape_debug());
    // Exactly as many line breaks as the wrapped text has, no more (a lone \r is none).
    assert_eq!(
        shown.matches('\n').count(),
        exact.matches('\n').count() + usize::from(!exact.ends_with('\n')),
        "{}",
        shown.escape_debug()
    );
    assert_eq!(server.hits(), 2);
}

fn assert_no_raw_controls_but_tabs_and_crlf(what: &str, s: &str) {
    let without = s.replace("\r\n", "\n").replace('\t', " ");
    assert_no_raw_controls(what, &without);
}
