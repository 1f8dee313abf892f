// Drives the Linux binaries (ipc_schema::platform::Missing elsewhere).
#![cfg(target_os = "linux")]
//! The ordinary flows on ordinary files, through the real locked-down helper: read, list, stat,
//! search, grep, write, edit, delete, move, undo, previews and "changed since" conflicts.

mod common;

use common::*;
use ipc_schema::fs::{
    Access, ChangeKind, CreateMode, Edit, FileKind, FsErrorKind, FsPath, FsReply, FsRequest,
    GrantId, Resolver, Restorability, Seal, WalkLimits,
};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;

fn write(path: FsPath, content: &[u8]) -> FsRequest {
    FsRequest::WriteFile {
        path,
        content: content.to_vec(),
        create: CreateMode::Either,
        create_parents: false,
        expected: None,
        dry_run: false,
    }
}

fn changed(r: FsReply) -> ipc_schema::fs::ChangeReceipt {
    match r {
        FsReply::Changed(c) => c,
        other => panic!("not a change: {other:?}"),
    }
}

fn undo(fx: &mut Fixture, c: &ipc_schema::fs::ChangeReceipt) -> FsReply {
    fx.req(FsRequest::Undo {
        checkpoint: c.checkpoint.id.clone(),
    })
}

#[test]
fn status_says_how_paths_are_resolved() {
    let mut fx = Fixture::new();
    let FsReply::Status(s) = fx.req(FsRequest::Status) else {
        panic!()
    };
    assert_eq!(s.resolver, Resolver::Openat2);
    assert_eq!(s.grants.len(), 2);
    assert_eq!(s.grants[0].root, fx.work().as_os_str().as_bytes());
    assert!(s
        .protected_dirs
        .contains(&fx.root.join("data").as_os_str().as_bytes().to_vec()));
}

