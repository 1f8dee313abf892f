// Drives the Linux binaries (ipc_schema::platform::Missing elsewhere).
#![cfg(target_os = "linux")]
//! The boundary's edges (issue 14): nothing a command writes may make the user's own tools run
//! it later, outside every sandbox. Each case plants what a hostile agent would (submodule
//! hooks, a repository rebuilt under a renamed parent, a `core.hooksPath` in the working tree, a
//! fresh repository with a hook, editor and agent settings), through every path into the
//! sandbox, and asserts the exact errno or what was set aside; the positive controls plant the
//! same outside and show the user's real `git` running it.
//!
//! Runs as root and as an unprivileged user. Build first: `cargo build --workspace
//! --all-features`.

#![forbid(unsafe_code)]

mod broker_core_support;
mod escape_support;

use escape_support::{chown_tree, Ctx, Host, Setup, Status, Via};
use std::path::Path;
use std::process::Command;

fn s(p: &Path) -> String {
    p.to_str().unwrap().to_string()
}

/// The probe's line outside any sandbox, as this test's user (the positive control).
fn outside(op: &[&str]) -> String {
    let out = Command::new(gatehouse_tests::exec_probe())
        .args(op)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim_end().to_string()
}

/// A repository as `git init` leaves it, made by the real git (as the sandbox's user).
fn git_init(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    let out = Command::new("git")
        .args(["init", "-q", "-b", "main"])
        .arg(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
}

/// The user's own `git commit` on the host, in `dir`: what a planted hook waits for.
fn user_commits(dir: &Path) -> std::process::Output {
    Command::new("git")
        .args([
            "-c",
            "user.name=u",
            "-c",
            "user.email=u@example.test",
            "-c",
            "safe.directory=*",
            "commit",
            "-q",
            "--allow-empty",
            "-m",
            "x",
        ])
        .current_dir(dir)
        .env_remove("GIT_DIR")
        .output()
        .unwrap()
}

const HOOK: &str = "#!/bin/sh\necho planted > \"$(git rev-parse --show-toplevel)/RAN\"\n";

fn plant_hook_script(hook: &str) -> String {
    format!("printf '%s' '{HOOK}' > {hook} && chmod +x {hook}")
}

fn submodule_config_and_hooks_cannot_be_planted(via: Via, host: Host) {
    let c = Ctx::new(via, host);
    git_init(c.work());
    let m = c.work().join(".git/modules/sub");
    git_init(&m.join("wt"));
    std::fs::rename(m.join("wt/.git"), m.join("g")).unwrap();
    std::fs::remove_dir(m.join("wt")).unwrap();
    for e in std::fs::read_dir(m.join("g")).unwrap() {
        let e = e.unwrap();
        std::fs::rename(e.path(), m.join(e.file_name())).unwrap();
    }
    std::fs::remove_dir(m.join("g")).unwrap();
    std::fs::create_dir_all(c.work().join("sub")).unwrap();
    std::fs::write(c.work().join("sub/.git"), "gitdir: ../.git/modules/sub\n").unwrap();
    chown_tree(c.work());
    // Positive control: outside, the module's hook and config are written.
    let hook = s(&m.join("hooks/post-checkout"));
    assert_eq!(outside(&["write", &hook]), "ok");
    std::fs::remove_file(&hook).unwrap();
    assert_eq!(
        outside(&["read", &s(&m.join("config"))]).split(' ').next(),
        Some("ok")
    );
    assert_eq!(
        c.probe(&["write", ".git/modules/sub/hooks/post-checkout"]),
        "errno EACCES"
    );
    assert_eq!(
        c.probe(&["write", ".git/modules/sub/config"]),
        "errno EROFS"
    );
    assert_eq!(
        c.probe(&["read", ".git/modules/sub/config"]),
        "errno EACCES"
    );
    // The .git file cannot be pointed elsewhere, nor swapped.
    assert_eq!(c.probe(&["write", "sub/.git"]), "errno EROFS");
    assert_eq!(c.probe(&["rename", "sub", "sub2"]), "errno EBUSY");
    assert!(!m.join("hooks/post-checkout").exists());
}

fn a_nested_repository_cannot_be_replaced_by_renaming_its_parent(via: Via, host: Host) {
    let c = Ctx::new(via, host);
    git_init(&c.work().join("vendor/lib"));
    chown_tree(c.work());
    // Positive control: outside, the parent renames.
    let spare = c.work().join("spare/inner");
    std::fs::create_dir_all(&spare).unwrap();
    std::fs::rename(c.work().join("spare"), c.work().join("spare2")).unwrap();
    chown_tree(c.work());
    assert_eq!(c.probe(&["rename", "vendor", "v2"]), "errno EBUSY");
    assert_eq!(
        c.probe(&["rename", "vendor/lib", "vendor/lib2"]),
        "errno EBUSY"
    );
    assert_eq!(
        c.probe(&["rename", "vendor/lib/.git", "vendor/lib/y"]),
        "errno EBUSY"
    );
    // Into another directory: Landlock refuses the move of a mount point first.
    assert_eq!(c.probe(&["rename", "vendor/lib/.git", "x"]), "errno EXDEV");
    assert_eq!(c.probe(&["rename", "spare2", "spare3"]), "ok");
    assert!(c.work().join("vendor/lib/.git/hooks").is_dir());
}

fn a_hooks_path_into_the_working_tree_is_read_only_or_refused(via: Via, host: Host) {
    let c = Ctx::new(via, host);
    git_init(c.work());
    let cfg = c.work().join(".git/config");
    let mut text = std::fs::read_to_string(&cfg).unwrap();
    text.push_str("[core]\n\thooksPath = .hooks\n");
    std::fs::write(&cfg, text).unwrap();
    std::fs::create_dir(c.work().join(".hooks")).unwrap();
    std::fs::write(c.work().join("README"), "x").unwrap();
    chown_tree(c.work());
    assert_eq!(c.probe(&["read", "README"]), "ok 1 bytes");
    // Positive control: outside, the hooks directory takes a hook.
    let hook = s(&c.work().join(".hooks/pre-commit"));
    assert_eq!(outside(&["write", &hook]), "ok");
    std::fs::remove_file(&hook).unwrap();
    assert_eq!(c.probe(&["write", ".hooks/pre-commit"]), "errno EROFS");
    assert_eq!(c.probe(&["rename", ".hooks", "h2"]), "errno EBUSY");
    assert!(!c.work().join(".hooks/pre-commit").exists());
    // The directory missing: a command could create it, so none runs until it exists.
    std::fs::remove_dir(c.work().join(".hooks")).unwrap();
    let out = c.run(&[&c.probe_bin(), "read", "README"]);
    match &out.status {
        Status::Refused(m) => {
            assert!(m.contains("core.hookspath") && m.contains(".hooks"), "{m}")
        }
        other => panic!(
            "{via:?}: ran without its hooks directory: {other:?} {}",
            out.notes
        ),
    }
    assert!(!c.work().join(".hooks").exists(), "nothing was created");
}

fn a_repository_made_by_the_command_keeps_no_hook_the_users_git_would_run(via: Via, host: Host) {
    // Positive control: the same planting outside, and the user's git runs the hook.
    let ctl = escape_support::owned_dir("gh-boundary-ctl-");
    let status = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "git init -q -b main new && {}",
            plant_hook_script("new/.git/hooks/pre-commit")
        ))
        .current_dir(ctl.path())
        .status()
        .unwrap();
    assert!(status.success());
    assert!(user_commits(&ctl.path().join("new")).status.success());
    assert!(ctl.path().join("new/RAN").exists(), "control: the hook ran");

    let c = Ctx::new(via, host);
    std::fs::write(c.work().join("keep"), "x").unwrap();
    chown_tree(c.work());
    let script = format!(
        "git init -q -b main new && {} && git -C new config core.pager 'sh ./p' && mkdir -p .vscode && echo '{{}}' > .vscode/tasks.json && git init -q -b main clean",
        plant_hook_script("new/.git/hooks/pre-commit")
    );
    let out = c.run(&["sh", "-c", &script]);
    assert_eq!(
        out.status,
        Status::Exited(0),
        "{}\n{}",
        out.stderr,
        out.notes
    );
    let w = c.work();
    assert!(!w.join("new/.git/hooks/pre-commit").exists());
    assert!(w.join("new/.git/hooks/pre-commit.gatehouse-held").exists());
    assert!(w.join("new/.git/config.gatehouse-held").exists());
    assert!(!w.join(".vscode").exists());
    assert!(w.join(".vscode.gatehouse-held/tasks.json").exists());
    // A fresh repository's own config is kept: git init's keys are all data.
    assert!(w.join("clean/.git/config").exists());
    let said = format!("{}{}", out.stderr, out.notes);
    assert!(said.contains("set aside"), "{via:?} did not say: {said}");
    assert!(said.contains("pre-commit"), "{said}");
    // The user's git, in the repository the command made: nothing it planted runs.
    assert!(user_commits(&w.join("new")).status.success());
    assert!(
        !w.join("new/RAN").exists(),
        "the planted hook ran on the host"
    );
}

