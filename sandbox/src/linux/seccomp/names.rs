//! Syscall names for the listings (`listing.rs`): every syscall some filter names, taken from
//! the libc constants the filters are written with, so a number can never be named wrongly.
//! A syscall missing here shows as `nr N` in a listing, and the golden test refuses that.

/// `(number, name)` for each `libc::SYS_name` listed.
macro_rules! table {
    ($($name:ident),* $(,)?) => {
        &[$((libc::$name, stringify!($name)),)*]
    };
}

#[rustfmt::skip]
const COMMON: &[(libc::c_long, &str)] = table![
    SYS_accept, SYS_accept4, SYS_acct, SYS_add_key, SYS_bind, SYS_bpf, SYS_brk, SYS_capget,
    SYS_capset, SYS_chdir, SYS_chroot, SYS_clock_getres, SYS_clock_gettime, SYS_clock_nanosleep,
    SYS_clone, SYS_clone3, SYS_close, SYS_close_range, SYS_connect, SYS_copy_file_range,
    SYS_delete_module, SYS_dup, SYS_dup3, SYS_epoll_create1, SYS_epoll_ctl, SYS_epoll_pwait,
    SYS_epoll_pwait2, SYS_eventfd2, SYS_execve, SYS_execveat, SYS_exit, SYS_exit_group,
    SYS_faccessat, SYS_faccessat2, SYS_fadvise64, SYS_fallocate, SYS_fchdir, SYS_fchmod,
    SYS_fchmodat, SYS_fchmodat2, SYS_fchown, SYS_fchownat, SYS_fcntl, SYS_fdatasync,
    SYS_fgetxattr, SYS_finit_module, SYS_flistxattr, SYS_flock, SYS_fremovexattr, SYS_fsconfig,
    SYS_fsetxattr, SYS_fsmount, SYS_fsopen, SYS_fspick, SYS_fstat, SYS_fstatfs, SYS_fsync,
    SYS_ftruncate, SYS_futex, SYS_futex_waitv, SYS_get_mempolicy, SYS_getcpu, SYS_getcwd,
    SYS_getdents64, SYS_getegid, SYS_geteuid, SYS_getgid, SYS_getgroups, SYS_getitimer,
    SYS_getpeername, SYS_getpgid, SYS_getpid, SYS_getppid, SYS_getpriority, SYS_getrandom,
    SYS_getresgid, SYS_getresuid, SYS_getrlimit, SYS_getrusage, SYS_getsid, SYS_getsockname,
    SYS_getsockopt, SYS_gettid, SYS_gettimeofday, SYS_getuid, SYS_getxattr, SYS_init_module,
    SYS_inotify_add_watch, SYS_inotify_init1, SYS_inotify_rm_watch, SYS_io_uring_enter,
    SYS_io_uring_register, SYS_io_uring_setup, SYS_ioctl, SYS_ioprio_get, SYS_ioprio_set,
    SYS_kexec_file_load, SYS_kexec_load, SYS_keyctl, SYS_kill, SYS_landlock_add_rule,
    SYS_landlock_create_ruleset, SYS_landlock_restrict_self, SYS_lgetxattr, SYS_linkat,
    SYS_listen, SYS_listxattr, SYS_llistxattr, SYS_lremovexattr, SYS_lseek, SYS_lsetxattr,
    SYS_madvise, SYS_mbind, SYS_membarrier, SYS_memfd_create, SYS_mincore, SYS_mkdirat,
    SYS_mknodat, SYS_mlock, SYS_mlock2, SYS_mlockall, SYS_mmap, SYS_mount, SYS_mount_setattr,
    SYS_move_mount, SYS_mprotect, SYS_mremap, SYS_mseal, SYS_msync, SYS_munlock, SYS_munlockall,
    SYS_munmap, SYS_nanosleep, SYS_newfstatat, SYS_open_by_handle_at, SYS_open_tree, SYS_openat,
    SYS_openat2, SYS_perf_event_open, SYS_personality, SYS_pidfd_getfd, SYS_pidfd_open,
    SYS_pidfd_send_signal, SYS_pipe2, SYS_pivot_root, SYS_pkey_alloc, SYS_pkey_free,
    SYS_pkey_mprotect, SYS_ppoll, SYS_prctl, SYS_pread64, SYS_preadv, SYS_preadv2,
    SYS_prlimit64, SYS_process_madvise, SYS_process_vm_readv, SYS_process_vm_writev,
    SYS_pselect6, SYS_ptrace, SYS_pwrite64, SYS_pwritev, SYS_pwritev2, SYS_quotactl, SYS_read,
    SYS_readahead, SYS_readlinkat, SYS_readv, SYS_reboot, SYS_recvfrom, SYS_recvmmsg,
    SYS_recvmsg, SYS_removexattr, SYS_renameat, SYS_renameat2, SYS_request_key,
    SYS_restart_syscall, SYS_rseq, SYS_rt_sigaction, SYS_rt_sigpending, SYS_rt_sigprocmask,
    SYS_rt_sigqueueinfo, SYS_rt_sigreturn, SYS_rt_sigsuspend, SYS_rt_sigtimedwait,
    SYS_rt_tgsigqueueinfo, SYS_sched_get_priority_max, SYS_sched_get_priority_min,
    SYS_sched_getaffinity, SYS_sched_getattr, SYS_sched_getparam, SYS_sched_getscheduler,
    SYS_sched_rr_get_interval, SYS_sched_setaffinity, SYS_sched_setattr, SYS_sched_setparam,
    SYS_sched_setscheduler, SYS_sched_yield, SYS_seccomp, SYS_sendfile, SYS_sendmmsg,
    SYS_sendmsg, SYS_sendto, SYS_set_mempolicy, SYS_set_robust_list, SYS_set_tid_address,
    SYS_setdomainname, SYS_setfsgid, SYS_setfsuid, SYS_setgid, SYS_setgroups, SYS_sethostname,
    SYS_setitimer, SYS_setns, SYS_setpgid, SYS_setpriority, SYS_setregid, SYS_setresgid,
    SYS_setresuid, SYS_setreuid, SYS_setrlimit, SYS_setsid, SYS_setsockopt, SYS_setuid,
    SYS_setxattr, SYS_shutdown, SYS_sigaltstack, SYS_signalfd4, SYS_socket, SYS_socketpair,
    SYS_splice, SYS_statfs, SYS_statx, SYS_swapoff, SYS_swapon, SYS_symlinkat, SYS_sync,
    SYS_sync_file_range, SYS_syncfs, SYS_sysinfo, SYS_syslog, SYS_tee, SYS_tgkill,
    SYS_timer_create, SYS_timer_delete, SYS_timer_getoverrun, SYS_timer_gettime,
    SYS_timer_settime, SYS_timerfd_create, SYS_timerfd_gettime, SYS_timerfd_settime, SYS_times,
    SYS_tkill, SYS_truncate, SYS_umask, SYS_umount2, SYS_uname, SYS_unlinkat, SYS_unshare,
    SYS_userfaultfd, SYS_utimensat, SYS_vmsplice, SYS_wait4, SYS_waitid, SYS_write, SYS_writev,
];

