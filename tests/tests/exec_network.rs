//! The exec sandbox's network: none at all, or only through the egress proxy over the bridge.
//!
//! The proxy here is a small CONNECT proxy of the test's own, speaking the connector protocol
//! (one byte and one client descriptor per connection, `SCM_RIGHTS`): it allows one name and
//! tunnels it to an HTTP server on loopback, refuses other names with 403 and a wrong token with
//! 407, the way the net-helper's proxy does. `gatehouse sandbox --test-proxy-socket` (test
//! builds only) uses it in place of the net-helper. Build first:
//! `cargo build --workspace --all-features`.

#![forbid(unsafe_code)]

use gatehouse_tests::{bin, LoopbackDns};
use sandbox::linux::command::fdpass::recv_with_fds;
use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex};

const TOKEN: &str = "test-token";
const ALLOWED: &str = "allowed.test";

fn base64(input: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in input.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (b[0] as u32) << 16 | (b[1] as u32) << 8 | b[2] as u32;
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(T[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

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

/// The test's CONNECT proxy; `seen` collects `host:port STATUS` per client connection.
struct Proxy {
    _dir: tempfile::TempDir,
    socket: PathBuf,
    seen: Arc<Mutex<Vec<String>>>,
}

fn proxy(upstream: std::net::SocketAddr) -> Proxy {
    let dir = tempfile::Builder::new()
        .prefix("gh-proxy-")
        .tempdir()
        .unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let socket = dir.path().join("proxy.sock");
    let l = UnixListener::bind(&socket).unwrap();
    std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o777)).unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s2 = seen.clone();
    std::thread::spawn(move || {
        for connector in l.incoming().flatten() {
            let seen = s2.clone();
            std::thread::spawn(move || {
                let mut fds = VecDeque::new();
                let mut buf = [0u8; 64];
                while let Ok(n) = recv_with_fds(connector.as_fd(), &mut buf, &mut fds) {
                    if n == 0 {
                        break;
                    }
                    while let Some(fd) = fds.pop_front() {
                        let seen = seen.clone();
                        std::thread::spawn(move || {
                            serve_client(TcpStream::from(fd), upstream, seen)
                        });
                    }
                }
            });
        }
    });
    Proxy {
        _dir: dir,
        socket,
        seen,
    }
}

fn serve_client(mut c: TcpStream, upstream: std::net::SocketAddr, seen: Arc<Mutex<Vec<String>>>) {
    let head = read_head(&mut c).unwrap_or_default();
    let target = head
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("CONNECT "))
        .and_then(|l| l.split(' ').next())
        .unwrap_or("-")
        .to_string();
    let auth = format!("Basic {}", base64(format!("gatehouse:{TOKEN}").as_bytes()));
    let authorized = head
        .lines()
        .any(|l| l.to_ascii_lowercase().starts_with("proxy-authorization:") && l.ends_with(&auth));
    let status = if !authorized {
        407
    } else if target != format!("{ALLOWED}:443") {
        403
    } else {
        200
    };
    seen.lock().unwrap().push(format!("{target} {status}"));
    if status != 200 {
        let _ = c.write_all(
            format!("HTTP/1.1 {status} Refused\r\nContent-Length: 0\r\n\r\n").as_bytes(),
        );
        return;
    }
    let up = TcpStream::connect(upstream).unwrap();
    let _ = c.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n");
    let (mut a, mut b) = (c.try_clone().unwrap(), up.try_clone().unwrap());
    let t = std::thread::spawn(move || {
        let _ = std::io::copy(&mut a, &mut b);
        let _ = b.shutdown(std::net::Shutdown::Write);
    });
    let (mut c2, mut up2) = (c, up);
    let _ = std::io::copy(&mut up2, &mut c2);
    let _ = c2.shutdown(std::net::Shutdown::Write);
    let _ = t.join();
}

