//! The net-helper's side of its broker channel (fd 3). Unlike the other helpers it answers
//! requests concurrently (a proxy connection's reply comes only when its tunnel ends), so replies
//! may leave in another order than the requests came; each carries its request's id. It reads
//! with `recvmsg` only, so the descriptors attached to `ProxyConnection` frames are received
//! (see [`crate::fdpass`]).

use crate::fdpass::recv_with_fds;
use ipc_schema::codec::{decode_from_slice, encode, DecodeError, EncodeError, MAX_FRAME};
use ipc_schema::net::NetRequest;
use ipc_schema::route::broker_may_send;
use ipc_schema::status::Hello;
use ipc_schema::{Body, Envelope, Kind, Role};
use std::collections::VecDeque;
use std::io;
use std::os::fd::OwnedFd;
use tokio::io::{AsyncWriteExt, BufWriter, Interest};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::UnixStream;
use tokio::sync::mpsc;

/// Why the helper stops serving. Each ends the process: the broker is its only peer, so any of
/// these means the broker is confused or gone.
#[derive(Debug, thiserror::Error)]
pub enum ChannelError {
    #[error("broker channel: {0}")]
    Io(#[from] io::Error),
    #[error("broker channel: {0}")]
    Decode(#[from] DecodeError),
    #[error("broker channel: {0}")]
    Encode(#[from] EncodeError),
    #[error("the broker sent a {0:?} message, which the net-helper may not receive")]
    Forbidden(Kind),
    #[error("a ProxyConnection frame arrived without its descriptor")]
    MissingFd,
    #[error("the broker sent {0} descriptor(s) that no ProxyConnection frame claimed")]
    StrayFds(usize),
}

/// One request from the broker.
pub struct Inbound {
    pub id: u64,
    pub body: Body,
    /// The descriptor of a `ProxyConnection` request.
    pub fd: Option<OwnedFd>,
}

pub struct ChannelReader {
    half: OwnedReadHalf,
    buf: Vec<u8>,
    fds: VecDeque<OwnedFd>,
}

pub struct ChannelWriter {
    out: BufWriter<OwnedWriteHalf>,
}

/// Cloneable sender of replies; [`ChannelWriter::run`] batches them onto the socket.
#[derive(Clone)]
pub struct Replies(mpsc::UnboundedSender<Envelope>);

impl Replies {
    pub fn new() -> (Replies, mpsc::UnboundedReceiver<Envelope>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (Replies(tx), rx)
    }

    pub fn send(&self, id: u64, body: Body) {
        let _ = self.0.send(Envelope::new(id, body));
    }
}

/// Adopts the inherited channel (blocking std socket) into the runtime.
pub fn split(sock: std::os::unix::net::UnixStream) -> io::Result<(ChannelReader, ChannelWriter)> {
    sock.set_nonblocking(true)?;
    let (rd, wr) = UnixStream::from_std(sock)?.into_split();
    Ok((
        ChannelReader {
            half: rd,
            buf: Vec::with_capacity(64 * 1024),
            fds: VecDeque::new(),
        },
        ChannelWriter {
            out: BufWriter::with_capacity(64 * 1024, wr),
        },
    ))
}

impl ChannelWriter {
    /// Sends the hello frame (id 0).
    pub async fn hello(&mut self, hello: Hello) -> Result<(), ChannelError> {
        self.out
            .write_all(&encode(&Envelope::new(0, Body::Hello(hello)))?)
            .await?;
        self.out.flush().await?;
        Ok(())
    }

    /// Writes replies until every [`Replies`] is dropped, flushing whenever none is waiting.
    pub async fn run(
        mut self,
        mut rx: mpsc::UnboundedReceiver<Envelope>,
    ) -> Result<(), ChannelError> {
        while let Some(env) = rx.recv().await {
            self.write(&env).await?;
            while let Ok(more) = rx.try_recv() {
                self.write(&more).await?;
            }
            self.out.flush().await?;
        }
        Ok(())
    }

    async fn write(&mut self, env: &Envelope) -> Result<(), ChannelError> {
        let frame = match encode(env) {
            Ok(f) => f,
            // A reply too large for a frame is a bug here; the broker still gets an answer.
            Err(e) => encode(&Envelope::new(
                env.id,
                Body::Error(ipc_schema::ErrorReply::new(
                    ipc_schema::ErrorCode::Internal,
                    format!("net-helper reply not sent: {e}"),
                )),
            ))?,
        };
        self.out.write_all(&frame).await?;
        Ok(())
    }
}

impl ChannelReader {
    /// The next request, or `None` when the broker closed the channel.
    pub async fn next(&mut self) -> Result<Option<Inbound>, ChannelError> {
        let mut chunk = vec![0u8; 64 * 1024];
        loop {
            if let Some((env, used)) = decode_from_slice(&self.buf, MAX_FRAME)? {
                self.buf.drain(..used);
                let kind = env.body.kind();
                if !broker_may_send(Role::Net, kind) {
                    return Err(ChannelError::Forbidden(kind));
                }
                let fd = match &env.body {
                    Body::Net(NetRequest::ProxyConnection { .. }) => {
                        Some(self.fds.pop_front().ok_or(ChannelError::MissingFd)?)
                    }
                    _ => None,
                };
                // A descriptor arrives with the first byte of its frame: once every buffered
                // byte is consumed, none may be left.
                if self.buf.is_empty() && !self.fds.is_empty() {
                    return Err(ChannelError::StrayFds(self.fds.len()));
                }
                return Ok(Some(Inbound {
                    id: env.id,
                    body: env.body,
                    fd,
                }));
            }
            let n = loop {
                self.half.readable().await?;
                let sock: &UnixStream = self.half.as_ref();
                match sock.try_io(Interest::READABLE, || {
                    recv_with_fds(sock, &mut chunk, &mut self.fds)
                }) {
                    Ok(n) => break n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                    Err(e) => return Err(e.into()),
                }
            };
            if n == 0 {
                if !self.buf.is_empty() {
                    return Err(DecodeError::Truncated {
                        expected: self.buf.len() + 1,
                        got: self.buf.len(),
                    }
                    .into());
                }
                if !self.fds.is_empty() {
                    return Err(ChannelError::StrayFds(self.fds.len()));
                }
                return Ok(None);
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }
}
