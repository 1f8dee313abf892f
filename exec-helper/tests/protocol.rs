// Drives the Linux binaries (ipc_schema::platform::Missing elsewhere).
#![cfg(target_os = "linux")]
//! The exec-helper as the broker sees it: started with one socket and an empty environment,
//! locked down, answering `ExecRequest`s. Build first: `cargo build --workspace --all-features`.

use gatehouse_tests::bin;
use ipc_schema::codec::{decode_from_slice, encode, MAX_FRAME};
use ipc_schema::exec::{
    CommandSpec, ExecReply, ExecRequest, GrantAccess, Limits, NetworkMode, PathGrant, RunEnd,
    RunId, RunOutcome, SandboxReport,
};
use ipc_schema::status::Hello;
use ipc_schema::{Body, Envelope, ErrorCode, Role};
use sandbox::linux::command::fdpass::send_with_fd;
use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::Child;
use std::time::Duration;

/// An exec-helper started the way the broker starts it, with the raw socket kept (so a test can
/// attach descriptors to frames) and replies matched by id.
struct Helper {
    child: Child,
    sock: UnixStream,
    inbuf: Vec<u8>,
    next_id: u64,
    early: HashMap<u64, Body>,
    hello: Hello,
}

impl Helper {
    fn spawn(args: &[&str]) -> Helper {
        let (ours, theirs) = UnixStream::pair().unwrap();
        let args: Vec<std::ffi::OsString> = args.iter().map(|a| a.into()).collect();
        let spawned = sandbox::process::spawn_helper(
            &bin(Role::Exec.name()),
            &args,
            OwnedFd::from(theirs),
            &[],
        )
        .expect("spawn exec-helper");
        ours.set_read_timeout(Some(Duration::from_secs(60)))
            .unwrap();
        let mut h = Helper {
            child: spawned.child,
            sock: ours,
            inbuf: Vec::new(),
            next_id: 1,
            early: HashMap::new(),
            hello: placeholder_hello(),
        };
        let Some(env) = h.read_env() else {
            panic!(
                "the exec-helper exited before its hello: {:?}",
                h.child.wait()
            );
        };
        let Body::Hello(hello) = env.body else {
            panic!("first frame was {:?}", env.body.kind());
        };
        h.hello = hello;
        h
    }

    fn read_env(&mut self) -> Option<Envelope> {
        loop {
            if let Some((env, n)) = decode_from_slice(&self.inbuf, MAX_FRAME).expect("frame") {
                self.inbuf.drain(..n);
                return Some(env);
            }
            let mut buf = [0u8; 65536];
            let n = self.sock.read(&mut buf).expect("read from the exec-helper");
            if n == 0 {
                return None;
            }
            self.inbuf.extend_from_slice(&buf[..n]);
        }
    }

    fn send(&mut self, body: Body) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.sock
            .write_all(&encode(&Envelope::new(id, body)).unwrap())
            .unwrap();
        id
    }

    fn send_with_fd(&mut self, body: Body, fd: &OwnedFd) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        let frame = encode(&Envelope::new(id, body)).unwrap();
        let n = send_with_fd(self.sock.as_fd(), &frame, fd.as_fd()).unwrap();
        self.sock.write_all(&frame[n..]).unwrap();
        id
    }

    fn wait_reply(&mut self, id: u64) -> Body {
        if let Some(b) = self.early.remove(&id) {
            return b;
        }
        loop {
            let env = self.read_env().expect("the exec-helper closed its channel");
            if env.id == id {
                return env.body;
            }
            self.early.insert(env.id, env.body);
        }
    }

    fn request(&mut self, body: Body) -> Body {
        let id = self.send(body);
        self.wait_reply(id)
    }

    fn start(&mut self, spec: CommandSpec) -> Result<(RunId, SandboxReport), (ErrorCode, String)> {
        match self.request(Body::Exec(ExecRequest::Start(Box::new(spec)))) {
            Body::ExecReply(ExecReply::Started { run, sandbox }) => Ok((run, *sandbox)),
            Body::Error(e) => Err((e.code, e.message)),
            other => panic!("unexpected reply {other:?}"),
        }
    }

    /// Polls until the run ends; returns stdout, stderr, the end, and how many replies it took.
    fn collect(&mut self, run: RunId) -> (Vec<u8>, Vec<u8>, RunEnd, usize) {
        let (mut out, mut err, mut replies) = (Vec::new(), Vec::new(), 0);
        loop {
            let reply = self.request(Body::Exec(ExecRequest::Poll {
                run,
                wait_ms: 10_000,
            }));
            replies += 1;
            match reply {
                Body::ExecReply(ExecReply::Progress {
                    run: r,
                    stdout,
                    stderr,
                    end,
                }) => {
                    assert_eq!(r, run);
                    out.extend(stdout);
                    err.extend(stderr);
                    if let Some(end) = end {
                        return (out, err, end, replies);
                    }
                }
                other => panic!("unexpected reply {other:?}"),
            }
        }
    }

    fn run(&mut self, spec: CommandSpec) -> (String, String, RunEnd) {
        let (run, _) = self.start(spec).expect("started");
        let (o, e, end, _) = self.collect(run);
        (
            String::from_utf8_lossy(&o).into_owned(),
            String::from_utf8_lossy(&e).into_owned(),
            end,
        )
    }
}

