// The Windows helper path of the net-helper: spawned confined, over an overlapped pipe (issue 19).
#![cfg(windows)]
//! The net-helper binary as the Windows spawner starts it (`sandbox::windows::spawn_helper`,
//! the net profile's policy, `ChannelIo::Overlapped`): its hello, and the safe fetch through
//! its tokio channel against a DNS server and an HTTP server on loopback, with the address table
//! refusing what it refuses on Linux, and the egress proxy serving a socket duplicated into it. 127.0.0.2 is the one address test builds treat as public.
//! Under Wine the helper runs degraded (Wine restricts no token); the broker's check of its hello
//! says so.

mod common;

use common::*;
use ipc_schema::net::{NetReply, NetRequest, ProxyLimits, ProxySession, RefusalKind};
use ipc_schema::Body;
use std::sync::Arc;

fn start() -> (DnsServer, NetHelper) {
    let dns = DnsServer::start(standard_zone());
    let h = NetHelper::spawn(&args(&dns));
    (dns, h)
}

#[test]
fn the_hello_carries_the_windows_report_which_says_what_the_spawner_sees_and_the_broker_checks_it()
{
    let (_dns, h) = start();
    let report = &h.hello.lockdown;
    assert!(report.windows.is_some(), "{report:?}");
    let policy = sandbox::wincfg::helper_policy(&sandbox::Profile::Net).unwrap();
    // The spawner's view of the process against its report, then the broker's check.
    gatehouse_tests::windows::check_hello(&policy, &h.child, report);
    assert_eq!(
        h.close(),
        Some(0),
        "closing the channel ends the helper cleanly"
    );
}

#[test]
fn a_fetch_resolves_pins_and_wraps_and_the_address_table_refuses() {
    let (dns, mut h) = start();
    let http = HttpServer::start(PUBLIC, Arc::new(|_| text("hello from the test server")));
    // Positive control: a name whose every address is public (in the test build) is fetched,
    // pinned to the checked address, and wrapped as outside text.
    let url = format!("http://public.test:{}/page", http.addr.port());
    let page = match h.fetch(&url) {
        NetReply::Fetched(p) => p,
        other => panic!("not fetched: {other:?}"),
    };
    assert_eq!(page.status, 200);
    assert_eq!(page.address, ip("127.0.0.2"));
    assert_eq!(page.content_type, "text/plain");
    assert!(
        page.text.contains("hello from the test server"),
        "{}",
        page.text
    );
    assert!(
        page.text.contains(&format!("<external-{}", page.nonce)),
        "{}",
        page.text
    );
    assert_eq!(http.requests().len(), 1);
    assert!(!dns.queries_for("public.test.").is_empty());
    // A name with one private address among public ones is refused whole, before any
    // connection.
    let mixed = format!("http://mixed.test:{}/page", http.addr.port());
    match h.fetch(&mixed) {
        NetReply::Refused(r) => {
            assert_eq!(r.kind, RefusalKind::Address, "{r:?}");
            assert!(r.reason.contains("10.0.0.1"), "{}", r.reason);
        }
        other => panic!("mixed.test was not refused: {other:?}"),
    }
    // A loopback literal other than the test's public address.
    let lo = format!("http://127.0.0.1:{}/page", http.addr.port());
    match h.fetch(&lo) {
        NetReply::Refused(r) => {
            assert_eq!(r.kind, RefusalKind::Address, "{r:?}");
            assert!(r.reason.contains("loopback"), "{}", r.reason);
        }
        other => panic!("127.0.0.1 was not refused: {other:?}"),
    }
    assert_eq!(
        http.requests().len(),
        1,
        "no refused fetch reached the server"
    );
    // The egress proxy: a session, then a client connection the test (standing in for the
    // broker) duplicates into the helper and names after the frame.
    let token = "0123456789abcdef0123";
    let port = http.addr.port();
    match h.net(NetRequest::ProxyOpen(ProxySession {
        session: "s1".into(),
        token: token.into(),
        allow: vec!["public.test".into()],
        ports: vec![port],
        sni_check: false,
        limits: ProxyLimits::default(),
    })) {
        NetReply::ProxyOpened { session } => assert_eq!(session, "s1"),
        other => panic!("{other:?}"),
    }
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let mut client = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (theirs, _) = l.accept().unwrap();
    let passed = sandbox::windows::socket_into(h.child.process(), theirs.as_socket()).unwrap();
    drop(theirs);
    let id = h.send_with_handle(
        Body::Net(NetRequest::ProxyConnection {
            session: "s1".into(),
        }),
        passed,
    );
    use std::io::{Read, Write};
    use std::os::windows::io::AsSocket;
    write!(
        client,
        "CONNECT public.test:{port} HTTP/1.1\r\nProxy-Authorization: Bearer {token}\r\n\r\nGET /through HTTP/1.1\r\nHost: public.test\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    client
        .set_read_timeout(Some(std::time::Duration::from_secs(30)))
        .unwrap();
    let mut got = Vec::new();
    let read = client.read_to_end(&mut got);
    let got = String::from_utf8_lossy(&got);
    assert!(read.is_ok(), "{read:?} after {got:?}");
    assert!(got.starts_with("HTTP/1.1 200 "), "{got}");
    assert!(got.contains("hello from the test server"), "{got}");
    drop(client);
    match h.wait(id) {
        Body::NetReply(NetReply::ProxyDone(r)) => {
            assert_eq!(r.session, "s1");
            assert!(r.target.contains("public.test"), "{r:?}");
            assert!(
                matches!(r.verdict, ipc_schema::net::EgressVerdict::Tunnelled { .. }),
                "{r:?}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        http.requests().len(),
        2,
        "the tunnelled GET reached the server"
    );
    // A value that names no socket of the helper's: the connection is refused with the
    // reason, and the helper serves on.
    let id = h.send_with_handle(
        Body::Net(NetRequest::ProxyConnection {
            session: "s1".into(),
        }),
        ipc_schema::helper::Passed(0x7ff0),
    );
    match h.wait(id) {
        Body::NetReply(NetReply::ProxyDone(r)) => match r.verdict {
            ipc_schema::net::EgressVerdict::Refused { status: 0, reason } => {
                assert!(reason.contains("GetHandleInformation"), "{reason}")
            }
            other => panic!("{other:?}"),
        },
        other => panic!("{other:?}"),
    }
    // Still serving.
    assert!(matches!(h.fetch(&url), NetReply::Fetched(_)));
    assert_eq!(h.close(), Some(0));
}
