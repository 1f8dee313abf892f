//! Why this machine refuses user namespaces, and what to do about it.
//!
//! Every place that needs one (the exec helper's own network isolation, each exec sandbox, and
//! `gatehouse doctor`'s probe) reports a failure through [`classify`], a pure function of the
//! step that failed, its errno and the [`Facts`] read from /proc and /sys, so the same refusal
//! is worded the same way wherever it shows. gatehouse still refuses (fail closed); this only
//! says which check refused and how to lift it.

use ipc_schema::status::{NamespaceRefusal, NamespaceStatus};
use std::sync::atomic::{AtomicI64, Ordering};

/// The step of setting a user namespace up that failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// `unshare`/`clone` with `CLONE_NEWUSER`.
    Create,
    /// Writing `deny` to `/proc/self/setgroups`.
    Setgroups,
    /// Writing `/proc/self/uid_map`.
    UidMap,
    /// Writing `/proc/self/gid_map`.
    GidMap,
    /// A mount (or `open_tree`, `pivot_root`) inside the new namespace.
    Mount,
}

impl Step {
    pub fn text(self) -> &'static str {
        match self {
            Step::Create => "creating the user namespace",
            Step::Setgroups => "writing /proc/self/setgroups",
            Step::UidMap => "writing the uid_map",
            Step::GidMap => "writing the gid_map",
            Step::Mount => "mounting inside the new namespace",
        }
    }

    fn code(self) -> i32 {
        self as i32 + 1
    }

    fn from_code(c: i32) -> Option<Step> {
        [
            Step::Create,
            Step::Setgroups,
            Step::UidMap,
            Step::GidMap,
            Step::Mount,
        ]
        .into_iter()
        .find(|s| s.code() == c)
    }
}

/// What the kernel says about the knobs that can refuse user namespaces. `None`: the file is
/// absent (the knob does not exist on this kernel) or unreadable.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Facts {
    /// `/proc/sys/kernel/unprivileged_userns_clone` (Debian's patch; 0 turns them off).
    pub unprivileged_userns_clone: Option<u64>,
    /// `/proc/sys/user/max_user_namespaces` (0 turns them off).
    pub max_user_namespaces: Option<u64>,
    /// `/sys/kernel/security/apparmor` exists.
    pub apparmor: bool,
    /// `/proc/sys/kernel/apparmor_restrict_unprivileged_userns` (Ubuntu 23.10+).
    pub apparmor_restrict_userns: Option<u64>,
    /// Seccomp filters this process inherited from whatever started gatehouse (not counting
    /// its own lockdown's): `Seccomp_filters:` in /proc/self/status, less our own.
    pub inherited_seccomp_filters: Option<u32>,
}

/// `Seccomp_filters:` before this process installed its own filters, recorded by the lockdown
/// (-1: not recorded, so every filter the process has came from outside).
static INHERITED_FILTERS: AtomicI64 = AtomicI64::new(-1);

/// Records how many seccomp filters the process has before its lockdown adds its own.
pub(crate) fn note_inherited_filters() {
    if let Some(n) = seccomp_filters() {
        INHERITED_FILTERS.store(n as i64, Ordering::Relaxed);
    }
}

fn seccomp_filters() -> Option<u32> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Seccomp_filters:"))
        .and_then(|v| v.trim().parse().ok())
}

fn read_num(path: &str) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

impl Facts {
    /// Reads them now.
    pub fn read() -> Facts {
        let inherited = match INHERITED_FILTERS.load(Ordering::Relaxed) {
            n if n >= 0 => Some(n as u32),
            _ => seccomp_filters(),
        };
        Facts {
            unprivileged_userns_clone: read_num("/proc/sys/kernel/unprivileged_userns_clone"),
            max_user_namespaces: read_num("/proc/sys/user/max_user_namespaces"),
            apparmor: std::path::Path::new("/sys/kernel/security/apparmor").exists(),
            apparmor_restrict_userns: read_num(
                "/proc/sys/kernel/apparmor_restrict_unprivileged_userns",
            ),
            inherited_seccomp_filters: inherited,
        }
    }
}

