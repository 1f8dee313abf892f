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

/// Unix (Linux and macOS alike): a connected stream socket, Unix or TCP. Whether it is
/// connected is asked of `getpeername` and its family of `getsockname`, which both systems
/// answer (macOS has neither `SO_DOMAIN` nor `SO_ACCEPTCONN`).
#[cfg(unix)]
fn adopt(fd: Passed) -> Result<ClientConn, String> {
    let bad = |e: std::io::Error| format!("the descriptor is not usable: {e}");
    let errno = |e: rustix::io::Errno| bad(e.into());
    if sockopt::socket_type(&fd).map_err(errno)? != SocketType::STREAM {
        return Err("the descriptor is not a stream socket".into());
    }
    match rustix::net::getpeername(&fd) {
        Ok(_) => {}
        Err(rustix::io::Errno::NOTCONN) => {
            return Err(
                "the descriptor is not a connection (a listening or unconnected socket)".into(),
            )
        }
        Err(e) => return Err(errno(e)),
    }
    match rustix::net::getsockname(&fd)
        .map_err(errno)?
        .address_family()
    {
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

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::os::fd::OwnedFd;

    fn refused(fd: impl Into<OwnedFd>) -> String {
        match adopt(fd.into()) {
            Ok(_) => panic!("adopted"),
            Err(e) => e,
        }
    }

    #[tokio::test]
    async fn only_a_connected_stream_socket_is_adopted() {
        // Controls: a Unix stream pair and a connected TCP socket are adopted as what they are.
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        assert!(matches!(adopt(a.into()), Ok(ClientConn::Unix(_))));
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let tcp = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        assert!(matches!(adopt(tcp.into()), Ok(ClientConn::Tcp(_))));
        // A listening socket, a datagram socket, an unconnected stream socket, a file.
        assert_eq!(
            refused(listener),
            "the descriptor is not a connection (a listening or unconnected socket)"
        );
        let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        assert_eq!(refused(udp), "the descriptor is not a stream socket");
        let unconnected =
            rustix::net::socket(AddressFamily::INET, SocketType::STREAM, None).unwrap();
        assert_eq!(
            refused(unconnected),
            "the descriptor is not a connection (a listening or unconnected socket)"
        );
        let file = std::fs::File::open("/dev/null").unwrap();
        let e = refused(file);
        assert!(e.starts_with("the descriptor is not usable: "), "{e}");
        assert!(
            e.contains("os error 38") || e.contains("os error 88"),
            "{e}"
        );
    }
}
