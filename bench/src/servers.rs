//! `bench servers`: one call of a third-party MCP server's tool (the test server's `echo`)
//! through gatehouse (`gatehouse mcp`, the gateway, the broker, an allowed effectful call's path
//! with its ledger transitions (echo is not marked read-only), the servers-helper, the server in
//! its exec sandbox, and back, wrapped as outside text) against
//! the same call made to the same server directly over its stdio, in the same run. Sequential
//! latency (p50, p99) and the added latency. Nothing here asserts a timing.
//!
//! A broker running as root does not run third-party servers, so run this as a user:
//! `cargo build --release --workspace && cargo run --release -p bench -- servers` (as root:
//! `runuser -u gatehouse-test -- target/release/bench servers`).

use crate::stats::{us, Samples};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Instant;

const ROUNDS: usize = 10;
const PER_ROUND: usize = 200;

/// A JSON-RPC peer over a child's stdio.
struct Peer {
    child: Child,
    w: ChildStdin,
    r: BufReader<ChildStdout>,
    id: u64,
}

impl Peer {
    fn spawn(cmd: &mut Command) -> Peer {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn");
        let w = child.stdin.take().unwrap();
        let r = BufReader::new(child.stdout.take().unwrap());
        Peer { child, w, r, id: 0 }
    }

    fn request(&mut self, method: &str, params: Value) -> Value {
        self.id += 1;
        let msg = json!({"jsonrpc": "2.0", "id": self.id, "method": method, "params": params});
        writeln!(self.w, "{msg}").unwrap();
        self.w.flush().unwrap();
        let mut line = String::new();
        loop {
            line.clear();
            assert!(self.r.read_line(&mut line).unwrap() > 0, "the peer closed");
            let v: Value = serde_json::from_str(&line).unwrap();
            if v.get("id") == Some(&json!(self.id)) {
                return v;
            }
        }
    }

    fn initialize(&mut self) {
        let r = self.request(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}),
        );
        assert!(r.get("result").is_some(), "{r}");
        writeln!(
            self.w,
            r#"{{"jsonrpc":"2.0","method":"notifications/initialized"}}"#
        )
        .unwrap();
    }

    fn echo(&mut self, tool: &str) {
        let r = self.request(
            "tools/call",
            json!({"name": tool, "arguments": {"text": "ping"}}),
        );
        assert_eq!(r["result"]["isError"], json!(false), "{r}");
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn run(args: &[String]) {
    if nix::unistd::geteuid().is_root() {
        eprintln!("bench servers: a broker running as root does not run third-party servers; run it as a user (runuser -u gatehouse-test -- target/release/bench servers)");
        std::process::exit(2);
    }
    let bins = crate::ipc::bin_dir(args);
    let dir = std::env::temp_dir().join(format!("gh-bench-servers-{}", std::process::id()));
    let script = dir.join("shifty_server.py");
    std::fs::create_dir_all(dir.join("d/config")).unwrap();
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/mcp_servers/shifty_server.py"),
        &script,
    )
    .unwrap();
    let home = dir.join("home");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(
        dir.join("d/config/policy.toml"),
        format!(
            "[limits]\nrequests_per_minute = 4000000000\nconcurrent_requests = 64\n\
             [[mcp_server]]\nname = \"shifty\"\ncommand = [\"/usr/bin/python3\", \"{s}\"]\nread = [\"{s}\"]\n\
             [[rule]]\ntools = [\"shifty__echo\"]\naction = \"allow\"\n",
            s = script.display()
        ),
    )
    .unwrap();
    let gatehouse = bins.join("gatehouse");
    let mut broker = crate::mcp::spawn_broker(&gatehouse, &dir);
    let approved = Command::new(&gatehouse)
        .arg("--data-dir")
        .arg(dir.join("d"))
        .args(["mcp-server", "tools", "shifty", "--approve-all"])
        .output()
        .unwrap();
    assert!(
        approved.status.success(),
        "{}",
        String::from_utf8_lossy(&approved.stderr)
    );

    let mut direct = Peer::spawn(
        Command::new("/usr/bin/python3")
            .arg(&script)
            .env("HOME", &home),
    );
    direct.initialize();
    let mut through = Peer::spawn(
        Command::new(&gatehouse)
            .arg("--data-dir")
            .arg(dir.join("d"))
            .arg("mcp")
            .current_dir(&dir)
            .stderr(Stdio::null()),
    );
    through.initialize();
    let listed = through.request("tools/list", json!({}));
    assert!(listed.to_string().contains("shifty__echo"), "{listed}");
    // Warm both.
    for _ in 0..50 {
        direct.echo("echo");
        through.echo("shifty__echo");
    }
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        for _ in 0..PER_ROUND {
            let t = Instant::now();
            direct.echo("echo");
            a.push(t.elapsed());
        }
        for _ in 0..PER_ROUND {
            let t = Instant::now();
            through.echo("shifty__echo");
            b.push(t.elapsed());
        }
    }
    let (a, b) = (Samples::new(a), Samples::new(b));
    println!(
        "bench servers: one tools/call of echo, {} calls each, sequential",
        ROUNDS * PER_ROUND
    );
    println!(
        "  direct to the server (its stdio)     p50 {:>8.1} us  p99 {:>8.1} us",
        us(a.p50()),
        us(a.p99())
    );
    println!(
        "  through gatehouse (NAME__TOOL)       p50 {:>8.1} us  p99 {:>8.1} us",
        us(b.p50()),
        us(b.p99())
    );
    println!(
        "  added by gatehouse: p50 {:.1} us ({:.2}x the direct call), p99 {:.1} us",
        us(b.p50()) - us(a.p50()),
        us(b.p50()) / us(a.p50()),
        us(b.p99()) - us(a.p99())
    );
    drop(through);
    drop(direct);
    let _ = Command::new("kill").arg(broker.id().to_string()).status();
    let _ = broker.wait();
    let _ = std::fs::remove_dir_all(&dir);
}
