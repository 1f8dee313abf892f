//! Shared plumbing for the integration tests: start the real binaries and talk to them.
//!
//! The binaries must be built first (`cargo build --workspace --all-features`, which the README's
//! test command does); tests find them in the target directory beside the test executable.
//! Finding them works on every OS (the Windows helpers' tests under Wine use it: there
//! `CARGO_BIN_EXE_*` is the build host's path, which Wine's Windows paths do not take); the rest
//! drives the Linux binaries ([`linux`]).

#![forbid(unsafe_code)]

use std::path::PathBuf;

/// The directory holding the workspace binaries (`target/debug` for `cargo test`).
pub fn bin_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    let mut dir = exe.parent().expect("exe dir").to_path_buf();
    if dir.ends_with("deps") {
        dir.pop();
    }
    dir
}

/// The directory holding the release binaries: `GATEHOUSE_RELEASE_DIR` if set (the test command
/// points it at the README's demo build on a fresh clone, what a user gets), else
/// `target/release` beside [`bin_dir`]. Fails the test clearly if `gatehouse` is not there.
pub fn release_dir() -> PathBuf {
    let dir = std::env::var_os("GATEHOUSE_RELEASE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| bin_dir().parent().expect("target dir").join("release"));
    let gatehouse = dir.join(format!("gatehouse{}", std::env::consts::EXE_SUFFIX));
    assert!(
        gatehouse.exists(),
        "{} is missing: build it (scripts/demo.sh, or cargo build --release), or name the \
         directory in GATEHOUSE_RELEASE_DIR",
        gatehouse.display()
    );
    dir
}

/// The path of a workspace binary (`.exe` added on Windows), failing the test clearly if it was
/// not built.
pub fn bin(name: &str) -> PathBuf {
    let p = bin_dir().join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    assert!(
        p.exists(),
        "{} is missing: build the workspace first (cargo build --workspace --all-features)",
        p.display()
    );
    p
}

// The binaries the rest starts are Linux-only so far (ipc_schema::platform::Missing).
#[cfg(target_os = "linux")]
pub mod linux;
#[cfg(target_os = "linux")]
pub use linux::*;

// The Windows helpers' hello, checked as the spawner and broker check it.
#[cfg(windows)]
pub mod windows;