/// A classified refusal: which check refused, at which step, with which errno.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnosis {
    pub refused_by: NamespaceRefusal,
    pub step: Step,
    pub errno: i32,
    /// How many seccomp filters were inherited (for the wording of the seccomp case).
    inherited_filters: u32,
}

/// The errno's name (`EPERM`), or its number.
pub fn errno_name(errno: i32) -> String {
    match nix::errno::Errno::from_raw(errno) {
        nix::errno::Errno::UnknownErrno => format!("errno {errno}"),
        e => format!("{e:?}"),
    }
}

/// Which check refused `step` with `errno`, given `facts`. The order matters: a sysctl that
/// is 0 refuses before any filter is consulted, an inherited seccomp filter answers before the
/// kernel's own checks, and AppArmor's restriction shows only after the namespace exists.
pub fn classify(step: Step, errno: i32, facts: &Facts) -> Diagnosis {
    use NamespaceRefusal::*;
    let denied = errno == libc::EPERM || errno == libc::EACCES;
    let inherited = facts.inherited_seccomp_filters.unwrap_or(0);
    let refused_by = match step {
        // unshare/clone answer EPERM when kernel.unprivileged_userns_clone is 0, and ENOSPC
        // when user.max_user_namespaces is 0 (the count is over the limit).
        Step::Create
            if (errno == libc::EPERM || errno == libc::ENOSPC)
                && facts.unprivileged_userns_clone == Some(0) =>
        {
            Sysctl {
                name: "kernel.unprivileged_userns_clone".into(),
            }
        }
        Step::Create
            if (errno == libc::EPERM || errno == libc::ENOSPC)
                && facts.max_user_namespaces == Some(0) =>
        {
            Sysctl {
                name: "user.max_user_namespaces".into(),
            }
        }
        // Docker's and Podman's default profiles answer EPERM for unshare and for clone with
        // namespace flags, ENOSYS for clone3, and EPERM for mount.
        _ if inherited > 0 && (errno == libc::EPERM || errno == libc::ENOSYS) => ContainerSeccomp,
        // Ubuntu: an unconfined process gets the namespace, but without capabilities in it
        // (the `unprivileged_userns` profile), so the uid map write or the first mount fails.
        // With `apparmor_restrict_unprivileged_unconfined` the creation itself is refused.
        _ if denied && facts.apparmor && facts.apparmor_restrict_userns == Some(1) => AppArmor,
        _ => Other,
    };
    Diagnosis {
        refused_by,
        step,
        errno,
        inherited_filters: inherited,
    }
}

impl Diagnosis {
    /// Which check refused, in one sentence.
    pub fn message(&self) -> String {
        let failed = format!(
            "{} failed with {}",
            self.step.text(),
            errno_name(self.errno)
        );
        match &self.refused_by {
            NamespaceRefusal::Sysctl { name } => format!(
                "unprivileged user namespaces are disabled by sysctl {name}=0 ({failed})"
            ),
            NamespaceRefusal::ContainerSeccomp => format!(
                "a seccomp filter gatehouse did not install refused it ({failed}; this process inherited {} seccomp filter(s), as a container runtime's default profile (Docker, Podman) installs)",
                self.inherited_filters
            ),
            NamespaceRefusal::AppArmor => format!(
                "Ubuntu's AppArmor restriction on unprivileged user namespaces (kernel.apparmor_restrict_unprivileged_userns=1) gives the new namespace no capabilities ({failed})"
            ),
            NamespaceRefusal::Other => format!(
                "{failed}; no known restriction explains it (the sysctls allow user namespaces, no inherited seccomp filter, no AppArmor restriction)"
            ),
        }
    }

