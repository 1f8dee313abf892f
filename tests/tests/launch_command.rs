// Drives the Linux binaries (ipc_schema::platform::Missing elsewhere).
#![cfg(target_os = "linux")]
//! `LaunchRequest::Command` on the ui channel (the path `gatehouse sandbox` is to take): the
//! broker checks the request, its exec-helper runs the command in a sandbox of its own, the
//! output comes back in pieces, the end last, and the audit log has a row at the start, at the
//! end and for each refusal. Driven here as the console's channel would drive it.
//!
//! Runs as root (the sandbox then runs commands as nobody, so the granted directories are
//! handed to nobody) and as an unprivileged user; every assertion holds for both.
//! Build first: `cargo build --workspace --all-features`.

#![forbid(unsafe_code)]

use gatehouse_tests::{children_of, misbehaving_peer, sandbox_owned_dir, BrokerUnderTest, Conn};
use ipc_schema::codec::encode;
use ipc_schema::exec::{GrantAccess, Hide, Limits, PathGrant, RunEnd, RunOutcome};
use ipc_schema::ui::{CommandLaunch, LaunchReply, LaunchRequest, NotStarted, UiReply, UiRequest};
use ipc_schema::{Body, Envelope};
use serde_json::Value;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The tool name the broker's rows carry for a command the human launched.
const TOOL: &str = "gatehouse sandbox";
/// The net-helper's refusal of a proxy session for a host that is not one.
const BAD_DOMAIN: &str =
    "--allow-domain: allowlist entry \"bad domain!\": not a host (invalid international domain name)";

fn launch(argv: &[&str], cwd: &Path, grants: Vec<PathGrant>, work_root: bool) -> CommandLaunch {
    CommandLaunch {
        argv: argv.iter().map(|s| s.to_string()).collect(),
        cwd: cwd.to_path_buf(),
        grants,
        work_root,
        env: Vec::new(),
        pass_env: Vec::new(),
        domains: Vec::new(),
        limits: Limits::default(),
        hide: Hide::default(),
        long_run: false,
        agent: None,
    }
}

fn rw(p: &Path) -> PathGrant {
    PathGrant {
        path: p.to_path_buf(),
        access: GrantAccess::ReadWrite,
    }
}

fn command_body(l: CommandLaunch) -> Body {
    Body::Ui(UiRequest::Launch(LaunchRequest::Command(Box::new(l))))
}

/// Everything the broker answered to one `Command` request, in order.
#[derive(Debug, Default)]
struct Run {
    started: bool,
    /// Replies after `CommandStarted` that were neither output nor the end.
    stray: Vec<Body>,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    end: Option<RunEnd>,
    refused: Option<(String, NotStarted)>,
}

/// Reads the replies to request `id` until its last one (the end, a refusal or an error).
fn follow(ui: &mut Conn, id: u64) -> Run {
    let mut run = Run::default();
    loop {
        let env = ui.recv().expect("the broker closed the ui connection");
        if env.id != id {
            continue;
        }
        match env.body {
            Body::UiReply(UiReply::Launch(LaunchReply::CommandStarted { .. })) => {
                assert!(!run.started, "two CommandStarted");
                run.started = true;
            }
            Body::UiReply(UiReply::Launch(LaunchReply::Output { stdout, stderr })) => {
                assert!(run.started, "output before CommandStarted");
                run.stdout.extend(stdout);
                run.stderr.extend(stderr);
            }
            Body::UiReply(UiReply::Launch(LaunchReply::CommandEnded(end))) => {
                run.end = Some(end);
                return run;
            }
            Body::UiReply(UiReply::Launch(LaunchReply::Refused { reason, why })) => {
                run.refused = Some((reason, why));
                return run;
            }
            other => {
                run.stray.push(other);
                return run;
            }
        }
    }
}

fn run_command(ui: &mut Conn, l: CommandLaunch) -> Run {
    let id = ui.send(command_body(l));
    follow(ui, id)
}

