// Drives the Linux binaries (ipc_schema::platform::Missing elsewhere).
#![cfg(target_os = "linux")]
//! The tool path end to end: gateway socket -> ToolCall -> policy -> proposal -> ledger ->
//! fs-helper -> ToolReply, with the audit log recording each step and no file content.

#![forbid(unsafe_code)]

mod broker_core_support;

use broker_core_support::*;
use ipc_schema::fs::FsErrorKind;
use ipc_schema::tool::{Action, ListDir, RefusalKind, ToolCall, ToolReply, ToolResult};
use ipc_schema::ui::Choice;
use ipc_schema::Body;

#[test]
fn default_profile_reads_asks_writes_and_answers_repeats_from_the_ledger() {
    // No policy file: the default profile, granting --grant-root.
    let inst = Instance::new(None);
    std::fs::write(inst.file("hello.txt"), "hello\n").unwrap();
    let root = inst.project.display().to_string();
    let b = inst.start(&["--grant-root", &root]);
    let mut gw = b.gateway();
    let mut ui = b.ui();

    // Reads are allowed inside the grant.
    match gw.call(read_call(&inst.file("hello.txt"))) {
        ToolReply::Done(d) => {
            let ToolResult::File(f) = &d.result else {
                panic!("{d:?}")
            };
            assert_eq!(f.data, b"hello\n");
            assert_eq!(d.verdict.action, Action::Allow);
            assert!(
                d.verdict.rule.starts_with("tools.read_file default"),
                "{:?}",
                d.verdict
            );
            assert!(!d.from_ledger);
        }
        other => panic!("{other:?}; log:\n{}", b.log()),
    }
    match gw.call(ToolCall::ListDir(ListDir {
        path: abs(&inst.project),
        offset: 0,
        limit: 0,
    })) {
        ToolReply::Done(d) => assert!(matches!(d.result, ToolResult::Listing(_))),
        other => panic!("{other:?}"),
    }

    // A write asks; the card shows the resolved target and the diff.
    let secret_content = "SECRET-CONTENT-7f3a9\n";
    let call = write_call(&inst.file("new.txt"), secret_content);
    let id = gw.send(call.clone());
    let waiting = match gw.next_for(id).unwrap() {
        ToolReply::AwaitingApproval(w) => w,
        other => panic!("{other:?}"),
    };
    let p = ui.wait_pending(1).remove(0);
    assert_eq!(p.id, waiting.proposal);
    assert_eq!(p.target, inst.file("new.txt").display().to_string());
    assert_eq!(p.tool.name(), "write_file");
    assert!(p.rule.starts_with("tools.write_file default"), "{}", p.rule);
    assert!(p.effect.starts_with("create "), "{}", p.effect);
    assert!(
        p.diff
            .as_deref()
            .unwrap_or("")
            .contains("+SECRET-CONTENT-7f3a9"),
        "{:?}",
        p.diff
    );
    assert!(
        !std::path::Path::new(&inst.file("new.txt")).exists(),
        "nothing happens before the decision"
    );
    assert!(matches!(ui.decide(&p, Choice::AllowOnce), Body::UiReply(_)));
    match gw.final_for(id).unwrap() {
        ToolReply::Done(d) => {
            assert!(matches!(d.result, ToolResult::Changed(_)));
            assert_eq!(d.proposal, Some(p.id));
            assert!(!d.from_ledger);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        std::fs::read_to_string(inst.file("new.txt")).unwrap(),
        secret_content
    );

    // The same call again in the session: answered from the ledger, not carried out again.
    std::fs::write(inst.file("new.txt"), "changed by hand").unwrap();
    match gw.call(call) {
        ToolReply::Done(d) => assert!(d.from_ledger, "{d:?}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        std::fs::read_to_string(inst.file("new.txt")).unwrap(),
        "changed by hand"
    );
    assert!(
        ui.pending().is_empty(),
        "no new proposal for a repeated call"
    );

    // Protected paths and places outside the grant are refused whatever the policy says.
    std::fs::create_dir_all(inst.file(".ssh")).unwrap();
    std::fs::write(inst.file(".ssh/id_ed25519"), "key").unwrap();
    match gw.call(read_call(&inst.file(".ssh/id_ed25519"))) {
        ToolReply::Refused(r) => {
            assert!(
                matches!(r.kind, RefusalKind::Contained | RefusalKind::Denied),
                "{r:?}"
            );
            assert!(r.message.contains(".ssh"), "{r:?}");
        }
        other => panic!("{other:?}"),
    }
    match gw.call(read_call(std::path::Path::new("/etc/hostname"))) {
        ToolReply::Refused(r) => assert_eq!(r.kind, RefusalKind::Contained, "{r:?}"),
        other => panic!("{other:?}"),
    }
    // A read of a missing file is a failure with the helper's typed error, not a refusal.
    match gw.call(read_call(&inst.file("missing.txt"))) {
        ToolReply::Failed(f) => assert_eq!(f.fs.map(|e| e.kind), Some(FsErrorKind::NotFound)),
        other => panic!("{other:?}"),
    }

    // fetch_url, http_request and run_command: tests/tests/tools_net.rs, tools_exec.rs.

    drop(gw);
    drop(ui);
    drop(b);
    // The audit log has every step, verifies, and holds no file content.
    let rows = audit_rows(&inst);
    let has = |kind: &str, outcome: &str| {
        rows.iter()
            .any(|r| r["kind"] == kind && r["outcome"] == outcome)
    };
    for (kind, outcome) in [
        ("broker", "started"),
        ("helper_start", "ready"),
        ("tool_call", "ask"),
        ("proposal", "asked"),
        ("decision", "allow once"),
        ("execution", "proposed"),
        ("execution", "pending"),
        ("execution", "executing"),
        ("execution", "done"),
        ("tool_call", "from_ledger"),
        ("refusal", "refused"),
        ("read", "done"),
        ("broker", "stopped"),
    ] {
        assert!(has(kind, outcome), "no {kind}/{outcome} row in {rows:#?}");
    }
    // The human's decision names the proposal's session and tool, like the rows around it.
    let asked = rows
        .iter()
        .find(|r| r["kind"] == "proposal" && r["outcome"] == "asked")
        .expect("a proposal row");
    let decided = rows
        .iter()
        .find(|r| r["kind"] == "decision" && r["outcome"] == "allow once")
        .expect("a decision row");
    assert!(asked["session"].is_string(), "{asked}");
    assert_eq!(
        (&decided["session"], &decided["tool"]),
        (&asked["session"], &asked["tool"]),
        "{decided}"
    );
    // An allowed read is one row, carrying the rule that allowed it.
    assert!(
        rows.iter().any(|r| r["kind"] == "read"
            && r["outcome"] == "done"
            && r["detail"]
                .as_str()
                .unwrap()
                .starts_with("tools.read_file default")),
        "{rows:#?}"
    );
    let (st, v) = verify(&inst);
    assert!(st.success(), "{v}");
    assert_eq!(
        v["message"],
        format!("{} entries, chain intact", rows.len())
    );
    for f in std::fs::read_dir(inst.root().join("data")).unwrap() {
        let f = f.unwrap().path();
        if f.is_file() {
            let bytes = std::fs::read(&f).unwrap();
            assert!(
                !bytes.windows(14).any(|w| w == b"SECRET-CONTENT"),
                "file content in {}",
                f.display()
            );
        }
    }
}

#[test]
fn a_session_resumes_on_a_new_connection_and_keeps_its_ledger() {
    let inst = Instance::new(Some(&policy_with("write_file = \"allow\"", "")));
    let b = inst.start(&[]);
    let mut gw = b.gateway();
    let s = gw.open_session(None);
    assert!(!s.resumed);
    let call = write_call(&inst.file("a.txt"), "one");
    assert!(matches!(gw.call(call.clone()), ToolReply::Done(d) if !d.from_ledger));
    drop(gw);
    let mut gw2 = b.gateway();
    let s2 = gw2.open_session(Some(s.resume.clone()));
    assert!(s2.resumed);
    assert_eq!(s2.session, s.session);
    assert!(matches!(gw2.call(call.clone()), ToolReply::Done(d) if d.from_ledger));
    // A fresh session does the same call anew.
    let mut gw3 = b.gateway();
    assert!(matches!(gw3.call(call), ToolReply::Done(d) if !d.from_ledger));
    // An unknown token is refused.
    let mut gw4 = b.gateway();
    match gw4.0.request(Body::ToolCall(ToolCall::OpenSession {
        resume: Some(ipc_schema::tool::ResumeToken("00".repeat(32))),
        profile: None,
    })) {
        Body::Error(e) => assert_eq!(e.message, "unknown resume token: no such session"),
        other => panic!("{other:?}"),
    }
}
