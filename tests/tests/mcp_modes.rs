// Drives the Linux binaries (ipc_schema::platform::Missing elsewhere).
#![cfg(target_os = "linux")]
//! Session modes through `gatehouse mcp`, with the official Python MCP client as the agent
//! (tests/python/mcp_modes.py) and the CLI as the human: each mode, a switch while a card
//! waits, the audit rows each writes (every row of the session names its mode), the chain
//! still verifying, and a session keeping its mode across a broker restart.

#![forbid(unsafe_code)]

mod mcp_support;

use gatehouse_tests::Conn;
use ipc_schema::mode::SessionMode;
use ipc_schema::tool::{ToolCall, ToolReply};
use ipc_schema::ui::{AuditEntry, AuditKind, ModeSetter, UiReply, UiRequest};
use ipc_schema::Body;
use mcp_support::*;
use serde_json::Value;
use std::process::Command;

/// The default profile in `mode` (none: the `mode` key left out): write_file asks, writes to
/// deny-* are denied by a rule, reads are allowed.
fn policy(mode: Option<&str>) -> String {
    let mode = mode
        .map(|m| format!("mode = \"{m}\"\n"))
        .unwrap_or_default();
    format!(
        r#"{mode}[tools]
read_file = "allow"
list_dir = "allow"
write_file = "ask"
[[grant]]
root = "{{ROOT}}"
capabilities = ["read", "write", "edit"]
[[rule]]
name = "no-deny-files"
tools = ["write_file"]
paths = ["{{ROOT}}/deny-*"]
action = "deny"
"#
    )
}

fn run_script(inst: &Instance, venv: &str, scenario: &str) -> Value {
    let script = source_dir().join("tests/python/mcp_modes.py");
    assert!(script.exists(), "{} is missing", script.display());
    let out = Command::new(python(venv))
        .arg(&script)
        .arg(scenario)
        .arg("--gatehouse")
        .arg(gatehouse_tests::bin("gatehouse"))
        .arg("--data-dir")
        .arg(&inst.data)
        .arg("--project")
        .arg(&inst.project)
        .current_dir(&inst.project)
        .output()
        .expect("run python");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{scenario} failed:\n{stderr}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout
        .lines()
        .last()
        .unwrap_or_else(|| panic!("no summary; stderr:\n{stderr}"));
    serde_json::from_str(last).unwrap_or_else(|e| panic!("{e}: {last}"))
}

fn rows_of(b: &Broker, sid: &str) -> Vec<AuditEntry> {
    b.audit()
        .into_iter()
        .filter(|r| r.session.as_deref() == Some(sid))
        .collect()
}

