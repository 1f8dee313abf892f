//! Test builds only: the escape suite's probe. Run inside a sandbox (and outside, as the positive
//! control), it attempts one operation and prints exactly one line: `ok` (with a detail) or
//! `errno NAME`. Exit status 0 for `ok`, 1 for an errno, 2 for bad usage. A filter that kills the
//! process shows as the signal in the caller's wait status.

#![forbid(unsafe_code)]

#[cfg(target_os = "linux")]
use sandbox::linux::command::probe;
#[cfg(target_os = "linux")]
use std::io::{self, Read, Write};
#[cfg(target_os = "linux")]
use std::os::fd::AsRawFd;
#[cfg(target_os = "linux")]
use std::process::ExitCode;

#[cfg(target_os = "linux")]
fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let a = |i: usize| args.get(i).cloned().unwrap_or_default();
    let r: io::Result<String> = match a(0).as_str() {
        "read" => std::fs::read(a(1)).map(|b| format!("{} bytes", b.len())),
        "ls" => std::fs::read_dir(a(1)).map(|d| format!("{} entries", d.count())),
        "write" => std::fs::write(a(1), b"written by the probe\n").map(|_| String::new()),
        "mkdir" => std::fs::create_dir(a(1)).map(|_| String::new()),
        "unlink" => std::fs::remove_file(a(1)).map(|_| String::new()),
        "rename" => std::fs::rename(a(1), a(2)).map(|_| String::new()),
        "id" => Ok(format!(
            "uid={} gid={} euid={}",
            nix::unistd::getuid(),
            nix::unistd::getgid(),
            nix::unistd::geteuid()
        )),
        "env" => Ok(std::env::var(a(1)).unwrap_or_else(|_| "<unset>".into())),
        "ptrace" => probe::syscall(
            libc::SYS_ptrace,
            [
                libc::PTRACE_ATTACH as u64,
                a(1).parse().unwrap_or(0),
                0,
                0,
                0,
                0,
            ],
        )
        .map(|_| String::new()),
        "kill" => nix::sys::signal::kill(
            pid(&a(1)),
            nix::sys::signal::Signal::try_from(a(2).parse::<i32>().unwrap_or(0)).ok(),
        )
        .map(|_| String::new())
        .map_err(io::Error::from),
        "mem" => std::fs::File::open(format!("/proc/{}/mem", a(1))).map(|_| String::new()),
        "connect-unix" => std::os::unix::net::UnixStream::connect(a(1)).map(|_| String::new()),
        // Connects to a gatehouse socket and pings: "ok pong" when served; a broker that
        // refuses the peer kills it (the probe then ends by SIGKILL) or closes the connection.
        "ping-unix" => std::os::unix::net::UnixStream::connect(a(1)).and_then(|mut s| {
            use ipc_schema::codec::{read_frame, write_frame, MAX_FRAME};
            use ipc_schema::{Body, Envelope};
            write_frame(&mut s, &Envelope::new(1, Body::Ping { target: None }))
                .map_err(io::Error::other)?;
            match read_frame(&mut s, MAX_FRAME) {
                Ok(Some(Envelope {
                    body: Body::Pong, ..
                })) => Ok("pong".into()),
                Ok(Some(other)) => Ok(format!("answered {:?}", other.body.kind())),
                Ok(None) => Ok("closed by the listener".into()),
                Err(e) => Err(io::Error::other(e)),
            }
        }),
        "connect-abstract" => {
            use std::os::linux::net::SocketAddrExt;
            std::os::unix::net::SocketAddr::from_abstract_name(a(1).as_bytes())
                .and_then(|addr| std::os::unix::net::UnixStream::connect_addr(&addr))
                .map(|_| String::new())
        }
        "connect-tcp" => std::net::TcpStream::connect(a(1)).map(|_| String::new()),
        "udp" => std::net::UdpSocket::bind("0.0.0.0:0")
            .and_then(|s| s.send_to(b"\0\x01\x01\0\0\x01\0\0\0\0\0\0", a(1)))
            .map(|n| format!("{n} bytes sent")),
        "raw-socket" => socket(libc::AF_INET, libc::SOCK_RAW, libc::IPPROTO_ICMP),
        "packet-socket" => socket(libc::AF_PACKET, libc::SOCK_RAW, 0),
        "netlink-socket" => socket(libc::AF_NETLINK, libc::SOCK_RAW, 0),
        "io-uring" => probe::io_uring_setup().map(|fd| format!("fd {fd}")),
        "bpf" => probe::bpf_load_socket_filter().map(|fd| format!("fd {fd}")),
        // An unknown bpf command: EINVAL from the kernel proves the call reached it.
        "bpf-invalid" => {
            probe::syscall(libc::SYS_bpf, [9999, 0, 0, 0, 0, 0]).map(|r| format!("{r}"))
        }
        "clone3" => probe::clone3_probe().map(|r| format!("{r}")),
        "clone-userns" => probe::clone_newuser().map(|p| format!("child {p}")),
        "unshare-userns" => nix::sched::unshare(
            nix::sched::CloneFlags::CLONE_NEWUSER | nix::sched::CloneFlags::CLONE_NEWNS,
        )
        .map(|_| String::new())
        .map_err(io::Error::from),
        "mount-tmpfs" => nix::mount::mount(
            Some("tmpfs"),
            a(1).as_str(),
            Some("tmpfs"),
            nix::mount::MsFlags::empty(),
            None::<&str>,
        )
        .map(|_| String::new())
        .map_err(io::Error::from),
        "remount-rw" => nix::mount::mount(
            None::<&str>,
            a(1).as_str(),
            None::<&str>,
            nix::mount::MsFlags::MS_REMOUNT | nix::mount::MsFlags::MS_BIND,
            None::<&str>,
        )
        .map(|_| String::new())
        .map_err(io::Error::from),
        "tiocsti" => tiocsti(a(1).as_str(), libc::TIOCSTI),
        "tiocsti-high" => tiocsti(a(1).as_str(), (1u64 << 32) | libc::TIOCSTI),
        "tioclinux" => tiocsti(a(1).as_str(), libc::TIOCLINUX),
        "personality" => probe::syscall(
            libc::SYS_personality,
            [
                u64::from_str_radix(a(1).trim_start_matches("0x"), 16).unwrap_or(0),
                0,
                0,
                0,
                0,
                0,
            ],
        )
        .map(|r| format!("{r:#x}")),
        "x32" => probe::x32_getpid().map(|p| format!("pid {p}")),
        "forkbomb" => {
            let (n, e) = probe::fork_until_refused(a(1).parse().unwrap_or(100_000));
            match e {
                Some(e) => {
                    println!("forked {n}");
                    Err(e)
                }
                None => Ok(format!("forked {n}")),
            }
        }
        "leave-behind" => {
            probe::leave_behind(a(1).parse().unwrap_or(1000)).map(|p| format!("pid {p}"))
        }
        "spew" => spew(io::stdout(), a(1).parse().unwrap_or(0)),
        "spew-err" => spew(io::stderr(), a(1).parse().unwrap_or(0)),
        "sleep" => {
            std::thread::sleep(std::time::Duration::from_secs(a(1).parse().unwrap_or(1)));
            Ok(String::new())
        }
        "stdin" => {
            let mut s = Vec::new();
            io::stdin()
                .read_to_end(&mut s)
                .map(|n| format!("{n} bytes"))
        }
        _ => {
            eprintln!("usage: gatehouse-exec-probe OP [ARGS] (see the source for the operations)");
            return ExitCode::from(2);
        }
    };
    match r {
        Ok(detail) if detail.is_empty() => {
            println!("ok");
            ExitCode::SUCCESS
        }
        Ok(detail) => {
            println!("ok {detail}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            let name = e
                .raw_os_error()
                .map(|n| format!("{:?}", nix::errno::Errno::from_raw(n)))
                .unwrap_or_else(|| e.to_string());
            println!("errno {name}");
            ExitCode::from(1)
        }
    }
}

