//! The broker process: one per user (or per `--data-dir`), held by a lock file.

use crate::{fronts, helpers, BrokerOptions, Ctx};
use gatehouse_client::{running_broker_pid, Dirs};
use ipc_schema::Role;
use std::io::{Seek, Write};
use std::os::fd::AsRawFd;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// The spawner's binary, beside the helpers.
pub const SPAWNER_BINARY: &str = "gatehouse-spawner";

/// Runs the broker until SIGINT or SIGTERM.
pub fn run(dirs: Dirs, opts: Arc<BrokerOptions>) -> Result<(), String> {
    dirs.ensure().map_err(|e| e.to_string())?;
    let lock = dirs.open_lock_file()?;
    let mut lock = match nix::fcntl::Flock::lock(lock, nix::fcntl::FlockArg::LockExclusiveNonblock)
    {
        Ok(l) => l,
        Err((_, _)) => {
            let pid = running_broker_pid(&dirs.lock_file())
                .map(|p| format!(" (pid {p})"))
                .unwrap_or_default();
            return Err(format!(
                "a broker already runs for {}{pid}",
                dirs.runtime.display()
            ));
        }
    };
    lock.set_len(0).map_err(|e| e.to_string())?;
    lock.rewind().map_err(|e| e.to_string())?;
    write!(lock, "{}", std::process::id()).map_err(|e| e.to_string())?;
    let _ = lock.as_raw_fd();

    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("GATEHOUSE_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();

    // What needs rights happens now, before the lockdown: the spawner (the one process that
    // keeps the rights helpers need at start, and dies with this thread: PR_SET_PDEATHSIG), the
    // three front sockets (bound, not yet listening: a client's connect is refused until the audit
    // log is open, as before), and what `doctor` reports of the kernel.
    let spawner = spawner::link::Spawner::start(
        &opts.helper_dir.join(SPAWNER_BINARY),
        &opts.helper_dir,
        opts.allow_degraded,
    )
    .map_err(|e| format!("cannot start {SPAWNER_BINARY}: {e}"))?;
    let ui = fronts::prepare(&dirs.ui_socket())
        .map_err(|e| format!("{}: {e}", dirs.ui_socket().display()))?;
    let gw = fronts::prepare(&dirs.gateway_socket())
        .map_err(|e| format!("{}: {e}", dirs.gateway_socket().display()))?;
    let notify = fronts::prepare(&dirs.notify_socket())
        .map_err(|e| format!("{}: {e}", dirs.notify_socket().display()))?;
    let kernel = crate::KernelFacts::read();
    let probed_before = opts
        .test_probe
        .as_ref()
        .map(|_| crate::test_hooks::probe(&dirs, "before"));
    // Third-party servers keep their state in the agent-state directory, which a broker of a
    // user (not root: see tools/servers.rs) creates their directories in.
    let mut read_write = vec![dirs.config.clone(), dirs.data.clone(), dirs.runtime.clone()];
    if !nix::unistd::geteuid().is_root() {
        use std::os::unix::fs::DirBuilderExt;
        let agents = dirs.agents();
        match std::fs::DirBuilder::new()
            .mode(0o700)
            .recursive(true)
            .create(&agents)
        {
            Ok(()) => read_write.push(agents),
            Err(e) => tracing::warn!(
                "{}: {e}; third-party servers cannot start",
                agents.display()
            ),
        }
    }
    let broker_lockdown = sandbox::lockdown_router(
        &sandbox::FsProfile {
            read_only: Vec::new(),
            read_write,
        },
        opts.allow_degraded,
    )
    .map_err(|e| format!("refusing to start: the broker's own lockdown failed: {e}"))?;
    if let (Some(what), Some(before)) = (&opts.test_probe, probed_before) {
        return crate::test_hooks::after_lockdown(what, &dirs, before);
    }

    // One thread: Landlock and seccomp bind it and every thread it starts later.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let local = tokio::task::LocalSet::new();
    let result = local.block_on(&rt, async move {
        let spawner_lockdown = spawner.lockdown().clone();
        let (spawner, spawner_gone) = spawner
            .serve()
            .map_err(|e| format!("the spawner channel: {e}"))?;
        let spawner_gone = tokio::task::spawn_local(spawner_gone);
        // Policy, audit log and ledger first: a log that fails its check refuses the start.
        let gate = crate::gate::Gate::open(&dirs, &opts.gate)?;
        helpers::set_extra_args(&opts, Role::Fs, gate.fs_helper_args());
        // The broker's own secrets-helper serves the broker's table: no Set, Delete or List.
        let mut secrets_args = crate::secrets_link::helper_args(&dirs)
            .map_err(|e| format!("refusing to start: {e}"))?;
        secrets_args.extend(["--channel".into(), "broker".into()]);
        helpers::set_extra_args(&opts, Role::Secrets, secrets_args);
        // Commands never see gatehouse's own config, data, runtime and agent-state dirs, even
        // when a grant holds them.
        helpers::set_extra_args(
            &opts,
            Role::Exec,
            dirs.own()
                .into_iter()
                .flat_map(|d| ["--protect".into(), d.into_os_string()])
                .collect(),
        );
        // The audit key lives in the secrets-helper: the log opens once it is up.
        let helpers = helpers::Helpers::start(opts.clone(), spawner.clone());
        let secrets = helpers.slot(Role::Secrets).ok_or("no secrets-helper slot")?.clone();
        let uncertain = match gate.open_audit(&secrets).await {
            Ok(u) => u,
            Err(e) => {
                opts.shutting_down.store(true, Ordering::SeqCst);
                helpers.kill_all();
                helpers.wait_all_down(Duration::from_secs(5)).await;
                return Err(e);
            }
        };
        for c in &uncertain {
            tracing::warn!(ledger = c.id, tool = %c.tool, target = %c.target, "uncertain: {}", c.reason);
        }
        // Handlers first: once the sockets exist, a client may answer with SIGTERM at once
        // (`gatehouse stop`), and it must get the orderly stop, not the default death.
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .map_err(|e| e.to_string())?;
        let mut int = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
            .map_err(|e| e.to_string())?;
        let ui = fronts::listen(ui).map_err(|e| format!("{}: {e}", dirs.ui_socket().display()))?;
        let gw = fronts::listen(gw)
            .map_err(|e| format!("{}: {e}", dirs.gateway_socket().display()))?;
        let notify = fronts::listen(notify)
            .map_err(|e| format!("{}: {e}", dirs.notify_socket().display()))?;
        let ctx = Rc::new(Ctx {
            opts: opts.clone(),
            helpers: helpers.clone(),
            broker_lockdown,
            spawner,
            spawner_lockdown,
            kernel,
            dirs: dirs.clone(),
            gate,
            servers: Default::default(),
        });
        tokio::task::spawn_local(fronts::accept_loop(ctx.clone(), ui, Role::Ui));
        tokio::task::spawn_local(fronts::accept_loop(ctx.clone(), gw, Role::Gateway));
        tokio::task::spawn_local(fronts::accept_loop(ctx.clone(), notify, Role::Notifier));
        tracing::info!(pid = std::process::id(), "broker serving {}", dirs.runtime.display());

        let mut spawner_gone = spawner_gone;
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
            why = &mut spawner_gone => {
                // Without the spawner no helper can be restarted: stop, in order, and say why.
                let why = why.unwrap_or_else(|e| e.to_string());
                tracing::error!("the spawner is gone ({why}); shutting down");
            }
        }
        tracing::info!("shutting down");
        opts.shutting_down.store(true, Ordering::SeqCst);
        // The last rows are sealed while the secrets-helper still runs.
        ctx.gate.shutdown(&helpers).await;
        helpers.kill_all();
        // Give the supervisors a moment to reap their helpers, so none is left behind.
        helpers.wait_all_down(Duration::from_secs(5)).await;
        let _ = std::fs::remove_file(dirs.ui_socket());
        let _ = std::fs::remove_file(dirs.gateway_socket());
        let _ = std::fs::remove_file(dirs.notify_socket());
        Ok::<(), String>(())
    });
    drop(lock);
    result
}
