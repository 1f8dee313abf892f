//! The probe side: this test binary re-executed with `GH_PROBE="<layer> <profile> <action>"`.
//!
//! A probe reads everything it needs from its environment, applies one layer (`none`, `full`
//! lockdown, `landlock` or `seccomp` alone, the `x32guard` alone, or `broker` hardening), prints
//! `locked` or `unlocked` (or `lockdown-error ...` and exits 3), then performs one action and
//! prints its result: `ok[ detail]` or `errno N`. A syscall the profile forbids kills it instead,
//! which the parent sees in the exit status. It runs on the main thread of a fresh process, so
//! lockdown's single-thread rule holds.

use sandbox::linux::{landlock, seccomp};
use sandbox::{FsProfile, LockdownOptions, LockdownReport, Profile};
use std::ffi::CString;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;

pub const ENV: &str = "GH_PROBE";
/// Read-only and read-write grant roots for the fs profile.
pub const ENV_RO: &str = "GH_PROBE_RO";
pub const ENV_RW: &str = "GH_PROBE_RW";
/// The action's argument (a path, a port, a socket name, a shell script).
pub const ENV_ARG: &str = "GH_PROBE_ARG";
/// A variable the env test asks lockdown to keep.
pub const ENV_KEEP: &str = "GH_PROBE_KEEP";

struct Spec {
    layer: String,
    profile: Profile,
    action: String,
    arg: String,
}

fn spec_from_env(raw: &str) -> Spec {
    let mut parts = raw.split(' ');
    let layer = parts.next().unwrap_or_default().to_string();
    let profile_name = parts.next().unwrap_or_default();
    let action = parts.next().unwrap_or_default().to_string();
    let paths = |var: &str| -> Vec<PathBuf> {
        std::env::var_os(var)
            .map(|v| vec![PathBuf::from(v)])
            .unwrap_or_default()
    };
    let profile = match profile_name {
        "fs" => Profile::Fs(FsProfile {
            read_only: paths(ENV_RO),
            read_write: paths(ENV_RW),
        }),
        // The router's own directories are the read-write grant path.
        "broker" => Profile::Broker(FsProfile {
            read_only: Vec::new(),
            read_write: paths(ENV_RW),
        }),
        "net" => Profile::Net,
        "exec" => Profile::Exec,
        "secrets" => Profile::Secrets(ipc_schema::secrets::StoreKind::Keyutils),
        "ui" => Profile::Ui,
        // `none` probes lock nothing down; the profile is never used.
        "gateway" | "none" => Profile::Gateway,
        other => panic!("unknown probe profile {other:?}"),
    };
    Spec {
        layer,
        profile,
        action,
        arg: std::env::var(ENV_ARG).unwrap_or_default(),
    }
}

pub fn run(raw: std::ffi::OsString) -> ExitCode {
    let spec = spec_from_env(raw.to_str().expect("GH_PROBE is UTF-8"));

    // What some actions prepare before the lockdown.
    let mut keep_fds = Vec::new();
    let mut stray_fd = -1;
    if spec.action == "fds" {
        stray_fd = open_dev_null();
        let kept = open_dev_null();
        keep_fds.push(kept);
    }
    let keep_env = if spec.action == "env" {
        vec![ENV_KEEP.to_string()]
    } else {
        Vec::new()
    };
    // Asked before lockdown: getppid is not in every allowlist, and a probe killed by it would
    // prove nothing about the signal it meant to send.
    // SAFETY: getppid has no arguments and cannot fail.
    let parent = unsafe { libc::getppid() };
    if spec.action == "pdeathsig" {
        // SAFETY: PR_SET_PDEATHSIG takes a signal number only.
        unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) };
    }
    let _sleeper = (spec.action == "threads")
        .then(|| std::thread::spawn(|| std::thread::sleep(std::time::Duration::from_secs(60))));

    let report = match apply_layer(&spec, keep_fds.clone(), keep_env) {
        Ok(report) => report,
        Err(e) => {
            say(&format!("lockdown-error {e}"));
            return ExitCode::from(3);
        }
    };

    let result = act(&spec, report.as_ref(), parent, stray_fd, &keep_fds);
    say(&result);
    ExitCode::SUCCESS
}

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

