// Drives the Linux binaries (ipc_schema::platform::Missing elsewhere).
#![cfg(target_os = "linux")]
//! The broker channel fails closed: a descriptor without its frame, a `ProxyConnection` without
//! its descriptor, or a message the net-helper may not receive ends the helper. And the switches
//! test builds have do not exist in the release binary.

mod common;

use common::*;
use ipc_schema::fs::FsRequest;
use ipc_schema::net::NetRequest;
use ipc_schema::{Body, Role};
use std::os::unix::net::UnixStream;
use std::os::unix::process::ExitStatusExt;
use std::process::Command;

fn stderr_of(h: NetHelper) -> (Option<i32>, Option<i32>) {
    let st = h.wait_exit();
    (st.code(), st.signal())
}

#[test]
fn a_descriptor_without_a_proxy_connection_frame_ends_the_helper() {
    let dns = DnsServer::start(standard_zone());
    let mut h = NetHelper::spawn(&args(&dns));
    assert_eq!(
        h.request(Body::Ping { target: None }),
        Body::Pong,
        "positive control"
    );
    let (_a, b) = UnixStream::pair().unwrap();
    h.send_with_fd(Body::Ping { target: None }, &b);
    assert_eq!(stderr_of(h), (Some(70), None));
}

#[test]
fn a_proxy_connection_without_its_descriptor_ends_the_helper() {
    let dns = DnsServer::start(standard_zone());
    let mut h = NetHelper::spawn(&args(&dns));
    h.send(Body::Net(NetRequest::ProxyConnection {
        session: "s".into(),
    }));
    assert_eq!(stderr_of(h), (Some(70), None));
}

#[test]
fn another_helpers_message_ends_the_helper() {
    let dns = DnsServer::start(standard_zone());
    let mut h = NetHelper::spawn(&args(&dns));
    h.send(Body::Fs(FsRequest::Status));
    assert_eq!(stderr_of(h), (Some(70), None));
}

#[test]
fn release_binary_lacks_the_test_switches() {
    let release = gatehouse_tests::release_dir().join(Role::Net.name());
    for (switch, value) in [
        ("--test-public-addr", "127.0.0.2"),
        ("--test-extra-root", "/dev/null"),
        ("--test-skip-lockdown", ""),
    ] {
        let mut cmd = Command::new(&release);
        cmd.arg(switch);
        if !value.is_empty() {
            cmd.arg(value);
        }
        let out = cmd.output().unwrap();
        assert_eq!(out.status.code(), Some(64), "{switch}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(&format!("unknown argument \"{switch}\"")),
            "{switch}: {err}"
        );
    }
    // The test build has them (it gets past argument parsing to the missing channel), so the
    // check above is not vacuous.
    let out = Command::new(gatehouse_tests::bin(Role::Net.name()))
        .args([
            "--nameserver",
            "127.0.0.1",
            "--test-public-addr",
            "127.0.0.2",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no broker channel"), "{err}");
}
