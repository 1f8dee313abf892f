// Drives the Linux binaries (ipc_schema::platform::Missing elsewhere).
#![cfg(target_os = "linux")]
//! The egress proxy through the locked-down helper. Client connections reach the helper the way
//! the broker hands them over: a connected socket passed with SCM_RIGHTS beside a
//! `ProxyConnection` frame. Each case checks the status the client sees and the audit row.

mod common;

use common::*;
use ipc_schema::net::{
    EgressRecord, EgressVerdict, NetReply, NetRequest, ProxyLimits, ProxySession,
};
use ipc_schema::Body;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::Duration;

const TOKEN: &str = "tok-0123456789abcdef";

/// A TCP echo server on the public test address.
fn echo_server() -> std::net::SocketAddr {
    let l = TcpListener::bind((PUBLIC, 0)).unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for c in l.incoming().flatten() {
            std::thread::spawn(move || {
                let mut c = c;
                let mut buf = [0u8; 4096];
                while let Ok(n) = c.read(&mut buf) {
                    if n == 0 || c.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            });
        }
    });
    addr
}

fn session(ports: Vec<u16>) -> ProxySession {
    ProxySession {
        session: "s1".into(),
        token: TOKEN.into(),
        allow: vec![
            "public.test".into(),
            "*.allowed.test".into(),
            "127.0.0.2".into(),
            "127.0.0.1".into(),
            "mixed.test".into(),
            "tls.test".into(),
        ],
        ports,
        sni_check: false,
        limits: ProxyLimits::default(),
    }
}

fn open(h: &mut NetHelper, s: ProxySession) {
    let name = s.session.clone();
    assert_eq!(
        h.net(NetRequest::ProxyOpen(s)),
        NetReply::ProxyOpened { session: name }
    );
}

/// One client connection handed to the helper; returns our end and the request id.
fn connect(h: &mut NetHelper, session: &str) -> (UnixStream, u64) {
    let (ours, theirs) = UnixStream::pair().unwrap();
    ours.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let id = h.send_with_fd(
        Body::Net(NetRequest::ProxyConnection {
            session: session.into(),
        }),
        &theirs,
    );
    (ours, id)
}

fn record(h: &mut NetHelper, id: u64) -> EgressRecord {
    match h.wait(id) {
        Body::NetReply(NetReply::ProxyDone(r)) => r,
        other => panic!("{other:?}"),
    }
}

/// Sends a request head and reads the response head (status line and headers).
fn ask(c: &mut UnixStream, head: &str) -> (u16, Vec<String>, BufReader<UnixStream>) {
    c.write_all(head.as_bytes()).unwrap();
    let mut r = BufReader::new(c.try_clone().unwrap());
    let mut status = String::new();
    r.read_line(&mut status).unwrap();
    let code = status.split(' ').nth(1).unwrap_or("0").parse().unwrap_or(0);
    let mut headers = Vec::new();
    loop {
        let mut l = String::new();
        if r.read_line(&mut l).unwrap() == 0 || l == "\r\n" {
            break;
        }
        headers.push(l.trim_end().to_string());
    }
    (code, headers, r)
}

fn connect_head(target: &str, auth: Option<&str>) -> String {
    let auth = auth
        .map(|a| format!("Proxy-Authorization: {a}\r\n"))
        .unwrap_or_default();
    format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n{auth}\r\n")
}

fn bearer() -> String {
    format!("Bearer {TOKEN}")
}

fn setup() -> (DnsServer, NetHelper) {
    let dns = DnsServer::start(standard_zone());
    let h = NetHelper::spawn(&args(&dns));
    (dns, h)
}

