//! The code that runs between `clone` and `exec`: the sandbox's init process (pid 1 of the new
//! pid namespace) and the command process it forks.
//!
//! Invariant for everything here: no allocation, no locks, no panics. The parent may have other
//! threads, and a lock one of them held at `clone` time stays locked forever in the child; so the
//! children only read the [`Plan`] prepared by the parent and make raw syscalls. Failures are
//! reported as fixed-size records on the report socket; the parent turns them into words.

use super::landlock_rules::PathBeneathAttr;
use super::plan::{Op, Plan};
use std::mem::size_of;
use std::os::raw::{c_int, c_void};

pub(crate) const EV_SETUP_FAILED: u32 = 1;
pub(crate) const EV_EXEC_FAILED: u32 = 2;
pub(crate) const EV_EXITED: u32 = 3;
/// The sandbox is built and the command process started (it is about to exec).
pub(crate) const EV_STARTED: u32 = 4;

/// Stages outside the op list (an op failure reports the op's index instead).
pub(crate) const S_DEATH_SIGNAL: u32 = 100_000;
pub(crate) const S_DUMPABLE: u32 = 100_001;
pub(crate) const S_CLOSE_FDS: u32 = 100_002;
pub(crate) const S_HOSTNAME: u32 = 100_003;
pub(crate) const S_LANDLOCK_CREATE: u32 = 100_004;
pub(crate) const S_LANDLOCK_RULE: u32 = 100_005;
pub(crate) const S_LOOPBACK: u32 = 100_006;
pub(crate) const S_BRIDGE_LISTEN: u32 = 100_007;
pub(crate) const S_SIGNALS: u32 = 100_008;
pub(crate) const S_FORK: u32 = 100_009;
pub(crate) const S_SETSID: u32 = 100_010;
pub(crate) const S_STDIO: u32 = 100_011;
pub(crate) const S_RLIMIT: u32 = 100_012;
pub(crate) const S_CHDIR: u32 = 100_013;
pub(crate) const S_NO_NEW_PRIVS: u32 = 100_014;
pub(crate) const S_CAPABILITIES: u32 = 100_015;
pub(crate) const S_LANDLOCK_RESTRICT: u32 = 100_016;
pub(crate) const S_SECCOMP: u32 = 100_017;
pub(crate) const S_UNIX_BRIDGE_LISTEN: u32 = 100_018;
pub(crate) const S_SUBREAPER: u32 = 100_019;

/// One report record.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Record {
    pub kind: u32,
    pub stage: u32,
    pub errno: i32,
    pub value: i32,
}

const AT_RECURSIVE: u32 = 0x8000;
const AT_EMPTY_PATH: u32 = 0x1000;
const OPEN_TREE_CLONE: u32 = 1;
const MOVE_MOUNT_F_EMPTY_PATH: u32 = 4;
const LANDLOCK_RULE_PATH_BENEATH: u32 = 1;
const LANDLOCK_RULE_NET_PORT: u32 = 2;
const SECCOMP_MODE_FILTER: libc::c_ulong = 2;
const CLOSE_RANGE_CLOEXEC: u32 = 1 << 2;

/// `struct mount_attr`.
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// `struct __user_cap_header_struct` / `__user_cap_data_struct` (version 3: two data words).
#[repr(C)]
struct CapHeader {
    version: u32,
    pid: c_int,
}
#[repr(C)]
#[derive(Clone, Copy)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}
const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;

/// The control buffer of one `SCM_RIGHTS` message with one descriptor.
#[repr(C)]
struct OneFd {
    hdr: libc::cmsghdr,
    fd: c_int,
    _pad: c_int,
}

fn errno() -> i32 {
    // SAFETY: __errno_location returns this thread's errno slot, always valid.
    unsafe { *libc::__errno_location() }
}

fn send(fd: c_int, kind: u32, stage: u32, err: i32, value: i32) {
    let r = Record {
        kind,
        stage,
        errno: err,
        value,
    };
    // SAFETY: sends the bytes of a stack value we own; MSG_NOSIGNAL so a gone reader is EPIPE.
    unsafe {
        libc::send(
            fd,
            &r as *const Record as *const c_void,
            size_of::<Record>(),
            libc::MSG_NOSIGNAL,
        );
    }
}

/// Reports a failed stage with the current errno and ends the process.
fn fail(plan: &Plan, stage: u32, value: i32) -> ! {
    send(plan.report_fd, EV_SETUP_FAILED, stage, errno(), value);
    // SAFETY: _exit ends the process without running anything of the parent's copy.
    unsafe { libc::_exit(125) }
}

