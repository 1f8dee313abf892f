//! Step 8: a seccomp allowlist per profile (the lists are in `profiles.rs`).
//!
//! A profile is a list of [`Rule`]s, each naming one syscall, optional conditions on its
//! arguments, a [`Verdict`] and why it is there. It is installed as up to four stacked filters
//! (the kernel runs them all and the strictest answer wins: kill > errno > allow):
//!
//! 1. one filter per errno value, returning it for the rules that name it (and allowing
//!    everything else, so these filters only ever narrow);
//! 2. the x32 guard ([`install_x32_guard`]): kills any x86_64 syscall number with the x32 bit
//!    (`nr >= 0x40000000`), whatever the allowlist says;
//! 3. the allowlist: everything the profile names passes (an errno rule's syscall too, so that
//!    filter 1 can answer it); any other syscall, any other architecture (seccompiler checks
//!    `AUDIT_ARCH`) and any argument mismatch kills the whole process with SIGSYS.
//!
//! The allowlist goes in last so that it does not have to permit `seccomp(2)` itself.
//!
//! Every filter, flattened to one line per rule, is committed under `docs/seccomp/` (see
//! [`listing`]); a test fails when a filter and its listing differ.

mod broker;
pub mod listing;
mod names;
mod profiles;

use crate::{LockdownError, Profile};
use seccompiler::{
    sock_filter, BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition,
    SeccompFilter, SeccompRule, TargetArch,
};
use std::collections::{BTreeMap, BTreeSet};

/// What a filter does with a call that matches a rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The call goes through.
    Allow,
    /// The call fails with this errno without reaching the kernel.
    Errno(i32),
}

/// A test on one syscall argument, on its low 32 bits. Every argument compared is an `int`,
/// `unsigned int` or a flag word whose meaningful bits are all in the low half (the kernel
/// truncates those itself), so the high half cannot smuggle anything past the test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arg {
    /// Argument `.0` equals `.1`.
    Eq(u8, u32),
    /// Argument `.0` differs from `.1`.
    Ne(u8, u32),
    /// Argument `.0` masked with `.1` equals `.2`.
    Masked(u8, u32, u32),
    /// Argument `.0` equals the id of the process installing the filter (taken when the filter
    /// is compiled, in that process).
    EqOwnPid(u8),
}

/// One entry of a profile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub syscall: i64,
    /// All must hold; empty means any arguments.
    pub args: Vec<Arg>,
    pub verdict: Verdict,
    /// Why the rule is there.
    pub why: &'static str,
}

/// A profile's rules. Several rules for one syscall are alternatives.
#[derive(Debug, Clone)]
pub struct Policy {
    pub profile: &'static str,
    pub rules: Vec<Rule>,
}

impl Policy {
    /// The rules of `profile`.
    pub fn for_profile(profile: &Profile) -> Policy {
        profiles::policy(profile)
    }

    fn new(profile: &'static str) -> Policy {
        Policy {
            profile,
            rules: Vec::new(),
        }
    }

    /// Allows each of `syscalls` with any arguments.
    fn allow(&mut self, syscalls: &[i64], why: &'static str) {
        for &syscall in syscalls {
            self.push(syscall, &[], Verdict::Allow, why);
        }
    }

    /// Allows `syscall` when all of `args` hold (another rule may allow it otherwise).
    fn allow_if(&mut self, syscall: i64, args: &[Arg], why: &'static str) {
        self.push(syscall, args, Verdict::Allow, why);
    }

    /// Makes each of `syscalls` fail with `errno`.
    fn refuse(&mut self, syscalls: &[i64], errno: i32, why: &'static str) {
        for &syscall in syscalls {
            self.push(syscall, &[], Verdict::Errno(errno), why);
        }
    }

    /// Makes `syscall` fail with `errno` when all of `args` hold.
    fn refuse_if(&mut self, syscall: i64, args: &[Arg], errno: i32, why: &'static str) {
        self.push(syscall, args, Verdict::Errno(errno), why);
    }

