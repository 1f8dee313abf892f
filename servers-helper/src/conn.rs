//! One server connection: newline-delimited JSON-RPC on the server's stdio socket (the MCP
//! stdio transport), as a client. A server that breaks the protocol loses the connection, and
//! every request of the broker's waiting on it is answered.
//!
//! On Unix the connection owns its socket and is driven by `serve.rs`'s `poll(2)` loop
//! ([`Conn::readable`], [`Conn::writable`]). On Windows the pipe is read and written by tasks
//! of `serve_windows.rs`, which hand the connection what arrived ([`Conn::received`]) and take
//! what it has to send ([`Conn::take_output`]); everything else is the same code.

use crate::mcp;
use ipc_schema::servers::{
    JsonText, ServerEvent, ServerName, ServerToolName, ServersReply, ToolList, MESSAGE_MAX,
};
use ipc_schema::{Body, ErrorCode, ErrorReply};
use serde_json::Value;
use std::collections::BTreeMap;
#[cfg(unix)]
use std::io::{self, Read, Write};
#[cfg(unix)]
use std::os::fd::{AsFd, BorrowedFd};
#[cfg(unix)]
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

/// Messages a server may send unasked (notifications and requests) in one second before it
/// counts as a flood.
const FLOOD_PER_SECOND: u32 = 200;
/// What gatehouse may have written that the server has not read before it counts as stuck.
const UNREAD_MAX: usize = 8 << 20;
/// `tools/list` pages one listing may take.
const PAGES_MAX: u32 = 32;
/// The longest a call may be given.
pub const CALL_TIMEOUT_MAX: Duration = Duration::from_secs(600);

/// A broker request waiting for the server, by the JSON-RPC id gatehouse sent.
enum Waiting {
    Init { req: u64 },
    List { req: u64, acc: ToolList, pages: u32 },
    Call { req: u64, deadline: Instant },
}

/// Replies for the broker: (request id, body).
pub type Replies = Vec<(u64, Body)>;

pub struct Conn {
    server: ServerName,
    #[cfg(unix)]
    sock: UnixStream,
    inbuf: Vec<u8>,
    outbuf: Vec<u8>,
    next_rpc: u64,
    waiting: BTreeMap<u64, Waiting>,
    ready: bool,
    /// A `Watch` waiting for the next event.
    watch: Option<u64>,
    /// `notifications/tools/list_changed` arrived and nobody has been told yet.
    changed: bool,
    flood: (Instant, u32),
    closed: Option<String>,
}

fn err(code: ErrorCode, msg: impl Into<String>) -> Body {
    Body::Error(ErrorReply::new(code, msg))
}

impl Conn {
    /// Takes over `sock` and sends `initialize`; `req` is answered when the server answers.
    #[cfg(unix)]
    pub fn attach(server: ServerName, sock: UnixStream, req: u64) -> io::Result<Conn> {
        sock.set_nonblocking(true)?;
        Ok(Conn::start(server, sock, req))
    }

    /// Sends `initialize` (Windows: the caller moves the bytes, [`Conn::take_output`]); `req`
    /// is answered when the server answers.
    #[cfg(windows)]
    pub fn attach(server: ServerName, req: u64) -> Conn {
        Conn::start(server, req)
    }

    fn start(server: ServerName, #[cfg(unix)] sock: UnixStream, req: u64) -> Conn {
        let mut c = Conn {
            server,
            #[cfg(unix)]
            sock,
            inbuf: Vec::new(),
            outbuf: Vec::new(),
            next_rpc: 1,
            waiting: BTreeMap::new(),
            ready: false,
            watch: None,
            changed: false,
            flood: (Instant::now(), 0),
            closed: None,
        };
        let id = c.rpc_id();
        c.send(&mcp::initialize(id));
        c.waiting.insert(id, Waiting::Init { req });
        c
    }

