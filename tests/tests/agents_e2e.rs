// Drives the Linux binaries (ipc_schema::platform::Missing elsewhere).
#![cfg(target_os = "linux")]
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

mod agents_support;
mod mcp_support;
mod ui_support;

use agents_support::{finish, text, E2e, NPM};
use gatehouse_tests::bin;
use mcp_support::{Instance, PATIENCE};
use serde_json::{json, Value};
use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};

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
    // The file exists once the fs-helper wrote it; the ledger records `done` just after. The
    // repeat this scenario is about comes after the first call ended (one still running is
    // refused as such, a different case), so the model is let go only then.
    let deadline = Instant::now() + PATIENCE;
    while !e
        .audit()
        .iter()
        .any(|r| r.kind.as_str() == "execution" && r.outcome == "done")
    {
        assert!(
            Instant::now() < deadline,
            "the approved write was not recorded as done"
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
