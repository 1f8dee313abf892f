//! The lockdown sequence of DESIGN.md rule 6 for helpers and fronts, the router's lockdown and
//! the spawner's hardening.

use super::{caps, env, fds, landlock, limits, namespaces, seccomp};
use crate::{FsProfile, LandlockStatus, LockdownError, LockdownOptions, LockdownReport, Profile};
use ipc_schema::tier::ConfinementTier;

/// The Landlock ABI the running kernel offers (0: none).
pub fn landlock_abi() -> u32 {
    landlock::kernel_abi()
}

/// Locks the calling process down for `profile`, in the order of DESIGN.md rule 6, each step
/// fatal: close stray descriptors, clear the environment, RLIMIT_CORE 0, not dumpable,
/// no_new_privs, drop capabilities, Landlock, seccomp. The exec profile also moves into an
/// empty network namespace (inside a user namespace of its own) before it stops being dumpable:
/// its seccomp filter, which every command inherits, has to allow inet sockets (see
/// `namespaces.rs`), so the helper is cut off from the network that way instead. Where user
/// namespaces are refused it cannot be, and the report names the Landlock tier and why
/// (`exec_tier`, `exec_tier_why`; docs/SECURITY.md lists what that tier does not hold); there
/// Landlock allows it TCP to its proxy bridge ports only and a second seccomp filter inet
/// stream sockets only (`bridge_ports`).
///
/// Must be called while the process has a single thread (before a tokio runtime or any other
/// thread is started): capabilities, no_new_privs and Landlock bind only the calling thread, so
/// a second thread would escape them. It is refused otherwise. Everything the process needs from
/// the filesystem or the environment afterwards must be opened or read before: after this call
/// the profile's seccomp filter and Landlock ruleset decide.
///
/// Below the profile's minimum Landlock ABI this fails with [`LockdownError::LandlockTooOld`]
/// unless `opts.allow_degraded`, and then the report's `degraded` names what is missing.
pub fn lockdown(
    profile: &Profile,
    opts: &LockdownOptions,
) -> Result<LockdownReport, LockdownError> {
    limits::require_single_thread()?;
    // Decide about Landlock before changing anything: a refusal leaves the process as it was.
    let kernel_abi = landlock::kernel_abi();
    landlock::check_abi(profile, kernel_abi, opts.allow_degraded)?;

    fds::close_stray_fds(&opts.keep_fds)?;
    env::clear_env(&opts.keep_env)?;
    limits::no_core_dumps()?;
    let mut namespaces = Vec::new();
    let mut degraded = Vec::new();
    let (mut exec_tier, mut exec_tier_why) = (None, None);
    if *profile == Profile::Exec {
        // Before not_dumpable: writing our own uid_map needs a dumpable process. Where the
        // machine refuses user namespaces, the helper and its commands run in the Landlock tier
        // instead (designed for it, named everywhere; a policy may require the namespace tier,
        // and the broker then refuses to run commands): the diagnosis says why.
        // First the whole probe (a child creates a user namespace, maps its ids and mounts):
        // a machine that lets the helper isolate itself may still refuse a command's mounts
        // (Ubuntu's AppArmor restriction), and the tier is chosen once, here.
        let probe = super::userns::probe();
        if !probe.available {
            exec_tier = Some(ConfinementTier::Landlock);
            exec_tier_why = Some(ipc_schema::tier::TierReason {
                message: probe.message.unwrap_or_default(),
                remedy: probe.remedy.unwrap_or_default(),
            });
        } else {
            match namespaces::isolate_network() {
                Ok(()) => {
                    namespaces = vec!["user".to_string(), "net".to_string()];
                    exec_tier = Some(ConfinementTier::Namespaces);
                }
                Err(diagnosis) => {
                    exec_tier = Some(ConfinementTier::Landlock);
                    exec_tier_why = Some(ipc_schema::tier::TierReason {
                        message: diagnosis.message(),
                        remedy: diagnosis.remedy(),
                    });
                }
            }
        }
    }
    limits::not_dumpable()?;
    limits::no_new_privs()?;
    let dropped = caps::drop_all()?;
    // In the Landlock tier the helper has no empty network namespace: its ruleset allows TCP
    // to its proxy bridge block only, and a second filter inet stream sockets only (UDP, ICMP,
    // SCTP and MPTCP are outside Landlock's TCP rules).
    let flat = exec_tier == Some(ConfinementTier::Landlock);
    let bridge_ports = match flat {
        true => Some(
            super::bridge_ports::choose().map_err(|e| LockdownError::Landlock {
                profile: profile.name(),
                reason: format!("choosing the proxy bridge ports: {e}"),
            })?,
        ),
        false => None,
    };
    if flat && kernel_abi < 4 {
        // Only reachable with allow_degraded (exec needs ABI 6).
        degraded.push(format!("Landlock: TCP bind/connect control (ABI 4) is missing: the kernel offers ABI {kernel_abi}, and the exec helper in the Landlock tier is not kept off the host's TCP network"));
    }
    let ruleset = landlock::restrict_self_with_ports(profile, opts.allow_degraded, bridge_ports)?;
    // So that a namespace refusal later (an exec sandbox) tells inherited filters from ours.
    super::userns::note_inherited_filters();
    let seccomp_allowed_syscalls = seccomp::install(profile)?;
    if flat {
        seccomp::install_host_network_guard()?;
    }
    degraded.extend(ruleset.degraded);

    Ok(LockdownReport {
        profile: profile.name().to_string(),
        stray_fds_closed: true,
        env_cleared: true,
        core_dumps_off: true,
        dumpable_off: true,
        no_new_privs: true,
        capabilities_dropped: dropped.all_sets_empty,
        landlock_abi: kernel_abi,
        landlock_min_abi: landlock::min_abi(profile),
        landlock: ruleset.status,
        seccomp_filter: true,
        seccomp_allowed_syscalls,
        exec_tier,
        exec_tier_why,
        namespaces,
        degraded,
        windows: None,
    })
}

