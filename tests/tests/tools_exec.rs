// Drives the Linux binaries (ipc_schema::platform::Missing elsewhere).
#![cfg(target_os = "linux")]
//! `run_command` end to end: gateway socket -> broker (fs-helper resolves the working directory,
//! policy asks, the ledger records) -> exec-helper (a sandbox per command) -> exit status and
//! capped output.
//!
//! Each test runs where user namespaces work (`name::namespaces`) and again where they are
//! refused (`name::container`: the broker under `gatehouse-refuse-userns container`, the policy
//! with `require_namespaces = false`), where the exec-helper runs commands in the Landlock tier.

#![forbid(unsafe_code)]

mod broker_core_support;

use broker_core_support::{abs, audit_rows, policy_with, Gateway, Instance, Ui};
use gatehouse_tests::Host;
use ipc_schema::tool::{CommandRun, RunCommand, ToolCall, ToolReply, ToolResult};
use ipc_schema::ui::Choice;
use ipc_schema::Body;
use std::os::unix::fs::PermissionsExt;

/// An instance whose project the exec-helper can reach: run as root, the helper becomes
/// `nobody`, so the instance root and the project must be searchable by others.
fn instance(host: Host) -> Instance {
    let inst = Instance::new(Some(&host.policy(&policy_with("", ""))));
    for (p, mode) in [
        (inst.root().to_path_buf(), 0o711),
        (inst.project.clone(), 0o755),
    ] {
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    inst
}

fn run(inst: &Instance, argv: &[&str]) -> ToolCall {
    ToolCall::RunCommand(RunCommand {
        argv: argv.iter().map(|s| s.to_string()).collect(),
        cwd: abs(&inst.project),
        timeout_secs: 0,
    })
}

/// Sends `call`, checks the card, approves it once, returns the final reply.
fn approved(
    host: Host,
    gw: &mut Gateway,
    ui: &mut Ui,
    inst: &Instance,
    call: ToolCall,
) -> ToolReply {
    let id = gw.send(call);
    match gw.next_for(id).unwrap() {
        ToolReply::AwaitingApproval(_) => {}
        other => return other,
    }
    let p = ui.wait_pending(1).remove(0);
    assert_eq!(p.tool.name(), "run_command");
    let project = inst.project.display().to_string();
    assert!(
        p.target.ends_with(&format!(" in {project}")),
        "{}",
        p.target
    );
    assert!(
        p.effect.contains(&format!(
            " in {project}, in the exec sandbox ({}) with no network, at most 300 s",
            if host.landlock() {
                "Landlock tier (no namespaces: docs/SECURITY.md lists what it does not hold)"
            } else {
                "namespace tier"
            }
        )),
        "{}",
        p.effect
    );
    assert!(matches!(ui.decide(&p, Choice::AllowOnce), Body::UiReply(_)));
    let reply = gw.final_for(id).unwrap();
    // The card's line, tier and all, is in the proposal's audit row (written by the audit
    // writer on its own thread: waited for, up to a minute).
    let has = |rows: &[serde_json::Value]| {
        rows.iter().any(|r| {
            r["kind"] == "proposal" && r["detail"].as_str().is_some_and(|d| d.contains(&p.effect))
        })
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let mut rows = audit_rows(inst);
    while !has(&rows) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
        rows = audit_rows(inst);
    }
    assert!(has(&rows), "{rows:#?}");
    // Every row of a command call (decision, proposal, ledger steps, result) names the exec
    // sandbox's tier in its `tier` column, under the chain's hash; rows about nothing run in
    // it (the session's own) name none.
    let tier = host.tier().name();
    let of_call: Vec<&serde_json::Value> =
        rows.iter().filter(|r| r["tool"] == "run_command").collect();
    for kind in ["tool_call", "proposal", "execution"] {
        assert!(
            of_call.iter().any(|r| r["kind"] == kind),
            "{kind}: {rows:#?}"
        );
    }
    for r in &of_call {
        assert_eq!(r["tier"], tier, "{r}");
    }
    let session_rows: Vec<_> = rows.iter().filter(|r| r["kind"] == "session").collect();
    assert!(!session_rows.is_empty(), "{rows:#?}");
    for r in session_rows {
        assert_eq!(r["tier"], serde_json::Value::Null, "{r}");
    }
    reply
}

fn ran(r: ToolReply) -> CommandRun {
    match r {
        ToolReply::Done(d) => match d.result {
            ToolResult::CommandRun(c) => c,
            other => panic!("{other:?}"),
        },
        other => panic!("{other:?}"),
    }
}

fn a_command_runs_once_in_its_sandbox_with_its_status_and_output(host: Host) {
    let inst = instance(host);
    std::fs::write(inst.file("input.txt"), "from the project\n").unwrap();
    std::fs::set_permissions(
        inst.file("input.txt"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    let b = inst.start_on(host, &[]);
    let mut gw = b.gateway();
    let mut ui = b.ui();

    let script = "cat input.txt; echo to-stderr >&2; exit 3";
    let call = run(&inst, &["/bin/sh", "-c", script]);
    let c = ran(approved(host, &mut gw, &mut ui, &inst, call.clone()));
    assert_eq!(c.exit_code, Some(3), "{c:?}; log:\n{}", b.log());
    assert_eq!(c.outcome, "exited with status 3");
    assert_eq!(c.stdout, b"from the project\n");
    assert_eq!(c.stderr, b"to-stderr\n");
    assert_eq!(c.cwd, inst.project);
    // The line names the tier and its namespaces: the full tier where the machine allows user
    // namespaces, the Landlock tier (and none) where it refuses them.
    let tier = match host.tier() {
        ipc_schema::tier::ConfinementTier::Namespaces => {
            "; tier namespaces; namespaces user mount pid net ipc uts; "
        }
        ipc_schema::tier::ConfinementTier::Landlock => "; tier landlock; namespaces none; ",
        t => panic!("a Linux host reported the {t} tier"),
    };
    assert!(c.sandbox.contains(tier), "{}", c.sandbox);
    assert!(c.sandbox.contains("no network"), "{}", c.sandbox);

    // The same call again in this session: from the ledger, not run again, not asked.
    match gw.call(call) {
        ToolReply::Done(d) => {
            assert!(d.from_ledger);
            let ToolResult::CommandRun(again) = d.result else {
                panic!()
            };
            assert_eq!(again.stdout, b"from the project\n");
        }
        other => panic!("{other:?}"),
    }
    assert!(ui.pending().is_empty());
}

fn the_sandbox_has_no_network_and_hides_the_rest_of_the_host(host: Host) {
    let inst = instance(host);
    let b = inst.start_on(host, &[]);
    let mut gw = b.gateway();
    let mut ui = b.ui();
    // Positive control: the same shell reads a file of the system and of the project.
    let c = ran(approved(
        host,
        &mut gw,
        &mut ui,
        &inst,
        run(
            &inst,
            &[
                "/bin/sh",
                "-c",
                "test -r /etc/passwd && test -d . && echo ok",
            ],
        ),
    ));
    assert_eq!(c.stdout, b"ok\n", "{c:?}");
    // No inet sockets at all (EAFNOSUPPORT, 97), while a Unix socket still works.
    let py = "import socket\ntry:\n    socket.socket(socket.AF_INET, socket.SOCK_STREAM)\n    print('inet ok')\nexcept OSError as e:\n    print('inet', e.errno)\nsocket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\nprint('unix ok')\n";
    let c = ran(approved(
        host,
        &mut gw,
        &mut ui,
        &inst,
        run(&inst, &["/usr/bin/python3", "-c", py]),
    ));
    assert_eq!(
        String::from_utf8_lossy(&c.stdout),
        "inet 97\nunix ok\n",
        "{c:?}"
    );
    // The broker's data dir (beside the project) is not in the sandbox at all (the Landlock
    // tier: it is there, and Landlock refuses listing it).
    let data = inst.root().join("data").display().to_string();
    let c = ran(approved(
        host,
        &mut gw,
        &mut ui,
        &inst,
        run(
            &inst,
            &["/bin/sh", "-c", &format!("ls {data}; echo status $?")],
        ),
    ));
    assert!(
        String::from_utf8_lossy(&c.stdout).contains("status 2"),
        "{c:?}"
    );
    let said = if host.landlock() {
        "Permission denied"
    } else {
        "No such file or directory"
    };
    assert!(String::from_utf8_lossy(&c.stderr).contains(said), "{c:?}");
}

fn a_program_that_does_not_exist_is_a_failure_not_a_result(host: Host) {
    let inst = instance(host);
    let b = inst.start_on(host, &[]);
    let mut gw = b.gateway();
    let mut ui = b.ui();
    match approved(
        host,
        &mut gw,
        &mut ui,
        &inst,
        run(&inst, &["/nonexistent/program-xyz"]),
    ) {
        ToolReply::Failed(f) => assert_eq!(
            f.message,
            "the exec-helper did not start the command: /nonexistent/program-xyz: command not found in the sandbox (searched /nonexistent/program-xyz)"
        ),
        other => panic!("{other:?}"),
    }
}

fn a_working_directory_outside_every_grant_is_refused_before_anyone_is_asked(host: Host) {
    let inst = instance(host);
    let b = inst.start_on(host, &[]);
    let mut gw = b.gateway();
    match gw.call(ToolCall::RunCommand(RunCommand {
        argv: vec!["/bin/true".into()],
        cwd: ipc_schema::fs::FsPath::Absolute(b"/etc".to_vec()),
        timeout_secs: 0,
    })) {
        ToolReply::Refused(r) => {
            assert_eq!(r.kind, ipc_schema::tool::RefusalKind::Contained, "{r:?}")
        }
        other => panic!("{other:?}"),
    }
    assert!(b.ui().pending().is_empty());
}

fn gatehouses_own_dirs_are_masked_even_inside_a_grant(host: Host) {
    // A second grant: the instance root, which holds the broker's config, data and run dirs.
    let inst = Instance::new(None);
    let outer = inst.root().display().to_string();
    inst.write_policy(&host.policy(&policy_with(
        "",
        &format!("[[grant]]\nroot = \"{outer}\"\ncapabilities = [\"read\"]\n"),
    )));
    for (p, mode) in [
        (inst.root().to_path_buf(), 0o755),
        (inst.project.clone(), 0o755),
    ] {
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    std::fs::write(inst.file("visible.txt"), "visible\n").unwrap();
    std::fs::set_permissions(
        inst.file("visible.txt"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    let b = inst.start_on(host, &[]);
    let mut gw = b.gateway();
    let mut ui = b.ui();
    let id = gw.send(ToolCall::RunCommand(RunCommand {
        argv: vec![
            "/bin/sh".into(),
            "-c".into(),
            "cat project/visible.txt; ls data >/dev/null; echo data $?; ls config >/dev/null; echo config $?; cat config/policy.toml >/dev/null; echo policy $?".into(),
        ],
        cwd: ipc_schema::fs::FsPath::Absolute(inst.root().as_os_str().as_encoded_bytes().to_vec()),
        timeout_secs: 0,
    }));
    let reply = match gw.next_for(id).unwrap() {
        ToolReply::AwaitingApproval(_) => {
            let p = ui.wait_pending(1).remove(0);
            assert!(matches!(ui.decide(&p, Choice::AllowOnce), Body::UiReply(_)));
            gw.final_for(id).unwrap()
        }
        other => other,
    };
    let c = ran(reply);
    // The project file is read (positive control); the broker's dirs are not listable, and
    // nothing in them is readable. In the Landlock tier the names in them can be listed (not
    // held: a masked directory inside a grant keeps its parent's right to list), as the user
    // who owns them; a root caller's commands run as nobody, whom the dirs' modes stop.
    let listable = host.landlock() && !nix::unistd::geteuid().is_root();
    let want = if listable {
        assert!(
            sandbox::linux::command::not_held::WITHOUT_NAMESPACES
                .iter()
                .any(|n| n.name == "hidden_directory_names_listable"),
            "the Landlock tier does not hold hidden_directory_names_listable, and not_held does not list it"
        );
        "visible\ndata 0\nconfig 0\npolicy 1\n"
    } else {
        "visible\ndata 2\nconfig 2\npolicy 1\n"
    };
    assert_eq!(
        String::from_utf8_lossy(&c.stdout),
        want,
        "{c:?}; log:\n{}",
        b.log()
    );
    assert!(
        String::from_utf8_lossy(&c.stderr).contains("Permission denied"),
        "{c:?}"
    );
    // Masked by the sandbox (not only by file modes, which stop `nobody` but not the user who
    // owns them): the report names each of gatehouse's dirs.
    for d in ["config", "data", "run"] {
        let p = format!("{outer}/{d}");
        assert!(
            c.sandbox.contains(&format!("masked: {p}")) || c.sandbox.contains(&format!(", {p}")),
            "{d}: {}",
            c.sandbox
        );
    }
}

gatehouse_tests::on_hosts! {
    a_command_runs_once_in_its_sandbox_with_its_status_and_output: [Namespaces, Container],
    the_sandbox_has_no_network_and_hides_the_rest_of_the_host: [Namespaces, Container],
    a_program_that_does_not_exist_is_a_failure_not_a_result: [Namespaces, Container],
    a_working_directory_outside_every_grant_is_refused_before_anyone_is_asked: [Namespaces, Container],
    gatehouses_own_dirs_are_masked_even_inside_a_grant: [Namespaces, Container],
}