fn apply_layer(
    spec: &Spec,
    keep_fds: Vec<i32>,
    keep_env: Vec<String>,
) -> Result<Option<LockdownReport>, String> {
    let report = match spec.layer.as_str() {
        "none" => {
            say("unlocked");
            return Ok(None);
        }
        "full" => {
            let opts = LockdownOptions {
                allow_degraded: false,
                keep_fds,
                keep_env,
            };
            Some(sandbox::lockdown(&spec.profile, &opts).map_err(|e| e.to_string())?)
        }
        // The full lockdown on a machine that refuses user namespaces the way a container's
        // seccomp profile does (unshare and clone with CLONE_NEWUSER: EPERM; clone3: ENOSYS):
        // the exec profile then locks down in the Landlock tier.
        "full-flat" => {
            refuse_user_namespaces();
            let opts = LockdownOptions {
                allow_degraded: false,
                keep_fds,
                keep_env,
            };
            Some(sandbox::lockdown(&spec.profile, &opts).map_err(|e| e.to_string())?)
        }
        "broker" => match &spec.profile {
            Profile::Broker(dirs) => {
                Some(sandbox::lockdown_router(dirs, false).map_err(|e| e.to_string())?)
            }
            other => {
                return Err(format!(
                    "the broker layer needs the broker profile, not {other:?}"
                ))
            }
        },
        "landlock" => {
            landlock::restrict_self(&spec.profile, false).map_err(|e| e.to_string())?;
            None
        }
        "seccomp" => {
            seccomp::install(&spec.profile).map_err(|e| e.to_string())?;
            None
        }
        "x32guard" => {
            seccomp::install_x32_guard().map_err(|e| e.to_string())?;
            None
        }
        other => panic!("unknown probe layer {other:?}"),
    };
    say("locked");
    Ok(report)
}

/// What gatehouse-refuse-userns's `container` mode does (tests/src/bin), for this process.
fn refuse_user_namespaces() {
    use seccompiler::{
        SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter, SeccompRule,
    };
    let arch = std::env::consts::ARCH
        .try_into()
        .expect("a seccompiler arch");
    let newuser = libc::CLONE_NEWUSER as u64;
    let cond = SeccompCondition::new(
        0,
        SeccompCmpArgLen::Qword,
        SeccompCmpOp::MaskedEq(newuser),
        newuser,
    );
    let rules = [
        (libc::SYS_unshare, vec![]),
        (
            libc::SYS_clone,
            vec![SeccompRule::new(vec![cond.unwrap()]).unwrap()],
        ),
    ];
    for (rules, errno) in [
        (rules.into_iter().collect(), libc::EPERM),
        (
            [(libc::SYS_clone3, vec![])].into_iter().collect(),
            libc::ENOSYS,
        ),
    ] {
        let f = SeccompFilter::new(
            rules,
            SeccompAction::Allow,
            SeccompAction::Errno(errno as u32),
            arch,
        )
        .unwrap();
        let p: seccompiler::BpfProgram = f.try_into().unwrap();
        seccompiler::apply_filter(&p).unwrap();
    }
}

/// `ok` or `errno N` from a raw libc return value.
fn res(r: i64) -> String {
    if r < 0 {
        format!(
            "errno {}",
            std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
        )
    } else {
        "ok".to_string()
    }
}

fn cstr(s: &str) -> CString {
    CString::new(s).expect("no NUL in probe strings")
}

fn open_dev_null() -> i32 {
    // SAFETY: open reads the NUL-terminated path and returns a new descriptor or -1.
    let fd = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY) };
    assert!(fd >= 0, "open /dev/null");
    fd
}

fn open(path: &str, flags: i32) -> i64 {
    let p = cstr(path);
    // SAFETY: open reads the NUL-terminated path; the descriptor, if any, is leaked on purpose.
    i64::from(unsafe { libc::open(p.as_ptr(), flags, 0o644) })
}

