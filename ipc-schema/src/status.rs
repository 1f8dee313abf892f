//! What a process reports about its own lockdown, and what `doctor` shows.

use crate::Role;
use serde::{Deserialize, Serialize};

/// A helper's first frame.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct Hello {
    /// Which helper this claims to be. The broker already knows (it spawned it); a mismatch
    /// means the wrong binary, and the helper is refused.
    pub role: Role,
    pub pid: u32,
    pub lockdown: LockdownReport,
}

/// How far Landlock restricted the process.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub enum LandlockStatus {
    /// Every access right the profile asked for is handled by the kernel.
    FullyEnforced,
    /// Some rights the profile asked for are beyond this kernel's ABI (allowed only with
    /// `--allow-degraded` when they are below the profile's minimum ABI).
    PartiallyEnforced,
    /// No Landlock at all (only with `--allow-degraded`).
    NotEnforced,
}

/// How a [`LockdownReport::refused`] report marks its reason.
const REFUSED_PREFIX: &str = "refused to start: ";

/// What a process did to lock itself down, step by step (DESIGN.md rule 6).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct LockdownReport {
    /// The profile applied (`fs`, `net`, `exec`, `secrets`, `ui`, `gateway`, `broker`).
    pub profile: String,
    /// File descriptors other than the channel and stdio were closed.
    pub stray_fds_closed: bool,
    /// The environment was emptied (the process keeps only what it named).
    pub env_cleared: bool,
    /// RLIMIT_CORE is 0.
    pub core_dumps_off: bool,
    /// PR_SET_DUMPABLE is 0 (no ptrace attach by same-uid processes, no /proc/pid/mem).
    pub dumpable_off: bool,
    pub no_new_privs: bool,
    /// Effective, permitted, inheritable and ambient sets empty; bounding set cleared where
    /// permitted.
    pub capabilities_dropped: bool,
    /// The Landlock ABI the kernel offers (0: none).
    pub landlock_abi: u32,
    /// The lowest ABI this profile accepts without `--allow-degraded`.
    pub landlock_min_abi: u32,
    pub landlock: LandlockStatus,
    /// A seccomp filter (mode 2) is installed.
    pub seccomp_filter: bool,
    /// How many syscalls the seccomp allowlist permits (0 for a denylist profile).
    pub seccomp_allowed_syscalls: u32,
    /// Namespaces the process was placed in (exec sandbox), e.g. `user`, `mount`, `net`.
    pub namespaces: Vec<String>,
    /// The exec helper only: the confinement tier its commands run under (chosen once, at its
    /// lockdown). `None` for every other process.
    pub exec_tier: Option<crate::tier::ConfinementTier>,
    /// The exec helper in the Landlock tier: why it is not in the namespace tier (which check
    /// refused user namespaces, and the remedy).
    pub exec_tier_why: Option<crate::tier::TierReason>,
    /// What is weaker than the profile asks, and why. Empty unless `--allow-degraded`.
    pub degraded: Vec<String>,
    /// On Windows: what the process observed of its own token, job and mitigations (the
    /// counterpart of /proc's view on Linux). `None` on every other OS.
    pub windows: Option<Box<WindowsConfinement>>,
}

/// What a process on Windows reads of its own confinement, for its hello: the token the
/// spawner made for it, the job it runs in, the mitigation policies in force. The broker checks
/// it against the profile's policy (`sandbox::wincfg::verify_report`) before it routes
/// anything to the helper, as it checks /proc on Linux.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default)]
pub struct WindowsConfinement {
    /// `IsTokenRestricted`: the token has restricting SIDs.
    pub restricted_token: bool,
    /// The restricting SIDs are checked for writes only (`WRITE_RESTRICTED`); `None`: it could
    /// not be read.
    pub write_restricted: Option<bool>,
    /// The token's restricting SIDs, as strings (`S-1-15-3-1024-...`, `S-1-5-12`).
    pub restricting_sids: Vec<String>,
    /// Privileges left in the token, by name.
    pub privileges: Vec<String>,
    /// The Administrators group is in the token and not deny-only.
    pub administrators_usable: bool,
    /// The AppContainer the token is in (`TokenAppContainerSid`, `S-1-15-2-...`); `None`: in
    /// none, or it could not be read.
    pub app_container: Option<String>,
    /// The process runs in a job object.
    pub in_job: bool,
    /// `JOB_OBJECT_LIMIT_*` flags of that job.
    pub job_limit_flags: u32,
    /// Its active process limit (0: none).
    pub job_active_processes: u32,
    /// `JOB_OBJECT_UILIMIT_*` flags, when they could be read.
    pub job_ui_restrictions: Option<u32>,
    /// Mitigation policies read back in force, by their short names (`PROHIBIT_DYNAMIC_CODE_ALWAYS_ON`).
    pub mitigations: Vec<String>,
    /// The DACL of its process object, as SDDL read back (who may open the process, for what);
    /// `None`: it could not be read.
    pub process_dacl: Option<String>,
    /// What it found when it tried to listen and connect on the loopback during lockdown
    /// (whether the WFP filters of `gatehouse setup network-filters` hold for its token).
    /// `None`: not tried, for a profile that may use the network (the net-helper).
    pub outbound: Option<OutboundProbe>,
}