    fn push(&mut self, syscall: i64, args: &[Arg], verdict: Verdict, why: &'static str) {
        self.rules.push(Rule {
            syscall,
            args: args.to_vec(),
            verdict,
            why,
        });
    }

    /// The syscalls some call of which can succeed (what `seccomp_allowed_syscalls` counts).
    pub fn allowed_syscalls(&self) -> BTreeSet<i64> {
        self.rules
            .iter()
            .filter(|r| r.verdict == Verdict::Allow)
            .map(|r| r.syscall)
            .collect()
    }

    /// The rules with verdict `Errno(errno)`, as a filter answering them with that errno.
    fn errno_filter(&self, errno: i32, arch: TargetArch) -> Result<BpfProgram, String> {
        let rules = self
            .rules
            .iter()
            .filter(|r| r.verdict == Verdict::Errno(errno));
        let filter = SeccompFilter::new(
            rule_map(rules)?,
            SeccompAction::Allow,
            SeccompAction::Errno(errno as u32),
            arch,
        )
        .map_err(|e| e.to_string())?;
        BpfProgram::try_from(filter).map_err(|e| e.to_string())
    }

    /// Every rule as one allowlist: matches pass, everything else kills the process.
    fn allowlist(&self, arch: TargetArch) -> Result<BpfProgram, String> {
        let filter = SeccompFilter::new(
            rule_map(self.rules.iter())?,
            SeccompAction::KillProcess,
            SeccompAction::Allow,
            arch,
        )
        .map_err(|e| e.to_string())?;
        BpfProgram::try_from(filter).map_err(|e| e.to_string())
    }

    fn errnos(&self) -> BTreeSet<i32> {
        self.rules
            .iter()
            .filter_map(|r| match r.verdict {
                Verdict::Errno(e) => Some(e),
                Verdict::Allow => None,
            })
            .collect()
    }
}

/// Groups rules by syscall for seccompiler; one rule without conditions makes the syscall match
/// whatever its arguments.
fn rule_map<'a>(
    rules: impl Iterator<Item = &'a Rule>,
) -> Result<BTreeMap<i64, Vec<SeccompRule>>, String> {
    let mut by_syscall: BTreeMap<i64, Option<Vec<SeccompRule>>> = BTreeMap::new();
    for rule in rules {
        let entry = by_syscall.entry(rule.syscall).or_insert(Some(Vec::new()));
        if rule.args.is_empty() {
            *entry = None;
        } else if let Some(list) = entry {
            let conditions = rule
                .args
                .iter()
                .map(condition)
                .collect::<Result<Vec<_>, _>>()?;
            list.push(SeccompRule::new(conditions).map_err(|e| e.to_string())?);
        }
    }
    Ok(by_syscall
        .into_iter()
        .map(|(nr, rules)| (nr, rules.unwrap_or_default()))
        .collect())
}

fn condition(arg: &Arg) -> Result<SeccompCondition, String> {
    let (index, op, value) = match *arg {
        Arg::Eq(i, v) => (i, SeccompCmpOp::Eq, v),
        Arg::Ne(i, v) => (i, SeccompCmpOp::Ne, v),
        Arg::Masked(i, mask, v) => (i, SeccompCmpOp::MaskedEq(u64::from(mask)), v),
        Arg::EqOwnPid(i) => (i, SeccompCmpOp::Eq, std::process::id()),
    };
    SeccompCondition::new(index, SeccompCmpArgLen::Dword, op, u64::from(value))
        .map_err(|e| e.to_string())
}

fn target_arch() -> Result<TargetArch, String> {
    TargetArch::try_from(std::env::consts::ARCH)
        .map_err(|_| format!("seccompiler has no filters for {}", std::env::consts::ARCH))
}

/// How many syscalls the profile's allowlist lets through.
pub fn allowed_syscall_count(profile: &Profile) -> u32 {
    Policy::for_profile(profile).allowed_syscalls().len() as u32
}

