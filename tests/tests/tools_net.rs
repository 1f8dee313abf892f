// Drives the Linux binaries (ipc_schema::platform::Missing elsewhere).
#![cfg(target_os = "linux")]
//! `fetch_url` end to end: `gatehouse fetch` -> gateway socket -> broker (net-helper Check,
//! policy, approval) -> net-helper Fetch -> the wrapped text, or a one-line refusal.
//!
//! The "public" server listens on 127.0.0.2, which the broker's net-helper is told to judge
//! public (`--test-net-arg=--test-public-addr --test-net-arg=127.0.0.2`, test builds only);
//! every other loopback address stays refused. Each refusal test has a server listening on the
//! refused address too, and asserts it was never connected to: the refusal comes from the
//! address table, not from a connection that failed.

#![forbid(unsafe_code)]

use gatehouse_tests::{http_response, BrokerUnderTest, TestWebServer};
use ipc_schema::ui::{Choice, Decision, UiReply, UiRequest};
use ipc_schema::Body;
use std::io::Write;
use std::net::TcpListener;
use std::sync::Arc;

const PAGE: &str = "hello from the test server\nsecond line <b>kept as is</b>\n";

/// The test server on `ip`: answers every request with `PAGE` (text/plain); counts connections.
fn page_server(ip: &str) -> TestWebServer {
    TestWebServer::start(ip, |_| {
        http_response("200 OK", "text/plain; charset=utf-8", PAGE)
    })
}

