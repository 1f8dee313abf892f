use super::*;
use crate::compile::compile;
use crate::doc::PolicyDoc;
use crate::eval::PathTarget;
use ipc_schema::fs::Access;
use ipc_schema::tool::{ProposalId, ToolName};
use ipc_schema::ui::RememberedAction;
use std::path::Path;

const SERVER: &str = r#"
[[mcp_server]]
name = "mail"
command = ["/bin/true"]
"#;

/// `rel` ('/'-separated) beneath `root`, as the bytes of a path of this OS: joined component by
/// component, since in a Windows verbatim path (`\\?\C:\...`, what canonicalize gives) a `/`
/// is part of a name.
fn under(root: &std::path::Path, rel: &str) -> Vec<u8> {
    rel.split('/')
        .fold(root.to_path_buf(), |p, c| p.join(c))
        .into_os_string()
        .into_encoded_bytes()
}
fn doc(root: &Path, tools: &str, extra: &str) -> Policies {
    let text = format!(
        "revision = 4\n[tools]\nread_file = \"allow\"\n{tools}\n[[grant]]\nroot = '{}'\ncapabilities = [\"read\", \"write\", \"edit\"]\n{extra}",
        root.display()
    );
    compile(
        &PolicyDoc::parse(&text).expect("parses"),
        &Protected::new(&[]),
    )
    .expect("valid")
}

fn at(root: &Path, rel: &str, access: Access) -> Target {
    Target::Paths(vec![PathTarget {
        abs: under(root, rel),
        access,
        is_dir: false,
    }])
}

fn rec(seq: i64, tool: ToolName, target: Target) -> Recorded {
    Recorded {
        seq,
        ts_ms: 1_000 * seq,
        session: Some(format!("s{}", seq % 2)),
        call: ReplayCall {
            profile: ProfileName::default_profile(),
            tool: tool.into(),
            target,
        },
    }
}

fn server_call(seq: i64, tool: &str) -> Recorded {
    let stored = ReplayCall {
        profile: ProfileName::default_profile(),
        tool: ToolId::parse(&format!("mail__{tool}")).unwrap(),
        target: Target::Server {
            server: "mail".to_string().try_into().unwrap(),
            tool: tool.to_string().try_into().unwrap(),
            arguments: serde_json::json!({"to": "a@example.com"}),
        },
    };
    // As the log gives it back: through its stored form.
    let call = ReplayCall::from_json(&stored.to_json()).unwrap();
    Recorded {
        seq,
        ts_ms: seq,
        session: None,
        call,
    }
}

fn root() -> (tempfile::TempDir, std::path::PathBuf) {
    let d = tempfile::tempdir().unwrap();
    let r = std::fs::canonicalize(d.path()).unwrap();
    (d, r)
}

#[test]
fn a_loosening_is_grouped_by_tool_and_target_with_counts_and_the_newest_examples() {
    let (_d, r) = root();
    let before = doc(&r, "write_file = \"ask\"", "");
    let after = doc(&r, "write_file = \"allow\"", "");
    let mut calls: Vec<Recorded> = (1..=5)
        .map(|i| rec(i, ToolName::WriteFile, at(&r, "a.txt", Access::Write)))
        .collect();
    calls.push(rec(6, ToolName::WriteFile, at(&r, "b.txt", Access::Write)));
    calls.push(rec(7, ToolName::ReadFile, at(&r, "a.txt", Access::Read)));
    let out = replay(Ok(&before), Ok(&after), &Protected::new(&[]), &[], calls);
    assert_eq!((out.replayed, out.unchanged, out.undecidable), (7, 1, 0));
    assert_eq!(out.changed(), 6);
    assert!(out.needs_confirmation());
    assert_eq!(out.groups.len(), 2);
    let g = &out.groups[0];
    assert_eq!(g.change, Change::NowRuns);
    assert_eq!((g.tool.as_str(), g.count), ("write_file", 5));
    assert_eq!(g.target.as_bytes(), &under(&r, "a.txt")[..]);
    assert_eq!((g.before, g.after), (Action::Ask, Action::Allow));
    assert_eq!(
        g.rule_before,
        "tools.write_file default (policy revision 4)"
    );
    assert_eq!(g.rule_after, "tools.write_file default (policy revision 4)");
    let seqs: Vec<i64> = g.examples.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, [5, 4, 3], "the newest {EXAMPLES}");
    assert_eq!(g.examples[0].session.as_deref(), Some("s1"));
    assert_eq!(g.examples[0].ts_ms, 5_000);
    assert_eq!(out.groups[1].count, 1);
    assert!(out.groups.iter().all(Group::loosens));
}

