//! The seccomp allowlist of each profile, one function each, built from shared groups. Every
//! rule says why it is there; anything not named kills the process with SIGSYS.
//!
//! The lists were checked against `strace -f` of the processes they are for: a single-threaded
//! std program doing blocking I/O on a Unix socket, allocating, panicking and aborting; a tokio
//! multi-thread runtime (net, ui, gateway); std::fs (fs); and, for exec, shells and coreutils.
//! `ptrace`, `process_vm_readv` and `process_vm_writev` are in no profile.

use super::{Arg, Policy};
use crate::Profile;
use ipc_schema::secrets::StoreKind;
use libc::{EACCES, ENOSYS, F_DUPFD_CLOEXEC, F_GETFD, F_GETFL, F_SETFD, F_SETFL, PROT_EXEC};

pub(super) fn policy(profile: &Profile) -> Policy {
    let mut p = Policy::new(profile.name());
    match profile {
        Profile::Fs(_) => fs(&mut p),
        Profile::Net => net(&mut p),
        Profile::Exec => exec(&mut p),
        Profile::Secrets(store) => secrets(&mut p, *store),
        Profile::Ui => ui(&mut p),
        Profile::Gateway => gateway(&mut p),
        Profile::Servers => servers(&mut p),
        Profile::Broker(_) => super::broker::broker(&mut p),
    }
    p
}

/// fs-helper: file operations under its grants (Landlock decides where), no sockets, no exec.
fn fs(p: &mut Policy) {
    base(p);
    no_executable_memory(p);
    files(p);
}

/// net-helper: a tokio runtime with inet sockets; no filesystem, no exec.
fn net(p: &mut Policy) {
    base(p);
    no_executable_memory(p);
    no_files(p);
    threads(p);
    event_loop(p);
    inet(p);
}

/// exec-helper: everything ordinary programs need, because every command it runs inherits this
/// filter (seccomp filters are inherited across fork and execve and can never be removed); only
/// the dangerous calls are left out. Each command also gets the exec sandbox's own denylist.
fn exec(p: &mut Policy) {
    base(p);
    any_memory(p);
    process_control(p);
    sandbox_setup(p);
    program_runtime(p);
    all_files(p);
    #[cfg(target_arch = "x86_64")]
    x86_64_legacy(p);
    sockets(p);
    waiting_and_time(p);
    terminal_ioctls_but_injection(p);
    probed_but_refused(p);
}

/// secrets-helper: no filesystem, no sockets, no exec, and only what its backend needs. The
/// Secret Service backend talks over the session bus socket it connected before lockdown
/// (secrets-helper/src/open.rs), which `base` covers; only the kernel keyring backend gets the
/// keyring calls.
fn secrets(p: &mut Policy, store: StoreKind) {
    base(p);
    no_executable_memory(p);
    no_files(p);
    match store {
        StoreKind::Keyutils => p.allow(
            &[libc::SYS_keyctl, libc::SYS_add_key, libc::SYS_request_key],
            "the kernel keyring backend stores, finds and removes credentials",
        ),
        // Linux has no other store; were one configured, the helper runs Unusable and needs
        // nothing more.
        StoreKind::SecretService | StoreKind::Keychain | StoreKind::CredentialManager => {}
    }
}

/// ui: a terminal console (ratatui over crossterm, possibly on tokio); no filesystem, no
/// sockets, no exec. Its terminal and event source are set up before lockdown.
fn ui(p: &mut Policy) {
    base(p);
    no_executable_memory(p);
    no_files(p);
    threads(p);
    event_loop(p);
    for request in [
        libc::TCGETS,
        libc::TCSETS,
        libc::TCSETSW,
        libc::TCSETSF,
        libc::TIOCGWINSZ,
    ] {
        p.allow_if(
            libc::SYS_ioctl,
            &[Arg::Eq(1, request as u32)],
            "terminal attributes (raw mode on and off) and the window size",
        );
    }
    for request in [libc::TCGETS2, libc::TCSETS2, libc::TCSETSW2, libc::TCSETSF2] {
        p.allow_if(
            libc::SYS_ioctl,
            &[Arg::Eq(1, request as u32)],
            "the termios2 forms of the same: crossterm's rustix backend tries them first (falling back to TCGETS/TCSETS only on ENOTTY or EACCES)",
        );
    }
}

