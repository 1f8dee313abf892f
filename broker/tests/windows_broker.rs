// The broker on Windows (issue 19): started as a user starts it, driven over its named pipes.
#![cfg(windows)]
//! `gatehouse-broker.exe` for a private `--data-dir`, started as a user starts it: it starts the
//! spawner (its only child), hardens itself, has the spawner start the net-, exec- and
//! secrets-helper, checks each one's hello against what the spawner reads of it from outside
//! (`sandbox::wincfg::verify_observed`), opens the audit log with the key the secrets-helper
//! keeps in the Credential Manager, and serves its fronts on pipes only this user may open.
//!
//! Under Wine the broker, spawner and helpers run with `--allow-degraded` (Wine sets no
//! mitigation and restricts no token); on Windows they run without it.

#[path = "../../net-helper/tests/common/mod.rs"]
mod net;

use gatehouse_client::{Client, Dirs};
use ipc_schema::secrets::{SecretsReply, SecretsRequest};
use ipc_schema::status::{DoctorReport, OutboundProbe, ProcessState};
use ipc_schema::tool::{FetchUrl, ToolCall, ToolReply, ToolResult};
use ipc_schema::ui::UiRequest;
use ipc_schema::ui::{Choice, Decision, UiReply};
use ipc_schema::{Body, ErrorCode, Role};
use sandbox::windows::{running_under_wine, PeerProcess};
use std::ffi::OsStr;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The child mode of this test binary: connect to the pipe in this variable as a front.
const CHILD_PIPE: &str = "GATEHOUSE_TEST_FRONT_PIPE";
/// What the child sends there: `ping` (a kind the gateway may send) or `console-request` (one
/// it may not: a console's `ListPending`, which the gateway's route table has no row for).
const CHILD_SENDS: &str = "GATEHOUSE_TEST_FRONT_SENDS";

struct Broker {
    child: Child,
    dirs: Dirs,
    log: PathBuf,
    _root: tempfile::TempDir,
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Broker {
    /// Starts the broker and waits (up to 90 s) until its console pipe answers.
    fn start(extra: &[&str]) -> Broker {
        let root = tempfile::tempdir().unwrap();
        let project = root.path().join("project");
        std::fs::create_dir(&project).unwrap();
        let log = root.path().join("broker.log");
        let mut cmd = Command::new(gatehouse_tests::bin("gatehouse-broker"));
        cmd.arg("--data-dir")
            .arg(root.path())
            .arg("--grant-root")
            .arg(&project)
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(File::create(&log).unwrap());
        if running_under_wine() {
            cmd.arg("--allow-degraded");
        }
        let child = cmd.spawn().unwrap();
        let mut b = Broker {
            child,
            dirs: Dirs::under(root.path()),
            log,
            _root: root,
        };
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            if let Ok(Some(status)) = b.child.try_wait() {
                panic!("the broker exited ({status}): {}", b.log_text());
            }
            if Client::connect(&b.dirs.ui_socket()).is_ok() {
                return b;
            }
            assert!(
                Instant::now() < deadline,
                "the broker did not serve within 90 s: {}",
                b.log_text()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// One request on a fresh console connection (the client every front uses), and its
    /// answer.
    fn ui(&self, body: Body) -> Body {
        let mut client = Client::connect(&self.dirs.ui_socket()).unwrap();
        client.request(body).unwrap()
    }

    /// The audit log's first 1,000 rows, as the console reads them.
    fn audit(&self) -> Vec<ipc_schema::ui::AuditEntry> {
        match self.ui(Body::Ui(ipc_schema::ui::UiRequest::AuditTail {
            after: 0,
            limit: 1000,
        })) {
            Body::UiReply(UiReply::Audit(rows)) => rows,
            other => panic!("AuditTail answered {other:?}"),
        }
    }

    /// The doctor's report once no helper is still starting (each helper's start is verified
    /// before its state leaves `Starting`).
    fn doctor(&self) -> DoctorReport {
        match self.ui(Body::Doctor) {
            Body::DoctorReport(r) => r,
            other => panic!("doctor answered {other:?}"),
        }
    }
}

fn state_of<'a>(r: &'a DoctorReport, name: &str) -> &'a ProcessState {
    &r.processes
        .iter()
        .find(|p| p.name == name)
        .unwrap_or_else(|| panic!("no {name} in {r:#?}"))
        .state
}

/// Runs `gatehouse FIRST... ARGS...` with `stdin` written to it (none: no stdin), and returns
/// its exit code, stdout and stderr.
fn run_gatehouse(
    first: &[&OsStr],
    args: &[&str],
    stdin: Option<&[u8]>,
) -> (Option<i32>, String, String) {
    let mut child = Command::new(gatehouse_tests::bin("gatehouse"))
        .args(first)
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    if let Some(bytes) = stdin {
        use std::io::Write as _;
        child.stdin.take().unwrap().write_all(bytes).unwrap();
    }
    let out = child.wait_with_output().unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code(), text(&out.stdout), text(&out.stderr))
}

/// The human chooses the restricted-token tier for commands in the policy of the broker whose
/// data lives under `root` (`require_namespaces = false`, a loosening, so `--yes` without a
/// terminal), with `root/project` granted read-write.
fn choose_restricted_token_tier(root: &Path) {
    choose_restricted_token_tier_with(root, "");
}

/// [`choose_restricted_token_tier`] with the policy's `[tools]` table holding `tools`.
fn choose_restricted_token_tier_with(root: &Path, tools: &str) {
    let project = root.join("project");
    let policy = format!(
        "revision = 0\nrequire_namespaces = false\n[tools]\n{tools}[[grant]]\nroot = {:?}\ncapabilities = [\"read\", \"write\"]\n",
        project.to_str().unwrap()
    );
    let data_dir = [OsStr::new("--data-dir"), root.as_os_str()];
    let (code, out, err) = run_gatehouse(
        &data_dir,
        &["policy", "apply", "-", "--yes"],
        Some(policy.as_bytes()),
    );
    assert_eq!(code, Some(0), "{out}\n{err}");
}

/// Runs this test binary as a front of `pipe` that sends `what`, and returns its exit code.
fn front_child(pipe: &Path, what: &str) -> i32 {
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "front_child_mode",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_PIPE, pipe)
        .env(CHILD_SENDS, what)
        .output()
        .unwrap();
    println!(
        "    front child ({what}) said: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out.status.code().expect("an exit code")
}

/// Not a test on its own: the front [`front_child`] runs (does nothing without its variable).
/// `ping`: sends a Ping, expects the Pong, exits 0. `console-request`: sends a console's
/// request on the gateway's pipe, then waits 120 s for the broker to end it.
#[test]
fn front_child_mode() {
    let Some(pipe) = std::env::var_os(CHILD_PIPE) else {
        return;
    };
    let mut client = Client::connect(Path::new(&pipe)).unwrap();
    match std::env::var(CHILD_SENDS).unwrap().as_str() {
        "ping" => {
            let answer = client.request(Body::Ping { target: None }).unwrap();
            assert_eq!(answer, Body::Pong);
        }
        "console-request" => {
            client.send(Body::Ui(UiRequest::ListPending)).unwrap();
            std::thread::sleep(Duration::from_secs(120));
            panic!("the broker let a gateway that sent a console's request live");
        }
        other => panic!("no such child mode {other}"),
    }
}

