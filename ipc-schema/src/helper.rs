//! The helper side of a broker channel, one type for all four helpers: the channel says hello
//! itself, then reads frames, checks each against the helper's route table
//! ([`crate::route`]), and hands what passes to the helper's handler, with the descriptor the
//! frame brought ([`crate::fdpass`]) when its row says it may bring one.
//!
//! Anything unexpected (a frame that does not decode, one over [`MAX_FRAME`], a request the
//! table does not list or whose flags it breaks, a descriptor without a frame to take it, a
//! frame without the descriptor it needs) ends the helper through [`fatal`], the one place
//! that does: the broker is the only peer, so any of these means it is confused, and it
//! restarts the helper.
//!
//! The channel is the helper's one inherited endpoint ([`Stream`]): a Unix socket on Unix; on
//! Windows the client end of a duplex named pipe, which carries frames but no handles: there
//! the broker duplicates a handle into the helper's process itself, and the frame of a row with
//! [`Flags::NEEDS_FD`] is followed by the handle's value in the helper ([`Passed`], 8 bytes); a
//! row that only may bring one ([`Flags::FD`]) brings none on Windows.
//!
//! Three ways to serve, one per kind of helper:
//! - [`HelperChannel::serve`]: blocking, one request at a time, replies in order, written in
//!   batches (flushed whenever no further request is already buffered) — fs-helper,
//!   secrets-helper;
//! - `HelperChannel::into_polled` (Unix): non-blocking, for a helper with a `poll(2)` loop of
//!   its own that answers requests out of order (exec-helper);
//! - `HelperChannel::into_async` (feature `tokio`): for a helper that answers each request from
//!   its own task (net-helper).
//!
//! `Ping` is answered by the channel in every mode. [`HelperChannel::wiping`] keeps every byte
//! read or written in buffers that are zeroed after use and never reallocated behind their own
//! back (the secrets-helper: a request may carry a value in, a reply a header out).

use crate::codec::{self, DecodeError, HEADER_LEN, MAX_FRAME};
use crate::route::{Flags, RouteError, RouteState, Table};
use crate::status::{Hello, LockdownReport};
use crate::{Body, Envelope, ErrorCode, ErrorReply, Role};
use std::collections::VecDeque;
use std::fmt::Display;
use std::io::{self, Write};
#[cfg(unix)]
use std::os::fd::{AsFd, BorrowedFd};
use zeroize::{Zeroize, Zeroizing};

/// The helper's end of its broker channel.
#[cfg(unix)]
pub type Stream = std::os::unix::net::UnixStream;
/// The helper's end of its broker channel: the inherited client end of a duplex pipe.
#[cfg(windows)]
pub type Stream = std::fs::File;

/// A descriptor a frame brought with it (`SCM_RIGHTS`).
#[cfg(unix)]
pub type Passed = std::os::fd::OwnedFd;
/// A handle the broker duplicated into this process (`DuplicateHandle`: a pipe carries none),
/// by its value here, as the [`PASSED_LEN`] bytes after its frame said (little-endian; only a
/// row with [`Flags::NEEDS_FD`] has them). Only a
/// value until the helper adopts it (`sandbox::windows::adopt_passed_socket`, which checks
/// that it names an open socket of this process).
#[cfg(windows)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Passed(pub u64);

/// Windows: the bytes of a passed handle's value after its frame.
pub const PASSED_LEN: usize = 8;

pub use crate::exit::{fatal, FATAL_EXIT};

/// How much a read asks for at least.
const READ_CHUNK: usize = 64 * 1024;

/// One request the table let through.
#[derive(Debug)]
pub struct Request {
    pub id: u64,
    pub body: Body,
    /// Its row's flags.
    pub flags: Flags,
    /// The descriptor it brought (only for rows with [`Flags::FD`]).
    pub fd: Option<Passed>,
}