/// gateway: MCP over stdio (tokio); no filesystem, no sockets, no exec.
fn gateway(p: &mut Policy) {
    base(p);
    no_executable_memory(p);
    no_files(p);
    threads(p);
    event_loop(p);
}

/// servers-helper: one thread polling the broker channel and the servers' stdio sockets it was
/// passed; no filesystem, no new sockets, no exec, no threads.
fn servers(p: &mut Policy) {
    base(p);
    no_executable_memory(p);
    no_files(p);
    p.allow_if(
        libc::SYS_ioctl,
        &[Arg::Eq(1, libc::FIONBIO as u32)],
        "std's set_nonblocking is ioctl(FIONBIO): each server's socket is polled, never blocked on",
    );
    p.allow(
        &[libc::SYS_shutdown],
        "ending a server's connection: it reads end of file on its stdin",
    );
}

/// What every gatehouse process does after lockdown: blocking I/O on descriptors it already
/// holds, and what the Rust std runtime needs (allocation, locks, panics, abort, sleep).
pub(super) fn base(p: &mut Policy) {
    p.allow(
        &[libc::SYS_read, libc::SYS_readv],
        "reading requests from the broker channel (and stdin)",
    );
    p.allow(
        &[libc::SYS_write, libc::SYS_writev],
        "writing replies to the broker channel, log lines and panic messages to stderr",
    );
    p.allow(
        &[libc::SYS_recvfrom, libc::SYS_recvmsg],
        "std's UnixStream::read is recv(2); recvmsg receives descriptors the broker passes",
    );
    p.allow(
        &[libc::SYS_sendto, libc::SYS_sendmsg],
        "std's UnixStream::write is send(2) with MSG_NOSIGNAL; sendmsg passes descriptors",
    );
    p.allow(&[libc::SYS_close], "dropping descriptors");
    for cmd in [F_GETFD, F_SETFD, F_GETFL, F_SETFL, F_DUPFD_CLOEXEC] {
        p.allow_if(
            libc::SYS_fcntl,
            &[Arg::Eq(1, cmd as u32)],
            "descriptor flags: UnixStream::try_clone (F_DUPFD_CLOEXEC), debug builds' check on OwnedFd drop (F_GETFD)",
        );
    }
    p.allow(
        &[
            libc::SYS_brk,
            libc::SYS_munmap,
            libc::SYS_mremap,
            libc::SYS_madvise,
        ],
        "the allocator grows, shrinks and returns memory",
    );
    p.allow(
        &[libc::SYS_futex],
        "std's mutexes, once-cells and thread parking",
    );
    p.allow(
        &[libc::SYS_rt_sigreturn],
        "returning from a signal handler (std's stack-overflow handler)",
    );
    p.allow(
        &[libc::SYS_rt_sigprocmask, libc::SYS_rt_sigaction],
        "abort() unblocks and resets SIGABRT; std installs its own handlers",
    );
    p.allow(
        &[libc::SYS_sigaltstack],
        "std's stack-overflow handler runs on an alternate stack, removed at thread exit",
    );
    p.allow_if(
        libc::SYS_tgkill,
        &[Arg::EqOwnPid(0)],
        "abort() raises SIGABRT on its own thread; never another process",
    );
    p.allow(
        &[libc::SYS_getpid, libc::SYS_gettid],
        "abort() and panic messages name the process and thread",
    );
    p.allow(
        &[libc::SYS_clock_gettime, libc::SYS_gettimeofday],
        "Instant and SystemTime when the vDSO cannot answer",
    );
    p.allow(
        &[libc::SYS_clock_nanosleep, libc::SYS_nanosleep],
        "thread::sleep (back-off between retries)",
    );
    p.allow(
        &[libc::SYS_restart_syscall],
        "the kernel resumes a sleep interrupted by SIGSTOP/SIGCONT",
    );
    #[cfg(target_arch = "x86_64")]
    p.allow(
        &[libc::SYS_poll],
        "waiting for the broker channel with a timeout",
    );
    p.allow(
        &[libc::SYS_ppoll],
        "waiting for the broker channel with a timeout",
    );
    p.allow(
        &[libc::SYS_sched_yield],
        "std's locks spin before they park",
    );
    p.allow(&[libc::SYS_getrandom], "HashMap's random hash keys");
    p.allow(
        &[libc::SYS_exit, libc::SYS_exit_group],
        "ending a thread, ending the process",
    );
}

