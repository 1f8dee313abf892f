//! Lockdown tests. Every probe runs in a fresh process: this binary re-executed with GH_PROBE
//! set (see `probe`), so that a kill, a Landlock domain or a seccomp filter never touches the
//! runner. Each negative test asserts the exact outcome (killed by SIGSYS, or exactly the
//! errno the profile names) and stands beside a positive control showing the same action
//! succeeds in a process that did not lock down (see `cases`).
//!
//! Run as root and as an unprivileged user: root passes checks a user would fail.

#[cfg(target_os = "linux")]
mod cases;
#[cfg(target_os = "linux")]
mod probe;
#[cfg(target_os = "linux")]
mod runner;

#[cfg(target_os = "linux")]
fn main() -> std::process::ExitCode {
    // Probe mode first, before anything could start a thread.
    if let Some(spec) = std::env::var_os(probe::ENV) {
        return probe::run(spec);
    }
    runner::run(&cases::all())
}

#[cfg(not(target_os = "linux"))]
fn main() {
    println!("the lockdown tests exercise Linux mechanisms; nothing to run on this platform");
}