    /// What the person can do.
    pub fn remedy(&self) -> String {
        match &self.refused_by {
            NamespaceRefusal::Sysctl { name } => {
                let value = if name == "user.max_user_namespaces" {
                    "10000"
                } else {
                    "1"
                };
                format!("as root: `sysctl -w {name}={value}`, and to keep it after a reboot the line `{name} = {value}` in /etc/sysctl.d/60-gatehouse.conf")
            }
            NamespaceRefusal::ContainerSeccomp => "run gatehouse outside the container, or start the container with a seccomp profile that allows unshare, clone and clone3 with namespace flags and mount inside the new namespace (the runtime's default profile with those rules added)".into(),
            NamespaceRefusal::AppArmor => "install gatehouse's AppArmor profile: `sudo gatehouse setup apparmor --yes` (it writes /etc/apparmor.d/gatehouse and loads it with `apparmor_parser -r`; without --yes it prints the profile)".into(),
            NamespaceRefusal::Other => "check that the kernel has user namespaces (CONFIG_USER_NS) and what security module or sandbox gatehouse runs under; `gatehouse doctor --json` shows what gatehouse found".into(),
        }
    }

    /// The typed form `doctor --json` shows.
    pub fn status(&self) -> NamespaceStatus {
        NamespaceStatus {
            available: false,
            refused_by: Some(self.refused_by.clone()),
            step: Some(self.step.text().into()),
            errno: Some(errno_name(self.errno)),
            message: Some(self.message()),
            remedy: Some(self.remedy()),
        }
    }
}

impl std::fmt::Display for Diagnosis {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "user namespaces are refused here: {}. To fix: {}",
            self.message(),
            self.remedy()
        )
    }
}

/// Tries, in a child process, what the exec sandbox does first: a user namespace (with mount,
/// pid, network, IPC and UTS namespaces), the caller's uid and gid mapped, every mount made
/// private. The child exits at once; nothing of it outlives the call.
pub fn probe() -> NamespaceStatus {
    match probe_step() {
        Ok(()) => NamespaceStatus {
            available: true,
            refused_by: None,
            step: None,
            errno: None,
            message: None,
            remedy: None,
        },
        Err((step, errno)) => classify(step, errno, &Facts::read()).status(),
    }
}

fn probe_step() -> Result<(), (Step, i32)> {
    use std::ffi::CString;
    // SAFETY: geteuid and getegid have no arguments and cannot fail.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    // Everything the child needs is made before the fork: after it the child only makes raw
    // system calls (the caller may have other threads, so the child may not allocate).
    let uid_map = CString::new(format!("{uid} {uid} 1")).expect("no NUL");
    let gid_map = CString::new(format!("{gid} {gid} 1")).expect("no NUL");
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: pipe2 writes two descriptors into the array we own.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err((
            Step::Create,
            std::io::Error::last_os_error().raw_os_error().unwrap_or(0),
        ));
    }
    let [r, w] = fds;
    // SAFETY: the child runs only async-signal-safe system calls on memory prepared above and
    // leaves with _exit.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        // SAFETY: in the child; see probe_child.
        unsafe { probe_child(w, &uid_map, &gid_map) }
    }
    // SAFETY: closing our copy of the write end, which we own.
    unsafe { libc::close(w) };
    if pid < 0 {
        let e = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
        // SAFETY: closing the read end, which we own.
        unsafe { libc::close(r) };
        return Err((Step::Create, e));
    }
    let mut buf = [0u8; 8];
    let mut got = 0usize;
    while got < buf.len() {
        // SAFETY: reads into the rest of a buffer we own.
        let n = unsafe {
            libc::read(
                r,
                buf[got..].as_mut_ptr() as *mut libc::c_void,
                buf.len() - got,
            )
        };
        if n < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
            continue;
        }
        if n <= 0 {
            break;
        }
        got += n as usize;
    }
    // SAFETY: closing the read end, which we own; reaping our own child.
    unsafe {
        libc::close(r);
        let mut st = 0;
        while libc::waitpid(pid, &mut st, 0) < 0
            && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR)
        {}
    }
    if got != buf.len() {
        // The child died without a word: say so rather than guess.
        return Err((Step::Create, libc::ECHILD));
    }
    let code = i32::from_ne_bytes(buf[0..4].try_into().expect("4 bytes"));
    let errno = i32::from_ne_bytes(buf[4..8].try_into().expect("4 bytes"));
    match Step::from_code(code) {
        None => Ok(()),
        Some(step) => Err((step, errno)),
    }
}