/// Memory for processes that run no new code after lockdown: mappings may never be executable.
pub(super) fn no_executable_memory(p: &mut Policy) {
    let not_exec = [Arg::Masked(2, PROT_EXEC as u32, 0)];
    p.allow_if(
        libc::SYS_mmap,
        &not_exec,
        "the allocator and thread stacks; never PROT_EXEC (no new code after lockdown)",
    );
    p.allow_if(
        libc::SYS_mprotect,
        &not_exec,
        "guard pages and malloc heap growth; never PROT_EXEC",
    );
}

/// Profiles with no filesystem: opening any path fails with EACCES, the errno Landlock gives
/// too, so a library probing a file (std reading cgroup CPU quotas for available_parallelism,
/// for example) gets an error it handles instead of killing the process.
fn no_files(p: &mut Policy) {
    #[cfg(target_arch = "x86_64")]
    p.refuse(
        &[libc::SYS_open],
        EACCES,
        "no filesystem: refused like Landlock does",
    );
    p.refuse(
        &[libc::SYS_openat, libc::SYS_openat2],
        EACCES,
        "no filesystem: refused like Landlock does",
    );
}

/// Worker threads (tokio): creating threads, never processes.
pub(super) fn threads(p: &mut Policy) {
    p.allow_if(
        libc::SYS_clone,
        &[Arg::Masked(
            0,
            libc::CLONE_THREAD as u32,
            libc::CLONE_THREAD as u32,
        )],
        "pthread_create; CLONE_THREAD must be set, so no new process can be made",
    );
    p.refuse(
        &[libc::SYS_clone3],
        ENOSYS,
        "clone3 passes its flags in memory seccomp cannot read; ENOSYS makes glibc fall back to clone, whose flags it can",
    );
    p.allow(
        &[libc::SYS_set_robust_list, libc::SYS_rseq],
        "glibc registers both for each new thread",
    );
    p.allow_if(
        libc::SYS_prctl,
        &[Arg::Eq(0, libc::PR_SET_NAME as u32)],
        "worker threads set their names",
    );
    p.allow(
        &[libc::SYS_sched_getaffinity],
        "available_parallelism and glibc's arena sizing count usable CPUs",
    );
}

/// An async runtime's reactor (tokio on mio).
pub(super) fn event_loop(p: &mut Policy) {
    #[cfg(target_arch = "x86_64")]
    p.allow(&[libc::SYS_epoll_wait], "mio's reactor waits for readiness");
    p.allow(
        &[
            libc::SYS_epoll_create1,
            libc::SYS_epoll_ctl,
            libc::SYS_epoll_pwait,
            libc::SYS_epoll_pwait2,
        ],
        "mio's reactor registers descriptors and waits for readiness",
    );
    p.allow(&[libc::SYS_eventfd2], "mio's waker between threads");
    p.allow_if(
        libc::SYS_socketpair,
        &[Arg::Eq(0, libc::AF_UNIX as u32)],
        "tokio's signal driver wakes itself through an anonymous connected pair, which reaches no one",
    );
}

