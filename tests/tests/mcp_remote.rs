// Drives the Linux binaries (ipc_schema::platform::Missing elsewhere).
#![cfg(target_os = "linux")]
//! A remote MCP server behind gatehouse: reached over Streamable HTTP only through the
//! net-helper (the same address table, pinned connection and TLS as every fetch), its stored
//! credential attached by the secrets-helper for its own host and no other, its tools pinned and
//! ruled like any server's, its answers scrubbed of the credential and wrapped as outside text.
//!
//! The server is the official Python SDK's FastMCP (server-sent events) over TLS on 127.0.0.2,
//! which the broker's net-helper is told to judge public (test builds only), named `tls.test`
//! and `other.test` by a DNS server of the test's own. It writes every request it gets to a log,
//! which is how these tests see what reached it. Remote servers need no state directory, so a
//! broker running as root runs them too: these tests run as root and as the test user alike.

#![forbid(unsafe_code)]

mod mcp_support;
#[path = "../../net-helper/tests/common/mod.rs"]
mod net;
mod remote_support;

use ipc_schema::secrets::REDACTED;
use ipc_schema::ui::Choice;
use ipc_schema::ui::{Decision, UiReply, UiRequest};
use ipc_schema::Body;
use mcp_support::*;
use remote_support::{store_secret, RemoteWorld, SECRET};
use serde_json::json;
use std::time::{Duration, Instant};

struct World {
    inst: Instance,
    broker: Broker,
    net: RemoteWorld,
}

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

# The same server under another name: the credential is not bound to that host.
[[mcp_server]]
name = "elsewhere"
url = "https://other.test:{port}/mcp"
credential = "mcp-token"

# A loopback address the address table refuses.
[[mcp_server]]
name = "local"
url = "https://127.0.0.1:{port}/mcp"

[[rule]]
name = "reads"
tools = ["remote__echo", "remote__sent_count", "remote__whoami"]
action = "allow"

[[rule]]
name = "sends"
tools = ["remote__send"]
action = "ask"
"#
    )
}

impl World {
    fn new() -> World {
        let net = RemoteWorld::start();
        let inst = Instance::new(Some(&policy(net.remote.port)));
        store_secret(&inst.data, "mcp-token", "tls.test", SECRET);
        let broker = start_broker(&inst, &net, &[]);
        World { inst, broker, net }
    }

    /// Stops this world's broker and starts another with `extra` arguments.
    fn restart(&mut self, extra: &[&str]) {
        let _ = self.broker.cli(&["stop"]);
        let _ = self.broker.child.wait();
        self.broker = start_broker(&self.inst, &self.net, extra);
    }

    fn cli(&self, args: &[&str]) -> (bool, String) {
        let out = self.broker.cli(args);
        (
            out.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        )
    }
}

fn start_broker(inst: &Instance, net: &RemoteWorld, extra: &[&str]) -> Broker {
    let mut args = net.broker_args();
    args.extend(extra.iter().map(|s| s.to_string()));
    inst.broker(&args.iter().map(String::as_str).collect::<Vec<_>>())
}

impl Drop for World {
    fn drop(&mut self) {
        let _ = self.broker.cli(&["secret", "delete", "mcp-token"]);
    }
}