impl Drop for Helper {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn placeholder_hello() -> Hello {
    Hello {
        role: Role::Exec,
        pid: 0,
        lockdown: ipc_schema::status::LockdownReport {
            profile: String::new(),
            stray_fds_closed: false,
            env_cleared: false,
            core_dumps_off: false,
            dumpable_off: false,
            no_new_privs: false,
            capabilities_dropped: false,
            landlock_abi: 0,
            landlock_min_abi: 0,
            landlock: ipc_schema::status::LandlockStatus::NotEnforced,
            seccomp_filter: false,
            seccomp_allowed_syscalls: 0,
            namespaces: vec![],
            exec_tier: None,
            exec_tier_why: None,
            degraded: vec![],
            windows: None,
        },
    }
}

fn spec(work: &Path, argv: &[&str]) -> CommandSpec {
    CommandSpec {
        hide: Default::default(),
        user: None,
        slot: None,
        argv: argv.iter().map(|s| s.to_string()).collect(),
        cwd: work.to_path_buf(),
        grants: vec![
            PathGrant {
                path: work.to_path_buf(),
                access: GrantAccess::ReadWrite,
            },
            PathGrant {
                path: gatehouse_tests::exec_probe(),
                access: GrantAccess::Read,
            },
        ],
        env: vec![("LANG".into(), "C.UTF-8".into())],
        network: NetworkMode::None,
        limits: Limits::default(),
    }
}

fn probe_argv(op: &[&str]) -> Vec<String> {
    let mut v = vec![gatehouse_tests::exec_probe().to_string_lossy().into_owned()];
    v.extend(op.iter().map(|s| s.to_string()));
    v
}

fn locked() -> Helper {
    Helper::spawn(&[])
}

#[test]
fn hello_reports_the_exec_lockdown_and_the_kernel_agrees() {
    let h = locked();
    assert_eq!(h.hello.role, Role::Exec);
    assert_eq!(h.hello.lockdown.profile, "exec");
    assert!(h.hello.lockdown.seccomp_filter);
    let st = sandbox::process::read_proc_status(h.child.id()).unwrap();
    assert_eq!(st.seccomp, 2);
    assert!(st.no_new_privs);
    assert_eq!((st.cap_eff, st.cap_prm), (0, 0));
    // Never root toward the host, even when started by root.
    assert_ne!(st.uid, 0);
}

#[test]
fn a_command_runs_and_its_output_and_status_come_back() {
    let mut h = locked();
    let work = gatehouse_tests::sandbox_owned_dir("gh-exec-");
    let (out, err, end) = h.run(spec(
        work.path(),
        &["/bin/sh", "-c", "echo out; echo err >&2; exit 3"],
    ));
    assert_eq!(out, "out\n");
    assert_eq!(err, "err\n");
    assert_eq!(end.outcome, RunOutcome::Exited(3));
    assert_eq!((end.stdout_dropped, end.stderr_dropped), (0, 0));
}

#[test]
fn the_command_writes_its_working_root_and_nothing_else() {
    let mut h = locked();
    let work = gatehouse_tests::sandbox_owned_dir("gh-exec-");
    let (out, _, end) = h.run(spec(
        work.path(),
        &["/bin/sh", "-c", "echo hi > made && cat made"],
    ));
    assert_eq!((out.as_str(), end.outcome), ("hi\n", RunOutcome::Exited(0)));
    assert_eq!(
        std::fs::read_to_string(work.path().join("made")).unwrap(),
        "hi\n"
    );
    let mut s = spec(work.path(), &[]);
    s.argv = probe_argv(&["write", "/etc/gatehouse-escape"]);
    let (out, _, end) = h.run(s);
    assert_eq!(
        (out.as_str(), end.outcome),
        ("errno EROFS\n", RunOutcome::Exited(1))
    );
}

#[test]
fn output_beyond_the_limit_is_counted_not_kept_and_large_output_comes_in_pieces() {
    let mut h = locked();
    let work = gatehouse_tests::sandbox_owned_dir("gh-exec-");
    let mut s = spec(work.path(), &[]);
    s.argv = probe_argv(&["spew", "5000"]);
    s.limits.stdout_max = 1000;
    let (out, _, end) = h.run(s);
    // 5000 bytes, then the probe's "ok\n".
    assert_eq!(out, "a".repeat(1000));
    assert_eq!(end.stdout_dropped, 4003);

    let mut s = spec(work.path(), &[]);
    s.argv = probe_argv(&["spew", "700000"]);
    s.limits.stdout_max = 1 << 20;
    let (run, _) = h.start(s).unwrap();
    let (out, _, end, replies) = h.collect(run);
    assert_eq!(out.len(), 700_003);
    assert_eq!(end.outcome, RunOutcome::Exited(0));
    assert!(
        replies >= 3,
        "700000 bytes fit in no fewer than 3 pieces of 256 KiB"
    );
}

#[test]
fn stop_kills_the_whole_sandbox() {
    let mut h = locked();
    let work = gatehouse_tests::sandbox_owned_dir("gh-exec-");
    let marker = "432101";
    let (run, _) = h
        .start(spec(
            work.path(),
            &["/bin/sh", "-c", &format!("sleep {marker} & sleep {marker}")],
        ))
        .unwrap();
    // Wait until both sleeps exist, then stop.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while count_cmdline(&format!("sleep {marker}")) < 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "the sleeps never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let reply = h.request(Body::Exec(ExecRequest::Stop { run }));
    assert_eq!(reply, Body::ExecReply(ExecReply::Stopping { run }));
    let (_, _, end, _) = h.collect(run);
    assert_eq!(end.outcome, RunOutcome::Stopped);
    assert_eq!(count_cmdline(&format!("sleep {marker}")), 0);
}

#[test]
fn the_time_limit_kills_the_sandbox() {
    let mut h = locked();
    let work = gatehouse_tests::sandbox_owned_dir("gh-exec-");
    let mut s = spec(work.path(), &["/bin/sleep", "30"]);
    s.limits.timeout_ms = 300;
    let (_, _, end) = h.run(s);
    assert_eq!(end.outcome, RunOutcome::TimedOut { after_ms: 300 });
}

#[test]
fn refusals_say_why() {
    let mut h = locked();
    let work = gatehouse_tests::sandbox_owned_dir("gh-exec-");
    let other = gatehouse_tests::sandbox_owned_dir("gh-exec-");
    assert_eq!(
        h.start(spec(work.path(), &["sudo", "id"])).unwrap_err(),
        (
            ErrorCode::Refused,
            "sudo is denied by the built-in command policy (privilege escalation)".into()
        )
    );
    let mut s = spec(work.path(), &["/bin/true"]);
    s.cwd = other.path().to_path_buf();
    let (code, msg) = h.start(s).unwrap_err();
    assert_eq!(code, ErrorCode::Refused);
    assert!(msg.contains("is not inside any grant"), "{msg}");
    let mut s = spec(work.path(), &["/bin/true"]);
    s.limits.timeout_ms = 600_001;
    assert_eq!(
        h.start(s).unwrap_err(),
        (
            ErrorCode::Invalid,
            "limit timeout_ms = 600001 is outside 1..=600000".into()
        )
    );
    let mut s = spec(work.path(), &["/bin/true"]);
    s.network = NetworkMode::Proxy { token: "t".into() };
    let (code, msg) = h.start(s).unwrap_err();
    assert_eq!(code, ErrorCode::Invalid);
    assert!(msg.contains("must carry the connector"), "{msg}");
    // Windows' form of the proxy (the broker's loopback listener) is not a network here.
    let mut s = spec(work.path(), &["/bin/true"]);
    s.network = NetworkMode::LoopbackProxy {
        token: "t".into(),
        port: 47_301,
    };
    let (code, msg) = h.start(s).unwrap_err();
    assert_eq!(code, ErrorCode::Invalid);
    assert!(
        msg.starts_with("a proxy on a loopback port is Windows'"),
        "{msg}"
    );
    // Nor is a command slot (the SID of a command's ACEs on Windows).
    let mut s = spec(work.path(), &["/bin/true"]);
    s.slot = Some(ipc_schema::exec::CommandSlot::new(0).unwrap());
    assert_eq!(
        h.start(s).unwrap_err(),
        (
            ErrorCode::Invalid,
            "a command slot is Windows' (its ACEs' SID); a Start on Linux names none".into()
        )
    );
    let (code, msg) = h
        .start(spec(work.path(), &["no-such-program-here"]))
        .unwrap_err();
    assert_eq!(code, ErrorCode::NotFound);
    assert!(
        msg.starts_with("no-such-program-here: command not found in the sandbox"),
        "{msg}"
    );
    let mut s = spec(work.path(), &["/bin/true"]);
    s.grants.push(PathGrant {
        path: "/".into(),
        access: GrantAccess::Read,
    });
    let (code, msg) = h.start(s).unwrap_err();
    assert_eq!(code, ErrorCode::Refused);
    assert!(msg.contains("/ would expose every home directory"), "{msg}");
}

#[test]
fn secret_looking_variables_never_pass() {
    let mut h = locked();
    let work = gatehouse_tests::sandbox_owned_dir("gh-exec-");
    let mut s = spec(work.path(), &[]);
    s.argv = probe_argv(&["env", "GITHUB_TOKEN"]);
    s.env.push(("GITHUB_TOKEN".into(), "ghp_secret".into()));
    s.env.push(("LD_PRELOAD".into(), "/x.so".into()));
    let (run, report) = h.start(s).unwrap();
    assert_eq!(
        report.env_dropped,
        vec![
            "GITHUB_TOKEN: looks like a secret".to_string(),
            "LD_PRELOAD: LD_ variables are never passed".to_string()
        ]
    );
    let (out, _, _, _) = h.collect(run);
    assert_eq!(String::from_utf8_lossy(&out), "ok <unset>\n");
}

#[test]
fn requests_are_answered_while_a_poll_waits() {
    let mut h = locked();
    let work = gatehouse_tests::sandbox_owned_dir("gh-exec-");
    let (slow, _) = h.start(spec(work.path(), &["/bin/sleep", "30"])).unwrap();
    let waiting = h.send(Body::Exec(ExecRequest::Poll {
        run: slow,
        wait_ms: 30_000,
    }));
    assert_eq!(h.request(Body::Ping { target: None }), Body::Pong);
    let (out, _, end) = h.run(spec(work.path(), &["/bin/echo", "quick"]));
    assert_eq!(
        (out.as_str(), end.outcome),
        ("quick\n", RunOutcome::Exited(0))
    );
    let second = h.request(Body::Exec(ExecRequest::Poll {
        run: slow,
        wait_ms: 0,
    }));
    assert_eq!(
        second,
        Body::Error(ipc_schema::ErrorReply::new(
            ErrorCode::Invalid,
            format!("a Poll for {slow} is already waiting")
        ))
    );
    h.request(Body::Exec(ExecRequest::Stop { run: slow }));
    match h.wait_reply(waiting) {
        Body::ExecReply(ExecReply::Progress { end: Some(end), .. }) => {
            assert_eq!(end.outcome, RunOutcome::Stopped)
        }
        other => panic!("unexpected {other:?}"),
    }
    let gone = h.request(Body::Exec(ExecRequest::Poll {
        run: slow,
        wait_ms: 0,
    }));
    assert_eq!(
        gone,
        Body::Error(ipc_schema::ErrorReply::new(
            ErrorCode::Invalid,
            format!("no {slow}: it never existed, or its end was collected")
        ))
    );
}

#[test]
fn a_descriptor_no_message_takes_ends_the_helper() {
    let mut h = locked();
    let (a, _b) = UnixStream::pair().unwrap();
    h.send_with_fd(Body::Ping { target: None }, &OwnedFd::from(a));
    // The Ping may be answered first; then the helper exits.
    let mut frames = 0;
    while h.read_env().is_some() {
        frames += 1;
    }
    assert!(frames <= 1);
    let st = h.child.wait().unwrap();
    assert_eq!(st.code(), Some(70));
}

#[test]
fn a_message_for_another_helper_ends_the_helper() {
    let mut h = locked();
    h.send(Body::Net(ipc_schema::net::NetRequest::Check {
        url: "https://example.com/".into(),
    }));
    assert!(h.read_env().is_none());
    assert_eq!(h.child.wait().unwrap().code(), Some(70));
}

fn count_cmdline(needle: &str) -> usize {
    let mut n = 0;
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        if let Ok(c) = std::fs::read(e.path().join("cmdline")) {
            let c: Vec<u8> = c.iter().map(|&b| if b == 0 { b' ' } else { b }).collect();
            if String::from_utf8_lossy(&c).trim_end() == needle {
                n += 1;
            }
        }
    }
    n
}

