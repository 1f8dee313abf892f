//! `gatehouse sandbox`: one command in the exec sandbox (the way bubblewrap is used), run by the
//! broker's exec-helper exactly as an agent's `run_command` is.
//!
//! This process builds no sandbox: it resolves what only it can see (its current directory,
//! the paths it was given, its environment), sends one `LaunchRequest::Command` on the
//! console's channel (starting the broker when none runs), and relays what comes back: the
//! command's output as it comes, each egress connection's end (refusals on stderr), the end.
//! The broker writes the audit rows: the start, every egress connection, every refusal, the
//! end. Ctrl-C (or SIGTERM, SIGHUP) asks the broker to kill the whole sandbox; so does this
//! process going away, since the broker stops the command of a connection that closes.
//!
//! The current directory is the working root, read-write, unless a grant names it; a home
//! directory or `/` is never granted implicitly. When the broker runs as root, its exec-helper
//! runs commands as nobody (never root toward the host).
//!
//! On Windows the same path runs the command in the exec-helper's restricted-token tier (the
//! policy must set `require_namespaces = false`); Ctrl-C, Ctrl-Break and the console closing
//! take the place of the signals, and with `--allow-domain` the command's proxy variables name
//! the broker's listener on a loopback port (docs/windows.md).
//!
//! Exit status: the command's own; 128+N when a signal N killed it; 124 when the time limit
//! killed it; 125 when gatehouse refused the command or could not build the sandbox (the message
//! says which); 126 when the program could not be executed; 127 when it was not found.

use crate::Global;
use ipc_schema::exec::{GrantAccess, Limits, PathGrant, RunEnd, RunOutcome, TIMEOUT_MAX_MS};
use ipc_schema::net::EgressVerdict;
use ipc_schema::ui::{CommandLaunch, LaunchReply, LaunchRequest, NotStarted, UiReply, UiRequest};
use ipc_schema::Body;
use sandbox::command_env;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;

pub const EXIT_TIMEOUT: u8 = 124;
pub const EXIT_REFUSED: u8 = 125;
pub const EXIT_NOT_EXECUTABLE: u8 = 126;
pub const EXIT_NOT_FOUND: u8 = 127;

const WHO: &str = "gatehouse sandbox";

#[derive(clap::Args, Debug)]
pub struct SandboxArgs {
    /// A directory (or file) the command may write; repeatable.
    #[arg(long = "allow-write", value_name = "PATH")]
    write: Vec<PathBuf>,
    /// A directory (or file) the command may read; repeatable.
    #[arg(long = "allow-read", value_name = "PATH")]
    read: Vec<PathBuf>,
    #[command(flatten)]
    proxy: ProxyArgs,
    /// Seconds before the whole sandbox is killed (default 300, at most 600).
    #[arg(long, value_name = "SECONDS")]
    timeout: Option<u64>,
    /// Pass this variable too (NAME takes this process's value); secret-looking names, LD_* and
    /// the sandbox's own variables are refused (use --pass-env for a secret the command needs).
    #[arg(long = "env", value_name = "NAME[=VALUE]")]
    env: Vec<String>,
    /// Pass this variable of this process's environment even though its name (or value) looks
    /// like a secret (`PGPASSWORD` for `psql`); repeatable. Said on stderr before the command
    /// runs, and in `--json`. LD_* and the sandbox's own variables still never pass.
    #[arg(long = "pass-env", value_name = "NAME")]
    pass_env: Vec<String>,
    /// Pass the command's output to this terminal byte for byte. Without it, output bound for
    /// a terminal has its control characters and escape sequences (clipboard writes, screen
    /// clears, title changes) shown as visible escapes; output to a pipe or file is never
    /// changed.
    #[arg(long)]
    raw_output: bool,
    /// Start the broker (when none runs) with `--allow-degraded`: its helpers and sandboxes run
    /// with less if this kernel lacks a mechanism (each gap is printed). A running broker keeps
    /// the setting it was started with.
    #[arg(long)]
    allow_degraded: bool,
    /// The command and its arguments.
    #[arg(last = true, required = true, value_name = "CMD")]
    argv: Vec<String>,
}

