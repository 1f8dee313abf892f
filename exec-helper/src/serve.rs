//! The helper's event loop: one thread, one `poll(2)` over the broker channel and every running
//! sandbox's output, report socket and pidfd.
//!
//! Requests are answered concurrently (a `Poll` waiting for output holds up nothing); replies
//! carry their request's id. The channel ([`PolledChannel`]) checks every frame against
//! [`BROKER_TO_EXEC`] and ends the helper on anything unexpected.

use crate::config::Config;
use crate::start::start;
use ipc_schema::exec::{ExecReply, ExecRequest, RunId, OUTPUT_PIECE_MAX, POLL_WAIT_MAX_MS};
use ipc_schema::helper::{fatal, HelperChannel, PolledChannel, Request};
use ipc_schema::route::BROKER_TO_EXEC;
use ipc_schema::{Body, ErrorCode, ErrorReply, Role};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use sandbox::linux::command::{Kill, Stream, Watch};
use std::collections::BTreeMap;
use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

/// Runs started and not yet collected (running, or ended with output or an end to deliver).
const MAX_RUNS: usize = 16;
/// An ended run whose end nobody collects is forgotten after this long.
const UNCOLLECTED_TTL: Duration = Duration::from_secs(600);

struct Run {
    watch: Watch,
    pending: [Vec<u8>; 2],
    /// A `Poll` waiting for something to report: its request id and when to answer anyway.
    waiting: Option<(u64, Instant)>,
    ended_at: Option<Instant>,
}

struct Server {
    chan: PolledChannel,
    runs: BTreeMap<RunId, Run>,
    next_run: u64,
    cfg: Config,
}

/// Serves what the broker may ask ([`BROKER_TO_EXEC`]) until it closes the channel.
pub fn serve(chan: HelperChannel, cfg: Config) {
    let mut s = Server {
        chan: chan.into_polled(&BROKER_TO_EXEC),
        runs: BTreeMap::new(),
        next_run: 1,
        cfg,
    };
    loop {
        let now = Instant::now();
        for r in s.runs.values_mut() {
            r.watch.check_time(now);
        }
        s.answer_polls(now);
        s.forget_uncollected(now);
        if !s.step() {
            return;
        }
    }
}

impl Server {
    fn reply(&mut self, id: u64, body: Body) {
        self.chan.reply(id, body)
    }

    fn error(&mut self, id: u64, code: ErrorCode, msg: impl Into<String>) {
        self.reply(id, Body::Error(ErrorReply::new(code, msg)))
    }

    /// One poll round. `false`: the broker closed the channel.
    fn step(&mut self) -> bool {
        let now = Instant::now();
        let mut wake: Option<Instant> = None;
        for r in self.runs.values() {
            for t in [
                r.watch.deadline(),
                r.waiting.map(|(_, t)| t),
                r.ended_at.map(|t| t + UNCOLLECTED_TTL),
            ]
            .into_iter()
            .flatten()
            {
                wake = Some(wake.map_or(t, |w: Instant| w.min(t)));
            }
        }
        let timeout = match wake {
            None => PollTimeout::NONE,
            Some(t) => {
                let ms = t
                    .saturating_duration_since(now)
                    .as_millis()
                    .clamp(1, 60_000);
                PollTimeout::from(ms as u16)
            }
        };
        let mut chan_flags = PollFlags::POLLIN;
        if self.chan.wants_write() {
            chan_flags |= PollFlags::POLLOUT;
        }
        let ids: Vec<RunId> = self.runs.keys().copied().collect();
        let (chan_ready, run_ready) = {
            let mut fds = vec![PollFd::new(self.chan.as_fd(), chan_flags)];
            for r in self.runs.values() {
                for fd in r.watch.poll_set() {
                    // A slot that needs no polling polls the channel for nothing.
                    fds.push(match fd {
                        Some(fd) => PollFd::new(fd, PollFlags::POLLIN),
                        None => PollFd::new(self.chan.as_fd(), PollFlags::empty()),
                    });
                }
            }
            match poll(&mut fds, timeout) {
                Err(nix::errno::Errno::EINTR) => return true,
                Err(e) => fatal(Role::Exec, format!("poll: {e}")),
                Ok(_) => {}
            }
            let ev: Vec<PollFlags> = fds
                .iter()
                .map(|f| f.revents().unwrap_or(PollFlags::empty()))
                .collect();
            let run_ready: Vec<[bool; 4]> = (0..ids.len())
                .map(|i| {
                    let mut r = [false; 4];
                    for (j, slot) in r.iter_mut().enumerate() {
                        *slot = ev[1 + 4 * i + j].intersects(
                            PollFlags::POLLIN | PollFlags::POLLHUP | PollFlags::POLLERR,
                        );
                    }
                    r
                })
                .collect();
            (ev[0], run_ready)
        };
        for (id, ready) in ids.iter().zip(run_ready) {
            if let Some(r) = self.runs.get_mut(id) {
                let pending = &mut r.pending;
                r.watch.service(ready, &mut |stream, bytes| {
                    let i = match stream {
                        Stream::Stdout => 0,
                        Stream::Stderr => 1,
                    };
                    pending[i].extend_from_slice(bytes);
                });
                if r.watch.finished() && r.ended_at.is_none() {
                    r.ended_at = Some(Instant::now());
                }
            }
        }
        if chan_ready.intersects(PollFlags::POLLIN | PollFlags::POLLHUP | PollFlags::POLLERR) {
            if !self.chan.read_ready() {
                return false;
            }
            while let Some(req) = self.chan.next_request() {
                self.handle(req);
            }
        }
        self.chan.flush();
        true
    }