#[test]
fn a_tunnel_carries_bytes_both_ways_and_is_audited() {
    let echo = echo_server();
    let (_dns, mut h) = setup();
    open(&mut h, session(vec![echo.port()]));
    for target in [
        format!("127.0.0.2:{}", echo.port()),
        format!("PUBLIC.test.:{}", echo.port()),
    ] {
        let (mut c, id) = connect(&mut h, "s1");
        let (code, _, mut r) = ask(&mut c, &connect_head(&target, Some(&bearer())));
        assert_eq!(code, 200, "{target}");
        c.write_all(b"ping").unwrap();
        let mut back = [0u8; 4];
        r.read_exact(&mut back).unwrap();
        assert_eq!(&back, b"ping");
        c.shutdown(std::net::Shutdown::Write).unwrap();
        let mut rest = Vec::new();
        r.read_to_end(&mut rest).unwrap();
        let rec = record(&mut h, id);
        assert_eq!(
            rec.audit_line(),
            format!("egress TUNNEL {target} for session s1 via 127.0.0.2:{} (4 bytes up, 4 down; closed)", echo.port())
        );
    }
}

/// Asserts one refused connection: the status the client got and the exact audit row.
fn refused(h: &mut NetHelper, head: &str, status: u16, audit: &str) -> Vec<String> {
    let (mut c, id) = connect(h, "s1");
    let (code, headers, mut r) = ask(&mut c, head);
    assert_eq!(code, status, "{head}");
    let mut body = String::new();
    r.read_to_string(&mut body).unwrap();
    let rec = record(h, id);
    assert_eq!(rec.audit_line(), audit);
    if let EgressVerdict::Refused { status: s, reason } = &rec.verdict {
        assert_eq!(*s, status);
        assert_eq!(
            body,
            format!("refused: {reason}\n"),
            "the client is told why"
        );
    } else {
        panic!("{rec:?}");
    }
    headers
}

#[test]
fn every_method_other_than_connect_is_refused() {
    let (_dns, mut h) = setup();
    open(&mut h, session(vec![]));
    for m in [
        "GET", "POST", "PUT", "HEAD", "DELETE", "OPTIONS", "PATCH", "TRACE",
    ] {
        let head = format!("{m} http://public.test/ HTTP/1.1\r\nHost: public.test\r\nProxy-Authorization: {}\r\n\r\n", bearer());
        refused(
            &mut h,
            &head,
            403,
            &format!("egress REFUSED http://public.test/ for session s1 (method {m} is not allowed (CONNECT only))"),
        );
    }
}

#[test]
fn ports_names_addresses_and_tokens() {
    let (_dns, mut h) = setup();
    open(&mut h, session(vec![]));
    let b = bearer();
    refused(
        &mut h,
        &connect_head("public.test:80", Some(&b)),
        403,
        "egress REFUSED public.test:80 for session s1 (port 80 is not allowed (only 443))",
    );
    refused(&mut h, &connect_head("other.test:443", Some(&b)), 403,
        "egress REFUSED other.test:443 for session s1 (other.test is not on the session's allowlist)");
    refused(&mut h, &connect_head("allowed.test:443", Some(&b)), 403,
        "egress REFUSED allowed.test:443 for session s1 (allowed.test is not on the session's allowlist)");
    refused(&mut h, &connect_head("mixed.test:443", Some(&b)), 403,
        "egress REFUSED mixed.test:443 for session s1 (mixed.test resolves to a forbidden address: 10.0.0.1 is private-use (10.0.0.0/8))");
    // An address on the list is still judged by the table.
    refused(
        &mut h,
        &connect_head("127.0.0.1:443", Some(&b)),
        403,
        "egress REFUSED 127.0.0.1:443 for session s1 (127.0.0.1 is loopback (127.0.0.0/8))",
    );
    refused(
        &mut h,
        &connect_head("[::1]:443", Some(&b)),
        403,
        "egress REFUSED [::1]:443 for session s1 (IP-literal target ::1 is not allowed by address)",
    );
    refused(
        &mut h,
        &connect_head("2130706433:443", Some(&b)),
        403,
        "egress REFUSED 2130706433:443 for session s1 (127.0.0.1 is loopback (127.0.0.0/8))",
    );
    let headers = refused(
        &mut h,
        &connect_head("public.test:443", None),
        407,
        "egress REFUSED public.test:443 for session s1 (no proxy token (Proxy-Authorization))",
    );
    assert!(
        headers
            .iter()
            .any(|l| l == "Proxy-Authenticate: Basic realm=\"gatehouse\""),
        "{headers:?}"
    );
    refused(
        &mut h,
        &connect_head("public.test:443", Some("Bearer not-the-token")),
        407,
        "egress REFUSED public.test:443 for session s1 (wrong proxy token)",
    );
    refused(
        &mut h,
        "CONNECT public.test:443 HTTP/1.1\r\nHost: x\r\nProxy-Authorization: Basic !!!\r\n\r\n",
        407,
        "egress REFUSED public.test:443 for session s1 (wrong proxy token)",
    );
    refused(
        &mut h,
        "NOT HTTP\r\n\r\n",
        400,
        "egress REFUSED - for session s1 (malformed request (invalid token))",
    );
}

