//! A remote MCP server for tests: the official Python SDK's FastMCP over Streamable HTTP with
//! TLS on 127.0.0.2 (tests/mcp_servers/remote_server.py), named `tls.test` and `other.test` by
//! a DNS server of the test's own, with a certificate from a test CA, and the arguments that
//! make a broker's net-helper use that DNS server, trust that CA and judge 127.0.0.2 public
//! (test builds only). The server writes every request it gets to a log: how a test sees what
//! reached it. A test that uses this declares `mod net` (net-helper/tests/common) beside it.
//! [`Remote`] alone serves a test with a DNS server and CA of its own (the agents' tests: the
//! net-helper takes one test "public" address, shared there with the model endpoint).

#![allow(dead_code)]

use crate::mcp_support::{python, source_dir, MCP1};
use crate::net;
use serde_json::Value;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// The token the server wants (`Authorization: Bearer SECRET`).
pub const SECRET: &str = "mcp-tok-9Vq2Lr7XbW4Zk";

/// The FastMCP server with a certificate for tls.test and other.test.
pub struct Remote {
    child: Child,
    pub port: u16,
    log: PathBuf,
}

impl Remote {
    /// On loopback address `ip` (the one the net-helper is told to judge public), with a
    /// certificate from `ca`.
    pub fn start(
        dir: &Path,
        ip: std::net::Ipv4Addr,
        ca: &rcgen::Certificate,
        ca_key: &rcgen::KeyPair,
    ) -> Remote {
        Remote::start_with(dir, ip, ca, ca_key, &[])
    }

    /// With the server's optional switches (`--reword`: a `reword` tool that changes how the
    /// server describes `echo`).
    pub fn start_with(
        dir: &Path,
        ip: std::net::Ipv4Addr,
        ca: &rcgen::Certificate,
        ca_key: &rcgen::KeyPair,
        extra: &[&str],
    ) -> Remote {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["tls.test".into(), "other.test".into()])
            .unwrap()
            .signed_by(&key, ca, ca_key)
            .unwrap();
        let (cert_file, key_file, log) = (
            dir.join("remote-cert.pem"),
            dir.join("remote-key.pem"),
            dir.join("remote.log"),
        );
        std::fs::write(&cert_file, cert.pem()).unwrap();
        std::fs::write(&key_file, key.serialize_pem()).unwrap();
        let mut child = Command::new(python(MCP1))
            .arg(source_dir().join("tests/mcp_servers/remote_server.py"))
            .arg(ip.to_string())
            .args([&cert_file, &key_file, &log])
            .arg(SECRET)
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(dir.join("remote.err")).unwrap())
            .spawn()
            .expect("start the remote test server");
        let mut first = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut first)
            .unwrap();
        let port = first.trim().parse().unwrap_or_else(|_| {
            panic!(
                "the remote test server printed {first:?}: {}",
                std::fs::read_to_string(dir.join("remote.err")).unwrap_or_default()
            )
        });
        Remote { child, port, log }
    }

    /// Every request it got: method, Host, Authorization, session id, protocol version.
    pub fn seen(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

impl Drop for Remote {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The server, its DNS and its CA, and the broker arguments that point a net-helper at them.
pub struct RemoteWorld {
    pub remote: Remote,
    pub dns: net::DnsServer,
    pub pki: net::TestPki,
    _dir: tempfile::TempDir,
}

impl RemoteWorld {
    pub fn start() -> RemoteWorld {
        RemoteWorld::start_with(&[])
    }

    /// With the server's optional switches ([`Remote::start_with`]).
    pub fn start_with(extra: &[&str]) -> RemoteWorld {
        let (pki, ca, ca_key) = net::test_pki();
        let dns = net::DnsServer::start(net::standard_zone());
        let dir = tempfile::tempdir().unwrap();
        let remote = Remote::start_with(dir.path(), net::PUBLIC, &ca, &ca_key, extra);
        RemoteWorld {
            remote,
            dns,
            pki,
            _dir: dir,
        }
    }

    /// For `gatehouse broker` (or any command that starts one).
    pub fn broker_args(&self) -> Vec<String> {
        vec![
            "--test-net-arg=--nameserver".into(),
            format!("--test-net-arg={}", self.dns.addr),
            "--test-net-arg=--test-public-addr".into(),
            format!("--test-net-arg={}", net::PUBLIC),
            "--test-net-arg=--test-extra-root".into(),
            format!("--test-net-arg={}", self.pki.ca_file.path().display()),
        ]
    }
}

/// `gatehouse --data-dir DATA secret set NAME --host HOST --stdin` with `value`.
pub fn store_secret(data: &Path, name: &str, host: &str, value: &str) {
    let mut set = Command::new(gatehouse_tests::bin("gatehouse"))
        .arg("--data-dir")
        .arg(data)
        .args(["secret", "set", name, "--host", host, "--stdin"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    set.stdin
        .take()
        .unwrap()
        .write_all(format!("{value}\n").as_bytes())
        .unwrap();
    let out = set.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
