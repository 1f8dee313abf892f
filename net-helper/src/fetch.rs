//! One safe fetch: every hop parsed, resolved, judged, pinned and (for https) verified; redirects
//! followed by hand; text-like bodies only, decoded within the size limit; all within deadlines.

use crate::allowlist::Allowlist;
use crate::body;
use crate::error::{failed, human_bytes, human_duration, refused, FetchError};
use crate::resolve::connect_pinned;
use crate::target::{check_url, parse_target, Target};
use crate::{Io, NetContext};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use ipc_schema::host::HostPattern;
use ipc_schema::net::{CheckedTarget, FetchLimits, FetchRequest};
use ipc_schema::net::{
    FETCH_MAX_BODY_CEILING, FETCH_MAX_REDIRECTS_CEILING, FETCH_TOTAL_MS_CEILING,
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
/// A request for one hop, made for its target.
pub(crate) type Request = http::Request<ReqBody>;
/// A reply's head (its body still to read).
type Reply = http::Response<Incoming>;

const USER_AGENT: &str = concat!("gatehouse-fetch/", env!("CARGO_PKG_VERSION"));
const ACCEPT: &str =
    "text/html, text/plain;q=0.9, application/json;q=0.9, application/xml;q=0.8, text/*;q=0.7";

/// Refuses limits beyond their ceilings (and zero limits, which could never succeed).
fn check_limits(l: &FetchLimits) -> Result<(), FetchError> {
    let (body, total, connect) = (l.max_body_bytes, l.total_ms, l.connect_ms);
    let why = if body == 0 || body > FETCH_MAX_BODY_CEILING {
        format!("max_body_bytes {body} is outside 1..={FETCH_MAX_BODY_CEILING}")
    } else if total == 0 || total > FETCH_TOTAL_MS_CEILING {
        format!("total_ms {total} is outside 1..={FETCH_TOTAL_MS_CEILING}")
    } else if connect == 0 || connect > total {
        format!("connect_ms {connect} is outside 1..=total_ms")
    } else if l.max_redirects > FETCH_MAX_REDIRECTS_CEILING {
        let n = l.max_redirects;
        format!("max_redirects {n} is above {FETCH_MAX_REDIRECTS_CEILING}")
    } else {
        return Ok(());
    };
    Err(refused!(Invalid, "{why}"))
}

/// Parses, resolves and judges `url` without connecting (within the default connect limit).
pub async fn check(ctx: &NetContext, url: &str) -> Result<CheckedTarget, FetchError> {
    let target = parse_target(url).map_err(|e| refused!(Url, "{e}"))?;
    let limits = FetchLimits::default();
    let addresses = within_connect(&limits, &target, ctx.judged_addresses(&target.host)).await?;
    Ok(CheckedTarget {
        url: target.url.to_string(),
        host: target.host,
        port: target.port,
        addresses,
    })
}

/// The whole fetch, within the total deadline.
pub async fn fetch(ctx: &NetContext, req: &FetchRequest) -> Result<FetchedBody, FetchError> {
    let hops = Hops::new(ctx, &req.limits, req.allowed_hosts.as_deref())?;
    hops.within_total("fetch", async {
        let answer = hops.follow(hops.first(&req.url)?, true, request_for, |_, _| Ok(()));
        read_reply(answer.await?, &req.limits).await
    })
    .await
}

/// `work` (a hop's lookup, connection and handshake) within the connect time limit.
async fn within_connect<T>(
    limits: &FetchLimits,
    target: &Target,
    work: impl Future<Output = Result<T, FetchError>>,
) -> Result<T, FetchError> {
    let within = Duration::from_millis(limits.connect_ms.into());
    let done = tokio::time::timeout(within, work).await;
    done.unwrap_or_else(|_| {
        let (host, within) = (&target.host, human_duration(within));
        let why = format!("{host} was not reached within {within} (the connect time limit)");
        Err(refused!(Limit, "{why}"))
    })
}

/// What every hop of one request shares: the helper's context, the request's limits (checked
/// against their ceilings) and the session's allowlist when there is one. Shared by fetch and
/// `http_request`.
pub(crate) struct Hops<'a> {
    ctx: &'a NetContext,
    limits: &'a FetchLimits,
    allow: Option<Allowlist>,
}

