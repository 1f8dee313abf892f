// The Windows exec-helper: spawned confined, over an overlapped pipe (issue 19).
#![cfg(windows)]
//! The exec-helper binary as the Windows spawner starts it (`sandbox::windows::spawn_helper`,
//! the exec profile's policy, `ChannelIo::Overlapped`), running commands in the restricted-token
//! tier: each in a job and a write-restricted token of its own, output and status back over the
//! channel, the time limit and `Stop` ending the whole tree, and every refusal with its reason.
//!
//! Under Wine the token is not restricted, file DACLs do not persist (so no grant's ACE reads
//! back) and WFP is absent: the helper runs with `--allow-degraded` there, and each command's
//! report names those gaps, which this test asserts. Without `--allow-degraded` the same gaps
//! refuse the command (the helper's own unit test, `windows::tests`).

use ipc_schema::codec::{read_frame, write_frame};
use ipc_schema::exec::{
    CommandSpec, ExecReply, ExecRequest, GrantAccess, Hide, Limits, NetworkMode, PathGrant, RunEnd,
    RunId, RunOutcome, SandboxReport, UserCommand,
};
use ipc_schema::tier::ConfinementTier;
use ipc_schema::{Body, Envelope, ErrorCode, ErrorReply, Role, MAX_FRAME};
use sandbox::windows as w;
use sandbox::{wincfg, Profile};
use std::collections::HashMap;
use std::ffi::OsString;
use std::fs::File;
use std::path::{Path, PathBuf};

fn wine() -> bool {
    w::running_under_wine()
}

struct Helper {
    child: w::ConfinedChild,
    chan: File,
    next: u64,
    stash: HashMap<u64, Body>,
    tier: Option<ConfinementTier>,
}

impl Helper {
    fn spawn(protect: &Path) -> Helper {
        let policy = wincfg::helper_policy(&Profile::Exec).unwrap();
        let exe = gatehouse_tests::bin("exec-helper");
        let mut args: Vec<OsString> = vec!["--protect".into(), protect.into()];
        if wine() {
            args.push("--allow-degraded".into());
        }
        let w::SpawnedHelper { child, channel } = w::spawn_helper(
            &policy,
            &exe,
            &args,
            w::ChannelIo::Overlapped,
            w::ChannelIo::Blocking,
            std::os::windows::io::AsHandle::as_handle(&std::io::stderr()),
            w::SpawnOptions {
                allow_degraded: wine(),
            },
        )
        .unwrap_or_else(|e| panic!("spawn exec-helper: {e}"));
        let mut chan = channel;
        let env = read_frame(&mut chan, MAX_FRAME)
            .expect("read the hello")
            .expect("the exec-helper closed before its hello");
        let Body::Hello(hello) = env.body else {
            panic!("not a hello: {:?}", env.body);
        };
        assert_eq!(hello.role, Role::Exec);
        assert_eq!(hello.pid, child.pid());
        let report = hello.lockdown;
        assert!(report.windows.is_some(), "{report:?}");
        gatehouse_tests::windows::check_hello(&policy, &child, &report);
        Helper {
            child,
            chan,
            next: 1,
            stash: HashMap::new(),
            tier: report.exec_tier,
        }
    }

    fn send(&mut self, req: ExecRequest) -> u64 {
        let id = self.next;
        self.next += 1;
        write_frame(&mut self.chan, &Envelope::new(id, Body::Exec(req))).expect("write");
        id
    }

    fn wait(&mut self, id: u64) -> Body {
        if let Some(b) = self.stash.remove(&id) {
            return b;
        }
        loop {
            let env = read_frame(&mut self.chan, MAX_FRAME)
                .expect("read a reply")
                .expect("the exec-helper closed the channel");
            if env.id == id {
                return env.body;
            }
            self.stash.insert(env.id, env.body);
        }
    }

    fn ask(&mut self, req: ExecRequest) -> Result<ExecReply, ErrorReply> {
        let id = self.send(req);
        match self.wait(id) {
            Body::ExecReply(r) => Ok(r),
            Body::Error(e) => Err(e),
            other => panic!("not an exec reply: {other:?}"),
        }
    }

    fn start(&mut self, spec: CommandSpec) -> Result<(RunId, SandboxReport), ErrorReply> {
        match self.ask(ExecRequest::Start(Box::new(spec)))? {
            ExecReply::Started { run, sandbox } => Ok((run, *sandbox)),
            other => panic!("not Started: {other:?}"),
        }
    }

