// Drives the Linux binaries (ipc_schema::platform::Missing elsewhere).
#![cfg(target_os = "linux")]
//! The exec sandbox's network: none at all, or only through the egress proxy over the bridge.
//!
//! `gatehouse sandbox` asks the broker to run the command; with `--allow-domain` the broker
//! opens a proxy session on its net-helper and the command's connections reach that proxy
//! through the sandbox's bridge. Here the names resolve through a loopback DNS server of the
//! test's own to 127.0.0.2, which the net-helper's test-only address policy (test builds only,
//! passed on to the broker the command starts) treats as public; an HTTP server listens there.
//! Every connection's end is a row in the broker's audit log. Build first:
//! `cargo build --workspace --all-features`.

#![forbid(unsafe_code)]

use gatehouse_tests::{bin, DataDir, LoopbackDns};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Output, Stdio};

const ALLOWED: &str = "allowed.test";

/// A loopback HTTP server on `ip` answering every request with `hello`.
fn http_server(ip: &str) -> std::net::SocketAddr {
    let l = TcpListener::bind((ip, 0)).unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for c in l.incoming().flatten() {
            std::thread::spawn(move || {
                let mut c = c;
                let _ = read_head(&mut c);
                let _ = c.write_all(
                    b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello",
                );
            });
        }
    });
    addr
}

fn read_head(c: &mut TcpStream) -> std::io::Result<String> {
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if c.read(&mut b)? == 0 {
            break;
        }
        head.push(b[0]);
    }
    Ok(String::from_utf8_lossy(&head).into_owned())
}

/// The egress proxy of the broker's net-helper, for `ALLOWED` (and a name the test DNS also
/// answers, `denied.test`, which no command is allowed), with the HTTP server on 127.0.0.2 and
/// the broker (started by the first command) stopped on drop.
struct Net {
    server: std::net::SocketAddr,
    _dns: LoopbackDns,
    data: DataDir,
    args: Vec<String>,
}

fn net() -> Net {
    let server = http_server("127.0.0.2");
    let dns = LoopbackDns::start(&[ALLOWED, "denied.test"], "127.0.0.2".parse().unwrap());
    let args = vec![
        "--allow-domain".to_string(),
        ALLOWED.to_string(),
        "--test-net-arg=--nameserver".to_string(),
        format!("--test-net-arg={}", dns.addr),
        "--test-net-arg=--test-public-addr".to_string(),
        "--test-net-arg=127.0.0.2".to_string(),
        format!("--test-proxy-port={}", server.port()),
        "--test-no-sni-check".to_string(),
    ];
    Net {
        server,
        _dns: dns,
        data: DataDir::new(),
        args,
    }
}

impl Net {
    /// `host:port` of the test server under `name`.
    fn at(&self, name: &str) -> String {
        format!("{name}:{}", self.server.port())
    }

