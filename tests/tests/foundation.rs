// Drives the Linux binaries (ipc_schema::platform::Missing elsewhere).
#![cfg(target_os = "linux")]
//! Foundation: the broker supervises locked-down helpers, routes only to verified ones, kills
//! peers that break the protocol, restarts crashed helpers, and leaves no orphans.

#![forbid(unsafe_code)]

use gatehouse_tests::misbehaving_peer;
use gatehouse_tests::{alive, bin, forget_audit_key, BrokerUnderTest, Conn};
use ipc_schema::codec::encode;
use ipc_schema::status::{DoctorReport, LandlockStatus, ProcessState};
use ipc_schema::{Body, Envelope, ErrorCode, Role};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

fn doctor(b: &BrokerUnderTest) -> (std::process::Output, DoctorReport) {
    let out = b.cli(&["doctor", "--json"]);
    let report: DoctorReport = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "doctor --json printed no report ({e}); stdout {:?} stderr {:?}; broker log:\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            b.log()
        )
    });
    (out, report)
}

fn helper_pid(r: &DoctorReport, role: Role) -> u32 {
    r.processes
        .iter()
        .find(|p| p.name == role.name())
        .map(|p| p.pid)
        .expect("helper in report")
}

fn ping(c: &mut Conn, target: Role) -> Body {
    c.request(Body::Ping {
        target: Some(target),
    })
}

#[test]
fn every_helper_locks_down_and_answers_ping_through_the_broker() {
    let b = BrokerUnderTest::start(&[]);
    let mut ui = b.ui();
    assert_eq!(ui.request(Body::Ping { target: None }), Body::Pong);
    for role in Role::HELPERS {
        assert_eq!(ping(&mut ui, role), Body::Pong, "{role}; log:\n{}", b.log());
    }
    // The agent's channel may ping too.
    let mut gw = b.gateway();
    assert_eq!(ping(&mut gw, Role::Fs), Body::Pong);
}

#[test]
fn doctor_json_reports_every_protection_enforced() {
    let b = BrokerUnderTest::start(&[]);
    let (out, r) = doctor(&b);
    assert!(
        out.status.success(),
        "doctor exited {:?}: problems {:?}",
        out.status,
        r.problems
    );
    assert!(r.problems.is_empty(), "{:?}", r.problems);
    assert!(r.landlock_abi >= 1, "this machine has Landlock");
    assert!(!r.allow_degraded);
    for role in Role::HELPERS {
        let p = r
            .processes
            .iter()
            .find(|p| p.name == role.name())
            .unwrap_or_else(|| panic!("{role} missing from doctor"));
        assert_eq!(p.state, ProcessState::Ready, "{role}");
        let k = p.kernel.as_ref().expect("kernel view");
        assert_eq!(k.seccomp, 2, "{role} Seccomp");
        assert!(k.no_new_privs, "{role} NoNewPrivs");
        assert_eq!(k.cap_eff, 0, "{role} CapEff");
        assert_eq!(k.cap_prm, 0, "{role} CapPrm");
        let l = p.lockdown.as_ref().expect("hello report");
        assert_eq!(l.landlock, LandlockStatus::FullyEnforced, "{role}");
        assert!(l.seccomp_filter && l.no_new_privs && l.dumpable_off && l.core_dumps_off);
        assert!(l.capabilities_dropped && l.stray_fds_closed && l.env_cleared);
        assert!(l.degraded.is_empty(), "{role}: {:?}", l.degraded);
        // What the kernel says about the live process, read here too.
        let status = std::fs::read_to_string(format!("/proc/{}/status", p.pid)).unwrap();
        assert!(status.contains("Seccomp:\t2"), "{role}: {status}");
        assert!(status.contains("NoNewPrivs:\t1"), "{role}");
    }
    assert!(
        r.notes
            .iter()
            .any(|n| n.starts_with("fs-helper: paths resolved by the kernel with openat2")),
        "{:?}",
        r.notes
    );
    let broker = r.processes.iter().find(|p| p.name == "broker").unwrap();
    assert!(broker.kernel.as_ref().unwrap().no_new_privs);
}

