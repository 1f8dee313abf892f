// Drives the Linux binaries (ipc_schema::platform::Missing elsewhere).
#![cfg(target_os = "linux")]
//! The boundary's edges on the agent's own tools (issue 14), end to end through the broker's
//! gateway channel: the fs-helper's writes keep off files that make the user's tools run code
//! and cannot assemble a git directory; files that may hold secrets ask before a read and stay
//! out of content search; every grant constraint reaches `run_command` (excluded paths masked,
//! grants a sandbox cannot keep to refused, read-only unless the grant gives every change).
//! Each refusal has its positive control beside it.

#![forbid(unsafe_code)]

mod broker_core_support;

use broker_core_support::{abs, policy_with, read_call, write_call, Gateway, Instance, Ui};
use ipc_schema::fs::{GrepLimits, WalkLimits};
use ipc_schema::tool::{Grep, RunCommand, ToolCall, ToolReply, ToolResult};
use ipc_schema::ui::Choice;
use ipc_schema::Body;
use std::os::unix::fs::PermissionsExt;

/// An instance whose project the exec-helper (nobody, when the tests run as root) can reach.
fn instance(policy: &str) -> Instance {
    let inst = Instance::new(Some(policy));
    open_up(&inst);
    inst
}

fn open_up(inst: &Instance) {
    std::fs::set_permissions(inst.root(), std::fs::Permissions::from_mode(0o711)).unwrap();
    let _ = std::process::Command::new("chmod")
        .args(["-R", "a+rwX"])
        .arg(&inst.project)
        .status();
}

