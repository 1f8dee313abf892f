//! exec-helper: lock down, say hello, serve.
//!
//! Each command runs in a sandbox of its own (`sandbox::linux::command`): new user, mount, pid,
//! network, IPC and UTS namespaces, a filesystem view of its grants, Landlock and a seccomp
//! denylist. This process only starts sandboxes (one small `clone` each), watches them, and
//! reports their output and end to the broker. See docs/exec-helper.md. On Windows the same
//! three steps live in `windows.rs` (the restricted-token tier, docs/windows.md).

#![forbid(unsafe_code)]

#[cfg(target_os = "linux")]
mod config;
#[cfg(target_os = "linux")]
mod serve;
#[cfg(target_os = "linux")]
mod start;

#[cfg(target_os = "linux")]
fn main() -> std::process::ExitCode {
    use ipc_schema::helper::{fatal, HelperChannel};
    use ipc_schema::tier::ConfinementTier;
    use ipc_schema::Role;
    use sandbox::helper_args::{lock_down, HelperArgs};
    use std::process::ExitCode;

    let args = HelperArgs::from_env_with(config::OPTIONS);
    let channel = sandbox::process::take_inherited_channel()
        .unwrap_or_else(|e| fatal(Role::Exec, format!("no broker channel: {e}")));
    // Before the lockdown: becoming an unprivileged user needs the root we may still have.
    let config = config::Config::from_args(&args).unwrap_or_else(|e| fatal(Role::Exec, e));

    // Lock down.
    let report = lock_down(&args, &sandbox::Profile::Exec)
        .unwrap_or_else(|e| fatal(Role::Exec, format!("lockdown failed: {e}")));
    // Where the machine refuses user namespaces, every command runs in the Landlock tier (the
    // report says so and why; the broker shows it and may refuse it by policy).
    let mut config = config;
    config.tier = report.exec_tier.unwrap_or(ConfinementTier::Namespaces);

    // Hello.
    let chan = HelperChannel::hello(Role::Exec, channel, report);

    // Serve what the broker may ask (ipc_schema::route::BROKER_TO_EXEC).
    serve::serve(chan, config);
    ExitCode::SUCCESS
}

#[cfg(target_os = "macos")]
mod macos;
/// Off Linux: the same three steps, served with threads (`threads.rs`), each command started
/// by its OS's launcher: the restricted-token tier on Windows, Seatbelt on macOS.
#[cfg(any(windows, target_os = "macos"))]
mod threads;
#[cfg(windows)]
mod windows;

#[cfg(windows)]
fn main() -> std::process::ExitCode {
    windows::main()
}

#[cfg(target_os = "macos")]
fn main() -> std::process::ExitCode {
    macos::main()
}

/// Other systems: no command sandbox is built.
#[cfg(not(any(target_os = "linux", windows, target_os = "macos")))]
fn main() -> std::process::ExitCode {
    use ipc_schema::platform::{refuse, Missing};
    refuse(
        "exec-helper",
        &[Missing::HelperProcesses, Missing::CommandSandbox],
    )
}
