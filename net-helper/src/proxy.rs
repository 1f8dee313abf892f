//! The egress proxy: HTTP CONNECT only, per-session token, allowlist, ports and limits, the same
//! address table as fetches, optional SNI check, then a byte relay. Every client connection ends
//! in one [`EgressRecord`], which the broker writes to the audit log.

use crate::allowlist::Allowlist;
use crate::error::{human_duration, FetchError};
use crate::relay::{relay, ClientConn};
use crate::resolve::connect_pinned;
use crate::target::Host;
use crate::NetContext;
use base64::Engine;
use ipc_schema::net::{EgressRecord, EgressVerdict, ProxySession, RefusalKind};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering::SeqCst};
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

/// One tunnel counted in a session's or the proxy's count, and uncounted when dropped.
struct Slot(Arc<AtomicU32>);

impl Slot {
    /// A slot in `count`, unless it is at `max` already.
    fn take(count: &Arc<AtomicU32>, max: u32) -> Option<Slot> {
        let below = |n| (n < max).then_some(n + 1);
        count.fetch_update(SeqCst, SeqCst, below).ok()?;
        Some(Slot(count.clone()))
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, SeqCst);
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

/// A [`Refusal`] with `status` (0: none is sent), its reason as `format!` writes it.
macro_rules! refuse {
    ($status:expr, $($reason:tt)+) => {
        Refusal { status: $status, reason: format!($($reason)+), failed: false }
    };
}

impl Refusal {
    /// The same, as a failure of the upstream rather than a rule's refusal.
    fn failure(mut self) -> Refusal {
        self.failed = true;
        self
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
        let l = &cfg.limits;
        if cfg.session.is_empty() || cfg.session.len() > 128 {
            return Err("a session name must have 1 to 128 bytes".into());
        }
        if cfg.token.len() < 16 {
            return Err("a proxy token must have at least 16 bytes".into());
        }
        if l.max_tunnels == 0 || l.idle_ms == 0 || l.max_tunnel_bytes == 0 {
            return Err("proxy limits must be above zero".into());
        }
        if cfg.ports.contains(&0) {
            return Err("port 0 cannot be allowed".into());
        }
        let allow = Allowlist::parse(&cfg.allow)?;
        let mut sessions = self.sessions();
        let open = sessions.get(&cfg.session).map(|s| s.open.clone());
        let (open, closed) = (open.unwrap_or_default(), watch::channel(false).0);
        let session = Session {
            allow,
            open,
            closed,
            cfg,
        };
        sessions.insert(session.cfg.session.clone(), Arc::new(session));
        Ok(())
    }

    /// Ends a session; returns how many tunnels it had open, or `None` for an unknown session.
    pub fn close(&self, session: &str) -> Option<u32> {
        let s = self.sessions().remove(session)?;
        s.closed.send_replace(true);
        Some(s.open.load(SeqCst))
    }

