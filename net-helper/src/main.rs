//! net-helper: read the resolver configuration, lock down, say hello, serve.
//!
//! On Windows the spawner starts it confined (`sandbox::windows::spawn_helper` with an
//! overlapped channel); it checks its own token and job, and serves the same requests but the
//! egress proxy's (docs/net-helper.md).

#![forbid(unsafe_code)]

#[cfg(any(unix, windows))]
fn main() -> std::process::ExitCode {
    use ipc_schema::helper::{fatal, HelperChannel};
    use ipc_schema::route::BROKER_TO_NET;
    use ipc_schema::Role;
    use net_helper::config::{Config, OPTIONS};
    use net_helper::service::NetService;
    use net_helper::{resolve::NetResolver, tls, NetContext};
    use std::process::ExitCode;
    use std::sync::Arc;

    let args = sandbox::helper_args::HelperArgs::from_env_with(OPTIONS);
    // Everything read from the system is read now: after lockdown there is no filesystem.
    let cfg = Config::from_args(&args).unwrap_or_else(|e| fatal(Role::Net, e));
    let channel = sandbox::helper_args::take_channel(&args)
        .unwrap_or_else(|e| fatal(Role::Net, format!("no broker channel: {e}")));

    // Lock down.
    let report = sandbox::helper_args::lock_down(&args, &sandbox::Profile::Net)
        .unwrap_or_else(|e| fatal(Role::Net, format!("lockdown failed: {e}")));

    // Hello.
    let chan = HelperChannel::hello(Role::Net, channel, report);

    // Serve what the broker may ask (ipc_schema::route::BROKER_TO_NET), each request in a task
    // of its own. The runtime's threads start after lockdown, so every one runs under the filter.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .max_blocking_threads(1)
        .enable_all()
        .build()
        .unwrap_or_else(|e| fatal(Role::Net, format!("cannot start the runtime: {e}")));
    rt.block_on(async move {
        let ctx = Arc::new(NetContext {
            resolver: NetResolver::new(&cfg.nameservers, cfg.dns_timeout),
            policy: cfg.policy.clone(),
            tls: tls::client_config(&cfg.extra_roots),
        });
        #[cfg(unix)]
        let (reader, replies, writer) = chan.into_async(&BROKER_TO_NET);
        #[cfg(windows)]
        let (reader, replies, writer) =
            chan.into_async(&BROKER_TO_NET, sandbox::windows::async_pipe);
        let writing = tokio::spawn(writer.run());
        let service = NetService::new(ctx, cfg.max_tunnels);
        service.serve(reader, replies).await;
        // The broker closed the channel: stop, tunnels and all.
        writing.abort();
    });
    ExitCode::SUCCESS
}

/// Started by the spawner with its one inherited channel and confined by Landlock and seccomp
/// (on macOS by its Seatbelt profile, on Windows by the applier). Not on other systems.
#[cfg(not(any(unix, windows)))]
fn main() -> std::process::ExitCode {
    use ipc_schema::platform::{refuse, Missing};
    refuse("net-helper", &[Missing::HelperProcesses])
}
