//! servers-helper: lock down, say hello, serve.
//!
//! The one process that reads what third-party MCP servers write. The broker passes it each
//! server's stdio socket ([`ipc_schema::servers::ServersRequest::Attach`]); it speaks JSON-RPC
//! on it and answers the broker in typed, bounded values. Locked down like a gateway: no files,
//! no network, no exec, no new sockets, one thread. See docs/servers-helper.md.

#![forbid(unsafe_code)]

#[cfg(target_os = "linux")]
mod conn;
#[cfg(target_os = "linux")]
mod mcp;
#[cfg(target_os = "linux")]
mod serve;

#[cfg(target_os = "linux")]
use ipc_schema::helper::{fatal, HelperChannel};
#[cfg(target_os = "linux")]
use ipc_schema::Role;
#[cfg(target_os = "linux")]
use sandbox::helper_args::{lock_down, HelperArgs};
#[cfg(target_os = "linux")]
use std::process::ExitCode;

#[cfg(target_os = "linux")]
fn main() -> ExitCode {
    let args = HelperArgs::from_env();
    let channel = sandbox::process::take_inherited_channel()
        .unwrap_or_else(|e| fatal(Role::Servers, format!("no broker channel: {e}")));

    // Lock down.
    let report = lock_down(&args, &sandbox::Profile::Servers)
        .unwrap_or_else(|e| fatal(Role::Servers, format!("lockdown failed: {e}")));

    // Hello.
    let chan = HelperChannel::hello(Role::Servers, channel, report);

    // Serve what the broker may ask (ipc_schema::route::BROKER_TO_SERVERS).
    serve::serve(chan);
    ExitCode::SUCCESS
}

/// Started by the spawner with its one inherited channel and confined by Landlock and seccomp: Linux
/// only so far.
#[cfg(not(target_os = "linux"))]
fn main() -> std::process::ExitCode {
    use ipc_schema::platform::{refuse, Missing};
    refuse("servers-helper", &[Missing::HelperProcesses])
}
