// Drives the Linux binaries (ipc_schema::platform::Missing elsewhere).
#![cfg(target_os = "linux")]
//! The credential path of `http_request`, with the real helpers: the test plays the broker
//! (net-helper Check, secrets-helper Attach, net-helper Http) against TLS servers on loopback
//! whose names a test DNS server answers (the net-helper's test address policy makes
//! 127.0.0.2 "public"). The credential must reach the server of its own host, and nothing
//! else: not another host, not a redirect target, not a reply, an error or a log line.

mod common;
#[path = "../../net-helper/tests/common/mod.rs"]
mod net;

use common::*;
use ipc_schema::net::{FetchLimits, HttpReply, HttpSend, NetReply, NetRequest, RefusalKind};
use ipc_schema::secrets::{
    CredentialHeader, HeaderName, SecretsErrorKind, SecretsReply, SecretsRequest, SendAs, REDACTED,
};
use ipc_schema::tool::HttpMethod;
use ipc_schema::Body;
use net::{
    redirect, response, server_config, standard_zone, test_pki, DnsServer, HttpServer, NetHelper,
    SeenRequest, PUBLIC,
};
use std::io::Read;
use std::sync::{Arc, Mutex};

const SECRET: &str = "sk-live-7Hq2Zr9XbW4mN8pL";

/// Spawning helpers with their stderr in `log`: stderr is process-wide, so one at a time.
static STDERR: Mutex<()> = Mutex::new(());

fn with_stderr_to<T>(log: &std::fs::File, f: impl FnOnce() -> T) -> T {
    use std::os::fd::AsFd;
    let _one = STDERR.lock().unwrap_or_else(|e| e.into_inner());
    let saved = nix::unistd::dup(std::io::stderr().as_fd()).unwrap();
    nix::unistd::dup2_stderr(log.as_fd()).unwrap();
    let out = f();
    nix::unistd::dup2_stderr(saved.as_fd()).unwrap();
    out
}

/// Everything the test saw go back toward the broker, for the final grep.
#[derive(Default)]
struct Outputs(Vec<String>);

impl Outputs {
    fn note(&mut self, b: &Body) {
        self.0.push(format!("{b:?}"));
        // The wire bytes too: a value hidden from Debug must not hide in the frame either,
        // except in the one message that carries it on purpose (Attached, to the net-helper).
        if !matches!(
            b,
            Body::SecretsReply(SecretsReply::Attached(_)) | Body::Net(_)
        ) {
            let bytes = postcard::to_stdvec(b).unwrap();
            self.0.push(String::from_utf8_lossy(&bytes).into_owned());
        }
    }
}

struct World {
    _dns: DnsServer,
    api: HttpServer,
    other: HttpServer,
    net: NetHelper,
    secrets: gatehouse_tests::HelperUnderTest,
    log: tempfile::NamedTempFile,
    out: Outputs,
    _cleanup: Cleanup,
    _pki: net::TestPki,
}

fn echo_handler(other_port: Arc<Mutex<u16>>) -> net::Handler {
    Arc::new(move |req: &SeenRequest| {
        let path = req
            .line
            .split_whitespace()
            .nth(1)
            .unwrap_or("/")
            .to_string();
        let key = req
            .headers
            .iter()
            .find(|(k, _)| k == "x-api-key")
            .map(|(_, v)| v.clone())
            .unwrap_or_default();
        match path.as_str() {
            // A careless API that echoes the key in its body and headers.
            "/echo" => response(
                "200 OK",
                &[
                    ("Content-Type", "application/json"),
                    ("X-Echo", &format!("key={key}")),
                    ("X-Api-Key", &key),
                    ("X-Request-Id", "r-1"),
                ],
                format!("{{\"you_sent\":\"{key}\",\"again\":\"{key}\"}}").as_bytes(),
            ),
            "/to-other" => redirect(
                "302 Found",
                &format!("https://other.test:{}/landing", other_port.lock().unwrap()),
            ),
            "/leaky-redirect" => redirect(
                "302 Found",
                &format!(
                    "https://other.test:{}/landing?k={key}",
                    other_port.lock().unwrap()
                ),
            ),
            "/created" => response(
                "302 Found",
                &[("Location", "/elsewhere"), ("Content-Type", "text/plain")],
                b"created",
            ),
            _ => response("404 Not Found", &[("Content-Type", "text/plain")], b"no"),
        }
    })
}

