//! `gatehouse up`: the broker and its helpers in the background, the console in this terminal.
//!
//! The console runs as a child process (`gatehouse ui`), because it locks itself down for good;
//! this process only waits for it, passes on a signal, puts the terminal back if the console
//! could not, and stops the broker it started when the console quits (`--keep-broker` leaves
//! it running for the agents' sessions). A broker that was already running is attached to and
//! left running.

use crate::cmd_ui::UiArgs;
use crate::Global;
#[cfg(unix)]
use nix::sys::signal::{SigSet, Signal};
#[cfg(unix)]
use nix::sys::termios;
use std::io::IsTerminal;
#[cfg(unix)]
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, ExitCode, ExitStatus};

#[derive(clap::Args)]
pub struct UpArgs {
    /// The directory the default profile grants (default: this directory, unless it is a home
    /// directory or /).
    #[arg(long, value_name = "DIR")]
    grant_root: Option<PathBuf>,
    /// Run the broker, helpers and console with less than their lockdown needs when the
    /// kernel lacks a mechanism (`doctor` and the console's health pane say what is missing).
    #[arg(long)]
    allow_degraded: bool,
    /// Leave the broker running when the console quits (agents' sessions go on; `gatehouse
    /// stop` ends it).
    #[arg(long)]
    keep_broker: bool,
}

fn say(msg: &str) {
    eprintln!("gatehouse up: {}", ipc_schema::inert::escaped(msg));
}

fn fail(msg: &str) -> ExitCode {
    say(msg);
    ExitCode::from(crate::EXIT_FAILURE)
}

pub fn run(g: &Global, a: UpArgs) -> ExitCode {
    if g.json {
        return crate::cmd_ui::refuse_json("up");
    }
    if !std::io::stdin().is_terminal() || !std::io::stdout().is_terminal() {
        return fail("the console needs a terminal: run `gatehouse up` in one (to run only the broker, use `gatehouse broker`)");
    }
    let started = match gatehouse_client::running_broker_pid(&g.dirs.lock_file()) {
        Some(pid) => {
            say(&format!(
                "a broker already runs for {} (pid {pid}): opening the console on it; it keeps running when the console quits",
                g.dirs.runtime.display()
            ));
            if a.grant_root.is_some() {
                say("--grant-root does not change a running broker");
            }
            false
        }
        None => {
            let mut args = Vec::new();
            if let Some(r) = &a.grant_root {
                args.push("--grant-root".to_string());
                args.push(r.display().to_string());
            }
            if a.allow_degraded {
                args.push("--allow-degraded".into());
            }
            if let Err(e) = gatehouse_client::Client::connect_or_start(
                g.data_dir.as_deref(),
                &g.dirs,
                &g.dirs.ui_socket(),
                &args,
            ) {
                return fail(&format!(
                    "{e} (the broker's log: {})",
                    g.dirs.broker_log().display()
                ));
            }
            let pid = gatehouse_client::running_broker_pid(&g.dirs.lock_file())
                .map(|p| format!(" (pid {p})"))
                .unwrap_or_default();
            say(&format!(
                "broker started{pid}; its log is {}",
                g.dirs.broker_log().display()
            ));
            true
        }
    };

    let ui = UiArgs {
        allow_degraded: a.allow_degraded,
        ..UiArgs::default()
    };
    let status = run_console(g, &ui, true);
    if started && !a.keep_broker {
        let stopped = crate::stop(g);
        if stopped != ExitCode::SUCCESS {
            return stopped;
        }
    } else if started {
        say("the broker keeps running (`gatehouse stop` ends it)");
    }
    match status {
        Ok(s) if s.success() => ExitCode::SUCCESS,
        Ok(s) => ExitCode::from(exit_byte(&s)),
        Err(e) => fail(&e),
    }
}

#[cfg(windows)]
fn exit_byte(s: &ExitStatus) -> u8 {
    match s.code() {
        Some(c) => c.clamp(1, 255) as u8,
        None => crate::EXIT_FAILURE,
    }
}

#[cfg(unix)]
fn exit_byte(s: &ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (s.code(), s.signal()) {
        (Some(c), _) => c.clamp(1, 255) as u8,
        (None, Some(sig)) => (128 + sig).clamp(1, 255) as u8,
        _ => crate::EXIT_FAILURE,
    }
}

/// Runs `gatehouse ui` in this console and waits for it; puts the console back afterwards if
/// the console ended without doing so. Ctrl-C reaches the console as a key (it reads the
/// console raw), not as a signal to this process.
#[cfg(windows)]
pub fn run_console(g: &Global, ui: &UiArgs, _forward_signals: bool) -> Result<ExitStatus, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this binary: {e}"))?;
    let mut cmd = Command::new(exe);
    if let Some(d) = &g.data_dir {
        cmd.arg("--data-dir").arg(d);
    }
    cmd.arg("ui");
    if ui.allow_degraded {
        cmd.arg("--allow-degraded");
    }
    let status = cmd
        .status()
        .map_err(|e| format!("cannot start the console: {e}"))?;
    if !status.success() {
        ::ui::console::restore_terminal();
    }
    Ok(status)
}

/// Runs `gatehouse ui` in this terminal and waits for it; puts the terminal back afterwards if
/// the console ended without doing so. With `forward_signals` (only for a single-threaded
/// caller: sigwait sees only signals no other thread takes), SIGINT, SIGTERM and SIGHUP sent
/// to this process are passed on to the console.
#[cfg(unix)]
pub fn run_console(g: &Global, ui: &UiArgs, forward_signals: bool) -> Result<ExitStatus, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this binary: {e}"))?;
    let saved = termios::tcgetattr(std::io::stdin()).ok();
    let mut cmd = Command::new(exe);
    if let Some(d) = &g.data_dir {
        cmd.arg("--data-dir").arg(d);
    }
    cmd.arg("ui").args(ui.to_args());
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot start the console: {e}"))?;

    // Signals are waited for instead of handled: blocked here (after the spawn, so the console
    // keeps the default mask), a pending one is picked up by sigwait.
    let mut set = SigSet::empty();
    for s in [
        Signal::SIGCHLD,
        Signal::SIGINT,
        Signal::SIGTERM,
        Signal::SIGHUP,
    ] {
        set.add(s);
    }
    let blocked = forward_signals && set.thread_block().is_ok();
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) => {}
            Err(e) => return Err(format!("waiting for the console: {e}")),
        }
        if !blocked {
            break child
                .wait()
                .map_err(|e| format!("waiting for the console: {e}"))?;
        }
        match set.wait() {
            Ok(Signal::SIGCHLD) | Err(_) => {}
            Ok(_) => {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(child.id() as i32),
                    Signal::SIGTERM,
                );
            }
        }
    };
    if blocked {
        let _ = set.thread_unblock();
    }
    if !status.success() {
        restore_terminal(saved.as_ref());
    }
    Ok(status)
}

/// The terminal as it was before the console took it: its modes, the main screen, the cursor,
/// and bracketed paste off.
#[cfg(unix)]
fn restore_terminal(saved: Option<&termios::Termios>) {
    if let Some(t) = saved {
        let _ = termios::tcsetattr(std::io::stdin(), termios::SetArg::TCSANOW, t);
    }
    let mut out = std::io::stdout();
    let _ = out.write_all(b"\x1b[?2004l\x1b[?1049l\x1b[?25h");
    let _ = out.flush();
}
