// Drives the Linux binaries (ipc_schema::platform::Missing elsewhere).
#![cfg(target_os = "linux")]
//! `gatehouse run`: an agent inside the exec sandbox, reaching the broker's gateway channel
//! (and nothing else of gatehouse) through the socket bridge, under a one-use launch token.
//!
//! The agent is a small Python script (the system's python3, visible in the sandbox as part of
//! the read-only system) that does what an agent CLI does: it reads `$GATEHOUSE_MCP_CONFIG`,
//! starts the server it names (`gatehouse mcp`) and speaks MCP JSON-RPC lines to it. It also
//! probes what it must not reach, and reports everything as JSON lines on stdout.
//! Build first: `cargo build --workspace --all-features`.

#![forbid(unsafe_code)]

mod mcp_support;

use gatehouse_tests::{bin, Conn};
use ipc_schema::tier::ConfinementTier;
use ipc_schema::tool::{ResumeToken, ToolCall, ToolName};
use ipc_schema::ui::{AuditEntry, Choice, Decision, UiReply, UiRequest};
use ipc_schema::{Body, ErrorCode};
use mcp_support::{Broker, Instance, PATIENCE};
use serde_json::{json, Value};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};

/// The fake agent. argv: the real ui.sock path, a loopback TCP port outside.
const AGENT: &str = r#"
import errno, json, os, socket, subprocess, sys

def emit(k, v):
    print(json.dumps({k: v}), flush=True)

def connect_unix(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path)
        return "ok"
    except OSError as e:
        return "errno " + errno.errorcode[e.errno]
    finally:
        s.close()

def connect_tcp(port):
    try:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    except OSError as e:
        return "errno " + errno.errorcode[e.errno]
    try:
        s.connect(("127.0.0.1", port))
        return "ok"
    except OSError as e:
        return "errno " + errno.errorcode[e.errno]
    finally:
        s.close()