fn execve(argv: &[&str]) -> String {
    let args: Vec<CString> = argv.iter().map(|a| cstr(a)).collect();
    let mut ptrs: Vec<*const libc::c_char> = args.iter().map(|a| a.as_ptr()).collect();
    ptrs.push(std::ptr::null());
    let envp: [*const libc::c_char; 1] = [std::ptr::null()];
    // SAFETY: path, argv and envp are NUL-terminated strings and NULL-terminated arrays that
    // outlive the call; execve only returns on failure.
    unsafe { libc::execve(ptrs[0], ptrs.as_ptr(), envp.as_ptr()) };
    res(-1)
}

fn act(
    spec: &Spec,
    report: Option<&LockdownReport>,
    parent: libc::pid_t,
    stray_fd: i32,
    kept: &[i32],
) -> String {
    let arg = spec.arg.as_str();
    match spec.action.as_str() {
        // SAFETY (all raw calls below): plain syscalls with integer arguments or pointers to
        // NUL-terminated strings and buffers owned by this function.
        "socket-inet" => res(unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0) }.into()),
        "socket-unix" => res(unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_STREAM, 0) }.into()),
        "socket-netlink" => {
            res(
                unsafe { libc::socket(libc::AF_NETLINK, libc::SOCK_RAW, libc::NETLINK_ROUTE) }
                    .into(),
            )
        }
        "command-sandbox" => fork_and_wait(command_sandbox),
        "pdeathsig" => {
            let mut sig: libc::c_int = -1;
            res(unsafe { libc::prctl(libc::PR_GET_PDEATHSIG, &mut sig) }.into())
                .replace("ok", &format!("ok {sig}"))
        }
        "execve" => execve(&["/bin/echo", "exec-ok"]),
        "shell" => execve(&["/bin/sh", "-c", arg]),
        "ptrace" => res(unsafe {
            libc::ptrace(
                libc::PTRACE_TRACEME,
                0,
                std::ptr::null_mut::<libc::c_void>(),
                std::ptr::null_mut::<libc::c_void>(),
            )
        }),
        "open-passwd" => res(open("/etc/passwd", libc::O_RDONLY)),
        "read-file" => match std::fs::read_to_string(arg) {
            Ok(s) => format!("ok {s}"),
            Err(e) => format!("errno {}", e.raw_os_error().unwrap_or(0)),
        },
        "write-file" => {
            let fd = open(arg, libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC);
            if fd < 0 {
                return res(fd);
            }
            res(unsafe { libc::write(fd as i32, b"written".as_ptr().cast(), 7) } as i64)
        }
        "trunc" => res(open(arg, libc::O_RDONLY | libc::O_TRUNC)),
        "rename" => {
            let (from, to) = arg.split_once(' ').expect("rename needs two paths");
            let (from, to) = (cstr(from), cstr(to));
            res(unsafe { libc::rename(from.as_ptr(), to.as_ptr()) }.into())
        }
        "x32" => res(unsafe { libc::syscall(0x4000_0000 | libc::SYS_getpid) }),
        "int80" => int80_getpid(),
        "std-work" => std_work(),
        "panic" => panic!("probe panic after lockdown"),
        "abort" => std::process::abort(),
        "fork" => fork_and_wait(|| 0),
        "userns-mount" => fork_and_wait(|| unsafe {
            if libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS) != 0 {
                return errno();
            }
            let r = libc::mount(
                c"none".as_ptr(),
                c"/tmp".as_ptr(),
                c"tmpfs".as_ptr(),
                0,
                std::ptr::null(),
            );
            if r != 0 {
                errno()
            } else {
                0
            }
        }),
        "tcp-bind" => match std::net::TcpListener::bind(("127.0.0.1", port(arg))) {
            Ok(_) => "ok".into(),
            Err(e) => format!("errno {}", e.raw_os_error().unwrap_or(0)),
        },
        "udp-socket" => res(unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM, 0) }.into()),
        "udp6-socket" => {
            res(
                unsafe { libc::socket(libc::AF_INET6, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) }
                    .into(),
            )
        }
        // The exec sandbox's proxy bridge listener, and a connection to it through the same
        // layers: `ok TIER PORT FIRST-LAST` (the block, or `none`).
        "bridge-roundtrip" => {
            let tier = report.and_then(|r| r.exec_tier);
            let pool = sandbox::linux::bridge_ports::pool();
            match sandbox::linux::bridge_ports::listen() {
                Err(e) => format!("errno {}", e.raw_os_error().unwrap_or(0)),
                Ok(l) => {
                    let port = l.local_addr().unwrap().port();
                    match std::net::TcpStream::connect(("127.0.0.1", port)) {
                        Ok(_) => format!(
                            "ok {tier:?} {port} {}",
                            pool.map(|p| format!("{}-{}", p.start, p.end - 1))
                                .unwrap_or("none".into())
                        ),
                        Err(e) => format!("errno {}", e.raw_os_error().unwrap_or(0)),
                    }
                }
            }
        }
        "tcp-connect" => match std::net::TcpStream::connect(("127.0.0.1", port(arg))) {
            Ok(_) => "ok".into(),
            Err(e) => format!("errno {}", e.raw_os_error().unwrap_or(0)),
        },
        "abstract-connect" => abstract_connect(arg),
        "mprotect-exec" => {
            let p = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    4096,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
            };
            assert_ne!(p, libc::MAP_FAILED, "mmap of a writable page");
            res(unsafe { libc::mprotect(p, 4096, libc::PROT_READ | libc::PROT_EXEC) }.into())
        }
        "kill-parent" => res(unsafe { libc::kill(parent, 0) }.into()),
        "tgkill-parent" => res(unsafe { libc::syscall(libc::SYS_tgkill, parent, parent, 0) }),
        "clone3" => res(unsafe {
            libc::syscall(
                libc::SYS_clone3,
                std::ptr::null_mut::<libc::c_void>(),
                0usize,
            )
        }),
        "mmap-exec" => {
            let p = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    4096,
                    libc::PROT_READ | libc::PROT_EXEC,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
            };
            if p == libc::MAP_FAILED {
                res(-1)
            } else {
                "ok".into()
            }
        }
        "tokio-connect" => tokio_connect(port(arg)),
        "tokio-runtime" => tokio_runtime(),
        "ioctl-tiocsti" => {
            let c = b'x';
            res(unsafe { libc::ioctl(0, libc::TIOCSTI, &c) }.into())
        }
        "ioctl-winsize" => {
            let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
            res(unsafe { libc::ioctl(0, libc::TIOCGWINSZ, &mut ws) }.into())
        }
        "ioctl-fionread" => {
            let mut n: libc::c_int = 0;
            res(unsafe { libc::ioctl(0, libc::FIONREAD, &mut n) }.into())
        }
        "io-uring" => res(unsafe {
            libc::syscall(
                libc::SYS_io_uring_setup,
                1u32,
                std::ptr::null_mut::<libc::c_void>(),
            )
        }),
        "keyctl" => res(unsafe {
            // KEYCTL_GET_KEYRING_ID of the user keyring, without creating it.
            libc::syscall(libc::SYS_keyctl, 0, -4i32, 0)
        }),
        "wait" => {
            say("ready");
            let mut sink = Vec::new();
            let _ = std::io::stdin().read_to_end(&mut sink);
            "ok".into()
        }
        "fds" => {
            let stray = res(unsafe { libc::fcntl(stray_fd, libc::F_GETFD) }.into());
            let kept = res(unsafe { libc::fcntl(kept[0], libc::F_GETFD) }.into());
            format!("ok stray={stray} kept={kept}")
        }
        "env" => {
            let mut vars: Vec<String> = std::env::vars_os()
                .map(|(k, v)| format!("{}={}", k.to_string_lossy(), v.to_string_lossy()))
                .collect();
            vars.sort();
            format!("ok {}", vars.join(" "))
        }
        "report" => {
            let r = report.expect("report needs the full layer");
            format!(
                "ok profile={} fds={} env={} core={} dumpable={} nnp={} caps={} abi={} min={} landlock={:?} seccomp={} syscalls={} ns={} degraded={}",
                r.profile,
                r.stray_fds_closed,
                r.env_cleared,
                r.core_dumps_off,
                r.dumpable_off,
                r.no_new_privs,
                r.capabilities_dropped,
                r.landlock_abi,
                r.landlock_min_abi,
                r.landlock,
                r.seccomp_filter,
                r.seccomp_allowed_syscalls,
                r.namespaces.join(","),
                r.degraded.len()
            )
        }
        "proc-status" => {
            let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
            let pick: Vec<&str> = s
                .lines()
                .filter(|l| l.starts_with("NoNewPrivs") || l.starts_with("Seccomp:"))
                .collect();
            let dumpable = unsafe { libc::prctl(libc::PR_GET_DUMPABLE, 0, 0, 0, 0) };
            let mut core = libc::rlimit {
                rlim_cur: 1,
                rlim_max: 1,
            };
            unsafe { libc::getrlimit(libc::RLIMIT_CORE, &mut core) };
            format!(
                "ok {} Dumpable:{dumpable} Core:{}/{}",
                pick.join(" ").replace('\t', ""),
                core.rlim_cur,
                core.rlim_max
            )
        }
        "nothing" => "ok".into(),
        other => panic!("unknown probe action {other:?}"),
    }
}