    /// Polls `run` to its end: (stdout, stderr, end).
    fn finish(&mut self, run: RunId) -> (Vec<u8>, Vec<u8>, RunEnd) {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        for _ in 0..120 {
            match self.ask(ExecRequest::Poll { run, wait_ms: 1000 }) {
                Ok(ExecReply::Progress {
                    run: r,
                    stdout,
                    stderr,
                    end,
                }) => {
                    assert_eq!(r, run);
                    out.extend(stdout);
                    err.extend(stderr);
                    if let Some(end) = end {
                        return (out, err, end);
                    }
                }
                other => panic!("poll: {other:?}"),
            }
        }
        panic!("{run} did not end in 120 polls");
    }

    fn close(self) -> Option<u32> {
        let Helper { child, chan, .. } = self;
        drop(chan);
        child
            .wait_timeout(30_000)
            .expect("wait for the exec-helper")
    }
}

fn spec(dir: &Path, argv: &[&str]) -> CommandSpec {
    CommandSpec {
        argv: argv.iter().map(|s| s.to_string()).collect(),
        cwd: dir.to_path_buf(),
        grants: vec![PathGrant {
            path: dir.to_path_buf(),
            access: GrantAccess::ReadWrite,
        }],
        env: Vec::new(),
        network: NetworkMode::None,
        limits: Limits::default(),
        hide: Hide::default(),
        slot: Some(ipc_schema::exec::CommandSlot::new(1).unwrap()),
        user: None,
    }
}

/// cmd.exe spinning until it is killed.
const SPIN: &str = "for /l %i in (1,0,2) do @rem";

fn scratch() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let t = tempfile::tempdir().unwrap();
    let work = t.path().join("work");
    let protect = t.path().join("gatehouse-data");
    std::fs::create_dir(&work).unwrap();
    std::fs::create_dir(&protect).unwrap();
    (t, work, protect)
}

#[test]
fn a_command_runs_in_the_restricted_token_tier_and_its_output_and_status_come_back() {
    let (_t, work, protect) = scratch();
    let mut h = Helper::spawn(&protect);
    assert_eq!(h.tier, Some(ConfinementTier::RestrictedToken));
    let mut s = spec(
        &work,
        &[
            "cmd.exe",
            "/d",
            "/c",
            "echo hello& echo %GREETING%& echo [%GITHUB_TOKEN%]& echo oops 1>&2& exit /b 3",
        ],
    );
    s.env = vec![
        ("GREETING".into(), "hi there".into()),
        ("GITHUB_TOKEN".into(), "ghp_secret".into()),
        ("LD_PRELOAD".into(), "x.dll".into()),
    ];
    let (run, report) = h.start(s).expect("started");
    assert_eq!(report.tier, ConfinementTier::RestrictedToken);
    assert!(
        report.program.to_ascii_lowercase().ends_with("cmd.exe"),
        "{}",
        report.program
    );
    assert!(report.namespaces.is_empty());
    assert_eq!(
        report.env_dropped,
        vec![
            "GITHUB_TOKEN: looks like a secret".to_string(),
            "LD_PRELOAD: LD_ variables are never passed".to_string()
        ]
    );
    // What the tier does not give is named, never dropped silently.
    assert!(
        report.degraded[0].starts_with("outbound network is not refused"),
        "{:?}",
        report.degraded
    );
    assert!(
        report.degraded[1].starts_with("the file-size and open-file limits are not applied"),
        "{:?}",
        report.degraded
    );
    assert!(
        report.degraded[2].starts_with("reads are not confined"),
        "{:?}",
        report.degraded
    );
    if wine() {
        // Wine keeps no DACL it is given: the grant's ACE and the protected path's deny ACE
        // (which the broker would apply) do not read back, and the report says so by path.
        println!("wine does not enforce: file DACLs for a command's grant and protected paths (not verified here)");
        let missing: Vec<&String> = report
            .degraded
            .iter()
            .filter(|d| d.contains("has no ACE"))
            .collect();
        assert_eq!(missing.len(), 2, "{:?}", report.degraded);
        assert!(
            missing[0].starts_with(&work.display().to_string()),
            "{missing:?}"
        );
        assert!(
            missing[1].starts_with(&protect.display().to_string()),
            "{missing:?}"
        );
    }
    let (out, err, end) = h.finish(run);
    assert_eq!(
        String::from_utf8_lossy(&out),
        "hello\r\nhi there\r\n[%GITHUB_TOKEN%]\r\n"
    );
    assert_eq!(String::from_utf8_lossy(&err).trim_end(), "oops");
    assert_eq!(end.outcome, RunOutcome::Exited(3));
    assert_eq!((end.stdout_dropped, end.stderr_dropped), (0, 0));
    // Collected: the run is gone.
    let e = h.ask(ExecRequest::Poll { run, wait_ms: 0 }).unwrap_err();
    assert_eq!(e.code, ErrorCode::Invalid);
    assert!(e.message.contains("its end was collected"), "{}", e.message);
    assert_eq!(h.close(), Some(0), "closing the channel ends the helper");
}