class Server:
    def __init__(self):
        cfg = json.load(open(os.environ["GATEHOUSE_MCP_CONFIG"]))
        srv = cfg["mcpServers"]["gatehouse"]
        self.p = subprocess.Popen([srv["command"]] + srv["args"], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.n = 0

    def send(self, msg):
        self.p.stdin.write((json.dumps(msg) + "\n").encode())
        self.p.stdin.flush()

    def rpc(self, method, params):
        self.n += 1
        self.send({"jsonrpc": "2.0", "id": self.n, "method": method, "params": params})
        while True:
            line = self.p.stdout.readline()
            if not line:
                self.p.wait()
                return {"closed": self.p.returncode, "stderr": self.p.stderr.read().decode()}
            m = json.loads(line)
            if m.get("id") == self.n:
                return m

    def initialize(self):
        r = self.rpc("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                    "clientInfo": {"name": "fake-agent", "version": "1"}})
        if "result" in r:
            self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return r

    def call(self, name, args):
        return self.rpc("tools/call", {"name": name, "arguments": args})["result"]

emit("env", {k: ("<set>" if k == "GATEHOUSE_SESSION_TOKEN" else v)
             for k, v in os.environ.items() if k.startswith("GATEHOUSE_")})
# The agent "leaks" its token, so that the test can present it after the run.
open("leaked-token", "w").write(os.environ["GATEHOUSE_SESSION_TOKEN"])
emit("ui", connect_unix(sys.argv[1]))
emit("gateway", connect_unix(os.environ["GATEHOUSE_GATEWAY_SOCKET"]))
emit("tcp", connect_tcp(int(sys.argv[2])))

s = Server()
emit("server", s.initialize()["result"]["serverInfo"]["name"])
emit("tools", sorted(t["name"] for t in s.rpc("tools/list", {})["result"]["tools"]))
emit("read", s.call("read_file", {"path": "hello.txt"}))
# A second gateway in the same run: a session of its own, under the run's profile.
second = Server()
emit("second", second.initialize())
emit("second_tools", len(second.rpc("tools/list", {})["result"]["tools"]))
second.p.stdin.close()
second.p.wait()
emit("write", s.call("write_file", {"path": "hello.txt", "content": "changed by the agent\n"}))
s.p.stdin.close()
s.p.wait()
emit("done", s.p.returncode)
"#;

fn root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// A project the agent may write (as root, the sandbox runs as the directory's owner: nobody).
fn instance() -> Instance {
    let i = Instance::new(None);
    std::fs::write(i.project.join("agent.py"), AGENT).unwrap();
    if root() {
        for p in [i.project.clone(), i.file("hello.txt"), i.file("agent.py")] {
            std::os::unix::fs::chown(&p, Some(65534), Some(65534)).unwrap();
        }
    }
    i
}

fn gatehouse_run(i: &Instance, run_args: &[&str], agent: &[&str]) -> Child {
    Command::new(bin("gatehouse"))
        .arg("--data-dir")
        .arg(&i.data)
        .arg("run")
        .args(run_args)
        .arg("--")
        .args(agent)
        .current_dir(&i.project)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start gatehouse run")
}

fn finish(child: Child) -> Output {
    child.wait_with_output().expect("wait for gatehouse run")
}

/// The agent's report: key -> value.
fn report(o: &Output) -> serde_json::Map<String, Value> {
    let mut m = serde_json::Map::new();
    for line in String::from_utf8_lossy(&o.stdout).lines() {
        let v: Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("agent line {line:?} is not JSON: {e}"));
        for (k, v) in v.as_object().unwrap() {
            m.insert(k.clone(), v.clone());
        }
    }
    m
}

fn audit(b: &Broker) -> Vec<AuditEntry> {
    b.audit()
}

fn result_text(r: &Value) -> String {
    r["content"]
        .as_array()
        .unwrap_or_else(|| panic!("no content: {r}"))
        .iter()
        .map(|c| c["text"].as_str().unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Presents `token` on a fresh gateway connection, as anything that found it could: it must be
/// refused, no session answering to it.
fn assert_token_refused(i: &Instance, token: &str) {
    let mut gw = Conn::connect(&i.data.join("run/gateway.sock")).unwrap();
    gw.set_timeout(Some(PATIENCE));
    match gw.request(Body::ToolCall(ToolCall::OpenSession {
        resume: Some(ResumeToken(token.to_string())),
        profile: None,
    })) {
        Body::Error(e) => {
            assert_eq!(e.code, ErrorCode::Refused);
            assert_eq!(e.message, "unknown resume token: no such session");
        }
        other => panic!("a revoked token opened a session: {other:?}"),
    }
}

#[test]
fn an_agent_uses_the_gateway_alone_and_its_token_dies_with_the_run() {
    let i = instance();
    let b = i.broker(&[]);
    let ui_sock = i.data.join("run/ui.sock");
    let outside = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = outside.local_addr().unwrap().port().to_string();
    // Positive controls, outside the sandbox: ui.sock and the TCP port both answer.
    assert!(Conn::connect(&ui_sock).is_ok());
    assert!(std::net::TcpStream::connect(outside.local_addr().unwrap()).is_ok());

    let child = gatehouse_run(
        &i,
        &["--own-tools", "write"],
        &[
            "/usr/bin/python3",
            "agent.py",
            ui_sock.to_str().unwrap(),
            &port,
        ],
    );
    // The write is asked: the proposal shows on the ui channel; the human denies it.
    let p = b.pending(1).remove(0);
    assert_eq!(p.tool, ToolName::WriteFile);
    assert_eq!(p.target, i.file("hello.txt").display().to_string());
    assert_eq!(
        i.file("hello.txt").metadata().unwrap().len(),
        6,
        "nothing is written while asked"
    );
    match b.ui().request(Body::Ui(UiRequest::Decide(Decision {
        proposal: p.id,
        digest: p.digest,
        choice: Choice::Deny,
    }))) {
        Body::UiReply(UiReply::Decided { .. }) => {}
        other => panic!("Decide answered {other:?}"),
    }
    let out = finish(child);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(0), "stderr:\n{stderr}");
    let r = report(&out);

    // What the agent was given.
    assert_eq!(
        r["env"],
        json!({
            "GATEHOUSE_GATEWAY_SOCKET": "/tmp/gatehouse-gateway.sock",
            "GATEHOUSE_MCP_CONFIG": "/tmp/gatehouse-mcp.json",
            "GATEHOUSE_SESSION_TOKEN": "<set>",
        })
    );
    assert!(
        stderr.contains("gatehouse run: generic recipe; its login and state: "),
        "{stderr}"
    );
    // The ui channel is out of reach (the runtime dir does not exist in the sandbox's view),
    // beside the gateway bridge, which answers.
    assert_eq!(r["ui"], "errno ENOENT");
    assert_eq!(r["gateway"], "ok");
    // No network without --allow-domain: no inet socket at all (the sandbox's seccomp rule).
    assert_eq!(r["tcp"], "errno EAFNOSUPPORT");

    // The agent's gatehouse mcp served its session: tools listed, the read allowed.
    assert_eq!(r["server"], "gatehouse");
    let tools: Vec<&str> = r["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert!(
        tools.contains(&"read_file") && tools.contains(&"write_file"),
        "{tools:?}"
    );
    assert_eq!(r["read"]["isError"], json!(false), "{}", r["read"]);
    assert!(result_text(&r["read"]).contains("hello"), "{}", r["read"]);
    // A second gateway in the same run gets a session of its own.
    assert_eq!(
        r["second"]["result"]["serverInfo"]["name"], "gatehouse",
        "{}",
        r["second"]
    );
    assert_eq!(r["second_tools"].as_u64(), Some(tools.len() as u64));
    // The write was denied, and the file is unchanged.
    assert_eq!(r["write"]["isError"], json!(true), "{}", r["write"]);
    assert!(
        result_text(&r["write"]).contains(&format!("proposal {}", p.id)),
        "{}",
        r["write"]
    );
    assert_eq!(
        std::fs::read_to_string(i.file("hello.txt")).unwrap(),
        "hello\n"
    );
    assert_eq!(r["done"], 0);

    // The token is revoked: presenting it again is refused.
    let token = std::fs::read_to_string(i.file("leaked-token")).unwrap();
    assert_eq!(token.len(), 64);
    // The run's end replaced the token's hash (before `gatehouse run` exited), so no session
    // answers to it any more.
    assert_token_refused(&i, &token);

    // The audit log has the issue and the revocation, and never the token; nor do stderr or
    // the broker's log.
    let rows = audit(&b);
    let session_of = |outcome: &str| {
        rows.iter()
            .find(|r| r.outcome == outcome)
            .and_then(|r| r.session.clone())
            .unwrap_or_else(|| panic!("no {outcome:?} row in {rows:#?}"))
    };
    let sid = session_of("launch token issued");
    assert_eq!(session_of("resumed"), sid);
    // Each of the run's two sessions is ended with its gateway.
    let ended: Vec<_> = rows
        .iter()
        .filter(|r| r.outcome == "ended; token revoked")
        .filter_map(|r| r.session.clone())
        .collect();
    assert_eq!(ended.len(), 2, "{rows:#?}");
    assert!(ended.contains(&sid), "{rows:#?}");
    assert!(rows
        .iter()
        .any(|r| r.session.as_deref() == Some(sid.as_str())
            && r.outcome.starts_with("run ended; token")));
    for row in &rows {
        let text = format!("{row:?}");
        assert!(!text.contains(&token), "the token is in audit row {row:?}");
    }
    assert!(!stderr.contains(&token));
    assert!(!b.log().contains(&token));
    drop(outside);
}

/// The run's token is good only through the run's own socket, inside its sandbox: presented
/// on the broker's gateway socket, during the run or after it, it opens nothing. An agent that
/// never connects leaves no session behind at all.
#[test]
fn a_run_token_opens_nothing_outside_its_sandbox_and_an_agent_that_never_connects_leaves_no_session(
) {
    use std::time::{Duration, Instant};
    let i = instance();
    let b = i.broker(&[]);
    // The agent writes its token where anything it runs later could find it, then waits.
    let mut child = gatehouse_run(
        &i,
        &["--own-tools", "write"],
        &[
            "/bin/sh",
            "-c",
            "printf %s \"$GATEHOUSE_SESSION_TOKEN\" > leaked-token; sleep 60",
        ],
    );
    let path = i.file("leaked-token");
    let deadline = Instant::now() + Duration::from_secs(30);
    let token = loop {
        match std::fs::read_to_string(&path) {
            Ok(t) if t.len() == 64 => break t,
            _ => {
                assert!(Instant::now() < deadline, "the agent never wrote its token");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    };
    // While the run lives, and its command is running (positive control: its start row).
    let started = |rows: &[AuditEntry]| {
        rows.iter()
            .any(|r| r.outcome == "started" && r.tool.as_deref() == Some("gatehouse run"))
    };
    assert!(started(&audit(&b)), "{:#?}", audit(&b));
    assert_token_refused(&i, &token);

    // `gatehouse run` is killed outright: its ui connection closes, and the broker stops the
    // agent's whole sandbox (the sleep does not outlive it).
    child.kill().unwrap();
    child.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let ended = loop {
        let rows = audit(&b);
        if let Some(r) = rows
            .iter()
            .find(|r| r.outcome == "ended" && r.tool.as_deref() == Some("gatehouse run"))
        {
            break r.clone();
        }
        assert!(Instant::now() < deadline, "no end row: {rows:#?}");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(ended.detail.contains("stopped"), "{ended:?}");
    assert_token_refused(&i, &token);
    // The agent never opened a session: no launch token was ever issued.
    let rows = audit(&b);
    assert!(
        !rows.iter().any(|r| r.outcome == "launch token issued"),
        "{rows:#?}"
    );
    for row in &rows {
        assert!(
            !format!("{row:?}").contains(&token),
            "the token is in {row:?}"
        );
    }
}

#[test]
fn the_sandboxed_gateway_refuses_a_missing_or_wrong_token_and_never_starts_a_broker() {
    let i = instance();
    let _b = i.broker(&[]);
    // An agent that drops the token, or forges one: the bridge lets no session open, and
    // `gatehouse mcp` does not fall back to starting a broker of its own inside.
    let script = r#"
cfg=$(sed -e 's/.*"command":"\([^"]*\)".*/\1/' "$GATEHOUSE_MCP_CONFIG")
echo '{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}' | env -u GATEHOUSE_SESSION_TOKEN "$cfg" mcp; echo "unset $?"
echo '{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}' | GATEHOUSE_SESSION_TOKEN=0000 "$cfg" mcp; echo "forged $?"
echo '{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}' | GATEHOUSE_SESSION_TOKEN= "$cfg" mcp; echo "empty $?"
echo '{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}' | GATEHOUSE_GATEWAY_SOCKET=/tmp/nothing.sock "$cfg" mcp; echo "nosocket $?"
ls -a "$HOME"
"#;
    let out = finish(gatehouse_run(&i, &[], &["/bin/sh", "-c", script]));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    for line in ["unset 1", "forged 1", "empty 1", "nosocket 1"] {
        assert!(
            stdout.lines().any(|l| l == line),
            "{line} in\n{stdout}\n{stderr}"
        );
    }
    // Each refusal is said on stderr and, for clients that hide stderr, as the JSON-RPC error
    // of the client's request.
    for why in [
        "GATEHOUSE_GATEWAY_SOCKET is set but GATEHOUSE_SESSION_TOKEN is not",
        "gatehouse run: that is not this run's token",
        "the session token is empty",
        "cannot reach the gateway at /tmp/nothing.sock: No such file or directory",
    ] {
        assert_eq!(stderr.matches(why).count(), 1, "{why}: {stderr}");
        let answered = stdout.lines().any(|l| {
            serde_json::from_str::<Value>(l).is_ok_and(|v| {
                v["id"] == 1
                    && v["error"]["code"] == -32001
                    && v["error"]["message"]
                        .as_str()
                        .is_some_and(|m| m.starts_with("gatehouse: ") && m.contains(why))
            })
        });
        assert!(answered, "{why} not answered in MCP:\n{stdout}");
    }
    // No broker was started inside (it would have made its dirs under the sandbox's HOME).
    assert_eq!(
        stdout
            .lines()
            .filter(|l| l.starts_with('.'))
            .collect::<Vec<_>>(),
        vec![".", ".."],
        "{stdout}"
    );
}

#[test]
fn an_unknown_profile_is_refused_before_the_agent_starts() {
    let i = instance();
    let _b = i.broker(&[]);
    let out = finish(gatehouse_run(
        &i,
        &["--profile", "nosuch"],
        &["/bin/sh", "-c", "touch started"],
    ));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{stderr}");
    assert!(
        stderr.contains("gatehouse run: there is no profile nosuch in the policy"),
        "{stderr}"
    );
    assert!(!Path::new(&i.file("started")).exists());
}

#[test]
fn with_the_proxy_the_agent_reaches_it_and_nothing_else() {
    let i = instance();
    let _b = i.broker(&[]);
    let outside = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = outside.local_addr().unwrap().port();
    // Positive control: the port answers from outside.
    assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_ok());
    // The bridge leads to the net-helper's proxy, which wants the run's token: a CONNECT
    // without it is answered 407.
    let script = format!(
        r#"
import errno, os, socket
def tcp(port, send=b""):
    s = socket.socket()
    try:
        s.connect(("127.0.0.1", port))
        s.sendall(send)
        return s.recv(100).decode().split("\r\n")[0]
    except OSError as e:
        return "errno " + errno.errorcode[e.errno]
print("proxy-var", os.environ["HTTPS_PROXY"].startswith("http://gatehouse:") and os.environ["HTTPS_PROXY"].endswith("@127.0.0.1:3128"))
print("bridge", tcp(3128, b"CONNECT allowed.test:443 HTTP/1.1\r\nHost: allowed.test:443\r\n\r\n"))
print("direct", tcp({port}))
"#
    );
    let out = finish(gatehouse_run(
        &i,
        &["--allow-domain", "allowed.test"],
        &["/usr/bin/python3", "-c", &script],
    ));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        stdout,
        "proxy-var True\nbridge HTTP/1.1 407 Proxy Authentication Required\ndirect errno ECONNREFUSED\n"
    );
}

/// Run as root (devcontainers, CI boxes), the agent runs as the project's owner or, for a
/// root-owned project, as nobody: by default it reads the project (root-only files stay
/// unreadable) and changes go through gatehouse's tools; `--own-tools write` on a root-owned
/// project is refused up front with what to do instead of failing write by write. As another
/// user, the same project is the user's own and `--own-tools write` writes it.
#[test]
fn a_root_owned_project_is_read_by_the_agent_and_own_writes_are_refused_with_what_to_do() {
    use std::os::unix::fs::PermissionsExt;
    let i = Instance::new(None);
    let _b = i.broker(&[]);
    let secret = i.file("root-only.txt");
    std::fs::write(&secret, "for root\n").unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let script =
        "cat hello.txt; cat root-only.txt 2>&1 | sed 's/.*: //'; touch made 2>&1 | sed 's/.*: //'";
    let out = finish(gatehouse_run(&i, &[], &["/bin/sh", "-c", script]));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    if root() {
        assert_eq!(stdout, "hello\nPermission denied\nRead-only file system\n");
    } else {
        // The user's own 0600 file is theirs to read; the project is still read-only.
        assert_eq!(stdout, "hello\nfor root\nRead-only file system\n");
    }
    assert!(!i.file("made").exists());
    let out = finish(gatehouse_run(
        &i,
        &["--own-tools", "write"],
        &["/bin/sh", "-c", "touch made"],
    ));
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    if root() {
        assert_eq!(out.status.code(), Some(125), "{stderr}");
        assert!(
            stderr.contains("belongs to root and the agent never runs as root")
                && stderr.contains("Run without --own-tools write"),
            "{stderr}"
        );
        assert!(!i.file("made").exists());
    } else {
        assert_eq!(out.status.code(), Some(0), "{stderr}");
        assert!(i.file("made").exists());
    }
}

/// Every connection through the run's egress proxy is an audit row of the run: a tunnel to an
/// allowed name, and the `403` for another name (which the agent sees as the proxy's answer).
#[test]
fn the_runs_egress_lands_in_the_audit_log() {
    use std::io::{Read, Write};
    let i = instance();
    // A loopback server at 127.0.0.2, which the net-helper's test address policy treats as
    // public; the test's DNS server resolves the allowed name there.
    let l = TcpListener::bind(("127.0.0.2", 0)).unwrap();
    let port = l.local_addr().unwrap().port().to_string();
    std::thread::spawn(move || {
        for mut c in l.incoming().flatten() {
            let mut buf = [0u8; 1024];
            let _ = c.read(&mut buf);
            let _ = c.write_all(
                b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello",
            );
        }
    });
    let dns = gatehouse_tests::LoopbackDns::start(&["allowed.test"], "127.0.0.2".parse().unwrap());
    // The broker's net-helper is the run's proxy: its test name server and address policy,
    // and the proxy's test port, are the broker's.
    let b = i.broker(&[
        "--test-net-arg=--nameserver",
        &format!("--test-net-arg={}", dns.addr),
        "--test-net-arg=--test-public-addr",
        "--test-net-arg=127.0.0.2",
        &format!("--test-proxy-port={port}"),
        "--test-no-sni-check",
    ]);
    let run = |url: &str| {
        finish(gatehouse_run(
            &i,
            &["--allow-domain", "allowed.test"],
            &["curl", "-sS", "-p", url],
        ))
    };
    let out = run(&format!("http://allowed.test:{port}/"));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "hello",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = run(&format!("http://denied.test:{port}/"));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains(&format!("gatehouse run: egress REFUSED denied.test:{port}")),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        out.status.code(),
        Some(56),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let deadline = std::time::Instant::now() + PATIENCE;
    let rows = loop {
        let rows: Vec<AuditEntry> = audit(&b)
            .into_iter()
            .filter(|r| r.kind.as_str() == "egress")
            .collect();
        if rows.len() >= 2 || std::time::Instant::now() > deadline {
            break rows;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert_eq!(rows.len(), 2, "{rows:#?}");
    assert_eq!(rows[0].outcome, "tunnelled");
    assert_eq!(
        rows[0].target.as_deref(),
        Some(format!("allowed.test:{port}").as_str())
    );
    assert_eq!(rows[1].outcome, "refused (403)");
    assert_eq!(
        rows[1].target.as_deref(),
        Some(format!("denied.test:{port}").as_str())
    );
    assert!(
        rows[1].detail.contains("egress REFUSED denied.test"),
        "{rows:#?}"
    );
    // Each row names the proxy session of a run, which that run's start row names (curl
    // opens no gateway session, so the rows are under none).
    let all = audit(&b);
    for r in &rows {
        assert_eq!(r.session, None, "{r:?}");
        let proxy = r
            .detail
            .split("for session ")
            .nth(1)
            .and_then(|t| t.split([' ', ')']).next())
            .unwrap_or_else(|| panic!("{r:?}"));
        assert!(proxy.starts_with("run-"), "{r:?}");
        assert!(
            all.iter().any(|x| x.outcome == "started"
                && x.tool.as_deref() == Some("gatehouse run")
                && x.detail.contains(&format!("(session {proxy})"))),
            "{r:?}: {all:#?}"
        );
        // The exec sandbox's tier is on every egress row, and on the run's start and end
        // rows, whose start line words it (this machine allows namespaces: the full tier).
        assert_eq!(r.tier, Some(ConfinementTier::Namespaces), "{r:?}");
    }
    for x in all
        .iter()
        .filter(|x| x.tool.as_deref() == Some("gatehouse run") && x.kind.as_str() == "execution")
    {
        assert_eq!(x.tier, Some(ConfinementTier::Namespaces), "{x:?}");
        if x.outcome == "started" {
            assert!(
                x.detail.contains(
                    "in the exec sandbox (namespace tier) with egress only to allowed.test"
                ),
                "{x:?}"
            );
        }
    }
}

/// `gatehouse run --mode unattended`: the human's choice travels in the launch request on the
/// ui channel, and the run's sessions are made in it; the agent's write, which the policy asks
/// about, is refused at once (no card, nobody asked), and the session's rows name the mode.
#[test]
fn a_run_in_unattended_mode_refuses_what_asks_without_a_card() {
    let i = instance();
    let b = i.broker(&[]);
    let ui_sock = i.data.join("run/ui.sock");
    let outside = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = outside.local_addr().unwrap().port().to_string();
    let out = finish(gatehouse_run(
        &i,
        &["--own-tools", "write", "--mode", "unattended"],
        &[
            "/usr/bin/python3",
            "agent.py",
            ui_sock.to_str().unwrap(),
            &port,
        ],
    ));
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(0), "stderr:\n{stderr}");
    let r = report(&out);
    assert_eq!(r["read"]["isError"], json!(false), "{}", r["read"]);
    assert_eq!(r["write"]["isError"], json!(true), "{}", r["write"]);
    let text = result_text(&r["write"]);
    assert!(
        text.contains("is unattended, and the policy asks before write_file"),
        "{text}"
    );
    assert_eq!(
        std::fs::read_to_string(i.file("hello.txt")).unwrap(),
        "hello\n"
    );
    let rows = audit(&b);
    assert!(
        !rows
            .iter()
            .any(|r| r.kind == ipc_schema::ui::AuditKind::Proposal),
        "a card was made: {rows:#?}"
    );
    let issued = rows
        .iter()
        .find(|r| r.outcome == "launch token issued")
        .unwrap_or_else(|| panic!("{rows:#?}"));
    assert!(issued.detail.ends_with("; mode unattended"), "{issued:?}");
    let sid = issued.session.clone().unwrap();
    for row in rows
        .iter()
        .filter(|r| r.session.as_deref() == Some(sid.as_str()))
    {
        assert_eq!(
            row.mode,
            Some(ipc_schema::mode::SessionMode::Unattended),
            "{row:?}"
        );
    }
    // A bad mode is refused by the command line before anything starts.
    let out = finish(gatehouse_run(
        &i,
        &["--mode", "yolo"],
        &["/bin/sh", "-c", "touch started"],
    ));
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown session mode \"yolo\""));
    assert!(!i.file("started").exists());
    drop(outside);
}
