//! The exec sandbox's landlock tier (no namespaces), through `prepare`/`spawn` as the exec
//! helper calls them with `tier: Landlock`. The command is this test binary re-executed with
//! `--tier-probe ACTION ARG`: it does one thing and prints `ok[ detail]` or `errno N`. Every
//! denial is asserted with its exact errno beside a positive control: the same probe run
//! outside the sandbox, as the same user, succeeds.
//!
//! Run as root (the tests first become `gatehouse-test`, or nobody: a sandbox never runs as
//! root) and as the unprivileged user (`runuser -u gatehouse-test -- BINARY`).

#[cfg(target_os = "linux")]
mod runner;

#[cfg(target_os = "linux")]
mod tier {
    use ipc_schema::exec::{GrantAccess, Limits, PathGrant};
    use sandbox::linux::command::{
        self, ConfinementTier, Event, Hide, Network, SandboxSpec, Sandboxed,
    };
    use std::io::{BufRead, BufReader, Read};
    use std::os::fd::OwnedFd;
    use std::path::{Path, PathBuf};

    pub const PROBE: &str = "--tier-probe";

    pub const TESTS: &[crate::runner::Test] = &[
        (
            "report_names_the_tier_and_no_namespaces",
            report_names_the_tier_and_no_namespaces,
        ),
        (
            "homes_and_host_tmp_are_unreadable",
            homes_and_host_tmp_are_unreadable,
        ),
        (
            "hidden_and_protected_entries_are_unreadable_beside_readable_siblings",
            hidden_and_protected_entries_are_unreadable_beside_readable_siblings,
        ),
        (
            "writes_outside_the_write_grants_are_refused",
            writes_outside_the_write_grants_are_refused,
        ),
        (
            "private_tmp_is_the_commands_and_removed_after",
            private_tmp_is_the_commands_and_removed_after,
        ),
        (
            "no_network_refuses_inet_sockets",
            no_network_refuses_inet_sockets,
        ),
        ("proxy_bridge_port_only", proxy_bridge_port_only),
        (
            "udp_raw_and_netlink_sockets_are_refused_with_the_proxy",
            udp_raw_and_netlink_sockets_are_refused_with_the_proxy,
        ),
        (
            "signals_to_outside_processes_are_refused",
            signals_to_outside_processes_are_refused,
        ),
        (
            "outside_processes_environ_is_unreadable",
            outside_processes_environ_is_unreadable,
        ),
        (
            "abstract_sockets_outside_are_refused",
            abstract_sockets_outside_are_refused,
        ),
        (
            "namespaces_and_sysv_ipc_are_refused",
            namespaces_and_sysv_ipc_are_refused,
        ),
        (
            "a_setsid_daemon_is_gone_after_the_command_ends",
            a_setsid_daemon_is_gone_after_the_command_ends,
        ),
        (
            "a_fork_loop_is_gone_after_the_command_ends",
            a_fork_loop_is_gone_after_the_command_ends,
        ),
        ("a_kill_ends_the_whole_tree", a_kill_ends_the_whole_tree),
        (
            "git_control_files_changed_during_the_run_are_put_back",
            git_control_files_changed_during_the_run_are_put_back,
        ),
        (
            "what_the_tier_does_not_hold_is_as_listed",
            what_the_tier_does_not_hold_is_as_listed,
        ),
        (
            "the_namespace_tier_runs_the_same_probe",
            the_namespace_tier_runs_the_same_probe,
        ),
    ];

    // -----------------------------------------------------------------------------------------
    // The probe (inside the sandbox, or outside as the control)

    fn errno_of(e: &std::io::Error) -> String {
        format!("errno {}", e.raw_os_error().unwrap_or(0))
    }

    fn last_errno() -> String {
        errno_of(&std::io::Error::last_os_error())
    }

    fn socket(family: i32, ty: i32, proto: i32) -> String {
        // SAFETY: socket takes integers only; the descriptor is closed at once.
        let fd = unsafe { libc::socket(family, ty, proto) };
        if fd < 0 {
            return last_errno();
        }
        // SAFETY: we own the descriptor just created.
        unsafe { libc::close(fd) };
        "ok".into()
    }

    fn tcp(port: &str) -> String {
        let port: u16 = port.parse().expect("port");
        match std::net::TcpStream::connect(("127.0.0.1", port)) {
            Ok(_) => "ok".into(),
            Err(e) => errno_of(&e),
        }
    }

