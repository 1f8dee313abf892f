//! The held-tools pane, on the console model and ratatui's test backend: the key opens it and
//! asks the broker for the policy and then each server's tools; an approval carries the digest
//! shown and only after the definition has been on screen a moment; "approve all" needs a second
//! press; a refusal is shown and the server listed again; a hostile description is drawn inert.

use ipc_schema::servers::{JsonText, ServerName, ServerToolName, ToolDef};
use ipc_schema::tool::ProfileName;
use ipc_schema::ui::{PolicyView, ServerToolView, UiReply, UiRequest};
use ipc_schema::{Body, Envelope, ErrorCode, ErrorReply};
use ratatui::backend::TestBackend;
use ratatui::Terminal;
use std::time::{Duration, Instant};
use ui::state::{Console, Key, Options, View, ARM_DELAY};

const POLICY: &str = r#"
[[mcp_server]]
name = "remote"
url = "https://tls.test:4443/mcp"

[profile.work]
[[profile.work.mcp_server]]
name = "files"
command = ["/usr/bin/files-server"]
"#;

const EVIL: &str = "Echoes.\x1b[2J\x1b]0;pwned\x07 \u{202e}txet";

fn def(name: &str, desc: &str) -> ToolDef {
    ToolDef {
        name: ServerToolName::try_from(name.to_string()).unwrap(),
        title: None,
        description: Some(desc.into()),
        input_schema: JsonText::try_from(r#"{"type":"object"}"#.to_string()).unwrap(),
        output_schema: None,
        annotations: Some(JsonText::try_from(r#"{"readOnlyHint":true}"#.to_string()).unwrap()),
    }
}

fn tools() -> Vec<ServerToolView> {
    vec![
        ServerToolView {
            def: def("echo", EVIL),
            digest: [1; 32],
            held: Some("changed since you approved it (description)".into()),
            pinned: Some(def("echo", "Returns the text.")),
        },
        ServerToolView {
            def: def("send", "Sends a message."),
            digest: [2; 32],
            held: Some("new: not approved yet".into()),
            pinned: None,
        },
        ServerToolView {
            def: def("count", "Counts."),
            digest: [3; 32],
            held: None,
            pinned: None,
        },
    ]
}

struct F {
    c: Console,
    t0: Instant,
}

impl F {
    fn at(&self, ms: u64) -> Instant {
        self.t0 + Duration::from_millis(ms)
    }

    fn sent(&mut self) -> Vec<(u64, UiRequest)> {
        self.c
            .take_outbox()
            .into_iter()
            .filter_map(|e| match e.body {
                Body::Ui(r @ UiRequest::PolicyShow)
                | Body::Ui(r @ UiRequest::ServerTools { .. })
                | Body::Ui(r @ UiRequest::ApproveServerTools { .. }) => Some((e.id, r)),
                _ => None,
            })
            .collect()
    }

    fn reply(&mut self, id: u64, body: Body, at: Instant) {
        self.c.on_frame(Envelope::new(id, body), at);
    }

    /// Opens the pane and answers the policy and the `remote` listing at `at`.
    fn opened(at_ms: u64) -> F {
        let t0 = Instant::now();
        let mut f = F {
            c: Console::new(Options::default()),
            t0,
        };
        f.c.start(t0);
        f.c.take_outbox();
        let at = f.at(at_ms);
        f.c.on_key(Key::Char('m'), at);
        assert_eq!(f.c.view, View::ServerTools);
        let asked = f.sent();
        assert_eq!(asked.len(), 1);
        assert_eq!(asked[0].1, UiRequest::PolicyShow);
        f.reply(
            asked[0].0,
            Body::UiReply(UiReply::Policy(PolicyView {
                revision: 4,
                source: "policy.toml".into(),
                document: POLICY.into(),
                error: None,
                remembered: vec![],
            })),
            at,
        );
        let asked = f.sent();
        let remote = ServerName::try_from("remote".to_string()).unwrap();
        let files = ServerName::try_from("files".to_string()).unwrap();
        assert_eq!(
            asked.iter().map(|(_, r)| r.clone()).collect::<Vec<_>>(),
            [
                UiRequest::ServerTools {
                    profile: ProfileName::default_profile(),
                    server: remote
                },
                UiRequest::ServerTools {
                    profile: ProfileName::parse("work").unwrap(),
                    server: files
                },
            ]
        );
        f.reply(asked[0].0, Body::UiReply(UiReply::ServerTools(tools())), at);
        f.reply(
            asked[1].0,
            Body::Error(ErrorReply {
                code: ErrorCode::Refused,
                message: "a broker running as root does not run third-party stdio servers".into(),
            }),
            at,
        );
        f
    }
}

/// The tools an approval names, each with the digest it is bound to.
type Approved = Vec<(ServerToolName, [u8; 32])>;

fn approvals(sent: &[(u64, UiRequest)]) -> Vec<(u64, Approved)> {
    sent.iter()
        .filter_map(|(id, r)| match r {
            UiRequest::ApproveServerTools { tools, .. } => Some((*id, tools.clone())),
            _ => None,
        })
        .collect()
}

fn name(s: &str) -> ServerToolName {
    ServerToolName::try_from(s.to_string()).unwrap()
}

#[test]
fn approving_needs_the_definition_on_screen_and_sends_the_digest_shown() {
    let mut f = F::opened(0);
    // The first held tool is selected: echo, changed.
    let (_, e, t) = f.c.tools.selected().unwrap();
    assert_eq!((e.server.as_str(), t.def.name.as_str()), ("remote", "echo"));

    // Pressed at once: nothing is sent.
    f.c.on_key(Key::Char('a'), f.at(10));
    assert!(approvals(&f.sent()).is_empty());
    let status = f.c.status.clone().unwrap().0;
    assert!(status.contains("only just appeared"), "{status}");

    // Enter approves nothing.
    let later = f.at(ARM_DELAY.as_millis() as u64 + 100);
    f.c.on_key(Key::Enter, later);
    assert!(approvals(&f.sent()).is_empty());

    f.c.on_key(Key::Char('a'), later);
    let a = approvals(&f.sent());
    assert_eq!(a.len(), 1);
    assert_eq!(a[0].1, vec![(name("echo"), [1; 32])]);
    // While it is on its way, no second approval for the server.
    f.c.on_key(Key::Char('a'), later);
    assert!(approvals(&f.sent()).is_empty());

    // The broker refuses it (a stale digest): said clearly, and the server is listed again.
    f.reply(
        a[0].0,
        Body::Error(ErrorReply {
            code: ErrorCode::Refused,
            message: "echo: the server describes it otherwise than what was shown; look again"
                .into(),
        }),
        later,
    );
    let (text, _) = f.c.status.clone().unwrap();
    assert!(
        text.starts_with("REFUSED: approving echo of remote was refused: echo: the server describes it otherwise than what was shown; look again."),
        "{text}"
    );
    let again = f.sent();
    assert!(
        matches!(&again[..], [(_, UiRequest::ServerTools { server, .. })] if server.as_str() == "remote"),
        "{again:?}"
    );
    // The fresh listing has a new definition of echo: its key waits again.
    let mut fresh = tools();
    fresh[0].digest = [9; 32];
    fresh[0].def.description = Some("Echoes, differently.".into());
    f.reply(
        again[0].0,
        Body::UiReply(UiReply::ServerTools(fresh)),
        later,
    );
    f.c.on_key(Key::Char('a'), later);
    assert!(approvals(&f.sent()).is_empty(), "a new definition re-arms");
    let later2 = later + ARM_DELAY + Duration::from_millis(10);
    f.c.on_key(Key::Char('a'), later2);
    assert_eq!(approvals(&f.sent())[0].1, vec![(name("echo"), [9; 32])]);
}

#[test]
fn approve_all_takes_a_second_press_and_names_only_the_held_tools() {
    let mut f = F::opened(0);
    let later = f.at(5_000);
    f.c.on_key(Key::Char('A'), later);
    assert!(approvals(&f.sent()).is_empty(), "the first press only asks");
    f.c.on_key(Key::Esc, later);
    assert_eq!(
        f.c.view,
        View::ServerTools,
        "Esc cancels the confirmation first"
    );
    f.c.on_key(Key::Char('A'), later);
    f.c.on_key(Key::Char('A'), later);
    let a = approvals(&f.sent());
    assert_eq!(a.len(), 1);
    assert_eq!(
        a[0].1,
        vec![(name("echo"), [1; 32]), (name("send"), [2; 32])]
    );
    f.reply(
        a[0].0,
        Body::UiReply(UiReply::ServerToolsApproved { count: 2 }),
        later,
    );
    let text = f.c.status.clone().unwrap().0;
    assert_eq!(
        text,
        "2 tool definition(s) of remote approved and pinned: echo, send"
    );
    // Back to the approvals; the decision keys there are the cards' again.
    f.c.on_key(Key::Esc, later);
    assert_eq!(f.c.view, View::Approvals);
}

#[test]
fn a_pinned_tool_takes_no_approval() {
    let mut f = F::opened(0);
    let later = f.at(5_000);
    f.c.on_key(Key::Char('n'), later);
    f.c.on_key(Key::Char('n'), later);
    let (_, _, t) = f.c.tools.selected().unwrap();
    assert_eq!(t.def.name.as_str(), "count");
    f.c.on_key(Key::Char('a'), later + ARM_DELAY);
    assert!(approvals(&f.sent()).is_empty());
    assert_eq!(
        f.c.status.clone().unwrap().0,
        "count is pinned as listed: it is offered already"
    );
}

#[test]
fn the_pane_draws_states_the_diff_and_a_hostile_description_inert() {
    let mut f = F::opened(0);
    let mut term = Terminal::new(TestBackend::new(150, 60)).unwrap();
    let now = f.at(5_000);
    term.draw(|fr| ui::view::draw(fr, &mut f.c, now, 0))
        .unwrap();
    let buf = term.backend().buffer().clone();
    for cell in buf.content() {
        for ch in cell.symbol().chars() {
            let c = ch as u32;
            assert!(
                !(c < 0x20
                    || c == 0x7f
                    || (0x80..0xa0).contains(&c)
                    || (0x202a..=0x202e).contains(&c)),
                "a cell holds U+{c:04X}"
            );
        }
    }
    let screen: String = (0..buf.area.height)
        .map(|y| {
            (0..buf.area.width)
                .map(|x| buf[(x, y)].symbol().to_string())
                .collect::<String>()
                + "\n"
        })
        .collect();
    for want in [
        "Third-party server tools: 2 held",
        "remote (profile default)",
        "  remote https://tls.test:4443/mcp",
        "echo  held: changed (description)",
        "send  held: new",
        "count  pinned",
        "files (profile work)",
        "  stdio /usr/bin/files-server",
        "a broker running as root does not run third-party stdio servers",
        "remote__echo  (server remote, profile default)",
        "Echoes.\\x1b[2J\\x1b]0;pwned\\x07 \\u{202E}txet",
        "-   Returns the text.",
        "+   Echoes.\\x1b[2J",
        "annotations (the server's claim; the policy never reads it):",
        " a  approve this definition",
        " A  approve all 2 held of remote",
    ] {
        assert!(screen.contains(want), "{want:?} missing:\n{screen}");
    }
}

#[test]
fn a_narrow_terminal_stacks_the_list_over_the_definition() {
    let mut f = F::opened(0);
    let mut term = Terminal::new(TestBackend::new(80, 50)).unwrap();
    let now = f.at(5_000);
    term.draw(|fr| ui::view::draw(fr, &mut f.c, now, 0))
        .unwrap();
    let buf = term.backend().buffer().clone();
    let rows: Vec<String> = (0..buf.area.height)
        .map(|y| {
            (0..buf.area.width)
                .map(|x| buf[(x, y)].symbol().to_string())
                .collect::<String>()
        })
        .collect();
    let at = |want: &str| {
        rows.iter()
            .position(|r| r.contains(want))
            .unwrap_or_else(|| panic!("{want:?} missing:\n{}", rows.join("\n")))
    };
    assert!(at("● send  held: new") < at("remote__echo  (server remote, profile default)"));
    at("+   Echoes.\\x1b[2J\\x1b]0;pwned\\x07 \\u{202E}txet");
}