/// The egress proxy's options (shared with `gatehouse run`).
#[derive(clap::Args, Debug)]
pub struct ProxyArgs {
    /// A name (or *.suffix) the command may reach through the egress proxy; repeatable. Without
    /// any, the command has no network at all.
    #[arg(long = "allow-domain", value_name = "DOMAIN")]
    pub(crate) domains: Vec<String>,
    /// Test builds only: an argument for the net-helper (its test name server and address
    /// policy); repeatable. `gatehouse sandbox` passes it to the broker it starts.
    #[cfg(feature = "test-hooks")]
    #[arg(long, value_name = "ARG", allow_hyphen_values = true)]
    pub(crate) test_net_arg: Vec<String>,
    /// Test builds only: a port the proxy session allows besides 443.
    #[cfg(feature = "test-hooks")]
    #[arg(long, value_name = "PORT")]
    pub(crate) test_proxy_port: Option<u16>,
    /// Test builds only: do not require the tunnel's TLS SNI to match (for plain-text test
    /// servers).
    #[cfg(feature = "test-hooks")]
    #[arg(long)]
    pub(crate) test_no_sni_check: bool,
}

impl ProxyArgs {
    /// The arguments a broker started for this command gets (test builds: the net-helper's
    /// test name server and address policy, the proxy's test port and SNI setting).
    pub(crate) fn broker_args(&self) -> Vec<String> {
        #[allow(unused_mut)]
        let mut out: Vec<String> = Vec::new();
        #[cfg(feature = "test-hooks")]
        {
            for a in &self.test_net_arg {
                out.push(format!("--test-net-arg={a}"));
            }
            if let Some(p) = self.test_proxy_port {
                out.push(format!("--test-proxy-port={p}"));
            }
            if self.test_no_sni_check {
                out.push("--test-no-sni-check".into());
            }
        }
        out
    }
}

/// A refusal or failure before the command ran: message, exit code.
pub(crate) struct Stop(pub String, pub u8);

pub fn run(g: &Global, args: SandboxArgs) -> ExitCode {
    match run_inner(g, args) {
        Ok(code) => code,
        Err(Stop(msg, code)) => {
            eprintln!("{WHO}: {msg}");
            ExitCode::from(code)
        }
    }
}

/// The `--env NAME[=VALUE]` variables (NAME alone takes this process's value); one that may not
/// pass refuses the command. A secret-looking one is refused with how to pass it anyway
/// (`--pass-env NAME`, which says so on screen).
pub(crate) fn env_args(args: &[String]) -> Result<Vec<(String, String)>, Stop> {
    let mut out = Vec::new();
    for e in args {
        let (name, value) = match e.split_once('=') {
            Some((n, v)) => (n.to_string(), v.to_string()),
            None => (e.clone(), std::env::var(e).unwrap_or_default()),
        };
        match command_env::refusal(&name, &value) {
            None => out.push((name, value)),
            Some(command_env::LOOKS_SECRET) => {
                let why = command_env::secret_reason(&name).unwrap_or("a password in a URL");
                return Err(refused(format!(
                    "--env {name}: looks like a secret ({why}); it is passed only when named with --pass-env {name} (which takes this process's value and is said on screen)"
                )));
            }
            Some(why) => return Err(refused(format!("--env {name}: {why}; it is never passed"))),
        }
    }
    Ok(out)
}

/// The `--pass-env NAME` variables: this process's values of secret-looking names the user
/// chose to pass. A name this process does not have is refused (a typo must not pass silently
/// as nothing).
pub(crate) fn pass_env_args(names: &[String]) -> Result<Vec<(String, String)>, Stop> {
    let mut out: Vec<(String, String)> = Vec::new();
    for name in names {
        if name.contains('=') {
            return Err(refused(format!(
                "--pass-env {name}: takes a NAME only (the value is this process's)"
            )));
        }
        match std::env::var(name) {
            Ok(v) => {
                if !out.iter().any(|(k, _)| k == name) {
                    out.push((name.clone(), v))
                }
            }
            Err(_) => {
                return Err(refused(format!(
                    "--pass-env {name}: this process has no such variable"
                )))
            }
        }
    }
    Ok(out)
}

