// Drives the Linux binaries (ipc_schema::platform::Missing elsewhere).
#![cfg(target_os = "linux")]
//! Session modes from the real console (`gatehouse ui` in tmux): the card names the session's
//! mode; `M`, a mode key and `y` switch the selected card's session, and the card that waited is
//! answered as the new mode would (full-access: the agent's call runs; unattended: it is
//! refused); any other key cancels the switch and changes nothing.

#![forbid(unsafe_code)]

mod ui_support;

use gatehouse_tests::{bin, BrokerUnderTest};
use serde_json::Value;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use ui_support::{sh_quote, Tmux};

const PYTHON: &str = "/opt/gatehouse-test-venv/bin/python";

/// The official MCP client as the agent: one edit_file call (an Ask under the default profile)
/// replacing argv[4] with argv[5]; prints the result as one JSON line.
const AGENT: &str = r#"
import asyncio, json, sys
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

async def main(gatehouse, data_dir, project, old, new):
    params = StdioServerParameters(command=gatehouse, args=["--data-dir", data_dir, "mcp"], cwd=project)
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as s:
            await s.initialize()
            r = await s.call_tool("edit_file", {"path": "notes.txt", "old_text": old, "new_text": new})
            d = r.model_dump(by_alias=True)
            print(json.dumps({"isError": d.get("isError"), "text": "\n".join(c.get("text", "") for c in d["content"])}))

asyncio.run(main(*sys.argv[1:6]))
"#;

fn start_agent(data_dir: &Path, project: &Path, old: &str, new: &str) -> Child {
    assert!(
        Path::new(PYTHON).exists(),
        "{PYTHON} is missing: run scripts/test-deps.sh"
    );
    Command::new(PYTHON)
        .arg("-c")
        .arg(AGENT)
        .arg(bin("gatehouse"))
        .arg(data_dir)
        .arg(project)
        .arg(old)
        .arg(new)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the Python agent")
}

fn reply_of(c: &mut Child, secs: u64) -> Value {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while c.try_wait().unwrap().is_none() {
        if Instant::now() >= deadline {
            let _ = c.kill();
            panic!("the agent did not finish in {secs} s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let (mut out, mut err) = (String::new(), String::new());
    c.stdout.take().unwrap().read_to_string(&mut out).unwrap();
    c.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    serde_json::from_str(out.trim())
        .unwrap_or_else(|e| panic!("agent output {out:?} ({e}); stderr:\n{err}"))
}

fn project() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::Builder::new()
        .prefix("gh-proj-")
        .tempdir()
        .unwrap();
    std::fs::write(dir.path().join("notes.txt"), "hello world\n").unwrap();
    let path = std::fs::canonicalize(dir.path()).unwrap();
    (dir, path)
}

fn notes(project: &Path) -> String {
    std::fs::read_to_string(project.join("notes.txt")).unwrap()
}

/// Waits for a card of `agent`'s call, live (its keys armed), naming mode `ask`.
fn card_waits(t: &Tmux, agent: &mut Child, project: &Path) {
    let target = format!("Target     {}/notes.txt", project.display());
    t.wait_for("the card, its mode and live keys", 60, |s| {
        s.contains("Approval 1 of 1")
            && s.contains(&target)
            && s.contains("Mode       ask")
            && s.contains(" a  allow once")
            && !s.contains("keys work in a moment")
    });
    assert!(
        agent.try_wait().unwrap().is_none(),
        "the call returned before any answer"
    );
}

#[test]
fn the_console_switches_a_waiting_cards_session_to_full_access_and_to_unattended() {
    let (_p, project) = project();
    let b = BrokerUnderTest::start(&["--grant-root", project.to_str().unwrap()]);
    let console = format!(
        "{} --data-dir {} ui; echo console-exit=$?; sleep 600",
        sh_quote(&bin("gatehouse")),
        sh_quote(b.dir.path())
    );
    let t = Tmux::start(&console, &project, 200, 50);
    t.wait_for("the console", 30, |s| {
        s.contains("gatehouse console") && s.contains("No proposals waiting")
    });

    // A switch cancelled: M, then a key that is no mode. Nothing is sent, the card waits.
    let mut agent = start_agent(b.dir.path(), &project, "world", "modes");
    card_waits(&t, &mut agent, &project);
    t.keys("M");
    t.wait_for("the mode prompt", 20, |s| {
        s.contains("(now ask): a ask · f full-access · u unattended")
    });
    t.keys("x");
    t.wait_for("the cancel", 20, |s| s.contains("mode not changed"));
    // The cancelling key decided nothing either: `x` is no card key, and the card still waits.
    assert!(agent.try_wait().unwrap().is_none());
    assert_eq!(notes(&project), "hello world\n");

    // M f y: the session goes full-access and the waiting card runs, without a decision key.
    t.keys("M");
    t.wait_for("the mode prompt", 20, |s| s.contains("(now ask): a ask"));
    t.keys("f");
    t.wait_for("the confirmation", 20, |s| {
        s.contains("from ask to full-access? y switches, any other key cancels")
    });
    assert!(
        agent.try_wait().unwrap().is_none(),
        "switched before the confirmation"
    );
    t.keys("y");
    let r = reply_of(&mut agent, 60);
    assert_eq!(r["isError"], false, "{r}");
    assert_eq!(notes(&project), "hello modes\n");
    t.wait_for("the switch on screen", 20, |s| {
        s.contains("mode ask -> full-access; 1 waiting card(s) answered as full-access mode would")
            && s.contains("No proposals waiting")
    });
    t.wait_for("the session's mode in the sessions pane", 20, |s| {
        s.contains("full-access")
    });

    // A second agent, a session of its own in ask mode: M u y refuses its waiting card.
    let mut agent = start_agent(b.dir.path(), &project, "modes", "never");
    card_waits(&t, &mut agent, &project);
    t.keys("M");
    t.wait_for("the mode prompt", 20, |s| s.contains("(now ask): a ask"));
    t.keys("u");
    t.wait_for("the confirmation", 20, |s| {
        s.contains("from ask to unattended?")
    });
    t.keys("y");
    let r = reply_of(&mut agent, 60);
    assert_eq!(r["isError"], true, "{r}");
    let text = r["text"].as_str().unwrap();
    assert!(
        text.contains("is unattended, and the policy asks before edit_file"),
        "{text}"
    );
    assert!(text.contains("nobody is there to answer"), "{text}");
    assert_eq!(notes(&project), "hello modes\n");
    t.wait_for("the switch on screen", 20, |s| {
        s.contains("mode ask -> unattended; 1 waiting card(s)") && s.contains("unattended")
    });

    // The audit log has each change, made on the ui channel by the console.
    let out = b.cli(&["--json", "audit", "tail", "-n", "500"]);
    let rows: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let changes: Vec<&str> = rows
        .iter()
        .filter(|r| r["outcome"] == "mode changed" && r["actor"] == "ui")
        .map(|r| r["detail"].as_str().unwrap())
        .collect();
    assert_eq!(
        changes,
        [
            "mode ask -> full-access, by the console",
            "mode ask -> unattended, by the console"
        ],
        "{rows:#?}"
    );
    t.keys("q");
    t.wait_for("the console to quit", 20, |s| s.contains("console-exit=0"));
}
