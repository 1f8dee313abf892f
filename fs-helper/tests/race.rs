// Drives the Linux binaries (ipc_schema::platform::Missing elsewhere).
#![cfg(target_os = "linux")]
//! Check-vs-use races: another thread swaps a path between an inside file (or directory) and a
//! link out of the grant, in a tight loop, while the helper reads and writes through it. Every
//! answer must be the inside content or a refusal; never the outside file, never a write to it.

mod common;

use common::*;
use ipc_schema::fs::{CreateMode, FsErrorKind, FsReply, FsRequest};
use nix::fcntl::{renameat2, RenameFlags, AT_FDCWD};
use std::os::unix::fs::symlink;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

const ITERATIONS: usize = 4000;

/// Swaps `a` and `b` atomically (RENAME_EXCHANGE) until `stop`.
fn flipper(a: &Path, b: &Path, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<u64> {
    let (a, b) = (a.to_path_buf(), b.to_path_buf());
    std::thread::spawn(move || {
        let mut n = 0;
        while !stop.load(Ordering::Relaxed) {
            renameat2(AT_FDCWD, &a, AT_FDCWD, &b, RenameFlags::RENAME_EXCHANGE).expect("exchange");
            n += 1;
        }
        n
    })
}

fn tally(outcomes: &mut std::collections::BTreeMap<String, usize>, k: String) {
    *outcomes.entry(k).or_default() += 1;
}

#[test]
fn a_file_swapped_for_a_link_outside_is_never_followed() {
    let (tmp, root) = base_dir();
    let work = root.join("work");
    std::fs::write(work.join("target"), b"inside\n").unwrap();
    symlink("/etc/passwd", work.join("spare")).unwrap();
    let mut fx = Fixture::with_args(tmp, root.clone(), &default_args(&root));
    let stop = Arc::new(AtomicBool::new(false));
    let t = flipper(&work.join("target"), &work.join("spare"), stop.clone());
    let mut outcomes = Default::default();
    for _ in 0..ITERATIONS {
        match fx.req(read(w("target"))) {
            FsReply::File(c) => {
                assert_eq!(
                    c.data, b"inside\n",
                    "read something other than the inside file"
                );
                tally(&mut outcomes, "read inside".into());
            }
            FsReply::Failed(e) => {
                assert!(
                    matches!(
                        e.kind,
                        FsErrorKind::OutsideGrant | FsErrorKind::Raced | FsErrorKind::NotFound
                    ),
                    "{e:?}"
                );
                tally(&mut outcomes, format!("{:?}", e.kind));
            }
            other => panic!("{other:?}"),
        }
    }
    stop.store(true, Ordering::Relaxed);
    let swaps = t.join().unwrap();
    eprintln!("{swaps} swaps; outcomes {outcomes:?}");
}

#[test]
fn a_directory_swapped_for_a_link_outside_is_never_written_through() {
    directory_swap(false);
}

#[test]
fn the_component_walk_holds_against_the_same_swaps() {
    directory_swap(true);
}

fn directory_swap(walk: bool) {
    let (tmp, root) = base_dir();
    let work = root.join("work");
    std::fs::create_dir(work.join("d")).unwrap();
    std::fs::write(work.join("d/secret.txt"), b"inside\n").unwrap();
    symlink("../outside", work.join("spare")).unwrap();
    let mut args = default_args(&root);
    if walk {
        args.push("--test-resolver".into());
        args.push("walk".into());
    }
    let mut fx = Fixture::with_args(tmp, root.clone(), &args);
    let stop = Arc::new(AtomicBool::new(false));
    let t = flipper(&work.join("d"), &work.join("spare"), stop.clone());
    let mut outcomes = Default::default();
    for i in 0..ITERATIONS {
        let req = if i % 2 == 0 {
            read(w("d/secret.txt"))
        } else {
            FsRequest::WriteFile {
                path: w("d/secret.txt"),
                content: b"inside\n".to_vec(),
                create: CreateMode::MustExist,
                create_parents: false,
                expected: None,
                dry_run: false,
            }
        };
        match fx.req(req) {
            FsReply::File(c) => {
                assert_eq!(c.data, b"inside\n");
                tally(&mut outcomes, "read inside".into());
            }
            FsReply::Changed(_) => tally(&mut outcomes, "wrote inside".into()),
            FsReply::Failed(e) => {
                assert!(
                    matches!(
                        e.kind,
                        FsErrorKind::OutsideGrant
                            | FsErrorKind::Raced
                            | FsErrorKind::NotFound
                            | FsErrorKind::NotADirectory
                    ),
                    "{e:?}"
                );
                tally(&mut outcomes, format!("{:?}", e.kind));
            }
            other => panic!("{other:?}"),
        }
    }
    stop.store(true, Ordering::Relaxed);
    let swaps = t.join().unwrap();
    eprintln!("{swaps} swaps; outcomes {outcomes:?}");
    assert_eq!(
        std::fs::read(root.join("outside/secret.txt")).unwrap(),
        b"outside secret\n"
    );
    let stray: Vec<_> = std::fs::read_dir(root.join("outside"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(
        stray,
        vec![std::ffi::OsString::from("secret.txt")],
        "nothing was created outside"
    );
}
