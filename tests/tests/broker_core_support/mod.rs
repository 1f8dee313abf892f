//! Shared by the broker-core tests: a broker on a data dir the test owns (so it can be killed
//! and restarted on the same audit log and ledger), a gateway that follows a call to its final
//! reply, and a ui peer that lists and decides proposals.

#![allow(dead_code)]

use gatehouse_tests::{bin, Conn};
use ipc_schema::fs::{CreateMode, FsPath};
use ipc_schema::tool::{ReadFile, ResumeToken, SessionInfo, ToolCall, ToolReply, WriteFile};
use ipc_schema::ui::{Choice, Decision, Proposal, UiReply, UiRequest};
use ipc_schema::{Body, Envelope};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// A test's private instance: `root/{config,data,run}`, and a project directory to grant.
pub struct Instance {
    pub tmp: tempfile::TempDir,
    pub project: PathBuf,
}

impl Instance {
    /// With `policy` (TOML, `{ROOT}` replaced by the project dir) as config/policy.toml, or
    /// without a policy file when `None`.
    pub fn new(policy: Option<&str>) -> Instance {
        let tmp = tempfile::Builder::new()
            .prefix("gh-core-")
            .tempdir()
            .expect("tempdir");
        let project = tmp.path().join("project");
        std::fs::create_dir_all(&project).unwrap();
        let project = std::fs::canonicalize(&project).unwrap();
        let inst = Instance { tmp, project };
        if let Some(p) = policy {
            inst.write_policy(p);
        }
        inst
    }

    pub fn root(&self) -> &Path {
        self.tmp.path()
    }

    pub fn write_policy(&self, p: &str) {
        std::fs::create_dir_all(self.root().join("config")).unwrap();
        std::fs::write(
            self.root().join("config/policy.toml"),
            p.replace("{ROOT}", &self.project.display().to_string()),
        )
        .unwrap();
    }

    pub fn db(&self) -> PathBuf {
        self.root().join("data/gatehouse.db")
    }

    pub fn start(&self, extra: &[&str]) -> Broker {
        Broker::start(self.root(), extra)
    }

    /// The broker as started on `host` (under its refusal wrapper), once its exec-helper has
    /// locked down in `host`'s tier.
    pub fn start_on(&self, host: gatehouse_tests::Host, extra: &[&str]) -> Broker {
        Broker::start_on(self.root(), extra, host)
    }

    /// `gatehouse --data-dir ROOT ARGS...`.
    pub fn cli(&self, args: &[&str]) -> std::process::Output {
        Command::new(bin("gatehouse"))
            .arg("--data-dir")
            .arg(self.root())
            .args(args)
            .output()
            .expect("run gatehouse")
    }

    pub fn file(&self, name: &str) -> PathBuf {
        self.project.join(name)
    }
}

/// A policy: the project granted fully, reads allowed, effectful tools as given.
pub fn policy_with(tools: &str, extra: &str) -> String {
    format!(
        "revision = 0\n[tools]\nread_file = \"allow\"\nlist_dir = \"allow\"\n{tools}\n[approvals]\nexpire_after_secs = 60\n\
         [[grant]]\nroot = \"{{ROOT}}\"\ncapabilities = [\"read\", \"write\", \"edit\", \"delete\"]\n{extra}"
    )
}

/// Invalidates the key this instance's audit log put in the kernel keyring, so that test runs do
/// not fill the user's key quota (200 keys by default for an unprivileged user).
/// The instance's audit key is forgotten with it: keys outlive processes, and an unprivileged
/// user's keyring quota (20,000 bytes: about 110 audit keys) would be full after a few runs.
impl Drop for Instance {
    fn drop(&mut self) {
        gatehouse_tests::forget_audit_key(self.root());
    }
}

pub struct Broker {
    pub child: Child,
    pub root: PathBuf,
}

impl Broker {
    pub fn start(root: &Path, extra: &[&str]) -> Broker {
        Broker::spawn(root, extra, gatehouse_tests::Host::Namespaces)
    }

    /// Started on `host` (under its refusal wrapper), once its exec-helper has locked down in
    /// `host`'s tier.
    pub fn start_on(root: &Path, extra: &[&str], host: gatehouse_tests::Host) -> Broker {
        let b = Broker::spawn(root, extra, host);
        if let Err(e) = gatehouse_tests::check_exec_tier(&b.ui_socket(), host) {
            panic!("{e}; log:\n{}", b.log());
        }
        b
    }