/// Installs the profile's filters on every thread of the process and returns how many syscalls
/// the allowlist lets through. Part of [`crate::lockdown`]; calling it alone applies only this
/// layer (seccompiler sets no_new_privs first, as the kernel requires).
pub fn install(profile: &Profile) -> Result<u32, LockdownError> {
    let fail = |reason: String| LockdownError::Seccomp {
        profile: profile.name(),
        reason,
    };
    let policy = Policy::for_profile(profile);
    let arch = target_arch().map_err(fail)?;
    // Build everything before installing anything: a half-installed stack would be a process
    // that is neither what it was nor what it should be.
    let mut programs = Vec::new();
    for errno in policy.errnos() {
        programs.push(policy.errno_filter(errno, arch).map_err(fail)?);
    }
    let allowlist = policy.allowlist(arch).map_err(fail)?;
    for program in &programs {
        seccompiler::apply_filter_all_threads(program).map_err(|e| fail(e.to_string()))?;
    }
    install_x32_guard().map_err(|e| match e {
        LockdownError::Seccomp { reason, .. } => fail(reason),
        other => other,
    })?;
    seccompiler::apply_filter_all_threads(&allowlist).map_err(|e| fail(e.to_string()))?;
    Ok(policy.allowed_syscalls().len() as u32)
}

/// The exec helper's second filter in the Landlock tier, where it has no network namespace of
/// its own: inet sockets (v4 and v6) of the stream type and the default or TCP protocol only,
/// anything else EACCES. Landlock's network rules cover TCP alone, so UDP (DNS included),
/// ICMP, SCTP and MPTCP would otherwise reach the host's network from the helper and from
/// every command (which inherits this filter; its own denylist says the same). Unix sockets
/// are untouched. Each rule refuses when all its conditions hold.
pub fn host_network_guard() -> Policy {
    let mut p = Policy::new("exec (Landlock tier)");
    for family in [libc::AF_INET, libc::AF_INET6] {
        let family = family as u32;
        // Types 2..=10: datagram, raw, RDM, seqpacket, DCCP, the rest the kernel knows; the
        // low four bits (SOCK_NONBLOCK and SOCK_CLOEXEC are flags above them).
        for ty in 2..=10u32 {
            p.refuse_if(
                libc::SYS_socket,
                &[Arg::Eq(0, family), Arg::Masked(1, 0xf, ty)],
                libc::EACCES,
                "inet sockets of the stream type only: Landlock's TCP rules are all that bounds the helper's network",
            );
        }
        p.refuse_if(
            libc::SYS_socket,
            &[
                Arg::Eq(0, family),
                Arg::Ne(2, 0),
                Arg::Ne(2, libc::IPPROTO_TCP as u32),
            ],
            libc::EACCES,
            "inet streams of TCP only (SCTP and MPTCP streams are not what Landlock's TCP rules cover)",
        );
    }
    p
}

/// Installs [`host_network_guard`] on every thread (a filter that allows everything else).
pub fn install_host_network_guard() -> Result<(), LockdownError> {
    let p = host_network_guard();
    let fail = |reason: String| LockdownError::Seccomp {
        profile: p.profile,
        reason,
    };
    let arch = target_arch().map_err(fail)?;
    let program = p.errno_filter(libc::EACCES, arch).map_err(fail)?;
    seccompiler::apply_filter_all_threads(&program).map_err(|e| fail(e.to_string()))
}

/// Installs a filter that kills the process on any x32 syscall (x86_64 numbers with bit 30
/// set), which would otherwise reach the same kernel entry points under numbers no allowlist
/// names. A no-op on other architectures. Part of [`install`].
pub fn install_x32_guard() -> Result<(), LockdownError> {
    match x32_guard() {
        Some(program) => {
            seccompiler::apply_filter_all_threads(&program).map_err(|e| LockdownError::Seccomp {
                profile: "x32 guard",
                reason: e.to_string(),
            })
        }
        None => Ok(()),
    }
}

