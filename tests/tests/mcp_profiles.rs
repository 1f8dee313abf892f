// Drives the Linux binaries (ipc_schema::platform::Missing elsewhere).
#![cfg(target_os = "linux")]
//! Named session profiles end to end: `gatehouse mcp --profile NAME` against the real broker,
//! helpers and gateway. Each profile is judged by its own grants, tools, limits and network
//! allowlist; an unknown profile is refused before serving; a session keeps its profile across
//! a resume; a multi-profile document is applied or refused whole; the console's session list
//! names the agent and the profile.

#![forbid(unsafe_code)]

mod mcp_support;

use gatehouse_tests::{bin, http_response, Conn, LoopbackDns, TestWebServer};
use ipc_schema::tool::{ProfileName, ResumeToken, ToolCall, ToolReply};
use ipc_schema::ui::{SessionSummary, UiReply, UiRequest};
use ipc_schema::Body;
use mcp_support::*;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// The policy of these tests: the default profile grants the project; `alpha` and `beta` each
/// grant a directory of their own; `beta` denies write_file, asks for fetch_url and may reach
/// only docs.rs;
/// `gamma` may reach only 127.0.0.2 (the tests' "public" web server) and names under ok.test.
const POLICY: &str = r#"
revision = 0
[tools]
read_file = "allow"
write_file = "ask"
[[grant]]
root = "{ROOT}"
capabilities = ["read", "write"]

[profile.alpha.tools]
read_file = "allow"
[[profile.alpha.grant]]
root = "{A}"
capabilities = ["read"]

[profile.beta]
network = ["docs.rs"]
[profile.beta.tools]
read_file = "allow"
write_file = "deny"
fetch_url = "ask"
[[profile.beta.grant]]
root = "{B}"
capabilities = ["read"]

[profile.gamma]
network = ["127.0.0.2", "*.ok.test"]
[profile.gamma.tools]
fetch_url = "allow"
"#;

struct Setup {
    inst: Instance,
    a: PathBuf,
    b: PathBuf,
}

/// An instance with [`POLICY`] and a file in each profile's directory.
fn setup() -> Setup {
    let inst = Instance::new(None);
    let mk = |name: &str| {
        let d = inst.tmp.path().join(name);
        std::fs::create_dir_all(&d).unwrap();
        let d = std::fs::canonicalize(d).unwrap();
        std::fs::write(d.join(format!("{name}.txt")), format!("in {name}\n")).unwrap();
        d
    };
    let (a, b) = (mk("alpha"), mk("beta"));
    std::fs::write(
        inst.data.join("config/policy.toml"),
        policy_text(&inst, &a, &b),
    )
    .unwrap();
    Setup { inst, a, b }
}

fn policy_text(inst: &Instance, a: &Path, b: &Path) -> String {
    POLICY
        .replace("{ROOT}", &inst.project.display().to_string())
        .replace("{A}", &a.display().to_string())
        .replace("{B}", &b.display().to_string())
}

