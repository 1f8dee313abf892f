//! Shared by the gateway tests: a private instance (data dir + scratch project), its broker,
//! `gatehouse mcp` driven over stdio line by line, and the Python MCP client scripts.

#![allow(dead_code)]

use gatehouse_tests::{bin, Conn};
use ipc_schema::ui::{Choice, Decision, Proposal, UiReply, UiRequest};
use ipc_schema::Body;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

/// How long a test waits for any one answer before it fails (never a timing assertion: a
/// working gateway answers in milliseconds).
pub const PATIENCE: Duration = Duration::from_secs(60);

/// A test's private instance: `root/d` (data, config, sockets) and `root/project` (granted).
pub struct Instance {
    pub tmp: tempfile::TempDir,
    pub data: PathBuf,
    pub project: PathBuf,
    /// Where its broker and `gatehouse mcp` run (under a refusal wrapper, or not).
    pub host: gatehouse_tests::Host,
}

/// The instance's audit key goes with it (see [`gatehouse_tests::forget_audit_key`]); its
/// brokers, declared after it, have stopped by then.
impl Drop for Instance {
    fn drop(&mut self) {
        gatehouse_tests::forget_audit_key(&self.data);
    }
}

impl Instance {
    /// With `policy` (TOML; `{ROOT}` becomes the project dir) as the policy file, or the
    /// built-in default profile granting the project when `None`.
    pub fn new(policy: Option<&str>) -> Instance {
        Instance::on(gatehouse_tests::Host::Namespaces, policy)
    }

    /// As [`Instance::new`], run on `host`: the policy file as `host` needs it
    /// ([`gatehouse_tests::Host::policy`]), the broker and `gatehouse mcp` under its wrapper.
    pub fn on(host: gatehouse_tests::Host, policy: Option<&str>) -> Instance {
        let tmp = tempfile::Builder::new()
            .prefix("gh-mcp-")
            .tempdir()
            .expect("tempdir");
        let project = tmp.path().join("project");
        std::fs::create_dir_all(&project).unwrap();
        let project = std::fs::canonicalize(&project).unwrap();
        let data = tmp.path().join("d");
        std::fs::create_dir_all(data.join("config")).unwrap();
        std::fs::write(project.join("hello.txt"), "hello\n").unwrap();
        let inst = Instance {
            tmp,
            data,
            project,
            host,
        };
        if let Some(p) = policy {
            inst.write_policy(&p.replace("{ROOT}", &inst.project.display().to_string()));
        }
        inst
    }

    /// `doc` as the policy file (as this instance's host needs it).
    pub fn write_policy(&self, doc: &str) {
        std::fs::write(self.data.join("config/policy.toml"), self.host.policy(doc)).unwrap();
    }

    pub fn file(&self, name: &str) -> PathBuf {
        self.project.join(name)
    }

    /// `gatehouse --data-dir D broker --grant-root PROJECT EXTRA...`, waiting for its sockets.
    pub fn broker(&self, extra: &[&str]) -> Broker {
        let log = std::fs::File::create(self.tmp.path().join("broker.log")).unwrap();
        let child = self
            .host
            .command(&bin("gatehouse"))
            .arg("--data-dir")
            .arg(&self.data)
            .arg("broker")
            .arg("--grant-root")
            .arg(&self.project)
            .args(extra)
            .current_dir(&self.project)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start broker");
        let mut b = Broker {
            child,
            data: self.data.clone(),
            log: self.tmp.path().join("broker.log"),
        };
        let deadline = Instant::now() + PATIENCE;
        while Conn::connect(&b.data.join("run/gateway.sock")).is_err() {
            if let Ok(Some(st)) = b.child.try_wait() {
                panic!("the broker exited ({st}); log:\n{}", b.log());
            }
            assert!(
                Instant::now() < deadline,
                "the broker did not start; log:\n{}",
                b.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        if self.host != gatehouse_tests::Host::Namespaces {
            if let Err(e) = gatehouse_tests::check_exec_tier(&b.data.join("run/ui.sock"), self.host)
            {
                panic!("{e}; log:\n{}", b.log());
            }
        }
        b
    }

    /// `gatehouse --data-dir D mcp ARGS...` in the project directory.
    pub fn mcp(&self, args: &[&str]) -> Mcp {
        self.mcp_with(&bin("gatehouse"), args, &[])
    }

    pub fn mcp_with(&self, gatehouse: &Path, args: &[&str], env: &[(&str, &str)]) -> Mcp {
        let err_path = self.tmp.path().join(format!("mcp-{}.err", rand_suffix()));
        let mut cmd = self.host.command(gatehouse);
        cmd.arg("--data-dir")
            .arg(&self.data)
            .arg("mcp")
            .args(args)
            .current_dir(&self.project)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&err_path).unwrap());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("start gatehouse mcp");
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        Mcp {
            child,
            stdin,
            lines: rx,
            err_path,
            next_id: 1000,
        }
    }
}

