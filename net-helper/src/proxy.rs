//! The egress proxy: HTTP CONNECT only, per-session token, allowlist, ports and limits, the same
//! address table as fetches, optional SNI check, then a byte relay. Every client connection ends
//! in one [`EgressRecord`], which the broker writes to the audit log.

use crate::allowlist::{parse_host, Allowlist};
use crate::connect::{connect_pinned, judged_addresses};
use crate::error::{human_duration, FetchError};
use crate::relay::{relay, ClientConn, RelayLimits};
use crate::sni::{parse_first_flight, FirstFlight};
use crate::target::Host;
use crate::NetContext;
use base64::Engine;
use ipc_schema::net::{EgressRecord, EgressVerdict, ProxySession, RefusalKind};
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::watch;

/// The request head must arrive within this and fit in [`MAX_HEAD`].
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
pub const MAX_HEAD: usize = 8 * 1024;
/// Upstream name lookup plus TCP connect.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// The ClientHello must arrive within this and fit in [`MAX_HELLO`] (SNI check only).
pub const HELLO_TIMEOUT: Duration = Duration::from_secs(10);
pub const MAX_HELLO: usize = 32 * 1024;

struct Session {
    cfg: ProxySession,
    allow: Allowlist,
    /// Shared with the session's earlier settings, so replacing them does not reset the count.
    open: Arc<AtomicU32>,
    closed: watch::Sender<bool>,
}

/// All proxy sessions of this helper.
pub struct Proxy {
    ctx: Arc<NetContext>,
    sessions: Mutex<HashMap<String, Arc<Session>>>,
    total_open: Arc<AtomicU32>,
    max_total: u32,
}