/// What the last hop of a request answered.
pub(crate) struct Answer {
    pub resp: Reply,
    pub target: Target,
    pub address: IpAddr,
    /// The URLs left by redirects, in order.
    pub redirects: Vec<String>,
}

impl<'a> Hops<'a> {
    pub fn new(
        ctx: &'a NetContext,
        limits: &'a FetchLimits,
        allowed_hosts: Option<&[HostPattern]>,
    ) -> Result<Hops<'a>, FetchError> {
        check_limits(limits)?;
        let allow = allowed_hosts.map(Allowlist::new);
        Ok(Hops { ctx, limits, allow })
    }

    /// `work` within the total time limit (`what` names it in the refusal: fetch, request).
    pub async fn within_total<T>(
        &self,
        what: &str,
        work: impl Future<Output = Result<T, FetchError>>,
    ) -> Result<T, FetchError> {
        let total = Duration::from_millis(self.limits.total_ms.into());
        let done = tokio::time::timeout(total, work).await;
        done.unwrap_or_else(|_| {
            let total = human_duration(total);
            let why = format!("the {what} did not finish within {total} (the total time limit)");
            Err(refused!(Limit, "{why}"))
        })
    }

    /// `url` parsed and checked, and on the session's allowlist when there is one (checked
    /// before the host is looked up: a lookup alone can carry data out).
    pub fn first(&self, url: &str) -> Result<Target, FetchError> {
        let target = parse_target(url).map_err(|e| refused!(Url, "{e}"))?;
        self.allowed(&target)?;
        Ok(target)
    }

    fn allowed(&self, target: &Target) -> Result<(), FetchError> {
        match (&self.allow, &target.host) {
            (Some(list), host) if !list.allows(host) => Err(refused!(
                NotAllowed,
                "{host} is not in this session's network allowlist"
            )),
            _ => Ok(()),
        }
    }

    /// Sends `request(hop)` to `target` and, when `follows`, to every redirect after it: each
    /// one checked by [`Hops::next_hop`] and `redirect`, and refused past the limit or back to a
    /// URL already visited. Once a redirect led somewhere, a hop's failure names it.
    pub async fn follow(
        &self,
        mut target: Target,
        follows: bool,
        mut request: impl FnMut(&Target) -> Result<Request, FetchError>,
        redirect: impl Fn(&Target, &Target) -> Result<(), FetchError>,
    ) -> Result<Answer, FetchError> {
        let (mut redirects, mut seen) = (Vec::new(), HashSet::from([target.url.to_string()]));
        loop {
            let (resp, address) = match self.send(&target, &mut request).await {
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
            let next = self.next_hop(&target, &resp, status)?;
            redirect(&target, &next)?;
            let (max, to) = (self.limits.max_redirects, &next.url);
            if redirects.len() >= usize::from(max) {
                let why =
                    format!("more than {max} redirects (the redirect limit); the next was to {to}");
                return Err(refused!(Limit, "{why}"));
            }
            if !seen.insert(to.to_string()) {
                let why = format!("redirect loop: {} redirects back to {to}", target.url);
                return Err(refused!(Redirect, "{why}"));
            }
            redirects.push(target.url.to_string());
            target = next;
        }
    }

    /// The checked target of a redirect (its URL, and the allowlist when there is one), or why
    /// it is refused.
    fn next_hop(&self, from: &Target, resp: &Reply, status: u16) -> Result<Target, FetchError> {
        let url = &from.url;
        let location = resp.headers().get(http::header::LOCATION);
        let next = match location.map(|l| l.to_str()) {
            None => Err(format!("{url} answered {status} without a Location header")),
            Some(Err(_)) => Err(format!(
                "{url} answered {status} with a Location that is not text"
            )),
            Some(Ok(loc)) => url
                .join(loc)
                .map_err(|e| format!("the redirect to {loc:?} is not a valid URL ({e})")),
        };
        let mut next = next.map_err(|why| refused!(Redirect, "{why}"))?;
        let shown = next.to_string();
        let target = check_url(&mut next).map_err(|e| refused!(Url, "redirect to {shown}: {e}"))?;
        if from.https && !target.https {
            let to = &target.url;
            let why = format!("{url} redirects from https to http ({to}), which is refused");
            return Err(refused!(Redirect, "{why}"));
        }
        let context = format!("redirect to {}", target.url);
        self.allowed(&target).map_err(|e| e.context(&context))?;
        Ok(target)
    }

    /// Makes `request`'s request for `target`; resolves and judges its host, connects to a
    /// checked address (pinned), TLS for https, and sends the request on that connection
    /// alone. The reply's head and the address used.
    async fn send(
        &self,
        target: &Target,
        request: &mut impl FnMut(&Target) -> Result<Request, FetchError>,
    ) -> Result<(Reply, IpAddr), FetchError> {
        let (request, ctx) = (request(target)?, self.ctx);
        let (io, addr) = within_connect(self.limits, target, async {
            let addrs = ctx.judged_addresses(&target.host).await?;
            let (tcp, addr) = connect_pinned(addrs, target.port).await?;
            let io: Box<dyn Io> = match target.https {
                true => Box::new(crate::tls::handshake(&ctx.tls, &target.host, tcp).await?),
                false => Box::new(tcp),
            };
            Ok((io, addr))
        })
        .await?;
        let (mut sender, conn) = hyper::client::conn::http1::Builder::new()
            .max_buf_size(256 * 1024)
            .handshake::<_, ReqBody>(TokioIo::new(io))
            .await
            .map_err(|e| failed!("HTTP setup with {} failed: {e}", target.host))?;
        // The connection task ends when the reply (and its body) is dropped: no pool, no reuse.
        tokio::spawn(conn);
        let resp = sender.send_request(request).await;
        let resp = resp.map_err(|e| failed!("the HTTP request to {} failed: {e}", target.url))?;
        Ok((resp, addr))
    }
}

