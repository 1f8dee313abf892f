//! Step 7: Landlock, one ruleset per profile.
//!
//! | profile | filesystem | TCP (and UDP from ABI 10) | scopes (ABI 6) | minimum ABI |
//! |---|---|---|---|---|
//! | fs | read on read-only grants, read-write on read-write grants, nothing else | none | yes | 3 |
//! | net | nothing | unrestricted | yes | 1 |
//! | exec | not restricted at this level (see below) | namespace tier: unrestricted (its network namespace is empty); Landlock tier: bind and connect only to its proxy bridge block | yes | 6 |
//! | secrets, ui, gateway | nothing | none | yes | 1 |
//! | broker (the router) | read-write on its config, data and runtime dirs (no exec, no sockets, fifos, links or devices made) | none | abstract sockets only (it kills a misbehaving front) | 3 |
//!
//! Every profile handles every access right of its categories that the running kernel knows,
//! so a right added by a later ABI is denied unless a rule grants it.
//!
//! Why these minimums:
//! - **fs 3**: before ABI 3 Landlock does not control truncation, and `open(O_RDONLY|O_TRUNC)`
//!   of a file under a read-only grant would empty it (it needs only read access there).
//!   ABI 2 (moving files between directories) is below that and comes with it.
//! - **exec 6**: the exec helper's own ruleset is scoping (it may not connect to abstract Unix
//!   sockets or signal processes outside its domain, nor may the commands it runs); without
//!   ABI 6 it would restrict nothing. TCP is left to its network namespace, which is empty
//!   (see `namespaces.rs`): commands need loopback TCP inside their own namespaces for the
//!   egress proxy bridge, and a Landlock TCP rule is per port, not per namespace.
//! - **net, secrets, ui, gateway 1**: all they need from Landlock is "no filesystem", which
//!   ABI 1 gives. TCP (ABI 4) and scoping (ABI 6) are requested too and reported as partial when
//!   missing, but their seccomp filters already refuse what those would stop: no profile but
//!   net and exec may create a socket that can reach anything (ui and gateway only anonymous
//!   pairs), and none but exec may signal another process.
//!
//! Why [`Profile::Exec`] handles no filesystem access: a domain that handles any filesystem
//! right forbids `mount(2)` and `pivot_root(2)` for the process and all its descendants, even
//! inside a new user and mount namespace, which is how each command gets its own filesystem
//! view; and a filesystem ruleset here would bound what every command may write, while the
//! places commands may write (the grants) change at run time. Each command gets its own
//! Landlock ruleset (writes only under its working root) from the exec sandbox instead.
//!
//! The broker (the router) is landlocked only because it starts no process: a Landlock domain is
//! inherited by every child, so a router ruleset would bound every helper. Helpers are started by
//! the spawner (`crate::lockdown_spawner`), which the router forks before it locks itself down.
//! **broker 3** for the same reason as fs: its SQLite files are truncated.

use crate::{FsProfile, LandlockStatus, LockdownError, Profile};
use ::landlock::{
    Access, AccessFs, AccessNet, BitFlags, NetPort, PathBeneath, PathFd, RulesetAttr,
    RulesetCreatedAttr, RulesetError, RulesetStatus, Scope, ABI,
};
use std::path::Path;

/// The newest ABI whose features some profile asks for (scoping). Rulesets request everything
/// up to this ABI, or up to the kernel's ABI when that is newer, so a kernel below it yields a
/// partially enforced ruleset and one above it gets every right it knows handled.
const REQUESTED_ABI: u32 = 6;

/// The Landlock ABI the running kernel offers (0: none, or disabled at boot).
pub fn kernel_abi() -> u32 {
    // SAFETY: with a null attribute pointer, size 0 and LANDLOCK_CREATE_RULESET_VERSION, the
    // syscall reads no memory and creates no descriptor; it only returns the ABI version (or -1
    // with ENOSYS/EOPNOTSUPP when Landlock is missing or disabled).
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            1u32, // LANDLOCK_CREATE_RULESET_VERSION
        )
    };
    u32::try_from(v).unwrap_or(0)
}

/// The lowest Landlock ABI the profile runs with unless `--allow-degraded` was given.
pub fn min_abi(profile: &Profile) -> u32 {
    match profile {
        Profile::Fs(_) | Profile::Broker(_) => 3,
        Profile::Exec => 6,
        Profile::Net | Profile::Secrets(_) | Profile::Ui | Profile::Gateway | Profile::Servers => 1,
    }
}