    /// Serves one client connection to its end.
    pub async fn serve(&self, session: &str, mut conn: ClientConn) -> EgressRecord {
        let mut target = "-".to_string();
        let verdict = match self.tunnel(session, &mut conn, &mut target).await {
            Ok(v) => v,
            Err(r) => {
                let (status, reason) = (r.status, r.reason);
                if status != 0 {
                    let _ = respond(&mut conn, status, &reason).await;
                }
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

    async fn tunnel(
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
        let sess = sess.ok_or_else(|| refuse!(403, "unknown session {session}"))?;
        check_token(&req, &sess.cfg.token)?;
        if req.method != "CONNECT" {
            let method = printable(&req.method);
            return Err(refuse!(
                403,
                "method {method} is not allowed (CONNECT only)"
            ));
        }
        let (host, port) = parse_authority(&req.target)?;
        let ports: &[u16] = match &sess.cfg.ports[..] {
            [] => &[443],
            ports => ports,
        };
        if !ports.contains(&port) {
            let list: Vec<String> = ports.iter().map(u16::to_string).collect();
            let only = list.join(", ");
            return Err(refuse!(403, "port {port} is not allowed (only {only})"));
        }
        if !sess.allow.allows(&host) {
            return Err(match &host {
                Host::Name(n) => refuse!(403, "{n} is not on the session's allowlist"),
                Host::Ip(a) => refuse!(403, "IP-literal target {a} is not allowed by address"),
            });
        }
        let (name, max) = (&sess.cfg.session, sess.cfg.limits.max_tunnels);
        let Some(_slot) = Slot::take(&sess.open, max) else {
            let why = format!("session {name} has {max} tunnels open (its tunnel limit)");
            return Err(refuse!(403, "{why}"));
        };
        let max = self.max_total;
        let Some(_total) = Slot::take(&self.total_open, max) else {
            let why = format!("the proxy has {max} tunnels open (the total tunnel limit)");
            return Err(refuse!(403, "{why}"));
        };

        // Refusals need the addresses, so the lookup and the judgement come before any answer.
        let judged = tokio::time::timeout(CONNECT_TIMEOUT, self.ctx.judged_addresses(&host));
        let within = || human_duration(CONNECT_TIMEOUT);
        let addrs = match judged.await {
            Err(_) => {
                let why = format!("the lookup of {host} did not finish within {}", within());
                return Err(refuse!(504, "{why}").failure());
            }
            Ok(Err(FetchError::Refused(kind, why))) if kind != RefusalKind::Name => {
                return Err(refuse!(403, "{why}"))
            }
            Ok(Err(e)) => return Err(refuse!(502, "{}", e.reason()).failure()),
            Ok(Ok(addrs)) => addrs,
        };
        // The upstream connection is made while the 200 goes out and the client's first bytes
        // come in, so opening a tunnel costs one round trip less (bench net). Its failure then
        // closes the tunnel instead of answering 502; the audit row says why.
        let connecting = tokio::time::timeout(CONNECT_TIMEOUT, connect_pinned(addrs, port));
        let connecting = tokio::spawn(connecting);
        let abort = connecting.abort_handle();
        let established = b"HTTP/1.1 200 Connection established\r\n\r\n";
        if let Err(e) = conn.io().write_all(established).await {
            abort.abort();
            return Err(refuse!(0, "the client went away: {e}"));
        }
        let mut first = early;
        if let (true, Host::Name(want)) = (sess.cfg.sni_check, &host) {
            let hello = read_hello(conn, first, want).await;
            first = hello.inspect_err(|_| abort.abort())?;
        }
        let (mut upstream, address) = match connecting.await {
            Ok(Ok(Ok(up))) => up,
            Ok(Ok(Err(e))) => return Err(refuse!(0, "{}", e.reason()).failure()),
            Ok(Err(_)) => {
                let why = format!("{host}:{port} was not reached within {}", within());
                return Err(refuse!(0, "{why}").failure());
            }
            Err(e) => return Err(refuse!(0, "connecting failed: {e}").failure()),
        };
        let tunnelled = |bytes_up, bytes_down, ended| EgressVerdict::Tunnelled {
            address,
            port,
            bytes_up,
            bytes_down,
            ended,
        };
        if !first.is_empty() {
            if let Err(e) = upstream.write_all(&first).await {
                return Ok(tunnelled(0, 0, format!("upstream write: {e}")));
            }
        }
        let closed = sess.closed.subscribe();
        let out = relay(conn, &mut upstream, &sess.cfg.limits, closed).await;
        Ok(tunnelled(out.up + first.len() as u64, out.down, out.ended))
    }
}

/// Reads up to the end of the request head; returns the head and any bytes after it.
async fn read_head(conn: &mut ClientConn) -> Result<(Vec<u8>, Vec<u8>), Refusal> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 2048];
    let read = async {
        loop {
            if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                let early = buf.split_off(end + 4);
                return Ok((std::mem::take(&mut buf), early));
            }
            if buf.len() > MAX_HEAD {
                return Err(refuse!(431, "the request head exceeds {MAX_HEAD} bytes"));
            }
            match conn.io().read(&mut chunk).await {
                Ok(0) => return Err(refuse!(0, "the client closed before sending a request")),
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
                Err(e) => return Err(refuse!(0, "reading the request failed: {e}")),
            }
        }
    };
    let within = human_duration(HEAD_TIMEOUT);
    let done = tokio::time::timeout(HEAD_TIMEOUT, read).await;
    done.unwrap_or_else(|_| Err(refuse!(408, "no request within {within}")))
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
        Ok(httparse::Status::Partial) => return Err(refuse!(400, "incomplete request head")),
        Err(e) => return Err(refuse!(400, "malformed request ({e})")),
    }
    let auth = req.headers.iter();
    let auth = auth.filter(|h| h.name.eq_ignore_ascii_case("proxy-authorization"));
    let auth = auth.map(|h| String::from_utf8_lossy(h.value).into_owned());
    Ok(Request {
        method: req.method.unwrap_or_default().to_string(),
        target: req.path.unwrap_or_default().to_string(),
        proxy_auth: auth.collect(),
    })
}