/// A process's own try of the network on the loopback, IPv4 and IPv6 (Windows): the
/// counterpart of reading back a seccomp filter, since a WFP filter cannot be read back by the
/// process it applies to.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub enum OutboundProbe {
    /// Listening and connecting were refused with WSAEACCES on both families (or the family is
    /// absent).
    Refused,
    /// What was allowed, or failed otherwise, one phrase each.
    NotRefused(String),
}

impl LockdownReport {
    /// The report of a process that did none of the lockdown: every step false, no Landlock, no
    /// filter, and `reason` (why it runs unconfined) as its one degraded entry.
    pub fn unconfined(profile: impl Into<String>, reason: impl Into<String>) -> LockdownReport {
        LockdownReport {
            degraded: vec![reason.into()],
            ..LockdownReport::nothing_yet(profile)
        }
    }

    /// The report of a helper that refuses to start because the machine lacks what its profile
    /// needs (user namespaces the exec helper cannot create): sent in place of a hello so that
    /// the broker shows why (`reason`, the helper's diagnosis and remedy), then the helper exits.
    pub fn refused(profile: impl Into<String>, reason: impl Into<String>) -> LockdownReport {
        LockdownReport::unconfined(profile, format!("{REFUSED_PREFIX}{}", reason.into()))
    }

    /// For a [`LockdownReport::refused`] report: `ROLE refused to start: REASON` (the helper's
    /// own words, shown inert wherever they are shown).
    pub fn refusal(&self, role: Role) -> Option<String> {
        self.degraded
            .iter()
            .find_map(|d| d.strip_prefix(REFUSED_PREFIX))
            .map(|why| format!("{role} refused to start: {why}"))
    }

    /// Every step still to do: what a lockdown starts from and fills in as each step succeeds.
    pub fn nothing_yet(profile: impl Into<String>) -> LockdownReport {
        LockdownReport {
            profile: profile.into(),
            stray_fds_closed: false,
            env_cleared: false,
            core_dumps_off: false,
            dumpable_off: false,
            no_new_privs: false,
            capabilities_dropped: false,
            landlock_abi: 0,
            landlock_min_abi: 0,
            landlock: LandlockStatus::NotEnforced,
            seccomp_filter: false,
            seccomp_allowed_syscalls: 0,
            namespaces: Vec::new(),
            exec_tier: None,
            exec_tier_why: None,
            degraded: Vec::new(),
            windows: None,
        }
    }

    /// Checks a helper's own report against what its `role` needs and the kernel's view
    /// (read by the spawner); `Err` names everything missing. The broker routes nothing to a
    /// helper that fails it (DESIGN rule 6).
    pub fn verify(
        &self,
        role: Role,
        kernel: &ProcStatus,
        allow_degraded: bool,
    ) -> Result<(), String> {
        let report = self;
        if let Some(why) = report.refusal(role) {
            return Err(why);
        }
        let mut missing = Vec::new();
        if kernel.seccomp != 2 {
            missing.push(format!(
                "/proc shows Seccomp: {} (a filter is required)",
                kernel.seccomp
            ));
        }
        if !kernel.no_new_privs {
            missing.push("/proc shows NoNewPrivs: 0".to_string());
        }
        if kernel.cap_eff != 0 || kernel.cap_prm != 0 {
            missing.push(format!(
                "/proc shows capabilities still held (CapEff {:x}, CapPrm {:x})",
                kernel.cap_eff, kernel.cap_prm
            ));
        }
        if !report.seccomp_filter {
            missing.push("it reports no seccomp filter".into());
        }
        if report.landlock != LandlockStatus::FullyEnforced && !allow_degraded {
            missing.push(format!(
                "it reports Landlock {:?} (ABI {}, needs {})",
                report.landlock, report.landlock_abi, report.landlock_min_abi
            ));
        }
        if !report.degraded.is_empty() && !allow_degraded {
            missing.push(format!(
                "it runs degraded without --allow-degraded: {}",
                report.degraded.join("; ")
            ));
        }
        if !(report.dumpable_off && report.core_dumps_off && report.capabilities_dropped) {
            missing.push("it did not finish the lockdown steps".into());
        }
        if missing.is_empty() {
            Ok(())
        } else {
            Err(format!("{role} did not lock down: {}", missing.join("; ")))
        }
    }
}

