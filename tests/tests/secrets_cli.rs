// Drives the Linux binaries (ipc_schema::platform::Missing elsewhere).
#![cfg(target_os = "linux")]
//! `gatehouse secret set|delete|list|status`, and the fronts that must never carry a secret:
//! a ui or gateway peer that asks the broker for anything of the secrets helper is killed.

#![forbid(unsafe_code)]

use gatehouse_tests::misbehaving_peer;
use gatehouse_tests::{bin, BrokerUnderTest};
use ipc_schema::codec::encode;
use ipc_schema::secrets::{CredentialName, SecretsRequest};
use ipc_schema::{Body, Envelope};
use std::io::{Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const VALUE: &str = "ghp_T0kenValue-for-cli-test";

fn gatehouse(dir: &Path, args: &[&str], stdin: Option<&str>) -> Output {
    gatehouse_tests::gatehouse_cli(dir, args, stdin)
}

fn text(o: &Output) -> String {
    gatehouse_tests::output_text(o)
}

/// Deletes the test's credentials from the user keyring when the test ends, pass or fail, and
/// the audit key of the instance's log (each change is audited, which makes a log and its key).
struct Cleanup<'a>(&'a Path, &'a [&'a str]);

impl Drop for Cleanup<'_> {
    fn drop(&mut self) {
        for n in self.1 {
            let _ = gatehouse(self.0, &["secret", "delete", n], None);
        }
        gatehouse_tests::forget_audit_key(self.0);
    }
}

#[test]
fn secret_set_list_delete_never_print_the_value() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let _c = Cleanup(d, &["gh"]);
    let set = gatehouse(
        d,
        &[
            "secret",
            "set",
            "gh",
            "--host",
            "api.github.com",
            "--header",
            "X-Api-Key",
            "--stdin",
        ],
        Some(&format!("{VALUE}\n")),
    );
    assert!(set.status.success(), "{}", text(&set));
    assert_eq!(
        String::from_utf8_lossy(&set.stdout),
        "credential gh saved: sent to api.github.com as header x-api-key; value stored\n"
    );
    let list = gatehouse(d, &["secret", "list"], None);
    assert!(list.status.success(), "{}", text(&list));
    assert_eq!(
        String::from_utf8_lossy(&list.stdout),
        "gh\thosts: api.github.com\tsent as: header x-api-key\tvalue: stored\n"
    );
    let json = gatehouse(d, &["--json", "secret", "list"], None);
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(v[0]["name"], "gh");
    assert_eq!(v[0]["present"], true);
    assert_eq!(v[0]["header"], "x-api-key");
    let status = gatehouse(d, &["secret", "status"], None);
    assert!(
        text(&status).contains("credential store keyutils"),
        "{}",
        text(&status)
    );
    assert!(
        text(&status).contains("do NOT survive a reboot"),
        "{}",
        text(&status)
    );

    // Changing the hosts without a value drops the stored one.
    let rebind = gatehouse(
        d,
        &["secret", "set", "gh", "--host", "example.com", "--no-value"],
        None,
    );
    assert!(rebind.status.success(), "{}", text(&rebind));
    assert!(
        text(&rebind).contains("its value was dropped"),
        "{}",
        text(&rebind)
    );
    let list2 = gatehouse(d, &["--json", "secret", "list"], None);
    let v: serde_json::Value = serde_json::from_slice(&list2.stdout).unwrap();
    assert_eq!(v[0]["present"], false);
    assert_eq!(v[0]["send_as"], "bearer");

    let del = gatehouse(d, &["secret", "delete", "gh"], None);
    assert!(del.status.success(), "{}", text(&del));
    let again = gatehouse(d, &["secret", "delete", "gh"], None);
    assert_eq!(again.status.code(), Some(1));
    assert!(text(&again).contains("there is no credential named gh"));
    for o in [&set, &list, &json, &status, &rebind, &list2, &del, &again] {
        assert!(!text(o).contains(VALUE), "printed the value: {}", text(o));
    }
}

#[test]
fn bad_input_is_refused_with_a_reason_and_nothing_is_stored() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let _c = Cleanup(d, &["x"]);
    for (args, input, want) in [
        (
            &["secret", "set", "x", "--host", "a.com"][..],
            Some("v"),
            "stdin is not a terminal: pass --stdin",
        ),
        (
            &["secret", "set", "x", "--host", "a.com", "--stdin"],
            Some("short\n"),
            "a credential value has 6 to 4096",
        ),
        (
            &["secret", "set", "x", "--host", "a.com", "--stdin"],
            Some("two\nlines-x\n"),
            "control character",
        ),
        (
            &["secret", "set", "x", "--host", "https://a.com/", "--stdin"],
            Some("long-enough"),
            "without scheme, port or path",
        ),
        (
            &["secret", "set", "x y", "--host", "a.com", "--stdin"],
            Some("long-enough"),
            "use letters, digits",
        ),
        (
            &[
                "secret", "set", "x", "--host", "a.com", "--header", "Host", "--stdin",
            ],
            Some("long-enough"),
            "cannot be sent as the Host header",
        ),
    ] {
        let o = gatehouse(d, args, input);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {}", text(&o));
        assert!(text(&o).contains(want), "{args:?}: {}", text(&o));
    }
    std::fs::create_dir_all(d.join("config")).unwrap();
    std::fs::write(
        d.join("config/config.toml"),
        "[secrets]\nstore = \"kwallet\"\n",
    )
    .unwrap();
    let o = gatehouse(d, &["secret", "list"], None);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o).contains("is not a store; use \"keyutils\" or \"secret-service\""),
        "{}",
        text(&o)
    );
    // Another OS's store is refused by name, never swapped for this one's.
    std::fs::write(
        d.join("config/config.toml"),
        "[secrets]\nstore = \"keychain\"\n",
    )
    .unwrap();
    let o = gatehouse(d, &["secret", "list"], None);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o).contains("[secrets] store = \"keychain\": the keychain store exists only on macos, not on linux; on linux choose \"keyutils\" or \"secret-service\" in [secrets] store"),
        "{}",
        text(&o)
    );
    std::fs::remove_file(d.join("config/config.toml")).unwrap();
    let list = gatehouse(d, &["--json", "secret", "list"], None);
    assert_eq!(String::from_utf8_lossy(&list.stdout).trim(), "[]");
}

