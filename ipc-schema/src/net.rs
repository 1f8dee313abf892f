//! Messages between the broker and the net-helper.
//!
//! Two jobs travel here: the safe fetch ([`NetRequest::Check`], [`NetRequest::Fetch`],
//! [`NetRequest::FetchPart`]) and the egress proxy ([`NetRequest::ProxyOpen`],
//! [`NetRequest::ProxyClose`], [`NetRequest::ProxyConnection`]).
//!
//! The net-helper answers requests concurrently, so its replies may come in another order than
//! the requests; each reply carries the id of its request. A [`NetRequest::ProxyConnection`] is
//! answered only when that client connection ends, with the [`EgressRecord`] the broker writes to
//! the audit log.
//!
//! File descriptors: a [`NetRequest::ProxyConnection`] frame travels with exactly one descriptor
//! (a connected stream socket whose peer speaks HTTP CONNECT), attached with `SCM_RIGHTS` to the
//! `sendmsg` that writes the frame's bytes. No other frame carries descriptors; a descriptor the
//! helper cannot match to a `ProxyConnection` frame ends the helper. On Windows, where a pipe
//! carries no handles, the broker duplicates the socket into the net-helper's process and the
//! frame is followed by the handle's value there ([`crate::helper::Passed`]). See
//! docs/net-helper.md.

use crate::host::{Host, HostPattern};
use serde::{Deserialize, Serialize};
use std::net::IpAddr;

/// The most text one [`FetchedPage`] or [`NetReply::FetchPart`] carries, in bytes: pages larger
/// than this (a 1 MiB body, plus the wrapper) come in parts so every frame stays under
/// [`crate::MAX_FRAME`].
pub const FETCH_PART_MAX: usize = 512 * 1024;

/// The loopback ports a command reaches its egress proxy on, one per proxy session
/// (`127.0.0.1` only): on Windows the broker listens there, on macOS the exec-helper for the
/// command (`sandbox::bridge`). A fixed range, so that the network filters installed once on
/// Windows (`gatehouse setup network-filters`) can let commands reach these ports and nothing
/// else.
pub const LOOPBACK_PROXY_PORTS: std::ops::RangeInclusive<u16> = 47_301..=47_364;

/// The highest values a [`FetchLimits`] may ask for; larger values are refused as invalid.
pub const FETCH_MAX_BODY_CEILING: u32 = 16 << 20;
pub const FETCH_TOTAL_MS_CEILING: u32 = 300_000;
pub const FETCH_MAX_REDIRECTS_CEILING: u8 = 20;

/// Broker to net-helper.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub enum NetRequest {
    /// Parse, resolve and judge a URL without connecting: what an approval card shows
    /// (canonical URL and resolved addresses). Answered by [`NetReply::Checked`] or
    /// [`NetReply::Refused`] / [`NetReply::Failed`]. The fetch itself checks everything again.
    Check { url: String },
    /// One safe fetch. Answered by [`NetReply::Fetched`], [`NetReply::Refused`] or
    /// [`NetReply::Failed`].
    Fetch(FetchRequest),
    /// Part `index` (1-based; part 0 came in the [`FetchedPage`]) of the wrapped text of fetch
    /// `fetch`. The helper keeps a page's later parts for a short while only: read them at once.
    FetchPart { fetch: u64, index: u32 },
    /// Start an egress proxy session, or replace the settings of one (open tunnels keep the
    /// settings they were opened with). Answered by [`NetReply::ProxyOpened`].
    ProxyOpen(ProxySession),
    /// End a session: its open tunnels are closed, later connections for it are refused.
    /// Answered by [`NetReply::ProxyClosed`].
    ProxyClose { session: String },
    /// One proxy client connection for `session`. The frame carries one descriptor (see the
    /// module documentation). Answered by [`NetReply::ProxyDone`] when the connection ends.
    ProxyConnection { session: String },
    /// One `http_request` (issue 7): any method, the agent's headers and body, and optionally a
    /// credential header made by the secrets-helper for the request's checked host. Answered
    /// by [`NetReply::Http`], [`NetReply::Refused`] or [`NetReply::Failed`]; later parts of the
    /// reply text with [`NetRequest::FetchPart`]. See [`HttpSend`].
    Http(HttpSend),
    /// One message to a remote MCP server over Streamable HTTP (a POST, or the DELETE that ends
    /// its session). Answered by [`NetReply::Mcp`], [`NetReply::Refused`] or
    /// [`NetReply::Failed`]. See [`McpPost`].
    Mcp(McpPost),
}

/// The most body bytes one [`McpPost`]'s answer may bring back: every message of it travels in
/// one frame.
pub const MCP_REPLY_MAX: u32 = 960 << 10;

