//! One `http_request` ([`HttpSend`]): any method, the agent's headers and body, and optionally a
//! credential header the secrets-helper made for one host. Every hop is checked, resolved,
//! judged and pinned exactly as a fetch's; the credential goes out only over TLS to its own
//! host, never across a redirect, and every form of it is scrubbed from what comes back,
//! errors included, before anything leaves this helper.
//!
//! Written for the secrets issue (7) on top of the fetch building blocks; see
//! docs/secrets-helper.md.

use crate::body;
use crate::error::{human_bytes, refused, FetchError};
use crate::fetch::{read_body, request_builder, Answer, FetchedBody, Hops, ReqBody, Request};
use crate::target::Target;
use crate::NetContext;
use bytes::Bytes;
use ipc_schema::host::Host;
use ipc_schema::net::{FetchedPage, HttpReply, HttpSend, NetRefusal, NetReply};
use ipc_schema::secrets::{CredentialHeader, FRAMING_HEADERS};
use ipc_schema::tool::HttpMethod;

const USER_AGENT: &str = concat!("gatehouse-http/", env!("CARGO_PKG_VERSION"));
const MAX_HEADERS: usize = 64;
const MAX_HEADER_VALUE: usize = 8 * 1024;

/// What one request brought back, already scrubbed.
pub struct Sent {
    pub body: FetchedBody,
    pub headers: Vec<(String, String)>,
    pub credential_sent: bool,
    pub dropped_headers: Vec<String>,
    pub redactions: u32,
}

/// Sends `req` and builds the reply; `page` wraps and splits the text as fetch pages are.
pub async fn serve(
    ctx: &NetContext,
    req: HttpSend,
    page: impl FnOnce(FetchedBody) -> FetchedPage,
) -> NetReply {
    let cred = req.credential.clone();
    match send(ctx, req).await {
        Ok(s) => NetReply::Http(HttpReply {
            page: page(s.body),
            headers: s.headers,
            credential_sent: s.credential_sent,
            dropped_headers: s.dropped_headers,
            redactions: s.redactions,
        }),
        Err(e) => scrubbed(e, cred.as_ref()),
    }
}

/// A refusal or failure as the broker gets it: it can quote what the server sent (a
/// Location), so the credential is scrubbed from it too.
pub fn scrubbed(e: FetchError, cred: Option<&CredentialHeader>) -> NetReply {
    let mut reply = e.into_reply();
    if let (Some(c), NetReply::Refused(NetRefusal { reason, .. }) | NetReply::Failed { reason }) =
        (cred, &mut reply)
    {
        c.scrub_text(reason);
    }
    reply
}

/// The agent's headers: tokens for names, no CR, LF or NUL in values, no framing headers, and
/// not the credential's own header.
pub fn check_headers(
    headers: &[(String, String)],
    cred: Option<&CredentialHeader>,
) -> Result<(), FetchError> {
    if headers.len() > MAX_HEADERS {
        let n = headers.len();
        return Err(refused!(Invalid, "{n} headers; at most {MAX_HEADERS}"));
    }
    let tchar = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
    for (name, value) in headers {
        let lower = name.to_ascii_lowercase();
        let why = if name.is_empty() || name.len() > 128 || !name.chars().all(tchar) {
            format!("{name:?} is not a valid header name")
        } else if FRAMING_HEADERS.contains(&lower.as_str()) || lower == "proxy-authorization" {
            format!("the {name} header is set by gatehouse, not by the request")
        } else if let Some(c) = cred.filter(|c| lower == c.name) {
            let credential = &c.credential;
            format!("the request sets the {name} header itself, which credential {credential} is sent as")
        } else if value.len() > MAX_HEADER_VALUE || value.contains(['\r', '\n', '\0']) {
            let max = human_bytes(MAX_HEADER_VALUE as u64);
            format!("the value of header {name} has a line break or NUL, or is over {max}")
        } else {
            continue;
        };
        return Err(refused!(Invalid, "{why}"));
    }
    Ok(())
}

/// Does this hop go to the credential's host, over TLS?
fn carries(target: &Target, c: &CredentialHeader) -> bool {
    target.https && Host::parse(&c.host).is_ok_and(|h| h == target.host)
}

pub async fn send(ctx: &NetContext, req: HttpSend) -> Result<Sent, FetchError> {
    let hops = Hops::new(ctx, &req.limits, req.allowed_hosts.as_deref())?;
    check_headers(&req.headers, req.credential.as_ref())?;
    if matches!(req.method, HttpMethod::Get | HttpMethod::Head) && !req.body.is_empty() {
        return Err(refused!(Invalid, "a GET or HEAD request carries no body"));
    }
    hops.within_total("request", follow(&hops, &req)).await
}