fn verify(b: &Broker) {
    let out = b.cli(&["verify-audit"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("chain intact"), "{text}");
}

/// Every row of the session names `mode`.
fn all_rows_in(rows: &[AuditEntry], mode: SessionMode) {
    assert!(!rows.is_empty());
    for r in rows {
        assert_eq!(r.mode, Some(mode), "{r:?}");
    }
}

#[test]
fn ask_mode_waits_for_the_card_which_names_the_mode() {
    let inst = Instance::new(Some(&policy(None)));
    let b = inst.broker(&[]);
    let s = run_script(&inst, MCP1, "ask");
    let sid = s["session"].as_str().unwrap();
    assert_eq!(
        std::fs::read_to_string(inst.file("ask-a.txt")).unwrap(),
        "a\n"
    );
    let rows = rows_of(&b, sid);
    all_rows_in(&rows, SessionMode::Ask);
    assert!(
        rows.iter().any(|r| r.kind == AuditKind::Proposal),
        "{rows:?}"
    );
    assert!(
        !rows.iter().any(|r| r.outcome == "allowed by mode"),
        "{rows:?}"
    );
    verify(&b);
}

#[test]
fn full_access_runs_what_asks_without_a_card_and_deny_protected_and_ledger_still_hold() {
    let inst = Instance::new(Some(&policy(Some("full-access"))));
    let b = inst.broker(&[]);
    let s = run_script(&inst, MCP1, "full-access");
    let sid = s["session"].as_str().unwrap();
    assert_eq!(std::fs::read_to_string(inst.file("fa.txt")).unwrap(), "f\n");
    assert!(!inst.file("deny-me.txt").exists());
    assert!(!inst.file(".git/config").exists());
    let rows = rows_of(&b, sid);
    all_rows_in(&rows, SessionMode::FullAccess);
    assert!(
        !rows.iter().any(|r| r.kind == AuditKind::Proposal),
        "no card: {rows:?}"
    );
    let by_mode: Vec<_> = rows
        .iter()
        .filter(|r| r.kind == AuditKind::Decision && r.outcome == "allowed by mode")
        .collect();
    assert_eq!(
        by_mode.len(),
        1,
        "one run without a card (the repeat came from the ledger): {rows:?}"
    );
    assert!(
        by_mode[0].detail.starts_with(&format!(
            "ran without a card: session {sid} is in full-access mode"
        )),
        "{:?}",
        by_mode[0]
    );
    assert_eq!(
        by_mode[0].target.as_deref(),
        Some(inst.file("fa.txt").to_str().unwrap())
    );
    // The ledger row went proposed -> pending with the same reason, then ran once.
    assert!(
        rows.iter()
            .any(|r| r.outcome == "done" && r.tool.as_deref() == Some("write_file")),
        "{rows:?}"
    );
    verify(&b);
}

#[test]
fn unattended_refuses_what_asks_at_once_and_nothing_waits() {
    let inst = Instance::new(Some(&policy(Some("unattended"))));
    let b = inst.broker(&[]);
    let s = run_script(&inst, MCP2, "unattended");
    let sid = s["session"].as_str().unwrap();
    assert!(!inst.file("un.txt").exists());
    let rows = rows_of(&b, sid);
    all_rows_in(&rows, SessionMode::Unattended);
    assert!(
        !rows.iter().any(|r| r.kind == AuditKind::Proposal),
        "{rows:?}"
    );
    let refusal = rows
        .iter()
        .find(|r| r.kind == AuditKind::Refusal && r.detail.contains("is unattended"))
        .unwrap_or_else(|| panic!("{rows:?}"));
    assert!(
        refusal.detail.starts_with(&format!(
            "refused: session {sid} is unattended, and the policy asks before write_file on {}",
            inst.file("un.txt").display()
        )),
        "{refusal:?}"
    );
    verify(&b);
}

#[test]
fn a_switch_while_a_card_waits_answers_it_as_the_new_mode_would() {
    let inst = Instance::new(Some(&policy(None)));
    let b = inst.broker(&[]);
    let s = run_script(&inst, MCP2, "switch");
    let sid = s["session"].as_str().unwrap();
    assert_eq!(
        std::fs::read_to_string(inst.file("sw-a.txt")).unwrap(),
        "a\n"
    );
    assert_eq!(
        std::fs::read_to_string(inst.file("sw-b.txt")).unwrap(),
        "b\n"
    );
    let rows = rows_of(&b, sid);
    let changes: Vec<(&str, Option<SessionMode>)> = rows
        .iter()
        .filter(|r| r.outcome == "mode changed")
        .map(|r| (r.detail.as_str(), r.mode))
        .collect();
    assert_eq!(
        changes,
        [
            (
                "mode ask -> full-access, by gatehouse session mode",
                Some(SessionMode::FullAccess)
            ),
            (
                "mode full-access -> ask, by gatehouse session mode",
                Some(SessionMode::Ask)
            ),
            (
                "mode ask -> unattended, by gatehouse session mode",
                Some(SessionMode::Unattended)
            ),
            (
                "mode unattended -> ask, by gatehouse session mode",
                Some(SessionMode::Ask)
            ),
        ]
    );
    assert!(rows
        .iter()
        .all(|r| r.actor != "ui" || r.outcome == "mode changed" || r.kind == AuditKind::Decision));
    // The card answered by the switch to full-access, and the one refused by the switch to
    // unattended, each with its row under the mode it was answered in.
    let answered: Vec<_> = rows
        .iter()
        .filter(|r| r.detail.contains("answered by the switch to"))
        .map(|r| (r.outcome.as_str(), r.mode))
        .collect();
    assert_eq!(
        answered,
        [
            ("allowed by mode", Some(SessionMode::FullAccess)),
            ("refused", Some(SessionMode::Unattended)),
        ],
        "{rows:?}"
    );
    for r in &rows {
        assert!(r.mode.is_some(), "{r:?}");
    }
    verify(&b);
}

/// A session's mode is stored: after a broker restart, the session carried on with its token
/// keeps the mode the human set, and the gateway's channel cannot send a mode change.
#[test]
fn a_resumed_session_keeps_its_mode_and_the_gateway_cannot_set_one() {
    let inst = Instance::new(Some(&policy(None)));
    let b = inst.broker(&[]);
    let mut gw = Conn::connect(&b.data.join("run/gateway.sock")).unwrap();
    gw.set_timeout(Some(PATIENCE));
    let (sid, token) = match gw.request(Body::ToolCall(ToolCall::OpenSession {
        resume: None,
        profile: None,
    })) {
        Body::ToolReply(ToolReply::Session(info)) => (info.session, info.resume),
        other => panic!("{other:?}"),
    };
    // The human sets it, on the ui channel.
    match b.ui().request(Body::Ui(UiRequest::SetSessionMode {
        session: sid.clone(),
        mode: SessionMode::Unattended,
        by: ModeSetter::Console,
    })) {
        Body::UiReply(UiReply::SessionModeSet {
            old, new, answered, ..
        }) => {
            assert_eq!(
                (old, new, answered),
                (SessionMode::Ask, SessionMode::Unattended, 0)
            )
        }
        other => panic!("{other:?}"),
    }
    // The agent's channel: the same request is fatal to the peer that sends it (a separate
    // process: the broker kills it), and sets nothing.
    let forged = ipc_schema::codec::encode(&ipc_schema::Envelope::new(
        1,
        Body::Ui(UiRequest::SetSessionMode {
            session: sid.clone(),
            mode: SessionMode::FullAccess,
            by: ModeSetter::Cli,
        }),
    ))
    .unwrap();
    let st = gatehouse_tests::misbehaving_peer(&b.data.join("run/gateway.sock"), &forged);
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&st),
        Some(libc::SIGKILL),
        "{st:?}"
    );
    // (Audit-only rows are group-committed after the event they record: wait for it, bounded.)
    let killed = |rows: &[ipc_schema::ui::AuditEntry]| {
        rows.iter()
            .any(|r| r.kind == AuditKind::PeerKilled && r.actor == "gateway")
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let mut rows = b.audit();
    while !killed(&rows) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
        rows = b.audit();
    }
    assert!(killed(&rows), "no peer-killed row: {rows:#?}");
    let out = b.cli(&["--json", "session", "list"]);
    let list: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        list[0]["mode"], "unattended",
        "the forged change set nothing: {list}"
    );
    drop(gw);
    drop(b);

    let b = inst.broker(&[]);
    // Before the session is carried on, the new broker has it in the store only: its mode can
    // still be changed there (and is read back from there).
    let set = |mode: &str| -> Value {
        let out = b.cli(&["--json", "session", "mode", &sid.0, mode]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    };
    assert_eq!(set("full-access")["old"], "unattended");
    assert_eq!(set("unattended")["old"], "full-access");
    let out = b.cli(&["session", "mode", "no-such-session", "ask"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("there is no session no-such-session"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut m = inst.mcp_with(
        &gatehouse_tests::bin("gatehouse"),
        &[],
        &[("GATEHOUSE_SESSION_TOKEN", &token.0)],
    );
    m.initialize("2025-06-18");
    let (err, text) = m.call(
        "write_file",
        serde_json::json!({"path": "after.txt", "content": "x"}),
    );
    assert!(err, "{text}");
    assert!(
        text.contains(&format!("session {sid} is unattended")),
        "{text}"
    );
    assert!(!inst.file("after.txt").exists());
    let out = b.cli(&["--json", "session", "list"]);
    let list: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(list[0]["session"], sid.0.as_str(), "{list}");
    assert_eq!(list[0]["mode"], "unattended", "{list}");
    let resumed = rows_of(&b, &sid.0);
    assert!(
        resumed
            .iter()
            .any(|r| r.outcome == "resumed" && r.mode == Some(SessionMode::Unattended)),
        "{resumed:?}"
    );
    // `doctor` names it too.
    let out = b.cli(&["--json", "doctor"]);
    let doc = String::from_utf8_lossy(&out.stdout);
    assert!(
        doc.contains(&format!(
            "session {sid} (profile default, connected): mode unattended"
        )),
        "{doc}"
    );
    verify(&b);
}
