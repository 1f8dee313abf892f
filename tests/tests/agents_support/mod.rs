//! Shared by the tests that run a real agent CLI inside `gatehouse run` against the scripted
//! model endpoint (`tests/agents/model_server.py`): the test CA and the provider's certificate,
//! the model server and the requests it saw, one end-to-end setting (instance, broker with the
//! net-helper's test arguments, DNS), the run, and approvals on the ui channel.
//!
//! A test that uses this declares `mod mcp_support` beside it.

#![allow(dead_code)]

use crate::mcp_support::{self, Broker, Instance, PATIENCE};
use gatehouse_tests::{bin, LoopbackDns};
use ipc_schema::ui::{AuditEntry, Choice, Decision, UiReply, UiRequest};
use ipc_schema::Body;
use serde_json::Value;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub const NPM: &str = "/opt/gatehouse-test-npm/bin";
/// The loopback address the provider hosts resolve to (the net-helper's test "public" one).
pub const MODEL_ADDR: &str = "127.0.0.1";
/// The provider hosts the agents' recipes name.
pub const PROVIDER_HOSTS: [&str; 2] = ["api.anthropic.com", "api.openai.com"];

/// A CA and a certificate for the provider hosts, as PEM files in a directory every user may
/// read (the agent runs as another uid when the tests run as root). The CA signs the
/// certificates of other test servers too (`ca`, `ca_key`).
pub struct Certs {
    pub dir: tempfile::TempDir,
    pub ca: rcgen::Certificate,
    pub ca_key: rcgen::KeyPair,
}

impl Certs {
    pub fn new() -> Certs {
        use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::Builder::new()
            .prefix("gh-e2e-ca-")
            .tempdir()
            .unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let ca_key = KeyPair::generate().unwrap();
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "gatehouse e2e test CA");
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let leaf_key = KeyPair::generate().unwrap();
        let leaf = CertificateParams::new(PROVIDER_HOSTS.map(String::from).to_vec())
            .unwrap()
            .signed_by(&leaf_key, &ca, &ca_key)
            .unwrap();
        for (name, pem) in [
            ("ca.pem", ca.pem()),
            ("leaf.pem", leaf.pem()),
            ("leaf.key", leaf_key.serialize_pem()),
        ] {
            let p = dir.path().join(name);
            std::fs::write(&p, pem).unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        }
        Certs { dir, ca, ca_key }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

/// The scripted model endpoint, and the requests it saw.
pub struct Model {
    child: Child,
    pub port: u16,
    log: PathBuf,
}

impl Model {
    pub fn start(dir: &Path, certs: &Certs, script: &Value) -> Model {
        let script_file = dir.join("script.json");
        std::fs::write(&script_file, script.to_string()).unwrap();
        let log = dir.join("model.jsonl");
        let mut child = Command::new("python3")
            .arg(source_dir().join("tests/agents/model_server.py"))
            .arg("--script")
            .arg(&script_file)
            .arg("--host")
            .arg(MODEL_ADDR)
            .arg("--log")
            .arg(&log)
            .arg("--cert")
            .arg(certs.path("leaf.pem"))
            .arg("--key")
            .arg(certs.path("leaf.key"))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut first = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut first)
            .unwrap();
        let port = serde_json::from_str::<Value>(&first).unwrap()["port"]
            .as_u64()
            .unwrap() as u16;
        Model { child, port, log }
    }

