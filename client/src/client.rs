//! The command-line side: connect to the running broker (starting one in the background when
//! none runs, the way gpg-agent starts) and exchange frames: over a Unix socket, or on Windows
//! a named pipe ([`Dirs::ui_socket`] names both).

use crate::Dirs;
use ipc_schema::codec::{read_frame, write_frame, FrameError, MAX_FRAME};
use ipc_schema::{Body, Envelope};
use std::io::{BufReader, BufWriter, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The two halves of one connection to a front endpoint of the broker: a Unix socket and its
/// clone.
#[cfg(unix)]
type Reader = std::os::unix::net::UnixStream;
#[cfg(unix)]
type Writer = std::os::unix::net::UnixStream;
/// On Windows the pipe opened overlapped, as two halves that may be used from two threads at
/// once (`sandbox::endpoint::connect_duplex`): a synchronous handle would make a write wait
/// while another thread's read is pending.
#[cfg(windows)]
type Reader = sandbox::endpoint::DuplexReader;
#[cfg(windows)]
type Writer = sandbox::endpoint::DuplexWriter;

#[cfg(unix)]
fn open(path: &Path) -> std::io::Result<(Reader, Writer)> {
    let s = std::os::unix::net::UnixStream::connect(path)?;
    let w = s.try_clone()?;
    Ok((s, w))
}

/// Opens the pipe `path`, refused unless the process serving it is this user's
/// (`sandbox::endpoint::connect_async`, which waits out a busy pipe for a second).
#[cfg(windows)]
fn open(path: &Path) -> std::io::Result<(Reader, Writer)> {
    let name = path
        .to_str()
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a pipe name"))?;
    sandbox::endpoint::connect_duplex(name).map(|(r, w, _server)| (r, w))
}

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot reach the broker at {path}: {source}")]
    Connect {
        path: String,
        source: std::io::Error,
    },
    #[error("cannot start the broker: {0}")]
    Start(String),
    #[error("broker connection: {0}")]
    Frame(#[from] FrameError),
    #[error("the broker closed the connection")]
    Closed,
}

/// A blocking connection to the broker over one front socket.
pub struct Client {
    reader: BufReader<Reader>,
    writer: BufWriter<Writer>,
    next_id: u64,
}

impl Client {
    pub fn connect(path: &Path) -> Result<Client, ClientError> {
        let (s, w) = open(path).map_err(|source| ClientError::Connect {
            path: path.display().to_string(),
            source,
        })?;
        Ok(Client {
            reader: BufReader::new(s),
            writer: BufWriter::new(w),
            next_id: 1,
        })
    }

    /// Connects to `socket`, starting a broker for `dirs` in the background if none answers.
    pub fn connect_or_start(
        data_dir: Option<&Path>,
        dirs: &Dirs,
        socket: &Path,
        broker_args: &[String],
    ) -> Result<Client, ClientError> {
        if let Ok(c) = Client::connect(socket) {
            return Ok(c);
        }
        start_broker(data_dir, dirs, broker_args)?;
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            match Client::connect(socket) {
                Ok(c) => return Ok(c),
                Err(e) if Instant::now() >= deadline => return Err(e),
                Err(_) => std::thread::sleep(Duration::from_millis(25)),
            }
        }
    }

    /// Sends one request and waits for the reply with its id.
    pub fn request(&mut self, body: Body) -> Result<Body, ClientError> {
        let id = self.send(body)?;
        loop {
            match read_frame(&mut self.reader, MAX_FRAME)? {
                Some(env) if env.id == id => return Ok(env.body),
                Some(_) => continue,
                None => return Err(ClientError::Closed),
            }
        }
    }
}

impl Client {
    /// Sends one request without waiting; its replies carry the returned id.
    pub fn send(&mut self, body: Body) -> Result<u64, ClientError> {
        let id = self.next_id;
        self.next_id += 1;
        write_frame(&mut self.writer, &Envelope::new(id, body))?;
        self.writer.flush().map_err(FrameError::Io)?;
        Ok(id)
    }

    /// The next frame from the broker, whatever its id (a request answered in several
    /// replies, such as `LaunchRequest::Command`).
    pub fn next_frame(&mut self) -> Result<Envelope, ClientError> {
        read_frame(&mut self.reader, MAX_FRAME)?.ok_or(ClientError::Closed)
    }

