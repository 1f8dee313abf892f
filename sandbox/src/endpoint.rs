//! The listening endpoints the fronts connect to, one layer across the OSes: a Unix socket
//! listener on Unix, a named pipe on Windows. Every accepted connection comes with its peer as
//! the OS names it ([`crate::peer`]); whether that peer may talk is the caller's decision
//! ([`crate::peer::admit`]).
//!
//! On Windows the pipe is created as the first instance of its name (a process that squatted
//! the name makes creation fail instead of standing in the middle), refuses remote clients, and
//! carries a DACL that grants this user alone (the default DACL of a pipe lets everyone read);
//! each accepted instance is replaced by a new one with the same protections.

use crate::peer::Peer;
use std::io;

/// A connection a front made.
#[cfg(unix)]
pub type Conn = tokio::net::UnixStream;
/// A connection a front made: the connected server end of a pipe instance.
#[cfg(windows)]
pub type Conn = tokio::net::windows::named_pipe::NamedPipeServer;

/// Where fronts connect: accepts connections with their peers.
pub struct Listener {
    #[cfg(unix)]
    inner: tokio::net::UnixListener,
    #[cfg(windows)]
    name: String,
    /// A SID granted read and write beside this user ([`Listener::bind_also_for`]).
    #[cfg(windows)]
    also: Option<String>,
    #[cfg(windows)]
    next: Conn,
}

#[cfg(unix)]
impl Listener {
    /// Serves on a bound, listening Unix socket (made by whoever may create it: the spawner).
    /// Must be called inside a tokio runtime.
    pub fn from_std(listener: std::os::unix::net::UnixListener) -> io::Result<Listener> {
        listener.set_nonblocking(true)?;
        Ok(Listener {
            inner: tokio::net::UnixListener::from_std(listener)?,
        })
    }

    /// The next connection and its peer (SO_PEERCRED; on macOS `getpeereid`).
    pub async fn accept(&mut self) -> io::Result<(Conn, Peer)> {
        use std::os::fd::AsFd;
        let (conn, _) = self.inner.accept().await?;
        let peer = crate::peer::of_unix_socket(conn.as_fd())?;
        Ok((conn, peer))
    }
}

#[cfg(windows)]
impl Listener {
    /// Creates the pipe `name` (`\\.\pipe\...`) as its first instance, for this user only.
    /// Fails if the name exists. Must be called inside a tokio runtime.
    pub fn bind(name: &str) -> io::Result<Listener> {
        Listener::bind_also_for(name, None)
    }

    /// [`Listener::bind`], the pipe also granting `sid` read and write: a `gatehouse run`
    /// agent's pipe, opened from a token whose restricting SID is `sid`.
    pub fn bind_also_for(name: &str, sid: Option<&str>) -> io::Result<Listener> {
        let next = crate::windows::user_only_pipe(name, true, sid)?;
        Ok(Listener {
            name: name.to_string(),
            also: sid.map(str::to_string),
            next,
        })
    }

    /// The next connection and its peer (the pipe's client process and its token's user).
    pub async fn accept(&mut self) -> io::Result<(Conn, Peer)> {
        use std::os::windows::io::AsHandle;
        let connected = self.next.connect().await;
        // The next client gets a new instance; this one is the connection (or, if connecting
        // failed, e.g. a client that came and went, it is dropped rather than reused).
        let fresh = crate::windows::user_only_pipe(&self.name, false, self.also.as_deref())?;
        let conn = std::mem::replace(&mut self.next, fresh);
        connected?;
        let peer = crate::peer::of_pipe(conn.as_handle())?;
        Ok((conn, peer))
    }
}

/// A front's connection to the endpoint `name` (`\\.\pipe\...`), refused unless the process
/// serving it is this user's: a pipe another user created first under the broker's name (a
/// squatter waiting for a front's requests) is not talked to. The server may identify this
/// client but never act as it (`SECURITY_IDENTIFICATION`). ERROR_PIPE_BUSY is retried for a
/// second (see `while_busy`). A blocking handle: Windows
/// serialises a read pending on it with a write from another thread.
#[cfg(windows)]
pub fn connect(name: &str) -> io::Result<(std::fs::File, Peer)> {
    use std::os::windows::fs::OpenOptionsExt;
    use std::os::windows::io::AsHandle;
    let pipe = while_busy(|| {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .security_qos_flags(windows_sys::Win32::Storage::FileSystem::SECURITY_IDENTIFICATION)
            .open(name)
    })?;
    let peer = checked_server(name, pipe.as_handle())?;
    Ok((pipe, peer))
}

