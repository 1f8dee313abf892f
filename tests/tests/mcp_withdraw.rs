// Drives the Linux binaries (ipc_schema::platform::Missing elsewhere).
#![cfg(target_os = "linux")]
//! Approvals that outlive no one: a call the client cancels while it waits for the human, or
//! whose session closes, is withdrawn: the card closes as withdrawn, an audit row says so, and
//! approving it afterwards carries nothing out. Driven through the real `gatehouse mcp`.

#![forbid(unsafe_code)]

mod mcp_support;

use ipc_schema::ui::{AuditEntry, Choice, Decision, UiReply, UiRequest};
use ipc_schema::{Body, ErrorCode};
use mcp_support::{Broker, Instance, PATIENCE};
use serde_json::json;
use std::time::{Duration, Instant};

fn audit(b: &Broker) -> Vec<AuditEntry> {
    b.audit()
}

fn wait_for_row(b: &Broker, outcome: &str) -> AuditEntry {
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some(r) = audit(b).into_iter().find(|r| r.outcome == outcome) {
            return r;
        }
        assert!(
            Instant::now() < deadline,
            "no {outcome:?} row: {:#?}",
            audit(b)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn decide(b: &Broker, p: &ipc_schema::ui::Proposal, choice: Choice) -> Body {
    b.ui().request(Body::Ui(UiRequest::Decide(Decision {
        proposal: p.id,
        digest: p.digest,
        choice,
    })))
}

fn no_pending(b: &Broker) {
    let deadline = Instant::now() + PATIENCE;
    loop {
        match b.ui().request(Body::Ui(UiRequest::ListPending)) {
            Body::UiReply(UiReply::Pending(p)) if p.is_empty() => return,
            Body::UiReply(UiReply::Pending(p)) => {
                assert!(Instant::now() < deadline, "still pending: {p:#?}")
            }
            other => panic!("{other:?}"),
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Asks for a write (Ask by default) and returns the request id once the card shows.
fn ask_write(
    i: &Instance,
    m: &mut mcp_support::Mcp,
    b: &Broker,
) -> (u64, ipc_schema::ui::Proposal) {
    let id = m.fresh_id();
    m.send(
        &json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
        "name": "write_file",
        "arguments": {"path": i.file("new.txt").to_str().unwrap(), "content": "x\n"}}}),
    );
    let p = b.pending(1).remove(0);
    assert_eq!(p.target, i.file("new.txt").display().to_string());
    (id, p)
}

#[test]
fn a_cancelled_call_withdraws_its_proposal_and_a_later_approval_does_nothing() {
    let i = Instance::new(None);
    let b = i.broker(&[]);
    let mut m = i.mcp(&[]);
    m.initialize("2025-06-18");
    let (id, p) = ask_write(&i, &mut m, &b);
    m.send(
        &json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                   "params": {"requestId": id, "reason": "timed out"}}),
    );
    let row = wait_for_row(&b, "withdrawn");
    assert!(
        row.detail.contains(&format!("proposal {}", p.id)),
        "{row:?}"
    );
    no_pending(&b);
    match decide(&b, &p, Choice::AllowOnce) {
        Body::Error(e) => {
            assert_eq!(e.code, ErrorCode::Refused, "{e:?}");
            assert!(e.message.contains("withdrawn"), "{e:?}");
        }
        other => panic!("a withdrawn proposal took a decision: {other:?}"),
    }
    assert!(!i.file("new.txt").exists());
    // The session goes on: the same call asked again is a new proposal, and approving that
    // one writes the file (the positive control).
    let (id2, p2) = ask_write(&i, &mut m, &b);
    assert_ne!(p2.id, p.id);
    assert!(matches!(
        decide(&b, &p2, Choice::AllowOnce),
        Body::UiReply(_)
    ));
    let r = loop {
        let v = m.recv();
        if v["id"] == json!(id2) {
            break v;
        }
    };
    assert_eq!(r["result"]["isError"], json!(false), "{r}");
    assert_eq!(std::fs::read_to_string(i.file("new.txt")).unwrap(), "x\n");
}

#[test]
fn a_closed_session_withdraws_what_it_left_waiting() {
    let i = Instance::new(None);
    let b = i.broker(&[]);
    let mut m = i.mcp(&[]);
    m.initialize("2025-06-18");
    let (_, p) = ask_write(&i, &mut m, &b);
    m.close();
    assert!(m.wait().success());
    let row = wait_for_row(&b, "withdrawn");
    assert!(
        row.detail.contains(&format!("proposal {}", p.id)),
        "{row:?}"
    );
    no_pending(&b);
    assert!(matches!(decide(&b, &p, Choice::AllowOnce), Body::Error(_)));
    std::thread::sleep(Duration::from_millis(200));
    assert!(!i.file("new.txt").exists());
}