/// Says on stderr which variables were left out, and which secret-looking ones pass because
/// they were named (names only, never a value).
pub(crate) fn say_env(
    who: &str,
    dropped: &[String],
    passed: &[(String, String)],
    say_passed: bool,
) {
    let passed: Vec<&str> = passed.iter().map(|(k, _)| k.as_str()).collect();
    let dropped: Vec<String> = dropped
        .iter()
        .filter(|d| {
            let name = d.split_once(": ").map_or(d.as_str(), |(n, _)| n);
            !passed.contains(&name)
        })
        .map(|d| ipc_schema::inert::escaped(d))
        .collect();
    if !dropped.is_empty() {
        eprintln!("{who}: not passed to the command: {}", dropped.join(", "));
    }
    if say_passed && !passed.is_empty() {
        eprintln!(
            "{who}: passing {} to the command although it looks like a secret (--pass-env)",
            passed.join(", ")
        );
    }
}

pub(crate) fn refused(msg: impl std::fmt::Display) -> Stop {
    Stop(msg.to_string(), EXIT_REFUSED)
}

/// SIGINT, SIGTERM and SIGHUP: they kill the sandbox (read through a signalfd).
#[cfg(unix)]
pub(crate) fn stop_signals() -> nix::sys::signal::SigSet {
    use nix::sys::signal::{SigSet, Signal};
    let mut mask = SigSet::empty();
    for s in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
        mask.add(s);
    }
    mask
}

fn run_inner(g: &Global, args: SandboxArgs) -> Result<ExitCode, Stop> {
    // Blocked before any thread starts, so that every thread has them blocked and only the
    // `sigwait` below takes them.
    #[cfg(unix)]
    stop_signals()
        .thread_block()
        .map_err(|e| refused(format!("blocking signals: {e}")))?;
    let cwd = std::env::current_dir()
        .and_then(std::fs::canonicalize)
        .map_err(|e| refused(format!("cannot tell the current directory: {e}")))?;
    let timeout_ms = match args.timeout {
        None => ipc_schema::exec::TIMEOUT_DEFAULT_MS,
        Some(0) => return Err(refused("--timeout must be at least 1 second")),
        Some(s) if s.saturating_mul(1000) > TIMEOUT_MAX_MS => {
            return Err(refused(format!(
                "--timeout {s} is above the limit of {} seconds",
                TIMEOUT_MAX_MS / 1000
            )))
        }
        Some(s) => s * 1000,
    };

    // Resolved here, where the paths are seen as the user meant them; the exec-helper
    // resolves them again (rule 10).
    let mut grants: Vec<PathGrant> = Vec::new();
    for (paths, access) in [
        (&args.write, GrantAccess::ReadWrite),
        (&args.read, GrantAccess::Read),
    ] {
        for p in paths {
            let path =
                std::fs::canonicalize(p).map_err(|e| refused(format!("{}: {e}", p.display())))?;
            grants.push(PathGrant { path, access });
        }
    }
    let covered = grants.iter().any(|gr| cwd.starts_with(&gr.path));
    // Checked here too, so that an obvious refusal starts no broker; the broker decides.
    if !covered {
        let home = ipc_schema::protected::user_home();
        if let Some(why) = ipc_schema::protected::implicit_root_refusal(&cwd, home.as_deref()) {
            return Err(refused(format!(
                "the current directory {} is not granted: {why}. Name what the command may use with --allow-write or --allow-read (and cd into it)",
                cwd.display()
            )));
        }
    }

    let mut env = command_env::inherited_from_process();
    env.extend(env_args(&args.env)?);
    let passed = pass_env_args(&args.pass_env)?;
    let limits = Limits {
        timeout_ms,
        ..Limits::default()
    };
    let launch = CommandLaunch {
        argv: args.argv.clone(),
        cwd,
        grants,
        work_root: !covered,
        env,
        pass_env: passed.clone(),
        domains: args.proxy.domains.clone(),
        limits,
        hide: Default::default(),
        long_run: false,
        agent: None,
    };

    let mut broker_args = args.proxy.broker_args();
    if args.allow_degraded {
        broker_args.push("--allow-degraded".into());
    }
    let how = Relay {
        who: WHO,
        json: g.json,
        raw_output: args.raw_output,
        say_passed: true,
    };
    let outcome = launch_in_broker(g, launch, &broker_args, &passed, how)?;
    Ok(report(WHO, outcome, &limits, g.json))
}

