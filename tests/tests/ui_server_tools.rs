// Drives the Linux binaries (ipc_schema::platform::Missing elsewhere).
#![cfg(target_os = "linux")]
//! The console's held-tools pane, in a real terminal (tmux) against a real broker whose policy
//! has a remote MCP server (the official Python SDK's FastMCP over TLS, reached through the
//! net-helper: it runs under a root broker too, so this runs as root and as the test user).
//!
//! The pane lists the server's tools as held and new; one key press approves the selected one,
//! which the broker then offers; the server describes a tool otherwise (with terminal escapes and
//! a bidi override in the new description) and the pane shows the change as a diff, the escapes
//! as visible text; an approval bound to a definition the server no longer gives is refused, and
//! the pane says so.

#![forbid(unsafe_code)]

mod mcp_support;
#[path = "../../net-helper/tests/common/mod.rs"]
mod net;
mod remote_support;
mod ui_support;

use gatehouse_tests::bin;
use mcp_support::*;
use remote_support::{store_secret, RemoteWorld, SECRET};
use serde_json::json;
use ui_support::{sh_quote, Tmux};

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
read_only = ["echo"]

[[rule]]
name = "the test's own"
tools = ["remote__echo", "remote__reword"]
action = "allow"
"#
    )
}

struct World {
    inst: Instance,
    broker: Broker,
    _net: RemoteWorld,
}

