//! The helper's event loop: one thread, one `poll(2)` over the broker channel and every running
//! sandbox's output, report socket and pidfd.
//!
//! Requests are answered concurrently (a `Poll` waiting for output holds up nothing); replies
//! carry their request's id. A frame that does not decode, a message the route table does not
//! allow toward this helper, or a descriptor that no `Start` takes ends the helper: the broker is
//! its only peer, so any of these means the broker is confused.

use crate::config::Config;
use crate::start::start;
use ipc_schema::codec::{decode_from_slice, encode_into, MAX_FRAME};
use ipc_schema::exec::{
    ExecReply, ExecRequest, NetworkMode, RunId, OUTPUT_PIECE_MAX, POLL_WAIT_MAX_MS,
};
use ipc_schema::route::broker_may_send;
use ipc_schema::status::Hello;
use ipc_schema::{Body, Envelope, ErrorCode, ErrorReply, Role};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use sandbox::linux::command::fdpass::recv_with_fds;
use sandbox::linux::command::{Kill, Stream, Watch};
use std::collections::{BTreeMap, VecDeque};
use std::io::Write;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
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
    sock: UnixStream,
    inbuf: Vec<u8>,
    fds: VecDeque<OwnedFd>,
    out: Vec<u8>,
    runs: BTreeMap<RunId, Run>,
    next_run: u64,
    cfg: Config,
}

/// Says hello, then serves until the broker closes the channel (`Ok`) or breaks the protocol.
pub fn serve(sock: UnixStream, hello: Hello, cfg: Config) -> Result<(), String> {
    let mut s = Server {
        sock,
        inbuf: Vec::with_capacity(64 * 1024),
        fds: VecDeque::new(),
        out: Vec::new(),
        runs: BTreeMap::new(),
        next_run: 1,
        cfg,
    };
    s.reply(0, Body::Hello(hello))?;
    s.sock
        .write_all(&std::mem::take(&mut s.out))
        .map_err(|e| format!("sending hello: {e}"))?;
    s.sock
        .set_nonblocking(true)
        .map_err(|e| format!("broker channel: {e}"))?;
    loop {
        let now = Instant::now();
        for r in s.runs.values_mut() {
            r.watch.check_time(now);
        }
        s.answer_polls(now)?;
        s.forget_uncollected(now);
        if !s.step()? {
            return Ok(());
        }
    }
}

impl Server {
    fn reply(&mut self, id: u64, body: Body) -> Result<(), String> {
        encode_into(&Envelope::new(id, body), &mut self.out)
            .map_err(|e| format!("encoding a reply: {e}"))
    }

    fn error(&mut self, id: u64, code: ErrorCode, msg: impl Into<String>) -> Result<(), String> {
        self.reply(id, Body::Error(ErrorReply::new(code, msg)))
    }

    /// One poll round. `Ok(false)`: the broker closed the channel.
    fn step(&mut self) -> Result<bool, String> {
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
        if !self.out.is_empty() {
            chan_flags |= PollFlags::POLLOUT;
        }
        let ids: Vec<RunId> = self.runs.keys().copied().collect();
        let (chan_ready, run_ready) = {
            let mut fds = vec![PollFd::new(self.sock.as_fd(), chan_flags)];
            for r in self.runs.values() {
                for fd in r.watch.poll_set() {
                    // A slot that needs no polling polls the channel for nothing.
                    fds.push(match fd {
                        Some(fd) => PollFd::new(fd, PollFlags::POLLIN),
                        None => PollFd::new(self.sock.as_fd(), PollFlags::empty()),
                    });
                }
            }
            match poll(&mut fds, timeout) {
                Err(nix::errno::Errno::EINTR) => return Ok(true),
                Err(e) => return Err(format!("poll: {e}")),
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
        if chan_ready.intersects(PollFlags::POLLIN | PollFlags::POLLHUP | PollFlags::POLLERR)
            && !self.read_requests()?
        {
            return Ok(false);
        }
        self.flush()?;
        Ok(true)
    }

    /// Reads what the broker sent and handles every complete frame. `Ok(false)` at its end.
    fn read_requests(&mut self) -> Result<bool, String> {
        let mut buf = [0u8; 64 * 1024];
        loop {
            match recv_with_fds(self.sock.as_fd(), &mut buf, &mut self.fds) {
                Ok(0) => return Ok(false),
                Ok(n) => self.inbuf.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(format!("reading the broker channel: {e}")),
            }
        }
        let mut used = 0;
        while let Some((env, n)) = decode_from_slice(&self.inbuf[used..], MAX_FRAME)
            .map_err(|e| format!("the broker sent a bad frame: {e}"))?
        {
            used += n;
            self.handle(env)?;
        }
        self.inbuf.drain(..used);
        if self.inbuf.is_empty() && !self.fds.is_empty() {
            return Err(format!(
                "the broker sent {} descriptor(s) with messages that take none",
                self.fds.len()
            ));
        }
        Ok(true)
    }

    fn handle(&mut self, env: Envelope) -> Result<(), String> {
        let kind = env.body.kind();
        if !broker_may_send(Role::Exec, kind) {
            return Err(format!(
                "the broker sent a {kind:?} message, which the exec-helper may not receive"
            ));
        }
        let id = env.id;
        match env.body {
            Body::Ping { .. } => self.reply(id, Body::Pong),
            Body::Exec(ExecRequest::Start(spec)) => self.start(id, *spec),
            Body::Exec(ExecRequest::Poll { run, wait_ms }) => self.poll(id, run, wait_ms),
            Body::Exec(ExecRequest::Stop { run }) => self.stop(id, run),
            other => Err(format!(
                "the broker sent a {:?} message, which the exec-helper does not serve",
                other.kind()
            )),
        }
    }

    fn start(&mut self, id: u64, spec: ipc_schema::exec::CommandSpec) -> Result<(), String> {
        let connector = match spec.network {
            NetworkMode::Proxy { .. } => self.fds.pop_front(),
            NetworkMode::None => None,
        };
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

    fn poll(&mut self, id: u64, run: RunId, wait_ms: u32) -> Result<(), String> {
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
        Ok(())
    }

    fn stop(&mut self, id: u64, run: RunId) -> Result<(), String> {
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
    fn answer_polls(&mut self, now: Instant) -> Result<(), String> {
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
            self.reply(req, Body::ExecReply(reply))?;
        }
        Ok(())
    }

    fn forget_uncollected(&mut self, now: Instant) {
        self.runs.retain(|_, r| {
            r.ended_at
                .is_none_or(|t| r.waiting.is_some() || now < t + UNCOLLECTED_TTL)
        });
    }

    fn flush(&mut self) -> Result<(), String> {
        while !self.out.is_empty() {
            match self.sock.write(&self.out) {
                Ok(0) => return Err("the broker channel closed".into()),
                Ok(n) => {
                    self.out.drain(..n);
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(format!("writing to the broker: {e}")),
            }
        }
        Ok(())
    }
}