/// The x86_64 syscalls later architectures replaced (`open` by `openat`, ...).
#[cfg(target_arch = "x86_64")]
#[rustfmt::skip]
const X86_64: &[(libc::c_long, &str)] = table![
    SYS_access, SYS_alarm, SYS_arch_prctl, SYS_chmod, SYS_chown, SYS_creat, SYS_dup2,
    SYS_epoll_create, SYS_epoll_wait, SYS_eventfd, SYS_fork, SYS_futimesat, SYS_getdents,
    SYS_getpgrp, SYS_inotify_init, SYS_ioperm, SYS_iopl, SYS_lchown, SYS_link, SYS_lstat,
    SYS_mkdir, SYS_mknod, SYS_open, SYS_pause, SYS_pipe, SYS_poll, SYS_readlink, SYS_rename,
    SYS_rmdir, SYS_select, SYS_signalfd, SYS_stat, SYS_symlink, SYS_time, SYS_unlink,
    SYS_uselib, SYS_utime, SYS_utimes, SYS_vfork,
];
#[cfg(not(target_arch = "x86_64"))]
const X86_64: &[(libc::c_long, &str)] = &[];

/// Numbers the libc crate has no constant for yet.
#[cfg(target_arch = "x86_64")]
const NUMBERED: &[(libc::c_long, &str)] = &[(453, "SYS_map_shadow_stack")];
#[cfg(not(target_arch = "x86_64"))]
const NUMBERED: &[(libc::c_long, &str)] = &[];

/// The name of syscall `nr`, if some filter names it.
pub(super) fn syscall_name(nr: libc::c_long) -> Option<&'static str> {
    COMMON
        .iter()
        .chain(X86_64)
        .chain(NUMBERED)
        .find(|(n, _)| *n == nr)
        .map(|(_, name)| name.trim_start_matches("SYS_"))
}
