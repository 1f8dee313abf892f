//! The seccomp filter every sandboxed command gets: a denylist.
//!
//! Commands are arbitrary programs, so an allowlist cannot fit them (DESIGN.md rule 7). The filter
//! is written as classic BPF by hand rather than with seccompiler because three of its rules are
//! not expressible there: "every syscall number with the x32 bit" is a range, not a list; the
//! terminal ioctls must be compared on the low 32 bits only (the kernel truncates `cmd` to an
//! `unsigned int`, so a 64-bit compare is bypassed by setting a high bit); and the socket rule
//! answers a different errno than the rest.
//!
//! Layout: check the architecture (anything else, e.g. i386 through `int 0x80`, is killed),
//! refuse x32 numbers (killed), then one short block per listed syscall, then allow.

use ipc_schema::tier::ConfinementTier;
use libc::{c_long, sock_filter};

const BPF_LD_W_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
const BPF_JEQ_K: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
const BPF_JGE_K: u16 = 0x35; // BPF_JMP | BPF_JGE | BPF_K
const BPF_JSET_K: u16 = 0x45; // BPF_JMP | BPF_JSET | BPF_K
const BPF_RET_K: u16 = 0x06; // BPF_RET | BPF_K

const RET_KILL_PROCESS: u32 = 0x8000_0000;
const RET_ALLOW: u32 = 0x7fff_0000;
const fn ret_errno(e: i32) -> u32 {
    0x0005_0000 | (e as u32 & 0xffff)
}

// Offsets into struct seccomp_data. Arguments are 64-bit; on the little-endian targets we build
// for, the low half of argument i is at 16 + 8 i.
const OFF_NR: u32 = 0;
const OFF_ARCH: u32 = 4;
const fn off_arg_low(i: u32) -> u32 {
    16 + 8 * i
}
#[cfg(not(target_endian = "little"))]
compile_error!("the command seccomp filter reads argument halves as little-endian");

#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xc000_003e; // AUDIT_ARCH_X86_64
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xc000_00b7; // AUDIT_ARCH_AARCH64
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
compile_error!("the command seccomp filter knows x86_64 and aarch64 only");

/// x32 syscalls are x86_64 numbers with this bit set; they reach the same kernel code under
/// other numbers, so a denylist that does not refuse them all is bypassed.
#[cfg(target_arch = "x86_64")]
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

const TIOCSTI: u32 = 0x5412;
const TIOCLINUX: u32 = 0x541c;
const CLONE_NEWUSER: u32 = 0x1000_0000;
const PER_LINUX: u32 = 0;
const PER_QUERY: u32 = 0xffff_ffff;

/// What a rule of the denylist looks at before refusing. Arguments are compared on their low
/// 32 bits (see `terminal_ioctls_are_compared_on_32_bits`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Test {
    /// Every call of the syscall.
    Always,
    /// Calls whose argument `arg` has any bit of `mask` set.
    AnyBit { arg: u8, mask: u32 },
    /// Calls whose argument `arg` is one of `values`.
    OneOf { arg: u8, values: &'static [u32] },
    /// Calls whose argument `arg` is none of `values`.
    NoneOf { arg: u8, values: &'static [u32] },
}

/// One rule of the denylist: the calls of `syscall` that `when` picks fail with `errno`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refusal {
    pub syscall: c_long,
    pub when: Test,
    pub errno: i32,
    /// Why the rule is there.
    pub why: &'static str,
}

