//! The console's one broker connection: frames out from the console's thread, frames in on a
//! reader thread that hands them over a channel (the console thread also waits for keys).
//!
//! On Unix a socket and its clone; on Windows the two halves of the pipe opened overlapped
//! (`sandbox::endpoint::connect_duplex`), so the reader thread's pending read never holds up a
//! decision the console writes.

use ipc_schema::codec::{read_frame, write_frame, FrameError, MAX_FRAME};
use ipc_schema::Envelope;
use std::io::{BufReader, BufWriter, Read, Write};
use std::sync::mpsc::Sender;

/// What the reader thread reports.
#[derive(Debug)]
pub enum Incoming {
    Frame(Box<Envelope>),
    /// The connection ended; why.
    Closed(String),
}

type Reading = Box<dyn Read + Send>;

/// The writing half, and the reading half until [`Link::spawn_reader`] takes it.
pub struct Link {
    writer: BufWriter<Box<dyn Write + Send>>,
    reader: Option<Reading>,
    /// The descriptors the link holds (kept open through lockdown).
    #[cfg(unix)]
    fds: Vec<std::os::fd::RawFd>,
}

impl Link {
    /// Splits `stream` (the duplicate is made now, before lockdown).
    #[cfg(unix)]
    pub fn new(stream: std::os::unix::net::UnixStream) -> std::io::Result<Link> {
        use std::os::fd::AsRawFd;
        let reader = stream.try_clone()?;
        Ok(Link {
            fds: vec![stream.as_raw_fd(), reader.as_raw_fd()],
            writer: BufWriter::new(Box::new(stream)),
            reader: Some(Box::new(reader)),
        })
    }

    /// The two halves of the broker's pipe.
    #[cfg(windows)]
    pub fn new(
        reader: sandbox::endpoint::DuplexReader,
        writer: sandbox::endpoint::DuplexWriter,
    ) -> std::io::Result<Link> {
        Ok(Link {
            writer: BufWriter::new(Box::new(writer)),
            reader: Some(Box::new(reader)),
        })
    }

    /// The descriptors this link holds (kept open through lockdown).
    #[cfg(unix)]
    pub fn fds(&self) -> Vec<std::os::fd::RawFd> {
        self.fds.clone()
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

#[cfg(all(test, windows))]
mod tests {
    use super::*;
    use ipc_schema::codec::read_frame;
    use ipc_schema::Body;
    use std::time::Duration;

    /// The console's link on Windows: the reader thread waits on the pipe first, then the
    /// console writes (a synchronous pipe handle would hold that write until the server sent
    /// something, and this server sends only after it got the write); the answer arrives on the
    /// reader's channel, and the server's end is reported as the connection closing.
    #[test]
    fn a_console_writes_while_its_reader_waits() {
        let name = format!(r"\\.\pipe\gatehouse-ui-link-test-{}", std::process::id());
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let mut l = rt
            .block_on(async { sandbox::endpoint::Listener::bind(&name) })
            .unwrap();
        let console = std::thread::spawn({
            let name = name.clone();
            move || {
                let (r, w, _server) = sandbox::endpoint::connect_duplex(&name).unwrap();
                let mut link = Link::new(r, w).unwrap();
                let (tx, rx) = std::sync::mpsc::channel();
                link.spawn_reader(tx).unwrap();
                std::thread::sleep(Duration::from_millis(200));
                link.send(&Envelope::new(7, Body::Ping { target: None }))
                    .unwrap();
                let answer = rx.recv_timeout(Duration::from_secs(10)).expect("no answer");
                match answer {
                    Incoming::Frame(env) => {
                        assert_eq!(env.id, 7);
                        assert_eq!(env.body, Body::Pong);
                    }
                    other => panic!("{other:?}"),
                }
                // Kept alive until the server has answered and gone.
                (link, rx)
            }
        });
        rt.block_on(async {
            use tokio::io::AsyncWriteExt;
            let (conn, _) = l.accept().await.unwrap();
            // Bytes gathered until they hold one whole frame.
            let (mut rd, mut wr) = tokio::io::split(conn);
            let mut bytes = Vec::new();
            let env = loop {
                let mut chunk = [0u8; 4096];
                let n = tokio::io::AsyncReadExt::read(&mut rd, &mut chunk)
                    .await
                    .unwrap();
                assert!(n > 0, "the console closed before its frame");
                bytes.extend_from_slice(&chunk[..n]);
                if let Ok(Some(env)) = read_frame(&mut bytes.as_slice(), MAX_FRAME) {
                    break env;
                }
            };
            assert_eq!(env.id, 7);
            assert_eq!(env.body, Body::Ping { target: None });
            let mut out = Vec::new();
            ipc_schema::codec::write_frame(&mut out, &Envelope::new(7, Body::Pong)).unwrap();
            wr.write_all(&out).await.unwrap();
        });
        let (_link, _rx) = console.join().unwrap();
    }
}
