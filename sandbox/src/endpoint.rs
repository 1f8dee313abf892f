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
        let next = crate::windows::user_only_pipe(name, true)?;
        Ok(Listener {
            name: name.to_string(),
            next,
        })
    }

    /// The next connection and its peer (the pipe's client process and its token's user).
    pub async fn accept(&mut self) -> io::Result<(Conn, Peer)> {
        use std::os::windows::io::AsHandle;
        let connected = self.next.connect().await;
        // The next client gets a new instance; this one is the connection (or, if connecting
        // failed, e.g. a client that came and went, it is dropped rather than reused).
        let fresh = crate::windows::user_only_pipe(&self.name, false)?;
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