/// Two connections to `name`, one after the other, each as [`connect`]: a third-party server's
/// stdin and stdout (`ipc_schema::exec::ServerRun`), two handles because a synchronous pipe
/// handle serves one I/O at a time.
#[cfg(windows)]
pub fn connect_twice(name: &str) -> io::Result<(std::fs::File, std::fs::File)> {
    Ok((connect(name)?.0, connect(name)?.0))
}

/// Opens with `open`, retrying ERROR_PIPE_BUSY for a second: every instance of the name may be
/// taken for a moment (the broker makes the next one right after a client connects).
#[cfg(windows)]
fn while_busy<T>(mut open: impl FnMut() -> io::Result<T>) -> io::Result<T> {
    const ERROR_PIPE_BUSY: i32 = 231;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
    loop {
        match open() {
            Err(e)
                if e.raw_os_error() == Some(ERROR_PIPE_BUSY)
                    && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(std::time::Duration::from_millis(10))
            }
            r => return r,
        }
    }
}

/// The process serving the pipe `name` a front opened, if it is this user's.
#[cfg(windows)]
fn checked_server(name: &str, pipe: std::os::windows::io::BorrowedHandle<'_>) -> io::Result<Peer> {
    let peer = crate::peer::of_pipe_server(pipe)?;
    let me = crate::peer::current_user()?;
    crate::peer::admit_server(name, &me, &peer)
        .map_err(|why| io::Error::new(io::ErrorKind::PermissionDenied, why))?;
    Ok(peer)
}

/// [`connect`], overlapped: a tokio pipe client, so one task may read while another writes
/// (a synchronous handle serialises the two). Must be called inside a tokio runtime.
#[cfg(windows)]
pub fn connect_async(
    name: &str,
) -> io::Result<(tokio::net::windows::named_pipe::NamedPipeClient, Peer)> {
    use std::os::windows::io::AsHandle;
    let pipe = while_busy(|| {
        tokio::net::windows::named_pipe::ClientOptions::new()
            .security_qos_flags(windows_sys::Win32::Storage::FileSystem::SECURITY_IDENTIFICATION)
            .open(name)
    })?;
    let peer = checked_server(name, pipe.as_handle())?;
    Ok((pipe, peer))
}

/// [`connect`] as two blocking halves that two threads may use at once (a console's reader
/// thread beside its key loop, a side writer beside a pending read): the pipe is opened
/// overlapped ([`connect_async`]) on a small tokio runtime in a thread of its own, which reads
/// into a channel the [`DuplexReader`] drains and writes what a [`DuplexWriter`] hands it,
/// answering each write once it is done (so a write that returned is on the pipe, as with a
/// blocking handle). Windows serialises a read pending on a synchronous handle with a write
/// from another thread; this does not.
#[cfg(windows)]
pub fn connect_duplex(name: &str) -> io::Result<(DuplexReader, DuplexWriter, Peer)> {
    use std::sync::mpsc::channel;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (chunks_tx, chunks) = channel::<io::Result<Vec<u8>>>();
    let (writes, mut to_write) = tokio::sync::mpsc::unbounded_channel::<Write>();
    let (opened_tx, opened) = channel::<io::Result<Peer>>();
    // Resolves when the reader half is dropped: the pipe closes once both halves are gone.
    let (gone, mut reader_gone) = tokio::sync::oneshot::channel::<()>();
    let name = name.to_string();
    std::thread::Builder::new()
        .name("pipe-io".into())
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
                let (pipe, peer) = match connect_async(&name) {
                    Ok(p) => p,
                    Err(e) => {
                        let _ = opened_tx.send(Err(e));
                        return;
                    }
                };
                let _ = opened_tx.send(Ok(peer));
                let (mut rd, mut wr) = tokio::io::split(pipe);
                // Ends when every writer half is gone, or at the first failed write.
                let writer = async move {
                    while let Some((bytes, done)) = to_write.recv().await {
                        let r = wr.write_all(&bytes).await;
                        let failed = r.is_err();
                        let _ = done.send(r);
                        if failed {
                            return;
                        }
                    }
                };
                // Ends at the pipe's end, a failed read, or when the reader half is gone.
                let reader = async move {
                    let mut buf = vec![0u8; DUPLEX_CHUNK];
                    loop {
                        let got = tokio::select! {
                            r = rd.read(&mut buf) => r.map(|n| buf[..n].to_vec()),
                            _ = &mut reader_gone => return,
                        };
                        let end = !matches!(&got, Ok(b) if !b.is_empty());
                        if chunks_tx.send(got).is_err() || end {
                            return;
                        }
                    }
                };
                // Both ended: the halves of the pipe drop here, which closes it.
                tokio::join!(reader, writer);
            });
        })?;
    let peer = opened
        .recv()
        .map_err(|_| io::Error::other("the pipe's thread ended before it connected"))??;
    Ok((
        DuplexReader {
            chunks,
            pending: Vec::new(),
            pos: 0,
            ended: false,
            _gone: gone,
        },
        DuplexWriter { writes },
        peer,
    ))
}