/// On macOS: what the spawner reads of a helper from outside (`sandbox::process::observe`), the
/// counterpart of /proc on Linux: whether a Seatbelt profile confines it (`sandbox_check`), and
/// its user.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct MacConfinement {
    pub sandboxed: bool,
    pub uid: u32,
}

impl LockdownReport {
    /// On macOS: whether a helper's hello and the system's view of it (`outside`) together show
    /// the lockdown its role needs: every step of `sandbox::macos::lockdown` reported done, and
    /// the process confined by a Seatbelt profile, which the system confirms (the exec-helper
    /// excepted: macOS refuses a profile inside a profile, and each of its commands gets one).
    /// Nothing weaker is taken without `--allow-degraded`.
    pub fn verify_macos(
        &self,
        role: Role,
        outside: &MacConfinement,
        allow_degraded: bool,
    ) -> Result<(), String> {
        if let Some(why) = self.refusal(role) {
            return Err(why);
        }
        let mut missing = Vec::new();
        if role != Role::Exec && !outside.sandboxed {
            missing.push("the system shows no Seatbelt profile on it (sandbox_check)".to_string());
        }
        if !(self.stray_fds_closed && self.env_cleared && self.core_dumps_off && self.dumpable_off)
        {
            missing.push("it did not finish the lockdown steps".into());
        }
        if !self.degraded.is_empty() && !allow_degraded {
            missing.push(format!(
                "it runs degraded without --allow-degraded: {}",
                self.degraded.join("; ")
            ));
        }
        if missing.is_empty() {
            Ok(())
        } else {
            Err(format!("{role} did not lock down: {}", missing.join("; ")))
        }
    }
}

/// What the kernel says about a process (`/proc/<pid>/status`), read by the broker itself so
/// that a helper's own report is never the only evidence.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct ProcStatus {
    /// `Seccomp:` 0 none, 1 strict, 2 filter.
    pub seccomp: u8,
    /// `NoNewPrivs:`.
    pub no_new_privs: bool,
    /// `CapEff:` as a bit mask.
    pub cap_eff: u64,
    /// `CapPrm:` as a bit mask.
    pub cap_prm: u64,
    /// `Uid:` real uid.
    pub uid: u32,
}

/// The state of one supervised process.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub enum ProcessState {
    /// Locked down, verified, serving.
    Ready,
    /// Being started or restarted.
    Starting,
    /// Started but refused: the broker routes nothing to it.
    Refused { reason: String },
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct ProcessReport {
    /// `broker`, or a helper's binary name.
    pub name: String,
    pub pid: u32,
    pub state: ProcessState,
    /// How many times it has been restarted since the broker started.
    pub restarts: u32,
    /// The process's own report (for helpers, from its hello).
    pub lockdown: Option<LockdownReport>,
    /// The kernel's view, read by the broker.
    pub kernel: Option<ProcStatus>,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct DoctorReport {
    /// `uname -r`.
    pub kernel_release: String,
    /// The Landlock ABI the kernel offers (0: none).
    pub landlock_abi: u32,
    /// The broker was started with `--allow-degraded`.
    pub allow_degraded: bool,
    pub processes: Vec<ProcessReport>,
    /// Every required protection that is missing, one line each. Empty means all enforced.
    pub problems: Vec<String>,
    /// What is enforced only partly, by design, and where that is explained.
    pub notes: Vec<String>,
    /// Whether user namespaces can be created here. The broker cannot probe (its seccomp filter
    /// forbids fork), so it sends `None` and `gatehouse doctor` fills it from its own probe.
    pub namespaces: Option<NamespaceStatus>,
    /// The tier the exec helper runs commands under (from its hello; `None` before it said).
    pub exec_tier: Option<crate::tier::ConfinementTier>,
    /// In the Landlock tier: what it does not hold, by name (empty in the namespace tier).
    pub not_held: Vec<crate::tier::NotHeldCase>,
}

/// Whether this machine lets gatehouse create the user namespaces its exec sandbox (and the
/// exec helper's own network isolation) need, and if not, what refused them and what to do.
/// Built by `sandbox::linux::userns` (one classifier for every process that reports it).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct NamespaceStatus {
    /// The probe created a user namespace, mapped the caller's ids and mounted inside it.
    pub available: bool,
    /// What refused them (`None` when available).
    pub refused_by: Option<NamespaceRefusal>,
    /// The step that failed, e.g. `creating the user namespace` (`None` when available).
    pub step: Option<String>,
    /// The errno it failed with, by name (`EPERM`).
    pub errno: Option<String>,
    /// One sentence: which check refused and why gatehouse refuses to run commands.
    pub message: Option<String>,
    /// What the person can do about it.
    pub remedy: Option<String>,
}