/// The sandbox's init process: identity, filesystem view, network, then fork the command and
/// wait for it. When the command ends, init reports its status and exits, and the kernel kills
/// every other process of the pid namespace. In the landlock tier (`plan.flat`) there are no
/// namespaces: init is the command's subreaper, and itself ends every process left of the
/// command's tree before it reports the exit (or when the supervisor asks it to, with SIGTERM).
///
/// # Safety
/// Must be called only in the child of the `clone` that created the namespaces, with `plan`
/// fully prepared and sealed; it never returns.
pub(crate) unsafe fn init_main(plan: &mut Plan) -> ! {
    // If the supervisor dies, so does the sandbox (and with init, everything in it). Without a
    // pid namespace, init must end the tree itself: SIGTERM, which it handles, not SIGKILL.
    let death = if plan.flat {
        libc::SIGTERM
    } else {
        libc::SIGKILL
    };
    if libc::prctl(libc::PR_SET_PDEATHSIG, death as libc::c_ulong, 0, 0, 0) != 0 {
        fail(plan, S_DEATH_SIGNAL, 0);
    }
    // The supervisor may have died before the line above: then its end of the report socket is
    // closed already and nobody would ever kill us.
    let mut pfd = libc::pollfd {
        fd: plan.report_fd,
        events: 0,
        revents: 0,
    };
    if libc::poll(&mut pfd, 1, 0) > 0 && pfd.revents & (libc::POLLHUP | libc::POLLERR) != 0 {
        libc::_exit(125);
    }
    // Our /proc/self files belong to us only while we are dumpable, and a process that changed
    // its uid (a root caller becoming unprivileged) or locked itself down is not: writing our
    // own uid_map needs it.
    if libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0) != 0 {
        fail(plan, S_DUMPABLE, 1);
    }
    close_all_but(plan);

    for i in 0..plan.ops.len() {
        if run_op(plan, i).is_err() {
            fail(plan, i as u32, 0);
        }
    }
    // From here on the command exists beside us: keep it from reading init's memory and
    // descriptors through /proc.
    if libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) != 0 {
        fail(plan, S_DUMPABLE, 0);
    }
    let host = plan.hostname.as_bytes();
    if !plan.flat && libc::sethostname(host.as_ptr() as *const libc::c_char, host.len()) != 0 {
        fail(plan, S_HOSTNAME, 0);
    }
    let ruleset = build_landlock(plan);
    let listener = match plan.bridge {
        Some(_) if plan.bridge_listener >= 0 => plan.bridge_listener,
        Some((_, port)) => bridge_listen(plan, port),
        None => -1,
    };
    // Every orphan of the command's tree becomes our child, so none escapes the tree kill.
    if plan.flat && libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0 {
        fail(plan, S_SUBREAPER, 0);
    }
    let unix_listener = match &plan.unix_bridge {
        Some((_, path)) => unix_listen(plan, path),
        None => -1,
    };

    let mut chld: libc::sigset_t = std::mem::zeroed();
    libc::sigemptyset(&mut chld);
    libc::sigaddset(&mut chld, libc::SIGCHLD);
    if plan.flat {
        libc::sigaddset(&mut chld, libc::SIGTERM);
    }
    let mut sfd = -1;
    let bridged = listener >= 0 || unix_listener >= 0 || plan.flat;
    if bridged {
        if libc::sigprocmask(libc::SIG_BLOCK, &chld, std::ptr::null_mut()) != 0 {
            fail(plan, S_SIGNALS, 0);
        }
        sfd = libc::signalfd(-1, &chld, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK);
        if sfd < 0 {
            fail(plan, S_SIGNALS, 1);
        }
    }

    // The command starts like posix_spawn does: sharing init's memory (no page tables to copy,
    // no copy-on-write faults) on a stack of its own, while init waits until it has exec'd or
    // died (CLONE_VFORK). Until then it writes nothing of init's but errno.
    let mut arg = CommandArg {
        plan: &*plan,
        ruleset,
    };
    let stack = plan.command_stack.as_ptr() as usize + plan.command_stack.len();
    let stack = (stack & !15) as *mut c_void;
    let pid = libc::clone(
        command_entry,
        stack,
        libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
        &mut arg as *mut CommandArg as *mut c_void,
    );
    if pid < 0 {
        fail(plan, S_FORK, 0);
    }
    send(plan.report_fd, EV_STARTED, 0, 0, pid);
    let cmd = pid as libc::pid_t;
    // Only the command holds the output pipes (and the stdio socket) now; their end is the
    // command's (and its children's) end.
    for fd in [plan.stdout_w, plan.stderr_w, plan.stdio] {
        if fd >= 0 {
            libc::close(fd);
        }
    }

    let status = if bridged {
        serve_bridge(plan, [listener, unix_listener], sfd, cmd)
    } else {
        Some(wait_for(cmd))
    };
    if plan.flat {
        kill_tree(plan);
    }
    // A kill (SIGTERM in the landlock tier) reports no status, as SIGKILL cannot either.
    if let Some(status) = status {
        send(plan.report_fd, EV_EXITED, 0, 0, status);
    }
    libc::_exit(0)
}