fn put(inst: &Instance, rel: &str, body: &str) {
    let p = inst.file(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(&p, body).unwrap();
}

fn refused_message(r: &ToolReply) -> String {
    match r {
        ToolReply::Refused(x) => x.message.clone(),
        ToolReply::Failed(f) => f.message.clone(),
        other => panic!("not refused: {other:?}"),
    }
}

fn done(r: ToolReply) -> ToolResult {
    match r {
        ToolReply::Done(d) => d.result,
        other => panic!("not done: {other:?}"),
    }
}

fn run(inst: &Instance, argv: &[&str]) -> ToolCall {
    ToolCall::RunCommand(RunCommand {
        argv: argv.iter().map(|s| s.to_string()).collect(),
        cwd: abs(&inst.project),
        timeout_secs: 0,
    })
}

/// Sends `call`; if it asks, approves it once and returns the final reply with the card's rule.
fn approving(gw: &mut Gateway, ui: &mut Ui, call: ToolCall) -> (ToolReply, Option<String>) {
    let id = gw.send(call);
    match gw.next_for(id).unwrap() {
        ToolReply::AwaitingApproval(_) => {}
        other => return (other, None),
    }
    let p = ui.wait_pending(1).remove(0);
    let rule = p.rule.clone();
    assert!(matches!(ui.decide(&p, Choice::AllowOnce), Body::UiReply(_)));
    (gw.final_for(id).unwrap(), Some(rule))
}

#[test]
fn writes_keep_off_code_running_files_and_cannot_assemble_a_git_dir() {
    let inst = instance(&policy_with("write_file = \"allow\"", ""));
    put(&inst, ".vscode/tasks.json", "{}");
    put(&inst, "evil/HEAD", "ref: refs/heads/main\n");
    put(&inst, "cfg/config", "[core]\n");
    open_up(&inst);
    let b = inst.start(&[]);
    let mut gw = b.gateway();
    gw.open_session(None);
    // Positive control: an ordinary file is written without a question.
    assert!(matches!(
        gw.call(write_call(&inst.file("src.txt"), "x")),
        ToolReply::Done(_)
    ));
    // Read, never written.
    assert!(matches!(
        done(gw.call(read_call(&inst.file(".vscode/tasks.json")))),
        ToolResult::File(_)
    ));
    for rel in [
        ".vscode/tasks.json",
        ".claude/settings.json",
        ".gitattributes",
        ".mcp.json",
    ] {
        let m = refused_message(&gw.call(write_call(&inst.file(rel), "{}")));
        assert!(m.contains("protected"), "{rel}: {m}");
    }
    assert_eq!(
        std::fs::read_to_string(inst.file(".vscode/tasks.json")).unwrap(),
        "{}"
    );
    // A directory with HEAD gets no config or hooks; a config gets no HEAD beside it.
    let m = refused_message(&gw.call(write_call(
        &inst.file("evil/config"),
        "[core]\n\tfsmonitor = x\n",
    )));
    assert!(m.contains("git directory"), "{m}");
    assert!(!inst.file("evil/config").exists());
    let m = refused_message(&gw.call(write_call(&inst.file("cfg/HEAD"), "ref: refs/heads/x\n")));
    assert!(m.contains("git directory"), "{m}");
    // Positive control: the same names elsewhere are ordinary files.
    assert!(matches!(
        gw.call(write_call(&inst.file("config"), "x")),
        ToolReply::Done(_)
    ));
    // An agent login is never read.
    put(&inst, ".codex/auth.json", "{\"token\":\"t\"}");
    open_up(&inst);
    let m = refused_message(&gw.call(read_call(&inst.file(".codex/auth.json"))));
    assert!(m.contains("Codex login"), "{m}");
}

#[test]
fn a_secret_file_asks_before_it_is_read_and_stays_out_of_search() {
    let inst = instance(&policy_with("grep = \"allow\"", ""));
    put(&inst, ".env", "API_TOKEN=hunter2\n");
    put(&inst, "app.txt", "API_TOKEN is read from the environment\n");
    open_up(&inst);
    let b = inst.start(&[]);
    let (mut gw, mut ui) = (b.gateway(), b.ui());
    gw.open_session(None);
    // Positive control: an ordinary file is read without a question.
    assert!(matches!(
        done(gw.call(read_call(&inst.file("app.txt")))),
        ToolResult::File(_)
    ));
    let (reply, rule) = approving(&mut gw, &mut ui, read_call(&inst.file(".env")));
    let rule = rule.expect("reading .env asks");
    assert!(
        rule.contains("may hold secrets") && rule.contains("model provider"),
        "{rule}"
    );
    match done(reply) {
        ToolResult::File(f) => assert_eq!(f.data, b"API_TOKEN=hunter2\n"),
        other => panic!("{other:?}"),
    }
    // Content search: the ordinary file's line, not the secret file's.
    let grep = ToolCall::Grep(Grep {
        path: abs(&inst.project),
        regex: "API_TOKEN".into(),
        glob: None,
        case_insensitive: false,
        limits: WalkLimits::default(),
        grep: GrepLimits::default(),
    });
    match done(gw.call(grep)) {
        ToolResult::Grep(g) => {
            let files: Vec<String> = g
                .matches
                .iter()
                .map(|m| String::from_utf8_lossy(&m.relative).into_owned())
                .collect();
            assert_eq!(files, vec!["app.txt".to_string()]);
            assert_eq!(g.secret_files_withheld, 1);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_grant_that_allows_secret_files_reads_them_without_asking() {
    let inst = instance(&policy_with("", "secret_files = \"allow\"\n"));
    put(&inst, ".env", "A=1\n");
    open_up(&inst);
    let b = inst.start(&[]);
    let mut gw = b.gateway();
    gw.open_session(None);
    match done(gw.call(read_call(&inst.file(".env")))) {
        ToolResult::File(f) => assert_eq!(f.data, b"A=1\n"),
        other => panic!("{other:?}"),
    }
}

/// The command's output, with the exit code.
fn command(gw: &mut Gateway, ui: &mut Ui, inst: &Instance, argv: &[&str]) -> (Option<i32>, String) {
    match done(approving(gw, ui, run(inst, argv)).0) {
        ToolResult::CommandRun(c) => (
            c.exit_code,
            format!(
                "{}{}",
                String::from_utf8_lossy(&c.stdout),
                String::from_utf8_lossy(&c.stderr)
            ),
        ),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_commands_sandbox_keeps_the_grants_excludes() {
    let inst = instance(&policy_with("", "exclude = [\"secret/**\", \"*.key\"]\n"));
    put(&inst, "secret/key.pem", "PRIVATE\n");
    put(&inst, "signing.key", "K\n");
    put(&inst, "notes.txt", "visible\n");
    open_up(&inst);
    let b = inst.start(&[]);
    let (mut gw, mut ui) = (b.gateway(), b.ui());
    gw.open_session(None);
    // read_file refuses it; the command cannot read it either.
    let m = refused_message(&gw.call(read_call(&inst.file("secret/key.pem"))));
    assert!(m.contains("excluded"), "{m}");
    let (code, out) = command(&mut gw, &mut ui, &inst, &["cat", "notes.txt"]);
    assert_eq!(
        (code, out.as_str()),
        (Some(0), "visible\n"),
        "positive control"
    );
    let (code, out) = command(&mut gw, &mut ui, &inst, &["cat", "secret/key.pem"]);
    assert_eq!(code, Some(1));
    assert!(
        out.contains("Permission denied") || out.contains("Not a directory"),
        "{out}"
    );
    assert!(!out.contains("PRIVATE"), "{out}");
    let (code, out) = command(&mut gw, &mut ui, &inst, &["cat", "signing.key"]);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("Permission denied"), "{out}");
}

#[test]
fn grants_a_commands_sandbox_cannot_keep_to_are_refused_for_commands() {
    for (extra, caps, says) in [
        (
            "recursive = false\n",
            "\"read\", \"write\", \"edit\", \"delete\"",
            "is not recursive",
        ),
        (
            "include = [\"*.md\"]\n",
            "\"read\", \"write\", \"edit\", \"delete\"",
            "include globs",
        ),
    ] {
        let policy = format!(
            "revision = 0\n[tools]\nread_file = \"allow\"\n[approvals]\nexpire_after_secs = 60\n\
             [[grant]]\nroot = \"{{ROOT}}\"\ncapabilities = [{caps}]\n{extra}"
        );
        let inst = instance(&policy);
        let b = inst.start(&[]);
        let mut gw = b.gateway();
        gw.open_session(None);
        let m = refused_message(&gw.call(run(&inst, &["true"])));
        assert!(
            m.contains(says) && m.contains("cannot hold"),
            "{extra}: {m}"
        );
    }
}

#[test]
fn a_grant_without_delete_gives_commands_a_read_only_tree() {
    let policy =
        "revision = 0\n[tools]\nread_file = \"allow\"\n[approvals]\nexpire_after_secs = 60\n\
                  [[grant]]\nroot = \"{ROOT}\"\ncapabilities = [\"read\", \"write\", \"edit\"]\n";
    let inst = instance(policy);
    put(&inst, "f.txt", "x\n");
    open_up(&inst);
    let b = inst.start(&[]);
    let (mut gw, mut ui) = (b.gateway(), b.ui());
    gw.open_session(None);
    let (code, out) = command(&mut gw, &mut ui, &inst, &["cat", "f.txt"]);
    assert_eq!((code, out.as_str()), (Some(0), "x\n"), "positive control");
    let (code, out) = command(&mut gw, &mut ui, &inst, &["rm", "f.txt"]);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("Read-only file system"), "{out}");
    assert!(inst.file("f.txt").exists());
}

#[test]
fn a_key_under_an_ordinary_name_asks_by_its_content() {
    let inst = instance(&policy_with("", ""));
    put(
        &inst,
        "notes.txt",
        "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaA==\n",
    );
    put(&inst, "pub.txt", "-----BEGIN PUBLIC KEY-----\nMFkw\n");
    open_up(&inst);
    let b = inst.start(&[]);
    let (mut gw, mut ui) = (b.gateway(), b.ui());
    gw.open_session(None);
    // Positive control: a public key is read without a question.
    assert!(matches!(
        done(gw.call(read_call(&inst.file("pub.txt")))),
        ToolResult::File(_)
    ));
    let (reply, rule) = approving(&mut gw, &mut ui, read_call(&inst.file("notes.txt")));
    let rule = rule.expect("a private key asks");
    assert!(rule.contains("holds a private key"), "{rule}");
    match done(reply) {
        ToolResult::File(f) => assert!(f.data.starts_with(b"-----BEGIN OPENSSH")),
        other => panic!("{other:?}"),
    }
}
