//! The kill matrix: the broker is SIGKILLed at each dangerous step of an effectful call (a
//! test-only crash point, `--test-crash-at`), restarted on the same database, and the call made
//! again in the same (resumed) session. No effect happens twice; the ledger state is as
//! specified; the repeat is answered from the ledger.
//!
//! The effect is the fs-helper's write_file. After the crash the test overwrites the file with a
//! sentinel: if the repeat carried the write out again, the sentinel would be gone.

#![forbid(unsafe_code)]

mod broker_core_support;

use broker_core_support::*;
use gatehouse_tests::bin_dir;
use ipc_schema::tool::{RefusalKind, ToolReply};
use ipc_schema::ui::{CallState, UiReply, UiRequest};
use ipc_schema::Body;
use std::os::unix::process::ExitStatusExt;
use std::process::Command;

const UNCERTAIN: &str = "gatehouse stopped while carrying it out. Check whether it happened.";
const SENTINEL: &str = "SENTINEL written by the test after the crash";

fn iterations() -> usize {
    std::env::var("GATEHOUSE_KILL_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10)
}

fn uncertain_calls(b: &Broker) -> Vec<ipc_schema::ui::LedgerCall> {
    match b.ui().request(UiRequest::ListUncertain) {
        Body::UiReply(UiReply::Uncertain(l)) => l,
        other => panic!("{other:?}"),
    }
}

/// Runs `step` `iterations()` times on one instance; returns how often the write had happened
/// before the restart (for steps where either outcome is allowed).
fn run_step(step: &str) -> (usize, usize) {
    let inst = Instance::new(Some(&policy_with("write_file = \"allow\"", "")));
    let (mut happened, mut not) = (0, 0);
    for i in 0..iterations() {
        let file = inst.file(&format!("{step}-{i}.txt"));
        let content = format!("written by call {i}");
        let call = write_call(&file, &content);

        let mut b = inst.start(&["--test-crash-at", step]);
        let mut gw = b.gateway();
        let session = gw.open_session(None);
        let id = gw.send(call.clone());
        assert_eq!(
            gw.final_for(id),
            None,
            "{step}#{i}: the broker should have died before answering"
        );
        let st = b.wait_exit();
        assert_eq!(
            st.signal(),
            Some(libc::SIGKILL),
            "{step}#{i}: {st:?}\n{}",
            b.log()
        );
        assert!(
            b.log().contains(&format!("test hook: SIGKILL at {step}")),
            "{}",
            b.log()
        );
        drop(b);

        let before = std::fs::read_to_string(&file).ok();
        match &before {
            Some(c) => {
                assert_eq!(c, &content, "{step}#{i}: a partial write");
                happened += 1;
                std::fs::write(&file, SENTINEL).unwrap();
            }
            None => not += 1,
        }

        let b = inst.start(&[]);
        let mut gw = b.gateway();
        let resumed = gw.open_session(Some(session.resume.clone()));
        assert!(resumed.resumed);
        let repeat = gw.call(call.clone());
        let now = std::fs::read_to_string(&file).ok();
        match step {
            "after-pending" => {
                // Recorded but never handed to the helper: abandoned at start, so the repeat
                // carries it out, once.
                assert_eq!(before, None, "{step}#{i}");
                assert!(
                    matches!(&repeat, ToolReply::Done(d) if !d.from_ledger),
                    "{step}#{i}: {repeat:?}"
                );
                assert_eq!(now.as_deref(), Some(content.as_str()));
                std::fs::write(&file, SENTINEL).unwrap();
                match gw.call(call.clone()) {
                    ToolReply::Done(d) => assert!(d.from_ledger, "{step}#{i}"),
                    other => panic!("{step}#{i}: {other:?}"),
                }
                assert_eq!(
                    std::fs::read_to_string(&file).unwrap(),
                    SENTINEL,
                    "{step}#{i}: carried out twice"
                );
            }
            _ => {
                if step == "after-executing" {
                    assert_eq!(before, None, "{step}#{i}: the helper was never asked");
                }
                if step == "after-answer" {
                    assert!(
                        before.is_some(),
                        "{step}#{i}: the helper had answered, so the write happened"
                    );
                }
                match &repeat {
                    ToolReply::Refused(r) => {
                        assert_eq!(r.kind, RefusalKind::Uncertain, "{step}#{i}: {r:?}");
                        assert_eq!(r.message, UNCERTAIN);
                    }
                    other => panic!("{step}#{i}: {other:?}"),
                }
                // Not carried out again: the sentinel (or the absence) is untouched.
                assert_eq!(
                    now.as_deref(),
                    before.as_ref().map(|_| SENTINEL),
                    "{step}#{i}: carried out again"
                );
                let unc = uncertain_calls(&b);
                let mine: Vec<_> = unc
                    .iter()
                    .filter(|c| c.session == session.session)
                    .collect();
                assert_eq!(mine.len(), 1, "{step}#{i}: {unc:?}");
                assert_eq!(
                    (mine[0].state, mine[0].reason.as_str()),
                    (CallState::Uncertain, UNCERTAIN)
                );
                assert_eq!(mine[0].target, file.display().to_string());
            }
        }
    }
    let (code, v) = verify(&inst);
    assert!(
        code.success(),
        "{step}: the audit log survives the kills: {v}"
    );
    (happened, not)
}

#[test]
fn kill_after_pending() {
    run_step("after-pending");
}

#[test]
fn kill_after_executing() {
    run_step("after-executing");
}

#[test]
fn kill_while_the_helper_works() {
    let (happened, not) = run_step("in-helper");
    eprintln!("in-helper: the write had happened {happened} times, not {not} times");
}

#[test]
fn kill_after_the_helper_answered() {
    run_step("after-answer");
}

#[test]
fn the_release_binary_has_no_crash_hook() {
    let release = bin_dir()
        .parent()
        .expect("target dir")
        .join("release/gatehouse");
    assert!(
        release.exists(),
        "{} is missing: the test command builds it (cargo build --release)",
        release.display()
    );
    let out = Command::new(&release)
        .args(["broker", "--test-crash-at", "after-pending"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("unexpected argument '--test-crash-at'"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The test build has it, so the check is not vacuous: a bad step name is refused by it.
    let out = Command::new(gatehouse_tests::bin("gatehouse"))
        .args([
            "--data-dir",
            "/nonexistent-gh",
            "broker",
            "--test-crash-at",
            "nowhere",
        ])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(
            "--test-crash-at takes one of: after-pending, after-executing, in-helper, after-answer"
        ),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
