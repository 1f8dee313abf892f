//! Flat listings of every seccomp filter gatehouse installs, one line per rule (syscall,
//! arguments, verdict, why), so that every filter change shows in review as a diff of
//! `docs/seccomp/<file>.txt` (the way Firecracker reviews its filters as JSON). The profiles
//! are composed from shared groups in `profiles.rs`; these listings are what each one adds up
//! to. `sandbox/tests/seccomp_golden.rs` compares them with the committed files.

use super::names::syscall_name;
use super::{Arg, Policy, Verdict};
use crate::linux::command::denylist::{self, Test};
use crate::{FsProfile, Profile};
use ipc_schema::secrets::StoreKind;
use std::fmt::Write;

/// What a listed filter is built from.
pub enum Filter {
    /// A process's own allowlist (`Policy::for_profile`).
    Allowlist(Profile),
    /// The denylist every sandboxed command gets; `inet`: it has the egress proxy.
    CommandDenylist { inet: bool },
    /// The exec helper's second filter in the Landlock tier (`super::host_network_guard`).
    HostNetworkGuard,
}

/// One listed filter.
pub struct Listed {
    /// The listing's file name in `docs/seccomp/`, without `.txt`.
    pub file: &'static str,
    /// Which process gets it.
    pub installed_in: &'static str,
    pub filter: Filter,
}

fn listed(file: &'static str, installed_in: &'static str, filter: Filter) -> Listed {
    Listed {
        file,
        installed_in,
        filter,
    }
}

/// Every seccomp filter gatehouse installs, in one list: the golden test renders each, the
/// invariant tests in `mod.rs` check each allowlist. A new profile is one more line here; then
/// `GATEHOUSE_BLESS=1 cargo test -p sandbox --test seccomp_golden` writes its listing.
pub fn all() -> Vec<Listed> {
    use Filter::{Allowlist, CommandDenylist};
    vec![
        listed(
            "fs",
            "fs-helper",
            Allowlist(Profile::Fs(FsProfile::default())),
        ),
        listed("net", "net-helper", Allowlist(Profile::Net)),
        listed(
            "exec",
            "exec-helper (and, inherited, every command it starts)",
            Allowlist(Profile::Exec),
        ),
        listed(
            "secrets-keyutils",
            "secrets-helper with the kernel keyring store (store = \"keyutils\")",
            Allowlist(Profile::Secrets(StoreKind::Keyutils)),
        ),
        listed(
            "secrets-secret-service",
            "secrets-helper with the Secret Service store (store = \"secret-service\")",
            Allowlist(Profile::Secrets(StoreKind::SecretService)),
        ),
        listed("ui", "ui (the console)", Allowlist(Profile::Ui)),
        listed(
            "gateway",
            "gateway (an agent's MCP front)",
            Allowlist(Profile::Gateway),
        ),
        listed(
            "servers",
            "servers-helper (JSON-RPC to third-party MCP servers)",
            Allowlist(Profile::Servers),
        ),
        listed(
            "broker",
            "the broker proper (the router): policy, approvals, ledger, audit",
            Allowlist(Profile::Broker(FsProfile::default())),
        ),
        listed(
            "exec-command",
            "every command in the exec sandbox without network, on top of the exec profile",
            CommandDenylist { inet: false },
        ),
        listed(
            "exec-command-proxy",
            "every command in the exec sandbox with the egress proxy, on top of the exec profile",
            CommandDenylist { inet: true },
        ),
        listed(
            "exec-landlock-tier",
            "exec-helper in the Landlock tier, after its allowlist (and, inherited, every command it starts)",
            Filter::HostNetworkGuard,
        ),
    ]
}

/// The allowlist profiles of [`all`].
pub fn allowlist_profiles() -> Vec<Profile> {
    all()
        .into_iter()
        .filter_map(|l| match l.filter {
            Filter::Allowlist(p) => Some(p),
            Filter::CommandDenylist { .. } | Filter::HostNetworkGuard => None,
        })
        .collect()
}

const REGENERATE: &str = "GATEHOUSE_BLESS=1 cargo test -p sandbox --test seccomp_golden";

struct Row {
    syscall: String,
    args: String,
    verdict: String,
    why: &'static str,
}

/// The listing of `l`, as committed in `docs/seccomp/`.
pub fn render(l: &Listed) -> String {
    let (header, mut rows) = match &l.filter {
        Filter::Allowlist(p) => allowlist(&Policy::for_profile(p)),
        Filter::CommandDenylist { inet } => command_denylist(*inet),
        Filter::HostNetworkGuard => host_network_guard(),
    };
    // Sorted by syscall, several rules for one syscall in the order the profile adds them.
    rows.sort_by(|a, b| a.syscall.cmp(&b.syscall));
    let mut s = String::new();
    let _ = writeln!(s, "# seccomp filter `{}`: {}", l.file, l.installed_in);
    let _ = writeln!(
        s,
        "# Generated from sandbox/src/linux/seccomp (listing.rs); do not edit. Regenerate:"
    );
    let _ = writeln!(s, "#   {REGENERATE}");
    let _ = writeln!(s, "#");
    for (key, value) in header {
        let _ = writeln!(s, "# {:<13} {value}", format!("{key}:"));
    }
    let _ = writeln!(s, "#");
    let _ = writeln!(
        s,
        "# {:<22} {:<40} {:<24} why",
        "syscall", "arguments", "verdict"
    );
    for r in rows {
        let line = format!(
            "{:<24} {:<40} {:<24} {}",
            r.syscall, r.args, r.verdict, r.why
        );
        let _ = writeln!(s, "{}", line.trim_end());
    }
    s
}

