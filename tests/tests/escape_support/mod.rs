//! The ways a command reaches the exec sandbox, for the escape suite: every case runs through
//! each path that can express it, with the same assertions.
//!
//! - [`Via::Sandbox`]: `gatehouse sandbox` (the sandbox built in the CLI process).
//! - [`Via::RunCommand`]: what agents use: `run_command` on a broker's gateway channel (the
//!   typed `ToolCall` that `gatehouse mcp` sends), judged by the policy (here `allow`) and run by
//!   the broker's exec-helper. Each call is its own gateway connection, hence its own session, so
//!   that a repeated command is run again rather than answered from the ledger.
//! - [`Via::Run`]: `gatehouse run` (the agent's own sandbox, built in cmd_run.rs) with the probe
//!   as the "agent", `--own-tools write` so the working root is writable as in the others.
//!
//! A case is a function `fn(Via)`; [`escape_cases!`] makes one `#[test]` per case per path
//! (`case_name::sandbox`, `case_name::run_command`, `case_name::run`). Inside, a case uses a
//! [`Ctx`]: the working root, directories granted beside it, the probe's path as the command
//! sees it, and [`Out`] with the same [`Status`] whichever path ran the command.

#![allow(dead_code)]

use crate::broker_core_support::{policy_with, Broker, Gateway, Instance};
use gatehouse_tests::bin;
pub use gatehouse_tests::Host;
use ipc_schema::tool::{RunCommand, ToolCall, ToolReply, ToolResult};
use std::cell::RefCell;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The path a command takes into the sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    Sandbox,
    RunCommand,
    Run,
}

/// Makes one `#[test]` per path and machine for each case: `escape_cases! { on [Namespaces,
/// Container, NoMount]; case_fn: [Sandbox, RunCommand, Run], ... }` gives `case_fn::sandbox`,
/// `case_fn::sandbox_container`, `case_fn::sandbox_nomount`, `case_fn::run_command`, ... Without
/// `on [...];` the cases run where namespaces work only. A case is `fn(Via, Host)`.
#[macro_export]
macro_rules! escape_cases {
    (@via $case:ident, $via:ident, [$($host:ident),+]) => {
        $( $crate::escape_cases!(@one $case, $via, $host); )+
    };
    (@one $case:ident, Sandbox, Namespaces) => {
        #[test]
        fn sandbox() { super::$case($crate::escape_support::Via::Sandbox, $crate::escape_support::Host::Namespaces) }
    };
    (@one $case:ident, Sandbox, Container) => {
        #[test]
        fn sandbox_container() { super::$case($crate::escape_support::Via::Sandbox, $crate::escape_support::Host::Container) }
    };
    (@one $case:ident, Sandbox, NoMount) => {
        #[test]
        fn sandbox_nomount() { super::$case($crate::escape_support::Via::Sandbox, $crate::escape_support::Host::NoMount) }
    };
    (@one $case:ident, RunCommand, Namespaces) => {
        #[test]
        fn run_command() { super::$case($crate::escape_support::Via::RunCommand, $crate::escape_support::Host::Namespaces) }
    };
    (@one $case:ident, RunCommand, Container) => {
        #[test]
        fn run_command_container() { super::$case($crate::escape_support::Via::RunCommand, $crate::escape_support::Host::Container) }
    };
    (@one $case:ident, RunCommand, NoMount) => {
        #[test]
        fn run_command_nomount() { super::$case($crate::escape_support::Via::RunCommand, $crate::escape_support::Host::NoMount) }
    };
    (@one $case:ident, Run, Namespaces) => {
        #[test]
        fn run() { super::$case($crate::escape_support::Via::Run, $crate::escape_support::Host::Namespaces) }
    };
    (@one $case:ident, Run, Container) => {
        #[test]
        fn run_container() { super::$case($crate::escape_support::Via::Run, $crate::escape_support::Host::Container) }
    };
    (@one $case:ident, Run, NoMount) => {
        #[test]
        fn run_nomount() { super::$case($crate::escape_support::Via::Run, $crate::escape_support::Host::NoMount) }
    };
    (on $hosts:tt; $($case:ident : [$($via:ident),+ $(,)?]),+ $(,)?) => {
        $(
            mod $case {
                $( $crate::escape_cases!(@via $case, $via, $hosts); )+
            }
        )+
    };
    ($($case:ident : [$($via:ident),+ $(,)?]),+ $(,)?) => {
        $crate::escape_cases!(on [Namespaces]; $($case : [$($via),+]),+);
    };
}