fn world() -> World {
    let (pki, ca, ca_key) = test_pki();
    let other_port = Arc::new(Mutex::new(0u16));
    let api = HttpServer::start_tls(
        PUBLIC,
        echo_handler(other_port.clone()),
        server_config(&["tls.test"], &ca, &ca_key),
    );
    let other = HttpServer::start_tls(
        PUBLIC,
        Arc::new(|_: &SeenRequest| net::text("landed")),
        server_config(&["other.test"], &ca, &ca_key),
    );
    *other_port.lock().unwrap() = other.addr.port();
    let dns = DnsServer::start(standard_zone());
    let log = tempfile::NamedTempFile::new().unwrap();
    let ns = namespace("http");
    let args = keyutils_args(&ns);
    let mut net_args = net::args(&dns);
    net_args.push("--test-extra-root".into());
    net_args.push(pki.ca_file.path().to_str().unwrap().into());
    // The broker's helper attaches; storing is a CLI command's own helper's job (`gatehouse
    // secret set`), on the same store.
    let (net, secrets) = with_stderr_to(log.as_file(), || {
        (
            NetHelper::spawn(&net_args),
            spawn(&on_channel(args.clone(), "broker")),
        )
    });
    let mut setter = spawn(&args);
    let set = ask(
        &mut setter,
        SecretsRequest::Set {
            spec: spec(
                "api",
                &["tls.test"],
                SendAs::Header(HeaderName::parse("X-Api-Key").unwrap()),
            ),
            value: Some(value(SECRET)),
        },
    );
    assert!(matches!(set, SecretsReply::Saved { .. }), "{set:?}");
    World {
        _dns: dns,
        api,
        other,
        net,
        secrets,
        log,
        out: Outputs::default(),
        _cleanup: Cleanup(args, vec![name("api")]),
        _pki: pki,
    }
}

impl World {
    /// What the broker does for an http_request naming credential `api`: check the URL as
    /// fetch_url is checked, ask for the header for the checked host, send.
    fn http_request(&mut self, method: HttpMethod, url: &str) -> Result<NetReply, String> {
        let checked = match self.net.net(NetRequest::Check { url: url.into() }) {
            NetReply::Checked(c) => c,
            other => {
                self.out.note(&Body::NetReply(other.clone()));
                return Err(format!("check: {other:?}"));
            }
        };
        let attach = Body::Secrets(SecretsRequest::Attach {
            name: name("api"),
            host: checked.host.to_string(),
        });
        let header = match self.secrets.request(attach) {
            Body::SecretsReply(SecretsReply::Attached(h)) => h,
            other => {
                self.out.note(&other);
                return Err(format!("attach: {other:?}"));
            }
        };
        Ok(self.send(method, url, Some(header), b"".to_vec()))
    }

    fn send(
        &mut self,
        method: HttpMethod,
        url: &str,
        credential: Option<CredentialHeader>,
        body: Vec<u8>,
    ) -> NetReply {
        let reply = self.net.net(NetRequest::Http(HttpSend {
            method,
            url: url.into(),
            headers: vec![("Accept".into(), "application/json".into())],
            body,
            credential,
            limits: FetchLimits::default(),
            allowed_hosts: None,
        }));
        self.out.note(&Body::NetReply(reply.clone()));
        reply
    }

    fn api_url(&self, path: &str) -> String {
        format!("https://tls.test:{}{path}", self.api.addr.port())
    }

    fn key_seen_by(server: &HttpServer) -> Vec<Option<String>> {
        server
            .requests()
            .iter()
            .map(|r| {
                r.headers
                    .iter()
                    .find(|(k, _)| k == "x-api-key")
                    .map(|(_, v)| v.clone())
            })
            .collect()
    }