    /// `(outcome, target)` of the broker's egress rows, oldest first.
    fn egress_rows(&self) -> Vec<(String, String)> {
        let out = Command::new(bin("gatehouse"))
            .arg("--data-dir")
            .arg(self.data.path())
            .args(["--json", "audit", "tail", "-n", "1000"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .filter(|r| r["kind"] == "egress")
            .map(|r| {
                (
                    r["outcome"].as_str().unwrap().to_string(),
                    r["target"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    }
}

/// `gatehouse sandbox` in `work`: without network, or with the proxy of `net`.
fn sandbox(work: &Path, net: Option<&Net>, argv: &[&str]) -> Output {
    let own = DataDir::new();
    let mut c = Command::new(bin("gatehouse"));
    c.arg("--data-dir")
        .arg(net.map_or(own.path(), |n| n.data.path()))
        .arg("sandbox")
        .arg("--allow-read")
        .arg(gatehouse_tests::exec_probe());
    if let Some(n) = net {
        c.args(&n.args);
    }
    c.arg("--")
        .args(argv)
        .current_dir(work)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn line(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).trim_end().to_string()
}

#[test]
fn curl_reaches_an_allowed_name_through_the_proxy_and_gets_403_for_another() {
    let n = net();
    // Positive control: curl works, and reaches the server directly from outside.
    let direct = Command::new("curl")
        .args(["-sS", &format!("http://{}/hello", n.server)])
        .output()
        .expect("curl is installed");
    assert_eq!(String::from_utf8_lossy(&direct.stdout), "hello");

    let work = gatehouse_tests::sandbox_owned_dir("gh-net-work-");
    let out = sandbox(
        work.path(),
        Some(&n),
        &[
            "curl",
            "-sS",
            "-p",
            &format!("http://{}/hello", n.at(ALLOWED)),
        ],
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "hello",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(0));
    let out = sandbox(
        work.path(),
        Some(&n),
        &[
            "curl",
            "-sS",
            "-p",
            &format!("http://{}/", n.at("denied.test")),
        ],
    );
    assert_eq!(out.status.code(), Some(56), "curl: tunnel failed");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("CONNECT tunnel failed, response 403"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Both connections are in the broker's audit log, in order, each once.
    assert_eq!(
        n.egress_rows(),
        vec![
            ("tunnelled".to_string(), n.at(ALLOWED)),
            ("refused (403)".to_string(), n.at("denied.test")),
        ]
    );
}

#[test]
fn with_the_proxy_the_variables_point_at_the_bridge_and_nothing_else_is_reachable() {
    let n = net();
    let server = n.server;
    let work = gatehouse_tests::sandbox_owned_dir("gh-net-work-");
    let p = gatehouse_tests::exec_probe();
    let p = p.to_str().unwrap();
    // Every proxy variable names the bridge with the command's own proxy token (a fresh one
    // per command: 32 hex digits as the password).
    let token_of = |v: &str| -> String {
        let l = line(&sandbox(work.path(), Some(&n), &[p, "env", v]));
        let token = l
            .strip_prefix("ok http://gatehouse:")
            .and_then(|r| r.strip_suffix("@127.0.0.1:3128"))
            .unwrap_or_else(|| panic!("{v}: {l}"));
        assert!(
            token.len() == 32 && token.bytes().all(|b| b.is_ascii_hexdigit()),
            "{v}: {l}"
        );
        token.to_string()
    };
    let mut tokens = Vec::new();
    for v in [
        "HTTPS_PROXY",
        "HTTP_PROXY",
        "ALL_PROXY",
        "https_proxy",
        "http_proxy",
        "all_proxy",
    ] {
        tokens.push(token_of(v));
    }
    tokens.sort();
    tokens.dedup();
    assert_eq!(tokens.len(), 6, "each command has a token of its own");
    // Positive control: the host's loopback server accepts connections from outside.
    assert!(TcpStream::connect(server).is_ok());
    // Inside, inet sockets exist now, but loopback is the sandbox's own and there is no route.
    assert_eq!(
        line(&sandbox(
            work.path(),
            Some(&n),
            &[p, "connect-tcp", &server.to_string()]
        )),
        "errno ECONNREFUSED"
    );
    assert_eq!(
        line(&sandbox(
            work.path(),
            Some(&n),
            &[p, "connect-tcp", "192.0.2.1:443"]
        )),
        "errno ENETUNREACH"
    );
    assert_eq!(
        line(&sandbox(work.path(), Some(&n), &[p, "udp", "192.0.2.1:53"])),
        "errno ENETUNREACH"
    );
    assert_eq!(
        line(&sandbox(work.path(), Some(&n), &[p, "raw-socket"])),
        "errno EPERM"
    );
    assert_eq!(
        line(&sandbox(work.path(), Some(&n), &[p, "packet-socket"])),
        "errno EAFNOSUPPORT"
    );
    // The bridge is reachable: a raw CONNECT without the token gets the proxy's 407, and
    // the refusal is in the audit log.
    let out = sandbox(
        work.path(),
        Some(&n),
        &[
            "curl",
            "-sS",
            "-p",
            "--noproxy",
            "",
            "-x",
            "http://127.0.0.1:3128",
            &format!("http://{}/", n.at(ALLOWED)),
        ],
    );
    assert_eq!(out.status.code(), Some(56));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("response 407"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        n.egress_rows(),
        vec![("refused (407)".to_string(), n.at(ALLOWED))]
    );
}

#[test]
fn without_the_proxy_there_is_no_network_at_all() {
    let server = http_server("127.0.0.1");
    let work = gatehouse_tests::sandbox_owned_dir("gh-net-work-");
    let p = gatehouse_tests::exec_probe();
    let p = p.to_str().unwrap();
    assert_eq!(
        line(&sandbox(work.path(), None, &[p, "env", "HTTPS_PROXY"])),
        "ok <unset>"
    );
    assert_eq!(
        line(&sandbox(
            work.path(),
            None,
            &[p, "connect-tcp", &server.to_string()]
        )),
        "errno EAFNOSUPPORT"
    );
    // curl cannot even create its socket.
    let out = sandbox(
        work.path(),
        None,
        &["curl", "-sS", &format!("http://{server}/hello")],
    );
    assert_eq!(
        out.status.code(),
        Some(7),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.stdout.is_empty());
}

#[test]
fn a_bad_allow_domain_is_refused_with_the_proxys_reason() {
    let work = gatehouse_tests::sandbox_owned_dir("gh-net-work-");
    let data = DataDir::new();
    let out = Command::new(bin("gatehouse"))
        .arg("--data-dir")
        .arg(data.path())
        .args([
            "sandbox",
            "--allow-domain",
            "bad domain!",
            "--",
            "/bin/true",
        ])
        .current_dir(work.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim(),
        "gatehouse sandbox: --allow-domain: allowlist entry \"bad domain!\": not a host (invalid international domain name)"
    );
}

#[test]
fn allow_domain_uses_the_net_helper_proxy_with_its_test_address_policy() {
    // The name resolves (through the test's DNS server) to 127.0.0.2, which the net-helper's
    // test-only address policy treats as public; the server listens there.
    let server = http_server("127.0.0.2");
    let dns = LoopbackDns::start(&[ALLOWED], "127.0.0.2".parse().unwrap());
    let port = server.port().to_string();
    let work = gatehouse_tests::sandbox_owned_dir("gh-net-work-");
    let data = DataDir::new();
    let run = |url: String| {
        Command::new(bin("gatehouse"))
            .arg("--data-dir")
            .arg(data.path())
            .args(["sandbox", "--allow-domain", ALLOWED])
            .args([
                "--test-net-arg",
                "--nameserver",
                "--test-net-arg",
                &dns.addr.to_string(),
            ])
            .args([
                "--test-net-arg",
                "--test-public-addr",
                "--test-net-arg",
                "127.0.0.2",
            ])
            .args(["--test-proxy-port", &port, "--test-no-sni-check"])
            .args(["--", "curl", "-sS", "-p", &url])
            .current_dir(work.path())
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let out = run(format!("http://{ALLOWED}:{port}/hello"));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "hello",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = run(format!("http://denied.test:{port}/"));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(56), "{err}");
    // curl and `gatehouse sandbox` share stderr, and curl writes its message in pieces: our
    // line (one write) can land inside curl's. Take ours out, then read curl's.
    let start = err
        .find("gatehouse sandbox: egress REFUSED")
        .unwrap_or_else(|| panic!("no egress line: {err}"));
    let end = err[start..].find('\n').map_or(err.len(), |i| start + i + 1);
    assert!(
        err[start..end].starts_with(&format!(
            "gatehouse sandbox: egress REFUSED denied.test:{port} for session sandbox-"
        )),
        "{err}"
    );
    let curl_only = format!("{}{}", &err[..start], &err[end..]);
    assert!(
        curl_only.contains("CONNECT tunnel failed, response 403"),
        "{err}"
    );
}