#[cfg(target_os = "linux")]
fn pid(s: &str) -> nix::unistd::Pid {
    nix::unistd::Pid::from_raw(s.parse().unwrap_or(0))
}

#[cfg(target_os = "linux")]
fn socket(domain: i32, ty: i32, proto: i32) -> io::Result<String> {
    probe::syscall(
        libc::SYS_socket,
        [domain as u64, ty as u64, proto as u64, 0, 0, 0],
    )
    .map(|fd| format!("fd {fd}"))
}

#[cfg(target_os = "linux")]
/// TIOCSTI-like ioctl `cmd` on `target`: a descriptor number, or `pty` for a fresh pseudo
/// terminal's replica side.
fn tiocsti(target: &str, cmd: u64) -> io::Result<String> {
    if target == "pty" {
        use nix::pty::{grantpt, posix_openpt, ptsname_r, unlockpt};
        let master = posix_openpt(nix::fcntl::OFlag::O_RDWR | nix::fcntl::OFlag::O_NOCTTY)
            .map_err(io::Error::from)?;
        grantpt(&master).map_err(io::Error::from)?;
        unlockpt(&master).map_err(io::Error::from)?;
        let name = ptsname_r(&master).map_err(io::Error::from)?;
        use std::os::unix::fs::OpenOptionsExt;
        // O_NOCTTY: a session leader without a terminal would otherwise adopt this one, and get
        // SIGHUP when the probe closes it.
        let replica = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NOCTTY)
            .open(name)?;
        // Make it our controlling terminal, as a shell's terminal is: TIOCSTI on one's own
        // terminal needs no privilege (dev.tty.legacy_tiocsti permitting). Inside a sandbox
        // the command already leads its own session, so setsid fails there; that is fine.
        let _ = nix::unistd::setsid();
        let _ = probe::syscall(
            libc::SYS_ioctl,
            [replica.as_raw_fd() as u64, libc::TIOCSCTTY, 0, 0, 0, 0],
        );
        let r = probe::ioctl_with_byte(replica.as_raw_fd(), cmd, b'x');
        // Closing the terminal now would send us SIGHUP before we print; exit closes it.
        std::mem::forget(replica);
        std::mem::forget(master);
        r?;
        return Ok("injected".into());
    }
    let fd: i32 = target.parse().unwrap_or(0);
    probe::ioctl_with_byte(fd, cmd, b'x').map(|_| "injected".into())
}

