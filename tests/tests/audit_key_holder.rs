// Drives the Linux binaries (ipc_schema::platform::Missing elsewhere).
#![cfg(target_os = "linux")]
//! The audit key lives only in the secrets-helper: the broker opens its log through it, keeps
//! sealing across a secrets-helper crash, refuses the removed file fallback and a log whose key
//! is gone; `gatehouse secret set|delete` changes are audited (name, hosts, how sent, never the
//! value), whether or not a broker runs.

#![forbid(unsafe_code)]

use gatehouse_tests::{forget_audit_key, BrokerUnderTest};
use ipc_schema::secrets::CredentialName;
use ipc_schema::ui::UiRequest;
use ipc_schema::Body;
use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};

const VALUE: &str = "sk_live_Audit-never-sees-this-42";

fn gatehouse(dir: &Path, args: &[&str], stdin: Option<&str>) -> Output {
    gatehouse_tests::gatehouse_cli(dir, args, stdin)
}

fn text(o: &Output) -> String {
    gatehouse_tests::output_text(o)
}

/// Removes the test's credential and the instance's audit key, pass or fail.
struct Cleanup<'a>(&'a Path);

impl Drop for Cleanup<'_> {
    fn drop(&mut self) {
        let _ = gatehouse(self.0, &["secret", "delete", "pay"], None);
        forget_audit_key(self.0);
    }
}

