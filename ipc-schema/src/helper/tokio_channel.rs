//! [`HelperChannel::into_async`]: the channel for a helper that answers each request from its
//! own task, so replies may leave in another order than the requests came (each carries its
//! request's id). Reading goes into the same [`Inbox`] as the other ways of serving (on Unix
//! `recvmsg` on the runtime's readiness, so descriptors come too; on Windows reads of an
//! overlapped named pipe); replies go through [`Replies`] to one writer task that batches them.

use super::{encode_reply, fatal, HelperChannel, Inbox, Request};
use crate::route::Table;
use crate::{Body, Envelope, Role};
use std::io;
use tokio::io::{AsyncWriteExt, BufWriter};
use tokio::sync::mpsc;

#[cfg(unix)]
type ReadHalf = tokio::net::unix::OwnedReadHalf;
#[cfg(unix)]
type WriteHalf = tokio::net::unix::OwnedWriteHalf;
#[cfg(windows)]
type Pipe = tokio::net::windows::named_pipe::NamedPipeClient;
#[cfg(windows)]
type ReadHalf = tokio::io::ReadHalf<Pipe>;
#[cfg(windows)]
type WriteHalf = tokio::io::WriteHalf<Pipe>;

/// Cloneable sender of replies; [`AsyncWriter::run`] writes them.
#[derive(Clone)]
pub struct Replies(mpsc::UnboundedSender<Envelope>);

impl Replies {
    pub fn send(&self, id: u64, body: Body) {
        let _ = self.0.send(Envelope::new(id, body));
    }
}

pub struct AsyncReader {
    role: Role,
    half: ReadHalf,
    inbox: Inbox,
    replies: Replies,
}

pub struct AsyncWriter {
    role: Role,
    out: BufWriter<WriteHalf>,
    rx: mpsc::UnboundedReceiver<Envelope>,
}

impl HelperChannel {
    /// Adopts the channel into the current tokio runtime: a reader of checked requests, a
    /// sender of replies, and the writer task's half.
    #[cfg(unix)]
    pub fn into_async(self, table: &'static Table) -> (AsyncReader, Replies, AsyncWriter) {
        let adopt = self
            .sock
            .set_nonblocking(true)
            .and_then(|()| tokio::net::UnixStream::from_std(self.sock));
        match adopt {
            Ok(s) => {
                let (rd, wr) = s.into_split();
                parts(self.role, table, self.wipe, rd, wr)
            }
            Err(e) => fatal(self.role, format!("broker channel: {e}")),
        }
    }

    /// Adopts the channel into the current tokio runtime, as on Unix. `adopt` turns the
    /// inherited (overlapped) pipe end into tokio's (`sandbox::windows::async_pipe`: the unsafe
    /// step lives in the sandbox crate).
    #[cfg(windows)]
    pub fn into_async(
        self,
        table: &'static Table,
        adopt: impl FnOnce(super::Stream) -> io::Result<Pipe>,
    ) -> (AsyncReader, Replies, AsyncWriter) {
        match adopt(self.sock) {
            Ok(pipe) => {
                let (rd, wr) = tokio::io::split(pipe);
                parts(self.role, table, self.wipe, rd, wr)
            }
            Err(e) => fatal(self.role, format!("broker channel: {e}")),
        }
    }
}

fn parts(
    role: Role,
    table: &'static Table,
    wipe: bool,
    rd: ReadHalf,
    wr: WriteHalf,
) -> (AsyncReader, Replies, AsyncWriter) {
    let (tx, rx) = mpsc::unbounded_channel();
    let replies = Replies(tx);
    (
        AsyncReader {
            role,
            half: rd,
            inbox: Inbox::new(role, table, wipe),
            replies: replies.clone(),
        },
        replies,
        AsyncWriter {
            role,
            out: BufWriter::with_capacity(64 * 1024, wr),
            rx,
        },
    )
}

impl AsyncReader {
    /// The next request (pings are answered here), or `None` when the broker closed the
    /// channel.
    pub async fn next(&mut self) -> Option<Request> {
        loop {
            while let Some(req) = self.inbox.next() {
                match req.body {
                    Body::Ping { .. } => self.replies.send(req.id, Body::Pong),
                    _ => return Some(req),
                }
            }
            let n = match self.read_some().await {
                Ok(n) => n,
                Err(e) => fatal(self.role, format!("reading the broker channel: {e}")),
            };
            if n == 0 {
                self.inbox.end();
                return None;
            }
        }
    }
}

impl AsyncReader {
    /// One read into the inbox; `Ok(0)` at the end of the stream.
    #[cfg(unix)]
    async fn read_some(&mut self) -> io::Result<usize> {
        use std::os::fd::AsFd;
        use tokio::io::Interest;
        loop {
            self.half.readable().await?;
            let sock: &tokio::net::UnixStream = self.half.as_ref();
            let inbox = &mut self.inbox;
            match sock.try_io(Interest::READABLE, || inbox.fill_fd(sock.as_fd())) {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// One read into the inbox; `Ok(0)` at the end of the stream (the broker closing its end
    /// of a pipe reads as a broken pipe).
    #[cfg(windows)]
    async fn read_some(&mut self) -> io::Result<usize> {
        use tokio::io::AsyncReadExt;
        let want = self.inbox.want();
        match self.half.read(self.inbox.buf.spare(want)).await {
            Ok(n) => {
                self.inbox.buf.advance(n);
                Ok(n)
            }
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(0),
            Err(e) => Err(e),
        }
    }
}

impl AsyncWriter {
    /// Writes replies until every [`Replies`] is dropped, flushing whenever none is waiting.
    /// An error means the broker is gone (the reader sees that too).
    pub async fn run(mut self) -> io::Result<()> {
        let mut frame = Vec::with_capacity(64 * 1024);
        while let Some(env) = self.rx.recv().await {
            encode_reply(self.role, env.id, env.body, &mut frame);
            while let Ok(more) = self.rx.try_recv() {
                encode_reply(self.role, more.id, more.body, &mut frame);
            }
            self.out.write_all(&frame).await?;
            frame.clear();
            self.out.flush().await?;
        }
        Ok(())
    }
}
