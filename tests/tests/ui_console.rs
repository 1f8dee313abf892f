// Drives the Linux binaries (ipc_schema::platform::Missing elsewhere).
#![cfg(target_os = "linux")]
//! The real console (`gatehouse ui`, `gatehouse up`) in a real terminal: tmux runs it, the test
//! reads the screen (capture-pane) and presses keys (send-keys). An agent (the official Python
//! MCP client driving `gatehouse mcp`) makes an Ask call; the card shows the right target; one
//! key press approves it; the call completes; the audit log has the decision. The console's
//! lockdown is checked from outside (/proc) and from inside (test-build probes, each beside its
//! positive control).

#![forbid(unsafe_code)]

mod ui_support;

use gatehouse_tests::{bin, children_of, BrokerUnderTest};
use serde_json::Value;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use ui_support::{sh_quote, Tmux};

const PYTHON: &str = "/opt/gatehouse-test-venv/bin/python";

/// The official MCP client as the agent: one edit_file call (an Ask under the default
/// profile); prints the result as one JSON line.
const AGENT: &str = r#"
import asyncio, json, sys
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

async def main(gatehouse, data_dir, project):
    params = StdioServerParameters(command=gatehouse, args=["--data-dir", data_dir, "mcp"], cwd=project)
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as s:
            await s.initialize()
            r = await s.call_tool("edit_file", {"path": "notes.txt", "old_text": "world", "new_text": "gatehouse"})
            d = r.model_dump(by_alias=True)
            print(json.dumps({"isError": d.get("isError"), "text": "\n".join(c.get("text", "") for c in d["content"])}))

asyncio.run(main(*sys.argv[1:4]))
"#;

fn start_agent(data_dir: &Path, project: &Path) -> Child {
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
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the Python agent")
}

fn wait_child(c: &mut Child, secs: u64) -> (String, String) {
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
    (out, err)
}

fn proc_status(pid: u32, field: &str) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| {
            l.strip_prefix(&format!("{field}:"))
                .map(|v| v.trim().to_string())
        })
        .unwrap_or_default()
}

