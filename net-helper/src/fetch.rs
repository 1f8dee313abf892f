//! One safe fetch: every hop parsed, resolved, judged, pinned and (for https) verified; redirects
//! followed by hand; text-like bodies only, decoded within the size limit; all within deadlines.

use crate::allowlist::Allowlist;
use crate::body;
use crate::connect::{connect_pinned, judged_addresses};
use crate::error::{human_bytes, human_ms, FetchError};
use crate::target::{check_url, parse_target, Target};
use crate::NetContext;
use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use ipc_schema::host::HostPattern;
use ipc_schema::net::{
    CheckedTarget, FetchLimits, RefusalKind, FETCH_MAX_BODY_CEILING, FETCH_MAX_REDIRECTS_CEILING,
    FETCH_TOTAL_MS_CEILING,
};
use std::collections::HashSet;
use std::net::IpAddr;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};

/// What a fetch brings back, before wrapping.
#[derive(Debug)]
pub struct FetchedBody {
    pub final_url: String,
    pub redirects: Vec<String>,
    pub address: IpAddr,
    pub status: u16,
    pub content_type: String,
    pub body_bytes: usize,
    pub text: String,
}

trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

const USER_AGENT: &str = concat!("gatehouse-fetch/", env!("CARGO_PKG_VERSION"));
const ACCEPT: &str =
    "text/html, text/plain;q=0.9, application/json;q=0.9, application/xml;q=0.8, text/*;q=0.7";

/// Refuses limits beyond their ceilings (and zero limits, which could never succeed).
pub fn check_limits(l: &FetchLimits) -> Result<(), FetchError> {
    let bad = |what: String| Err(FetchError::refused(RefusalKind::Invalid, what));
    if l.max_body_bytes == 0 || l.max_body_bytes > FETCH_MAX_BODY_CEILING {
        return bad(format!(
            "max_body_bytes {} is outside 1..={FETCH_MAX_BODY_CEILING}",
            l.max_body_bytes
        ));
    }
    if l.total_ms == 0 || l.total_ms > FETCH_TOTAL_MS_CEILING {
        return bad(format!(
            "total_ms {} is outside 1..={FETCH_TOTAL_MS_CEILING}",
            l.total_ms
        ));
    }
    if l.connect_ms == 0 || l.connect_ms > l.total_ms {
        return bad(format!(
            "connect_ms {} is outside 1..=total_ms",
            l.connect_ms
        ));
    }
    if l.max_redirects > FETCH_MAX_REDIRECTS_CEILING {
        return bad(format!(
            "max_redirects {} is above {FETCH_MAX_REDIRECTS_CEILING}",
            l.max_redirects
        ));
    }
    Ok(())
}

/// Parses, resolves and judges `url` without connecting.
pub async fn check(
    ctx: &NetContext,
    url: &str,
    limits: &FetchLimits,
) -> Result<CheckedTarget, FetchError> {
    let target =
        parse_target(url).map_err(|e| FetchError::refused(RefusalKind::Url, e.to_string()))?;
    let within = Duration::from_millis(limits.connect_ms.into());
    let addresses = tokio::time::timeout(
        within,
        judged_addresses(&ctx.resolver, &ctx.policy, &target.host),
    )
    .await
    .map_err(|_| connect_limit(limits, &target))??;
    Ok(CheckedTarget {
        url: target.url.to_string(),
        host: target.host.clone(),
        port: target.port,
        addresses,
    })
}

/// The whole fetch, within the total deadline.
pub async fn fetch(
    ctx: &NetContext,
    url: &str,
    limits: &FetchLimits,
    allowed_hosts: Option<&[HostPattern]>,
) -> Result<FetchedBody, FetchError> {
    check_limits(limits)?;
    let allow = parse_allowed_hosts(allowed_hosts)?;
    let total = Duration::from_millis(limits.total_ms.into());
    match tokio::time::timeout(total, follow(ctx, url, limits, allow.as_ref())).await {
        Ok(r) => r,
        Err(_) => Err(FetchError::refused(
            RefusalKind::Limit,
            format!(
                "the fetch did not finish within {} (the total time limit)",
                human_ms(limits.total_ms.into())
            ),
        )),
    }
}

fn connect_limit(limits: &FetchLimits, target: &Target) -> FetchError {
    FetchError::refused(
        RefusalKind::Limit,
        format!(
            "{} was not reached within {} (the connect time limit)",
            target.host,
            human_ms(limits.connect_ms.into())
        ),
    )
}

/// The session's network allowlist of a request, parsed; a bad entry refuses the request.
pub(crate) fn parse_allowed_hosts(
    entries: Option<&[HostPattern]>,
) -> Result<Option<Allowlist>, FetchError> {
    Ok(entries.map(|e| Allowlist::new(e.to_vec())))
}