#[test]
fn a_tightening_needs_no_confirmation_and_says_what_would_be_refused_or_asked() {
    let (_d, r) = root();
    let before = doc(&r, "write_file = \"allow\"", "");
    let after = doc(
        &r,
        "write_file = \"ask\"",
        "[[rule]]\nname = \"no-a\"\ntools = [\"read_file\"]\npaths = [\"**/a.txt\"]\naction = \"deny\"\n",
    );
    let calls = vec![
        rec(1, ToolName::ReadFile, at(&r, "a.txt", Access::Read)),
        rec(2, ToolName::ReadFile, at(&r, "b.txt", Access::Read)),
        rec(3, ToolName::WriteFile, at(&r, "b.txt", Access::Write)),
    ];
    let out = replay(Ok(&before), Ok(&after), &Protected::new(&[]), &[], calls);
    assert_eq!((out.replayed, out.unchanged), (3, 1));
    assert!(!out.needs_confirmation());
    let got: Vec<(Change, &str, Action, Action)> = out
        .groups
        .iter()
        .map(|g| (g.change, g.tool.as_str(), g.before, g.after))
        .collect();
    assert_eq!(
        got,
        [
            (Change::NowRefused, "read_file", Action::Allow, Action::Deny),
            (Change::NowAsks, "write_file", Action::Allow, Action::Ask),
        ]
    );
    assert_eq!(
        out.groups[0].rule_after,
        "rule \"no-a\" (policy revision 4)"
    );
}

#[test]
fn the_same_policy_changes_nothing() {
    let (_d, r) = root();
    let p = doc(&r, "write_file = \"ask\"", "");
    let calls = vec![
        rec(1, ToolName::ReadFile, at(&r, "a.txt", Access::Read)),
        rec(2, ToolName::WriteFile, at(&r, "a.txt", Access::Write)),
        rec(
            3,
            ToolName::ReadFile,
            at("/elsewhere".as_ref(), "x", Access::Read),
        ),
    ];
    let out = replay(Ok(&p), Ok(&p), &Protected::new(&[]), &[], calls);
    assert_eq!(
        out,
        Replay {
            replayed: 3,
            unchanged: 3,
            ..Replay::default()
        }
    );
    assert!(!out.needs_confirmation());
}

#[test]
fn remembered_decisions_stand_for_both_policies() {
    let (_d, r) = root();
    let before = doc(&r, "write_file = \"ask\"", "");
    let after = doc(&r, "write_file = \"allow\"", "");
    let key = |rel: &str| String::from_utf8(under(&r, rel)).unwrap();
    let remembered = |id: u64, rel: &str, action| Remembered {
        id,
        tool: ToolName::WriteFile.into(),
        target: key(rel),
        action,
        created_unix_ms: 0,
        origin: ProposalId(id),
        profile: ProfileName::default_profile(),
    };
    let standing = [
        // Always allowed already: the new default changes nothing for it.
        remembered(1, "a.txt", RememberedAction::Allow),
        // Always denied: stays refused whatever the new policy allows.
        remembered(2, "b.txt", RememberedAction::Deny),
    ];
    let calls = vec![
        rec(1, ToolName::WriteFile, at(&r, "a.txt", Access::Write)),
        rec(2, ToolName::WriteFile, at(&r, "b.txt", Access::Write)),
        rec(3, ToolName::WriteFile, at(&r, "c.txt", Access::Write)),
    ];
    let out = replay(
        Ok(&before),
        Ok(&after),
        &Protected::new(&[]),
        &standing,
        calls,
    );
    assert_eq!((out.replayed, out.unchanged), (3, 2));
    assert_eq!(out.groups.len(), 1);
    assert_eq!(out.groups[0].target, key("c.txt"));
}

#[test]
fn protected_paths_stay_refused_and_an_invalid_policy_in_force_refused_everything() {
    let (_d, r) = root();
    let after = doc(&r, "write_file = \"allow\"", "");
    let calls = vec![
        rec(
            1,
            ToolName::WriteFile,
            at(&r, ".git/hooks/pre-commit", Access::Write),
        ),
        rec(2, ToolName::WriteFile, at(&r, "a.txt", Access::Write)),
    ];
    let out = replay(
        Err("it does not parse"),
        Ok(&after),
        &Protected::new(&[]),
        &[],
        calls,
    );
    assert_eq!((out.replayed, out.unchanged), (2, 1), "{out:?}");
    let g = &out.groups[0];
    assert_eq!((g.before, g.after), (Action::Deny, Action::Allow));
    assert_eq!(g.rule_before, "the policy is invalid: it does not parse");
    assert!(out.needs_confirmation());
}