/// The `gatehouse ui` process under the pane's shell.
fn console_pid(t: &Tmux) -> u32 {
    let shell = t.pane_pid();
    let kids = children_of(shell);
    kids.into_iter()
        .find(|p| {
            std::fs::read_to_string(format!("/proc/{p}/cmdline"))
                .map(|c| c.split('\0').any(|a| a == "ui"))
                .unwrap_or(false)
        })
        .expect("the console process")
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

#[test]
fn a_key_press_in_the_console_approves_an_agents_edit() {
    let (_p, project) = project();
    let b = BrokerUnderTest::start(&["--grant-root", project.to_str().unwrap()]);
    let console = format!(
        "{} --data-dir {} ui; echo console-exit=$?; sleep 600",
        sh_quote(&bin("gatehouse")),
        sh_quote(b.dir.path())
    );
    let t = Tmux::start(&console, &project, 150, 45);
    t.wait_for("the console", 30, |s| {
        s.contains("gatehouse console")
            && s.contains("● connected")
            && s.contains("No proposals waiting")
    });

    // Locked down, by the kernel's account, while serving.
    let pid = console_pid(&t);
    assert_eq!(
        proc_status(pid, "Seccomp"),
        "2",
        "the console runs under a seccomp filter"
    );
    assert_eq!(proc_status(pid, "NoNewPrivs"), "1");

    let mut agent = start_agent(b.dir.path(), &project);
    let target = format!("Target     {}/notes.txt", project.display());
    let expected = [
        "edit_file",
        "-hello world",
        "+hello gatehouse",
        " a  allow once",
        " d  deny",
    ];
    // The whole card: a capture can catch the terminal in the middle of drawing a frame.
    let card = t.wait_for("the whole approval card", 60, |s| {
        s.contains("Approval 1 of 1")
            && s.contains(&target)
            && expected.iter().all(|e| s.contains(e))
    });
    for shown in expected {
        assert!(
            card.contains(shown),
            "{shown:?} missing from the card:\n{card}"
        );
    }
    // The call waits for the human: nothing has changed yet.
    assert!(
        agent.try_wait().unwrap().is_none(),
        "the call returned before any decision"
    );
    assert_eq!(
        std::fs::read_to_string(project.join("notes.txt")).unwrap(),
        "hello world\n"
    );

    // Keys work once the card has been on screen a moment; the card says when.
    t.wait_for("the card's keys to be live", 10, |s| {
        !s.contains("keys work in a moment")
    });
    t.keys("a");

    let (out, err) = wait_child(&mut agent, 60);
    let reply: Value = serde_json::from_str(out.trim())
        .unwrap_or_else(|e| panic!("agent output {out:?} ({e}); stderr:\n{err}"));
    assert_eq!(reply["isError"], false, "{reply}");
    let text = reply["text"].as_str().unwrap();
    assert!(
        text.contains("The human approved this call (proposal #1)"),
        "{text}"
    );
    assert_eq!(
        std::fs::read_to_string(project.join("notes.txt")).unwrap(),
        "hello gatehouse\n"
    );

    let s = t.wait_for("the decision on screen", 20, |s| {
        s.contains("proposal #1: allow once") && s.contains("No proposals waiting")
    });
    assert!(s.contains("Decided here:"), "{s}");

    // The audit log has the decision, made on the ui channel, and the edit carried out.
    let out = b.cli(&["--json", "audit", "tail", "-n", "500"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let decision = rows
        .iter()
        .find(|r| r["kind"] == "decision")
        .unwrap_or_else(|| panic!("no decision row in {rows:#?}"));
    assert_eq!(decision["actor"], "ui");
    assert_eq!(decision["outcome"], "allow once");
    assert_eq!(decision["detail"], "proposal #1: allow once");
    let notes = format!("{}/notes.txt", project.display());
    assert!(
        rows.iter().any(|r| r["kind"] == "execution"
            && r["outcome"] == "done"
            && r["target"] == notes.as_str()),
        "no execution row for {notes}: {rows:#?}"
    );
    // The console's live tail shows the decision row too.
    t.wait_for("the decision in the audit tail", 20, |s| {
        s.contains("decision") && s.contains("proposal #1: allow once")
    });

    t.keys("q");
    t.wait_for("the console to quit", 20, |s| s.contains("console-exit=0"));
}

/// Runs the console with `args`; returns the screen once `until` holds.
fn console_with(
    b: &BrokerUnderTest,
    args: &str,
    what: &str,
    until: impl Fn(&str) -> bool,
) -> String {
    let console = format!(
        "{} --data-dir {} ui {args}; echo console-exit=$?; sleep 600",
        sh_quote(&bin("gatehouse")),
        sh_quote(b.dir.path())
    );
    let t = Tmux::start(&console, b.dir.path(), 140, 40);
    t.wait_for(what, 30, until)
}

#[test]
fn the_console_can_open_no_file_and_make_no_socket_or_process_each_beside_its_control() {
    let b = BrokerUnderTest::start(&[]);
    let file = b.dir.path().join("readable.txt");
    std::fs::write(&file, "x").unwrap();
    let sock = b.ui_socket();
    let cases = [
        format!("open:{}", file.display()),
        format!("connect:{}", sock.display()),
        "exec:/bin/true".to_string(),
    ];

    // Positive controls: the same probes succeed without the lockdown (a test build only).
    for probe in &cases {
        let (op, path) = probe.split_once(':').unwrap();
        let want = format!("probe {op} {path}: ok");
        let s = console_with(
            &b,
            &format!("--test-skip-lockdown --test-probe '{probe}'"),
            &want,
            |s| s.contains(&want) || s.contains("console-exit="),
        );
        assert!(s.contains(&want), "control for {probe}:\n{s}");
    }

    // Locked down: opening a file is refused with EACCES (the process goes on)...
    let (op, path) = cases[0].split_once(':').unwrap();
    let want = format!("probe {op} {path}: refused: Permission denied (os error 13)");
    let s = console_with(&b, &format!("--test-probe '{}'", cases[0]), &want, |s| {
        s.contains(&want) || s.contains("console-exit=")
    });
    assert!(s.contains(&want), "{s}");
    assert!(s.contains("● connected"), "the console still serves: {s}");

    // ...and making a socket or a process kills it (SIGSYS: 128 + 31).
    for probe in &cases[1..] {
        let s = console_with(
            &b,
            &format!("--test-probe '{probe}'"),
            "the console to be killed",
            |s| s.contains("console-exit="),
        );
        assert!(s.contains("console-exit=159"), "{probe}:\n{s}");
    }
}

#[test]
fn up_runs_broker_and_console_and_stops_the_broker_it_started() {
    let (_p, project) = project();
    let data = tempfile::Builder::new().prefix("gh-up-").tempdir().unwrap();
    let up = format!(
        "{} --data-dir {} up; echo up-exit=$?; sleep 600",
        sh_quote(&bin("gatehouse")),
        sh_quote(data.path())
    );
    let t = Tmux::start(&up, &project, 140, 40);
    t.wait_for("the console", 30, |s| {
        s.contains("gatehouse console") && s.contains("● connected")
    });
    let lock = data.path().join("run/broker.lock");
    let pid: u32 = std::fs::read_to_string(&lock)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        gatehouse_tests::alive(pid),
        "the broker runs while the console is open"
    );
    // The broker's default grant is the directory `up` was started in.
    let fs_helper = gatehouse_tests::helpers_of(pid)
        .into_iter()
        .find(|p| {
            std::fs::read_to_string(format!("/proc/{p}/cmdline"))
                .unwrap_or_default()
                .contains("fs-helper")
        })
        .expect("an fs-helper");
    let config = gatehouse_tests::fs_helper_config(fs_helper).expect("its --config");
    let project_bytes = project
        .canonicalize()
        .unwrap()
        .into_os_string()
        .into_encoded_bytes();
    assert!(
        config.grants.iter().any(|g| g.root == project_bytes),
        "{config:?}"
    );

    t.keys("q");
    let s = t.wait_for("up to finish", 30, |s| s.contains("up-exit="));
    assert!(s.contains("up-exit=0"), "{s}");
    assert!(s.contains(&format!("broker {pid} stopped")), "{s}");
    assert!(
        !gatehouse_tests::alive(pid),
        "the broker up started is stopped"
    );
    gatehouse_tests::forget_audit_key(data.path());
}

#[test]
fn up_attaches_to_a_running_broker_and_leaves_it_running() {
    let mut b = BrokerUnderTest::start(&[]);
    let up = format!(
        "{} --data-dir {} up; echo up-exit=$?; sleep 600",
        sh_quote(&bin("gatehouse")),
        sh_quote(b.dir.path())
    );
    let t = Tmux::start(&up, b.dir.path(), 140, 40);
    t.wait_for("the console", 30, |s| {
        s.contains("gatehouse console") && s.contains("● connected")
    });
    t.keys("q");
    let s = t.wait_for("up to finish", 30, |s| s.contains("up-exit="));
    assert!(s.contains("up-exit=0"), "{s}");
    assert!(
        s.contains(&format!(
            "a broker already runs for {}/run (pid {})",
            b.dir.path().display(),
            b.child.id()
        )),
        "{s}"
    );
    assert!(
        b.child.try_wait().unwrap().is_none(),
        "the broker up found is left running"
    );
    assert!(b.stop().success());
}

#[test]
fn the_console_needs_a_terminal_and_says_so_before_starting_anything() {
    let data = tempfile::Builder::new().prefix("gh-ui-").tempdir().unwrap();
    let out = Command::new(bin("gatehouse"))
        .arg("--data-dir")
        .arg(data.path())
        .arg("ui")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim(),
        "gatehouse ui: the console needs a terminal: run it in one (stdin and stdout are not a terminal)"
    );
    assert!(
        !data.path().join("run/broker.lock").exists(),
        "no broker was started for a console that cannot run"
    );
}

#[test]
fn the_console_has_no_json_mode_and_says_where_to_look() {
    for cmd in ["ui", "up"] {
        let out = Command::new(bin("gatehouse"))
            .args(["--json", cmd])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{cmd}");
        assert_eq!(
            String::from_utf8_lossy(&out.stderr).trim(),
            format!("gatehouse {cmd}: --json does not apply to the console; for machines use `gatehouse approve --json` (proposals and decisions) and `gatehouse audit tail --json`")
        );
    }
}

#[test]
fn release_builds_lack_the_consoles_test_switches() {
    let release = gatehouse_tests::release_dir().join("gatehouse");
    for switch in ["--test-skip-lockdown", "--test-probe=open:/x"] {
        let out = Command::new(&release)
            .args(["ui", switch])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{switch}: {err}");
        let name = switch.split('=').next().unwrap();
        assert!(
            err.contains(&format!("unexpected argument '{name}")),
            "{switch}: {err}"
        );
    }
}
