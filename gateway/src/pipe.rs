//! The gateway's I/O on Windows: the broker's pipe and stdin, as one stream of events.
//!
//! Windows has no `poll` over a pipe and a console or anonymous-pipe stdin, and a synchronous
//! pipe handle serialises a read pending in one thread with a write from another. So the pipe
//! is opened overlapped (`sandbox::endpoint::connect_async`, which checks the server is this
//! user's) on a small tokio runtime of its own thread, whose reader sends each chunk here and
//! whose writer takes what the serving loop flushes; a second thread reads stdin once serving
//! starts. The serving loop waits on the one channel both feed, as it waits in `poll` on Unix.

use std::collections::VecDeque;
use std::io::{self, Read};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

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
    writes: tokio::sync::mpsc::UnboundedSender<Vec<u8>>,
    /// Broker chunks read while waiting for something else, oldest first.
    broker: VecDeque<io::Result<Vec<u8>>>,
    /// Stdin chunks read while waiting for the broker (opening the session).
    stdin: VecDeque<io::Result<Vec<u8>>>,
}

/// Chunk size of both readers (the serving loop's buffer is at least this big).
pub const CHUNK: usize = 64 * 1024;

impl Pipe {
    /// Connects to the broker's endpoint `name` and starts its reader and writer.
    pub fn connect(name: &str) -> io::Result<Pipe> {
        let (wake, events) = channel();
        let (writes, mut to_write) = tokio::sync::mpsc::unbounded_channel::<Vec<u8>>();
        let (opened_tx, opened) = channel::<io::Result<()>>();
        let (name, reader_wake) = (name.to_string(), wake.clone());
        std::thread::Builder::new()
            .name("broker-pipe".into())
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_current_thread()
                    .enable_io()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = opened_tx.send(Err(e));
                        return;
                    }
                };
                rt.block_on(async move {
                    let pipe = match sandbox::endpoint::connect_async(&name) {
                        Ok((p, _)) => p,
                        Err(e) => {
                            let _ = opened_tx.send(Err(e));
                            return;
                        }
                    };
                    let _ = opened_tx.send(Ok(()));
                    let (mut rd, mut wr) = tokio::io::split(pipe);
                    let fail = reader_wake.clone();
                    let writer = async move {
                        while let Some(bytes) = to_write.recv().await {
                            if let Err(e) = wr.write_all(&bytes).await {
                                let _ = fail.send(Wake::Broker(Err(e)));
                                return;
                            }
                        }
                    };
                    let reader = async move {
                        let mut buf = vec![0u8; CHUNK];
                        loop {
                            let got = rd.read(&mut buf).await.map(|n| buf[..n].to_vec());
                            let end = !matches!(&got, Ok(b) if !b.is_empty());
                            if reader_wake.send(Wake::Broker(got)).is_err() || end {
                                return;
                            }
                        }
                    };
                    // The reader ends the thread (the end of the pipe, or nobody listening);
                    // the writer ends when the link is dropped.
                    tokio::join!(reader, writer);
                });
            })?;
        opened
            .recv()
            .map_err(|_| io::Error::other("the broker pipe's thread ended"))??;
        Ok(Pipe {
            events,
            wake,
            writes,
            broker: VecDeque::new(),
            stdin: VecDeque::new(),
        })
    }

    /// Starts reading stdin (once: at the start of serving, after the session opened).
    pub fn start_stdin(&self) -> io::Result<()> {
        let wake = self.wake.clone();
        std::thread::Builder::new()
            .name("stdin".into())
            .spawn(move || {
                let mut stdin = io::stdin().lock();
                let mut buf = vec![0u8; CHUNK];
                loop {
                    let got = loop {
                        match stdin.read(&mut buf) {
                            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                            r => break r.map(|n| buf[..n].to_vec()),
                        }
                    };
                    let end = !matches!(&got, Ok(b) if !b.is_empty());
                    if wake.send(Wake::Stdin(got)).is_err() || end {
                        return;
                    }
                }
            })
            .map(|_| ())
    }

    /// Hands `bytes` to the writer.
    pub fn write(&self, bytes: Vec<u8>) -> io::Result<()> {
        self.writes
            .send(bytes)
            .map_err(|_| io::Error::new(io::ErrorKind::BrokenPipe, "the broker pipe is closed"))
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