#[test]
fn a_profile_the_new_policy_drops_is_refused() {
    let (_d, r) = root();
    let before = doc(
        &r,
        "",
        &format!(
            "[profile.build]\n[profile.build.tools]\nread_file = \"allow\"\n[[profile.build.grant]]\nroot = '{}'\ncapabilities = [\"read\"]\n",
            r.display()
        ),
    );
    let after = doc(&r, "", "");
    let mut call = rec(1, ToolName::ReadFile, at(&r, "a.txt", Access::Read));
    call.call.profile = ProfileName::parse("build").unwrap();
    let out = replay(Ok(&before), Ok(&after), &Protected::new(&[]), &[], [call]);
    let g = &out.groups[0];
    assert_eq!((g.before, g.after), (Action::Allow, Action::Deny));
    assert_eq!(g.change, Change::NowRefused);
    assert_eq!(g.profile.as_str(), "build");
    assert!(
        g.rule_after
            .starts_with("there is no profile build in the policy"),
        "{}",
        g.rule_after
    );
}

#[test]
fn server_arguments_are_never_stored_and_calls_that_would_need_them_are_not_judged() {
    let stored = server_call(1, "send");
    let Target::Server { arguments, .. } = &stored.call.target else {
        panic!()
    };
    assert_eq!(*arguments, serde_json::Value::Null);
    assert!(!server_call(1, "send")
        .call
        .to_json()
        .contains("example.com"));

    let (_d, r) = root();
    let rule = |action: &str, args: &str| {
        format!("[[rule]]\nname = \"r\"\ntools = [\"mail__send\"]\n{args}action = \"{action}\"\n")
    };
    let matched = rule("allow", "arguments = { \"/to\" = \"*@example.com\" }\n");
    let p = |extra: &str| doc(&r, "", &format!("{SERVER}{extra}"));
    let judge = |b: &Policies, a: &Policies| {
        replay(
            Ok(b),
            Ok(a),
            &Protected::new(&[]),
            &[],
            [server_call(1, "send"), server_call(2, "list")],
        )
    };
    // A rule matching arguments appears: whether it allows a past call cannot be known.
    let out = judge(&p(""), &p(&matched));
    assert_eq!((out.undecidable, out.replayed, out.unchanged), (1, 1, 1));
    assert_eq!(out.undecidable_examples[0].0, "mail__send");
    assert!(out.needs_confirmation(), "a loosening cannot be ruled out");
    // The same rules on both sides: the verdict is the same whatever the arguments.
    let out = judge(&p(&matched), &p(&matched));
    assert_eq!((out.undecidable, out.replayed, out.unchanged), (0, 2, 2));
    assert!(!out.needs_confirmation());
    // Rules without argument matchers are judged as usual.
    let out = judge(&p(""), &p(&rule("allow", "")));
    assert_eq!((out.undecidable, out.replayed, out.unchanged), (0, 2, 1));
    assert_eq!(out.groups[0].change, Change::NowRuns);
    assert_eq!(out.groups[0].target, "mail__send");
}

#[test]
fn a_stored_call_reads_back_the_same_and_a_bad_one_is_an_error() {
    let call = ReplayCall {
        profile: ProfileName::parse("build").unwrap(),
        tool: ToolName::MovePath.into(),
        target: Target::Paths(vec![
            PathTarget {
                abs: b"/w/\xff\x00odd".to_vec(),
                access: Access::Delete,
                is_dir: true,
            },
            PathTarget {
                abs: b"/w/new".to_vec(),
                access: Access::Write,
                is_dir: false,
            },
        ]),
    };
    let stored = call.to_json();
    assert!(
        stored.contains("\"abs\":[47,119,47,255,0,111,100,100]")
            && stored.contains("\"abs\":\"/w/new\""),
        "UTF-8 paths as text, others as bytes: {stored}"
    );
    assert_eq!(ReplayCall::from_json(&stored).unwrap(), call);
    let cmd = ReplayCall {
        profile: ProfileName::default_profile(),
        tool: ToolName::RunCommand.into(),
        target: Target::Command {
            program: "/usr/bin/make".into(),
            cwd: b"/w".to_vec(),
        },
    };
    assert_eq!(ReplayCall::from_json(&cmd.to_json()).unwrap(), cmd);
    let err = ReplayCall::from_json("{\"profile\":\"default\"}").unwrap_err();
    assert!(
        err.starts_with("a stored call target does not read: "),
        "{err}"
    );
}
