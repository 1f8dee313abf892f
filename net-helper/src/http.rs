//! One `http_request` ([`HttpSend`]): any method, the agent's headers and body, and optionally a
//! credential header the secrets-helper made for one host. Every hop is checked, resolved,
//! judged and pinned exactly as a fetch's; the credential goes out only over TLS to its own
//! host, never across a redirect, and every form of it is scrubbed from what comes back,
//! errors included, before anything leaves this helper.
//!
//! Written for the secrets issue (7) on top of the fetch building blocks; see
//! docs/secrets-helper.md.

use crate::allowlist::Allowlist;
use crate::body;
use crate::error::{human_bytes, FetchError};
use crate::fetch::{
    self, check_limits, first_target, read_body, request_builder, within_total, Answer,
    FetchedBody, ReqBody,
};
use crate::target::Target;
use crate::NetContext;
use bytes::Bytes;
use ipc_schema::host::Host;
use ipc_schema::net::{FetchedPage, HttpReply, HttpSend, NetRefusal, NetReply, RefusalKind};
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

fn invalid(msg: String) -> FetchError {
    FetchError::refused(RefusalKind::Invalid, msg)
}

/// The agent's headers: tokens for names, no CR, LF or NUL in values, no framing headers, and
/// not the credential's own header.
pub fn check_headers(
    headers: &[(String, String)],
    cred: Option<&CredentialHeader>,
) -> Result<(), FetchError> {
    if headers.len() > MAX_HEADERS {
        return Err(invalid(format!(
            "{} headers; at most {MAX_HEADERS}",
            headers.len()
        )));
    }
    let tchar = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
    for (name, value) in headers {
        if name.is_empty() || name.len() > 128 || !name.chars().all(tchar) {
            return Err(invalid(format!("{name:?} is not a valid header name")));
        }
        let lower = name.to_ascii_lowercase();
        if FRAMING_HEADERS.contains(&lower.as_str()) || lower == "proxy-authorization" {
            return Err(invalid(format!(
                "the {name} header is set by gatehouse, not by the request"
            )));
        }
        if let Some(c) = cred {
            if lower == c.name {
                return Err(invalid(format!(
                    "the request sets the {name} header itself, which credential {} is sent as",
                    c.credential
                )));
            }
        }
        if value.len() > MAX_HEADER_VALUE || value.contains(['\r', '\n', '\0']) {
            return Err(invalid(format!(
                "the value of header {name} has a line break or NUL, or is over {}",
                human_bytes(MAX_HEADER_VALUE as u64)
            )));
        }
    }
    Ok(())
}

/// Does this hop go to the credential's host, over TLS?
fn carries(target: &Target, c: &CredentialHeader) -> bool {
    target.https && Host::parse(&c.host).is_ok_and(|h| h == target.host)
}

pub async fn send(ctx: &NetContext, req: HttpSend) -> Result<Sent, FetchError> {
    check_limits(&req.limits)?;
    check_headers(&req.headers, req.credential.as_ref())?;
    if matches!(req.method, HttpMethod::Get | HttpMethod::Head) && !req.body.is_empty() {
        return Err(invalid("a GET or HEAD request carries no body".into()));
    }
    let allow = req.allowed_hosts.as_deref().map(Allowlist::new);
    within_total(&req.limits, "request", follow(ctx, &req, allow.as_ref())).await
}

async fn follow(
    ctx: &NetContext,
    req: &HttpSend,
    allow: Option<&Allowlist>,
) -> Result<Sent, FetchError> {
    let target = first_target(&req.url, allow)?;
    if let Some(c) = &req.credential {
        if !target.https {
            return Err(FetchError::refused(
                RefusalKind::Url,
                format!(
                    "credential {} is sent only over https, and {} is not",
                    c.credential, target.url
                ),
            ));
        }
        if !carries(&target, c) {
            return Err(FetchError::refused(
                RefusalKind::Url,
                format!(
                    "credential {} was attached for {}, not for {}",
                    c.credential, c.host, target.host
                ),
            ));
        }
    }
    let follows = matches!(req.method, HttpMethod::Get | HttpMethod::Head);
    // Once a redirect leaves the credential's host, the credential stays behind for good.
    let mut credential_live = req.credential.is_some();
    let request = |target: &Target| {
        let cred = req
            .credential
            .as_ref()
            .filter(|c| credential_live && carries(target, c));
        credential_live = cred.is_some();
        build_request(target, req, cred)
    };
    // A server that puts the credential into a redirect would have us carry it to wherever it
    // points, in the request line.
    let redirect = |from: &Target, next: &Target| match &req.credential {
        Some(c) if c.scrub_bytes(&mut next.url.to_string().into_bytes()) > 0 => {
            Err(FetchError::refused(
                RefusalKind::Redirect,
                format!(
                    "{} redirects to a URL that contains credential {}; not followed",
                    from.url, c.credential
                ),
            ))
        }
        _ => Ok(()),
    };
    let answer = fetch::follow(ctx, target, &req.limits, allow, follows, request, redirect);
    let answer = answer.await?;
    read_reply(answer, req, credential_live).await
}

