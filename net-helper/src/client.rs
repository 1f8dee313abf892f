//! A proxy client connection handed over as a descriptor: check what it is, adopt it, serve it.

use crate::proxy::Proxy;
use crate::relay::ClientConn;
use ipc_schema::helper::Passed;
use ipc_schema::net::{EgressRecord, EgressVerdict};
#[cfg(unix)]
use rustix::net::{sockopt, AddressFamily, SocketType};
use tokio::net::TcpStream;
#[cfg(unix)]
use tokio::net::UnixStream;

/// Serves the connection behind `fd` (a connected Unix or TCP stream socket).
pub async fn serve_client(proxy: &Proxy, session: &str, fd: Passed) -> EgressRecord {
    match adopt(fd) {
        Ok(conn) => proxy.serve(session, conn).await,
        Err(reason) => EgressRecord {
            session: session.to_string(),
            target: "-".into(),
            verdict: EgressVerdict::Refused { status: 0, reason },
        },
    }
}

/// Windows: the socket the broker duplicated into this process (checked there: an open,
/// connected stream socket of this process).
#[cfg(windows)]
fn adopt(passed: Passed) -> Result<ClientConn, String> {
    let bad = |e: std::io::Error| format!("the socket is not usable: {e}");
    let s = sandbox::windows::adopt_passed_socket(passed).map_err(|e| e.to_string())?;
    s.set_nonblocking(true).map_err(bad)?;
    let _ = s.set_nodelay(true);
    Ok(ClientConn::Tcp(TcpStream::from_std(s).map_err(bad)?))
}

#[cfg(unix)]
fn adopt(fd: Passed) -> Result<ClientConn, String> {
    let bad = |e: std::io::Error| format!("the descriptor is not usable: {e}");
    let errno = |e: rustix::io::Errno| bad(e.into());
    if sockopt::socket_type(&fd).map_err(errno)? != SocketType::STREAM {
        return Err("the descriptor is not a stream socket".into());
    }
    if sockopt::socket_acceptconn(&fd).map_err(errno)? {
        return Err("the descriptor is a listening socket, not a connection".into());
    }
    match sockopt::socket_domain(&fd).map_err(errno)? {
        AddressFamily::UNIX => {
            let s = std::os::unix::net::UnixStream::from(fd);
            s.set_nonblocking(true).map_err(bad)?;
            Ok(ClientConn::Unix(UnixStream::from_std(s).map_err(bad)?))
        }
        AddressFamily::INET | AddressFamily::INET6 => {
            let s = std::net::TcpStream::from(fd);
            s.set_nonblocking(true).map_err(bad)?;
            let _ = s.set_nodelay(true);
            Ok(ClientConn::Tcp(TcpStream::from_std(s).map_err(bad)?))
        }
        domain => Err(format!(
            "the descriptor is a socket of family {domain:?}, not Unix or TCP"
        )),
    }
}