/// The net helper's sockets: TCP and UDP over IPv4 and IPv6, and nothing that listens.
fn inet(p: &mut Policy) {
    for family in [libc::AF_INET, libc::AF_INET6] {
        p.allow_if(
            libc::SYS_socket,
            &[Arg::Eq(0, family as u32)],
            "TCP for fetches and the proxy's upstream, UDP for DNS; no Unix, netlink or packet sockets",
        );
    }
    p.allow(&[libc::SYS_connect], "connecting to checked addresses");
    p.allow(&[libc::SYS_bind], "DNS over UDP binds a random source port");
    p.allow(
        &[libc::SYS_getsockopt, libc::SYS_setsockopt],
        "SO_ERROR after a non-blocking connect; TCP_NODELAY and keepalive",
    );
    p.allow(
        &[libc::SYS_getsockname, libc::SYS_getpeername],
        "which address a connection really reached",
    );
    p.allow(&[libc::SYS_shutdown], "half-closing proxied streams");
    p.allow_if(
        libc::SYS_ioctl,
        &[Arg::Eq(1, libc::FIONBIO as u32)],
        "set_nonblocking on std sockets handed to tokio",
    );
}

/// The fs helper's file operations. Which paths they reach is Landlock's business.
pub(super) fn files(p: &mut Policy) {
    #[cfg(target_arch = "x86_64")]
    p.allow(
        &[libc::SYS_open],
        "opening files under the grants (Landlock decides which)",
    );
    p.allow(
        &[libc::SYS_openat, libc::SYS_openat2],
        "opening files under the grants, openat2 with RESOLVE_BENEATH (Landlock decides which)",
    );
    p.allow(
        &[libc::SYS_newfstatat, libc::SYS_statx, libc::SYS_fstat],
        "metadata for list_dir, search and checks before writing",
    );
    p.allow(&[libc::SYS_getdents64], "listing and searching directories");
    p.allow(
        &[libc::SYS_lseek, libc::SYS_pread64, libc::SYS_pwrite64],
        "reading and writing at offsets (edits, partial reads)",
    );
    p.allow(
        &[libc::SYS_fsync, libc::SYS_fdatasync],
        "durable writes and checkpoints",
    );
    p.allow(
        &[libc::SYS_ftruncate, libc::SYS_fallocate],
        "resizing a file being rewritten",
    );
    p.allow(
        &[libc::SYS_mkdirat, libc::SYS_unlinkat],
        "creating and deleting files and directories",
    );
    p.allow(
        &[libc::SYS_renameat, libc::SYS_renameat2],
        "move_path, and atomic replace-by-rename for writes",
    );
    p.allow(
        &[libc::SYS_linkat, libc::SYS_symlinkat, libc::SYS_readlinkat],
        "links: std::fs::hard_link, creating and resolving symlinks",
    );
    p.allow(
        &[
            libc::SYS_fchmod,
            libc::SYS_fchmodat,
            libc::SYS_fchown,
            libc::SYS_fchownat,
            libc::SYS_utimensat,
        ],
        "keeping a rewritten file's mode, owner and times",
    );
    p.allow(
        &[libc::SYS_copy_file_range, libc::SYS_sendfile],
        "std::fs::copy (checkpoints)",
    );
    p.allow(
        &[libc::SYS_flock],
        "locking the checkpoint directory against a second helper",
    );
    #[cfg(target_arch = "x86_64")]
    p.allow(
        &[
            libc::SYS_mkdir,
            libc::SYS_rmdir,
            libc::SYS_unlink,
            libc::SYS_rename,
            libc::SYS_symlink,
            libc::SYS_readlink,
            libc::SYS_chmod,
        ],
        "std::fs calls these older forms on x86_64",
    );
}

