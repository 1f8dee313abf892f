// Drives the Linux binaries (ipc_schema::platform::Missing elsewhere).
#![cfg(target_os = "linux")]
//! `gatehouse demo --json`: the README's main-job command runs with no setup, and its report is
//! checked outcome by outcome against what gatehouse must do (and the demo's own checks of the
//! files on disk). It must touch nothing outside its scratch directory: it runs here with a
//! HOME and a TMPDIR of the test's own, which must be as they were afterwards.

#![forbid(unsafe_code)]

use gatehouse_tests::bin;
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Stdio};

struct Demo {
    report: Value,
    code: Option<i32>,
    stderr: String,
}

fn run_demo(home: &Path, tmp: &Path, args: &[&str]) -> Demo {
    let out = Command::new(bin("gatehouse"))
        .args(["--json", "demo"])
        .args(args)
        .env("HOME", home)
        .env("TMPDIR", tmp)
        .env_remove("XDG_RUNTIME_DIR")
        .env_remove("XDG_DATA_HOME")
        .env_remove("XDG_CONFIG_HOME")
        .current_dir(tmp)
        .stdin(Stdio::null())
        .output()
        .expect("run gatehouse demo");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let report = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "demo --json printed no JSON ({e}):\n{}\nstderr:\n{stderr}",
            String::from_utf8_lossy(&out.stdout)
        )
    });
    Demo {
        report,
        code: out.status.code(),
        stderr,
    }
}

fn step<'a>(r: &'a Value, name: &str) -> &'a Value {
    r["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == name)
        .unwrap_or_else(|| panic!("no step {name} in {r:#}"))
}

fn call(s: &Value, i: usize) -> &Value {
    &s["calls"][i]
}

fn asked(c: &Value) -> &Vec<Value> {
    c["asked"].as_array().unwrap()
}

fn text(c: &Value) -> &str {
    c["text"].as_str().unwrap()
}

/// A step allowed without asking, with its own checks passed.
fn assert_allowed(r: &Value, name: &str, tool: &str) {
    let s = step(r, name);
    let c = call(s, 0);
    assert_eq!(c["tool"], tool, "{s:#}");
    assert_eq!(c["outcome"], "done", "{s:#}");
    assert!(asked(c).is_empty(), "{name} was asked about: {s:#}");
    assert_eq!(s["ok"], true, "{s:#}");
}

/// One asked call: one proposal for `tool` on `target_end`, approved once by the scripted
/// approver, then carried out.
fn assert_asked_and_done(c: &Value, tool: &str, target_end: &str) {
    let a = asked(c);
    assert_eq!(a.len(), 1, "{c:#}");
    assert_eq!(a[0]["tool"], tool);
    assert!(
        a[0]["target"].as_str().unwrap().ends_with(target_end),
        "{c:#}"
    );
    assert_eq!(a[0]["decided_by"], "scripted approver");
    assert_eq!(a[0]["choice"], "allow once");
    assert_eq!(c["outcome"], "done", "{c:#}");
}