/// Whether the effective, permitted, inheritable and ambient sets are all empty (true for an
/// unprivileged broker, false for one running as root, which `doctor` should point out).
fn no_capabilities_held() -> bool {
    use ::caps::CapSet;
    [
        CapSet::Effective,
        CapSet::Permitted,
        CapSet::Inheritable,
        CapSet::Ambient,
    ]
    .into_iter()
    .all(|set| {
        ::caps::read(None, set)
            .map(|s| s.is_empty())
            .unwrap_or(false)
    })
}

/// Locks the broker proper (the router) down, once the spawner runs and the listening sockets
/// are bound: RLIMIT_CORE 0, not dumpable, no_new_privs, every capability dropped (started as
/// root too: the bounding set is cleared and the securebits locked, so nothing gives them back),
/// Landlock to `dirs` (its config, data and runtime directories read-write; the system files it
/// opens read-only), then its seccomp allowlist: no exec, no fork, no new socket of any kind, no
/// signal to another process, no ptrace.
///
/// It keeps its descriptors (the lock file, the listening sockets, the spawner channel, its log)
/// and its environment (it starts nothing that could inherit them).
///
/// Must be called while the process has a single thread, like [`lockdown`]: Landlock and
/// seccomp bind the calling thread and the threads it starts later.
pub fn lockdown_router(
    dirs: &FsProfile,
    allow_degraded: bool,
) -> Result<LockdownReport, LockdownError> {
    let profile = Profile::Broker(dirs.clone());
    limits::require_single_thread()?;
    let kernel_abi = landlock::kernel_abi();
    landlock::check_abi(&profile, kernel_abi, allow_degraded)?;
    limits::no_core_dumps()?;
    limits::not_dumpable()?;
    limits::no_new_privs()?;
    let dropped = caps::drop_all()?;
    let ruleset = landlock::restrict_self(&profile, allow_degraded)?;
    let seccomp_allowed_syscalls = seccomp::install(&profile)?;
    Ok(LockdownReport {
        profile: profile.name().to_string(),
        stray_fds_closed: false,
        env_cleared: false,
        core_dumps_off: true,
        dumpable_off: true,
        no_new_privs: true,
        capabilities_dropped: dropped.all_sets_empty,
        landlock_abi: kernel_abi,
        landlock_min_abi: landlock::min_abi(&profile),
        landlock: ruleset.status,
        seccomp_filter: true,
        seccomp_allowed_syscalls,
        namespaces: Vec::new(),
        exec_tier: None,
        exec_tier_why: None,
        degraded: ruleset.degraded,
        windows: None,
    })
}

/// Hardens the spawner, the one process that keeps the rights helpers need at start: every
/// descriptor but its channel (`keep_fd`) closed, an empty environment (helpers get none),
/// RLIMIT_CORE 0, not dumpable, no_new_privs. No Landlock ruleset and no seccomp filter: both
/// would be inherited by every helper it starts (and the exec-helper must mount and unshare for
/// each command), so each helper applies its own. It keeps its capabilities when started as
/// root, for the helpers to drop themselves.
pub fn lockdown_spawner(keep_fd: i32) -> Result<LockdownReport, LockdownError> {
    limits::require_single_thread()?;
    fds::close_stray_fds(&[keep_fd])?;
    env::clear_env(&[])?;
    limits::no_core_dumps()?;
    limits::not_dumpable()?;
    limits::no_new_privs()?;
    Ok(LockdownReport {
        profile: "spawner".to_string(),
        stray_fds_closed: true,
        env_cleared: true,
        core_dumps_off: true,
        dumpable_off: true,
        no_new_privs: true,
        capabilities_dropped: no_capabilities_held(),
        landlock_abi: landlock::kernel_abi(),
        landlock_min_abi: 0,
        landlock: LandlockStatus::NotEnforced,
        seccomp_filter: false,
        seccomp_allowed_syscalls: 0,
        namespaces: Vec::new(),
        exec_tier: None,
        exec_tier_why: None,
        degraded: Vec::new(),
        windows: None,
    })
}
