//! The broker process: one per user (or per `--data-dir`), held by a lock file.

use crate::{fronts, helpers, BrokerOptions, Ctx, KernelFacts};
use gatehouse_client::{running_broker_pid, Dirs};
use ipc_schema::status::LockdownReport;
use ipc_schema::Role;
use std::io::{Seek, Write};
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// The spawner's binary, beside the helpers.
pub const SPAWNER_BINARY: &str = "gatehouse-spawner";

/// The spawner's binary file in `dir` (`.exe` on Windows).
pub fn spawner_path(dir: &std::path::Path) -> std::path::PathBuf {
    dir.join(format!("{SPAWNER_BINARY}{}", std::env::consts::EXE_SUFFIX))
}

/// What was made before the broker's own lockdown: the spawner, the three front endpoints
/// (ui, gateway, notify), what `doctor` reports of the system, and the lockdown's report.
struct Prepared {
    spawner: spawner::link::Spawner,
    fronts: [fronts::Prepared; 3],
    kernel: KernelFacts,
    lockdown: LockdownReport,
}

/// Runs the broker until it is told to stop (SIGINT or SIGTERM; Ctrl-C or Ctrl-Break on
/// Windows).
pub fn run(dirs: Dirs, opts: Arc<BrokerOptions>) -> Result<(), String> {
    dirs.ensure().map_err(|e| e.to_string())?;
    // One broker per instance: the lock is held (std's file lock: flock on Unix, LockFileEx on
    // Windows) until this process ends.
    let mut lock = dirs.open_lock_file()?;
    match lock.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            let pid = running_broker_pid(&dirs.lock_file())
                .map(|p| format!(" (pid {p})"))
                .unwrap_or_default();
            return Err(format!(
                "a broker already runs for {}{pid}",
                dirs.runtime.display()
            ));
        }
        Err(std::fs::TryLockError::Error(e)) => {
            return Err(format!("{}: {e}", dirs.lock_file().display()))
        }
    }
    lock.set_len(0).map_err(|e| e.to_string())?;
    lock.rewind().map_err(|e| e.to_string())?;
    write!(lock, "{}", std::process::id()).map_err(|e| e.to_string())?;
    // Windows lets no other process read a locked file: the pid goes beside it as well.
    #[cfg(windows)]
    std::fs::write(dirs.pid_file(), std::process::id().to_string())
        .map_err(|e| format!("{}: {e}", dirs.pid_file().display()))?;

    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("GATEHOUSE_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let result = run_locked(dirs, opts);
    drop(lock);
    result
}