/// Bytes to write, and where to say how writing them went.
#[cfg(windows)]
type Write = (Vec<u8>, std::sync::mpsc::Sender<io::Result<()>>);

/// The most one read of a [`DuplexReader`]'s pipe takes at a time.
#[cfg(windows)]
const DUPLEX_CHUNK: usize = 64 * 1024;

/// The reading half of [`connect_duplex`]: blocks until the pipe has bytes; 0 at its end.
#[cfg(windows)]
pub struct DuplexReader {
    chunks: std::sync::mpsc::Receiver<io::Result<Vec<u8>>>,
    pending: Vec<u8>,
    pos: usize,
    ended: bool,
    /// Dropped with the reader: tells the pipe's thread nobody reads any more.
    _gone: tokio::sync::oneshot::Sender<()>,
}

#[cfg(windows)]
impl io::Read for DuplexReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.pos == self.pending.len() {
            if self.ended {
                return Ok(0);
            }
            match self.chunks.recv() {
                Ok(Ok(bytes)) if bytes.is_empty() => self.ended = true,
                Ok(Ok(bytes)) => (self.pending, self.pos) = (bytes, 0),
                Ok(Err(e)) => {
                    self.ended = true;
                    return Err(e);
                }
                // The thread is gone: as the pipe's end.
                Err(_) => self.ended = true,
            }
        }
        let n = buf.len().min(self.pending.len() - self.pos);
        buf[..n].copy_from_slice(&self.pending[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

/// The writing half of [`connect_duplex`]; a clone writes on the same pipe (each write whole).
#[cfg(windows)]
#[derive(Clone)]
pub struct DuplexWriter {
    writes: tokio::sync::mpsc::UnboundedSender<Write>,
}

#[cfg(windows)]
impl io::Write for DuplexWriter {
    /// Returns once the bytes are written to the pipe, or writing them failed.
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let closed = || io::Error::new(io::ErrorKind::BrokenPipe, "the pipe is closed");
        let (done, result) = std::sync::mpsc::channel();
        self.writes
            .send((buf.to_vec(), done))
            .map_err(|_| closed())?;
        result.recv().map_err(|_| closed())??;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::peer::{admit, current_user};

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    /// A client of this process is accepted with this process's pid and user; a second
    /// client after it is accepted too (the endpoint keeps listening).
    #[cfg(unix)]
    #[test]
    fn a_unix_endpoint_accepts_with_the_peer_the_kernel_names() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("front.sock");
        let std_listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        runtime().block_on(async {
            let mut l = Listener::from_std(std_listener).unwrap();
            for _ in 0..2 {
                let _client = std::os::unix::net::UnixStream::connect(&path).unwrap();
                let (_conn, peer) = l.accept().await.unwrap();
                assert_eq!(peer.pid, Some(std::process::id()));
                assert_eq!(admit(&current_user().unwrap(), &peer), Ok(()));
            }
        });
    }

    /// `connect_duplex`: a read pending in one thread does not hold up a write from another
    /// (the server answers only after it got the write, so a serialised pipe would hang here);
    /// 200 KB written at once arrive whole and in order; the server's end is the reader's 0,
    /// and a write after it fails.
    #[cfg(windows)]
    #[test]
    fn a_duplex_pipe_reads_in_one_thread_while_another_writes() {
        use std::io::{Read, Write};
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let name = format!(r"\\.\pipe\gatehouse-duplex-test-{}", std::process::id());
        let rt = runtime();
        let mut l = rt.block_on(async { Listener::bind(&name) }).unwrap();
        let server = std::thread::spawn({
            let name = name.clone();
            move || {
                let (reader, mut writer, peer) = connect_duplex(&name).unwrap();
                assert_eq!(peer.pid, Some(std::process::id()));
                // The reader waits first; the write comes after, from this thread.
                let (read_tx, read) = std::sync::mpsc::channel();
                std::thread::spawn(move || {
                    let mut reader = reader;
                    let mut got = vec![0u8; 4];
                    let _ = read_tx.send(reader.read_exact(&mut got).map(|()| got));
                    let mut rest = Vec::new();
                    let _ = read_tx.send(reader.read_to_end(&mut rest).map(|_| rest));
                });
                std::thread::sleep(std::time::Duration::from_millis(200));
                let big: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
                writer.write_all(&big).unwrap();
                let within = std::time::Duration::from_secs(10);
                let first = read.recv_timeout(within).expect("no answer within 10 s");
                assert_eq!(first.unwrap(), b"done");
                match read.recv_timeout(within) {
                    Ok(rest) => assert_eq!(rest.unwrap(), Vec::<u8>::new(), "bytes after the end"),
                    // Observed under Wine 8: a read pending on the client when the server
                    // closes its end never completes. Windows completes it (ERROR_BROKEN_PIPE).
                    Err(_) if crate::windows::running_under_wine() => println!(
                        "wine does not enforce: a pending overlapped read ending when the server closes the pipe (not verified here)"
                    ),
                    Err(e) => panic!("the reader saw no end within 10 s: {e}"),
                }
                // The server is gone: a write fails (at once, or once the pipe breaks).
                let mut failed = false;
                for _ in 0..50 {
                    if writer.write_all(b"late").is_err() {
                        failed = true;
                        break;
                    }
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                match (failed, crate::windows::running_under_wine()) {
                    (true, _) => {}
                    // The same Wine gap as the read's above.
                    (false, true) => println!(
                        "wine does not enforce: a write failing once the server closed the pipe (not verified here)"
                    ),
                    (false, false) => panic!("a write to a closed pipe succeeded"),
                }
            }
        });
        rt.block_on(async {
            let (mut conn, _) = l.accept().await.unwrap();
            let mut big = vec![0u8; 200_000];
            conn.read_exact(&mut big).await.unwrap();
            assert!(big.iter().enumerate().all(|(i, b)| *b == (i % 251) as u8));
            conn.write_all(b"done").await.unwrap();
            drop(conn);
        });
        server.join().unwrap();
    }

    /// The same under Wine (CI) and on Windows: two clients in turn, each with this process's
    /// pid and user SID, and the bytes they send; a second endpoint on the same name is refused
    /// on Windows (the first instance holds it; Wine does not refuse it, and says so) while
    /// another name binds. That the DACL keeps other users out is not checked: Wine has one
    /// user.
    #[cfg(windows)]
    #[test]
    fn a_pipe_endpoint_accepts_with_the_peer_windows_names_and_holds_its_name() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        use tokio::net::windows::named_pipe::ClientOptions;
        let name = format!(r"\\.\pipe\gatehouse-endpoint-test-{}", std::process::id());
        runtime().block_on(async {
            let mut l = Listener::bind(&name).unwrap();
            let squat = Listener::bind(&name);
            match (squat, crate::windows::running_under_wine()) {
                // Wine creates the "first" instance of a name that exists (observed: Wine 8).
                (Ok(_), true) => println!(
                    "wine does not enforce: FILE_FLAG_FIRST_PIPE_INSTANCE (not verified here)"
                ),
                // ERROR_ACCESS_DENIED, as documented for a name that exists.
                (Err(e), _) => assert_eq!(e.raw_os_error(), Some(5), "{e}"),
                (Ok(_), false) => panic!("a second endpoint took the name"),
            }
            let other = Listener::bind(&format!("{name}-other"));
            assert!(other.is_ok(), "{:?}", other.err());
            for round in 0u8..2 {
                let mut client = ClientOptions::new().open(&name).unwrap();
                let (mut conn, peer) = l.accept().await.unwrap();
                assert_eq!(peer.pid, Some(std::process::id()));
                assert_eq!(admit(&current_user().unwrap(), &peer), Ok(()));
                client.write_all(&[round]).await.unwrap();
                let mut got = [0u8; 1];
                conn.read_exact(&mut got).await.unwrap();
                assert_eq!(got, [round]);
            }
            // The front's side: `connect` names the server (this process, this user) and the
            // bytes cross both ways.
            let (mut front, server) = connect(&name).unwrap();
            assert_eq!(server.pid, Some(std::process::id()));
            assert_eq!(server.user, current_user().unwrap());
            let (mut conn, peer) = l.accept().await.unwrap();
            assert_eq!(peer.pid, Some(std::process::id()));
            std::io::Write::write_all(&mut front, b"ping").unwrap();
            let mut got = [0u8; 4];
            conn.read_exact(&mut got).await.unwrap();
            assert_eq!(&got, b"ping");
            conn.write_all(b"pong").await.unwrap();
            std::io::Read::read_exact(&mut front, &mut got).unwrap();
            assert_eq!(&got, b"pong");
            // No endpoint under a name: NotFound (ERROR_FILE_NOT_FOUND), nothing else tried.
            let e = connect(&format!("{name}-absent")).unwrap_err();
            assert_eq!(e.kind(), std::io::ErrorKind::NotFound, "{e}");
        });
    }
}
