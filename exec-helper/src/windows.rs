//! The exec-helper on Windows (issue 19): lock down, say hello, serve, with each command
//! confined by the restricted-token tier.
//!
//! A command is started by `sandbox::windows::spawn` with the command policy `wincfg` generates
//! (`command_policy`): a write-restricted token whose restricting SIDs are the command SID and
//! RESTRICTED, a job object of its own (kill on close, the run's process limit, every UI
//! restriction, each process's committed memory at the run's memory limit), only its stdout and
//! stderr pipes inherited, no stdin, an environment built by
//! the same rules as on Linux (`sandbox::command_env`). Before anything starts, the helper reads
//! back the DACL of every grant root and protected path and checks the ACE the policy names is
//! there (`wincfg::dacl_holds`): the broker applies them, the helper does not trust that it did.
//!
//! What the tier cannot give is refused, or with `--allow-degraded` run and named in the
//! report's `degraded`, never silently dropped: outbound network is refused on Windows only by
//! WFP filters, which are not built; the file-size and open-file limits have no job limit; exclude
//! globs and secret-looking files inside a grant are not masked. The egress proxy, an agent's session and a third-party server (they pass descriptors)
//! are refused outright. Reads are the user's own: a write-restricted token restricts writes only
//! (docs/SECURITY.md). When the command's main process ends its job is closed, which ends
//! everything it left running, as the pid namespace does on Linux.
//!
//! One thread runs the channel (tokio); each run has three plain threads: one per output pipe
//! and one waiting for the process, which ends it at its time limit.

use ipc_schema::exec::{
    CommandSpec, ExecReply, ExecRequest, NetworkMode, RunEnd, RunId, RunOutcome, SandboxReport,
    OUTPUT_PIECE_MAX, POLL_WAIT_MAX_MS,
};
use ipc_schema::helper::{fatal, HelperChannel, Replies};
use ipc_schema::route::BROKER_TO_EXEC;
use ipc_schema::tier::ConfinementTier;
use ipc_schema::{Body, ErrorCode, ErrorReply, Role};
use sandbox::command_env;
use sandbox::seatbelt::{CommandNetwork, CommandSpec as OsCommand};
use sandbox::wincfg;
use sandbox::windows as w;
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::Read;
use std::os::windows::io::AsHandle;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The helper's own `--name value` options (`--run-as` is Unix-only).
const OPTIONS: &[&str] = &["--protect"];
/// Runs started and not yet collected, as on Linux.
const MAX_RUNS: usize = 16;
/// An ended run whose end nobody collects is forgotten after this long, as on Linux.
const UNCOLLECTED_TTL: Duration = Duration::from_secs(600);
/// What `CreateProcess` runs directly when `argv[0]` names no extension. A batch file needs
/// `cmd.exe /c`, named as such: nothing here starts a shell that was not asked for.
const RUNNABLE: &[&str] = &["exe", "com"];

pub fn main() -> ExitCode {
    let args = sandbox::helper_args::HelperArgs::from_env_with(OPTIONS);
    let cfg = Config::from_args(&args).unwrap_or_else(|e| fatal(Role::Exec, e));
    let channel = sandbox::helper_args::take_channel(&args)
        .unwrap_or_else(|e| fatal(Role::Exec, format!("no broker channel: {e}")));

    // Lock down.
    let mut report = sandbox::helper_args::lock_down(&args, &sandbox::Profile::Exec)
        .unwrap_or_else(|e| fatal(Role::Exec, format!("lockdown failed: {e}")));
    report.exec_tier = Some(ConfinementTier::RestrictedToken);

    // Hello.
    let chan = HelperChannel::hello(Role::Exec, channel, report);

    // Serve what the broker may ask (ipc_schema::route::BROKER_TO_EXEC).
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| fatal(Role::Exec, format!("cannot start the runtime: {e}")));
    rt.block_on(async move {
        let (mut reader, replies, writer) =
            chan.into_async(&BROKER_TO_EXEC, sandbox::windows::async_pipe);
        let writing = tokio::spawn(writer.run());
        let server = Arc::new(Server {
            cfg,
            runs: Mutex::new(BTreeMap::new()),
            next_run: Mutex::new(1),
        });
        while let Some(req) = reader.next().await {
            let id = req.id;
            match req.body {
                Body::Exec(ExecRequest::Start(spec)) => {
                    let body = server.start(*spec);
                    replies.send(id, body);
                }
                Body::Exec(ExecRequest::Poll { run, wait_ms }) => {
                    server.clone().poll(id, run, wait_ms, replies.clone())
                }
                Body::Exec(ExecRequest::Stop { run }) => replies.send(id, server.stop(run)),
                _ => req.unserved(Role::Exec),
            }
        }
        // The broker closed the channel: every run's job closes with the server.
        writing.abort();
    });
    ExitCode::SUCCESS
}

