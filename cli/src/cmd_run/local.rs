//! What `gatehouse run` still builds in its own process: the exec sandbox of the agent (through
//! `sandbox::linux::command`, as the exec-helper does) and a private net-helper for its egress
//! proxy, whose records go to the broker's audit log over the ui channel. `gatehouse sandbox`
//! no longer uses any of this: its commands go through the broker (cmd_sandbox.rs).

use crate::cmd_sandbox::{refused, relay_chunk, stop_signals, Outcome, Output, ProxyArgs, Stop};
use ipc_schema::exec::Limits;
use sandbox::linux::command::{Kill, Sandboxed, Stream, Watch};
use std::os::fd::{AsFd, OwnedFd};
use std::time::Instant;

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