/// What a profile's ruleset restricts.
enum FsRules<'a> {
    /// Filesystem access is not handled (exec: see the module documentation).
    Unrestricted,
    /// Every filesystem right is handled and none is granted.
    Nothing,
    /// Every filesystem right is handled; the grant roots get what they say.
    Grants(&'a FsProfile),
    /// Every filesystem right is handled; the router's own directories may be read and written
    /// (files and directories only), the listed system files read.
    Router(&'a FsProfile),
}

struct Wants<'a> {
    fs: FsRules<'a>,
    /// Handle TCP bind and connect (and UDP from ABI 10) with no port allowed.
    deny_inet: bool,
    /// Scope abstract Unix sockets and signals to the domain.
    scopes: bool,
    /// Leave signals out of the scopes: the router SIGKILLs a front that broke the protocol
    /// (its seccomp filter allows that signal only, through a pidfd).
    signals_unscoped: bool,
}

fn wants(profile: &Profile) -> Wants<'_> {
    match profile {
        Profile::Fs(grants) => Wants {
            fs: FsRules::Grants(grants),
            deny_inet: true,
            scopes: true,
            signals_unscoped: false,
        },
        // The one helper that opens inet sockets.
        Profile::Net => Wants {
            fs: FsRules::Nothing,
            deny_inet: false,
            scopes: true,
            signals_unscoped: false,
        },
        Profile::Exec => Wants {
            fs: FsRules::Unrestricted,
            deny_inet: false,
            scopes: true,
            signals_unscoped: false,
        },
        // The router: its directories; it connects to nothing. Signals stay unscoped: it kills
        // a front that broke the protocol (helpers it has the spawner kill).
        Profile::Broker(dirs) => Wants {
            fs: FsRules::Router(dirs),
            deny_inet: true,
            scopes: true,
            signals_unscoped: true,
        },
        Profile::Secrets(_) | Profile::Ui | Profile::Gateway | Profile::Servers => Wants {
            fs: FsRules::Nothing,
            deny_inet: true,
            scopes: true,
            signals_unscoped: false,
        },
    }
}

/// The ABI-gated features a profile uses, with the ABI that introduced each.
fn features(profile: &Profile) -> Vec<(u32, &'static str)> {
    let w = wants(profile);
    let mut out = Vec::new();
    if !matches!(w.fs, FsRules::Unrestricted) {
        out.push((1, "filesystem access control"));
        if matches!(w.fs, FsRules::Grants(_) | FsRules::Router(_)) {
            out.push((2, "moving and linking files between directories (REFER)"));
        }
        out.push((3, "truncation control (TRUNCATE)"));
        out.push((5, "device ioctl control (IOCTL_DEV)"));
    }
    if w.deny_inet {
        out.push((4, "TCP bind/connect control"));
    }
    if w.scopes {
        out.push((6, "abstract Unix socket and signal scoping"));
    }
    out
}

/// Decides whether the profile may run on a kernel offering `kernel_abi`: below the profile's
/// minimum it is refused, unless `allow_degraded`, and then the missing features are returned
/// (one line each, for [`crate::LockdownReport::degraded`]).
pub(crate) fn check_abi(
    profile: &Profile,
    kernel_abi: u32,
    allow_degraded: bool,
) -> Result<Vec<String>, LockdownError> {
    let needed = min_abi(profile);
    if kernel_abi >= needed {
        return Ok(Vec::new());
    }
    if !allow_degraded {
        return Err(LockdownError::LandlockTooOld {
            profile: profile.name(),
            found: kernel_abi,
            needed,
        });
    }
    Ok(features(profile)
        .into_iter()
        .filter(|(abi, _)| *abi > kernel_abi && *abi <= needed)
        .map(|(abi, what)| {
            format!(
                "Landlock: {what} (ABI {abi}) is missing: the kernel offers ABI {kernel_abi}, the {} profile needs {needed}",
                profile.name()
            )
        })
        .collect())
}

/// What applying the ruleset achieved.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    pub status: LandlockStatus,
    /// Missing features below the profile's minimum ABI (only with `allow_degraded`).
    pub degraded: Vec<String>,
}

/// Applies the profile's Landlock ruleset to the calling thread (and its future children).
/// Part of [`crate::lockdown`]; calling it alone applies only this layer.
pub fn restrict_self(profile: &Profile, allow_degraded: bool) -> Result<Outcome, LockdownError> {
    restrict_self_with_ports(profile, allow_degraded, None)
}

