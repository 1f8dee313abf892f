//! Hosts and host patterns: the one parser of a URL's host and the one allowlist entry type.
//!
//! Every process that compares a host with a list uses these: the policy (`hosts` of a rule, a
//! profile's `network`), the safe fetch's per-request allowlist ([`crate::net::FetchRequest`]),
//! the egress proxy's allowlist, and a credential's hosts ([`crate::secrets::CredentialSpec`]).
//!
//! A [`Host`] is what the WHATWG URL parser (the `url` crate, as browsers parse) makes of a
//! URL's host: a name in ASCII (IDNA to punycode), lower case, without its trailing dot, or an IP
//! address (IPv4 in any of the forms a browser accepts: `0x7f.1`, `2130706433`...). Names the
//! resolver would answer locally (`localhost`, `*.localhost`, RFC 6761) are refused.
//!
//! A [`HostPattern`] is an exact host (a name or an IP address) or `*.suffix`, which matches strict
//! subdomains of `suffix` only (never `suffix` itself). Its rules, the same wherever it is used:
//! - the host part is parsed as a URL host (above), so `0x7f.1` is the address `127.0.0.1`, an
//!   IPv6 address is written bare or in brackets, and `localhost` is refused;
//! - name labels are 1 to 63 of `a-z 0-9 - _` (`_` because real names carry it, e.g. `_dmarc`),
//!   the name at most 253 characters; `*` only as the whole first label;
//! - a wildcard needs a name of at least two labels (`*.com` is refused) and never an address;
//! - no scheme, port or path;
//! - [`HostPattern::parse`] takes ASCII only (an international name is written in its punycode
//!   form, so that what the user confirms is exactly what is compared: credential bindings and
//!   policy documents); [`HostPattern::parse_international`] also takes Unicode names and
//!   converts them (IDNA), for the command line's `--allow-domain`.
//!
//! The canonical form ([`HostPattern::as_string`], `Display`, the wire form) is the pattern's
//! ASCII text: `example.com`, `*.example.com`, `203.0.113.9`, `2001:db8::1`.

use serde::{Deserialize, Serialize};
use std::net::{IpAddr, Ipv6Addr};

/// The longest name label and the longest name (RFC 1035).
pub const MAX_LABEL_LEN: usize = 63;
pub const MAX_NAME_LEN: usize = 253;

/// Why a value is not a host or a host pattern; the text names the value and says what to change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidHost(pub String);

/// Why a URL's host is refused before any lookup.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostRefusal {
    #[error("the URL has an empty host")]
    Empty,
    #[error("{0} is reserved for loopback (RFC 6761)")]
    Localhost(String),
    #[error("not a valid URL ({0})")]
    Invalid(String),
}

/// A host as the WHATWG URL parser writes it (see the module documentation).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[serde(try_from = "String", into = "String")]
pub enum Host {
    /// An ASCII (punycode), lower-case name without a trailing dot.
    Name(String),
    /// An IP literal, in whatever form it was written (decimal, octal, hex, short...).
    Ip(IpAddr),
}

impl Host {
    /// The host of a parsed URL: the one place a URL's host is read (the net-helper's URL
    /// check, the policy's network allowlist).
    pub fn of_url(url: &url::Url) -> Result<Host, HostRefusal> {
        match url.host() {
            None => Err(HostRefusal::Empty),
            Some(url::Host::Ipv4(a)) => Ok(Host::Ip(IpAddr::V4(a))),
            Some(url::Host::Ipv6(a)) => Ok(Host::Ip(IpAddr::V6(a))),
            Some(url::Host::Domain(d)) => Ok(Host::Name(check_name(d)?)),
        }
    }

    /// The host of URL text, parsed the WHATWG way.
    pub fn of_url_str(url: &str) -> Result<Host, HostRefusal> {
        let url = url::Url::parse(url).map_err(|e| HostRefusal::Invalid(e.to_string()))?;
        Host::of_url(&url)
    }