    fn handle(&mut self, req: Request) {
        let id = req.id;
        match req.body {
            Body::Exec(ExecRequest::Start(spec)) => self.start(id, *spec, req.fd),
            Body::Exec(ExecRequest::Poll { run, wait_ms }) => self.poll(id, run, wait_ms),
            Body::Exec(ExecRequest::Stop { run }) => self.stop(id, run),
            _ => req.unserved(Role::Exec),
        }
    }

    /// `connector`: the descriptor that came with the frame (a proxied `Start` only).
    fn start(&mut self, id: u64, spec: ipc_schema::exec::CommandSpec, connector: Option<OwnedFd>) {
        if self.runs.len() >= MAX_RUNS {
            return self.error(
                id,
                ErrorCode::Limit,
                format!("{MAX_RUNS} commands are running or waiting to be collected; stop or collect one first"),
            );
        }
        let limits = spec.limits;
        let sb = match start(spec, connector, &self.cfg) {
            Ok(sb) => sb,
            Err(e) => return self.reply(id, Body::Error(e)),
        };
        let sandbox = Box::new(sb.report.clone());
        let watch = match Watch::new(sb, limits) {
            Ok(w) => w,
            Err(e) => {
                return self.error(
                    id,
                    ErrorCode::Internal,
                    format!("watching the sandbox: {e}"),
                )
            }
        };
        let run = RunId(self.next_run);
        self.next_run += 1;
        self.runs.insert(
            run,
            Run {
                watch,
                pending: [Vec::new(), Vec::new()],
                waiting: None,
                ended_at: None,
            },
        );
        self.reply(id, Body::ExecReply(ExecReply::Started { run, sandbox }))
    }

    fn poll(&mut self, id: u64, run: RunId, wait_ms: u32) {
        if wait_ms > POLL_WAIT_MAX_MS {
            return self.error(
                id,
                ErrorCode::Invalid,
                format!("Poll wait_ms {wait_ms} is above {POLL_WAIT_MAX_MS}"),
            );
        }
        let Some(r) = self.runs.get_mut(&run) else {
            return self.error(
                id,
                ErrorCode::Invalid,
                format!("no {run}: it never existed, or its end was collected"),
            );
        };
        if r.waiting.is_some() {
            return self.error(
                id,
                ErrorCode::Invalid,
                format!("a Poll for {run} is already waiting"),
            );
        }
        r.waiting = Some((id, Instant::now() + Duration::from_millis(wait_ms as u64)));
    }

    fn stop(&mut self, id: u64, run: RunId) {
        let Some(r) = self.runs.get_mut(&run) else {
            return self.error(
                id,
                ErrorCode::Invalid,
                format!("no {run}: it never existed, or its end was collected"),
            );
        };
        r.watch.kill(Kill::Stopped);
        self.reply(id, Body::ExecReply(ExecReply::Stopping { run }))
    }

    /// Answers each waiting `Poll` that has output, an end, or has waited long enough.
    fn answer_polls(&mut self, now: Instant) {
        let mut replies = Vec::new();
        let mut done = Vec::new();
        for (run, r) in self.runs.iter_mut() {
            let Some((req, until)) = r.waiting else {
                continue;
            };
            let has_output = !r.pending[0].is_empty() || !r.pending[1].is_empty();
            if !(has_output || r.watch.finished() || now >= until) {
                continue;
            }
            let [out, err] = &mut r.pending;
            let stdout: Vec<u8> = out.drain(..out.len().min(OUTPUT_PIECE_MAX)).collect();
            let stderr: Vec<u8> = err.drain(..err.len().min(OUTPUT_PIECE_MAX)).collect();
            let end =
                (r.watch.finished() && out.is_empty() && err.is_empty()).then(|| r.watch.end());
            if end.is_some() {
                done.push(*run);
            }
            r.waiting = None;
            replies.push((
                req,
                ExecReply::Progress {
                    run: *run,
                    stdout,
                    stderr,
                    end,
                },
            ));
        }
        for run in done {
            self.runs.remove(&run);
        }
        for (req, reply) in replies {
            self.reply(req, Body::ExecReply(reply));
        }
    }

    fn forget_uncollected(&mut self, now: Instant) {
        self.runs.retain(|_, r| {
            r.ended_at
                .is_none_or(|t| r.waiting.is_some() || now < t + UNCOLLECTED_TTL)
        });
    }
}