    /// Every request logged so far.
    pub fn requests(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// Every tool result the agent sent back to the model, as text.
    pub fn tool_results(&self) -> String {
        self.requests()
            .iter()
            .map(|r| r["tool_results"].to_string())
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl Drop for Model {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn source_dir() -> PathBuf {
    mcp_support::source_dir()
}

/// One end-to-end setting: an instance (broker, project), the CA, the DNS server, the model.
pub struct E2e {
    pub i: Instance,
    pub b: Broker,
    pub certs: Certs,
    pub dns: LoopbackDns,
    pub model: Model,
}

impl E2e {
    /// The built-in default profile, the provider hosts only.
    pub fn new(script: impl Fn(&Instance) -> Value) -> E2e {
        E2e::with(Certs::new(), None, &[], &[], script)
    }

    /// With `policy` (as [`Instance::new`] takes it), `more_names` resolved to [`MODEL_ADDR`]
    /// as well, and `more_broker_args` for the broker.
    pub fn with(
        certs: Certs,
        policy: Option<&str>,
        more_names: &[&str],
        more_broker_args: &[String],
        script: impl Fn(&Instance) -> Value,
    ) -> E2e {
        let i = Instance::new(policy);
        std::fs::write(i.file("notes.txt"), "the launch code is tuesday\n").unwrap();
        let names: Vec<&str> = PROVIDER_HOSTS.iter().chain(more_names).copied().collect();
        let dns = LoopbackDns::start(&names, MODEL_ADDR.parse().unwrap());
        let model = Model::start(i.tmp.path(), &certs, &script(&i));
        // As root the project stays root's: the agent runs as nobody, reads it, and its
        // changes go through gatehouse's tools (the default `--own-tools read`). The broker's
        // net-helper is the run's egress proxy: the test's name server, the model's address
        // taken as public, and the model's port, are the broker's test arguments.
        let mut args = vec![
            "--test-net-arg=--nameserver".to_string(),
            format!("--test-net-arg={}", dns.addr),
            "--test-net-arg=--test-public-addr".to_string(),
            format!("--test-net-arg={MODEL_ADDR}"),
            format!("--test-proxy-port={}", model.port),
        ];
        args.extend_from_slice(more_broker_args);
        let b = i.broker(&args.iter().map(String::as_str).collect::<Vec<_>>());
        E2e {
            i,
            b,
            certs,
            dns,
            model,
        }
    }

    /// `gatehouse run RUN_ARGS -- AGENT...` with `env` set for it.
    pub fn run(&self, run_args: &[&str], agent: &[&str], env: &[(&str, String)]) -> Run {
        let mut c = Command::new(bin("gatehouse"));
        c.arg("--data-dir")
            .arg(&self.i.data)
            .arg("run")
            .arg("--allow-read")
            .arg(self.certs.dir.path())
            .args(run_args)
            .arg("--")
            .args(agent)
            .current_dir(&self.i.project)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in env {
            c.env(k, v);
        }
        Run(Some(c.spawn().expect("start gatehouse run")))
    }

    pub fn audit(&self) -> Vec<AuditEntry> {
        self.b.audit()
    }

    /// Approves (allow once) the next proposal for `tool`, as the console would.
    pub fn approve_next(&self, tool: ipc_schema::tool::ToolName, child: &mut Child) {
        self.decide_next(tool.as_str(), Choice::AllowOnce, child)
    }

    /// Answers the next proposal for the tool the broker names `tool` (`write_file`,
    /// `remote__send`) with `choice`, as the console would.
    pub fn decide_next(&self, tool: &str, choice: Choice, child: &mut Child) {
        let deadline = Instant::now() + PATIENCE * 2;
        loop {
            let pending = match self.b.ui().request(Body::Ui(UiRequest::ListPending)) {
                Body::UiReply(UiReply::Pending(p)) => p,
                other => panic!("{other:?}"),
            };
            if let Some(p) = pending.into_iter().find(|p| p.tool.name() == tool) {
                match self.b.ui().request(Body::Ui(UiRequest::Decide(Decision {
                    proposal: p.id,
                    digest: p.digest,
                    choice,
                }))) {
                    Body::UiReply(UiReply::Decided { .. }) => return,
                    other => panic!("Decide answered {other:?}"),
                }
            }
            if let Ok(Some(st)) = child.try_wait() {
                panic!(
                    "the agent ended ({st:?}) before asking for {tool:?}; model saw:\n{:#?}",
                    self.model.requests()
                );
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let mut err = String::new();
                if let Some(mut e) = child.stderr.take() {
                    let _ = std::io::Read::read_to_string(&mut e, &mut err);
                }
                panic!(
                    "no {tool:?} proposal; the agent's stderr:\n{err}\nmodel saw:\n{:#?}",
                    self.model.requests()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// A running `gatehouse run`, killed if the test fails before it ends (an agent left behind
/// would retry its provider for ever).
pub struct Run(pub Option<Child>);

impl std::ops::Deref for Run {
    type Target = Child;
    fn deref(&self) -> &Child {
        self.0.as_ref().expect("running")
    }
}

impl std::ops::DerefMut for Run {
    fn deref_mut(&mut self) -> &mut Child {
        self.0.as_mut().expect("running")
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

pub fn finish(mut run: Run) -> Output {
    run.0
        .take()
        .expect("running")
        .wait_with_output()
        .expect("wait for gatehouse run")
}

pub fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}
