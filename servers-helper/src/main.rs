//! servers-helper: lock down, say hello, serve.
//!
//! The one process that reads what third-party MCP servers write. The broker passes it each
//! server's stdio socket ([`ipc_schema::servers::ServersRequest::Attach`]; on Windows a pipe
//! the broker duplicates into it); it speaks JSON-RPC on it and answers the broker in typed,
//! bounded values. Locked down like a gateway: no files, no network, no exec, no new sockets.
//! On Linux and macOS one thread and `poll(2)`; on Windows, where the spawner starts it confined
//! (`sandbox::windows::spawn_helper`), one tokio thread. See docs/servers-helper.md.

#![forbid(unsafe_code)]

#[cfg(any(unix, windows))]
mod conn;
#[cfg(any(unix, windows))]
mod mcp;
#[cfg(any(unix, windows))]
mod requests;
#[cfg(unix)]
mod serve;
#[cfg(windows)]
mod serve_windows;

#[cfg(any(unix, windows))]
fn main() -> std::process::ExitCode {
    use ipc_schema::helper::{fatal, HelperChannel};
    use ipc_schema::Role;
    use sandbox::helper_args::{lock_down, take_channel, HelperArgs};

    let args = HelperArgs::from_env();
    let channel = take_channel(&args)
        .unwrap_or_else(|e| fatal(Role::Servers, format!("no broker channel: {e}")));

    // Lock down.
    let report = lock_down(&args, &sandbox::Profile::Servers)
        .unwrap_or_else(|e| fatal(Role::Servers, format!("lockdown failed: {e}")));

    // Hello.
    let chan = HelperChannel::hello(Role::Servers, channel, report);

    // Serve what the broker may ask (ipc_schema::route::BROKER_TO_SERVERS).
    #[cfg(unix)]
    serve::serve(chan);
    #[cfg(windows)]
    serve_windows::serve(chan);
    std::process::ExitCode::SUCCESS
}

/// Started by the spawner with its one inherited channel and confined by Landlock and seccomp
/// (on macOS by its Seatbelt profile, on Windows by the applier). Not on other systems.
#[cfg(not(any(unix, windows)))]
fn main() -> std::process::ExitCode {
    use ipc_schema::platform::{refuse, Missing};
    refuse("servers-helper", &[Missing::HelperProcesses])
}