/// Programs load code, JITs write it: memory of any protection.
fn any_memory(p: &mut Policy) {
    p.allow(
        &[
            libc::SYS_mmap,
            libc::SYS_mprotect,
            libc::SYS_mincore,
            libc::SYS_msync,
            libc::SYS_memfd_create,
        ],
        "loaders map code, JITs (node, the JVM, Python's) change protections",
    );
    p.allow(
        &[
            libc::SYS_mlock,
            libc::SYS_mlock2,
            libc::SYS_munlock,
            libc::SYS_mlockall,
            libc::SYS_munlockall,
        ],
        "programs holding keys keep them out of swap (bounded by RLIMIT_MEMLOCK)",
    );
    p.allow(
        &[
            libc::SYS_pkey_alloc,
            libc::SYS_pkey_free,
            libc::SYS_pkey_mprotect,
        ],
        "memory protection keys (V8 protects its JIT code with them)",
    );
    p.allow(
        &[
            libc::SYS_get_mempolicy,
            libc::SYS_set_mempolicy,
            libc::SYS_mbind,
        ],
        "NUMA placement of a program's own memory",
    );
    p.allow(
        &[libc::SYS_membarrier],
        "JIT runtimes synchronise code changes across threads",
    );
    p.allow(&[libc::SYS_mseal], "newer glibc seals its own mappings");
    #[cfg(target_arch = "x86_64")]
    p.allow(
        &[453], // map_shadow_stack (not in libc yet)
        "glibc allocates CET shadow stacks for new threads on CPUs that have them",
    );
}

/// Starting, waiting for and stopping commands.
fn process_control(p: &mut Policy) {
    p.allow(
        &[libc::SYS_clone, libc::SYS_clone3],
        "fork and posix_spawn for each command, threads of multi-threaded programs",
    );
    p.allow(
        &[libc::SYS_execve, libc::SYS_execveat],
        "running the command",
    );
    p.allow(
        &[libc::SYS_wait4, libc::SYS_waitid],
        "reaping commands and their children",
    );
    p.allow(
        &[
            libc::SYS_kill,
            libc::SYS_tkill,
            libc::SYS_tgkill,
            libc::SYS_rt_sigqueueinfo,
            libc::SYS_rt_tgsigqueueinfo,
            libc::SYS_pidfd_open,
            libc::SYS_pidfd_send_signal,
        ],
        "stopping commands on timeout; Landlock scoping keeps signals inside the helper's domain",
    );
    p.allow(
        &[
            libc::SYS_setsid,
            libc::SYS_setpgid,
            libc::SYS_getpgid,
            libc::SYS_getsid,
            libc::SYS_getppid,
        ],
        "each command in its own session and process group; shells' job control",
    );
    p.allow(
        &[libc::SYS_prctl],
        "parent-death signal, child subreaper and no_new_privs in the command setup; programs naming threads",
    );
    p.allow(
        &[
            libc::SYS_set_tid_address,
            libc::SYS_set_robust_list,
            libc::SYS_rseq,
        ],
        "libc start-up of every new program and thread",
    );
    p.allow(
        &[
            libc::SYS_prlimit64,
            libc::SYS_getrlimit,
            libc::SYS_setrlimit,
            libc::SYS_getrusage,
            libc::SYS_times,
        ],
        "per-command limits (processes, file size, memory) and resource accounting",
    );
    for persona in [0u32, 0xffff_ffff] {
        p.allow_if(
            libc::SYS_personality,
            &[Arg::Eq(0, persona)],
            "querying or resetting the execution domain; changing it (disabling ASLR) is refused",
        );
    }
}

