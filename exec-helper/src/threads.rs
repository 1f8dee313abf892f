//! The exec-helper off Linux (Windows, macOS): lock down, say hello, serve, with the Linux
//! helper's protocol and rules, served with plain threads; each command is started by the OS's
//! own launcher (`windows.rs`: a restricted token and a job; `macos.rs`: `sandbox-exec` and a
//! process group).
//!
//! What every OS refuses here before its launcher runs: the other OS's form of what meets the
//! broker (the egress proxy, an agent's gateway, a server's stdio: on Windows by address and
//! pipes, on macOS through the connector the `Start` brings, `sandbox::bridge`),
//! a working directory outside the grants,
//! limits above the ceilings, an empty argv. What no launcher holds yet (a grant's exclude
//! globs, secret-looking files, and in a writable grant the places the user's own tools run:
//! git hooks and configs, start-up and settings files) is a gap: the command is refused naming it, or with
//! `--allow-degraded` run with it listed in the report's `degraded`, as every OS-specific gap
//! is. The environment is built by the Linux rules (`sandbox::command_env`).
//!
//! One thread runs the channel (tokio); each run has three plain threads: one per output pipe
//! and one waiting for the process, which ends its tree at the time limit and when the main
//! process ends (nothing a command started outlives it, as the pid namespace gives on Linux).

use ipc_schema::exec::{
    CommandSpec, ExecReply, ExecRequest, GrantAccess, NetworkMode, RunEnd, RunId, RunOutcome,
    SandboxReport, OUTPUT_PIECE_MAX, POLL_WAIT_MAX_MS,
};
use ipc_schema::helper::{fatal, HelperChannel, Passed, Replies};
use ipc_schema::route::BROKER_TO_EXEC;
use ipc_schema::tier::ConfinementTier;
use ipc_schema::{Body, ErrorCode, ErrorReply, Role};
use sandbox::command_env;
use std::collections::BTreeMap;
use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The system's name, in refusals.
#[cfg(windows)]
const OS: &str = "Windows";
#[cfg(target_os = "macos")]
const OS: &str = "macOS";
/// The helper's own `--name value` options (`--run-as` is Linux-only).
const OPTIONS: &[&str] = &["--protect"];
/// Runs started and not yet collected, as on Linux.
const MAX_RUNS: usize = 16;
/// An ended run whose end nobody collects is forgotten after this long, as on Linux.
const UNCOLLECTED_TTL: Duration = Duration::from_secs(600);

/// Settings every command gets.
pub struct Config {
    /// Paths no command may touch, whatever its grants (`--protect`, repeatable): the broker's
    /// config, data and runtime directories.
    pub protect: Vec<PathBuf>,
    pub allow_degraded: bool,
    /// The helper's own try of the network at lockdown (Windows; `None` elsewhere). A command's
    /// token is made from the helper's and keeps the command SID the filters name, so the
    /// helper's outcome stands for its commands'.
    #[cfg_attr(not(windows), allow(dead_code))]
    pub outbound: Option<ipc_schema::status::OutboundProbe>,
}

impl Config {
    fn from_args(args: &sandbox::helper_args::HelperArgs) -> Result<Config, String> {
        Ok(Config {
            protect: args.absolute_paths("--protect")?,
            allow_degraded: args.allow_degraded,
            outbound: None,
        })
    }
}

/// A started command's processes, as its launcher holds them.
pub trait Tree: Send + Sync + 'static {
    /// Waits up to `ms` for the main process; its end once it ended.
    fn wait_timeout(&self, ms: u32) -> Result<Option<RunOutcome>, String>;
    /// Ends every process of the command now.
    fn kill(&self);
}

/// A command its launcher started: its processes, the read ends of its output, its report.
pub struct Launched {
    pub tree: Box<dyn Tree>,
    pub stdout: std::io::PipeReader,
    pub stderr: std::io::PipeReader,
    pub report: SandboxReport,
}

/// A launcher: from a checked command to a running one, or a refusal that says why.
pub type Launch = fn(Checked, &Config) -> Result<Launched, ErrorReply>;