impl Request {
    /// For the arm of a handler's `match` that the table makes unreachable (a kind the table
    /// lists but the handler does not serve is a bug of this helper): ends the helper.
    pub fn unserved(self, role: Role) -> ! {
        fatal(
            role,
            format!(
                "the route table admits {:?}, which this helper does not serve",
                crate::route::kind_of(&self.body)
            ),
        )
    }
}

/// What a handler answers.
pub struct Answer {
    body: Body,
    stop: Option<String>,
}

impl Answer {
    pub fn reply(body: Body) -> Answer {
        Answer { body, stop: None }
    }

    /// Sends `body`, then ends the helper with `why` (it cannot serve further requests; the
    /// broker restarts it).
    pub fn reply_then_stop(body: Body, why: impl Into<String>) -> Answer {
        Answer {
            body,
            stop: Some(why.into()),
        }
    }
}

impl From<Body> for Answer {
    fn from(body: Body) -> Answer {
        Answer::reply(body)
    }
}

/// A helper's channel to the broker.
pub struct HelperChannel {
    role: Role,
    sock: Stream,
    wipe: bool,
}

impl HelperChannel {
    /// Says hello on `sock` (the inherited channel): the helper's role, pid and `lockdown`
    /// report, as frame id 0. Call it once lockdown is done, before anything is read.
    /// In place of a hello, for a helper the machine cannot lock down as its profile needs
    /// (the exec-helper where user namespaces are refused): tells the broker `why` (it marks
    /// the helper refused with these words, and kills it), waits for that (at most a minute) so
    /// that the refusal, not the exit, is what the broker sees first, then ends the helper.
    pub fn refuse(role: Role, sock: Stream, why: impl Display) -> ! {
        let why = why.to_string();
        let peer = sock.try_clone();
        let _ = HelperChannel::hello(
            role,
            sock,
            LockdownReport::refused(role.name(), why.as_str()),
        );
        if let Ok(p) = peer {
            // (A pipe handle has no read timeout: there the broker's kill ends the wait.)
            #[cfg(unix)]
            let _ = p.set_read_timeout(Some(std::time::Duration::from_secs(60)));
            let _ = std::io::Read::read(&mut &p, &mut [0u8; 1]);
        }
        fatal(role, format!("lockdown failed: {why}"))
    }

    pub fn hello(role: Role, sock: Stream, lockdown: LockdownReport) -> HelperChannel {
        let hello = Body::Hello(Hello {
            role,
            pid: std::process::id(),
            lockdown,
        });
        let frame = match codec::encode(&Envelope::new(0, hello)) {
            Ok(f) => f,
            Err(e) => fatal(role, format!("cannot encode the hello: {e}")),
        };
        if let Err(e) = (&sock).write_all(&frame) {
            fatal(role, format!("sending the hello: {e}"));
        }
        HelperChannel {
            role,
            sock,
            wipe: false,
        }
    }

    /// Reads and writes in wiping buffers from now on.
    pub fn wiping(mut self) -> HelperChannel {
        self.wipe = true;
        self
    }

    /// Answers requests with `handle`, one at a time and in order, until the broker closes the
    /// channel. Returns only then; anything unexpected ends the helper.
    pub fn serve(self, table: &'static Table, mut handle: impl FnMut(Request) -> Answer) {
        let role = self.role;
        let mut inbox = Inbox::new(role, table, self.wipe);
        let mut out = Outbox::new(self.wipe);
        loop {
            while let Some(req) = inbox.next() {
                let id = req.id;
                let answer = match req.body {
                    Body::Ping { .. } => Answer::reply(Body::Pong),
                    _ => handle(req),
                };
                out.push(role, id, answer.body);
                if let Some(why) = answer.stop {
                    out.write_all(role, &self.sock);
                    fatal(role, why);
                }
                if !inbox.has_whole_frame() {
                    out.write_all(role, &self.sock);
                }
            }
            out.write_all(role, &self.sock);
            match inbox.fill(&self.sock) {
                Ok(0) => return inbox.end(),
                Ok(_) => {}
                Err(e) => fatal(role, format!("reading the broker channel: {e}")),
            }
        }
    }