/// Ends every process of the command's tree (landlock tier): SIGKILL through a pidfd to each
/// descendant found under `/proc/PID/task/TID/children`, then reaping, until none is left.
/// Every descendant's chain of parents starts at a child of ours (orphans are reparented to us,
/// the subreaper), so while any is left we have a child to wait for.
unsafe fn kill_tree(plan: &mut Plan) {
    let me = libc::getpid();
    let mut st: c_int = 0;
    loop {
        if kill_descendants(plan, me) == 0 {
            break;
        }
        if libc::waitpid(-1, &mut st, 0) < 0 && errno() == libc::ECHILD {
            // Seen but not ours yet (being reparented): look again shortly.
            let ts = libc::timespec {
                tv_sec: 0,
                tv_nsec: 1_000_000,
            };
            libc::nanosleep(&ts, std::ptr::null_mut());
        }
        while libc::waitpid(-1, &mut st, libc::WNOHANG) > 0 {}
    }
    while libc::waitpid(-1, &mut st, libc::WNOHANG) > 0 {}
}

/// Writes `parts` (byte strings and numbers) into `buf` as a NUL-terminated path.
fn put_path(buf: &mut [u8; 64], parts: &[PathPart<'_>]) {
    let mut at = 0;
    for p in parts {
        let mut digits = [0u8; 12];
        let bytes: &[u8] = match p {
            PathPart::Text(t) => t,
            PathPart::Num(n) => {
                let mut v = *n as u32;
                let mut i = digits.len();
                loop {
                    i -= 1;
                    digits[i] = b'0' + (v % 10) as u8;
                    v /= 10;
                    if v == 0 {
                        break;
                    }
                }
                &digits[i..]
            }
        };
        for &b in bytes {
            if at < buf.len() - 1 {
                buf[at] = b;
                at += 1;
            }
        }
    }
    buf[at] = 0;
}

enum PathPart<'a> {
    Text(&'a [u8]),
    Num(libc::pid_t),
}

/// Opens the path made of `parts` (close-on-exec), or -1.
unsafe fn open_parts(parts: &[PathPart<'_>], flags: c_int) -> c_int {
    let mut path = [0u8; 64];
    put_path(&mut path, parts);
    libc::open(
        path.as_ptr() as *const libc::c_char,
        flags | libc::O_CLOEXEC,
    )
}

/// The parent pid in `/proc/PID/stat` (0 if it cannot be read).
unsafe fn parent_of(pid: libc::pid_t) -> libc::pid_t {
    let fd = open_parts(
        &[
            PathPart::Text(b"/proc/"),
            PathPart::Num(pid),
            PathPart::Text(b"/stat"),
        ],
        libc::O_RDONLY,
    );
    if fd < 0 {
        return 0;
    }
    let mut buf = [0u8; 512];
    let n = libc::read(fd, buf.as_mut_ptr() as *mut c_void, buf.len());
    libc::close(fd);
    if n <= 0 {
        return 0;
    }
    let line = &buf[..n as usize];
    // "PID (COMM) S PPID ...": COMM may hold anything, so after the last ')'.
    let Some(close) = line.iter().rposition(|&b| b == b')') else {
        return 0;
    };
    let mut ppid: libc::pid_t = 0;
    let rest = line.get(close + 4..).unwrap_or(&[]);
    for &b in rest {
        if !b.is_ascii_digit() {
            break;
        }
        ppid = ppid
            .saturating_mul(10)
            .saturating_add((b - b'0') as libc::pid_t);
    }
    ppid
}

/// SIGKILLs every descendant of `root` it finds (walking down from `root` through the
/// children files of every thread); returns how many it found.
unsafe fn kill_descendants(plan: &mut Plan, root: libc::pid_t) -> usize {
    let cap = plan.kill_stack.len();
    let stack = plan.kill_stack.as_mut_ptr();
    if cap == 0 {
        return 0;
    }
    *stack = root;
    let mut top = 1usize;
    let mut found = 0usize;
    while top > 0 {
        top -= 1;
        let p = *stack.add(top);
        let dir = open_parts(
            &[
                PathPart::Text(b"/proc/"),
                PathPart::Num(p),
                PathPart::Text(b"/task"),
            ],
            libc::O_RDONLY | libc::O_DIRECTORY,
        );
        if dir < 0 {
            continue;
        }
        let mut dents = [0u8; 2048];
        loop {
            let n = libc::syscall(
                libc::SYS_getdents64,
                dir,
                dents.as_mut_ptr() as *mut c_void,
                dents.len(),
            );
            if n <= 0 {
                break;
            }
            let mut off = 0usize;
            while off + 19 < n as usize {
                // struct linux_dirent64: ino u64, off i64, reclen u16, type u8, name.
                let reclen = u16::from_ne_bytes([dents[off + 16], dents[off + 17]]) as usize;
                if reclen == 0 {
                    break;
                }
                let name = &dents[off + 19..(off + reclen).min(n as usize)];
                let len = name.iter().position(|&b| b == 0).unwrap_or(name.len());
                let name = &name[..len];
                off += reclen;
                if name.is_empty() || !name.iter().all(|b| b.is_ascii_digit()) {
                    continue;
                }
                let cf = open_parts(
                    &[
                        PathPart::Text(b"/proc/"),
                        PathPart::Num(p),
                        PathPart::Text(b"/task/"),
                        PathPart::Text(name),
                        PathPart::Text(b"/children"),
                    ],
                    libc::O_RDONLY,
                );
                if cf < 0 {
                    continue;
                }
                let mut buf = [0u8; 1024];
                let mut pid: libc::pid_t = 0;
                loop {
                    let r = libc::read(cf, buf.as_mut_ptr() as *mut c_void, buf.len());
                    if r <= 0 {
                        break;
                    }
                    for &b in &buf[..r as usize] {
                        if b.is_ascii_digit() {
                            pid = pid
                                .saturating_mul(10)
                                .saturating_add((b - b'0') as libc::pid_t);
                        } else if pid > 0 {
                            found += kill_child(p, pid, root, stack, cap, &mut top);
                            pid = 0;
                        }
                    }
                }
                if pid > 0 {
                    found += kill_child(p, pid, root, stack, cap, &mut top);
                }
                libc::close(cf);
            }
        }
        libc::close(dir);
    }
    found
}

/// SIGKILLs `pid`, a child of `parent`, through a pidfd, and queues it to be walked; 1 if it
/// was (still) that child. A child of ours cannot be reaped by anyone else, so its pid is its
/// own until we reap it; a deeper one's pid could be reused once its parent reaped it, so its
/// parent is checked after the pidfd is open (the pidfd then names that very process).
unsafe fn kill_child(
    parent: libc::pid_t,
    pid: libc::pid_t,
    root: libc::pid_t,
    stack: *mut libc::pid_t,
    cap: usize,
    top: &mut usize,
) -> usize {
    let fd = libc::syscall(libc::SYS_pidfd_open, pid, 0u32) as c_int;
    if fd < 0 {
        return 0;
    }
    let mine = parent == root || parent_of(pid) == parent;
    if mine {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            fd,
            libc::SIGKILL,
            std::ptr::null::<c_void>(),
            0u32,
        );
        if *top < cap {
            *stack.add(*top) = pid;
            *top += 1;
        }
    }
    libc::close(fd);
    usize::from(mine)
}

/// Closes every descriptor the init process inherited except the ones it needs.
unsafe fn close_all_but(plan: &Plan) {
    let mut next: u32 = 0;
    for &k in &plan.keep_fds {
        let k = k as u32;
        if k > next && k > 3 {
            libc::syscall(libc::SYS_close_range, next.max(3), k - 1, 0u32);
        }
        next = k + 1;
    }
    if libc::syscall(libc::SYS_close_range, next.max(3), u32::MAX, 0u32) != 0 {
        fail(plan, S_CLOSE_FDS, 0);
    }
}

/// Reaps children until the command ends; returns its wait status.
unsafe fn wait_for(cmd: libc::pid_t) -> c_int {
    loop {
        let mut st: c_int = 0;
        let r = libc::waitpid(-1, &mut st, 0);
        if r == cmd {
            return st;
        }
        if r < 0 && errno() != libc::EINTR {
            // No children left without having seen the command: cannot happen; report a kill.
            return libc::SIGKILL;
        }
    }
}

/// Accepts the command's proxy connections (`listeners[0]`) and the connections to the Unix
/// socket bridge (`listeners[1]`; either may be -1) and hands each to its connector, while
/// reaping children until the command ends (its wait status) or, in the landlock tier, SIGTERM
/// asks for the end (`None`).
unsafe fn serve_bridge(
    plan: &Plan,
    listeners: [c_int; 2],
    sfd: c_int,
    cmd: libc::pid_t,
) -> Option<c_int> {
    let connectors = [
        plan.bridge.map(|(c, _)| c).unwrap_or(-1),
        plan.unix_bridge.as_ref().map(|(c, _)| *c).unwrap_or(-1),
    ];
    // poll ignores entries with a negative descriptor.
    let mut fds = [
        libc::pollfd {
            fd: listeners[0],
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: listeners[1],
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: sfd,
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    loop {
        for f in fds.iter_mut() {
            f.revents = 0;
        }
        if libc::poll(fds.as_mut_ptr(), 3, -1) < 0 {
            continue;
        }
        for i in 0..2 {
            if fds[i].revents & libc::POLLIN != 0 {
                let c = libc::accept4(
                    listeners[i],
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    libc::SOCK_CLOEXEC,
                );
                if c >= 0 {
                    send_fd(connectors[i], CONNECTOR_BYTES[i], c);
                    libc::close(c);
                }
            }
        }
        if fds[2].revents & libc::POLLIN != 0 {
            let mut info: libc::signalfd_siginfo = std::mem::zeroed();
            let mut stop = false;
            while libc::read(
                sfd,
                &mut info as *mut libc::signalfd_siginfo as *mut c_void,
                size_of::<libc::signalfd_siginfo>(),
            ) > 0
            {
                stop |= info.ssi_signo == libc::SIGTERM as u32;
            }
            if stop {
                return None;
            }
            loop {
                let mut st: c_int = 0;
                let r = libc::waitpid(-1, &mut st, libc::WNOHANG);
                if r == cmd {
                    return Some(st);
                }
                if r <= 0 {
                    break;
                }
            }
        }
    }
}

/// Listens on the Unix socket `path` (in the sandbox's own view, after the root switch).
unsafe fn unix_listen(plan: &Plan, path: &std::ffi::CStr) -> c_int {
    let l = libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
    if l < 0 {
        fail(plan, S_UNIX_BRIDGE_LISTEN, 0);
    }
    let mut addr: libc::sockaddr_un = std::mem::zeroed();
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let bytes = path.to_bytes();
    // The parent checked the length (< 100 bytes); the copy stays inside sun_path regardless.
    let n = bytes.len().min(addr.sun_path.len() - 1);
    for (d, s) in addr.sun_path.iter_mut().zip(&bytes[..n]) {
        *d = *s as libc::c_char;
    }
    if libc::bind(
        l,
        &addr as *const libc::sockaddr_un as *const libc::sockaddr,
        size_of::<libc::sockaddr_un>() as libc::socklen_t,
    ) != 0
    {
        fail(plan, S_UNIX_BRIDGE_LISTEN, 1);
    }
    if libc::listen(l, 128) != 0 {
        fail(plan, S_UNIX_BRIDGE_LISTEN, 2);
    }
    l
}

/// What each listener's connections are called on the connector (`ipc_schema::exec`).
const CONNECTOR_BYTES: [u8; 2] = [
    ipc_schema::exec::CONNECTOR_PROXY,
    ipc_schema::exec::CONNECTOR_GATEWAY,
];

/// Sends `byte` with `fd` attached; a failed send drops the connection (the client sees it
/// closed), which is all a dead broker could offer anyway.
unsafe fn send_fd(connector: c_int, byte: u8, fd: c_int) {
    let mut byte = [byte];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr() as *mut c_void,
        iov_len: 1,
    };
    let mut ctl: OneFd = std::mem::zeroed();
    ctl.hdr.cmsg_len = (size_of::<libc::cmsghdr>() + size_of::<c_int>()) as _;
    ctl.hdr.cmsg_level = libc::SOL_SOCKET;
    ctl.hdr.cmsg_type = libc::SCM_RIGHTS;
    ctl.fd = fd;
    let mut msg: libc::msghdr = std::mem::zeroed();
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = &mut ctl as *mut OneFd as *mut c_void;
    msg.msg_controllen = size_of::<OneFd>() as _;
    libc::sendmsg(connector, &msg, libc::MSG_NOSIGNAL);
}

/// Brings up the loopback interface and listens on 127.0.0.1:`port`.
unsafe fn bridge_listen(plan: &Plan, port: u16) -> c_int {
    let s = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
    if s < 0 {
        fail(plan, S_LOOPBACK, 0);
    }
    let mut ifr: libc::ifreq = std::mem::zeroed();
    ifr.ifr_name[0] = b'l' as libc::c_char;
    ifr.ifr_name[1] = b'o' as libc::c_char;
    if libc::ioctl(s, libc::SIOCGIFFLAGS, &mut ifr) != 0 {
        fail(plan, S_LOOPBACK, 1);
    }
    ifr.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
    if libc::ioctl(s, libc::SIOCSIFFLAGS, &mut ifr) != 0 {
        fail(plan, S_LOOPBACK, 2);
    }
    libc::close(s);

    let l = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
    if l < 0 {
        fail(plan, S_BRIDGE_LISTEN, 0);
    }
    let one: c_int = 1;
    libc::setsockopt(
        l,
        libc::SOL_SOCKET,
        libc::SO_REUSEADDR,
        &one as *const c_int as *const c_void,
        size_of::<c_int>() as libc::socklen_t,
    );
    let mut addr: libc::sockaddr_in = std::mem::zeroed();
    addr.sin_family = libc::AF_INET as libc::sa_family_t;
    addr.sin_port = port.to_be();
    addr.sin_addr.s_addr = u32::from_be_bytes([127, 0, 0, 1]).to_be();
    if libc::bind(
        l,
        &addr as *const libc::sockaddr_in as *const libc::sockaddr,
        size_of::<libc::sockaddr_in>() as libc::socklen_t,
    ) != 0
    {
        fail(plan, S_BRIDGE_LISTEN, 1);
    }
    if libc::listen(l, 128) != 0 {
        fail(plan, S_BRIDGE_LISTEN, 2);
    }
    l
}

/// Creates the command's Landlock ruleset (paths as seen inside); -1 without Landlock.
unsafe fn build_landlock(plan: &Plan) -> c_int {
    let Some(ll) = &plan.landlock else {
        return -1;
    };
    let fd = libc::syscall(
        libc::SYS_landlock_create_ruleset,
        &ll.attr as *const _ as *const c_void,
        size_of::<super::landlock_rules::RulesetAttr>(),
        0u32,
    );
    if fd < 0 {
        fail(plan, S_LANDLOCK_CREATE, 0);
    }
    let fd = fd as c_int;
    for (j, (path, access)) in ll.rules.iter().enumerate() {
        let p = libc::open(path.as_ptr(), libc::O_PATH | libc::O_CLOEXEC);
        if p < 0 {
            fail(plan, S_LANDLOCK_RULE, j as i32);
        }
        let attr = PathBeneathAttr {
            allowed_access: *access,
            parent_fd: p,
        };
        let r = libc::syscall(
            libc::SYS_landlock_add_rule,
            fd,
            LANDLOCK_RULE_PATH_BENEATH,
            &attr as *const PathBeneathAttr as *const c_void,
            0u32,
        );
        if r != 0 {
            fail(plan, S_LANDLOCK_RULE, j as i32);
        }
        libc::close(p);
    }
    for (j, port) in ll.ports.iter().enumerate() {
        let r = libc::syscall(
            libc::SYS_landlock_add_rule,
            fd,
            LANDLOCK_RULE_NET_PORT,
            port as *const super::landlock_rules::NetPortAttr as *const c_void,
            0u32,
        );
        if r != 0 {
            fail(plan, S_LANDLOCK_RULE, (ll.rules.len() + j) as i32);
        }
    }
    fd
}

unsafe fn run_op(plan: &mut Plan, i: usize) -> Result<(), ()> {
    let ok = |r: c_int| if r < 0 { Err(()) } else { Ok(()) };
    match &plan.ops[i] {
        Op::WriteFile { path, data } => {
            let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
            ok(fd)?;
            let bytes = data.as_bytes();
            let n = libc::write(fd, bytes.as_ptr() as *const c_void, bytes.len());
            let e = errno();
            libc::close(fd);
            if n != bytes.len() as isize {
                *libc::__errno_location() = e;
                return Err(());
            }
            Ok(())
        }
        Op::MakePrivate => ok(libc::mount(
            std::ptr::null(),
            c"/".as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        )),
        Op::CloneTree {
            src,
            slot,
            attr_set,
        } => {
            let fd = libc::syscall(
                libc::SYS_open_tree,
                libc::AT_FDCWD,
                src.as_ptr(),
                OPEN_TREE_CLONE | libc::O_CLOEXEC as u32 | AT_RECURSIVE,
            );
            if fd < 0 {
                return Err(());
            }
            let attr = MountAttr {
                attr_set: *attr_set,
                attr_clr: 0,
                propagation: 0,
                userns_fd: 0,
            };
            let r = libc::syscall(
                libc::SYS_mount_setattr,
                fd as c_int,
                c"".as_ptr(),
                AT_EMPTY_PATH | AT_RECURSIVE,
                &attr as *const MountAttr,
                size_of::<MountAttr>(),
            );
            if r != 0 {
                return Err(());
            }
            let slot = *slot;
            if let Some(s) = plan.slots.get_mut(slot) {
                *s = fd as c_int;
            }
            Ok(())
        }
        Op::Mount {
            src,
            target,
            fstype,
            flags,
            data,
        } => ok(libc::mount(
            src.as_ref().map_or(std::ptr::null(), |s| s.as_ptr()),
            target.as_ptr(),
            fstype.as_ref().map_or(std::ptr::null(), |s| s.as_ptr()),
            *flags,
            data.as_ref()
                .map_or(std::ptr::null(), |s| s.as_ptr() as *const c_void),
        )),
        Op::Mkdir { path, mode } => {
            if libc::mkdir(path.as_ptr(), *mode) != 0 && errno() != libc::EEXIST {
                return Err(());
            }
            Ok(())
        }
        Op::Touch { path, mode } => {
            let fd = libc::open(
                path.as_ptr(),
                libc::O_WRONLY | libc::O_CREAT | libc::O_CLOEXEC,
                *mode as libc::c_uint,
            );
            ok(fd)?;
            libc::close(fd);
            Ok(())
        }
        Op::Symlink { target, link } => ok(libc::symlink(target.as_ptr(), link.as_ptr())),
        Op::MoveTree { slot, target } => {
            let fd = plan.slots.get(*slot).copied().unwrap_or(-1);
            let r = libc::syscall(
                libc::SYS_move_mount,
                fd,
                c"".as_ptr(),
                libc::AT_FDCWD,
                target.as_ptr(),
                MOVE_MOUNT_F_EMPTY_PATH,
            );
            libc::close(fd);
            if r != 0 {
                return Err(());
            }
            Ok(())
        }
        Op::Remove { path, dir } => ok(if *dir {
            libc::rmdir(path.as_ptr())
        } else {
            libc::unlink(path.as_ptr())
        }),
        Op::PivotRoot { root } => {
            ok(libc::chdir(root.as_ptr()))?;
            ok(libc::syscall(libc::SYS_pivot_root, c".".as_ptr(), c".".as_ptr()) as c_int)?;
            ok(libc::umount2(c".".as_ptr(), libc::MNT_DETACH))?;
            ok(libc::chdir(c"/".as_ptr()))
        }
    }
}

struct CommandArg<'a> {
    plan: &'a Plan,
    ruleset: c_int,
}

extern "C" fn command_entry(arg: *mut c_void) -> c_int {
    // SAFETY: `arg` points at the CommandArg on init's stack, which stays valid: init is
    // suspended (CLONE_VFORK) until this process has exec'd or exited.
    unsafe {
        let a = &*(arg as *const CommandArg);
        command_main(a.plan, a.ruleset)
    }
}

/// The command process: session, stdio, limits, no privileges, Landlock, seccomp, exec.
unsafe fn command_main(plan: &Plan, ruleset: c_int) -> ! {
    if libc::setsid() < 0 {
        fail(plan, S_SETSID, 0);
    }
    // Without a pid namespace nothing kills the command with init: say so to the kernel.
    if plan.flat
        && libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        ) != 0
    {
        fail(plan, S_DEATH_SIGNAL, 1);
    }
    let mut empty: libc::sigset_t = std::mem::zeroed();
    libc::sigemptyset(&mut empty);
    libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
    // The supervisor (a Rust program) ignores SIGPIPE; an ignored signal survives exec.
    libc::signal(libc::SIGPIPE, libc::SIG_DFL);

    // stdin and stdout: /dev/null and the stdout pipe, or both the stdio socket (which the
    // parent placed above 2, so neither dup2 overwrites it before it is copied).
    let (stdin, stdout) = if plan.stdio >= 0 {
        (plan.stdio, plan.stdio)
    } else {
        let null = libc::open(plan.dev_null.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC);
        if null < 0 {
            fail(plan, S_STDIO, 0);
        }
        (null, plan.stdout_w)
    };
    if libc::dup2(stdin, 0) < 0 || libc::dup2(stdout, 1) < 0 || libc::dup2(plan.stderr_w, 2) < 0 {
        fail(plan, S_STDIO, 1);
    }
    // Everything else (the report socket, the connector, the listener, the ruleset) closes at
    // exec; the report socket stays usable until then to say why an exec failed.
    if libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, CLOSE_RANGE_CLOEXEC) != 0 {
        fail(plan, S_STDIO, 2);
    }
    for (j, (res, lim)) in plan.rlimits.iter().enumerate() {
        if libc::setrlimit(*res, lim) != 0 {
            fail(plan, S_RLIMIT, j as i32);
        }
    }
    if libc::chdir(plan.cwd.as_ptr()) != 0 {
        fail(plan, S_CHDIR, 0);
    }
    if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
        fail(plan, S_NO_NEW_PRIVS, 0);
    }
    // The command runs as a non-root uid, so exec would drop the capabilities init holds in the
    // sandbox's user namespace anyway; dropping them here, bounding set included, does not
    // depend on that.
    // In the landlock tier the command is an unprivileged host process: without CAP_SETPCAP
    // the bounding set cannot be changed (EPERM), and with no_new_privs it gives nothing.
    let mut cap = 0;
    while libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) == 0 {
        cap += 1;
    }
    if errno() != libc::EINVAL && !(plan.flat && errno() == libc::EPERM) {
        fail(plan, S_CAPABILITIES, 0);
    }
    if libc::prctl(
        libc::PR_CAP_AMBIENT,
        libc::PR_CAP_AMBIENT_CLEAR_ALL,
        0,
        0,
        0,
    ) != 0
    {
        fail(plan, S_CAPABILITIES, 1);
    }
    let hdr = CapHeader {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    let data = [CapData {
        effective: 0,
        permitted: 0,
        inheritable: 0,
    }; 2];
    if libc::syscall(libc::SYS_capset, &hdr as *const CapHeader, data.as_ptr()) != 0 {
        fail(plan, S_CAPABILITIES, 2);
    }
    if ruleset >= 0 && libc::syscall(libc::SYS_landlock_restrict_self, ruleset, 0u32) != 0 {
        fail(plan, S_LANDLOCK_RESTRICT, 0);
    }
    let prog = libc::sock_fprog {
        len: plan.seccomp.len() as u16,
        filter: plan.seccomp.as_ptr() as *mut libc::sock_filter,
    };
    if libc::prctl(
        libc::PR_SET_SECCOMP,
        SECCOMP_MODE_FILTER,
        &prog as *const libc::sock_fprog,
        0,
        0,
    ) != 0
    {
        fail(plan, S_SECCOMP, 0);
    }
    libc::execve(
        plan.exec_path.as_ptr(),
        plan.argv_ptrs.as_ptr(),
        plan.envp_ptrs.as_ptr(),
    );
    let e = errno();
    send(plan.report_fd, EV_EXEC_FAILED, 0, e, 0);
    libc::_exit(if e == libc::ENOENT { 127 } else { 126 })
}