/// One JSON-RPC message for a remote MCP server (Streamable HTTP, MCP 2025-03-26 and later).
///
/// The net-helper sends it as an `http_request` without redirects: the same URL, address,
/// pinning and TLS rules, the credential header (made by the secrets-helper for the URL's host)
/// only over https to that host, every form of it scrubbed from the answer. It does not read the
/// JSON: it frames what comes back (a JSON body, or the `data` of each server-sent event) into
/// messages, one line each, for the servers-helper to parse.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct McpPost {
    /// The server's URL as the policy names it (https).
    pub url: String,
    /// The message (one JSON-RPC message, as the servers-helper wrote it); `None`: the DELETE
    /// that ends `session`.
    pub message: Option<Vec<u8>>,
    /// `Mcp-Session-Id`, once the server gave one.
    pub session: Option<McpSessionId>,
    /// `MCP-Protocol-Version`, once the handshake agreed one.
    pub protocol_version: Option<String>,
    pub credential: Option<crate::secrets::CredentialHeader>,
    /// The whole exchange, reading the answer included (at most [`FETCH_TOTAL_MS_CEILING`]).
    pub total_ms: u32,
}

/// What a remote MCP server answered one [`McpPost`].
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct McpAnswer {
    pub status: u16,
    /// The `Mcp-Session-Id` it set (visible ASCII, at most [`McpSessionId::MAX`] bytes).
    pub session: Option<McpSessionId>,
    /// Each message of the answer, one line (no CR or LF), not yet parsed.
    pub messages: Vec<String>,
    /// How many occurrences of the credential were replaced in the answer.
    pub redactions: u32,
}

/// A Streamable HTTP session id: visible ASCII (0x21-0x7E), 1-256 bytes, as the specification
/// requires of a server.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(try_from = "String", into = "String")]
pub struct McpSessionId(String);

impl McpSessionId {
    pub const MAX: usize = 256;

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for McpSessionId {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        if s.is_empty() || s.len() > Self::MAX || !s.bytes().all(|b| (0x21..=0x7e).contains(&b)) {
            return Err(format!(
                "a session id must be 1-{} visible ASCII characters",
                Self::MAX
            ));
        }
        Ok(McpSessionId(s))
    }
}

impl From<McpSessionId> for String {
    fn from(s: McpSessionId) -> String {
        s.0
    }
}

/// What to fetch, within which limits.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct FetchRequest {
    pub url: String,
    pub limits: FetchLimits,
    /// The session profile's network allowlist (exact names, `*.suffix` patterns, IP
    /// addresses), when it has one: the host of the URL and of every redirect must be on it,
    /// checked before that host is looked up. `None`: no list (the address table still applies).
    pub allowed_hosts: Option<Vec<HostPattern>>,
}

impl FetchRequest {
    pub fn new(url: impl Into<String>) -> Self {
        FetchRequest {
            url: url.into(),
            limits: FetchLimits::default(),
            allowed_hosts: None,
        }
    }
}

/// The limits of one fetch. Each refusal for a limit names it.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub struct FetchLimits {
    /// Body bytes after decoding (gzip, deflate), counted as they arrive.
    pub max_body_bytes: u32,
    /// The whole fetch: every lookup, connection, redirect and byte.
    pub total_ms: u32,
    /// Per hop: name lookup, TCP connect and TLS handshake.
    pub connect_ms: u32,
    pub max_redirects: u8,
}

impl Default for FetchLimits {
    fn default() -> Self {
        FetchLimits {
            max_body_bytes: 1 << 20,
            total_ms: 20_000,
            connect_ms: 10_000,
            max_redirects: 5,
        }
    }
}

/// net-helper to broker.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub enum NetReply {
    Checked(CheckedTarget),
    Fetched(FetchedPage),
    FetchPart {
        text: String,
    },
    /// The fetch or check was refused: by the URL rules, the address table, a redirect rule,
    /// the content type, TLS verification or a limit. `gatehouse fetch` exits with its
    /// refusal code and prints `refused: REASON`.
    Refused(NetRefusal),
    /// The network failed (connection refused or reset, a DNS failure other than "no such
    /// name", a broken HTTP reply).
    Failed {
        reason: String,
    },
    ProxyOpened {
        session: String,
    },
    ProxyClosed {
        session: String,
        tunnels_closed: u32,
    },
    ProxyDone(EgressRecord),
    /// The answer to [`NetRequest::Http`].
    Http(HttpReply),
    /// The answer to [`NetRequest::Mcp`].
    Mcp(McpAnswer),
}