/// The exec sandbox each command gets (`crate::linux::command`, whose init process runs under
/// this filter): namespaces, its own filesystem view, dropped capabilities, its own Landlock
/// ruleset and seccomp denylist.
fn sandbox_setup(p: &mut Policy) {
    p.allow(
        &[libc::SYS_unshare],
        "user, mount, pid and net namespaces for each command",
    );
    p.allow(
        &[
            libc::SYS_mount,
            libc::SYS_umount2,
            libc::SYS_pivot_root,
            libc::SYS_open_tree,
            libc::SYS_move_mount,
            libc::SYS_mount_setattr,
            libc::SYS_fsopen,
            libc::SYS_fsconfig,
            libc::SYS_fsmount,
        ],
        "the command's filesystem view, in a mount namespace its own user namespace owns (no effect outside it)",
    );
    p.allow(
        &[libc::SYS_sethostname, libc::SYS_setdomainname],
        "naming the command's own UTS namespace (needs a capability the helper has only there)",
    );
    p.allow(
        &[libc::SYS_seccomp],
        "installing the command's denylist (a filter can only add restrictions)",
    );
    p.allow(
        &[
            libc::SYS_landlock_create_ruleset,
            libc::SYS_landlock_add_rule,
            libc::SYS_landlock_restrict_self,
        ],
        "the command's own Landlock ruleset",
    );
    p.allow(
        &[libc::SYS_capget, libc::SYS_capset],
        "dropping the capabilities a new user namespace grants before running the command",
    );
    p.allow(
        &[
            libc::SYS_setuid,
            libc::SYS_setgid,
            libc::SYS_setgroups,
            libc::SYS_setresuid,
            libc::SYS_setresgid,
            libc::SYS_setreuid,
            libc::SYS_setregid,
            libc::SYS_setfsuid,
            libc::SYS_setfsgid,
        ],
        "identity inside the command's user namespace (no capability outside it, no_new_privs)",
    );
}

/// What ordinary programs ask the kernel about themselves and their machine.
fn program_runtime(p: &mut Policy) {
    p.allow(
        &[
            libc::SYS_getuid,
            libc::SYS_geteuid,
            libc::SYS_getgid,
            libc::SYS_getegid,
            libc::SYS_getgroups,
            libc::SYS_getresuid,
            libc::SYS_getresgid,
        ],
        "programs ask who they run as",
    );
    p.allow(
        &[libc::SYS_uname, libc::SYS_sysinfo, libc::SYS_getcpu],
        "programs ask about the machine",
    );
    p.allow(
        &[
            libc::SYS_sched_getaffinity,
            libc::SYS_sched_setaffinity,
            libc::SYS_sched_getparam,
            libc::SYS_sched_setparam,
            libc::SYS_sched_getscheduler,
            libc::SYS_sched_setscheduler,
            libc::SYS_sched_get_priority_max,
            libc::SYS_sched_get_priority_min,
            libc::SYS_sched_rr_get_interval,
            libc::SYS_sched_getattr,
            libc::SYS_sched_setattr,
            libc::SYS_getpriority,
            libc::SYS_setpriority,
            libc::SYS_ioprio_get,
            libc::SYS_ioprio_set,
        ],
        "CPU counts, nice levels and I/O priority of the command's own processes (raising them needs capabilities it lacks)",
    );
}

