//! The console's one broker connection: frames out from the console's thread, frames in on a
//! reader thread that hands them over a channel (the console thread also waits for keys).

use ipc_schema::codec::{read_frame, write_frame, FrameError, MAX_FRAME};
use ipc_schema::Envelope;
use std::io::{BufReader, BufWriter, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::mpsc::Sender;

/// What the reader thread reports.
#[derive(Debug)]
pub enum Incoming {
    Frame(Box<Envelope>),
    /// The connection ended; why.
    Closed(String),
}

/// The writing half, and the reading half until [`Link::spawn_reader`] takes it.
pub struct Link {
    writer: BufWriter<UnixStream>,
    reader: Option<UnixStream>,
}

impl Link {
    /// Splits `stream` (the duplicate is made now, before lockdown).
    pub fn new(stream: UnixStream) -> std::io::Result<Link> {
        let reader = stream.try_clone()?;
        Ok(Link {
            writer: BufWriter::new(stream),
            reader: Some(reader),
        })
    }

    /// The descriptors this link holds (kept open through lockdown).
    pub fn fds(&self) -> Vec<RawFd> {
        let mut v = vec![self.writer.get_ref().as_raw_fd()];
        if let Some(r) = &self.reader {
            v.push(r.as_raw_fd());
        }
        v
    }

    pub fn send(&mut self, env: &Envelope) -> Result<(), FrameError> {
        write_frame(&mut self.writer, env)?;
        self.writer.flush().map_err(FrameError::Io)
    }

    /// Starts the reader thread; it ends when the connection does.
    pub fn spawn_reader(&mut self, tx: Sender<Incoming>) -> std::io::Result<()> {
        let Some(stream) = self.reader.take() else {
            return Ok(());
        };
        std::thread::Builder::new()
            .name("broker-reader".into())
            .spawn(move || {
                let mut rd = BufReader::with_capacity(64 * 1024, stream);
                loop {
                    let ev = match read_frame(&mut rd, MAX_FRAME) {
                        Ok(Some(env)) => Incoming::Frame(Box::new(env)),
                        Ok(None) => Incoming::Closed("the broker closed the connection".into()),
                        Err(e) => Incoming::Closed(format!("broker connection: {e}")),
                    };
                    let last = matches!(ev, Incoming::Closed(_));
                    if tx.send(ev).is_err() || last {
                        return;
                    }
                }
            })?;
        Ok(())
    }
}