/// What every OS checks and builds before its launcher runs.
pub struct Checked {
    pub spec: CommandSpec,
    /// The variables that pass the Linux rules (the launcher adds its OS's own).
    pub vars: Vec<(String, String)>,
    pub env_dropped: Vec<String>,
    /// What the command will not get; the launcher adds its own, then [`Checked::refuse_gaps`].
    pub gaps: Vec<String>,
    /// A `gatehouse run` agent (its state directory and variables) or a third-party stdio
    /// server (its state directory; on Windows its stdio pipe).
    pub user: ipc_schema::exec::UserCommand,
    /// macOS: the connector the `Start` brought (Windows never gets one).
    #[cfg_attr(windows, allow(dead_code))]
    pub connector: Option<Passed>,
}

impl Checked {
    pub fn new(mut spec: CommandSpec, connector: Option<Passed>) -> Result<Checked, ErrorReply> {
        let invalid = |why: String| ErrorReply::new(ErrorCode::Invalid, why);
        let refused = |why: &str| ErrorReply::new(ErrorCode::Refused, why);
        spec.check_values().map_err(invalid)?;
        let user = spec.user.take().map(|u| *u).unwrap_or_default();
        // Windows: the broker listens for the proxy on a loopback port and serves an agent's and
        // a server's pipes (windows.rs). macOS: all of it comes through the connector, served
        // from here (macos.rs, sandbox::bridge), as Linux's namespace does.
        let proxied = matches!(spec.network, NetworkMode::Proxy { .. });
        if proxied && cfg!(windows) {
            return Err(refused("the egress proxy through a connector is Linux's and macOS': on Windows the broker listens for the command on a loopback port"));
        }
        let connects = proxied || user.server.is_some() || user.agent.is_some();
        if connects && cfg!(target_os = "macos") && connector.is_none() {
            let why =
                "this command meets the broker through a connector, and its Start brought none";
            return Err(invalid(why.into()));
        }
        if spec.argv.is_empty() {
            return Err(invalid("argv is empty".into()));
        }
        if !spec.cwd.is_absolute() || !spec.grants.iter().any(|g| spec.cwd.starts_with(&g.path)) {
            return Err(invalid(format!(
                "the working directory {} is not inside a grant",
                spec.cwd.display()
            )));
        }
        let mut gaps = Vec::new();
        // The Linux tiers make git's hooks and configs, and the table's start-up and settings
        // places, unwritable in a writable grant, as well as what a repository's config points
        // at, and set aside what a command planted anyway (sandbox::linux::command::project).
        // macOS's profile denies writes to the table's places and to `.git` internals by name
        // anywhere (sandbox::seatbelt); the rest is named, never silent.
        if spec
            .grants
            .iter()
            .any(|g| g.access == GrantAccess::ReadWrite)
        {
            gaps.push(if cfg!(target_os = "macos") {
                format!("in the writable grants, what a repository's config points at (core.hooksPath, include.path, filter and diff programs) and the hooks of a git directory not named .git (a bare repository) are not write-protected, and nothing is checked after the command (not built on {OS})")
            } else {
                format!("in the writable grants, git hooks and configs and the start-up and settings files your own tools run (ipc_schema::protected) are neither write-protected nor checked after the command (not built on {OS})")
            });
        }
        // macOS's profile denies them by regex (sandbox::seatbelt::exclude_regex; macos.rs
        // names what it cannot express).
        if !spec.hide.exclude.is_empty() && !cfg!(target_os = "macos") {
            gaps.push(format!(
                "the grant's exclude globs ({}) are not masked (not built on {OS})",
                spec.hide.exclude.join(", ")
            ));
        }
        // macOS's profile denies them by name (sandbox::seatbelt); Windows has nothing that
        // confines reads.
        if spec.hide.sensitive && !cfg!(target_os = "macos") {
            gaps.push(format!(
                "files whose names say they hold secrets are not masked (not built on {OS})"
            ));
        }
        let mut env_dropped = Vec::new();
        let mut vars: Vec<(String, String)> = Vec::new();
        for (k, v) in &spec.env {
            match command_env::refusal(k, v) {
                Some(why) => env_dropped.push(format!("{k}: {why}")),
                None => vars.push((k.clone(), v.clone())),
            }
        }
        for (k, v) in &user.pass_env {
            match command_env::refusal(k, v) {
                None | Some(command_env::LOOKS_SECRET) => vars.push((k.clone(), v.clone())),
                Some(why) => return Err(refused(&format!("--pass-env {k}: {why}"))),
            }
        }
        Ok(Checked {
            spec,
            vars,
            env_dropped,
            gaps,
            user,
            connector,
        })
    }