#[cfg(target_os = "linux")]
fn spew(mut w: impl Write, n: usize) -> io::Result<String> {
    let chunk = [b'a'; 8192];
    let mut left = n;
    while left > 0 {
        let k = left.min(chunk.len());
        w.write_all(&chunk[..k])?;
        left -= k;
    }
    w.flush()?;
    Ok(String::new())
}

/// Windows: what the restricted-token tier's tests need of a program (exec-helper's
/// `tests/windows_exec.rs`). `spin`: run until killed; `pid-spin`: print `pid N` first.
/// `leave-child`: start `spin` holding this
/// process's stdout (std makes the handle inheritable), print `left`, exit 0. `alloc MIB`:
/// commit and touch MIB mebibytes, print `ok MIB` (exit 0) or `refused` (exit 1).
#[cfg(windows)]
fn main() -> std::process::ExitCode {
    use std::process::ExitCode;
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("alloc") => {
            let Some(mib) = args.get(2).and_then(|a| a.parse::<usize>().ok()) else {
                eprintln!("usage: gatehouse-exec-probe alloc MIB");
                return ExitCode::from(2);
            };
            let mut v: Vec<u8> = Vec::new();
            match v.try_reserve_exact(mib << 20) {
                Ok(()) => {
                    v.resize(mib << 20, 1);
                    println!("ok {mib}");
                    ExitCode::SUCCESS
                }
                Err(_) => {
                    println!("refused");
                    ExitCode::from(1)
                }
            }
        }
        Some("spin") => loop {
            std::thread::sleep(std::time::Duration::from_secs(1));
        },
        Some("pid-spin") => {
            println!("pid {}", std::process::id());
            loop {
                std::thread::sleep(std::time::Duration::from_secs(1));
            }
        }
        Some("leave-child") => {
            let started = std::env::current_exe()
                .and_then(|me| std::process::Command::new(me).arg("spin").spawn());
            match started {
                Ok(_) => {
                    println!("left");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    println!("spawn {e}");
                    ExitCode::from(1)
                }
            }
        }
        _ => {
            eprintln!("usage: gatehouse-exec-probe spin|pid-spin|leave-child|alloc MIB");
            ExitCode::from(2)
        }
    }
}

/// The probes test the Linux exec sandbox.
#[cfg(not(any(target_os = "linux", windows)))]
fn main() -> std::process::ExitCode {
    use ipc_schema::platform::{refuse, Missing};
    refuse("gatehouse-exec-probe", &[Missing::CommandSandbox])
}
