// Drives the Linux binaries (ipc_schema::platform::Missing elsewhere).
#![cfg(target_os = "linux")]
//! Policy through the running broker: an invalid file refuses everything with the reason;
//! revisioned apply; rate limits named in the refusal.

#![forbid(unsafe_code)]

mod broker_core_support;

use broker_core_support::*;
use ipc_schema::tool::{RefusalKind, ToolReply};

#[test]
fn an_invalid_policy_file_refuses_every_call_with_the_reason() {
    let inst = Instance::new(Some("revision = 2\n[tools]\nread_file = \"sometimes\"\n"));
    std::fs::write(inst.file("a.txt"), "a").unwrap();
    let b = inst.start(&[]);
    let mut gw = b.gateway();
    for call in [
        read_call(&inst.file("a.txt")),
        write_call(&inst.file("b.txt"), "b"),
    ] {
        match gw.call(call) {
            ToolReply::Refused(r) => {
                assert_eq!(r.kind, RefusalKind::PolicyInvalid);
                assert!(r.message.contains("does not parse"), "{}", r.message);
                assert!(
                    r.message.contains("unknown variant `sometimes`"),
                    "{}",
                    r.message
                );
            }
            other => panic!("{other:?}"),
        }
    }
    let out = inst.cli(&["policy", "show"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("# INVALID:"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    // Fixing it with an apply at the file's revision works, and calls go through again.
    let fixed = inst.root().join("fixed.toml");
    std::fs::write(
        &fixed,
        policy_with("", "")
            .replace("revision = 0", "revision = 2")
            .replace("{ROOT}", &inst.project.display().to_string()),
    )
    .unwrap();
    let out = inst.cli(&["policy", "apply", fixed.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "policy revision 3 applied\n"
    );
    // The fs-helper is restarted with the new grant once idle; the read then succeeds.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        match gw.call(read_call(&inst.file("a.txt"))) {
            ToolReply::Done(_) => break,
            other => assert!(
                std::time::Instant::now() < deadline,
                "{other:?}\n{}",
                b.log()
            ),
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

#[test]
fn apply_is_revisioned_and_a_stale_document_is_refused_whole() {
    let inst = Instance::new(Some(&policy_with("", "")));
    std::fs::write(inst.file("a.txt"), "a").unwrap();
    let b = inst.start(&[]);
    let mut gw = b.gateway();
    assert!(matches!(
        gw.call(read_call(&inst.file("a.txt"))),
        ToolReply::Done(_)
    ));
    let doc = inst.root().join("next.toml");
    let deny_reads = policy_with("", "[[rule]]\nname = \"no-a\"\ntools = [\"read_file\"]\npaths = [\"**/a.txt\"]\naction = \"deny\"\n")
        .replace("{ROOT}", &inst.project.display().to_string());
    std::fs::write(&doc, &deny_reads).unwrap();
    let out = inst.cli(&["--json", "policy", "apply", doc.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()["revision"],
        1
    );
    match gw.call(read_call(&inst.file("a.txt"))) {
        ToolReply::Refused(r) => {
            assert_eq!(r.kind, RefusalKind::Denied);
            assert_eq!(r.message, "denied by rule \"no-a\" (policy revision 1)");
        }
        other => panic!("{other:?}"),
    }
    // The same document (revision 0) again is stale now: refused whole, nothing changes.
    let before = std::fs::read_to_string(inst.root().join("config/policy.toml")).unwrap();
    let out = inst.cli(&["policy", "apply", doc.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("its revision 0 is stale; the policy in force is revision 1"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(inst.root().join("config/policy.toml")).unwrap(),
        before
    );
    // An invalid document at the right revision is refused whole too.
    std::fs::write(
        &doc,
        "revision = 1\n[[rule]]\ntools = [\"nope\"]\naction = \"allow\"\n",
    )
    .unwrap();
    let out = inst.cli(&["policy", "apply", doc.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("unknown tool \"nope\""),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = inst.cli(&["policy", "show"]);
    assert!(
        String::from_utf8_lossy(&out.stdout).starts_with("# policy revision 1 from "),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn rate_limits_refuse_with_the_limit_named() {
    let inst = Instance::new(Some(&policy_with("", "").replace(
        "[approvals]",
        "[limits]\nrequests_per_minute = 3\nconcurrent_requests = 2\n[approvals]",
    )));
    std::fs::write(inst.file("a.txt"), "a").unwrap();
    let b = inst.start(&[]);
    let mut gw = b.gateway();
    for _ in 0..3 {
        assert!(matches!(
            gw.call(read_call(&inst.file("a.txt"))),
            ToolReply::Done(_)
        ));
    }
    match gw.call(read_call(&inst.file("a.txt"))) {
        ToolReply::Refused(r) => {
            assert_eq!(r.kind, RefusalKind::RateLimited);
            assert_eq!(r.message, "rate limit: this session made 3 calls in the last minute (limits.requests_per_minute = 3)");
        }
        other => panic!("{other:?}"),
    }
    // Another session has its own budget.
    assert!(matches!(
        b.gateway().call(read_call(&inst.file("a.txt"))),
        ToolReply::Done(_)
    ));
}