#[test]
fn the_value_typed_at_the_terminal_is_not_echoed() {
    use nix::pty::openpty;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let _c = Cleanup(d, &["tty"]);
    let pty = openpty(None, None).unwrap();
    let child = Command::new(bin("gatehouse"))
        .arg("--data-dir")
        .arg(d)
        .args(["secret", "set", "tty", "--host", "a.example.com"])
        .stdin(Stdio::from(pty.slave.try_clone().unwrap()))
        .stderr(Stdio::from(pty.slave.try_clone().unwrap()))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    drop(pty.slave);
    let mut master = std::fs::File::from(pty.master);
    // Wait for the prompt (it comes after echo is off), then type.
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !String::from_utf8_lossy(&seen).contains("(input hidden): ") {
        assert!(
            Instant::now() < deadline,
            "no prompt: {}",
            String::from_utf8_lossy(&seen)
        );
        let mut b = [0u8; 256];
        let n = master.read(&mut b).unwrap();
        seen.extend_from_slice(&b[..n]);
    }
    master.write_all(format!("{VALUE}\n").as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("value stored"));
    // Whatever the terminal showed after the prompt: never the value.
    let mut rest = [0u8; 4096];
    if let Ok(n) = master.read(&mut rest) {
        seen.extend_from_slice(&rest[..n]);
    }
    let shown = String::from_utf8_lossy(&seen);
    assert!(!shown.contains(VALUE), "echoed: {shown}");
    // Positive control: the value did arrive (the stored credential has one).
    let list = gatehouse(d, &["--json", "secret", "list"], None);
    let v: serde_json::Value = serde_json::from_slice(&list.stdout).unwrap();
    assert_eq!(v[0]["present"], true);
}

/// Runs `gatehouse ARGS` in a fresh anonymous session keyring (one that does not link the user
/// keyring), as a system service with KeyringMode=private or `keyctl new_session` would.
fn gatehouse_in_new_session(dir: &Path, args: &[&str], stdin: Option<&str>) -> Output {
    let script = "import ctypes,os,sys\n\
                  nr={'x86_64':250,'aarch64':219}[os.uname().machine]\n\
                  l=ctypes.CDLL(None,use_errno=True)\n\
                  assert l.syscall(nr,1,None)>0,'KEYCTL_JOIN_SESSION_KEYRING failed'\n\
                  os.execv(sys.argv[1],sys.argv[1:])\n";
    let mut cmd = Command::new("python3");
    cmd.args(["-c", script])
        .arg(bin("gatehouse"))
        .arg("--data-dir")
        .arg(dir)
        .args(args);
    gatehouse_tests::run_with_stdin(cmd, stdin)
}

#[test]
fn credentials_work_from_a_session_keyring_without_the_user_keyring() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let _c = Cleanup(d, &["sess"]);
    let set = gatehouse_in_new_session(
        d,
        &[
            "secret",
            "set",
            "sess",
            "--host",
            "a.example.com",
            "--stdin",
        ],
        Some(&format!("{VALUE}\n")),
    );
    assert!(set.status.success(), "{}", text(&set));
    // The same credential from an ordinary session (the broker's, a later shell) and back.
    let list = gatehouse(d, &["--json", "secret", "list"], None);
    let v: serde_json::Value = serde_json::from_slice(&list.stdout).unwrap();
    assert_eq!(v[0]["present"], true, "{}", text(&list));
    let del = gatehouse_in_new_session(d, &["secret", "delete", "sess"], None);
    assert!(del.status.success(), "{}", text(&del));
}

#[test]
fn a_front_that_asks_for_secrets_is_killed() {
    let b = BrokerUnderTest::start(&[]);
    let asks = [
        Body::Secrets(SecretsRequest::List),
        Body::Secrets(SecretsRequest::Attach {
            name: CredentialName::parse("gh").unwrap(),
            host: "api.github.com".into(),
        }),
    ];
    for body in asks {
        let frame = encode(&Envelope::new(1, body.clone())).unwrap();
        for socket in [b.gateway_socket(), b.ui_socket()] {
            let st = misbehaving_peer(&socket, &frame);
            assert_eq!(
                st.signal(),
                Some(libc::SIGKILL),
                "{body:?} on {}",
                socket.display()
            );
        }
    }
    let log = b.log();
    assert!(
        log.contains("Secrets message, which the gateway may not send"),
        "{log}"
    );
    assert!(
        log.contains("Secrets message, which the ui may not send"),
        "{log}"
    );
}