/// Starts `probe connect-tcp 127.0.0.1:3128` with the proxy network in `h`, acting as the
/// broker's end of the connector: the client connection must arrive there as a descriptor.
fn proxy_round_trip(h: &mut Helper) {
    let work = gatehouse_tests::sandbox_owned_dir("gh-exec-");
    let (broker_end, sandbox_end) = UnixStream::pair().unwrap();
    let mut s = spec(work.path(), &[]);
    s.argv = probe_argv(&["env", "HTTPS_PROXY"]);
    s.network = NetworkMode::Proxy {
        token: "tok-123".into(),
    };
    let id = h.send_with_fd(
        Body::Exec(ExecRequest::Start(Box::new(s.clone()))),
        &OwnedFd::from(sandbox_end),
    );
    let Body::ExecReply(ExecReply::Started { run, .. }) = h.wait_reply(id) else {
        panic!("not started");
    };
    let (out, _, end, _) = h.collect(run);
    assert_eq!(
        String::from_utf8_lossy(&out),
        "ok http://gatehouse:tok-123@127.0.0.1:3128\n"
    );
    assert_eq!(end.outcome, RunOutcome::Exited(0));

    // A client connection inside arrives at the broker's end as a descriptor; what the
    // "proxy" writes on it reaches the command.
    drop(broker_end);
    let (broker_end, sandbox_end) = UnixStream::pair().unwrap();
    s.argv = vec![
        "/usr/bin/curl".into(),
        "-sS".into(),
        "-p".into(),
        "http://allowed.test:443/".into(),
    ];
    let id = h.send_with_fd(
        Body::Exec(ExecRequest::Start(Box::new(s))),
        &OwnedFd::from(sandbox_end),
    );
    let Body::ExecReply(ExecReply::Started { run, .. }) = h.wait_reply(id) else {
        panic!("not started");
    };
    let mut fds = std::collections::VecDeque::new();
    let mut byte = [0u8; 1];
    broker_end
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let n = sandbox::linux::command::fdpass::recv_with_fds(broker_end.as_fd(), &mut byte, &mut fds)
        .expect("a connection from the bridge");
    assert_eq!((n, byte[0], fds.len()), (1, b'P', 1));
    let mut client = std::net::TcpStream::from(fds.pop_front().unwrap());
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(client.read(&mut b).unwrap(), 1);
        head.push(b[0]);
    }
    let head = String::from_utf8_lossy(&head);
    assert!(
        head.starts_with("CONNECT allowed.test:443 HTTP/1.1\r\n"),
        "{head}"
    );
    client
        .write_all(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
        .unwrap();
    let (_, err, end, _) = h.collect(run);
    assert!(
        String::from_utf8_lossy(&err).contains("CONNECT tunnel failed, response 403"),
        "{}",
        String::from_utf8_lossy(&err)
    );
    assert_eq!(end.outcome, RunOutcome::Exited(56));
}