/// Words for a stage outside the op list.
pub(crate) fn stage_text(stage: u32, value: i32) -> String {
    match stage {
        S_DEATH_SIGNAL => "arranging for the sandbox to die with its supervisor".into(),
        S_DUMPABLE => "setting whether the sandbox's init process is dumpable".into(),
        S_CLOSE_FDS => "closing inherited descriptors".into(),
        S_HOSTNAME => "setting the sandbox's host name".into(),
        S_LANDLOCK_CREATE => "creating the command's Landlock ruleset".into(),
        S_LANDLOCK_RULE => format!("adding Landlock rule {value} of the command's ruleset"),
        S_LOOPBACK => "bringing up the loopback interface for the proxy bridge".into(),
        S_BRIDGE_LISTEN => "listening on the proxy bridge port".into(),
        S_SIGNALS => "setting up signal handling in the sandbox's init process".into(),
        S_FORK => "starting the command process".into(),
        S_SETSID => "starting a new session for the command".into(),
        S_STDIO => "setting up the command's stdin, stdout and stderr".into(),
        S_RLIMIT => format!("setting resource limit {value}"),
        S_CHDIR => "changing to the working directory".into(),
        S_NO_NEW_PRIVS => "setting no_new_privs".into(),
        S_CAPABILITIES => "dropping capabilities".into(),
        S_LANDLOCK_RESTRICT => "applying the command's Landlock ruleset".into(),
        S_SECCOMP => "installing the command's seccomp filter".into(),
        S_UNIX_BRIDGE_LISTEN => "listening on the sandbox's Unix socket bridge".into(),
        S_SUBREAPER => {
            "making the sandbox's init process the subreaper of the command's processes".into()
        }
        _ => format!("sandbox stage {stage}"),
    }
}
