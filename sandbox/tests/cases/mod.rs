//! The test cases: the profile matrix (every profile against the actions DESIGN.md names, each
//! beside its control), then one function per property.

use crate::probe;
use crate::runner::Test;
use std::ffi::OsString;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};

/// Every test, in the order they run.
pub fn all() -> Vec<Test> {
    let mut all = Vec::new();
    all.extend_from_slice(MATRIX);
    all.extend_from_slice(TESTS);
    all
}

const PROFILES: [&str; 6] = ["fs", "net", "exec", "secrets", "ui", "gateway"];
const EACCES: i32 = libc::EACCES;

// ---------------------------------------------------------------------------------------------
// Probes

/// Directories for the fs profile: `ro/data.txt` under a read-only grant, `rw/` read-write.
struct Grants {
    _dir: tempfile::TempDir,
    ro: PathBuf,
    rw: PathBuf,
}

impl Grants {
    fn new() -> Grants {
        let dir = tempfile::tempdir().expect("tempdir");
        // Readable by the `nobody` probes of root runs.
        std::fs::set_permissions(
            dir.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
        let ro = dir.path().join("ro");
        let rw = dir.path().join("rw");
        std::fs::create_dir(&ro).unwrap();
        std::fs::create_dir(&rw).unwrap();
        std::fs::write(ro.join("data.txt"), "readonly-data").unwrap();
        Grants { _dir: dir, ro, rw }
    }
    fn ro_file(&self) -> String {
        self.ro.join("data.txt").display().to_string()
    }
}

struct Probe {
    layer: String,
    profile: String,
    action: String,
    env: Vec<(String, OsString)>,
    grants: Option<Grants>,
    as_nobody: bool,
}

fn probe(layer: &str, profile: &str, action: &str) -> Probe {
    Probe {
        layer: layer.into(),
        profile: profile.into(),
        action: action.into(),
        env: Vec::new(),
        grants: None,
        as_nobody: false,
    }
}

/// A probe that locks nothing down: the positive control.
fn control(action: &str) -> Probe {
    probe("none", "none", action)
}

impl Probe {
    fn arg(mut self, a: impl Into<OsString>) -> Probe {
        self.env.push((probe::ENV_ARG.into(), a.into()));
        self
    }
    fn env(mut self, k: &str, v: &str) -> Probe {
        self.env.push((k.into(), v.into()));
        self
    }
    fn grant_paths(mut self, ro: &Path, rw: &Path) -> Probe {
        self.env.push((probe::ENV_RO.into(), ro.into()));
        self.env.push((probe::ENV_RW.into(), rw.into()));
        self
    }
    /// Runs the probe as `nobody` when the tests run as root, so that what the kernel shows
    /// about an unprivileged process can be checked there too.
    fn unprivileged_if_root(mut self) -> Probe {
        self.as_nobody = is_root();
        self
    }

