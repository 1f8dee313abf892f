// Drives the Linux binaries (ipc_schema::platform::Missing elsewhere).
#![cfg(target_os = "linux")]
//! The hostile suite: each case is a request an attacker-controlled agent (or a tree it prepared)
//! could send to the real, locked-down fs-helper, and the exact refusal it must get.

mod common;

use common::*;
use ipc_schema::fs::{
    Access, CheckpointId, CreateMode, Edit, FsErrorKind, FsPath, FsReply, FsRequest, GrantId,
    WalkLimits, READ_CHUNK_MAX, WRITE_MAX,
};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::symlink;
use std::path::Path;

fn write(path: FsPath, content: &[u8]) -> FsRequest {
    FsRequest::WriteFile {
        path,
        content: content.to_vec(),
        create: CreateMode::Either,
        create_parents: true,
        expected: None,
        dry_run: false,
    }
}

fn mv(from: &str, to: &str) -> FsRequest {
    FsRequest::MovePath {
        from: w(from),
        to: w(to),
        overwrite: false,
    }
}

fn delete(p: &str) -> FsRequest {
    FsRequest::DeletePath {
        path: w(p),
        recursive: true,
        expected: None,
    }
}

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// Builds the hostile tree inside `work` (and a few things beside it).
fn hostile_tree(root: &Path) {
    let work = root.join("work");
    let f = |p: &str, c: &[u8]| {
        let p = work.join(p);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, c).unwrap();
    };
    f("ok.txt", b"ok\n");
    f("sub/inner.txt", b"inner\n");
    f("script.sh", b"#!/bin/sh\necho hi\n");
    f(".ssh/id_rsa", b"KEY\n");
    f(".SSH/id_rsa", b"KEY\n");
    f(".Ssh/config", b"Host *\n");
    f(".BASHRC", b"alias x=y\n");
    f("nested/repo/.git/hooks/pre-commit", b"#!/bin/sh\n");
    f("nested/repo/.git/config", b"[core]\n");
    f("nested/repo/.git/HEAD", b"ref: refs/heads/main\n");
    f("evil/hooks/pre-commit", b"#!/bin/sh\nrm -rf ~\n");
    f("gh-runtime/state", b"gatehouse's own\n");
    f(".git/config", b"[core]\n");
    std::fs::create_dir_all(work.join(OsStr::from_bytes(b"\xff/.ssh"))).unwrap();
    std::fs::write(work.join(OsStr::from_bytes(b"\xff/.ssh/key")), b"KEY").unwrap();
    symlink("/etc", work.join("link_etc")).unwrap();
    symlink("/etc/passwd", work.join("link_passwd")).unwrap();
    symlink("../outside/secret.txt", work.join("link_outside_rel")).unwrap();
    symlink("../outside", work.join("link_outside_dir")).unwrap();
    symlink("/proc/self/root/etc/passwd", work.join("link_proc_root")).unwrap();
    symlink("/proc/self/fd/3", work.join("link_proc_fd")).unwrap();
    symlink("loop_b", work.join("loop_a")).unwrap();
    symlink("loop_a", work.join("loop_b")).unwrap();
    symlink(".ssh/id_rsa", work.join("link_to_key")).unwrap();
    symlink(root.join("data/checkpoints"), work.join("link_data")).unwrap();
    symlink("sub/../../outside/secret.txt", work.join("link_dotdot_mid")).unwrap();
    std::fs::hard_link(root.join("outside/secret.txt"), work.join("hard_outside")).unwrap();
    nix::unistd::mkfifo(
        &work.join("fifo"),
        nix::sys::stat::Mode::from_bits_truncate(0o644),
    )
    .unwrap();
    if is_root() {
        nix::sys::stat::mknod(
            &work.join("dev_null"),
            nix::sys::stat::SFlag::S_IFCHR,
            nix::sys::stat::Mode::from_bits_truncate(0o666),
            nix::sys::stat::makedev(1, 3),
        )
        .unwrap();
    }
    let sparse = std::fs::File::create(work.join("sparse.bin")).unwrap();
    sparse.set_len(10 << 30).unwrap();
    let _ = std::process::Command::new("chmod")
        .args(["-R", "a+rwX"])
        .arg(root)
        .status();
}