/// How [`launch_in_broker`] shows what comes back.
pub(crate) struct Relay {
    /// The command its messages are printed under.
    pub who: &'static str,
    pub json: bool,
    pub raw_output: bool,
    /// Say on stderr which secret-looking variables pass by name (`gatehouse run` says it
    /// itself, with the rest of its set-up).
    pub say_passed: bool,
}

/// Sends `launch` on the console's channel (starting the broker with `broker_args` when none
/// runs) and relays what comes back until the command's end: its output as it comes (escaped on
/// a terminal unless `raw_output`, or kept for `--json`), each egress refusal on stderr, the
/// refusal or the end. SIGINT, SIGTERM and SIGHUP ask the broker to stop the command.
pub(crate) fn launch_in_broker(
    g: &Global,
    launch: CommandLaunch,
    broker_args: &[String],
    passed: &[(String, String)],
    how: Relay,
) -> Result<Outcome, Stop> {
    let who = how.who;
    let mut client = gatehouse_client::Client::connect_or_start(
        g.data_dir.as_deref(),
        &g.dirs,
        &g.dirs.ui_socket(),
        broker_args,
    )
    .map_err(refused)?;
    let request = Body::Ui(UiRequest::Launch(LaunchRequest::Command(Box::new(launch))));
    let id = client.send(request).map_err(refused)?;
    let interrupted = Arc::new(AtomicI32::new(0));
    watch_stop_signals(&client, interrupted.clone())?;

    let output = if how.json {
        Output::Capture
    } else {
        Output::relay(how.raw_output)
    };
    let mut captured: [Vec<u8>; 2] = [Vec::new(), Vec::new()];
    let mut escapers: [Option<ipc_schema::inert::StreamEscaper>; 2] = match output {
        Output::Relay { escape } => escape.map(|e| e.then(ipc_schema::inert::StreamEscaper::new)),
        Output::Capture => [None, None],
    };
    let mut sandbox = None;
    let end = loop {
        let env = client
            .next_frame()
            .map_err(|e| refused(format!("the broker: {e} (the command's state is unknown)")))?;
        if env.id != id {
            continue; // the answer to StopCommand
        }
        let reply = match env.body {
            Body::UiReply(UiReply::Launch(r)) => r,
            Body::Error(e) => return Err(refused(e.message)),
            other => {
                return Err(refused(format!(
                    "the broker answered the command with {:?}",
                    other.kind()
                )))
            }
        };
        match reply {
            LaunchReply::CommandStarted { sandbox: report } => {
                for d in &report.degraded {
                    eprintln!("{who}: degraded: {d}");
                }
                // The person who launched it hears when it runs without namespaces (the start
                // row in the audit log names the tier either way; `--json` has it too).
                if report.tier == ipc_schema::tier::ConfinementTier::Landlock && !how.json {
                    eprintln!(
                        "{who}: in the exec sandbox's {}",
                        ipc_schema::tier::shown(Some(report.tier))
                    );
                }
                if !how.json {
                    say_env(who, &report.env_dropped, passed, how.say_passed);
                }
                let _ = std::io::stderr().flush();
                sandbox = Some(report);
            }
            LaunchReply::Output { stdout, stderr } => {
                for (i, bytes) in [stdout, stderr].iter().enumerate() {
                    match output {
                        Output::Capture => captured[i].extend_from_slice(bytes),
                        Output::Relay { .. } => relay_chunk(i, bytes, escapers[i].as_mut()),
                    }
                }
            }
            LaunchReply::Egress(record) => {
                if !matches!(record.verdict, EgressVerdict::Tunnelled { .. }) {
                    eprintln!(
                        "{who}: {}",
                        ipc_schema::inert::escaped(&record.audit_line())
                    );
                }
            }
            LaunchReply::Refused { reason, why } => {
                let code = match why {
                    NotStarted::NotFound => EXIT_NOT_FOUND,
                    NotStarted::Refused => EXIT_REFUSED,
                };
                return Err(Stop(reason, code));
            }
            LaunchReply::CommandEnded(end) => break end,
        }
    };
    // What an escaper held back (a character cut short, a final `\r`).
    for (i, e) in escapers.iter_mut().enumerate() {
        if let Some(e) = e {
            let mut rest = Vec::new();
            e.finish(&mut rest);
            relay_chunk(i, &rest, None);
        }
    }
    let sandbox = sandbox.ok_or_else(|| refused("the broker sent the end before the start"))?;
    let [stdout, stderr] = captured;
    let signal = interrupted.load(Ordering::SeqCst);
    Ok(Outcome {
        end,
        interrupted: (signal != 0).then_some(signal),
        stdout,
        stderr,
        sandbox: *sandbox,
        passed: passed.iter().map(|(k, _)| k.clone()).collect(),
    })
}

