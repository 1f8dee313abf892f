//! [`HelperChannel::into_async`]: the channel for a helper that answers each request from its
//! own task, so replies may leave in another order than the requests came (each carries its
//! request's id). Reading is `recvmsg` on the runtime's readiness, into the same [`Inbox`] as the
//! other ways of serving; replies go through [`Replies`] to one writer task that batches them.

use super::{encode_reply, fatal, HelperChannel, Inbox, Request};
use crate::route::Table;
use crate::{Body, Envelope, Role};
use std::io;
use tokio::io::{AsyncWriteExt, BufWriter, Interest};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::UnixStream;
use tokio::sync::mpsc;

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
    half: OwnedReadHalf,
    inbox: Inbox,
    replies: Replies,
}

pub struct AsyncWriter {
    role: Role,
    out: BufWriter<OwnedWriteHalf>,
    rx: mpsc::UnboundedReceiver<Envelope>,
}

impl HelperChannel {
    /// Adopts the channel into the current tokio runtime: a reader of checked requests, a
    /// sender of replies, and the writer task's half.
    pub fn into_async(self, table: &'static Table) -> (AsyncReader, Replies, AsyncWriter) {
        let role = self.role;
        let adopt = self
            .sock
            .set_nonblocking(true)
            .and_then(|()| UnixStream::from_std(self.sock));
        let (rd, wr) = match adopt {
            Ok(s) => s.into_split(),
            Err(e) => fatal(role, format!("broker channel: {e}")),
        };
        let (tx, rx) = mpsc::unbounded_channel();
        let replies = Replies(tx);
        (
            AsyncReader {
                role,
                half: rd,
                inbox: Inbox::new(role, table, self.wipe),
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
            let n = loop {
                if let Err(e) = self.half.readable().await {
                    fatal(self.role, format!("reading the broker channel: {e}"));
                }
                let sock: &UnixStream = self.half.as_ref();
                let inbox = &mut self.inbox;
                match sock.try_io(Interest::READABLE, || inbox.fill_fd(sock_fd(sock))) {
                    Ok(n) => break n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                    Err(e) => fatal(self.role, format!("reading the broker channel: {e}")),
                }
            };
            if n == 0 {
                self.inbox.end();
                return None;
            }
        }
    }
}

fn sock_fd(sock: &UnixStream) -> std::os::fd::BorrowedFd<'_> {
    use std::os::fd::AsFd;
    sock.as_fd()
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