    /// A host written alone (a CONNECT target's host, a pattern's host part): as a URL parser
    /// reads it (IDNA to punycode, lower case, IPv4 in any form, `[v6]`), plus a bare IPv6
    /// address (the canonical form).
    pub fn parse(s: &str) -> Result<Host, InvalidHost> {
        if s.is_empty() {
            return Err(InvalidHost("empty host".into()));
        }
        if let Ok(a) = s.parse::<Ipv6Addr>() {
            return Ok(Host::Ip(IpAddr::V6(a)));
        }
        match url::Host::parse(s).map_err(|e| InvalidHost(format!("not a host ({e})")))? {
            url::Host::Domain(d) => check_name(&d)
                .map(Host::Name)
                .map_err(|e| InvalidHost(e.to_string())),
            url::Host::Ipv4(a) => Ok(Host::Ip(a.into())),
            url::Host::Ipv6(a) => Ok(Host::Ip(a.into())),
        }
    }

    pub fn is_ip(&self) -> bool {
        matches!(self, Host::Ip(_))
    }
}

/// A WHATWG-parsed domain (already ASCII and lower case) without its trailing dot; names the
/// resolver would answer locally are refused.
fn check_name(d: &str) -> Result<String, HostRefusal> {
    let name = d.strip_suffix('.').unwrap_or(d);
    if name.is_empty() || name.starts_with('.') || name.contains("..") {
        return Err(HostRefusal::Empty);
    }
    if name == "localhost" || name.ends_with(".localhost") {
        return Err(HostRefusal::Localhost(name.to_string()));
    }
    Ok(name.to_string())
}

impl std::fmt::Display for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Host::Name(n) => f.write_str(n),
            Host::Ip(a) => write!(f, "{a}"),
        }
    }
}

impl TryFrom<String> for Host {
    type Error = InvalidHost;
    fn try_from(s: String) -> Result<Self, InvalidHost> {
        let h = Host::parse(&s)?;
        // Only the canonical form travels: a frame holding anything else is malformed.
        if h.to_string() != s {
            return Err(InvalidHost(format!("host {s:?} is not in canonical form")));
        }
        Ok(h)
    }
}

impl From<Host> for String {
    fn from(h: Host) -> String {
        h.to_string()
    }
}

/// An allowlist entry: an exact host or `*.suffix` (see the module documentation for the rules).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[serde(try_from = "String", into = "String")]
pub enum HostPattern {
    /// This host only: a name, or an IP address (which an IP-literal URL must equal).
    Exact(Host),
    /// `*.example.com`, stored without `*.`: any name below `example.com`, not `example.com`.
    Suffix(String),
}

impl HostPattern {
    /// An ASCII pattern (international names in punycode).
    pub fn parse(s: &str) -> Result<HostPattern, InvalidHost> {
        if !s.is_ascii() {
            return Err(InvalidHost(format!(
                "host {s:?}: write international names in their ASCII (punycode, xn--...) form"
            )));
        }
        HostPattern::parse_international(s)
    }