pub fn root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// Hands `p` (and what is under it) to nobody when the tests run as root: the sandbox runs a
/// root caller's commands as the owner of the working root, or nobody, and the exec-helper as
/// nobody.
pub fn chown_tree(p: &Path) {
    if root() {
        std::os::unix::fs::lchown(p, Some(65534), Some(65534)).unwrap();
        if p.is_dir() && !p.is_symlink() {
            for e in std::fs::read_dir(p).unwrap().flatten() {
                chown_tree(&e.path());
            }
        }
    }
}

/// A directory the sandbox's user owns (nobody when the tests run as root).
pub fn owned_dir(prefix: &str) -> tempfile::TempDir {
    owned_dir_in(prefix, &std::env::temp_dir())
}

pub fn owned_dir_in(prefix: &str, parent: &Path) -> tempfile::TempDir {
    let d = tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in(parent)
        .unwrap();
    chown_tree(d.path());
    d
}

/// How a command ended, the same whichever path ran it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Status {
    Exited(i32),
    /// Killed by this signal.
    Signaled(i32),
    TimedOut,
    /// gatehouse refused it (or could not build the sandbox) before it ran: the message.
    Refused(String),
    /// The program was not found: the message.
    NotFound(String),
    /// The program could not be executed: the message.
    NotExecutable(String),
}

impl Status {
    /// The CLI's exit status mapped back (see cmd_sandbox.rs): 124 timed out, 125 refused, 126
    /// not executable, 127 not found, 128+N killed by signal N. (A command that exits with one
    /// of these itself is read the same way; the cases do not.)
    fn from_cli(code: Option<i32>, stderr: &str) -> Status {
        match code {
            Some(124) => Status::TimedOut,
            Some(125) => Status::Refused(stderr.to_string()),
            Some(126) => Status::NotExecutable(stderr.to_string()),
            Some(127) => Status::NotFound(stderr.to_string()),
            Some(c) if c > 128 => Status::Signaled(c - 128),
            Some(c) => Status::Exited(c),
            None => Status::Refused(format!("the CLI itself was killed; stderr: {stderr}")),
        }
    }

    pub fn message(&self) -> &str {
        match self {
            Status::Refused(m) | Status::NotFound(m) | Status::NotExecutable(m) => m,
            _ => "",
        }
    }
}

/// A command's end and output.
#[derive(Debug, Clone)]
pub struct Out {
    pub status: Status,
    pub stdout: Vec<u8>,
    /// The command's stderr (the CLI paths: with the CLI's own notices).
    pub stderr: String,
    /// What the path said about the run beside the output: the CLI's stderr, or the
    /// `run_command` result's outcome and sandbox line.
    pub notes: String,
    /// Bytes dropped beyond the output cap, stdout and stderr (run_command; the CLI paths say
    /// it on stderr).
    pub dropped: [u64; 2],
}

impl Out {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.stdout).trim_end().to_string()
    }
}

/// What a case needs set up before the path starts.
#[derive(Default, Clone)]
pub struct Setup {
    /// The environment of the process that starts the sandbox: the CLI for `gatehouse
    /// sandbox` and `gatehouse run`, the broker (whose exec-helper starts it) for run_command.
    pub caller_env: Vec<(String, String)>,
    /// Where the working root lives (default: the temp dir).
    pub under: Option<PathBuf>,
    /// The working root granted read-only (`--allow-read` of it, the default `--own-tools
    /// read`, a grant without `write`).
    pub read_only_root: bool,
}