/// Settings every command gets.
struct Config {
    /// Paths no command may write, whatever its grants (`--protect`, repeatable): the broker's
    /// config, data and runtime directories. Deny ACEs for the command SID, read back per run.
    protect: Vec<PathBuf>,
    allow_degraded: bool,
}

impl Config {
    fn from_args(args: &sandbox::helper_args::HelperArgs) -> Result<Config, String> {
        let mut protect = Vec::new();
        for p in args.all("--protect") {
            let p = PathBuf::from(p);
            if !p.is_absolute() {
                return Err(format!("--protect {} is not an absolute path", p.display()));
            }
            protect.push(p);
        }
        Ok(Config {
            protect,
            allow_degraded: args.allow_degraded,
        })
    }
}

struct Server {
    cfg: Config,
    runs: Mutex<BTreeMap<RunId, Arc<Run>>>,
    next_run: Mutex<u64>,
}

/// One command: its confined process and what its threads collected.
struct Run {
    child: w::ConfinedChild,
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
    /// The main process's exit code, once it ended.
    exit: Option<u32>,
    /// Why the helper ended it, if it did.
    killed: Option<RunOutcome>,
    started: Option<Instant>,
    ended_at: Option<Instant>,
    /// A `Poll` is waiting.
    waiting: bool,
}

impl RunState {
    fn finished(&self) -> bool {
        self.exit.is_some() && self.open == 0
    }