    fn spawn(root: &Path, extra: &[&str], host: gatehouse_tests::Host) -> Broker {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(root.join("broker-test.log"))
            .unwrap();
        let child = host
            .command(&bin("gatehouse"))
            .arg("--data-dir")
            .arg(root)
            .arg("broker")
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn()
            .expect("start broker");
        let mut b = Broker {
            child,
            root: root.to_path_buf(),
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        // Both sockets: after a kill, the old socket files stay until the new broker replaces
        // them, one after the other.
        while Conn::connect(&b.ui_socket()).is_err() || Conn::connect(&b.gateway_socket()).is_err()
        {
            if let Ok(Some(st)) = b.child.try_wait() {
                panic!("the broker exited ({st:?}); log:\n{}", b.log());
            }
            assert!(
                Instant::now() < deadline,
                "broker did not open its socket; log:\n{}",
                b.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        b
    }

    pub fn ui_socket(&self) -> PathBuf {
        self.root.join("run/ui.sock")
    }

    pub fn gateway_socket(&self) -> PathBuf {
        self.root.join("run/gateway.sock")
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.root.join("broker-test.log")).unwrap_or_default()
    }

    pub fn ui(&self) -> Ui {
        let c = Conn::connect(&self.ui_socket()).expect("connect ui");
        c.set_timeout(Some(Duration::from_secs(60)));
        Ui(c)
    }

    pub fn gateway(&self) -> Gateway {
        let c = Conn::connect(&self.gateway_socket()).expect("connect gateway");
        c.set_timeout(Some(Duration::from_secs(60)));
        Gateway(c)
    }

    /// Waits for the broker to exit on its own (a test crash point).
    pub fn wait_exit(&mut self) -> ExitStatus {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                return st;
            }
            assert!(
                Instant::now() < deadline,
                "the broker did not exit; log:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    pub fn stop(&mut self) -> ExitStatus {
        if let Ok(None) = self.child.try_wait() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(self.child.id() as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
        self.child.wait().unwrap()
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        self.stop();
    }
}

pub struct Gateway(pub Conn);

impl Gateway {
    pub fn open_session(&mut self, resume: Option<ResumeToken>) -> SessionInfo {
        match self.0.request(Body::ToolCall(ToolCall::OpenSession {
            resume,
            profile: None,
        })) {
            Body::ToolReply(ToolReply::Session(s)) => s,
            other => panic!("open session: {other:?}"),
        }
    }

    /// Opens a fresh session of the named profile.
    pub fn open_session_in(&mut self, profile: &str) -> SessionInfo {
        let profile = ipc_schema::tool::ProfileName::parse(profile).expect("a profile name");
        match self.0.request(Body::ToolCall(ToolCall::OpenSession {
            resume: None,
            profile: Some(profile),
        })) {
            Body::ToolReply(ToolReply::Session(s)) => s,
            other => panic!("open session: {other:?}"),
        }
    }

    pub fn send(&mut self, call: ToolCall) -> u64 {
        self.0.send(Body::ToolCall(call))
    }

    /// The next frame for request `id` (None: the connection closed).
    pub fn next_for(&mut self, id: u64) -> Option<ToolReply> {
        loop {
            let env: Envelope = self.0.recv()?;
            if env.id != id {
                continue;
            }
            return match env.body {
                Body::ToolReply(r) => Some(r),
                other => panic!("request {id}: unexpected {other:?}"),
            };
        }
    }

    /// The final reply to request `id`, skipping progress.
    pub fn final_for(&mut self, id: u64) -> Option<ToolReply> {
        loop {
            match self.next_for(id)? {
                ToolReply::AwaitingApproval(_) => continue,
                r => return Some(r),
            }
        }
    }

    pub fn call(&mut self, call: ToolCall) -> ToolReply {
        let id = self.send(call);
        self.final_for(id)
            .expect("the broker closed the connection before the final reply")
    }
}

pub struct Ui(pub Conn);

impl Ui {
    pub fn request(&mut self, r: UiRequest) -> Body {
        self.0.request(Body::Ui(r))
    }

    pub fn pending(&mut self) -> Vec<Proposal> {
        match self.request(UiRequest::ListPending) {
            Body::UiReply(UiReply::Pending(p)) => p,
            other => panic!("{other:?}"),
        }
    }

    /// Waits until `n` proposals are pending.
    pub fn wait_pending(&mut self, n: usize) -> Vec<Proposal> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let p = self.pending();
            if p.len() >= n {
                return p;
            }
            assert!(
                Instant::now() < deadline,
                "{} proposals pending, waited for {n}",
                p.len()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn decide(&mut self, p: &Proposal, choice: Choice) -> Body {
        self.request(UiRequest::Decide(Decision {
            proposal: p.id,
            digest: p.digest,
            choice,
        }))
    }
}

pub fn abs(p: &Path) -> FsPath {
    FsPath::Absolute(p.as_os_str().as_encoded_bytes().to_vec())
}

pub fn write_call(p: &Path, content: &str) -> ToolCall {
    ToolCall::WriteFile(WriteFile {
        path: abs(p),
        content: content.as_bytes().to_vec(),
        create: CreateMode::Either,
        create_parents: false,
    })
}

pub fn read_call(p: &Path) -> ToolCall {
    ToolCall::ReadFile(ReadFile {
        path: abs(p),
        offset: 0,
        length: 0,
    })
}

/// Audit rows as JSON lines (`gatehouse audit tail --json`).
pub fn audit_rows(inst: &Instance) -> Vec<serde_json::Value> {
    audit_rows_in(inst.root())
}

/// The audit rows of the instance at `data` (its `--data-dir`).
pub fn audit_rows_in(data: &Path) -> Vec<serde_json::Value> {
    let out = Command::new(bin("gatehouse"))
        .arg("--data-dir")
        .arg(data)
        .args(["--json", "audit", "tail", "-n", "100000"])
        .output()
        .expect("run gatehouse");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("json line"))
        .collect()
}

/// `verify-audit --json`.
pub fn verify(inst: &Instance) -> (std::process::ExitStatus, serde_json::Value) {
    let out = inst.cli(&["--json", "verify-audit"]);
    let v = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status, v)
}

pub fn choice_allow() -> Choice {
    Choice::AllowOnce
}
