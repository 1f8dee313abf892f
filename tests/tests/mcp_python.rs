// Drives the Linux binaries (ipc_schema::platform::Missing elsewhere).
#![cfg(target_os = "linux")]
//! The official Python MCP client (both the 1.x and the 2.x line of the `mcp` package) as a real
//! agent against `gatehouse mcp`, with `gatehouse approve` as the human on the ui channel. The
//! scenarios live in tests/python/mcp_agent.py; they check what the agent sees, and these tests
//! check the summary they print and what happened on disk.

#![forbid(unsafe_code)]

mod mcp_support;

use mcp_support::*;
use serde_json::Value;
use std::process::Command;

fn run_agent(inst: &Instance, venv: &str, scenario: &str, extra: &[&str]) -> Value {
    let script = source_dir().join("tests/python/mcp_agent.py");
    assert!(script.exists(), "{} is missing", script.display());
    let out = Command::new(python(venv))
        .arg(&script)
        .arg(scenario)
        .arg("--gatehouse")
        .arg(gatehouse_tests::bin("gatehouse"))
        .arg("--data-dir")
        .arg(&inst.data)
        .arg("--project")
        .arg(&inst.project)
        .args(extra)
        .current_dir(&inst.project)
        .output()
        .expect("run python");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{scenario} with {venv} failed:\n{stderr}"
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout
        .lines()
        .last()
        .unwrap_or_else(|| panic!("no summary; stderr:\n{stderr}"));
    serde_json::from_str(last).unwrap_or_else(|e| panic!("{e}: {last}"))
}

fn agent(venv: &str, mode: &str, protocol: &str) {
    let inst = Instance::new(None);
    let b = inst.broker(&[]);
    let s = run_agent(&inst, venv, "agent", &["--mode", mode]);
    assert_eq!(s["protocol"], protocol, "{s}");
    assert!(
        s["progress"]
            .as_str()
            .unwrap()
            .starts_with("waiting for the human to decide proposal #"),
        "{s}"
    );
    // Seven changes asked and allowed, one denied.
    let decided: Vec<&str> = s["decided"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_str().unwrap())
        .collect();
    assert_eq!(decided.iter().filter(|d| **d == "deny").count(), 1, "{s}");
    // On disk: the write, edit, move, undo and delete left nothing behind but hello.txt; the
    // denied write and the 5 MiB one never happened.
    let mut names: Vec<String> = std::fs::read_dir(&inst.project)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["hello.txt"], "{s}");
    drop(b);
}

#[test]
fn python_sdk_1x_as_an_agent_over_the_handshake() {
    agent(MCP1, "legacy", "2025-11-25");
}

#[test]
fn python_sdk_2x_as_an_agent_over_the_2026_revision() {
    agent(MCP2, "auto", "2026-07-28");
}

#[test]
fn python_sdk_2x_as_an_agent_over_the_handshake() {
    agent(MCP2, "legacy", "2025-11-25");
}

fn timeout(venv: &str, mode: &str) {
    let inst = Instance::new(None);
    let _b = inst.broker(&[]);
    let s = run_agent(
        &inst,
        venv,
        "timeout",
        &["--mode", mode, "--approval-wait", "1"],
    );
    assert!(
        s["timeout"]
            .as_str()
            .unwrap()
            .contains("Nothing has been done yet"),
        "{s}"
    );
    assert!(
        s["repeat"]
            .as_str()
            .unwrap()
            .contains("it was not carried out again"),
        "{s}"
    );
    assert_eq!(
        std::fs::read_to_string(inst.file("wait-a.txt")).unwrap(),
        "late\n"
    );
}

#[test]
fn python_sdk_1x_waits_gives_up_and_gets_the_decision_by_calling_again() {
    timeout(MCP1, "legacy");
}

#[test]
fn python_sdk_2x_waits_gives_up_and_gets_the_decision_by_calling_again() {
    timeout(MCP2, "auto");
}
