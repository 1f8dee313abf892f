//! Watching a running sandbox: output kept up to its limits (the rest counted), the time limit,
//! stopping, and how the run ended. Non-blocking, so one event loop can watch many runs (the
//! exec-helper) or one run and a terminal's signals (`gatehouse sandbox`).

use super::{Event, Sandboxed};
use ipc_schema::exec::{Limits, RunEnd, RunOutcome};
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::time::{Duration, Instant};

/// Which output stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

/// Why the watcher killed the sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kill {
    TimedOut,
    Stopped,
}

/// One run being watched.
pub struct Watch {
    sb: Sandboxed,
    limits: Limits,
    start: Instant,
    deadline: Instant,
    kept: [u64; 2],
    dropped: [u64; 2],
    open: [bool; 2],
    events_open: bool,
    init_gone: bool,
    held: Vec<super::project::Held>,
    /// When the next look for planted files is due while the command runs.
    next_sweep: Option<Instant>,
    status: Option<i32>,
    setup_failed: Option<String>,
    exec_failed: Option<(i32, String)>,
    killed: Option<Kill>,
    /// When the command's exit was reported, and when the sandbox was gone (for timing).
    started_at: Option<Instant>,
    exited_at: Option<Instant>,
    gone_at: Option<Instant>,
    buf: Vec<u8>,
}

/// The descriptors to poll for a run, in this order: stdout, stderr, events, pidfd. A `None`
/// needs no polling any more.
pub type PollSet<'a> = [Option<BorrowedFd<'a>>; 4];

impl Watch {
    pub fn new(sb: Sandboxed, limits: Limits) -> io::Result<Watch> {
        let stdout = sb.stdout.as_ref().map(|fd| fd.as_fd());
        for fd in [stdout, Some(sb.stderr.as_fd()), Some(sb.events_fd())]
            .into_iter()
            .flatten()
        {
            set_nonblocking(fd)?;
        }
        // A command whose stdout is its stdio socket has no stdout here: that stream is over
        // before it began.
        let open = [sb.stdout.is_some(), true];
        let start = Instant::now();
        Ok(Watch {
            sb,
            limits,
            start,
            deadline: start + Duration::from_millis(limits.timeout_ms),
            kept: [0; 2],
            dropped: [0; 2],
            open,
            events_open: true,
            init_gone: false,
            held: Vec::new(),
            next_sweep: Some(Instant::now() + SWEEP_EVERY_MIN),
            status: None,
            setup_failed: None,
            exec_failed: None,
            killed: None,
            started_at: None,
            exited_at: None,
            gone_at: None,
            buf: vec![0; 64 * 1024],
        })
    }

    pub fn sandbox(&self) -> &Sandboxed {
        &self.sb
    }

