//! The helper side of a broker channel: say hello, then answer requests in order.
//!
//! Helpers are single-threaded and blocking: one request at a time, replies in order, written in
//! batches (flushed whenever no further request is already buffered), which keeps their seccomp
//! allowlists short and pipelined throughput high.

use crate::codec::{self, FrameError, MAX_FRAME};
use crate::route::broker_may_send;
use crate::status::Hello;
use crate::{Body, Envelope, Role};
use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::os::unix::net::UnixStream;

/// Why a helper stopped serving.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("broker channel: {0}")]
    Frame(#[from] FrameError),
    #[error("the broker sent a {kind:?} message, which the {role} may not receive")]
    Forbidden { role: Role, kind: crate::Kind },
    #[error("i/o on the broker channel: {0}")]
    Io(#[from] std::io::Error),
}

/// A helper's channel to the broker.
pub struct HelperChannel {
    role: Role,
    reader: BufReader<UnixStream>,
    writer: BufWriter<UnixStream>,
}

impl HelperChannel {
    pub fn new(role: Role, sock: UnixStream) -> std::io::Result<Self> {
        let w = sock.try_clone()?;
        Ok(HelperChannel {
            role,
            reader: BufReader::with_capacity(64 * 1024, sock),
            writer: BufWriter::with_capacity(64 * 1024, w),
        })
    }

    /// Sends the hello frame (id 0).
    pub fn hello(&mut self, hello: Hello) -> Result<(), ServeError> {
        codec::write_frame(&mut self.writer, &Envelope::new(0, Body::Hello(hello)))?;
        self.writer.flush()?;
        Ok(())
    }

    /// Answers requests until the broker closes the channel. `handle` gets each request body and
    /// returns the reply body. Any frame the route table does not allow toward this role ends
    /// the helper (the broker is the only peer, so this means the broker is confused).
    pub fn serve(mut self, mut handle: impl FnMut(Body) -> Body) -> Result<(), ServeError> {
        loop {
            let Some(env) = self.next_frame()? else {
                return Ok(());
            };
            let kind = env.body.kind();
            if !broker_may_send(self.role, kind) {
                return Err(ServeError::Forbidden {
                    role: self.role,
                    kind,
                });
            }
            let reply = match env.body {
                Body::Ping { .. } => Body::Pong,
                other => handle(other),
            };
            codec::write_frame(&mut self.writer, &Envelope::new(env.id, reply))?;
            if self.reader.buffer().is_empty() {
                self.writer.flush()?;
            }
        }
    }

    /// The next frame: decoded in place when it is already whole in the read buffer (the
    /// pipelined case, no allocation for the payload), read from the socket otherwise.
    fn next_frame(&mut self) -> Result<Option<Envelope>, FrameError> {
        let buffered = self.reader.buffer();
        if let Ok(Some((env, used))) = codec::decode_from_slice(buffered, MAX_FRAME) {
            self.reader.consume(used);
            return Ok(Some(env));
        }
        codec::read_frame(&mut self.reader, MAX_FRAME)
    }

    /// The raw reader, for helpers that stream (exec output).
    pub fn reader(&mut self) -> &mut impl Read {
        &mut self.reader
    }
}