/// A request line and the headers every hop carries: the URL's path and query (never its
/// fragment), `Host`, `user_agent`, `Connection: close`.
pub(crate) fn request_builder(
    target: &Target,
    method: http::Method,
    user_agent: &'static str,
) -> http::request::Builder {
    use url::Position::{AfterPort, AfterQuery, BeforeHost, BeforePath};
    let (url, path) = (&target.url, &target.url[BeforePath..AfterQuery]);
    // (The host as the URL writes it: IPv6 in brackets, the port when it is not the default.)
    let host = &url[BeforeHost..AfterPort];
    http::Request::builder()
        .method(method)
        .uri(if path.is_empty() { "/" } else { path })
        .header(http::header::HOST, host)
        .header(http::header::USER_AGENT, user_agent)
        .header(http::header::CONNECTION, "close")
}

fn request_for(target: &Target) -> Result<Request, FetchError> {
    let url = &target.url;
    request_builder(target, http::Method::GET, USER_AGENT)
        .header(http::header::ACCEPT, ACCEPT)
        .header(http::header::ACCEPT_ENCODING, "gzip, deflate")
        .body(ReqBody::default())
        .map_err(|e| refused!(Url, "cannot request {url}: {e}"))
}

/// The refusal of a body over `max` bytes.
pub(crate) fn body_over(max: usize) -> FetchError {
    let max = human_bytes(max as u64);
    refused!(Limit, "the body exceeds {max} (the body size limit)")
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
        let frame = frame.map_err(|e| failed!("reading the body of {} failed: {e}", target.url))?;
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
    let (resp, url) = (answer.resp, &answer.target.url);
    let status = resp.status().as_u16();
    let (content_type, encoding) = body::content_headers(resp.headers());
    let Some((media, charset)) = content_type else {
        let why = format!("{url} sent no Content-Type (only text-like content is fetched)");
        return Err(refused!(Content, "{why}"));
    };
    if !body::is_text_like(&media) {
        let why = format!("content type {media} is not text-like (only text, JSON, XML, JavaScript and the like are fetched)");
        return Err(refused!(Content, "{why}"));
    }
    let max = limits.max_body_bytes as usize;
    let declared = resp.headers().get(http::header::CONTENT_LENGTH);
    let declared = declared.and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|n| n > max as u64) {
        return Err(body_over(max));
    }
    let raw = read_body(resp.into_body(), &answer.target, max).await?;
    let decoded = body::decode(raw, encoding.as_deref(), max)?;
    Ok(FetchedBody {
        final_url: url.to_string(),
        redirects: answer.redirects,
        address: answer.address,
        status,
        content_type: media,
        body_bytes: decoded.len(),
        text: body::to_text(&decoded, charset.as_deref()),
    })
}