#[test]
fn read_list_stat_search_and_grep() {
    let mut fx = Fixture::new();
    let work = fx.work();
    std::fs::create_dir_all(work.join("src/deep")).unwrap();
    std::fs::create_dir_all(work.join("target/debug")).unwrap();
    std::fs::write(
        work.join("src/main.rs"),
        b"fn main() {\n    println!(\"hi\");\n}\n",
    )
    .unwrap();
    std::fs::write(work.join("src/deep/lib.rs"), b"pub fn hi() {}\n").unwrap();
    std::fs::write(work.join("target/debug/gen.rs"), b"fn main() {}\n").unwrap();
    std::fs::write(
        work.join(OsStr::from_bytes(b"caf\xe9.txt")),
        b"latin-1 name\n",
    )
    .unwrap();
    std::os::unix::fs::symlink("src/main.rs", work.join("main_link.rs")).unwrap();

    // Reads page by offset and length; a link inside the grant resolves to its target.
    let FsReply::File(c) = fx.req(FsRequest::ReadFile {
        path: w("src/main.rs"),
        offset: 3,
        length: 4,
    }) else {
        panic!()
    };
    assert_eq!(c.data, b"main");
    assert!(!c.eof);
    let FsReply::File(c) = fx.req(read(w("main_link.rs"))) else {
        panic!()
    };
    assert_eq!(c.target.relative, b"src/main.rs");
    assert!(c.eof);
    let FsReply::File(c) = fx.req(read(abs(&work.join("src/deep/lib.rs")))) else {
        panic!()
    };
    assert_eq!(c.data, b"pub fn hi() {}\n");
    assert_eq!(c.target.grant, GrantId("w".into()));

    // A non-UTF-8 name keeps its bytes end to end.
    let FsReply::Listing(l) = fx.req(FsRequest::ListDir {
        path: w(""),
        offset: 0,
        limit: 0,
    }) else {
        panic!()
    };
    let names: Vec<&[u8]> = l.entries.iter().map(|e| e.name.as_slice()).collect();
    assert_eq!(
        names,
        vec![&b"caf\xe9.txt"[..], b"main_link.rs", b"src", b"target"]
    );
    assert_eq!(l.entries[1].kind, FileKind::Symlink);
    let FsReply::File(c) = fx.req(read(wb(b"caf\xe9.txt"))) else {
        panic!()
    };
    assert_eq!(c.data, b"latin-1 name\n");
    assert_eq!(c.target.relative, b"caf\xe9.txt");
    // Paging.
    let FsReply::Listing(p) = fx.req(FsRequest::ListDir {
        path: w(""),
        offset: 1,
        limit: 2,
    }) else {
        panic!()
    };
    assert_eq!(p.entries.len(), 2);
    assert_eq!(p.entries[0].name, b"main_link.rs");
    assert_eq!((p.total, p.next_offset), (4, Some(3)));

    let FsReply::Stat(s) = fx.req(FsRequest::Stat {
        path: w("src/deep/lib.rs"),
    }) else {
        panic!()
    };
    assert_eq!((s.size, s.nlink, s.target.kind), (15, 1, FileKind::File));

    // Search skips build output unless asked.
    let FsReply::Search(s) = fx.req(FsRequest::SearchFiles {
        path: w(""),
        glob: "*.rs".into(),
        limits: WalkLimits::default(),
    }) else {
        panic!()
    };
    let found: Vec<&[u8]> = s.matches.iter().map(|m| m.relative.as_slice()).collect();
    assert_eq!(
        found,
        vec![&b"main_link.rs"[..], b"src/main.rs", b"src/deep/lib.rs"]
    );
    let FsReply::Search(s) = fx.req(FsRequest::SearchFiles {
        path: w(""),
        glob: "*.rs".into(),
        limits: WalkLimits {
            include_skipped_dirs: true,
            max_depth: 2,
            ..Default::default()
        },
    }) else {
        panic!()
    };
    let found: Vec<&[u8]> = s.matches.iter().map(|m| m.relative.as_slice()).collect();
    assert_eq!(found, vec![&b"main_link.rs"[..], b"src/main.rs"]);
    assert!(s.depth_limited);

    let FsReply::Grep(g) = fx.req(FsRequest::Grep {
        path: w("src"),
        regex: "FN \\w+".into(),
        glob: Some("*.rs".into()),
        case_insensitive: true,
        limits: WalkLimits::default(),
        grep: Default::default(),
    }) else {
        panic!()
    };
    let hits: Vec<(&[u8], u64)> = g
        .matches
        .iter()
        .map(|m| (m.relative.as_slice(), m.line_number))
        .collect();
    assert_eq!(
        hits,
        vec![(&b"src/main.rs"[..], 1), (&b"src/deep/lib.rs"[..], 1)]
    );
    assert_eq!(g.matches[0].line, b"fn main() {");
    assert_eq!(g.stopped, None);
    let FsReply::Grep(g) = fx.req(FsRequest::Grep {
        path: w(""),
        regex: "fn".into(),
        glob: None,
        case_insensitive: false,
        limits: WalkLimits::default(),
        grep: ipc_schema::fs::GrepLimits {
            max_matches: 1,
            ..Default::default()
        },
    }) else {
        panic!()
    };
    assert_eq!(g.matches.len(), 1);
    assert_eq!(g.stopped, Some(ipc_schema::fs::StopReason::MaxMatches));

    // What the broker shows on an approval card.
    let FsReply::Resolved(t) = fx.req(FsRequest::Resolve {
        path: w("main_link.rs"),
        access: Access::Write,
    }) else {
        panic!()
    };
    assert_eq!(t.absolute, work.join("src/main.rs").as_os_str().as_bytes());
    assert_eq!(t.kind, FileKind::File);
    let FsReply::Resolved(t) = fx.req(FsRequest::Resolve {
        path: w("new/dir/file.txt"),
        access: Access::Write,
    }) else {
        panic!()
    };
    assert_eq!(t.kind, FileKind::Missing);
}

