//! Test builds only: the few raw operations the escape suite's probe program attempts from
//! inside a sandbox (syscalls with no safe wrapper). Each returns the errno it failed with, so a
//! test can assert the exact refusal; the same calls outside a sandbox are the positive controls.

use std::io;
use std::os::fd::RawFd;

/// A raw syscall with up to six arguments; `Ok(return value)` or the errno.
pub fn syscall(nr: i64, args: [u64; 6]) -> io::Result<i64> {
    // SAFETY: test-only probe. The callers pass either integers or pointers into buffers they
    // own for the duration of the call; a wrong argument makes the kernel fail with EFAULT or
    // EINVAL, it cannot make us write memory we do not own except through those buffers.
    let r = unsafe {
        libc::syscall(
            nr as libc::c_long,
            args[0],
            args[1],
            args[2],
            args[3],
            args[4],
            args[5],
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// `ioctl(fd, cmd, &byte)`, with `cmd` passed as a full 64-bit value (so a test can set bits the
/// kernel ignores).
pub fn ioctl_with_byte(fd: RawFd, cmd: u64, byte: u8) -> io::Result<()> {
    let b = byte;
    syscall(
        libc::SYS_ioctl,
        [fd as u64, cmd, &b as *const u8 as u64, 0, 0, 0],
    )
    .map(|_| ())
}

/// `io_uring_setup(8, &params)`.
pub fn io_uring_setup() -> io::Result<i64> {
    let mut params = [0u8; 120]; // struct io_uring_params
    syscall(
        libc::SYS_io_uring_setup,
        [8, params.as_mut_ptr() as u64, 0, 0, 0, 0],
    )
}

/// `bpf(BPF_PROG_LOAD)` of the smallest valid socket filter (`r0 = 0; exit`).
pub fn bpf_load_socket_filter() -> io::Result<i64> {
    // struct bpf_insn: code u8, regs u8, off i16, imm i32.
    let insns: [u64; 2] = [
        // BPF_ALU64 | BPF_MOV | BPF_K, dst r0, imm 0
        0xb7, // BPF_JMP | BPF_EXIT
        0x95,
    ];
    let license = b"GPL\0";
    let mut attr = [0u8; 128]; // union bpf_attr, BPF_PROG_LOAD part
    attr[0..4].copy_from_slice(&1u32.to_ne_bytes()); // prog_type SOCKET_FILTER
    attr[4..8].copy_from_slice(&2u32.to_ne_bytes()); // insn_cnt
    attr[8..16].copy_from_slice(&(insns.as_ptr() as u64).to_ne_bytes());
    attr[16..24].copy_from_slice(&(license.as_ptr() as u64).to_ne_bytes());
    syscall(
        libc::SYS_bpf,
        [5, attr.as_mut_ptr() as u64, attr.len() as u64, 0, 0, 0], // BPF_PROG_LOAD
    )
}

/// `clone3` with an empty argument (size 64): what a modern libc tries first.
pub fn clone3_probe() -> io::Result<i64> {
    let args = [0u64; 8];
    // Flags 0 and no exit signal: if the kernel ran it, it would create a child. Ask for an
    // invalid combination instead (CLONE_THREAD without CLONE_SIGHAND): EINVAL proves the call
    // reached the kernel's argument checks; ENOSYS means it was filtered out.
    let mut a = args;
    a[0] = libc::CLONE_THREAD as u64;
    syscall(libc::SYS_clone3, [a.as_ptr() as u64, 64, 0, 0, 0, 0])
}

/// `clone(CLONE_NEWUSER | SIGCHLD)`; the child (if any) exits at once. Returns the child's pid.
pub fn clone_newuser() -> io::Result<i64> {
    let r = syscall(
        libc::SYS_clone,
        [(libc::CLONE_NEWUSER | libc::SIGCHLD) as u64, 0, 0, 0, 0, 0],
    )?;
    if r == 0 {
        // SAFETY: in the child of a fork-like clone: leave at once without running anything of
        // the parent's state.
        unsafe { libc::_exit(0) }
    }
    let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(r as i32), None);
    Ok(r)
}

/// An x32 system call (getpid with the x32 bit). Only meaningful on x86_64.
pub fn x32_getpid() -> io::Result<i64> {
    syscall(0x4000_0000 | libc::SYS_getpid, [0; 6])
}

/// Forks children that sleep until killed, until fork fails; returns how many were made and the
/// error that stopped it.
pub fn fork_until_refused(max: u32) -> (u32, Option<io::Error>) {
    let mut n = 0;
    while n < max {
        let r = syscall(libc::SYS_clone, [libc::SIGCHLD as u64, 0, 0, 0, 0, 0]);
        match r {
            Ok(0) => loop {
                // SAFETY: the child only pauses until it is killed.
                unsafe { libc::pause() };
            },
            Ok(_) => n += 1,
            Err(e) => return (n, Some(e)),
        }
    }
    (n, None)
}

/// Starts a child in its own session that sleeps `secs` seconds, and returns its pid at once
/// (the child outlives the caller unless something kills it).
pub fn leave_behind(secs: u32) -> io::Result<i64> {
    let r = syscall(libc::SYS_clone, [libc::SIGCHLD as u64, 0, 0, 0, 0, 0])?;
    if r == 0 {
        // SAFETY: the child starts a session and sleeps; it touches none of the parent's state.
        unsafe {
            libc::setsid();
            libc::sleep(secs);
            libc::_exit(0)
        }
    }
    Ok(r)
}