fn method(m: HttpMethod) -> http::Method {
    match m {
        HttpMethod::Get => http::Method::GET,
        HttpMethod::Head => http::Method::HEAD,
        HttpMethod::Post => http::Method::POST,
        HttpMethod::Put => http::Method::PUT,
        HttpMethod::Patch => http::Method::PATCH,
        HttpMethod::Delete => http::Method::DELETE,
    }
}

fn build_request(
    target: &Target,
    req: &HttpSend,
    cred: Option<&CredentialHeader>,
) -> Result<http::Request<ReqBody>, FetchError> {
    let url = &target.url;
    let m = method(req.method);
    let mut b = request_builder(target, m.clone(), USER_AGENT);
    for (k, v) in &req.headers {
        b = b.header(k.as_str(), v.as_str());
    }
    if let Some(c) = cred {
        let mut v = http::HeaderValue::from_bytes(c.value.expose()).map_err(|_| {
            invalid(format!(
                "credential {} cannot be sent as a header value",
                c.credential
            ))
        })?;
        // Sensitive values are never printed by the http crate's Debug and not indexed by
        // HPACK-style compression.
        v.set_sensitive(true);
        b = b.header(c.name.as_str(), v);
    }
    // A redirected GET or HEAD carries no body; other methods are never redirected.
    let body = if m == http::Method::GET || m == http::Method::HEAD {
        Bytes::new()
    } else {
        Bytes::from(req.body.clone())
    };
    b.body(ReqBody::new(body))
        .map_err(|e| invalid(format!("cannot build the request for {url}: {e}")))
}

async fn read_reply(
    answer: Answer,
    req: &HttpSend,
    credential_sent: bool,
) -> Result<Sent, FetchError> {
    let (resp, target, mut redirects) = (answer.resp, answer.target, answer.redirects);
    let cred = req.credential.as_ref();
    let status = resp.status().as_u16();
    let mut headers = Vec::new();
    let mut dropped_headers = Vec::new();
    let mut redactions = 0u32;
    for (name, value) in resp.headers() {
        let name = name.as_str().to_string();
        if cred.is_some_and(|c| c.echoed_by(&name, value.as_bytes())) {
            dropped_headers.push(name);
            continue;
        }
        let mut v = String::from_utf8_lossy(value.as_bytes()).into_owned();
        if let Some(c) = cred {
            redactions += c.scrub_text(&mut v) as u32;
        }
        headers.push((name, v));
    }
    let (content_type, encoding) = body::content_headers(resp.headers());
    let max = req.limits.max_body_bytes as usize;
    let raw = read_body(resp.into_body(), &target, max).await?;
    let (media, charset) = content_type.unwrap_or_default();
    let mut text = if raw.is_empty() {
        String::new()
    } else {
        if !body::is_text_like(&media) {
            return Err(FetchError::refused(
                RefusalKind::Content,
                format!(
                    "content type {} is not text-like (only text, JSON, XML and the like are returned)",
                    if media.is_empty() { "(none)" } else { &media }
                ),
            ));
        }
        let decoded = body::decode(raw, encoding.as_deref(), max)?;
        body::to_text(&decoded, charset.as_deref())
    };
    let body_bytes = text.len();
    let mut final_url = target.url.to_string();
    if let Some(c) = cred {
        redactions += c.scrub_text(&mut text) as u32;
        redactions += c.scrub_text(&mut final_url) as u32;
        for r in &mut redirects {
            redactions += c.scrub_text(r) as u32;
        }
    }
    Ok(Sent {
        body: FetchedBody {
            final_url,
            redirects,
            address: answer.address,
            status,
            content_type: media,
            body_bytes,
            text,
        },
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
