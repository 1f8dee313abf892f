//! Windows confinement, applied: what [`crate::wincfg`] generates as data, put in force with
//! `windows-sys`, following what Codex's Windows sandbox and sandbox-runtime converged on.
//!
//! A process cannot restrict its own token or move itself into a job its parent controls, so
//! the confinement happens at spawn time, in the spawner, and a helper's [`lockdown`] checks
//! what it can observe of itself and adds what a process may add to itself:
//!
//! - [`spawn`] (the spawner): `CreateRestrictedToken` from the spawner's own token
//!   (`DISABLE_MAX_PRIVILEGE`, Administrators deny-only, restricting SIDs = the profile's
//!   capability SID + RESTRICTED, `WRITE_RESTRICTED` for exec and commands), a default DACL that
//!   lets the process open its own objects, for the servers profile a lowbox token made from it
//!   in the profile's AppContainer (`CreateAppContainerToken`, no capability), a job object (kill on close, die on unhandled
//!   exception, active process limit, UI restrictions), `CreateProcessAsUserW` suspended with
//!   `PROC_THREAD_ATTRIBUTE_HANDLE_LIST` (only the named handles), `..._MITIGATION_POLICY` and
//!   `..._CHILD_PROCESS_POLICY`, an environment from an allowlist; assigned to the job, then
//!   resumed. The returned [`ConfinedChild`] owns the job: dropping it kills the tree.
//! - [`apply_aces`] / [`remove_aces`] (the broker, when a grant is made and when it goes):
//!   explicit ACEs for the profile's SID on grant roots, exactly as `wincfg` renders them.
//! - [`lockdown`] (each helper, before its first request): its token is restricted, holds the
//!   profile's capability SID among its restricting SIDs, has no privilege but
//!   SeChangeNotifyPrivilege and Administrators only deny-only; it is in a job with the
//!   profile's limits; the profile's mitigations hold (set at spawn, or set now and read back).
//!   Anything missing refuses, naming it, unless `allow_degraded`.
//! - [`harden_broker`]: what the broker (router) can apply to itself.
//! - [`install_network_filters`] (`gatehouse setup network-filters`, as an administrator): the
//!   machine-wide WFP filters that refuse outbound network to tokens restricted with a profile's
//!   SID; each confined process tries the network in [`lockdown`] ([`probe_outbound`]) and
//!   reports what it found, since no process can read back a filter that applies to it.
//!
//! Nothing here has run on a real Windows machine; see docs/windows.md for what ran under Wine.

mod acl;
pub mod beneath;
mod channel;
mod console;
mod ffi;
mod job;
mod mitigation;
mod pass;
pub(crate) mod pipe_peer;
mod private_dir;
mod spawn;
mod spawner;
mod token;
mod wfp;

pub use crate::wincfg::{missing_from_job, missing_from_token, JobFacts, TokenFacts};
pub use acl::{apply_aces, dacl_sddl, remove_aces, AppliedAce};
pub(crate) use channel::user_only_pipe;
pub use channel::{
    async_pipe, async_server, channel_pair, spawn_helper, ChannelIo, SpawnedHelper, HELPER_ENV,
};
pub use console::{console_stops, ConsoleEchoOff, ConsoleStop};
pub use ffi::{running_under_wine, OwnedSid, WinError};
pub use job::{own_job_facts, Job};
pub use mitigation::in_force as mitigation_in_force;
pub use pass::{
    adopt_helper_process, adopt_passed_pipe, adopt_passed_socket, exclusive_loopback_listener,
    pipe_into, process_for_handles_into, socket_into,
};
pub use private_dir::{ensure_private_dir, ensure_private_dir_also};
pub use spawn::{
    env_from_allowlist, open_process, spawn, spawn_unconfined, take_inherited_handle,
    take_inherited_router, ConfinedChild, PeerProcess, SpawnOptions, SpawnSpec,
};
pub use spawner::{
    adopt_duplicated_pipe, duplicate_into, start_spawner, StartedSpawner, ROUTER_HANDLE,
};
pub use token::own_token_facts;
pub use wfp::{
    install as install_network_filters, installed as network_filters_installed, loopback_tries,
    probe_outbound, remove as remove_network_filters, LoopbackTry,
};

use crate::wincfg::{self, JobLimits, WindowsPolicy};
use crate::{LockdownError, LockdownOptions, LockdownReport, Profile};

/// No Landlock on Windows.
pub fn landlock_abi() -> u32 {
    0
}

