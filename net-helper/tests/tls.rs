// Drives the Linux binaries (ipc_schema::platform::Missing elsewhere).
#![cfg(target_os = "linux")]
//! TLS fetches against servers on loopback whose certificates a test CA (rcgen) signed: the
//! certificate is verified for the URL's host name, never for the pinned address.

mod common;

use common::*;
use ipc_schema::net::{NetReply, RefusalKind};
use std::sync::Arc;

fn helper_trusting(pki: &TestPki, dns: &DnsServer) -> NetHelper {
    let mut a = args(dns);
    a.push("--test-extra-root".into());
    a.push(pki.ca_file.path().to_str().unwrap().into());
    NetHelper::spawn(&a)
}

fn refusal(r: NetReply) -> (RefusalKind, String) {
    match r {
        NetReply::Refused(x) => (x.kind, x.reason),
        other => panic!("not refused: {other:?}"),
    }
}

#[test]
fn https_verifies_the_host_name_over_the_pinned_address() {
    let (pki, ca, ca_key) = test_pki();
    let good = HttpServer::start_tls(
        PUBLIC,
        Arc::new(|_| text("secure hello")),
        server_config(&["tls.test"], &ca, &ca_key),
    );
    let dns = DnsServer::start(standard_zone());
    let mut h = helper_trusting(&pki, &dns);
    let port = good.addr.port();

    match h.fetch(&format!("https://tls.test:{port}/")) {
        NetReply::Fetched(p) => {
            assert!(p.text.contains("\nsecure hello\n"), "{}", p.text);
            assert_eq!(p.address, ip("127.0.0.2"));
        }
        other => panic!("{other:?}"),
    }
    // The same server by its address: the certificate names tls.test, not 127.0.0.2.
    let (kind, reason) = refusal(h.fetch(&format!("https://127.0.0.2:{port}/")));
    assert_eq!(kind, RefusalKind::Tls);
    assert!(
        reason.starts_with("the certificate of 127.0.0.2 does not verify: NotValidForName"),
        "{reason}"
    );
    // another name resolving to the same address: still the wrong name.
    let (kind, reason) = refusal(h.fetch(&format!("https://other.test:{port}/")));
    assert_eq!(kind, RefusalKind::Tls);
    assert!(
        reason.starts_with("the certificate of other.test does not verify: NotValidForName"),
        "{reason}"
    );
}

#[test]
fn a_wrong_name_certificate_and_an_unknown_ca_are_refused() {
    let (pki, ca, ca_key) = test_pki();
    let wrong = HttpServer::start_tls(
        PUBLIC,
        Arc::new(|_| text("x")),
        server_config(&["wrong.example"], &ca, &ca_key),
    );
    let dns = DnsServer::start(standard_zone());
    let mut h = helper_trusting(&pki, &dns);
    let (kind, reason) = refusal(h.fetch(&format!("https://tls.test:{}/", wrong.addr.port())));
    assert_eq!(kind, RefusalKind::Tls);
    assert!(
        reason.starts_with("the certificate of tls.test does not verify: NotValidForName"),
        "{reason}"
    );
    assert!(
        wrong.requests().is_empty(),
        "no request was sent over an unverified connection"
    );

    // A helper that does not trust the test CA (the webpki roots only).
    let good = HttpServer::start_tls(
        PUBLIC,
        Arc::new(|_| text("x")),
        server_config(&["tls.test"], &ca, &ca_key),
    );
    let mut plain = NetHelper::spawn(&args(&dns));
    let (kind, reason) = refusal(plain.fetch(&format!("https://tls.test:{}/", good.addr.port())));
    assert_eq!(
        (kind, reason.as_str()),
        (
            RefusalKind::Tls,
            "the certificate of tls.test does not verify: UnknownIssuer"
        )
    );
}

#[test]
fn a_redirect_from_https_to_http_is_refused() {
    let (pki, ca, ca_key) = test_pki();
    let http = HttpServer::start(PUBLIC, Arc::new(|_| text("plain")));
    let target = format!("http://public.test:{}/", http.addr.port());
    let t2 = target.clone();
    let https = HttpServer::start_tls(
        PUBLIC,
        Arc::new(move |_| redirect("302 Found", &t2)),
        server_config(&["tls.test"], &ca, &ca_key),
    );
    let dns = DnsServer::start(standard_zone());
    let mut h = helper_trusting(&pki, &dns);
    let from = format!("https://tls.test:{}/start", https.addr.port());
    assert_eq!(
        refusal(h.fetch(&from)),
        (
            RefusalKind::Redirect,
            format!("{from} redirects from https to http ({target}), which is refused")
        )
    );
    assert!(http.requests().is_empty());
}