    /// The connection's two halves (already buffered), for a reader thread and a writer: a
    /// front that reads events while it sends requests (the demo's approver).
    pub fn into_parts(
        self,
    ) -> (
        impl std::io::Read + Send + 'static,
        impl std::io::Write + Send + 'static,
    ) {
        (self.reader, self.writer)
    }

    /// A second writer on the same connection, for one request sent from another thread
    /// (`StopCommand` on Ctrl-C), with an id this client never uses.
    pub fn side_writer(&self) -> std::io::Result<SideWriter> {
        #[cfg(unix)]
        let stream = self.writer.get_ref().try_clone()?;
        #[cfg(windows)]
        let stream = self.writer.get_ref().clone();
        Ok(SideWriter {
            stream,
            next_id: u64::MAX / 2,
        })
    }
}

/// See [`Client::side_writer`]. Its frame goes at once, whether or not another thread waits
/// on the client for one.
pub struct SideWriter {
    stream: Writer,
    next_id: u64,
}

impl SideWriter {
    pub fn send(&mut self, body: Body) -> Result<(), ClientError> {
        self.next_id += 1;
        write_frame(&mut self.stream, &Envelope::new(self.next_id, body))?;
        Ok(())
    }
}

/// Starts `gatehouse-broker` (beside this binary) for `dirs` in its own process group (on
/// Windows: its own console, without a window), logging to the data dir.
fn start_broker(
    data_dir: Option<&Path>,
    dirs: &Dirs,
    broker_args: &[String],
) -> Result<(), ClientError> {
    dirs.ensure()
        .map_err(|e| ClientError::Start(e.to_string()))?;
    let exe = crate::sibling(crate::BROKER_BIN).map_err(ClientError::Start)?;
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dirs.broker_log())
        .map_err(|e| ClientError::Start(format!("{}: {e}", dirs.broker_log().display())))?;
    let log2 = log
        .try_clone()
        .map_err(|e| ClientError::Start(e.to_string()))?;
    let mut cmd = Command::new(&exe);
    if let Some(d) = data_dir {
        cmd.arg("--data-dir").arg(d);
    }
    cmd.args(broker_args)
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log2);
    // Not in the terminal's process group: the user's Ctrl-C to this front is not the broker's.
    #[cfg(unix)]
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    // The same on Windows: a console of its own (Ctrl-C and closing the user's console do not
    // reach it) without a window, which the console helpers it starts then share rather than
    // each opening one.
    #[cfg(windows)]
    {
        const CREATE_NO_WINDOW: u32 = 0x0800_0000;
        std::os::windows::process::CommandExt::creation_flags(&mut cmd, CREATE_NO_WINDOW);
    }
    cmd.spawn()
        .map_err(|e| ClientError::Start(format!("{}: {e}", exe.display())))?;
    Ok(())
}

#[cfg(all(test, windows))]
mod tests {
    use super::*;
    use ipc_schema::codec::{read_frame_async, write_frame_async};
    use std::sync::mpsc;
    use tokio::io::AsyncWriteExt;