fn listed(m: &mut Mcp) -> Vec<String> {
    let r = m.request("tools/list", json!({}));
    r["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("{r}"))
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .filter(|n| n.contains("__"))
        .collect()
}

fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !f() {
        assert!(Instant::now() < deadline, "waited in vain for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_remote_server_is_reached_through_the_net_helper_with_its_credential_for_its_host_only() {
    let w = World::new();
    let mut m = w.inst.mcp(&[]);
    m.initialize("2025-06-18");

    // New tools start held, whatever the rules say.
    assert!(listed(&mut m).is_empty());
    let (err, text) = m.call("remote__echo", json!({"text": "x"}));
    assert!(err, "{text}");
    assert!(
        text.contains("remote__echo is held: new: not approved yet"),
        "{text}"
    );
    let (ok, shown) = w.cli(&["mcp-server", "tools", "remote", "--approve-all"]);
    assert!(ok, "{shown}");
    assert!(
        shown.contains("4 tool definition(s) of remote approved"),
        "{shown}"
    );
    let names = listed(&mut m);
    for t in [
        "remote__echo",
        "remote__send",
        "remote__sent_count",
        "remote__whoami",
    ] {
        assert!(names.contains(&t.to_string()), "{t}: {names:?}");
    }
    // The servers it could not reach offer nothing.
    assert!(
        !names
            .iter()
            .any(|n| n.starts_with("elsewhere__") || n.starts_with("local__")),
        "{names:?}"
    );

    // An allowed call, wrapped as outside text.
    let (err, text) = m.call("remote__echo", json!({"text": "hello over https"}));
    assert!(!err, "{text}");
    assert!(text.contains("source=\"mcp:remote__echo\""), "{text}");
    assert!(text.contains("hello over https"), "{text}");

    // The server got the credential; what it says of it reaches the agent scrubbed.
    let (err, text) = m.call("remote__whoami", json!({}));
    assert!(!err, "{text}");
    assert!(!text.contains(SECRET), "{text}");
    assert!(text.contains(&format!("Bearer {REDACTED}")), "{text}");

    // An asked send: denied, nothing sent; approved, sent once, a repeat answered by the ledger.
    let (err, text) = call_decided(
        &w.broker,
        &mut m,
        "remote__send",
        json!({"to": "a@example.com", "body": "no"}),
        Choice::Deny,
    );
    assert!(err, "{text}");
    let (_, count) = m.call("remote__sent_count", json!({}));
    assert!(count.contains(">\n0\n</external-"), "{count}");
    let args = json!({"to": "a@example.com", "body": "yes"});
    let (err, text) = call_decided(
        &w.broker,
        &mut m,
        "remote__send",
        args.clone(),
        Choice::AllowOnce,
    );
    assert!(!err, "{text}");
    assert!(text.contains("sent to a@example.com"), "{text}");
    let (err, again) = m.call("remote__send", args);
    assert!(!err, "{again}");
    assert!(again.contains("sent to a@example.com"), "{again}");
    let (_, count) = m.call("remote__sent_count", json!({}));
    assert!(count.contains(">\n1\n</external-"), "{count}");

    // Every request reached tls.test with the credential and, after the handshake, its
    // session; none reached other.test (the credential is bound to tls.test: refused before
    // anything is sent), and none went to the loopback address (refused by the address table).
    let seen = w.net.remote.seen();
    assert!(seen.len() >= 8, "{seen:?}");
    for r in &seen {
        assert_eq!(r["host"], format!("tls.test:{}", w.net.remote.port), "{r}");
        assert_eq!(r["auth"], format!("Bearer {SECRET}"), "{r}");
    }
    // One handshake without a session id (the agent's connection, which the console's listing
    // for the approval used too: no second connection while one runs); every other request
    // carries the session its handshake got.
    assert_eq!(
        seen.iter().filter(|r| r["session"].is_null()).count(),
        1,
        "{seen:?}"
    );
    assert!(
        seen.iter().any(|r| r["version"] == "2025-11-25"),
        "{seen:?}"
    );
    let (ok, text) = w.cli(&["mcp-server", "tools", "elsewhere"]);
    assert!(!ok, "{text}");
    assert!(
        text.contains("credential mcp-token was not added for other.test"),
        "{text}"
    );
    let (ok, text) = w.cli(&["mcp-server", "tools", "local"]);
    assert!(!ok, "{text}");
    assert!(text.contains("127.0.0.1 is loopback"), "{text}");
    assert!(w
        .net
        .remote
        .seen()
        .iter()
        .all(|r| r["host"] == format!("tls.test:{}", w.net.remote.port)));

    // doctor names how it is reached; the audit log has its start and no credential.
    let (_, doctor) = w.cli(&["doctor"]);
    assert!(
        doctor.contains(&format!(
            "mcp server remote (profile default): remote https://tls.test:{}/mcp through the net-helper, credential mcp-token; 4 tool(s) pinned; 0 held in its last listing",
            w.net.remote.port
        )),
        "{doctor}"
    );
    let audit = w.broker.audit();
    assert!(audit
        .iter()
        .any(|r| r.tool.as_deref() == Some("mcp_server remote") && r.outcome == "started"));
    assert!(!format!("{audit:?}").contains(SECRET));
    assert!(!w.broker.log().contains(SECRET));

    // The agent leaves: its session with the server is ended with a DELETE.
    m.close();
    assert!(m.wait().success());
    wait_until("the DELETE that ends the session", || {
        w.net.remote.seen().iter().any(|r| r["method"] == "DELETE")
    });
}

#[test]
fn a_remote_server_that_refuses_the_credential_ends_its_connection_with_the_status() {
    let w = World::new();
    // The stored value is not what the server wants: it answers 401.
    store_secret(&w.inst.data, "mcp-token", "tls.test", "wrong-token");
    let (ok, text) = w.cli(&["mcp-server", "tools", "remote"]);
    assert!(!ok, "{text}");
    assert!(text.contains("the server answered HTTP 401"), "{text}");
    // It got the value stored now, and nothing was retried past the refusal.
    let seen = w.net.remote.seen();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0]["auth"], "Bearer wrong-token");
}