/// [`restrict_self`], and for the exec profile in the Landlock tier, `exec_ports`: its ruleset
/// then handles TCP bind and connect and allows both to these ports only (its proxy bridge
/// block, see [`super::bridge_ports`]), instead of leaving TCP to a network namespace it does
/// not have.
pub fn restrict_self_with_ports(
    profile: &Profile,
    allow_degraded: bool,
    exec_ports: Option<std::ops::Range<u16>>,
) -> Result<Outcome, LockdownError> {
    let kernel = kernel_abi();
    let degraded = check_abi(profile, kernel, allow_degraded)?;
    if kernel == 0 {
        // check_abi let this through, so allow_degraded is set and `degraded` says why.
        return Ok(Outcome {
            status: LandlockStatus::NotEnforced,
            degraded,
        });
    }
    let fail = |e: RulesetError| LockdownError::Landlock {
        profile: profile.name(),
        reason: e.to_string(),
    };
    let abi = ABI::from(kernel.max(REQUESTED_ABI) as i32);
    let w = wants(profile);
    let mut ruleset = ::landlock::Ruleset::default();
    if !matches!(w.fs, FsRules::Unrestricted) {
        ruleset = ruleset
            .handle_access(AccessFs::from_all(abi))
            .map_err(fail)?;
    }
    let ports = exec_ports.filter(|_| *profile == Profile::Exec);
    if w.deny_inet || ports.is_some() {
        ruleset = ruleset
            .handle_access(AccessNet::from_all(abi))
            .map_err(fail)?;
    }
    if w.scopes {
        let scopes = if w.signals_unscoped {
            Scope::from_all(abi) & !Scope::Signal
        } else {
            Scope::from_all(abi)
        };
        ruleset = ruleset.scope(scopes).map_err(fail)?;
    }
    let mut created = ruleset.create().map_err(fail)?;
    for port in ports.into_iter().flatten() {
        created = created
            .add_rule(NetPort::new(
                port,
                AccessNet::BindTcp | AccessNet::ConnectTcp,
            ))
            .map_err(fail)?;
    }
    if let FsRules::Grants(grants) = w.fs {
        for root in &grants.read_only {
            created = created
                .add_rule(grant_rule(profile, root, read_only_access(), abi)?)
                .map_err(fail)?;
        }
        for root in &grants.read_write {
            created = created
                .add_rule(grant_rule(profile, root, read_write_access(abi), abi)?)
                .map_err(fail)?;
        }
    }
    if let FsRules::Router(dirs) = w.fs {
        for file in &dirs.read_only {
            created = created
                .add_rule(grant_rule(profile, file, read_only_access(), abi)?)
                .map_err(fail)?;
        }
        for dir in &dirs.read_write {
            created = created
                .add_rule(grant_rule(profile, dir, router_access(abi), abi)?)
                .map_err(fail)?;
        }
    }
    let status = created.restrict_self().map_err(fail)?;
    let status = match status.ruleset {
        RulesetStatus::FullyEnforced => LandlockStatus::FullyEnforced,
        RulesetStatus::PartiallyEnforced => LandlockStatus::PartiallyEnforced,
        RulesetStatus::NotEnforced => LandlockStatus::NotEnforced,
    };
    // Below the minimum (allowed by check_abi only with allow_degraded) a ruleset may end up
    // handling nothing at all, e.g. exec's scoping on a kernel before ABI 6; at or above the
    // minimum that cannot happen, and if it does, something is wrong.
    if status == LandlockStatus::NotEnforced && kernel >= min_abi(profile) {
        return Err(LockdownError::Landlock {
            profile: profile.name(),
            reason: format!("the kernel offers ABI {kernel} but the ruleset was not enforced"),
        });
    }
    Ok(Outcome { status, degraded })
}

/// Reading files and listing directories; no execution.
fn read_only_access() -> BitFlags<AccessFs> {
    AccessFs::ReadFile | AccessFs::ReadDir
}

/// Everything the fs helper does under a writable grant: read, write, create, remove, rename,
/// link, truncate. Not: execute, device ioctls, creating device nodes, connecting to sockets.
fn read_write_access(abi: ABI) -> BitFlags<AccessFs> {
    AccessFs::from_all(abi)
        & !(AccessFs::Execute
            | AccessFs::IoctlDev
            | AccessFs::MakeChar
            | AccessFs::MakeBlock
            | AccessFs::ResolveUnix)
}

