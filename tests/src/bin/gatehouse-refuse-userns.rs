//! Test-only wrapper: `gatehouse-refuse-userns MODE -- CMD ARGS...` installs a seccomp filter
//! that makes user namespaces fail the way a machine that refuses them does, then execs CMD
//! (which, and every process it starts, inherits the filter).
//!
//! Modes:
//! - `container`: what Docker's and Podman's default seccomp profiles do to a process without
//!   CAP_SYS_ADMIN: `unshare` fails with EPERM whatever its flags, `clone` with any namespace
//!   flag (NEWUSER, NEWNS, NEWPID, NEWNET, NEWIPC, NEWUTS, NEWCGROUP) fails with EPERM, and
//!   `clone3` fails with ENOSYS for every call (a filter cannot read clone3's flags, which are
//!   behind a pointer; libc then falls back to clone). Plain fork and threads keep working.
//! - `nomount`: the namespace is created and the uid/gid maps can be written, but every mount
//!   call then fails with EPERM (`mount`, `umount2`, `pivot_root`, `open_tree`, `move_mount`,
//!   `mount_setattr`, `fsopen`, `fsconfig`, `fsmount`, `fspick`). This is the shape of Ubuntu's
//!   AppArmor restriction (the namespace exists, the steps that need its capabilities fail) at
//!   the mount step only: seccomp cannot tell a write to /proc/self/uid_map from any other write
//!   (it sees no paths), so the uid_map failure AppArmor causes first is not simulated, and the
//!   cause the machine shows is an inherited seccomp filter, not AppArmor (which this machine
//!   does not have). The AppArmor wording is covered by the classifier's unit tests.
//!
//! The filter allows everything else (it is a fault injector, not a sandbox).

#[cfg(target_os = "linux")]
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};
#[cfg(target_os = "linux")]
use std::collections::BTreeMap;
#[cfg(target_os = "linux")]
use std::os::unix::process::CommandExt;

#[cfg(target_os = "linux")]
const NS_FLAGS: [u64; 7] = [
    libc::CLONE_NEWUSER as u64,
    libc::CLONE_NEWNS as u64,
    libc::CLONE_NEWPID as u64,
    libc::CLONE_NEWNET as u64,
    libc::CLONE_NEWIPC as u64,
    libc::CLONE_NEWUTS as u64,
    libc::CLONE_NEWCGROUP as u64,
];

#[cfg(target_os = "linux")]
fn arch() -> TargetArch {
    #[cfg(target_arch = "x86_64")]
    return TargetArch::x86_64;
    #[cfg(target_arch = "aarch64")]
    return TargetArch::aarch64;
}

#[cfg(target_os = "linux")]
/// A filter answering `errno` for the given calls (an empty rule list: every call of it).
fn filter(rules: BTreeMap<i64, Vec<SeccompRule>>, errno: i32) -> BpfProgram {
    SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(errno as u32),
        arch(),
    )
    .and_then(|f| f.try_into())
    .unwrap_or_else(|e| die(&format!("building the filter: {e}")))
}

#[cfg(target_os = "linux")]
fn die(msg: &str) -> ! {
    eprintln!("gatehouse-refuse-userns: {msg}");
    std::process::exit(120)
}

#[cfg(target_os = "linux")]
fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (mode, cmd) = match args.as_slice() {
        [mode, dash, cmd @ ..] if dash == "--" && !cmd.is_empty() => (mode.as_str(), cmd),
        _ => die("usage: gatehouse-refuse-userns container|nomount -- CMD ARGS..."),
    };
    let mut programs = Vec::new();
    match mode {
        "container" => {
            // clone's flags are its first argument on x86_64 and aarch64.
            let clone_rules = NS_FLAGS
                .iter()
                .map(|&f| {
                    SeccompRule::new(vec![SeccompCondition::new(
                        0,
                        SeccompCmpArgLen::Qword,
                        SeccompCmpOp::MaskedEq(f),
                        f,
                    )
                    .expect("condition")])
                    .expect("rule")
                })
                .collect();
            let mut eperm = BTreeMap::new();
            eperm.insert(libc::SYS_unshare, vec![]);
            eperm.insert(libc::SYS_clone, clone_rules);
            programs.push(filter(eperm, libc::EPERM));
            programs.push(filter(
                BTreeMap::from([(libc::SYS_clone3, vec![])]),
                libc::ENOSYS,
            ));
        }
        "nomount" => {
            let calls = [
                libc::SYS_mount,
                libc::SYS_umount2,
                libc::SYS_pivot_root,
                libc::SYS_open_tree,
                libc::SYS_move_mount,
                libc::SYS_mount_setattr,
                libc::SYS_fsopen,
                libc::SYS_fsconfig,
                libc::SYS_fsmount,
                libc::SYS_fspick,
            ];
            programs.push(filter(
                calls.into_iter().map(|c| (c, vec![])).collect(),
                libc::EPERM,
            ));
        }
        other => die(&format!("unknown mode {other:?} (container or nomount)")),
    }
    // An unprivileged process may install a filter only with no_new_privs.
    if let Err(e) = nix::sys::prctl::set_no_new_privs() {
        die(&format!("no_new_privs: {e}"));
    }
    for p in &programs {
        if let Err(e) = seccompiler::apply_filter(p) {
            die(&format!("installing the filter: {e}"));
        }
    }
    let e = std::process::Command::new(&cmd[0]).args(&cmd[1..]).exec();
    die(&format!("{}: {e}", cmd[0]))
}

#[cfg(not(target_os = "linux"))]
fn main() {
    use ipc_schema::platform::{refuse, Missing};
    refuse("gatehouse-refuse-userns", &[Missing::CommandSandbox])
}
