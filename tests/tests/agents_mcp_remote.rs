// Drives the Linux binaries (ipc_schema::platform::Missing elsewhere).
#![cfg(target_os = "linux")]
//! A real agent CLI inside `gatehouse run` calling a third-party MCP server's tools through
//! gatehouse: Claude Code (Anthropic Messages) and Codex (OpenAI Responses), each driven by the
//! scripted model endpoint (`tests/agents/model_server.py`), reach the remote test server
//! (`tests/mcp_servers/remote_server.py`, FastMCP over TLS) only as gatehouse's `remote__TOOL`
//! tools: the broker's net-helper carries each call, the secrets-helper adds the credential, the
//! policy rules each tool (allowed, asked, denied), and the audit log has every call.
//!
//! One loopback address serves the model and the remote server (the net-helper takes one test
//! "public" address); one DNS server names the provider hosts and `tls.test`; one CA signs both
//! certificates (the agent trusts it for its provider, the net-helper for the remote server).
//! The remote server needs no state directory, so this runs under a root broker too: as root
//! and as the test user alike.
//!
//! Build first: `cargo build --workspace --all-features`.

#![forbid(unsafe_code)]

mod agents_support;
mod mcp_support;
#[path = "../../net-helper/tests/common/mod.rs"]
mod net;
mod remote_support;

use agents_support::{finish, text, Certs, E2e, Run, MODEL_ADDR, NPM};
use ipc_schema::ui::Choice;
use remote_support::{store_secret, Remote, SECRET};
use serde_json::{json, Value};
use std::path::Path;
use std::process::Output;

/// What the remote server's tools are under: echo allowed, send asked, whoami denied (it
/// would hand the agent the credential the server saw, scrubbed or not).
fn policy(port: u16) -> String {
    format!(
        r#"
[[grant]]
root = "{{ROOT}}"
capabilities = ["read"]

[[mcp_server]]
name = "remote"
url = "https://tls.test:{port}/mcp"
credential = "mcp-token"
read_only = ["echo", "sent_count", "whoami"]

[[rule]]
name = "reads"
tools = ["remote__echo", "remote__sent_count"]
action = "allow"

[[rule]]
name = "sends"
tools = ["remote__send"]
action = "ask"

[[rule]]
name = "no whoami"
tools = ["remote__whoami"]
action = "deny"
"#
    )
}

const ECHOED: &str = "hello from the far side of gatehouse";

/// Echo (allowed), a send the human approves, a send the human denies, the server's count.
fn script() -> Value {
    json!([
        {"tool": "remote__echo", "args": {"text": ECHOED}},
        {"tool": "remote__send", "args": {"to": "yes@example.com", "body": "approved"}},
        {"tool": "remote__send", "args": {"to": "no@example.com", "body": "denied"}},
        {"tool": "remote__sent_count", "args": {}},
        {"text": "Done: echoed, one sent, one refused."}
    ])
}

/// The setting: the remote server on the model's address with a certificate from the run's CA,
/// its credential stored for tls.test, its tools approved (they start held) before the agent
/// starts.
struct World {
    e: E2e,
    remote: Remote,
    _remote_dir: tempfile::TempDir,
}

impl World {
    fn new() -> World {
        let certs = Certs::new();
        let remote_dir = tempfile::tempdir().unwrap();
        let remote = Remote::start(
            remote_dir.path(),
            MODEL_ADDR.parse().unwrap(),
            &certs.ca,
            &certs.ca_key,
        );
        let ca = certs.path("ca.pem").display().to_string();
        let e = E2e::with(
            certs,
            Some(&policy(remote.port)),
            &["tls.test"],
            &[
                "--test-net-arg=--test-extra-root".to_string(),
                format!("--test-net-arg={ca}"),
            ],
            |_| script(),
        );
        store_secret(&e.i.data, "mcp-token", "tls.test", SECRET);
        let out = e.b.cli(&["mcp-server", "tools", "remote", "--approve-all"]);
        let shown = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "{shown}");
        assert!(
            shown.contains("4 tool definition(s) of remote approved"),
            "{shown}"
        );
        World {
            e,
            remote,
            _remote_dir: remote_dir,
        }
    }

    /// Answers the two sends as the human would: the first approved, the second denied.
    fn decide_sends(&self, run: &mut Run) {
        self.e.decide_next("remote__send", Choice::AllowOnce, run);
        self.e.decide_next("remote__send", Choice::Deny, run);
    }
}