/// One case's world on one path.
pub struct Ctx {
    pub via: Via,
    pub host: Host,
    setup: Setup,
    work: PathBuf,
    /// `--data-dir` of the CLI paths.
    data: PathBuf,
    /// The probe as the command names it.
    probe: PathBuf,
    /// `--allow-read`/`--allow-write` arguments of the CLI paths.
    grants: RefCell<Vec<String>>,
    keep: RefCell<Vec<tempfile::TempDir>>,
    serial: RefCell<u32>,
    // Declared after the directories' users so that it stops first.
    broker: Option<Broker>,
    inst: Option<Instance>,
    _sandbox_dirs: Option<(tempfile::TempDir, tempfile::TempDir)>,
}

/// The case's broker stops, then the audit key of its data dir is forgotten (the `sandbox`
/// path's data dir has no [`Instance`] to do it).
impl Drop for Ctx {
    fn drop(&mut self) {
        drop(self.broker.take());
        gatehouse_tests::forget_audit_key(&self.data);
    }
}

impl Ctx {
    pub fn new(via: Via, host: Host) -> Ctx {
        Ctx::with(via, host, Setup::default())
    }

    pub fn with(via: Via, host: Host, setup: Setup) -> Ctx {
        let parent = setup.under.clone().unwrap_or_else(std::env::temp_dir);
        match via {
            Via::Sandbox => {
                let work = owned_dir_in("gh-escape-work-", &parent);
                let data = tempfile::Builder::new()
                    .prefix("gh-escape-data-")
                    .tempdir()
                    .unwrap();
                let mut grants = vec![
                    "--allow-read".to_string(),
                    gatehouse_tests::exec_probe().display().to_string(),
                ];
                if setup.read_only_root {
                    grants.push("--allow-read".into());
                    grants.push(work.path().display().to_string());
                }
                // `gatehouse sandbox` asks the broker of its data dir, which runs the command
                // through its exec-helper: started here (as the CLI would start it), so that
                // it stops with the case. The caller's environment is the CLI's, below. In the
                // Landlock tier the data dir's policy lets commands run there (and says nothing
                // else: no policy file is the built-in profile, and `sandbox` takes its grants
                // from the command line).
                if host.landlock() {
                    let config = data.path().join("config");
                    std::fs::create_dir_all(&config).unwrap();
                    std::fs::write(config.join("policy.toml"), host.policy("")).unwrap();
                }
                let broker = start_broker(data.path(), &[], host);
                Ctx {
                    via,
                    host,
                    work: work.path().to_path_buf(),
                    data: data.path().to_path_buf(),
                    probe: gatehouse_tests::exec_probe(),
                    grants: RefCell::new(grants),
                    keep: RefCell::new(Vec::new()),
                    serial: RefCell::new(0),
                    broker: Some(broker),
                    inst: None,
                    _sandbox_dirs: Some((work, data)),
                    setup,
                }
            }
            Via::RunCommand | Via::Run => Ctx::with_broker(via, host, setup, &parent),
        }
    }