#[test]
fn the_proxy_network_bridges_connections_to_the_connector_unlocked_helper() {
    // The bridge and the connector protocol, without the helper's own lockdown (test build).
    let mut h = Helper::spawn(&["--test-skip-lockdown"]);
    proxy_round_trip(&mut h);
}

#[test]
fn the_proxy_network_bridges_connections_to_the_connector() {
    let mut h = locked();
    proxy_round_trip(&mut h);
}

/// An agent's Start (`gatehouse run`'s): its state directory as `HOME` (in the agent-state
/// directory, one of `--protect`, whose other entries stay out of sight), its files in `/tmp`,
/// gatehouse's variables, and a gateway socket inside whose connections reach the connector as
/// `G` with the descriptor. Without the connector it is refused; a state directory elsewhere,
/// or a grant that would show the agent-state directory, too.
#[test]
fn an_agent_start_gets_its_home_files_variables_and_gateway_socket() {
    use ipc_schema::exec::{AgentRun, UserCommand, CONNECTOR_GATEWAY};
    let agents = gatehouse_tests::sandbox_owned_dir("gh-exec-agents-");
    let home = agents.path().join("agent");
    let other = agents.path().join("other");
    for d in [&home, &other] {
        std::fs::create_dir(d).unwrap();
        if nix::unistd::geteuid().is_root() {
            std::os::unix::fs::chown(d, Some(65534), Some(65534)).unwrap();
        }
    }
    std::fs::write(other.join("login"), "another agent's\n").unwrap();
    let protect = agents.path().to_str().unwrap().to_string();
    let mut h = Helper::spawn(&["--protect", &protect]);
    let work = gatehouse_tests::sandbox_owned_dir("gh-exec-");
    let agent = |state: &Path| UserCommand {
        pass_env: vec![],
        long_run: true,
        agent: Some(AgentRun {
            state_home: state.to_path_buf(),
            tmp_files: vec![("/tmp/gatehouse-token".into(), "tok".into())],
            vars: vec![("GATEHOUSE_SESSION_TOKEN".into(), "tok".into())],
            gateway_socket: "/tmp/gatehouse-gateway.sock".into(),
        }),
        server: None,
    };
    let script = "echo \"$HOME $GATEHOUSE_SESSION_TOKEN $(cat /tmp/gatehouse-token)\"; ls \"$HOME/..\"; cat \"$HOME/../other/login\" 2>&1 | sed 's/.*: //'; python3 -c 'import socket; s=socket.socket(socket.AF_UNIX); s.connect(\"/tmp/gatehouse-gateway.sock\"); print(s.recv(5).decode())'";
    let mut s = spec(work.path(), &["/bin/sh", "-c", script]);
    s.grants.push(PathGrant {
        path: home.clone(),
        access: GrantAccess::ReadWrite,
    });
    s.user = Some(Box::new(agent(&home)));

    // Without the connector: refused, nothing runs.
    let (code, msg) = h.start(s.clone()).unwrap_err();
    assert_eq!(code, ErrorCode::Invalid);
    assert!(msg.contains("must carry the connector"), "{msg}");

    let (broker_end, sandbox_end) = UnixStream::pair().unwrap();
    let id = h.send_with_fd(
        Body::Exec(ExecRequest::Start(Box::new(s.clone()))),
        &OwnedFd::from(sandbox_end),
    );
    let Body::ExecReply(ExecReply::Started { run, .. }) = h.wait_reply(id) else {
        panic!("not started");
    };
    broker_end
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut fds = std::collections::VecDeque::new();
    let mut byte = [0u8; 1];
    let n = sandbox::linux::command::fdpass::recv_with_fds(broker_end.as_fd(), &mut byte, &mut fds)
        .expect("a connection from the gateway socket");
    assert_eq!((n, byte[0], fds.len()), (1, CONNECTOR_GATEWAY, 1));
    let mut gateway = UnixStream::from(fds.pop_front().unwrap());
    gateway.write_all(b"hello").unwrap();
    let (out, err, end, _) = h.collect(run);
    assert_eq!(
        end.outcome,
        RunOutcome::Exited(0),
        "{}",
        String::from_utf8_lossy(&err)
    );
    assert_eq!(
        String::from_utf8_lossy(&out),
        format!(
            "{} tok tok\nagent\nNo such file or directory\nhello\n",
            home.display()
        )
    );

    // A state directory that is not in the agent-state directory is refused.
    let mut elsewhere = s.clone();
    elsewhere.user = Some(Box::new(agent(work.path())));
    let (_, sandbox_end) = UnixStream::pair().unwrap();
    let id = h.send_with_fd(
        Body::Exec(ExecRequest::Start(Box::new(elsewhere))),
        &OwnedFd::from(sandbox_end),
    );
    match h.wait_reply(id) {
        Body::Error(e) => assert!(
            e.message
                .contains("is not in gatehouse's agent-state directory"),
            "{}",
            e.message
        ),
        other => panic!("{other:?}"),
    }
    // A grant that holds the agent-state directory would show the other agent's login.
    let mut wide = s.clone();
    wide.grants.push(PathGrant {
        path: agents.path().parent().unwrap().to_path_buf(),
        access: GrantAccess::Read,
    });
    let (_, sandbox_end) = UnixStream::pair().unwrap();
    let id = h.send_with_fd(
        Body::Exec(ExecRequest::Start(Box::new(wide))),
        &OwnedFd::from(sandbox_end),
    );
    match h.wait_reply(id) {
        Body::Error(e) => assert!(
            e.message
                .contains("it holds gatehouse's agent-state directory"),
            "{}",
            e.message
        ),
        other => panic!("{other:?}"),
    }
}

