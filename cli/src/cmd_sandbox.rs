//! `gatehouse sandbox`: one command in the exec sandbox, standalone (the way bubblewrap is used).
//!
//! It builds exactly the sandbox the exec-helper gives an agent's commands (the same code,
//! `sandbox::linux::command`), in this process: no broker is needed, and none is started. The
//! current directory is the working root, read-write, unless a grant names it; a home directory
//! or `/` is never granted implicitly.
//!
//! Exit status: the command's own; 128+N when a signal N killed it; 124 when the time limit
//! killed it; 125 when gatehouse refused the command or could not build the sandbox (the message
//! says which); 126 when the program could not be executed; 127 when it was not found.

use crate::Global;
use ipc_schema::exec::{GrantAccess, Limits, PathGrant, RunEnd, RunOutcome, TIMEOUT_MAX_MS};
use sandbox::linux::command::{
    self, identity, Kill, Network, SandboxSpec, Sandboxed, Stream, Watch,
};
use std::io::Write;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

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
    /// Run with less than the full sandbox if this kernel lacks a mechanism (each gap is printed).
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
    /// Test builds only: use the proxy listening on this Unix socket (it receives each client
    /// connection as a descriptor) instead of starting the net-helper.
    #[cfg(feature = "test-hooks")]
    #[arg(long, value_name = "SOCKET")]
    pub(crate) test_proxy_socket: Option<PathBuf>,
    /// Test builds only: the proxy token to use with --test-proxy-socket.
    #[cfg(feature = "test-hooks")]
    #[arg(long, value_name = "TOKEN", default_value = "test-token")]
    pub(crate) test_proxy_token: String,
    /// Test builds only: an argument for the net-helper (its test name server and address
    /// policy); repeatable.
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
        match command::env::refusal(&name, &value) {
            None => out.push((name, value)),
            Some(command::env::LOOKS_SECRET) => {
                let why = command::env::secret_reason(&name).unwrap_or("a password in a URL");
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
pub(crate) fn stop_signals() -> nix::sys::signal::SigSet {
    use nix::sys::signal::{SigSet, Signal};
    let mut mask = SigSet::empty();
    for s in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
        mask.add(s);
    }
    mask
}

fn run_inner(g: &Global, args: SandboxArgs) -> Result<ExitCode, Stop> {
    // Blocked before any thread starts (the proxy relay), so that every thread has them blocked
    // and the signalfd sees them.
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

    // Never root toward the host: become the owner of the working root (or nobody) first.
    if nix::unistd::geteuid().is_root() {
        let (uid, gid) = identity::run_as_for(&cwd);
        identity::become_user(uid, gid)
            .map_err(|e| refused(format!("cannot drop root before sandboxing: {e}")))?;
    }
    let uid = nix::unistd::geteuid().as_raw();
    let home = identity::home_of(uid);

    let mut grants: Vec<PathGrant> = Vec::new();
    for (paths, access) in [
        (&args.write, GrantAccess::ReadWrite),
        (&args.read, GrantAccess::Read),
    ] {
        for p in paths {
            let abs =
                std::path::absolute(p).map_err(|e| refused(format!("{}: {e}", p.display())))?;
            grants.push(PathGrant { path: abs, access });
        }
    }
    let covered = grants
        .iter()
        .any(|gr| std::fs::canonicalize(&gr.path).is_ok_and(|p| cwd.starts_with(p)));
    if !covered {
        if let Some(why) = implicit_root_refusal(&cwd, &home) {
            return Err(refused(format!(
                "the current directory {} is not granted: {why}. Name what the command may use with --allow-write or --allow-read (and cd into it)",
                cwd.display()
            )));
        }
        grants.push(PathGrant {
            path: cwd.clone(),
            access: GrantAccess::ReadWrite,
        });
    }

    let mut env = command::env::inherited_from_process();
    env.extend(env_args(&args.env)?);
    let passed = pass_env_args(&args.pass_env)?;

    let (network, egress) =
        match open_proxy("gatehouse sandbox", &args.proxy, args.allow_degraded, None)? {
            None => (Network::None, None),
            Some((connector, token, egress)) => (Network::Proxy { connector, token }, egress),
        };
    let limits = Limits {
        timeout_ms,
        ..Limits::default()
    };
    let spec = SandboxSpec {
        hide: Default::default(),
        argv: args.argv.clone(),
        cwd: cwd.clone(),
        grants,
        env,
        home,
        state_home: None,
        network,
        limits,
        protect: g.dirs.own().to_vec(),
        allow_degraded: args.allow_degraded,
    };
    let mut prepared = command::prepare(spec).map_err(|e| {
        // A denied program is refused as such even where it is not installed.
        let argv0 = Path::new(args.argv.first().map(String::as_str).unwrap_or(""));
        if let Some(why) = command::policy::builtin_denial(&args.argv, argv0) {
            return refused(why);
        }
        match e {
            command::SandboxError::NotFound { .. } => Stop(e.to_string(), EXIT_NOT_FOUND),
            other => refused(other),
        }
    })?;
    if let Some(why) = command::policy::builtin_denial(&args.argv, &prepared.program) {
        return Err(refused(why));
    }
    for (name, value) in &passed {
        prepared.pass_named_secret(name, value).map_err(refused)?;
    }
    for d in &prepared.report.degraded {
        eprintln!("gatehouse sandbox: degraded: {d}");
    }
    if !g.json {
        say_env(WHO, &prepared.report.env_dropped, &passed, true);
    }
    let sb = prepared.spawn().map_err(refused)?;
    let output = if g.json {
        Output::Capture
    } else {
        Output::relay(args.raw_output)
    };
    let mut outcome = supervise(sb, &limits, output)?;
    outcome.passed = passed.into_iter().map(|(k, _)| k).collect();
    if let Some(e) = egress {
        e.close();
    }
    Ok(report(WHO, outcome, &limits, g.json))
}

/// Why the current directory is not made the working root without being named.
pub(crate) fn implicit_root_refusal(cwd: &Path, home: &Path) -> Option<String> {
    ipc_schema::protected::implicit_root_refusal(cwd, Some(home))
}

/// The network of the command: none, or a proxy connector and token (and, for
/// `--allow-domain`, the net-helper serving it).
pub(crate) type Proxy = Option<(OwnedFd, String, Option<egress::Egress>)>;

/// `records`, when given, receives every connection's record as it ends (`gatehouse run` sends
/// them to the broker's audit log); refusals are printed either way.
pub(crate) fn open_proxy(
    who: &'static str,
    args: &ProxyArgs,
    allow_degraded: bool,
    records: Option<std::sync::mpsc::Sender<ipc_schema::net::EgressRecord>>,
) -> Result<Proxy, Stop> {
    #[cfg(feature = "test-hooks")]
    if let Some(sock) = &args.test_proxy_socket {
        let s = std::os::unix::net::UnixStream::connect(sock)
            .map_err(|e| refused(format!("test proxy {}: {e}", sock.display())))?;
        return Ok(Some((
            OwnedFd::from(s),
            args.test_proxy_token.clone(),
            None,
        )));
    }
    if args.domains.is_empty() {
        return Ok(None);
    }
    #[cfg(feature = "test-hooks")]
    let (extra, ports, sni_check) = (
        args.test_net_arg.clone(),
        args.test_proxy_port.into_iter().collect(),
        !args.test_no_sni_check,
    );
    #[cfg(not(feature = "test-hooks"))]
    let (extra, ports, sni_check) = (Vec::new(), Vec::new(), true);
    let mut e = egress::Egress::open(&args.domains, allow_degraded, extra, ports, sni_check)
        .map_err(refused)?;
    e.records = records;
    e.who = who;
    let (connector, token) = (e.connector_for_sandbox()?, e.token.clone());
    Ok(Some((connector, token, Some(e))))
}

/// How the run ended, with the output when it was captured (`--json`).
pub(crate) struct Outcome {
    end: RunEnd,
    /// Killed because this process got SIGINT, SIGTERM or SIGHUP.
    interrupted: Option<i32>,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    sandbox: ipc_schema::exec::SandboxReport,
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
fn relay_chunk(i: usize, bytes: &[u8], esc: Option<&mut ipc_schema::inert::StreamEscaper>) {
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

/// Relays output (up to the limits), enforces the time limit, and turns SIGINT/SIGTERM/SIGHUP
/// into killing the sandbox.
pub(crate) fn supervise(sb: Sandboxed, limits: &Limits, output: Output) -> Result<Outcome, Stop> {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    use nix::sys::signalfd::{SfdFlags, SignalFd};

    let sigfd = SignalFd::with_flags(
        &stop_signals(),
        SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC,
    )
    .map_err(|e| refused(format!("signalfd: {e}")))?;
    let sandbox = sb.report.clone();
    let mut w =
        Watch::new(sb, *limits).map_err(|e| refused(format!("watching the sandbox: {e}")))?;
    let mut captured: [Vec<u8>; 2] = [Vec::new(), Vec::new()];
    let mut escapers: [Option<ipc_schema::inert::StreamEscaper>; 2] = match output {
        Output::Relay { escape } => escape.map(|e| e.then(ipc_schema::inert::StreamEscaper::new)),
        Output::Capture => [None, None],
    };
    let mut interrupted = None;

    while !w.finished() {
        let now = Instant::now();
        w.check_time(now);
        let wait = match w.deadline() {
            Some(d) => {
                let ms = d
                    .saturating_duration_since(now)
                    .as_millis()
                    .clamp(1, 60_000);
                PollTimeout::from(ms as u16)
            }
            None => PollTimeout::from(1000u16),
        };
        let set = w.poll_set();
        let mut fds: Vec<PollFd> = set
            .iter()
            .map(|fd| match fd {
                Some(fd) => PollFd::new(*fd, PollFlags::POLLIN),
                None => PollFd::new(sigfd.as_fd(), PollFlags::empty()),
            })
            .collect();
        fds.push(PollFd::new(sigfd.as_fd(), PollFlags::POLLIN));
        match poll(&mut fds, wait) {
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(refused(format!("poll: {e}"))),
            Ok(_) => {}
        }
        let is_ready = |f: &PollFd| {
            f.revents().is_some_and(|r| {
                r.intersects(PollFlags::POLLIN | PollFlags::POLLHUP | PollFlags::POLLERR)
            })
        };
        let ready = [
            is_ready(&fds[0]),
            is_ready(&fds[1]),
            is_ready(&fds[2]),
            is_ready(&fds[3]),
        ];
        let signalled = is_ready(&fds[4]);
        drop(fds);
        w.service(ready, &mut |stream, bytes| {
            let i = match stream {
                Stream::Stdout => 0,
                Stream::Stderr => 1,
            };
            match output {
                Output::Capture => captured[i].extend_from_slice(bytes),
                Output::Relay { .. } => relay_chunk(i, bytes, escapers[i].as_mut()),
            }
        });
        if signalled {
            if let Ok(Some(si)) = sigfd.read_signal() {
                interrupted.get_or_insert(si.ssi_signo as i32);
                w.kill(Kill::Stopped);
            }
        }
    }
    // What an escaper held back (a character cut short, a final `\r`).
    for (i, e) in escapers.iter_mut().enumerate() {
        if let Some(e) = e {
            let mut rest = Vec::new();
            e.finish(&mut rest);
            relay_chunk(i, &rest, None);
        }
    }
    let [stdout, stderr] = captured;
    Ok(Outcome {
        end: w.end(),
        interrupted,
        stdout,
        stderr,
        sandbox,
        passed: Vec::new(),
    })
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

/// `--allow-domain`: the egress proxy, from a net-helper this process starts and talks to the
/// way the broker does (its hello and lockdown verified; `ProxyOpen`; each bridge connection
/// passed on as a `ProxyConnection` with its descriptor). Refusals are printed as the audit rows
/// the broker would write.
pub(crate) mod egress {
    use super::{refused, Stop};
    use ipc_schema::codec::{decode_from_slice, encode, read_frame, MAX_FRAME};
    use ipc_schema::net::{EgressVerdict, NetReply, NetRequest, ProxyLimits, ProxySession};
    use ipc_schema::{Body, Envelope, Role};
    use sandbox::linux::command::fdpass::{recv_with_fds, send_with_fd};
    use std::collections::VecDeque;
    use std::io::{Read, Write};
    use std::os::fd::{AsFd, OwnedFd};
    use std::os::unix::net::UnixStream;
    use std::time::Duration;

    pub struct Egress {
        child: std::process::Child,
        pub token: String,
        session: String,
        chan: Option<UnixStream>,
        relay: Option<std::thread::JoinHandle<()>>,
        pub records: Option<std::sync::mpsc::Sender<ipc_schema::net::EgressRecord>>,
        /// The command its messages are printed under.
        pub who: &'static str,
    }

    impl Egress {
        pub fn open(
            domains: &[String],
            allow_degraded: bool,
            extra_args: Vec<String>,
            ports: Vec<u16>,
            sni_check: bool,
        ) -> Result<Egress, String> {
            let dir = std::env::current_exe()
                .ok()
                .and_then(|e| e.parent().map(|p| p.to_path_buf()))
                .ok_or("cannot find the directory of this binary")?;
            let program = dir.join(Role::Net.name());
            let (ours, theirs) = UnixStream::pair().map_err(|e| format!("socket pair: {e}"))?;
            let mut args: Vec<std::ffi::OsString> = Vec::new();
            if allow_degraded {
                args.push("--allow-degraded".into());
            }
            args.extend(extra_args.into_iter().map(Into::into));
            let spawned =
                sandbox::process::spawn_helper(&program, &args, OwnedFd::from(theirs), &[])
                    .map_err(|e| format!("cannot start {}: {e}", program.display()))?;
            let mut e = Egress {
                child: spawned.child,
                token: hex::encode(rand::random::<[u8; 16]>()),
                session: format!("sandbox-{}", std::process::id()),
                chan: None,
                relay: None,
                records: None,
                who: "gatehouse sandbox",
            };
            ours.set_read_timeout(Some(Duration::from_secs(15)))
                .map_err(|e| e.to_string())?;
            let mut r = &ours;
            let hello = match read_frame(&mut r, MAX_FRAME) {
                Ok(Some(Envelope {
                    body: Body::Hello(h),
                    ..
                })) => h,
                Ok(_) => return Err("the net-helper did not say hello".into()),
                Err(err) => return Err(format!("the net-helper's hello: {err}")),
            };
            let kernel = sandbox::process::read_proc_status(e.child.id())
                .map_err(|err| format!("reading the net-helper's status: {err}"))?;
            if hello.role != Role::Net {
                return Err(format!("{} says it is {}", program.display(), hello.role));
            }
            broker::helpers::verify_lockdown(Role::Net, &hello.lockdown, &kernel, allow_degraded)?;
            let open = ProxySession {
                session: e.session.clone(),
                token: e.token.clone(),
                allow: domains.to_vec(),
                ports,
                sni_check,
                limits: ProxyLimits::default(),
            };
            let frame = encode(&Envelope::new(1, Body::Net(NetRequest::ProxyOpen(open))))
                .map_err(|err| err.to_string())?;
            (&ours).write_all(&frame).map_err(|err| err.to_string())?;
            match read_frame(&mut r, MAX_FRAME) {
                Ok(Some(Envelope {
                    body: Body::NetReply(NetReply::ProxyOpened { .. }),
                    ..
                })) => {}
                Ok(Some(Envelope {
                    body: Body::NetReply(NetReply::Refused(r)),
                    ..
                })) => return Err(format!("--allow-domain: {}", r.reason)),
                Ok(Some(Envelope {
                    body: Body::Error(err),
                    ..
                })) => return Err(format!("the egress proxy: {}", err.message)),
                other => return Err(format!("unexpected answer to ProxyOpen: {other:?}")),
            }
            ours.set_read_timeout(None).map_err(|err| err.to_string())?;
            e.chan = Some(ours);
            Ok(e)
        }

        /// The sandbox's end of a new connector; this process relays the other end.
        pub fn connector_for_sandbox(&mut self) -> Result<OwnedFd, Stop> {
            let (ours, theirs) =
                UnixStream::pair().map_err(|e| refused(format!("socket pair: {e}")))?;
            let chan = self
                .chan
                .as_ref()
                .ok_or_else(|| refused("the proxy is not open"))?
                .try_clone()
                .map_err(|e| refused(format!("proxy channel: {e}")))?;
            let session = self.session.clone();
            let (records, who) = (self.records.clone(), self.who);
            // The relay ends when the sandbox (the connector's other holder) is gone.
            self.relay = Some(std::thread::spawn(move || {
                relay(chan, ours, session, records, who)
            }));
            Ok(OwnedFd::from(theirs))
        }

        /// Ends the proxy: the relay is done once the sandbox is gone; the net-helper exits
        /// when its channel closes.
        pub fn close(mut self) {
            if let Some(r) = self.relay.take() {
                let _ = r.join();
            }
            drop(self.chan.take());
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }

    /// Passes each bridge connection to the net-helper and prints what it refused. When the
    /// sandbox is gone, waits (up to 2 s) for the records of connections already handed over,
    /// so that a refusal is never lost to the command having exited first.
    fn relay(
        chan: UnixStream,
        connector: UnixStream,
        session: String,
        records: Option<std::sync::mpsc::Sender<ipc_schema::net::EgressRecord>>,
        who: &'static str,
    ) {
        use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
        use std::time::{Duration, Instant};
        let mut inbuf = Vec::new();
        let mut fds = VecDeque::new();
        let mut next_id = 2u64;
        // Connections handed to the net-helper whose record has not come back yet.
        let mut outstanding = 0usize;
        let mut drain_until: Option<Instant> = None;
        loop {
            let (conn_ready, chan_ready) = match drain_until {
                None => {
                    let mut p = [
                        PollFd::new(connector.as_fd(), PollFlags::POLLIN),
                        PollFd::new(chan.as_fd(), PollFlags::POLLIN),
                    ];
                    if poll(&mut p, PollTimeout::NONE).is_err() {
                        continue;
                    }
                    let r = |f: &PollFd| f.revents().is_some_and(|r| !r.is_empty());
                    (r(&p[0]), r(&p[1]))
                }
                Some(until) => {
                    if outstanding == 0 {
                        return;
                    }
                    let left = until.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return;
                    }
                    let ms = u16::try_from(left.as_millis()).unwrap_or(u16::MAX);
                    let mut p = [PollFd::new(chan.as_fd(), PollFlags::POLLIN)];
                    match poll(&mut p, PollTimeout::from(ms)) {
                        Ok(0) | Err(_) => continue,
                        Ok(_) => (false, true),
                    }
                }
            };
            if conn_ready {
                let mut b = [0u8; 16];
                match recv_with_fds(connector.as_fd(), &mut b, &mut fds) {
                    Ok(0) | Err(_) => {
                        drain_until = Some(Instant::now() + Duration::from_secs(2));
                        continue;
                    }
                    Ok(_) => {}
                }
                while let Some(fd) = fds.pop_front() {
                    let req = Body::Net(NetRequest::ProxyConnection {
                        session: session.clone(),
                    });
                    let Ok(frame) = encode(&Envelope::new(next_id, req)) else {
                        return;
                    };
                    next_id += 1;
                    match send_with_fd(chan.as_fd(), &frame, fd.as_fd()) {
                        Ok(n) if (&chan).write_all(&frame[n..]).is_ok() => outstanding += 1,
                        _ => {
                            eprintln!("{who}: the egress proxy is gone");
                            return;
                        }
                    }
                }
            }
            if chan_ready {
                let mut b = [0u8; 8192];
                match (&chan).read(&mut b) {
                    Ok(0) | Err(_) => {
                        eprintln!("{who}: the egress proxy stopped");
                        return;
                    }
                    Ok(n) => inbuf.extend_from_slice(&b[..n]),
                }
                let mut used = 0;
                while let Ok(Some((env, n))) = decode_from_slice(&inbuf[used..], MAX_FRAME) {
                    used += n;
                    match env.body {
                        Body::NetReply(NetReply::ProxyDone(rec)) => {
                            outstanding = outstanding.saturating_sub(1);
                            if !matches!(rec.verdict, EgressVerdict::Tunnelled { .. }) {
                                eprintln!("{who}: {}", rec.audit_line());
                            }
                            if let Some(tx) = &records {
                                let _ = tx.send(rec);
                            }
                        }
                        Body::Error(e) => {
                            outstanding = outstanding.saturating_sub(1);
                            eprintln!("{who}: egress proxy: {}", e.message)
                        }
                        _ => {}
                    }
                }
                inbuf.drain(..used);
            }
        }
    }
}