/// getpid through the i386 entry point (`int 0x80`, syscall 20 there): seccomp sees
/// AUDIT_ARCH_I386, which no filter of ours accepts.
#[cfg(target_arch = "x86_64")]
fn int80_getpid() -> String {
    let mut ret: i64 = 20;
    // SAFETY: i386 getpid takes no arguments and touches no memory; `int 0x80` clobbers only
    // eax (declared) on a 64-bit kernel, which saves and restores the other registers.
    unsafe { std::arch::asm!("int 0x80", inlateout("rax") ret, options(nostack)) };
    if ret < 0 {
        format!("errno {}", -ret)
    } else {
        "ok".into()
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn int80_getpid() -> String {
    "ok".into()
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

fn port(arg: &str) -> u16 {
    arg.parse().expect("a port number")
}

/// Forks; the child runs `f` and exits with its result; prints `ok` for 0, `errno N` otherwise.
fn fork_and_wait(f: impl FnOnce() -> i32) -> String {
    // SAFETY: the probe is single-threaded, so the child may run arbitrary code; it leaves with
    // _exit, running no destructors twice.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return res(-1);
    }
    if pid == 0 {
        let code = f();
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: waitpid writes the status of our own child into `status`.
    if unsafe { libc::waitpid(pid, &mut status, 0) } < 0 {
        return res(-1);
    }
    if libc::WIFSIGNALED(status) {
        return format!("child killed by signal {}", libc::WTERMSIG(status));
    }
    match libc::WEXITSTATUS(status) {
        0 => "ok".into(),
        e => format!("errno {e}"),
    }
}

/// What the exec sandbox does in the child it clones for a command (src/linux/command): new
/// namespaces, its own uid map, a tmpfs, a host name, loopback up, a TCP listener on it. Prints
/// the step that failed and returns its errno.
fn command_sandbox() -> i32 {
    let step = |name: &str, r: libc::c_int| -> Result<(), i32> {
        if r < 0 {
            let e = errno();
            say(&format!("{name} failed: errno {e}"));
            return Err(e);
        }
        Ok(())
    };
    // SAFETY (the raw calls below): flags and pointers to locals that outlive each call.
    let run = || -> Result<(), i32> {
        let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
        // Our lockdown left us non-dumpable, which makes our /proc files root's.
        step("dumpable", unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 1) })?;
        let flags = libc::CLONE_NEWUSER
            | libc::CLONE_NEWNS
            | libc::CLONE_NEWPID
            | libc::CLONE_NEWNET
            | libc::CLONE_NEWIPC
            | libc::CLONE_NEWUTS;
        step("unshare", unsafe { libc::unshare(flags) })?;
        for (file, data) in [
            ("setgroups", "deny".to_string()),
            ("uid_map", format!("{uid} {uid} 1")),
            ("gid_map", format!("{gid} {gid} 1")),
        ] {
            if let Err(e) = std::fs::write(format!("/proc/self/{file}"), data) {
                say(&format!("{file} failed: {e}"));
                return Err(e.raw_os_error().unwrap_or(1));
            }
        }
        step("mount", unsafe {
            libc::mount(
                c"none".as_ptr(),
                c"/tmp".as_ptr(),
                c"tmpfs".as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV,
                std::ptr::null(),
            )
        })?;
        let host = b"gatehouse-sandbox";
        step("sethostname", unsafe {
            libc::sethostname(host.as_ptr().cast(), host.len())
        })?;
        let s = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM, 0) };
        step("socket", s)?;
        let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
        ifr.ifr_name[0] = b'l' as libc::c_char;
        ifr.ifr_name[1] = b'o' as libc::c_char;
        step("SIOCGIFFLAGS", unsafe {
            libc::ioctl(s, libc::SIOCGIFFLAGS, &mut ifr)
        })?;
        unsafe { ifr.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short };
        step("SIOCSIFFLAGS", unsafe {
            libc::ioctl(s, libc::SIOCSIFFLAGS, &mut ifr)
        })?;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| {
            say(&format!("bind failed: {e}"));
            e.raw_os_error().unwrap_or(1)
        })?;
        let addr = listener.local_addr().unwrap();
        let _client = std::net::TcpStream::connect(addr).map_err(|e| {
            say(&format!("connect failed: {e}"));
            e.raw_os_error().unwrap_or(1)
        })?;
        listener.accept().map_err(|e| {
            say(&format!("accept failed: {e}"));
            e.raw_os_error().unwrap_or(1)
        })?;
        Ok(())
    };
    match run() {
        Ok(()) => 0,
        Err(e) => e,
    }
}