/// Refuses a hop whose host is not on the session's allowlist, before the host is looked up
/// (a lookup alone can carry data out).
pub(crate) fn check_allowed(allow: Option<&Allowlist>, target: &Target) -> Result<(), FetchError> {
    match allow {
        Some(list) if !list.allows(&target.host) => Err(FetchError::refused(
            RefusalKind::NotAllowed,
            format!("{} is not in this session's network allowlist", target.host),
        )),
        _ => Ok(()),
    }
}

/// The hops of one request so far: a redirect past the limit, or back to a URL already
/// visited, is refused.
pub(crate) struct Hops {
    /// The URLs left by redirects, in order.
    pub redirects: Vec<String>,
    seen: HashSet<String>,
}

impl Hops {
    pub fn new(first: &Target) -> Hops {
        Hops {
            redirects: Vec::new(),
            seen: HashSet::from([first.url.to_string()]),
        }
    }

    /// Records that `from` redirected to `next`, or refuses it.
    pub fn follow(&mut self, from: &Target, next: &Target, max: u8) -> Result<(), FetchError> {
        if self.redirects.len() >= usize::from(max) {
            return Err(FetchError::refused(
                RefusalKind::Limit,
                format!(
                    "more than {max} redirects (the redirect limit); the next was to {}",
                    next.url
                ),
            ));
        }
        if !self.seen.insert(next.url.to_string()) {
            return Err(FetchError::refused(
                RefusalKind::Redirect,
                format!("redirect loop: {} redirects back to {}", from.url, next.url),
            ));
        }
        self.redirects.push(from.url.to_string());
        Ok(())
    }

    /// A hop's result: once a redirect led there, a failure names it.
    pub fn outcome<T>(&self, hop: Result<T, FetchError>, to: &Target) -> Result<T, FetchError> {
        if self.redirects.is_empty() {
            return hop;
        }
        hop.map_err(|e| e.context(&format!("redirect to {}", to.url)))
    }
}

pub(crate) fn is_redirect(status: u16) -> bool {
    matches!(status, 301 | 302 | 303 | 307 | 308)
}

async fn follow(
    ctx: &NetContext,
    url: &str,
    limits: &FetchLimits,
    allow: Option<&Allowlist>,
) -> Result<FetchedBody, FetchError> {
    let mut target =
        parse_target(url).map_err(|e| FetchError::refused(RefusalKind::Url, e.to_string()))?;
    check_allowed(allow, &target)?;
    let mut hops = Hops::new(&target);
    loop {
        let (resp, address) = hops.outcome(one_hop(ctx, &target, limits).await, &target)?;
        let status = resp.status().as_u16();
        if is_redirect(status) {
            let next = next_hop(&target, &resp, status, allow)?;
            hops.follow(&target, &next, limits.max_redirects)?;
            target = next;
            continue;
        }
        return read_reply(resp, &target, address, hops.redirects, limits).await;
    }
}

/// The checked target of a redirect (its URL, and the allowlist when there is one), or why it
/// is refused (also used by `http`).
pub(crate) fn next_hop(
    from: &Target,
    resp: &http::Response<Incoming>,
    status: u16,
    allow: Option<&Allowlist>,
) -> Result<Target, FetchError> {
    let refuse = |r: String| FetchError::refused(RefusalKind::Redirect, r);
    let loc = resp.headers().get(http::header::LOCATION).ok_or_else(|| {
        refuse(format!(
            "{} answered {status} without a Location header",
            from.url
        ))
    })?;
    let loc = loc.to_str().map_err(|_| {
        refuse(format!(
            "{} answered {status} with a Location that is not text",
            from.url
        ))
    })?;
    let mut next = from
        .url
        .join(loc)
        .map_err(|e| refuse(format!("the redirect to {loc:?} is not a valid URL ({e})")))?;
    let shown = next.to_string();
    let target = check_url(&mut next)
        .map_err(|e| FetchError::refused(RefusalKind::Url, format!("redirect to {shown}: {e}")))?;
    if from.https && !target.https {
        return Err(refuse(format!(
            "{} redirects from https to http ({}), which is refused",
            from.url, target.url
        )));
    }
    check_allowed(allow, &target).map_err(|e| e.context(&format!("redirect to {}", target.url)))?;
    Ok(target)
}

/// One GET of `target`: the reply's head.
async fn one_hop(
    ctx: &NetContext,
    target: &Target,
    limits: &FetchLimits,
) -> Result<(http::Response<Incoming>, IpAddr), FetchError> {
    send_pinned(ctx, target, limits, request_for(target)?).await
}