    /// An instance (`root/{config,data,run}` and `root/project`, the grant root), its broker
    /// with the caller's environment, the working root `project/work`, and the probe copied
    /// to `project/probe/` (run_command's sandbox shows only the grant).
    fn with_broker(via: Via, host: Host, setup: Setup, parent: &Path) -> Ctx {
        let caps = if setup.read_only_root {
            "\"read\""
        } else {
            "\"read\", \"write\", \"edit\", \"delete\""
        };
        let policy = host.policy(&format!(
            "revision = 0\n[tools]\nread_file = \"allow\"\nlist_dir = \"allow\"\nrun_command = \"allow\"\n\
             [[grant]]\nroot = \"{{ROOT}}\"\ncapabilities = [{caps}]\n"
        ));
        let _ = policy_with;
        let inst = instance_in(parent, &policy);
        let work = inst.project.join("work");
        std::fs::create_dir(&work).unwrap();
        chown_tree(&work);
        let probe_dir = inst.project.join("probe");
        std::fs::create_dir(&probe_dir).unwrap();
        std::fs::set_permissions(&probe_dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let probe = probe_dir.join("gatehouse-exec-probe");
        let src = gatehouse_tests::exec_probe();
        if std::fs::hard_link(&src, &probe).is_err() {
            std::fs::copy(&src, &probe).unwrap();
            std::fs::set_permissions(&probe, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let broker = start_broker(inst.root(), &setup.caller_env, host);
        let mut grants = Vec::new();
        if via == Via::Run {
            grants.push("--allow-read".into());
            grants.push(probe.display().to_string());
        }
        Ctx {
            via,
            host,
            work,
            data: inst.root().to_path_buf(),
            probe,
            grants: RefCell::new(grants),
            keep: RefCell::new(Vec::new()),
            serial: RefCell::new(0),
            broker: Some(broker),
            inst: Some(inst),
            _sandbox_dirs: None,
            setup,
        }
    }

    /// The working root (the command's current directory).
    pub fn work(&self) -> &Path {
        &self.work
    }

    /// The probe's path, as the command names it.
    pub fn probe_bin(&self) -> String {
        self.probe.display().to_string()
    }

    /// The audit rows of this path's broker (`gatehouse audit tail --json`).
    pub fn audit_rows(&self) -> Vec<serde_json::Value> {
        crate::broker_core_support::audit_rows_in(&self.data)
    }

    /// The audit rows once `ready` holds for them (or after 20 s, for the caller's assertion to
    /// show what is there): audit-only rows such as a killed peer's are group-committed by the
    /// broker's writer after the event they record, and after its log line.
    pub fn audit_rows_when(
        &self,
        ready: impl Fn(&[serde_json::Value]) -> bool,
    ) -> Vec<serde_json::Value> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        loop {
            let rows = self.audit_rows();
            if ready(&rows) || std::time::Instant::now() > deadline {
                return rows;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }

    /// The broker of the run_command and `gatehouse run` paths.
    pub fn broker(&self) -> Option<&Broker> {
        self.broker.as_ref()
    }

    fn fresh(&self, prefix: &str) -> String {
        let mut n = self.serial.borrow_mut();
        *n += 1;
        format!("{prefix}{n}")
    }

    /// A directory outside every grant (owned by the sandbox's user).
    pub fn ungranted(&self, prefix: &str) -> PathBuf {
        let d = owned_dir(prefix);
        let p = d.path().to_path_buf();
        self.keep.borrow_mut().push(d);
        p
    }

    /// A directory the command may read (run_command: one inside its grant, which it may also
    /// write when the grant writes).
    pub fn readable(&self, prefix: &str) -> PathBuf {
        match self.via {
            Via::RunCommand => self.inside_grant(prefix),
            Via::Sandbox | Via::Run => self.granted_dir(prefix, "--allow-read"),
        }
    }

    /// A directory the command may read and write (`gatehouse run`, which grants nothing
    /// writable beside the working root, and run_command: one inside the working root's grant).
    pub fn writable(&self, prefix: &str) -> PathBuf {
        match self.via {
            Via::Sandbox => self.granted_dir(prefix, "--allow-write"),
            Via::Run => {
                let p = self.work.join(self.fresh(prefix));
                std::fs::create_dir(&p).unwrap();
                chown_tree(&p);
                p
            }
            Via::RunCommand => self.inside_grant(prefix),
        }
    }

    /// A directory the command may read but not write, beside a writable working root; `None`
    /// where the path cannot grant one (run_command's sandbox gets only the one grant of its
    /// working directory).
    pub fn read_only(&self, prefix: &str) -> Option<PathBuf> {
        match self.via {
            Via::RunCommand => None,
            Via::Sandbox | Via::Run => Some(self.granted_dir(prefix, "--allow-read")),
        }
    }

    fn granted_dir(&self, prefix: &str, flag: &str) -> PathBuf {
        let p = self.ungranted(prefix);
        let mut g = self.grants.borrow_mut();
        g.push(flag.into());
        g.push(p.display().to_string());
        p
    }

    fn inside_grant(&self, prefix: &str) -> PathBuf {
        let p = self
            .inst
            .as_ref()
            .expect("an instance")
            .project
            .join(self.fresh(prefix));
        std::fs::create_dir(&p).unwrap();
        chown_tree(&p);
        p
    }

    /// The probe's one line from inside the sandbox (it must have run: exit 0 or 1), or
    /// `killed by signal N` when a signal ended it.
    pub fn probe(&self, op: &[&str]) -> String {
        let p = self.probe_bin();
        let mut argv = vec![p.as_str()];
        argv.extend_from_slice(op);
        let out = self.run(&argv);
        if let Status::Signaled(n) = out.status {
            return format!("killed by signal {n}");
        }
        assert!(
            matches!(out.status, Status::Exited(0) | Status::Exited(1)),
            "{:?}: probe {op:?}: {:?}\nstdout: {}\nstderr: {}\nnotes: {}",
            self.via,
            out.status,
            out.text(),
            out.stderr,
            out.notes
        );
        out.text()
    }

    pub fn run(&self, argv: &[&str]) -> Out {
        self.run_opts(argv, &Opts::default())
    }

    /// With a time limit (`--timeout`, `timeout_secs`; `gatehouse run` has none of its own).
    pub fn run_timeout(&self, argv: &[&str], secs: u32) -> Out {
        assert_ne!(
            self.via,
            Via::Run,
            "gatehouse run has no time limit of its own"
        );
        self.run_opts(
            argv,
            &Opts {
                timeout: Some(secs),
                ..Opts::default()
            },
        )
    }

    pub fn run_opts(&self, argv: &[&str], o: &Opts) -> Out {
        match self.via {
            Via::Sandbox | Via::Run => self.run_cli(argv, o),
            Via::RunCommand => self.run_command(argv, o),
        }
    }

    /// The `gatehouse` command line that runs `argv` on this path (Sandbox, Run).
    pub fn cli(&self, argv: &[&str], o: &Opts) -> Command {
        let mut c = self.host.command(&bin("gatehouse"));
        c.arg("--data-dir").arg(&self.data);
        match self.via {
            Via::Sandbox => {
                c.arg("sandbox");
                if let Some(t) = o.timeout {
                    c.arg("--timeout").arg(t.to_string());
                }
            }
            Via::Run => {
                c.arg("run");
                if !self.setup.read_only_root {
                    c.args(["--own-tools", "write"]);
                }
            }
            Via::RunCommand => panic!("run_command has no command line"),
        }
        c.args(self.grants.borrow().iter())
            .args(&o.extra)
            .arg("--")
            .args(argv)
            .current_dir(&self.work)
            .stdin(Stdio::null());
        for (k, v) in &self.setup.caller_env {
            c.env(k, v);
        }
        c
    }

    fn run_cli(&self, argv: &[&str], o: &Opts) -> Out {
        let out = self.cli(argv, o).output().expect("run gatehouse");
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        Out {
            status: Status::from_cli(out.status.code(), &stderr),
            stdout: out.stdout,
            notes: stderr.clone(),
            stderr,
            dropped: [0, 0],
        }
    }

    fn run_command(&self, argv: &[&str], o: &Opts) -> Out {
        assert!(
            o.extra.is_empty(),
            "run_command takes no command-line options: {:?}",
            o.extra
        );
        let broker = self.broker.as_ref().expect("a broker");
        let mut gw: Gateway = broker.gateway();
        let call = ToolCall::RunCommand(RunCommand {
            argv: argv.iter().map(|s| s.to_string()).collect(),
            cwd: ipc_schema::fs::FsPath::Absolute(
                self.work.as_os_str().as_encoded_bytes().to_vec(),
            ),
            timeout_secs: o.timeout.unwrap_or(0),
        });
        match gw.call(call) {
            ToolReply::Done(d) => match d.result {
                ToolResult::CommandRun(c) => {
                    let status = match c.exit_code {
                        Some(code) => Status::Exited(code),
                        None => outcome_status(&c.outcome),
                    };
                    Out {
                        status,
                        stdout: c.stdout,
                        stderr: String::from_utf8_lossy(&c.stderr).into_owned(),
                        notes: format!("{}; {}; {}", c.outcome, c.sandbox, c.held.join("; ")),
                        dropped: [c.stdout_dropped, c.stderr_dropped],
                    }
                }
                other => panic!("run_command answered {other:?}"),
            },
            ToolReply::Failed(f) => {
                let status = if f.message.contains("command not found") {
                    Status::NotFound(f.message.clone())
                } else if f.message.starts_with("could not run: ") {
                    Status::NotExecutable(f.message.clone())
                } else {
                    Status::Refused(f.message.clone())
                };
                Out {
                    status,
                    stdout: Vec::new(),
                    stderr: String::new(),
                    notes: f.message,
                    dropped: [0, 0],
                }
            }
            ToolReply::Refused(r) => Out {
                status: Status::Refused(r.message.clone()),
                stdout: Vec::new(),
                stderr: String::new(),
                notes: r.message,
                dropped: [0, 0],
            },
            other => panic!("run_command answered {other:?}; log:\n{}", broker.log()),
        }
    }
}

/// A run_command outcome without an exit code, as a [`Status`].
fn outcome_status(outcome: &str) -> Status {
    if let Some(n) = outcome.strip_prefix("killed by signal ") {
        return Status::Signaled(n.trim().parse().unwrap_or(-1));
    }
    if outcome.starts_with("timed out") {
        return Status::TimedOut;
    }
    if let Some(m) = outcome.strip_prefix("could not run: ") {
        return Status::NotExecutable(m.to_string());
    }
    Status::Refused(outcome.to_string())
}

/// Per-command options.
#[derive(Default, Clone)]
pub struct Opts {
    pub timeout: Option<u32>,
    /// More command-line options (the CLI paths only).
    pub extra: Vec<String>,
}

/// An [`Instance`] whose directories the exec-helper's user (nobody, when root) can reach, with
/// its root under `parent`.
fn instance_in(parent: &Path, policy: &str) -> Instance {
    let tmp = tempfile::Builder::new()
        .prefix("gh-escape-")
        .tempdir_in(parent)
        .expect("tempdir");
    let project = tmp.path().join("project");
    std::fs::create_dir_all(&project).unwrap();
    let project = std::fs::canonicalize(&project).unwrap();
    let inst = Instance { tmp, project };
    inst.write_policy(policy);
    for (p, mode) in [
        (inst.root().to_path_buf(), 0o711),
        (inst.project.clone(), 0o755),
    ] {
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    inst
}

/// `gatehouse --data-dir ROOT broker` with `env` added, once its sockets answer.
/// Under the refusal wrapper where `host` refuses namespaces.
fn start_broker(root: &Path, env: &[(String, String)], host: Host) -> Broker {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(root.join("broker-test.log"))
        .unwrap();
    let mut cmd = host.command(&bin("gatehouse"));
    cmd.arg("--data-dir")
        .arg(root)
        .arg("broker")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(log));
    for (k, v) in env {
        cmd.env(k, v);
    }
    let child = cmd.spawn().expect("start broker");
    let mut b = Broker {
        child,
        root: root.to_path_buf(),
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while gatehouse_tests::Conn::connect(&b.ui_socket()).is_err()
        || gatehouse_tests::Conn::connect(&b.gateway_socket()).is_err()
    {
        if let Ok(Some(st)) = b.child.try_wait() {
            panic!("the broker exited ({st:?}); log:\n{}", b.log());
        }
        assert!(
            Instant::now() < deadline,
            "the broker did not open its sockets; log:\n{}",
            b.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    if let Err(e) = gatehouse_tests::check_exec_tier(&b.ui_socket(), host) {
        panic!("{e}; log:\n{}", b.log());
    }
    b
}