/// The request is refused before anything starts: `Refused` is its only reply (the next frame
/// on the connection is the answer to a ping sent after it), and its reason holds `reason`.
fn assert_refused(ui: &mut Conn, l: CommandLaunch, reason: &str, why: NotStarted) {
    let id = ui.send(command_body(l.clone()));
    let env = ui.recv().expect("the broker closed the ui connection");
    assert_eq!(env.id, id, "{:?}", env.body);
    match env.body {
        Body::UiReply(UiReply::Launch(LaunchReply::Refused { reason: r, why: w })) => {
            assert!(r.contains(reason), "{l:?}: {r}");
            assert_eq!(w, why, "{l:?}: {r}");
        }
        other => panic!("{l:?}: {other:?}"),
    }
    let ping = ui.send(Body::Ping { target: None });
    let env = ui.recv().expect("the broker closed the ui connection");
    assert_eq!((env.id, env.body), (ping, Body::Pong), "{l:?}");
}

/// The audit log's rows (`gatehouse --json audit tail`), newest last.
fn audit_rows(b: &BrokerUnderTest) -> Vec<Value> {
    let out = b.cli(&["--json", "audit", "tail", "-n", "10000"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// The rows of commands the human launched, once `ready` holds for them (audit-only rows are
/// committed by the broker's writer a little after the event).
fn launch_rows_when(b: &BrokerUnderTest, ready: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let rows: Vec<Value> = audit_rows(b)
            .into_iter()
            .filter(|r| r["tool"] == TOOL)
            .collect();
        if ready(&rows) || Instant::now() > deadline {
            return rows;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn argv_target(argv: &[&str]) -> String {
    let v: Vec<String> = argv.iter().map(|s| s.to_string()).collect();
    format!("{v:?}")
}

fn row_for<'a>(rows: &'a [Value], outcome: &str, argv: &[&str]) -> Option<&'a Value> {
    let target = argv_target(argv);
    rows.iter()
        .find(|r| r["outcome"] == outcome && r["target"] == target.as_str())
}

fn has_row(rows: &[Value], outcome: &str, argv: &[&str]) -> bool {
    row_for(rows, outcome, argv).is_some()
}

/// Every process below `pid` (children, their children, ...).
fn descendants_of(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let mut todo = vec![pid];
    while let Some(p) = todo.pop() {
        for c in children_of(p) {
            out.push(c);
            todo.push(c);
        }
    }
    out
}

/// The processes named `name` below the broker `pid`.
fn named_below(pid: u32, name: &str) -> Vec<u32> {
    descendants_of(pid)
        .into_iter()
        .filter(|p| {
            std::fs::read_to_string(format!("/proc/{p}/comm"))
                .map(|c| c.trim() == name)
                .unwrap_or(false)
        })
        .collect()
}

fn wait_until(what: &str, secs: u64, f: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !f() {
        assert!(Instant::now() < deadline, "waited {secs} s for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A work directory the sandbox's user may write, resolved (the CLI sends resolved paths).
fn work_dir(prefix: &str) -> (tempfile::TempDir, PathBuf) {
    let d = sandbox_owned_dir(prefix);
    let p = std::fs::canonicalize(d.path()).unwrap();
    (d, p)
}

#[test]
fn a_command_streams_its_output_and_ends_with_its_status_in_its_grant_only() {
    let b = BrokerUnderTest::start(&[]);
    let mut ui = b.ui();
    let (_d, work) = work_dir("gh-launch-");

    // Output and status: stdout and stderr apart, exactly; the exit status as it was.
    let script = ["/bin/sh", "-c", "echo out; echo err >&2; exit 3"];
    let r = run_command(&mut ui, launch(&script, &work, vec![rw(&work)], false));
    assert!(r.started && r.stray.is_empty(), "{r:?}; log:\n{}", b.log());
    assert_eq!(
        (r.stdout.as_slice(), r.stderr.as_slice()),
        (&b"out\n"[..], &b"err\n"[..]),
        "{r:?}"
    );
    let end = r.end.expect("an end");
    assert_eq!(end.outcome, RunOutcome::Exited(3), "{end:?}");
    assert_eq!((end.stdout_dropped, end.stderr_dropped), (0, 0));

    // The write grant (positive control): a file written in the grant is there afterwards.
    let write = [
        "/bin/sh",
        "-c",
        "printf 'made in the sandbox\\n' > made.txt",
    ];
    let r = run_command(&mut ui, launch(&write, &work, vec![rw(&work)], false));
    assert_eq!(
        r.end.as_ref().map(|e| &e.outcome),
        Some(&RunOutcome::Exited(0)),
        "{r:?}"
    );
    assert_eq!(
        std::fs::read_to_string(work.join("made.txt")).unwrap(),
        "made in the sandbox\n"
    );

    // The working root granted implicitly (`work_root`, no grant names it): read-write too.
    let implicit = ["/bin/sh", "-c", "cat made.txt; echo again > again.txt"];
    let r = run_command(&mut ui, launch(&implicit, &work, Vec::new(), true));
    assert_eq!(r.stdout, b"made in the sandbox\n", "{r:?}");
    assert_eq!(
        r.end.as_ref().map(|e| &e.outcome),
        Some(&RunOutcome::Exited(0)),
        "{r:?}"
    );
    assert_eq!(
        std::fs::read_to_string(work.join("again.txt")).unwrap(),
        "again\n"
    );

    // Outside the grant the same shell cannot write: it says so, and nothing is there.
    let outside = ["/bin/sh", "-c", "echo x > /etc/launch-probe"];
    let r = run_command(&mut ui, launch(&outside, &work, vec![rw(&work)], false));
    assert!(r.started, "{r:?}");
    let err = String::from_utf8_lossy(&r.stderr).into_owned();
    assert!(
        err.starts_with("/bin/sh: 1: cannot create /etc/launch-probe: "),
        "{err}"
    );
    assert!(
        err.ends_with(": Permission denied\n") || err.ends_with(": Read-only file system\n"),
        "{err}"
    );
    assert_eq!(
        r.end.as_ref().map(|e| &e.outcome),
        Some(&RunOutcome::Exited(2)),
        "{r:?}"
    );
    assert!(!Path::new("/etc/launch-probe").exists());

    // The audit rows: a start and an end for each, the end with its status.
    let rows = launch_rows_when(&b, |rows| has_row(rows, "ended", &outside));
    for argv in [&script[..], &write[..], &implicit[..], &outside[..]] {
        let start = row_for(&rows, "started", argv).unwrap_or_else(|| panic!("{rows:#?}"));
        assert_eq!(
            (&start["kind"], &start["actor"]),
            (&Value::from("execution"), &Value::from("ui")),
            "{start}"
        );
        assert!(
            start["detail"]
                .as_str()
                .unwrap()
                .contains(&format!("{} (read-write)", work.display())),
            "{start}"
        );
        assert!(has_row(&rows, "ended", argv), "{argv:?}: {rows:#?}");
    }
    let ended = row_for(&rows, "ended", &script).unwrap();
    assert!(
        ended["detail"]
            .as_str()
            .unwrap()
            .contains(": exited with status 3; "),
        "{ended}"
    );
}

#[test]
fn a_program_that_is_not_there_is_refused_as_not_found() {
    let b = BrokerUnderTest::start(&[]);
    let mut ui = b.ui();
    let (_d, work) = work_dir("gh-launch-");
    for argv in [
        &["no-such-program-here", "x"][..],
        &["/no/such/program", "x"][..],
    ] {
        let r = run_command(&mut ui, launch(argv, &work, vec![rw(&work)], false));
        let (reason, why) = r.refused.clone().unwrap_or_else(|| panic!("{r:?}"));
        assert!(!r.started, "{r:?}");
        assert_eq!(why, NotStarted::NotFound, "{reason}");
        assert!(
            reason.starts_with(&format!("{}: command not found in the sandbox", argv[0])),
            "{reason}"
        );
    }
    // Positive control: a program that is there runs from the same directory.
    let r = run_command(
        &mut ui,
        launch(&["/bin/true"], &work, vec![rw(&work)], false),
    );
    assert_eq!(
        r.end.map(|e| e.outcome),
        Some(RunOutcome::Exited(0)),
        "{:?}",
        r.refused
    );
    let rows = launch_rows_when(&b, |rows| {
        has_row(rows, "refused", &["/no/such/program", "x"])
            && has_row(rows, "started", &["/bin/true"])
    });
    let row = row_for(&rows, "refused", &["no-such-program-here", "x"])
        .unwrap_or_else(|| panic!("{rows:#?}"));
    assert_eq!(row["kind"], "refusal");
    assert!(!has_row(&rows, "started", &["no-such-program-here", "x"]));
    // The refusal names the tier the command would have run in: the one /bin/true ran in.
    let ran = row_for(&rows, "started", &["/bin/true"]).unwrap_or_else(|| panic!("{rows:#?}"));
    assert!(ran["tier"].is_string(), "{ran}");
    assert_eq!(row["tier"], ran["tier"], "{row}");
}

#[test]
fn what_is_not_granted_or_not_served_is_refused_before_anything_starts() {
    let b = BrokerUnderTest::start(&[]);
    let mut ui = b.ui();
    let (_d, work) = work_dir("gh-launch-");
    let probe = |name: &str| format!("echo ran > {}", work.join(name).display());

    let root_probe = probe("from-root");
    let root = ["/bin/sh", "-c", root_probe.as_str()];
    assert_refused(
        &mut ui,
        launch(&root, Path::new("/"), vec![rw(&work)], true),
        "the current directory / is not granted: it is /.",
        NotStarted::Refused,
    );
    // Home directories: root's, and any directory right under /home (whoever runs the broker).
    let home_probe = probe("from-home");
    let home = ["/bin/sh", "-c", home_probe.as_str()];
    let mut homes: Vec<PathBuf> = ["/root", "/home", "/home/alice"]
        .iter()
        .map(PathBuf::from)
        .collect();
    // The homes that exist here (e.g. the unprivileged test user's, while the broker runs as
    // root with HOME=/root).
    if let Ok(rd) = std::fs::read_dir("/home") {
        homes.extend(rd.flatten().map(|e| e.path()).filter(|p| p.is_dir()));
    }
    for h in &homes {
        assert_refused(
            &mut ui,
            launch(&home, h, vec![rw(&work)], true),
            &format!(
                "the current directory {} is not granted: it is (or contains) a home directory.",
                h.display()
            ),
            NotStarted::Refused,
        );
    }
    // A path that is not resolved: relative, or climbing out with `..`.
    let rel_probe = probe("from-relative");
    let rel = ["/bin/sh", "-c", rel_probe.as_str()];
    assert_refused(
        &mut ui,
        launch(&rel, Path::new("work"), vec![rw(&work)], true),
        "the working directory work is not absolute",
        NotStarted::Refused,
    );
    assert_refused(
        &mut ui,
        launch(&rel, &work, vec![rw(Path::new("work"))], false),
        "the grant work is not absolute",
        NotStarted::Refused,
    );
    let climbing = work.join("../../root");
    assert_refused(
        &mut ui,
        launch(&rel, &climbing, vec![rw(&work)], true),
        "is not resolved",
        NotStarted::Refused,
    );
    // Network: a host the net-helper's proxy cannot take refuses the command before its
    // sandbox exists (the proxy session opens first).
    let net_probe = probe("from-network");
    let net = ["/bin/sh", "-c", net_probe.as_str()];
    let mut with_domain = launch(&net, &work, vec![rw(&work)], false);
    with_domain.domains = vec!["example.com".into(), "bad domain!".into()];
    assert_refused(&mut ui, with_domain, BAD_DOMAIN, NotStarted::Refused);
    // Limits beyond their ceilings, and an empty argv.
    let mut long = launch(&net, &work, vec![rw(&work)], false);
    long.limits.timeout_ms = 600_001;
    assert_refused(
        &mut ui,
        long,
        "limit timeout_ms = 600001 is outside 1..=600000",
        NotStarted::Refused,
    );
    assert_refused(
        &mut ui,
        launch(&[], &work, vec![rw(&work)], false),
        "no command was given",
        NotStarted::Refused,
    );

    // Positive control: the same probe, with the same grant, from the granted directory.
    let ok_probe = probe("from-work");
    let ok = ["/bin/sh", "-c", ok_probe.as_str()];
    let r = run_command(&mut ui, launch(&ok, &work, vec![rw(&work)], false));
    assert_eq!(r.end.map(|e| e.outcome), Some(RunOutcome::Exited(0)));
    assert_eq!(
        std::fs::read_to_string(work.join("from-work")).unwrap(),
        "ran\n"
    );
    for name in ["from-root", "from-home", "from-relative", "from-network"] {
        assert!(!work.join(name).exists(), "{name} ran");
    }

    let rows = launch_rows_when(&b, |rows| has_row(rows, "ended", &ok));
    for argv in [&root[..], &home[..], &rel[..], &net[..]] {
        let row = row_for(&rows, "refused", argv).unwrap_or_else(|| panic!("{argv:?}: {rows:#?}"));
        assert_eq!(
            (&row["kind"], &row["actor"]),
            (&Value::from("refusal"), &Value::from("ui"))
        );
        assert!(!has_row(&rows, "started", argv), "{argv:?}: {rows:#?}");
    }
    let row = row_for(&rows, "refused", &net).unwrap();
    assert_eq!(row["detail"], BAD_DOMAIN);
    assert!(has_row(&rows, "started", &ok));
}

#[test]
fn stop_command_and_a_closed_connection_kill_the_sandbox() {
    let b = BrokerUnderTest::start(&[]);
    let broker = b.child.id();
    let (_d, work) = work_dir("gh-launch-");
    let sleep = ["/bin/sleep", "600"];

    // StopCommand while it runs.
    let mut ui = b.ui();
    let id = ui.send(command_body(launch(&sleep, &work, vec![rw(&work)], false)));
    let env = ui.recv().unwrap();
    assert_eq!(env.id, id);
    assert!(
        matches!(
            env.body,
            Body::UiReply(UiReply::Launch(LaunchReply::CommandStarted { .. }))
        ),
        "{:?}; log:\n{}",
        env.body,
        b.log()
    );
    wait_until("the sleep in its sandbox", 20, || {
        named_below(broker, "sleep").len() == 1
    });
    // One command per connection: a second is refused while the first runs.
    assert_refused(
        &mut ui,
        launch(&["/bin/true"], &work, vec![rw(&work)], false),
        "this connection already runs a command",
        NotStarted::Refused,
    );
    let asked = Instant::now();
    let stop = ui.send(Body::Ui(UiRequest::Launch(LaunchRequest::StopCommand)));
    let (mut ponged, mut end) = (false, None);
    while !(ponged && end.is_some()) {
        let env = ui.recv().expect("the broker closed the ui connection");
        match env.body {
            Body::Pong if env.id == stop => ponged = true,
            Body::UiReply(UiReply::Launch(LaunchReply::CommandEnded(e))) if env.id == id => {
                end = Some(e)
            }
            other => panic!("{} {other:?}", env.id),
        }
    }
    assert!(
        asked.elapsed() < Duration::from_secs(10),
        "{:?}",
        asked.elapsed()
    );
    let end = end.unwrap();
    assert_eq!(end.outcome, RunOutcome::Stopped, "{end:?}");
    assert!(end.elapsed_ms < 60_000, "{end:?}");
    wait_until("the stopped sleep gone", 10, || {
        named_below(broker, "sleep").is_empty()
    });
    // Nothing left to stop, and the connection can run the next command.
    match ui.request(Body::Ui(UiRequest::Launch(LaunchRequest::StopCommand))) {
        Body::Error(e) => assert_eq!(e.message, "this connection runs no command"),
        other => panic!("{other:?}"),
    }
    let r = run_command(
        &mut ui,
        launch(&["/bin/true"], &work, vec![rw(&work)], false),
    );
    assert_eq!(r.end.map(|e| e.outcome), Some(RunOutcome::Exited(0)));

    // The connection closing mid-run stops it too.
    let sleep2 = ["/bin/sleep", "601"];
    let mut ui2 = b.ui();
    let id = ui2.send(command_body(launch(&sleep2, &work, vec![rw(&work)], false)));
    let env = ui2.recv().unwrap();
    assert!(
        env.id == id
            && matches!(
                env.body,
                Body::UiReply(UiReply::Launch(LaunchReply::CommandStarted { .. }))
            ),
        "{:?}",
        env.body
    );
    wait_until("the second sleep in its sandbox", 20, || {
        named_below(broker, "sleep").len() == 1
    });
    drop(ui2);
    wait_until("the sleep of the closed connection gone", 15, || {
        named_below(broker, "sleep").is_empty()
    });

    let rows = launch_rows_when(&b, |rows| has_row(rows, "ended", &sleep2));
    for argv in [&sleep[..], &sleep2[..]] {
        assert!(has_row(&rows, "started", argv), "{argv:?}: {rows:#?}");
        let row = row_for(&rows, "ended", argv).unwrap_or_else(|| panic!("{rows:#?}"));
        assert!(
            row["detail"]
                .as_str()
                .unwrap()
                .contains(": stopped; the sandbox was killed; "),
            "{row}"
        );
    }
    let row = row_for(&rows, "refused", &["/bin/true"]).unwrap_or_else(|| panic!("{rows:#?}"));
    assert_eq!(row["detail"], "this connection already runs a command");
}

#[test]
fn a_gateway_that_sends_a_command_launch_is_killed_and_nothing_runs() {
    let b = BrokerUnderTest::start(&[]);
    let (_d, work) = work_dir("gh-launch-");
    let probe = format!("echo ran > {}", work.join("from-gateway").display());
    let argv = ["/bin/sh", "-c", probe.as_str()];
    let frame = encode(&Envelope::new(
        1,
        command_body(launch(&argv, &work, vec![rw(&work)], false)),
    ))
    .unwrap();
    let st = misbehaving_peer(&b.gateway_socket(), &frame);
    assert_eq!(st.signal(), Some(libc::SIGKILL), "{st:?}");
    assert!(
        b.log()
            .contains("Ui message, which the gateway may not send"),
        "{}",
        b.log()
    );
    // Positive control: the same request on the ui channel runs.
    let ok_probe = format!("echo ran > {}", work.join("from-ui").display());
    let ok = ["/bin/sh", "-c", ok_probe.as_str()];
    let mut ui = b.ui();
    let r = run_command(&mut ui, launch(&ok, &work, vec![rw(&work)], false));
    assert_eq!(r.end.map(|e| e.outcome), Some(RunOutcome::Exited(0)));
    assert_eq!(
        std::fs::read_to_string(work.join("from-ui")).unwrap(),
        "ran\n"
    );
    assert!(!work.join("from-gateway").exists());
    let rows = launch_rows_when(&b, |rows| has_row(rows, "ended", &ok));
    assert!(!has_row(&rows, "started", &argv), "{rows:#?}");
    assert!(
        audit_rows(&b)
            .iter()
            .any(|r| r["kind"] == "peer_killed" && r["actor"] == "gateway"),
        "{:#?}",
        audit_rows(&b)
    );
}

/// `gatehouse sandbox` is a client of this path: the command runs in the broker's exec-helper
/// (a child of the broker's spawner, not of the CLI), its status is the CLI's, and the audit log
/// has its start and its end. Ctrl-C (SIGINT to the CLI) asks the broker to kill the sandbox:
/// the CLI exits 130 and the end row says the command was stopped.
#[test]
fn gatehouse_sandbox_runs_its_command_in_the_broker_and_ctrl_c_stops_it() {
    let b = BrokerUnderTest::start(&[]);
    let broker = b.child.id();
    let (_d, work) = work_dir("gh-launch-cli-");
    let sandbox = |argv: &[&str]| {
        let mut c = std::process::Command::new(gatehouse_tests::bin("gatehouse"));
        c.arg("--data-dir")
            .arg(b.dir.path())
            .arg("sandbox")
            .arg("--")
            .args(argv)
            .current_dir(&work)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        c
    };
    let status = ["/bin/sh", "-c", "echo out; echo err >&2; exit 3"];
    let out = sandbox(&status).output().unwrap();
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(out.stdout, b"out\n");
    assert_eq!(out.stderr, b"err\n");
    let rows = launch_rows_when(&b, |rows| has_row(rows, "ended", &status));
    assert!(has_row(&rows, "started", &status), "{rows:#?}");
    assert!(
        row_for(&rows, "ended", &status).unwrap()["detail"]
            .as_str()
            .unwrap()
            .contains("exited with status 3"),
        "{rows:#?}"
    );

    // A sleep that only the broker's sandbox can end: it runs below the broker, not the CLI.
    let sleep = ["/bin/sleep", "600"];
    let mut child = sandbox(&sleep).spawn().unwrap();
    wait_until("the sleep below the broker", 20, || {
        !named_below(broker, "sleep").is_empty()
    });
    assert!(
        descendants_of(child.id()).is_empty(),
        "the CLI has children"
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let st = child.wait().unwrap();
    assert_eq!(st.code(), Some(130), "{st:?}");
    wait_until("the sleep to be gone", 20, || {
        named_below(broker, "sleep").is_empty()
    });
    let rows = launch_rows_when(&b, |rows| has_row(rows, "ended", &sleep));
    let end = row_for(&rows, "ended", &sleep).unwrap_or_else(|| panic!("{rows:#?}"));
    assert!(end["detail"].as_str().unwrap().contains("stopped"), "{end}");
}

/// An agent launch (`gatehouse run`'s) is checked by the broker before anything starts: it must
/// be a long run, name a profile the policy has, and keep its state in a directory of its own in
/// gatehouse's agent-state directory. Each refusal is a row; nothing runs.
#[test]
fn an_agent_launch_is_refused_unless_long_with_a_known_profile_and_its_own_state_directory() {
    use ipc_schema::ui::AgentLaunch;
    let b = BrokerUnderTest::start(&[]);
    let mut ui = b.ui();
    let (_d, work) = work_dir("gh-launch-agent-");
    let agents = b.dir.path().join("agents");
    std::fs::create_dir_all(agents.join("sh")).unwrap();
    let probe = format!("echo ran > {}/ran", work.display());
    let argv = ["/bin/sh", "-c", probe.as_str()];
    let agent = |state: PathBuf, profile: Option<&str>, long_run: bool| {
        let mut l = launch(&argv, &work, vec![rw(&work)], false);
        l.long_run = long_run;
        l.agent = Some(AgentLaunch {
            profile: profile.map(|p| ipc_schema::tool::ProfileName::parse(p).unwrap()),
            state_home: state,
            mcp_config: "{}".into(),
            mode: None,
            run_name: None,
        });
        l
    };
    assert_refused(
        &mut ui,
        agent(agents.join("sh"), None, false),
        "an agent launch must be a long run",
        NotStarted::Refused,
    );
    assert_refused(
        &mut ui,
        agent(agents.join("sh"), Some("nosuch"), true),
        "there is no profile nosuch in the policy",
        NotStarted::Refused,
    );
    for state in [
        work.clone(),
        agents.join("sh/deeper"),
        agents.join("../agents/sh"),
    ] {
        assert_refused(
            &mut ui,
            agent(state.clone(), None, true),
            "is not one of",
            NotStarted::Refused,
        );
    }
    assert!(!work.join("ran").exists());
    let refused = || -> Vec<Value> {
        audit_rows(&b)
            .into_iter()
            .filter(|r| r["tool"] == "gatehouse run" && r["outcome"] == "refused")
            .collect()
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while refused().len() < 5 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let rows = refused();
    assert_eq!(rows.len(), 5, "{rows:#?}");
    assert!(!audit_rows(&b)
        .iter()
        .any(|r| r["tool"] == "gatehouse run" && r["outcome"] == "started"));
}
