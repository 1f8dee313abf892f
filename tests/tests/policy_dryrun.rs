// Drives the Linux binaries (ipc_schema::platform::Missing elsewhere).
#![cfg(target_os = "linux")]
//! A policy tried on history: `policy apply --dry-run` on calls made through the running broker
//! (a no-op, a tightening, a loosening), and an apply that loosens asking for a yes on the
//! terminal, refusing without one.

#![forbid(unsafe_code)]

mod broker_core_support;

use broker_core_support::*;
use gatehouse_tests::bin;
use ipc_schema::tool::{RefusalKind, ToolReply};
use serde_json::Value;
use std::io::Write;
use std::process::{Command, Output, Stdio};

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn json_of(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {:?}", text(o)))
}

/// `gatehouse ARGS` on a terminal of its own (a pty), `answer` typed into it.
fn on_a_terminal(inst: &Instance, args: &[&str], answer: &str) -> Output {
    const PTY: &str =
        "import os, pty, sys\nsys.exit(os.waitstatus_to_exitcode(pty.spawn(sys.argv[1:])))";
    let mut child = Command::new("python3")
        .args(["-c", PTY])
        .arg(bin("gatehouse"))
        .arg("--data-dir")
        .arg(inst.root())
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 with pty");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(answer.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

/// The audit rows of tool calls (what a replay must never add to).
fn call_rows(inst: &Instance) -> usize {
    audit_rows(inst)
        .iter()
        .filter(|r| r["kind"] == "tool_call" || r["kind"] == "read")
        .count()
}

/// Waits until the history holds `n` replayable calls: the audit writer commits a call's rows
/// (and its stored target) after the call's reply has gone out, so the last call may not be in
/// the database yet. A dry run reads only, so asking again is harmless.
fn wait_replayable(inst: &Instance, file: &std::path::Path, n: u64) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let out = inst.cli(&[
            "--json",
            "policy",
            "apply",
            "--dry-run",
            file.to_str().unwrap(),
        ]);
        let v = json_of(&out);
        if v["replayed"].as_u64() >= Some(n) || std::time::Instant::now() > deadline {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

fn revision_in_force(inst: &Instance) -> u64 {
    let v = json_of(&inst.cli(&["--json", "policy", "show"]));
    v["revision"].as_u64().unwrap()
}

#[test]
fn a_policy_is_tried_on_the_audited_calls_before_it_applies() {
    let inst = Instance::new(Some(&policy_with("write_file = \"ask\"", "")));
    let (a, b) = (inst.file("a.txt"), inst.file("b.txt"));
    std::fs::write(&a, "a").unwrap();
    let broker = inst.start(&[]);
    let mut gw = broker.gateway();
    let mut ui = broker.ui();
    let session = gw.open_session(None).session.0;

    // The history: two allowed reads, and a write the human allowed once.
    for _ in 0..2 {
        assert!(matches!(gw.call(read_call(&a)), ToolReply::Done(_)));
    }
    let id = gw.send(write_call(&b, "one"));
    let p = ui.wait_pending(1).remove(0);
    ui.decide(&p, choice_allow());
    assert!(matches!(gw.final_for(id), Some(ToolReply::Done(_))));
    assert_eq!(std::fs::read_to_string(&b).unwrap(), "one");
    let rows_before = call_rows(&inst);

    let root = inst.project.display().to_string();
    let next = inst.root().join("next.toml");
    let write_next = |rev: u64, tools: &str, extra: &str| {
        std::fs::write(
            &next,
            policy_with(tools, extra)
                .replace("revision = 0", &format!("revision = {rev}"))
                .replace("{ROOT}", &root),
        )
        .unwrap();
    };
    let dry = |extra: &[&str]| {
        let mut args = vec!["--json", "policy", "apply", "--dry-run"];
        args.extend_from_slice(extra);
        args.push(next.to_str().unwrap());
        let out = inst.cli(&args);
        assert!(out.status.success(), "{:?}", text(&out));
        json_of(&out)
    };

    // A no-op: the same document. Every call replayed, nothing changes, nothing asked.
    write_next(0, "write_file = \"ask\"", "");
    wait_replayable(&inst, &next, 3);
    let v = dry(&[]);
    assert_eq!(v["replayed"], 3, "{v:#}");
    assert_eq!(v["unchanged"], 3, "{v:#}");
    assert_eq!(v["groups"], serde_json::json!([]), "{v:#}");
    assert_eq!(v["needs_confirmation"], false);
    assert_eq!(v["applied"], false);
    assert_eq!(v["not_replayable"], 0);
    let out = inst.cli(&["policy", "apply", "--dry-run", next.to_str().unwrap()]);
    let (stdout, _) = text(&out);
    assert!(
        stdout.contains("3 calls replayed: 3 unchanged, 0 would change\n")
            && stdout.contains("would now run without asking: none\n")
            && stdout.contains("would now be refused: none\n")
            && stdout.contains("would now ask: none\n"),
        "{stdout}"
    );
    assert_eq!(revision_in_force(&inst), 0, "a dry run applies nothing");
    // Applied for real without a terminal: a no-op asks nothing.
    let out = inst.cli(&["policy", "apply", next.to_str().unwrap()]);
    assert_eq!(
        text(&out).0,
        "policy revision 1 applied\n",
        "{:?}",
        text(&out)
    );

    // A tightening: the reads of a.txt refused, writes still asked.
    let deny_a = "[[rule]]\nname = \"no-a\"\ntools = [\"read_file\"]\npaths = [\"**/a.txt\"]\naction = \"deny\"\n";
    write_next(1, "write_file = \"ask\"", deny_a);
    let v = dry(&["--days", "7"]);
    assert_eq!(v["days"], 7);
    assert_eq!(
        (v["replayed"].as_u64(), v["unchanged"].as_u64()),
        (Some(3), Some(1))
    );
    let groups = v["groups"].as_array().unwrap();
    assert_eq!(groups.len(), 1, "{v:#}");
    let g = &groups[0];
    assert_eq!(g["change"], "now_refused");
    assert_eq!(g["tool"], "read_file");
    assert_eq!(g["target"], a.display().to_string());
    assert_eq!(
        (g["before"].as_str(), g["after"].as_str()),
        (Some("allow"), Some("deny"))
    );
    assert_eq!(g["count"], 2);
    assert_eq!(g["rule_after"], "rule \"no-a\" (policy revision 2)");
    let examples = g["examples"].as_array().unwrap();
    assert_eq!(examples.len(), 2);
    assert!(
        examples.iter().all(|e| e["session"] == session.as_str()),
        "{v:#}"
    );
    assert!(
        examples[0]["seq"].as_i64() > examples[1]["seq"].as_i64(),
        "newest first"
    );
    assert_eq!(v["needs_confirmation"], false);
    // It applies without a terminal, saying what it tightens on standard error.
    let out = inst.cli(&["policy", "apply", next.to_str().unwrap()]);
    let (stdout, stderr) = text(&out);
    assert_eq!(stdout, "policy revision 2 applied\n", "{stderr}");
    assert!(
        stderr.contains(&format!("would now be refused: 2 calls\n  read_file {} (profile default): 2 calls, allow -> deny\n", a.display())),
        "{stderr}"
    );
    match gw.call(read_call(&a)) {
        ToolReply::Refused(r) => assert_eq!(r.kind, RefusalKind::Denied),
        other => panic!("{other:?}"),
    }

    // A loosening: writes allowed, the deny rule gone.
    write_next(2, "write_file = \"allow\"", "");
    wait_replayable(&inst, &next, 4);
    let v = dry(&[]);
    // The refused read just made is history too.
    assert_eq!(v["replayed"], 4, "{v:#}");
    let got: Vec<(String, String, u64)> = v["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| {
            (
                g["change"].as_str().unwrap().to_string(),
                format!(
                    "{} {}",
                    g["tool"].as_str().unwrap(),
                    g["target"].as_str().unwrap()
                ),
                g["count"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            (
                "now_runs".to_string(),
                format!("read_file {}", a.display()),
                3
            ),
            (
                "now_runs".to_string(),
                format!("write_file {}", b.display()),
                1
            ),
        ]
    );
    assert_eq!(v["loosens"], true);
    assert_eq!(v["needs_confirmation"], true);
    let out = inst.cli(&["policy", "apply", "--dry-run", next.to_str().unwrap()]);
    let (stdout, _) = text(&out);
    assert!(
        stdout.contains(&format!("  write_file {} (profile default): 1 call, ask -> allow\n    was: tools.write_file default (policy revision 2)\n    now: tools.write_file default (policy revision 3)\n    e.g. ", b.display())),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!(", session {session} (audit entry ")),
        "{stdout}"
    );

    // Without a terminal it is refused, and nothing changes.
    let out = inst.cli(&["policy", "apply", next.to_str().unwrap()]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    assert!(
        stderr.contains("would now run without asking: 4 calls\n"),
        "{stderr}"
    );
    assert!(
        stderr.contains("loosens what the audited calls of the last 30 days were given; not applied: there is no terminal to confirm on (run it on a terminal, or give --yes)"),
        "{stderr}"
    );
    assert_eq!(revision_in_force(&inst), 2);
    // --json without --yes: refused, with the replay.
    let out = inst.cli(&["--json", "policy", "apply", next.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let v = json_of(&out);
    assert_eq!(v["applied"], false);
    assert_eq!(v["replay"]["groups"].as_array().unwrap().len(), 2);
    assert_eq!(revision_in_force(&inst), 2);
    // On a terminal, an answer other than yes refuses it.
    let out = on_a_terminal(&inst, &["policy", "apply", next.to_str().unwrap()], "n\n");
    let (shown, _) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{shown}");
    assert!(
        shown.contains("Apply it as policy revision 3? [y/N] "),
        "{shown}"
    );
    assert!(
        shown.contains("not applied (the answer was not yes)"),
        "{shown}"
    );
    assert_eq!(revision_in_force(&inst), 2);
    // Yes applies it.
    let out = on_a_terminal(&inst, &["policy", "apply", next.to_str().unwrap()], "y\n");
    let (shown, _) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{shown}");
    assert!(shown.contains("policy revision 3 applied"), "{shown}");
    assert_eq!(revision_in_force(&inst), 3);

    // No replay re-ran a call: the file holds the one write, and the only new call rows are
    // the refused read made above.
    assert_eq!(std::fs::read_to_string(&b).unwrap(), "one");
    assert_eq!(call_rows(&inst), rows_before + 1);
    // A write now runs without a card; --yes applies a loosening without a terminal.
    assert!(matches!(
        gw.call(write_call(&inst.file("c.txt"), "c")),
        ToolReply::Done(_)
    ));
    write_next(3, "write_file = \"ask\"", "");
    let out = inst.cli(&["policy", "apply", next.to_str().unwrap()]);
    assert_eq!(
        text(&out).0,
        "policy revision 4 applied\n",
        "a tightening: {:?}",
        text(&out)
    );
    write_next(4, "write_file = \"allow\"", "");
    let out = inst.cli(&["--json", "policy", "apply", "--yes", next.to_str().unwrap()]);
    assert!(out.status.success(), "{:?}", text(&out));
    let v = json_of(&out);
    assert_eq!(
        (v["applied"].as_bool(), v["revision"].as_u64()),
        (Some(true), Some(5))
    );
    assert_eq!(v["replay"]["loosens"], true);
    let (status, v) = verify(&inst);
    assert!(status.success(), "{v}");
}

#[test]
fn a_document_that_cannot_be_tried_is_refused_with_the_reason() {
    let inst = Instance::new(Some(&policy_with("write_file = \"ask\"", "")));
    let _broker = inst.start(&[]);
    let next = inst.root().join("bad.toml");
    std::fs::write(&next, "revision = 0\n[tools]\nread_file = \"sometimes\"\n").unwrap();
    let out = inst.cli(&["policy", "apply", "--dry-run", next.to_str().unwrap()]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stderr.contains("bad.toml cannot be tried: "), "{stderr}");
    assert!(stderr.contains("unknown variant `sometimes`"), "{stderr}");
    let out = inst.cli(&[
        "policy",
        "apply",
        "--days",
        "0",
        "--dry-run",
        next.to_str().unwrap(),
    ]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "clap refuses a zero window: {:?}",
        text(&out)
    );
}

#[test]
fn a_fetch_the_network_allowlist_refused_is_replayed_by_its_host() {
    // Refused by the allowlist before any name is resolved: nothing leaves the machine.
    let with_list = |rev: u64, list: &str| {
        policy_with("fetch_url = \"ask\"", "")
            .replace("revision = 0", &format!("revision = {rev}"))
            .replace("[tools]", &format!("{list}[tools]"))
    };
    let inst = Instance::new(Some(&with_list(0, "network = [\"docs.rs\"]\n")));
    let broker = inst.start(&[]);
    let mut gw = broker.gateway();
    let fetch = ipc_schema::tool::ToolCall::FetchUrl(ipc_schema::tool::FetchUrl {
        url: "http://off-list.test/x".into(),
    });
    match gw.call(fetch) {
        ToolReply::Refused(r) => {
            assert_eq!(r.kind, RefusalKind::Denied);
            assert!(
                r.message.contains("not in the network allowlist"),
                "{}",
                r.message
            );
        }
        other => panic!("{other:?}"),
    }
    let next = inst.root().join("next.toml");
    let root = inst.project.display().to_string();
    // The same list: no change. Without it: the fetch would now ask (a loosening).
    std::fs::write(
        &next,
        with_list(0, "network = [\"docs.rs\"]\n").replace("{ROOT}", &root),
    )
    .unwrap();
    wait_replayable(&inst, &next, 1);
    let v = json_of(&inst.cli(&[
        "--json",
        "policy",
        "apply",
        "--dry-run",
        next.to_str().unwrap(),
    ]));
    assert_eq!(
        (v["replayed"].as_u64(), v["unchanged"].as_u64()),
        (Some(1), Some(1)),
        "{v:#}"
    );
    std::fs::write(&next, with_list(0, "").replace("{ROOT}", &root)).unwrap();
    let v = json_of(&inst.cli(&[
        "--json",
        "policy",
        "apply",
        "--dry-run",
        next.to_str().unwrap(),
    ]));
    let g = &v["groups"][0];
    assert_eq!(
        (
            g["change"].as_str(),
            g["tool"].as_str(),
            g["target"].as_str()
        ),
        (Some("now_asks"), Some("fetch_url"), Some("off-list.test")),
        "{v:#}"
    );
    assert_eq!(
        (g["before"].as_str(), g["after"].as_str()),
        (Some("deny"), Some("ask"))
    );
    assert_eq!(v["needs_confirmation"], true, "deny -> ask loosens");
}
