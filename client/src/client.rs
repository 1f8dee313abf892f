//! The command-line side: connect to the running broker (starting one in the background when
//! none runs, the way gpg-agent starts) and exchange frames.

use crate::Dirs;
use ipc_schema::codec::{read_frame, write_frame, FrameError, MAX_FRAME};
use ipc_schema::{Body, Envelope};
use std::io::{BufReader, BufWriter, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

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
    reader: BufReader<UnixStream>,
    writer: BufWriter<UnixStream>,
    next_id: u64,
}

impl Client {
    pub fn connect(path: &Path) -> Result<Client, ClientError> {
        let s = UnixStream::connect(path).map_err(|source| ClientError::Connect {
            path: path.display().to_string(),
            source,
        })?;
        let w = s.try_clone().map_err(|source| ClientError::Connect {
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

    /// A second writer on the same connection, for one request sent from another thread
    /// (`StopCommand` on Ctrl-C), with an id this client never uses.
    pub fn side_writer(&self) -> std::io::Result<SideWriter> {
        Ok(SideWriter {
            stream: self.writer.get_ref().try_clone()?,
            next_id: u64::MAX / 2,
        })
    }
}

/// See [`Client::side_writer`].
pub struct SideWriter {
    stream: UnixStream,
    next_id: u64,
}

impl SideWriter {
    pub fn send(&mut self, body: Body) -> Result<(), ClientError> {
        self.next_id += 1;
        write_frame(&mut self.stream, &Envelope::new(self.next_id, body))?;
        Ok(())
    }
}

/// Starts `gatehouse-broker` (beside this binary) for `dirs` in its own process group, logging
/// to the data dir.
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
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    cmd.spawn()
        .map_err(|e| ClientError::Start(format!("{}: {e}", exe.display())))?;
    Ok(())
}