    /// The final grep: the value in nothing the helpers sent back or wrote to their logs.
    fn assert_secret_nowhere(mut self) {
        // Stop the helpers so that their logs are complete. The secrets-helper is stopped by a
        // message it may not receive, so that it writes a line to its log: the positive
        // control that the log really is the helpers' stderr.
        self.secrets
            .conn
            .send(Body::Fs(ipc_schema::fs::FsRequest::Status));
        let _ = self.secrets.child.wait();
        drop(self.net);
        drop(self.secrets);
        let mut log = String::new();
        self.log.reopen().unwrap().read_to_string(&mut log).unwrap();
        assert!(
            log.contains("secrets-helper: the broker sent a Fs message"),
            "log: {log}"
        );
        self.out.0.push(log);
        for (i, o) in self.out.0.iter().enumerate() {
            assert!(!o.contains(SECRET), "output {i} holds the credential: {o}");
        }
    }
}

fn http_reply(r: NetReply) -> HttpReply {
    match r {
        NetReply::Http(h) => h,
        other => panic!("expected an Http reply, got {other:?}"),
    }
}

#[test]
fn the_credential_reaches_its_own_host_and_is_scrubbed_from_the_reply() {
    let mut w = world();
    // Positive control for the final grep: the one message meant to carry the value does,
    // in its Debug-free wire bytes, so a leak into any other frame would be seen.
    let attached = w.secrets.request(Body::Secrets(SecretsRequest::Attach {
        name: name("api"),
        host: "tls.test".into(),
    }));
    let wire = String::from_utf8_lossy(&postcard::to_stdvec(&attached).unwrap()).into_owned();
    assert!(wire.contains(SECRET) && !format!("{attached:?}").contains(SECRET));
    let r = http_reply(
        w.http_request(HttpMethod::Get, &w.api_url("/echo"))
            .unwrap(),
    );
    assert_eq!(World::key_seen_by(&w.api), vec![Some(SECRET.to_string())]);
    assert!(r.credential_sent);
    assert_eq!(r.page.status, 200);
    // The body's two echoes are replaced; the echoing headers are gone; the rest is kept.
    assert!(
        r.page.text.contains(&format!(
            "{{\"you_sent\":\"{REDACTED}\",\"again\":\"{REDACTED}\"}}"
        )),
        "{}",
        r.page.text
    );
    assert_eq!(r.redactions, 2);
    let mut dropped = r.dropped_headers.clone();
    dropped.sort();
    assert_eq!(dropped, ["x-api-key", "x-echo"]);
    assert!(
        r.headers
            .iter()
            .any(|(k, v)| k == "x-request-id" && v == "r-1"),
        "{:?}",
        r.headers
    );
    w.assert_secret_nowhere();
}