/// Syscalls refused with EPERM whatever their arguments, each with why.
fn refused() -> Vec<(c_long, &'static str)> {
    let mut v: Vec<(c_long, &'static str)> = vec![
        // Reading or writing another process's memory.
        (libc::SYS_ptrace, "debugging other processes"),
        (
            libc::SYS_process_vm_readv,
            "reading another process's memory",
        ),
        (
            libc::SYS_process_vm_writev,
            "writing another process's memory",
        ),
        (
            libc::SYS_pidfd_getfd,
            "stealing another process's descriptors",
        ),
        (
            libc::SYS_process_madvise,
            "acting on another process's memory",
        ),
        // Changing the filesystem view the sandbox built.
        (
            libc::SYS_mount,
            "mounting (would change the view the sandbox built)",
        ),
        (
            libc::SYS_umount2,
            "unmounting (would reveal what a mask hides)",
        ),
        (libc::SYS_pivot_root, "changing the root"),
        (libc::SYS_chroot, "changing the root"),
        (libc::SYS_open_tree, "mount API"),
        (libc::SYS_move_mount, "mount API"),
        (libc::SYS_fsopen, "mount API"),
        (libc::SYS_fsconfig, "mount API"),
        (libc::SYS_fsmount, "mount API"),
        (libc::SYS_fspick, "mount API"),
        (libc::SYS_mount_setattr, "mount API"),
        (libc::SYS_setns, "joining other namespaces"),
        // Kernel keyrings hold other programs' secrets and have a history of bugs.
        (
            libc::SYS_keyctl,
            "kernel keyrings (other programs' secrets, a history of bugs)",
        ),
        (libc::SYS_add_key, "kernel keyrings"),
        (libc::SYS_request_key, "kernel keyrings"),
        // Large kernel attack surface that no ordinary command needs.
        (libc::SYS_bpf, "BPF programs (kernel attack surface)"),
        (
            libc::SYS_perf_event_open,
            "performance counters (side channels, kernel bugs)",
        ),
        (
            libc::SYS_userfaultfd,
            "userfaultfd (used to win kernel races)",
        ),
        (
            libc::SYS_io_uring_setup,
            "io_uring (bypasses syscall filtering)",
        ),
        (libc::SYS_io_uring_enter, "io_uring"),
        (libc::SYS_io_uring_register, "io_uring"),
        // Changing the kernel.
        (libc::SYS_kexec_load, "loading a new kernel"),
        (libc::SYS_kexec_file_load, "loading a new kernel"),
        (libc::SYS_init_module, "loading kernel modules"),
        (libc::SYS_finit_module, "loading kernel modules"),
        (libc::SYS_delete_module, "unloading kernel modules"),
        // Host-wide administration.
        (libc::SYS_syslog, "reading the kernel log"),
        (libc::SYS_acct, "process accounting"),
        (libc::SYS_swapon, "swap"),
        (libc::SYS_swapoff, "swap"),
        (libc::SYS_reboot, "reboot"),
        (libc::SYS_quotactl, "disk quotas"),
        (
            libc::SYS_open_by_handle_at,
            "opening files by handle (escapes mounts)",
        ),
    ];
    #[cfg(target_arch = "x86_64")]
    v.extend([
        (libc::SYS_uselib, "obsolete loader call"),
        (libc::SYS_iopl, "raw I/O ports"),
        (libc::SYS_ioperm, "raw I/O ports"),
    ]);
    v
}

const UNIX_ONLY: &[u32] = &[libc::AF_UNIX as u32];
const UNIX_AND_INET: &[u32] = &[
    libc::AF_UNIX as u32,
    libc::AF_INET as u32,
    libc::AF_INET6 as u32,
];

/// Every rule of the namespace tier's filter (see [`rules_for`]).
pub fn rules(inet: bool) -> Vec<Refusal> {
    rules_for(ConfinementTier::Namespaces, inet)
}

/// Every namespace flag `clone` takes (its low byte is the exit signal, so no `CLONE_NEWTIME`).
const CLONE_NAMESPACES: u32 = (libc::CLONE_NEWNS
    | libc::CLONE_NEWCGROUP
    | libc::CLONE_NEWUTS
    | libc::CLONE_NEWIPC
    | libc::CLONE_NEWPID
    | libc::CLONE_NEWNET) as u32;
