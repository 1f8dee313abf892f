// Drives the Linux binaries (ipc_schema::platform::Missing elsewhere).
#![cfg(target_os = "linux")]
//! Where user namespaces are refused, the exec helper runs in the Landlock tier and gatehouse
//! says exactly why and what to do: `gatehouse doctor --json` (its typed `namespaces` field,
//! `exec_tier`, `not_held`) and `gatehouse sandbox` name the same diagnosis. Commands are
//! refused there (fail closed) unless the policy sets `require_namespaces = false`. Each refusal is made by
//! `gatehouse-refuse-userns` (tests/src/bin), a seccomp fault injector every gatehouse process
//! below it inherits:
//! - `container`: Docker's/Podman's default profile (unshare EPERM, clone with namespace flags
//!   EPERM, clone3 ENOSYS): the exec-helper cannot isolate itself; it runs in the Landlock tier.
//! - `nomount`: the namespace is created, the id maps written, mounts fail with EPERM (the shape
//!   of Ubuntu's AppArmor restriction at its mount step; see the wrapper's header for what it
//!   does not simulate): the exec-helper's probe fails at the mount; the Landlock tier again.
//!
//! Positive control: the same commands, without the wrapper, on a fresh data dir, succeed.
//! `gatehouse setup apparmor` is tested for its exact text and its refusal (no AppArmor here).