#[cfg(target_arch = "x86_64")]
fn x32_guard() -> Option<BpfProgram> {
    const LD_W_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
    const JEQ_K: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
    const JGE_K: u16 = 0x35; // BPF_JMP | BPF_JGE | BPF_K
    const RET_K: u16 = 0x06; // BPF_RET | BPF_K
    const ARCH_OFFSET: u32 = 4; // offsetof(struct seccomp_data, arch)
    const NR_OFFSET: u32 = 0; // offsetof(struct seccomp_data, nr)
    const AUDIT_ARCH_X86_64: u32 = 62 | 0x8000_0000 | 0x4000_0000;
    const X32_SYSCALL_BIT: u32 = 0x4000_0000;
    let op = |code, jt, jf, k| sock_filter { code, jt, jf, k };
    Some(vec![
        op(LD_W_ABS, 0, 0, ARCH_OFFSET),
        // Another architecture (i386 through int 0x80): kill.
        op(JEQ_K, 1, 0, AUDIT_ARCH_X86_64),
        op(RET_K, 0, 0, libc::SECCOMP_RET_KILL_PROCESS),
        op(LD_W_ABS, 0, 0, NR_OFFSET),
        // x32 bit set (or a negative number): kill; otherwise this filter has no opinion.
        op(JGE_K, 0, 1, X32_SYSCALL_BIT),
        op(RET_K, 0, 0, libc::SECCOMP_RET_KILL_PROCESS),
        op(RET_K, 0, 0, libc::SECCOMP_RET_ALLOW),
    ])
}

#[cfg(not(target_arch = "x86_64"))]
fn x32_guard() -> Option<BpfProgram> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all_profiles() -> Vec<Profile> {
        listing::allowlist_profiles()
    }

    #[test]
    fn every_profile_compiles_to_bpf() {
        let arch = target_arch().unwrap();
        for p in all_profiles() {
            let policy = Policy::for_profile(&p);
            let prog = policy.allowlist(arch).unwrap();
            assert!(
                prog.len() < 4096,
                "{}: {} instructions",
                p.name(),
                prog.len()
            );
            for e in policy.errnos() {
                policy.errno_filter(e, arch).unwrap();
            }
        }
    }

    #[test]
    fn every_rule_says_why() {
        for p in all_profiles() {
            for r in Policy::for_profile(&p).rules {
                assert!(
                    r.why.len() > 10,
                    "{}: syscall {} has no reason",
                    p.name(),
                    r.syscall
                );
            }
        }
    }

    /// The syscalls DESIGN.md keeps out of each profile.
    #[test]
    fn forbidden_syscalls_are_in_no_profile() {
        let never = [
            libc::SYS_ptrace,
            libc::SYS_process_vm_readv,
            libc::SYS_process_vm_writev,
            libc::SYS_kexec_load,
            libc::SYS_init_module,
            libc::SYS_finit_module,
            libc::SYS_delete_module,
            libc::SYS_pidfd_getfd,
            libc::SYS_setns,
            libc::SYS_chroot,
        ];
        for p in all_profiles() {
            let allowed = Policy::for_profile(&p).allowed_syscalls();
            for nr in never {
                assert!(!allowed.contains(&nr), "{} allows syscall {nr}", p.name());
            }
        }
        let no_exec = [libc::SYS_execve, libc::SYS_execveat];
        let no_socket = [libc::SYS_socket, libc::SYS_connect];
        for p in all_profiles() {
            let allowed = Policy::for_profile(&p).allowed_syscalls();
            if p != Profile::Exec {
                for nr in no_exec {
                    assert!(!allowed.contains(&nr), "{} may exec", p.name());
                }
            }
            if !matches!(p, Profile::Exec | Profile::Net) {
                for nr in no_socket {
                    assert!(!allowed.contains(&nr), "{} may open sockets", p.name());
                }
            }
        }
    }

    #[test]
    fn an_errno_rule_never_shadows_an_unconditional_allow() {
        for p in all_profiles() {
            let policy = Policy::for_profile(&p);
            for r in policy.rules.iter().filter(|r| r.args.is_empty()) {
                if let Verdict::Errno(_) = r.verdict {
                    assert!(
                        !policy.allowed_syscalls().contains(&r.syscall),
                        "{}: syscall {} is both allowed and refused",
                        p.name(),
                        r.syscall
                    );
                }
            }
        }
    }
}