    fn command(&mut self) -> Command {
        if self.profile == "fs" && self.grants.is_none() {
            self.grants = Some(Grants::new());
        }
        let mut cmd = Command::new(std::env::current_exe().expect("current_exe"));
        cmd.env(
            probe::ENV,
            format!("{} {} {}", self.layer, self.profile, self.action),
        );
        if let Some(g) = &self.grants {
            cmd.env(probe::ENV_RO, &g.ro).env(probe::ENV_RW, &g.rw);
        }
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        // Variables lockdown must clear: a would-be secret, and one that changes what a panic
        // does (a backtrace would need /proc/self/maps and the binary, both out of reach).
        cmd.env("GH_PROBE_SECRET", "hunter2")
            .env("RUST_BACKTRACE", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if self.as_nobody {
            cmd.uid(65534).gid(65534);
        }
        cmd
    }

    fn run(mut self) -> Outcome {
        let what = format!("probe `{} {} {}`", self.layer, self.profile, self.action);
        let out = self.command().output().expect("spawn probe");
        Outcome {
            what,
            layer: self.layer,
            status: out.status,
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
}

struct Outcome {
    what: String,
    layer: String,
    status: ExitStatus,
    stdout: String,
    stderr: String,
}

impl Outcome {
    fn context(&self) -> String {
        format!(
            "{}: {:?}\n--- stdout\n{}--- stderr\n{}",
            self.what, self.status, self.stdout, self.stderr
        )
    }

    /// The layer was applied (or, for controls, deliberately not).
    fn assert_layer_applied(&self) {
        let first = self.stdout.lines().next().unwrap_or("");
        let want = if self.layer == "none" {
            "unlocked"
        } else {
            "locked"
        };
        assert_eq!(first, want, "{}", self.context());
    }

    fn result(&self) -> &str {
        self.assert_layer_applied();
        assert_eq!(self.status.code(), Some(0), "{}", self.context());
        self.stdout.lines().nth(1).unwrap_or("")
    }

    fn killed_by_sigsys(&self) {
        self.assert_layer_applied();
        assert_eq!(
            self.status.signal(),
            Some(libc::SIGSYS),
            "expected a SIGSYS kill: {}",
            self.context()
        );
        assert_eq!(self.stdout.lines().count(), 1, "{}", self.context());
    }

    fn errno(&self, errno: i32) {
        assert_eq!(
            self.result(),
            format!("errno {errno}"),
            "{}",
            self.context()
        );
    }

    /// The action succeeded; returns what it printed after `ok`.
    fn ok(&self) -> String {
        let r = self.result();
        assert!(
            r == "ok" || r.starts_with("ok "),
            "expected success: {}",
            self.context()
        );
        r.strip_prefix("ok").unwrap().trim().to_string()
    }

    fn lockdown_error(&self) -> String {
        assert_eq!(self.status.code(), Some(3), "{}", self.context());
        let line = self.stdout.lines().next().unwrap_or("");
        line.strip_prefix("lockdown-error ")
            .unwrap_or_else(|| panic!("expected a lockdown error: {}", self.context()))
            .to_string()
    }
}

fn is_root() -> bool {
    // SAFETY: geteuid has no arguments and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// What a probe should see.
#[derive(Clone, Copy)]
enum Expect {
    Sigsys,
    Errno(i32),
    Ok,
    /// Success, and the second output line is exactly this (what an exec'd program printed).
    Line(&'static str),
}

fn check(o: Outcome, e: Expect) {
    match e {
        Expect::Sigsys => o.killed_by_sigsys(),
        Expect::Errno(n) => o.errno(n),
        Expect::Ok => {
            o.ok();
        }
        Expect::Line(l) => assert_eq!(o.result(), l, "{}", o.context()),
    }
}

// ---------------------------------------------------------------------------------------------
// The matrix: every profile against the four actions DESIGN.md names, each beside its control.

macro_rules! matrix {
    ($($name:ident: $layer:literal $profile:literal $action:literal => $expect:expr;)*) => {
        $(fn $name() { check(probe($layer, $profile, $action).run(), $expect) })*
        const MATRIX: &[Test] = &[$((stringify!($name), $name)),*];
    };
}

matrix! {
    control_socket_inet_succeeds: "none" "none" "socket-inet" => Expect::Ok;
    control_execve_runs_the_program: "none" "none" "execve" => Expect::Line("exec-ok");
    control_ptrace_traceme_succeeds: "none" "none" "ptrace" => Expect::Ok;
    control_open_etc_passwd_succeeds: "none" "none" "open-passwd" => Expect::Ok;

    fs_socket_inet_is_killed: "full" "fs" "socket-inet" => Expect::Sigsys;
    fs_execve_is_killed: "full" "fs" "execve" => Expect::Sigsys;
    fs_ptrace_is_killed: "full" "fs" "ptrace" => Expect::Sigsys;
    fs_open_etc_passwd_is_eacces: "full" "fs" "open-passwd" => Expect::Errno(EACCES);

    net_socket_inet_is_allowed: "full" "net" "socket-inet" => Expect::Ok;
    net_execve_is_killed: "full" "net" "execve" => Expect::Sigsys;
    net_ptrace_is_killed: "full" "net" "ptrace" => Expect::Sigsys;
    net_open_etc_passwd_is_eacces: "full" "net" "open-passwd" => Expect::Errno(EACCES);

    // (It may: its network namespace is empty, see exec_helper_is_cut_off_from_the_network.)
    exec_socket_inet_is_allowed: "full" "exec" "socket-inet" => Expect::Ok;
    exec_execve_runs_the_program: "full" "exec" "execve" => Expect::Line("exec-ok");
    exec_ptrace_is_killed: "full" "exec" "ptrace" => Expect::Sigsys;
    exec_open_etc_passwd_is_allowed: "full" "exec" "open-passwd" => Expect::Ok;

    secrets_socket_inet_is_killed: "full" "secrets" "socket-inet" => Expect::Sigsys;
    secrets_execve_is_killed: "full" "secrets" "execve" => Expect::Sigsys;
    secrets_ptrace_is_killed: "full" "secrets" "ptrace" => Expect::Sigsys;
    secrets_open_etc_passwd_is_eacces: "full" "secrets" "open-passwd" => Expect::Errno(EACCES);

    ui_socket_inet_is_killed: "full" "ui" "socket-inet" => Expect::Sigsys;
    ui_execve_is_killed: "full" "ui" "execve" => Expect::Sigsys;
    ui_ptrace_is_killed: "full" "ui" "ptrace" => Expect::Sigsys;
    ui_open_etc_passwd_is_eacces: "full" "ui" "open-passwd" => Expect::Errno(EACCES);

    gateway_socket_inet_is_killed: "full" "gateway" "socket-inet" => Expect::Sigsys;
    gateway_execve_is_killed: "full" "gateway" "execve" => Expect::Sigsys;
    gateway_ptrace_is_killed: "full" "gateway" "ptrace" => Expect::Sigsys;
    gateway_open_etc_passwd_is_eacces: "full" "gateway" "open-passwd" => Expect::Errno(EACCES);

    // Each layer alone, so that removing either one fails a test even where both refuse.
    landlock_alone_refuses_etc_passwd_to_fs: "landlock" "fs" "open-passwd" => Expect::Errno(EACCES);
    landlock_alone_refuses_etc_passwd_to_net: "landlock" "net" "open-passwd" => Expect::Errno(EACCES);
    landlock_alone_refuses_etc_passwd_to_secrets: "landlock" "secrets" "open-passwd" => Expect::Errno(EACCES);
    landlock_alone_refuses_etc_passwd_to_ui: "landlock" "ui" "open-passwd" => Expect::Errno(EACCES);
    landlock_alone_refuses_etc_passwd_to_gateway: "landlock" "gateway" "open-passwd" => Expect::Errno(EACCES);
    seccomp_alone_refuses_etc_passwd_to_net: "seccomp" "net" "open-passwd" => Expect::Errno(EACCES);
    seccomp_alone_refuses_etc_passwd_to_secrets: "seccomp" "secrets" "open-passwd" => Expect::Errno(EACCES);
    seccomp_alone_refuses_etc_passwd_to_ui: "seccomp" "ui" "open-passwd" => Expect::Errno(EACCES);
    seccomp_alone_refuses_etc_passwd_to_gateway: "seccomp" "gateway" "open-passwd" => Expect::Errno(EACCES);

    // Net: inet only, threads only.
    net_unix_socket_is_killed: "full" "net" "socket-unix" => Expect::Sigsys;
    control_unix_socket_succeeds: "none" "none" "socket-unix" => Expect::Ok;
    net_fork_is_killed: "full" "net" "fork" => Expect::Sigsys;
    gateway_fork_is_killed: "full" "gateway" "fork" => Expect::Sigsys;
    control_fork_succeeds: "none" "none" "fork" => Expect::Ok;

    // Exec: no socket family but Unix and inet; terminal injection is killed.
    exec_netlink_socket_is_eacces: "full" "exec" "socket-netlink" => Expect::Errno(EACCES);
    control_netlink_socket_succeeds: "none" "none" "socket-netlink" => Expect::Ok;
    exec_tiocsti_is_killed: "full" "exec" "ioctl-tiocsti" => Expect::Sigsys;
    control_tiocsti_is_not_killed: "none" "none" "ioctl-tiocsti" => Expect::Errno(libc::ENOTTY);

    // Ui: terminal ioctls pass (stdin is /dev/null here, so ENOTTY), others kill.
    ui_window_size_ioctl_is_allowed: "full" "ui" "ioctl-winsize" => Expect::Errno(libc::ENOTTY);
    ui_other_ioctl_is_killed: "full" "ui" "ioctl-fionread" => Expect::Sigsys;
    gateway_terminal_ioctl_is_killed: "full" "gateway" "ioctl-winsize" => Expect::Sigsys;
    control_fionread_is_not_killed: "none" "none" "ioctl-fionread" => Expect::Errno(libc::ENOTTY);

    // Threads: clone3 hides its flags, so it answers ENOSYS where threads are allowed.
    net_clone3_is_enosys: "full" "net" "clone3" => Expect::Errno(libc::ENOSYS);
    fs_clone3_is_killed: "full" "fs" "clone3" => Expect::Sigsys;
    control_clone3_is_not_enosys: "none" "none" "clone3" => Expect::Errno(libc::EINVAL);
    exec_clone3_is_not_enosys: "full" "exec" "clone3" => Expect::Errno(libc::EINVAL);

    // Signal scoping: signalling the parent (outside the domain) is refused by Landlock.
    exec_signal_to_parent_is_eperm: "full" "exec" "kill-parent" => Expect::Errno(libc::EPERM);
    fs_signal_to_parent_is_killed: "full" "fs" "kill-parent" => Expect::Sigsys;
    control_signal_to_parent_succeeds: "none" "none" "kill-parent" => Expect::Ok;

    // The broker (the router): no exec, nothing outside its own directories.
    broker_cannot_exec: "broker" "broker" "execve" => Expect::Sigsys;
    broker_cannot_open_files_outside_its_dirs: "broker" "broker" "open-passwd" => Expect::Errno(EACCES);
}

/// The tests below the matrix, by function name.
macro_rules! tests {
    ($($name:ident),* $(,)?) => {
        const TESTS: &[Test] = &[$((stringify!($name), $name)),*];
    };
}

tests![
    fs_profile_grants_read_write_roots,
    fs_profile_refuses_writes_under_read_only_roots,
    fs_profile_refuses_truncation_under_read_only_roots,
    fs_profile_moves_files_between_directories,
    fs_profile_refuses_a_missing_grant_root,
    std_work_is_not_killed_in_any_profile,
    panics_are_not_killed_in_any_profile,
    abort_is_not_killed_in_any_profile,
    x32_syscalls_are_killed_in_every_profile,
    i386_syscalls_are_killed_in_every_profile,
    x32_guard_alone_kills_x32_syscalls,
    executable_memory_is_killed_except_in_exec,
    signals_to_others_are_killed_except_in_exec,
    keyring_is_for_secrets_only,
    io_uring_is_enosys_for_exec_and_killed_elsewhere,
    kernel_shows_seccomp_and_no_new_privs,
    kernel_shows_not_dumpable_and_no_core,
    stray_fds_are_closed_and_kept_fds_kept,
    environment_is_cleared_except_kept,
    lockdown_refuses_a_multi_threaded_process,
    report_is_truthful,
    net_profile_runs_tokio_and_connects,
    ui_and_gateway_run_a_tokio_runtime,
    landlock_refuses_tcp_except_to_net_and_exec,
    landlock_scopes_abstract_unix_sockets,
    landlock_scopes_signals,
    exec_helper_is_cut_off_from_the_network,
    exec_helper_in_the_landlock_tier_reaches_only_its_bridge_ports,
    exec_profile_runs_ordinary_programs,
    exec_children_hold_no_capabilities,
    exec_commands_can_build_their_sandbox,
    fs_landlock_would_forbid_mount_namespaces,
    exec_keeps_the_parent_death_signal,
    router_lockdown_confines_the_broker,
];

// ---------------------------------------------------------------------------------------------
// Fs profile

fn fs_profile_grants_read_write_roots() {
    let g = Grants::new();
    let target = g.rw.join("new.txt");
    probe("full", "fs", "write-file")
        .arg(&target)
        .grant_paths(&g.ro, &g.rw)
        .run()
        .ok();
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "written");
    let read = probe("full", "fs", "read-file")
        .arg(g.ro_file())
        .grant_paths(&g.ro, &g.rw)
        .run()
        .ok();
    assert_eq!(read, "readonly-data");
}

fn fs_profile_refuses_writes_under_read_only_roots() {
    let g = Grants::new();
    for victim in [g.ro.join("new.txt"), g.ro.join("data.txt")] {
        probe("full", "fs", "write-file")
            .arg(&victim)
            .grant_paths(&g.ro, &g.rw)
            .run()
            .errno(EACCES);
    }
    assert_eq!(
        std::fs::read_to_string(g.ro_file()).unwrap(),
        "readonly-data"
    );
    assert!(!g.ro.join("new.txt").exists());

    control("write-file").arg(g.ro.join("new.txt")).run().ok();
    assert_eq!(
        std::fs::read_to_string(g.ro.join("new.txt")).unwrap(),
        "written"
    );
}

fn fs_profile_refuses_truncation_under_read_only_roots() {
    // O_RDONLY|O_TRUNC needs only read access before Landlock ABI 3; this is why fs needs 3.
    let g = Grants::new();
    let file = g.ro_file();
    probe("full", "fs", "trunc")
        .arg(&file)
        .grant_paths(&g.ro, &g.rw)
        .run()
        .errno(EACCES);
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "readonly-data");

    control("trunc").arg(&file).run().ok();
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "");
}

fn fs_profile_moves_files_between_directories() {
    let g = Grants::new();
    std::fs::create_dir(g.rw.join("a")).unwrap();
    std::fs::create_dir(g.rw.join("b")).unwrap();
    std::fs::write(g.rw.join("a/f"), "moved").unwrap();
    let rw = &g.rw;
    let arg = format!("{} {}", rw.join("a/f").display(), rw.join("b/f").display());
    probe("full", "fs", "rename")
        .arg(arg)
        .grant_paths(&g.ro, rw)
        .run()
        .ok();
    assert_eq!(std::fs::read_to_string(rw.join("b/f")).unwrap(), "moved");

    // Out of the read-only root: refused (removing a file needs write access there).
    let arg = format!("{} {}", g.ro_file(), rw.join("stolen").display());
    probe("full", "fs", "rename")
        .arg(arg)
        .grant_paths(&g.ro, rw)
        .run()
        .errno(EACCES);
    assert!(Path::new(&g.ro_file()).exists());
}

fn fs_profile_refuses_a_missing_grant_root() {
    let g = Grants::new();
    let missing = g.ro.join("does-not-exist");
    let err = probe("full", "fs", "nothing")
        .grant_paths(&missing, &g.rw)
        .run()
        .lockdown_error();
    assert!(
        err.contains("grant root") && err.contains("does-not-exist"),
        "{err}"
    );
}

// ---------------------------------------------------------------------------------------------
// Every profile: the allowlists are sufficient for std, and refuse x32

fn std_work_is_not_killed_in_any_profile() {
    assert_eq!(control("std-work").run().ok(), "50000 true true");
    for p in PROFILES {
        let o = probe("full", p, "std-work").run();
        assert_eq!(o.ok(), "50000 true true", "{}", o.context());
        // The panic inside catch_unwind printed its message: stderr works after lockdown.
        assert!(o.stderr.contains("panicked"), "{}", o.context());
    }
}

fn panics_are_not_killed_in_any_profile() {
    for p in PROFILES {
        let o = probe("full", p, "panic").run();
        o.assert_layer_applied();
        assert_eq!(o.status.code(), Some(101), "{}", o.context());
        assert!(
            o.stderr.contains("probe panic after lockdown"),
            "{}",
            o.context()
        );
        // The runner's RUST_BACKTRACE=1 was cleared with the rest of the environment.
        assert!(!o.stderr.contains("stack backtrace"), "{}", o.context());
    }
}

fn abort_is_not_killed_in_any_profile() {
    for p in PROFILES {
        let o = probe("full", p, "abort").run();
        o.assert_layer_applied();
        assert_eq!(o.status.signal(), Some(libc::SIGABRT), "{}", o.context());
    }
}

fn x32_syscalls_are_killed_in_every_profile() {
    if !cfg!(target_arch = "x86_64") {
        return;
    }
    // Control: not killed (the kernel may lack the x32 ABI and answer ENOSYS, or run it).
    let c = control("x32").run();
    let r = c.result();
    assert!(
        r == "ok" || r == format!("errno {}", libc::ENOSYS),
        "{}",
        c.context()
    );
    for p in PROFILES {
        probe("full", p, "x32").run().killed_by_sigsys();
    }
}

fn i386_syscalls_are_killed_in_every_profile() {
    if !cfg!(target_arch = "x86_64") {
        return;
    }
    // Control: not killed (ok, or ENOSYS on a kernel without IA-32 emulation).
    let c = control("int80").run();
    let r = c.result();
    assert!(
        r == "ok" || r == format!("errno {}", libc::ENOSYS),
        "{}",
        c.context()
    );
    for p in PROFILES {
        probe("full", p, "int80").run().killed_by_sigsys();
    }
    probe("x32guard", "none", "int80").run().killed_by_sigsys();
}

fn x32_guard_alone_kills_x32_syscalls() {
    if !cfg!(target_arch = "x86_64") {
        return;
    }
    probe("x32guard", "none", "x32").run().killed_by_sigsys();
    // ...and nothing else.
    probe("x32guard", "none", "std-work").run().ok();
    check(
        probe("x32guard", "none", "execve").run(),
        Expect::Line("exec-ok"),
    );
}

fn executable_memory_is_killed_except_in_exec() {
    for action in ["mmap-exec", "mprotect-exec"] {
        control(action).run().ok();
        probe("full", "exec", action).run().ok();
    }
    for p in PROFILES.into_iter().filter(|p| *p != "exec") {
        probe("full", p, "mmap-exec").run().killed_by_sigsys();
        probe("full", p, "mprotect-exec").run().killed_by_sigsys();
    }
}

fn signals_to_others_are_killed_except_in_exec() {
    // tgkill is allowed for abort() on the process itself (see abort_is_not_killed_...).
    control("tgkill-parent").run().ok();
    for p in PROFILES.into_iter().filter(|p| *p != "exec") {
        probe("full", p, "tgkill-parent").run().killed_by_sigsys();
    }
    // Exec may signal, but Landlock keeps it inside its domain.
    probe("full", "exec", "tgkill-parent")
        .run()
        .errno(libc::EPERM);
}

// ---------------------------------------------------------------------------------------------
// What the kernel says about a locked-down process

/// A probe that locked down and now waits on stdin, so the kernel's view of it can be read.
struct Waiting {
    child: std::process::Child,
    out: BufReader<std::process::ChildStdout>,
    /// An fs probe's grant directories, kept until it exits.
    _grants: Option<Grants>,
}

impl Waiting {
    fn start(layer: &str, profile: &str, as_nobody: bool) -> Waiting {
        let mut p = probe(layer, profile, "wait");
        if as_nobody {
            p = p.unprivileged_if_root();
        }
        let mut cmd = p.command();
        cmd.stdin(Stdio::piped()).stderr(Stdio::inherit());
        let mut child = cmd.spawn().expect("spawn probe");
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let first = if layer == "none" {
            "unlocked"
        } else {
            "locked"
        };
        for want in [first, "ready"] {
            let mut line = String::new();
            out.read_line(&mut line).unwrap();
            assert_eq!(line.trim(), want, "probe {profile} did not get ready");
        }
        Waiting {
            child,
            out,
            _grants: p.grants.take(),
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Closes its stdin and checks that it ends well.
    fn finish(mut self) {
        drop(self.child.stdin.take());
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut self.out, &mut rest).unwrap();
        let status = self.child.wait().unwrap();
        assert!(status.success(), "{status:?} {rest}");
        assert_eq!(rest.trim(), "ok");
    }
}

fn kernel_shows_seccomp_and_no_new_privs() {
    // Control: the runner itself is not filtered.
    let me = sandbox::process::read_proc_status(std::process::id()).unwrap();
    assert_eq!(me.seccomp, 0);
    for p in PROFILES {
        // As the runner's own user: when that is root, the capability checks mean something.
        let w = Waiting::start("full", p, false);
        let st = sandbox::process::read_proc_status(w.pid()).unwrap();
        assert_eq!(st.seccomp, 2, "{p}: {st:?}");
        assert!(st.no_new_privs, "{p}: {st:?}");
        assert_eq!((st.cap_eff, st.cap_prm), (0, 0), "{p}: {st:?}");
        let text = std::fs::read_to_string(format!("/proc/{}/status", w.pid())).unwrap();
        for set in ["CapInh", "CapAmb"] {
            let line = text.lines().find(|l| l.starts_with(set)).unwrap();
            assert!(line.ends_with("0000000000000000"), "{p}: {line}");
        }
        w.finish();
    }
}

fn kernel_shows_not_dumpable_and_no_core() {
    for p in PROFILES {
        let w = Waiting::start("full", p, true);
        let pid = w.pid();
        let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
        let core = limits
            .lines()
            .find(|l| l.starts_with("Max core file size"))
            .unwrap();
        let fields: Vec<&str> = core.split_whitespace().collect();
        assert_eq!(&fields[4..6], &["0", "0"], "{p}: {core}");
        // A non-dumpable process's /proc files belong to root, whatever its own uid.
        let uid = std::fs::metadata(format!("/proc/{pid}/environ"))
            .unwrap()
            .uid();
        assert_eq!(uid, 0, "{p}: /proc/{pid}/environ belongs to {uid}");
        let real_uid = sandbox::process::read_proc_status(pid).unwrap().uid;
        assert!(
            real_uid != 0 || !is_root(),
            "the probe should run unprivileged ({real_uid})"
        );
        w.finish();
    }
    // Control: an unprivileged process that did not lock down owns its /proc files.
    let w = Waiting::start("none", "none", true);
    let owner = std::fs::metadata(format!("/proc/{}/environ", w.pid()))
        .unwrap()
        .uid();
    let real = sandbox::process::read_proc_status(w.pid()).unwrap().uid;
    assert_eq!(owner, real, "control probe's /proc files belong to it");
    w.finish();
}

fn stray_fds_are_closed_and_kept_fds_kept() {
    assert_eq!(
        control("fds").run().ok(),
        "stray=ok kept=ok",
        "control: both descriptors open"
    );
    for p in PROFILES {
        assert_eq!(
            probe("full", p, "fds").run().ok(),
            format!("stray=errno {} kept=ok", libc::EBADF),
            "{p}"
        );
    }
}

fn environment_is_cleared_except_kept() {
    let c = control("env").env(probe::ENV_KEEP, "1").run().ok();
    assert!(c.contains("GH_PROBE_SECRET=hunter2"), "control: {c}");
    for p in PROFILES {
        let vars = probe("full", p, "env").env(probe::ENV_KEEP, "1").run().ok();
        assert_eq!(vars, format!("{}=1", probe::ENV_KEEP), "{p}");
    }
}

fn lockdown_refuses_a_multi_threaded_process() {
    for p in PROFILES {
        let err = probe("full", p, "threads").run().lockdown_error();
        assert!(err.contains("2 threads"), "{p}: {err}");
    }
    probe("full", "gateway", "nothing").run().ok();
}

fn report_is_truthful() {
    let abi = sandbox::landlock_abi();
    assert!(
        abi >= 6,
        "these tests expect a kernel with Landlock ABI 6 or newer, found {abi}"
    );
    for (p, profile) in [
        ("fs", sandbox::Profile::Fs(Default::default())),
        ("net", sandbox::Profile::Net),
        ("exec", sandbox::Profile::Exec),
        (
            "secrets",
            sandbox::Profile::Secrets(ipc_schema::secrets::StoreKind::Keyutils),
        ),
        ("ui", sandbox::Profile::Ui),
        ("gateway", sandbox::Profile::Gateway),
    ] {
        let count = sandbox::linux::seccomp::allowed_syscall_count(&profile);
        let min = sandbox::linux::landlock::min_abi(&profile);
        assert!(count > 20, "{p}: {count}");
        let r = probe("full", p, "report").run().ok();
        assert_eq!(
            r,
            format!(
                "profile={p} fds=true env=true core=true dumpable=true nnp=true caps=true \
                 abi={abi} min={min} landlock=FullyEnforced seccomp=true syscalls={count} \
                 ns={} degraded=0",
                if p == "exec" { "user,net" } else { "" }
            )
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Runtimes and networking

fn listener_saying_hello() -> (u16, std::thread::JoinHandle<()>) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let h = std::thread::spawn(move || {
        l.set_nonblocking(false).unwrap();
        if let Ok((mut s, _)) = l.accept() {
            let _ = s.write_all(b"hello");
        }
    });
    (port, h)
}

fn net_profile_runs_tokio_and_connects() {
    let (port, h) = listener_saying_hello();
    let o = probe("full", "net", "tokio-connect")
        .arg(port.to_string())
        .run();
    assert_eq!(o.ok(), "hello 7", "{}", o.context());
    h.join().unwrap();
}

fn ui_and_gateway_run_a_tokio_runtime() {
    for p in ["ui", "gateway", "net"] {
        let o = probe("full", p, "tokio-runtime").run();
        assert_eq!(o.ok(), "42", "{}", o.context());
        assert!(o.stderr.contains("tokio stderr works"), "{}", o.context());
    }
}

fn landlock_refuses_tcp_except_to_net_and_exec() {
    let (port, h) = listener_saying_hello();
    control("tcp-connect").arg(port.to_string()).run().ok();
    h.join().unwrap();
    // Exec leaves TCP to its empty network namespace (not part of this layer).
    for p in ["net", "exec"] {
        let (port, h) = listener_saying_hello();
        probe("landlock", p, "tcp-connect")
            .arg(port.to_string())
            .run()
            .ok();
        h.join().unwrap();
    }
    // No listener needed: Landlock refuses before the connection is attempted.
    for p in ["fs", "secrets", "ui", "gateway"] {
        probe("landlock", p, "tcp-connect")
            .arg(port.to_string())
            .run()
            .errno(EACCES);
    }
}

fn abstract_listener() -> (String, std::os::unix::net::UnixListener) {
    use std::os::linux::net::SocketAddrExt;
    let name = format!("gatehouse-sandbox-test-{}", std::process::id());
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(&name).unwrap();
    (
        name,
        std::os::unix::net::UnixListener::bind_addr(&addr).unwrap(),
    )
}

fn landlock_scopes_abstract_unix_sockets() {
    let (name, _listener) = abstract_listener();
    control("abstract-connect").arg(&name).run().ok();
    // Fully locked down, exec does not even see it: abstract names belong to a network
    // namespace, and it has its own. Scoping (the layer alone, below) refuses it anyway.
    probe("full", "exec", "abstract-connect")
        .arg(&name)
        .run()
        .errno(libc::ECONNREFUSED);
    for p in PROFILES {
        probe("landlock", p, "abstract-connect")
            .arg(&name)
            .run()
            .errno(libc::EPERM);
    }
}

fn landlock_scopes_signals() {
    for p in PROFILES {
        probe("landlock", p, "kill-parent").run().errno(libc::EPERM);
    }
}

// ---------------------------------------------------------------------------------------------
// Exec: ordinary programs run under its filter; children hold nothing

const SHELL_SCRIPT: &str = r#"
set -e
echo a | cat >/dev/null
ls / >/dev/null
id -u >/dev/null
d=$(mktemp -d)
echo x > "$d/f"; cp "$d/f" "$d/g"; mv "$d/g" "$d/h"; sort "$d/h" | sed s/x/y/ | grep -q y
find /usr/share -maxdepth 1 | wc -l >/dev/null
rm -r "$d"
(sleep 0.01 & wait)
if command -v python3 >/dev/null; then
  python3 -c 'import subprocess, hashlib, json, threading; t = threading.Thread(target=print, args=("",)); t.start(); t.join(); assert subprocess.run(["true"]).returncode == 0'
fi
if command -v git >/dev/null; then git --version >/dev/null; fi
echo shell-ok
"#;

fn exec_profile_runs_ordinary_programs() {
    let c = control("shell").arg(SHELL_SCRIPT).run();
    assert!(c.stdout.contains("shell-ok"), "{}", c.context());
    let o = probe("full", "exec", "shell").arg(SHELL_SCRIPT).run();
    o.assert_layer_applied();
    assert!(
        o.status.success() && o.stdout.contains("shell-ok"),
        "{}",
        o.context()
    );
}

fn exec_children_hold_no_capabilities() {
    let script =
        "grep -E '^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs|Seccomp):' /proc/self/status";
    let o = probe("full", "exec", "shell").arg(script).run();
    o.assert_layer_applied();
    assert!(o.status.success(), "{}", o.context());
    for line in o.stdout.lines().skip(1) {
        let (name, value) = line.split_once(':').unwrap();
        let value = value.trim();
        match name {
            "NoNewPrivs" => assert_eq!(value, "1", "{line}"),
            "Seccomp" => assert_eq!(value, "2", "{line}"),
            _ => assert_eq!(value, "0000000000000000", "{line}"),
        }
    }
    assert_eq!(o.stdout.lines().count(), 8, "{}", o.context());
    if is_root() {
        // Control: without lockdown, root's children hold capabilities.
        let c = control("shell").arg(script).run();
        assert!(
            !c.stdout.contains("CapEff:\t0000000000000000"),
            "{}",
            c.context()
        );
    }
}

/// What the exec sandbox does for each command (src/linux/command): new user, mount, pid,
/// net, ipc and UTS namespaces, a tmpfs, a host name, loopback up, a TCP listener on it.
///
/// Run unprivileged even by root: a user namespace may map uid 0 only if its creator held
/// CAP_SETFCAP, which a locked-down helper never does, so a root exec helper's commands cannot
/// be root in their namespace (they have to run as a user, which is the point anyway).
fn exec_commands_can_build_their_sandbox() {
    let c = control("command-sandbox").unprivileged_if_root().run();
    assert_eq!(
        c.result(),
        "ok",
        "unprivileged user namespaces are unavailable here, and the exec sandbox needs them: {}",
        c.context()
    );
    probe("full", "exec", "command-sandbox")
        .unprivileged_if_root()
        .run()
        .ok();
}

fn exec_helper_is_cut_off_from_the_network() {
    let (port, h) = listener_saying_hello();
    control("tcp-connect").arg(port.to_string()).run().ok();
    h.join().unwrap();
    let (port, h) = listener_saying_hello();
    // Its loopback is down and there is no other interface: 127.0.0.1 is unreachable.
    probe("full", "exec", "tcp-connect")
        .arg(port.to_string())
        .run()
        .errno(libc::ENETUNREACH);
    // The listener got nothing from the probe; release it.
    drop(std::net::TcpStream::connect(("127.0.0.1", port)).unwrap());
    h.join().unwrap();
}

/// A listener on 127.0.0.1 below 32768, outside any bridge block (those are chosen in
/// 32768-60999), so that the Landlock tier's refusal of it cannot be chance.
fn listener_outside_bridge_blocks() -> (u16, std::net::TcpListener) {
    for port in (20000..32000).step_by(97) {
        if let Ok(l) = std::net::TcpListener::bind(("127.0.0.1", port)) {
            return (port, l);
        }
    }
    panic!("no free port in 20000-32000");
}

fn exec_helper_in_the_landlock_tier_reaches_only_its_bridge_ports() {
    // Positive control, and the same probe in the namespace tier: connecting, binding and a
    // UDP socket all work for a process that did not lock down.
    let (port, l) = listener_outside_bridge_blocks();
    control("tcp-connect").arg(port.to_string()).run().ok();
    // Where user namespaces are refused the helper has no empty network namespace: Landlock
    // refuses TCP to any port outside its bridge block (EACCES, before any packet is sent).
    probe("full-flat", "exec", "tcp-connect")
        .arg(port.to_string())
        .run()
        .errno(EACCES);
    drop(l);
    let (port, l) = listener_outside_bridge_blocks();
    drop(l);
    control("tcp-bind").arg(port.to_string()).run().ok();
    probe("full-flat", "exec", "tcp-bind")
        .arg(port.to_string())
        .run()
        .errno(EACCES);
    // UDP (and ICMP, raw, SCTP: not TCP, so beyond Landlock's rules) is refused by seccomp.
    control("udp-socket").run().ok();
    control("udp6-socket").run().ok();
    probe("full", "exec", "udp-socket").run().ok();
    probe("full-flat", "exec", "udp-socket").run().errno(EACCES);
    probe("full-flat", "exec", "udp6-socket")
        .run()
        .errno(EACCES);
    // What the helper needs still works under the same layers: the bridge listens on a port
    // of its block, and a connection to it goes through.
    let got = probe("full-flat", "exec", "bridge-roundtrip").run().ok();
    let parts: Vec<&str> = got.split(' ').collect();
    assert_eq!(parts.len(), 3, "{got}");
    assert_eq!(parts[0], "Some(Landlock)", "{got}");
    let port: u16 = parts[1].parse().unwrap();
    let (first, last) = parts[2].split_once('-').unwrap();
    let (first, last): (u16, u16) = (first.parse().unwrap(), last.parse().unwrap());
    assert_eq!(
        last - first + 1,
        sandbox::linux::bridge_ports::POOL_SIZE,
        "{got}"
    );
    assert!((first..=last).contains(&port), "{got}");
    // The namespace tier chooses no block (its network namespace is empty).
    let ns = probe("full", "exec", "bridge-roundtrip").run();
    assert!(ns.result().starts_with("errno "), "{}", ns.context());
}

fn exec_keeps_the_parent_death_signal() {
    // The broker relies on PR_SET_PDEATHSIG (set at spawn) surviving the helper's lockdown,
    // which for exec includes entering new namespaces.
    assert_eq!(control("pdeathsig").run().ok(), "9");
    assert_eq!(probe("full", "exec", "pdeathsig").run().ok(), "9");
}

fn fs_landlock_would_forbid_mount_namespaces() {
    // Why the exec profile's ruleset handles no filesystem right: any would forbid mounts.
    probe("landlock", "fs", "userns-mount")
        .run()
        .errno(libc::EPERM);
}

// ---------------------------------------------------------------------------------------------
// Calls some profiles make and others must not

fn keyring_is_for_secrets_only() {
    // Whatever the keyring answers here (a container may refuse it), secrets gets the same
    // answer as an unconfined process: its filter lets the call through.
    let c = control("keyctl").run();
    let unconfined = c.result();
    assert!(!unconfined.is_empty(), "{}", c.context());
    let s = probe("full", "secrets", "keyctl").run();
    assert_eq!(s.result(), unconfined, "{}", s.context());
    // Exec refuses it as if the kernel had no keyrings (commands fall back), others kill.
    probe("full", "exec", "keyctl").run().errno(libc::ENOSYS);
    for p in ["fs", "net", "ui", "gateway"] {
        probe("full", p, "keyctl").run().killed_by_sigsys();
    }
}

fn io_uring_is_enosys_for_exec_and_killed_elsewhere() {
    // Control: the kernel answers for itself (EFAULT for the null parameters, or EPERM where
    // io_uring is disabled), never ENOSYS, so the exec result below is the filter's.
    let c = control("io-uring").run();
    assert_ne!(
        c.result(),
        format!("errno {}", libc::ENOSYS),
        "{}",
        c.context()
    );
    probe("full", "exec", "io-uring").run().errno(libc::ENOSYS);
    for p in ["fs", "net", "secrets", "ui", "gateway"] {
        probe("full", p, "io-uring").run().killed_by_sigsys();
    }
}

// ---------------------------------------------------------------------------------------------
// The broker

fn router_lockdown_confines_the_broker() {
    let g = Grants::new();
    let own = g.rw.join("audit.db").display().to_string();
    let broker = |action: &str| {
        probe("broker", "broker", action)
            .grant_paths(&g.ro, &g.rw)
            .run()
    };
    // Its own directory: written as before.
    probe("broker", "broker", "write-file")
        .grant_paths(&g.ro, &g.rw)
        .arg(&own)
        .run()
        .ok();
    assert_eq!(std::fs::read_to_string(&own).unwrap(), "written");
    // Controls: the same calls unlocked succeed.
    control("open-passwd").run().ok();
    control("socket-inet").run().ok();
    control("fork").run().ok();
    let c = control("proc-status").run().ok();
    assert!(c.contains("NoNewPrivs:0"), "control: {c}");
    // Landlock: nothing outside its directories, not even /etc/passwd.
    check(broker("open-passwd"), Expect::Errno(libc::EACCES));
    // seccomp: no socket (EACCES, for libraries that probe), no fork (SIGSYS).
    check(broker("socket-inet"), Expect::Errno(libc::EACCES));
    check(broker("fork"), Expect::Sigsys);
}