#[test]
fn the_time_limit_stop_and_the_main_process_ending_each_end_the_whole_tree() {
    let (_t, work, protect) = scratch();
    let mut h = Helper::spawn(&protect);
    // The time limit.
    let mut s = spec(&work, &["cmd.exe", "/d", "/c", SPIN]);
    s.limits.timeout_ms = 1500;
    let (run, _) = h.start(s).unwrap();
    let (_, _, end) = h.finish(run);
    assert_eq!(end.outcome, RunOutcome::TimedOut { after_ms: 1500 });
    assert!(end.elapsed_ms >= 1500, "{end:?}");
    // Stop.
    let (run, _) = h
        .start(spec(&work, &["cmd.exe", "/d", "/c", SPIN]))
        .unwrap();
    assert_eq!(
        h.ask(ExecRequest::Stop { run }),
        Ok(ExecReply::Stopping { run })
    );
    let (_, _, end) = h.finish(run);
    assert_eq!(end.outcome, RunOutcome::Stopped);
    // The main process exits at once and leaves a spinning child holding its stdout: the end
    // comes only because the job ends that child (its pipe would stay open otherwise, and this
    // test fails at its 120th poll; checked by removing the kill).
    let probe = gatehouse_tests::bin("gatehouse-exec-probe");
    let (run, _) = h
        .start(spec(&work, &[probe.to_str().unwrap(), "leave-child"]))
        .unwrap();
    let (out, _, end) = h.finish(run);
    assert_eq!(end.outcome, RunOutcome::Exited(0));
    assert_eq!(String::from_utf8_lossy(&out), "left\n");
    assert_eq!(h.close(), Some(0));
}

#[test]
fn a_command_is_under_the_spawner_by_its_helpers_job() {
    // What keeps a command (an agent run there) from passing as a front: the spawner's
    // `Lineage` asks whether a pid is in a helper's job, and a command's own job is nested in
    // the exec-helper's.
    let (_t, work, protect) = scratch();
    let mut h = Helper::spawn(&protect);
    let probe = gatehouse_tests::bin("gatehouse-exec-probe");
    let (run, _) = h
        .start(spec(&work, &[probe.to_str().unwrap(), "pid-spin"]))
        .unwrap();
    let mut out = Vec::new();
    for _ in 0..60 {
        match h.ask(ExecRequest::Poll { run, wait_ms: 500 }) {
            Ok(ExecReply::Progress { stdout, .. }) => out.extend(stdout),
            other => panic!("poll: {other:?}"),
        }
        if out.ends_with(b"\n") {
            break;
        }
    }
    let text = String::from_utf8_lossy(&out);
    let pid: u32 = text
        .trim()
        .strip_prefix("pid ")
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no pid from the probe: {text:?}"));
    // Positive control: this test is in none of the helper's jobs.
    assert_eq!(h.child.job_holds(std::process::id()), Ok(false));
    assert_eq!(h.child.job_holds(pid), Ok(true), "the command {pid}");
    assert_eq!(
        h.ask(ExecRequest::Stop { run }),
        Ok(ExecReply::Stopping { run })
    );
    let (_, _, end) = h.finish(run);
    assert_eq!(end.outcome, RunOutcome::Stopped);
    assert_eq!(h.close(), Some(0));
}

#[test]
fn output_past_the_limit_is_counted_and_dropped() {
    let (_t, work, protect) = scratch();
    let mut h = Helper::spawn(&protect);
    let mut s = spec(&work, &["cmd.exe", "/d", "/c", "echo hello world"]);
    s.limits.stdout_max = 4;
    let (run, _) = h.start(s).unwrap();
    let (out, _, end) = h.finish(run);
    assert_eq!(out, b"hell");
    assert_eq!(end.stdout_dropped, "hello world\r\n".len() as u64 - 4);
    assert_eq!(end.outcome, RunOutcome::Exited(0));
    assert_eq!(h.close(), Some(0));
}

