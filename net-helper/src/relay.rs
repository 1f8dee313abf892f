//! A tunnel's byte relay: both directions at once, half-close passed on, an idle limit, a byte
//! limit, and an early end when the session is closed.
//!
//! The bytes are copied through a buffer. A `splice(2)` relay (socket to pipe to socket, the
//! payload never entering the process) was measured against it in the same `bench net` runs and
//! gained nothing on loopback (bench/RESULTS.md), so it is not here: the helper's seccomp
//! profile needs no `pipe2` or `splice`.

use crate::error::{human_bytes, human_duration};
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpStream, UnixStream};
use tokio::sync::watch;

/// Per-direction buffer.
pub const RELAY_BUF: usize = 256 * 1024;
#[derive(Debug, Clone, Copy)]
pub struct RelayLimits {
    pub idle: Duration,
    pub max_bytes: u64,
}

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
    Unix(UnixStream),
    Tcp(TcpStream),
}

impl ClientConn {
    /// The socket, whichever kind it is.
    pub fn io(&mut self) -> &mut dyn crate::Io {
        match self {
            ClientConn::Unix(s) => s,
            ClientConn::Tcp(s) => s,
        }
    }
}

enum PumpEnd {
    Eof,
    ByteLimit,
    Error(String),
}

struct Shared {
    start: Instant,
    /// Milliseconds since `start` of the last byte moved either way.
    last: AtomicU64,
    total: AtomicU64,
    max: u64,
}

impl Shared {
    /// Counts `n` bytes about to move; false once the byte limit would be passed.
    fn admit(&self, n: usize) -> bool {
        self.total.fetch_add(n as u64, Ordering::Relaxed) + n as u64 <= self.max
    }

    fn moved(&self, counter: &AtomicU64, n: usize) {
        counter.fetch_add(n as u64, Ordering::Relaxed);
        self.last
            .store(self.start.elapsed().as_millis() as u64, Ordering::Relaxed);
    }
}

async fn copy_pump<R, W>(mut r: R, mut w: W, moved: &AtomicU64, sh: &Shared, what: &str) -> PumpEnd
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    // Uninitialised capacity (read_buf): a tunnel's first byte does not wait for 256 KiB of
    // zeroing.
    let mut buf = bytes::BytesMut::with_capacity(RELAY_BUF);
    loop {
        buf.clear();
        let n = match r.read_buf(&mut buf).await {
            Ok(0) => {
                // Pass the half-close on; the other direction keeps running.
                let _ = w.shutdown().await;
                return PumpEnd::Eof;
            }
            Ok(n) => n,
            Err(e) => return PumpEnd::Error(format!("{what} read: {e}")),
        };
        if !sh.admit(n) {
            return PumpEnd::ByteLimit;
        }
        if let Err(e) = w.write_all(&buf[..n]).await {
            return PumpEnd::Error(format!("{what} write: {e}"));
        }
        sh.moved(moved, n);
    }
}

/// Relays between `client` and `upstream` until both directions ended, a limit was reached, or
/// `closed` turned true.
pub async fn relay(
    client: &mut ClientConn,
    upstream: &mut TcpStream,
    limits: RelayLimits,
    closed: watch::Receiver<bool>,
) -> RelayOutcome {
    let sh = Shared {
        start: Instant::now(),
        last: AtomicU64::new(0),
        total: AtomicU64::new(0),
        max: limits.max_bytes,
    };
    let (up, down) = (AtomicU64::new(0), AtomicU64::new(0));
    let (ur, uw) = upstream.split();
    let ended = match client {
        ClientConn::Tcp(c) => {
            let (cr, cw) = c.split();
            let u = copy_pump(cr, uw, &up, &sh, "client");
            let d = copy_pump(ur, cw, &down, &sh, "upstream");
            drive(u, d, &sh, limits, closed).await
        }
        ClientConn::Unix(c) => {
            let (cr, cw) = c.split();
            let u = copy_pump(cr, uw, &up, &sh, "client");
            let d = copy_pump(ur, cw, &down, &sh, "upstream");
            drive(u, d, &sh, limits, closed).await
        }
    };
    RelayOutcome {
        up: up.load(Ordering::Relaxed),
        down: down.load(Ordering::Relaxed),
        ended,
    }
}

/// Runs both directions with the idle watch and the session's closing.
async fn drive(
    up_f: impl Future<Output = PumpEnd>,
    down_f: impl Future<Output = PumpEnd>,
    sh: &Shared,
    limits: RelayLimits,
    mut closed: watch::Receiver<bool>,
) -> String {
    tokio::pin!(up_f, down_f);
    let (mut up_done, mut down_done) = (false, false);
    let tick = (limits.idle / 4).clamp(Duration::from_millis(10), Duration::from_secs(1));
    let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + tick, tick);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let end = tokio::select! {
            e = &mut up_f, if !up_done => { up_done = true; e }
            e = &mut down_f, if !down_done => { down_done = true; e }
            _ = ticker.tick() => {
                let idle_ms = sh.start.elapsed().as_millis() as u64 - sh.last.load(Ordering::Relaxed);
                if idle_ms >= limits.idle.as_millis() as u64 {
                    return format!("idle for {} (the idle limit)", human_duration(limits.idle));
                }
                continue;
            }
            _ = closed.wait_for(|c| *c) => return "the session was closed".to_string(),
        };
        match end {
            PumpEnd::Eof if up_done && down_done => return "closed".to_string(),
            PumpEnd::Eof => {}
            PumpEnd::ByteLimit => {
                return format!(
                    "reached {} (the tunnel byte limit)",
                    human_bytes(limits.max_bytes)
                )
            }
            PumpEnd::Error(e) => return e,
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

    #[tokio::test]
    async fn bytes_and_half_closes_pass_with_tcp_and_unix_clients() {
        {
            for unix in [false, true] {
                let (mut app, client) = if unix {
                    let (a, b) = UnixStream::pair().unwrap();
                    (ClientConn::Unix(a), ClientConn::Unix(b))
                } else {
                    let (a, b) = tcp_pair().await;
                    (ClientConn::Tcp(a), ClientConn::Tcp(b))
                };
                let (mut up, mut server) = tcp_pair().await;
                let limits = RelayLimits {
                    idle: Duration::from_secs(30),
                    max_bytes: 1 << 20,
                };
                let (_tx, rx) = watch::channel(false);
                let task = tokio::spawn(async move {
                    let mut client = client;
                    relay(&mut client, &mut up, limits, rx).await
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