/// Files and directories for commands (which paths: the command's own sandbox decides).
fn all_files(p: &mut Policy) {
    p.allow(
        &[
            libc::SYS_openat,
            libc::SYS_openat2,
            libc::SYS_close_range,
            libc::SYS_pread64,
            libc::SYS_pwrite64,
            libc::SYS_preadv,
            libc::SYS_pwritev,
            libc::SYS_preadv2,
            libc::SYS_pwritev2,
            libc::SYS_lseek,
        ],
        "opening, reading and writing files",
    );
    p.allow(&[libc::SYS_fcntl], "locks, descriptor flags, duplication");
    p.allow(
        &[
            libc::SYS_dup,
            libc::SYS_dup3,
            libc::SYS_pipe2,
            libc::SYS_splice,
            libc::SYS_tee,
            libc::SYS_vmsplice,
        ],
        "wiring commands' stdio and pipelines",
    );
    p.allow(
        &[
            libc::SYS_newfstatat,
            libc::SYS_fstat,
            libc::SYS_statx,
            libc::SYS_statfs,
            libc::SYS_fstatfs,
            libc::SYS_faccessat,
            libc::SYS_faccessat2,
            libc::SYS_getdents64,
        ],
        "metadata and directory listings",
    );
    p.allow(
        &[libc::SYS_getcwd, libc::SYS_chdir, libc::SYS_fchdir],
        "the command's working directory",
    );
    p.allow(
        &[
            libc::SYS_mkdirat,
            libc::SYS_unlinkat,
            libc::SYS_renameat,
            libc::SYS_renameat2,
            libc::SYS_linkat,
            libc::SYS_symlinkat,
            libc::SYS_readlinkat,
            libc::SYS_mknodat,
        ],
        "creating, renaming and removing files, links and fifos (device nodes need a capability)",
    );
    p.allow(
        &[
            libc::SYS_fchmod,
            libc::SYS_fchmodat,
            libc::SYS_fchmodat2,
            libc::SYS_fchown,
            libc::SYS_fchownat,
            libc::SYS_umask,
            libc::SYS_utimensat,
        ],
        "modes, owners and times (build tools, archivers)",
    );
    p.allow(
        &[
            libc::SYS_truncate,
            libc::SYS_ftruncate,
            libc::SYS_fallocate,
            libc::SYS_fadvise64,
            libc::SYS_readahead,
            libc::SYS_copy_file_range,
            libc::SYS_sendfile,
        ],
        "sizing, copying and hinting file contents",
    );
    p.allow(
        &[
            libc::SYS_fsync,
            libc::SYS_fdatasync,
            libc::SYS_sync,
            libc::SYS_syncfs,
            libc::SYS_sync_file_range,
            libc::SYS_flock,
        ],
        "durable writes and file locks (package managers, git)",
    );
    p.allow(
        &[
            libc::SYS_getxattr,
            libc::SYS_lgetxattr,
            libc::SYS_fgetxattr,
            libc::SYS_listxattr,
            libc::SYS_llistxattr,
            libc::SYS_flistxattr,
            libc::SYS_setxattr,
            libc::SYS_lsetxattr,
            libc::SYS_fsetxattr,
            libc::SYS_removexattr,
            libc::SYS_lremovexattr,
            libc::SYS_fremovexattr,
        ],
        "extended attributes (cp -a, tar, ls -l)",
    );
    p.allow(
        &[
            libc::SYS_inotify_init1,
            libc::SYS_inotify_add_watch,
            libc::SYS_inotify_rm_watch,
        ],
        "watch modes of build tools and test runners",
    );
}

/// The x86_64 syscalls that later architectures replaced with `*at` and `2` forms. glibc and
/// static binaries (Go, busybox) still call them.
#[cfg(target_arch = "x86_64")]
fn x86_64_legacy(p: &mut Policy) {
    p.allow(
        &[
            libc::SYS_open,
            libc::SYS_creat,
            libc::SYS_stat,
            libc::SYS_lstat,
            libc::SYS_access,
            libc::SYS_getdents,
            libc::SYS_mkdir,
            libc::SYS_rmdir,
            libc::SYS_rename,
            libc::SYS_link,
            libc::SYS_unlink,
            libc::SYS_symlink,
            libc::SYS_readlink,
            libc::SYS_chmod,
            libc::SYS_chown,
            libc::SYS_lchown,
            libc::SYS_utime,
            libc::SYS_utimes,
            libc::SYS_futimesat,
            libc::SYS_mknod,
        ],
        "older forms of the file calls, for programs built against them",
    );
    p.allow(
        &[
            libc::SYS_fork,
            libc::SYS_vfork,
            libc::SYS_getpgrp,
            libc::SYS_arch_prctl,
        ],
        "older process calls; arch_prctl sets up thread-local storage in every new program",
    );
    p.allow(
        &[
            libc::SYS_pipe,
            libc::SYS_dup2,
            libc::SYS_select,
            libc::SYS_epoll_create,
            libc::SYS_epoll_wait,
            libc::SYS_eventfd,
            libc::SYS_signalfd,
            libc::SYS_inotify_init,
            libc::SYS_alarm,
            libc::SYS_pause,
            libc::SYS_time,
        ],
        "older descriptor, event and timer calls",
    );
}