#[test]
fn the_broker_serves_its_fronts_with_helpers_verified_from_outside() {
    let b = Broker::start(&[]);
    let r = b.doctor();
    println!("doctor: {r:#?}");

    // The router's and the spawner's own hardening, by their reports.
    let own = r.processes[0].lockdown.as_ref().unwrap();
    assert_eq!(own.profile, "broker");
    assert!(own.windows.is_some(), "{own:?}");
    let spawner = r.processes[1].lockdown.as_ref().unwrap();
    assert_eq!(spawner.profile, "spawner");
    if running_under_wine() {
        // What Wine does not set is named, never claimed.
        assert!(
            own.degraded.iter().any(|d| d.contains("mitigation")),
            "{own:?}"
        );
        println!("wine does not enforce: the broker's own mitigations (named in its report)");
    } else {
        assert_eq!(own.degraded, Vec::<String>::new());
    }

    // The five helpers are up, each verified.
    for name in [
        "net-helper",
        "exec-helper",
        "secrets-helper",
        "fs-helper",
        "servers-helper",
    ] {
        assert_eq!(state_of(&r, name), &ProcessState::Ready, "{name}: {r:#?}");
        let p = r.processes.iter().find(|p| p.name == name).unwrap();
        let report = p.lockdown.as_ref().unwrap();
        let windows = report.windows.as_deref().unwrap();
        // Each helper but net tried the network at lockdown and said what it found; net,
        // whose profile has the network, did not try. (On Windows the test expects the filters
        // installed: `gatehouse setup network-filters --yes` from an elevated prompt first.)
        match (name, &windows.outbound) {
            ("net-helper", None) => {}
            ("net-helper", other) => panic!("net tried the network: {other:?}"),
            (_, Some(OutboundProbe::Refused)) if !running_under_wine() => {}
            (_, Some(OutboundProbe::NotRefused(seen))) if running_under_wine() => {
                // Wine's engine installs no filter: the loopback answers, and the gap is named
                // in the helper's report, as the broker's check words it.
                assert!(
                    seen.contains("IPv4 listen allowed") && seen.contains("IPv4 connect allowed"),
                    "{seen}"
                );
                assert!(
                    report.degraded.iter().any(
                        |d| d.starts_with(&format!("outbound network is not refused ({seen})"))
                    ),
                    "{report:?}"
                );
                println!("wine does not enforce: WFP filters ({name} reached the loopback)");
            }
            (_, other) => panic!("{name}: outbound {other:?}"),
        }
        // The servers-helper, and only it, runs in its AppContainer; its report says which.
        if name == "servers-helper" {
            let want = sandbox::wincfg::app_container_sid("gatehouse.servers").0;
            if running_under_wine() {
                // Wine's kernelbase has no CreateAppContainerToken: the degraded spawn names it,
                // and so does the helper's report.
                assert_eq!(windows.app_container, None);
                let gap = format!(
                    "app container: the token is in no AppContainer (the profile's is {want})"
                );
                assert!(report.degraded.contains(&gap), "{report:?}");
                println!("wine does not enforce: the servers-helper's AppContainer (named in its report)");
            } else {
                assert_eq!(windows.app_container.as_deref(), Some(want.as_str()));
            }
        } else {
            assert_eq!(windows.app_container, None, "{name}");
        }
    }
    assert_eq!(r.problems, Vec::<String>::new(), "{r:#?}");

    // Each helper answers through the broker.
    for target in [
        Role::Net,
        Role::Exec,
        Role::Secrets,
        Role::Fs,
        Role::Servers,
    ] {
        let answer = b.ui(Body::Ping {
            target: Some(target),
        });
        assert_eq!(answer, Body::Pong, "{target}");
    }

    // A front that sends what its channel may not carry is ended by the broker, through the
    // process handle it opened at accept (exit code 1); a front that keeps to its table is
    // answered and ends on its own (0), the control.
    let gw = b.dirs.gateway_socket();
    assert_eq!(front_child(&gw, "ping"), 0);
    assert_eq!(front_child(&gw, "console-request"), 1);
    // The broker's log line comes after the kill: waited for, up to 10 s.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !b
        .log_text()
        .contains("killed: sent a Ui message, which the gateway may not send")
    {
        assert!(Instant::now() < deadline, "{}", b.log_text());
        std::thread::sleep(Duration::from_millis(50));
    }

    // One broker per instance: a second one for the same directory refuses, naming the first.
    let second = Command::new(gatehouse_tests::bin("gatehouse-broker"))
        .arg("--data-dir")
        .arg(b.dirs.data.parent().unwrap())
        .arg("--allow-degraded")
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&second.stderr);
    assert_eq!(second.status.code(), Some(1), "{said}");
    assert!(said.contains("a broker already runs for"), "{said}");

    // No helper outlives the broker: once it is gone, the spawner's channel closes, and the
    // spawner ends every helper's job and exits.
    let helpers: Vec<(String, PeerProcess)> = r
        .processes
        .iter()
        .filter(|p| p.state == ProcessState::Ready && p.name.ends_with("-helper"))
        .map(|p| (p.name.clone(), PeerProcess::watch(p.pid).unwrap()))
        .collect();
    assert_eq!(helpers.len(), 5);
    for (name, p) in &helpers {
        assert!(p.running(), "{name} ended before the broker");
    }
    let mut b = b;
    b.child.kill().unwrap();
    b.child.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    for (name, p) in &helpers {
        while p.running() {
            assert!(
                Instant::now() < deadline,
                "{name} still runs 30 s after the broker ended"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// A helper whose hello says less than its policy needs is refused, as on Linux; the broker
/// routes nothing to it and serves on with the others.
#[test]
fn a_helper_whose_report_falls_short_is_refused() {
    // --test-unlocked-helper: the net-helper's hello claims the Linux lockdown and says nothing
    // of its token, job or mitigations.
    let b = Broker::start(&["--test-unlocked-helper", "net"]);
    let r = b.doctor();
    match state_of(&r, "net-helper") {
        ProcessState::Refused { reason } => assert!(
            reason.contains("says nothing of its token, job or mitigations"),
            "{reason}"
        ),
        other => panic!("net-helper: {other:?}"),
    }
    assert!(
        r.problems
            .iter()
            .any(|p| p.starts_with("net-helper: refused")),
        "{r:#?}"
    );
    match b.ui(Body::Ping {
        target: Some(Role::Net),
    }) {
        Body::Error(e) => assert_eq!(e.code, ErrorCode::HelperUnavailable, "{e:?}"),
        other => panic!("a ping of the refused net-helper answered {other:?}"),
    }
    // The control: the others, started the same way without the switch, serve.
    assert_eq!(state_of(&r, "secrets-helper"), &ProcessState::Ready);
    assert_eq!(
        b.ui(Body::Ping {
            target: Some(Role::Secrets)
        }),
        Body::Pong
    );
}

/// A DNS server and a web server on loopback (`public.test` -> 127.0.0.2, which test builds
/// treat as public), and a broker whose net-helper resolves through that DNS server.
fn broker_with_web() -> (net::DnsServer, net::HttpServer, Broker) {
    web_and_broker("hello from the test server", |_| Vec::new())
}

/// [`broker_with_web`] whose server answers `text`, the broker started with `more(port)` too
/// (`port`: the web server's).
fn web_and_broker(
    text: &'static str,
    more: impl Fn(u16) -> Vec<String>,
) -> (net::DnsServer, net::HttpServer, Broker) {
    let dns = net::DnsServer::start(net::standard_zone());
    let web = net::HttpServer::start(net::PUBLIC, std::sync::Arc::new(move |_| net::text(text)));
    let ns = format!("--test-net-arg={}", dns.addr);
    let mut args = vec![
        "--test-net-arg=--nameserver".to_string(),
        ns,
        "--test-net-arg=--test-public-addr".into(),
        "--test-net-arg=127.0.0.2".into(),
    ];
    args.extend(more(web.addr.port()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let b = Broker::start(&args);
    (dns, web, b)
}

/// [`web_and_broker`] for a command's egress proxy: the test server speaks plain HTTP on its
/// own port, so the proxy session allows that port and the SNI check (which wants a TLS hello)
/// is off.
fn web_behind_the_proxy(text: &'static str) -> (net::DnsServer, net::HttpServer, Broker) {
    web_and_broker(text, |port| {
        vec![
            "--test-proxy-port".into(),
            port.to_string(),
            "--test-no-sni-check".into(),
        ]
    })
}

/// An agent (a client on the gateway's pipe) asks to fetch `url`; the default policy asks the
/// human, so the call waits. The agent's connection, the call's id and what it waits for.
fn agent_fetch_waits(b: &Broker, url: &str) -> (Client, u64, ipc_schema::tool::Waiting) {
    let mut agent = Client::connect(&b.dirs.gateway_socket()).unwrap();
    let url = url.to_string();
    let call = agent
        .send(Body::ToolCall(ToolCall::FetchUrl(FetchUrl { url })))
        .unwrap();
    let waiting = match agent.next_frame().unwrap() {
        e if e.id == call => match e.body {
            Body::ToolReply(ToolReply::AwaitingApproval(w)) => w,
            other => panic!("the default policy should ask: {other:?}"),
        },
        other => panic!("an answer to another request: {other:?}"),
    };
    (agent, call, waiting)
}

/// The human's console lists the proposal `id` and allows it once; its card.
fn allow_once(b: &Broker, id: ipc_schema::tool::ProposalId) -> ipc_schema::ui::Proposal {
    let pending = match b.ui(Body::Ui(ipc_schema::ui::UiRequest::ListPending)) {
        Body::UiReply(UiReply::Pending(p)) => p,
        other => panic!("ListPending answered {other:?}"),
    };
    let card = pending
        .into_iter()
        .find(|p| p.id == id)
        .unwrap_or_else(|| panic!("proposal {id:?} is not listed"));
    let decided = b.ui(Body::Ui(ipc_schema::ui::UiRequest::Decide(Decision {
        proposal: card.id,
        digest: card.digest,
        choice: Choice::AllowOnce,
    })));
    assert!(
        matches!(
            decided,
            Body::UiReply(UiReply::Decided {
                choice: Choice::AllowOnce,
                ..
            })
        ),
        "{decided:?}"
    );
    card
}

/// The agent's final answer to `call`, which must be `Done`.
fn done_for(b: &Broker, agent: &mut Client, call: u64) -> ipc_schema::tool::Done {
    match agent.next_frame().unwrap() {
        e if e.id == call => match e.body {
            Body::ToolReply(ToolReply::Done(d)) => *d,
            other => panic!("the allowed call ended with {other:?}: {}", b.log_text()),
        },
        other => panic!("an answer to another request: {other:?}"),
    }
}

/// The tool path on Windows, as on Linux: an agent's `fetch_url` (on the gateway's pipe) asks by
/// default; it waits while the human's console lists the proposal and allows it once; the
/// net-helper then fetches through the loopback DNS and web servers of the test, the agent gets
/// the page wrapped as outside text, and the audit log has the call.
#[test]
fn an_agents_fetch_waits_for_the_human_then_runs_and_is_audited() {
    let (_dns, web, b) = broker_with_web();
    let url = format!("http://public.test:{}/page", web.addr.port());
    let (mut agent, call, waiting) = agent_fetch_waits(&b, &url);
    // Nothing has been fetched while the call waits for the human.
    assert_eq!(web.requests().len(), 0);

    let card = allow_once(&b, waiting.proposal);
    assert!(card.target.contains("public.test"), "{card:?}");
    let done = done_for(&b, &mut agent, call);
    assert_eq!(done.proposal, Some(waiting.proposal));
    let page = match done.result {
        ToolResult::Fetched(f) => f,
        other => panic!("not a page: {other:?}"),
    };
    assert_eq!(page.status, 200);
    assert_eq!(page.address, std::net::IpAddr::from(net::PUBLIC));
    assert!(
        page.text.contains("hello from the test server"),
        "{}",
        page.text
    );
    assert!(page.text.contains("<external-"), "{}", page.text);
    assert_eq!(web.requests().len(), 1);

    // The audit log, as the console reads it: the call's row names the tool and the URL.
    let rows = b.audit();
    assert!(
        rows.iter().any(|r| r.tool.as_deref() == Some("fetch_url")
            && r.target
                .as_deref()
                .is_some_and(|t| t.contains("public.test"))),
        "{rows:#?}"
    );
}

/// An agent's `run_command` on Windows: refused by the default tier choice with how to choose
/// the restricted-token tier; once the policy chooses it, the call asks, waits for the human's
/// allow, runs in the exec-helper's restricted-token tier in the project, and its output,
/// status and the tier come back to the agent; a working directory outside the grants is
/// refused before anything asks; the audit log has the run.
#[test]
fn an_agents_run_command_asks_then_runs_in_the_restricted_token_tier() {
    let b = Broker::start(&[]);
    let root = b.dirs.data.parent().unwrap().to_path_buf();
    let project = root.join("project");
    let path =
        |p: &Path| ipc_schema::fs::FsPath::Absolute(p.as_os_str().as_encoded_bytes().to_vec());
    let run = |argv: &[&str], cwd: &Path| {
        ToolCall::RunCommand(ipc_schema::tool::RunCommand {
            argv: argv.iter().map(|a| a.to_string()).collect(),
            cwd: path(cwd),
            timeout_secs: 0,
        })
    };
    let echo = ["cmd.exe", "/d", "/c", "echo from the agent& exit 3"];
    let mut agent = Client::connect(&b.dirs.gateway_socket()).unwrap();
    let ask = |agent: &mut Client, call: ToolCall| {
        let id = agent.send(Body::ToolCall(call)).unwrap();
        match agent.next_frame().unwrap() {
            e if e.id == id => (id, e.body),
            other => panic!("an answer to another request: {other:?}"),
        }
    };
    // Outside every grant: refused at once, nothing asked.
    let (_, refused) = ask(&mut agent, run(&echo, &root));
    match &refused {
        Body::ToolReply(ToolReply::Refused(r)) => {
            assert!(r.message.contains("grant"), "{}", r.message)
        }
        other => panic!("not refused: {other:?}"),
    }
    // The tier: the policy has not chosen the restricted-token tier yet.
    let (_, body) = ask(&mut agent, run(&echo, &project));
    let waiting = match body {
        Body::ToolReply(ToolReply::AwaitingApproval(w)) => w,
        other => panic!("the default policy should ask: {other:?}"),
    };
    allow_once(&b, waiting.proposal);
    let not_run = match agent.next_frame().unwrap().body {
        Body::ToolReply(r) => format!("{r:?}"),
        other => format!("{other:?}"),
    };
    assert!(not_run.contains("require_namespaces = false"), "{not_run}");
    // The human chooses the tier in the policy.
    choose_restricted_token_tier(&root);
    let (call, body) = ask(&mut agent, run(&echo, &project));
    let waiting = match body {
        Body::ToolReply(ToolReply::AwaitingApproval(w)) => w,
        other => panic!("the call should ask: {other:?}"),
    };
    let card = allow_once(&b, waiting.proposal);
    // The card shows what will run, where, and in which tier.
    assert!(card.target.ends_with("project"), "{card:?}");
    assert!(
        card.effect.contains("from the agent") && card.effect.contains("restricted-token tier"),
        "{card:?}"
    );
    let done = done_for(&b, &mut agent, call);
    let ran = match done.result {
        ToolResult::CommandRun(r) => r,
        other => panic!("not a run: {other:?}"),
    };
    assert_eq!(ran.exit_code, Some(3), "{ran:?}");
    assert_eq!(
        String::from_utf8_lossy(&ran.stdout).trim_end(),
        "from the agent"
    );
    assert!(ran.sandbox.contains("restricted-token"), "{}", ran.sandbox);
    let rows = b.audit();
    // The run is in the audit log: asked with what it runs, then carried out once.
    let run_rows: Vec<_> = (rows.iter())
        .filter(|r| r.tool.as_deref() == Some("run_command"))
        .collect();
    assert!(
        run_rows
            .iter()
            .any(|r| r.outcome == "asked" && r.detail.contains("from the agent")),
        "{rows:#?}"
    );
    assert!(
        run_rows
            .iter()
            .any(|r| r.outcome == "done" && r.detail.contains("executing -> done")),
        "{rows:#?}"
    );
}

/// `gatehouse-mcp.exe`, what an agent's MCP configuration starts, on Windows: it finds the
/// running broker's gateway pipe, hardens itself, opens its session and serves MCP on stdio. A
/// client's `initialize`, `tools/list` and a `fetch_url` call, which waits for the human's
/// console and then returns the page; closing stdin ends it cleanly.
#[test]
fn the_mcp_front_serves_an_agent_over_stdio() {
    let (_dns, web, b) = broker_with_web();
    let mut mcp = McpFront::start(&b);
    let mut rpc = |msg| mcp.rpc(msg);
    let names = tool_names(&rpc(list_tools(2)));
    assert!(names.iter().any(|n| n == "fetch_url"), "{names:?}");

    // The call waits for the human: the console allows it from another thread while the
    // client waits for its answer.
    let url = format!("http://public.test:{}/page", web.addr.port());
    let approver = {
        let ui = b.dirs.ui_socket();
        std::thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(60);
            loop {
                let mut c = Client::connect(&ui).unwrap();
                let pending = match c.request(Body::Ui(ipc_schema::ui::UiRequest::ListPending)) {
                    Ok(Body::UiReply(UiReply::Pending(p))) => p,
                    other => panic!("ListPending answered {other:?}"),
                };
                if let Some(card) = pending.first() {
                    let decided =
                        c.request(Body::Ui(ipc_schema::ui::UiRequest::Decide(Decision {
                            proposal: card.id,
                            digest: card.digest,
                            choice: Choice::AllowOnce,
                        })));
                    assert!(
                        matches!(decided, Ok(Body::UiReply(UiReply::Decided { .. }))),
                        "{decided:?}"
                    );
                    return card.target.clone();
                }
                assert!(Instant::now() < deadline, "no proposal within 60 s");
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };
    let called = rpc(
        serde_json::json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
        "params": {"name": "fetch_url", "arguments": {"url": url}}}),
    );
    let target = approver.join().unwrap();
    assert!(target.contains("public.test"), "{target}");
    assert_ne!(called["result"]["isError"], true, "{called}");
    let text = called["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or("");
    assert!(text.contains("hello from the test server"), "{called}");
    assert!(text.contains("<external-"), "{called}");
    assert_eq!(web.requests().len(), 1);

    // The file tools through the same MCP front, as an agent calls them: a read inside the
    // grant (the policy's Allow: no card), and a protected key beside it refused (the test
    // reads both itself).
    let project = std::fs::canonicalize(b.dirs.data.parent().unwrap().join("project")).unwrap();
    std::fs::create_dir(project.join(".ssh")).unwrap();
    std::fs::write(project.join(".ssh").join("id_ed25519"), "KEY").unwrap();
    std::fs::write(project.join("notes.txt"), "from the project over MCP").unwrap();
    assert_eq!(
        std::fs::read(project.join(".ssh").join("id_ed25519")).unwrap(),
        b"KEY"
    );
    let read = |id: u64, p: &Path| {
        serde_json::json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": "read_file", "arguments": {"path": p.to_str().unwrap()}}})
    };
    let got = rpc(read(4, &project.join("notes.txt")));
    assert_ne!(got["result"]["isError"], true, "{got}");
    let text = got["result"]["content"][0]["text"].as_str().unwrap_or("");
    assert!(text.contains("from the project over MCP"), "{got}");
    let key = rpc(read(5, &project.join(".ssh").join("id_ed25519")));
    assert_eq!(key["result"]["isError"], true, "{key}");
    let text = key["result"]["content"][0]["text"].as_str().unwrap_or("");
    assert!(text.contains("protected") && !text.contains("KEY"), "{key}");

    // The client closes stdin: the front ends cleanly, and says how it ran on stderr.
    let (code, err) = mcp.finish();
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("gatehouse mcp: hardened"), "{err}");
    assert!(err.contains("gatehouse mcp: session "), "{err}");
}

/// `gatehouse-mcp` for the broker `b`, initialized over its stdio as an agent's MCP client
/// does.
struct McpFront {
    child: Child,
    stdin: std::process::ChildStdin,
    stdout: std::io::BufReader<std::process::ChildStdout>,
    log: PathBuf,
}

impl McpFront {
    fn start(b: &Broker) -> McpFront {
        let log = b.log.with_file_name("mcp.log");
        let mut cmd = Command::new(gatehouse_tests::bin("gatehouse-mcp"));
        cmd.arg("--data-dir")
            .arg(b.dirs.data.parent().unwrap())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(File::create(&log).unwrap());
        if running_under_wine() {
            cmd.arg("--allow-degraded");
        }
        let mut child = cmd.spawn().unwrap();
        let mut m = McpFront {
            stdin: child.stdin.take().unwrap(),
            stdout: std::io::BufReader::new(child.stdout.take().unwrap()),
            child,
            log,
        };
        let init = m.rpc(
            serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                       "clientInfo": {"name": "wine-test", "version": "1"}}}),
        );
        assert_eq!(init["result"]["protocolVersion"], "2025-06-18", "{init}");
        m.rpc(serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        m
    }

    /// One message ([`rpc_on`]); with an id, its answer.
    fn rpc(&mut self, msg: serde_json::Value) -> serde_json::Value {
        let log = self.log.clone();
        let said = move || std::fs::read_to_string(&log).unwrap_or_default();
        rpc_on(&mut self.stdin, &mut self.stdout, msg, &said)
    }

    /// Closes stdin and waits: the front's exit code and what it said on stderr.
    fn finish(self) -> (Option<i32>, String) {
        let McpFront {
            mut child,
            stdin,
            log,
            ..
        } = self;
        drop(stdin);
        let status = child.wait().unwrap();
        (
            status.code(),
            std::fs::read_to_string(&log).unwrap_or_default(),
        )
    }
}

fn list_tools(id: u64) -> serde_json::Value {
    serde_json::json!({"jsonrpc": "2.0", "id": id, "method": "tools/list"})
}

/// The names in a `tools/list` answer.
fn tool_names(answer: &serde_json::Value) -> Vec<String> {
    answer["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("{answer}"))
        .iter()
        .filter_map(|t| t["name"].as_str().map(String::from))
        .collect()
}

fn call_tool(id: u64, name: &str, arguments: serde_json::Value) -> serde_json::Value {
    serde_json::json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": name, "arguments": arguments}})
}

/// A call's text and whether it is an error.
fn call_text(answer: &serde_json::Value) -> (bool, String) {
    let text = answer["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("{answer}"));
    (answer["result"]["isError"] == true, text.to_string())
}

/// The credential the test's remote MCP server wants (`Authorization: Bearer ...`).
const REMOTE_SECRET: &str = "wine-mcp-tok-3Fq8Ls1VnR6Xp";

/// A remote MCP server over Streamable HTTP, as the test's web server answers it: JSON bodies,
/// a session id, `echo` and `whoami` (which says what credential it got), 202 for
/// notifications, 200 for the DELETE that ends the session; and `GET /echo`, a plain page
/// saying the same of the credential (an agent's `http_request`).
fn remote_mcp(req: &net::SeenRequest) -> Vec<u8> {
    use serde_json::{json, Value};
    if req.line.starts_with("DELETE ") {
        return net::response("200 OK", &[], b"");
    }
    let came = format!(
        "you came with {}",
        req.header("authorization").unwrap_or("nothing")
    );
    if req.line.starts_with("GET /echo ") {
        return net::text(&came);
    }
    let msg: Value = serde_json::from_slice(&req.body).unwrap_or(Value::Null);
    let text = |t: String| json!({"content": [{"type": "text", "text": t}]});
    let result = match msg["method"].as_str() {
        Some("initialize") => json!({"protocolVersion": "2025-06-18",
            "capabilities": {"tools": {}}, "serverInfo": {"name": "wine-remote", "version": "1"}}),
        Some("tools/list") => json!({"tools": [
            {"name": "echo", "description": "Says its text back.",
             "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}}},
            {"name": "whoami", "description": "Says what credential came.",
             "inputSchema": {"type": "object"}}]}),
        Some("tools/call") => match msg["params"]["name"].as_str() {
            Some("echo") => text(format!(
                "echo: {}",
                msg["params"]["arguments"]["text"].as_str().unwrap_or("")
            )),
            _ => text(came),
        },
        _ => return net::response("202 Accepted", &[], b""),
    };
    let body = json!({"jsonrpc": "2.0", "id": msg["id"], "result": result}).to_string();
    net::response(
        "200 OK",
        &[
            ("Content-Type", "application/json"),
            ("Mcp-Session-Id", "wine-session-1"),
        ],
        body.as_bytes(),
    )
}

/// A TLS web server of the test's own on 127.0.0.2 (`remote_mcp` answers), with a certificate
/// for `tls.test` and `other.test` from a test CA, both named by a DNS server of the test's own,
/// and a broker whose net-helper resolves through it, trusts the CA and judges 127.0.0.2 public
/// (test builds only).
struct TlsWorld {
    web: net::HttpServer,
    broker: Broker,
    _dns: net::DnsServer,
    _pki: net::TestPki,
}

impl TlsWorld {
    fn start() -> TlsWorld {
        let (pki, ca, ca_key) = net::test_pki();
        let dns = net::DnsServer::start(net::standard_zone());
        let web = net::HttpServer::start_tls(
            net::PUBLIC,
            std::sync::Arc::new(remote_mcp),
            net::server_config(&["tls.test", "other.test"], &ca, &ca_key),
        );
        let args = [
            "--test-net-arg=--nameserver".to_string(),
            format!("--test-net-arg={}", dns.addr),
            "--test-net-arg=--test-public-addr".into(),
            "--test-net-arg=127.0.0.2".into(),
            "--test-net-arg=--test-extra-root".into(),
            format!("--test-net-arg={}", pki.ca_file.path().display()),
        ];
        let broker = Broker::start(&args.iter().map(String::as_str).collect::<Vec<_>>());
        TlsWorld {
            web,
            broker,
            _dns: dns,
            _pki: pki,
        }
    }
}

/// The credential `name` (a bearer token, [`REMOTE_SECRET`], for `tls.test` only), stored as
/// `gatehouse secret set NAME --host tls.test` stores it: by a private secrets-helper for the
/// broker's instance (the command's own is strict, which Wine refuses; this one is degraded
/// there). The helper, to delete it with, and the name.
fn store_credential(
    b: &Broker,
    name: &str,
) -> (
    gatehouse_tests::windows::SecretsHelper,
    ipc_schema::secrets::CredentialName,
) {
    let mut args = broker::secrets_link::helper_args(&b.dirs).unwrap();
    args.extend(["--channel".into(), "private".into()]);
    let mut secrets = gatehouse_tests::windows::SecretsHelper::spawn(args);
    let name = ipc_schema::secrets::CredentialName::parse(name).unwrap();
    let saved = secrets.ask(SecretsRequest::Set {
        spec: ipc_schema::secrets::CredentialSpec {
            name: name.clone(),
            hosts: vec![ipc_schema::secrets::HostPattern::parse("tls.test").unwrap()],
            send_as: ipc_schema::secrets::SendAs::Bearer,
        },
        value: Some(ipc_schema::secrets::SecretValue::from_slice(
            REMOTE_SECRET.as_bytes(),
        )),
    });
    assert!(matches!(saved, SecretsReply::Saved { .. }), "{saved:?}");
    (secrets, name)
}

/// An agent's `http_request` on Windows, as on Linux: asked, allowed by the console, sent by the
/// net-helper over TLS with the stored credential added by the secrets-helper for its host
/// (the server saw it), the answer scrubbed of it; without a credential nothing is added (the
/// control); the same credential for a host it is not bound to refused before anything is sent.
#[test]
fn an_agents_http_request_carries_its_credential_for_its_host_only() {
    let w = TlsWorld::start();
    let (b, port) = (&w.broker, w.web.addr.port());
    let (mut secrets, token) = store_credential(b, "api-token");
    let mut agent = Client::connect(&b.dirs.gateway_socket()).unwrap();
    let mut request = |host: &str, credential: Option<&ipc_schema::secrets::CredentialName>| {
        let call = agent
            .send(Body::ToolCall(ToolCall::HttpRequest(
                ipc_schema::tool::HttpRequest {
                    method: ipc_schema::tool::HttpMethod::Get,
                    url: format!("https://{host}:{port}/echo"),
                    headers: vec![],
                    body: vec![],
                    credential: credential.cloned(),
                },
            )))
            .unwrap();
        let reply = match agent.next_frame().unwrap() {
            e if e.id == call => e.body,
            other => panic!("an answer to another request: {other:?}"),
        };
        match reply {
            Body::ToolReply(ToolReply::AwaitingApproval(waiting)) => {
                let card = allow_once(b, waiting.proposal);
                assert_eq!(card.target, host, "{card:?}");
                assert!(!format!("{card:?}").contains(REMOTE_SECRET));
                match agent.next_frame().unwrap() {
                    e if e.id == call => e.body,
                    other => panic!("an answer to another request: {other:?}"),
                }
            }
            other => other,
        }
    };
    let response = |reply: Body| match reply {
        Body::ToolReply(ToolReply::Done(d)) => match d.result {
            ToolResult::HttpResponse(h) => h,
            other => panic!("{other:?}"),
        },
        other => panic!("{other:?}"),
    };

    let reply = request("tls.test", Some(&token));
    assert!(!format!("{reply:?}").contains(REMOTE_SECRET), "{reply:?}");
    let h = response(reply);
    assert_eq!(h.page.status, 200);
    assert!(h.credential_sent);
    assert!(h.redactions >= 1, "{h:?}");
    let redacted = format!("you came with Bearer {}", ipc_schema::secrets::REDACTED);
    assert!(h.page.text.contains(&redacted), "{}", h.page.text);
    let bearer = format!("Bearer {REMOTE_SECRET}");
    let seen = w.web.requests();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].header("authorization"), Some(bearer.as_str()));

    // Without a credential nothing is added.
    let h = response(request("tls.test", None));
    assert!(!h.credential_sent);
    assert!(
        h.page.text.contains("you came with nothing"),
        "{}",
        h.page.text
    );
    assert_eq!(w.web.requests().len(), 2);
    assert_eq!(w.web.requests()[1].header("authorization"), None);

    // The credential for another host: refused, nothing sent.
    match request("other.test", Some(&token)) {
        Body::ToolReply(ToolReply::Refused(r)) => assert!(
            r.message
                .starts_with("credential api-token was not added for other.test"),
            "{}",
            r.message
        ),
        other => panic!("{other:?}"),
    }
    assert_eq!(w.web.requests().len(), 2);

    let deleted = secrets.ask(SecretsRequest::Delete { name: token });
    assert!(
        matches!(deleted, SecretsReply::Deleted { .. }),
        "{deleted:?}"
    );
    assert_eq!(secrets.close().0, 0);
}

/// A remote MCP server on Windows: the servers-helper runs (spawned confined, its report checked
/// like every helper's) and speaks to the server over the pipe the broker makes for the
/// connection, whose other end the broker relays as Streamable HTTP through the net-helper:
/// TLS to `tls.test` (the test's CA, its DNS), the credential from the Credential Manager added
/// by the secrets-helper for that host only. As on Linux: the server's tools are held until
/// the human approves them, then offered as `remote__TOOL` under the policy's rules; what the
/// server says of the credential reaches the agent scrubbed; a server whose host the credential
/// is not bound to is refused before anything is sent to it; the audit log has the server's
/// start and no credential.
#[test]
fn a_remote_mcp_server_is_reached_through_the_net_helper_with_its_credential() {
    let w = TlsWorld::start();
    let (web, b, port) = (&w.web, &w.broker, w.web.addr.port());
    let root = b.dirs.data.parent().unwrap().to_path_buf();
    let data_dir = [OsStr::new("--data-dir"), root.as_os_str()];
    let policy = format!(
        r#"revision = 0
[[grant]]
root = {:?}
capabilities = ["read"]

[[mcp_server]]
name = "remote"
url = "https://tls.test:{port}/mcp"
credential = "mcp-token"
read_only = ["echo", "whoami"]

# The same server under another name, to which the credential is not bound.
[[mcp_server]]
name = "elsewhere"
url = "https://other.test:{port}/mcp"
credential = "mcp-token"


[[rule]]
name = "reads"
tools = ["remote__echo", "remote__whoami"]
action = "allow"
"#,
        root.join("project").to_str().unwrap()
    );
    let (code, out, err) = run_gatehouse(
        &data_dir,
        &["policy", "apply", "-", "--yes"],
        Some(policy.as_bytes()),
    );
    assert_eq!(code, Some(0), "{out}\n{err}");
    let (mut secrets, token) = store_credential(b, "mcp-token");

    // New tools start held, whatever the rules say.
    let mut mcp = McpFront::start(b);
    let names = tool_names(&mcp.rpc(list_tools(2)));
    assert!(!names.iter().any(|n| n.contains("__")), "{names:?}");
    let (err, text) = call_text(&mcp.rpc(call_tool(
        3,
        "remote__echo",
        serde_json::json!({"text": "x"}),
    )));
    assert!(err, "{text}");
    assert!(
        text.contains("remote__echo is held: new: not approved yet"),
        "{text}"
    );
    let (code, out, err) = run_gatehouse(
        &data_dir,
        &["mcp-server", "tools", "remote", "--approve-all"],
        None,
    );
    assert_eq!(code, Some(0), "{out}\n{err}\n{}", b.log_text());
    assert!(
        out.contains("2 tool definition(s) of remote approved"),
        "{out}"
    );
    let names = tool_names(&mcp.rpc(list_tools(4)));
    for t in ["remote__echo", "remote__whoami"] {
        assert!(names.iter().any(|n| n == t), "{t}: {names:?}");
    }
    assert!(
        !names.iter().any(|n| n.starts_with("elsewhere__")),
        "{names:?}"
    );

    // An allowed call, wrapped as outside text.
    let (err, text) = call_text(&mcp.rpc(call_tool(
        5,
        "remote__echo",
        serde_json::json!({"text": "hello over a pipe"}),
    )));
    assert!(!err, "{text}");
    assert!(text.contains("source=\"mcp:remote__echo\""), "{text}");
    assert!(text.contains("echo: hello over a pipe"), "{text}");
    // The server got the credential; what it says of it reaches the agent scrubbed.
    let (err, text) = call_text(&mcp.rpc(call_tool(6, "remote__whoami", serde_json::json!({}))));
    assert!(!err, "{text}");
    assert!(!text.contains(REMOTE_SECRET), "{text}");
    assert!(
        text.contains(&format!("Bearer {}", ipc_schema::secrets::REDACTED)),
        "{text}"
    );

    // Every request reached tls.test with the credential; none reached other.test (the
    // credential is bound to tls.test: refused before anything is sent).
    let seen = web.requests();
    assert!(seen.len() >= 6, "{seen:?}");
    for r in &seen {
        assert_eq!(
            r.header("host"),
            Some(format!("tls.test:{port}").as_str()),
            "{r:?}"
        );
        let auth = format!("Bearer {REMOTE_SECRET}");
        assert_eq!(r.header("authorization"), Some(auth.as_str()), "{r:?}");
    }
    let (code, out, err) = run_gatehouse(&data_dir, &["mcp-server", "tools", "elsewhere"], None);
    assert_ne!(code, Some(0), "{out}");
    assert!(
        format!("{out}{err}").contains("credential mcp-token was not added for other.test"),
        "{out}\n{err}"
    );
    assert_eq!(web.requests().len(), seen.len());
    // `mcp-server add`: a remote one added.
    let url = format!("https://tls.test:{port}/mcp");
    let (code, out, err) = run_gatehouse(
        &data_dir,
        &["mcp-server", "add", "more", "--url", &url],
        None,
    );
    assert_eq!(code, Some(0), "{out}\n{err}");

    // The audit log has the server's start and no credential; nor has the broker's log.
    let rows = b.audit();
    assert!(
        rows.iter()
            .any(|r| r.tool.as_deref() == Some("mcp_server remote") && r.outcome == "started"),
        "{rows:#?}"
    );
    assert!(!format!("{rows:?}").contains(REMOTE_SECRET));
    assert!(!b.log_text().contains(REMOTE_SECRET));
    let (code, err) = mcp.finish();
    assert_eq!(code, Some(0), "{err}");
    let deleted = secrets.ask(SecretsRequest::Delete { name: token });
    assert!(
        matches!(deleted, SecretsReply::Deleted { .. }),
        "{deleted:?}"
    );
    let (code, err) = secrets.close();
    assert_eq!(code, 0, "{err}");
}

/// A third-party stdio MCP server on Windows (`gatehouse-test-mcp-server`, a binary of the
/// tests crate): started in the restricted-token tier in a command slot of its own, its stdin
/// and stdout the two connections the exec-helper made to the pipe the broker serves for it,
/// relayed to the servers-helper; its tools held until approved, then listed as `local__*` and
/// called through `gatehouse-mcp`; its profile its own state directory; its network list
/// reached through the broker's egress proxy (its loopback listener, the session's token in
/// the server's `HTTPS_PROXY`), another host refused there (403) and never reached; an
/// agent's command with other grants runs while it runs (another slot).
#[test]
fn a_stdio_mcp_server_runs_in_a_command_slot_of_its_own() {
    let (_dns, web, b) = web_behind_the_proxy("hello to the server");
    let port = web.addr.port();
    let root = b.dirs.data.parent().unwrap().to_path_buf();
    let project = root.join("project");
    let data_dir = [OsStr::new("--data-dir"), root.as_os_str()];
    let server = gatehouse_tests::bin("gatehouse-test-mcp-server");
    let policy = format!(
        r#"revision = 0
require_namespaces = false
[tools]
run_command = "allow"

[[grant]]
root = {project:?}
capabilities = ["read", "write"]

[[mcp_server]]
name = "local"
command = [{server:?}]
network = ["public.test"]
read_only = ["echo", "where"]

[[rule]]
name = "its tools"
tools = ["local__echo", "local__where", "local__connect"]
action = "allow"
"#,
        project = project.to_str().unwrap(),
        server = server.to_str().unwrap(),
    );
    let (code, out, err) = run_gatehouse(
        &data_dir,
        &["policy", "apply", "-", "--yes"],
        Some(policy.as_bytes()),
    );
    assert_eq!(code, Some(0), "{out}\n{err}");

    let mut mcp = McpFront::start(&b);
    let names = tool_names(&mcp.rpc(list_tools(2)));
    assert!(!names.iter().any(|n| n.starts_with("local__")), "{names:?}");
    let (code, out, err) = run_gatehouse(
        &data_dir,
        &["mcp-server", "tools", "local", "--approve-all"],
        None,
    );
    assert_eq!(code, Some(0), "{out}\n{err}\n{}", b.log_text());
    assert!(
        out.contains("3 tool definition(s) of local approved"),
        "{out}"
    );
    let names = tool_names(&mcp.rpc(list_tools(3)));
    for t in ["local__echo", "local__where", "local__connect"] {
        assert!(names.iter().any(|n| n == t), "{t}: {names:?}");
    }
    let (err, text) = call_text(&mcp.rpc(call_tool(
        4,
        "local__echo",
        serde_json::json!({"text": "hello through two pipes"}),
    )));
    assert!(!err, "{text}\n{}", b.log_text());
    assert!(text.contains("source=\"mcp:local__echo\""), "{text}");
    assert!(text.contains("echo: hello through two pipes"), "{text}");
    let (err, text) = call_text(&mcp.rpc(call_tool(5, "local__where", serde_json::json!({}))));
    assert!(!err, "{text}");
    let home = b.dirs.agents().join("mcp-default-local");
    assert!(
        text.contains(&format!("profile {}", home.display())),
        "{text}"
    );

    // Its network list through the broker's proxy: the allowed host answers; another is
    // refused by the proxy and never reached.
    let connect = |mcp: &mut McpFront, id, target: String| {
        let (err, text) = call_text(&mcp.rpc(call_tool(
            id,
            "local__connect",
            serde_json::json!({ "target": target }),
        )));
        assert!(!err, "{text}");
        text
    };
    let text = connect(&mut mcp, 6, format!("public.test:{port}"));
    assert!(
        text.contains("200 ") && text.contains("hello to the server"),
        "{text}\n{}",
        b.log_text()
    );
    assert_eq!(web.requests().len(), 1);
    let text = connect(&mut mcp, 7, format!("other.test:{port}"));
    assert!(text.contains("403 "), "{text}");
    assert_eq!(web.requests().len(), 1);

    // While the server runs (it holds a slot for the session), an agent's command that writes
    // the project runs in another.
    let (err, text) = call_text(&mcp.rpc(call_tool(
        8,
        "run_command",
        serde_json::json!({"argv": ["cmd.exe", "/d", "/c", "echo beside the server"],
                           "cwd": project.to_str().unwrap()}),
    )));
    assert!(!err, "{text}\n{}", b.log_text());
    assert!(text.contains("beside the server"), "{text}");

    // The audit log has the server's start and both tunnels (allowed, refused).
    let rows = b.audit();
    assert!(
        rows.iter()
            .any(|r| r.tool.as_deref() == Some("mcp_server local") && r.outcome == "started"),
        "{rows:#?}"
    );
    let (code, out, err) = run_gatehouse(&data_dir, &["audit", "tail", "-n", "200"], None);
    assert_eq!(code, Some(0), "{out}\n{err}");
    let egress: Vec<&str> = (out.lines())
        .filter(|l| l.split_whitespace().nth(2) == Some("egress"))
        .collect();
    assert!(
        (egress.iter()).any(|l| l.contains("tunnelled") && l.contains("TUNNEL public.test")),
        "{out}"
    );
    assert!(
        (egress.iter()).any(|l| l.contains("refused (403)") && l.contains("other.test")),
        "{out}"
    );
    assert_eq!(egress.len(), 2, "{out}");
    let (code, err) = mcp.finish();
    assert_eq!(code, Some(0), "{err}");
}

/// `gatehouse demo` on Windows, as the README runs it: a scripted agent session on a scratch
/// project through the real broker, spawner, helpers and `gatehouse mcp`, each outcome checked
/// by the demo against what must happen and against the files on disk, then the audit log
/// verified; its JSON report read here. Under Wine with `--allow-degraded` (Wine sets no
/// mitigation and restricts no token): the command runs in the restricted-token tier with its
/// gaps named. On Windows without it: the command is asked, approved and refused at its start,
/// naming what the tier does not hold.
#[test]
fn gatehouse_demo_shows_every_outcome() {
    let mut args = vec!["--json", "demo"];
    if running_under_wine() {
        args.push("--allow-degraded");
    }
    let (code, out, err) = run_gatehouse(&[], &args, None);
    assert_eq!(code, Some(0), "{out}\n{err}");
    let report: serde_json::Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}\n{err}"));
    assert_eq!(report["ok"], true, "{report:#}");
    assert_eq!(
        report["not_as_expected"],
        serde_json::json!([]),
        "{report:#}"
    );
    let steps = report["steps"].as_array().unwrap();
    let names: Vec<&str> = steps.iter().filter_map(|s| s["name"].as_str()).collect();
    assert_eq!(
        names,
        ["read", "search", "grep", "edit", "bashrc", "ssh_key", "metadata", "command", "twice"]
    );
    for s in steps {
        assert_eq!(s["ok"], true, "{s:#}");
    }
    let command = &steps[7]["calls"][0];
    assert_eq!(
        command["asked"].as_array().map(Vec::len),
        Some(1),
        "{command:#}"
    );
    let text = command["text"].as_str().unwrap();
    if running_under_wine() {
        assert_eq!(command["outcome"], "done", "{command:#}");
        assert!(text.contains("hello from the sandbox"), "{text}");
        assert!(
            text.contains("; tier restricted-token; DEGRADED: "),
            "{text}"
        );
        assert!(text.contains("reads are not confined"), "{text}");
    } else {
        assert_eq!(command["outcome"], "refused", "{command:#}");
        assert!(text.contains("reads are not confined"), "{text}");
    }
    // The key planted in the scratch HOME never reached the agent.
    assert!(!out.contains("DEMO-KEY-MATERIAL"), "{out}");
    assert_eq!(report["audit"]["intact"], true, "{report:#}");
    assert!(report["audit"]["entries"].as_u64().unwrap() > 0);
    // The scratch directory is gone (not kept).
    let scratch = report["scratch"].as_str().unwrap();
    assert!(!Path::new(scratch).exists(), "{scratch}");
}

/// Sends one JSON-RPC line to an MCP server on `stdin`; with an id, reads lines from `stdout`
/// until the answer with that id (notifications, such as progress, are skipped). `said`: what
/// the server said on stderr, shown if it ends first.
fn rpc_on(
    stdin: &mut impl std::io::Write,
    stdout: &mut impl std::io::BufRead,
    msg: serde_json::Value,
    said: &dyn Fn() -> String,
) -> serde_json::Value {
    writeln!(stdin, "{msg}").unwrap();
    stdin.flush().unwrap();
    if msg.get("id").is_none() {
        return serde_json::Value::Null;
    }
    let mut line = String::new();
    loop {
        line.clear();
        let n = stdout.read_line(&mut line).unwrap();
        assert!(n > 0, "the MCP server closed stdout: {}", said());
        let answer: serde_json::Value = serde_json::from_str(&line).unwrap();
        if answer.get("id") == msg.get("id") {
            return answer;
        }
    }
}

/// `gatehouse.exe`, the command line, against the broker on Windows: `doctor` (exit 0: nothing
/// missing under `--allow-degraded`), `fetch --yes` (its own proposal allowed on the console's
/// pipe; the page printed), `audit tail` (the call's rows), and `verify-audit`, whose private
/// secrets-helper is spawned strictly: on Windows it checks the chain; under Wine, which
/// restricts no token, the spawn is refused and the command says so (exit 1) rather than check
/// with a helper it could not confine; and `stop`, the orderly stop asked on the console's pipe.
#[test]
fn the_command_line_asks_reads_and_checks_the_broker() {
    let (_dns, web, b) = broker_with_web();
    let root = b.dirs.data.parent().unwrap().to_path_buf();
    let data_dir = [OsStr::new("--data-dir"), root.as_os_str()];
    let gatehouse = |args: &[&str]| run_gatehouse(&data_dir, args, None);

    let (code, out, err) = gatehouse(&["doctor"]);
    assert_eq!(code, Some(0), "{out}\n{err}");
    for name in [
        "broker",
        "spawner",
        "net-helper",
        "secrets-helper",
        "fs-helper",
    ] {
        assert!(out.contains(name), "{name}: {out}");
    }

    let url = format!("http://public.test:{}/page", web.addr.port());
    let (code, out, err) = gatehouse(&["fetch", &url, "--yes"]);
    assert_eq!(code, Some(0), "{out}\n{err}");
    assert!(out.contains("hello from the test server"), "{out}");
    assert!(out.contains("<external-"), "{out}");
    assert!(err.contains("--yes: allowing proposal"), "{err}");
    assert_eq!(web.requests().len(), 1);

    let (code, out, err) = gatehouse(&["audit", "tail", "-n", "50"]);
    assert_eq!(code, Some(0), "{out}\n{err}");
    assert!(out.contains("fetch_url"), "{out}");

    let (code, out, err) = gatehouse(&["verify-audit"]);
    if running_under_wine() {
        // The chain is checked; the seal is not, and the command fails saying why.
        assert_eq!(code, Some(1), "{out}\n{err}");
        assert!(
            out.contains("hashes linked, but the seal could not be checked: cannot start"),
            "{out}"
        );
        assert!(out.contains("CreateRestrictedToken"), "{out}");
        println!("wine does not enforce: a restricted token, so verify-audit's private secrets-helper is refused");
    } else {
        assert_eq!(code, Some(0), "{out}\n{err}");
        assert!(out.contains("chain intact"), "{out}");
    }

    // With --allow-degraded the seal is checked by a private secrets-helper that runs with
    // what Wine lacks, each gap said on stderr.
    if running_under_wine() {
        let (code, out, err) = gatehouse(&["verify-audit", "--allow-degraded"]);
        assert_eq!(code, Some(0), "{out}\n{err}");
        assert!(out.contains("chain intact"), "{out}");
        assert!(
            err.contains("gatehouse: the private secrets-helper runs degraded: "),
            "{err}"
        );
    }
    // `run` is built: an agent that is not there exits 127 before anything starts (the run
    // itself is driven below, in its own test).
    let (code, out, err) = gatehouse(&["run", "--", "no-such-agent-here"]);
    assert_eq!(code, Some(127), "{out}\n{err}");
    assert_eq!(
        err.trim_end(),
        "gatehouse run: no-such-agent-here: not found in PATH"
    );

    // `ui`: the console takes a terminal; without one it says so before connecting (the
    // console itself is not driven here: Wine gives a test no console).
    let (code, out, err) = gatehouse(&["ui"]);
    assert_eq!(code, Some(1), "{out}\n{err}");
    assert!(
        err.contains("the console needs a terminal: run it in one"),
        "{err}"
    );
    // `up` likewise, before it starts anything (the broker here is the test's, left running).
    let (code, out, err) = gatehouse(&["up"]);
    assert_eq!(code, Some(1), "{out}\n{err}");
    assert!(
        err.contains("the console needs a terminal: run `gatehouse up` in one"),
        "{err}"
    );

    // `secret`: the value is never taken from a stdin that is not a terminal unless --stdin
    // says so; with it, the value goes to the command's own secrets-helper, spawned strictly
    // (as verify-audit's): under Wine that spawn is refused and nothing is stored.
    let (code, out, err) = gatehouse(&["secret", "set", "api", "--host", "public.test"]);
    assert_eq!(code, Some(1), "{out}\n{err}");
    assert!(
        err.contains("stdin is not a terminal: pass --stdin to read the value from it"),
        "{err}"
    );
    let secret_cmd = [data_dir[0], data_dir[1], OsStr::new("secret")];
    let secret = |args: &[&str], stdin: &[u8]| run_gatehouse(&secret_cmd, args, Some(stdin));
    let value = b"s3cret-value-for-the-test\r\n";
    let set = ["set", "api", "--host", "public.test", "--stdin"];
    let (code, out, err) = secret(&set, value);
    if running_under_wine() {
        assert_eq!(code, Some(1), "{out}\n{err}");
        assert!(err.contains("CreateRestrictedToken"), "{err}");
        assert_eq!(out, "");
        println!("wine does not enforce: a restricted token, so gatehouse secret's private secrets-helper is refused");
    } else {
        assert_eq!(code, Some(0), "{out}\n{err}");
        assert!(
            out.contains("credential api saved: sent to public.test as"),
            "{out}"
        );
        let (code, out, err) = secret(&["list"], b"");
        assert_eq!(code, Some(0), "{out}\n{err}");
        assert!(out.contains("api") && out.contains("public.test"), "{out}");
        assert!(!out.contains("s3cret"), "a value was printed: {out}");
        let (code, out, err) = secret(&["delete", "api"], b"");
        assert_eq!(code, Some(0), "{out}\n{err}");
    }

    // `stop`: Windows has no SIGTERM, so the console's pipe asks for the same orderly stop;
    // the broker seals its last rows, ends its helpers and exits 0.
    let (code, out, err) = gatehouse(&["stop"]);
    assert_eq!(code, Some(0), "{out}\n{err}");
    assert!(out.contains("stopped"), "{out}");
    let mut b = b;
    let status = b.child.wait().unwrap();
    assert_eq!(status.code(), Some(0), "{}", b.log_text());
    assert!(
        b.log_text()
            .contains("the console asked the broker to stop"),
        "{}",
        b.log_text()
    );
    // Nothing runs any more: a second stop says so.
    let (code, out, _) = gatehouse(&["stop"]);
    assert_eq!(code, Some(0));
    assert!(out.contains("no broker is running"), "{out}");
}

/// `gatehouse setup network-filters`: without `--yes` it changes nothing and prints exactly the
/// generated set (the golden file's text); under Wine, which has no filtering engine, every
/// action that needs one is refused with the engine's error and nothing claims to be installed.
#[test]
fn setup_prints_the_network_filters_and_refuses_what_it_cannot_install() {
    let setup = [OsStr::new("setup"), OsStr::new("network-filters")];
    let gatehouse = |args: &[&str]| run_gatehouse(&setup, args, None);
    let (code, out, err) = gatehouse(&[]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(
        out,
        format!(
            "# would install (run with --yes from an elevated prompt):\n{}",
            sandbox::wincfg::network_filters().render()
        )
    );
    if running_under_wine() {
        for args in [&["--status"][..], &["--yes"], &["--remove"]] {
            let (code, out, err) = gatehouse(args);
            assert_eq!(code, Some(1), "{args:?}: {out}");
            assert_eq!(out, "", "{args:?}");
            assert!(
                err.contains("WFP filters: FwpmEngineOpen0 failed with Win32 error 1764"),
                "{args:?}: {err}"
            );
        }
        println!("wine does not enforce: WFP (it has no filtering engine; FwpmEngineOpen0 fails)");
    } else {
        // Reading needs no elevation: each filter is listed as installed or missing.
        let (code, out, err) = gatehouse(&["--status"]);
        assert!(matches!(code, Some(0 | 1)), "{out}\n{err}");
        let filters = sandbox::wincfg::network_filters().filters.len();
        assert_eq!(out.lines().count(), filters, "{out}");
        assert_eq!(code == Some(0), !out.contains("missing"), "{out}");
    }
}

/// `gatehouse sandbox` on Windows: the command goes to the broker's exec-helper on the console's
/// pipe, runs in the restricted-token tier, its output comes back through the broker, its exit
/// code is the command line's, and the audit log has its start and end. A program that is not
/// there exits 127, a home directory is never the implicit working root.
#[test]
fn gatehouse_sandbox_runs_a_command_through_the_brokers_exec_helper() {
    let root_of = |b: &Broker| b.dirs.data.parent().unwrap().to_path_buf();
    // By default commands run only in the Linux namespace tier: refused, saying how to choose
    // the restricted-token tier.
    let b = Broker::start(&[]);
    let root = root_of(&b);
    let data_dir = [OsStr::new("--data-dir"), root.as_os_str()];
    let echo_x = ["sandbox", "--", "cmd.exe", "/d", "/c", "echo x"];
    let (code, out, err) = run_gatehouse(&data_dir, &echo_x, None);
    assert_eq!(code, Some(125), "{out}\n{err}");
    assert!(
        err.contains("this exec helper runs them in the restricted-token tier of another OS. Set require_namespaces = false in the policy"),
        "{err}"
    );
    assert_eq!(out, "");
    // The human chooses that tier in the policy.
    choose_restricted_token_tier(&root);
    let project = root.join("project");
    let sandbox = |args: &[&str], cwd: &Path| {
        let out = Command::new(gatehouse_tests::bin("gatehouse"))
            .arg("--data-dir")
            .arg(&root)
            .arg("sandbox")
            .args(args)
            .current_dir(cwd)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        (out.status.code(), text(&out.stdout), text(&out.stderr))
    };

    let (code, out, err) = sandbox(
        &["--", "cmd.exe", "/d", "/c", "echo hello from the sandbox"],
        &project,
    );
    assert_eq!(code, Some(0), "{out}\n{err}\n{}", b.log_text());
    assert_eq!(out.trim_end(), "hello from the sandbox", "{err}");
    // The run's gaps (reads are not confined on Windows, and under Wine nothing is) are named,
    // among them that nothing keeps the command from planting what the user's tools run.
    assert!(err.contains("degraded: "), "{err}");
    let planting = "git hooks and configs and the start-up and settings files your own tools run";
    assert!(err.contains(planting), "{err}");
    // The broker applied the ACEs before the start; Wine keeps a DACL whatever is set, so the
    // exec-helper's read-back names them here (on Windows it finds them). A protected directory
    // not made yet (agents: none on Windows) gets none and is not named.
    if running_under_wine() {
        assert!(err.contains("project has no ACE"), "{err}");
        println!(
            "wine does not enforce: file DACLs (the broker's ACEs for a command are not read back)"
        );
    } else {
        assert!(!err.contains("has no ACE"), "{err}");
    }
    assert!(!err.contains(r"\agents has no ACE"), "{err}");
    // Read-only, the project has nothing to plant in: that gap is not named.
    let (code, out, err) = sandbox(
        &[
            "--allow-read",
            project.to_str().unwrap(),
            "--",
            "cmd.exe",
            "/d",
            "/c",
            "echo read-only",
        ],
        &project,
    );
    assert_eq!(code, Some(0), "{out}\n{err}");
    assert_eq!(out.trim_end(), "read-only", "{err}");
    assert!(
        err.contains("degraded: ") && !err.contains(planting),
        "{err}"
    );

    // The command's own exit code, and its stderr on this process's stderr.
    let (code, out, err) = sandbox(
        &["--", "cmd.exe", "/d", "/c", "echo to stderr 1>&2 & exit 7"],
        &project,
    );
    assert_eq!(code, Some(7), "{out}\n{err}");
    assert!(err.contains("to stderr"), "{err}");
    assert_eq!(out, "");

    // A program that is not there: 127, and nothing ran.
    let (code, out, err) = sandbox(&["--", "no-such-program-here"], &project);
    assert_eq!(code, Some(127), "{out}\n{err}");
    assert!(err.contains("no-such-program-here"), "{err}");
    println!("    not found: {}", err.trim_end());

    // Run from the user's home directory, nothing is granted implicitly: refused before the
    // broker is asked (the positive control is the first run above, from the project).
    let home = ipc_schema::protected::user_home().expect("USERPROFILE is set");
    let (code, out, err) = sandbox(&["--", "cmd.exe", "/d", "/c", "echo x"], &home);
    assert_eq!(code, Some(125), "{out}\n{err}");
    assert!(
        err.contains("is not granted: it is (or contains) a home directory"),
        "{err}"
    );

    // Every run is in the audit log, under the tool name the human's commands carry.
    let (code, out, err) = run_gatehouse(
        &[OsStr::new("--data-dir"), root.as_os_str()],
        &["audit", "tail", "-n", "100"],
        None,
    );
    assert_eq!(code, Some(0), "{out}\n{err}");
    let rows: Vec<&str> = out
        .lines()
        .filter(|l| l.contains("gatehouse sandbox"))
        .collect();
    assert!(
        rows.iter().filter(|l| l.contains("started")).count() >= 2,
        "{out}"
    );
    assert!(rows.iter().any(|l| l.contains("ended")), "{out}");
    assert!(rows.iter().any(|l| l.contains("refused")), "{out}");
}

/// The child mode of [`gatehouse_sandbox_reaches_its_allowed_hosts_only_through_the_brokers_proxy`]:
/// the `HOST:PORT` targets (comma-separated) to ask the proxy in the command's variables for.
const PROXY_CHILD: &str = "GATEHOUSE_TEST_PROXY_CHILD";

/// Held by each test that opens an egress proxy: one of them checks that the proxy's ports are
/// free once its command ended, which another's listener would make untrue.
static PROXY_PORTS: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// One CONNECT to the proxy at `proxy` for `target`, with `auth` (a `Proxy-Authorization`
/// value, or none); on `200`, a GET through the tunnel. The status code and what came back.
fn connect_through(proxy: &str, target: &str, auth: Option<&str>) -> (u16, String) {
    use std::io::{BufRead, BufReader, Read, Write};
    let mut s = std::net::TcpStream::connect(proxy).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let auth = auth.map_or(String::new(), |a| format!("Proxy-Authorization: {a}\r\n"));
    write!(
        s,
        "CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n{auth}\r\n"
    )
    .unwrap();
    let mut r = BufReader::new(s.try_clone().unwrap());
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    let status: u16 = line
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    loop {
        let mut h = String::new();
        if r.read_line(&mut h).unwrap() == 0 || h == "\r\n" {
            break;
        }
    }
    let mut body = String::new();
    if status == 200 {
        let host = target.split(':').next().unwrap();
        write!(
            s,
            "GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
    }
    let _ = r.read_to_string(&mut body);
    (status, body)
}

/// Not a test on its own: the command [`gatehouse_sandbox_reaches_its_allowed_hosts_only_through_the_brokers_proxy`]
/// runs in the sandbox (does nothing without its variable). It reads the proxy's address and
/// token from `HTTPS_PROXY`, as curl and git would, asks for each target with the token, and once
/// without; it prints one line a try: `TARGET STATUS BODY-OR-REASON`.
#[test]
fn proxy_child_mode() {
    let Ok(targets) = std::env::var(PROXY_CHILD) else {
        return;
    };
    let url = std::env::var("HTTPS_PROXY").expect("the sandbox sets HTTPS_PROXY");
    assert_eq!(std::env::var("HTTP_PROXY").as_deref(), Ok(url.as_str()));
    let rest = url
        .strip_prefix("http://gatehouse:")
        .expect("http://gatehouse:TOKEN@HOST:PORT");
    let (token, proxy) = rest.split_once('@').unwrap();
    assert!(proxy.starts_with("127.0.0.1:"), "{url}");
    let flat = |b: &str| b.replace(['\r', '\n'], " ");
    for target in targets.split(',') {
        let (status, body) = connect_through(proxy, target, Some(&format!("Bearer {token}")));
        println!("{target} {status} {}", flat(&body));
    }
    let (status, body) = connect_through(proxy, targets.split(',').next().unwrap(), None);
    println!("no-token {status} {}", flat(&body));
}

/// `gatehouse sandbox --allow-domain` on Windows: the command's proxy variables name the
/// broker's listener on a loopback port of the reserved range; each connection the command
/// makes there is duplicated into the net-helper and served by its proxy session, as on Linux:
/// the allowed host is tunnelled to, another host is refused (403) and never reached, a client
/// without the session's token is refused (407); every connection's end is an audit row.
#[test]
fn gatehouse_sandbox_reaches_its_allowed_hosts_only_through_the_brokers_proxy() {
    let _ports = PROXY_PORTS.lock().unwrap_or_else(|e| e.into_inner());
    let (_dns, web, b) = web_behind_the_proxy("hello through the proxy");
    let port = web.addr.port().to_string();
    let root = b.dirs.data.parent().unwrap().to_path_buf();
    let project = root.join("project");
    choose_restricted_token_tier(&root);
    let data_dir = [OsStr::new("--data-dir"), root.as_os_str()];
    let me = std::env::current_exe().unwrap();
    let targets = format!("public.test:{port},other.test:{port}");
    let out = Command::new(gatehouse_tests::bin("gatehouse"))
        .arg("--data-dir")
        .arg(&root)
        .args(["sandbox", "--allow-domain", "public.test", "--env"])
        .arg(format!("{PROXY_CHILD}={targets}"))
        .arg("--")
        .arg(&me)
        .args([
            "--exact",
            "proxy_child_mode",
            "--nocapture",
            "--test-threads=1",
        ])
        .current_dir(&project)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    println!("    the command said: {stdout}\n    gatehouse said: {stderr}");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{stderr}\n{}",
        b.log_text()
    );
    // (libtest prints `test proxy_child_mode ... ` before the child's first line.)
    let line = |what: &str| {
        stdout
            .lines()
            .find_map(|l| l.find(what).map(|at| l[at..].to_string()))
            .unwrap_or_else(|| panic!("no {what} line in {stdout}"))
    };
    // Allowed: tunnelled to the server, which answered through it.
    let allowed = line(&format!("public.test:{port} "));
    assert!(
        allowed.starts_with(&format!("public.test:{port} 200 ")),
        "{allowed}"
    );
    assert!(allowed.contains("hello through the proxy"), "{allowed}");
    // Not on the list: refused by the proxy, never reached (the server saw one request).
    let other = line(&format!("other.test:{port} "));
    assert!(
        other.starts_with(&format!("other.test:{port} 403 ")),
        "{other}"
    );
    assert!(!other.contains("hello"), "{other}");
    // Without the session's token: refused before anything is resolved.
    let no_token = line("no-token ");
    assert!(no_token.starts_with("no-token 407 "), "{no_token}");
    assert_eq!(
        web.requests().len(),
        1,
        "only the allowed CONNECT reached the server"
    );
    // The broker's listener was in the reserved range, and is closed with the command.
    // (The other test of this binary that opens a proxy waits for `PROXY_PORTS`.)
    for p in ipc_schema::net::LOOPBACK_PROXY_PORTS.take(4) {
        assert!(
            std::net::TcpStream::connect(("127.0.0.1", p)).is_err(),
            "something still listens on the proxy's port {p} after the command ended"
        );
    }
    // Every connection's end is in the audit log, the tunnel and both refusals.
    let (code, out, err) = run_gatehouse(&data_dir, &["audit", "tail", "-n", "100"], None);
    assert_eq!(code, Some(0), "{out}\n{err}");
    let egress: Vec<&str> = out
        .lines()
        .filter(|l| l.split_whitespace().nth(2) == Some("egress"))
        .collect();
    assert!(
        egress
            .iter()
            .any(|l| l.contains("tunnelled") && l.contains("TUNNEL public.test")),
        "{out}"
    );
    assert!(
        egress
            .iter()
            .any(|l| l.contains("refused (403)") && l.contains("other.test")),
        "{out}"
    );
    assert!(egress.iter().any(|l| l.contains("refused (407)")), "{out}");
    assert_eq!(egress.len(), 3, "{out}");
}

/// The hook [`the_notifier_hands_a_waiting_card_to_the_hook`] configures: this test binary in a
/// child mode that copies its stdin to the file named in this variable.
const HOOK_OUT: &str = "GATEHOUSE_TEST_HOOK_OUT";

/// Not a test on its own: the notifier's hook (does nothing without its variable).
#[test]
fn hook_child_mode() {
    let Some(out) = std::env::var_os(HOOK_OUT) else {
        return;
    };
    let mut got = Vec::new();
    std::io::Read::read_to_end(&mut std::io::stdin(), &mut got).unwrap();
    std::fs::write(out, got).unwrap();
}

/// `gatehouse notify` on Windows: no desktop notifications there, so the hook is the notifier.
/// A card that waits while no console is attached reaches the hook as the summary on stdin
/// (never the arguments); a console that attaches takes it back.
#[test]
fn the_notifier_hands_a_waiting_card_to_the_hook() {
    use std::io::BufRead as _;
    let (_dns, web, b) = broker_with_web();
    let root = b.dirs.data.parent().unwrap().to_path_buf();
    let hook_out = root.join("hook-stdin.json");
    let exe = std::env::current_exe().unwrap();
    let config = format!(
        "[notify]\ncommand = [{:?}, \"--exact\", \"hook_child_mode\", \"--test-threads=1\"]\n",
        exe.to_str().unwrap()
    );
    std::fs::write(b.dirs.config.join("config.toml"), config).unwrap();
    // The notifier's own binary (`gatehouse notify` runs it as a child on Windows), so that the
    // test's kill ends it.
    let mut child = Command::new(gatehouse_tests::bin("gatehouse-notify"))
        .arg("--data-dir")
        .arg(&root)
        .arg("--json")
        .env(HOOK_OUT, &hook_out)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    struct Kill(Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let _child = Kill(child);
    let mut next = |event: &str| -> serde_json::Value {
        for line in lines.by_ref() {
            let v: serde_json::Value = serde_json::from_str(&line.unwrap()).unwrap();
            if v["event"] == event {
                return v;
            }
        }
        panic!("the notifier ended before {event:?}: {}", b.log_text());
    };
    let w = next("watching");
    assert_eq!(w["desktop"], serde_json::Value::Null);
    assert_eq!(w["hook"], true);

    let url = format!("http://public.test:{}/page", web.addr.port());
    let (_agent, _, waiting) = agent_fetch_waits(&b, &url);
    assert_eq!(next("hook")["ended"], "exited with status 0");
    let got: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&hook_out).unwrap()).unwrap();
    assert_eq!(got["event"], "waiting");
    assert_eq!(got["proposal"], waiting.proposal.0);
    assert_eq!(got["tool"], "fetch_url");
    assert!(
        got["target"].as_str().unwrap().contains("public.test"),
        "{got}"
    );
    assert_eq!(got["decide_with"], "gatehouse ui");

    // A console attaches: the card is taken back from the notifier.
    let mut console = Client::connect(&b.dirs.ui_socket()).unwrap();
    assert_eq!(
        console.request(Body::Ui(UiRequest::Subscribe)).unwrap(),
        Body::UiReply(UiReply::Subscribed)
    );
    let c = next("closed");
    assert_eq!(c["proposal"], waiting.proposal.0);
    assert_eq!(c["why"], "console attached");
    // Nothing was fetched: the notifier can watch, never decide.
    assert_eq!(web.requests().len(), 0);
}

/// An agent's file tools on Windows, through the real broker and the fs-helper it started: a
/// read inside the project grant is answered (the policy's Allow), a listing names what is
/// there and marks the protected directory; a read outside every grant and one of a protected
/// key file (both readable by this test: the controls) are refused by containment. A write asks
/// first, its card showing the diff; allowed once, the file is written and the agent gets the
/// checkpoint, which its `undo_change` (asked and allowed too) takes back; a delete asks and
/// deletes the same way. No card is left waiting.
#[test]
fn an_agents_file_tools_go_through_the_fs_helper_changes_wait_for_the_human() {
    use ipc_schema::fs::{CreateMode, FsPath};
    use ipc_schema::tool::{DeletePath, ListDir, ReadFile, UndoChange, WriteFile};
    let b = Broker::start(&[]);
    let root = b.dirs.data.parent().unwrap().to_path_buf();
    let project = std::fs::canonicalize(root.join("project")).unwrap();
    std::fs::create_dir(project.join(".ssh")).unwrap();
    std::fs::write(project.join(".ssh").join("id_ed25519"), "KEY").unwrap();
    std::fs::write(project.join("notes.txt"), "from the project").unwrap();
    std::fs::write(root.join("outside.txt"), "outside").unwrap();
    let path = |p: &Path| FsPath::Absolute(p.as_os_str().as_encoded_bytes().to_vec());
    let read = |p: &Path| {
        ToolCall::ReadFile(ReadFile {
            path: path(p),
            offset: 0,
            length: 0,
        })
    };
    let mut agent = Client::connect(&b.dirs.gateway_socket()).unwrap();
    let ask = |agent: &mut Client, call: ToolCall| {
        let id = agent.send(Body::ToolCall(call)).unwrap();
        match agent.next_frame().unwrap() {
            e if e.id == id => (id, e.body),
            other => panic!("an answer to another request: {other:?}"),
        }
    };
    let done = |body: Body| match body {
        Body::ToolReply(ToolReply::Done(d)) => d.result,
        other => panic!("not done: {other:?}"),
    };
    let refused = |body: Body, says: &str| match body {
        Body::ToolReply(ToolReply::Refused(r)) => {
            assert!(r.message.contains(says), "{}", r.message)
        }
        other => panic!("not refused: {other:?}"),
    };

    match done(ask(&mut agent, read(&project.join("notes.txt"))).1) {
        ToolResult::File(c) => {
            assert_eq!(c.data, b"from the project");
            assert!(c.target.absolute.ends_with(br"project\notes.txt"));
        }
        other => panic!("{other:?}"),
    }
    let list = ToolCall::ListDir(ListDir {
        path: path(&project),
        offset: 0,
        limit: 0,
    });
    match done(ask(&mut agent, list).1) {
        ToolResult::Listing(l) => {
            let names: Vec<(&[u8], bool)> = (l.entries.iter())
                .map(|e| (e.name.as_slice(), e.protected))
                .collect();
            assert_eq!(names, [(&b".ssh"[..], true), (&b"notes.txt"[..], false)]);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(std::fs::read(root.join("outside.txt")).unwrap(), b"outside");
    refused(
        ask(&mut agent, read(&root.join("outside.txt"))).1,
        "not inside any grant",
    );
    let key = project.join(".ssh").join("id_ed25519");
    assert_eq!(std::fs::read(&key).unwrap(), b"KEY");
    refused(ask(&mut agent, read(&key)).1, "protected");

    // A write waits for the human, who sees the diff; nothing is written before the yes.
    let new = project.join("new.txt");
    let write = ToolCall::WriteFile(WriteFile {
        path: path(&new),
        content: b"written by the agent\n".to_vec(),
        create: CreateMode::Either,
        create_parents: false,
    });
    let (call, body) = ask(&mut agent, write);
    let waiting = match body {
        Body::ToolReply(ToolReply::AwaitingApproval(w)) => w,
        other => panic!("the default policy should ask: {other:?}"),
    };
    assert!(!new.exists());
    let card = allow_once(&b, waiting.proposal);
    assert!(
        card.diff
            .as_deref()
            .unwrap_or_default()
            .contains("+written by the agent"),
        "{card:?}"
    );
    let receipt = match done_for(&b, &mut agent, call).result {
        ToolResult::Changed(c) => c,
        other => panic!("not a change: {other:?}"),
    };
    assert!(receipt.created);
    assert_eq!(std::fs::read(&new).unwrap(), b"written by the agent\n");
    // Its undo, asked and allowed like any change: the file is gone again.
    let undo = ToolCall::UndoChange(UndoChange {
        checkpoint: receipt.checkpoint.id.clone(),
    });
    let (call, body) = ask(&mut agent, undo);
    if let Body::ToolReply(ToolReply::AwaitingApproval(w)) = body {
        allow_once(&b, w.proposal);
        match done_for(&b, &mut agent, call).result {
            ToolResult::Undone(i) => assert!(i.undone),
            other => panic!("not undone: {other:?}"),
        }
    } else {
        match done(body) {
            ToolResult::Undone(i) => assert!(i.undone),
            other => panic!("not undone: {other:?}"),
        }
    }
    assert!(!new.exists());

    // A delete asks too; allowed once, the file is gone.
    let delete = ToolCall::DeletePath(DeletePath {
        path: path(&project.join("notes.txt")),
        recursive: false,
    });
    let (call, body) = ask(&mut agent, delete);
    let waiting = match body {
        Body::ToolReply(ToolReply::AwaitingApproval(w)) => w,
        other => panic!("the default policy should ask: {other:?}"),
    };
    assert!(project.join("notes.txt").exists());
    allow_once(&b, waiting.proposal);
    match done_for(&b, &mut agent, call).result {
        ToolResult::Changed(c) => assert_eq!(c.entries, 1),
        other => panic!("not a change: {other:?}"),
    }
    assert!(!project.join("notes.txt").exists());
    match b.ui(Body::Ui(UiRequest::ListPending)) {
        Body::UiReply(UiReply::Pending(p)) => assert!(p.is_empty(), "{p:?}"),
        other => panic!("ListPending answered {other:?}"),
    }
}

/// The child mode of [`gatehouse_run_starts_an_agent_whose_tools_reach_gatehouse_on_its_own_pipe`]:
/// an agent (this test binary, inside `gatehouse run`) that does what an agent CLI does with
/// the MCP config it was given: starts the server it names and calls tools through it. The
/// variable holds the project's path. It prints one line per outcome for the test to check.
const AGENT_CHILD: &str = "GATEHOUSE_TEST_AGENT_CHILD";
/// ... and the `HOST:PORT` it reaches through the run's egress proxy.
const AGENT_EGRESS: &str = "GATEHOUSE_TEST_AGENT_EGRESS";

#[test]
fn agent_child_mode() {
    use std::io::BufReader;
    let Ok(project) = std::env::var(AGENT_CHILD) else {
        return;
    };
    let project = PathBuf::from(project);
    let var = |k: &str| std::env::var(k).unwrap_or_else(|_| panic!("{k} is not set"));
    println!("home {}", var("USERPROFILE"));
    println!("temp {}", var("TEMP"));
    println!("pipe {}", var(ipc_schema::exec::AGENT_SOCKET_ENV));
    let config_path = var(ipc_schema::exec::AGENT_MCP_CONFIG_ENV);
    println!("config {config_path}");
    // The test first tries the run's pipe from outside the sandbox; it says when it is done.
    let go = project.join("outside-tried");
    let deadline = Instant::now() + Duration::from_secs(90);
    while !go.exists() {
        assert!(
            Instant::now() < deadline,
            "the test never tried from outside"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&config_path).unwrap()).unwrap();
    let server = &config["mcpServers"]["gatehouse"];
    let command = server["command"].as_str().unwrap().to_string();
    let args: Vec<String> = (server["args"].as_array().unwrap().iter())
        .map(|a| a.as_str().unwrap().to_string())
        .collect();
    // An MCP client starts servers with a filtered environment: nothing of gatehouse's.
    let mut mcp = Command::new(&command)
        .args(&args)
        .env_remove(ipc_schema::exec::AGENT_TOKEN_ENV)
        .env_remove(ipc_schema::exec::AGENT_SOCKET_ENV)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut stdin = mcp.stdin.take().unwrap();
    let mut stdout = BufReader::new(mcp.stdout.take().unwrap());
    let mut rpc = |msg| rpc_on(&mut stdin, &mut stdout, msg, &String::new);
    let init = rpc(
        serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "wine-agent", "version": "1"}}}),
    );
    println!("initialized {}", init["result"]["protocolVersion"]);
    rpc(serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    let call = |id: u64, name: &str, arguments: serde_json::Value| {
        serde_json::json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": name, "arguments": arguments}})
    };
    let said = |r: &serde_json::Value| {
        let text = r["result"]["content"][0]["text"].as_str().unwrap_or("");
        format!(
            "{} {}",
            r["result"]["isError"] == true,
            text.replace(['\r', '\n'], " ")
        )
    };
    let path = |p: &Path| p.to_str().unwrap().to_string();
    let read = rpc(call(
        2,
        "read_file",
        serde_json::json!({"path": path(&project.join("notes.txt"))}),
    ));
    println!("read {}", said(&read));
    let key = rpc(call(
        3,
        "read_file",
        serde_json::json!({"path": path(&project.join(".ssh").join("id_ed25519"))}),
    ));
    println!("key {}", said(&key));
    let write = rpc(call(
        4,
        "write_file",
        serde_json::json!({"path": path(&project.join("out.txt")), "content": "written by the agent"}),
    ));
    println!("write {}", said(&write));
    // A command of its own while it runs: in a command slot of its own beside the agent's.
    let own = rpc(call(
        5,
        "run_command",
        serde_json::json!({"argv": ["cmd.exe", "/d", "/c", "echo from the agent"]}),
    ));
    println!("command {}", said(&own));
    // Its provider, through the egress proxy the run's variables name (its session is open
    // now, so the tunnel's row is under it).
    if let Ok(target) = std::env::var(AGENT_EGRESS) {
        let url = var("HTTPS_PROXY");
        let rest = url
            .strip_prefix("http://gatehouse:")
            .expect("the proxy's URL");
        let (token, proxy) = rest.split_once('@').unwrap();
        let (status, body) = connect_through(proxy, &target, Some(&format!("Bearer {token}")));
        println!("egress {status} {}", body.replace(['\r', '\n'], " "));
    }
    drop(stdin);
    println!("mcp exit {:?}", mcp.wait().unwrap().code());

    // The same server with a token that is not the run's: refused by the broker.
    let wrong = std::env::temp_dir().join("wrong-token");
    std::fs::write(&wrong, "0".repeat(64)).unwrap();
    let mut wrong_args = args.clone();
    let at = wrong_args.iter().position(|a| a == "--token-file").unwrap();
    wrong_args[at + 1] = path(&wrong);
    let out = Command::new(&command)
        .args(&wrong_args)
        .stdin(Stdio::piped())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).replace(['\r', '\n'], " ");
    println!("wrong-token {:?} {err}", out.status.code());
}