fn tool_names(m: &mut Mcp) -> Vec<String> {
    let r = m.request("tools/list", json!({}));
    r["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("{r}"))
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect()
}

fn path_arg(p: &Path) -> Value {
    json!({"path": p.display().to_string()})
}

#[test]
fn each_profile_reads_only_its_own_grant() {
    let s = setup();
    let _b = s.inst.broker(&[]);
    let (fa, fb) = (s.a.join("alpha.txt"), s.b.join("beta.txt"));

    let mut alpha = s.inst.mcp(&["--profile", "alpha"]);
    alpha.initialize("2025-06-18");
    // Positive control: alpha reads its own grant.
    assert_eq!(
        alpha.call("read_file", path_arg(&fa)),
        (false, "in alpha\n".into())
    );
    // beta's grant is served by the same fs-helper, and refused for alpha by the broker.
    assert_eq!(
        alpha.call("read_file", path_arg(&fb)),
        (
            true,
            format!(
                "Refused by gatehouse: denied by {} is outside the grants of profile alpha",
                fb.display()
            )
        )
    );
    // So is the default profile's grant.
    assert_eq!(
        alpha.call("read_file", path_arg(&s.inst.file("hello.txt"))),
        (
            true,
            format!(
                "Refused by gatehouse: denied by {} is outside the grants of profile alpha",
                s.inst.file("hello.txt").display()
            )
        )
    );

    let mut beta = s.inst.mcp(&["--profile", "beta"]);
    beta.initialize("2025-06-18");
    assert_eq!(
        beta.call("read_file", path_arg(&fb)),
        (false, "in beta\n".into())
    );
    assert_eq!(
        beta.call("read_file", path_arg(&fa)),
        (
            true,
            format!(
                "Refused by gatehouse: denied by {} is outside the grants of profile beta",
                fa.display()
            )
        )
    );

    // The default profile (no --profile) reads the project and neither profile's directory.
    let mut def = s.inst.mcp(&[]);
    def.initialize("2025-06-18");
    assert_eq!(
        def.call("read_file", json!({"path": "hello.txt"})),
        (false, "hello\n".into())
    );
    assert_eq!(
        def.call("read_file", path_arg(&fa)),
        (
            true,
            format!(
                "Refused by gatehouse: denied by {} is outside the grants of profile default",
                fa.display()
            )
        )
    );
    assert!(
        alpha.stderr().contains("(profile alpha)"),
        "{}",
        alpha.stderr()
    );
}

#[test]
fn a_tool_a_profile_denies_is_not_listed_for_its_sessions_only() {
    let s = setup();
    let _b = s.inst.broker(&[]);
    let mut beta = s.inst.mcp(&["--profile", "beta"]);
    beta.initialize("2025-06-18");
    let listed = tool_names(&mut beta);
    assert!(listed.contains(&"read_file".to_string()), "{listed:?}");
    assert!(!listed.contains(&"write_file".to_string()), "{listed:?}");
    // A direct call is as unknown as a tool that does not exist.
    let r = beta.request(
        "tools/call",
        json!({"name": "write_file", "arguments": {"path": "x", "content": "y"}}),
    );
    assert_eq!(r["error"]["code"], -32602, "{r}");
    assert_eq!(r["error"]["message"], "Unknown tool: write_file");

    // The default profile and alpha (which says nothing of write_file: ask) list it.
    for args in [&[][..], &["--profile", "alpha"][..]] {
        let mut m = s.inst.mcp(args);
        m.initialize("2025-06-18");
        let listed = tool_names(&mut m);
        assert!(
            listed.contains(&"write_file".to_string()),
            "{args:?}: {listed:?}"
        );
    }
}

#[test]
fn an_unknown_or_malformed_profile_is_refused_before_serving() {
    let s = setup();
    let _b = s.inst.broker(&[]);
    let mut m = s.inst.mcp(&["--profile", "nope"]);
    let st = m.refused_with("there is no profile nope in the policy");
    assert_eq!(st.code(), Some(1), "{}", m.stderr());
    assert!(
        m.stderr().contains(
            "gatehouse mcp: the broker refused the session: there is no profile nope in the policy (revision 0; its profiles: default, alpha, beta, gamma)"
        ),
        "{}",
        m.stderr()
    );
    assert!(m.stdout_closed(), "nothing was served on stdout");

    let mut m = s.inst.mcp(&["--profile", "Bad.Name"]);
    assert_eq!(m.wait().code(), Some(2));
    assert!(
        m.stderr().contains(
            "gatehouse mcp: --profile: profile name \"Bad.Name\" may hold only a-z, 0-9, _ and -"
        ),
        "{}",
        m.stderr()
    );
}

/// Paths the tests' web server answers with a 302, and the URL each redirects to.
#[derive(Clone, Default)]
struct Redirects(Arc<Mutex<Vec<(String, String)>>>);

impl Redirects {
    fn add(&self, path: &str, to: String) {
        self.0.lock().unwrap().push((path.to_string(), to));
    }

    fn target(&self, path: &str) -> Option<String> {
        let table = self.0.lock().unwrap();
        table
            .iter()
            .find(|(p, _)| p == path)
            .map(|(_, t)| t.clone())
    }
}

/// The tests' "public" web server on 127.0.0.2: one page to every request, or, for a path
/// `redirects` maps, a 302 to that URL; counts connections.
fn web_server(redirects: Redirects) -> TestWebServer {
    TestWebServer::start("127.0.0.2", move |req| match redirects.target(req.path()) {
        Some(to) => format!(
            "HTTP/1.1 302 Found\r\nLocation: {to}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        )
        .into_bytes(),
        None => http_response("200 OK", "text/plain", "on the list\n"),
    })
}

#[test]
fn the_network_allowlist_refuses_an_off_list_host_without_asking() {
    let s = setup();
    let server = web_server(Redirects::default());
    let b = s.inst.broker(&[
        "--test-net-arg=--test-public-addr",
        "--test-net-arg=127.0.0.2",
    ]);
    let url = format!("http://{}/page.txt", server.addr);

    // beta may reach docs.rs only, and asks for fetch_url: the list refuses before any
    // question.
    let mut beta = s.inst.mcp(&["--profile", "beta"]);
    beta.initialize("2025-06-18");
    assert_eq!(
        beta.call("fetch_url", json!({"url": url})),
        (
            true,
            "Refused by gatehouse: denied by 127.0.0.2 is not in the network allowlist of profile beta (policy revision 0)".into()
        )
    );
    assert_eq!(server.hits(), 0, "never connected");
    assert!(b.pending(0).is_empty(), "nobody was asked");

    // gamma lists 127.0.0.2: the same fetch goes through (positive control).
    let mut gamma = s.inst.mcp(&["--profile", "gamma"]);
    gamma.initialize("2025-06-18");
    let (is_error, text) = gamma.call("fetch_url", json!({"url": url}));
    assert!(!is_error, "{text}");
    assert!(text.contains("on the list\n"), "{text}");
    assert_eq!(server.hits(), 1);

    // The default profile has no list: its default for fetch_url (ask) applies, and the
    // proposal names the host.
    let mut def = s.inst.mcp(&["--approval-wait", "1"]);
    def.initialize("2025-06-18");
    let (is_error, text) = def.call("fetch_url", json!({"url": url}));
    assert!(is_error, "{text}");
    assert!(
        text.contains("is waiting for the human's approval"),
        "{text}"
    );
    let p = b.pending(1);
    assert_eq!(p[0].target, "127.0.0.2", "{p:?}");
    assert_eq!(server.hits(), 1, "not fetched while asked");
}

/// A session opened on the gateway socket (as `gatehouse run` does), with `profile`.
fn open(b: &Broker, resume: Option<ResumeToken>, profile: Option<&str>) -> (Conn, Body) {
    let mut gw = Conn::connect(&b.data.join("run/gateway.sock")).unwrap();
    gw.set_timeout(Some(PATIENCE));
    let body = gw.request(Body::ToolCall(ToolCall::OpenSession {
        resume,
        profile: profile.map(|p| ProfileName::parse(p).unwrap()),
    }));
    (gw, body)
}

#[test]
fn a_resumed_session_keeps_its_profile_and_a_resume_naming_another_is_refused() {
    let s = setup();
    let b = s.inst.broker(&[]);
    let (first, body) = open(&b, None, Some("alpha"));
    let (sid, token) = match body {
        Body::ToolReply(ToolReply::Session(info)) => {
            assert_eq!(info.profile.as_str(), "alpha");
            (info.session, info.resume)
        }
        other => panic!("{other:?}"),
    };
    drop(first);

    let (_gw, body) = open(&b, Some(token.clone()), Some("beta"));
    match body {
        Body::Error(e) => assert_eq!(
            e.message,
            format!("session {sid} was opened with profile alpha; it cannot be carried on with profile beta (a session keeps its profile: start a new session for beta)")
        ),
        other => panic!("{other:?}"),
    }
    // Through `gatehouse mcp`, as `gatehouse run` would start it: refused before serving.
    let mut m = s.inst.mcp_with(
        &bin("gatehouse"),
        &["--profile", "default"],
        &[("GATEHOUSE_SESSION_TOKEN", &token.0)],
    );
    assert_eq!(
        m.refused_with("it cannot be carried on with profile default")
            .code(),
        Some(1),
        "{}",
        m.stderr()
    );
    assert!(
        m.stderr().contains(&format!(
            "session {sid} was opened with profile alpha; it cannot be carried on with profile default"
        )),
        "{}",
        m.stderr()
    );

    // Positive control: the same token without a profile (or naming alpha) carries the
    // session on, under alpha, and it still reads alpha's grant only.
    let mut m = s.inst.mcp_with(
        &bin("gatehouse"),
        &[],
        &[("GATEHOUSE_SESSION_TOKEN", &token.0)],
    );
    m.initialize("2025-06-18");
    assert_eq!(
        m.call("read_file", path_arg(&s.a.join("alpha.txt"))),
        (false, "in alpha\n".into())
    );
    assert!(
        m.stderr()
            .contains(&format!("session {sid} carried on (profile alpha)")),
        "{}",
        m.stderr()
    );
}

#[test]
fn a_multi_profile_document_is_applied_or_refused_whole() {
    let s = setup();
    let b = s.inst.broker(&[]);
    let cli = |args: &[&str]| {
        let out = b.cli(args);
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    // show --profile prints that profile alone; --json too.
    let (code, out, err) = cli(&["policy", "show", "--profile", "beta"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.starts_with("# profile beta of policy revision 0 from "),
        "{out}"
    );
    assert!(out.contains("network = [\"docs.rs\"]"), "{out}");
    assert!(out.contains("write_file = \"deny\""), "{out}");
    assert!(!out.contains("alpha"), "{out}");
    let (code, out, _) = cli(&["--json", "policy", "show", "--profile", "alpha"]);
    assert_eq!(code, Some(0));
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["profile"], "alpha");
    assert_eq!(v["policy"]["grant"][0]["root"], s.a.display().to_string());
    let (code, out, _) = cli(&["--json", "policy", "show"]);
    assert_eq!(code, Some(0));
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["profiles"], json!(["default", "alpha", "beta", "gamma"]));
    let (code, _, err) = cli(&["policy", "show", "--profile", "nope"]);
    assert_eq!(code, Some(1));
    assert!(
        err.contains("there is no profile nope in the policy (revision 0; its profiles: default, alpha, beta, gamma)"),
        "{err}"
    );

    let file = s.inst.tmp.path().join("next.toml");
    let apply = |text: &str| {
        std::fs::write(&file, text).unwrap();
        cli(&["policy", "apply", file.to_str().unwrap()])
    };
    let base = policy_text(&s.inst, &s.a, &s.b);
    // The document as it is, at the revision in force: applied.
    let (code, out, err) = apply(&base);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out, "policy revision 1 applied\n");
    // The same document again is stale: refused whole.
    let changed = base.replace("[profile.gamma]\n", "[profile.delta]\n[profile.gamma]\n");
    let (code, _, err) = apply(&changed);
    assert_eq!(code, Some(1));
    assert!(
        err.contains("its revision 0 is stale; the policy in force is revision 1"),
        "{err}"
    );
    // At the right revision with one bad profile: refused whole, naming the profile.
    let bad = changed
        .replace("revision = 0", "revision = 1")
        .replace("network = [\"docs.rs\"]", "network = [\"docs.rs/x\"]");
    let (code, _, err) = apply(&bad);
    assert_eq!(code, Some(1));
    assert!(
        err.contains("[profile.beta] network: bad host \"docs.rs/x\""),
        "{err}"
    );
    // Nothing of either refused document is in force: no delta, beta's list unchanged.
    let (_, out, _) = cli(&["--json", "policy", "show"]);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["revision"], 1);
    assert_eq!(v["profiles"], json!(["default", "alpha", "beta", "gamma"]));
    let mut m = s.inst.mcp(&["--profile", "delta"]);
    assert_eq!(m.refused_with("there is no profile delta").code(), Some(1));
    assert!(
        m.stderr().contains("there is no profile delta"),
        "{}",
        m.stderr()
    );
}

