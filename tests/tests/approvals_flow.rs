// Drives the Linux binaries (ipc_schema::platform::Missing elsewhere).
#![cfg(target_os = "linux")]
//! Approvals: decisions only from the ui channel, bound to the digest, counted once, expiring
//! into a deny; "always" decisions survive a restart, "session" ones stay in their session.

#![forbid(unsafe_code)]

mod broker_core_support;

use broker_core_support::*;
use gatehouse_tests::misbehaving_peer;
use ipc_schema::codec::encode;
use ipc_schema::tool::{ProposalId, RefusalKind, ToolReply};
use ipc_schema::ui::{Choice, Decision, ProposalDigest, UiRequest};
use ipc_schema::{Body, Envelope, ErrorCode};
use std::os::unix::process::ExitStatusExt;

#[test]
fn a_gateway_that_sends_a_decision_is_killed_and_decides_nothing() {
    let inst = Instance::new(Some(&policy_with("write_file = \"ask\"", "")));
    let b = inst.start(&[]);
    let mut gw = b.gateway();
    let id = gw.send(write_call(&inst.file("x.txt"), "x"));
    let mut ui = b.ui();
    let p = ui.wait_pending(1).remove(0);
    // The agent's channel tries to approve its own call, with the right digest.
    let forged = encode(&Envelope::new(
        1,
        Body::Ui(UiRequest::Decide(Decision {
            proposal: p.id,
            digest: p.digest,
            choice: Choice::AlwaysAllow,
        })),
    ))
    .unwrap();
    let st = misbehaving_peer(&b.gateway_socket(), &forged);
    assert_eq!(st.signal(), Some(libc::SIGKILL), "{st:?}");
    // Still pending: the forged decision counted for nothing.
    assert_eq!(ui.pending().len(), 1);
    assert!(
        b.log()
            .contains("Ui message, which the gateway may not send"),
        "{}",
        b.log()
    );
    assert!(matches!(ui.decide(&p, Choice::Deny), Body::UiReply(_)));
    match gw.final_for(id).unwrap() {
        ToolReply::Refused(r) => {
            assert_eq!((r.kind, r.proposal), (RefusalKind::HumanDenied, Some(p.id)))
        }
        other => panic!("{other:?}"),
    }
    assert!(!inst.file("x.txt").exists());
    drop(b);
    let rows = audit_rows(&inst);
    assert!(
        rows.iter()
            .any(|r| r["kind"] == "peer_killed" && r["actor"] == "gateway"),
        "{rows:#?}"
    );
}