/// A URL that passed every check, with what it resolved to.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct CheckedTarget {
    /// The URL as parsed (WHATWG), without its fragment.
    pub url: String,
    /// The host as the WHATWG parse gives it ([`Host`]).
    pub host: Host,
    pub port: u16,
    /// Every address the name resolved to (A and AAAA), each judged public.
    pub addresses: Vec<IpAddr>,
}

/// A fetched page.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct FetchedPage {
    /// The helper's id for this page, for [`NetRequest::FetchPart`].
    pub fetch: u64,
    /// The URL the text came from (after redirects).
    pub final_url: String,
    /// Each URL that redirected, in order (empty without redirects).
    pub redirects: Vec<String>,
    /// The checked address the final connection was pinned to.
    pub address: IpAddr,
    pub status: u16,
    /// The media type, lower case, without parameters.
    pub content_type: String,
    /// Decoded body bytes.
    pub body_bytes: u32,
    /// The nonce of the wrapper (`<external-NONCE ...>`).
    pub nonce: String,
    /// How many parts the wrapped text has (1: all of it is in `text`).
    pub parts: u32,
    /// Part 0 of the wrapped text: a notice, `<external-NONCE source="URL">`, the body,
    /// `</external-NONCE>`.
    pub text: String,
}

/// Why a fetch was refused.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct NetRefusal {
    pub kind: RefusalKind,
    /// One line, e.g. `127.0.0.1 is loopback (127.0.0.0/8)`.
    pub reason: String,
}

#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusalKind {
    /// The URL itself: scheme, user info, host, syntax.
    Url,
    /// An address (literal or resolved) is in the forbidden table.
    Address,
    /// The name does not exist.
    Name,
    /// A redirect broke a rule (count, downgrade, missing Location).
    Redirect,
    /// The content type is not text-like, or its encoding is unsupported.
    Content,
    /// The server's certificate does not verify for the host name.
    Tls,
    /// A size or time limit was reached.
    Limit,
    /// The request's own values are invalid (a limit beyond its ceiling).
    Invalid,
    /// The host (of the URL or of a redirect) is not on the session's network allowlist.
    NotAllowed,
}

/// An egress proxy session's settings.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct ProxySession {
    /// The broker's name for the session; shown in audit rows.
    pub session: String,
    /// The per-session proxy token: clients send it as the password of `Proxy-Authorization:
    /// Basic` (any user name) or as `Proxy-Authorization: Bearer TOKEN`.
    pub token: String,
    /// Exact names (`example.com`), suffix patterns (`*.example.com`: strict subdomains) and IP
    /// addresses (an IP-literal target is refused unless its address is listed), each parsed by
    /// [`HostPattern::parse_international`] (IDN taken and turned into punycode); a bad entry
    /// refuses the session. The address table applies to every target whatever this list says.
    /// (Still text on the wire: `gatehouse sandbox` writes the user's `--allow-domain` values
    /// here as given, and the net-helper's refusal names the bad one.)
    pub allow: Vec<String>,
    /// Ports a tunnel may reach (empty: 443 only).
    pub ports: Vec<u16>,
    /// Read the tunnel's first TLS record and require its SNI to equal the CONNECT host.
    pub sni_check: bool,
    pub limits: ProxyLimits,
}

#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProxyLimits {
    /// Tunnels this session may have open at once.
    pub max_tunnels: u32,
    /// A tunnel with no byte in either direction for this long is closed.
    pub idle_ms: u32,
    /// Bytes (both directions together) after which a tunnel is closed.
    pub max_tunnel_bytes: u64,
}

impl Default for ProxyLimits {
    fn default() -> Self {
        ProxyLimits {
            max_tunnels: 32,
            idle_ms: 300_000,
            max_tunnel_bytes: 4 << 30,
        }
    }
}

/// How one proxy client connection ended: one audit row.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct EgressRecord {
    pub session: String,
    /// `host:port` as the client asked (the request line's target; `-` when there was none).
    pub target: String,
    pub verdict: EgressVerdict,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub enum EgressVerdict {
    /// Refused by policy, limits or authentication; `status` is what the client was sent
    /// (0: the connection was closed after `200`, e.g. an SNI mismatch).
    Refused { status: u16, reason: String },
    /// Allowed, but the upstream could not be reached (`502`/`504`).
    Failed { status: u16, reason: String },
    /// A tunnel ran and ended.
    Tunnelled {
        address: IpAddr,
        port: u16,
        bytes_up: u64,
        bytes_down: u64,
        /// Why it ended: `closed`, or the limit that ended it.
        ended: String,
    },
}