#[test]
fn peers_that_break_the_protocol_are_killed_and_others_keep_working() {
    let b = BrokerUnderTest::start(&[]);
    let mut bystander = b.ui();
    assert_eq!(ping(&mut bystander, Role::Fs), Body::Pong);

    let garbage = b"\x10\x00\x00\x00this is not postcard";
    let oversized = u32::MAX.to_le_bytes();
    let just_over = {
        let mut v = ((ipc_schema::MAX_FRAME + 1) as u32).to_le_bytes().to_vec();
        v.extend_from_slice(&[0u8; 64]);
        v
    };
    // The agent's channel asking for a doctor report: a message its role may not send.
    let forbidden = encode(&Envelope::new(1, Body::Doctor)).unwrap();
    // A front claiming to be a helper.
    let hello_from_ui = encode(&Envelope::new(1, Body::Pong)).unwrap();
    let cases: [(&str, &Path, &[u8]); 5] = [
        ("garbage", &b.ui_socket(), garbage),
        ("oversized header", &b.gateway_socket(), &oversized),
        ("one byte over the limit", &b.ui_socket(), &just_over),
        ("gateway sends Doctor", &b.gateway_socket(), &forbidden),
        ("ui sends Pong", &b.ui_socket(), &hello_from_ui),
    ];
    for (name, socket, bytes) in cases {
        let st = misbehaving_peer(socket, bytes);
        assert_eq!(st.signal(), Some(libc::SIGKILL), "{name}: {st:?}");
        assert_eq!(ping(&mut bystander, Role::Net), Body::Pong, "after {name}");
    }
    let log = b.log();
    assert!(
        log.contains("Doctor message, which the gateway may not send"),
        "{log}"
    );
    assert!(log.contains("exceeds the 1048576-byte limit"), "{log}");
    // A fresh connection still works too.
    assert_eq!(ping(&mut b.gateway(), Role::Exec), Body::Pong);
}

#[test]
fn a_killed_helper_is_restarted_and_its_in_flight_call_fails_clearly() {
    let b = BrokerUnderTest::start(&[]);
    let mut ui = b.ui();
    assert_eq!(ping(&mut ui, Role::Fs), Body::Pong);
    let (_, before) = doctor(&b);
    let pid = helper_pid(&before, Role::Fs);
    let pid_t = nix::unistd::Pid::from_raw(pid as i32);

    // Freeze the helper so a call is certainly in flight, then kill it.
    nix::sys::signal::kill(pid_t, nix::sys::signal::Signal::SIGSTOP).unwrap();
    let id = ui.send(Body::Ping {
        target: Some(Role::Fs),
    });
    std::thread::sleep(Duration::from_millis(200));
    nix::sys::signal::kill(pid_t, nix::sys::signal::Signal::SIGKILL).unwrap();
    let reply = loop {
        let env = ui.recv().expect("reply");
        if env.id == id {
            break env.body;
        }
    };
    match reply {
        Body::Error(e) => {
            assert_eq!(e.code, ErrorCode::HelperCrashed);
            assert!(
                e.message
                    .contains("fs-helper stopped while handling this call"),
                "{}",
                e.message
            );
            assert!(e.message.contains("killed by SIGKILL"), "{}", e.message);
        }
        other => panic!("expected an error, got {other:?}"),
    }
    // It comes back and answers again.
    assert_eq!(ping(&mut ui, Role::Fs), Body::Pong, "log:\n{}", b.log());
    let (_, after) = doctor(&b);
    let p = after
        .processes
        .iter()
        .find(|p| p.name == "fs-helper")
        .unwrap();
    assert_ne!(p.pid, pid);
    assert_eq!(p.restarts, 1);
    assert_eq!(p.state, ProcessState::Ready);
    assert!(!alive(pid));
}