fn sandbox(work: &Path, proxy: Option<&Proxy>, argv: &[&str]) -> Output {
    let data = tempfile::tempdir().unwrap();
    let mut c = Command::new(bin("gatehouse"));
    c.arg("--data-dir")
        .arg(data.path())
        .arg("sandbox")
        .arg("--allow-read")
        .arg(gatehouse_tests::exec_probe());
    if let Some(p) = proxy {
        c.arg("--test-proxy-socket").arg(&p.socket);
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
    let server = http_server("127.0.0.1");
    // Positive control: curl works, and reaches the server directly from outside.
    let direct = Command::new("curl")
        .args(["-sS", &format!("http://{server}/hello")])
        .output()
        .expect("curl is installed");
    assert_eq!(String::from_utf8_lossy(&direct.stdout), "hello");

    let px = proxy(server);
    let work = gatehouse_tests::sandbox_owned_dir("gh-net-work-");
    let out = sandbox(
        work.path(),
        Some(&px),
        &["curl", "-sS", "-p", &format!("http://{ALLOWED}:443/hello")],
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "hello",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = sandbox(
        work.path(),
        Some(&px),
        &["curl", "-sS", "-p", "http://denied.test:443/"],
    );
    assert_eq!(out.status.code(), Some(56), "curl: tunnel failed");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("CONNECT tunnel failed, response 403"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let seen = px.seen.lock().unwrap().clone();
    assert_eq!(
        seen,
        vec![
            format!("{ALLOWED}:443 200"),
            "denied.test:443 403".to_string()
        ]
    );
}

#[test]
fn with_the_proxy_the_variables_point_at_the_bridge_and_nothing_else_is_reachable() {
    let server = http_server("127.0.0.1");
    let px = proxy(server);
    let work = gatehouse_tests::sandbox_owned_dir("gh-net-work-");
    let p = gatehouse_tests::exec_probe();
    let p = p.to_str().unwrap();
    let url = format!("ok http://gatehouse:{TOKEN}@127.0.0.1:3128");
    for v in [
        "HTTPS_PROXY",
        "HTTP_PROXY",
        "ALL_PROXY",
        "https_proxy",
        "http_proxy",
        "all_proxy",
    ] {
        assert_eq!(
            line(&sandbox(work.path(), Some(&px), &[p, "env", v])),
            url,
            "{v}"
        );
    }
    // Positive control: the host's loopback server accepts connections from outside.
    assert!(TcpStream::connect(server).is_ok());
    // Inside, inet sockets exist now, but loopback is the sandbox's own and there is no route.
    assert_eq!(
        line(&sandbox(
            work.path(),
            Some(&px),
            &[p, "connect-tcp", &server.to_string()]
        )),
        "errno ECONNREFUSED"
    );
    assert_eq!(
        line(&sandbox(
            work.path(),
            Some(&px),
            &[p, "connect-tcp", "192.0.2.1:443"]
        )),
        "errno ENETUNREACH"
    );
    assert_eq!(
        line(&sandbox(
            work.path(),
            Some(&px),
            &[p, "udp", "192.0.2.1:53"]
        )),
        "errno ENETUNREACH"
    );
    assert_eq!(
        line(&sandbox(work.path(), Some(&px), &[p, "raw-socket"])),
        "errno EPERM"
    );
    assert_eq!(
        line(&sandbox(work.path(), Some(&px), &[p, "packet-socket"])),
        "errno EAFNOSUPPORT"
    );
    // The bridge is reachable: a raw CONNECT without the token gets the proxy's 407.
    let out = sandbox(
        work.path(),
        Some(&px),
        &[
            "curl",
            "-sS",
            "-p",
            "--noproxy",
            "",
            "-x",
            "http://127.0.0.1:3128",
            &format!("http://{ALLOWED}:443/"),
        ],
    );
    assert_eq!(out.status.code(), Some(56));
    assert!(String::from_utf8_lossy(&out.stderr).contains("response 407"));
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
    let data = tempfile::tempdir().unwrap();
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
    let data = tempfile::tempdir().unwrap();
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
