//! One safe fetch: every hop parsed, resolved, judged, pinned and (for https) verified; redirects
//! followed by hand; text-like bodies only, decoded within the size limit; all within deadlines.

use crate::allowlist::Allowlist;
use crate::body;
use crate::connect::{connect_pinned, judged_addresses};
use crate::error::{human_bytes, human_ms, FetchError};
use crate::target::{check_url, parse_target, Target};
use crate::{Io, NetContext};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use ipc_schema::host::HostPattern;
use ipc_schema::net::{
    CheckedTarget, FetchLimits, RefusalKind, FETCH_MAX_BODY_CEILING, FETCH_MAX_REDIRECTS_CEILING,
    FETCH_TOTAL_MS_CEILING,
};
use std::collections::HashSet;
use std::future::Future;
use std::net::IpAddr;
use std::time::Duration;

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

/// A request's body (none for a fetch).
pub(crate) type ReqBody = Full<Bytes>;

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
    let target = first_target(url, None)?;
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
    let allow = allowed_hosts.map(Allowlist::new);
    within_total(limits, "fetch", async {
        let target = first_target(url, allow.as_ref())?;
        let no_check = |_: &Target, _: &Target| Ok(());
        let answer = follow(
            ctx,
            target,
            limits,
            allow.as_ref(),
            true,
            request_for,
            no_check,
        );
        read_reply(answer.await?, limits).await
    })
    .await
}

/// `work` within the total time limit (`what` names it in the refusal: fetch, request).
pub(crate) async fn within_total<T>(
    limits: &FetchLimits,
    what: &str,
    work: impl Future<Output = Result<T, FetchError>>,
) -> Result<T, FetchError> {
    let total = Duration::from_millis(limits.total_ms.into());
    tokio::time::timeout(total, work).await.unwrap_or_else(|_| {
        Err(FetchError::refused(
            RefusalKind::Limit,
            format!(
                "the {what} did not finish within {} (the total time limit)",
                human_ms(limits.total_ms.into())
            ),
        ))
    })
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

/// `url` parsed and checked, and on the session's allowlist when there is one (checked before
/// the host is looked up: a lookup alone can carry data out).
pub(crate) fn first_target(url: &str, allow: Option<&Allowlist>) -> Result<Target, FetchError> {
    let target =
        parse_target(url).map_err(|e| FetchError::refused(RefusalKind::Url, e.to_string()))?;
    check_allowed(allow, &target)?;
    Ok(target)
}

fn check_allowed(allow: Option<&Allowlist>, target: &Target) -> Result<(), FetchError> {
    match allow {
        Some(list) if !list.allows(&target.host) => Err(FetchError::refused(
            RefusalKind::NotAllowed,
            format!("{} is not in this session's network allowlist", target.host),
        )),
        _ => Ok(()),
    }
}

/// What the last hop of a request answered.
pub(crate) struct Answer {
    pub resp: http::Response<Incoming>,
    pub target: Target,
    pub address: IpAddr,
    /// The URLs left by redirects, in order.
    pub redirects: Vec<String>,
}

/// Sends `request(hop)` to `target` and, when `follows`, to every redirect after it: each one
/// checked by [`next_hop`] and `redirect`, and refused past the limit or back to a URL already
/// visited. Once a redirect led somewhere, a hop's failure names it. Shared by fetch and
/// `http_request`.
pub(crate) async fn follow(
    ctx: &NetContext,
    mut target: Target,
    limits: &FetchLimits,
    allow: Option<&Allowlist>,
    follows: bool,
    mut request: impl FnMut(&Target) -> Result<http::Request<ReqBody>, FetchError>,
    redirect: impl Fn(&Target, &Target) -> Result<(), FetchError>,
) -> Result<Answer, FetchError> {
    let mut redirects = Vec::new();
    let mut seen = HashSet::from([target.url.to_string()]);
    loop {
        let hop = match request(&target) {
            Ok(r) => send_pinned(ctx, &target, limits, r).await,
            Err(e) => Err(e),
        };
        let (resp, address) = match hop {
            Err(e) if !redirects.is_empty() => {
                return Err(e.context(&format!("redirect to {}", target.url)))
            }
            hop => hop?,
        };
        let status = resp.status().as_u16();
        if !follows || !matches!(status, 301 | 302 | 303 | 307 | 308) {
            return Ok(Answer {
                resp,
                target,
                address,
                redirects,
            });
        }
        let next = next_hop(&target, &resp, status, allow)?;
        redirect(&target, &next)?;
        let max = limits.max_redirects;
        if redirects.len() >= usize::from(max) {
            return Err(FetchError::refused(
                RefusalKind::Limit,
                format!(
                    "more than {max} redirects (the redirect limit); the next was to {}",
                    next.url
                ),
            ));
        }
        if !seen.insert(next.url.to_string()) {
            return Err(FetchError::refused(
                RefusalKind::Redirect,
                format!(
                    "redirect loop: {} redirects back to {}",
                    target.url, next.url
                ),
            ));
        }
        redirects.push(target.url.to_string());
        target = next;
    }
}

/// The checked target of a redirect (its URL, and the allowlist when there is one), or why it
/// is refused.
fn next_hop(
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

/// Resolve and judge `target`'s host, connect to a checked address (pinned), TLS for https,
/// send `request` on that connection alone; the reply's head and the address used. Shared by
/// fetch and `http_request`.
async fn send_pinned(
    ctx: &NetContext,
    target: &Target,
    limits: &FetchLimits,
    request: http::Request<ReqBody>,
) -> Result<(http::Response<Incoming>, IpAddr), FetchError> {
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
        .handshake::<_, ReqBody>(TokioIo::new(io))
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

fn request_for(target: &Target) -> Result<http::Request<ReqBody>, FetchError> {
    let url = &target.url;
    request_builder(target, http::Method::GET, USER_AGENT)
        .header(http::header::ACCEPT, ACCEPT)
        .header(http::header::ACCEPT_ENCODING, "gzip, deflate")
        .body(ReqBody::default())
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

async fn read_reply(answer: Answer, limits: &FetchLimits) -> Result<FetchedBody, FetchError> {
    let (resp, target) = (answer.resp, answer.target);
    let status = resp.status().as_u16();
    let (content_type, encoding) = body::content_headers(resp.headers());
    let (media, charset) = content_type.ok_or_else(|| {
        FetchError::refused(
            RefusalKind::Content,
            format!(
                "{} sent no Content-Type (only text-like content is fetched)",
                target.url
            ),
        )
    })?;
    if !body::is_text_like(&media) {
        return Err(FetchError::refused(
            RefusalKind::Content,
            format!("content type {media} is not text-like (only text, JSON, XML, JavaScript and the like are fetched)"),
        ));
    }
    let max = limits.max_body_bytes as usize;
    let declared = resp
        .headers()
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > max as u64) {
        return Err(body_over(max));
    }
    let raw = read_body(resp.into_body(), &target, max).await?;
    let decoded = body::decode(raw, encoding.as_deref(), max)?;
    let text = body::to_text(&decoded, charset.as_deref());
    Ok(FetchedBody {
        final_url: target.url.to_string(),
        redirects: answer.redirects,
        address: answer.address,
        status,
        content_type: media,
        body_bytes: decoded.len(),
        text,
    })
}