/// The sessions the console would list, once `want` holds for one of them.
fn session_where(b: &Broker, want: impl Fn(&SessionSummary) -> bool) -> SessionSummary {
    let mut ui = b.ui();
    let deadline = Instant::now() + PATIENCE;
    loop {
        match ui.request(Body::Ui(UiRequest::ListSessions)) {
            Body::UiReply(UiReply::Sessions(list)) => {
                if let Some(s) = list.iter().find(|s| want(s)) {
                    return s.clone();
                }
                assert!(Instant::now() < deadline, "no such session in {list:?}");
            }
            other => panic!("ListSessions answered {other:?}"),
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[test]
fn the_session_list_names_the_agent_and_the_profile() {
    let s = setup();
    let b = s.inst.broker(&[]);
    // Handshake era: clientInfo from initialize.
    let mut m = s.inst.mcp(&["--profile", "alpha"]);
    let r = m.request(
        "initialize",
        json!({"protocolVersion": "2025-06-18", "capabilities": {},
               "clientInfo": {"name": "claude-code\u{1b}[2J", "version": "2.1.0"}}),
    );
    assert!(r.get("result").is_some(), "{r}");
    let row = session_where(&b, |x| x.profile.as_str() == "alpha" && x.agent.is_some());
    assert_eq!(row.agent.as_deref(), Some("claude-code\u{1b}[2J 2.1.0"));
    assert!(row.connected);

    // 2026-07-28, no handshake: clientInfo from _meta; a long name is capped.
    let long = "x".repeat(500);
    let mut modern = s.inst.mcp(&[]);
    let mut meta = modern_meta();
    meta["io.modelcontextprotocol/clientInfo"] = json!({"name": long, "version": "9"});
    let r = modern.request("tools/list", json!({"_meta": meta}));
    assert!(r.get("result").is_some(), "{r}");
    let row = session_where(&b, |x| {
        x.profile.as_str() == "default" && x.agent.as_deref().is_some_and(|a| a.starts_with("xxx"))
    });
    let agent = row.agent.unwrap();
    assert_eq!(agent, format!("{}\u{2026} 9", "x".repeat(63)));

    // A client that never names itself: no agent, the profile still shown.
    let mut quiet = s.inst.mcp(&["--profile", "beta"]);
    let r = quiet.request(
        "tools/list",
        json!({"_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {}
        }}),
    );
    assert!(r.get("result").is_some(), "{r}");
    let row = session_where(&b, |x| x.profile.as_str() == "beta");
    assert_eq!(row.agent, None);
    drop((m, modern, quiet));
}

#[test]
fn a_redirect_off_the_allowlist_is_refused_before_its_host_is_reached() {
    let s = setup();
    let redirects = Redirects::default();
    let server = web_server(redirects.clone());
    let dns = LoopbackDns::start(&["a.ok.test", "evil.test"], "127.0.0.2".parse().unwrap());
    let _b = s.inst.broker(&[
        "--test-net-arg=--test-public-addr",
        "--test-net-arg=127.0.0.2",
        "--test-net-arg=--nameserver",
        &format!("--test-net-arg={}", dns.addr),
    ]);
    let port = server.addr.port();
    redirects.add("/off", format!("http://evil.test:{port}/page"));
    redirects.add("/on", format!("http://a.ok.test:{port}/page"));
    let mut gamma = s.inst.mcp(&["--profile", "gamma"]);
    gamma.initialize("2025-06-18");
    // Positive control: a redirect to a listed name is followed and the page returned.
    let (is_error, text) = gamma.call(
        "fetch_url",
        json!({"url": format!("http://127.0.0.2:{port}/on")}),
    );
    assert!(!is_error, "{text}");
    assert!(text.contains("on the list\n"), "{text}");
    // Off the list: the net-helper refuses the redirect before it looks the host up or
    // connects (the broker would also withhold a page that came from off the list).
    let hits_before = server.hits();
    assert_eq!(
        gamma.call(
            "fetch_url",
            json!({"url": format!("http://127.0.0.2:{port}/off")})
        ),
        (
            true,
            format!("Refused by gatehouse's network rules: redirect to http://evil.test:{port}/page: evil.test is not in this session's network allowlist")
        )
    );
    assert_eq!(
        server.hits(),
        hits_before + 1,
        "only the first hop reached the server; the off-list host was never contacted"
    );
    // A URL naming an off-list host is refused before anything is resolved: no lookup (a DNS
    // query can carry data out; the name was never asked, so no cache hides one), no
    // connection.
    let (hits, queries) = (server.hits(), dns.queries());
    assert!(
        queries > 0,
        "the redirects above were resolved through this server"
    );
    assert_eq!(
        gamma.call(
            "fetch_url",
            json!({"url": format!("http://never-seen.evil.test:{port}/page")})
        ),
        (
            true,
            "Refused by gatehouse: denied by never-seen.evil.test is not in the network allowlist of profile gamma (policy revision 0)".into()
        )
    );
    assert_eq!(server.hits(), hits, "not connected");
    assert_eq!(dns.queries(), queries, "not looked up");
}