/// SIGINT, SIGTERM and SIGHUP (blocked in every thread, taken by `sigwait` in a thread of
/// their own: Linux and macOS alike) ask the broker to kill the command's sandbox; the
/// command's end then says it was stopped.
#[cfg(unix)]
fn watch_stop_signals(
    client: &gatehouse_client::Client,
    interrupted: Arc<AtomicI32>,
) -> Result<(), Stop> {
    let mut side = client
        .side_writer()
        .map_err(|e| refused(format!("the broker connection: {e}")))?;
    let mask = stop_signals();
    std::thread::spawn(move || {
        while let Ok(sig) = mask.wait() {
            let _ = interrupted.compare_exchange(0, sig as i32, Ordering::SeqCst, Ordering::SeqCst);
            let _ = side.send(Body::Ui(UiRequest::Launch(LaunchRequest::StopCommand)));
        }
    });
    Ok(())
}

/// Ctrl-C, Ctrl-Break and the console window closing ask the broker to kill the command's
/// sandbox, as the signals do on Unix. They are recorded as the signal a shell would name
/// (Ctrl-C as SIGINT, 2; the others as SIGTERM, 15), so the exit status is the same 130 or 143.
/// However this process ends, the command ends too: the broker stops the command of a
/// connection that closes.
#[cfg(windows)]
fn watch_stop_signals(
    client: &gatehouse_client::Client,
    interrupted: Arc<AtomicI32>,
) -> Result<(), Stop> {
    use sandbox::windows::ConsoleStop;
    let stops =
        sandbox::windows::console_stops().map_err(|e| refused(format!("watching Ctrl-C: {e}")))?;
    let mut side = client
        .side_writer()
        .map_err(|e| refused(format!("the broker connection: {e}")))?;
    std::thread::spawn(move || {
        for stop in stops {
            let signal = if stop == ConsoleStop::CtrlC { 2 } else { 15 };
            let _ = interrupted.compare_exchange(0, signal, Ordering::SeqCst, Ordering::SeqCst);
            let _ = side.send(Body::Ui(UiRequest::Launch(LaunchRequest::StopCommand)));
        }
    });
    Ok(())
}

/// How the run ended, with the output when it was captured (`--json`).
pub(crate) struct Outcome {
    pub(crate) end: RunEnd,
    /// Killed because this process got SIGINT, SIGTERM or SIGHUP.
    pub(crate) interrupted: Option<i32>,
    pub(crate) stdout: Vec<u8>,
    pub(crate) stderr: Vec<u8>,
    pub(crate) sandbox: ipc_schema::exec::SandboxReport,
    /// The secret-looking variables passed because the user named them (`--pass-env`).
    pub(crate) passed: Vec<String>,
}

/// Where the command's output goes.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Output {
    /// Kept for the `--json` summary.
    Capture,
    /// Relayed to this process's stdout and stderr as it comes; a stream marked here is shown
    /// inert (`ipc_schema::inert::StreamEscaper`): what the command prints is the agent's (or
    /// a model's) to choose, and a terminal obeys escape sequences (OSC 52 writes the
    /// clipboard, others clear the screen, retitle the window or fake a prompt).
    Relay { escape: [bool; 2] },
}

impl Output {
    /// Each stream escaped when it is a terminal (checked separately: `cmd 2>log` keeps a
    /// terminal stdout), unless the user asked for the raw bytes.
    pub(crate) fn relay(raw: bool) -> Output {
        use std::io::IsTerminal;
        Output::Relay {
            escape: [
                !raw && std::io::stdout().is_terminal(),
                !raw && std::io::stderr().is_terminal(),
            ],
        }
    }
}