/// Holds one tunnel slot in the session and the total; frees both when dropped.
struct Slot(Arc<AtomicU32>, Arc<AtomicU32>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
        self.1.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A refusal (or, when `failed`, a failure) on its way to the client (unless `status` is 0) and
/// the audit log.
#[derive(Debug)]
struct Refusal {
    status: u16,
    reason: String,
    failed: bool,
}

fn refuse(status: u16, reason: impl Into<String>) -> Refusal {
    let reason = reason.into();
    Refusal {
        status,
        reason,
        failed: false,
    }
}

fn fail(status: u16, reason: String) -> Refusal {
    Refusal {
        failed: true,
        ..refuse(status, reason)
    }
}

impl Proxy {
    pub fn new(ctx: Arc<NetContext>, max_total: u32) -> Proxy {
        Proxy {
            ctx,
            sessions: Mutex::new(HashMap::new()),
            total_open: Arc::new(AtomicU32::new(0)),
            max_total,
        }
    }

    fn sessions(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Session>>> {
        self.sessions.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts a session or replaces its settings.
    pub fn open(&self, cfg: ProxySession) -> Result<(), String> {
        if cfg.session.is_empty() || cfg.session.len() > 128 {
            return Err("a session name must have 1 to 128 bytes".into());
        }
        if cfg.token.len() < 16 {
            return Err("a proxy token must have at least 16 bytes".into());
        }
        if cfg.limits.max_tunnels == 0
            || cfg.limits.idle_ms == 0
            || cfg.limits.max_tunnel_bytes == 0
        {
            return Err("proxy limits must be above zero".into());
        }
        if cfg.ports.contains(&0) {
            return Err("port 0 cannot be allowed".into());
        }
        let allow = Allowlist::parse(&cfg.allow)?;
        let mut sessions = self.sessions();
        let open = sessions
            .get(&cfg.session)
            .map(|s| s.open.clone())
            .unwrap_or_default();
        let name = cfg.session.clone();
        sessions.insert(
            name,
            Arc::new(Session {
                cfg,
                allow,
                open,
                closed: watch::channel(false).0,
            }),
        );
        Ok(())
    }

    /// Ends a session; returns how many tunnels it had open, or `None` for an unknown session.
    pub fn close(&self, session: &str) -> Option<u32> {
        let s = self.sessions().remove(session)?;
        s.closed.send_replace(true);
        Some(s.open.load(Ordering::SeqCst))
    }

    /// Serves one client connection to its end.
    pub async fn serve(&self, session: &str, mut conn: ClientConn) -> EgressRecord {
        let mut target = "-".to_string();
        let verdict = match self.serve_inner(session, &mut conn, &mut target).await {
            Ok(v) => v,
            Err(r) => {
                if r.status != 0 {
                    let _ = respond(&mut conn, r.status, &r.reason).await;
                }
                let (status, reason) = (r.status, r.reason);
                match r.failed {
                    true => EgressVerdict::Failed { status, reason },
                    false => EgressVerdict::Refused { status, reason },
                }
            }
        };
        EgressRecord {
            session: session.to_string(),
            target,
            verdict,
        }
    }

    async fn serve_inner(
        &self,
        session: &str,
        conn: &mut ClientConn,
        target_out: &mut String,
    ) -> Result<EgressVerdict, Refusal> {
        // The request is read before anything is answered, so the client is never cut off
        // while it still writes (it would see a reset instead of the answer).
        let (head, early) = read_head(conn).await?;
        let req = parse_request(&head)?;
        *target_out = printable(&req.target);
        let sess = self.sessions().get(session).cloned();
        let Some(sess) = sess else {
            return Err(refuse(403, format!("unknown session {session}")));
        };
        check_token(&req, &sess.cfg.token)?;
        if req.method != "CONNECT" {
            return Err(refuse(
                403,
                format!(
                    "method {} is not allowed (CONNECT only)",
                    printable(&req.method)
                ),
            ));
        }
        let (host, port) = parse_authority(&req.target)?;
        let ports: &[u16] = if sess.cfg.ports.is_empty() {
            &[443]
        } else {
            &sess.cfg.ports
        };
        if !ports.contains(&port) {
            let list: Vec<String> = ports.iter().map(u16::to_string).collect();
            return Err(refuse(
                403,
                format!("port {port} is not allowed (only {})", list.join(", ")),
            ));
        }
        if !sess.allow.allows(&host) {
            return Err(refuse(
                403,
                match host {
                    Host::Name(n) => format!("{n} is not on the session's allowlist"),
                    Host::Ip(a) => format!("IP-literal target {a} is not allowed by address"),
                },
            ));
        }
        let _slot = self.take_slot(&sess)?;

        // Refusals need the addresses, so the lookup and the judgement come before any answer.
        let judged = tokio::time::timeout(
            CONNECT_TIMEOUT,
            judged_addresses(&self.ctx.resolver, &self.ctx.policy, &host),
        )
        .await;
        let addrs = match judged {
            Err(_) => {
                let within = human_duration(CONNECT_TIMEOUT);
                return Err(fail(
                    504,
                    format!("the lookup of {host} did not finish within {within}"),
                ));
            }
            Ok(Err(FetchError::Refused(kind, reason))) if kind != RefusalKind::Name => {
                return Err(refuse(403, reason));
            }
            Ok(Err(FetchError::Refused(_, reason) | FetchError::Failed(reason))) => {
                return Err(fail(502, reason))
            }
            Ok(Ok(addrs)) => addrs,
        };
        // The upstream connection is made while the 200 goes out and the client's first bytes
        // come in, so opening a tunnel costs one round trip less (bench net). Its failure then
        // closes the tunnel instead of answering 502; the audit row says why.
        let connecting = tokio::spawn(async move {
            tokio::time::timeout(CONNECT_TIMEOUT, connect_pinned(&addrs, port)).await
        });
        let abort = connecting.abort_handle();
        if let Err(e) = conn
            .io()
            .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
            .await
        {
            abort.abort();
            return Err(refuse(0, format!("the client went away: {e}")));
        }
        let mut first = early;
        if let (true, Host::Name(want)) = (sess.cfg.sni_check, &host) {
            first = read_hello(conn, first, want)
                .await
                .inspect_err(|_| abort.abort())?;
        }
        let (mut upstream, addr) = match connecting.await {
            Ok(Ok(Ok(up))) => up,
            Ok(Ok(Err(e))) => return Err(fail(0, e.reason().to_string())),
            Ok(Err(_)) => {
                let within = human_duration(CONNECT_TIMEOUT);
                return Err(fail(
                    0,
                    format!("{host}:{port} was not reached within {within}"),
                ));
            }
            Err(e) => return Err(fail(0, format!("connecting failed: {e}"))),
        };
        if !first.is_empty() {
            if let Err(e) = upstream.write_all(&first).await {
                return Ok(tunnel_end(addr, port, 0, 0, format!("upstream write: {e}")));
            }
        }
        let limits = RelayLimits {
            idle: Duration::from_millis(sess.cfg.limits.idle_ms.into()),
            max_bytes: sess.cfg.limits.max_tunnel_bytes,
        };
        let out = relay(conn, &mut upstream, limits, sess.closed.subscribe()).await;
        Ok(tunnel_end(
            addr,
            port,
            out.up + first.len() as u64,
            out.down,
            out.ended,
        ))
    }

    fn take_slot(&self, sess: &Session) -> Result<Slot, Refusal> {
        let max = sess.cfg.limits.max_tunnels;
        if sess.open.fetch_add(1, Ordering::SeqCst) >= max {
            sess.open.fetch_sub(1, Ordering::SeqCst);
            return Err(refuse(
                403,
                format!(
                    "session {} has {max} tunnels open (its tunnel limit)",
                    sess.cfg.session
                ),
            ));
        }
        if self.total_open.fetch_add(1, Ordering::SeqCst) >= self.max_total {
            self.total_open.fetch_sub(1, Ordering::SeqCst);
            sess.open.fetch_sub(1, Ordering::SeqCst);
            return Err(refuse(
                403,
                format!(
                    "the proxy has {} tunnels open (the total tunnel limit)",
                    self.max_total
                ),
            ));
        }
        Ok(Slot(sess.open.clone(), self.total_open.clone()))
    }
}

fn tunnel_end(address: IpAddr, port: u16, up: u64, down: u64, ended: String) -> EgressVerdict {
    EgressVerdict::Tunnelled {
        address,
        port,
        bytes_up: up,
        bytes_down: down,
        ended,
    }
}

/// Reads up to the end of the request head; returns the head and any bytes after it.
async fn read_head(rd: &mut ClientConn) -> Result<(Vec<u8>, Vec<u8>), Refusal> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 2048];
    let read = async {
        loop {
            if let Some(end) = find_head_end(&buf) {
                let early = buf.split_off(end);
                return Ok((std::mem::take(&mut buf), early));
            }
            if buf.len() > MAX_HEAD {
                return Err(refuse(
                    431,
                    format!("the request head exceeds {MAX_HEAD} bytes"),
                ));
            }
            match rd.io().read(&mut chunk).await {
                Ok(0) => return Err(refuse(0, "the client closed before sending a request")),
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
                Err(e) => return Err(refuse(0, format!("reading the request failed: {e}"))),
            }
        }
    };
    let late = || {
        Err(refuse(
            408,
            format!("no request within {}", human_duration(HEAD_TIMEOUT)),
        ))
    };
    tokio::time::timeout(HEAD_TIMEOUT, read)
        .await
        .unwrap_or_else(|_| late())
}

fn find_head_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n").map(|p| p + 4)
}

