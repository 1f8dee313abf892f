//! net-helper: read the resolver configuration, lock down, say hello, serve.

#![forbid(unsafe_code)]

use ipc_schema::status::Hello;
use ipc_schema::Role;
use net_helper::channel::{split, Replies};
use net_helper::config::{Config, OPTIONS};
use net_helper::service::NetService;
use net_helper::{resolve::NetResolver, tls, NetContext};
use std::process::ExitCode;
use std::sync::Arc;

fn main() -> ExitCode {
    let args = sandbox::helper_args::HelperArgs::from_env_with(OPTIONS);
    // Everything read from the system is read now: after lockdown there is no filesystem.
    let cfg = match Config::from_args(&args) {
        Ok(c) => c,
        Err(e) => return fatal(&e),
    };
    let channel = match sandbox::process::take_inherited_channel() {
        Ok(c) => c,
        Err(e) => return fatal(&format!("no broker channel: {e}")),
    };
    let report = match sandbox::helper_args::lock_down(&args, &sandbox::Profile::Net) {
        Ok(r) => r,
        Err(e) => return fatal(&format!("lockdown failed: {e}")),
    };
    // The runtime's threads start after lockdown, so every one of them runs under the filter.
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .max_blocking_threads(1)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return fatal(&format!("cannot start the runtime: {e}")),
    };
    let result = rt.block_on(async move {
        let ctx = Arc::new(NetContext {
            resolver: NetResolver::new(&cfg.nameservers, cfg.dns_timeout),
            policy: cfg.policy.clone(),
            tls: tls::client_config(&cfg.extra_roots),
        });
        let (reader, mut writer) = split(channel).map_err(|e| e.to_string())?;
        let hello = Hello {
            role: Role::Net,
            pid: std::process::id(),
            lockdown: report,
        };
        writer.hello(hello).await.map_err(|e| e.to_string())?;
        let (replies, rx) = Replies::new();
        let service = NetService::new(ctx, cfg.max_tunnels);
        let writing = tokio::spawn(writer.run(rx));
        let served = service.serve(reader, replies).await;
        // The broker closed the channel (or broke the protocol): stop, tunnels and all.
        writing.abort();
        served.map_err(|e| e.to_string())
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fatal(&e),
    }
}

fn fatal(msg: &str) -> ExitCode {
    eprintln!("net-helper: {msg}");
    ExitCode::from(70)
}