/// Variables a Windows process keeps through [`lockdown`] whatever it names: Windows' own DLLs
/// find the system directory through `SystemRoot`.
const ALWAYS_KEPT_ENV: &[&str] = &["SystemRoot"];

/// Empties the environment but for `keep` (compared case-insensitively, as Windows does).
/// Names that start with `=` (the per-drive current directories the shell keeps) are not
/// variables a program reads and std cannot remove them; they are left.
fn clear_env(keep: &[String]) -> Result<(), LockdownError> {
    for (k, _) in std::env::vars_os() {
        let Some(name) = k.to_str() else {
            return Err(LockdownError::Environment(format!(
                "{k:?} is not Unicode and cannot be removed by name"
            )));
        };
        if name.starts_with('=') {
            continue;
        }
        let kept = keep.iter().any(|n| n.eq_ignore_ascii_case(name))
            || ALWAYS_KEPT_ENV.iter().any(|n| n.eq_ignore_ascii_case(name));
        if !kept {
            std::env::remove_var(&k);
        }
    }
    Ok(())
}

/// Locks a helper down on Windows: checks its own token and job against the profile's
/// [`WindowsPolicy`], makes the profile's mitigation policies hold, empties the environment.
/// A process that was not started through [`spawn`] has neither the token nor the job, and is
/// refused with a message naming both (unless `allow_degraded`, which names them instead).
pub fn lockdown(
    profile: &Profile,
    opts: &LockdownOptions,
) -> Result<LockdownReport, LockdownError> {
    let policy = wincfg::helper_policy(profile).map_err(|e| LockdownError::Windows {
        mechanism: "policy",
        reason: e.to_string(),
    })?;
    lockdown_with(profile.name(), &policy, opts)
}

/// [`lockdown`] against an explicit policy (a command's, or a test's).
pub fn lockdown_with(
    name: &'static str,
    policy: &WindowsPolicy,
    opts: &LockdownOptions,
) -> Result<LockdownReport, LockdownError> {
    let mut missing = Vec::new();
    let token = match own_token_facts() {
        Ok(t) => {
            missing.extend(missing_from_token(&t, &policy.token, &policy.sid.0));
            Some(t)
        }
        Err(e) => {
            missing.push(format!(
                "restricted token: cannot read the process's own token: {e}"
            ));
            None
        }
    };
    let job = match own_job_facts() {
        Ok(j) => {
            missing.extend(missing_from_job(&j, &policy.job));
            Some(j)
        }
        Err(e) => {
            missing.push(format!("job object: cannot read the process's job: {e}"));
            None
        }
    };
    // Not spawned confined: refuse before changing anything about this process.
    if !missing.is_empty() && !opts.allow_degraded {
        return Err(LockdownError::NotConfined {
            profile: name,
            missing: missing.join("; "),
        });
    }
    let wanted: Vec<&'static str> = policy.mitigations.0.clone();
    // Each failure with its reason (for the refusal); what holds is read back.
    let not_held = mitigation::ensure(&wanted);
    let held: Vec<String> = wanted
        .iter()
        .copied()
        .filter(|m| !not_held.iter().any(|n| n.contains(short(m))))
        .map(|m| short(m).to_string())
        .collect();
    clear_env(&opts.keep_env)?;
    let mut confinement = wincfg::confinement(token.as_ref(), job.as_ref(), held);
    if wincfg::refuses_outbound(policy) {
        confinement.outbound = Some(wfp::probe_outbound());
    }
    let mut not_held = not_held;
    not_held.extend(wincfg::outbound_gap(policy, confinement.outbound.as_ref()));
    // Who else may open this process (the counterpart of PR_SET_DUMPABLE): read, not set; the
    // spawner gave it its descriptor at creation.
    // SAFETY: GetCurrentProcess returns a pseudo-handle with every access, needing no close.
    confinement.process_dacl = acl::object_dacl_sddl(unsafe {
        windows_sys::Win32::System::Threading::GetCurrentProcess()
    })
    .ok();
    let undumpable = policy.process_sddl.is_some()
        && confinement
            .process_dacl
            .as_deref()
            .is_some_and(|d| wincfg::process_dacl_gaps(d).is_empty());
    if !not_held.is_empty() && !opts.allow_degraded {
        missing.extend(not_held);
        return Err(LockdownError::NotConfined {
            profile: name,
            missing: missing.join("; "),
        });
    }
    // Degraded: the gaps exactly as the broker's check words them (wincfg::missing, the one
    // check), after what could not even be read.
    let mut degraded: Vec<String> = missing
        .into_iter()
        .filter(|m| m.contains("cannot read"))
        .collect();
    degraded.extend(wincfg::missing(policy, &confinement));
    let privileges_stripped = token.as_ref().is_some_and(|t| {
        t.restricted
            && !t.administrators_usable
            && t.privileges.iter().all(|p| p == "SeChangeNotifyPrivilege")
    });
    let no_dumps = job
        .as_ref()
        .is_some_and(|j| j.in_job && j.limit_flags & 0x400 != 0); // DIE_ON_UNHANDLED_EXCEPTION
    Ok(LockdownReport {
        // The helper cannot enumerate its handles; the spawner's handle list is the guarantee.
        stray_fds_closed: false,
        env_cleared: true,
        // Die on unhandled exception: no Windows Error Reporting dump of the process.
        core_dumps_off: no_dumps,
        // No other process of the user may open it for more than waiting and basic queries.
        dumpable_off: undumpable,
        capabilities_dropped: privileges_stripped,
        windows: Some(Box::new(confinement)),
        degraded,
        ..LockdownReport::nothing_yet(name)
    })
}