/// A third-party MCP server's Start: its stdin and stdout are one socket whose other end comes
/// out over the connector as one `S` byte with the descriptor; what it writes to stderr comes
/// back in `Poll` as stderr and never on the socket; closing the socket is EOF on its stdin.
/// Its `HOME` is its state directory (in the agent-state directory, whose other entries stay
/// out of sight), and the real home of the user running it is not visible.
#[test]
fn a_server_start_speaks_on_its_stdio_socket_and_keeps_stderr_apart() {
    use ipc_schema::exec::{ServerRun, UserCommand, CONNECTOR_STDIO};
    use std::io::BufRead;
    let agents = gatehouse_tests::sandbox_owned_dir("gh-exec-servers-");
    let home = agents.path().join("server");
    let other = agents.path().join("other");
    for d in [&home, &other] {
        std::fs::create_dir(d).unwrap();
        if nix::unistd::geteuid().is_root() {
            std::os::unix::fs::chown(d, Some(65534), Some(65534)).unwrap();
        }
    }
    std::fs::write(other.join("login"), "another agent's\n").unwrap();
    // Something in the real home of the user running the test (root's, or the test user's,
    // whose home is the helper's own): readable here, not in the sandbox.
    let real_home = sandbox::linux::command::identity::home_of(nix::unistd::geteuid().as_raw());
    let marker = tempfile::Builder::new()
        .prefix(".gh-server-marker-")
        .tempfile_in(&real_home)
        .unwrap();
    std::fs::write(marker.path(), "the user's\n").unwrap();
    assert_eq!(
        std::fs::read_to_string(marker.path()).unwrap(),
        "the user's\n"
    );
    let protect = agents.path().to_str().unwrap().to_string();
    let mut h = Helper::spawn(&["--protect", &protect]);
    let work = gatehouse_tests::sandbox_owned_dir("gh-exec-");
    let server = |state: &Path| UserCommand {
        long_run: true,
        server: Some(ServerRun {
            state_home: state.to_path_buf(),
            run_name: None,
        }),
        ..Default::default()
    };
    let script = r#"echo "server starting" >&2; echo "home:$HOME"; ls "$HOME/.."; cat "$HOME/../other/login" 2>&1 | sed 's/.*: //'; cat "$1" 2>&1 | sed 's/.*: //'; while read l; do echo "got:$l"; done; echo "stdin closed" >&2"#;
    let marker_arg = marker.path().to_str().unwrap();
    let mut s = spec(work.path(), &["/bin/sh", "-c", script, "sh", marker_arg]);
    s.grants.push(PathGrant {
        path: home.clone(),
        access: GrantAccess::ReadWrite,
    });
    s.user = Some(Box::new(server(&home)));

    // Without the connector: refused, nothing runs.
    let (code, msg) = h.start(s.clone()).unwrap_err();
    assert_eq!(code, ErrorCode::Invalid);
    assert!(msg.contains("must carry the connector"), "{msg}");

    let start_with_connector = |h: &mut Helper, s: &CommandSpec| {
        let (broker_end, sandbox_end) = UnixStream::pair().unwrap();
        let id = h.send_with_fd(
            Body::Exec(ExecRequest::Start(Box::new(s.clone()))),
            &OwnedFd::from(sandbox_end),
        );
        (h.wait_reply(id), broker_end)
    };
    let (reply, connector) = start_with_connector(&mut h, &s);
    let Body::ExecReply(ExecReply::Started { run, .. }) = reply else {
        panic!("not started: {reply:?}");
    };
    connector
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut fds = std::collections::VecDeque::new();
    let mut byte = [0u8; 1];
    let n = sandbox::linux::command::fdpass::recv_with_fds(connector.as_fd(), &mut byte, &mut fds)
        .expect("the server's stdio socket");
    assert_eq!((n, byte[0], fds.len()), (1, CONNECTOR_STDIO, 1));
    let stdio = UnixStream::from(fds.pop_front().unwrap());
    stdio
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut lines = std::io::BufReader::new(stdio.try_clone().unwrap());
    let line = |lines: &mut std::io::BufReader<UnixStream>| {
        let mut l = String::new();
        lines.read_line(&mut l).expect("a line from the server");
        l
    };
    assert_eq!(line(&mut lines), format!("home:{}\n", home.display()));
    assert_eq!(line(&mut lines), "server\n");
    assert_eq!(line(&mut lines), "No such file or directory\n");
    assert_eq!(line(&mut lines), "No such file or directory\n");
    (&stdio).write_all(b"ping\n").unwrap();
    assert_eq!(line(&mut lines), "got:ping\n");
    (&stdio).write_all(b"{\"jsonrpc\":\"2.0\"}\n").unwrap();
    assert_eq!(line(&mut lines), "got:{\"jsonrpc\":\"2.0\"}\n");
    // Its stderr comes back as stderr (it was written before anything on the socket).
    match h.request(Body::Exec(ExecRequest::Poll {
        run,
        wait_ms: 10_000,
    })) {
        Body::ExecReply(ExecReply::Progress {
            stdout,
            stderr,
            end,
            ..
        }) => {
            assert_eq!(
                (stdout.as_slice(), stderr.as_slice(), end),
                (&b""[..], &b"server starting\n"[..], None)
            );
        }
        other => panic!("{other:?}"),
    }
    // The broker closes its end: EOF on the server's stdin, and it ends on its own.
    drop(lines);
    drop(stdio);
    let (out, err, end, _) = h.collect(run);
    assert_eq!(
        (out.as_slice(), String::from_utf8_lossy(&err).as_ref()),
        (&b""[..], "stdin closed\n")
    );
    assert_eq!(end.outcome, RunOutcome::Exited(0));
    // The one S byte was all: the connector ends with the run.
    assert_eq!(
        sandbox::linux::command::fdpass::recv_with_fds(connector.as_fd(), &mut byte, &mut fds)
            .unwrap(),
        0
    );

    // A server that closes its stdin and stdout but keeps running: the broker reads EOF at
    // once, so nothing else in the sandbox (its init) or in the helper holds the socket.
    let mut quiet = s.clone();
    quiet.argv = [
        "/bin/sh",
        "-c",
        r#"read l; echo "got:$l"; exec 0<&- 1>&-; exec sleep 600"#,
    ]
    .iter()
    .map(|a| a.to_string())
    .collect();
    let (reply, connector) = start_with_connector(&mut h, &quiet);
    let Body::ExecReply(ExecReply::Started { run, .. }) = reply else {
        panic!("not started: {reply:?}");
    };
    connector
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let n = sandbox::linux::command::fdpass::recv_with_fds(connector.as_fd(), &mut byte, &mut fds)
        .expect("the server's stdio socket");
    assert_eq!((n, byte[0], fds.len()), (1, CONNECTOR_STDIO, 1));
    let mut stdio = UnixStream::from(fds.pop_front().unwrap());
    stdio
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    stdio.write_all(b"x\n").unwrap();
    let mut rest = Vec::new();
    stdio
        .read_to_end(&mut rest)
        .expect("EOF while the server still runs");
    assert_eq!(rest, b"got:x\n");
    match h.request(Body::Exec(ExecRequest::Poll { run, wait_ms: 0 })) {
        Body::ExecReply(ExecReply::Progress { end, .. }) => assert_eq!(end, None),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        h.request(Body::Exec(ExecRequest::Stop { run })),
        Body::ExecReply(ExecReply::Stopping { .. })
    ));
    assert_eq!(h.collect(run).2.outcome, RunOutcome::Stopped);

    // Refused, each with the connector: not a long run; an agent and a server at once; a state
    // directory outside the agent-state directory.
    let mut short = s.clone();
    short.user = Some(Box::new(UserCommand {
        long_run: false,
        ..server(&home)
    }));
    let mut both = s.clone();
    both.user = Some(Box::new(UserCommand {
        agent: Some(ipc_schema::exec::AgentRun {
            state_home: home.clone(),
            tmp_files: vec![],
            vars: vec![],
            gateway_socket: "/tmp/gatehouse-gateway.sock".into(),
        }),
        ..server(&home)
    }));
    let mut elsewhere = s.clone();
    elsewhere.user = Some(Box::new(server(work.path())));
    for (spec, code, why) in [
        (short, ErrorCode::Invalid, "must be a long_run"),
        (both, ErrorCode::Invalid, "never both"),
        (
            elsewhere,
            ErrorCode::Refused,
            "is not in gatehouse's agent-state directory",
        ),
    ] {
        match start_with_connector(&mut h, &spec).0 {
            Body::Error(e) => {
                assert_eq!(e.code, code, "{}", e.message);
                assert!(e.message.contains(why), "{}", e.message);
            }
            other => panic!("{other:?}"),
        }
    }
}