#[test]
fn an_unknown_session_is_refused() {
    let (_dns, mut h) = setup();
    let (mut c, id) = connect(&mut h, "nobody");
    let (code, _, _) = ask(&mut c, &connect_head("public.test:443", Some(&bearer())));
    assert_eq!(code, 403);
    assert_eq!(
        record(&mut h, id).audit_line(),
        "egress REFUSED public.test:443 for session nobody (unknown session nobody)"
    );
}

fn client_hello(name: &str) -> Vec<u8> {
    let cfg = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(rustls::RootCertStore::empty())
    .with_no_client_auth();
    let mut conn = rustls::ClientConnection::new(
        Arc::new(cfg),
        rustls::pki_types::ServerName::try_from(name.to_string()).unwrap(),
    )
    .unwrap();
    let mut out = Vec::new();
    conn.write_tls(&mut out).unwrap();
    out
}

#[test]
fn the_sni_must_match_the_connect_host() {
    let echo = echo_server();
    let (_dns, mut h) = setup();
    open(
        &mut h,
        ProxySession {
            sni_check: true,
            ..session(vec![echo.port()])
        },
    );
    let target = format!("public.test:{}", echo.port());

    let (mut c, id) = connect(&mut h, "s1");
    let (code, _, mut r) = ask(&mut c, &connect_head(&target, Some(&bearer())));
    assert_eq!(code, 200);
    c.write_all(&client_hello("evil.test")).unwrap();
    let mut rest = Vec::new();
    r.read_to_end(&mut rest).unwrap();
    assert!(
        rest.is_empty(),
        "nothing came back: the hello never reached the upstream"
    );
    assert_eq!(
        record(&mut h, id).audit_line(),
        format!("egress REFUSED {target} for session s1 (SNI evil.test does not match the CONNECT host public.test)")
    );

    // The matching name passes, and the hello is relayed byte for byte.
    let (mut c, id) = connect(&mut h, "s1");
    let (code, _, mut r) = ask(&mut c, &connect_head(&target, Some(&bearer())));
    assert_eq!(code, 200);
    let hello = client_hello("Public.Test");
    c.write_all(&hello).unwrap();
    let mut back = vec![0u8; hello.len()];
    r.read_exact(&mut back).unwrap();
    assert_eq!(back, hello);
    c.shutdown(std::net::Shutdown::Write).unwrap();
    let _ = r.read_to_end(&mut Vec::new());
    assert!(matches!(
        record(&mut h, id).verdict,
        EgressVerdict::Tunnelled { .. }
    ));

    // Plain text instead of TLS.
    let (mut c, id) = connect(&mut h, "s1");
    let (code, _, _) = ask(&mut c, &connect_head(&target, Some(&bearer())));
    assert_eq!(code, 200);
    c.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
    let line = record(&mut h, id).audit_line();
    assert!(line.starts_with(&format!("egress REFUSED {target} for session s1 (the tunnel does not start with a TLS ClientHello")), "{line}");
}

