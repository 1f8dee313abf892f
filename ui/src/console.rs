//! The console in a real terminal. [`run`] reads top to bottom: take the terminal, lock down
//! (from then on the process has its terminal and its broker socket and nothing else: no
//! files, no network, no exec, no new sockets), then serve keys and broker frames until the
//! person quits.

use crate::link::{Incoming, Link};
use crate::state::{Console, Key, Options};
use crate::view;
use ratatui::backend::CrosstermBackend;
use ratatui::crossterm::event::{
    self, DisableBracketedPaste, EnableBracketedPaste, Event, KeyCode, KeyEventKind, KeyModifiers,
};
use ratatui::crossterm::terminal::{
    disable_raw_mode, enable_raw_mode, EnterAlternateScreen, LeaveAlternateScreen,
};
use ratatui::crossterm::{cursor, execute};
use ratatui::Terminal;
use sandbox::{LockdownError, LockdownReport};
use std::io::{IsTerminal, Write};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How `gatehouse ui` runs the console.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Shown in the title bar.
    pub title: String,
    /// Quit after the first accepted decision (`gatehouse demo --interactive`).
    pub exit_after_decision: bool,
    /// Run with less than the ui profile needs when the kernel lacks a mechanism.
    pub allow_degraded: bool,
    /// Descriptors the process had when it started (closed by the lockdown, stdio aside).
    #[cfg(unix)]
    pub inherited_fds: Vec<std::os::fd::RawFd>,
    /// Test builds only: what to do instead of (or after) the lockdown.
    #[cfg(all(unix, feature = "test-hooks"))]
    pub test: crate::probe::TestHooks,
}

#[derive(Debug, thiserror::Error)]
pub enum UiError {
    #[error("the console needs a terminal: run it in one (stdin and stdout are not a terminal)")]
    NotATerminal,
    #[error("the terminal: {0}")]
    Terminal(std::io::Error),
    #[error("cannot list this process's descriptors before the lockdown: {0}")]
    Descriptors(std::io::Error),
    #[error("cannot lock the console down: {0}")]
    Lockdown(#[from] LockdownError),
    #[error("cannot start the broker reader: {0}")]
    Thread(std::io::Error),
}

/// The terminal as the console found it: raw mode off, the main screen, bracketed paste off,
/// the cursor shown. Also for a parent whose console child ended without doing it.
pub fn restore_terminal() {
    let _ = disable_raw_mode();
    let mut out = std::io::stdout();
    let _ = execute!(
        out,
        DisableBracketedPaste,
        LeaveAlternateScreen,
        cursor::Show
    );
}

fn now_unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

fn key_of(ev: &event::KeyEvent) -> Option<Key> {
    if ev.kind != KeyEventKind::Press {
        return None;
    }
    let ctrl = ev.modifiers.contains(KeyModifiers::CONTROL);
    Some(match ev.code {
        KeyCode::Char('c') if ctrl => Key::CtrlC,
        _ if ctrl || ev.modifiers.contains(KeyModifiers::ALT) => return None,
        KeyCode::Char(c) => Key::Char(c),
        KeyCode::Up => Key::Up,
        KeyCode::Down => Key::Down,
        KeyCode::PageUp => Key::PageUp,
        KeyCode::PageDown => Key::PageDown,
        KeyCode::Home => Key::Home,
        KeyCode::End => Key::End,
        KeyCode::Tab => Key::Tab,
        KeyCode::BackTab => Key::BackTab,
        KeyCode::Esc => Key::Esc,
        KeyCode::Enter => Key::Enter,
        _ => return None,
    })
}

/// Locks the calling process down with the ui profile, keeping stdio and `keep`.
#[cfg(unix)]
pub fn lock_down(
    keep: &[std::os::fd::RawFd],
    allow_degraded: bool,
) -> Result<LockdownReport, LockdownError> {
    sandbox::lockdown(
        &sandbox::Profile::Ui,
        &sandbox::LockdownOptions {
            allow_degraded,
            keep_fds: keep.to_vec(),
            keep_env: Vec::new(),
        },
    )
}

/// What the console applies to itself on Windows: a job that admits no second process and the
/// mitigations a process may set on itself (`sandbox::windows::harden_console`). It keeps the
/// user's token: no file or network confinement of its own there (docs/windows.md).
#[cfg(windows)]
fn lock_down_here(_link: &Link, opts: &RunOptions) -> Result<LockdownReport, UiError> {
    Ok(sandbox::windows::harden_console(opts.allow_degraded)?)
}

/// The descriptors to keep (what the process opened since it started: its broker socket, the
/// terminal library's event sources), then the ui profile's lockdown.
#[cfg(unix)]
fn lock_down_here(link: &Link, opts: &RunOptions) -> Result<LockdownReport, UiError> {
    let now_open = crate::fds::open_fds().map_err(UiError::Descriptors)?;
    let mut keep = crate::fds::opened_since(&opts.inherited_fds, &now_open);
    keep.extend(link.fds());
    keep.sort_unstable();
    keep.dedup();
    Ok(lock_down(&keep, opts.allow_degraded)?)
}

/// Runs the console on `link` (a connection on the ui endpoint) in this terminal until the
/// person quits. Must be called while the process has one thread.
pub fn run(mut link: Link, opts: RunOptions) -> Result<(), UiError> {
    if !std::io::stdin().is_terminal() || !std::io::stdout().is_terminal() {
        return Err(UiError::NotATerminal);
    }
    let link = &mut link;

    // Take the terminal: raw mode, the alternate screen, pasted text as one event (so a paste
    // can never press a card's keys), and the terminal library's event source opened now,
    // while the process may still open things.
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        restore_terminal();
        hook(info);
    }));
    enable_raw_mode().map_err(UiError::Terminal)?;
    let mut out = std::io::stdout();
    if let Err(e) = execute!(
        out,
        EnterAlternateScreen,
        EnableBracketedPaste,
        cursor::Hide
    ) {
        restore_terminal();
        return Err(UiError::Terminal(e));
    }
    let result = serve(link, &opts);
    restore_terminal();
    result
}

