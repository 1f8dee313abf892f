// Drives the Linux binaries (ipc_schema::platform::Missing elsewhere).
#![cfg(target_os = "linux")]
//! The broker proper runs confined (issue 15): after its lockdown it cannot open a file outside
//! its own directories, make a socket or start a program, and the kernel shows its filter, its
//! no_new_privs and no capabilities, started as root too. Each denial beside the same attempt
//! made by the same process just before its lockdown.
#![forbid(unsafe_code)]

use gatehouse_tests::{bin, BrokerUnderTest};
use ipc_schema::Role;
use std::os::unix::process::ExitStatusExt;
use std::process::Command;

fn probe(what: &str) -> (std::process::ExitStatus, String) {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(bin("gatehouse-broker"))
        .arg("--data-dir")
        .arg(dir.path())
        .args(["--test-probe-lockdown", what])
        .output()
        .unwrap();
    gatehouse_tests::forget_audit_key(dir.path());
    (
        out.status,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn line<'a>(log: &'a str, what: &str) -> &'a str {
    log.lines()
        .find_map(|l| l.strip_prefix(&format!("gatehouse: test probe: {what}: ")))
        .unwrap_or_else(|| panic!("no probe line {what:?} in:\n{log}"))
}

#[test]
fn after_its_lockdown_the_broker_opens_only_its_own_files_and_makes_no_socket() {
    let (status, log) = probe("report");
    assert!(status.success(), "{status:?}\n{log}");
    // Positive controls: the same process, the same calls, before the lockdown.
    assert_eq!(line(&log, "before: open /etc/passwd"), "ok");
    assert_eq!(line(&log, "before: socket(AF_INET)"), "ok");
    assert_eq!(line(&log, "before: socket(AF_UNIX)"), "ok");
    assert_eq!(line(&log, "before: create in its data dir"), "ok");
    // Landlock: nothing outside its config, data and runtime directories.
    assert_eq!(line(&log, "after: open /etc/passwd"), "EACCES");
    // Its own directory still works (the audit log lives there).
    assert_eq!(line(&log, "after: create in its data dir"), "ok");
    // seccomp: no socket of any family (refused with EACCES, not killed, for probing
    // libraries).
    assert_eq!(line(&log, "after: socket(AF_INET)"), "EACCES");
    assert_eq!(line(&log, "after: socket(AF_UNIX)"), "EACCES");
}

#[test]
fn a_broker_that_tries_to_start_a_program_is_killed_by_its_filter() {
    let (status, log) = probe("spawn");
    assert_eq!(status.signal(), Some(libc::SIGSYS), "{status:?}\n{log}");
    // It got as far as the attempt (the report lines are printed first).
    assert_eq!(line(&log, "after: open /etc/passwd"), "EACCES");
    assert!(!log.contains("spawning /bin/true returned"), "{log}");
}

/// What the kernel says of the running broker and its spawner; and doctor says it, exit 0.
#[test]
fn the_kernel_shows_the_brokers_filter_and_no_capabilities_and_doctor_shows_both() {
    let mut b = BrokerUnderTest::start(&[]);
    let pid = b.child.id();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name}:")))
            .map(|v| v.trim().to_string())
            .unwrap_or_else(|| panic!("no {name} in {status}"))
    };
    assert_eq!(field("Seccomp"), "2");
    assert_eq!(field("NoNewPrivs"), "1");
    assert_eq!(field("CapEff"), "0000000000000000");
    assert_eq!(field("CapPrm"), "0000000000000000");
    // Started as root, the bounding set is empty too (nothing can give the rights back).
    if nix::unistd::geteuid().is_root() {
        assert_eq!(field("CapBnd"), "0000000000000000");
    }
    // The spawner is the broker's one child, and the helpers are its children.
    let kids = gatehouse_tests::children_of(pid);
    assert_eq!(kids.len(), 1, "{kids:?}");
    let spawner = kids[0];
    assert_eq!(
        std::fs::read_to_string(format!("/proc/{spawner}/comm"))
            .unwrap()
            .trim(),
        "gatehouse-spawn"
    );
    assert_eq!(
        gatehouse_tests::children_of(spawner).len(),
        Role::HELPERS.len()
    );
    let out = b.cli(&["--json", "doctor"]);
    assert!(
        out.status.success(),
        "{}",
        gatehouse_tests::output_text(&out)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let names: Vec<&str> = report["processes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names[..2],
        ["broker", "spawner"],
        "{}",
        serde_json::to_string_pretty(&report).unwrap()
    );
    let broker = &report["processes"][0];
    assert_eq!(broker["lockdown"]["seccomp_filter"], true);
    assert_eq!(broker["lockdown"]["landlock"], "FullyEnforced");
    assert_eq!(broker["kernel"]["seccomp"], 2);
    assert_eq!(report["processes"][1]["kernel"]["no_new_privs"], true);
    assert!(b.stop().success());
}