#[test]
fn tunnel_limits_name_themselves() {
    let echo = echo_server();
    let (_dns, mut h) = setup();
    let target = format!("127.0.0.2:{}", echo.port());
    let limits = ProxyLimits {
        max_tunnels: 1,
        idle_ms: 60_000,
        max_tunnel_bytes: 10,
    };
    open(
        &mut h,
        ProxySession {
            limits,
            ..session(vec![echo.port()])
        },
    );

    // One tunnel open: a second is refused.
    let (mut first, first_id) = connect(&mut h, "s1");
    let (code, _, mut first_r) = ask(&mut first, &connect_head(&target, Some(&bearer())));
    assert_eq!(code, 200);
    refused(&mut h, &connect_head(&target, Some(&bearer())), 403,
        &format!("egress REFUSED {target} for session s1 (session s1 has 1 tunnels open (its tunnel limit))"));
    // The byte limit ends the first.
    first.write_all(b"0123456789abcdef").unwrap();
    let _ = first_r.read_to_end(&mut Vec::new());
    assert_eq!(
        record(&mut h, first_id).audit_line(),
        format!("egress TUNNEL {target} for session s1 via {target} (0 bytes up, 0 down; reached 10 bytes (the tunnel byte limit))")
    );

    // Idle limit.
    let limits = ProxyLimits {
        max_tunnels: 4,
        idle_ms: 300,
        max_tunnel_bytes: 1 << 20,
    };
    open(
        &mut h,
        ProxySession {
            limits,
            ..session(vec![echo.port()])
        },
    );
    let (mut c, id) = connect(&mut h, "s1");
    let (code, _, mut r) = ask(&mut c, &connect_head(&target, Some(&bearer())));
    assert_eq!(code, 200);
    let _ = r.read_to_end(&mut Vec::new());
    assert_eq!(
        record(&mut h, id).audit_line(),
        format!("egress TUNNEL {target} for session s1 via {target} (0 bytes up, 0 down; idle for 300 ms (the idle limit))")
    );

    // Closing the session ends its tunnels.
    let limits = ProxyLimits {
        max_tunnels: 4,
        idle_ms: 600_000,
        max_tunnel_bytes: 1 << 20,
    };
    open(
        &mut h,
        ProxySession {
            limits,
            ..session(vec![echo.port()])
        },
    );
    let (mut c, id) = connect(&mut h, "s1");
    let (code, _, mut r) = ask(&mut c, &connect_head(&target, Some(&bearer())));
    assert_eq!(code, 200);
    assert_eq!(
        h.net(NetRequest::ProxyClose {
            session: "s1".into()
        }),
        NetReply::ProxyClosed {
            session: "s1".into(),
            tunnels_closed: 1
        }
    );
    let _ = r.read_to_end(&mut Vec::new());
    assert!(record(&mut h, id)
        .audit_line()
        .ends_with("(0 bytes up, 0 down; the session was closed)"));
}

#[test]
fn the_total_tunnel_limit() {
    let echo = echo_server();
    let dns = DnsServer::start(standard_zone());
    let mut a = args(&dns);
    a.extend(["--max-tunnels".to_string(), "1".to_string()]);
    let mut h = NetHelper::spawn(&a);
    let target = format!("127.0.0.2:{}", echo.port());
    open(&mut h, session(vec![echo.port()]));
    open(
        &mut h,
        ProxySession {
            session: "s2".into(),
            ..session(vec![echo.port()])
        },
    );
    let (mut c, _id) = connect(&mut h, "s1");
    let (code, _, _r) = ask(&mut c, &connect_head(&target, Some(&bearer())));
    assert_eq!(code, 200);
    let (mut c2, id2) = connect(&mut h, "s2");
    let (code, _, _) = ask(&mut c2, &connect_head(&target, Some(&bearer())));
    assert_eq!(code, 403);
    assert_eq!(
        record(&mut h, id2).audit_line(),
        format!("egress REFUSED {target} for session s2 (the proxy has 1 tunnels open (the total tunnel limit))")
    );
}