    /// Refuses the command naming every gap, unless the helper runs with `--allow-degraded`.
    pub fn refuse_gaps(&self, cfg: &Config) -> Result<(), ErrorReply> {
        if self.gaps.is_empty() || cfg.allow_degraded {
            return Ok(());
        }
        Err(ErrorReply::new(
            ErrorCode::Refused,
            format!(
                "this command's confinement on {OS} falls short of its policy, so nothing ran: {}",
                self.gaps.join("; ")
            ),
        ))
    }

    /// The command's `PATH` (the launcher has added its default if none was asked for).
    pub fn path_var(&self) -> String {
        self.vars
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case("PATH"))
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    }
}

/// A pipe for a command's `what` (stdout, stderr): its read end and its write end.
pub fn pipe(what: &str) -> Result<(std::io::PipeReader, std::io::PipeWriter), ErrorReply> {
    std::io::pipe().map_err(|e| ErrorReply::new(ErrorCode::Internal, format!("a {what} pipe: {e}")))
}

/// Lock down with `profile`'s lockdown, say hello naming `tier`, serve with `launch`.
pub fn main(launch: Launch, tier: ConfinementTier) -> ExitCode {
    let args = sandbox::helper_args::HelperArgs::from_env_with(OPTIONS);
    let mut cfg = Config::from_args(&args).unwrap_or_else(|e| fatal(Role::Exec, e));
    let channel = sandbox::helper_args::take_channel(&args)
        .unwrap_or_else(|e| fatal(Role::Exec, format!("no broker channel: {e}")));

    // Lock down.
    let mut report = sandbox::helper_args::lock_down(&args, &sandbox::Profile::Exec)
        .unwrap_or_else(|e| fatal(Role::Exec, format!("lockdown failed: {e}")));
    report.exec_tier = Some(tier);
    cfg.outbound = report.windows.as_ref().and_then(|w| w.outbound.clone());

    // Hello.
    let chan = HelperChannel::hello(Role::Exec, channel, report);

    // Serve what the broker may ask (ipc_schema::route::BROKER_TO_EXEC).
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| fatal(Role::Exec, format!("cannot start the runtime: {e}")));
    rt.block_on(async move {
        #[cfg(windows)]
        let (mut reader, replies, writer) =
            chan.into_async(&BROKER_TO_EXEC, sandbox::windows::async_pipe);
        #[cfg(unix)]
        let (mut reader, replies, writer) = chan.into_async(&BROKER_TO_EXEC);
        let writing = tokio::spawn(writer.run());
        let server = Arc::new(Server {
            cfg,
            launch,
            runs: Mutex::new(BTreeMap::new()),
            next_run: Mutex::new(1),
        });
        while let Some(req) = reader.next().await {
            let id = req.id;
            match req.body {
                Body::Exec(ExecRequest::Start(spec)) => {
                    let body = server.start(*spec, req.fd);
                    replies.send(id, body);
                }
                Body::Exec(ExecRequest::Poll { run, wait_ms }) => {
                    server.clone().poll(id, run, wait_ms, replies.clone())
                }
                Body::Exec(ExecRequest::Stop { run }) => {
                    replies.send(id, server.stop(run).unwrap_or_else(Body::Error))
                }
                _ => req.unserved(Role::Exec),
            }
        }
        // The broker closed the channel: every run's processes end with the server.
        for r in server.runs.lock().expect("runs").values() {
            r.tree.kill();
        }
        writing.abort();
    });
    ExitCode::SUCCESS
}

