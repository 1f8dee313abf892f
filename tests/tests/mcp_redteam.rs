// Drives the Linux binaries (ipc_schema::platform::Missing elsewhere).
#![cfg(target_os = "linux")]
//! Red-team cases against the agent's front, deterministic: forged tool names, bad session
//! tokens, a gateway that tries to decide its own proposal, a flood of effectful calls with
//! nobody approving, and arguments built to slip past the schema.

#![forbid(unsafe_code)]

mod mcp_support;

use gatehouse_tests::Conn;
use ipc_schema::tool::{ResumeToken, ToolCall, ToolReply};
use ipc_schema::ui::{Choice, Decision, ProposalDigest, UiReply, UiRequest};
use ipc_schema::Body;
use mcp_support::*;
use serde_json::{json, Value};
use std::os::unix::process::ExitStatusExt;
use std::process::Command;

/// The audit log's rows (`gatehouse audit tail --json`), newest last.
fn audit_rows(b: &Broker) -> Vec<Value> {
    let out = b.cli(&["--json", "audit", "tail", "-n", "10000"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// The audit rows once `ready` holds for them: audit-only rows are committed by the broker's
/// writer after the event they record (group commit, sealed by the secrets-helper).
fn audit_rows_when(b: &Broker, ready: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let rows = audit_rows(b);
        if ready(&rows) || std::time::Instant::now() > deadline {
            return rows;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

#[test]
fn forged_tool_names_are_refused_as_unknown() {
    let inst = Instance::new(None);
    let _b = inst.broker(&[]);
    let mut m = inst.mcp(&[]);
    m.initialize("2025-06-18");
    for name in [
        "READ_FILE",
        "Read_File",
        " read_file",
        "read_file ",
        "read_file\u{0}",
        "read_file\n",
        "read_file/../write_file",
        "write_file;read_file",
        "tools/call",
        "",
        "read_file\u{200b}",
        "ｒｅａｄ_file",
        "OpenSession",
        "open_session",
        "approve",
        "decide",
    ] {
        let r = m.request(
            "tools/call",
            json!({"name": name, "arguments": {"path": "hello.txt"}}),
        );
        assert_eq!(r["error"]["code"], -32602, "{name:?}: {r}");
        assert_eq!(
            r["error"]["message"],
            format!("Unknown tool: {name}"),
            "{name:?}"
        );
    }
    let r = m.request(
        "tools/call",
        json!({"name": ["read_file"], "arguments": {}}),
    );
    assert_eq!(r["error"]["code"], -32602, "{r}");
    // The real name still works: the refusals above were about the names.
    assert_eq!(
        m.call("read_file", json!({"path": "hello.txt"})),
        (false, "hello\n".into())
    );
}

#[test]
fn nul_bytes_huge_strings_and_wrong_types_are_refused_before_the_broker_sees_them() {
    let inst = Instance::new(None);
    let b = inst.broker(&[]);
    let mut m = inst.mcp(&[]);
    m.initialize("2025-11-25");
    let huge = "a".repeat(1 << 20);
    for (tool, args, expect) in [
        (
            "write_file",
            json!({"path": "evil\u{0}.txt", "content": "x"}),
            "`path` contains a NUL byte",
        ),
        (
            "write_file",
            json!({"path": format!("/{huge}"), "content": "x"}),
            "`path` is 1048577 bytes long; the limit is 4096",
        ),
        (
            "write_file",
            json!({"path": "a.txt", "content": format!("{huge}{huge}")}),
            "the limit is 786432",
        ),
        (
            "write_file",
            json!({"path": "a.txt", "content": {"$bytes": "x"}}),
            "`content` must be a string, not an object",
        ),
        (
            "write_file",
            json!({"path": "a.txt", "content": "x", "create_parents": 1}),
            "`create_parents` must be true or false, not a number",
        ),
        (
            "write_file",
            json!({"path": ["a.txt"], "content": "x"}),
            "`path` must be a string, not an array",
        ),
        (
            "delete_path",
            json!({"path": "hello.txt", "recursive": "true"}),
            "`recursive` must be true or false",
        ),
        (
            "move_path",
            json!({"from": "hello.txt", "to": "x\u{0}"}),
            "`to` contains a NUL byte",
        ),
        (
            "run_command",
            json!({"argv": ["sh", "-c", "echo\u{0}hi"]}),
            "`argv[2]` contains a NUL byte",
        ),
        (
            "run_command",
            json!({"argv": "rm -rf /"}),
            "`argv` must be an array of strings, not a string",
        ),
        (
            "run_command",
            json!({"argv": [huge.clone(), "x"]}),
            "`argv[0]` is 1048576 bytes long",
        ),
        (
            "http_request",
            json!({"method": "POST", "url": "https://a.example/", "headers": {"X": "1\r\nHost: evil"}}),
            "may not contain NUL, CR or LF",
        ),
        (
            "fetch_url",
            json!({"url": format!("https://a.example/{huge}")}),
            "the limit is 8192",
        ),
        (
            "edit_file",
            json!({"path": "hello.txt", "old_text": "hello", "new_text": 7}),
            "`new_text` must be a string, not a number",
        ),
        (
            "read_file",
            json!({"path": "hello.txt", "length": 1e30}),
            "`length` must be a whole number",
        ),
        (
            "read_file",
            json!({"path": "hello.txt", "offset": 18446744073709551616u128.to_string().parse::<f64>().unwrap()}),
            "`offset` must be a whole number",
        ),
    ] {
        let (err, text) = m.call(tool, args.clone());
        assert!(err, "{tool}: {text}");
        assert!(
            text.starts_with(&format!("invalid arguments for {tool}: ")),
            "{tool}: {text}"
        );
        assert!(
            text.contains(expect),
            "{tool} {}: {text}",
            &args.to_string()[..args.to_string().len().min(80)]
        );
    }
    // Nothing of that reached the broker: no proposal, no tool call in the audit log, no file.
    let mut ui = b.ui();
    match ui.request(Body::Ui(UiRequest::ListPending)) {
        Body::UiReply(UiReply::Pending(p)) => assert!(p.is_empty(), "{p:?}"),
        other => panic!("{other:?}"),
    }
    // A valid call after them is the marker: once its row is in, every row before it is too,
    // and it is the only tool call the broker saw.
    assert_eq!(
        m.call("read_file", json!({"path": "hello.txt"})),
        (false, "hello\n".into())
    );
    let rows = audit_rows_when(&b, |rows| rows.iter().any(|r| r["tool"] == "read_file"));
    // Every row that names a tool (reads, tool calls, proposals, refusals).
    let calls: Vec<&Value> = rows.iter().filter(|r| !r["tool"].is_null()).collect();
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(
        (&calls[0]["tool"], &calls[0]["outcome"]),
        (&json!("read_file"), &json!("done")),
        "{calls:?}"
    );
    assert!(
        std::fs::read_dir(&inst.project).unwrap().count() == 1,
        "only hello.txt is there"
    );
}

#[test]
fn fifty_effectful_calls_without_an_approver_become_fifty_proposals_and_no_effect() {
    let inst = Instance::new(Some(
        "revision = 0\n[tools]\nread_file = \"allow\"\nwrite_file = \"ask\"\n[limits]\nrequests_per_minute = 600\n\
         concurrent_requests = 64\n[approvals]\nexpire_after_secs = 600\n\
         [[grant]]\nroot = \"{ROOT}\"\ncapabilities = [\"read\", \"write\", \"edit\", \"delete\"]\n",
    ));
    let b = inst.broker(&[]);
    let mut m = inst.mcp(&["--approval-wait", "2"]);
    m.initialize("2025-06-18");
    for i in 0..50 {
        m.send(&json!({"jsonrpc": "2.0", "id": i, "method": "tools/call",
            "params": {"name": "write_file", "arguments": {"path": format!("f{i}.txt"), "content": "x"}}}));
    }
    let mut proposals = std::collections::BTreeSet::new();
    for _ in 0..50 {
        let r = m.recv();
        let (err, text) = tool_text(&r);
        assert!(err, "{text}");
        let p = text
            .split("proposal #")
            .nth(1)
            .and_then(|t| t.split(' ').next())
            .unwrap_or_else(|| panic!("no proposal named: {text}"));
        assert!(text.contains("Nothing has been done yet"), "{text}");
        proposals.insert(p.to_string());
    }
    assert_eq!(proposals.len(), 50, "fifty distinct proposals");
    let pending = b.pending(50);
    assert_eq!(pending.len(), 50);
    for p in &pending {
        assert_eq!(p.tool.name(), "write_file");
        assert!(
            p.target.starts_with(&inst.project.display().to_string()),
            "{}",
            p.target
        );
    }
    let names: Vec<_> = std::fs::read_dir(&inst.project)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["hello.txt"], "no effect without an approval");
}

#[test]
fn unknown_and_empty_session_tokens_are_refused() {
    let inst = Instance::new(None);
    let _b = inst.broker(&[]);
    let mut m = inst.mcp_with(
        &gatehouse_tests::bin("gatehouse"),
        &[],
        &[("GATEHOUSE_SESSION_TOKEN", "00ff00ff")],
    );
    assert_eq!(m.refused_with("unknown resume token").code(), Some(1));
    assert!(
        m.stderr()
            .contains("the broker refused the session: unknown resume token"),
        "{}",
        m.stderr()
    );
    assert!(
        !m.stderr().contains("00ff00ff"),
        "the token is never logged: {}",
        m.stderr()
    );
    for empty in ["", "   "] {
        let mut m = inst.mcp_with(
            &gatehouse_tests::bin("gatehouse"),
            &[],
            &[("GATEHOUSE_SESSION_TOKEN", empty)],
        );
        assert_eq!(m.refused_with("the session token is empty").code(), Some(1));
        assert!(
            m.stderr()
                .contains("the session token is empty (GATEHOUSE_SESSION_TOKEN or --token-file)"),
            "{}",
            m.stderr()
        );
    }
}

/// A token as `gatehouse run` would hold it: a session opened on the gateway socket.
fn session_token(b: &Broker) -> (String, ResumeToken) {
    let mut gw = Conn::connect(&b.data.join("run/gateway.sock")).unwrap();
    gw.set_timeout(Some(PATIENCE));
    match gw.request(Body::ToolCall(ToolCall::OpenSession {
        resume: None,
        profile: None,
    })) {
        Body::ToolReply(ToolReply::Session(s)) => (s.session.0, s.resume),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_token_carries_its_session_on_and_is_revoked_when_its_gateway_exits() {
    let inst = Instance::new(None);
    let b = inst.broker(&[]);
    let (session, token) = session_token(&b);
    let mut m = inst.mcp_with(
        &gatehouse_tests::bin("gatehouse"),
        &[],
        &[("GATEHOUSE_SESSION_TOKEN", &token.0)],
    );
    m.initialize("2025-06-18");
    assert_eq!(
        m.call("read_file", json!({"path": "hello.txt"})),
        (false, "hello\n".into())
    );
    assert!(
        m.stderr()
            .contains(&format!("session {session} carried on")),
        "{}",
        m.stderr()
    );
    assert!(!m.stderr().contains(&token.0), "the token is never logged");
    m.close();
    assert!(m.wait().success());

    // The session ended with its gateway; its token is revoked.
    let mut again = inst.mcp_with(
        &gatehouse_tests::bin("gatehouse"),
        &[],
        &[("GATEHOUSE_SESSION_TOKEN", &token.0)],
    );
    again.close();
    assert_eq!(
        again.wait().code(),
        Some(1),
        "a revoked token was accepted: {}",
        again.stderr()
    );
    assert!(
        again.stderr().contains("the broker refused the session"),
        "{}",
        again.stderr()
    );
}

const ROGUE_ENV: &str = "GH_TEST_ROGUE_GATEWAY";

#[test]
fn a_gateway_that_sends_a_decision_is_killed_and_the_proposal_stays_undecided() {
    if let Ok(spec) = std::env::var(ROGUE_ENV) {
        // The rogue: this test binary run again as a child, so that the broker kills it and not
        // the test. It connects to the gateway socket and decides the proposal itself.
        let (sock, rest) = spec.split_once('|').unwrap();
        let (id, digest) = rest.split_once('|').unwrap();
        let mut gw = Conn::connect(std::path::Path::new(sock)).unwrap();
        let digest: Vec<u8> = (0..64)
            .step_by(2)
            .map(|i| u8::from_str_radix(&digest[i..i + 2], 16).unwrap())
            .collect();
        gw.send(Body::Ui(UiRequest::Decide(Decision {
            proposal: ipc_schema::tool::ProposalId(id.parse().unwrap()),
            digest: ProposalDigest(digest.try_into().unwrap()),
            choice: Choice::AllowOnce,
        })));
        std::thread::sleep(PATIENCE);
        std::process::exit(3);
    }
    let inst = Instance::new(None);
    let b = inst.broker(&[]);
    let mut m = inst.mcp(&[]);
    m.initialize("2025-06-18");
    m.send(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "write_file", "arguments": {"path": "owned.txt", "content": "x"}}}));
    let p = b.pending(1).remove(0);
    let digest: String = p.digest.0.iter().map(|b| format!("{b:02x}")).collect();
    let status = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "a_gateway_that_sends_a_decision_is_killed_and_the_proposal_stays_undecided",
            "--nocapture",
        ])
        .env(
            ROGUE_ENV,
            format!(
                "{}|{}|{digest}",
                b.data.join("run/gateway.sock").display(),
                p.id.0
            ),
        )
        .status()
        .unwrap();
    assert_eq!(
        status.signal(),
        Some(libc::SIGKILL),
        "the rogue gateway was not killed: {status}"
    );
    // The proposal is still waiting, nothing was written, and the kill is in the audit log.
    let still = b.pending(1);
    assert_eq!(still.len(), 1);
    assert_eq!(still[0].id, p.id);
    assert!(!inst.file("owned.txt").exists());
    let killed = |r: &Value| {
        r["kind"] == "peer_killed"
            && r["actor"] == "gateway"
            && r["detail"]
                .as_str()
                .unwrap_or("")
                .contains("Ui message, which the gateway may not send")
    };
    let rows = audit_rows_when(&b, |rows| rows.iter().any(killed));
    assert!(rows.iter().any(killed), "{rows:?}");
    // The real gateway's session is unaffected.
    assert_eq!(
        m.call("read_file", json!({"path": "hello.txt"})),
        (false, "hello\n".into())
    );
}

#[test]
fn a_tool_the_policy_denies_is_not_listed_and_a_direct_call_is_refused_as_unknown() {
    let policy = r#"
revision = 1

[tools]
read_file = "allow"
list_dir = "allow"
delete_path = "deny"
write_file = "deny"

[[grant]]
root = "{ROOT}"
recursive = true
capabilities = ["read", "write", "edit", "delete"]

[[rule]]
name = "writes-to-notes"
tools = ["write_file"]
paths = ["{ROOT}/notes/**"]
action = "ask"
"#;
    let inst = Instance::new(Some(policy));
    let _b = inst.broker(&[]);
    let mut m = inst.mcp(&[]);
    m.initialize("2025-06-18");
    let listed = m.request("tools/list", json!({}));
    let names: Vec<String> = listed["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("{listed}"))
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect();
    // Denied outright: not offered.
    assert!(!names.contains(&"delete_path".to_string()), "{names:?}");
    // Denied by default but asked by a rule for some targets: still offered.
    assert!(names.contains(&"write_file".to_string()), "{names:?}");
    // Positive controls.
    assert!(names.contains(&"read_file".to_string()), "{names:?}");
    assert!(names.contains(&"move_path".to_string()), "{names:?}");

    let r = m.request(
        "tools/call",
        json!({"name": "delete_path", "arguments": {"path": "hello.txt"}}),
    );
    assert_eq!(r["error"]["code"], -32602, "{r}");
    assert_eq!(r["error"]["message"], "Unknown tool: delete_path", "{r}");
    assert!(inst.file("hello.txt").exists());
    assert_eq!(
        m.call("read_file", json!({"path": "hello.txt"})),
        (false, "hello\n".into())
    );
}