#[test]
fn what_the_tier_cannot_hold_is_refused_with_its_reason_and_the_helper_serves_on() {
    let (_t, work, protect) = scratch();
    let mut h = Helper::spawn(&protect);
    let refused = |h: &mut Helper, s: CommandSpec| h.start(s).expect_err("refused");

    let mut s = spec(&work, &["cmd.exe", "/d", "/c", "echo no"]);
    s.network = NetworkMode::Proxy { token: "t".into() };
    let e = refused(&mut h, s);
    assert_eq!(
        (e.code, e.message.as_str()),
        (
            ErrorCode::Refused,
            "the egress proxy through a connector is Linux's and macOS': on Windows the broker listens for the command on a loopback port"
        )
    );
    // The broker's loopback proxy, but on a port outside its range: not a proxy of gatehouse's.
    let mut s = spec(&work, &["cmd.exe", "/d", "/c", "echo no"]);
    s.network = NetworkMode::LoopbackProxy {
        token: "t".into(),
        port: 8080,
    };
    let e = refused(&mut h, s);
    assert_eq!(e.code, ErrorCode::Invalid);
    assert!(
        e.message
            .starts_with("the proxy's port 8080 is not one of the egress proxy's"),
        "{}",
        e.message
    );

    let mut s = spec(&work, &["cmd.exe", "/d", "/c", "echo no"]);
    s.user = Some(Box::new(UserCommand {
        long_run: true,
        server: Some(ipc_schema::exec::ServerRun {
            state_home: work.join("server"),
            run_name: None,
        }),
        ..UserCommand::default()
    }));
    // A server's stdio is a pipe named after its run: a server without one is no server here
    // (broker/tests/windows_broker.rs runs one with it).
    let e = refused(&mut h, s);
    assert_eq!(
        (e.code, e.message.as_str()),
        (
            ErrorCode::Invalid,
            "a third-party server's run is named on Windows (its stdio pipe) and only there"
        )
    );

    let mut s = spec(&work, &["cmd.exe", "/d", "/c", "echo no"]);
    s.cwd = protect.clone();
    let e = refused(&mut h, s);
    assert_eq!(e.code, ErrorCode::Invalid);
    assert!(e.message.contains("is not inside a grant"), "{}", e.message);

    let e = refused(&mut h, spec(&work, &["no-such-program-here"]));
    assert_eq!(e.code, ErrorCode::NotFound);
    assert!(
        e.message
            .starts_with("no-such-program-here: command not found"),
        "{}",
        e.message
    );

    // A batch file is not started without the shell that runs it.
    std::fs::write(work.join("run.cmd"), "@echo ran\r\n").unwrap();
    let e = refused(&mut h, spec(&work, &[r".\run.cmd"]));
    assert_eq!(e.code, ErrorCode::Refused);
    assert!(e.message.contains("cmd.exe"), "{}", e.message);

    let mut s = spec(&work, &["cmd.exe", "/d", "/c", "echo no"]);
    s.limits.timeout_ms = u64::MAX;
    assert_eq!(refused(&mut h, s).code, ErrorCode::Invalid);

    // Positive control: the same helper still runs a command, and the batch file through cmd.
    let (run, _) = h
        .start(spec(&work, &["cmd.exe", "/d", "/c", r".\run.cmd"]))
        .unwrap();
    let (out, _, end) = h.finish(run);
    assert_eq!(String::from_utf8_lossy(&out), "ran\r\n");
    assert_eq!(end.outcome, RunOutcome::Exited(0));
    assert_eq!(h.close(), Some(0));
}

#[test]
fn the_memory_limit_holds_each_process() {
    let (_t, work, protect) = scratch();
    let mut h = Helper::spawn(&protect);
    let probe = gatehouse_tests::bin("gatehouse-exec-probe");
    let alloc = |h: &mut Helper, mib: &str| {
        let mut s = spec(&work, &[probe.to_str().unwrap(), "alloc", mib]);
        s.limits.memory = 64 << 20;
        let (run, _) = h.start(s).unwrap();
        let (out, _, end) = h.finish(run);
        (String::from_utf8_lossy(&out).into_owned(), end.outcome)
    };
    // Positive control: well under the limit.
    assert_eq!(
        alloc(&mut h, "8"),
        ("ok 8\n".to_string(), RunOutcome::Exited(0))
    );
    // Past it: the commit is refused (JOB_OBJECT_LIMIT_PROCESS_MEMORY).
    let past = alloc(&mut h, "256");
    if wine() && past.0 == "ok 256\n" {
        println!("wine does not enforce: a job's process memory limit (not verified here)");
    } else {
        assert_eq!(past, ("refused\n".to_string(), RunOutcome::Exited(1)));
    }
    assert_eq!(h.close(), Some(0));
}