fn short(m: &str) -> &str {
    wincfg::mitigation_short(m)
}

/// What the broker (router) applies to itself on Windows; each failure refuses the start.
///
/// - A job of its own with an active process limit of 1 (the counterpart of the Linux router's
///   no-exec seccomp rule: the spawner, a separate process, starts helpers), die on unhandled
///   exception (no WER dump of a process holding the audit key's use) and UI restrictions.
/// - Mitigations it can set on itself: no dynamic code, strict handle checks, extension points
///   disabled, no remote images; each read back.
///
/// Not applied, because a process cannot do it to itself: a restricted token (the broker keeps
/// the user's access to its data directory) and handle inheritance (nothing is inherited by a
/// process it cannot start).
///
/// The job's limits and each mitigation are read back. With `allow_degraded` (the broker's
/// `--allow-degraded`) what does not hold is listed in the report's `degraded` instead of
/// refusing the start (Wine, for one, reads back no job limit and sets no mitigation).
pub fn harden_broker(allow_degraded: bool) -> Result<LockdownReport, LockdownError> {
    harden_self("broker", allow_degraded)
}

/// What a front that starts no process (`gatehouse mcp`'s gateway) applies to itself on
/// Windows: the same as [`harden_broker`]. It was started by the agent's client, not by the
/// spawner, so it has no restricted token of its own.
pub fn harden_front(allow_degraded: bool) -> Result<LockdownReport, LockdownError> {
    harden_self("gateway", allow_degraded)
}

/// The same for the human's console (`gatehouse ui`), under its own profile name: it starts
/// no process and keeps the user's token (it was started by the human, not the spawner).
pub fn harden_console(allow_degraded: bool) -> Result<LockdownReport, LockdownError> {
    harden_self("ui", allow_degraded)
}

fn harden_self(
    profile: &'static str,
    allow_degraded: bool,
) -> Result<LockdownReport, LockdownError> {
    let limits = JobLimits {
        kill_on_close: true,
        active_processes: Some(1),
        die_on_unhandled_exception: true,
        process_memory: None,
        ui_restrictions: wincfg::helper_policy(&Profile::Gateway)
            .map_err(|e| LockdownError::Windows {
                mechanism: "policy",
                reason: e.to_string(),
            })?
            .job
            .ui_restrictions,
    };
    let win = |e: WinError| LockdownError::Windows {
        mechanism: e.mechanism(),
        reason: e.to_string(),
    };
    let (job, _) = Job::create(&limits, false).map_err(win)?;
    job.assign_self().map_err(win)?;
    // Kept open for the process's life: closing the last handle of a kill-on-close job would
    // kill this process. It closes at exit, when there is nothing left to kill.
    std::mem::forget(job);
    let facts = own_job_facts().map_err(win)?;
    let mut missing = missing_from_job(&facts, &limits);
    let wanted = [
        "PROCESS_CREATION_MITIGATION_POLICY_PROHIBIT_DYNAMIC_CODE_ALWAYS_ON",
        "PROCESS_CREATION_MITIGATION_POLICY_STRICT_HANDLE_CHECKS_ALWAYS_ON",
        "PROCESS_CREATION_MITIGATION_POLICY_EXTENSION_POINT_DISABLE_ALWAYS_ON",
        "PROCESS_CREATION_MITIGATION_POLICY_IMAGE_LOAD_NO_REMOTE_ALWAYS_ON",
    ];
    missing.extend(mitigation::ensure(&wanted));
    if !missing.is_empty() && !allow_degraded {
        return Err(LockdownError::NotConfined {
            profile,
            missing: missing.join("; "),
        });
    }
    let held = wanted
        .iter()
        .filter(|m| !missing.iter().any(|n| n.contains(short(m))))
        .map(|m| short(m).to_string())
        .collect();
    Ok(LockdownReport {
        core_dumps_off: true,
        windows: Some(Box::new(wincfg::confinement(None, Some(&facts), held))),
        degraded: missing,
        ..LockdownReport::nothing_yet(profile)
    })
}

