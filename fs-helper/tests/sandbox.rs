// Drives the Linux binaries (ipc_schema::platform::Missing elsewhere).
#![cfg(target_os = "linux")]
//! What the kernel sandbox refuses on its own (test probes bypass the helper's checks), each
//! beside a positive control: the same probe in a helper started without lockdown. And the
//! grants the helper refuses to start with.

mod common;

use common::*;
use gatehouse_tests::bin;
use ipc_schema::fs::{FsReply, FsRequest, GrantConfig, TestProbe};
use ipc_schema::{Body, Role};
use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;

fn probe(fx: &mut Fixture, p: TestProbe) -> Option<i32> {
    match fx.req(FsRequest::TestProbe(p)) {
        FsReply::TestProbe { errno } => errno,
        other => panic!("{other:?}"),
    }
}

fn open(path: &Path, write: bool) -> TestProbe {
    TestProbe::OpenAbsolute {
        path: path.as_os_str().as_bytes().to_vec(),
        write,
    }
}

/// The same fixture twice: locked down, and (positive control) with lockdown skipped.
fn pair() -> (Fixture, Fixture) {
    let locked = Fixture::new();
    let (tmp, root) = base_dir();
    let mut args = default_args(&root);
    args.push("--test-skip-lockdown".into());
    (locked, Fixture::with_args(tmp, root, &args))
}

#[test]
fn the_kernel_reports_seccomp_and_no_new_privs() {
    let fx = Fixture::new();
    let st = sandbox::process::read_proc_status(fx.helper.child.id()).unwrap();
    assert_eq!((st.seccomp, st.no_new_privs), (2, true));
    assert_eq!(st.cap_eff, 0);
    assert_eq!(
        fx.helper.hello.lockdown.landlock,
        sandbox::LandlockStatus::FullyEnforced
    );
}

#[test]
fn landlock_refuses_everything_outside_the_grants() {
    let (mut locked, mut open_fx) = pair();
    for (fx, want) in [(&mut locked, Some(libc::EACCES)), (&mut open_fx, None)] {
        let root = fx.root.clone();
        assert_eq!(
            probe(fx, open(&root.join("outside/secret.txt"), false)),
            want
        );
        assert_eq!(probe(fx, open(Path::new("/etc/hostname"), false)), want);
        // Inside the grants and the checkpoint dir: allowed either way.
        std::fs::write(root.join("work/in.txt"), b"x").unwrap();
        assert_eq!(probe(fx, open(&root.join("work/in.txt"), true)), None);
        assert_eq!(probe(fx, open(&root.join("ro/readme.txt"), false)), None);
    }
}

#[test]
fn landlock_keeps_read_only_grants_read_only() {
    let (mut locked, mut open_fx) = pair();
    let p = locked.root.join("ro/readme.txt");
    assert_eq!(probe(&mut locked, open(&p, true)), Some(libc::EACCES));
    let p = open_fx.root.join("ro/readme.txt");
    assert_eq!(probe(&mut open_fx, open(&p, true)), None);
}

/// Sends a probe the seccomp filter kills the helper for, and returns how it ended.
fn killed_by(fx: &mut Fixture, p: TestProbe) -> std::process::ExitStatus {
    fx.helper.conn.send(Body::Fs(FsRequest::TestProbe(p)));
    assert!(
        fx.helper.conn.recv().is_none(),
        "the helper answered instead of dying"
    );
    fx.helper.child.wait().unwrap()
}

#[test]
fn seccomp_kills_on_socket() {
    let (mut locked, mut open_fx) = pair();
    assert_eq!(probe(&mut open_fx, TestProbe::CreateSocket), None);
    assert_eq!(
        killed_by(&mut locked, TestProbe::CreateSocket).signal(),
        Some(libc::SIGSYS)
    );
}

#[test]
fn seccomp_kills_on_exec() {
    let (mut locked, mut open_fx) = pair();
    assert_eq!(probe(&mut open_fx, TestProbe::Exec), None);
    assert_eq!(
        killed_by(&mut locked, TestProbe::Exec).signal(),
        Some(libc::SIGSYS)
    );
}

/// Runs the helper with `args` the way the broker would but expecting it to refuse its grants
/// before it takes the channel; returns its exit code and stderr.
fn refused_start(args: &[OsString]) -> (Option<i32>, String) {
    let out = std::process::Command::new(bin(Role::Fs.name()))
        .args(args)
        .env_clear()
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn with_grant(root: &Path, grant: GrantConfig) -> Vec<OsString> {
    let mut c = default_config(root);
    c.grants.push(grant);
    args_of(&c)
}

#[test]
fn a_grant_root_that_is_a_link_is_refused() {
    let (_tmp, root) = base_dir();
    std::os::unix::fs::symlink(root.join("work"), root.join("worklink")).unwrap();
    let g = grant("l", &root.join("worklink"), R);
    let (code, err) = refused_start(&with_grant(&root, g));
    assert_eq!(code, Some(64));
    assert_eq!(
        err.trim_end(),
        format!("fs-helper: grant l: the root {} is, or passes through, a symbolic link; name the real directory", root.join("worklink").display())
    );
    // Through a link higher up, too.
    let g = grant("l", &root.join("worklink/.."), R);
    let (code, err) = refused_start(&with_grant(&root, g));
    assert_eq!(code, Some(64));
    assert!(err.contains("is not canonical"), "{err}");
}

#[test]
fn broad_and_protected_roots_are_refused_unless_confirmed() {
    let (tmp, root) = base_dir();
    let all = grant("all", Path::new("/"), R);
    let (code, err) = refused_start(&with_grant(&root, all.clone()));
    assert_eq!(code, Some(64));
    assert_eq!(err.trim_end(), "fs-helper: grant all: the root / is / or a home directory (or contains one); such a grant needs the `confirmed` flag");
    std::fs::create_dir_all(root.join("work/.ssh")).unwrap();
    let g = grant("k", &root.join("work/.ssh"), R);
    let (code, err) = refused_start(&with_grant(&root, g));
    assert_eq!(code, Some(64));
    assert_eq!(
        err.trim_end(),
        format!(
            "fs-helper: grant k: the root {} is protected (SSH keys: .ssh)",
            root.join("work/.ssh").display()
        )
    );
    // Positive control: confirmed, `/` starts and serves (read-only), protected paths still refused.
    let mut fx = Fixture::with_args(
        tmp,
        root.clone(),
        &with_grant(
            &root,
            GrantConfig {
                confirmed: true,
                ..all
            },
        ),
    );
    let FsReply::File(c) = fx.req(read(abs(&root.join("ro/readme.txt")))) else {
        panic!()
    };
    assert_eq!(c.data, b"read only\n");
    let e = fx.fail(read(abs(&root.join("data/checkpoints"))));
    assert_eq!(e.kind, ipc_schema::fs::FsErrorKind::Protected);
}