/// `c_long` is the `i64` of `Rule::syscall` on the 64-bit targets the filters are built for.
fn name(nr: libc::c_long) -> String {
    syscall_name(nr).map_or_else(|| format!("nr {nr}"), str::to_string)
}

fn errno_name(e: i32) -> String {
    let name = match e {
        libc::EPERM => "EPERM",
        libc::EACCES => "EACCES",
        libc::ENOSYS => "ENOSYS",
        libc::EAFNOSUPPORT => "EAFNOSUPPORT",
        _ => return format!("errno {e}"),
    };
    format!("errno {name} ({e})")
}

fn arch() -> &'static str {
    if cfg!(target_arch = "x86_64") {
        "x86_64 (AUDIT_ARCH_X86_64)"
    } else if cfg!(target_arch = "aarch64") {
        "aarch64 (AUDIT_ARCH_AARCH64)"
    } else {
        std::env::consts::ARCH
    }
}

fn x32() -> &'static str {
    if cfg!(target_arch = "x86_64") {
        "x86_64 numbers with bit 30 set (nr >= 0x40000000) kill the process, whatever the rules say"
    } else {
        "no x32 ABI on this architecture"
    }
}

fn allowlist(policy: &Policy) -> (Vec<(&'static str, String)>, Vec<Row>) {
    let errnos = policy.errnos();
    let mut stack: Vec<String> = errnos
        .iter()
        .map(|e| format!("{} filter", errno_name(*e)))
        .collect();
    if cfg!(target_arch = "x86_64") {
        stack.push("x32 guard".into());
    }
    stack.push("allowlist".into());
    let header = vec![
        ("kind", "allowlist".to_string()),
        ("default", "kill the process (SIGSYS): any syscall, or any arguments, that no rule below allows".into()),
        ("architecture", format!("{}; a call from any other (i386 through int 0x80, ...) kills the process", arch())),
        ("x32", x32().into()),
        ("filters", format!("{} (in install order; the kernel runs them all and the strictest answer wins: kill > errno > allow)", stack.join(", "))),
        ("arguments", "compared on their low 32 bits; several rules for one syscall are alternatives".into()),
        ("rules", format!("{} ({} syscalls can succeed)", policy.rules.len(), policy.allowed_syscalls().len())),
    ];
    let rows = policy
        .rules
        .iter()
        .map(|r| Row {
            syscall: name(r.syscall),
            args: if r.args.is_empty() {
                "-".into()
            } else {
                r.args
                    .iter()
                    .map(|a| arg_text(r.syscall, a))
                    .collect::<Vec<_>>()
                    .join(" && ")
            },
            verdict: match r.verdict {
                Verdict::Allow => "allow".into(),
                Verdict::Errno(e) => errno_name(e),
            },
            why: r.why,
        })
        .collect();
    (header, rows)
}

fn host_network_guard() -> (Vec<(&'static str, String)>, Vec<Row>) {
    let policy = super::host_network_guard();
    let (_, rows) = allowlist(&policy);
    let header = vec![
        (
            "kind",
            "errno filter (the exec helper has no empty network namespace in this tier)"
                .to_string(),
        ),
        (
            "default",
            "allow: any syscall no rule below refuses (the exec profile's allowlist still applies)"
                .into(),
        ),
        (
            "architecture",
            format!(
                "{}; a call from any other (i386 through int 0x80, ...) kills the process",
                arch()
            ),
        ),
        (
            "arguments",
            "compared on their low 32 bits; each rule refuses when all its conditions hold".into(),
        ),
        ("rules", policy.rules.len().to_string()),
    ];
    (header, rows)
}

fn command_denylist(inet: bool) -> (Vec<(&'static str, String)>, Vec<Row>) {
    let rules = denylist::rules(inet);
    let header = vec![
        ("kind", "denylist (commands are arbitrary programs; DESIGN.md rule 7)".to_string()),
        ("default", "allow: any syscall no rule below refuses (the exec profile, which every command inherits, still applies)".into()),
        ("architecture", format!("{}; a call from any other (i386 through int 0x80, ...) kills the process", arch())),
        ("x32", x32().into()),
        ("filters", "one hand-written BPF program (command/denylist.rs): architecture, x32, then one block per rule".into()),
        ("arguments", "compared on their low 32 bits".into()),
        ("rules", rules.len().to_string()),
    ];
    let rows = rules
        .iter()
        .map(|r| {
            let nr = r.syscall;
            let list = |arg: u8, values: &[u32]| {
                values
                    .iter()
                    .map(|v| value_text(nr, arg, *v))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            Row {
                syscall: name(nr),
                args: match r.when {
                    Test::Always => "-".into(),
                    Test::AnyBit { arg, mask } => {
                        format!("arg{arg} & {} != 0", value_text(nr, arg, mask))
                    }
                    Test::OneOf { arg, values } => format!("arg{arg} in {{{}}}", list(arg, values)),
                    Test::NoneOf { arg, values } => {
                        format!("arg{arg} not in {{{}}}", list(arg, values))
                    }
                },
                verdict: errno_name(r.errno),
                why: r.why,
            }
        })
        .collect();
    (header, rows)
}

fn arg_text(nr: libc::c_long, a: &Arg) -> String {
    match *a {
        Arg::Eq(i, v) => format!("arg{i} == {}", value_text(nr, i, v)),
        Arg::Ne(i, v) => format!("arg{i} != {}", value_text(nr, i, v)),
        Arg::Masked(i, mask, v) => format!(
            "arg{i} & {} == {}",
            value_text(nr, i, mask),
            value_text(nr, i, v)
        ),
        Arg::EqOwnPid(i) => format!("arg{i} == own pid"),
    }
}

/// A value as the constant it is written as in the filters (hexadecimal if it has no name).
fn value_text(nr: libc::c_long, arg: u8, v: u32) -> String {
    if v == 0 && !matches!(nr, libc::SYS_personality) {
        return "0".into();
    }
    let c = |x: i64| x as u32;
    let names: &[(u32, &str)] = match (nr, arg) {
        (libc::SYS_fcntl, 1) => &[
            (c(libc::F_GETFD.into()), "F_GETFD"),
            (c(libc::F_SETFD.into()), "F_SETFD"),
            (c(libc::F_GETFL.into()), "F_GETFL"),
            (c(libc::F_SETFL.into()), "F_SETFL"),
            (c(libc::F_DUPFD_CLOEXEC.into()), "F_DUPFD_CLOEXEC"),
            (c(libc::F_GETLK.into()), "F_GETLK"),
            (c(libc::F_SETLK.into()), "F_SETLK"),
            (c(libc::F_SETLKW.into()), "F_SETLKW"),
            (c(libc::F_OFD_GETLK.into()), "F_OFD_GETLK"),
            (c(libc::F_OFD_SETLK.into()), "F_OFD_SETLK"),
            (c(libc::F_OFD_SETLKW.into()), "F_OFD_SETLKW"),
        ],
        (libc::SYS_ioctl, 1) => &[
            (libc::TCGETS as u32, "TCGETS"),
            (libc::TCSETS as u32, "TCSETS"),
            (libc::TCSETSW as u32, "TCSETSW"),
            (libc::TCSETSF as u32, "TCSETSF"),
            (libc::TCGETS2 as u32, "TCGETS2"),
            (libc::TCSETS2 as u32, "TCSETS2"),
            (libc::TCSETSW2 as u32, "TCSETSW2"),
            (libc::TCSETSF2 as u32, "TCSETSF2"),
            (libc::TIOCGWINSZ as u32, "TIOCGWINSZ"),
            (libc::FIONBIO as u32, "FIONBIO"),
            (libc::TIOCSTI as u32, "TIOCSTI"),
            (libc::TIOCLINUX as u32, "TIOCLINUX"),
        ],
        (libc::SYS_socket | libc::SYS_socketpair, 0) => &[
            (c(libc::AF_UNIX.into()), "AF_UNIX"),
            (c(libc::AF_INET.into()), "AF_INET"),
            (c(libc::AF_INET6.into()), "AF_INET6"),
        ],
        (libc::SYS_mmap | libc::SYS_mprotect, 2) => &[(c(libc::PROT_EXEC.into()), "PROT_EXEC")],
        (libc::SYS_clone | libc::SYS_unshare, 0) => &[
            (c(libc::CLONE_THREAD.into()), "CLONE_THREAD"),
            (c(libc::CLONE_NEWUSER.into()), "CLONE_NEWUSER"),
        ],
        (libc::SYS_prctl, 0) => &[(c(libc::PR_SET_NAME.into()), "PR_SET_NAME")],
        (libc::SYS_getsockopt, 1) => &[(c(libc::SOL_SOCKET.into()), "SOL_SOCKET")],
        (libc::SYS_getsockopt, 2) => &[(c(libc::SO_PEERCRED.into()), "SO_PEERCRED")],
        (libc::SYS_personality, 0) => &[(0, "PER_LINUX"), (0xffff_ffff, "0xffffffff (query)")],
        _ => &[],
    };
    names
        .iter()
        .find(|(value, _)| *value == v)
        .map_or_else(|| format!("{v:#x}"), |(_, n)| n.to_string())
}