async fn follow(hops: &Hops<'_>, req: &HttpSend) -> Result<Sent, FetchError> {
    let target = hops.first(&req.url)?;
    // The credential goes only over TLS to its own host.
    if let Some(c) = req.credential.as_ref().filter(|c| !carries(&target, c)) {
        let (name, url, host, bound) = (&c.credential, &target.url, &target.host, &c.host);
        let why = match target.https {
            false => format!("credential {name} is sent only over https, and {url} is not"),
            true => format!("credential {name} was attached for {bound}, not for {host}"),
        };
        return Err(refused!(Url, "{why}"));
    }
    let follows = matches!(req.method, HttpMethod::Get | HttpMethod::Head);
    // Once a redirect leaves the credential's host, the credential stays behind for good.
    let mut credential_live = req.credential.is_some();
    let request = |target: &Target| {
        let cred = req.credential.as_ref();
        let cred = cred.filter(|c| credential_live && carries(target, c));
        credential_live = cred.is_some();
        build_request(target, req, cred)
    };
    // A server that puts the credential into a redirect would have us carry it to wherever it
    // points, in the request line.
    let redirect = |from: &Target, next: &Target| match &req.credential {
        Some(c) if c.scrub_bytes(&mut next.url.to_string().into_bytes()) > 0 => {
            let (from, name) = (&from.url, &c.credential);
            let why =
                format!("{from} redirects to a URL that contains credential {name}; not followed");
            Err(refused!(Redirect, "{why}"))
        }
        _ => Ok(()),
    };
    let answer = hops.follow(target, follows, request, redirect).await?;
    read_reply(answer, req, credential_live).await
}

fn build_request(
    target: &Target,
    req: &HttpSend,
    cred: Option<&CredentialHeader>,
) -> Result<Request, FetchError> {
    let m = match req.method {
        HttpMethod::Get => http::Method::GET,
        HttpMethod::Head => http::Method::HEAD,
        HttpMethod::Post => http::Method::POST,
        HttpMethod::Put => http::Method::PUT,
        HttpMethod::Patch => http::Method::PATCH,
        HttpMethod::Delete => http::Method::DELETE,
    };
    let mut b = request_builder(target, m, USER_AGENT);
    for (k, v) in &req.headers {
        b = b.header(k.as_str(), v.as_str());
    }
    if let Some(c) = cred {
        let name = &c.credential;
        let why = format!("credential {name} cannot be sent as a header value");
        let v = http::HeaderValue::from_bytes(c.value.expose());
        let mut v = v.map_err(|_| refused!(Invalid, "{why}"))?;
        // Sensitive values are never printed by the http crate's Debug and not indexed by
        // HPACK-style compression.
        v.set_sensitive(true);
        b = b.header(c.name.as_str(), v);
    }
    // Every hop carries the same body: only GET and HEAD are redirected, and `send` refuses a
    // body for them.
    let url = &target.url;
    let built = b.body(ReqBody::new(Bytes::from(req.body.clone())));
    built.map_err(|e| refused!(Invalid, "cannot build the request for {url}: {e}"))
}

async fn read_reply(
    answer: Answer,
    req: &HttpSend,
    credential_sent: bool,
) -> Result<Sent, FetchError> {
    let (resp, mut redirects) = (answer.resp, answer.redirects);
    let cred = req.credential.as_ref();
    let scrub = |text: &mut String| cred.map_or(0, |c| c.scrub_text(text) as u32);
    let status = resp.status().as_u16();
    let (mut headers, mut dropped_headers, mut redactions) = (Vec::new(), Vec::new(), 0);
    for (name, value) in resp.headers() {
        let name = name.as_str().to_string();
        if cred.is_some_and(|c| c.echoed_by(&name, value.as_bytes())) {
            dropped_headers.push(name);
            continue;
        }
        let mut v = String::from_utf8_lossy(value.as_bytes()).into_owned();
        redactions += scrub(&mut v);
        headers.push((name, v));
    }
    let (content_type, encoding) = body::content_headers(resp.headers());
    let max = req.limits.max_body_bytes as usize;
    let raw = read_body(resp.into_body(), &answer.target, max).await?;
    let (media, charset) = content_type.unwrap_or_default();
    let mut text = String::new();
    if !raw.is_empty() {
        if !body::is_text_like(&media) {
            let media = if media.is_empty() { "(none)" } else { &media };
            let why = format!("content type {media} is not text-like (only text, JSON, XML and the like are returned)");
            return Err(refused!(Content, "{why}"));
        }
        let decoded = body::decode(raw, encoding.as_deref(), max)?;
        text = body::to_text(&decoded, charset.as_deref());
    }
    let body_bytes = text.len();
    let mut final_url = answer.target.url.to_string();
    redactions += scrub(&mut text) + scrub(&mut final_url);
    redactions += redirects.iter_mut().map(scrub).sum::<u32>();
    let body = FetchedBody {
        final_url,
        redirects,
        address: answer.address,
        status,
        content_type: media,
        body_bytes,
        text,
    };
    Ok(Sent {
        body,
        headers,
        credential_sent,
        dropped_headers,
        redactions,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipc_schema::secrets::{CredentialName, SecretValue};

    fn cred() -> CredentialHeader {
        CredentialHeader {
            credential: CredentialName::parse("api").unwrap(),
            host: "api.example.com".into(),
            name: "x-api-key".into(),
            value: SecretValue::from_slice(b"k-123456"),
            scrub: vec![SecretValue::from_slice(b"k-123456")],
        }
    }

    #[test]
    fn agent_headers_are_checked() {
        let h = |k: &str, v: &str| vec![(k.to_string(), v.to_string())];
        assert!(check_headers(&h("Accept", "application/json"), Some(&cred())).is_ok());
        for (k, v, want) in [
            ("Host", "x", "set by gatehouse"),
            ("Transfer-Encoding", "chunked", "set by gatehouse"),
            ("X-Api-Key", "mine", "which credential api is sent as"),
            ("X A", "x", "not a valid header name"),
            ("X-A", "a\r\nB: c", "line break"),
        ] {
            let e = check_headers(&h(k, v), Some(&cred())).unwrap_err();
            assert!(e.reason().contains(want), "{k}: {e}");
        }
        assert!(check_headers(&h("X-Api-Key", "mine"), None).is_ok());
    }
}
