//! The real agent CLIs inside `gatehouse run`: Claude Code (`@anthropic-ai/claude-code`) and
//! Codex (`@openai/codex`), installed from npm by `scripts/test-deps.sh` into
//! `/opt/gatehouse-test-npm`, each running its real tool loop against a scripted model endpoint
//! (`tests/agents/model_server.py`: Anthropic Messages and OpenAI Responses shapes) on loopback.
//!
//! The agent reaches its "provider" exactly as it would the real one: its recipe's host
//! (`api.anthropic.com`, `api.openai.com`) through the run's egress proxy, the name resolved by
//! a DNS server of the test's own to a loopback address that the net-helper's test address policy
//! treats as public, over TLS with a certificate from a CA the test makes (the agent is told to
//! trust it). Nothing here leaves the machine.
//!
//! Build first: `cargo build --workspace --all-features`.

#![forbid(unsafe_code)]

mod mcp_support;
mod ui_support;

use gatehouse_tests::{bin, LoopbackDns};
use ipc_schema::ui::{AuditEntry, Choice, Decision, UiReply, UiRequest};
use ipc_schema::Body;
use mcp_support::{Broker, Instance, PATIENCE};
use serde_json::{json, Value};
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const NPM: &str = "/opt/gatehouse-test-npm/bin";
/// The loopback address the provider hosts resolve to (the net-helper's test "public" one).
const MODEL_ADDR: &str = "127.0.0.1";

/// A CA and a certificate for the provider hosts, as PEM files in a directory every user may
/// read (the agent runs as another uid when the tests run as root).
struct Certs {
    dir: tempfile::TempDir,
}