struct Case {
    name: &'static str,
    req: FsRequest,
    kind: FsErrorKind,
    message: String,
}

#[test]
fn hostile_requests_get_their_exact_refusal() {
    hostile_table(None);
}

/// The same table with the fallback resolver (one `openat(O_NOFOLLOW)` per component), as on
/// kernels without openat2.
#[test]
fn hostile_requests_get_the_same_refusal_from_the_component_walk() {
    hostile_table(Some("walk"));
}

fn hostile_table(resolver: Option<&str>) {
    let (tmp, root) = base_dir();
    hostile_tree(&root);
    let mut config = default_config(&root);
    config
        .protect
        .push(root.join("work/gh-runtime").as_os_str().as_bytes().to_vec());
    let mut args = args_of(&config);
    if let Some(r) = resolver {
        args.push("--test-resolver".into());
        args.push(r.into());
    }
    let mut fx = Fixture::with_args(tmp, root.clone(), &args);
    let FsReply::Status(status) = fx.req(FsRequest::Status) else {
        panic!()
    };
    match resolver {
        None => assert_eq!(status.resolver, ipc_schema::fs::Resolver::Openat2),
        Some(_) => assert_eq!(
            status.resolver,
            ipc_schema::fs::Resolver::ComponentWalk {
                reason: "forced by --test-resolver walk (test build)".into()
            }
        ),
    }
    let work = shown(&root.join("work"));
    let ro = shown(&root.join("ro"));
    let climbs = |p: &str| format!("{work}/{p}: `..` climbs above the root of grant w");
    let outside_link = |p: &str, link: &str, target: &str| {
        format!("{work}/{p}: the link {work}/{link} points to {target}, outside grant w")
    };
    let protected = |p: &str, why: &str, place: &str| {
        format!(
            "{work}/{p}: protected ({why}: {place}); refused whatever a grant or an approval says"
        )
    };
    let no_grant = |p: &str| format!("{p}: not inside any grant");
    let hooks = ("git hooks and config run code", ".git/…/hooks");
    let git_config = ("git hooks and config run code", ".git/…/config");
    let c = |name, req, kind, message: String| Case {
        name,
        req,
        kind,
        message,
    };
    use FsErrorKind::*;
    let mut cases = vec![
        // `..` in every position.
        c("dotdot alone", read(w("..")), OutsideGrant, climbs("..")),
        c("dotdot first", read(w("../outside/secret.txt")), OutsideGrant, climbs("../outside/secret.txt")),
        c("dotdot middle", read(w("sub/../../outside/secret.txt")), OutsideGrant, climbs("sub/../../outside/secret.txt")),
        c("dotdot last", read(w("sub/../..")), OutsideGrant, climbs("sub/../..")),
        c("dot then dotdot", read(w("./../x")), OutsideGrant, climbs("../x")),
        c("deep dotdot", read(w("sub/./../../../etc/passwd")), OutsideGrant, climbs("sub/../../../etc/passwd")),
        c("dotdot in a listing", FsRequest::ListDir { path: w("sub/../.."), offset: 0, limit: 0 }, OutsideGrant, climbs("sub/../..")),
        c("dotdot in a write", write(w("../outside/new.txt"), b"x"), OutsideGrant, climbs("../outside/new.txt")),
        c("dotdot after a missing dir", write(w("new/../../x"), b"x"), InvalidPath,
            format!("{work}/new/../../x: `..` after a directory that does not exist")),
        c("absolute path with dotdot", read(abs(&root.join("work/../outside/secret.txt"))), OutsideGrant,
            climbs("../outside/secret.txt")),
        // Absolute paths outside, and /proc tricks.
        c("absolute /etc/passwd", read(FsPath::Absolute(b"/etc/passwd".to_vec())), NoGrant, no_grant("/etc/passwd")),
        c("absolute outside", read(abs(&root.join("outside/secret.txt"))), NoGrant,
            no_grant(&shown(&root.join("outside/secret.txt")))),
        c("/proc/self/root", read(FsPath::Absolute(format!("/proc/self/root{work}/ok.txt").into_bytes())), NoGrant,
            no_grant(&format!("/proc/self/root{work}/ok.txt"))),
        c("/proc/self/fd/N", read(FsPath::Absolute(b"/proc/self/fd/3".to_vec())), NoGrant, no_grant("/proc/self/fd/3")),
        c("absolute path in a grant-relative field", read(w("/etc/passwd")), InvalidPath,
            format!("/etc/passwd: a path in grant w is relative to its root {work}")),
        c("NUL byte", read(w("ok.txt\0/x")), InvalidPath, "ok.txt\u{0}/x: a path cannot contain a NUL byte".into()),
        c("name over 255 bytes", read(w(&"n".repeat(256))), InvalidPath,
            format!("{work}/{}: a name is longer than 255 bytes", "n".repeat(256))),
        c("unknown grant", read(FsPath::InGrant { grant: GrantId("nope".into()), path: b"x".to_vec() }), NoGrant,
            "there is no grant named nope".into()),
        // Links that leave the root.
        c("link to /etc", read(w("link_etc/passwd")), OutsideGrant, outside_link("link_etc/passwd", "link_etc", "/etc")),
        c("link to /etc/passwd", read(w("link_passwd")), OutsideGrant, outside_link("link_passwd", "link_passwd", "/etc/passwd")),
        c("relative link outside", read(w("link_outside_rel")), OutsideGrant, climbs("link_outside_rel")),
        c("link to an outside dir", read(w("link_outside_dir/secret.txt")), OutsideGrant, climbs("link_outside_dir/secret.txt")),
        c("link with dotdot in the middle", read(w("link_dotdot_mid")), OutsideGrant, climbs("link_dotdot_mid")),
        c("link to /proc/self/root", read(w("link_proc_root")), OutsideGrant,
            outside_link("link_proc_root", "link_proc_root", "/proc/self/root/etc/passwd")),
        c("link to /proc/self/fd/3", read(w("link_proc_fd")), OutsideGrant,
            outside_link("link_proc_fd", "link_proc_fd", "/proc/self/fd/3")),
        c("link into gatehouse's data", read(w("link_data/x")), OutsideGrant,
            outside_link("link_data/x", "link_data", &shown(&root.join("data/checkpoints")))),
        c("write through a link to /etc", write(w("link_etc/evil"), b"x"), OutsideGrant,
            outside_link("link_etc/evil", "link_etc", "/etc")),
        c("list through a link to /etc", FsRequest::ListDir { path: w("link_etc"), offset: 0, limit: 0 }, OutsideGrant,
            outside_link("link_etc", "link_etc", "/etc")),
        c("link loop", read(w("loop_a")), InvalidPath, format!("{work}/loop_a: more than 40 links")),
        // Files that are never opened.
        c("hard link to an outside file", read(w("hard_outside")), HardLinked,
            format!("{work}/hard_outside: has 2 hard links; another name for it may lie outside the grant, so it is never opened")),
        c("write to a hard link", write(w("hard_outside"), b"pwned"), HardLinked,
            format!("{work}/hard_outside: has 2 hard links; another name for it may lie outside the grant, so it is never opened")),
        c("FIFO read (must not hang)", read(w("fifo")), SpecialFile,
            format!("{work}/fifo: a FIFO is not a regular file; it is never opened")),
        c("FIFO write (must not hang)", write(w("fifo"), b"x"), SpecialFile,
            format!("{work}/fifo: a FIFO is not a regular file; it is never opened")),
        c("FIFO edit", FsRequest::EditFile { path: w("fifo"), edit: Edit::Replace { old: "a".into(), new: "b".into(), replace_all: false }, expected: None, dry_run: false },
            SpecialFile, format!("{work}/fifo: a FIFO is not a regular file; it is never opened")),
        c("edit of a 10 GiB sparse file", FsRequest::EditFile { path: w("sparse.bin"), edit: Edit::Replace { old: "a".into(), new: "b".into(), replace_all: false }, expected: None, dry_run: false },
            TooLarge, format!("{work}/sparse.bin: 10737418240 bytes; edit_file works on text files up to 8 MiB")),
        c("a directory as a file", read(w("sub")), IsADirectory, format!("{work}/sub: is a directory")),
        c("a file as a directory", read(w("ok.txt/x")), NotADirectory, format!("{work}/ok.txt/x: {work}/ok.txt is not a directory")),
        // Protected names, in any case, wherever they are.
        c(".ssh", read(w(".ssh/id_rsa")), Protected, protected(".ssh/id_rsa", "SSH keys", ".ssh")),
        c(".SSH", read(w(".SSH/id_rsa")), Protected, protected(".SSH/id_rsa", "SSH keys", ".ssh")),
        c(".Ssh", read(w(".Ssh/config")), Protected, protected(".Ssh/config", "SSH keys", ".ssh")),
        c(".ssh under a non-UTF-8 dir", read(wb(b"\xff/.ssh/key")), Protected,
            protected("\u{fffd}/.ssh/key", "SSH keys", ".ssh")),
        c("writing an authorized key", write(w(".ssh/authorized_keys"), b"ssh-ed25519 AAAA"), Protected,
            protected(".ssh/authorized_keys", "SSH keys", ".ssh")),
        c("listing .ssh", FsRequest::ListDir { path: w(".ssh"), offset: 0, limit: 0 }, Protected,
            protected(".ssh", "SSH keys", ".ssh")),
        c("link to a key inside the grant", read(w("link_to_key")), Protected, protected(".ssh/id_rsa", "SSH keys", ".ssh")),
        c("shell start-up file, upper case", read(w(".BASHRC")), Protected, protected(".BASHRC", "shell start-up file", ".bashrc")),
        c("nested git hook", read(w("nested/repo/.git/hooks/pre-commit")), Protected,
            protected("nested/repo/.git/hooks/pre-commit", hooks.0, hooks.1)),
        c("writing a nested git hook", write(w("nested/repo/.git/hooks/post-checkout"), b"#!/bin/sh"), Protected,
            protected("nested/repo/.git/hooks/post-checkout", hooks.0, hooks.1)),
        c("editing .git/config", FsRequest::EditFile { path: w(".git/config"), edit: Edit::Replace { old: "[core]".into(), new: "[core]\nhooksPath=/tmp".into(), replace_all: false }, expected: None, dry_run: false },
            Protected, protected(".git/config", git_config.0, git_config.1)),
        c("a .git file redirecting git", write(w("sub/.git"), b"gitdir: ../evil"), Protected,
            format!("{work}/sub/.git: protected (a .git file redirects git to another directory: .git); refused whatever a grant or an approval says")),
        c("gatehouse's own directory inside a grant", read(w("gh-runtime/state")), Protected,
            protected("gh-runtime/state", "gatehouse's own directory", &format!("{work}/gh-runtime"))),
        c("resolving a protected path for approval", FsRequest::Resolve { path: w(".ssh/id_rsa"), access: Access::Read }, Protected,
            protected(".ssh/id_rsa", "SSH keys", ".ssh")),
        // Moves and deletes that would reach or create a protected path.
        c("move onto .bashrc", mv("ok.txt", ".bashrc"), Protected, protected(".bashrc", "shell start-up file", ".bashrc")),
        c("move a script into a hook", mv("script.sh", "nested/repo/.git/hooks/pre-push"), Protected,
            protected("nested/repo/.git/hooks/pre-push", hooks.0, hooks.1)),
        c("move .git out of its protection", mv("nested/repo/.git", "nested/repo/dotgit"), Protected,
            format!("{work}/nested/repo/.git: contains {work}/nested/repo/.git/config, which is protected ({}: {})", git_config.0, git_config.1)),
        c("move a dir of hooks to .git", mv("evil", "sub/.git"), Protected,
            format!("{work}/evil: contains {work}/sub/.git/hooks/pre-commit, which is protected ({}: {})", hooks.0, hooks.1)),
        c("move a file to .git", mv("script.sh", "sub/.git"), Protected,
            format!("{work}/sub/.git: protected (a .git file redirects git to another directory: .git); refused whatever a grant or an approval says")),
        c("move a key out of .ssh", mv(".ssh/id_rsa", "stolen"), Protected, protected(".ssh/id_rsa", "SSH keys", ".ssh")),
        c("delete .ssh", delete(".ssh"), Protected, protected(".ssh", "SSH keys", ".ssh")),
        c("delete a repo with hooks", delete("nested"), Protected,
            format!("{work}/nested: contains {work}/nested/repo/.git/config, which is protected ({}: {})", git_config.0, git_config.1)),
        c("move outside the grants", FsRequest::MovePath { from: w("ok.txt"), to: abs(&root.join("outside/stolen.txt")), overwrite: false },
            NoGrant, no_grant(&shown(&root.join("outside/stolen.txt")))),
        // Capabilities and limits.
        c("write in a read-only grant", write(FsPath::InGrant { grant: GrantId("ro".into()), path: b"readme.txt".to_vec() }, b"x"),
            NotPermitted, format!("{ro}/readme.txt: grant ro does not allow write")),
        c("delete in a read-only grant", FsRequest::DeletePath { path: FsPath::InGrant { grant: GrantId("ro".into()), path: b"readme.txt".to_vec() }, recursive: false, expected: None },
            NotPermitted, format!("{ro}/readme.txt: grant ro does not allow delete")),
        c("write over the frame-safe limit", write(w("big.txt"), &vec![b'a'; WRITE_MAX as usize + 1]), TooLarge,
            format!("{} bytes is over the 768 KiB write limit", WRITE_MAX + 1)),
        c("undo with a path as checkpoint id", FsRequest::Undo { checkpoint: CheckpointId("../../etc/passwd".into()) }, NoSuchCheckpoint,
            "there is no checkpoint ../../etc/passwd (never made, expired after 7 days, or removed)".into()),
        c("delete the grant root", FsRequest::DeletePath { path: w(""), recursive: true, expected: None }, BadRequest,
            format!("{work}: the root of grant w cannot be deleted")),
        c("bad regex", FsRequest::Grep { path: w(""), regex: "(".into(), glob: None, case_insensitive: false, limits: WalkLimits::default(), grep: Default::default() },
            BadRequest, "bad regex: regex parse error:\n    (\n    ^\nerror: unclosed group".into()),
    ];
    if is_root() {
        cases.push(c(
            "device node",
            read(w("dev_null")),
            SpecialFile,
            format!(
                "{work}/dev_null: a character device is not a regular file; it is never opened"
            ),
        ));
    } else {
        eprintln!("not root: the device-node case cannot be built (mknod needs CAP_MKNOD) and is not counted");
    }
    assert!(cases.len() >= 40, "{} cases", cases.len());
    let mut failures = Vec::new();
    for case in cases {
        let got = fx.fail(case.req.clone());
        if got.kind != case.kind || got.message != case.message {
            failures.push(format!(
                "{}:\n  want {:?} {:?}\n  got  {:?} {:?}",
                case.name, case.kind, case.message, got.kind, got.message
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // Nothing outside changed, and nothing was moved away.
    assert_eq!(
        std::fs::read(root.join("outside/secret.txt")).unwrap(),
        b"outside secret\n"
    );
    assert!(root.join("work/nested/repo/.git/hooks/pre-commit").exists());
    assert!(root.join("work/.ssh/id_rsa").exists());
    assert!(!root.join("work/sub/.git").exists());
}

#[test]
fn a_sparse_10_gib_file_hits_the_cap_instead_of_being_read() {
    let (tmp, root) = base_dir();
    let f = std::fs::File::create(root.join("work/sparse.bin")).unwrap();
    f.set_len(10 << 30).unwrap();
    drop(f);
    let mut fx = Fixture::with_args(tmp, root.clone(), &default_args(&root));
    let FsReply::File(chunk) = fx.req(read(w("sparse.bin"))) else {
        panic!()
    };
    assert_eq!(chunk.data.len(), READ_CHUNK_MAX as usize);
    assert_eq!(chunk.file_size, 10 << 30);
    assert!(!chunk.eof);
    // The last page, by offset.
    let FsReply::File(last) = fx.req(FsRequest::ReadFile {
        path: w("sparse.bin"),
        offset: (10 << 30) - 10,
        length: 100,
    }) else {
        panic!()
    };
    assert_eq!(last.data, vec![0u8; 10]);
    assert!(last.eof);
    // grep passes over it (over the per-file cap), it does not read 10 GiB.
    let FsReply::Grep(g) = fx.req(FsRequest::Grep {
        path: w(""),
        regex: "x".into(),
        glob: None,
        case_insensitive: false,
        limits: WalkLimits::default(),
        grep: Default::default(),
    }) else {
        panic!()
    };
    assert_eq!((g.files_searched, g.files_skipped), (0, 1));
    // Deleting it keeps a checkpoint marked unrestorable, with the reason.
    let FsReply::Changed(rc) = fx.req(FsRequest::DeletePath {
        path: w("sparse.bin"),
        recursive: false,
        expected: None,
    }) else {
        panic!()
    };
    assert_eq!(
        rc.checkpoint.restorability,
        ipc_schema::fs::Restorability::Unrestorable {
            reason: "the old file was 10737418240 bytes, over the 8 MiB checkpoint limit".into()
        }
    );
    let e = fx.fail(FsRequest::Undo {
        checkpoint: rc.checkpoint.id.clone(),
    });
    assert_eq!(e.kind, FsErrorKind::Unrestorable);
    assert_eq!(e.message, format!("checkpoint {} cannot be restored: the old file was 10737418240 bytes, over the 8 MiB checkpoint limit", rc.checkpoint.id));
}

#[test]
fn walks_never_follow_links_out_of_the_searched_directory() {
    let (tmp, root) = base_dir();
    hostile_tree(&root);
    let mut fx = Fixture::with_args(tmp, root.clone(), &default_args(&root));
    let FsReply::Grep(g) = fx.req(FsRequest::Grep {
        path: w(""),
        regex: "root:|outside secret|KEY".into(),
        glob: None,
        case_insensitive: false,
        limits: WalkLimits {
            include_skipped_dirs: true,
            ..Default::default()
        },
        grep: Default::default(),
    }) else {
        panic!()
    };
    assert!(g.matches.is_empty(), "{:?}", g.matches);
    // Positive control: the same grep finds a planted line inside the grant.
    std::fs::write(root.join("work/sub/plant.txt"), b"outside secret\n").unwrap();
    let FsReply::Grep(g) = fx.req(FsRequest::Grep {
        path: w(""),
        regex: "outside secret".into(),
        glob: None,
        case_insensitive: false,
        limits: WalkLimits::default(),
        grep: Default::default(),
    }) else {
        panic!()
    };
    assert_eq!(g.matches.len(), 1);
    assert_eq!(g.matches[0].relative, b"sub/plant.txt");
    let FsReply::Search(s) = fx.req(FsRequest::SearchFiles {
        path: w(""),
        glob: "*".into(),
        limits: WalkLimits {
            include_skipped_dirs: true,
            ..Default::default()
        },
    }) else {
        panic!()
    };
    let found: Vec<String> = s
        .matches
        .iter()
        .map(|m| String::from_utf8_lossy(&m.relative).into_owned())
        .collect();
    for p in &found {
        let p = p.to_lowercase();
        assert!(
            !p.starts_with("link_etc/")
                && !p.starts_with("link_outside_dir/")
                && !p.contains(".ssh")
                && !p.contains(".git/hooks"),
            "{p}"
        );
    }
    // Positive control: ordinary entries and links that stay inside are found.
    for want in [
        "ok.txt",
        "sub/inner.txt",
        "evil/hooks/pre-commit",
        "nested/repo/.git/HEAD",
    ] {
        assert!(found.iter().any(|f| f == want), "{want} not in {found:?}");
    }
}