#[test]
fn write_edit_and_undo() {
    let mut fx = Fixture::new();
    let work = fx.work();
    let file = work.join("notes.txt");

    // Create, then replace: the replacement keeps the permissions, and undo goes back a step.
    let created = changed(fx.req(write(w("notes.txt"), b"one\ntwo\n")));
    assert!(created.created);
    assert_eq!(created.checkpoint.change, ChangeKind::Write);
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o640)).unwrap();
    let replaced = changed(fx.req(write(w("notes.txt"), b"one\nTWO\n")));
    assert!(!replaced.created && replaced.in_place.is_none());
    assert_eq!(std::fs::read(&file).unwrap(), b"one\nTWO\n");
    assert_eq!(
        std::fs::metadata(&file).unwrap().permissions().mode() & 0o777,
        0o640
    );

    // Preview, then the real edit bound to what the preview showed.
    let edit = Edit::Replace {
        old: "TWO".into(),
        new: "2".into(),
        replace_all: false,
    };
    let FsReply::Preview(p) = fx.req(FsRequest::EditFile {
        path: w("notes.txt"),
        edit: edit.clone(),
        expected: None,
        dry_run: true,
    }) else {
        panic!()
    };
    assert_eq!(
        p.diff.as_deref(),
        Some("--- a/notes.txt\n+++ b/notes.txt\n@@ -1,2 +1,2 @@\n one\n-TWO\n+2\n")
    );
    assert_eq!(
        std::fs::read(&file).unwrap(),
        b"one\nTWO\n",
        "a preview changes nothing"
    );
    let edited = changed(fx.req(FsRequest::EditFile {
        path: w("notes.txt"),
        edit,
        expected: p.current,
        dry_run: false,
    }));
    assert_eq!(edited.replacements, 1);
    assert_eq!(edited.seal, Some(p.proposed));
    assert_eq!(std::fs::read(&file).unwrap(), b"one\n2\n");

    // A stale approval: the file changed after the preview.
    let stale = Seal {
        len: 8,
        sha256: [0; 32],
    };
    let e = fx.fail(FsRequest::EditFile {
        path: w("notes.txt"),
        edit: Edit::UnifiedDiff("@@ -2 +2 @@\n-2\n+two\n".into()),
        expected: Some(stale),
        dry_run: false,
    });
    assert_eq!(e.kind, FsErrorKind::ChangedSince);
    let diffed = changed(fx.req(FsRequest::EditFile {
        path: w("notes.txt"),
        edit: Edit::UnifiedDiff("@@ -2 +2 @@\n-2\n+two\n".into()),
        expected: None,
        dry_run: false,
    }));
    assert_eq!(std::fs::read(&file).unwrap(), b"one\ntwo\n");

    // Undo, newest first; each puts back exactly what was there.
    assert!(matches!(undo(&mut fx, &diffed), FsReply::Undone(_)));
    assert_eq!(std::fs::read(&file).unwrap(), b"one\n2\n");
    assert!(matches!(undo(&mut fx, &edited), FsReply::Undone(_)));
    assert_eq!(std::fs::read(&file).unwrap(), b"one\nTWO\n");
    let e = match undo(&mut fx, &edited) {
        FsReply::Failed(e) => e,
        o => panic!("{o:?}"),
    };
    assert_eq!(
        e.message,
        format!("checkpoint {} was undone already", edited.checkpoint.id)
    );

    // Someone else changed the file: undo refuses instead of overwriting.
    std::fs::write(&file, b"edited by hand\n").unwrap();
    let e = match undo(&mut fx, &replaced) {
        FsReply::Failed(e) => e,
        o => panic!("{o:?}"),
    };
    assert_eq!(e.kind, FsErrorKind::ChangedSince);
    assert!(
        e.message.starts_with(&format!(
            "{}: changed since checkpoint {} (it is now a file of 15 bytes, sha256 ",
            file.display(),
            replaced.checkpoint.id
        )),
        "{}",
        e.message
    );
    assert_eq!(std::fs::read(&file).unwrap(), b"edited by hand\n");

    // Undoing a creation removes the file, if it is still what was written.
    std::fs::write(&file, b"one\ntwo\n").unwrap();
    assert!(matches!(undo(&mut fx, &created), FsReply::Undone(_)));
    assert!(!file.exists());

    let FsReply::Checkpoints(list) = fx.req(FsRequest::ListCheckpoints { limit: 0 }) else {
        panic!()
    };
    assert_eq!(list.len(), 4, "a refused change leaves no checkpoint");
    assert_eq!(list[0].id, diffed.checkpoint.id, "newest first");
}

