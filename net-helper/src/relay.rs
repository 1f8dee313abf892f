//! A tunnel's byte relay: both directions at once, half-close passed on, an idle limit, a byte
//! limit, and an early end when the session is closed.
//!
//! The bytes are copied through a buffer. A `splice(2)` relay (socket to pipe to socket, the
//! payload never entering the process) was measured against it in the same `bench net` runs and
//! gained nothing on loopback (bench/RESULTS.md), so it is not here: the helper's seccomp
//! profile needs no `pipe2` or `splice`.

use crate::error::{human_bytes, human_duration};
use ipc_schema::net::ProxyLimits;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
#[cfg(unix)]
use tokio::net::UnixStream;
use tokio::sync::watch;

/// Per-direction buffer.
pub const RELAY_BUF: usize = 256 * 1024;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelayOutcome {
    /// Client to upstream.
    pub up: u64,
    /// Upstream to client.
    pub down: u64,
    /// `closed`, or what ended the tunnel.
    pub ended: String,
}

/// A proxy client's connection: a Unix or TCP stream socket.
pub enum ClientConn {
    #[cfg(unix)]
    Unix(UnixStream),
    Tcp(TcpStream),
}

impl ClientConn {
    /// The socket, whichever kind it is.
    pub fn io(&mut self) -> &mut dyn crate::Io {
        match self {
            #[cfg(unix)]
            ClientConn::Unix(s) => s,
            ClientConn::Tcp(s) => s,
        }
    }
}

/// What both directions of a tunnel share.
struct Shared {
    limits: ProxyLimits,
    start: Instant,
    /// Milliseconds since `start` of the last byte moved either way.
    last: AtomicU64,
    /// Bytes moved each way, and bytes admitted both ways together (against the byte limit).
    up: AtomicU64,
    down: AtomicU64,
    total: AtomicU64,
}

/// Copies `r` to `w` until `r` ends (`Ok`: the half-close is passed on, the other direction
/// keeps running) or the byte limit or an error ends the tunnel (`Err`: why).
async fn pump<R: AsyncRead + Unpin, W: AsyncWrite + Unpin>(
    mut r: R,
    mut w: W,
    moved: &AtomicU64,
    sh: &Shared,
    what: &str,
) -> Result<(), String> {
    // Uninitialised capacity (read_buf): a tunnel's first byte does not wait for 256 KiB of
    // zeroing.
    let mut buf = bytes::BytesMut::with_capacity(RELAY_BUF);
    let max = sh.limits.max_tunnel_bytes;
    loop {
        buf.clear();
        let n = match r.read_buf(&mut buf).await {
            Ok(0) => {
                // Pass the half-close on; the other direction keeps running.
                let _ = w.shutdown().await;
                return Ok(());
            }
            Ok(n) => n as u64,
            Err(e) => return Err(format!("{what} read: {e}")),
        };
        if sh.total.fetch_add(n, Relaxed) + n > max {
            let max = human_bytes(max);
            return Err(format!("reached {max} (the tunnel byte limit)"));
        }
        w.write_all(&buf)
            .await
            .map_err(|e| format!("{what} write: {e}"))?;
        moved.fetch_add(n, Relaxed);
        sh.last
            .store(sh.start.elapsed().as_millis() as u64, Relaxed);
    }
}

/// Relays between `client` and `upstream` until both directions ended, a limit was reached, or
/// `closed` turned true.
pub async fn relay(
    client: &mut ClientConn,
    upstream: &mut TcpStream,
    limits: &ProxyLimits,
    closed: watch::Receiver<bool>,
) -> RelayOutcome {
    let sh = Shared {
        limits: *limits,
        start: Instant::now(),
        last: AtomicU64::new(0),
        up: AtomicU64::new(0),
        down: AtomicU64::new(0),
        total: AtomicU64::new(0),
    };
    let ended = match client {
        ClientConn::Tcp(c) => drive(c.split(), upstream.split(), &sh, closed).await,
        #[cfg(unix)]
        ClientConn::Unix(c) => drive(c.split(), upstream.split(), &sh, closed).await,
    };
    let (up, down) = (sh.up.load(Relaxed), sh.down.load(Relaxed));
    RelayOutcome { up, down, ended }
}