    fn setsid_child(then: impl FnOnce()) -> i32 {
        // SAFETY: a single-threaded probe forks; the child runs `then` and never returns.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // SAFETY: plain syscalls in the child.
            unsafe { libc::setsid() };
            then();
            // SAFETY: leaves the child without running the parent's destructors.
            unsafe { libc::_exit(0) };
        }
        pid
    }

    pub fn probe(args: &[String]) -> std::process::ExitCode {
        let action = args.first().map(String::as_str).unwrap_or("");
        let arg = args.get(1).map(String::as_str).unwrap_or("");
        let out = match action {
            "read" => match std::fs::read(arg) {
                Ok(_) => "ok".into(),
                Err(e) => errno_of(&e),
            },
            "list" => match std::fs::read_dir(arg) {
                Ok(_) => "ok".into(),
                Err(e) => errno_of(&e),
            },
            "write" => match std::fs::write(arg, "probe") {
                Ok(_) => "ok".into(),
                Err(e) => errno_of(&e),
            },
            "append" => {
                use std::io::Write;
                match std::fs::OpenOptions::new()
                    .append(true)
                    .open(arg)
                    .and_then(|mut f| f.write_all(b"\n[core]\n\tfsmonitor = ./evil\n"))
                {
                    Ok(_) => "ok".into(),
                    Err(e) => errno_of(&e),
                }
            }
            "stat" => match std::fs::symlink_metadata(arg) {
                Ok(_) => "ok".into(),
                Err(e) => errno_of(&e),
            },
            "inotify" => {
                let p = std::ffi::CString::new(arg).unwrap();
                // SAFETY: integers and a NUL-terminated path we own; the descriptor is closed.
                unsafe {
                    let fd = libc::inotify_init1(libc::IN_CLOEXEC);
                    let w = libc::inotify_add_watch(fd, p.as_ptr(), libc::IN_ALL_EVENTS);
                    let r = if w < 0 { last_errno() } else { "ok".into() };
                    libc::close(fd);
                    r
                }
            }
            "unix" => match std::os::unix::net::UnixStream::connect(arg) {
                Ok(_) => "ok".into(),
                Err(e) => errno_of(&e),
            },
            "env" => arg
                .split(',')
                .map(|n| std::env::var(n).unwrap_or_default())
                .collect::<Vec<_>>()
                .join(" "),
            "tcp" => tcp(arg),
            "proxy" => {
                let url = std::env::var("HTTP_PROXY").unwrap_or_default();
                let port = url.rsplit(':').next().unwrap_or("").to_string();
                format!("{} {port}", tcp(&port))
            }
            "tcp-socket" => socket(libc::AF_INET, libc::SOCK_STREAM, 0),
            "udp" => socket(libc::AF_INET, libc::SOCK_DGRAM, 0),
            "raw" => socket(libc::AF_INET, libc::SOCK_RAW, libc::IPPROTO_ICMP),
            "netlink" => socket(libc::AF_NETLINK, libc::SOCK_RAW, 0),
            "kill" => {
                let pid: i32 = arg.parse().expect("pid");
                // SAFETY: signal 0 only checks that the signal could be sent.
                if unsafe { libc::kill(pid, 0) } == 0 {
                    "ok".into()
                } else {
                    last_errno()
                }
            }
            "abstract" => {
                use std::os::linux::net::SocketAddrExt;
                let addr = std::os::unix::net::SocketAddr::from_abstract_name(arg).unwrap();
                match std::os::unix::net::UnixStream::connect_addr(&addr) {
                    Ok(_) => "ok".into(),
                    Err(e) => errno_of(&e),
                }
            }
            "unshare-net" => {
                // SAFETY: unshare takes flags only; on success the probe just exits.
                if unsafe { libc::unshare(libc::CLONE_NEWNET) } == 0 {
                    "ok".into()
                } else {
                    last_errno()
                }
            }
            "shmget" => {
                // SAFETY: integers only; a segment made by the control is removed at once.
                let id = unsafe { libc::shmget(libc::IPC_PRIVATE, 4096, 0o600) };
                if id < 0 {
                    last_errno()
                } else {
                    // SAFETY: removes the segment we just made.
                    unsafe { libc::shmctl(id, libc::IPC_RMID, std::ptr::null_mut()) };
                    "ok".into()
                }
            }
            "daemon" => {
                // A double-forked setsid daemon that outlives the command (printing its pid);
                // the command then sleeps `arg` ms and exits.
                use std::io::Write;
                let (r, w) = nix::unistd::pipe().unwrap();
                let first = setsid_child(|| {
                    let grandchild = setsid_child(|| loop {
                        std::thread::sleep(std::time::Duration::from_secs(60));
                    });
                    let _ = nix::unistd::write(&w, format!("{grandchild}\n").as_bytes());
                });
                drop(w);
                let mut line = String::new();
                BufReader::new(std::fs::File::from(r))
                    .read_line(&mut line)
                    .unwrap();
                let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(first), None);
                println!("pid {}", line.trim());
                std::io::stdout().flush().unwrap();
                std::thread::sleep(std::time::Duration::from_millis(arg.parse().unwrap_or(0)));
                "ok".into()
            }
            "forkloop" => {
                use std::io::Write;
                let leader = setsid_child(|| loop {
                    // SAFETY: fork in a loop; children loop too (bounded by RLIMIT_NPROC).
                    if unsafe { libc::fork() } < 0 {
                        std::thread::sleep(std::time::Duration::from_millis(1));
                    }
                });
                println!("pid {leader}");
                std::io::stdout().flush().unwrap();
                std::thread::sleep(std::time::Duration::from_millis(300));
                "ok".into()
            }
            other => format!("unknown probe {other}"),
        };
        println!("{out}");
        std::process::ExitCode::SUCCESS
    }

    // -----------------------------------------------------------------------------------------
    // The runner side

    fn exe() -> PathBuf {
        std::env::current_exe().unwrap().canonicalize().unwrap()
    }

    /// Drops to an unprivileged user first when run as root.
    pub fn become_unprivileged() {
        if !nix::unistd::geteuid().is_root() {
            return;
        }
        let (uid, gid) = nix::unistd::User::from_name("gatehouse-test")
            .ok()
            .flatten()
            .map(|u| (u.uid.as_raw(), u.gid.as_raw()))
            .unwrap_or(command::identity::NOBODY);
        command::identity::become_user(uid, gid).expect("become an unprivileged user");
    }

    struct Dir {
        _t: tempfile::TempDir,
        path: PathBuf,
    }

    fn dir() -> Dir {
        let t = tempfile::tempdir().unwrap();
        let path = t.path().canonicalize().unwrap();
        Dir { _t: t, path }
    }

    fn spec(work: &Path, action: &str, arg: &str) -> SandboxSpec {
        let me = nix::unistd::geteuid().as_raw();
        SandboxSpec {
            argv: vec![
                exe().display().to_string(),
                PROBE.into(),
                action.into(),
                arg.into(),
            ],
            cwd: work.to_path_buf(),
            grants: vec![
                PathGrant {
                    path: exe(),
                    access: GrantAccess::Read,
                },
                PathGrant {
                    path: work.to_path_buf(),
                    access: GrantAccess::ReadWrite,
                },
            ],
            env: vec![],
            home: command::identity::home_of(me),
            state_home: None,
            network: Network::None,
            limits: Limits::default(),
            long_run: false,
            protect: vec![],
            allow_degraded: false,
            hide: Hide::default(),
            tier: ConfinementTier::Landlock,
        }
    }

    /// What a run printed and how it ended.
    struct Ran {
        out: String,
        status: Option<i32>,
        held: Vec<command::project::Held>,
    }

    fn events(sb: &Sandboxed) -> Option<i32> {
        let mut status = None;
        while let Some(e) = sb.read_event().unwrap() {
            match e {
                Event::Exited { status: s } => status = Some(s),
                Event::SetupFailed { message } => panic!("setup failed: {message}"),
                Event::ExecFailed { message, .. } => panic!("exec failed: {message}"),
                Event::Started => {}
            }
        }
        status
    }

    fn run_spec(s: SandboxSpec) -> Ran {
        let p = command::prepare(s).expect("prepare");
        let mut sb = p.spawn().expect("spawn");
        let mut out = String::new();
        std::fs::File::from(sb.stdout.take().unwrap())
            .read_to_string(&mut out)
            .unwrap();
        let status = events(&sb);
        let held = sb.sweep().unwrap();
        Ran { out, status, held }
    }

    fn inside(work: &Path, action: &str, arg: &str) -> String {
        let r = run_spec(spec(work, action, arg));
        assert_eq!(r.status, Some(0), "probe {action} {arg}: {}", r.out);
        r.out.trim().to_string()
    }

    /// The control: the same probe outside any sandbox.
    fn outside(action: &str, arg: &str) -> String {
        let o = std::process::Command::new(exe())
            .args([PROBE, action, arg])
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    }

    fn errno(e: i32) -> String {
        format!("errno {e}")
    }

    fn denied(work: &Path, action: &str, arg: &str, e: i32) {
        assert_eq!(
            outside(action, arg),
            "ok",
            "control: {action} {arg} outside"
        );
        assert_eq!(inside(work, action, arg), errno(e), "{action} {arg} inside");
    }

    // -----------------------------------------------------------------------------------------
    // Tests

    fn report_names_the_tier_and_no_namespaces() {
        let d = dir();
        std::fs::write(d.path.join("secret.txt"), "s").unwrap();
        let mut s = spec(&d.path, "read", "x");
        s.hide = Hide {
            exclude: vec!["secret.txt".into()],
            sensitive: false,
        };
        let p = command::prepare(s).unwrap();
        assert_eq!(p.report.tier, ConfinementTier::Landlock);
        assert!(p.report.namespaces.is_empty(), "{:?}", p.report.namespaces);
        assert_eq!(p.report.masked, vec![d.path.join("secret.txt")]);
        assert_eq!(p.report.landlock_abi, command::landlock_kernel_abi());
        assert!(p.report.degraded.is_empty(), "{:?}", p.report.degraded);
        // A grant of /tmp would show the other commands' private directories.
        let mut s = spec(&d.path, "read", "x");
        s.grants.push(PathGrant {
            path: "/tmp".into(),
            access: GrantAccess::Read,
        });
        let e = command::prepare(s).unwrap_err().to_string();
        assert!(e.contains("private directories"), "{e}");
    }

    fn homes_and_host_tmp_are_unreadable() {
        let d = dir();
        let me = nix::unistd::geteuid().as_raw();
        let home = command::identity::home_of(me);
        if home.is_dir() {
            denied(&d.path, "list", &home.display().to_string(), libc::EACCES);
        }
        denied(&d.path, "list", "/home", libc::EACCES);
        denied(&d.path, "list", "/tmp", libc::EACCES);
        // Another directory of the same user, not granted.
        let other = dir();
        std::fs::write(other.path.join("f"), "x").unwrap();
        denied(
            &d.path,
            "read",
            &other.path.join("f").display().to_string(),
            libc::EACCES,
        );
        // The system stays readable.
        assert_eq!(inside(&d.path, "read", "/etc/passwd"), "ok");
    }

    fn hidden_and_protected_entries_are_unreadable_beside_readable_siblings() {
        let d = dir();
        std::fs::write(d.path.join("secret.txt"), "s").unwrap();
        std::fs::write(d.path.join("open.txt"), "o").unwrap();
        std::fs::create_dir_all(d.path.join(".ssh")).unwrap();
        std::fs::write(d.path.join(".ssh/id_ed25519"), "k").unwrap();
        std::fs::create_dir_all(d.path.join("src")).unwrap();
        std::fs::write(d.path.join("src/main.rs"), "m").unwrap();
        let hide = || Hide {
            exclude: vec!["secret.txt".into()],
            sensitive: false,
        };
        let run = |action: &str, p: &str| {
            let mut s = spec(&d.path, action, &d.path.join(p).display().to_string());
            s.hide = hide();
            let r = run_spec(s);
            r.out.trim().to_string()
        };
        for p in ["secret.txt", ".ssh/id_ed25519"] {
            assert_eq!(outside("read", &d.path.join(p).display().to_string()), "ok");
            assert_eq!(run("read", p), errno(libc::EACCES), "{p}");
        }
        assert_eq!(run("read", "open.txt"), "ok");
        assert_eq!(run("read", "src/main.rs"), "ok");
        assert_eq!(run("write", "src/new.rs"), "ok");
        // The root's listing is kept; a new entry directly in it is not (documented).
        assert_eq!(run("list", ""), "ok");
        assert_eq!(run("write", "new-at-root"), errno(libc::EACCES));
    }

    fn writes_outside_the_write_grants_are_refused() {
        let d = dir();
        let ro = dir();
        std::fs::write(ro.path.join("f"), "x").unwrap();
        let mut s = spec(&d.path, "write", &ro.path.join("f").display().to_string());
        s.grants.push(PathGrant {
            path: ro.path.clone(),
            access: GrantAccess::Read,
        });
        assert_eq!(
            outside("write", &ro.path.join("g").display().to_string()),
            "ok"
        );
        assert_eq!(run_spec(s).out.trim(), errno(libc::EACCES));
        assert_eq!(
            inside(&d.path, "write", &d.path.join("w").display().to_string()),
            "ok"
        );
        assert_eq!(std::fs::read_to_string(d.path.join("w")).unwrap(), "probe");
        // The system is read-only.
        assert_eq!(
            inside(&d.path, "write", "/etc/gatehouse-probe"),
            errno(libc::EACCES)
        );
    }

    fn private_tmp_is_the_commands_and_removed_after() {
        let d = dir();
        let both = inside(&d.path, "env", "TMPDIR,TMP");
        let (tmp, tmp2) = both.split_once(' ').unwrap();
        assert!(
            tmp.starts_with("/tmp/gatehouse-cmd.") && tmp.ends_with("/tmp"),
            "{tmp}"
        );
        assert_eq!(tmp, tmp2);
        assert!(!Path::new(tmp).exists(), "{tmp} left behind");
        assert!(
            !Path::new(tmp).parent().unwrap().exists(),
            "{tmp} left behind"
        );
        // Writable while the command runs.
        let w = inside(&d.path, "write", "/tmp/../tmp/x");
        assert_eq!(
            w,
            errno(libc::EACCES),
            "the host's /tmp is not the command's"
        );
        let home = inside(&d.path, "env", "HOME");
        assert!(
            home.starts_with("/tmp/gatehouse-cmd.") && home.ends_with("/home"),
            "{home}"
        );
    }

    fn no_network_refuses_inet_sockets() {
        let d = dir();
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port().to_string();
        assert_eq!(outside("tcp", &port), "ok");
        // The denylist refuses the socket before Landlock's TCP rule would refuse the connect.
        assert_eq!(inside(&d.path, "tcp", &port), errno(libc::EAFNOSUPPORT));
        assert_eq!(inside(&d.path, "tcp-socket", ""), errno(libc::EAFNOSUPPORT));
    }

    fn proxy_spec(
        work: &Path,
        action: &str,
        arg: &str,
    ) -> (SandboxSpec, std::os::unix::net::UnixStream) {
        let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        let mut s = spec(work, action, arg);
        s.network = Network::Proxy {
            connector: OwnedFd::from(b),
            token: "tok".into(),
        };
        (s, a)
    }

    fn proxy_bridge_port_only() {
        let d = dir();
        let (s, broker) = proxy_spec(&d.path, "proxy", "");
        let r = run_spec(s);
        let out = r.out.trim();
        assert!(out.starts_with("ok "), "{out}");
        // The bridge handed the connection over with the proxy byte.
        let mut byte = [0u8; 1];
        let mut fds = std::collections::VecDeque::new();
        let n = command::fdpass::recv_with_fds(&broker, &mut byte, &mut fds).unwrap();
        assert_eq!(
            (n, fds.len(), byte[0]),
            (1, 1, ipc_schema::exec::CONNECTOR_PROXY)
        );
        // Another loopback port: refused by Landlock.
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port().to_string();
        assert_eq!(outside("tcp", &port), "ok");
        let (s, _broker) = proxy_spec(&d.path, "tcp", &port);
        assert_eq!(run_spec(s).out.trim(), errno(libc::EACCES));
    }

    fn udp_raw_and_netlink_sockets_are_refused_with_the_proxy() {
        let d = dir();
        for (action, e) in [
            ("udp", libc::EACCES),
            ("raw", libc::EACCES),
            ("netlink", libc::EAFNOSUPPORT),
        ] {
            let (s, _b) = proxy_spec(&d.path, action, "");
            assert_eq!(run_spec(s).out.trim(), errno(e), "{action}");
        }
        assert_eq!(outside("udp", ""), "ok");
        assert_eq!(outside("netlink", ""), "ok");
        let (s, _b) = proxy_spec(&d.path, "tcp-socket", "");
        assert_eq!(run_spec(s).out.trim(), "ok");
    }

    fn signals_to_outside_processes_are_refused() {
        let d = dir();
        denied(
            &d.path,
            "kill",
            &std::process::id().to_string(),
            libc::EPERM,
        );
    }

    fn outside_processes_environ_is_unreadable() {
        let d = dir();
        let p = format!("/proc/{}/environ", std::process::id());
        denied(&d.path, "read", &p, libc::EACCES);
    }

    fn abstract_sockets_outside_are_refused() {
        use std::os::linux::net::SocketAddrExt;
        let d = dir();
        let name = format!("gh-tier-{}", std::process::id());
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(&name).unwrap();
        let _l = std::os::unix::net::UnixListener::bind_addr(&addr).unwrap();
        denied(&d.path, "abstract", &name, libc::EPERM);
    }

    fn namespaces_and_sysv_ipc_are_refused() {
        let d = dir();
        denied(&d.path, "shmget", "", libc::EPERM);
        // Outside, an unprivileged unshare(CLONE_NEWNET) is refused too (EPERM): the denylist's
        // refusal is the same errno, so it is shown by the filter's own unit tests.
        assert_eq!(inside(&d.path, "unshare-net", ""), errno(libc::EPERM));
    }

    fn pidfd(pid: i32) -> OwnedFd {
        sandbox::linux::process::pidfd_open(pid as u32).expect("pidfd of a live process")
    }

    /// ESRCH through the pidfd: exactly that process is gone.
    fn assert_gone(fd: &OwnedFd, what: &str) {
        let r = sandbox::linux::process::pidfd_send_signal(fd, 0);
        assert_eq!(
            r.map_err(|e| e.raw_os_error()),
            Err(Some(libc::ESRCH)),
            "{what} still there"
        );
    }

    fn read_pid(sb: &mut Sandboxed) -> (i32, BufReader<std::fs::File>) {
        let mut r = BufReader::new(std::fs::File::from(sb.stdout.take().unwrap()));
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        let pid = line
            .trim()
            .strip_prefix("pid ")
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("no pid: {line:?}"));
        (pid, r)
    }

    fn a_setsid_daemon_is_gone_after_the_command_ends() {
        let d = dir();
        let p = command::prepare(spec(&d.path, "daemon", "200")).unwrap();
        let mut sb = p.spawn().unwrap();
        let (pid, mut rest) = read_pid(&mut sb);
        let fd = pidfd(pid);
        sandbox::linux::process::pidfd_send_signal(&fd, 0).expect("the daemon runs");
        let mut tail = String::new();
        rest.read_to_string(&mut tail).unwrap();
        assert_eq!(events(&sb).map(|s| libc::WEXITSTATUS(s)), Some(0), "{tail}");
        sb.reap().unwrap();
        assert_gone(&fd, "the daemon");
    }

    fn session_members(sid: i32) -> Vec<i32> {
        let mut v = Vec::new();
        for e in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                continue;
            };
            let after = &stat[stat.rfind(')').unwrap() + 2..];
            let f: Vec<&str> = after.split(' ').collect();
            // state ppid pgrp session
            if f.get(3).and_then(|s| s.parse::<i32>().ok()) == Some(sid) {
                v.push(pid);
            }
        }
        v
    }

    fn a_fork_loop_is_gone_after_the_command_ends() {
        let d = dir();
        let mut s = spec(&d.path, "forkloop", "");
        s.limits.processes = 200;
        let p = command::prepare(s).unwrap();
        let mut sb = p.spawn().unwrap();
        let (pid, mut rest) = read_pid(&mut sb);
        let fd = pidfd(pid);
        // The leader prints its pid before its setsid: wait for its session.
        let t = std::time::Instant::now();
        while session_members(pid).is_empty() && t.elapsed().as_secs() < 5 {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(
            !session_members(pid).is_empty(),
            "the fork loop never started"
        );
        let mut tail = String::new();
        rest.read_to_string(&mut tail).unwrap();
        events(&sb);
        sb.reap().unwrap();
        assert_gone(&fd, "the fork loop's leader");
        assert_eq!(
            session_members(pid),
            Vec::<i32>::new(),
            "fork loop processes left"
        );
    }

    fn a_kill_ends_the_whole_tree() {
        let d = dir();
        let p = command::prepare(spec(&d.path, "daemon", "60000")).unwrap();
        let mut sb = p.spawn().unwrap();
        let init = pidfd(sb.pid as i32);
        let (pid, _rest) = read_pid(&mut sb);
        let fd = pidfd(pid);
        let t = std::time::Instant::now();
        sb.kill().unwrap();
        // Init ended the tree itself, well inside the grace before SIGKILL.
        assert_eq!(events(&sb), None, "a killed command reports no status");
        sb.reap().unwrap();
        assert!(
            t.elapsed() < std::time::Duration::from_millis(400),
            "{:?}",
            t.elapsed()
        );
        assert_gone(&fd, "the daemon");
        assert_gone(&init, "init");
    }

    /// The gaps of `not_held.rs` that a probe can show, shown: if one of these starts failing,
    /// the tier holds more than the list says, and the list must change with it.
    fn what_the_tier_does_not_hold_is_as_listed() {
        use command::not_held::WITHOUT_NAMESPACES;
        let listed = |n: &str| assert!(WITHOUT_NAMESPACES.iter().any(|x| x.name == n), "{n}");
        let d = dir();
        let other = dir();
        std::fs::write(other.path.join("f"), "x").unwrap();
        let f = other.path.join("f").display().to_string();
        // Not readable, but there to look up and to watch.
        assert_eq!(inside(&d.path, "read", &f), errno(libc::EACCES));
        assert_eq!(inside(&d.path, "stat", &f), "ok");
        assert_eq!(
            inside(&d.path, "inotify", &other.path.display().to_string()),
            "ok"
        );
        listed("metadata_outside_grants");
        // A named Unix socket outside the grants: reachable.
        let sock = other.path.join("s.sock");
        let _l = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        assert_eq!(inside(&d.path, "unix", &sock.display().to_string()), "ok");
        listed("named_unix_sockets_reachable");
        // Other processes' status is readable (not their environment: see above).
        let status = format!("/proc/{}/status", std::process::id());
        assert_eq!(inside(&d.path, "read", &status), "ok");
        listed("proc_other_processes_visible");
    }

    fn the_namespace_tier_runs_the_same_probe() {
        let d = dir();
        let mut s = spec(&d.path, "env", "TMPDIR,TMP");
        s.tier = ConfinementTier::Namespaces;
        let r = run_spec(s);
        assert_eq!((r.status, r.out.trim()), (Some(0), "/tmp /tmp"));
    }

    fn git_control_files_changed_during_the_run_are_put_back() {
        let d = dir();
        let g = d.path.join(".git");
        for sub in ["objects", "refs", "hooks"] {
            std::fs::create_dir_all(g.join(sub)).unwrap();
        }
        std::fs::write(g.join("HEAD"), "ref: refs/heads/main\n").unwrap();
        let original = "[core]\n\tbare = false\n";
        std::fs::write(g.join("config"), original).unwrap();
        std::fs::write(g.join("hooks/pre-commit.sample"), "#!/bin/sh\n").unwrap();
        let cfg = g.join("config").display().to_string();
        let r = run_spec(spec(&d.path, "append", &cfg));
        assert_eq!(
            r.out.trim(),
            "ok",
            "the landlock tier leaves it writable (not held)"
        );
        assert_eq!(std::fs::read_to_string(g.join("config")).unwrap(), original);
        let held = g.join("config.gatehouse-held");
        assert!(std::fs::read_to_string(&held)
            .unwrap()
            .contains("fsmonitor"));
        assert!(
            r.held.iter().any(|h| h.path == g.join("config")),
            "{:?}",
            r.held
        );
        // A hook planted in a known git dir is set aside too.
        let hook = g.join("hooks/post-checkout").display().to_string();
        let r = run_spec(spec(&d.path, "write", &hook));
        assert_eq!(r.out.trim(), "ok");
        assert!(!g.join("hooks/post-checkout").exists());
        assert!(g.join("hooks/post-checkout.gatehouse-held").exists());
        assert!(g.join("hooks/pre-commit.sample").exists());
        // The git dir's own files are readable (not held either: listed in not_held).
        assert_eq!(inside(&d.path, "read", &cfg), "ok");
    }
}

#[cfg(target_os = "linux")]
fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some(tier::PROBE) {
        return tier::probe(&args[2..]);
    }
    tier::become_unprivileged();
    runner::run(tier::TESTS)
}

#[cfg(not(target_os = "linux"))]
fn main() {}