#[test]
fn a_redirect_to_another_host_never_carries_the_credential() {
    let mut w = world();
    let r = http_reply(
        w.http_request(HttpMethod::Get, &w.api_url("/to-other"))
            .unwrap(),
    );
    assert_eq!(r.page.status, 200);
    assert!(
        r.page.final_url.starts_with("https://other.test:"),
        "{}",
        r.page.final_url
    );
    assert!(!r.credential_sent);
    assert_eq!(World::key_seen_by(&w.api), vec![Some(SECRET.to_string())]);
    let landed = w.other.requests();
    assert_eq!(landed.len(), 1);
    assert!(
        !landed[0]
            .headers
            .iter()
            .any(|(k, v)| k == "x-api-key" || v.contains(SECRET)),
        "the other host saw {:?}",
        landed[0].headers
    );
    // A server that puts the key into the Location would have it carried to the redirect
    // target in the request line: not followed.
    match w
        .http_request(HttpMethod::Get, &w.api_url("/leaky-redirect"))
        .unwrap()
    {
        NetReply::Refused(r) => {
            assert_eq!(r.kind, RefusalKind::Redirect);
            assert!(
                r.reason
                    .contains("redirects to a URL that contains credential api; not followed"),
                "{}",
                r.reason
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        w.other.requests().len(),
        1,
        "only the first, clean redirect landed"
    );
    w.assert_secret_nowhere();
}

#[test]
fn other_hosts_plain_http_and_mismatched_headers_are_refused() {
    let mut w = world();
    // The secrets-helper refuses a header for any host but the credential's.
    let port = w.other.addr.port();
    let e = w
        .http_request(HttpMethod::Get, &format!("https://other.test:{port}/"))
        .unwrap_err();
    assert!(e.contains("HostNotAllowed"), "{e}");
    assert!(
        e.contains("credential api may be sent only to tls.test, not to other.test"),
        "{e}"
    );
    assert!(w.other.requests().is_empty());

    // A header made for tls.test and handed (by a confused broker) to a request for another
    // host, or for plain http, is refused by the net-helper before any connection.
    let header = match ask(
        &mut w.secrets,
        SecretsRequest::Attach {
            name: name("api"),
            host: "tls.test".into(),
        },
    ) {
        SecretsReply::Attached(h) => h,
        other => panic!("{other:?}"),
    };
    for (url, want) in [
        (
            format!("https://other.test:{port}/"),
            "was attached for tls.test, not for other.test",
        ),
        (
            format!("http://tls.test:{}/echo", w.api.addr.port()),
            "is sent only over https",
        ),
    ] {
        match w.send(HttpMethod::Get, &url, Some(header.clone()), vec![]) {
            NetReply::Refused(r) => {
                assert_eq!(r.kind, RefusalKind::Url);
                assert!(r.reason.contains(want), "{url}: {}", r.reason);
            }
            other => panic!("{url}: {other:?}"),
        }
    }
    assert!(w.other.requests().is_empty());
    assert!(w.api.requests().is_empty());
    // The agent may not set the credential's header itself.
    let reply = w.net.net(NetRequest::Http(HttpSend {
        method: HttpMethod::Get,
        url: w.api_url("/echo"),
        headers: vec![("X-API-KEY".into(), "mine".into())],
        body: vec![],
        credential: Some(header),
        limits: FetchLimits::default(),
        allowed_hosts: None,
    }));
    match reply {
        NetReply::Refused(r) => assert!(
            r.reason.contains("which credential api is sent as"),
            "{}",
            r.reason
        ),
        other => panic!("{other:?}"),
    }
    // A credential whose value was dropped by a change of hosts attaches nowhere. (Changed
    // through a command's own helper, as `gatehouse secret set` does; the broker's cannot.)
    let mut setter = spawn(&w._cleanup.0);
    ask(
        &mut setter,
        SecretsRequest::Set {
            spec: spec("api", &["tls.test", "other.test"], SendAs::Bearer),
            value: None,
        },
    );
    let e = w
        .http_request(HttpMethod::Get, &w.api_url("/echo"))
        .unwrap_err();
    assert!(e.contains("NoValue"), "{e}");
    w.assert_secret_nowhere();
}

#[test]
fn state_changing_methods_send_their_body_and_are_never_redirected() {
    let mut w = world();
    let checked_host = "tls.test";
    let header = match ask(
        &mut w.secrets,
        SecretsRequest::Attach {
            name: name("api"),
            host: checked_host.into(),
        },
    ) {
        SecretsReply::Attached(h) => h,
        other => panic!("{other:?}"),
    };
    let url = w.api_url("/created");
    let r = http_reply(w.send(HttpMethod::Post, &url, Some(header), b"{\"a\":1}".to_vec()));
    // The 302 comes back as it is: a POST is not re-sent anywhere.
    assert_eq!(r.page.status, 302);
    assert!(r.page.redirects.is_empty());
    let seen = w.api.requests();
    assert_eq!(seen.len(), 1);
    assert!(
        seen[0].line.starts_with("POST /created "),
        "{}",
        seen[0].line
    );
    assert!(seen[0]
        .headers
        .iter()
        .any(|(k, v)| k == "content-length" && v == "7"));
    assert_eq!(World::key_seen_by(&w.api), vec![Some(SECRET.to_string())]);
    w.assert_secret_nowhere();
}

#[test]
fn unknown_credentials_are_refused_by_name() {
    let mut w = world();
    match ask(
        &mut w.secrets,
        SecretsRequest::Attach {
            name: name("nope"),
            host: "tls.test".into(),
        },
    ) {
        SecretsReply::Failed(e) => {
            assert_eq!(e.kind, SecretsErrorKind::NotFound);
            assert_eq!(
                e.message,
                "there is no credential named nope (`gatehouse secret list` shows them)"
            );
        }
        other => panic!("{other:?}"),
    }
    w.assert_secret_nowhere();
}
