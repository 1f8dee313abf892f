// Drives the Linux binaries (ipc_schema::platform::Missing elsewhere).
#![cfg(target_os = "linux")]
//! `gatehouse demo --interactive` in a real terminal (tmux): the console opens for the agent's
//! edit, the person's key decides it, and the narration goes on with what they chose and what
//! then happened to the file.

#![forbid(unsafe_code)]

mod ui_support;

use gatehouse_tests::bin;
use std::path::Path;
use ui_support::{sh_quote, Tmux};

/// Runs the interactive demo, answers the edit's card with `key`, and returns the whole
/// narration once the demo has ended.
fn demo_deciding_with(key: &str, home: &Path, tmp: &Path) -> String {
    let cmd = format!(
        "HOME={} TMPDIR={} {} demo --interactive; echo demo-exit=$?; sleep 600",
        sh_quote(home),
        sh_quote(tmp),
        sh_quote(&bin("gatehouse"))
    );
    let t = Tmux::start(&cmd, tmp, 150, 50);
    // The whole card: a capture can catch the terminal in the middle of drawing a frame.
    let card = t.wait_for("the edit's card in the console", 60, |s| {
        s.contains("Approval 1 of 1")
            && s.contains("/home/project/src/main.rs")
            && s.contains("+    println!(\"hello from gatehouse\");")
    });
    assert!(
        card.contains("+    println!(\"hello from gatehouse\");"),
        "{card}"
    );
    t.wait_for("the card's keys to be live", 10, |s| {
        !s.contains("keys work in a moment")
    });
    t.keys(key);
    t.wait_for("the demo to end", 60, |s| s.contains("demo-exit="));
    t.history(300)
}

#[test]
fn the_person_approves_the_edit_in_the_console() {
    let home = tempfile::tempdir().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let out = demo_deciding_with("a", home.path(), tmp.path());
    assert!(out.contains("you chose allow once in the console"), "{out}");
    assert!(
        out.contains("✓ done  Edited ~/project/src/main.rs: 1 replacement."),
        "{out}"
    );
    // The other cards are the scripted approver's, and it says so.
    assert!(
        out.contains("approved (allow once) by the demo's scripted approver"),
        "{out}"
    );
    assert!(out.contains("entries, chain intact"), "{out}");
}

#[test]
fn the_person_denies_the_edit_and_the_file_stays_as_it_was() {
    let home = tempfile::tempdir().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let out = demo_deciding_with("d", home.path(), tmp.path());
    assert!(out.contains("you chose deny in the console"), "{out}");
    assert!(
        out.contains("✓ denied by the human  The human refused this call: the human chose deny for proposal #1"),
        "{out}"
    );
    assert!(
        !out.contains("check failed"),
        "the file was left as it was: {out}"
    );
}