/// Linux: what needs rights happens first, then the lockdown, then the runtime.
#[cfg(unix)]
fn run_locked(dirs: Dirs, opts: Arc<BrokerOptions>) -> Result<(), String> {
    // What needs rights happens now, before the lockdown: the spawner (the one process that
    // keeps the rights helpers need at start, and dies with this thread: PR_SET_PDEATHSIG), the
    // three front sockets (bound, not yet listening: a client's connect is refused until the audit
    // log is open, as before), and what `doctor` reports of the kernel.
    let spawner = spawner::link::Spawner::start(
        &spawner_path(&opts.helper_dir),
        &opts.helper_dir,
        opts.allow_degraded,
    )
    .map_err(|e| format!("cannot start {SPAWNER_BINARY}: {e}"))?;
    let fronts = prepare_fronts(&dirs)?;
    let kernel = KernelFacts::read();
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
    let lockdown = sandbox::lockdown_router(
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
    let prepared = Prepared {
        spawner,
        fronts,
        kernel,
        lockdown,
    };
    local.block_on(&rt, serve(dirs, opts, prepared))
}

/// Windows: the spawner is started on the runtime (its channel is an overlapped pipe), before
/// the broker's job, which admits no new process, is applied.
#[cfg(windows)]
fn run_locked(dirs: Dirs, opts: Arc<BrokerOptions>) -> Result<(), String> {
    if opts.test_probe.is_some() {
        return Err("--test-probe-lockdown probes the Linux router only".into());
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, async move {
        let spawner = spawner::link::Spawner::start(
            &spawner_path(&opts.helper_dir),
            &opts.helper_dir,
            opts.allow_degraded,
        )
        .await
        .map_err(|e| format!("cannot start {SPAWNER_BINARY}: {e}"))?;
        let fronts = prepare_fronts(&dirs)?;
        let lockdown = sandbox::harden_broker(opts.allow_degraded)
            .map_err(|e| format!("refusing to start: the broker's own lockdown failed: {e}"))?;
        let prepared = Prepared {
            spawner,
            fronts,
            kernel: KernelFacts::read(),
            lockdown,
        };
        serve(dirs, opts, prepared).await
    })
}

fn prepare_fronts(dirs: &Dirs) -> Result<[fronts::Prepared; 3], String> {
    let one = |path: std::path::PathBuf| {
        fronts::prepare(&path).map_err(|e| format!("{}: {e}", path.display()))
    };
    Ok([
        one(dirs.ui_socket())?,
        one(dirs.gateway_socket())?,
        one(dirs.notify_socket())?,
    ])
}

/// Waits for the signal to stop: SIGTERM (`gatehouse stop`) or SIGINT.
#[cfg(unix)]
struct StopSignals(tokio::signal::unix::Signal, tokio::signal::unix::Signal);

#[cfg(unix)]
impl StopSignals {
    fn install() -> Result<StopSignals, String> {
        use tokio::signal::unix::{signal, SignalKind};
        let term = signal(SignalKind::terminate()).map_err(|e| e.to_string())?;
        let int = signal(SignalKind::interrupt()).map_err(|e| e.to_string())?;
        Ok(StopSignals(term, int))
    }

    async fn recv(&mut self) {
        tokio::select! {
            _ = self.0.recv() => {}
            _ = self.1.recv() => {}
        }
    }
}

/// Waits for the signal to stop: Ctrl-C or Ctrl-Break (what `GenerateConsoleCtrlEvent` sends
/// a process group), or the console closing.
#[cfg(windows)]
struct StopSignals(
    tokio::signal::windows::CtrlC,
    tokio::signal::windows::CtrlBreak,
    tokio::signal::windows::CtrlClose,
);

#[cfg(windows)]
impl StopSignals {
    fn install() -> Result<StopSignals, String> {
        use tokio::signal::windows::{ctrl_break, ctrl_c, ctrl_close};
        let e = |e: std::io::Error| e.to_string();
        Ok(StopSignals(
            ctrl_c().map_err(e)?,
            ctrl_break().map_err(e)?,
            ctrl_close().map_err(e)?,
        ))
    }

    async fn recv(&mut self) {
        tokio::select! {
            _ = self.0.recv() => {}
            _ = self.1.recv() => {}
            _ = self.2.recv() => {}
        }
    }
}

/// The broker proper, after its lockdown: helpers, the audit log, the fronts, until stopped.
async fn serve(dirs: Dirs, opts: Arc<BrokerOptions>, prepared: Prepared) -> Result<(), String> {
    let Prepared {
        spawner,
        fronts: [ui, gw, notify],
        kernel,
        lockdown: broker_lockdown,
    } = prepared;
    let spawner_lockdown = spawner.lockdown().clone();
    let (spawner, spawner_gone) = spawner
        .serve()
        .map_err(|e| format!("the spawner channel: {e}"))?;
    let spawner_gone = tokio::task::spawn_local(spawner_gone);
    // Policy, audit log and ledger first: a log that fails its check refuses the start.
    let gate = crate::gate::Gate::open(&dirs, &opts.gate)?;
    helpers::set_extra_args(&opts, Role::Fs, gate.fs_helper_args());
    #[cfg(windows)]
    if let Err(e) = gate.grant_fs_aces() {
        // The helper then cannot open those roots, says so, and file tools fail: closed.
        tracing::warn!("the fs-helper's grant roots: {e}");
    }
    // The broker's own secrets-helper serves the broker's table: no Set, Delete or List.
    let mut secrets_args =
        crate::secrets_link::helper_args(&dirs).map_err(|e| format!("refusing to start: {e}"))?;
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
    let secrets = helpers
        .slot(Role::Secrets)
        .ok_or("no secrets-helper slot")?
        .clone();
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
    let mut stop = StopSignals::install()?;
    let ui = fronts::listen(ui).map_err(|e| format!("{}: {e}", dirs.ui_socket().display()))?;
    let gw = fronts::listen(gw).map_err(|e| format!("{}: {e}", dirs.gateway_socket().display()))?;
    let notify =
        fronts::listen(notify).map_err(|e| format!("{}: {e}", dirs.notify_socket().display()))?;
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
        stop_requested: tokio::sync::Notify::new(),
    });
    tokio::task::spawn_local(fronts::accept_loop(ctx.clone(), ui, Role::Ui));
    tokio::task::spawn_local(fronts::accept_loop(ctx.clone(), gw, Role::Gateway));
    tokio::task::spawn_local(fronts::accept_loop(ctx.clone(), notify, Role::Notifier));
    tracing::info!(
        pid = std::process::id(),
        "broker serving {}",
        dirs.runtime.display()
    );

    let mut spawner_gone = spawner_gone;
    tokio::select! {
        () = stop.recv() => {}
        () = ctx.stop_requested.notified() => tracing::info!("the console asked the broker to stop"),
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
    #[cfg(unix)]
    for socket in [
        dirs.ui_socket(),
        dirs.gateway_socket(),
        dirs.notify_socket(),
    ] {
        let _ = std::fs::remove_file(socket);
    }
    Ok(())
}