#[test]
fn the_demo_shows_every_outcome_and_its_json_says_what_happened() {
    let home = tempfile::Builder::new()
        .prefix("gh-demo-home-")
        .tempdir()
        .unwrap();
    let tmp = tempfile::Builder::new()
        .prefix("gh-demo-tmp-")
        .tempdir()
        .unwrap();
    std::fs::write(home.path().join(".bashrc"), "# the real one\n").unwrap();
    let d = run_demo(home.path(), tmp.path(), &[]);
    let r = &d.report;

    // Reads and searches: allowed, nobody asked.
    assert_allowed(r, "read", "read_file");
    assert!(text(call(step(r, "read"), 0)).contains("A scratch project made by `gatehouse demo`."));
    assert_allowed(r, "search", "search_files");
    assert_allowed(r, "grep", "grep");
    assert!(text(call(step(r, "grep"), 0)).contains("// TODO: greet the user by name"));

    // The edit: asked, approved on the ui channel, carried out (the demo checked the file).
    let s = step(r, "edit");
    assert_asked_and_done(call(s, 0), "edit_file", "/home/project/src/main.rs");
    assert!(
        text(call(s, 0)).contains("The human approved this call (proposal #1)."),
        "{s:#}"
    );
    assert_eq!(s["checks"][0]["what"], "src/main.rs holds the edit");
    assert_eq!(s["ok"], true, "{s:#}");

    // ~/.bashrc and the planted key: refused without asking anyone, nothing written or read.
    for (name, tool, path) in [
        ("bashrc", "write_file", "/home/.bashrc"),
        ("ssh_key", "read_file", "/home/.ssh/id_ed25519"),
    ] {
        let s = step(r, name);
        let c = call(s, 0);
        assert_eq!(c["tool"], tool);
        assert_eq!(c["outcome"], "refused", "{s:#}");
        assert!(asked(c).is_empty(), "{s:#}");
        assert!(text(c).starts_with("Refused by gatehouse: "), "{s:#}");
        assert!(text(c).contains(path), "the reason names the path: {s:#}");
        assert!(
            s["checks"]
                .as_array()
                .unwrap()
                .iter()
                .all(|c| c["ok"] == true),
            "{s:#}"
        );
        assert_eq!(s["ok"], true, "{s:#}");
    }
    assert!(!text(call(step(r, "ssh_key"), 0)).contains("DEMO-KEY-MATERIAL"));

    // The metadata address: refused by the network rules before anyone is asked, with the
    // reason.
    let s = step(r, "metadata");
    let c = call(s, 0);
    assert_eq!(c["tool"], "fetch_url");
    assert_eq!(
        c["arguments"]["url"],
        "http://169.254.169.254/latest/meta-data/"
    );
    assert_eq!(c["outcome"], "refused", "{s:#}");
    assert!(asked(c).is_empty(), "{s:#}");
    assert!(
        text(c).starts_with("Refused by gatehouse's network rules: 169.254.169.254 is link-local"),
        "the reason names the address and its range: {s:#}"
    );
    assert_eq!(s["ok"], true, "{s:#}");

    // A command in the sandbox: asked, approved, run; what it wrote comes back.
    let s = step(r, "command");
    let c = call(s, 0);
    assert_asked_and_done(c, "run_command", "/home/project");
    assert!(text(c).contains("exited with status 0"), "{s:#}");
    assert!(text(c).contains("\nhello from the sandbox\n"), "{s:#}");
    assert_eq!(s["ok"], true, "{s:#}");

    // The same effectful call twice: asked once, carried out once, the second from the ledger.
    let s = step(r, "twice");
    assert_asked_and_done(call(s, 0), "edit_file", "/home/project/CHANGELOG.md");
    let again = call(s, 1);
    assert_eq!(again["arguments"], call(s, 0)["arguments"]);
    assert_eq!(again["outcome"], "from_ledger", "{s:#}");
    assert!(
        asked(again).is_empty(),
        "the repeat was not asked about: {s:#}"
    );
    assert!(text(again).contains("was not carried out again"), "{s:#}");
    assert_eq!(
        s["checks"][0]["what"],
        "CHANGELOG.md has the line once (found 1)"
    );
    assert_eq!(s["ok"], true, "{s:#}");

    // verify-audit on the log: intact, with the decisions in it.
    let a = &r["audit"];
    assert_eq!(a["intact"], true, "{a:#}");
    let entries = a["entries"].as_u64().unwrap();
    assert!(entries > 0);
    assert_eq!(a["message"], format!("{entries} entries, chain intact"));
    assert_eq!(
        a["kinds"]["decision"], 3,
        "one decision row per approval: {a:#}"
    );
    assert_eq!(a["kinds"]["proposal"], 3, "{a:#}");

    // The verdict: every outcome as expected.
    assert_eq!(r["not_as_expected"], serde_json::json!([]), "{r:#}");
    assert_eq!(r["ok"], true);
    assert_eq!(d.code, Some(0), "{}", d.stderr);

    // Nothing outside the scratch directory was touched, and the scratch directory is gone.
    let scratch = r["scratch"].as_str().unwrap();
    assert!(scratch.starts_with(
        &std::fs::canonicalize(tmp.path())
            .unwrap()
            .display()
            .to_string()
    ));
    assert!(
        !Path::new(scratch).exists(),
        "the scratch directory is removed"
    );
    assert_eq!(
        std::fs::read_to_string(home.path().join(".bashrc")).unwrap(),
        "# the real one\n"
    );
    assert_eq!(
        std::fs::read_dir(home.path()).unwrap().count(),
        1,
        "nothing new in HOME"
    );
    assert_eq!(
        std::fs::read_dir(tmp.path()).unwrap().count(),
        0,
        "nothing left in TMPDIR"
    );
}

#[test]
fn the_demo_refuses_what_it_cannot_do_with_a_clear_reason() {
    let home = tempfile::tempdir().unwrap();
    let out = Command::new(bin("gatehouse"))
        .args(["demo", "--interactive"])
        .env("HOME", home.path())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim(),
        "gatehouse demo: --interactive opens the console: run it in a terminal"
    );
    let out = Command::new(bin("gatehouse"))
        .args(["--data-dir", "/nonexistent", "demo"])
        .env("HOME", home.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--data-dir is not used"));
}