/// At most 200 printable ASCII characters of something a client sent, for audit rows.
fn printable(s: &str) -> String {
    let shown = |c: char| if c.is_ascii_graphic() { c } else { '?' };
    s.chars().take(200).map(shown).collect()
}

fn check_token(req: &Request, token: &str) -> Result<(), Refusal> {
    let value = match &req.proxy_auth[..] {
        [] => return Err(refuse!(407, "no proxy token (Proxy-Authorization)")),
        [value] => value.trim(),
        _ => return Err(refuse!(407, "more than one Proxy-Authorization header")),
    };
    let given = match value.split_once(' ') {
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("basic") => {
            let raw = base64::engine::general_purpose::STANDARD.decode(rest.trim());
            let text = raw.ok().and_then(|b| String::from_utf8(b).ok());
            text.and_then(|s| Some(s.split_once(':')?.1.to_string()))
        }
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("bearer") => {
            Some(rest.trim().to_string())
        }
        _ => None,
    };
    match given {
        Some(g) if constant_time_eq(g.as_bytes(), token.as_bytes()) => Ok(()),
        _ => Err(refuse!(407, "wrong proxy token")),
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// `host:port` (authority form), the host parsed as a URL parser would.
fn parse_authority(t: &str) -> Result<(Host, u16), Refusal> {
    let shown = printable(t);
    let bad = |why: &str| refuse!(400, "CONNECT target {shown} {why}");
    let (host, port) = t.rsplit_once(':').ok_or_else(|| bad("has no port"))?;
    if host.starts_with('[') != host.ends_with(']') {
        return Err(bad("is not host:port"));
    }
    let port: u16 = port.parse().map_err(|_| bad("has an invalid port"))?;
    if port == 0 {
        return Err(bad("has port 0"));
    }
    // The host as a URL parser reads it.
    let host = Host::parse(host).map_err(|e| refuse!(403, "CONNECT target {shown}: {e}"))?;
    Ok((host, port))
}

/// What the first bytes of a tunnel say.
#[derive(Debug, Clone, PartialEq, Eq)]
enum FirstFlight {
    /// More bytes are needed.
    Incomplete,
    /// A ClientHello, with its SNI (lower case, trailing dot removed) if it sent one.
    Hello(Option<String>),
    /// Not a TLS ClientHello.
    NotTls(String),
}

/// What the first bytes of a tunnel say, read by rustls's own ClientHello parser (through its
/// `Acceptor`, which never answers anything).
fn parse_first_flight(bytes: &[u8]) -> FirstFlight {
    let mut acceptor = rustls::server::Acceptor::default();
    let mut rd = bytes;
    while !rd.is_empty() {
        match acceptor.read_tls(&mut rd) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) => return FirstFlight::NotTls(e.to_string()),
        }
    }
    match acceptor.accept() {
        Ok(None) => FirstFlight::Incomplete,
        Ok(Some(accepted)) => FirstFlight::Hello(
            accepted
                .client_hello()
                .server_name()
                .map(|s| s.trim_end_matches('.').to_ascii_lowercase()),
        ),
        Err((e, _)) => FirstFlight::NotTls(e.to_string()),
    }
}