/// What the router does in its own directories: SQLite's database, journal and WAL files, the
/// policy and its revisions, removing its sockets at shutdown. Not: execute, device ioctls,
/// making sockets, fifos, devices or symbolic links, connecting to sockets.
fn router_access(abi: ABI) -> BitFlags<AccessFs> {
    read_write_access(abi) & !(AccessFs::MakeSock | AccessFs::MakeFifo | AccessFs::MakeSym)
}

/// A rule for one grant root; a root that does not exist is an error, not a skipped rule (a
/// helper that silently lost a grant would fail later in ways nobody can explain).
fn grant_rule(
    profile: &Profile,
    root: &Path,
    access: BitFlags<AccessFs>,
    abi: ABI,
) -> Result<PathBeneath<PathFd>, LockdownError> {
    let fail = |reason: String| LockdownError::Landlock {
        profile: profile.name(),
        reason,
    };
    let meta =
        std::fs::metadata(root).map_err(|e| fail(format!("grant root {}: {e}", root.display())))?;
    let fd = PathFd::new(root).map_err(|e| fail(format!("grant root {}: {e}", root.display())))?;
    // Directory-only rights (list, create, remove) are invalid on a file root.
    let access = if meta.is_dir() {
        access
    } else {
        access & AccessFs::from_file(abi)
    };
    Ok(PathBeneath::new(fd, access))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all_profiles() -> Vec<Profile> {
        vec![
            Profile::Fs(FsProfile::default()),
            Profile::Net,
            Profile::Exec,
            Profile::Secrets(ipc_schema::secrets::StoreKind::Keyutils),
            Profile::Ui,
            Profile::Gateway,
            Profile::Servers,
            Profile::Broker(FsProfile::default()),
        ]
    }

    #[test]
    fn below_the_minimum_is_refused_without_allow_degraded() {
        for p in all_profiles() {
            let min = min_abi(&p);
            for found in 0..min {
                match check_abi(&p, found, false) {
                    Err(LockdownError::LandlockTooOld {
                        profile,
                        found: f,
                        needed,
                    }) => {
                        assert_eq!((profile, f, needed), (p.name(), found, min));
                    }
                    other => panic!("{} at ABI {found}: {other:?}", p.name()),
                }
            }
            for found in min..=9 {
                assert_eq!(check_abi(&p, found, false).unwrap(), Vec::<String>::new());
                assert_eq!(check_abi(&p, found, true).unwrap(), Vec::<String>::new());
            }
        }
    }

    #[test]
    fn allow_degraded_names_what_is_missing() {
        let fs = Profile::Fs(FsProfile::default());
        let d = check_abi(&fs, 2, true).unwrap();
        assert_eq!(d.len(), 1, "{d:?}");
        assert!(d[0].contains("TRUNCATE") && d[0].contains("ABI 2"), "{d:?}");
        let d = check_abi(&fs, 0, true).unwrap();
        assert_eq!(d.len(), 3, "{d:?}");
        assert!(d[0].contains("filesystem access control"), "{d:?}");

        let d = check_abi(&Profile::Exec, 5, true).unwrap();
        assert_eq!(d.len(), 1, "{d:?}");
        assert!(d[0].contains("scoping"), "{d:?}");
        // Exec's ruleset has no filesystem part, so nothing about files is reported missing.
        let d = check_abi(&Profile::Exec, 0, true).unwrap();
        assert!(d.iter().all(|l| !l.contains("filesystem")), "{d:?}");
        assert_eq!(d.len(), 1, "{d:?}");

        let d = check_abi(&Profile::Gateway, 0, true).unwrap();
        assert_eq!(d.len(), 1, "{d:?}");
        assert!(d[0].contains("filesystem access control"), "{d:?}");
    }

    #[test]
    fn minimums_are_as_documented() {
        let mins: Vec<(&str, u32)> = all_profiles()
            .iter()
            .map(|p| (p.name(), min_abi(p)))
            .collect();
        assert_eq!(
            mins,
            vec![
                ("fs", 3),
                ("net", 1),
                ("exec", 6),
                ("secrets", 1),
                ("ui", 1),
                ("gateway", 1),
                ("servers", 1),
                ("broker", 3)
            ]
        );
    }

    #[test]
    fn read_write_grants_exclude_execute_and_devices() {
        let rw = read_write_access(ABI::V7);
        assert!(rw.contains(AccessFs::WriteFile | AccessFs::Truncate | AccessFs::Refer));
        assert!(!rw.intersects(AccessFs::Execute | AccessFs::IoctlDev | AccessFs::MakeChar));
        assert!(!read_only_access().intersects(AccessFs::from_write(ABI::V7)));
    }
}
