//! `gatehouse doctor`, the broker's side: what each process really enforces on this kernel
//! (the command line renders it: cli/src/doctor.rs).

use crate::Ctx;
#[cfg(target_os = "linux")]
use ipc_schema::status::LandlockStatus;
use ipc_schema::status::{DoctorReport, ProcessReport, ProcessState};

/// Builds the report from the broker's own state, the spawner's, and the helpers' verified
/// hellos. The kernel's view of the router and the spawner comes from the spawner (the router
/// reads no /proc).
pub async fn report(ctx: &Ctx) -> DoctorReport {
    let own = std::process::id();
    let spawner = ctx.spawner.pid();
    let mut processes = vec![
        ProcessReport {
            name: "broker".into(),
            pid: own,
            state: ProcessState::Ready,
            restarts: 0,
            lockdown: Some(ctx.broker_lockdown.clone()),
            kernel: kernel_view(ctx, own).await,
        },
        ProcessReport {
            name: "spawner".into(),
            pid: spawner,
            state: ProcessState::Ready,
            restarts: 0,
            lockdown: Some(ctx.spawner_lockdown.clone()),
            kernel: kernel_view(ctx, spawner).await,
        },
    ];
    processes.extend(ctx.helpers.reports());
    let mut problems = Vec::new();
    let mut notes = vec![
        "ui and gateway fronts lock themselves down when they start (ui profile, gateway profile) and report it on their own: the console in its health pane, `gatehouse mcp` on stderr".to_string(),
    ];
    router_and_spawner(ctx, &processes, &mut problems, &mut notes);
    for p in processes.iter().skip(2) {
        match &p.state {
            ProcessState::Ready => {}
            ProcessState::Starting => problems.push(format!("{}: still starting", p.name)),
            // A helper this OS does not run is a fact of the build, said as such.
            ProcessState::Refused { reason } if not_built_here(&p.name) => {
                notes.push(format!("{}: {reason}", p.name))
            }
            ProcessState::Refused { reason } => {
                problems.push(format!("{}: refused: {reason}", p.name))
            }
        }
        if let Some(l) = &p.lockdown {
            #[cfg(target_os = "linux")]
            if l.landlock != LandlockStatus::FullyEnforced {
                let line = format!(
                    "{}: Landlock {:?} (kernel ABI {}, profile needs {})",
                    p.name, l.landlock, l.landlock_abi, l.landlock_min_abi
                );
                if ctx.opts.allow_degraded {
                    notes.push(format!("{line}, allowed by --allow-degraded"));
                } else {
                    problems.push(line);
                }
            }
            for d in &l.degraded {
                notes.push(format!("{}: degraded: {d}", p.name));
            }
            // Windows: what the helper found when it tried the network at lockdown (the WFP
            // filters of `gatehouse setup network-filters`); a try not refused is also in its
            // degraded list above.
            if let Some(ipc_schema::status::OutboundProbe::Refused) =
                l.windows.as_deref().and_then(|w| w.outbound.as_ref())
            {
                notes.push(format!(
                    "{}: outbound network refused (its own tries to listen and connect failed with WSAEACCES)",
                    p.name
                ));
            }
        }
        if let Some(k) = &p.kernel {
            if k.seccomp != 2 {
                problems.push(format!(
                    "{}: Seccomp {} (filter required)",
                    p.name, k.seccomp
                ));
            }
            if !k.no_new_privs {
                problems.push(format!("{}: NoNewPrivs 0", p.name));
            }
            if k.cap_eff != 0 {
                problems.push(format!("{}: capabilities held ({:x})", p.name, k.cap_eff));
            }
        }
    }
    notes.extend(crate::tools::servers::doctor_lines(ctx));
    // Each session's mode: a full-access or unattended session answers Asks without the human.
    for s in ctx.gate.sessions.borrow().all() {
        let s = s.borrow();
        notes.push(format!(
            "session {} (profile {}, {}): mode {}",
            s.id,
            s.profile,
            if s.connected { "connected" } else { "detached" },
            s.mode
        ));
    }
    DoctorReport {
        kernel_release: ctx.kernel.release.clone(),
        landlock_abi: ctx.kernel.landlock_abi,
        allow_degraded: ctx.opts.allow_degraded,
        processes,
        problems,
        notes,
        namespaces: None,
        exec_tier: None,
        not_held: Vec::new(),
    }
}