    #[cfg(unix)]
    pub fn as_fd(&self) -> BorrowedFd<'_> {
        self.sock.as_fd()
    }

    #[cfg(unix)]
    pub fn wants_write(&self) -> bool {
        !self.outbuf.is_empty()
    }

    pub fn is_closed(&self) -> bool {
        self.closed.is_some()
    }

    fn rpc_id(&mut self) -> u64 {
        let id = self.next_rpc;
        self.next_rpc += 1;
        id
    }

    fn send(&mut self, v: &Value) {
        let mut line = serde_json::to_vec(v).expect("a Value always serializes");
        line.push(b'\n');
        self.outbuf.extend_from_slice(&line);
    }

    fn not_ready(&self) -> Option<Body> {
        if let Some(why) = &self.closed {
            return Some(err(
                ErrorCode::HelperUnavailable,
                format!("the server {} is gone: {why}", self.server),
            ));
        }
        (!self.ready).then(|| {
            err(
                ErrorCode::Invalid,
                format!("the server {} has not finished its handshake", self.server),
            )
        })
    }

    pub fn list(&mut self, req: u64, out: &mut Replies) {
        if let Some(e) = self.not_ready() {
            return out.push((req, e));
        }
        let id = self.rpc_id();
        self.send(&mcp::list_tools(id, None));
        let acc = ToolList {
            tools: vec![],
            dropped: vec![],
        };
        self.waiting
            .insert(id, Waiting::List { req, acc, pages: 1 });
    }

    pub fn call(
        &mut self,
        req: u64,
        tool: &ServerToolName,
        arguments: &JsonText,
        timeout: Duration,
        out: &mut Replies,
    ) {
        if let Some(e) = self.not_ready() {
            return out.push((req, e));
        }
        let id = self.rpc_id();
        self.send(&mcp::call_tool(id, tool, arguments));
        let deadline = Instant::now() + timeout.min(CALL_TIMEOUT_MAX);
        self.waiting.insert(id, Waiting::Call { req, deadline });
    }

    pub fn watch(&mut self, req: u64, out: &mut Replies) {
        if let Some(why) = &self.closed {
            return out.push((req, event(ServerEvent::Closed(why.clone()))));
        }
        if self.watch.is_some() {
            return out.push((req, err(ErrorCode::Invalid, "a Watch is already waiting")));
        }
        self.watch = Some(req);
        self.report_changed(out);
    }

    fn report_changed(&mut self, out: &mut Replies) {
        if self.changed {
            if let Some(w) = self.watch.take() {
                self.changed = false;
                out.push((w, event(ServerEvent::ToolsChanged)));
            }
        }
    }

    /// The earliest call deadline.
    pub fn deadline(&self) -> Option<Instant> {
        self.waiting
            .values()
            .filter_map(|w| match w {
                Waiting::Call { deadline, .. } => Some(*deadline),
                _ => None,
            })
            .min()
    }

    /// Calls past their deadline fail (the server is told to cancel them).
    pub fn check_time(&mut self, now: Instant, out: &mut Replies) {
        let late: Vec<u64> = self
            .waiting
            .iter()
            .filter(|(_, w)| matches!(w, Waiting::Call { deadline, .. } if *deadline <= now))
            .map(|(id, _)| *id)
            .collect();
        for id in late {
            if let Some(Waiting::Call { req, .. }) = self.waiting.remove(&id) {
                self.send(&mcp::cancelled(id, "gatehouse's time for the call ran out"));
                out.push((
                    req,
                    err(
                        ErrorCode::Limit,
                        format!("the server {} did not answer in time; gatehouse asked it to cancel the call, whether it took effect is unknown", self.server),
                    ),
                ));
            }
        }
    }

    /// Writes what the socket takes.
    #[cfg(unix)]
    pub fn writable(&mut self, out: &mut Replies) {
        while !self.outbuf.is_empty() && self.closed.is_none() {
            match self.sock.write(&self.outbuf) {
                Ok(0) => return self.close("the server closed its stdin".into(), out),
                Ok(n) => {
                    self.outbuf.drain(..n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return self.close(format!("writing to the server: {e}"), out),
            }
        }
        self.check_unread(out);
    }

    /// Ends a connection whose server has not read [`UNREAD_MAX`] of what gatehouse sent.
    pub fn check_unread(&mut self, out: &mut Replies) {
        if self.outbuf.len() > UNREAD_MAX {
            self.close("the server does not read what gatehouse sends".into(), out);
        }
    }

    /// Windows: what is to be written to the server, taken (the writer task writes it).
    #[cfg(windows)]
    pub fn take_output(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.outbuf)
    }

    /// Reads what the server wrote and acts on each whole message.
    #[cfg(unix)]
    pub fn readable(&mut self, out: &mut Replies) {
        let mut buf = [0u8; 64 << 10];
        while self.closed.is_none() {
            match self.sock.read(&mut buf) {
                Ok(0) => return self.close(STDOUT_CLOSED.into(), out),
                Ok(n) => self.received(&buf[..n], out),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return self.close(format!("reading from the server: {e}"), out),
            }
        }
    }

    /// Acts on each whole message in what the server wrote, keeping the rest for later.
    pub fn received(&mut self, bytes: &[u8], out: &mut Replies) {
        if self.closed.is_some() {
            return;
        }
        self.inbuf.extend_from_slice(bytes);
        while let Some(nl) = self.inbuf.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = self.inbuf.drain(..=nl).collect();
            if line.len() > MESSAGE_MAX + 1 {
                return self.close(too_long(), out);
            }
            self.on_line(&line[..nl], out);
            if self.closed.is_some() {
                return;
            }
        }
        if self.inbuf.len() > MESSAGE_MAX {
            self.close(too_long(), out);
        }
    }

    fn on_line(&mut self, line: &[u8], out: &mut Replies) {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.iter().all(u8::is_ascii_whitespace) {
            return;
        }
        let v: Value = match serde_json::from_slice(line) {
            Ok(v) => v,
            Err(e) => {
                return self.close(format!("the server wrote a malformed message ({e})"), out)
            }
        };
        let Some(o) = v.as_object() else {
            return self.close("the server wrote a message that is not a JSON object (batches are not part of MCP since 2025-06-18)".into(), out);
        };
        if let Some(method) = o.get("method").and_then(Value::as_str) {
            if !self.unasked_ok() {
                return self.close(
                    format!("the server flooded gatehouse (more than {FLOOD_PER_SECOND} unasked messages in a second)"),
                    out,
                );
            }
            match o.get("id") {
                Some(id) => {
                    let answer = mcp::answer_server_request(id, method);
                    self.send(&answer);
                }
                None if method == "notifications/tools/list_changed" => {
                    self.changed = true;
                    self.report_changed(out);
                }
                // Logging, progress and the rest: nothing gatehouse acts on.
                None => {}
            }
            return;
        }
        let Some(id) = o.get("id").and_then(Value::as_u64) else {
            return self.close(
                "the server wrote a message with neither a method nor an id of gatehouse's".into(),
                out,
            );
        };
        let Some(w) = self.waiting.remove(&id) else {
            // A call that timed out may still be answered: that is not the server's fault.
            if id < self.next_rpc {
                return;
            }
            return self.close(
                format!("the server answered request {id}, which gatehouse never sent"),
                out,
            );
        };
        let result = match (o.get("result"), o.get("error")) {
            (Some(r), None) => Ok(r),
            (None, Some(e)) => Err(format!(
                "the server answered with error {}: {}",
                e.get("code").and_then(Value::as_i64).unwrap_or(0),
                e.get("message")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .chars()
                    .take(1000)
                    .collect::<String>()
            )),
            _ => {
                return self.close(
                    "the server wrote a response with both or neither of result and error".into(),
                    out,
                )
            }
        };
        self.on_response(w, result, out);
    }

    fn on_response(&mut self, w: Waiting, result: Result<&Value, String>, out: &mut Replies) {
        match w {
            Waiting::Init { req } => match result.and_then(mcp::hello) {
                Ok(h) => {
                    self.ready = true;
                    self.send(&mcp::initialized());
                    out.push((req, Body::ServersReply(ServersReply::Attached(h))));
                }
                Err(e) => {
                    out.push((
                        req,
                        err(ErrorCode::Refused, format!("the server's handshake: {e}")),
                    ));
                    self.close(format!("its handshake failed: {e}"), out);
                }
            },
            Waiting::List {
                req,
                mut acc,
                pages,
            } => match result.and_then(|r| mcp::tools_page(r, &mut acc)) {
                Ok(Some(cursor)) if pages < PAGES_MAX => {
                    let id = self.rpc_id();
                    self.send(&mcp::list_tools(id, Some(&cursor)));
                    self.waiting.insert(
                        id,
                        Waiting::List {
                            req,
                            acc,
                            pages: pages + 1,
                        },
                    );
                }
                Ok(more) => {
                    if more.is_some() {
                        acc.dropped.push(format!(
                            "more than {PAGES_MAX} pages: the rest are not offered"
                        ));
                    }
                    out.push((req, Body::ServersReply(ServersReply::Tools(acc))));
                }
                Err(e) => out.push((req, err(ErrorCode::Refused, format!("tools/list: {e}")))),
            },
            Waiting::Call { req, .. } => {
                let body = match result {
                    Ok(r) => match mcp::call_output(r) {
                        Ok(c) => Body::ServersReply(ServersReply::Called(c)),
                        Err(e) => err(ErrorCode::Refused, format!("tools/call: {e}")),
                    },
                    Err(e) => {
                        Body::ServersReply(ServersReply::Called(ipc_schema::servers::CallOutput {
                            is_error: true,
                            content: vec![ipc_schema::servers::ContentItem::Text(e)],
                            structured: None,
                            truncated: false,
                        }))
                    }
                };
                out.push((req, body));
            }
        }
    }

    /// Counts one unasked message; `false` once the server floods.
    fn unasked_ok(&mut self) -> bool {
        let now = Instant::now();
        if now.duration_since(self.flood.0) >= Duration::from_secs(1) {
            self.flood = (now, 0);
        }
        self.flood.1 += 1;
        self.flood.1 <= FLOOD_PER_SECOND
    }

    /// Ends the connection: every waiting request is answered, the watch gets the reason.
    pub fn close(&mut self, why: String, out: &mut Replies) {
        if self.closed.is_some() {
            return;
        }
        #[cfg(unix)]
        let _ = self.sock.shutdown(std::net::Shutdown::Both);
        for (_, w) in std::mem::take(&mut self.waiting) {
            let (req, body) = match w {
                Waiting::Init { req } => (
                    req,
                    err(ErrorCode::HelperUnavailable, format!("the server {}: {why}", self.server)),
                ),
                Waiting::List { req, .. } => (
                    req,
                    err(ErrorCode::HelperUnavailable, format!("the server {}: {why}", self.server)),
                ),
                Waiting::Call { req, .. } => (
                    req,
                    err(
                        ErrorCode::HelperCrashed,
                        format!("the server {} stopped while handling the call ({why}); whether it took effect is unknown", self.server),
                    ),
                ),
            };
            out.push((req, body));
        }
        if let Some(w) = self.watch.take() {
            out.push((w, event(ServerEvent::Closed(why.clone()))));
        }
        self.outbuf.clear();
        self.inbuf.clear();
        self.closed = Some(why);
    }
}

/// Why a connection ends when the server's output does.
pub const STDOUT_CLOSED: &str = "the server closed its stdout (it exited or crashed)";

fn too_long() -> String {
    format!("the server wrote a message longer than {MESSAGE_MAX} bytes")
}

fn event(e: ServerEvent) -> Body {
    Body::ServersReply(ServersReply::Event(e))
}
