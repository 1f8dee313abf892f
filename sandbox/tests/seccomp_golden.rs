//! Every seccomp filter, flattened one line per rule, against its committed listing in
//! `docs/seccomp/`: a filter change that is not in the listing fails here, so every change shows
//! in review. After a deliberate change:
//!
//!     GATEHOUSE_BLESS=1 cargo test -p sandbox --test seccomp_golden
//!
//! The listings are of x86_64 (the rules differ a little per architecture, see profiles.rs);
//! elsewhere the test only checks that every filter renders.

#![cfg(target_os = "linux")]

use sandbox::linux::seccomp::listing;
use std::path::{Path, PathBuf};

const REGENERATE: &str = "GATEHOUSE_BLESS=1 cargo test -p sandbox --test seccomp_golden";

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/seccomp")
}

#[test]
fn seccomp_golden() {
    let bless = std::env::var_os("GATEHOUSE_BLESS").is_some_and(|v| v == "1");
    let listed = listing::all();
    let mut failures = Vec::new();
    for l in &listed {
        let text = listing::render(l);
        // A syscall without a name would be listed as a bare number, which a reviewer cannot
        // check at a glance.
        for line in text.lines().filter(|l| l.starts_with("nr ")) {
            failures.push(format!(
                "{}: `{line}`: add the syscall to sandbox/src/linux/seccomp/names.rs",
                l.file
            ));
        }
        if !cfg!(target_arch = "x86_64") {
            continue;
        }
        let path = dir().join(format!("{}.txt", l.file));
        if bless {
            std::fs::create_dir_all(dir()).unwrap();
            std::fs::write(&path, &text).unwrap();
            continue;
        }
        match std::fs::read_to_string(&path) {
            Ok(committed) if committed == text => {}
            Ok(committed) => failures.push(format!(
                "{} differs from the filter (- committed, + filter):\n{}",
                path.display(),
                diff(&committed, &text)
            )),
            Err(e) => failures.push(format!("{}: {e}", path.display())),
        }
    }
    // A listing whose profile left the list is stale.
    if cfg!(target_arch = "x86_64") {
        for entry in std::fs::read_dir(dir()).unwrap() {
            let name = entry.unwrap().file_name().to_string_lossy().into_owned();
            let Some(stem) = name.strip_suffix(".txt") else {
                continue;
            };
            if !listed.iter().any(|l| l.file == stem) {
                if bless {
                    std::fs::remove_file(dir().join(&name)).unwrap();
                } else {
                    failures.push(format!(
                        "docs/seccomp/{name} lists no filter in sandbox::linux::seccomp::listing::all()"
                    ));
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{}\n\nIf the change is meant, regenerate the listings and commit them:\n    {REGENERATE}",
        failures.join("\n\n")
    );
}

/// A line diff (longest common subsequence): `-` lines only in `old`, `+` only in `new`, with
/// one line of context around each change.
fn diff(old: &str, new: &str) -> String {
    let a: Vec<&str> = old.lines().collect();
    let b: Vec<&str> = new.lines().collect();
    let mut lcs = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            lcs[i][j] = if a[i] == b[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    let mut ops: Vec<(char, &str)> = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < a.len() || j < b.len() {
        if i < a.len() && j < b.len() && a[i] == b[j] {
            ops.push((' ', a[i]));
            i += 1;
            j += 1;
        } else if j < b.len() && (i == a.len() || lcs[i][j + 1] >= lcs[i + 1][j]) {
            ops.push(('+', b[j]));
            j += 1;
        } else {
            ops.push(('-', a[i]));
            i += 1;
        }
    }
    let near_change = |k: usize| {
        ops[k.saturating_sub(1)..(k + 2).min(ops.len())]
            .iter()
            .any(|(c, _)| *c != ' ')
    };
    let mut out = String::new();
    let mut skipped = false;
    for (k, (c, line)) in ops.iter().enumerate() {
        if near_change(k) {
            if skipped {
                out.push_str("  ...\n");
                skipped = false;
            }
            out.push_str(&format!("{c} {line}\n"));
        } else {
            skipped = true;
        }
    }
    out
}