/// While the command still runs (an agent's session under `gatehouse run` lasts hours), what it
/// plants is set aside within seconds: the command itself sees its hook renamed under it.
fn a_planted_hook_is_set_aside_while_the_command_still_runs(via: Via, host: Host) {
    let c = Ctx::new(via, host);
    chown_tree(c.work());
    let script = format!(
        "git init -q -b main new && {} && for i in $(seq 1 120); do \
         test -e new/.git/hooks/pre-commit || {{ echo set-aside-while-running; exit 0; }}; sleep 0.25; done; \
         echo still-there",
        plant_hook_script("new/.git/hooks/pre-commit")
    );
    let out = c.run(&["sh", "-c", &script]);
    assert_eq!(
        out.status,
        Status::Exited(0),
        "{}\n{}",
        out.stderr,
        out.notes
    );
    assert_eq!(out.text(), "set-aside-while-running", "{}", out.notes);
    assert!(c
        .work()
        .join("new/.git/hooks/pre-commit.gatehouse-held")
        .exists());
    // Set aside once, not again and again by each later look.
    assert!(!c
        .work()
        .join("new/.git/hooks/pre-commit.gatehouse-held.gatehouse-held")
        .exists());
}

fn files_that_make_tools_run_code_are_read_but_never_written(via: Via, host: Host) {
    let c = Ctx::new(via, host);
    let w = c.work();
    for (p, body) in [
        (".vscode/tasks.json", "{}"),
        (".claude/settings.json", "{}"),
        (".gitattributes", "* text\n"),
        (".mcp.json", "{}"),
        ("src/.envrc", "x"),
    ] {
        std::fs::create_dir_all(w.join(p).parent().unwrap()).unwrap();
        std::fs::write(w.join(p), body).unwrap();
    }
    std::fs::write(w.join("main.rs"), "x").unwrap();
    chown_tree(w);
    assert_eq!(c.probe(&["write", "main.rs"]), "ok", "positive control");
    // Positive control: outside, the same settings file is written.
    let launch = s(&w.join(".vscode/launch.json"));
    assert_eq!(outside(&["write", &launch]), "ok");
    std::fs::remove_file(&launch).unwrap();
    assert_eq!(c.probe(&["read", ".vscode/tasks.json"]), "ok 2 bytes");
    for p in [
        ".vscode/tasks.json",
        ".vscode/launch.json",
        ".claude/settings.json",
        ".claude/agents.md",
        ".gitattributes",
        ".mcp.json",
        "src/.envrc",
    ] {
        assert_eq!(c.probe(&["write", p]), "errno EROFS", "{p}");
    }
    assert_eq!(c.probe(&["rename", ".vscode", "v"]), "errno EBUSY");
    assert_eq!(c.probe(&["rename", "src", "s2"]), "errno EBUSY");
}