fn rand_suffix() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::SeqCst)
}

pub struct Broker {
    pub child: Child,
    pub data: PathBuf,
    log: PathBuf,
}

impl Broker {
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn ui(&self) -> Conn {
        let c = Conn::connect(&self.data.join("run/ui.sock")).expect("connect ui socket");
        c.set_timeout(Some(PATIENCE));
        c
    }

    /// The whole audit log, as the console reads it.
    pub fn audit(&self) -> Vec<ipc_schema::ui::AuditEntry> {
        match self.ui().request(Body::Ui(UiRequest::AuditTail {
            after: 0,
            limit: 10_000,
        })) {
            Body::UiReply(UiReply::Audit(rows)) => rows,
            other => panic!("AuditTail answered {other:?}"),
        }
    }

    /// The proposals waiting, once there are at least `n` (or fails after [`PATIENCE`]).
    pub fn pending(&self, n: usize) -> Vec<Proposal> {
        let mut ui = self.ui();
        let deadline = Instant::now() + PATIENCE;
        loop {
            match ui.request(Body::Ui(UiRequest::ListPending)) {
                Body::UiReply(UiReply::Pending(p)) if p.len() >= n => return p,
                Body::UiReply(UiReply::Pending(p)) => {
                    assert!(
                        Instant::now() < deadline,
                        "{} proposals, waited for {n}",
                        p.len()
                    );
                }
                other => panic!("ListPending answered {other:?}"),
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `gatehouse --data-dir D ARGS...`.
    pub fn cli(&self, args: &[&str]) -> std::process::Output {
        Command::new(bin("gatehouse"))
            .arg("--data-dir")
            .arg(&self.data)
            .args(args)
            .output()
            .expect("run gatehouse")
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(self.child.id() as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
        let _ = self.child.wait();
    }
}

/// `gatehouse mcp` over its stdio.
pub struct Mcp {
    pub child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<std::io::Result<String>>,
    err_path: PathBuf,
    next_id: u64,
}

impl Mcp {
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.err_path).unwrap_or_default()
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn send_raw(&mut self, bytes: &[u8]) {
        let w = self.stdin.as_mut().expect("stdin open");
        w.write_all(bytes).expect("write to gatehouse mcp");
        w.flush().unwrap();
    }

    pub fn send(&mut self, msg: &Value) {
        let mut line = serde_json::to_vec(msg).unwrap();
        line.push(b'\n');
        self.send_raw(&line);
    }

    /// A refusal before any session: the client's first request is answered with it as a
    /// JSON-RPC error (code -32001, what clients that hide stderr show), and the process exits
    /// once the client closes stdin. Returns the exit status.
    pub fn refused_with(&mut self, needle: &str) -> ExitStatus {
        let id = self.fresh_id();
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                       "clientInfo": {"name": "rust-test", "version": "1"}}}));
        let r = self.recv();
        assert_eq!(r["id"], json!(id), "{r}");
        assert_eq!(r["error"]["code"], -32001, "{r}");
        let msg = r["error"]["message"].as_str().unwrap_or_default();
        assert!(
            msg.starts_with("gatehouse: ") && msg.contains(needle),
            "{needle}: {r}"
        );
        self.close();
        self.wait()
    }

    /// Closes stdin: the client ends the session.
    pub fn close(&mut self) {
        self.stdin = None;
    }

    /// The next line on stdout, which must be one JSON-RPC message.
    pub fn recv(&mut self) -> Value {
        match self.lines.recv_timeout(PATIENCE) {
            Ok(Ok(line)) => {
                let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| {
                    panic!("stdout carried a line that is not JSON ({e}): {line:?}")
                });
                assert_eq!(v["jsonrpc"], "2.0", "{line}");
                v
            }
            Ok(Err(e)) => panic!("reading stdout: {e}"),
            Err(RecvTimeoutError::Timeout) => {
                panic!("no answer within {PATIENCE:?}; stderr:\n{}", self.stderr())
            }
            Err(RecvTimeoutError::Disconnected) => {
                panic!(
                    "gatehouse mcp closed stdout; status {:?}; stderr:\n{}",
                    self.child.try_wait(),
                    self.stderr()
                )
            }
        }
    }

    /// Whether stdout ended (the process exited) before another line came.
    pub fn stdout_closed(&mut self) -> bool {
        matches!(
            self.lines.recv_timeout(PATIENCE),
            Err(RecvTimeoutError::Disconnected)
        )
    }

    pub fn fresh_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// Sends a request and returns its response (notifications before it are collected in
    /// `notes`).
    pub fn request_collecting(
        &mut self,
        method: &str,
        params: Value,
        notes: &mut Vec<Value>,
    ) -> Value {
        let id = self.fresh_id();
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        loop {
            let v = self.recv();
            if v.get("id") == Some(&json!(id)) {
                return v;
            }
            assert!(
                v.get("method").is_some(),
                "a response to another request: {v}"
            );
            notes.push(v);
        }
    }

    pub fn request(&mut self, method: &str, params: Value) -> Value {
        self.request_collecting(method, params, &mut Vec::new())
    }

    /// `initialize` (and `notifications/initialized`) at `version`; returns the result.
    pub fn initialize(&mut self, version: &str) -> Value {
        let r = self.request(
            "initialize",
            json!({"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "rust-test", "version": "1"}}),
        );
        self.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        r["result"].clone()
    }

    /// A tools/call in the legacy era: `(isError, text)`.
    pub fn call(&mut self, tool: &str, args: Value) -> (bool, String) {
        let r = self.request("tools/call", json!({"name": tool, "arguments": args}));
        tool_text(&r)
    }

    pub fn wait(&mut self) -> ExitStatus {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                return st;
            }
            assert!(
                Instant::now() < deadline,
                "gatehouse mcp did not exit; stderr:\n{}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Mcp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `(isError, text)` of a tools/call response (fails on a JSON-RPC error).
pub fn tool_text(r: &Value) -> (bool, String) {
    let result = r
        .get("result")
        .unwrap_or_else(|| panic!("not a result: {r}"));
    let text = result["content"]
        .as_array()
        .unwrap_or_else(|| panic!("no content: {r}"))
        .iter()
        .map(|c| c["text"].as_str().unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n");
    (result["isError"] == json!(true), text)
}

/// The `_meta` of a 2026-07-28 request.
pub fn modern_meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "rust-test", "version": "1"},
    })
}