fn broker() -> BrokerUnderTest {
    BrokerUnderTest::start(&[
        "--test-net-arg=--test-public-addr",
        "--test-net-arg=127.0.0.2",
    ])
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn an_allowed_fetch_prints_the_wrapped_page_unchanged() {
    let server = page_server("127.0.0.2");
    let b = broker();
    let url = server.url("/page.txt");
    // fetch_url asks by default; --yes answers this call's own proposal once.
    let out = b.cli(&["fetch", &url, "--yes"]);
    let stdout = text(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "stdout:\n{stdout}\nstderr:\n{}\nlog:\n{}",
        text(&out.stderr),
        b.log()
    );
    assert!(
        text(&out.stderr).contains("--yes: allowing proposal"),
        "the default policy asks for fetch_url: {}",
        text(&out.stderr)
    );
    // `<external-NONCE source="URL">` PAGE `</external-NONCE>`, after the notice.
    let open = stdout.find("<external-").expect("wrapper opens");
    let nonce_end = open + stdout[open..].find(' ').unwrap();
    let nonce = &stdout[open + "<external-".len()..nonce_end];
    assert!(nonce.len() >= 16, "nonce {nonce:?}");
    assert!(
        stdout[nonce_end..].starts_with(&format!(" source=\"{url}\">")),
        "{stdout}"
    );
    assert!(open > 0, "the notice comes first: {stdout}");
    let body_at = stdout.find(PAGE).expect("the page, byte for byte");
    let close = format!("</external-{nonce}>");
    assert!(stdout[body_at + PAGE.len()..].contains(&close), "{stdout}");
    assert_eq!(server.hits(), 1);

    // --json: one object with the same text and the fetch's facts.
    let out = b.cli(&["--json", "fetch", &url, "--yes"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(v["status"], 200);
    assert_eq!(v["content_type"], "text/plain");
    assert_eq!(v["url"], url);
    assert_eq!(v["address"], "127.0.0.2");
    assert_eq!(v["body_bytes"], PAGE.len());
    assert!(v["text"].as_str().unwrap().contains(PAGE), "{v}");
    assert_eq!(server.hits(), 2);
}

#[test]
fn loopback_and_link_local_are_refused_with_the_net_helpers_reason() {
    let public = page_server("127.0.0.2");
    let private = page_server("127.0.0.1");
    let b = broker();

    // Positive control: the same broker fetches the "public" address.
    let out = b.cli(&["fetch", &public.url("/"), "--yes"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));

    let out = b.cli(&["fetch", &private.url("/"), "--yes"]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stderr),
        "refused: 127.0.0.1 is loopback (127.0.0.0/8)\n"
    );
    assert!(out.stdout.is_empty());
    assert_eq!(private.hits(), 0, "a refused address is never connected to");

    let out = b.cli(&["fetch", "http://169.254.169.254/latest/meta-data/", "--yes"]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stderr),
        "refused: 169.254.169.254 is link-local (169.254.0.0/16)\n"
    );

    // The JSON form of a refusal.
    let out = b.cli(&["--json", "fetch", "http://169.254.169.254/", "--yes"]);
    assert_eq!(out.status.code(), Some(3));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        v["refused"],
        "169.254.169.254 is link-local (169.254.0.0/16)"
    );

    // The URL rules too: no user info, no other schemes.
    let out = b.cli(&["fetch", &public.url("/").replace("://", "://u:p@"), "--yes"]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    let out = b.cli(&["fetch", "file:///etc/passwd", "--yes"]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    assert_eq!(public.hits(), 1);

    // Refusals never become proposals: nothing is pending.
    let out = b.cli(&["--json", "approve"]);
    let listed = text(&out.stdout);
    assert!(!listed.contains("fetch_url"), "{listed}");

    // And each refusal is in the audit log with its reason (audit-only rows are committed by
    // the broker's writer shortly after the refusal: wait for them).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let audit = loop {
        let out = b.cli(&["audit", "tail", "-n", "50"]);
        let audit = text(&out.stdout);
        if audit.contains("169.254.169.254 is link-local") || std::time::Instant::now() > deadline {
            break audit;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert!(
        audit.contains("169.254.169.254 is link-local (169.254.0.0/16)"),
        "{audit}"
    );
}

#[test]
fn a_network_failure_exits_4_not_3() {
    // A "public" address where nothing listens: allowed by every rule, then the connection is
    // refused.
    let port = {
        let l = TcpListener::bind("127.0.0.2:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let b = broker();
    let out = b.cli(&["fetch", &format!("http://127.0.0.2:{port}/"), "--yes"]);
    assert_eq!(out.status.code(), Some(4), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    let last = err.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("failed: the network failed: cannot connect (127.0.0.2:")
            && last.ends_with("Connection refused (os error 111))"),
        "{err}"
    );
}

#[test]
fn the_human_saying_no_is_a_refusal_and_nothing_is_fetched() {
    let server = page_server("127.0.0.2");
    let b = broker();
    let url = server.url("/");
    // Without --yes, the fetch waits for the human; the human (on the ui socket) says no.
    let fetch = std::process::Command::new(gatehouse_tests::bin("gatehouse"))
        .arg("--data-dir")
        .arg(b.dir.path())
        .args(["fetch", &url])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut ui = b.ui();
    let p = loop {
        match ui.request(Body::Ui(UiRequest::ListPending)) {
            Body::UiReply(UiReply::Pending(l)) if !l.is_empty() => {
                break l.into_iter().next().unwrap()
            }
            Body::UiReply(UiReply::Pending(_)) => {
                std::thread::sleep(std::time::Duration::from_millis(20))
            }
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(p.tool.name(), "fetch_url");
    // The card: the canonical URL, the host, and every address it resolved to.
    assert_eq!(p.target, "127.0.0.2");
    assert_eq!(
        p.effect,
        format!(
            "fetch {url} (host 127.0.0.2, port {}, addresses 127.0.0.2)",
            server.addr.port()
        )
    );
    let decided = ui.request(Body::Ui(UiRequest::Decide(Decision {
        proposal: p.id,
        digest: p.digest,
        choice: Choice::Deny,
    })));
    assert!(
        matches!(decided, Body::UiReply(UiReply::Decided { .. })),
        "{decided:?}"
    );
    let out = fetch.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).ends_with(&format!(
            "refused: the human chose deny for proposal {}\n",
            p.id
        )),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(server.hits(), 0, "nothing is fetched before a yes");
}

#[test]
fn the_release_broker_has_no_test_net_arg() {
    let release = gatehouse_tests::release_dir();
    let gatehouse = release.join("gatehouse");
    let out = std::process::Command::new(&gatehouse)
        .args(["broker", "--test-net-arg=--test-public-addr"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("unexpected argument '--test-net-arg'"),
        "{}",
        text(&out.stderr)
    );
}

// ---------------------------------------------------------------------------------------------
// http_request: net-helper Check -> secrets-helper Attach -> net-helper Http, through the broker.

mod broker_core_support;
#[path = "../../net-helper/tests/common/mod.rs"]
mod net;

use broker_core_support::{policy_with, Gateway, Instance, Ui};
use ipc_schema::secrets::REDACTED;
use ipc_schema::tool::{HttpMethod, HttpRequest, RefusalKind, ToolCall, ToolReply, ToolResult};

const SECRET: &str = "sk-live-broker-4Kq9Zr2XbW7";

/// A TLS API on tls.test (127.0.0.2, "public" for this broker's net-helper) that echoes the
/// key it got, a DNS server that names it, a broker whose net-helper uses both, and a stored
/// credential `api` bound to tls.test.
struct HttpWorld {
    inst: Instance,
    broker: broker_core_support::Broker,
    api: net::HttpServer,
    _dns: net::DnsServer,
    _pki: net::TestPki,
}

impl HttpWorld {
    fn new() -> HttpWorld {
        let (pki, ca, ca_key) = net::test_pki();
        let api = net::HttpServer::start_tls(
            net::PUBLIC,
            Arc::new(|req: &net::SeenRequest| {
                let key = req
                    .headers
                    .iter()
                    .find(|(k, _)| k == "x-api-key")
                    .map(|(_, v)| v.clone())
                    .unwrap_or_default();
                let method = req
                    .line
                    .split_whitespace()
                    .next()
                    .unwrap_or("?")
                    .to_string();
                net::response(
                    "200 OK",
                    &[("Content-Type", "application/json"), ("X-Echo", &key)],
                    format!("{{\"method\":\"{method}\",\"you_sent\":\"{key}\"}}").as_bytes(),
                )
            }),
            net::server_config(&["tls.test"], &ca, &ca_key),
        );
        let dns = net::DnsServer::start(net::standard_zone());
        let inst = Instance::new(Some(&policy_with("", "")));
        let set = std::process::Command::new(gatehouse_tests::bin("gatehouse"))
            .arg("--data-dir")
            .arg(inst.root())
            .args([
                "secret",
                "set",
                "api",
                "--host",
                "tls.test",
                "--header",
                "X-Api-Key",
                "--stdin",
            ])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .and_then(|mut c| {
                c.stdin
                    .take()
                    .unwrap()
                    .write_all(format!("{SECRET}\n").as_bytes())?;
                c.wait_with_output()
            })
            .unwrap();
        assert!(set.status.success(), "{}", text(&set.stderr));
        let ns = format!("--test-net-arg={}", dns.addr);
        let ca = format!("--test-net-arg={}", pki.ca_file.path().display());
        let broker = inst.start(&[
            "--test-net-arg=--nameserver",
            &ns,
            "--test-net-arg=--test-public-addr",
            "--test-net-arg=127.0.0.2",
            "--test-net-arg=--test-extra-root",
            &ca,
        ]);
        HttpWorld {
            inst,
            broker,
            api,
            _dns: dns,
            _pki: pki,
        }
    }

    fn call(&self, method: HttpMethod, path: &str, credential: Option<&str>) -> ToolCall {
        ToolCall::HttpRequest(HttpRequest {
            method,
            url: format!("https://tls.test:{}{path}", self.api.addr.port()),
            headers: vec![("Accept".into(), "application/json".into())],
            body: if method == HttpMethod::Post {
                b"{\"n\":1}".to_vec()
            } else {
                vec![]
            },
            credential: credential.map(|c| ipc_schema::secrets::CredentialName::parse(c).unwrap()),
        })
    }

    /// Sends `call`, approves its proposal once, and returns the final reply.
    fn approved(&self, gw: &mut Gateway, ui: &mut Ui, call: ToolCall) -> ToolReply {
        let id = gw.send(call);
        match gw.next_for(id).unwrap() {
            ToolReply::AwaitingApproval(_) => {}
            other => return other,
        }
        let p = ui.wait_pending(1).remove(0);
        assert_eq!(p.tool.name(), "http_request");
        assert_eq!(p.target, "tls.test");
        assert!(
            p.effect.contains("(host tls.test, port ")
                && p.effect.ends_with("addresses 127.0.0.2)"),
            "{}",
            p.effect
        );
        assert!(!format!("{p:?}").contains(SECRET));
        assert!(matches!(
            ui.decide(&p, ipc_schema::ui::Choice::AllowOnce),
            Body::UiReply(_)
        ));
        gw.final_for(id).unwrap()
    }

    fn keys_seen(&self) -> Vec<String> {
        self.api
            .requests()
            .iter()
            .map(|r| {
                let m = r.line.split_whitespace().next().unwrap_or("?").to_string();
                let k = r
                    .headers
                    .iter()
                    .find(|(k, _)| k == "x-api-key")
                    .map(|(_, v)| v.clone())
                    .unwrap_or_else(|| "-".into());
                format!("{m} {k}")
            })
            .collect()
    }
}

impl Drop for HttpWorld {
    fn drop(&mut self) {
        let _ = self.inst.cli(&["secret", "delete", "api"]);
    }
}

fn response_of(r: ToolReply) -> ipc_schema::tool::HttpResponse {
    match r {
        ToolReply::Done(d) => match d.result {
            ToolResult::HttpResponse(h) => h,
            other => panic!("{other:?}"),
        },
        other => panic!("{other:?}"),
    }
}

#[test]
fn http_request_adds_the_credential_for_its_host_and_the_reply_is_scrubbed() {
    let w = HttpWorld::new();
    let mut gw = w.broker.gateway();
    let mut ui = w.broker.ui();

    let reply = w.approved(
        &mut gw,
        &mut ui,
        w.call(HttpMethod::Get, "/echo", Some("api")),
    );
    assert!(!format!("{reply:?}").contains(SECRET), "{reply:?}");
    let h = response_of(reply);
    assert_eq!(h.page.status, 200);
    assert!(h.credential_sent);
    assert!(h.redactions >= 1, "{h:?}");
    assert!(
        h.page
            .text
            .contains(&format!("\"you_sent\":\"{REDACTED}\"")),
        "{}",
        h.page.text
    );
    assert!(h.page.text.contains("<external-"), "{}", h.page.text);
    assert_eq!(w.keys_seen(), vec![format!("GET {SECRET}")]);

    // Without a credential nothing is added (positive control for the header above).
    let h = response_of(w.approved(&mut gw, &mut ui, w.call(HttpMethod::Get, "/echo", None)));
    assert!(!h.credential_sent);
    assert_eq!(h.redactions, 0);
    assert!(h.page.text.contains("\"you_sent\":\"\""), "{}", h.page.text);
    assert_eq!(w.keys_seen().last().unwrap(), "GET -");

    // A credential not stored: refused before anything is sent.
    let before = w.keys_seen().len();
    match w.approved(
        &mut gw,
        &mut ui,
        w.call(HttpMethod::Get, "/echo", Some("nope")),
    ) {
        ToolReply::Refused(r) => {
            assert_eq!(r.kind, RefusalKind::Network);
            assert!(
                r.message
                    .starts_with("credential nope was not added for tls.test: "),
                "{}",
                r.message
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(w.keys_seen().len(), before);
}

#[test]
fn a_post_is_effectful_asked_once_and_never_sent_twice() {
    let w = HttpWorld::new();
    let mut gw = w.broker.gateway();
    let mut ui = w.broker.ui();
    let post = w.call(HttpMethod::Post, "/orders", Some("api"));
    let h = response_of(w.approved(&mut gw, &mut ui, post.clone()));
    assert!(
        h.page.text.contains("\"method\":\"POST\""),
        "{}",
        h.page.text
    );
    assert_eq!(w.keys_seen(), vec![format!("POST {SECRET}")]);
    // The same call again in the session: answered from the ledger, not sent again, not asked.
    match gw.call(post) {
        ToolReply::Done(d) => {
            assert!(d.from_ledger);
            assert!(matches!(d.result, ToolResult::HttpResponse(_)));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(w.keys_seen().len(), 1);
    // A GET of the same URL is a read: asked again and sent again (no ledger).
    let h = response_of(w.approved(
        &mut gw,
        &mut ui,
        w.call(HttpMethod::Get, "/orders", Some("api")),
    ));
    assert_eq!(h.page.status, 200);
    assert_eq!(w.keys_seen().len(), 2);
}

#[test]
fn http_request_to_a_private_address_is_refused_before_the_human_is_asked() {
    let w = HttpWorld::new();
    let mut gw = w.broker.gateway();
    let private = page_server("127.0.0.1");
    match gw.call(ToolCall::HttpRequest(HttpRequest {
        method: HttpMethod::Post,
        url: private.url("/"),
        headers: vec![],
        body: vec![],
        credential: Some(ipc_schema::secrets::CredentialName::parse("api").unwrap()),
    })) {
        ToolReply::Refused(r) => {
            assert_eq!(r.kind, RefusalKind::Network);
            assert_eq!(r.message, "127.0.0.1 is loopback (127.0.0.0/8)");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(private.hits(), 0);
    assert!(w.broker.ui().pending().is_empty());
}

#[test]
fn the_brokers_secrets_helper_uses_this_instances_store_and_doctor_says_which() {
    let b = broker();
    let out = b.cli(&["doctor"]);
    let report = text(&out.stdout);
    let line = report
        .lines()
        .find(|l| l.starts_with("note: secrets-helper: credential store keyutils ("))
        .unwrap_or_else(|| panic!("no secrets-helper note in:\n{report}"));
    // A --data-dir instance has its own namespace, never the user's `default`.
    assert!(line.contains(", namespace d-"), "{line}");
    drop(b);

    // A config naming no real store: the broker refuses to start, saying why.
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("config")).unwrap();
    std::fs::write(
        dir.path().join("config/config.toml"),
        "[secrets]\nstore = \"floppy\"\n",
    )
    .unwrap();
    let out = std::process::Command::new(gatehouse_tests::bin("gatehouse"))
        .arg("--data-dir")
        .arg(dir.path())
        .arg("broker")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(
        err.contains("refusing to start: ") && err.contains("store = \"floppy\" is not a store"),
        "{err}"
    );
}