/// ... and `unshare`, which also takes `CLONE_NEWTIME`.
const UNSHARE_NAMESPACES: u32 = CLONE_NAMESPACES | libc::CLONE_NEWTIME as u32;
const STREAM_TYPES: &[u32] = &[
    libc::SOCK_STREAM as u32,
    (libc::SOCK_STREAM | libc::SOCK_CLOEXEC) as u32,
    (libc::SOCK_STREAM | libc::SOCK_NONBLOCK) as u32,
    (libc::SOCK_STREAM | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK) as u32,
];
const TCP_PROTOCOLS: &[u32] = &[0, libc::IPPROTO_TCP as u32];
const SELF_ONLY: &[u32] = &[0];

/// Syscalls the landlock tier also refuses whatever their arguments: what the namespace tier's
/// own IPC namespace kept apart, each with why.
fn refused_without_namespaces() -> Vec<(c_long, &'static str)> {
    let sysv = "System V IPC: without an IPC namespace of its own the command would reach the objects of every other process of its user";
    let mq = "POSIX message queues: without an IPC namespace of its own the command would reach the queues of every other process of its user";
    vec![
        (libc::SYS_shmget, sysv),
        (libc::SYS_shmat, sysv),
        (libc::SYS_shmctl, sysv),
        (libc::SYS_semget, sysv),
        (libc::SYS_semop, sysv),
        (libc::SYS_semtimedop, sysv),
        (libc::SYS_semctl, sysv),
        (libc::SYS_msgget, sysv),
        (libc::SYS_msgsnd, sysv),
        (libc::SYS_msgrcv, sysv),
        (libc::SYS_msgctl, sysv),
        (libc::SYS_mq_open, mq),
        (libc::SYS_mq_unlink, mq),
        (libc::SYS_mq_timedsend, mq),
        (libc::SYS_mq_timedreceive, mq),
        (libc::SYS_mq_notify, mq),
        (libc::SYS_mq_getsetattr, mq),
    ]
}