#[test]
fn create_modes_parents_and_binary_checkpoints() {
    let mut fx = Fixture::new();
    let work = fx.work();
    std::fs::write(work.join("exists.txt"), b"x").unwrap();
    let e = fx.fail(FsRequest::WriteFile {
        path: w("exists.txt"),
        content: b"y".to_vec(),
        create: CreateMode::MustNotExist,
        create_parents: false,
        expected: None,
        dry_run: false,
    });
    assert_eq!(
        (e.kind, e.message),
        (
            FsErrorKind::AlreadyExists,
            format!("{}: already exists", work.join("exists.txt").display())
        )
    );
    let e = fx.fail(FsRequest::WriteFile {
        path: w("nope.txt"),
        content: b"y".to_vec(),
        create: CreateMode::MustExist,
        create_parents: false,
        expected: None,
        dry_run: false,
    });
    assert_eq!(e.kind, FsErrorKind::NotFound);
    let e = fx.fail(write(w("a/b/c.txt"), b"y"));
    assert_eq!(e.kind, FsErrorKind::NotFound);
    let made = changed(fx.req(FsRequest::WriteFile {
        path: w("a/b/c.txt"),
        content: b"y".to_vec(),
        create: CreateMode::Either,
        create_parents: true,
        expected: None,
        dry_run: false,
    }));
    assert_eq!(std::fs::read(work.join("a/b/c.txt")).unwrap(), b"y");
    assert!(matches!(undo(&mut fx, &made), FsReply::Undone(_)));
    assert!(
        !work.join("a").exists(),
        "undo removes the directories the write created"
    );

    // Overwriting a binary file works; its checkpoint says it cannot be restored, and why.
    std::fs::write(work.join("blob.bin"), b"\x00\x01\x02").unwrap();
    let over = changed(fx.req(write(w("blob.bin"), b"text")));
    assert_eq!(
        over.checkpoint.restorability,
        Restorability::Unrestorable {
            reason: "the old file was binary; binary files are not checkpointed".into()
        }
    );
    let e = match undo(&mut fx, &over) {
        FsReply::Failed(e) => e,
        o => panic!("{o:?}"),
    };
    assert_eq!(e.kind, FsErrorKind::Unrestorable);
    // edit_file is for text only.
    std::fs::write(work.join("blob.bin"), b"\x00\x01\x02").unwrap();
    let e = fx.fail(FsRequest::EditFile {
        path: w("blob.bin"),
        edit: Edit::Replace {
            old: "a".into(),
            new: "b".into(),
            replace_all: false,
        },
        expected: None,
        dry_run: false,
    });
    assert_eq!(
        (e.kind, e.message),
        (
            FsErrorKind::NotText,
            format!(
                "{}: not UTF-8 text; edit_file changes text files only",
                work.join("blob.bin").display()
            )
        )
    );
}