/// Runs both directions with the idle watch and the session's closing.
async fn drive(
    client: (impl AsyncRead + Unpin, impl AsyncWrite + Unpin),
    upstream: (impl AsyncRead + Unpin, impl AsyncWrite + Unpin),
    sh: &Shared,
    mut closed: watch::Receiver<bool>,
) -> String {
    let up_f = pump(client.0, upstream.1, &sh.up, sh, "client");
    let down_f = pump(upstream.0, client.1, &sh.down, sh, "upstream");
    tokio::pin!(up_f, down_f);
    let (mut up_done, mut down_done) = (false, false);
    let idle = Duration::from_millis(sh.limits.idle_ms.into());
    let tick = (idle / 4).clamp(Duration::from_millis(10), Duration::from_secs(1));
    let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + tick, tick);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let end = tokio::select! {
            e = &mut up_f, if !up_done => { up_done = true; e }
            e = &mut down_f, if !down_done => { down_done = true; e }
            _ = ticker.tick() => {
                let idle_ms = sh.start.elapsed().as_millis() as u64 - sh.last.load(Relaxed);
                if idle_ms >= idle.as_millis() as u64 {
                    return format!("idle for {} (the idle limit)", human_duration(idle));
                }
                continue;
            }
            _ = closed.wait_for(|c| *c) => return "the session was closed".to_string(),
        };
        match end {
            Ok(()) if up_done && down_done => return "closed".to_string(),
            Ok(()) => {}
            Err(why) => return why,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::TcpListener;

    async fn tcp_pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let a = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (b, _) = l.accept().await.unwrap();
        (a, b)
    }

    #[cfg(unix)]
    fn unix_pair() -> (ClientConn, ClientConn) {
        let (a, b) = UnixStream::pair().unwrap();
        (ClientConn::Unix(a), ClientConn::Unix(b))
    }
    #[cfg(not(unix))]
    fn unix_pair() -> (ClientConn, ClientConn) {
        unreachable!("no Unix stream sockets on this OS")
    }

    #[tokio::test]
    async fn bytes_and_half_closes_pass_with_tcp_and_unix_clients() {
        {
            // Unix clients where there are any (the Linux sandboxes' connections).
            for unix in [false, cfg!(unix)] {
                let (mut app, client) = if unix {
                    unix_pair()
                } else {
                    let (a, b) = tcp_pair().await;
                    (ClientConn::Tcp(a), ClientConn::Tcp(b))
                };
                let (mut up, mut server) = tcp_pair().await;
                let limits = ProxyLimits {
                    max_tunnels: 1,
                    idle_ms: 30_000,
                    max_tunnel_bytes: 1 << 20,
                };
                let (_tx, rx) = watch::channel(false);
                let task = tokio::spawn(async move {
                    let mut client = client;
                    relay(&mut client, &mut up, &limits, rx).await
                });
                app.io().write_all(b"hello").await.unwrap();
                let mut buf = [0u8; 5];
                server.read_exact(&mut buf).await.unwrap();
                assert_eq!(&buf, b"hello");
                server.write_all(b"worlds").await.unwrap();
                let mut buf = [0u8; 6];
                app.io().read_exact(&mut buf).await.unwrap();
                assert_eq!(&buf, b"worlds");
                app.io().shutdown().await.unwrap();
                let mut rest = Vec::new();
                server.read_to_end(&mut rest).await.unwrap();
                assert!(rest.is_empty(), "the half-close reached the server");
                server.shutdown().await.unwrap();
                let out = task.await.unwrap();
                assert_eq!(
                    out,
                    RelayOutcome {
                        up: 5,
                        down: 6,
                        ended: "closed".into()
                    },
                    "unix={unix}"
                );
            }
        }
    }
}