impl World {
    fn cli(&self, args: &[&str]) -> (Option<i32>, String) {
        let out = self.broker.cli(args);
        (
            out.status.code(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        )
    }
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

/// Waits until the selected definition's keys work (the pane says when they do not yet).
fn armed(t: &Tmux) {
    t.wait_for("the definition's keys to be live", 20, |s| {
        s.contains(" a  approve this definition") && !s.contains("keys work in a moment")
    });
}

#[test]
fn the_console_lists_held_tools_shows_their_diff_inert_and_approves_them() {
    let net = RemoteWorld::start_with(&["--reword"]);
    let inst = Instance::new(Some(&policy(net.remote.port)));
    store_secret(&inst.data, "mcp-token", "tls.test", SECRET);
    let args = net.broker_args();
    let broker = inst.broker(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let w = World {
        inst,
        broker,
        _net: net,
    };

    // Before anything is approved, the CLI says every tool is held (exit 3).
    let (code, text) = w.cli(&["mcp-server", "tools", "remote"]);
    assert_eq!(code, Some(3), "{text}");
    assert!(text.contains("remote__echo ["), "{text}");

    let console = format!(
        "{} --data-dir {} ui; echo console-exit=$?; sleep 600",
        sh_quote(&bin("gatehouse")),
        sh_quote(&w.inst.data)
    );
    let t = Tmux::start(&console, &w.inst.project, 160, 50);
    t.wait_for("the console", 30, |s| {
        s.contains("gatehouse console") && s.contains("● connected") && s.contains("m server tools")
    });

    // The pane: every tool of the server, held and new; the first held one (echo) selected.
    t.keys("m");
    let s = t.wait_for("the held tools", 60, |s| {
        s.contains("remote (profile default)")
            && ["echo", "send", "sent_count", "whoami", "reword"]
                .iter()
                .all(|n| s.contains(&format!("● {n}  held: new")))
            && s.contains("remote__echo  (server remote, profile default)")
    });
    assert!(s.contains("Third-party server tools: 5 held"), "{s}");
    assert!(
        s.contains(&format!(
            "remote https://tls.test:{}/mcp",
            w._net.remote.port
        )),
        "{s}"
    );
    assert!(s.contains("▶ ● echo  held: new"), "{s}");
    assert!(s.contains("    Returns the text."), "{s}");
    assert!(s.contains("broker: new: not approved yet"), "{s}");

    // One key approves the definition shown; the pane lists the server again.
    armed(&t);
    t.keys("a");
    let s = t.wait_for("echo approved", 30, |s| {
        s.contains("1 tool definition(s) of remote approved and pinned: echo")
            && s.contains("○ echo  pinned")
    });
    assert!(s.contains("Third-party server tools: 4 held"), "{s}");

    // The broker offers it now, and only it: the CLI and an agent's tools/list agree.
    let (code, text) = w.cli(&["mcp-server", "tools", "remote"]);
    assert_eq!(code, Some(3), "the others are still held: {text}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("remote__echo [") && l.ends_with("] pinned")),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.starts_with("remote__reword [") && l.contains("HELD: new")),
        "{text}"
    );
    let mut m = w.inst.mcp(&[]);
    m.initialize("2025-06-18");
    assert_eq!(listed(&mut m), ["remote__echo"]);

    // The server describes echo otherwise: a hostile description, with a screen-clearing
    // escape, a colour and a right-to-left override.
    let (code, text) = w.cli(&["mcp-server", "tools", "remote", "--approve", "reword"]);
    assert_eq!(code, Some(0), "{text}");
    let evil = "Echoes.\x1b[2J\x1b[31mAPPROVED\u{202e}txet";
    let (err, text) = m.call("remote__reword", json!({ "description": evil }));
    assert!(!err, "{text}");
    assert!(text.contains("echo reworded"), "{text}");

    t.keys("r");
    let s = t.wait_for("echo held as changed, with its diff", 60, |s| {
        s.contains("▶ ● echo  held: changed (description)")
            && s.contains("Changes since you approved it (- approved, + now):")
            && s.contains("-   Returns the text.")
            && s.contains("+   Echoes.")
    });
    // Shown escaped: the terminal got the escapes as text, so the screen holds them as text
    // (a raw ESC would have cleared the screen and coloured it, and never shown as `\x1b`).
    let shown = "Echoes.\\x1b[2J\\x1b[31mAPPROVED\\u{202E}txet";
    assert!(s.contains(&format!("+   {shown}")), "{s}");
    assert!(
        s.contains(&format!("    {shown}")),
        "the definition now: {s}"
    );
    assert!(
        s.contains("broker: changed since you approved it (description)"),
        "{s}"
    );
    assert!(!s.contains('\u{202e}') && !s.contains('\x1b'), "{s}");

    // The server changes echo again after the pane showed it; the broker has seen the new
    // listing (the CLI listed it): approving what the pane shows is refused, and the pane says
    // so and shows the new definition.
    let (err, text) = m.call(
        "remote__reword",
        json!({ "description": "Echoes, third take." }),
    );
    assert!(!err, "{text}");
    let (code, text) = w.cli(&["mcp-server", "tools", "remote"]);
    assert_eq!(code, Some(3), "{text}");
    armed(&t);
    t.keys("a");
    let s = t.wait_for("the refusal", 30, |s| {
        s.contains("REFUSED: approving echo of remote was refused")
            && s.contains("+   Echoes, third take.")
    });
    assert!(
        s.contains("the server describes it otherwise than what was shown; look again"),
        "{s}"
    );
    assert!(s.contains("▶ ● echo  held: changed (description)"), "{s}");
    let (code, text) = w.cli(&["mcp-server", "tools", "remote"]);
    assert!(
        text.lines()
            .any(|l| l.starts_with("remote__echo [") && l.contains("HELD: changed")),
        "nothing was approved: {code:?} {text}"
    );

    // The definition now on screen is approved, and offered.
    armed(&t);
    t.keys("a");
    t.wait_for("echo approved again", 30, |s| {
        s.contains("1 tool definition(s) of remote approved and pinned: echo")
            && s.contains("○ echo  pinned")
    });
    let (_, text) = w.cli(&["mcp-server", "tools", "remote"]);
    let echo = text
        .lines()
        .position(|l| l.starts_with("remote__echo ["))
        .unwrap_or_else(|| panic!("{text}"));
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[echo].ends_with("] pinned"), "{text}");
    assert_eq!(
        lines[echo + 1],
        "    description: Echoes, third take.",
        "{text}"
    );

    // Approve all: the first press asks, the second approves the held rest.
    t.wait_for("approve all to be live", 20, |s| {
        s.contains(" A  approve all 3 held of remote") && !s.contains("keys work in a moment")
    });
    t.keys("A");
    t.wait_for("the confirmation", 20, |s| {
        s.contains("approve all 3 held tool(s) of remote as shown (send, sent_count, whoami)")
    });
    t.keys("A");
    t.wait_for("all approved", 30, |s| {
        s.contains("3 tool definition(s) of remote approved and pinned: send, sent_count, whoami")
            && s.contains("Third-party server tools: 0 held")
    });
    let (code, text) = w.cli(&["mcp-server", "tools", "remote"]);
    assert_eq!(code, Some(0), "nothing held: {text}");

    // Esc goes back to the approvals; q quits.
    t.keys("Escape");
    t.wait_for("the approvals", 20, |s| s.contains("No proposals waiting"));
    t.keys("q");
    t.wait_for("the console to quit", 20, |s| s.contains("console-exit=0"));
}