/// Every rule of the filter of a command in `tier`, in the order the program tests them.
/// `inet`: the command may create AF_INET/AF_INET6 sockets (it has the proxy); otherwise only
/// AF_UNIX sockets exist for it. Several rules may test one syscall: each refuses what it picks
/// and lets the rest on to the next.
pub fn rules_for(tier: ConfinementTier, inet: bool) -> Vec<Refusal> {
    let flat = tier == ConfinementTier::Landlock;
    let rule = |syscall, when, errno, why| Refusal {
        syscall,
        when,
        errno,
        why,
    };
    let mut v: Vec<Refusal> = refused()
        .into_iter()
        .map(|(nr, why)| rule(nr, Test::Always, libc::EPERM, why))
        .collect();
    if flat {
        v.extend(
            refused_without_namespaces()
                .into_iter()
                .map(|(nr, why)| rule(nr, Test::Always, libc::EPERM, why)),
        );
    }
    v.push(rule(
        libc::SYS_clone3,
        Test::Always,
        libc::ENOSYS,
        "clone3 passes its flags in memory, which a filter cannot read: ENOSYS makes libc fall back to clone, whose flags are checked",
    ));
    let new_user = Test::AnyBit {
        arg: 0,
        mask: CLONE_NEWUSER,
    };
    let why_userns = "a new user namespace would give the command every capability inside it (and with them mount, and the kernel code reachable only with capabilities)";
    v.push(rule(libc::SYS_clone, new_user, libc::EPERM, why_userns));
    v.push(rule(libc::SYS_unshare, new_user, libc::EPERM, why_userns));
    if flat {
        let why_ns = "other namespaces: without a user namespace the command has no capability to make them, and none of their kernel code runs for it";
        let any = |mask| Test::AnyBit { arg: 0, mask };
        v.push(rule(
            libc::SYS_clone,
            any(CLONE_NAMESPACES),
            libc::EPERM,
            why_ns,
        ));
        v.push(rule(
            libc::SYS_unshare,
            any(UNSHARE_NAMESPACES),
            libc::EPERM,
            why_ns,
        ));
        // Other processes of the user are in reach without a pid namespace: what needs only the
        // same uid (no ptrace access, which Landlock refuses) is refused for any pid but 0.
        let not_self = |arg| Test::NoneOf {
            arg,
            values: SELF_ONLY,
        };
        for (nr, arg, why) in [
            (libc::SYS_prlimit64, 0, "changing another process's resource limits (pid 0, the caller, only): without a pid namespace every process of the user is in reach"),
            (libc::SYS_setpriority, 1, "renicing another process (who 0, the caller, only): without a pid namespace every process of the user is in reach"),
            (libc::SYS_ioprio_set, 1, "changing another process's I/O priority (who 0, the caller, only): without a pid namespace every process of the user is in reach"),
            (libc::SYS_sched_setaffinity, 0, "moving another process between CPUs (pid 0, the caller, only): without a pid namespace every process of the user is in reach"),
            (libc::SYS_sched_setscheduler, 0, "changing another process's scheduling (pid 0, the caller, only): without a pid namespace every process of the user is in reach"),
            (libc::SYS_sched_setparam, 0, "changing another process's scheduling (pid 0, the caller, only): without a pid namespace every process of the user is in reach"),
            (libc::SYS_sched_setattr, 0, "changing another process's scheduling (pid 0, the caller, only): without a pid namespace every process of the user is in reach"),
        ] {
            v.push(rule(nr, not_self(arg), libc::EPERM, why));
        }
    }
    v.push(rule(
        libc::SYS_ioctl,
        Test::OneOf {
            arg: 1,
            values: &[TIOCSTI, TIOCLINUX],
        },
        libc::EPERM,
        "pushing input into a terminal (TIOCSTI) or driving the console (TIOCLINUX) would let a command type into the user's shell; compared on 32 bits, as the kernel ignores the high half",
    ));
    v.push(rule(
        libc::SYS_personality,
        Test::NoneOf {
            arg: 0,
            values: &[PER_LINUX, PER_QUERY],
        },
        libc::EPERM,
        "execution-domain changes (READ_IMPLIES_EXEC, ADDR_NO_RANDOMIZE, ...); querying is fine",
    ));
    let families = Test::NoneOf {
        arg: 0,
        values: if inet { UNIX_AND_INET } else { UNIX_ONLY },
    };
    let why_families = if inet {
        "socket families: Unix, and inet for the proxy; netlink, packet, vsock, bluetooth and the rest never (EAFNOSUPPORT is what programs expect for a family that does not exist)"
    } else {
        "socket families: Unix only (no proxy, no network); netlink, packet, vsock, bluetooth and the rest never (EAFNOSUPPORT is what programs expect for a family that does not exist)"
    };
    v.push(rule(
        libc::SYS_socket,
        families,
        libc::EAFNOSUPPORT,
        why_families,
    ));
    if flat && inet {
        // On the host's network only TCP is held (Landlock's rules are TCP rules): no UDP, no
        // ICMP, no raw, no SCTP or MPTCP, whatever the family.
        v.push(rule(
            libc::SYS_socket,
            Test::NoneOf {
                arg: 1,
                values: STREAM_TYPES,
            },
            libc::EACCES,
            "socket types: stream only (UDP, ICMP and raw sockets would reach the host's network, which Landlock's TCP rules do not cover)",
        ));
        v.push(rule(
            libc::SYS_socket,
            Test::NoneOf {
                arg: 2,
                values: TCP_PROTOCOLS,
            },
            libc::EACCES,
            "socket protocols: the default or TCP only (SCTP and MPTCP streams are not what Landlock's TCP rules cover)",
        ));
    }
    v.push(rule(
        libc::SYS_socketpair,
        families,
        libc::EAFNOSUPPORT,
        why_families,
    ));
    v
}