/// Asks the fs-helper how it resolves paths and notes it: the openat2 fallback is weaker
/// (a walk in user space, each step still refusing links) and must be visible.
pub async fn add_fs_status(ctx: &Ctx, report: &mut DoctorReport) {
    use ipc_schema::fs::{FsReply, FsRequest, Resolver};
    use ipc_schema::{Body, Role};
    let Some(slot) = ctx.helpers.slot(Role::Fs) else {
        return;
    };
    if !slot.is_ready() {
        return;
    }
    match slot.call(Body::Fs(FsRequest::Status)).await {
        Ok(Body::FsReply(FsReply::Status(st))) => match st.resolver {
            Resolver::Openat2 => report.notes.push(
                "fs-helper: paths resolved by the kernel with openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)".into(),
            ),
            Resolver::ComponentWalk { reason } => report.notes.push(format!(
                "fs-helper: openat2 unavailable ({reason}); paths resolved by a component walk with O_NOFOLLOW"
            )),
        },
        Ok(other) => report
            .problems
            .push(format!("fs-helper: unexpected status reply {:?}", other.kind())),
        Err(e) => report.problems.push(format!("fs-helper: status: {e}")),
    }
}

/// Asks the secrets-helper which credential store it uses: whether credentials survive a
/// reboot must be visible, and a store it cannot use is a problem.
pub async fn add_secrets_status(ctx: &Ctx, report: &mut DoctorReport) {
    use ipc_schema::secrets::{SecretsReply, SecretsRequest};
    use ipc_schema::{Body, Role};
    let Some(slot) = ctx.helpers.slot(Role::Secrets) else {
        return;
    };
    if !slot.is_ready() {
        return;
    }
    match slot.call(Body::Secrets(SecretsRequest::Status)).await {
        Ok(Body::SecretsReply(SecretsReply::Status(st))) => {
            let line = st.doctor_line();
            if st.problem.is_some() {
                report.problems.push(line);
            } else {
                report.notes.push(line);
            }
        }
        Ok(other) => report.problems.push(format!(
            "secrets-helper: unexpected status reply {:?}",
            other.kind()
        )),
        Err(e) => report.problems.push(format!("secrets-helper: status: {e}")),
    }
}

/// The kernel's view of the broker or the spawner, read by the spawner (Linux). On Windows the
/// spawner observes helpers only; the two processes' own reports are what `doctor` shows.
#[cfg(target_os = "linux")]
async fn kernel_view(ctx: &Ctx, pid: u32) -> Option<ipc_schema::status::ProcStatus> {
    ctx.spawner.status(pid).await.ok()
}
#[cfg(not(target_os = "linux"))]
async fn kernel_view(_ctx: &Ctx, _pid: u32) -> Option<ipc_schema::status::ProcStatus> {
    None
}

/// Whether `name` is a helper this OS does not run (its slot is refused for that reason).
fn not_built_here(name: &str) -> bool {
    ipc_schema::Role::HELPERS
        .iter()
        .any(|r| r.name() == name && crate::helpers::not_built_here(*r).is_some())
}