/// curl, a real client, through the proxy: a TCP listener of the test accepts curl's connection
/// and hands the accepted socket to the helper, as the broker hands over a sandbox's connection.
#[test]
fn curl_through_the_proxy() {
    let curl = std::path::Path::new("/usr/bin/curl");
    assert!(
        curl.exists(),
        "/usr/bin/curl is required (apt-get install curl)"
    );
    let (pki, ca, ca_key) = test_pki();
    let https = HttpServer::start_tls(
        PUBLIC,
        Arc::new(|_| text("hello through the tunnel")),
        server_config(&["tls.test"], &ca, &ca_key),
    );
    let (_dns, mut h) = setup();
    open(
        &mut h,
        ProxySession {
            sni_check: true,
            ..session(vec![https.addr.port()])
        },
    );
    let door = TcpListener::bind("127.0.0.1:0").unwrap();
    let door_addr = door.local_addr().unwrap();

    let ca_path = pki.ca_file.path().to_path_buf();
    let run = move |url: String| {
        std::process::Command::new(curl)
            .env_clear()
            .args(["-sS", "--max-time", "20", "--proxy"])
            .arg(format!("http://{door_addr}"))
            .args(["--proxy-user", &format!("gatehouse:{TOKEN}"), "--cacert"])
            .arg(&ca_path)
            .arg(url)
            .output()
            .unwrap()
    };
    let hand_over = |h: &mut NetHelper| {
        let (conn, _) = door.accept().unwrap();
        h.send_with_fd(
            Body::Net(NetRequest::ProxyConnection {
                session: "s1".into(),
            }),
            &conn,
        )
    };

    let url = format!("https://tls.test:{}/page", https.addr.port());
    let run2 = run.clone();
    let child = std::thread::spawn(move || run2(url));
    let id = hand_over(&mut h);
    let out = child.join().unwrap();
    assert!(
        out.status.success(),
        "curl: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "hello through the tunnel"
    );
    let rec = record(&mut h, id);
    assert!(
        rec.audit_line().starts_with(&format!(
            "egress TUNNEL tls.test:{} for session s1 via 127.0.0.2:{}",
            https.addr.port(),
            https.addr.port()
        )),
        "{}",
        rec.audit_line()
    );

    // A name off the list: curl reports the proxy's 403.
    let url = format!("https://other.test:{}/", https.addr.port());
    let child = std::thread::spawn(move || run(url));
    let id = hand_over(&mut h);
    let out = child.join().unwrap();
    assert_eq!(
        out.status.code(),
        Some(56),
        "curl: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("403"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        record(&mut h, id).audit_line(),
        format!("egress REFUSED other.test:{} for session s1 (other.test is not on the session's allowlist)", https.addr.port())
    );
    let _ = TcpStream::connect(door_addr);
}

#[test]
fn upstream_failures_are_audited() {
    let (_dns, mut h) = setup();
    let mut s = session(vec![1, 443]);
    s.allow.push("nx.test".into());
    open(&mut h, s);
    // A name that does not exist: 502 before any tunnel.
    let (mut c, id) = connect(&mut h, "s1");
    let (code, _, _) = ask(&mut c, &connect_head("nx.test:443", Some(&bearer())));
    assert_eq!(code, 502);
    assert_eq!(
        record(&mut h, id).audit_line(),
        "egress FAILED nx.test:443 for session s1 (nx.test does not resolve (no such name))"
    );
    // Nothing listens on port 1: the upstream is connected while the 200 goes out, so the
    // client sees the tunnel close, and the audit row says why.
    let (mut c, id) = connect(&mut h, "s1");
    let (code, _, mut r) = ask(&mut c, &connect_head("127.0.0.2:1", Some(&bearer())));
    assert_eq!(code, 200);
    let mut rest = Vec::new();
    r.read_to_end(&mut rest).unwrap();
    assert!(rest.is_empty());
    assert_eq!(
        record(&mut h, id).audit_line(),
        "egress FAILED 127.0.0.2:1 for session s1 (cannot connect (127.0.0.2:1: Connection refused (os error 111)))"
    );
}