/// Calls sent into the moment a helper dies (its socket already closed, its exit not yet seen)
/// each get an answer, and the helper comes back: a write that fails on the dead channel must
/// not leave the relay waiting forever, nor calls failing at once without waiting for the
/// restart.
#[test]
fn calls_streamed_into_a_helpers_death_are_answered_and_it_comes_back() {
    let b = BrokerUnderTest::start(&[]);
    let mut ui = b.ui();
    ui.set_timeout(Some(Duration::from_secs(60)));
    for round in 0..4 {
        assert_eq!(ping(&mut ui, Role::Fs), Body::Pong, "round {round}");
        let (_, report) = doctor(&b);
        let pid = helper_pid(&report, Role::Fs);
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGKILL,
        )
        .unwrap();
        let ids: Vec<u64> = (0..200)
            .map(|_| {
                ui.send(Body::Ping {
                    target: Some(Role::Fs),
                })
            })
            .collect();
        let mut answered = std::collections::HashSet::new();
        while answered.len() < ids.len() {
            let env = ui.recv().unwrap_or_else(|| {
                panic!("round {round}: a call got no answer; log:\n{}", b.log())
            });
            match env.body {
                Body::Pong => {}
                Body::Error(e) => assert!(
                    matches!(e.code, ErrorCode::HelperCrashed),
                    "round {round}: {e:?}"
                ),
                other => panic!("round {round}: {other:?}"),
            }
            assert!(answered.insert(env.id), "answered twice: {}", env.id);
        }
        // The restarted helper answers; the calls sent after the crash waited for it.
        assert_eq!(
            ping(&mut ui, Role::Fs),
            Body::Pong,
            "round {round}; log:\n{}",
            b.log()
        );
        let (_, after) = doctor(&b);
        assert_ne!(helper_pid(&after, Role::Fs), pid);
    }
}

#[test]
fn the_broker_refuses_to_route_to_a_helper_that_did_not_lock_down() {
    let b = BrokerUnderTest::start(&["--test-unlocked-helper", "fs"]);
    let mut ui = b.ui();
    match ping(&mut ui, Role::Fs) {
        Body::Error(e) => {
            assert_eq!(e.code, ErrorCode::HelperUnavailable);
            assert!(
                e.message.contains("fs-helper did not lock down"),
                "{}",
                e.message
            );
            assert!(
                e.message.contains("/proc shows Seccomp: 0"),
                "{}",
                e.message
            );
        }
        other => panic!("routed to an unlocked helper: {other:?}"),
    }
    // The others are unaffected.
    assert_eq!(ping(&mut ui, Role::Net), Body::Pong);
    let (out, r) = doctor(&b);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        r.problems.iter().any(|p| p.contains("fs-helper: refused")),
        "{:?}",
        r.problems
    );
}