#[test]
fn digest_mismatch_double_decision_and_unknown_proposals_are_refused() {
    let inst = Instance::new(Some(&policy_with("write_file = \"ask\"", "")));
    let b = inst.start(&[]);
    let mut gw = b.gateway();
    let id = gw.send(write_call(&inst.file("x.txt"), "x"));
    let mut ui = b.ui();
    let p = ui.wait_pending(1).remove(0);
    let mut wrong = p.digest.0;
    wrong[0] ^= 1;
    match ui.request(UiRequest::Decide(Decision {
        proposal: p.id,
        digest: ProposalDigest(wrong),
        choice: Choice::AllowOnce,
    })) {
        Body::Error(e) => {
            assert_eq!(e.code, ErrorCode::Refused);
            assert_eq!(e.message, format!("the digest does not match proposal {}: the decision is not about what the broker showed", p.id));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        ui.pending().len(),
        1,
        "a mismatched decision decides nothing"
    );
    assert!(matches!(ui.decide(&p, Choice::AllowOnce), Body::UiReply(_)));
    match ui.decide(&p, Choice::Deny) {
        Body::Error(e) => assert_eq!(
            e.message,
            "the proposal has already been decided (allow once)"
        ),
        other => panic!("{other:?}"),
    }
    assert!(matches!(gw.final_for(id).unwrap(), ToolReply::Done(_)));
    match ui.request(UiRequest::Decide(Decision {
        proposal: ProposalId(999),
        digest: p.digest,
        choice: Choice::AllowOnce,
    })) {
        Body::Error(e) => assert_eq!(e.message, "there is no proposal #999"),
        other => panic!("{other:?}"),
    }
    // The CLI ui peer says the same.
    let out = inst.cli(&["approve", &p.id.0.to_string(), "deny"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("the proposal has already been decided (allow once)"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn no_answer_means_deny_and_a_late_decision_is_refused() {
    let inst = Instance::new(Some(
        &policy_with("write_file = \"ask\"", "")
            .replace("expire_after_secs = 60", "expire_after_secs = 1"),
    ));
    let b = inst.start(&[]);
    let mut gw = b.gateway();
    let call = write_call(&inst.file("x.txt"), "x");
    let id = gw.send(call.clone());
    let mut ui = b.ui();
    let p = ui.wait_pending(1).remove(0);
    match gw.final_for(id).unwrap() {
        ToolReply::Refused(r) => {
            assert_eq!(r.kind, RefusalKind::Expired);
            assert_eq!(
                r.message,
                format!(
                    "nobody decided proposal {} within 1 s; no answer means deny",
                    p.id
                )
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(!inst.file("x.txt").exists());
    match ui.decide(&p, Choice::AllowOnce) {
        Body::Error(e) => assert_eq!(
            e.message,
            format!(
                "the proposal {} expired before the decision arrived; no answer means deny",
                p.id
            )
        ),
        other => panic!("{other:?}"),
    }
    // The same call again is answered with its state, not turned into a new proposal.
    match gw.call(call) {
        ToolReply::Refused(r) => {
            assert_eq!(r.kind, RefusalKind::RejectedEarlier);
            assert!(r.message.contains("no answer means deny"), "{}", r.message);
        }
        other => panic!("{other:?}"),
    }
    assert!(ui.pending().is_empty());
}

#[test]
fn always_allow_survives_a_restart_and_session_allow_stays_in_its_session() {
    let inst = Instance::new(Some(&policy_with("write_file = \"ask\"", "")));
    {
        let b = inst.start(&[]);
        let mut gw = b.gateway();
        let mut ui = b.ui();
        // allow for this session: the next write to the same file in this session needs no card.
        let id = gw.send(write_call(&inst.file("s.txt"), "1"));
        let p = ui.wait_pending(1).remove(0);
        assert!(matches!(
            ui.decide(&p, Choice::AllowSession),
            Body::UiReply(_)
        ));
        assert!(matches!(gw.final_for(id).unwrap(), ToolReply::Done(_)));
        match gw.call(write_call(&inst.file("s.txt"), "2")) {
            ToolReply::Done(d) => assert!(
                d.verdict.rule.starts_with("allowed for this session"),
                "{:?}",
                d.verdict
            ),
            other => panic!("{other:?}"),
        }
        // Another session is asked again.
        let mut gw2 = b.gateway();
        let id2 = gw2.send(write_call(&inst.file("s.txt"), "3"));
        let p2 = ui.wait_pending(1).remove(0);
        assert!(matches!(ui.decide(&p2, Choice::Deny), Body::UiReply(_)));
        assert!(matches!(gw2.final_for(id2).unwrap(), ToolReply::Refused(_)));

        // always allow: remembered.
        let id = gw.send(write_call(&inst.file("a.txt"), "1"));
        let p = ui.wait_pending(1).remove(0);
        assert!(matches!(
            ui.decide(&p, Choice::AlwaysAllow),
            Body::UiReply(_)
        ));
        assert!(matches!(gw.final_for(id).unwrap(), ToolReply::Done(_)));
        // always deny: remembered too.
        let id = gw.send(write_call(&inst.file("d.txt"), "1"));
        let p = ui.wait_pending(1).remove(0);
        assert!(matches!(
            ui.decide(&p, Choice::AlwaysDeny),
            Body::UiReply(_)
        ));
        assert!(matches!(gw.final_for(id).unwrap(), ToolReply::Refused(_)));
    }
    let b = inst.start(&[]);
    let mut gw = b.gateway();
    match gw.call(write_call(&inst.file("a.txt"), "after restart")) {
        ToolReply::Done(d) => assert!(d.verdict.rule.contains("always allow"), "{:?}", d.verdict),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        std::fs::read_to_string(inst.file("a.txt")).unwrap(),
        "after restart"
    );
    match gw.call(write_call(&inst.file("d.txt"), "after restart")) {
        ToolReply::Refused(r) => {
            assert_eq!(r.kind, RefusalKind::Denied);
            assert!(r.message.contains("always deny"), "{}", r.message);
        }
        other => panic!("{other:?}"),
    }
    assert!(!inst.file("d.txt").exists());
    let out = inst.cli(&["policy", "show"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&format!(
            "always allow write_file on {}",
            inst.file("a.txt").display()
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "always deny write_file on {}",
            inst.file("d.txt").display()
        )),
        "{text}"
    );
}