fn agent_logins_in_a_readable_directory_are_never_read(via: Via, host: Host) {
    let c = Ctx::new(via, host);
    let home = c.readable("gh-boundary-home-");
    for p in [
        ".codex/auth.json",
        ".claude/.credentials.json",
        ".s3cfg",
        "notes",
    ] {
        std::fs::create_dir_all(home.join(p).parent().unwrap()).unwrap();
        std::fs::write(home.join(p), "secret").unwrap();
    }
    chown_tree(&home);
    assert_eq!(c.probe(&["read", &s(&home.join("notes"))]), "ok 6 bytes");
    // Positive control: outside, the logins are readable.
    assert_eq!(
        outside(&["read", &s(&home.join(".codex/auth.json"))]),
        "ok 6 bytes"
    );
    for p in [".codex/auth.json", ".claude/.credentials.json", ".s3cfg"] {
        assert_eq!(c.probe(&["read", &s(&home.join(p))]), "errno EACCES", "{p}");
    }
}

fn secret_files_are_out_of_sight_of_agents(via: Via, host: Host) {
    let c = Ctx::with(via, host, Setup::default());
    let w = c.work();
    std::fs::create_dir_all(w.join("deploy")).unwrap();
    std::fs::write(w.join(".env"), "TOKEN=x\n").unwrap();
    std::fs::write(
        w.join("deploy/server.pem"),
        "-----BEGIN PRIVATE KEY-----\nMC4C\n-----END PRIVATE KEY-----\n",
    )
    .unwrap();
    // A CA bundle discloses nothing and TLS clients need it: it stays visible.
    std::fs::write(
        w.join("deploy/ca.pem"),
        "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
    )
    .unwrap();
    std::fs::write(w.join("app.txt"), "text\n").unwrap();
    chown_tree(w);
    assert_eq!(c.probe(&["read", "app.txt"]), "ok 5 bytes");
    let expect = match via {
        // The user's own command line: the user chose what it sees.
        Via::Sandbox => "ok 8 bytes",
        // What an agent runs, and an agent itself: hidden.
        Via::RunCommand | Via::Run => "errno EACCES",
    };
    assert_eq!(c.probe(&["read", ".env"]), expect);
    if via != Via::Sandbox {
        assert_eq!(c.probe(&["read", "deploy/server.pem"]), "errno EACCES");
    }
    assert_eq!(c.probe(&["read", "deploy/ca.pem"]), "ok 59 bytes");
}

escape_cases! {
    submodule_config_and_hooks_cannot_be_planted: [Sandbox, RunCommand, Run],
    a_nested_repository_cannot_be_replaced_by_renaming_its_parent: [Sandbox, RunCommand, Run],
    a_hooks_path_into_the_working_tree_is_read_only_or_refused: [Sandbox, RunCommand, Run],
    a_repository_made_by_the_command_keeps_no_hook_the_users_git_would_run: [Sandbox, RunCommand, Run],
    a_planted_hook_is_set_aside_while_the_command_still_runs: [Sandbox, RunCommand, Run],
    files_that_make_tools_run_code_are_read_but_never_written: [Sandbox, RunCommand, Run],
    agent_logins_in_a_readable_directory_are_never_read: [Sandbox, RunCommand, Run],
    secret_files_are_out_of_sight_of_agents: [Sandbox, RunCommand, Run],
}
