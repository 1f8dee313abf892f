// Drives the Linux binaries (ipc_schema::platform::Missing elsewhere).
#![cfg(target_os = "linux")]
//! The secrets-helper binary, started as the broker starts it (fd 3, empty environment, real
//! lockdown), against both stores: the kernel keyutils user keyring and a real Secret Service
//! (gnome-keyring-daemon on a private session bus).

mod common;

use base64::Engine;
use common::*;
use ipc_schema::secrets::{
    AuditHead, AuditInstance, AuditRow, BasicUser, HeaderName, SecretsErrorKind, SecretsReply,
    SecretsRequest, SendAs, StoreKind,
};
use ipc_schema::{Body, Role};
use std::time::Duration;

const VALUE: &str = "tok-9f8e7d6c5b4a-GH-TEST";

fn failed(r: SecretsReply) -> (SecretsErrorKind, String) {
    match r {
        SecretsReply::Failed(e) => (e.kind, e.message),
        other => panic!("expected a failure, got {other:?}"),
    }
}

/// The whole life of a credential: set, list, attach only to its hosts, a binding change that
/// drops the value, delete.
fn credential_lifecycle(args: Vec<std::ffi::OsString>) {
    let n = name("api");
    let _cleanup = Cleanup(args.clone(), vec![n.clone(), name("basic")]);
    // Stored and removed through a command's own helper, attached through the broker's, on
    // the same store (each channel serves only its own requests).
    let mut h = spawn(&args);
    let mut b = spawn(&on_channel(args.clone(), "broker"));

    let saved = ask(
        &mut h,
        SecretsRequest::Set {
            spec: spec("api", &["API.example.com", "b.example.com"], SendAs::Bearer),
            value: Some(value(VALUE)),
        },
    );
    match saved {
        SecretsReply::Saved {
            info,
            value_dropped,
        } => {
            assert!(info.present && !value_dropped);
            let hosts: Vec<String> = info.spec.hosts.iter().map(|h| h.to_string()).collect();
            assert_eq!(hosts, ["api.example.com", "b.example.com"]);
        }
        other => panic!("{other:?}"),
    }
    match ask(&mut h, SecretsRequest::List) {
        SecretsReply::Credentials(list) => {
            assert_eq!(list.len(), 1, "{list:?}");
            assert_eq!(list[0].spec.name, n);
            assert!(list[0].present);
        }
        other => panic!("{other:?}"),
    }

    // The header for an allowed host: the value, as a bearer token, for that host only.
    match ask(
        &mut b,
        SecretsRequest::Attach {
            name: n.clone(),
            host: "api.example.com.".into(),
        },
    ) {
        SecretsReply::Attached(hdr) => {
            assert_eq!(hdr.host, "api.example.com");
            assert_eq!(hdr.name, "authorization");
            assert_eq!(hdr.value.expose(), format!("Bearer {VALUE}").as_bytes());
            assert_eq!(hdr.scrub, vec![value(VALUE)]);
            assert!(!format!("{hdr:?}").contains(VALUE));
        }
        other => panic!("{other:?}"),
    }
    // Any other host is refused, however close.
    for host in [
        "evil.example.com",
        "api.example.com.evil.net",
        "example.com",
        "127.0.0.1",
    ] {
        let (kind, msg) = failed(ask(
            &mut b,
            SecretsRequest::Attach {
                name: n.clone(),
                host: host.into(),
            },
        ));
        assert_eq!(kind, SecretsErrorKind::HostNotAllowed, "{host}: {msg}");
        assert_eq!(
            msg,
            format!(
                "credential api may be sent only to api.example.com, b.example.com, not to {host}"
            )
        );
    }
    let (kind, _) = failed(ask(
        &mut b,
        SecretsRequest::Attach {
            name: name("nope"),
            host: "api.example.com".into(),
        },
    ));
    assert_eq!(kind, SecretsErrorKind::NotFound);

    // Re-stating the same binding keeps the value; changing the hosts drops it.
    match ask(
        &mut h,
        SecretsRequest::Set {
            spec: spec("api", &["b.example.com", "api.example.com"], SendAs::Bearer),
            value: None,
        },
    ) {
        SecretsReply::Saved {
            info,
            value_dropped,
        } => assert!(info.present && !value_dropped),
        other => panic!("{other:?}"),
    }
    match ask(
        &mut h,
        SecretsRequest::Set {
            spec: spec("api", &["other.example.com"], SendAs::Bearer),
            value: None,
        },
    ) {
        SecretsReply::Saved {
            info,
            value_dropped,
        } => assert!(!info.present && value_dropped),
        other => panic!("{other:?}"),
    }
    let (kind, msg) = failed(ask(
        &mut b,
        SecretsRequest::Attach {
            name: n.clone(),
            host: "other.example.com".into(),
        },
    ));
    assert_eq!(kind, SecretsErrorKind::NoValue, "{msg}");
    // Changing only the way it is sent drops a value too.
    ask(
        &mut h,
        SecretsRequest::Set {
            spec: spec("api", &["other.example.com"], SendAs::Bearer),
            value: Some(value(VALUE)),
        },
    );
    let header = SendAs::Header(HeaderName::parse("X-Api-Key").unwrap());
    match ask(
        &mut h,
        SecretsRequest::Set {
            spec: spec("api", &["other.example.com"], header),
            value: None,
        },
    ) {
        SecretsReply::Saved { value_dropped, .. } => assert!(value_dropped),
        other => panic!("{other:?}"),
    }

    // Basic auth: the token is base64(user:value), and both forms are scrubbed.
    ask(
        &mut h,
        SecretsRequest::Set {
            spec: spec(
                "basic",
                &["*.example.org"],
                SendAs::Basic(BasicUser::parse("alice").unwrap()),
            ),
            value: Some(value(VALUE)),
        },
    );
    let token = base64::engine::general_purpose::STANDARD.encode(format!("alice:{VALUE}"));
    match ask(
        &mut b,
        SecretsRequest::Attach {
            name: name("basic"),
            host: "api.example.org".into(),
        },
    ) {
        SecretsReply::Attached(hdr) => {
            assert_eq!(hdr.value.expose(), format!("Basic {token}").as_bytes());
            assert_eq!(hdr.scrub, vec![value(VALUE), value(&token)]);
        }
        other => panic!("{other:?}"),
    }
    let (kind, _) = failed(ask(
        &mut b,
        SecretsRequest::Attach {
            name: name("basic"),
            host: "example.org".into(),
        },
    ));
    assert_eq!(
        kind,
        SecretsErrorKind::HostNotAllowed,
        "a wildcard matches strict subdomains only"
    );

    // Values that could not go into a header are refused, and nothing is stored.
    let (kind, msg) = failed(ask(
        &mut h,
        SecretsRequest::Set {
            spec: spec("bad", &["a.example.com"], SendAs::Bearer),
            value: Some(value("two\nlines-here")),
        },
    ));
    assert_eq!(kind, SecretsErrorKind::Invalid);
    assert!(msg.contains("control character"), "{msg}");
    assert!(matches!(
        ask(&mut h, SecretsRequest::Has { name: name("bad") }),
        SecretsReply::Credential(None)
    ));

    for (cred, existed) in [("api", true), ("basic", true), ("api", false)] {
        match ask(&mut h, SecretsRequest::Delete { name: name(cred) }) {
            SecretsReply::Deleted { existed: e } => assert_eq!(e, existed, "{cred}"),
            other => panic!("{other:?}"),
        }
    }
    match ask(&mut h, SecretsRequest::List) {
        SecretsReply::Credentials(list) => assert!(list.is_empty(), "{list:?}"),
        other => panic!("{other:?}"),
    }
}

