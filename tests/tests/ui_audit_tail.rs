// Drives the Linux binaries (ipc_schema::platform::Missing elsewhere).
#![cfg(target_os = "linux")]
//! The console's live audit tail on the ui socket (`UiRequest::AuditTail`): entries after a
//! given seq, oldest first, the newest `limit` of them.

#![forbid(unsafe_code)]

use gatehouse_tests::BrokerUnderTest;
use ipc_schema::ui::{AuditEntry, UiReply, UiRequest};
use ipc_schema::Body;
use std::time::{Duration, Instant};

fn tail(c: &mut gatehouse_tests::Conn, after: u64, limit: u32) -> Vec<AuditEntry> {
    match c.request(Body::Ui(UiRequest::AuditTail { after, limit })) {
        Body::UiReply(UiReply::Audit(rows)) => rows,
        other => panic!("AuditTail answered {other:?}"),
    }
}

#[test]
fn the_tail_gives_entries_after_a_seq_oldest_first_and_the_newest_when_limited() {
    let b = BrokerUnderTest::start(&[]);
    let mut c = b.ui();
    let deadline = Instant::now() + Duration::from_secs(30);
    let all = loop {
        let all = tail(&mut c, 0, 500);
        if all.len() >= 4 {
            break all;
        }
        assert!(
            Instant::now() < deadline,
            "fewer than 4 audit entries after 30 s: {all:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(all[0].seq, 1);
    assert_eq!(
        (all[0].kind.as_str(), all[0].outcome.as_str()),
        ("broker", "started")
    );
    for w in all.windows(2) {
        assert_eq!(w[1].seq, w[0].seq + 1, "no gaps, oldest first");
    }

    // After a seq: exactly the entries above it (new ones may have come since).
    let k = all[1].seq;
    let after = tail(&mut c, k, 500);
    assert_eq!(after[0].seq, k + 1);
    assert_eq!(&after[..all.len() - 2], &all[2..]);

    // Limited: the newest entries, still oldest first.
    let two = tail(&mut c, 0, 2);
    assert_eq!(two.len(), 2);
    assert_eq!(two[1].seq, two[0].seq + 1);
    assert!(
        two[0].seq >= all[all.len() - 2].seq,
        "{two:?} are not the newest"
    );

    // Past the end: nothing.
    let last = tail(&mut c, 0, 1)[0].seq;
    assert!(tail(&mut c, last + 1000, 10).is_empty());
}