impl Certs {
    fn new() -> Certs {
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
        let leaf = CertificateParams::new(vec![
            "api.anthropic.com".to_string(),
            "api.openai.com".to_string(),
        ])
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
        Certs { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

/// The scripted model endpoint, and the requests it saw.
struct Model {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl Model {
    fn start(dir: &Path, certs: &Certs, script: &Value) -> Model {
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
    fn requests(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// Every tool result the agent sent back to the model, as text.
    fn tool_results(&self) -> String {
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

fn source_dir() -> PathBuf {
    mcp_support::source_dir()
}

/// One end-to-end setting: an instance (broker, project), the CA, the DNS server, the model.
struct E2e {
    i: Instance,
    b: Broker,
    certs: Certs,
    _dns: LoopbackDns,
    model: Model,
}

impl E2e {
    fn new(script: impl Fn(&Instance) -> Value) -> E2e {
        let i = Instance::new(None);
        std::fs::write(i.file("notes.txt"), "the launch code is tuesday\n").unwrap();
        let certs = Certs::new();
        let dns = LoopbackDns::start(
            &["api.anthropic.com", "api.openai.com"],
            MODEL_ADDR.parse().unwrap(),
        );
        let model = Model::start(i.tmp.path(), &certs, &script(&i));
        // As root the project stays root's: the agent runs as nobody, reads it, and its
        // changes go through gatehouse's tools (the default `--own-tools read`). The broker's
        // net-helper is the run's egress proxy: the test's name server, the model's address
        // taken as public, and the model's port, are the broker's test arguments.
        let b = i.broker(&[
            "--test-net-arg=--nameserver",
            &format!("--test-net-arg={}", dns.addr),
            "--test-net-arg=--test-public-addr",
            &format!("--test-net-arg={MODEL_ADDR}"),
            &format!("--test-proxy-port={}", model.port),
        ]);
        E2e {
            i,
            b,
            certs,
            _dns: dns,
            model,
        }
    }

    /// `gatehouse run RUN_ARGS -- AGENT...` with `env` set for it.
    fn run(&self, run_args: &[&str], agent: &[&str], env: &[(&str, String)]) -> Run {
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

    fn audit(&self) -> Vec<AuditEntry> {
        self.b.audit()
    }

    /// Approves (allow once) the next proposal for `tool`, as the console would.
    fn approve_next(&self, tool: ipc_schema::tool::ToolName, child: &mut Child) {
        let deadline = Instant::now() + PATIENCE * 2;
        loop {
            let pending = match self.b.ui().request(Body::Ui(UiRequest::ListPending)) {
                Body::UiReply(UiReply::Pending(p)) => p,
                other => panic!("{other:?}"),
            };
            if let Some(p) = pending.into_iter().find(|p| p.tool == tool) {
                match self.b.ui().request(Body::Ui(UiRequest::Decide(Decision {
                    proposal: p.id,
                    digest: p.digest,
                    choice: Choice::AllowOnce,
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
struct Run(Option<Child>);

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

/// The agent's login and state stayed in the home gatehouse keeps for it: 0700, the agent's
/// uid's own (as root the agent runs as nobody in a root-owned project, with a home of its own).
fn assert_agent_home(e: &E2e, agent: &str) {
    use std::os::unix::fs::MetadataExt;
    let root = nix::unistd::geteuid().is_root();
    let name = if root {
        format!("{agent}-uid65534")
    } else {
        agent.to_string()
    };
    let m = std::fs::metadata(e.i.data.join("agents").join(&name)).unwrap();
    assert!(m.is_dir());
    assert_eq!(m.mode() & 0o777, 0o700);
    let uid = if root {
        65534
    } else {
        nix::unistd::geteuid().as_raw()
    };
    assert_eq!(m.uid(), uid);
    if root {
        // Not in root's own directory for that agent.
        assert!(!e.i.data.join("agents").join(agent).exists());
    }
}

fn finish(mut run: Run) -> Output {
    run.0
        .take()
        .expect("running")
        .wait_with_output()
        .expect("wait for gatehouse run")
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// The day's work, for either agent: read a file, read a key it must not get, write a file
/// (asked, approved), run a command (asked, approved), answer.
fn working_day(i: &Instance) -> Value {
    json!([
        {"tool": "read_file", "args": {"path": "notes.txt"}},
        {"tool": "read_file", "args": {"path": "/root/.ssh/id_ed25519"}},
        {"tool": "write_file", "args": {"path": i.file("summary.txt").to_str().unwrap(),
                                        "content": "notes read\n"}},
        {"tool": "run_command", "args": {"argv": ["sh", "-c", "echo from-the-sandbox; cat summary.txt"],
                                         "cwd": i.project.to_str().unwrap()}},
        {"text": "All done: notes read, summary written."}
    ])
}

fn check_working_day(e: &E2e, out: &Output) {
    let (stdout, stderr) = text(out);
    assert_eq!(
        out.status.code(),
        Some(0),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(
        stdout.contains("All done"),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    let results = e.model.tool_results();
    // The read reached the model; the key did not; the write and the command ran once each.
    assert!(results.contains("the launch code is tuesday"), "{results}");
    assert!(!results.contains("BEGIN OPENSSH"), "{results}");
    assert!(
        results.contains("protected") || results.contains("not inside any grant"),
        "{results}"
    );
    assert!(results.contains("from-the-sandbox"), "{results}");
    assert!(results.contains("notes read"), "{results}");
    assert_eq!(
        std::fs::read_to_string(e.i.file("summary.txt")).unwrap(),
        "notes read\n"
    );
    // The audit log has the whole day, under the run's sessions.
    let rows = e.audit();
    let has = |kind: &str, outcome: &str| {
        rows.iter()
            .any(|r| r.kind.as_str() == kind && r.outcome == outcome)
    };
    assert!(has("proposal", "asked"), "{rows:#?}");
    assert!(
        rows.iter()
            .filter(|r| r.kind.as_str() == "decision")
            .count()
            >= 2,
        "{rows:#?}"
    );
    assert!(
        rows.iter()
            .any(|r| r.kind.as_str() == "egress" && r.outcome == "tunnelled"),
        "{rows:#?}"
    );
    // The model endpoint was reached through the proxy under the recipe's provider host.
    assert!(
        e.model
            .requests()
            .iter()
            .all(|r| r["host"].as_str().is_some_and(|h| h.starts_with("api."))),
        "{:#?}",
        e.model.requests()
    );
}

#[test]
fn claude_code_works_a_day_inside_gatehouse_run() {
    let claude = Path::new(NPM).join("claude");
    assert!(
        claude.exists(),
        "{} missing: run scripts/test-deps.sh",
        claude.display()
    );
    let e = E2e::new(working_day);
    let base = format!("https://api.anthropic.com:{}", e.model.port);
    let ca = e.certs.path("ca.pem").display().to_string();
    let nec = format!("NODE_EXTRA_CA_CERTS={ca}");
    // The human's console, in a real terminal: the write is approved there with a key press.
    let console = format!(
        "{} --data-dir {} ui; sleep 600",
        ui_support::sh_quote(&bin("gatehouse")),
        ui_support::sh_quote(&e.i.data)
    );
    let t = ui_support::Tmux::start(&console, &e.i.project, 150, 45);
    t.wait_for("the console", 30, |s| s.contains("● connected"));
    let mut child = e.run(
        &["--env", &nec],
        &[
            claude.to_str().unwrap(),
            "-p",
            "Read notes.txt and summarise it.",
        ],
        &[
            ("ANTHROPIC_BASE_URL", base),
            ("ANTHROPIC_API_KEY", "sk-ant-test-not-a-key".into()),
        ],
    );
    let target = format!("Target     {}", e.i.file("summary.txt").display());
    // The whole card: a capture can catch the terminal in the middle of drawing a frame.
    let card = t.wait_for("the write's card", 60, |s| {
        s.contains("Approval 1 of 1") && s.contains(&target) && s.contains("write_file")
    });
    assert!(card.contains("write_file"), "{card}");
    t.wait_for("the card's keys to be live", 10, |s| {
        !s.contains("keys work in a moment")
    });
    t.keys("a");
    // The command is approved on the ui channel, as a second console would.
    e.approve_next(ipc_schema::tool::ToolName::RunCommand, &mut child);
    let out = finish(child);
    check_working_day(&e, &out);
    let (_, stderr) = text(&out);
    assert!(stderr.contains("gatehouse run: claude recipe"), "{stderr}");
    assert!(
        stderr.contains("passing ANTHROPIC_API_KEY to the agent"),
        "{stderr}"
    );
    // Its login and state stayed in its own home, not the user's.
    assert_agent_home(&e, "claude");
}

#[test]
fn codex_works_a_day_inside_gatehouse_run() {
    let codex = Path::new(NPM).join("codex");
    assert!(
        codex.exists(),
        "{} missing: run scripts/test-deps.sh",
        codex.display()
    );
    let e = E2e::new(working_day);
    let base = format!("https://api.openai.com:{}/v1", e.model.port);
    let ca = e.certs.path("ca.pem").display().to_string();
    let (ssl, codex_ca) = (
        format!("SSL_CERT_FILE={ca}"),
        format!("CODEX_CA_CERTIFICATE={ca}"),
    );
    let mut child = e.run(
        &["--env", &ssl, "--env", &codex_ca],
        &[
            codex.to_str().unwrap(),
            // The scripted endpoint as a provider of its own (the built-in one speaks
            // WebSockets to a fixed host).
            "-c",
            "model_provider=\"scripted\"",
            "-c",
            "model_providers.scripted.name=\"scripted\"",
            "-c",
            &format!("model_providers.scripted.base_url=\"{base}\""),
            "-c",
            "model_providers.scripted.wire_api=\"responses\"",
            "-c",
            "model_providers.scripted.env_key=\"OPENAI_API_KEY\"",
            "-c",
            "model=\"test-model\"",
            "exec",
            "--skip-git-repo-check",
            "Read notes.txt and summarise it.",
        ],
        &[("OPENAI_API_KEY", "sk-test-not-a-key".into())],
    );
    e.approve_next(ipc_schema::tool::ToolName::WriteFile, &mut child);
    e.approve_next(ipc_schema::tool::ToolName::RunCommand, &mut child);
    let out = finish(child);
    check_working_day(&e, &out);
    let (_, stderr) = text(&out);
    assert!(stderr.contains("gatehouse run: codex recipe"), "{stderr}");
    assert!(
        stderr.contains("passing OPENAI_API_KEY to the agent"),
        "{stderr}"
    );
    assert_agent_home(&e, "codex");
}

/// An approval that takes longer than gatehouse keeps the client waiting: the agent is told
/// that proposal N waits and to call again; the human approves later; the agent's repeat of the
/// same call returns the decision's result from the ledger, and the write happened once.
#[test]
fn an_approval_slower_than_the_wait_reaches_the_agent_on_its_repeat() {
    let claude = Path::new(NPM).join("claude");
    let flag = tempfile::Builder::new()
        .prefix("gh-e2e-flag-")
        .tempdir()
        .unwrap();
    let approved = flag.path().join("approved");
    let approved_text = approved.display().to_string();
    let e = E2e::new(|i: &Instance| {
        let write = json!({"path": i.file("late.txt").to_str().unwrap(), "content": "late\n"});
        json!([
            {"tool": "write_file", "args": write},
            {"tool": "write_file", "args": write, "wait_for": approved_text},
            {"text": "Written once the human said yes."}
        ])
    });
    let base = format!("https://api.anthropic.com:{}", e.model.port);
    let nec = format!("NODE_EXTRA_CA_CERTS={}", e.certs.path("ca.pem").display());
    let mut child = e.run(
        &["--env", &nec, "--approval-wait", "2"],
        &[claude.to_str().unwrap(), "-p", "Write late.txt."],
        &[
            ("ANTHROPIC_BASE_URL", base),
            ("ANTHROPIC_API_KEY", "sk-ant-test-not-a-key".into()),
        ],
    );
    // The agent hears "waiting, call again" before anyone decides.
    let deadline = Instant::now() + PATIENCE * 2;
    while !e
        .model
        .tool_results()
        .contains("was not decided within 2 s")
    {
        assert!(
            Instant::now() < deadline && child.try_wait().unwrap().is_none(),
            "no 'waiting' answer reached the model: {:#?}",
            e.model.requests()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        !e.i.file("late.txt").exists(),
        "written before the decision"
    );
    e.approve_next(ipc_schema::tool::ToolName::WriteFile, &mut child);
    let deadline = Instant::now() + PATIENCE;
    while !e.i.file("late.txt").exists() {
        assert!(
            Instant::now() < deadline,
            "the approved write did not happen"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::fs::write(&approved, "").unwrap();
    let out = finish(child);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("Written once the human said yes"),
        "{stdout}\n{stderr}"
    );
    assert_eq!(
        std::fs::read_to_string(e.i.file("late.txt")).unwrap(),
        "late\n"
    );
    // The repeat was answered from the ledger, as a success, not carried out again.
    let last = e.model.requests().into_iter().last().unwrap();
    let results = last["tool_results"].as_array().unwrap().clone();
    assert_eq!(results.len(), 2, "{results:#?}");
    assert_eq!(results[1]["is_error"], json!(false), "{results:#?}");
    let rows = e.audit();
    assert!(rows.iter().any(|r| r.outcome == "from_ledger"), "{rows:#?}");
    assert_eq!(
        rows.iter()
            .filter(|r| r.kind.as_str() == "execution" && r.outcome == "done")
            .count(),
        1,
        "{rows:#?}"
    );
}

/// A client that starts gatehouse's server more than once in one run (`claude mcp list`'s
/// health check, then again) gets a session each time, through the generated MCP config alone
/// (here under the generic recipe: a shell that runs Claude Code's own `mcp` commands).
#[test]
fn claude_mcp_list_twice_in_one_run_connects_twice() {
    let claude = Path::new(NPM).join("claude");
    let e = E2e::new(|_: &Instance| json!([]));
    let script = format!(
        r#"c={claude}
entry=$(python3 -c 'import json,os; print(json.dumps(json.load(open(os.environ["GATEHOUSE_MCP_CONFIG"]))["mcpServers"]["gatehouse"]))')
"$c" mcp add-json gatehouse "$entry" >/dev/null
"$c" mcp list
"$c" mcp list"#,
        claude = claude.display()
    );
    let out = finish(e.run(
        &["--env", "DISABLE_AUTOUPDATER=1", "--own-tools", "read"],
        &["/bin/sh", "-c", &script],
        &[],
    ));
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert_eq!(
        stdout.matches("--token-file /tmp/gatehouse-token").count(),
        2,
        "{stdout}\n{stderr}"
    );
    assert_eq!(stdout.matches("Connected").count(), 2, "{stdout}\n{stderr}");
    let deadline = Instant::now() + PATIENCE;
    loop {
        let sessions: std::collections::BTreeSet<String> = e
            .audit()
            .into_iter()
            .filter(|r| r.outcome == "resumed")
            .filter_map(|r| r.session)
            .collect();
        if sessions.len() == 2 {
            break;
        }
        assert!(Instant::now() < deadline, "{:#?}", e.audit());
        std::thread::sleep(Duration::from_millis(20));
    }
}