impl EgressRecord {
    /// The audit row's text, e.g. `egress REFUSED example.com:443 for session s1 (reason)`.
    pub fn audit_line(&self) -> String {
        let (t, s) = (&self.target, &self.session);
        match &self.verdict {
            EgressVerdict::Refused { reason, .. } => {
                format!("egress REFUSED {t} for session {s} ({reason})")
            }
            EgressVerdict::Failed { reason, .. } => {
                format!("egress FAILED {t} for session {s} ({reason})")
            }
            EgressVerdict::Tunnelled {
                address,
                port,
                bytes_up,
                bytes_down,
                ended,
            } => {
                let to = std::net::SocketAddr::new(*address, *port);
                format!(
                    "egress TUNNEL {t} for session {s} via {to} ({bytes_up} bytes up, {bytes_down} down; {ended})"
                )
            }
        }
    }
}

/// One `http_request` for the net-helper to send.
///
/// The same URL, address, pinning and TLS rules as a fetch apply to every hop. Redirects are
/// followed for GET and HEAD only (each hop re-checked, at most `limits.max_redirects`); any
/// other method gets the 3xx answer itself. With a `credential`:
/// - the URL must be https and its host must be `credential.host`, else the request is refused;
/// - the header is sent only on hops to `credential.host` over https, never after a redirect to
///   another host (nor back to it), and never on plain http;
/// - the agent's own headers may not include the credential's header name;
/// - reply headers that echo the credential are dropped, and every exact occurrence of a
///   `credential.scrub` string in the reply (body, headers, URLs) is replaced with
///   [`crate::secrets::REDACTED`] before the reply leaves the helper.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct HttpSend {
    pub method: crate::tool::HttpMethod,
    pub url: String,
    /// The agent's headers. Names are HTTP tokens, values have no CR, LF or NUL; headers that
    /// frame the request (Host, Content-Length, Transfer-Encoding, Connection, ...) are refused.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub credential: Option<crate::secrets::CredentialHeader>,
    pub limits: FetchLimits,
    /// As [`FetchRequest::allowed_hosts`]: every hop's host must be on the list.
    pub allowed_hosts: Option<Vec<HostPattern>>,
}

/// What an `http_request` brought back. The body is text, wrapped and split into parts exactly
/// as a fetched page ([`FetchedPage`]); an empty body needs no content type.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct HttpReply {
    pub page: FetchedPage,
    /// The final reply's headers, minus hop-by-hop ones and those that echoed the credential.
    pub headers: Vec<(String, String)>,
    /// The credential header went out on the final hop.
    pub credential_sent: bool,
    /// Names of reply headers dropped because they echoed the credential.
    pub dropped_headers: Vec<String>,
    /// How many occurrences of the credential were replaced in the reply.
    pub redactions: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn audit_lines_name_target_session_and_reason() {
        let r = EgressRecord {
            session: "s1".into(),
            target: "example.com:22".into(),
            verdict: EgressVerdict::Refused {
                status: 403,
                reason: "port 22 is not allowed".into(),
            },
        };
        assert_eq!(
            r.audit_line(),
            "egress REFUSED example.com:22 for session s1 (port 22 is not allowed)"
        );
        let t = EgressRecord {
            verdict: EgressVerdict::Tunnelled {
                address: "2001:4860::1".parse().unwrap(),
                port: 443,
                bytes_up: 10,
                bytes_down: 20,
                ended: "closed".into(),
            },
            ..r
        };
        assert_eq!(
            t.audit_line(),
            "egress TUNNEL example.com:22 for session s1 via [2001:4860::1]:443 (10 bytes up, 20 down; closed)"
        );
    }

    #[test]
    fn session_ids_are_visible_ascii() {
        assert!(McpSessionId::try_from("a1-B_2.~".to_string()).is_ok());
        for bad in ["", "a b", "a\nb", "\u{e9}"] {
            assert!(McpSessionId::try_from(bad.to_string()).is_err(), "{bad:?}");
        }
        assert!(McpSessionId::try_from("x".repeat(257)).is_err());
    }

    #[test]
    fn a_full_mcp_answer_fits_a_frame() {
        let env = crate::Envelope::new(
            u64::MAX,
            crate::Body::NetReply(NetReply::Mcp(McpAnswer {
                status: 200,
                session: Some(McpSessionId::try_from("s".repeat(256)).unwrap()),
                messages: vec!["\u{10FFFF}".repeat(MCP_REPLY_MAX as usize / 4)],
                redactions: u32::MAX,
            })),
        );
        assert!(crate::codec::encode(&env).is_ok());
    }

    #[test]
    fn a_full_fetch_part_fits_a_frame() {
        let env = crate::Envelope::new(
            u64::MAX,
            crate::Body::NetReply(NetReply::FetchPart {
                text: "\u{10FFFF}".repeat(FETCH_PART_MAX / 4),
            }),
        );
        assert!(crate::codec::encode(&env).is_ok());
    }
}