/// The tunnel's first bytes, read on until they hold a ClientHello whose SNI is `want`.
async fn read_hello(
    conn: &mut ClientConn,
    mut buf: Vec<u8>,
    want: &str,
) -> Result<Vec<u8>, Refusal> {
    let mut chunk = [0u8; 4096];
    let read = async {
        loop {
            let refused = match parse_first_flight(&buf) {
                FirstFlight::Hello(Some(sni)) if sni == want => return Ok(()),
                FirstFlight::Hello(Some(sni)) => {
                    let sni = printable(&sni);
                    format!("SNI {sni} does not match the CONNECT host {want}")
                }
                FirstFlight::Hello(None) => {
                    format!("the TLS ClientHello has no SNI (the CONNECT host is {want})")
                }
                FirstFlight::NotTls(e) => {
                    format!("the tunnel does not start with a TLS ClientHello ({e})")
                }
                FirstFlight::Incomplete if buf.len() > MAX_HELLO => {
                    format!("no complete TLS ClientHello in the first {MAX_HELLO} bytes")
                }
                FirstFlight::Incomplete => match conn.io().read(&mut chunk).await {
                    Ok(0) => "the client closed before its TLS ClientHello".into(),
                    Ok(n) => {
                        buf.extend_from_slice(&chunk[..n]);
                        continue;
                    }
                    Err(e) => format!("reading the ClientHello failed: {e}"),
                },
            };
            return Err(refuse!(0, "{refused}"));
        }
    };
    let within = human_duration(HELLO_TIMEOUT);
    let done = tokio::time::timeout(HELLO_TIMEOUT, read).await;
    done.unwrap_or_else(|_| Err(refuse!(0, "no TLS ClientHello within {within}")))?;
    Ok(buf)
}

async fn respond(conn: &mut ClientConn, status: u16, reason: &str) -> std::io::Result<()> {
    // (400 Bad Request, 403 Forbidden, 407 Proxy Authentication Required, ...)
    let phrase = http::StatusCode::from_u16(status).ok();
    let phrase = phrase.and_then(|s| s.canonical_reason()).unwrap_or("Error");
    let body = format!("refused: {reason}\n");
    let auth = match status {
        407 => "Proxy-Authenticate: Basic realm=\"gatehouse\"\r\n",
        _ => "",
    };
    let msg = format!(
        "HTTP/1.1 {status} {phrase}\r\n{auth}Content-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    conn.io().write_all(msg.as_bytes()).await?;
    conn.io().shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

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
            let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let a = tokio::net::TcpStream::connect(l.local_addr().unwrap());
            let (a, (mut b, _)) = tokio::try_join!(a, l.accept()).unwrap();
            respond(&mut ClientConn::Tcp(a), status, "why")
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

    fn client_hello(name: &str) -> Vec<u8> {
        let cfg = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth();
        let mut conn = rustls::ClientConnection::new(
            Arc::new(cfg),
            rustls::pki_types::ServerName::try_from(name.to_string()).unwrap(),
        )
        .unwrap();
        let mut out = Vec::new();
        conn.write_tls(&mut out).unwrap();
        out
    }

    #[test]
    fn reads_the_sni() {
        let hello = client_hello("Example.com");
        assert_eq!(
            parse_first_flight(&hello),
            FirstFlight::Hello(Some("example.com".into()))
        );
        assert_eq!(parse_first_flight(&hello[..10]), FirstFlight::Incomplete);
        assert!(matches!(
            parse_first_flight(b"GET / HTTP/1.1\r\n\r\n"),
            FirstFlight::NotTls(_)
        ));
    }
}