    /// The channel for a helper's own `poll(2)` loop (the socket becomes non-blocking).
    #[cfg(unix)]
    pub fn into_polled(self, table: &'static Table) -> PolledChannel {
        if let Err(e) = self.sock.set_nonblocking(true) {
            fatal(self.role, format!("broker channel: {e}"));
        }
        PolledChannel {
            role: self.role,
            inbox: Inbox::new(self.role, table, self.wipe),
            out: Vec::new(),
            sock: self.sock,
        }
    }
}

/// [`HelperChannel::into_polled`]: the helper polls [`PolledChannel::as_fd`] (for writing too
/// when [`PolledChannel::wants_write`]), calls [`PolledChannel::read_ready`] when it is
/// readable, takes requests with [`PolledChannel::next_request`], queues replies with
/// [`PolledChannel::reply`] and writes them with [`PolledChannel::flush`].
#[cfg(unix)]
pub struct PolledChannel {
    role: Role,
    sock: Stream,
    inbox: Inbox,
    out: Vec<u8>,
}

#[cfg(unix)]
impl PolledChannel {
    pub fn as_fd(&self) -> BorrowedFd<'_> {
        self.sock.as_fd()
    }

    /// Replies are waiting to be written.
    pub fn wants_write(&self) -> bool {
        !self.out.is_empty()
    }

    /// Reads everything the socket has. `false`: the broker closed the channel.
    pub fn read_ready(&mut self) -> bool {
        loop {
            match self.inbox.fill(&self.sock) {
                Ok(0) => {
                    self.inbox.end();
                    return false;
                }
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return true,
                Err(e) => fatal(self.role, format!("reading the broker channel: {e}")),
            }
        }
    }

    /// The next request read (pings are answered here).
    pub fn next_request(&mut self) -> Option<Request> {
        loop {
            let req = self.inbox.next()?;
            match req.body {
                Body::Ping { .. } => self.reply(req.id, Body::Pong),
                _ => return Some(req),
            }
        }
    }

    /// Queues a reply.
    pub fn reply(&mut self, id: u64, body: Body) {
        encode_reply(self.role, id, body, &mut self.out);
    }

    /// Writes what the socket takes now; the rest waits for the next call.
    pub fn flush(&mut self) {
        while !self.out.is_empty() {
            match self.sock.write(&self.out) {
                Ok(0) => fatal(self.role, "the broker channel closed"),
                Ok(n) => {
                    self.out.drain(..n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => fatal(self.role, format!("writing to the broker: {e}")),
            }
        }
    }
}

/// Appends the frame of a reply to `out`. A reply that cannot be encoded (too large for a
/// frame: a bug of the helper) becomes an error reply, so the broker still gets an answer.
fn encode_reply(role: Role, id: u64, body: Body, out: &mut Vec<u8>) {
    let env = Envelope::new(id, body);
    if let Err(e) = codec::encode_into(&env, out) {
        let err = Envelope::new(id, not_sent(role, e));
        if let Err(e) = codec::encode_into(&err, out) {
            fatal(role, format!("cannot encode a reply: {e}"));
        }
    }
}

fn not_sent(role: Role, e: impl Display) -> Body {
    Body::Error(ErrorReply::new(
        ErrorCode::Internal,
        format!("{role} reply not sent: {e}"),
    ))
}

/// Replies of the blocking loop: batched in one buffer, or (wiping) each encoded into a buffer
/// of its exact size, written and zeroed.
struct Outbox {
    wipe: bool,
    buf: Vec<u8>,
    pending: VecDeque<Zeroizing<Vec<u8>>>,
}

impl Outbox {
    fn new(wipe: bool) -> Outbox {
        Outbox {
            wipe,
            buf: Vec::with_capacity(if wipe { 0 } else { READ_CHUNK }),
            pending: VecDeque::new(),
        }
    }

    fn push(&mut self, role: Role, id: u64, body: Body) {
        if !self.wipe {
            return encode_reply(role, id, body, &mut self.buf);
        }
        // Wiping: each frame is written on its own (no buffer grows with a secret in it).
        let frame = match codec::encode_exact(&Envelope::new(id, body)) {
            Ok(f) => Zeroizing::new(f),
            Err(e) => Zeroizing::new(
                codec::encode(&Envelope::new(id, not_sent(role, e)))
                    .unwrap_or_else(|e| fatal(role, format!("cannot encode a reply: {e}"))),
            ),
        };
        self.pending.push_back(frame);
    }

    fn write_all(&mut self, role: Role, mut sock: &Stream) {
        let r = if self.wipe {
            self.pending
                .drain(..)
                .try_for_each(|frame| sock.write_all(&frame))
        } else {
            let r = sock.write_all(&self.buf);
            self.buf.clear();
            r
        };
        if let Err(e) = r {
            fatal(role, format!("writing to the broker: {e}"));
        }
    }
}

/// Bytes read and not yet decoded, the descriptors that came with them, and the route state:
/// what turns a byte stream into checked [`Request`]s. Shared by every way of serving.
struct Inbox {
    role: Role,
    table: &'static Table,
    state: RouteState,
    buf: Buffer,
    fds: VecDeque<Passed>,
}

impl Inbox {
    fn new(role: Role, table: &'static Table, wipe: bool) -> Inbox {
        Inbox {
            role,
            table,
            state: RouteState::default(),
            buf: Buffer::new(wipe),
            fds: VecDeque::new(),
        }
    }

    /// One `recvmsg` (the descriptors that come are queued). `Ok(0)`: the end of the stream.
    #[cfg(unix)]
    fn fill(&mut self, sock: &Stream) -> io::Result<usize> {
        self.fill_fd(sock.as_fd())
    }

    /// [`Inbox::fill`] from any socket (the async channel's).
    #[cfg(unix)]
    fn fill_fd(&mut self, sock: BorrowedFd<'_>) -> io::Result<usize> {
        let want = self.want();
        let n = crate::fdpass::recv_with_fds(sock, self.buf.spare(want), &mut self.fds)?;
        self.buf.advance(n);
        Ok(n)
    }

    /// One `ReadFile`. `Ok(0)`: the end of the stream (the broker closing its end of a pipe
    /// reads as a broken pipe, not as zero bytes).
    #[cfg(windows)]
    fn fill(&mut self, sock: &Stream) -> io::Result<usize> {
        let want = self.want();
        let n = match io::Read::read(&mut &*sock, self.buf.spare(want)) {
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => 0,
            other => other?,
        };
        self.buf.advance(n);
        Ok(n)
    }

    /// How much the next read asks for: room for the whole frame that is coming, if its
    /// header is here.
    fn want(&self) -> usize {
        let have = self.buf.filled().len();
        match self.buf.filled().get(..HEADER_LEN) {
            Some(h) => {
                let len = u32::from_le_bytes(h.try_into().expect("4 bytes")) as usize;
                (HEADER_LEN + len.min(MAX_FRAME))
                    .saturating_sub(have)
                    .max(READ_CHUNK)
            }
            None => READ_CHUNK,
        }
    }

    fn has_whole_frame(&self) -> bool {
        let filled = self.buf.filled();
        match filled.get(..HEADER_LEN) {
            Some(h) => {
                let len = u32::from_le_bytes(h.try_into().expect("4 bytes")) as usize;
                filled.len() >= HEADER_LEN + len
            }
            None => false,
        }
    }

    /// The next whole frame, checked; `None` until more bytes are read.
    fn next(&mut self) -> Option<Request> {
        let role = self.role;
        let (env, used) = match codec::decode_from_slice(self.buf.filled(), MAX_FRAME) {
            Ok(Some(got)) => got,
            Ok(None) => return None,
            Err(e) => fatal(role, format!("the broker sent a bad frame: {e}")),
        };
        // Windows: a handle's value follows the frame of a row that must bring one (a row that
        // only may, an exec Start's connector, brings none there: connectors are not built).
        #[cfg(windows)]
        let used = match self.table.lookup(crate::route::kind_of(&env.body)) {
            Some(r) if r.flags.contains(Flags::NEEDS_FD) => {
                // The handle's value follows the frame; the frame waits for it.
                let v = self.buf.filled().get(used..used + PASSED_LEN)?;
                self.fds
                    .push_back(Passed(u64::from_le_bytes(v.try_into().expect("8 bytes"))));
                used + PASSED_LEN
            }
            _ => used,
        };
        self.buf.consume(used);
        let flags = match self.table.check(&mut self.state, &env.body) {
            Ok(f) => f,
            Err(RouteError::NotPermitted { channel, kind }) => fatal(
                role,
                format!(
                    "the broker sent a {:?} message ({kind:?}), which the {role} may not receive on the {channel:?} channel",
                    env.body.kind()
                ),
            ),
            Err(e) => fatal(role, format!("the broker broke the protocol: {e}")),
        };
        let fd = if flags.contains(Flags::FD) {
            self.fds.pop_front()
        } else {
            None
        };
        if flags.contains(Flags::NEEDS_FD) && fd.is_none() {
            fatal(
                role,
                format!(
                    "a {:?} frame arrived without its descriptor",
                    crate::route::kind_of(&env.body)
                ),
            );
        }
        // A descriptor arrives with the first byte of its frame: once every buffered byte is
        // consumed, none may be left.
        if self.buf.filled().is_empty() && !self.fds.is_empty() {
            self.stray();
        }
        Some(Request {
            id: env.id,
            body: env.body,
            flags,
            fd,
        })
    }

    /// At the end of the stream: a frame cut short, or a descriptor no frame took, is fatal.
    fn end(&self) {
        let left = self.buf.filled().len();
        if left > 0 {
            let e = DecodeError::Truncated {
                expected: left + 1,
                got: left,
            };
            fatal(self.role, format!("the broker sent a bad frame: {e}"));
        }
        if !self.fds.is_empty() {
            self.stray();
        }
    }

    fn stray(&self) -> ! {
        fatal(
            self.role,
            format!(
                "the broker sent {} descriptor(s) with messages that take none",
                self.fds.len()
            ),
        )
    }
}

/// A read buffer that never moves bytes behind its own back: consumed bytes are skipped, and
/// compacted or grown only here, zeroing every copy it leaves behind when wiping.
struct Buffer {
    data: Vec<u8>,
    start: usize,
    end: usize,
    wipe: bool,
}

impl Buffer {
    fn new(wipe: bool) -> Buffer {
        Buffer {
            data: vec![0; READ_CHUNK],
            start: 0,
            end: 0,
            wipe,
        }
    }

    fn filled(&self) -> &[u8] {
        &self.data[self.start..self.end]
    }

    fn consume(&mut self, n: usize) {
        if self.wipe {
            self.data[self.start..self.start + n].zeroize();
        }
        self.start += n;
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
    }

    /// At least `want` writable bytes after the filled ones.
    fn spare(&mut self, want: usize) -> &mut [u8] {
        if self.data.len() - self.end < want && self.start > 0 {
            let len = self.end - self.start;
            self.data.copy_within(self.start..self.end, 0);
            if self.wipe {
                self.data[len..self.end].zeroize();
            }
            self.start = 0;
            self.end = len;
        }
        if self.data.len() - self.end < want {
            let size = (self.end + want).max(self.data.len() * 2);
            if self.wipe {
                let mut grown = vec![0; size];
                grown[..self.end].copy_from_slice(&self.data[..self.end]);
                self.data.zeroize();
                self.data = grown;
            } else {
                self.data.resize(size, 0);
            }
        }
        &mut self.data[self.end..]
    }

    fn advance(&mut self, n: usize) {
        self.end += n;
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        if self.wipe {
            self.data.zeroize();
        }
    }
}

#[cfg(feature = "tokio")]
mod tokio_channel;
#[cfg(feature = "tokio")]
pub use tokio_channel::{AsyncReader, AsyncWriter, Replies};

#[cfg(all(test, unix))]
mod tests;

/// The Windows framing of a passed handle: its value after the frame of a row that takes one,
/// nothing after any other frame.
#[cfg(all(test, windows))]
mod windows_tests {
    use super::*;
    use crate::net::NetRequest;
    use crate::route::BROKER_TO_NET;

    fn frame(id: u64, body: Body) -> Vec<u8> {
        codec::encode(&Envelope::new(id, body)).unwrap()
    }

    fn push(inbox: &mut Inbox, bytes: &[u8]) {
        inbox.buf.spare(bytes.len())[..bytes.len()].copy_from_slice(bytes);
        inbox.buf.advance(bytes.len());
    }

    #[test]
    fn a_handle_value_follows_its_frame_and_the_frame_waits_for_it() {
        let mut inbox = Inbox::new(Role::Net, &BROKER_TO_NET, false);
        let conn = frame(
            7,
            Body::Net(NetRequest::ProxyConnection {
                session: "s".into(),
            }),
        );
        push(&mut inbox, &conn);
        assert!(inbox.next().is_none(), "the value has not come yet");
        let value = 0x1234_u64.to_le_bytes();
        push(&mut inbox, &value[..3]);
        assert!(inbox.next().is_none(), "three of its eight bytes");
        push(&mut inbox, &value[3..]);
        // A frame that takes no handle right after: nothing of it is taken as a value.
        let close = frame(
            8,
            Body::Net(NetRequest::ProxyClose {
                session: "s".into(),
            }),
        );
        push(&mut inbox, &close);
        let got = inbox.next().expect("the connection, with its value");
        assert_eq!((got.id, got.fd), (7, Some(Passed(0x1234))));
        let got = inbox.next().expect("the close");
        assert_eq!((got.id, got.fd), (8, None));
        assert!(matches!(got.body, Body::Net(NetRequest::ProxyClose { .. })));
        assert!(inbox.buf.filled().is_empty());
    }

    /// A row that only may bring a descriptor (an exec `Start` whose sandbox would pass
    /// connections out) brings no value on Windows: its frame is whole without one, and the
    /// exec-helper refuses what it asks for (the frame after it is not read as a value).
    #[test]
    fn a_row_that_only_may_bring_one_brings_no_value() {
        use crate::exec::{CommandSpec, ExecRequest, NetworkMode};
        use crate::route::BROKER_TO_EXEC;
        let mut inbox = Inbox::new(Role::Exec, &BROKER_TO_EXEC, false);
        let spec = CommandSpec {
            argv: vec!["cmd.exe".into()],
            cwd: "C:\\w".into(),
            grants: Vec::new(),
            env: Vec::new(),
            network: NetworkMode::Proxy { token: "t".into() },
            limits: crate::exec::Limits::default(),
            hide: crate::exec::Hide::default(),
            user: None,
            slot: None,
        };
        push(
            &mut inbox,
            &frame(3, Body::Exec(ExecRequest::Start(Box::new(spec)))),
        );
        push(&mut inbox, &frame(4, Body::Ping { target: None }));
        let got = inbox.next().expect("the start, whole without a value");
        assert_eq!((got.id, got.fd), (3, None));
        assert_eq!(inbox.next().expect("the ping").id, 4);
    }
}