/// The helper is really locked down (the kernel says so), whatever the store.
fn assert_locked_down(h: &gatehouse_tests::HelperUnderTest) {
    assert_eq!(h.hello.role, Role::Secrets);
    assert_eq!(h.hello.lockdown.profile, "secrets");
    let st = sandbox::process::read_proc_status(h.child.id()).unwrap();
    assert_eq!(st.seccomp, 2, "seccomp filter mode");
    assert!(st.no_new_privs);
    assert_eq!(st.cap_eff, 0);
}

#[test]
fn keyutils_credential_lifecycle() {
    credential_lifecycle(keyutils_args(&namespace("ku")));
}

#[test]
fn secret_service_credential_lifecycle() {
    let ss = SecretServiceUnderTest::start();
    credential_lifecycle(ss_args(&ss.address, &namespace("ss")));
}

#[test]
fn status_names_the_configured_store_and_its_limits() {
    let ns = namespace("st");
    let mut h = spawn(&keyutils_args(&ns));
    assert_locked_down(&h);
    match ask(&mut h, SecretsRequest::Status) {
        SecretsReply::Status(s) => {
            assert_eq!(s.kind, StoreKind::Keyutils);
            assert!(!s.survives_reboot);
            assert_eq!(s.problem, None);
            assert_eq!(s.namespace, ns);
            assert!(
                s.doctor_line().contains("do NOT survive a reboot"),
                "{}",
                s.doctor_line()
            );
        }
        other => panic!("{other:?}"),
    }

    let ss = SecretServiceUnderTest::start();
    let mut h = spawn(&ss_args(&ss.address, &ns));
    // Locked down with the bus socket kept: the kernel's view, not the helper's word.
    assert_locked_down(&h);
    match ask(&mut h, SecretsRequest::Status) {
        SecretsReply::Status(s) => {
            assert_eq!(s.kind, StoreKind::SecretService);
            assert!(s.survives_reboot);
            assert_eq!(s.problem, None);
            assert!(s.location.contains(&ss.address), "{}", s.location);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn an_unreachable_secret_service_fails_closed_without_falling_back() {
    let ns = namespace("down");
    let dir = tempfile::tempdir().unwrap();
    let addr = format!("unix:path={}/no-bus", dir.path().display());
    let mut h = spawn(&ss_args(&addr, &ns));
    assert_locked_down(&h);
    match ask(&mut h, SecretsRequest::Status) {
        SecretsReply::Status(s) => {
            assert_eq!(
                s.kind,
                StoreKind::SecretService,
                "never swapped for keyutils"
            );
            let p = s.problem.expect("a problem");
            assert!(p.contains("cannot connect to the D-Bus session bus"), "{p}");
        }
        other => panic!("{other:?}"),
    }
    let (kind, msg) = failed(ask(
        &mut h,
        SecretsRequest::Set {
            spec: spec("api", &["a.example.com"], SendAs::Bearer),
            value: Some(value(VALUE)),
        },
    ));
    assert_eq!(kind, SecretsErrorKind::Store);
    assert!(
        msg.starts_with("the secret-service store cannot be used"),
        "{msg}"
    );
    // Nothing went to the kernel keyring instead.
    let mut ku = spawn(&keyutils_args(&ns));
    assert!(matches!(
        ask(&mut ku, SecretsRequest::List),
        SecretsReply::Credentials(l) if l.is_empty()
    ));
}

#[test]
fn a_stopped_secret_service_gets_a_clear_error_and_the_helper_stops() {
    let ss = SecretServiceUnderTest::start();
    let mut h = spawn(&ss_args(&ss.address, &namespace("gone")));
    assert!(matches!(
        ask(&mut h, SecretsRequest::List),
        SecretsReply::Credentials(_)
    ));
    drop(ss);
    h.conn.set_timeout(Some(Duration::from_secs(30)));
    let (kind, msg) = failed(ask(&mut h, SecretsRequest::List));
    assert_eq!(kind, SecretsErrorKind::Store);
    assert!(
        msg.contains("connection to the secret-service store broke"),
        "{msg}"
    );
    // It exits after answering, so that the broker restarts it (and it reconnects).
    let status = h.child.wait().unwrap();
    assert_eq!(status.code(), Some(70));
}

fn audit_key_round(
    args: Vec<std::ffi::OsString>,
    read_key: impl Fn(&AuditInstance) -> [u8; 32],
    cleanup: impl Fn(&AuditInstance),
) {
    let inst = AuditInstance::parse(&format!("test{}", namespace("a").replace('-', ""))).unwrap();
    let mut h = spawn(&args);
    let (kind, msg) = failed(ask(
        &mut h,
        SecretsRequest::AuditKey {
            instance: inst.clone(),
            may_create: false,
        },
    ));
    assert_eq!(kind, SecretsErrorKind::AuditKeyMissing, "{msg}");
    let (kind, _) = failed(ask(
        &mut h,
        SecretsRequest::AuditMac {
            instance: inst.clone(),
            rows: vec![],
            head: None,
        },
    ));
    assert_eq!(
        kind,
        SecretsErrorKind::AuditKeyMissing,
        "MAC never creates a key"
    );
    assert!(matches!(
        ask(
            &mut h,
            SecretsRequest::AuditKey {
                instance: inst.clone(),
                may_create: true
            }
        ),
        SecretsReply::AuditKey { created: true }
    ));
    let rows = vec![
        AuditRow {
            seq: 1,
            hash: [1; 32],
        },
        AuditRow {
            seq: 2,
            hash: [2; 32],
        },
    ];
    let head = AuditHead {
        count: 2,
        head: [2; 32],
    };
    let (macs, head_mac) = match ask(
        &mut h,
        SecretsRequest::AuditMac {
            instance: inst.clone(),
            rows: rows.clone(),
            head: Some(head),
        },
    ) {
        SecretsReply::AuditMacs { rows, head } => (rows, head.unwrap()),
        other => panic!("{other:?}"),
    };
    // What verify-audit computes with the key it reads from the store directly.
    use hmac::{Hmac, Mac};
    let key = read_key(&inst);
    let mac = |parts: &[&[u8]]| {
        let mut m = Hmac::<sha2::Sha256>::new_from_slice(&key).unwrap();
        for p in parts {
            m.update(p);
        }
        <[u8; 32]>::from(m.finalize().into_bytes())
    };
    assert_eq!(macs[0], mac(&[b"row", &1i64.to_le_bytes(), &[1; 32]]));
    assert_eq!(macs[1], mac(&[b"row", &2i64.to_le_bytes(), &[2; 32]]));
    let ilen = (inst.as_str().len() as u32).to_le_bytes();
    assert_eq!(
        head_mac,
        mac(&[
            b"head",
            &ilen,
            inst.as_str().as_bytes(),
            &2i64.to_le_bytes(),
            &[2; 32]
        ])
    );
    // A second helper (a restart) finds the same key and does not make another.
    let mut h2 = spawn(&args);
    assert!(matches!(
        ask(
            &mut h2,
            SecretsRequest::AuditKey {
                instance: inst.clone(),
                may_create: true
            }
        ),
        SecretsReply::AuditKey { created: false }
    ));
    match ask(
        &mut h2,
        SecretsRequest::AuditMac {
            instance: inst.clone(),
            rows: rows.clone(),
            head: None,
        },
    ) {
        SecretsReply::AuditMacs {
            rows: again,
            head: None,
        } => assert_eq!(again, macs),
        other => panic!("{other:?}"),
    }
    cleanup(&inst);
}

#[test]
fn keyutils_audit_key_is_made_once_used_here_and_readable_where_verify_audit_looks() {
    use linux_keyutils::{KeyRing, KeyRingIdentifier};
    // The name logs written before the key moved here were sealed under, and where the tests'
    // and the demo's clean-up look.
    let find = |inst: &AuditInstance| {
        let user = KeyRing::from_special_id(KeyRingIdentifier::User, false).unwrap();
        user.search(&format!("gatehouse:audit-key-{}", inst.as_str()))
            .unwrap()
    };
    audit_key_round(
        keyutils_args(&namespace("ak")),
        |inst| {
            let text = find(inst).read_to_vec().unwrap();
            hex::decode(text).unwrap().try_into().unwrap()
        },
        |inst| find(inst).invalidate().unwrap(),
    );
}

#[test]
fn secret_service_audit_key_is_made_once_and_used_here() {
    let ss = SecretServiceUnderTest::start();
    let addr = ss.address.clone();
    audit_key_round(
        ss_args(&ss.address, &namespace("aks")),
        move |inst| {
            let out = std::process::Command::new("secret-tool")
                .env_clear()
                .env("DBUS_SESSION_BUS_ADDRESS", &addr)
                .args([
                    "lookup",
                    "gatehouse",
                    "audit-key",
                    "gatehouse-instance",
                    inst.as_str(),
                ])
                .output()
                .expect("secret-tool (Debian package libsecret-tools)");
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            hex::decode(String::from_utf8(out.stdout).unwrap().trim())
                .unwrap()
                .try_into()
                .unwrap()
        },
        |_| {},
    );
}

#[test]
fn a_message_for_another_helper_ends_the_helper_and_ping_is_answered() {
    let mut h = spawn(&keyutils_args(&namespace("rt")));
    assert_eq!(h.request(Body::Ping { target: None }), Body::Pong);
    // A confused broker sending another helper's request: the helper stops (exit 70).
    h.conn.send(Body::Fs(ipc_schema::fs::FsRequest::Status));
    assert!(h.conn.recv().is_none(), "no reply to a forbidden kind");
    assert_eq!(h.child.wait().unwrap().code(), Some(70));
}

/// `--channel broker`: the broker's own helper serves what the broker asks
/// (`ipc_schema::route::BROKER_TO_SECRETS`) and ends on a `Set`, a `Delete` or a `List`, which
/// only a CLI's own helper (`--channel private`) serves; that one makes no request headers.
#[test]
fn the_brokers_helper_refuses_to_set_delete_or_list() {
    let ns = namespace("chan");
    let with = |channel: &str| on_channel(keyutils_args(&ns), channel);
    let _cleanup = Cleanup(keyutils_args(&ns), vec![name("api")]);
    let set = || SecretsRequest::Set {
        spec: spec("api", &["api.example.com"], SendAs::Bearer),
        value: Some(value(VALUE)),
    };
    for refused in [
        set(),
        SecretsRequest::Delete { name: name("api") },
        SecretsRequest::List,
    ] {
        let mut h = spawn(&with("broker"));
        // Positive control: the same helper answers what the broker may ask.
        assert!(matches!(
            ask(&mut h, SecretsRequest::Has { name: name("api") }),
            SecretsReply::Credential(None)
        ));
        h.conn.send(Body::Secrets(refused));
        assert_eq!(h.child.wait().unwrap().code(), Some(70));
    }
    // Nothing was stored by the refused Set.
    let mut private = spawn(&with("private"));
    assert!(matches!(
        ask(&mut private, SecretsRequest::Has { name: name("api") }),
        SecretsReply::Credential(None)
    ));
    assert!(matches!(
        ask(&mut private, set()),
        SecretsReply::Saved { .. }
    ));
    private.conn.send(Body::Secrets(SecretsRequest::Attach {
        name: name("api"),
        host: "api.example.com".into(),
    }));
    assert_eq!(private.child.wait().unwrap().code(), Some(70));
    // A channel that does not exist is a usage error.
    let out = std::process::Command::new(gatehouse_tests::bin(Role::Secrets.name()))
        .args(with("other"))
        .output()
        .unwrap();
    assert_ne!(out.status.code(), Some(0));
    // Without a channel it serves nothing: whose table to apply is not guessed.
    let mut bare = keyutils_args(&ns);
    bare.truncate(bare.len() - 2);
    let out = std::process::Command::new(gatehouse_tests::bin(Role::Secrets.name()))
        .args(&bare)
        .output()
        .unwrap();
    assert_ne!(out.status.code(), Some(0));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--channel broker|private is required"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