/// # Safety
/// Only in the child of `fork`; never returns.
unsafe fn probe_child(w: libc::c_int, uid_map: &std::ffi::CStr, gid_map: &std::ffi::CStr) -> ! {
    unsafe fn report(w: libc::c_int, step: i32) -> ! {
        let e = if step == 0 {
            0
        } else {
            *libc::__errno_location()
        };
        let mut buf = [0u8; 8];
        buf[0..4].copy_from_slice(&step.to_ne_bytes());
        buf[4..8].copy_from_slice(&e.to_ne_bytes());
        libc::write(w, buf.as_ptr() as *const libc::c_void, buf.len());
        libc::_exit(0)
    }
    unsafe fn write_file(path: &std::ffi::CStr, data: &[u8]) -> bool {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY);
        if fd < 0 {
            return false;
        }
        let ok = libc::write(fd, data.as_ptr() as *const libc::c_void, data.len())
            == data.len() as isize;
        libc::close(fd);
        ok
    }
    let flags = libc::CLONE_NEWUSER
        | libc::CLONE_NEWNS
        | libc::CLONE_NEWPID
        | libc::CLONE_NEWNET
        | libc::CLONE_NEWIPC
        | libc::CLONE_NEWUTS;
    if libc::unshare(flags) != 0 {
        report(w, Step::Create.code());
    }
    if !write_file(c"/proc/self/setgroups", b"deny") {
        report(w, Step::Setgroups.code());
    }
    if !write_file(c"/proc/self/uid_map", uid_map.to_bytes()) {
        report(w, Step::UidMap.code());
    }
    if !write_file(c"/proc/self/gid_map", gid_map.to_bytes()) {
        report(w, Step::GidMap.code());
    }
    if libc::mount(
        std::ptr::null(),
        c"/".as_ptr(),
        std::ptr::null(),
        libc::MS_REC | libc::MS_PRIVATE,
        std::ptr::null(),
    ) != 0
    {
        report(w, Step::Mount.code());
    }
    report(w, 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What an ordinary machine shows: everything allowed, no AppArmor, no inherited filter.
    fn open() -> Facts {
        Facts {
            unprivileged_userns_clone: None,
            max_user_namespaces: Some(63_000),
            apparmor: false,
            apparmor_restrict_userns: None,
            inherited_seccomp_filters: Some(0),
        }
    }

    #[test]
    fn debian_sysctl_off_is_named_with_its_line() {
        let f = Facts {
            unprivileged_userns_clone: Some(0),
            ..open()
        };
        let d = classify(Step::Create, libc::EPERM, &f);
        assert_eq!(
            d.refused_by,
            NamespaceRefusal::Sysctl {
                name: "kernel.unprivileged_userns_clone".into()
            }
        );
        assert_eq!(d.message(), "unprivileged user namespaces are disabled by sysctl kernel.unprivileged_userns_clone=0 (creating the user namespace failed with EPERM)");
        assert!(d
            .remedy()
            .contains("`sysctl -w kernel.unprivileged_userns_clone=1`"));
        assert!(d
            .remedy()
            .contains("`kernel.unprivileged_userns_clone = 1` in /etc/sysctl.d/60-gatehouse.conf"));
        // The sysctl wins over a filter that may also be there: it refuses first.
        let both = Facts {
            inherited_seccomp_filters: Some(1),
            ..f
        };
        assert_eq!(
            classify(Step::Create, libc::EPERM, &both).refused_by,
            d.refused_by
        );
    }

    #[test]
    fn max_user_namespaces_zero_is_named_for_eperm_and_enospc() {
        let f = Facts {
            max_user_namespaces: Some(0),
            ..open()
        };
        for e in [libc::EPERM, libc::ENOSPC] {
            let d = classify(Step::Create, e, &f);
            assert_eq!(
                d.refused_by,
                NamespaceRefusal::Sysctl {
                    name: "user.max_user_namespaces".into()
                }
            );
            assert!(d
                .remedy()
                .contains("`sysctl -w user.max_user_namespaces=10000`"));
        }
        // A non-zero limit that is merely reached is not "disabled".
        let full = Facts {
            max_user_namespaces: Some(5),
            ..open()
        };
        assert_eq!(
            classify(Step::Create, libc::ENOSPC, &full).refused_by,
            NamespaceRefusal::Other
        );
    }

    #[test]
    fn an_inherited_filter_is_a_container_runtime_profile() {
        let f = Facts {
            inherited_seccomp_filters: Some(1),
            ..open()
        };
        for (step, e) in [
            (Step::Create, libc::EPERM),
            (Step::Create, libc::ENOSYS),
            (Step::Mount, libc::EPERM),
        ] {
            let d = classify(step, e, &f);
            assert_eq!(d.refused_by, NamespaceRefusal::ContainerSeccomp, "{step:?}");
            assert!(d.message().contains("inherited 1 seccomp filter(s)"));
            assert!(d
                .remedy()
                .starts_with("run gatehouse outside the container"));
        }
        // Our own filters (none inherited) are not blamed.
        assert_eq!(
            classify(Step::Create, libc::EPERM, &open()).refused_by,
            NamespaceRefusal::Other
        );
    }

    #[test]
    fn ubuntu_apparmor_restriction_after_creation() {
        let f = Facts {
            apparmor: true,
            apparmor_restrict_userns: Some(1),
            ..open()
        };
        for (step, e) in [
            (Step::UidMap, libc::EPERM),
            (Step::Setgroups, libc::EACCES),
            (Step::Mount, libc::EPERM),
            (Step::Create, libc::EACCES),
        ] {
            let d = classify(step, e, &f);
            assert_eq!(d.refused_by, NamespaceRefusal::AppArmor, "{step:?}");
            assert!(d.remedy().contains("`sudo gatehouse setup apparmor --yes`"));
        }
        assert_eq!(classify(Step::UidMap, libc::EPERM, &f).message(), "Ubuntu's AppArmor restriction on unprivileged user namespaces (kernel.apparmor_restrict_unprivileged_userns=1) gives the new namespace no capabilities (writing the uid_map failed with EPERM)");
        // The restriction turned off, or AppArmor absent: not blamed.
        for g in [
            Facts {
                apparmor_restrict_userns: Some(0),
                ..f.clone()
            },
            Facts {
                apparmor: false,
                ..f.clone()
            },
        ] {
            assert_eq!(
                classify(Step::UidMap, libc::EPERM, &g).refused_by,
                NamespaceRefusal::Other
            );
        }
        // Another errno is not AppArmor's.
        assert_eq!(
            classify(Step::Mount, libc::EINVAL, &f).refused_by,
            NamespaceRefusal::Other
        );
    }

    #[test]
    fn anything_else_gives_the_step_and_raw_errno() {
        let d = classify(Step::GidMap, libc::EINVAL, &open());
        assert_eq!(d.refused_by, NamespaceRefusal::Other);
        let s = d.status();
        assert!(!s.available);
        assert_eq!(s.step.as_deref(), Some("writing the gid_map"));
        assert_eq!(s.errno.as_deref(), Some("EINVAL"));
        assert!(d
            .message()
            .starts_with("writing the gid_map failed with EINVAL; "));
        assert!(d
            .to_string()
            .starts_with("user namespaces are refused here: "));
        assert!(d.to_string().contains(". To fix: check that the kernel"));
    }

    #[test]
    fn probe_here_matches_what_the_kernel_allows() {
        // Positive control on this machine (CI allows user namespaces): the probe succeeds.
        // The refusals are exercised end to end under tests/ wrappers (userns_refused).
        let s = probe();
        assert!(s.available, "{s:?}");
        assert_eq!(s.refused_by, None);
    }
}