impl Drop for World {
    fn drop(&mut self) {
        let _ = self.e.b.cli(&["secret", "delete", "mcp-token"]);
    }
}

/// The tool results the model got in its last request, in the script's order.
fn last_results(e: &E2e) -> Vec<Value> {
    let reqs = e.model.requests();
    let last = reqs
        .iter()
        .rev()
        .find(|r| r["tool_results"].as_array().is_some_and(|a| !a.is_empty()))
        .unwrap_or_else(|| panic!("no tool result reached the model: {reqs:#?}"));
    last["tool_results"].as_array().unwrap().clone()
}

fn check(w: &World, out: &Output) {
    let e = &w.e;
    let (stdout, stderr) = text(out);
    assert_eq!(
        out.status.code(),
        Some(0),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(
        stdout.contains("Done: echoed, one sent, one refused."),
        "stdout:\n{stdout}\nstderr:\n{stderr}\nmodel saw:\n{:#?}",
        e.model.requests()
    );

    // What the agent offered the model: the allowed and the asked tools, never the denied one
    // (which the server lists and the human approved with the others: only the rule drops it).
    let reqs = e.model.requests();
    let offering: Vec<&Value> = reqs
        .iter()
        .filter(|r| r["tools"].as_array().is_some_and(|t| !t.is_empty()))
        .collect();
    assert!(!offering.is_empty(), "{reqs:#?}");
    for r in &offering {
        let tools: Vec<&str> = r["tools"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_str)
            .collect();
        for t in ["remote__echo", "remote__send", "remote__sent_count"] {
            assert!(
                tools.iter().any(|n| n.ends_with(&format!("__{t}"))),
                "{t} not offered: {tools:?}"
            );
        }
        assert!(
            !tools.iter().any(|n| n.contains("whoami")),
            "the denied tool was offered: {tools:?}"
        );
    }

    // What came back: the echo as outside text from the server's tool, the approved send
    // done, the denied one refused with the human's choice, and one send counted.
    let results = last_results(e);
    assert_eq!(results.len(), 4, "{results:#?}");
    let result = |n: usize| results[n]["text"].as_str().unwrap_or_default().to_string();
    let echo = result(0);
    assert!(echo.contains("source=\"mcp:remote__echo\""), "{echo}");
    assert!(echo.contains(ECHOED), "{echo}");
    assert!(echo.contains("<external-"), "{echo}");
    let sent = result(1);
    assert!(sent.contains("sent to yes@example.com"), "{sent}");
    let refused = result(2);
    assert!(
        refused.contains("the human chose deny for proposal"),
        "{refused}"
    );
    assert!(!refused.contains("sent to no@example.com"), "{refused}");
    let count = result(3);
    assert!(count.contains(">\n1\n</external-"), "{count}");

    // Every request the remote server got came by tls.test with the credential.
    let seen = w.remote.seen();
    assert!(
        seen.iter().filter(|r| r["method"] == "POST").count() >= 5,
        "{seen:?}"
    );
    for r in &seen {
        assert_eq!(r["host"], format!("tls.test:{}", w.remote.port), "{r}");
        assert_eq!(r["auth"], format!("Bearer {SECRET}"), "{r}");
    }

    // The audit log has the calls under their offered names: the reads done by their rule, the
    // sends asked twice, one carried out once and one rejected; the denied tool never called.
    // Argument values, like the credential, are in no row.
    let rows = e.audit();
    let count = |tool: &str, kind: &str, outcome: &str| {
        rows.iter()
            .filter(|r| {
                r.tool.as_deref() == Some(tool) && r.kind.as_str() == kind && r.outcome == outcome
            })
            .count()
    };
    for (tool, name) in [
        ("remote__echo", "echo"),
        ("remote__sent_count", "sent_count"),
    ] {
        assert_eq!(count(tool, "read", "done"), 1, "{tool}: {rows:#?}");
        let row = rows
            .iter()
            .find(|r| r.tool.as_deref() == Some(tool) && r.kind.as_str() == "read")
            .unwrap();
        assert!(row.detail.contains("rule \"reads\""), "{row:?}");
        assert!(
            row.detail
                .contains(&format!("\"server\":\"remote\",\"tool\":\"{name}\"")),
            "{row:?}"
        );
    }
    assert_eq!(count("remote__send", "proposal", "asked"), 2, "{rows:#?}");
    assert_eq!(count("remote__send", "execution", "done"), 1, "{rows:#?}");
    assert_eq!(
        count("remote__send", "execution", "rejected"),
        1,
        "{rows:#?}"
    );
    for choice in ["allow once", "deny"] {
        assert!(
            rows.iter()
                .any(|r| r.kind.as_str() == "decision" && r.outcome == choice),
            "{choice}: {rows:#?}"
        );
    }
    // whoami: pinned with the others, never called.
    let whoami: Vec<_> = rows
        .iter()
        .filter(|r| r.tool.as_deref() == Some("remote__whoami"))
        .map(|r| (r.kind.as_str(), r.outcome.as_str()))
        .collect();
    assert_eq!(whoami, [("policy", "pinned")], "{rows:#?}");
    let all = format!("{rows:?}");
    assert!(!all.contains(ECHOED), "{all}");
    assert!(!all.contains("yes@example.com"), "{all}");
    assert!(!all.contains(SECRET), "{all}");
    assert!(!e.b.log().contains(SECRET));
}

#[test]
fn claude_code_calls_a_remote_servers_tools_through_gatehouse_run() {
    let claude = Path::new(NPM).join("claude");
    assert!(
        claude.exists(),
        "{} missing: run scripts/test-deps.sh",
        claude.display()
    );
    let w = World::new();
    let base = format!("https://api.anthropic.com:{}", w.e.model.port);
    let nec = format!("NODE_EXTRA_CA_CERTS={}", w.e.certs.path("ca.pem").display());
    let mut run = w.e.run(
        &["--env", &nec],
        &[
            claude.to_str().unwrap(),
            "-p",
            "Echo a greeting through the remote server, then send two messages.",
        ],
        &[
            ("ANTHROPIC_BASE_URL", base),
            ("ANTHROPIC_API_KEY", "sk-ant-test-not-a-key".into()),
        ],
    );
    w.decide_sends(&mut run);
    let out = finish(run);
    check(&w, &out);
    // Claude Code marks the refused call as an error, and only that one.
    let flags: Vec<Value> = last_results(&w.e)
        .iter()
        .map(|r| r["is_error"].clone())
        .collect();
    assert_eq!(
        flags,
        [false, false, true, false].map(Value::from),
        "{flags:?}"
    );
}

#[test]
fn codex_calls_a_remote_servers_tools_through_gatehouse_run() {
    let codex = Path::new(NPM).join("codex");
    assert!(
        codex.exists(),
        "{} missing: run scripts/test-deps.sh",
        codex.display()
    );
    let w = World::new();
    let base = format!("https://api.openai.com:{}/v1", w.e.model.port);
    let ca = w.e.certs.path("ca.pem").display().to_string();
    let (ssl, codex_ca) = (
        format!("SSL_CERT_FILE={ca}"),
        format!("CODEX_CA_CERTIFICATE={ca}"),
    );
    let mut run = w.e.run(
        &["--env", &ssl, "--env", &codex_ca],
        &[
            codex.to_str().unwrap(),
            // The scripted endpoint as a provider of its own, as in agents_e2e.rs.
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
            "Echo a greeting through the remote server, then send two messages.",
        ],
        &[("OPENAI_API_KEY", "sk-test-not-a-key".into())],
    );
    w.decide_sends(&mut run);
    let out = finish(run);
    check(&w, &out);
}