    pub fn poll_set(&self) -> PollSet<'_> {
        [
            self.sb
                .stdout
                .as_ref()
                .filter(|_| self.open[0])
                .map(|fd| fd.as_fd()),
            self.open[1].then(|| self.sb.stderr.as_fd()),
            self.events_open.then(|| self.sb.events_fd()),
            (!self.init_gone).then(|| self.sb.pidfd()),
        ]
    }

    /// When [`Watch::check_time`] next has work: the time limit, or the next look for what the
    /// command planted (`None` once the sandbox has been killed or has ended).
    pub fn deadline(&self) -> Option<Instant> {
        let sweep = self.next_sweep.filter(|_| self.sb.sweeps());
        (self.killed.is_none() && self.status.is_none())
            .then_some(sweep.map_or(self.deadline, |s| s.min(self.deadline)))
    }

    /// Kills the sandbox if its time is up; sets aside what it planted so far when that look
    /// is due (the window in which the user's own git could run a planted hook is then
    /// seconds, not the command's whole life).
    pub fn check_time(&mut self, now: Instant) {
        if now >= self.deadline && self.killed.is_none() && self.status.is_none() {
            self.kill(Kill::TimedOut);
        }
        if self.sb.sweeps() && self.next_sweep.is_some_and(|t| now >= t) && !self.init_gone {
            let t0 = Instant::now();
            for h in self.sb.sweep_running() {
                if !self.held.iter().any(|k| k.path == h.path && k.why == h.why) {
                    self.held.push(h);
                }
            }
            // At most 5% of the time spent looking.
            let took = t0.elapsed();
            self.next_sweep = Some(Instant::now() + (took * 20).max(SWEEP_EVERY_MIN));
        }
    }

    /// Kills the whole sandbox now. A command that already ended keeps its own status.
    pub fn kill(&mut self, why: Kill) {
        if self.killed.is_none() && self.status.is_none() {
            self.killed = Some(why);
        }
        let _ = self.sb.kill();
    }

    /// Reads whatever `ready` (parallel to [`Watch::poll_set`]) says is there. Output within the
    /// limits goes to `sink`; beyond them it is counted and dropped.
    pub fn service(&mut self, ready: [bool; 4], sink: &mut dyn FnMut(Stream, &[u8])) {
        for (i, stream) in [Stream::Stdout, Stream::Stderr].into_iter().enumerate() {
            if !(ready[i] && self.open[i]) {
                continue;
            }
            // Drain what is there now (bounded, so one chatty run cannot starve the loop).
            for _ in 0..16 {
                let fd = match (i, &self.sb.stdout) {
                    (0, Some(out)) => out,
                    (0, None) => break,
                    _ => &self.sb.stderr,
                };
                match nix::unistd::read(fd, &mut self.buf) {
                    Ok(0) => {
                        self.open[i] = false;
                        break;
                    }
                    Ok(n) => {
                        let cap = if i == 0 {
                            self.limits.stdout_max
                        } else {
                            self.limits.stderr_max
                        };
                        let take = (cap.saturating_sub(self.kept[i]) as usize).min(n);
                        self.kept[i] += take as u64;
                        self.dropped[i] += (n - take) as u64;
                        if take > 0 {
                            sink(stream, &self.buf[..take]);
                        }
                    }
                    Err(nix::errno::Errno::EINTR) => {}
                    Err(nix::errno::Errno::EAGAIN) => break,
                    Err(_) => {
                        self.open[i] = false;
                        break;
                    }
                }
            }
        }
        if ready[2] && self.events_open {
            loop {
                match self.sb.read_event() {
                    Ok(Some(Event::Started)) => self.started_at = Some(Instant::now()),
                    Ok(Some(Event::Exited { status })) => {
                        self.status = Some(status);
                        self.exited_at = Some(Instant::now());
                    }
                    Ok(Some(Event::SetupFailed { message })) => self.setup_failed = Some(message),
                    Ok(Some(Event::ExecFailed { errno, message })) => {
                        self.exec_failed = Some((errno, message))
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Ok(None) | Err(_) => {
                        self.events_open = false;
                        break;
                    }
                }
            }
        }
        if ready[3] && !self.init_gone {
            self.init_gone = true;
            self.gone_at = Some(Instant::now());
            // Every process of the command has ended: what it planted is set aside now.
            for h in self.sb.sweep().unwrap_or_default() {
                if !self.held.iter().any(|k| k.path == h.path && k.why == h.why) {
                    self.held.push(h);
                }
            }
        }
    }

    /// Everything has been read and the sandbox is gone.
    pub fn finished(&self) -> bool {
        self.init_gone && !self.open[0] && !self.open[1] && !self.events_open
    }

    pub fn elapsed(&self) -> Duration {
        self.start.elapsed()
    }

    /// Where a run's time went: building the sandbox (from the watch's start to the command's
    /// start), the command itself (to its exit being reported), and the teardown (to the whole
    /// sandbox being gone).
    pub fn timeline(&self) -> [Option<Duration>; 3] {
        let span = |a: Option<Instant>, b: Option<Instant>| match (a, b) {
            (Some(a), Some(b)) if b >= a => Some(b - a),
            _ => None,
        };
        [
            span(Some(self.start), self.started_at),
            span(self.started_at, self.exited_at),
            span(self.exited_at, self.gone_at),
        ]
    }

    /// How the run ended (meaningful once [`Watch::finished`]).
    pub fn end(&self) -> RunEnd {
        let outcome = if let Some(m) = &self.setup_failed {
            RunOutcome::SandboxFailed { message: m.clone() }
        } else if let Some((errno, m)) = &self.exec_failed {
            RunOutcome::ExecFailed {
                errno: *errno,
                message: m.clone(),
            }
        } else if let Some(k) = self.killed {
            match k {
                Kill::Stopped => RunOutcome::Stopped,
                Kill::TimedOut => RunOutcome::TimedOut {
                    after_ms: self.limits.timeout_ms,
                },
            }
        } else if let Some(st) = self.status {
            if libc::WIFEXITED(st) {
                RunOutcome::Exited(libc::WEXITSTATUS(st))
            } else {
                RunOutcome::Signaled(libc::WTERMSIG(st))
            }
        } else {
            RunOutcome::SandboxFailed {
                message: "the sandbox ended before the command reported an exit".into(),
            }
        };
        use std::os::unix::ffi::OsStrExt;
        let bytes = |p: &std::path::Path| p.as_os_str().as_bytes().to_vec();
        RunEnd {
            outcome,
            stdout_dropped: self.dropped[0],
            stderr_dropped: self.dropped[1],
            elapsed_ms: self.start.elapsed().as_millis() as u64,
            held: self
                .held
                .iter()
                .take(ipc_schema::exec::HELD_SHOWN_MAX)
                .map(|h| ipc_schema::exec::HeldPath {
                    path: bytes(&h.path),
                    moved_to: h.moved_to.as_deref().map(|p| bytes(p).into()),
                    why: h.why.chars().take(200).collect(),
                })
                .collect(),
            held_more: self
                .held
                .len()
                .saturating_sub(ipc_schema::exec::HELD_SHOWN_MAX) as u64,
        }
    }
}

/// The shortest time between two looks for planted files while a command runs.
const SWEEP_EVERY_MIN: Duration = Duration::from_secs(2);

fn set_nonblocking(fd: BorrowedFd<'_>) -> io::Result<()> {
    use nix::fcntl::{fcntl, FcntlArg, OFlag};
    let flags = fcntl(fd, FcntlArg::F_GETFL).map_err(io::Error::from)?;
    fcntl(
        fd,
        FcntlArg::F_SETFL(OFlag::from_bits_truncate(flags) | OFlag::O_NONBLOCK),
    )
    .map_err(io::Error::from)?;
    Ok(())
}