struct Server {
    cfg: Config,
    launch: Launch,
    runs: Mutex<BTreeMap<RunId, Arc<Run>>>,
    next_run: Mutex<u64>,
}

/// One command: its processes and what its threads collected.
struct Run {
    tree: Box<dyn Tree>,
    state: Mutex<RunState>,
    /// Wakes the one waiting `Poll` (a permit is kept if none waits yet).
    changed: tokio::sync::Notify,
}

#[derive(Default)]
struct RunState {
    pending: [Vec<u8>; 2],
    kept: [u64; 2],
    dropped: [u64; 2],
    max: [u64; 2],
    /// Output pipes not at their end yet.
    open: u8,
    /// How the main process ended, once it did.
    ended: Option<RunOutcome>,
    /// Why the helper ended it, if it did.
    killed: Option<RunOutcome>,
    started: Option<Instant>,
    ended_at: Option<Instant>,
    /// A `Poll` is waiting.
    waiting: bool,
}

impl RunState {
    fn finished(&self) -> bool {
        self.ended.is_some() && self.open == 0
    }

    fn end(&self) -> RunEnd {
        let started = self.started.unwrap_or_else(Instant::now);
        let at = self.ended_at.unwrap_or_else(Instant::now);
        let outcome = self.killed.clone().or_else(|| self.ended.clone());
        RunEnd {
            outcome: outcome.unwrap_or(RunOutcome::SandboxFailed {
                message: "ended without an exit status".into(),
            }),
            stdout_dropped: self.dropped[0],
            stderr_dropped: self.dropped[1],
            elapsed_ms: at.saturating_duration_since(started).as_millis() as u64,
            held: Vec::new(),
            held_more: 0,
        }
    }
}

fn error(code: ErrorCode, msg: impl Into<String>) -> Body {
    Body::Error(ErrorReply::new(code, msg))
}

impl Server {
    fn start(&self, spec: CommandSpec, connector: Option<Passed>) -> Body {
        let mut runs = self.runs.lock().expect("runs");
        let now = Instant::now();
        runs.retain(|_, r| {
            let s = r.state.lock().expect("run");
            s.waiting || s.ended_at.is_none_or(|t| now < t + UNCOLLECTED_TTL)
        });
        if runs.len() >= MAX_RUNS {
            return error(
                ErrorCode::Limit,
                format!("{MAX_RUNS} commands are running or waiting to be collected; stop or collect one first"),
            );
        }
        let limits = spec.limits;
        let launched = match Checked::new(spec, connector).and_then(|c| (self.launch)(c, &self.cfg))
        {
            Ok(l) => l,
            Err(e) => return Body::Error(e),
        };
        let run = Arc::new(Run {
            tree: launched.tree,
            state: Mutex::new(RunState {
                open: 2,
                max: [limits.stdout_max, limits.stderr_max],
                started: Some(Instant::now()),
                ..RunState::default()
            }),
            changed: tokio::sync::Notify::new(),
        });
        for (i, pipe) in [launched.stdout, launched.stderr].into_iter().enumerate() {
            let r = run.clone();
            std::thread::spawn(move || collect(r, i, pipe));
        }
        let r = run.clone();
        std::thread::spawn(move || watch(r, limits.timeout_ms));
        let mut next = self.next_run.lock().expect("next run");
        let id = RunId(*next);
        *next += 1;
        runs.insert(id, run);
        Body::ExecReply(ExecReply::Started {
            run: id,
            sandbox: Box::new(launched.report),
        })
    }

    fn run(&self, run: RunId) -> Result<Arc<Run>, ErrorReply> {
        self.runs
            .lock()
            .expect("runs")
            .get(&run)
            .cloned()
            .ok_or_else(|| {
                ErrorReply::new(
                    ErrorCode::Invalid,
                    format!("no {run}: it never existed, or its end was collected"),
                )
            })
    }

    fn stop(&self, run: RunId) -> Result<Body, ErrorReply> {
        let r = self.run(run)?;
        {
            let mut s = r.state.lock().expect("run");
            if s.ended.is_none() && s.killed.is_none() {
                s.killed = Some(RunOutcome::Stopped);
            }
        }
        // Ends the whole tree. The waiting thread records the end.
        r.tree.kill();
        Ok(Body::ExecReply(ExecReply::Stopping { run }))
    }