/// Writes a chunk of the command's output to our stream `i`, inert when `esc` is given.
pub(crate) fn relay_chunk(
    i: usize,
    bytes: &[u8],
    esc: Option<&mut ipc_schema::inert::StreamEscaper>,
) {
    let mut shown = Vec::new();
    let bytes = match esc {
        Some(e) => {
            e.push(bytes, &mut shown);
            &shown[..]
        }
        None => bytes,
    };
    if bytes.is_empty() {
        return;
    }
    // A closed terminal or pipe on our side must not stop the relay.
    let _ = if i == 0 {
        let mut o = std::io::stdout();
        o.write_all(bytes).and_then(|_| o.flush())
    } else {
        std::io::stderr().write_all(bytes)
    };
}

/// Prints the notices (or the JSON summary) and picks the exit status.
pub(crate) fn report(who: &str, o: Outcome, limits: &Limits, json: bool) -> ExitCode {
    let code: u8 = match (&o.end.outcome, o.interrupted) {
        (RunOutcome::Stopped, Some(sig)) => (128 + sig) as u8,
        (RunOutcome::Exited(c), _) => *c as u8,
        (RunOutcome::Signaled(s), _) => (128 + s) as u8,
        (RunOutcome::TimedOut { .. }, _) => EXIT_TIMEOUT,
        (RunOutcome::ExecFailed { errno, .. }, _) if *errno == libc::ENOENT => EXIT_NOT_FOUND,
        (RunOutcome::ExecFailed { .. }, _) => EXIT_NOT_EXECUTABLE,
        (RunOutcome::SandboxFailed { .. }, _) | (RunOutcome::Stopped, None) => EXIT_REFUSED,
    };
    let outcome_text = match (&o.end.outcome, o.interrupted) {
        (RunOutcome::Stopped, Some(sig)) if cfg!(windows) => {
            let what = if sig == 2 {
                "Ctrl-C"
            } else {
                "Ctrl-Break or the console closing"
            };
            format!("interrupted by {what}; the sandbox was killed")
        }
        (RunOutcome::Stopped, Some(sig)) => {
            format!("interrupted by signal {sig}; the sandbox was killed")
        }
        (other, _) => other.describe(),
    };
    let names = ["stdout", "stderr"];
    let maxes = [limits.stdout_max, limits.stderr_max];
    if json {
        let v = serde_json::json!({
            "exit_code": code,
            "outcome": outcome_text,
            "elapsed_ms": o.end.elapsed_ms,
            "stdout": String::from_utf8_lossy(&o.stdout),
            "stderr": String::from_utf8_lossy(&o.stderr),
            "stdout_dropped": o.end.stdout_dropped,
            "stderr_dropped": o.end.stderr_dropped,
            "sandbox": {
                "program": o.sandbox.program,
                "tier": o.sandbox.tier.name(),
                "namespaces": o.sandbox.namespaces,
                "uid": o.sandbox.uid,
                "gid": o.sandbox.gid,
                "landlock_abi": o.sandbox.landlock_abi,
                "seccomp_denylist": o.sandbox.seccomp_denylist,
                "masked": o.sandbox.masked,
                "env_dropped": o.sandbox.env_dropped.iter().filter(|d| {
                    let name = d.split_once(": ").map_or(d.as_str(), |(n, _)| n);
                    !o.passed.iter().any(|p| p == name)
                }).collect::<Vec<_>>(),
                "env_passed": o.passed,
                "degraded": o.sandbox.degraded,
            },
            "held": o.end.held.iter().map(|h| h.to_string()).collect::<Vec<_>>(),
            "held_more": o.end.held_more,
        });
        println!("{v}");
    } else {
        for h in &o.end.held {
            eprintln!(
                "{who}: set aside after the command, because your own tools would run it: {}",
                ipc_schema::inert::escaped(&h.to_string())
            );
        }
        if o.end.held_more > 0 {
            eprintln!("{who}: and {} more set aside", o.end.held_more);
        }
        let dropped = [o.end.stdout_dropped, o.end.stderr_dropped];
        for i in 0..2 {
            if dropped[i] > 0 {
                eprintln!(
                    "{who}: {}: {} bytes beyond the {} KiB limit were dropped",
                    names[i],
                    dropped[i],
                    maxes[i] / 1024
                );
            }
        }
        if !matches!(
            o.end.outcome,
            RunOutcome::Exited(_) | RunOutcome::Signaled(_)
        ) {
            eprintln!("{who}: {outcome_text}");
        }
    }
    ExitCode::from(code)
}