/// `(kind, actor, target, outcome, detail)` of every row, from `audit tail --json`.
fn rows(dir: &Path) -> Vec<serde_json::Value> {
    let out = gatehouse(dir, &["--json", "audit", "tail", "-n", "1000"], None);
    assert!(out.status.success(), "{}", text(&out));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn credential_rows(dir: &Path) -> Vec<(String, String)> {
    rows(dir)
        .into_iter()
        .filter(|r| r["kind"] == "credential")
        .map(|r| {
            assert_eq!(r["actor"], "secret-cli");
            assert_eq!(r["target"], "pay");
            (
                r["outcome"].as_str().unwrap().to_string(),
                r["detail"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// Every byte of the database files, for a grep.
fn db_bytes(dir: &Path) -> Vec<u8> {
    let mut all = Vec::new();
    for f in std::fs::read_dir(dir.join("data")).unwrap() {
        let f = f.unwrap();
        if f.file_name().to_string_lossy().starts_with("gatehouse.db") {
            all.extend(std::fs::read(f.path()).unwrap());
        }
    }
    all
}

fn contains(hay: &[u8], needle: &str) -> bool {
    hay.windows(needle.len()).any(|w| w == needle.as_bytes())
}

fn verify_line(dir: &Path) -> String {
    let out = gatehouse(dir, &["verify-audit"], None);
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn set(dir: &Path, extra: &[&str]) -> Output {
    let mut args = vec![
        "secret",
        "set",
        "pay",
        "--host",
        "api.pay.example",
        "--stdin",
    ];
    args.extend_from_slice(extra);
    gatehouse(dir, &args, Some(&format!("{VALUE}\n")))
}

#[test]
fn secret_changes_are_audited_without_the_value_with_and_without_a_broker() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let _c = Cleanup(d);

    // No broker runs: the command writes the row itself, sealed by its own helper.
    let out = set(d, &[]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(
        credential_rows(d),
        [(
            "saved".to_string(),
            "hosts: api.pay.example; sent as: bearer; value: stored".to_string()
        )]
    );
    assert_eq!(verify_line(d), "1 entries, chain intact");

    // A broker runs: it writes the row, from what its own secrets-helper says.
    let mut b = BrokerUnderTest::start_in(tempfile::Builder::new().tempdir_in(d).unwrap(), &[]);
    // (BrokerUnderTest made its own instance under `d`; use that one from here on.)
    let bd = b.dir.path().to_path_buf();
    let out = set(&bd, &["--header", "X-Pay-Key"]);
    assert!(out.status.success(), "{}", text(&out));
    let out = gatehouse(
        &bd,
        &[
            "--json",
            "secret",
            "set",
            "pay",
            "--host",
            "api.pay.example",
            "--no-value",
        ],
        None,
    );
    assert!(out.status.success(), "{}", text(&out));
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(j["audit_entry"].as_u64().unwrap() > 1, "{j}");
    let out = gatehouse(&bd, &["secret", "delete", "pay"], None);
    assert!(out.status.success(), "{}", text(&out));
    // Deleting what is not there changes nothing and writes nothing.
    let out = gatehouse(&bd, &["secret", "delete", "pay"], None);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));

    // A console that claims a change the store contradicts is refused, and nothing is written.
    let name = CredentialName::parse("pay").unwrap();
    match b.ui().request(Body::Ui(UiRequest::CredentialChanged {
        name: name.clone(),
        deleted: false,
    })) {
        Body::Error(e) => assert_eq!(
            e.message,
            "credential pay does not exist in the store; not recorded"
        ),
        other => panic!("{other:?}"),
    }
    assert!(b.stop().success(), "{}", b.log());
    assert_eq!(
        credential_rows(&bd),
        [
            (
                "saved".to_string(),
                "hosts: api.pay.example; sent as: header x-pay-key; value: stored".to_string()
            ),
            (
                "saved".to_string(),
                "hosts: api.pay.example; sent as: bearer; value: not stored".to_string()
            ),
            (
                "deleted".to_string(),
                "the credential and any stored value were removed".to_string()
            ),
        ]
    );
    let line = verify_line(&bd);
    assert!(line.ends_with("entries, chain intact"), "{line}");

    // The value is nowhere in either log (positive control: the name is).
    for dir in [d, bd.as_path()] {
        let bytes = db_bytes(dir);
        assert!(contains(&bytes, "api.pay.example"));
        assert!(
            !contains(&bytes, VALUE),
            "the value is in {}",
            dir.display()
        );
    }
    let log = b.log();
    assert!(!log.contains(VALUE));
}

/// The pid of the broker's helper named `name`.
fn helper_pid(b: &BrokerUnderTest, name: &str) -> u32 {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        for p in gatehouse_tests::helpers_of(b.child.id()) {
            if std::fs::read_to_string(format!("/proc/{p}/comm")).is_ok_and(|c| c.trim() == name) {
                return p;
            }
        }
        assert!(Instant::now() < deadline, "no {name} under the broker");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn rows_stay_sealed_across_a_secrets_helper_crash() {
    let mut b = BrokerUnderTest::start(&[]);
    let d = b.dir.path().to_path_buf();
    let _c = Cleanup(&d);
    let first = helper_pid(&b, "secrets-helper");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(first as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    // A change right after the crash: the broker waits for the restarted helper, both to ask
    // it about the credential and to MAC the rows (the exit row included).
    let out = set(&d, &[]);
    assert!(out.status.success(), "{}\n{}", text(&out), b.log());
    let second = helper_pid(&b, "secrets-helper");
    assert_ne!(first, second, "the helper was restarted");
    assert!(b.stop().success(), "{}", b.log());
    let all = rows(&d);
    let exit = all
        .iter()
        .position(|r| r["kind"] == "helper_exit" && r["actor"] == "secrets-helper")
        .unwrap_or_else(|| panic!("no exit row: {all:?}"));
    let change = all.iter().position(|r| r["kind"] == "credential").unwrap();
    assert!(exit < change, "{all:?}");
    let line = verify_line(&d);
    assert_eq!(line, format!("{} entries, chain intact", all.len()));
}

#[test]
fn the_file_fallback_is_refused_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let out = gatehouse(dir.path(), &["broker", "--audit-key-fallback-file"], None);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("--audit-key-fallback-file was removed: the audit key is kept only by the secrets-helper"),
        "{}",
        text(&out)
    );
    assert!(!dir.path().join("data/audit.key").exists());
}

#[test]
fn a_log_whose_key_is_gone_refuses_the_broker_and_verify_says_so() {
    let mut b = BrokerUnderTest::start(&[]);
    let d = b.dir.path().to_path_buf();
    let _c = Cleanup(&d);
    assert!(b.stop().success());
    // Positive control: with its key the log checks out.
    assert!(verify_line(&d).ends_with("entries, chain intact"));
    forget_audit_key(&d);
    let out = gatehouse(&d, &["broker"], None);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("refusing to start: the audit log cannot be sealed: the audit key of log"),
        "{err}"
    );
    assert!(
        err.contains("is not in the keyutils store, and the log already has entries"),
        "{err}"
    );
    let line = verify_line(&d);
    assert!(
        line.contains(
            "entries, hashes linked, but the seal could not be checked: the audit key of log"
        ),
        "{line}"
    );
    // A credential change that could not be audited is not made.
    let out = set(&d, &[]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out)
            .contains("nothing was changed: the audit log cannot be sealed: the audit key of log"),
        "{}",
        text(&out)
    );
    let list = gatehouse(&d, &["secret", "list"], None);
    assert_eq!(
        String::from_utf8_lossy(&list.stdout),
        "no credentials (add one with `gatehouse secret set NAME --host HOST`)\n"
    );
}
