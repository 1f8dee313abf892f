// The Windows helper path: spawned confined, over a duplex pipe (issue 19).
#![cfg(windows)]
//! The secrets-helper binary as the Windows spawner starts it (`sandbox::windows::spawn_helper`):
//! the secrets profile's restricted token and job, the client end of a duplex pipe
//! (`channel_pair`) as its one inherited handle, named by `--channel-handle`. It locks down,
//! says hello with its typed Windows report, and serves the private channel's requests against
//! the Windows Credential Manager (through the `keyring` crate), which this test reads back
//! independently.
//!
//! Under Wine the token is not restricted and the job's limits are not all enforced: the spawn
//! and the helper run degraded there, and the broker's check of the hello refuses it strict.
//! Whether the Credential Manager answers a restricted token on real Windows has not been run.

use gatehouse_tests::windows::SecretsHelper as Helper;
use ipc_schema::secrets::{
    AuditHead, AuditInstance, AuditRow, CredentialName, CredentialSpec, HostPattern, SecretValue,
    SecretsReply, SecretsRequest, SendAs, StoreKind,
};
use ipc_schema::Body;

fn namespace() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    format!("wintest-{:08x}", h.finish() as u32)
}

/// A secrets-helper spawned as the Windows spawner spawns it, serving channel `channel` for
/// namespace `ns` of the Credential Manager.
fn spawn(ns: &str, channel: &str) -> Helper {
    Helper::spawn(vec![
        "--channel".into(),
        channel.into(),
        "--store".into(),
        "credential-manager".into(),
        "--namespace".into(),
        ns.into(),
    ])
}

fn name(s: &str) -> CredentialName {
    CredentialName::parse(s).unwrap()
}

/// The credential's entry in the Credential Manager, read by the test itself: the target name
/// the helper gives it (`secrets_helper`'s credman store, as keyutils names its keys).
fn stored(ns: &str, cred: &str) -> Result<Vec<u8>, keyring::Error> {
    let target = format!("gatehouse:{ns}:credential:{cred}");
    keyring::Entry::new_with_target(&target, "gatehouse", &target)?.get_secret()
}

#[test]
fn the_helper_serves_the_credential_manager_over_its_inherited_pipe() {
    let ns = namespace();
    let mut h = spawn(&ns, "private");
    // Positive control for the reads below: nothing of this namespace is stored yet.
    assert!(matches!(stored(&ns, "pay"), Err(keyring::Error::NoEntry)));
    match h.ask(SecretsRequest::Status) {
        SecretsReply::Status(s) => assert_eq!(s.kind, StoreKind::CredentialManager, "{s:?}"),
        other => panic!("{other:?}"),
    }
    let spec = CredentialSpec {
        name: name("pay"),
        hosts: vec![HostPattern::parse("api.example.com").unwrap()],
        send_as: SendAs::Bearer,
    };
    match h.ask(SecretsRequest::Set {
        spec: spec.clone(),
        value: Some(SecretValue::from_slice(b"s3cret-value")),
    }) {
        SecretsReply::Saved {
            info,
            value_dropped,
        } => {
            assert_eq!(info.spec, spec);
            assert!(info.present);
            assert!(!value_dropped);
        }
        other => panic!("{other:?}"),
    }
    // The Credential Manager holds it now, under the name the helper gives it.
    assert!(stored(&ns, "pay").is_ok(), "{:?}", stored(&ns, "pay"));
    match h.ask(SecretsRequest::List) {
        SecretsReply::Credentials(list) => {
            assert_eq!(list.len(), 1, "{list:?}");
            assert_eq!(list[0].spec.name, name("pay"));
        }
        other => panic!("{other:?}"),
    }
    // The broker's own helper (another process, its own channel) finds it and makes the
    // header for a host it was stored for; refused for any other.
    let mut b = spawn(&ns, "broker");
    match b.ask(SecretsRequest::Has { name: name("pay") }) {
        SecretsReply::Credential(Some(info)) => assert!(info.present, "{info:?}"),
        other => panic!("{other:?}"),
    }
    match b.ask(SecretsRequest::Attach {
        name: name("pay"),
        host: "api.example.com".into(),
    }) {
        SecretsReply::Attached(hdr) => {
            assert_eq!(hdr.name, "authorization");
            assert_eq!(hdr.value.expose(), b"Bearer s3cret-value");
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        b.ask(SecretsRequest::Attach {
            name: name("pay"),
            host: "evil.example.net".into(),
        }),
        SecretsReply::Failed(_)
    ));
    let (code, stderr) = b.close();
    assert_eq!(code, 0, "{stderr}");
    // The audit key: made once, then only found; MACs without the key leaving the helper.
    let instance = AuditInstance::parse(&format!("{ns}-audit")).unwrap();
    assert_eq!(
        h.ask(SecretsRequest::AuditKey {
            instance: instance.clone(),
            may_create: true,
        }),
        SecretsReply::AuditKey { created: true }
    );
    assert_eq!(
        h.ask(SecretsRequest::AuditKey {
            instance: instance.clone(),
            may_create: false,
        }),
        SecretsReply::AuditKey { created: false }
    );
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
    let mac = |h: &mut Helper| match h.ask(SecretsRequest::AuditMac {
        instance: instance.clone(),
        rows: rows.clone(),
        head: Some(head),
    }) {
        SecretsReply::AuditMacs { rows, head } => (rows, head.expect("the head's MAC")),
        other => panic!("{other:?}"),
    };
    let (macs, head_mac) = mac(&mut h);
    assert_eq!(macs.len(), 2);
    assert_ne!(macs[0], macs[1]);
    // The same key answers the same MACs (the key is kept, not made per request).
    assert_eq!(mac(&mut h), (macs, head_mac));
    match h.ask(SecretsRequest::Delete { name: name("pay") }) {
        SecretsReply::Deleted { existed } => assert!(existed),
        other => panic!("{other:?}"),
    }
    assert!(matches!(stored(&ns, "pay"), Err(keyring::Error::NoEntry)));
    // The audit key is not the test's to keep.
    let key = format!("gatehouse:audit-key-{}", instance.as_str());
    let _ = keyring::Entry::new_with_target(&key, "gatehouse", &key)
        .and_then(|e| e.delete_credential());
    // The broker closing the channel ends the helper cleanly.
    let (code, stderr) = h.close();
    assert_eq!(code, 0, "{stderr}");
}

#[test]
fn a_request_its_channel_does_not_carry_ends_the_helper() {
    let ns = namespace();
    // The broker's own channel never sets a credential (ipc_schema::route::BROKER_TO_SECRETS).
    let mut h = spawn(&ns, "broker");
    // Positive control: a request that channel carries is answered.
    assert!(matches!(
        h.ask(SecretsRequest::Status),
        SecretsReply::Status(_)
    ));
    h.send(Body::Secrets(SecretsRequest::Set {
        spec: CredentialSpec {
            name: name("pay"),
            hosts: vec![HostPattern::parse("api.example.com").unwrap()],
            send_as: SendAs::Bearer,
        },
        value: Some(SecretValue::from_slice(b"x")),
    }));
    let (code, stderr) = h.wait_exit();
    assert_eq!(code, ipc_schema::helper::FATAL_EXIT as u32, "{stderr}");
    assert!(stderr.contains("secrets-helper"), "{stderr}");
    assert!(stderr.contains("may not receive"), "{stderr}");
    assert!(matches!(stored(&ns, "pay"), Err(keyring::Error::NoEntry)));
}