/// Resolve and judge `target`'s host, connect to a checked address (pinned), TLS for https,
/// send `request` on that connection alone; the reply's head and the address used. Shared by
/// fetch and `http_request`.
pub(crate) async fn send_pinned<B>(
    ctx: &NetContext,
    target: &Target,
    limits: &FetchLimits,
    request: http::Request<B>,
) -> Result<(http::Response<Incoming>, IpAddr), FetchError>
where
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let reach = async {
        let addrs = judged_addresses(&ctx.resolver, &ctx.policy, &target.host).await?;
        let (tcp, addr) = connect_pinned(&addrs, target.port).await?;
        let io: Box<dyn Io> = if target.https {
            Box::new(crate::tls::handshake(&ctx.tls, &target.host, tcp).await?)
        } else {
            Box::new(tcp)
        };
        Ok::<_, FetchError>((io, addr))
    };
    let within = Duration::from_millis(limits.connect_ms.into());
    let (io, addr) = tokio::time::timeout(within, reach)
        .await
        .map_err(|_| connect_limit(limits, target))??;

    let (mut sender, conn) = hyper::client::conn::http1::Builder::new()
        .max_buf_size(256 * 1024)
        .handshake::<_, B>(TokioIo::new(io))
        .await
        .map_err(|e| FetchError::failed(format!("HTTP setup with {} failed: {e}", target.host)))?;
    // The connection task ends when the reply (and its body) is dropped: no pool, no reuse.
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let resp = sender.send_request(request).await.map_err(|e| {
        FetchError::failed(format!("the HTTP request to {} failed: {e}", target.url))
    })?;
    Ok((resp, addr))
}

/// A request line and the headers every hop carries: the URL's path and query (never its
/// fragment), `Host`, `user_agent`, `Connection: close`.
pub(crate) fn request_builder(
    target: &Target,
    method: http::Method,
    user_agent: &'static str,
) -> http::request::Builder {
    let url = &target.url;
    let mut host = url.host_str().unwrap_or_default().to_string();
    if let Some(p) = url.port() {
        host = format!("{host}:{p}");
    }
    let path = &url[url::Position::BeforePath..url::Position::AfterQuery];
    http::Request::builder()
        .method(method)
        .uri(if path.is_empty() { "/" } else { path })
        .header(http::header::HOST, host)
        .header(http::header::USER_AGENT, user_agent)
        .header(http::header::CONNECTION, "close")
}

fn request_for(target: &Target) -> Result<http::Request<Empty<Bytes>>, FetchError> {
    let url = &target.url;
    request_builder(target, http::Method::GET, USER_AGENT)
        .header(http::header::ACCEPT, ACCEPT)
        .header(http::header::ACCEPT_ENCODING, "gzip, deflate")
        .body(Empty::new())
        .map_err(|e| FetchError::refused(RefusalKind::Url, format!("cannot request {url}: {e}")))
}

/// The refusal of a body over `max` bytes.
pub(crate) fn body_over(max: usize) -> FetchError {
    FetchError::refused(
        RefusalKind::Limit,
        format!(
            "the body exceeds {} (the body size limit)",
            human_bytes(max as u64)
        ),
    )
}

/// A body's raw bytes, refused past `max` (raw bytes are capped at the same limit as decoded
/// ones: compression never makes a body larger than a few bytes over its plain size).
pub(crate) async fn read_body(
    mut incoming: Incoming,
    target: &Target,
    max: usize,
) -> Result<Vec<u8>, FetchError> {
    let mut raw = Vec::new();
    while let Some(frame) = incoming.frame().await {
        let frame = frame.map_err(|e| {
            FetchError::failed(format!("reading the body of {} failed: {e}", target.url))
        })?;
        if let Ok(data) = frame.into_data() {
            if raw.len() + data.len() > max {
                return Err(body_over(max));
            }
            raw.extend_from_slice(&data);
        }
    }
    Ok(raw)
}

async fn read_reply(
    resp: http::Response<Incoming>,
    target: &Target,
    address: IpAddr,
    redirects: Vec<String>,
    limits: &FetchLimits,
) -> Result<FetchedBody, FetchError> {
    let status = resp.status().as_u16();
    let headers = resp.headers();
    let ct = headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .ok_or_else(|| {
            FetchError::refused(
                RefusalKind::Content,
                format!(
                    "{} sent no Content-Type (only text-like content is fetched)",
                    target.url
                ),
            )
        })?;
    let (media, charset) = body::parse_content_type(ct);
    if !body::is_text_like(&media) {
        return Err(FetchError::refused(
            RefusalKind::Content,
            format!("content type {media} is not text-like (only text, JSON, XML, JavaScript and the like are fetched)"),
        ));
    }
    let encoding = headers
        .get(http::header::CONTENT_ENCODING)
        .map(|v| v.to_str().unwrap_or("?").to_string());
    let max = limits.max_body_bytes as usize;
    let declared = headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > max as u64) {
        return Err(body_over(max));
    }
    let raw = read_body(resp.into_body(), target, max).await?;
    let decoded = body::decode(raw, encoding.as_deref(), max)?;
    let text = body::to_text(&decoded, charset.as_deref());
    Ok(FetchedBody {
        final_url: target.url.to_string(),
        redirects,
        address,
        status,
        content_type: media,
        body_bytes: decoded.len(),
        text,
    })
}