/// The source tree (a copy of it when the suite runs as the unprivileged user).
pub fn source_dir() -> PathBuf {
    match std::env::var_os("GATEHOUSE_SOURCE_DIR") {
        Some(d) => PathBuf::from(d),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join(".."),
    }
}

/// The Python of a venv `scripts/test-deps.sh` made; fails the test if it is missing.
pub fn python(venv: &str) -> PathBuf {
    let p = PathBuf::from(venv).join("bin/python");
    assert!(
        p.exists(),
        "{} is missing: run scripts/test-deps.sh",
        p.display()
    );
    p
}

pub const MCP1: &str = "/opt/gatehouse-test-venv";
pub const MCP2: &str = "/opt/gatehouse-test-venv-mcp2";

/// Sends a tools/call that waits for the human, decides it with `choice`, returns the result.
pub fn call_decided(
    b: &Broker,
    m: &mut Mcp,
    tool: &str,
    args: Value,
    choice: Choice,
) -> (bool, String) {
    let id = m.fresh_id();
    m.send(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                   "params": {"name": tool, "arguments": args}}));
    let p = b.pending(1).remove(0);
    assert_eq!(p.tool.name(), tool);
    match b.ui().request(Body::Ui(UiRequest::Decide(Decision {
        proposal: p.id,
        digest: p.digest,
        choice,
    }))) {
        Body::UiReply(UiReply::Decided { .. }) => {}
        other => panic!("Decide answered {other:?}"),
    }
    loop {
        let v = m.recv();
        if v.get("id") == Some(&json!(id)) {
            return tool_text(&v);
        }
    }
}

/// The text inside an outside-text wrapper (`<external-NONCE ...>` ... `</external-NONCE>`).
pub fn wrapped_body(text: &str) -> &str {
    let start = text.find("\">\n").expect("wrapped") + 3;
    let end = text.rfind("\n</external-").expect("wrapped");
    &text[start..end]
}