struct Request {
    method: String,
    target: String,
    proxy_auth: Vec<String>,
}

fn parse_request(head: &[u8]) -> Result<Request, Refusal> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(head) {
        Ok(httparse::Status::Complete(_)) => {}
        Ok(httparse::Status::Partial) => return Err(refuse(400, "incomplete request head")),
        Err(e) => return Err(refuse(400, format!("malformed request ({e})"))),
    }
    let proxy_auth = req
        .headers
        .iter()
        .filter(|h| h.name.eq_ignore_ascii_case("proxy-authorization"))
        .map(|h| String::from_utf8_lossy(h.value).into_owned())
        .collect();
    Ok(Request {
        method: req.method.unwrap_or_default().to_string(),
        target: req.path.unwrap_or_default().to_string(),
        proxy_auth,
    })
}

/// At most 200 printable ASCII characters of something a client sent, for audit rows.
fn printable(s: &str) -> String {
    s.chars()
        .take(200)
        .map(|c| if c.is_ascii_graphic() { c } else { '?' })
        .collect()
}

fn check_token(req: &Request, token: &str) -> Result<(), Refusal> {
    let Some(value) = req.proxy_auth.first() else {
        return Err(refuse(407, "no proxy token (Proxy-Authorization)"));
    };
    if req.proxy_auth.len() > 1 {
        return Err(refuse(407, "more than one Proxy-Authorization header"));
    }
    let given = match value.trim().split_once(' ') {
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("basic") => {
            base64::engine::general_purpose::STANDARD
                .decode(rest.trim())
                .ok()
                .and_then(|b| String::from_utf8(b).ok())
                .and_then(|s| s.split_once(':').map(|(_, p)| p.to_string()))
        }
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("bearer") => {
            Some(rest.trim().to_string())
        }
        _ => None,
    };
    match given {
        Some(g) if constant_time_eq(g.as_bytes(), token.as_bytes()) => Ok(()),
        _ => Err(refuse(407, "wrong proxy token")),
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// `host:port` (authority form), the host parsed as a URL parser would.
fn parse_authority(t: &str) -> Result<(Host, u16), Refusal> {
    let bad = |why: &str| refuse(400, format!("CONNECT target {} {why}", printable(t)));
    let (host, port) = t.rsplit_once(':').ok_or_else(|| bad("has no port"))?;
    if host.starts_with('[') != host.ends_with(']') {
        return Err(bad("is not host:port"));
    }
    let port: u16 = port.parse().map_err(|_| bad("has an invalid port"))?;
    if port == 0 {
        return Err(bad("has port 0"));
    }
    let host = parse_host(host)
        .map_err(|e| refuse(403, format!("CONNECT target {}: {e}", printable(t))))?;
    Ok((host, port))
}

async fn read_hello(rd: &mut ClientConn, mut buf: Vec<u8>, want: &str) -> Result<Vec<u8>, Refusal> {
    let mut chunk = [0u8; 4096];
    let read = async {
        loop {
            let refused = match parse_first_flight(&buf) {
                FirstFlight::Hello(Some(sni)) if sni == want => return Ok(()),
                FirstFlight::Hello(Some(sni)) => format!(
                    "SNI {} does not match the CONNECT host {want}",
                    printable(&sni)
                ),
                FirstFlight::Hello(None) => {
                    format!("the TLS ClientHello has no SNI (the CONNECT host is {want})")
                }
                FirstFlight::NotTls(e) => {
                    format!("the tunnel does not start with a TLS ClientHello ({e})")
                }
                FirstFlight::Incomplete if buf.len() > MAX_HELLO => {
                    format!("no complete TLS ClientHello in the first {MAX_HELLO} bytes")
                }
                FirstFlight::Incomplete => match rd.io().read(&mut chunk).await {
                    Ok(0) => "the client closed before its TLS ClientHello".into(),
                    Ok(n) => {
                        buf.extend_from_slice(&chunk[..n]);
                        continue;
                    }
                    Err(e) => format!("reading the ClientHello failed: {e}"),
                },
            };
            return Err(refuse(0, refused));
        }
    };
    match tokio::time::timeout(HELLO_TIMEOUT, read).await {
        Ok(Ok(())) => Ok(buf),
        Ok(Err(r)) => Err(r),
        Err(_) => {
            let within = human_duration(HELLO_TIMEOUT);
            Err(refuse(0, format!("no TLS ClientHello within {within}")))
        }
    }
}

async fn respond(wr: &mut ClientConn, status: u16, reason: &str) -> std::io::Result<()> {
    // (400 Bad Request, 403 Forbidden, 407 Proxy Authentication Required, ...)
    let phrase = http::StatusCode::from_u16(status).ok();
    let phrase = phrase.and_then(|s| s.canonical_reason()).unwrap_or("Error");
    let body = format!("refused: {reason}\n");
    let auth = if status == 407 {
        "Proxy-Authenticate: Basic realm=\"gatehouse\"\r\n"
    } else {
        ""
    };
    let msg = format!(
        "HTTP/1.1 {status} {phrase}\r\n{auth}Content-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    wr.io().write_all(msg.as_bytes()).await?;
    wr.io().shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(auth: &[&str]) -> Request {
        Request {
            method: "CONNECT".into(),
            target: "a:443".into(),
            proxy_auth: auth.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn token_forms() {
        let tok = "0123456789abcdef";
        let basic = base64::engine::general_purpose::STANDARD.encode(format!("gatehouse:{tok}"));
        assert!(check_token(&req(&[&format!("Basic {basic}")]), tok).is_ok());
        assert!(check_token(&req(&[&format!("bearer {tok}")]), tok).is_ok());
        assert_eq!(check_token(&req(&[]), tok).unwrap_err().status, 407);
        assert_eq!(
            check_token(&req(&["Bearer nope"]), tok).unwrap_err().reason,
            "wrong proxy token"
        );
        assert_eq!(
            check_token(
                &req(&[&format!("Bearer {tok}"), &format!("Bearer {tok}")]),
                tok
            )
            .unwrap_err()
            .status,
            407
        );
    }

    #[tokio::test]
    async fn status_lines() {
        for (status, line) in [
            (400, "400 Bad Request"),
            (403, "403 Forbidden"),
            (407, "407 Proxy Authentication Required"),
            (408, "408 Request Timeout"),
            (431, "431 Request Header Fields Too Large"),
            (502, "502 Bad Gateway"),
            (504, "504 Gateway Timeout"),
        ] {
            let (a, mut b) = tokio::net::UnixStream::pair().unwrap();
            respond(&mut ClientConn::Unix(a), status, "why")
                .await
                .unwrap();
            let mut got = String::new();
            b.read_to_string(&mut got).await.unwrap();
            assert!(got.starts_with(&format!("HTTP/1.1 {line}\r\n")), "{got}");
            assert!(
                got.ends_with("\r\nConnection: close\r\n\r\nrefused: why\n"),
                "{got}"
            );
        }
    }

    #[test]
    fn authority_forms() {
        let (h, p) = parse_authority("Example.COM.:443").unwrap();
        assert_eq!((h, p), (Host::Name("example.com".into()), 443));
        let (h, _) = parse_authority("[::1]:443").unwrap();
        assert_eq!(h, Host::Ip("::1".parse().unwrap()));
        let (h, _) = parse_authority("2130706433:443").unwrap();
        assert_eq!(h, Host::Ip("127.0.0.1".parse().unwrap()));
        assert_eq!(parse_authority("example.com").unwrap_err().status, 400);
        assert_eq!(parse_authority("example.com:0").unwrap_err().status, 400);
        assert_eq!(
            parse_authority("example.com:99999").unwrap_err().status,
            400
        );
        assert_eq!(parse_authority("localhost:443").unwrap_err().status, 403);
    }
}
