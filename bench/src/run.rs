//! `bench run`: what `gatehouse run` adds to starting an agent, and what a session's first tool
//! call costs when no broker runs yet.
//!
//! - `claude --version` through `gatehouse run` (a broker already running) against the same
//!   command bare, and against the floor of a bare spawn (`/bin/true`), all in this run.
//! - The first `read_file` of a session whose `gatehouse mcp` finds no broker (it starts one in
//!   the background: helpers, lockdown checks, the audit log), from spawning `gatehouse mcp` to
//!   the answer, against the same with the broker already warm.
//!
//! `cargo build --release --workspace && cargo run --release -p bench -- run [--agent PATH]`
//! (default agent: `claude` on PATH, else the test suite's `/opt/gatehouse-test-npm/bin/claude`).

use crate::stats::Samples;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const STARTS: usize = 7;
const COLD: usize = 5;

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn time(mut cmd: Command) -> Duration {
    let t = Instant::now();
    let out = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let d = t.elapsed();
    assert!(
        out.status.success(),
        "{cmd:?}: {:?}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    d
}

fn agent(args: &[String]) -> PathBuf {
    if let Some(i) = args.iter().position(|a| a == "--agent") {
        return PathBuf::from(&args[i + 1]);
    }
    let path = std::env::var("PATH").unwrap_or_default();
    path.split(':')
        .map(|d| Path::new(d).join("claude"))
        .find(|p| p.exists())
        .unwrap_or_else(|| PathBuf::from("/opt/gatehouse-test-npm/bin/claude"))
}

fn gatehouse(bins: &Path, data: &Path) -> Command {
    let mut c = Command::new(bins.join("gatehouse"));
    c.arg("--data-dir").arg(data);
    c
}

/// Spawns `gatehouse mcp`, initializes, calls read_file once; the time to its answer.
fn first_call(bins: &Path, data: &Path, project: &Path) -> Duration {
    let t = Instant::now();
    let mut child = gatehouse(bins, data)
        .arg("mcp")
        .current_dir(project)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut w = child.stdin.take().unwrap();
    let mut r = BufReader::new(child.stdout.take().unwrap());
    writeln!(w, r#"{{"jsonrpc":"2.0","id":1,"method":"initialize","params":{{"protocolVersion":"2025-06-18","capabilities":{{}},"clientInfo":{{"name":"bench","version":"1"}}}}}}"#).unwrap();
    writeln!(
        w,
        r#"{{"jsonrpc":"2.0","method":"notifications/initialized"}}"#
    )
    .unwrap();
    writeln!(w, r#"{{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{{"name":"read_file","arguments":{{"path":"hello.txt"}}}}}}"#).unwrap();
    let mut line = String::new();
    loop {
        line.clear();
        assert!(r.read_line(&mut line).unwrap() > 0, "gatehouse mcp closed");
        if line.contains(r#""id":2"#) {
            break;
        }
    }
    let d = t.elapsed();
    assert!(line.contains("hello"), "{line}");
    drop(w);
    let _ = child.wait();
    d
}

pub fn run(args: &[String]) {
    let bins = crate::ipc::bin_dir(args);
    let agent = agent(args);
    assert!(
        agent.exists(),
        "{} not found: pass --agent PATH",
        agent.display()
    );
    let root = crate::ipc::tempdir();
    let project = root.join("project");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::write(project.join("hello.txt"), "hello\n").unwrap();

    // Starting the agent: bare, through gatehouse run (broker warm), and the spawn floor.
    let data = root.join("d");
    let warm = gatehouse(&bins, &data).arg("ping").output().unwrap();
    assert!(
        warm.status.success(),
        "{}",
        String::from_utf8_lossy(&warm.stderr)
    );
    let (mut floor, mut bare, mut flagged, mut run) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    // What the Claude recipe adds to the command line (broker/src/cmd_run/recipe.rs), with an
    // empty MCP config: Claude Code's own cost of those options, outside any sandbox.
    let recipe_flags = [
        "--disallowedTools",
        "Bash,Edit,Write,MultiEdit,NotebookEdit",
        "--strict-mcp-config",
        "--allowedTools",
        "mcp__gatehouse",
        "--mcp-config",
        "/dev/null",
    ];
    for _ in 0..STARTS {
        floor.push(time(Command::new("/bin/true")));
        let mut c = Command::new(&agent);
        c.arg("--version").current_dir(&project);
        bare.push(time(c));
        let mut c = Command::new(&agent);
        c.arg("--version").args(recipe_flags).current_dir(&project);
        c.env("DISABLE_AUTOUPDATER", "1")
            .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1");
        flagged.push(time(c));
        let mut c = gatehouse(&bins, &data);
        c.args(["run", "--"])
            .arg(&agent)
            .arg("--version")
            .current_dir(&project);
        run.push(time(c));
    }
    let (floor, bare, flagged, run) = (
        Samples::new(floor),
        Samples::new(bare),
        Samples::new(flagged),
        Samples::new(run),
    );
    println!("agent start ({}; p50 of {STARTS})", agent.display());
    println!(
        "  floor: spawn /bin/true             {:8.2} ms",
        ms(floor.p50())
    );
    println!(
        "  claude --version bare              {:8.2} ms",
        ms(bare.p50())
    );
    println!(
        "  the same with the recipe's flags   {:8.2} ms  (Claude Code's own cost of them)",
        ms(flagged.p50())
    );
    println!(
        "  gatehouse run -- claude --version  {:8.2} ms  = {:.2}x bare, {:.2}x with the flags (+{:.0} ms)",
        ms(run.p50()),
        run.p50().as_secs_f64() / bare.p50().as_secs_f64(),
        run.p50().as_secs_f64() / flagged.p50().as_secs_f64(),
        ms(run.p50().saturating_sub(flagged.p50()))
    );

    // A session's first tool call, cold (no broker) and warm.
    let (mut cold, mut hot) = (Vec::new(), Vec::new());
    for k in 0..COLD {
        let d = root.join(format!("cold{k}"));
        cold.push(first_call(&bins, &d, &project));
        hot.push(first_call(&bins, &d, &project));
        let _ = gatehouse(&bins, &d).arg("stop").output();
    }
    let _ = gatehouse(&bins, &data).arg("stop").output();
    let (cold, hot) = (Samples::new(cold), Samples::new(hot));
    println!("first read_file of a session (spawn gatehouse mcp .. answer; p50 of {COLD})");
    println!(
        "  floor: broker already running    {:8.2} ms",
        ms(hot.p50())
    );
    println!(
        "  cold: no broker yet               {:8.2} ms  = {:.2}x warm",
        ms(cold.p50()),
        cold.p50().as_secs_f64() / hot.p50().as_secs_f64()
    );
    let _ = std::fs::remove_dir_all(&root);
}
