//! The gateway's one connection to the broker (opened before lockdown; after it the gateway can
//! open no other). Frames going out are queued and written on [`BrokerLink::flush`]; frames
//! coming in are read when `poll` says the socket is readable and decoded once whole.

use ipc_schema::codec::{decode_from_slice, write_frame, FrameError, MAX_FRAME};
use ipc_schema::tool::{ProfileName, ResumeToken, SessionInfo, ToolCall, ToolReply};
use ipc_schema::{Body, Envelope};
#[cfg(unix)]
use std::io::{Read, Write};
#[cfg(unix)]
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
#[cfg(unix)]
use std::os::unix::net::UnixStream;

/// The connection: a Unix socket; on Windows the broker's pipe (and stdin) through
/// [`crate::pipe::Pipe`].
#[cfg(unix)]
type Stream = UnixStream;
#[cfg(windows)]
type Stream = crate::pipe::Pipe;

/// Why the session could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("the broker refused the session: {0}")]
    Refused(String),
    #[error("the broker connection failed while opening the session: {0}")]
    Link(#[from] FrameError),
    #[error("the broker closed the connection while opening the session")]
    Closed,
    #[error("the broker answered the session request with {0}")]
    Unexpected(String),
}

pub struct BrokerLink {
    stream: Stream,
    /// Bytes read and not yet decoded.
    inbox: Vec<u8>,
    /// Frames queued and not yet written.
    outbox: Vec<u8>,
    next_id: u64,
}

impl BrokerLink {
    pub fn new(stream: Stream) -> BrokerLink {
        BrokerLink {
            stream,
            inbox: Vec::with_capacity(64 * 1024),
            outbox: Vec::with_capacity(64 * 1024),
            next_id: 1,
        }
    }

    /// The descriptor lockdown must keep open.
    #[cfg(unix)]
    pub fn fd(&self) -> RawFd {
        self.stream.as_raw_fd()
    }

    #[cfg(unix)]
    pub fn as_fd(&self) -> BorrowedFd<'_> {
        self.stream.as_fd()
    }

    /// The pipe and stdin, which the serving loop waits on.
    #[cfg(windows)]
    pub fn pipe(&mut self) -> &mut crate::pipe::Pipe {
        &mut self.stream
    }

    /// Whether `id` is one of the requests this link has sent (the broker answers nothing else).
    pub fn sent(&self, id: u64) -> bool {
        (1..self.next_id).contains(&id)
    }

    /// Queues `body` as a new request and returns its id.
    pub fn send(&mut self, body: Body) -> Result<u64, FrameError> {
        let id = self.next_id;
        self.next_id += 1;
        write_frame(&mut self.outbox, &Envelope::new(id, body))?;
        Ok(id)
    }

    /// Writes every queued frame.
    pub fn flush(&mut self) -> Result<(), FrameError> {
        if self.outbox.is_empty() {
            return Ok(());
        }
        #[cfg(unix)]
        let r = (&self.stream).write_all(&self.outbox);
        #[cfg(windows)]
        let r = self.stream.write(&self.outbox);
        self.outbox.clear();
        r.map_err(FrameError::Io)
    }

    /// Reads what the socket has (one `read`, which blocks only if nothing is there) and moves
    /// every whole frame to `out`. `Ok(false)`: the broker closed the connection.
    pub fn receive(&mut self, out: &mut Vec<Envelope>) -> Result<bool, FrameError> {
        #[cfg(unix)]
        let mut chunk = [0u8; 64 * 1024];
        #[cfg(unix)]
        let n = loop {
            match (&self.stream).read(&mut chunk) {
                Ok(n) => break n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(FrameError::Io(e)),
            }
        };
        #[cfg(unix)]
        self.inbox.extend_from_slice(&chunk[..n]);
        #[cfg(windows)]
        let n = {
            let chunk = self.stream.read_broker().map_err(FrameError::Io)?;
            self.inbox.extend_from_slice(&chunk);
            chunk.len()
        };
        let mut at = 0;
        while let Some((env, used)) = decode_from_slice(&self.inbox[at..], MAX_FRAME)? {
            out.push(env);
            at += used;
        }
        self.inbox.drain(..at);
        if n == 0 && !self.inbox.is_empty() {
            return Err(FrameError::Io(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "the broker closed the connection in the middle of a frame",
            )));
        }
        Ok(n > 0)
    }

    /// Opens this connection's session under `profile` (carrying on the one `token` names, for
    /// `gatehouse run`). Blocking; done before serving. An unknown profile is refused here,
    /// before the first MCP message is read.
    pub fn open_session(
        &mut self,
        token: Option<ResumeToken>,
        profile: Option<ProfileName>,
    ) -> Result<SessionInfo, SessionError> {
        let id = self.send(Body::ToolCall(ToolCall::OpenSession {
            resume: token,
            profile,
        }))?;
        self.flush()?;
        let mut frames = Vec::new();
        loop {
            if !self.receive(&mut frames)? {
                return Err(SessionError::Closed);
            }
            let Some(env) = frames.drain(..).next() else {
                continue;
            };
            // Nothing else has been sent yet: anything else breaks the protocol.
            if env.id != id {
                return Err(SessionError::Unexpected(format!(
                    "a {:?} message for request {}, which was never sent",
                    env.body.kind(),
                    env.id
                )));
            }
            return match env.body {
                Body::ToolReply(ToolReply::Session(s)) => Ok(s),
                Body::Error(e) => Err(SessionError::Refused(e.message)),
                other => Err(SessionError::Unexpected(format!("{:?}", other.kind()))),
            };
        }
    }
}