    /// Answers when the run has output or an end, or after `wait_ms`.
    fn poll(self: Arc<Self>, id: u64, run: RunId, wait_ms: u32, replies: Replies) {
        if wait_ms > POLL_WAIT_MAX_MS {
            let why = format!("Poll wait_ms {wait_ms} is above {POLL_WAIT_MAX_MS}");
            return replies.send(id, error(ErrorCode::Invalid, why));
        }
        let r = match self.run(run) {
            Ok(r) => r,
            Err(e) => return replies.send(id, Body::Error(e)),
        };
        {
            let mut s = r.state.lock().expect("run");
            if s.waiting {
                let why = format!("a Poll for {run} is already waiting");
                return replies.send(id, error(ErrorCode::Invalid, why));
            }
            s.waiting = true;
        }
        let until = tokio::time::Instant::now() + Duration::from_millis(wait_ms as u64);
        tokio::spawn(async move {
            loop {
                let late = tokio::time::Instant::now() >= until;
                let progress = {
                    let mut s = r.state.lock().expect("run");
                    let has_output = !s.pending[0].is_empty() || !s.pending[1].is_empty();
                    if has_output || s.finished() || late {
                        s.waiting = false;
                        let [out, err] = &mut s.pending;
                        let stdout: Vec<u8> =
                            out.drain(..out.len().min(OUTPUT_PIECE_MAX)).collect();
                        let stderr: Vec<u8> =
                            err.drain(..err.len().min(OUTPUT_PIECE_MAX)).collect();
                        let end =
                            (s.finished() && s.pending.iter().all(Vec::is_empty)).then(|| s.end());
                        Some((stdout, stderr, end))
                    } else {
                        None
                    }
                };
                if let Some((stdout, stderr, end)) = progress {
                    if end.is_some() {
                        self.runs.lock().expect("runs").remove(&run);
                    }
                    let reply = ExecReply::Progress {
                        run,
                        stdout,
                        stderr,
                        end,
                    };
                    return replies.send(id, Body::ExecReply(reply));
                }
                let _ = tokio::time::timeout_at(until, r.changed.notified()).await;
            }
        });
    }
}

/// Reads one output pipe to its end, keeping up to the stream's limit and counting the rest.
fn collect(run: Arc<Run>, i: usize, mut pipe: std::io::PipeReader) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match pipe.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        {
            let mut s = run.state.lock().expect("run");
            let room = s.max[i].saturating_sub(s.kept[i]).min(n as u64) as usize;
            s.pending[i].extend_from_slice(&buf[..room]);
            s.kept[i] += room as u64;
            s.dropped[i] += (n - room) as u64;
        }
        run.changed.notify_one();
    }
    run.state.lock().expect("run").open -= 1;
    run.changed.notify_one();
}

/// Waits for the main process, ending the tree at the time limit, and records the end. When the
/// main process has ended, the tree is ended too: nothing it started outlives it.
fn watch(run: Arc<Run>, timeout_ms: u64) {
    let deadline = Instant::now() + Duration::from_millis(timeout_ms);
    let ended = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let ms = u32::try_from(left.as_millis()).unwrap_or(u32::MAX - 1);
        match run.tree.wait_timeout(ms) {
            Ok(Some(end)) => break end,
            Ok(None) if left.is_zero() => {
                run.state
                    .lock()
                    .expect("run")
                    .killed
                    .get_or_insert(RunOutcome::TimedOut {
                        after_ms: timeout_ms,
                    });
                run.tree.kill();
            }
            Ok(None) => {}
            Err(e) => {
                run.tree.kill();
                break RunOutcome::SandboxFailed {
                    message: format!("waiting for the command: {e}"),
                };
            }
        }
    };
    run.tree.kill();
    {
        let mut s = run.state.lock().expect("run");
        s.ended = Some(ended);
        s.ended_at = Some(Instant::now());
    }
    run.changed.notify_one();
}