/// The kill matrix, for a remote server's tool: the broker is SIGKILLed after the call is
/// `executing` in the ledger (before the server has it) and after the server answered. Either
/// way the call is `uncertain` at the next start and never carried out again; the server (which
/// outlives the broker) says whether it ran: not at all, or once.
#[test]
fn a_broker_killed_around_a_remote_call_never_runs_it_twice() {
    for (step, sent) in [("after-executing", "0"), ("after-answer", "1")] {
        let mut w = World::new();
        let (ok, text) = w.cli(&["mcp-server", "tools", "remote", "--approve-all"]);
        assert!(ok, "{text}");
        w.restart(&["--test-crash-at", step]);
        let mut m = w.inst.mcp(&[]);
        m.initialize("2025-06-18");
        assert!(listed(&mut m).contains(&"remote__send".to_string()));
        let id = m.fresh_id();
        m.send(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                       "params": {"name": "remote__send", "arguments": {"to": "me@example.com", "body": "once"}}}));
        let p = w.broker.pending(1).remove(0);
        let _ = w.broker.ui().request(Body::Ui(UiRequest::Decide(Decision {
            proposal: p.id,
            digest: p.digest,
            choice: Choice::AllowOnce,
        })));
        let (err, text) = loop {
            let v = m.recv();
            if v.get("id") == Some(&json!(id)) {
                break tool_text(&v);
            }
        };
        assert!(err, "{step}: {text}");
        assert!(text.contains("broker"), "{step}: {text}");
        drop(m);
        let _ = w.broker.child.wait();
        w.restart(&[]);
        let uncertain = match w.broker.ui().request(Body::Ui(UiRequest::ListUncertain)) {
            Body::UiReply(UiReply::Uncertain(l)) => l,
            other => panic!("{other:?}"),
        };
        assert_eq!(uncertain.len(), 1, "{step}: {uncertain:?}");
        assert_eq!(uncertain[0].tool.name(), "remote__send");
        let mut m = w.inst.mcp(&[]);
        m.initialize("2025-06-18");
        listed(&mut m);
        let (_, count) = m.call("remote__sent_count", json!({}));
        assert!(
            count.contains(&format!(">\n{sent}\n</external-")),
            "{step}: {count}"
        );
    }
}