/// The router's and the spawner's own confinement, against the kernel's view of each (Linux).
#[cfg(target_os = "linux")]
fn router_and_spawner(
    ctx: &Ctx,
    processes: &[ProcessReport],
    problems: &mut Vec<String>,
    notes: &mut Vec<String>,
) {
    notes.push("broker (the router): no capabilities, no_new_privs, not dumpable, Landlock to its own config, data and runtime directories, a seccomp allowlist without exec, fork, socket or ptrace (docs/seccomp/broker.txt)".to_string().to_string());
    notes.push("spawner: starts, kills and reports on helpers for the router and does nothing else; no_new_privs, no other descriptors, empty environment; no Landlock or seccomp of its own, since every helper would inherit them (docs/SECURITY.md)".to_string().to_string());
    let b = &ctx.broker_lockdown;
    if !(b.no_new_privs
        && b.dumpable_off
        && b.core_dumps_off
        && b.capabilities_dropped
        && b.seccomp_filter)
    {
        problems.push("broker: lockdown incomplete".into());
    }
    match &processes[0].kernel {
        None => problems.push("broker: the kernel's view of it could not be read".into()),
        Some(k) => {
            if k.seccomp != 2 {
                problems.push(format!("broker: Seccomp {} (filter required)", k.seccomp));
            }
            if !k.no_new_privs {
                problems.push("broker: NoNewPrivs 0".into());
            }
            if k.cap_eff != 0 || k.cap_prm != 0 {
                problems.push(format!(
                    "broker: capabilities held (CapEff {:x}, CapPrm {:x})",
                    k.cap_eff, k.cap_prm
                ));
            }
        }
    }
    if b.landlock != LandlockStatus::FullyEnforced {
        let line = format!(
            "broker: Landlock {:?} (kernel ABI {}, profile needs {})",
            b.landlock, b.landlock_abi, b.landlock_min_abi
        );
        if ctx.opts.allow_degraded {
            notes.push(format!("{line}, allowed by --allow-degraded"));
        } else {
            problems.push(line);
        }
    }
    let s = &ctx.spawner_lockdown;
    if !(s.no_new_privs && s.dumpable_off && s.stray_fds_closed && s.env_cleared) {
        problems.push("spawner: hardening incomplete".into());
    }
    match &processes[1].kernel {
        None => problems.push("spawner: the kernel's view of it could not be read".into()),
        Some(k) if !k.no_new_privs => problems.push("spawner: NoNewPrivs 0".into()),
        Some(_) => {}
    }
}

/// The router's and the spawner's own hardening on macOS, by their own reports (the spawner's
/// view of a process is asked for helpers only): what did not hold is a problem.
#[cfg(target_os = "macos")]
fn router_and_spawner(
    ctx: &Ctx,
    _processes: &[ProcessReport],
    problems: &mut Vec<String>,
    notes: &mut Vec<String>,
) {
    notes.push("broker (the router): no core dumps, no debugger (PT_DENY_ATTACH), its Seatbelt profile: read and write only its own config, data and runtime directories, no network, no exec (docs/macos.md)".to_string());
    notes.push("spawner: starts, kills and reports on helpers for the router and does nothing else; no other descriptors, empty environment, no debugger; no profile of its own, since every helper would inherit it (docs/macos.md)".to_string());
    let b = &ctx.broker_lockdown;
    if !(b.dumpable_off && b.core_dumps_off) {
        problems.push("broker: lockdown incomplete".into());
    }
    let s = &ctx.spawner_lockdown;
    if !(s.dumpable_off && s.stray_fds_closed && s.env_cleared) {
        problems.push("spawner: hardening incomplete".into());
    }
}

/// The router's and the spawner's own hardening on Windows, by their own reports (the spawner
/// observes helpers, not itself or the router): the router's job and both processes'
/// mitigations; what did not hold is a problem, or a note under `--allow-degraded`.
#[cfg(windows)]
fn router_and_spawner(
    ctx: &Ctx,
    _processes: &[ProcessReport],
    problems: &mut Vec<String>,
    notes: &mut Vec<String>,
) {
    notes.push("broker (the router): a job of its own that admits no second process (it starts none: the spawner does) and dies on an unhandled exception, with UI restrictions; it keeps the user's token, so its files are the user's (docs/windows.md)".to_string());
    notes.push("spawner: starts, ends and observes helpers for the router and does nothing else; it keeps the user's token, which it needs to make each helper's restricted token and job (docs/windows.md)".to_string());
    for (name, report) in [
        ("broker", &ctx.broker_lockdown),
        ("spawner", &ctx.spawner_lockdown),
    ] {
        match report.windows.as_deref() {
            None => problems.push(format!("{name}: its report says nothing of its hardening")),
            Some(c) => notes.push(format!(
                "{name}: mitigations in force: {}",
                if c.mitigations.is_empty() {
                    "none".to_string()
                } else {
                    c.mitigations.join(", ")
                }
            )),
        }
        for d in &report.degraded {
            let line = format!("{name}: degraded: {d}");
            if ctx.opts.allow_degraded {
                notes.push(format!("{line}, allowed by --allow-degraded"));
            } else {
                problems.push(line);
            }
        }
    }
}