fn stmt(code: u16, k: u32) -> sock_filter {
    sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

fn jump(code: u16, k: u32, jt: u8, jf: u8) -> sock_filter {
    sock_filter { code, jt, jf, k }
}

/// `if nr == syscall { block }`, where `block` returns or falls through with the syscall
/// number loaded again, so the next rule sees what this one let pass.
fn guarded(out: &mut Vec<sock_filter>, nr: c_long, block: Vec<sock_filter>) {
    let len = u8::try_from(block.len()).expect("a block is short");
    out.push(jump(BPF_JEQ_K, nr as u32, 0, len));
    out.extend(block);
}

/// A block that refuses the call when argument `arg` (low 32 bits) has any bit of `mask`.
fn refuse_flag(arg: u32, mask: u32, errno: i32) -> Vec<sock_filter> {
    vec![
        stmt(BPF_LD_W_ABS, off_arg_low(arg)),
        jump(BPF_JSET_K, mask, 0, 1),
        stmt(BPF_RET_K, ret_errno(errno)),
        stmt(BPF_LD_W_ABS, OFF_NR),
    ]
}

/// A block that refuses the call unless argument `arg` (low 32 bits) is one of `allowed`.
fn allow_values(arg: u32, allowed: &[u32], errno: i32) -> Vec<sock_filter> {
    let n = allowed.len();
    let mut b = vec![stmt(BPF_LD_W_ABS, off_arg_low(arg))];
    for (i, v) in allowed.iter().enumerate() {
        // Past the other comparisons and the refusal, onto the reload.
        let past = u8::try_from(n - i).expect("a short list");
        b.push(jump(BPF_JEQ_K, *v, past, 0));
    }
    b.push(stmt(BPF_RET_K, ret_errno(errno)));
    b.push(stmt(BPF_LD_W_ABS, OFF_NR));
    b
}

/// A block that refuses the call when argument `arg` (low 32 bits) is one of `refused`.
fn refuse_values(arg: u32, refused: &[u32], errno: i32) -> Vec<sock_filter> {
    let mut b = vec![stmt(BPF_LD_W_ABS, off_arg_low(arg))];
    for v in refused {
        b.push(jump(BPF_JEQ_K, *v, 0, 1));
        b.push(stmt(BPF_RET_K, ret_errno(errno)));
    }
    b.push(stmt(BPF_LD_W_ABS, OFF_NR));
    b
}

/// The filter program for [`rules_for`]`(tier, inet)`.
pub(crate) fn program(tier: ConfinementTier, inet: bool) -> Vec<sock_filter> {
    let mut p = vec![
        stmt(BPF_LD_W_ABS, OFF_ARCH),
        jump(BPF_JEQ_K, AUDIT_ARCH, 1, 0),
        stmt(BPF_RET_K, RET_KILL_PROCESS),
        stmt(BPF_LD_W_ABS, OFF_NR),
    ];
    #[cfg(target_arch = "x86_64")]
    {
        p.push(jump(BPF_JGE_K, X32_SYSCALL_BIT, 0, 1));
        p.push(stmt(BPF_RET_K, RET_KILL_PROCESS));
    }
    for r in rules_for(tier, inet) {
        let block = match r.when {
            Test::Always => vec![stmt(BPF_RET_K, ret_errno(r.errno))],
            Test::AnyBit { arg, mask } => refuse_flag(u32::from(arg), mask, r.errno),
            Test::OneOf { arg, values } => refuse_values(u32::from(arg), values, r.errno),
            Test::NoneOf { arg, values } => allow_values(u32::from(arg), values, r.errno),
        };
        guarded(&mut p, r.syscall, block);
    }
    p.push(stmt(BPF_RET_K, RET_ALLOW));
    p
}

/// How many syscalls the filter refuses whatever their arguments (for `doctor`).
pub fn refused_syscall_count() -> usize {
    refused().len()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tiny interpreter for the subset of BPF the filter uses, so the program's decisions can
    /// be checked without installing it.
    fn run(p: &[sock_filter], arch: u32, nr: u32, args: [u64; 6]) -> u32 {
        let mut data = [0u8; 64];
        data[0..4].copy_from_slice(&nr.to_le_bytes());
        data[4..8].copy_from_slice(&arch.to_le_bytes());
        for (i, a) in args.iter().enumerate() {
            data[16 + 8 * i..24 + 8 * i].copy_from_slice(&a.to_le_bytes());
        }
        let mut a: u32 = 0;
        let mut pc = 0usize;
        loop {
            let ins = p[pc];
            match ins.code {
                BPF_LD_W_ABS => {
                    let o = ins.k as usize;
                    a = u32::from_le_bytes(data[o..o + 4].try_into().unwrap());
                    pc += 1;
                }
                BPF_RET_K => return ins.k,
                BPF_JEQ_K | BPF_JGE_K | BPF_JSET_K => {
                    let hit = match ins.code {
                        BPF_JEQ_K => a == ins.k,
                        BPF_JGE_K => a >= ins.k,
                        _ => a & ins.k != 0,
                    };
                    pc += 1 + if hit { ins.jt } else { ins.jf } as usize;
                }
                other => panic!("unexpected opcode {other:#x}"),
            }
        }
    }

    fn nr(n: c_long) -> u32 {
        n as u32
    }

    #[test]
    fn ordinary_calls_are_allowed_and_listed_ones_refused() {
        let p = program(ConfinementTier::Namespaces, false);
        assert_eq!(run(&p, AUDIT_ARCH, nr(libc::SYS_read), [0; 6]), RET_ALLOW);
        assert_eq!(run(&p, AUDIT_ARCH, nr(libc::SYS_execve), [0; 6]), RET_ALLOW);
        for (n, why) in refused() {
            assert_eq!(
                run(&p, AUDIT_ARCH, nr(n), [0; 6]),
                ret_errno(libc::EPERM),
                "{why}"
            );
        }
        assert_eq!(
            run(&p, AUDIT_ARCH, nr(libc::SYS_clone3), [0; 6]),
            ret_errno(libc::ENOSYS)
        );
    }

    #[test]
    fn foreign_architectures_and_x32_are_killed() {
        let p = program(ConfinementTier::Namespaces, false);
        assert_eq!(run(&p, 0x4000_0003, 20, [0; 6]), RET_KILL_PROCESS); // i386
        #[cfg(target_arch = "x86_64")]
        {
            assert_eq!(
                run(
                    &p,
                    AUDIT_ARCH,
                    X32_SYSCALL_BIT | nr(libc::SYS_getpid),
                    [0; 6]
                ),
                RET_KILL_PROCESS
            );
            assert_eq!(run(&p, AUDIT_ARCH, 0xffff_ffff, [0; 6]), RET_KILL_PROCESS);
        }
    }

    #[test]
    fn user_namespaces_are_refused_other_clones_allowed() {
        let p = program(ConfinementTier::Namespaces, false);
        let fork_flags = libc::SIGCHLD as u64;
        let thread_flags = (libc::CLONE_VM | libc::CLONE_THREAD | libc::CLONE_SIGHAND) as u64;
        let clone = nr(libc::SYS_clone);
        assert_eq!(
            run(&p, AUDIT_ARCH, clone, [fork_flags, 0, 0, 0, 0, 0]),
            RET_ALLOW
        );
        assert_eq!(
            run(&p, AUDIT_ARCH, clone, [thread_flags, 0, 0, 0, 0, 0]),
            RET_ALLOW
        );
        let userns = (libc::CLONE_NEWUSER as u64) | fork_flags;
        assert_eq!(
            run(&p, AUDIT_ARCH, clone, [userns, 0, 0, 0, 0, 0]),
            ret_errno(libc::EPERM)
        );
        assert_eq!(
            run(
                &p,
                AUDIT_ARCH,
                nr(libc::SYS_unshare),
                [
                    libc::CLONE_NEWUSER as u64 | libc::CLONE_NEWNS as u64,
                    0,
                    0,
                    0,
                    0,
                    0
                ]
            ),
            ret_errno(libc::EPERM)
        );
        assert_eq!(
            run(
                &p,
                AUDIT_ARCH,
                nr(libc::SYS_unshare),
                [libc::CLONE_FILES as u64, 0, 0, 0, 0, 0]
            ),
            RET_ALLOW
        );
    }

    #[test]
    fn terminal_ioctls_are_compared_on_32_bits() {
        let p = program(ConfinementTier::Namespaces, false);
        let ioctl = nr(libc::SYS_ioctl);
        for cmd in [
            TIOCSTI as u64,
            TIOCLINUX as u64,
            (1u64 << 32) | TIOCSTI as u64,
        ] {
            assert_eq!(
                run(&p, AUDIT_ARCH, ioctl, [0, cmd, 0, 0, 0, 0]),
                ret_errno(libc::EPERM),
                "{cmd:#x}"
            );
        }
        assert_eq!(
            run(&p, AUDIT_ARCH, ioctl, [0, libc::TIOCGWINSZ, 0, 0, 0, 0]),
            RET_ALLOW
        );
    }

    #[test]
    fn socket_families_follow_the_network_mode() {
        let socket = nr(libc::SYS_socket);
        let none = program(ConfinementTier::Namespaces, false);
        let proxy = program(ConfinementTier::Namespaces, true);
        let unix = [libc::AF_UNIX as u64, 1, 0, 0, 0, 0];
        let inet = [libc::AF_INET as u64, 1, 0, 0, 0, 0];
        let inet6 = [libc::AF_INET6 as u64, 2, 0, 0, 0, 0];
        let netlink = [libc::AF_NETLINK as u64, 3, 0, 0, 0, 0];
        let packet = [libc::AF_PACKET as u64, 3, 0, 0, 0, 0];
        let eaf = ret_errno(libc::EAFNOSUPPORT);
        assert_eq!(run(&none, AUDIT_ARCH, socket, unix), RET_ALLOW);
        assert_eq!(run(&none, AUDIT_ARCH, socket, inet), eaf);
        assert_eq!(run(&none, AUDIT_ARCH, socket, inet6), eaf);
        assert_eq!(run(&none, AUDIT_ARCH, socket, netlink), eaf);
        assert_eq!(run(&proxy, AUDIT_ARCH, socket, inet), RET_ALLOW);
        assert_eq!(run(&proxy, AUDIT_ARCH, socket, inet6), RET_ALLOW);
        assert_eq!(run(&proxy, AUDIT_ARCH, socket, packet), eaf);
        // The high half of the family argument is ignored by the kernel, and by us.
        let sneaky = [(1u64 << 32) | libc::AF_UNIX as u64, 1, 0, 0, 0, 0];
        assert_eq!(run(&none, AUDIT_ARCH, socket, sneaky), RET_ALLOW);
    }

    #[test]
    fn personality_may_be_queried_not_changed() {
        let p = program(ConfinementTier::Namespaces, false);
        let pers = nr(libc::SYS_personality);
        assert_eq!(
            run(&p, AUDIT_ARCH, pers, [0xffff_ffff, 0, 0, 0, 0, 0]),
            RET_ALLOW
        );
        assert_eq!(run(&p, AUDIT_ARCH, pers, [0, 0, 0, 0, 0, 0]), RET_ALLOW);
        assert_eq!(
            run(&p, AUDIT_ARCH, pers, [0x0040000, 0, 0, 0, 0, 0]), // ADDR_NO_RANDOMIZE
            ret_errno(libc::EPERM)
        );
    }

    #[test]
    fn the_landlock_tier_also_refuses_what_namespaces_kept_apart() {
        let flat = |inet| program(ConfinementTier::Landlock, inet);
        let ns = program(ConfinementTier::Namespaces, true);
        let socket = nr(libc::SYS_socket);
        let eacces = ret_errno(libc::EACCES);
        let eperm = ret_errno(libc::EPERM);
        let tcp = [libc::AF_INET as u64, libc::SOCK_STREAM as u64, 0, 0, 0, 0];
        let tcp6 = [
            libc::AF_INET6 as u64,
            (libc::SOCK_STREAM | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK) as u64,
            libc::IPPROTO_TCP as u64,
            0,
            0,
            0,
        ];
        let udp = [libc::AF_INET as u64, libc::SOCK_DGRAM as u64, 0, 0, 0, 0];
        let raw = [libc::AF_INET as u64, libc::SOCK_RAW as u64, 1, 0, 0, 0];
        let sctp = [libc::AF_INET as u64, libc::SOCK_STREAM as u64, 132, 0, 0, 0];
        let netlink = [libc::AF_NETLINK as u64, libc::SOCK_RAW as u64, 0, 0, 0, 0];
        assert_eq!(run(&flat(true), AUDIT_ARCH, socket, tcp), RET_ALLOW);
        assert_eq!(run(&flat(true), AUDIT_ARCH, socket, tcp6), RET_ALLOW);
        assert_eq!(run(&flat(true), AUDIT_ARCH, socket, udp), eacces);
        assert_eq!(run(&flat(true), AUDIT_ARCH, socket, raw), eacces);
        assert_eq!(run(&flat(true), AUDIT_ARCH, socket, sctp), eacces);
        assert_eq!(
            run(&flat(true), AUDIT_ARCH, socket, netlink),
            ret_errno(libc::EAFNOSUPPORT)
        );
        assert_eq!(
            run(&flat(false), AUDIT_ARCH, socket, tcp),
            ret_errno(libc::EAFNOSUPPORT)
        );
        // The namespace tier's own network namespace holds UDP: not refused there.
        assert_eq!(run(&ns, AUDIT_ARCH, socket, udp), RET_ALLOW);
        let unshare = nr(libc::SYS_unshare);
        let newnet = [libc::CLONE_NEWNET as u64, 0, 0, 0, 0, 0];
        assert_eq!(run(&flat(false), AUDIT_ARCH, unshare, newnet), eperm);
        let files = [libc::CLONE_FILES as u64, 0, 0, 0, 0, 0];
        assert_eq!(run(&flat(false), AUDIT_ARCH, unshare, files), RET_ALLOW);
        let shmget = nr(libc::SYS_shmget);
        assert_eq!(run(&flat(false), AUDIT_ARCH, shmget, [0; 6]), eperm);
        assert_eq!(run(&ns, AUDIT_ARCH, shmget, [0; 6]), RET_ALLOW);
        let prlimit = nr(libc::SYS_prlimit64);
        assert_eq!(run(&flat(false), AUDIT_ARCH, prlimit, [0; 6]), RET_ALLOW);
        assert_eq!(
            run(&flat(false), AUDIT_ARCH, prlimit, [1234, 0, 0, 0, 0, 0]),
            eperm
        );
        // Rules before still hold: the user-namespace rule for clone.
        let clone = nr(libc::SYS_clone);
        let userns = [(libc::CLONE_NEWUSER | libc::SIGCHLD) as u64, 0, 0, 0, 0, 0];
        assert_eq!(run(&flat(false), AUDIT_ARCH, clone, userns), eperm);
        let fork = [libc::SIGCHLD as u64, 0, 0, 0, 0, 0];
        assert_eq!(run(&flat(false), AUDIT_ARCH, clone, fork), RET_ALLOW);
    }
}