/// What the spawner applies to itself on Windows; each failure refuses the start. It keeps the
/// user's token and may create processes (it makes each helper's restricted token and job), so
/// what is left are the mitigations a process can set on itself, each read back: no dynamic
/// code, strict handle checks, extension points disabled, no remote images. With
/// `allow_degraded` (the broker's own switch, passed at start) what does not hold is listed in
/// the report's `degraded` instead.
pub fn harden_spawner(allow_degraded: bool) -> Result<LockdownReport, LockdownError> {
    let wanted = [
        "PROCESS_CREATION_MITIGATION_POLICY_PROHIBIT_DYNAMIC_CODE_ALWAYS_ON",
        "PROCESS_CREATION_MITIGATION_POLICY_STRICT_HANDLE_CHECKS_ALWAYS_ON",
        "PROCESS_CREATION_MITIGATION_POLICY_EXTENSION_POINT_DISABLE_ALWAYS_ON",
        "PROCESS_CREATION_MITIGATION_POLICY_IMAGE_LOAD_NO_REMOTE_ALWAYS_ON",
    ];
    let missing = mitigation::ensure(&wanted);
    if !missing.is_empty() && !allow_degraded {
        return Err(LockdownError::NotConfined {
            profile: "spawner",
            missing: missing.join("; "),
        });
    }
    let held = wanted
        .iter()
        .filter(|m| !missing.iter().any(|n| n.contains(short(m))))
        .map(|m| short(m).to_string())
        .collect();
    Ok(LockdownReport {
        windows: Some(Box::new(wincfg::confinement(None, None, held))),
        degraded: missing,
        ..LockdownReport::nothing_yet("spawner")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The numeric tables in wincfg match the SDK's constants where windows-sys has them.
    #[test]
    fn wincfg_values_match_windows_sys() {
        use windows_sys::Win32::System::JobObjects as J;
        for (name, v) in [
            ("JOB_OBJECT_UILIMIT_HANDLES", J::JOB_OBJECT_UILIMIT_HANDLES),
            (
                "JOB_OBJECT_UILIMIT_READCLIPBOARD",
                J::JOB_OBJECT_UILIMIT_READCLIPBOARD,
            ),
            (
                "JOB_OBJECT_UILIMIT_WRITECLIPBOARD",
                J::JOB_OBJECT_UILIMIT_WRITECLIPBOARD,
            ),
            (
                "JOB_OBJECT_UILIMIT_SYSTEMPARAMETERS",
                J::JOB_OBJECT_UILIMIT_SYSTEMPARAMETERS,
            ),
            (
                "JOB_OBJECT_UILIMIT_DISPLAYSETTINGS",
                J::JOB_OBJECT_UILIMIT_DISPLAYSETTINGS,
            ),
            (
                "JOB_OBJECT_UILIMIT_GLOBALATOMS",
                J::JOB_OBJECT_UILIMIT_GLOBALATOMS,
            ),
            ("JOB_OBJECT_UILIMIT_DESKTOP", J::JOB_OBJECT_UILIMIT_DESKTOP),
            (
                "JOB_OBJECT_UILIMIT_EXITWINDOWS",
                J::JOB_OBJECT_UILIMIT_EXITWINDOWS,
            ),
        ] {
            assert_eq!(wincfg::ui_limit_bits(name), Some(v), "{name}");
        }
        assert_eq!(
            J::JOB_OBJECT_LIMIT_DIE_ON_UNHANDLED_EXCEPTION,
            0x400,
            "lockdown reads this bit by value"
        );
    }

    #[test]
    fn every_profile_mitigation_has_a_runtime_class() {
        for p in [Profile::Net, Profile::Exec, Profile::Ui, Profile::Gateway] {
            for m in wincfg::helper_policy(&p).unwrap().mitigations.0 {
                assert!(
                    !matches!(mitigation::in_force(m), Err(WinError::Invalid { .. })),
                    "{m} has no class"
                );
            }
        }
    }
}