    /// Serves `name` on a tokio runtime in a thread: the first connection's peer is sent back,
    /// each `Ping` answered with `Pong`; with `unblock`, a lone `Pong` (id 0) is sent when no
    /// frame has come for that long.
    fn serve(
        name: String,
        unblock: Option<Duration>,
    ) -> (
        mpsc::Receiver<sandbox::peer::Peer>,
        std::thread::JoinHandle<()>,
    ) {
        let (bound_tx, bound_rx) = mpsc::channel();
        let (peer_tx, peer_rx) = mpsc::channel();
        let server = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                let mut l = sandbox::endpoint::Listener::bind(&name).unwrap();
                bound_tx.send(()).unwrap();
                let (mut conn, peer) = l.accept().await.unwrap();
                peer_tx.send(peer).unwrap();
                loop {
                    let next = read_frame_async(&mut conn, MAX_FRAME);
                    let frame = match unblock {
                        Some(d) => match tokio::time::timeout(d, next).await {
                            Ok(f) => f,
                            Err(_) => {
                                let pong = Envelope::new(0, Body::Pong);
                                write_frame_async(&mut conn, &pong).await.unwrap();
                                conn.flush().await.unwrap();
                                continue;
                            }
                        },
                        None => next.await,
                    };
                    match frame.unwrap() {
                        Some(Envelope {
                            id,
                            body: Body::Ping { .. },
                            ..
                        }) => {
                            write_frame_async(&mut conn, &Envelope::new(id, Body::Pong))
                                .await
                                .unwrap();
                            conn.flush().await.unwrap();
                        }
                        Some(other) => panic!("unexpected {other:?}"),
                        None => return,
                    }
                }
            });
        });
        bound_rx.recv().unwrap();
        (peer_rx, server)
    }

    fn pipe_name(test: &str) -> String {
        format!(r"\\.\pipe\gatehouse-client-{test}-{}", std::process::id())
    }

    /// A `Ping` gets its `Pong` through a pipe served by `sandbox::endpoint`, which names this
    /// process as the client; with no server under a name, the error is NotFound
    /// (ERROR_FILE_NOT_FOUND), the one `connect_or_start` starts a broker on.
    #[test]
    fn a_client_round_trip_over_a_pipe() {
        let name = pipe_name("round-trip");
        let absent = Client::connect(Path::new(&format!("{name}-absent")));
        match absent {
            Err(ClientError::Connect { source, .. }) => {
                assert_eq!(source.raw_os_error(), Some(2), "{source}")
            }
            Err(e) => panic!("{e}"),
            Ok(_) => panic!("connected to nothing"),
        }
        let (peer, server) = serve(name.clone(), None);
        let mut c = Client::connect(Path::new(&name)).unwrap();
        assert_eq!(peer.recv().unwrap().pid, Some(std::process::id()));
        for _ in 0..2 {
            assert!(matches!(
                c.request(Body::Ping { target: None }).unwrap(),
                Body::Pong
            ));
        }
        drop(c);
        server.join().unwrap();
    }

    /// Every instance of the pipe taken (one client connected, the server has not yet made
    /// the next instance): a second client waits for one, and gets ERROR_PIPE_BUSY after a
    /// second without; the control, a server that accepts meanwhile, lets it connect.
    #[test]
    fn a_busy_pipe_is_waited_for_a_second() {
        let name = pipe_name("busy");
        let (bound_tx, bound_rx) = mpsc::channel();
        let (go_tx, go_rx) = mpsc::channel::<()>();
        let server = std::thread::spawn({
            let name = name.clone();
            move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                rt.block_on(async {
                    let mut l = sandbox::endpoint::Listener::bind(&name).unwrap();
                    bound_tx.send(()).unwrap();
                    let mut conns = Vec::new();
                    // Accepting makes the next instance: only when told.
                    while go_rx.recv().is_ok() {
                        conns.push(l.accept().await.unwrap());
                    }
                });
            }
        });
        bound_rx.recv().unwrap();
        let _first = Client::connect(Path::new(&name)).unwrap();
        let start = Instant::now();
        match Client::connect(Path::new(&name)) {
            Err(ClientError::Connect { source, .. }) => {
                assert_eq!(source.raw_os_error(), Some(231), "{source}")
            }
            Err(e) => panic!("{e}"),
            Ok(_) => panic!("a second client got the only instance"),
        }
        assert!(
            start.elapsed() >= Duration::from_secs(1),
            "{:?}",
            start.elapsed()
        );
        let accept = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            go_tx.send(()).unwrap();
            go_tx
        });
        let second = Client::connect(Path::new(&name));
        assert!(second.is_ok(), "{:?}", second.err());
        drop(accept.join().unwrap());
        server.join().unwrap();
    }

    /// A side writer's frame while another thread waits in `next_frame`: it goes at once (the
    /// pipe is overlapped; a synchronous handle would hold the write until the read ended, here
    /// the server's lone `Pong` after 2 s), so the first frame back is the answer to it.
    #[test]
    fn a_side_writer_while_a_read_is_pending() {
        let name = pipe_name("side");
        let (_peer, server) = serve(name.clone(), Some(Duration::from_secs(2)));
        let mut c = Client::connect(Path::new(&name)).unwrap();
        let mut side = c.side_writer().unwrap();
        let reader = std::thread::spawn(move || {
            let first = c.next_frame().unwrap();
            (c, first)
        });
        std::thread::sleep(Duration::from_millis(300));
        let start = Instant::now();
        side.send(Body::Ping { target: None }).unwrap();
        let waited = start.elapsed();
        let (c, first) = reader.join().unwrap();
        assert!(
            waited < Duration::from_secs(1),
            "the write waited {waited:?}"
        );
        assert_eq!(first.id, u64::MAX / 2 + 1);
        drop((c, side));
        server.join().unwrap();
    }
}
