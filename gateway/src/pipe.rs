//! The gateway's I/O on Windows: the broker's pipe and stdin, as one stream of events.
//!
//! Windows has no `poll` over a pipe and a console or anonymous-pipe stdin, and a synchronous
//! pipe handle serialises a read pending in one thread with a write from another. So the pipe
//! is opened overlapped as two blocking halves (`sandbox::endpoint::connect_duplex`, which
//! checks the server is this user's): a thread reads the broker's half and sends each chunk
//! here, the serving loop writes on the other (blocking, as its socket write does on Unix); a
//! second thread reads stdin once serving starts. The serving loop waits on the one channel
//! both readers feed, as it waits in `poll` on Unix.

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::time::Duration;

/// What arrived: bytes (an empty chunk is the end), or why reading failed.
pub enum Wake {
    Stdin(io::Result<Vec<u8>>),
    Broker(io::Result<Vec<u8>>),
}

/// The broker's pipe, and stdin once [`Pipe::start_stdin`] ran.
pub struct Pipe {
    events: Receiver<Wake>,
    /// For the stdin reader, started later.
    wake: Sender<Wake>,
    writer: sandbox::endpoint::DuplexWriter,
    /// Broker chunks read while waiting for something else, oldest first.
    broker: VecDeque<io::Result<Vec<u8>>>,
    /// Stdin chunks read while waiting for the broker (opening the session).
    stdin: VecDeque<io::Result<Vec<u8>>>,
}

/// Chunk size of both readers (the serving loop's buffer is at least this big).
pub const CHUNK: usize = 64 * 1024;

/// Reads `from` in a thread named `name` until its end or a failure, each chunk sent as
/// `wrap(chunk)`; stops early when nobody listens.
fn forward(
    name: &str,
    mut from: impl Read + Send + 'static,
    wake: Sender<Wake>,
    wrap: fn(io::Result<Vec<u8>>) -> Wake,
) -> io::Result<()> {
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            let mut buf = vec![0u8; CHUNK];
            loop {
                let got = loop {
                    match from.read(&mut buf) {
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                        r => break r.map(|n| buf[..n].to_vec()),
                    }
                };
                let end = !matches!(&got, Ok(b) if !b.is_empty());
                if wake.send(wrap(got)).is_err() || end {
                    return;
                }
            }
        })
        .map(|_| ())
}

impl Pipe {
    /// Connects to the broker's endpoint `name` and starts reading it.
    pub fn connect(name: &str) -> io::Result<Pipe> {
        let (wake, events) = channel();
        let (reader, writer, _server) = sandbox::endpoint::connect_duplex(name)?;
        forward("broker-pipe", reader, wake.clone(), Wake::Broker)?;
        Ok(Pipe {
            events,
            wake,
            writer,
            broker: VecDeque::new(),
            stdin: VecDeque::new(),
        })
    }

    /// Starts reading stdin (once: at the start of serving, after the session opened).
    pub fn start_stdin(&self) -> io::Result<()> {
        forward("stdin", io::stdin(), self.wake.clone(), Wake::Stdin)
    }

    /// Writes `bytes` to the broker (returns once they are on the pipe).
    pub fn write(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.writer.write_all(bytes)
    }

    /// The next chunk from the broker, waiting for it (stdin read meanwhile is kept).
    pub fn read_broker(&mut self) -> io::Result<Vec<u8>> {
        loop {
            if let Some(chunk) = self.broker.pop_front() {
                return chunk;
            }
            match self.events.recv() {
                Ok(Wake::Broker(chunk)) => return chunk,
                Ok(Wake::Stdin(chunk)) => self.stdin.push_back(chunk),
                // Both readers gone: as the end of the pipe.
                Err(_) => return Ok(Vec::new()),
            }
        }
    }

    /// Puts back a broker chunk [`Pipe::wait`] returned, for the next [`Pipe::read_broker`].
    pub fn unread_broker(&mut self, chunk: io::Result<Vec<u8>>) {
        self.broker.push_front(chunk);
    }

    /// What arrives next, within `timeout` (`None`: wait as long as it takes).
    pub fn wait(&mut self, timeout: Option<Duration>) -> Option<Wake> {
        if let Some(chunk) = self.stdin.pop_front() {
            return Some(Wake::Stdin(chunk));
        }
        if let Some(chunk) = self.broker.pop_front() {
            return Some(Wake::Broker(chunk));
        }
        match timeout {
            None => self.events.recv().ok(),
            Some(t) => match self.events.recv_timeout(t) {
                Ok(w) => Some(w),
                Err(RecvTimeoutError::Timeout) => None,
                // Both readers gone: stdin's end, so the loop ends.
                Err(RecvTimeoutError::Disconnected) => Some(Wake::Stdin(Ok(Vec::new()))),
            },
        }
    }
}