    /// A pattern whose name may also be written in Unicode (converted to punycode by IDNA).
    pub fn parse_international(s: &str) -> Result<HostPattern, InvalidHost> {
        let s = s.trim();
        let bare_v6 = s.parse::<Ipv6Addr>().is_ok() || s.starts_with('[');
        if s.contains('/') || (s.contains(':') && !bare_v6) {
            return Err(InvalidHost(format!(
                "host {s:?}: give a host name or address only, without scheme, port or path"
            )));
        }
        let (wild, rest) = match s.strip_prefix("*.") {
            Some(r) => (true, r),
            None => (false, s),
        };
        let host = Host::parse(rest).map_err(|e| InvalidHost(format!("host {s:?}: {e}")))?;
        let name = match host {
            Host::Ip(_) if wild => {
                return Err(InvalidHost(format!(
                    "host {s:?}: a wildcard needs a domain name, not an address"
                )))
            }
            Host::Ip(_) => return Ok(HostPattern::Exact(host)),
            Host::Name(n) => n,
        };
        let label_ok = |l: &str| {
            !l.is_empty()
                && l.len() <= MAX_LABEL_LEN
                && l.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
        };
        if name.len() > MAX_NAME_LEN || !name.split('.').all(label_ok) {
            return Err(InvalidHost(format!(
                "host {s:?} is not a host name or IP address (labels of 1 to {MAX_LABEL_LEN} letters, digits, '-' or '_'; at most {MAX_NAME_LEN} characters)"
            )));
        }
        if wild {
            if !name.contains('.') {
                return Err(InvalidHost(format!(
                    "host {s:?}: a wildcard needs a domain with at least two labels after \"*.\""
                )));
            }
            return Ok(HostPattern::Suffix(name));
        }
        Ok(HostPattern::Exact(Host::Name(name)))
    }

    pub fn is_wildcard(&self) -> bool {
        matches!(self, HostPattern::Suffix(_))
    }

    /// The canonical text (what `Display` writes and the wire carries).
    pub fn as_string(&self) -> String {
        self.to_string()
    }

    /// Does this pattern admit `host`? Exact hosts compare equal (names after the parser's
    /// normalizing, addresses as addresses); `*.suffix` admits strict subdomains only.
    pub fn matches(&self, host: &Host) -> bool {
        match (self, host) {
            (HostPattern::Exact(h), host) => h == host,
            (HostPattern::Suffix(s), Host::Name(n)) => n
                .strip_suffix(s.as_str())
                .is_some_and(|head| head.len() > 1 && head.ends_with('.')),
            (HostPattern::Suffix(_), Host::Ip(_)) => false,
        }
    }

    /// [`Self::matches`] on host text (parsed as [`Host::parse`]); text that is not a host
    /// matches nothing.
    pub fn matches_str(&self, host: &str) -> bool {
        Host::parse(host).is_ok_and(|h| self.matches(&h))
    }
}

impl std::fmt::Display for HostPattern {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HostPattern::Exact(h) => write!(f, "{h}"),
            HostPattern::Suffix(s) => write!(f, "*.{s}"),
        }
    }
}

impl TryFrom<String> for HostPattern {
    type Error = InvalidHost;
    fn try_from(s: String) -> Result<Self, InvalidHost> {
        let p = HostPattern::parse(&s)?;
        if p.to_string() != s {
            return Err(InvalidHost(format!(
                "host pattern {s:?} is not in canonical form"
            )));
        }
        Ok(p)
    }
}

impl From<HostPattern> for String {
    fn from(p: HostPattern) -> String {
        p.to_string()
    }
}