#[test]
fn release_binaries_do_not_have_the_test_switches() {
    let release = gatehouse_tests::release_dir();
    let gatehouse = release.join("gatehouse");
    let out = Command::new(&gatehouse)
        .args(["broker", "--test-unlocked-helper", "fs"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("unexpected argument '--test-unlocked-helper'"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The binaries `gatehouse broker` and `gatehouse mcp` exec, asked directly and through
    // the command line, and the command line's own switches; each test build has the switch
    // (`--help` after it: the test build parses it, then only prints the usage).
    let switches: [(&str, &[&str]); 6] = [
        ("gatehouse-broker", &["--test-unlocked-helper", "fs"]),
        ("gatehouse-broker", &["--test-probe-lockdown", "report"]),
        ("gatehouse-mcp", &["--test-skip-lockdown"]),
        ("gatehouse", &["mcp", "--test-skip-lockdown"]),
        ("gatehouse", &["ui", "--test-skip-lockdown"]),
        ("gatehouse", &["sandbox", "--test-no-sni-check"]),
    ];
    for (name, args) in switches {
        let switch = args.iter().rev().find(|a| a.starts_with("--")).unwrap();
        let out = Command::new(release.join(name))
            .args(args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{name} {args:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr)
                .contains(&format!("unexpected argument '{switch}'")),
            "{name} {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let out = Command::new(bin(name))
            .args(args)
            .arg("--help")
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{name} {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    for role in Role::HELPERS {
        let out = Command::new(release.join(role.name()))
            .arg("--test-skip-lockdown")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(64), "{role}");
        assert!(
            String::from_utf8_lossy(&out.stderr)
                .contains("unknown argument \"--test-skip-lockdown\""),
            "{role}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // The test builds do have it, so the check above is not vacuous.
    for role in Role::HELPERS {
        let out = Command::new(bin(role.name()))
            .arg("--test-skip-lockdown")
            .output()
            .unwrap();
        assert!(
            !String::from_utf8_lossy(&out.stderr).contains("unknown argument"),
            "{role}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

fn helper_pids(b: &BrokerUnderTest) -> Vec<u32> {
    let (_, r) = doctor(b);
    let pids: Vec<u32> = Role::HELPERS.iter().map(|&h| helper_pid(&r, h)).collect();
    for &p in &pids {
        assert!(alive(p), "helper {p} not running");
    }
    pids
}

fn wait_gone(pids: &[u32]) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while pids.iter().any(|&p| alive(p)) {
        assert!(
            Instant::now() < deadline,
            "orphans left: {:?}",
            pids.iter().filter(|&&p| alive(p)).collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn sigterm_and_sigint_stop_everything_with_no_orphans() {
    for sig in [
        nix::sys::signal::Signal::SIGTERM,
        nix::sys::signal::Signal::SIGINT,
    ] {
        let mut b = BrokerUnderTest::start(&[]);
        let pids = helper_pids(&b);
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(b.child.id() as i32), sig).unwrap();
        let st = b.child.wait().unwrap();
        assert!(st.success(), "{sig}: broker exited {st:?}");
        wait_gone(&pids);
        assert!(!b.ui_socket().exists(), "socket left behind");
    }
}

#[test]
fn helpers_die_with_a_killed_broker() {
    let mut b = BrokerUnderTest::start(&[]);
    let pids = helper_pids(&b);
    b.child.kill().unwrap();
    b.child.wait().unwrap();
    wait_gone(&pids);
}

#[test]
fn cli_starts_a_broker_when_none_runs_and_stop_ends_it() {
    let dir = gatehouse_tests::DataDir::new();
    let run = |args: &[&str]| {
        Command::new(bin("gatehouse"))
            .arg("--data-dir")
            .arg(dir.path())
            .args(args)
            .output()
            .unwrap()
    };
    let out = run(&["ping", "--helper", "secrets", "--count", "3"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("3 pongs"));
    // A second broker for the same dirs refuses to start.
    let out = run(&["broker"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("a broker already runs for"));
    let out = run(&["stop"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("stopped"));
}

#[test]
fn a_helper_started_by_hand_refuses_to_run() {
    let out = Command::new(bin("net-helper")).output().unwrap();
    assert_eq!(out.status.code(), Some(70));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no broker channel"));
}

/// A broker started by a process that blocks the stop signals (as `gatehouse run` and
/// `gatehouse sandbox` do while they supervise) inherits that mask across exec: it must still
/// stop on SIGTERM, the way `gatehouse stop` and a service manager ask.
#[test]
fn a_broker_started_with_stop_signals_blocked_still_stops_on_sigterm() {
    let dir = tempfile::Builder::new()
        .prefix("gh-test-")
        .tempdir()
        .unwrap();
    // python3 blocks SIGTERM, SIGINT and SIGHUP, then execs the broker with that mask.
    let mut child = Command::new("python3")
        .arg("-c")
        .arg(
            "import os, signal, sys\n\
             signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])\n\
             os.execv(sys.argv[1], sys.argv[1:])",
        )
        .arg(bin("gatehouse"))
        .arg("--data-dir")
        .arg(dir.path())
        .arg("broker")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while Conn::connect(&dir.path().join("run/ui.sock")).is_err() {
        assert!(Instant::now() < deadline, "broker did not open its socket");
        std::thread::sleep(Duration::from_millis(20));
    }
    // The mask really was inherited (the control: without the fix, this mask stays on).
    let status = std::fs::read_to_string(format!("/proc/{}/status", child.id())).unwrap();
    let blocked = status
        .lines()
        .find_map(|l| l.strip_prefix("SigBlk:"))
        .map(|v| u64::from_str_radix(v.trim(), 16).unwrap())
        .unwrap();
    assert_eq!(
        blocked & (1 << (libc::SIGTERM - 1)),
        0,
        "the broker's main thread still blocks SIGTERM: {status}"
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            assert!(st.success(), "broker exited {st:?} on SIGTERM");
            break;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the broker ignored SIGTERM for 10 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    forget_audit_key(dir.path());
}

/// A `gatehouse` binary without its helpers (and the spawner) beside it (what `cargo run --bin gatehouse` builds)
/// refuses to start the broker at once, naming each missing helper and how to build them, and
/// logs nothing else (no audit rows lost, no database created).
#[test]
fn a_broker_without_its_helpers_says_which_are_missing_and_how_to_build_them() {
    let lone = tempfile::tempdir().unwrap();
    let exe = lone.path().join("gatehouse");
    std::fs::copy(bin("gatehouse"), &exe).unwrap();
    // `gatehouse broker` execs the daemon beside it.
    std::fs::copy(
        bin("gatehouse-broker"),
        lone.path().join("gatehouse-broker"),
    )
    .unwrap();
    // fs-helper present, the other four missing.
    std::fs::copy(bin("fs-helper"), lone.path().join("fs-helper")).unwrap();
    let data = tempfile::tempdir().unwrap();
    let out = Command::new(&exe)
        .arg("--data-dir")
        .arg(data.path())
        .arg("broker")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("net-helper, exec-helper, secrets-helper, servers-helper, gatehouse-spawner not found in")
            && err.contains("cargo build --release --workspace"),
        "{err}"
    );
    assert!(!err.contains("fs-helper,"), "{err}");
    assert_eq!(err.lines().count(), 1, "more than the one refusal: {err}");
    assert!(!data.path().join("data/gatehouse.db").exists());
    // The positive control: the same copy with all five helpers and the spawner beside it
    // starts.
    for h in [
        "net-helper",
        "exec-helper",
        "secrets-helper",
        "servers-helper",
        "gatehouse-spawner",
    ] {
        std::fs::copy(bin(h), lone.path().join(h)).unwrap();
    }
    let mut child = Command::new(&exe)
        .arg("--data-dir")
        .arg(data.path())
        .arg("broker")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while Conn::connect(&data.path().join("run/ui.sock")).is_err() {
        assert!(
            child.try_wait().unwrap().is_none() && Instant::now() < deadline,
            "the broker with all helpers did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{:?}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    forget_audit_key(data.path());
}

/// `UiRequest::StopBroker` (how `gatehouse stop` stops a broker on Windows, which has no
/// SIGTERM): from the console's channel the broker answers `Stopping` with its pid and stops as
/// a signal would (exit 0, its helpers gone); the same request on the gateway's channel is a
/// kind that channel may not send, so that peer is killed and the broker serves on.
#[test]
fn the_console_may_stop_the_broker_and_the_agent_may_not() {
    use ipc_schema::ui::{UiReply, UiRequest};
    let mut b = BrokerUnderTest::start(&[]);
    let (_, report) = doctor(&b);
    let helper = helper_pid(&report, Role::Net);
    // The agent's side first: its connection is cut, the broker goes on.
    let status = misbehaving_peer(
        &b.gateway_socket(),
        &encode(&Envelope::new(1, Body::Ui(UiRequest::StopBroker))).unwrap(),
    );
    assert_eq!(status.signal(), Some(libc::SIGKILL), "{}", b.log());
    assert_eq!(ping(&mut b.ui(), Role::Net), Body::Pong);
    // The human's side.
    let answer = b.ui().request(Body::Ui(UiRequest::StopBroker));
    assert_eq!(
        answer,
        Body::UiReply(UiReply::Stopping { pid: b.child.id() })
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(s) = b.child.try_wait().unwrap() {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "the broker still runs: {}",
            b.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(0), "{}", b.log());
    assert!(
        b.log().contains("the console asked the broker to stop"),
        "{}",
        b.log()
    );
    assert!(!alive(helper), "the net-helper outlived the broker");
}
