// Drives the Linux binaries (ipc_schema::platform::Missing elsewhere).
#![cfg(target_os = "linux")]
//! The kill matrix: the broker is SIGKILLed at each dangerous step of an effectful call (a
//! test-only crash point, `--test-crash-at`), restarted on the same database, and the call made
//! again in the same (resumed) session. No effect happens twice; the ledger state is as
//! specified; the repeat is answered from the ledger.
//!
//! The effect is the fs-helper's write_file. After the crash the test overwrites the file with a
//! sentinel: if the repeat carried the write out again, the sentinel would be gone.
//!
//! At the in-helper step the broker dies while the request is with the helper, at a random moment
//! of up to 3 ms, so the write may or may not have happened. Neither outcome is left to that
//! chance: the step runs once with the helper stopped (SIGSTOP) while the call waits for approval,
//! so it holds the write request unread and dies with the broker, and the write certainly did
//! not happen; and once at
//! `after-answer`, where the write certainly did. Each asserts its exact outcome; the random runs
//! check whichever outcome they get.

#![forbid(unsafe_code)]

mod broker_core_support;

use broker_core_support::*;
use ipc_schema::tool::{RefusalKind, ToolReply};
use ipc_schema::ui::{CallState, Decision, UiReply, UiRequest};
use ipc_schema::Body;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

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

/// What the fs-helper does while the broker carries out the call.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Helper {
    /// Runs: whether it carries the write out before the broker dies depends on the step.
    Runs,
    /// Stopped (SIGSTOP) once the call is resolved and waits for approval: it holds the write
    /// request unread when the broker dies, and dies then too (it is killed after the broker,
    /// in case nothing else kills it).
    Stopped,
}

/// The fs-helper of the broker on `root`: found by its name and its configuration (whose
/// checkpoint directory is the instance's), so that neither the parent that started it nor
/// another test's helper matters. Waits until there is exactly one live one.
fn fs_helper_pid(root: &Path) -> i32 {
    let root = root.display().to_string();
    let of_root = |pid: i32| {
        gatehouse_tests::fs_helper_config(pid as u32)
            .is_some_and(|c| String::from_utf8_lossy(&c.checkpoint_dir).starts_with(&root))
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let live: Vec<i32> = std::fs::read_dir("/proc")
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
            .filter(|pid| {
                let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
                comm.trim_end() == "fs-helper"
                    && of_root(*pid)
                    && !matches!(state(*pid), None | Some('Z' | 'X'))
            })
            .collect();
        if let [pid] = live[..] {
            return pid;
        }
        assert!(
            Instant::now() < deadline,
            "expected one fs-helper for {root}, found {live:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The state letter of `/proc/PID/stat` (R, S, T, Z, ...), or None once the process is gone.
fn state(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "pid (comm) S ...": comm may hold spaces and parentheses, the state follows the last ')'.
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

/// Waits until `pid` is in a state `done` accepts (None: gone).
fn wait_state(pid: i32, what: &str, done: impl Fn(Option<char>) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done(state(pid)) {
        assert!(
            Instant::now() < deadline,
            "fs-helper {pid} is not {what}: {:?}",
            state(pid)
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn signal(pid: i32, sig: Signal) {
    match kill(Pid::from_raw(pid), sig) {
        Ok(()) | Err(nix::errno::Errno::ESRCH) => {}
        Err(e) => panic!("kill({pid}, {sig}): {e}"),
    }
}

/// Runs `step` `iterations()` times on one instance; returns how often the write had happened
/// before the restart (for steps where either outcome is allowed).
fn run_step(step: &str) -> (usize, usize) {
    run_step_with(step, Helper::Runs)
}

fn run_step_with(step: &str, helper: Helper) -> (usize, usize) {
    let write_file = match helper {
        Helper::Runs => "write_file = \"allow\"",
        // Stopping the helper needs a moment when it is idle between the call's resolution
        // and its write: the approval gives one.
        Helper::Stopped => "write_file = \"ask\"",
    };
    let inst = Instance::new(Some(&policy_with(write_file, "")));
    let (mut happened, mut not) = (0, 0);
    for i in 0..iterations() {
        let file = inst.file(&format!("{step}-{i}.txt"));
        let content = format!("written by call {i}");
        let call = write_call(&file, &content);

        let mut b = inst.start(&["--test-crash-at", step]);
        let mut gw = b.gateway();
        let session = gw.open_session(None);
        // The helper that gets the write: after the crash the file is read only once it is
        // gone, so a write it finishes after the broker died is not taken for a repeat.
        let fs_pid = fs_helper_pid(inst.root());
        let id = gw.send(call.clone());
        let held = (helper == Helper::Stopped).then(|| {
            // The call asks: the broker has resolved and previewed it with the fs-helper and now
            // waits for the human, so the helper is idle and the next thing it would read is the
            // write itself. Stop it, then approve (without waiting for the console's answer: the
            // broker may die first).
            let mut ui = b.ui();
            let proposal = ui.wait_pending(1).remove(0);
            let pid = fs_helper_pid(inst.root());
            signal(pid, Signal::SIGSTOP);
            wait_state(pid, "stopped", |s| s == Some('T'));
            ui.0.send(Body::Ui(UiRequest::Decide(Decision {
                proposal: proposal.id,
                digest: proposal.digest,
                choice: choice_allow(),
            })));
            (pid, ui)
        });
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
        if let Some((pid, _ui)) = held {
            // The broker is gone; its stopped helper dies with it (parent-death signal), or here.
            signal(pid, Signal::SIGKILL);
        }
        wait_state(fs_pid, "dead", |s| matches!(s, None | Some('Z' | 'X')));

        let before = std::fs::read_to_string(&file).ok();
        if helper == Helper::Stopped {
            assert_eq!(
                before, None,
                "{step}#{i}: the stopped helper held the request unread and died: no write"
            );
        }
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

/// The broker dies at a random moment while the helper works: either outcome may come, and
/// each is checked (that both are right is shown by the two cases below, each forced).
#[test]
fn kill_while_the_helper_works() {
    let (happened, not) = run_step("in-helper");
    eprintln!("in-helper: the write had happened {happened} times, not {not} times");
}

/// The in-helper step before the effect, forced: the helper holds the request, stopped, when
/// the broker dies. Every run: no write, the call uncertain, never carried out again.
#[test]
fn kill_while_the_helper_holds_the_request_unread() {
    let (happened, not) = run_step_with("in-helper", Helper::Stopped);
    assert_eq!((happened, not), (0, iterations()));
}

/// The in-helper outcome after the effect, forced: the broker dies once the helper has done the
/// write and answered, before it records the answer. Every run: the write happened exactly once,
/// the call is uncertain, and the repeat does not carry it out again.
#[test]
fn kill_after_the_helper_answered() {
    let (happened, not) = run_step("after-answer");
    assert_eq!((happened, not), (iterations(), 0));
}

#[test]
fn the_release_binary_has_no_crash_hook() {
    let release = gatehouse_tests::release_dir().join("gatehouse");
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