/// The cause of a namespace refusal, as far as the machine lets gatehouse tell.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum NamespaceRefusal {
    /// A sysctl turns unprivileged user namespaces off (`name` is 0).
    Sysctl { name: String },
    /// A seccomp filter the process inherited from whatever started gatehouse (a container
    /// runtime's default profile: Docker, Podman) refused the call.
    ContainerSeccomp,
    /// Ubuntu's AppArmor restriction (`kernel.apparmor_restrict_unprivileged_userns=1`): the
    /// namespace is created without capabilities, so the uid map or a mount fails.
    AppArmor,
    /// Nothing gatehouse knows of explains it; the step and errno are all there is.
    Other,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn locked_kernel() -> ProcStatus {
        ProcStatus {
            seccomp: 2,
            no_new_privs: true,
            cap_eff: 0,
            cap_prm: 0,
            uid: 1000,
        }
    }

    #[test]
    fn a_refused_report_is_refused_with_the_helpers_words_only() {
        let r = LockdownReport::refused("exec-helper", "user namespaces are refused here: X");
        let want = "exec-helper refused to start: user namespaces are refused here: X";
        assert_eq!(r.refusal(Role::Exec).as_deref(), Some(want));
        // Even beside a kernel view that looks locked down, and with --allow-degraded.
        assert_eq!(
            r.verify(Role::Exec, &locked_kernel(), true),
            Err(want.into())
        );
        // An ordinary degraded note is not a refusal.
        let d = LockdownReport::unconfined("exec-helper", "no filter here");
        assert_eq!(d.refusal(Role::Exec), None);
        assert!(d
            .verify(Role::Exec, &locked_kernel(), true)
            .unwrap_err()
            .starts_with("exec-helper did not lock down: "));
    }

    /// What `sandbox::macos::lockdown` reports when every step held.
    fn mac_report(profile: &str) -> LockdownReport {
        let mut r = LockdownReport::nothing_yet(profile);
        r.stray_fds_closed = true;
        r.env_cleared = true;
        r.core_dumps_off = true;
        r.dumpable_off = true;
        r
    }

    #[test]
    fn macos_needs_every_step_and_the_systems_word_on_the_profile() {
        let confined = MacConfinement {
            sandboxed: true,
            uid: 501,
        };
        let bare = MacConfinement {
            sandboxed: false,
            uid: 501,
        };
        // Controls: a helper under its profile; the exec-helper, which has none.
        assert_eq!(
            mac_report("fs").verify_macos(Role::Fs, &confined, false),
            Ok(())
        );
        assert_eq!(
            mac_report("exec").verify_macos(Role::Exec, &bare, false),
            Ok(())
        );
        // No profile on a helper that must have one: refused, --allow-degraded or not.
        for degraded in [false, true] {
            assert_eq!(
                mac_report("net").verify_macos(Role::Net, &bare, degraded),
                Err("net-helper did not lock down: the system shows no Seatbelt profile on it (sandbox_check)".into())
            );
        }
        // A step not done.
        let mut r = mac_report("secrets");
        r.dumpable_off = false;
        assert_eq!(
            r.verify_macos(Role::Secrets, &confined, true),
            Err("secrets-helper did not lock down: it did not finish the lockdown steps".into())
        );
        // A gap: refused strict, taken with --allow-degraded.
        let mut r = mac_report("servers");
        r.degraded.push("a gap".into());
        assert_eq!(
            r.verify_macos(Role::Servers, &confined, false),
            Err("servers-helper did not lock down: it runs degraded without --allow-degraded: a gap".into())
        );
        assert_eq!(r.verify_macos(Role::Servers, &confined, true), Ok(()));
        // A helper's refusal stands whatever the system says.
        let refused = LockdownReport::refused("fs", "no grant root could be opened");
        assert_eq!(
            refused.verify_macos(Role::Fs, &confined, true),
            Err("fs-helper refused to start: no grant root could be opened".into())
        );
    }
}