/// Sockets for commands: Unix, and inet, which commands need inside their own network
/// namespaces (the egress proxy bridge listens on loopback TCP there). The exec helper itself is
/// in an empty network namespace (see `namespaces.rs`), so its inet sockets reach nothing. Every
/// other family fails with EACCES: netlink, packet, vsock (which reaches the hypervisor),
/// AF_ALG (kernel crypto) and the rest are kernel surface no command needs.
fn sockets(p: &mut Policy) {
    p.allow(
        &[libc::SYS_socket],
        "Unix sockets for local IPC; inet inside the command's own network namespace",
    );
    p.refuse_if(
        libc::SYS_socket,
        &[
            Arg::Ne(0, libc::AF_UNIX as u32),
            Arg::Ne(0, libc::AF_INET as u32),
            Arg::Ne(0, libc::AF_INET6 as u32),
        ],
        EACCES,
        "no netlink, packet, vsock or other socket families",
    );
    p.allow(
        &[
            libc::SYS_socketpair,
            libc::SYS_connect,
            libc::SYS_bind,
            libc::SYS_listen,
            libc::SYS_accept,
            libc::SYS_accept4,
            libc::SYS_getsockname,
            libc::SYS_getpeername,
            libc::SYS_getsockopt,
            libc::SYS_setsockopt,
            libc::SYS_shutdown,
            libc::SYS_sendmmsg,
            libc::SYS_recvmmsg,
        ],
        "socket I/O of ordinary programs (only Unix and inet sockets can be created, see above)",
    );
}

/// Waiting, timers and signals of ordinary programs.
fn waiting_and_time(p: &mut Policy) {
    p.allow(
        &[
            libc::SYS_pselect6,
            libc::SYS_epoll_create1,
            libc::SYS_epoll_ctl,
            libc::SYS_epoll_pwait,
            libc::SYS_epoll_pwait2,
            libc::SYS_eventfd2,
            libc::SYS_signalfd4,
        ],
        "event loops of ordinary programs",
    );
    p.allow(
        &[
            libc::SYS_timerfd_create,
            libc::SYS_timerfd_settime,
            libc::SYS_timerfd_gettime,
            libc::SYS_timer_create,
            libc::SYS_timer_settime,
            libc::SYS_timer_gettime,
            libc::SYS_timer_getoverrun,
            libc::SYS_timer_delete,
            libc::SYS_getitimer,
            libc::SYS_setitimer,
            libc::SYS_clock_getres,
        ],
        "timers and clocks",
    );
    p.allow(
        &[
            libc::SYS_rt_sigpending,
            libc::SYS_rt_sigsuspend,
            libc::SYS_rt_sigtimedwait,
        ],
        "waiting for signals (shells wait for children this way)",
    );
    p.allow(
        &[libc::SYS_futex_waitv],
        "waiting on several futexes (Wine-style runtimes, newer glibc)",
    );
}

/// Terminal and device ioctls, except the two that type into or take over a terminal.
fn terminal_ioctls_but_injection(p: &mut Policy) {
    p.allow_if(
        libc::SYS_ioctl,
        &[
            Arg::Ne(1, libc::TIOCSTI as u32),
            Arg::Ne(1, libc::TIOCLINUX as u32),
        ],
        "terminal modes, FIONREAD, FIONBIO and device queries; never TIOCSTI or TIOCLINUX (typing into another program's terminal)",
    );
}

/// Calls programs probe for and fall back from: refused with ENOSYS, as if the kernel lacked
/// them, so that (for example) node's libuv falls back from io_uring instead of being killed.
fn probed_but_refused(p: &mut Policy) {
    p.refuse(
        &[
            libc::SYS_io_uring_setup,
            libc::SYS_io_uring_enter,
            libc::SYS_io_uring_register,
        ],
        ENOSYS,
        "io_uring bypasses seccomp for the operations it queues",
    );
    p.refuse(
        &[
            libc::SYS_userfaultfd,
            libc::SYS_perf_event_open,
            libc::SYS_bpf,
        ],
        ENOSYS,
        "kernel attack surface that commands do not need",
    );
    p.refuse(
        &[libc::SYS_keyctl, libc::SYS_add_key, libc::SYS_request_key],
        ENOSYS,
        "the user's kernel keyrings belong to the secrets helper",
    );
}