#[test]
fn delete_move_and_their_undo() {
    let mut fx = Fixture::new();
    let work = fx.work();
    std::fs::create_dir_all(work.join("tree/a/b")).unwrap();
    std::fs::write(work.join("tree/top.txt"), b"top\n").unwrap();
    std::fs::write(work.join("tree/a/b/leaf.txt"), b"leaf\n").unwrap();
    std::os::unix::fs::symlink("../top.txt", work.join("tree/a/link")).unwrap();
    std::fs::write(work.join("file.txt"), b"file\n").unwrap();

    let e = fx.fail(FsRequest::DeletePath {
        path: w("tree"),
        recursive: false,
        expected: None,
    });
    assert_eq!(
        (e.kind, e.message),
        (
            FsErrorKind::NotEmpty,
            format!(
                "{}: directory not empty (delete it with recursive)",
                work.join("tree").display()
            )
        )
    );
    let gone = changed(fx.req(FsRequest::DeletePath {
        path: w("tree"),
        recursive: true,
        expected: None,
    }));
    assert_eq!(gone.entries, 6);
    assert!(!work.join("tree").exists());
    assert!(matches!(undo(&mut fx, &gone), FsReply::Undone(_)));
    assert_eq!(
        std::fs::read(work.join("tree/a/b/leaf.txt")).unwrap(),
        b"leaf\n"
    );
    assert_eq!(
        std::fs::read_link(work.join("tree/a/link"))
            .unwrap()
            .as_os_str(),
        "../top.txt"
    );

    // Deleting a link deletes the link, not its target.
    std::os::unix::fs::symlink("file.txt", work.join("l")).unwrap();
    changed(fx.req(FsRequest::DeletePath {
        path: w("l"),
        recursive: false,
        expected: None,
    }));
    assert!(work.join("file.txt").exists());

    // Moves, refusals to overwrite, and moving back.
    let moved = changed(fx.req(FsRequest::MovePath {
        from: w("file.txt"),
        to: w("tree/moved.txt"),
        overwrite: false,
    }));
    assert_eq!(
        std::fs::read(work.join("tree/moved.txt")).unwrap(),
        b"file\n"
    );
    let e = fx.fail(FsRequest::MovePath {
        from: w("tree/moved.txt"),
        to: w("tree/top.txt"),
        overwrite: false,
    });
    assert_eq!(e.kind, FsErrorKind::AlreadyExists);
    let over = changed(fx.req(FsRequest::MovePath {
        from: w("tree/moved.txt"),
        to: w("tree/top.txt"),
        overwrite: true,
    }));
    assert_eq!(std::fs::read(work.join("tree/top.txt")).unwrap(), b"file\n");
    assert!(matches!(undo(&mut fx, &over), FsReply::Undone(_)));
    assert_eq!(std::fs::read(work.join("tree/top.txt")).unwrap(), b"top\n");
    assert_eq!(
        std::fs::read(work.join("tree/moved.txt")).unwrap(),
        b"file\n"
    );
    assert!(matches!(undo(&mut fx, &moved), FsReply::Undone(_)));
    assert_eq!(std::fs::read(work.join("file.txt")).unwrap(), b"file\n");

    // A directory moves whole; undo of a move refuses if the destination moved on.
    let dmove = changed(fx.req(FsRequest::MovePath {
        from: w("tree"),
        to: w("tree2"),
        overwrite: false,
    }));
    std::fs::rename(work.join("tree2"), work.join("tree3")).unwrap();
    let e = match undo(&mut fx, &dmove) {
        FsReply::Failed(e) => e,
        o => panic!("{o:?}"),
    };
    assert_eq!(e.kind, FsErrorKind::ChangedSince);
    assert_eq!(e.message, format!("{}: changed since checkpoint {} (it is now absent); undo would overwrite that, so nothing was restored", work.join("tree2").display(), dmove.checkpoint.id));
}

#[test]
fn read_only_grants_read() {
    let mut fx = Fixture::new();
    let p = FsPath::InGrant {
        grant: GrantId("ro".into()),
        path: b"readme.txt".to_vec(),
    };
    let FsReply::File(c) = fx.req(read(p)) else {
        panic!()
    };
    assert_eq!(c.data, b"read only\n");
}

#[test]
fn a_directory_that_refuses_new_files_gets_an_in_place_write() {
    let mut fx = Fixture::new();
    let dir = fx.work().join("locked");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("f.txt"), b"old\n").unwrap();
    std::fs::set_permissions(dir.join("f.txt"), std::fs::Permissions::from_mode(0o666)).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o555)).unwrap();
    // The helper has no capabilities, so even as root the directory refuses a temporary file.
    let c = changed(fx.req(write(w("locked/f.txt"), b"new\n")));
    assert_eq!(
        c.in_place.as_deref(),
        Some("its directory does not allow new files")
    );
    assert_eq!(std::fs::read(dir.join("f.txt")).unwrap(), b"new\n");
    let names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, vec![std::ffi::OsString::from("f.txt")]);
    assert!(matches!(undo(&mut fx, &c), FsReply::Undone(_)));
    assert_eq!(std::fs::read(dir.join("f.txt")).unwrap(), b"old\n");
    // A new file there is refused with the OS's reason.
    let e = fx.fail(write(w("locked/other.txt"), b"x"));
    assert_eq!((e.kind, e.errno), (FsErrorKind::Io, Some(libc::EACCES)));
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
}