/// `gatehouse run` on Windows: the agent (this test binary in [`agent_child_mode`]) runs in the
/// restricted-token tier with its state directory as its profile, finds gatehouse through the
/// MCP config the run wrote, and its `gatehouse mcp` reaches the broker on the run's own pipe
/// with the run's token (a wrong token is refused): a read allowed, a protected key refused, a
/// write that waits for the human and lands once allowed. When the agent ends, its session is
/// revoked, its pipe and token file are gone, and the audit log has the run.
#[test]
fn gatehouse_run_starts_an_agent_whose_tools_reach_gatehouse_on_its_own_pipe() {
    let _ports = PROXY_PORTS.lock().unwrap_or_else(|e| e.into_inner());
    // Its provider: the test's web server.
    let (_dns, web, b) = web_behind_the_proxy("hello to the agent");
    let root = b.dirs.data.parent().unwrap().to_path_buf();
    let project = std::fs::canonicalize(root.join("project")).unwrap();
    // The restricted-token tier for commands; reads in the project allowed, the rest asked.
    choose_restricted_token_tier_with(&root, "read_file = \"allow\"\n");
    let data_dir = [OsStr::new("--data-dir"), root.as_os_str()];
    std::fs::create_dir(project.join(".ssh")).unwrap();
    std::fs::write(project.join(".ssh").join("id_ed25519"), "KEY").unwrap();
    std::fs::write(project.join("notes.txt"), "from the project").unwrap();
    // The test reads the key itself: the refusal below is gatehouse's.
    assert_eq!(
        std::fs::read(project.join(".ssh").join("id_ed25519")).unwrap(),
        b"KEY"
    );
    // The console allows every card until the run is over, and keeps them.
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let approver = {
        let (ui, done) = (b.dirs.ui_socket(), done.clone());
        std::thread::spawn(move || {
            let mut cards = Vec::new();
            while !done.load(std::sync::atomic::Ordering::SeqCst) {
                let mut c = Client::connect(&ui).unwrap();
                let pending = match c.request(Body::Ui(UiRequest::ListPending)) {
                    Ok(Body::UiReply(UiReply::Pending(p))) => p,
                    other => panic!("ListPending answered {other:?}"),
                };
                for card in pending {
                    let decided = c.request(Body::Ui(UiRequest::Decide(Decision {
                        proposal: card.id,
                        digest: card.digest,
                        choice: Choice::AllowOnce,
                    })));
                    assert!(
                        matches!(decided, Ok(Body::UiReply(UiReply::Decided { .. }))),
                        "{decided:?}"
                    );
                    cards.push(card);
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            cards
        })
    };
    let me = std::env::current_exe().unwrap();
    let mut cmd = Command::new(gatehouse_tests::bin("gatehouse"));
    cmd.arg("--data-dir").arg(&root).args(["run", "--env"]);
    cmd.arg(format!("{AGENT_CHILD}={}", project.display()));
    let target = format!("public.test:{}", web.addr.port());
    cmd.args(["--allow-domain", "public.test", "--env"]);
    cmd.arg(format!("{AGENT_EGRESS}={target}"));
    if running_under_wine() {
        cmd.arg("--allow-degraded");
    }
    let (out_file, err_file) = (root.join("run.out"), root.join("run.err"));
    let mut run = cmd
        .arg("--")
        .arg(&me)
        .args([
            "--exact",
            "agent_child_mode",
            "--nocapture",
            "--test-threads=1",
        ])
        .current_dir(&project)
        .stdin(Stdio::null())
        .stdout(File::create(&out_file).unwrap())
        .stderr(File::create(&err_file).unwrap())
        .spawn()
        .unwrap();
    let said = |f: &Path| std::fs::read_to_string(f).unwrap_or_default();

    // While the agent runs: its token file, which any process of the user can read, and the
    // run's pipe, which the DACL opens to the user. A `gatehouse mcp` outside the sandbox with
    // that token is refused (the agent's own, inside, is served below: the control).
    let deadline = Instant::now() + Duration::from_secs(90);
    let token_file = loop {
        let found = std::fs::read_dir(b.dirs.agents()).ok().and_then(|homes| {
            homes
                .flatten()
                .filter_map(|h| std::fs::read_dir(h.path()).ok())
                .flatten()
                .flatten()
                .map(|e| e.path())
                .find(|p| p.extension().is_some_and(|x| x == "token"))
        });
        if let Some(found) = found {
            break found;
        }
        if let Ok(Some(status)) = run.try_wait() {
            panic!(
                "the run ended ({status}) before its token file was seen: {}\n{}",
                said(&out_file),
                said(&err_file)
            );
        }
        assert!(
            Instant::now() < deadline,
            "no token file: {}",
            said(&err_file)
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let name = token_file.file_name().unwrap().to_str().unwrap();
    let name = name
        .strip_prefix("gatehouse-run-")
        .unwrap()
        .strip_suffix(".token")
        .unwrap();
    let outside_pipe = format!(r"\\.\pipe\gatehouse-run-{name}");
    let mut outside = Command::new(gatehouse_tests::bin("gatehouse-mcp"));
    outside
        .args(["--gateway-socket", &outside_pipe, "--token-file"])
        .arg(&token_file)
        .stdin(Stdio::null());
    if running_under_wine() {
        outside.arg("--allow-degraded");
    }
    let outside = outside.output().unwrap();
    let outside_err = String::from_utf8_lossy(&outside.stderr).into_owned();
    println!("    outside the sandbox, gatehouse mcp said: {outside_err}");
    assert_ne!(outside.status.code(), Some(0), "{outside_err}");
    assert!(!outside_err.contains("carried on"), "{outside_err}");
    std::fs::write(project.join("outside-tried"), "").unwrap();

    let status = run.wait().unwrap();
    let (stdout, stderr) = (said(&out_file), said(&err_file));
    println!("    the agent said: {stdout}\n    gatehouse said: {stderr}");
    assert_eq!(
        status.code(),
        Some(0),
        "{stdout}\n{stderr}\n{}",
        b.log_text()
    );
    let line = |what: &str| {
        stdout
            .lines()
            .find_map(|l| l.find(what).map(|at| l[at + what.len()..].to_string()))
            .unwrap_or_else(|| panic!("no {what:?} line in {stdout}"))
    };
    // Its profile is its own state directory in gatehouse's agents directory.
    let home = PathBuf::from(line("home "));
    assert_eq!(home.parent(), Some(b.dirs.agents().as_path()), "{stdout}");
    assert_eq!(PathBuf::from(line("temp ")), home.join("tmp"));
    assert!(
        stderr.contains(&format!("its login and state: {}", home.display())),
        "{stderr}"
    );
    // What the tier does not hold for the agent is named: above all, its reads.
    assert!(
        stderr.contains("gatehouse run: degraded: reads are not confined"),
        "{stderr}"
    );
    let pipe = line("pipe ");
    assert_eq!(pipe, outside_pipe);
    assert_eq!(Path::new(&line("config ")).parent(), Some(home.as_path()));
    assert_eq!(line("initialized "), "\"2025-06-18\"");
    // Through gatehouse: the read allowed, the key refused, the write asked and allowed.
    let read = line("read ");
    assert!(
        read.starts_with("false ") && read.contains("from the project"),
        "{read}"
    );
    let key = line("key ");
    assert!(
        key.starts_with("true ") && key.contains("protected"),
        "{key}"
    );
    assert!(!key.contains("KEY"), "{key}");
    let write = line("write ");
    assert!(write.starts_with("false "), "{write}\n{}", b.log_text());
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    let cards = approver.join().unwrap();
    assert!(cards[0].target.contains("out.txt"), "{cards:?}");
    assert_eq!(
        std::fs::read(project.join("out.txt")).unwrap(),
        b"written by the agent"
    );
    // Its own command, allowed by the console, runs while the agent runs: the agent (a
    // command that writes its state directory) holds one command slot, the command (which
    // writes the project) another, each with its own SID on its ACEs.
    let command = line("command ");
    assert!(
        command.starts_with("false ") && command.contains("from the agent"),
        "{command}\n{}",
        b.log_text()
    );
    assert_eq!(cards.len(), 2, "{cards:?}");
    assert_eq!(line("mcp exit "), "Some(0)");
    // Positive control above; a token that is not the run's opens nothing.
    let wrong = line("wrong-token ");
    assert!(!wrong.starts_with("Some(0)"), "{wrong}");
    assert!(wrong.contains("not this run's token"), "{wrong}");

    // Its provider reached through the run's proxy, the only request the server saw.
    let egress = line("egress ");
    assert!(
        egress.starts_with("200 ") && egress.contains("hello to the agent"),
        "{egress}"
    );
    assert_eq!(web.requests().len(), 1);

    // The run is over: its pipe is gone, and so are its token file and config.
    assert!(
        sandbox::endpoint::connect(&pipe).is_err(),
        "the run's pipe still answers"
    );
    let left: Vec<String> = std::fs::read_dir(&home)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("gatehouse-run-"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
    // The audit log has the run's start and end and its session, revoked with it.
    let (code, out, err) = run_gatehouse(&data_dir, &["audit", "tail", "-n", "200"], None);
    assert_eq!(code, Some(0), "{out}\n{err}");
    let rows: Vec<&str> = out
        .lines()
        .filter(|l| l.contains("gatehouse run"))
        .collect();
    assert!(rows.iter().any(|l| l.contains("started")), "{out}");
    assert!(rows.iter().any(|l| l.contains("ended")), "{out}");
    assert!(out.contains("run ended"), "{out}");
    // The tunnel's row is under the agent's session (the first 8 characters of its id).
    let session = stderr
        .split("gatehouse mcp: session ")
        .nth(1)
        .map(|s| s.chars().take(8).collect::<String>())
        .unwrap_or_else(|| panic!("no session in {stderr}"));
    assert!(
        out.lines()
            .any(|l| l.contains("egress") && l.contains("tunnelled") && l.contains(&session)),
        "{session}: {out}"
    );
    // The connection from outside: refused, and said why.
    assert!(
        out.lines()
            .any(|l| l.contains("a connection to a run's gateway pipe")
                && l.contains("is not in the run's sandbox")),
        "{out}"
    );
}