/// Is `host` admitted by any of `patterns`?
pub fn any_matches(patterns: &[HostPattern], host: &Host) -> bool {
    patterns.iter().any(|p| p.matches(host))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(s: &str) -> Host {
        Host::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn url_hosts_are_parsed_the_whatwg_way() {
        for (u, want) in [
            ("http://2130706433/", "127.0.0.1"),
            ("http://0x7f.1/", "127.0.0.1"),
            ("http://[::ffff:127.0.0.1]/", "::ffff:127.0.0.1"),
            ("https://B\u{fc}cher.EXAMPLE./x", "xn--bcher-kva.example"),
            ("https://Docs.RS./crate", "docs.rs"),
        ] {
            assert_eq!(Host::of_url_str(u).unwrap().to_string(), want, "{u}");
        }
        assert_eq!(
            Host::of_url_str("http://LocalHost./").unwrap_err(),
            HostRefusal::Localhost("localhost".into())
        );
        assert_eq!(
            Host::of_url_str("http://./").unwrap_err(),
            HostRefusal::Empty
        );
        assert!(matches!(
            Host::of_url_str("not a url"),
            Err(HostRefusal::Invalid(_))
        ));
        assert_eq!(
            Host::of_url_str("mailto:a@b.com").unwrap_err(),
            HostRefusal::Empty
        );
    }

    #[test]
    fn every_form_the_three_old_types_took_is_taken() {
        // The policy's (`example.com`, `*.example.com`), the credentials' (case, trailing dot,
        // brackets, `_`) and the proxy allowlist's (IDN, addresses).
        for (input, canonical) in [
            ("docs.rs", "docs.rs"),
            ("*.python.org", "*.python.org"),
            ("API.Example.COM.", "api.example.com"),
            ("[::1]", "::1"),
            ("::1", "::1"),
            ("203.0.113.9", "203.0.113.9"),
            ("_dmarc.example.com", "_dmarc.example.com"),
            (" *.docs.rs ", "*.docs.rs"),
        ] {
            assert_eq!(HostPattern::parse(input).unwrap().to_string(), canonical);
        }
        assert_eq!(
            HostPattern::parse_international("b\u{fc}cher.de")
                .unwrap()
                .to_string(),
            "xn--bcher-kva.de"
        );
    }

    #[test]
    fn every_refusal_of_the_three_old_types_is_kept() {
        for bad in [
            "https://a.com",
            "https://docs.rs",
            "a.com:443",
            "a.com/x",
            "bücher.de",
            "*",
            "*.",
            "*.com",
            "a.*.com",
            "",
            "a..b",
            "*.1.2.3.4",
            "localhost",
            "a b.com",
            "bad host",
            "bad domain!",
        ] {
            assert!(HostPattern::parse(bad).is_err(), "{bad:?}");
            assert!(HostPattern::parse_international(bad).is_err() || bad == "bücher.de");
        }
        assert!(HostPattern::parse(&format!("{}.com", "a".repeat(64))).is_err());
        assert!(HostPattern::parse(&format!("{}.com", "a".repeat(63))).is_ok());
    }

    #[test]
    fn matching_is_exact_or_strict_subdomain() {
        let h = HostPattern::parse("API.Example.COM.").unwrap();
        assert!(h.matches(&host("api.example.com")) && h.matches_str("API.example.com."));
        assert!(!h.matches_str("evil.api.example.com"));
        assert!(!h.matches_str("api.example.com.evil.net") && !h.matches_str("example.com"));
        let v6 = HostPattern::parse("[::1]").unwrap();
        assert!(v6.matches_str("::1") && v6.matches_str("[0:0::1]"));
        let w = HostPattern::parse("*.example.com").unwrap();
        assert!(w.matches_str("a.example.com") && w.matches_str("B.a.Example.com."));
        assert!(!w.matches_str("example.com") && !w.matches_str("aexample.com"));
        let ip = HostPattern::parse("127.0.0.1").unwrap();
        assert!(ip.matches(&Host::of_url_str("http://0x7f.1/").unwrap()));
        assert!(!ip.matches_str("127.0.0.2"));
        assert!(!h.matches_str("not a host!"));
    }

    #[test]
    fn only_the_canonical_form_decodes() {
        for p in ["*.example.com", "::1", "xn--bcher-kva.de", "1.2.3.4"] {
            let p = HostPattern::parse(p).unwrap();
            let bytes = postcard::to_stdvec(&p).unwrap();
            assert_eq!(postcard::from_bytes::<HostPattern>(&bytes).unwrap(), p);
        }
        for raw in ["Example.com", "[::1]", "*.com", "a.com."] {
            let bytes = postcard::to_stdvec(&raw.to_string()).unwrap();
            assert!(
                postcard::from_bytes::<HostPattern>(&bytes).is_err(),
                "{raw}"
            );
            assert!(
                postcard::from_bytes::<Host>(&bytes).is_err() || raw == "*.com",
                "{raw}"
            );
        }
    }
}