/// Allocation, formatting, hashing, a caught panic, sleeping and time: what std programs do.
fn std_work() -> String {
    use std::collections::HashMap;
    let mut m = HashMap::new();
    for i in 0..50_000u32 {
        m.insert(i, format!("value {i:>8}"));
    }
    let big = vec![1u8; 32 << 20];
    let sum: u64 = big.iter().step_by(4096).map(|&b| u64::from(b)).sum();
    drop(big);
    let caught = std::panic::catch_unwind(|| {
        let v: Vec<u8> = Vec::new();
        v[3]
    });
    let t = std::time::Instant::now();
    std::thread::sleep(std::time::Duration::from_millis(2));
    let _ = std::time::SystemTime::now();
    eprintln!(
        "std-work: {} entries, sum {sum}, caught {}",
        m.len(),
        caught.is_err()
    );
    format!(
        "ok {} {} {}",
        m.len(),
        caught.is_err(),
        t.elapsed().as_millis() >= 2
    )
}

fn abstract_connect(name: &str) -> String {
    use std::os::linux::net::SocketAddrExt;
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name).expect("abstract name");
    match std::os::unix::net::UnixStream::connect_addr(&addr) {
        Ok(_) => "ok".into(),
        Err(e) => format!("errno {}", e.raw_os_error().unwrap_or(0)),
    }
}

fn tokio_connect(port: u16) -> String {
    use tokio::io::AsyncReadExt;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime after lockdown");
    rt.block_on(async move {
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .expect("connect");
        let mut buf = [0u8; 5];
        s.read_exact(&mut buf).await.expect("read");
        let joined = tokio::spawn(async { 7 }).await.expect("join");
        format!("ok {} {joined}", String::from_utf8_lossy(&buf))
    })
}

fn tokio_runtime() -> String {
    use tokio::io::AsyncWriteExt;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime after lockdown");
    rt.block_on(async {
        let a = tokio::task::spawn_blocking(|| 40)
            .await
            .expect("blocking task");
        tokio::time::sleep(std::time::Duration::from_millis(3)).await;
        let b = tokio::spawn(async { 2 }).await.expect("task");
        let mut err = tokio::io::stderr();
        err.write_all(b"tokio stderr works\n")
            .await
            .expect("stderr");
        err.flush().await.expect("flush");
        format!("ok {}", a + b)
    })
}