    fn end(&self) -> RunEnd {
        let started = self.started.unwrap_or_else(Instant::now);
        let at = self.ended_at.unwrap_or_else(Instant::now);
        RunEnd {
            outcome: match (&self.killed, self.exit) {
                (Some(k), _) => k.clone(),
                // An NTSTATUS (0xC0000005) reads as a negative status, as Windows' own tools show it.
                (None, Some(code)) => RunOutcome::Exited(code as i32),
                (None, None) => RunOutcome::SandboxFailed {
                    message: "ended without an exit code".into(),
                },
            },
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
    fn start(&self, spec: CommandSpec) -> Body {
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
        let (run, report) = match launch(spec, &self.cfg) {
            Ok(started) => started,
            Err(e) => return Body::Error(e),
        };
        let mut next = self.next_run.lock().expect("next run");
        let id = RunId(*next);
        *next += 1;
        runs.insert(id, run);
        Body::ExecReply(ExecReply::Started {
            run: id,
            sandbox: Box::new(report),
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

    fn stop(&self, run: RunId) -> Body {
        let r = match self.run(run) {
            Ok(r) => r,
            Err(e) => return Body::Error(e),
        };
        {
            let mut s = r.state.lock().expect("run");
            if s.exit.is_none() && s.killed.is_none() {
                s.killed = Some(RunOutcome::Stopped);
            }
        }
        // Ends the job: the whole tree. The waiting thread records the end.
        let _ = r.child.kill();
        Body::ExecReply(ExecReply::Stopping { run })
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

/// From a [`CommandSpec`] to a running confined process, or a refusal that says why.
fn launch(spec: CommandSpec, cfg: &Config) -> Result<(Arc<Run>, SandboxReport), ErrorReply> {
    let invalid = |why: String| ErrorReply::new(ErrorCode::Invalid, why);
    let refused = |why: String| ErrorReply::new(ErrorCode::Refused, why);
    let user = spec.user.map(|u| *u).unwrap_or_default();
    if user.agent.is_some() || user.server.is_some() {
        return Err(refused(
            "an agent's session and a third-party MCP server are not built on Windows (they pass descriptors)".into(),
        ));
    }
    spec.limits.check_with(user.long_run).map_err(invalid)?;
    if let NetworkMode::Proxy { .. } = spec.network {
        return Err(refused(
            "the egress proxy is not built on Windows: a command there runs without network or not at all".into(),
        ));
    }
    let Some(program_name) = spec.argv.first() else {
        return Err(invalid("argv is empty".into()));
    };
    if !spec.cwd.is_absolute() || !spec.grants.iter().any(|g| spec.cwd.starts_with(&g.path)) {
        return Err(invalid(format!(
            "the working directory {} is not inside a grant",
            spec.cwd.display()
        )));
    }

    // What the tier cannot give this command: refused, or run and named with --allow-degraded.
    let mut gaps = vec![
        "outbound network is not refused: the WFP filters that refuse it on Windows are not built"
            .to_string(),
        "the file-size and open-file limits are not applied (a job has no limit for them; the process and memory limits are set)".to_string(),
    ];
    if !spec.hide.exclude.is_empty() {
        gaps.push(format!(
            "the grant's exclude globs ({}) are not masked (not built on Windows)",
            spec.hide.exclude.join(", ")
        ));
    }
    if spec.hide.sensitive {
        gaps.push(
            "files whose names say they hold secrets are not masked (not built on Windows)".into(),
        );
    }
    let mut policy = wincfg::command_policy(&OsCommand {
        grants: spec
            .grants
            .iter()
            .map(|g| (g.path.clone(), g.access))
            .collect(),
        no_access: Vec::new(),
        no_write: cfg.protect.clone(),
        network: CommandNetwork::None,
    })
    .map_err(|e| invalid(e.to_string()))?;
    policy.job.active_processes = Some(u32::try_from(spec.limits.processes).unwrap_or(u32::MAX));
    policy.job.process_memory = Some(spec.limits.memory);
    gaps.extend(missing_aces(&policy));
    if !gaps.is_empty() && !cfg.allow_degraded {
        return Err(refused(format!(
            "this command's confinement on Windows falls short of its policy, so nothing ran: {}",
            gaps.join("; ")
        )));
    }

    // The environment: the same rules as on Linux, and what Windows' own DLLs need.
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
            Some(why) => return Err(refused(format!("--pass-env {k}: {why}"))),
        }
    }
    let system_root = std::env::var("SystemRoot").unwrap_or_else(|_| r"C:\Windows".into());
    vars.retain(|(k, _)| !k.eq_ignore_ascii_case("SystemRoot"));
    vars.push(("SystemRoot".into(), system_root.clone()));
    if !vars.iter().any(|(k, _)| k.eq_ignore_ascii_case("PATH")) {
        vars.push((
            "PATH".into(),
            format!(r"{system_root}\System32;{system_root}"),
        ));
    }
    let path_var = vars
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("PATH"))
        .map(|(_, v)| v.clone())
        .unwrap_or_default();
    let program = find_program(program_name, &spec.cwd, &path_var)
        .map_err(|(code, why)| ErrorReply::new(code, why))?;

    let (out_r, out_w) = std::io::pipe().map_err(|e| internal(format!("a stdout pipe: {e}")))?;
    let (err_r, err_w) = std::io::pipe().map_err(|e| internal(format!("a stderr pipe: {e}")))?;
    let child = w::spawn(
        &policy,
        &w::SpawnSpec {
            program: &program,
            args: spec.argv[1..].iter().map(OsString::from).collect(),
            cwd: Some(&spec.cwd),
            env: vars
                .into_iter()
                .map(|(k, v)| (OsString::from(k), OsString::from(v)))
                .collect(),
            inherit: Vec::new(),
            stdin: None,
            stdout: Some(out_w.as_handle()),
            stderr: Some(err_w.as_handle()),
        },
        w::SpawnOptions {
            allow_degraded: cfg.allow_degraded,
        },
    )
    .map_err(|e| refused(format!("starting {}: {e}", program.display())))?;
    // Only the child holds the write ends now: the pipes end when its tree does.
    drop((out_w, err_w));
    gaps.extend(child.degraded().iter().cloned());

    let run = Arc::new(Run {
        child,
        state: Mutex::new(RunState {
            open: 2,
            max: [spec.limits.stdout_max, spec.limits.stderr_max],
            started: Some(Instant::now()),
            ..RunState::default()
        }),
        changed: tokio::sync::Notify::new(),
    });
    for (i, pipe) in [out_r, err_r].into_iter().enumerate() {
        let r = run.clone();
        std::thread::spawn(move || collect(r, i, pipe));
    }
    let r = run.clone();
    let timeout = spec.limits.timeout_ms;
    std::thread::spawn(move || watch(r, timeout));

    let report = SandboxReport {
        program: program.display().to_string(),
        tier: ConfinementTier::RestrictedToken,
        namespaces: Vec::new(),
        // Not Unix ids: the command runs as the user, under a restricted token.
        uid: u32::MAX,
        gid: u32::MAX,
        landlock_abi: 0,
        seccomp_denylist: false,
        masked: Vec::new(),
        env_dropped,
        degraded: gaps,
    };
    Ok((run, report))
}

fn internal(why: String) -> ErrorReply {
    ErrorReply::new(ErrorCode::Internal, why)
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

/// Waits for the main process, ending the job at the time limit, and records the end. When the
/// main process has ended, the job is ended too: nothing it started outlives it.
fn watch(run: Arc<Run>, timeout_ms: u64) {
    let deadline = Instant::now() + Duration::from_millis(timeout_ms);
    let code = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let ms = u32::try_from(left.as_millis()).unwrap_or(u32::MAX - 1);
        match run.child.wait_timeout(ms) {
            Ok(Some(code)) => break Some(code),
            Ok(None) if left.is_zero() => {
                {
                    let mut s = run.state.lock().expect("run");
                    if s.killed.is_none() {
                        s.killed = Some(RunOutcome::TimedOut {
                            after_ms: timeout_ms,
                        });
                    }
                }
                let _ = run.child.kill();
            }
            Ok(None) => {}
            Err(e) => {
                let _ = run.child.kill();
                let mut s = run.state.lock().expect("run");
                s.killed.get_or_insert(RunOutcome::SandboxFailed {
                    message: format!("waiting for the command: {e}"),
                });
                break None;
            }
        }
    };
    let _ = run.child.kill();
    {
        let mut s = run.state.lock().expect("run");
        s.exit = Some(code.unwrap_or(u32::MAX));
        s.ended_at = Some(Instant::now());
    }
    run.changed.notify_one();
}

/// The program `argv[0]` names: a path (absolute, or relative to `cwd`), or a name looked up in
/// the command's `PATH` with the extensions `CreateProcess` runs directly.
fn find_program(name: &str, cwd: &Path, path_var: &str) -> Result<PathBuf, (ErrorCode, String)> {
    let not_found = |searched: String| {
        (
            ErrorCode::NotFound,
            format!("{name}: command not found in the sandbox (searched {searched})"),
        )
    };
    let candidates = |base: PathBuf| -> Vec<PathBuf> {
        let mut c = Vec::new();
        if base.extension().is_some() {
            c.push(base.clone());
        }
        for ext in RUNNABLE {
            let mut with = base.clone().into_os_string();
            with.push(".");
            with.push(ext);
            c.push(PathBuf::from(with));
        }
        c
    };
    let has_dir = name.contains(['\\', '/']) || Path::new(name).is_absolute();
    let dirs: Vec<PathBuf> = if has_dir {
        vec![cwd.to_path_buf()]
    } else {
        std::env::split_paths(path_var)
            .filter(|d| d.is_absolute())
            .collect()
    };
    for dir in &dirs {
        for c in candidates(dir.join(name)) {
            if c.is_file() {
                let ext = c.extension().map(|e| e.to_ascii_lowercase());
                if !ext.is_some_and(|e| RUNNABLE.iter().any(|r| e == *r)) {
                    return Err((
                        ErrorCode::Refused,
                        format!(
                            "{} is not a program Windows starts directly; a batch file runs as [\"cmd.exe\", \"/d\", \"/c\", ...]",
                            c.display()
                        ),
                    ));
                }
                return Ok(c);
            }
        }
    }
    Err(not_found(if has_dir {
        cwd.join(name).display().to_string()
    } else {
        path_var.to_string()
    }))
}

/// Each ACE the policy names that the path's DACL, read back, does not hold.
fn missing_aces(policy: &wincfg::WindowsPolicy) -> Vec<String> {
    let mut missing = Vec::new();
    for ace in &policy.aces {
        let held = match (wincfg::parse_ace(&ace.sddl), w::dacl_sddl(&ace.path)) {
            (Ok(want), Ok(dacl)) => wincfg::dacl_holds(&dacl, &want),
            _ => false,
        };
        if !held {
            missing.push(format!(
                "{} has no ACE {} ({}): the broker applies it before a Start",
                ace.path.display(),
                ace.sddl,
                ace.why
            ));
        }
    }
    missing
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipc_schema::exec::{GrantAccess, Hide, Limits, PathGrant};

    fn spec(dir: &Path) -> CommandSpec {
        CommandSpec {
            argv: vec!["cmd.exe".into(), "/d".into(), "/c".into(), "echo x".into()],
            cwd: dir.to_path_buf(),
            grants: vec![PathGrant {
                path: dir.to_path_buf(),
                access: GrantAccess::ReadWrite,
            }],
            env: Vec::new(),
            network: NetworkMode::None,
            limits: Limits::default(),
            hide: Hide::default(),
            user: None,
        }
    }

    #[test]
    fn without_allow_degraded_a_gap_refuses_before_anything_starts() {
        let dir = tempfile::tempdir().unwrap();
        let strict = Config {
            protect: Vec::new(),
            allow_degraded: false,
        };
        let e = launch(spec(dir.path()), &strict).err().expect("refused");
        assert_eq!(e.code, ErrorCode::Refused);
        assert!(
            e.message.starts_with(
                "this command's confinement on Windows falls short of its policy, so nothing ran: outbound network is not refused"
            ),
            "{}",
            e.message
        );
        // No ACE was applied for the grant here (the broker does that): named by path.
        assert!(
            e.message.contains(&format!(
                "{} has no ACE (A;OICI;FRFWFXSD;;;",
                dir.path().display()
            )),
            "{}",
            e.message
        );
        // Positive control: the same command with --allow-degraded starts, naming the gaps.
        let degraded = Config {
            protect: Vec::new(),
            allow_degraded: true,
        };
        let (run, report) = launch(spec(dir.path()), &degraded).expect("started");
        assert!(report.degraded[0].starts_with("outbound network is not refused"));
        assert!(matches!(run.child.wait_timeout(30_000), Ok(Some(0))));
    }

    #[test]
    fn programs_are_found_as_createprocess_runs_them() {
        let root = std::env::var("SystemRoot").unwrap();
        let path = format!(r"{root}\System32");
        let dir = tempfile::tempdir().unwrap();
        let cmd = find_program("cmd", dir.path(), &path).unwrap();
        assert!(
            cmd.to_string_lossy()
                .to_ascii_lowercase()
                .ends_with(r"\cmd.exe"),
            "{cmd:?}"
        );
        assert_eq!(find_program("cmd.exe", dir.path(), &path).unwrap(), cmd);
        let (code, why) = find_program("nope", dir.path(), &path).unwrap_err();
        assert_eq!(code, ErrorCode::NotFound);
        assert_eq!(
            why,
            format!("nope: command not found in the sandbox (searched {path})")
        );
        // A relative PATH entry is never searched (it would depend on the working directory).
        std::fs::write(dir.path().join("tool.exe"), b"MZ").unwrap();
        assert!(find_program("tool", dir.path(), ".").is_err());
        assert_eq!(
            find_program(r".\tool", dir.path(), &path).unwrap(),
            dir.path().join("tool.exe")
        );
        std::fs::write(dir.path().join("go.bat"), b"@echo").unwrap();
        let (code, why) =
            find_program("go.bat", dir.path(), &dir.path().to_string_lossy()).unwrap_err();
        assert_eq!(code, ErrorCode::Refused);
        assert!(why.contains("cmd.exe"), "{why}");
    }
}