use gatehouse_tests::{bin, bin_dir, sandbox_owned_dir, DataDir};
use serde_json::Value;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn gatehouse(wrap: Option<&str>, dir: &DataDir, cwd: &std::path::Path, args: &[&str]) -> Output {
    let mut c = match wrap {
        Some(mode) => {
            let mut c = Command::new(bin("gatehouse-refuse-userns"));
            c.arg(mode).arg("--").arg(bin("gatehouse"));
            c
        }
        None => Command::new(bin("gatehouse")),
    };
    c.arg("--data-dir")
        .arg(dir.path())
        .args(args)
        .current_dir(cwd)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// The `gatehouse sandbox` rows of the audit log (`audit tail --json`), once its ended row is
/// there (the audit writer commits on its own thread: waited for, up to a minute).
fn sandbox_rows(wrap: Option<&str>, dir: &DataDir, cwd: &std::path::Path) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let o = gatehouse(wrap, dir, cwd, &["--json", "audit", "tail", "-n", "1000"]);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        let rows: Vec<Value> = String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|r| r["tool"] == "gatehouse sandbox")
            .collect();
        if rows.iter().any(|r| r["outcome"] == "ended") || Instant::now() > deadline {
            return rows;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The started and ended rows of a `gatehouse sandbox` command name the exec sandbox's tier
/// (their `tier` column, under the chain's hash), and the started row's line words it.
fn assert_rows_name_the_tier(rows: &[Value], name: &str, words: &str) {
    for outcome in ["started", "ended"] {
        let row = rows
            .iter()
            .find(|r| r["outcome"] == outcome)
            .unwrap_or_else(|| panic!("no {outcome} row: {rows:#?}"));
        assert_eq!(row["tier"], name, "{row}");
    }
    let started = rows.iter().find(|r| r["outcome"] == "started").unwrap();
    assert!(
        started["detail"]
            .as_str()
            .unwrap()
            .contains(&format!("in the exec sandbox ({words}) with no network")),
        "{started}"
    );
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// `doctor --json` until the exec-helper has left `Starting` (its first start is under way
/// when the broker answers its first request), at most 60 s.
fn doctor_settled(wrap: Option<&str>, dir: &DataDir, cwd: &std::path::Path) -> (Output, Value) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let o = gatehouse(wrap, dir, cwd, &["--json", "doctor"]);
        let v: Value = serde_json::from_slice(&o.stdout)
            .unwrap_or_else(|e| panic!("doctor --json: {e}: {}", text(&o)));
        if exec_state(&v) != Value::String("Starting".into()) {
            return (o, v);
        }
        assert!(Instant::now() < deadline, "exec-helper still starting: {v}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn exec_state(v: &Value) -> Value {
    v["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "exec-helper")
        .unwrap_or_else(|| panic!("no exec-helper in {v}"))["state"]
        .clone()
}

const CONTAINER_MSG: &str = "a seccomp filter gatehouse did not install refused it (creating the user namespace failed with EPERM; this process inherited 2 seccomp filter(s), as a container runtime's default profile (Docker, Podman) installs)";
const CONTAINER_REMEDY: &str = "run gatehouse outside the container, or start the container with a seccomp profile that allows unshare, clone and clone3 with namespace flags and mount inside the new namespace (the runtime's default profile with those rules added)";

#[test]
fn without_a_wrapper_namespaces_are_available_and_commands_run() {
    let dir = DataDir::new();
    let work = sandbox_owned_dir("gh-userns-ok-");
    let (_, v) = doctor_settled(None, &dir, work.path());
    assert_eq!(
        v["namespaces"],
        serde_json::json!({"available": true, "refused_by": null, "step": null, "errno": null, "message": null, "remedy": null}),
        "{v}"
    );
    assert_eq!(exec_state(&v), Value::String("Ready".into()), "{v}");
    let o = gatehouse(None, &dir, work.path(), &["sandbox", "--", "/bin/true"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        !text(&o).contains("tier"),
        "said only in the Landlock tier: {}",
        text(&o)
    );
    let rows = sandbox_rows(None, &dir, work.path());
    assert_rows_name_the_tier(&rows, "namespaces", "namespace tier");
    let o = gatehouse(None, &dir, work.path(), &["doctor"]);
    assert!(
        text(&o).contains(
            "\nnamespaces: available (user, mount, pid, net, ipc, uts; ids mapped, mounts work)\n"
        ),
        "{}",
        text(&o)
    );
}

#[test]
fn a_container_seccomp_profile_is_named_with_its_remedy() {
    let dir = DataDir::new();
    let work = sandbox_owned_dir("gh-userns-ctr-");
    let (o, v) = doctor_settled(Some("container"), &dir, work.path());
    assert_eq!(o.status.code(), Some(1), "{v}");
    assert_eq!(
        v["namespaces"],
        serde_json::json!({
            "available": false,
            "refused_by": {"kind": "container_seccomp"},
            "step": "creating the user namespace",
            "errno": "EPERM",
            "message": CONTAINER_MSG,
            "remedy": CONTAINER_REMEDY,
        }),
        "{v}"
    );
    // The exec-helper starts, in the Landlock tier, and says so; doctor lists what that tier
    // does not hold.
    assert_eq!(exec_state(&v), Value::String("Ready".into()), "{v}");
    assert_eq!(v["exec_tier"], "landlock", "{v}");
    let not_held = v["not_held"].as_array().unwrap();
    assert_eq!(
        not_held.len(),
        sandbox::linux::command::not_held::WITHOUT_NAMESPACES.len(),
        "{v}"
    );
    assert!(
        not_held
            .iter()
            .any(|n| n["name"] == "proc_other_processes_visible"),
        "{v}"
    );
    let problems: Vec<&str> = v["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect();
    assert!(
        problems.contains(&format!("namespaces: {CONTAINER_MSG} (commands run only where the policy sets require_namespaces = false, and then in the Landlock tier, which does not hold what docs/SECURITY.md lists). To fix: {CONTAINER_REMEDY}").as_str()),
        "{problems:#?}"
    );
    // The text form says it on its own lines.
    let o = gatehouse(Some("container"), &dir, work.path(), &["doctor"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o).contains(&format!("\nnamespaces: REFUSED: {CONTAINER_MSG}\n")),
        "{}",
        text(&o)
    );
    assert!(text(&o).contains("\nexec tier: landlock ("), "{}", text(&o));
    // By default (require_namespaces unset) a command is refused, naming the diagnosis.
    let o = gatehouse(
        Some("container"),
        &dir,
        work.path(),
        &["sandbox", "--", "/bin/true"],
    );
    assert_eq!(o.status.code(), Some(SANDBOX_REFUSED), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(&format!("commands run only in the exec sandbox's namespace tier (policy require_namespaces, true unless set), and this machine refuses user namespaces: {CONTAINER_MSG}; to fix: {CONTAINER_REMEDY}")),
        "{}",
        text(&o)
    );
}

/// With `require_namespaces = false` commands run in the Landlock tier: the user's other
/// directories are unreadable there (EACCES), beside a positive control in the same command
/// (its own working directory lists).
#[test]
fn with_require_namespaces_false_commands_run_in_the_landlock_tier() {
    let dir = DataDir::new();
    let work = sandbox_owned_dir("gh-userns-ll-");
    std::fs::write(work.path().join("here.txt"), "x").unwrap();
    let config = dir.path().join("config");
    std::fs::create_dir_all(&config).unwrap();
    std::fs::write(
        config.join("policy.toml"),
        format!(
            "require_namespaces = false\n[[grant]]\nroot = {:?}\ncapabilities = [\"read\", \"write\"]\n",
            work.path().to_str().unwrap()
        ),
    )
    .unwrap();
    let (_, v) = doctor_settled(Some("container"), &dir, work.path());
    assert_eq!(v["exec_tier"], "landlock", "{v}");
    let probe = "import os\nprint('own', sorted(os.listdir('.')))\ntry:\n    os.listdir('/home')\n    print('home listed')\nexcept OSError as e:\n    print('home errno', e.errno)\n";
    let o = gatehouse(
        Some("container"),
        &dir,
        work.path(),
        &["sandbox", "--", "/usr/bin/python3", "-c", probe],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("own ['here.txt']"), "{}", text(&o));
    assert!(
        out.contains(&format!("home errno {}", libc::EACCES)),
        "{}",
        text(&o)
    );
    // The person who launched it is told the tier; `--json` names it.
    assert!(
        String::from_utf8_lossy(&o.stderr).contains(
            "gatehouse sandbox: in the exec sandbox's Landlock tier (no namespaces: docs/SECURITY.md lists what it does not hold)\n"
        ),
        "{}",
        text(&o)
    );
    let j = gatehouse(
        Some("container"),
        &dir,
        work.path(),
        &["--json", "sandbox", "--", "/bin/true"],
    );
    let v: Value = serde_json::from_slice(&j.stdout).unwrap_or_else(|_| panic!("{}", text(&j)));
    assert_eq!(v["sandbox"]["tier"], "landlock", "{v}");
    let rows = sandbox_rows(Some("container"), &dir, work.path());
    assert_rows_name_the_tier(
        &rows,
        "landlock",
        "Landlock tier (no namespaces: docs/SECURITY.md lists what it does not hold)",
    );
}

/// In the Landlock tier a command with the proxy reaches it through its bridge, whose port
/// lies in the exec helper's bridge block (the helper has no empty network namespace there: its
/// own Landlock rules allow TCP to that block only, so a bridge outside it would be refused):
/// curl's CONNECT for a name outside the allowlist gets the proxy's 403, and that egress row
/// names the tier.
#[test]
fn in_the_landlock_tier_a_command_reaches_the_proxy_through_its_bridge() {
    let dir = DataDir::new();
    let work = sandbox_owned_dir("gh-userns-px-");
    let config = dir.path().join("config");
    std::fs::create_dir_all(&config).unwrap();
    std::fs::write(
        config.join("policy.toml"),
        format!(
            "require_namespaces = false\n[[grant]]\nroot = {:?}\ncapabilities = [\"read\", \"write\"]\n",
            work.path().to_str().unwrap()
        ),
    )
    .unwrap();
    let (_, v) = doctor_settled(Some("container"), &dir, work.path());
    assert_eq!(v["exec_tier"], "landlock", "{v}");
    let o = gatehouse(
        Some("container"),
        &dir,
        work.path(),
        &[
            "sandbox",
            "--allow-domain",
            "allowed.test",
            "--",
            "/bin/sh",
            "-c",
            "printenv HTTPS_PROXY; exec curl -sS -p https://denied.test/",
        ],
    );
    let out = String::from_utf8_lossy(&o.stdout);
    let port: u16 = out
        .trim()
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("{}", text(&o)));
    // Bridge blocks are chosen in 32768-60999 (sandbox::linux::bridge_ports).
    assert!((32768..=60999).contains(&port), "{}", text(&o));
    assert_eq!(
        o.status.code(),
        Some(56),
        "curl: tunnel failed; {}",
        text(&o)
    );
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("CONNECT tunnel failed, response 403"),
        "{}",
        text(&o)
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    let egress = loop {
        let o = gatehouse(
            Some("container"),
            &dir,
            work.path(),
            &["--json", "audit", "tail", "-n", "1000"],
        );
        let rows: Vec<Value> = String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|r| r["kind"] == "egress")
            .collect();
        if !rows.is_empty() || Instant::now() > deadline {
            break rows;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(egress.len(), 1, "{egress:#?}");
    assert_eq!(egress[0]["outcome"], "refused (403)", "{egress:#?}");
    assert_eq!(egress[0]["tier"], "landlock", "{egress:#?}");
}

/// `gatehouse sandbox`'s exit status when the exec sandbox cannot be set up.
const SANDBOX_REFUSED: i32 = 125;

#[test]
fn mounts_refused_after_the_namespace_exists_are_named_at_that_step() {
    let dir = DataDir::new();
    let work = sandbox_owned_dir("gh-userns-mnt-");
    let msg = "a seccomp filter gatehouse did not install refused it (mounting inside the new namespace failed with EPERM; this process inherited 1 seccomp filter(s), as a container runtime's default profile (Docker, Podman) installs)";
    let (o, v) = doctor_settled(Some("nomount"), &dir, work.path());
    assert_eq!(o.status.code(), Some(1), "{v}");
    assert_eq!(
        v["namespaces"]["refused_by"],
        serde_json::json!({"kind": "container_seccomp"}),
        "{v}"
    );
    assert_eq!(
        v["namespaces"]["step"], "mounting inside the new namespace",
        "{v}"
    );
    assert_eq!(v["namespaces"]["errno"], "EPERM", "{v}");
    assert_eq!(v["namespaces"]["message"], msg, "{v}");
    // The exec-helper's own probe mounts too: it chooses the Landlock tier, and by default a
    // command is refused naming the mount step.
    assert_eq!(exec_state(&v), Value::String("Ready".into()), "{v}");
    assert_eq!(v["exec_tier"], "landlock", "{v}");
    let o = gatehouse(
        Some("nomount"),
        &dir,
        work.path(),
        &["sandbox", "--", "/bin/true"],
    );
    assert_eq!(o.status.code(), Some(SANDBOX_REFUSED), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains(&format!(
            "this machine refuses user namespaces: {msg}; to fix: {CONTAINER_REMEDY}"
        )),
        "{}",
        text(&o)
    );
}

fn setup(args: &[&str]) -> Output {
    Command::new(bin("gatehouse"))
        .args(["setup", "apparmor"])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

#[test]
fn setup_apparmor_prints_the_exact_profile_and_refuses_to_install_without_apparmor() {
    let exec = std::fs::canonicalize(bin_dir().join("exec-helper")).unwrap();
    let profile = format!(
        "# Written by `gatehouse setup apparmor`. Lets gatehouse's exec helper create the user\n\
         # namespaces its sandbox needs where kernel.apparmor_restrict_unprivileged_userns=1.\n\
         # Nothing else is allowed or confined by it.\n\
         abi <abi/4.0>,\n\
         include <tunables/global>\n\
         \n\
         profile gatehouse-exec-helper \"{}\" flags=(unconfined) {{\n\
         \x20 userns,\n\
         \n\
         \x20 # Site-specific additions and overrides. See local/README for details.\n\
         \x20 include if exists <local/gatehouse-exec-helper>\n\
         }}\n",
        exec.display()
    );
    for args in [&[][..], &["--dry-run"][..]] {
        let o = setup(args);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        assert_eq!(
            String::from_utf8_lossy(&o.stdout),
            format!("# would write /etc/apparmor.d/gatehouse (run with --yes as root to write it and load it with `apparmor_parser -r /etc/apparmor.d/gatehouse`):\n{profile}")
        );
    }
    let o2 = Command::new(bin("gatehouse"))
        .args(["--json", "setup", "apparmor"])
        .output()
        .unwrap();
    assert_eq!(o2.status.code(), Some(0), "{}", text(&o2));
    let v: Value = serde_json::from_slice(&o2.stdout).unwrap();
    assert_eq!(
        v,
        serde_json::json!({"file": "/etc/apparmor.d/gatehouse", "profile": profile, "load": "apparmor_parser -r /etc/apparmor.d/gatehouse", "written": false})
    );

    // This machine has no AppArmor: --yes refuses (as root and as a user) and writes nothing.
    assert!(
        !std::path::Path::new("/sys/kernel/security/apparmor").exists(),
        "this test expects a machine without AppArmor (CI's)"
    );
    let o = setup(&["--yes"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert_eq!(
        String::from_utf8_lossy(&o.stderr),
        "gatehouse setup apparmor: AppArmor is not enabled on this kernel (/sys/kernel/security/apparmor is missing): there is no restriction to lift and nothing to load the profile into; nothing was written\n"
    );
    assert!(o.stdout.is_empty());
    assert!(!std::path::Path::new("/etc/apparmor.d/gatehouse").exists());

    // A helper directory without the exec helper: named, with what to do.
    let empty = tempfile::tempdir().unwrap();
    let o = setup(&["--helper-dir", empty.path().to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert_eq!(
        String::from_utf8_lossy(&o.stderr),
        format!("gatehouse setup apparmor: {}/exec-helper: not found (No such file or directory (os error 2)); pass --helper-dir DIR where gatehouse's helpers are installed\n", empty.path().display())
    );
}