fn serve(link: &mut Link, opts: &RunOptions) -> Result<(), UiError> {
    event::poll(Duration::ZERO).map_err(UiError::Terminal)?;
    let mut terminal =
        Terminal::new(CrosstermBackend::new(std::io::stdout())).map_err(UiError::Terminal)?;

    #[cfg(all(unix, feature = "test-hooks"))]
    let skip = opts.test.skip_lockdown;
    #[cfg(not(all(unix, feature = "test-hooks")))]
    let skip = false;
    let lockdown = if skip {
        None
    } else {
        Some(lock_down_here(link, opts)?)
    };

    let (tx, rx) = mpsc::channel();
    link.spawn_reader(tx).map_err(UiError::Thread)?;
    let mut console = Console::new(Options {
        title: opts.title.clone(),
        exit_after_decision: opts.exit_after_decision,
        lockdown,
    });
    if skip {
        console.status = Some((
            "TEST BUILD: running WITHOUT lockdown (--test-skip-lockdown)".into(),
            crate::state::Tone::Bad,
        ));
    }
    #[cfg(all(unix, feature = "test-hooks"))]
    if let Some(probe) = &opts.test.probe {
        console.status = Some((crate::probe::run(probe), crate::state::Tone::Warn));
    }
    console.start(Instant::now());

    loop {
        for env in console.take_outbox() {
            if console.disconnected.is_none() {
                if let Err(e) = link.send(&env) {
                    console.on_disconnect(e.to_string());
                }
            }
        }
        let now = Instant::now();
        terminal
            .draw(|f| view::draw(f, &mut console, now, now_unix_ms()))
            .map_err(UiError::Terminal)?;
        if console.take_bell() {
            let out = terminal.backend_mut();
            let _ = out.write_all(b"\x07").and_then(|_| out.flush());
        }
        if console.should_quit() {
            return Ok(());
        }
        if event::poll(Duration::from_millis(100)).map_err(UiError::Terminal)? {
            match event::read().map_err(UiError::Terminal)? {
                Event::Key(k) => {
                    if let Some(key) = key_of(&k) {
                        console.on_key(key, Instant::now());
                    }
                }
                // Pasted text is never taken as key presses.
                Event::Paste(_) => {}
                _ => {}
            }
        }
        while let Ok(inc) = rx.try_recv() {
            match inc {
                Incoming::Frame(env) => console.on_frame(*env, Instant::now()),
                Incoming::Closed(why) => console.on_disconnect(why),
            }
        }
        console.tick(Instant::now());
    }
}
