//! A proxy session's allowlist: exact names, `*.suffix` patterns and IP addresses, compared
//! case-insensitively, trailing dot ignored, IDN as punycode (each entry is parsed the WHATWG way,
//! like the targets it is compared with).

use crate::target::{check_name, Host};
use std::collections::HashSet;
use std::net::IpAddr;

#[derive(Debug, Clone, Default)]
pub struct Allowlist {
    exact: HashSet<String>,
    /// Each with its leading dot: `*.example.com` is stored as `.example.com` and matches strict
    /// subdomains only.
    suffixes: Vec<String>,
    addrs: HashSet<IpAddr>,
}

impl Allowlist {
    pub fn parse(entries: &[String]) -> Result<Allowlist, String> {
        let mut out = Allowlist::default();
        for e in entries {
            let e = e.trim();
            let (wild, rest) = match e.strip_prefix("*.") {
                Some(rest) => (true, rest),
                None => (false, e),
            };
            let bad = |why: String| format!("allowlist entry {e:?}: {why}");
            match parse_host(rest).map_err(bad)? {
                Host::Name(n) if wild => out.suffixes.push(format!(".{n}")),
                Host::Name(n) => {
                    out.exact.insert(n);
                }
                Host::Ip(_) if wild => return Err(bad("a pattern must be a name".into())),
                Host::Ip(a) => {
                    out.addrs.insert(a);
                }
            }
        }
        Ok(out)
    }

    pub fn allows(&self, host: &Host) -> bool {
        match host {
            Host::Name(n) => {
                self.exact.contains(n) || self.suffixes.iter().any(|s| n.ends_with(s.as_str()))
            }
            Host::Ip(a) => self.addrs.contains(a),
        }
    }
}

/// A host as a URL parser reads it (IDNA to punycode, lower case, IPv4 in any form, `[v6]`),
/// trailing dot removed; `localhost` names refused.
pub fn parse_host(s: &str) -> Result<Host, String> {
    if s.is_empty() {
        return Err("empty host".into());
    }
    match url::Host::parse(s).map_err(|e| format!("not a host ({e})"))? {
        url::Host::Domain(d) => Ok(Host::Name(check_name(&d).map_err(|e| e.to_string())?)),
        url::Host::Ipv4(a) => Ok(Host::Ip(a.into())),
        url::Host::Ipv6(a) => Ok(Host::Ip(a.into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(e: &[&str]) -> Allowlist {
        Allowlist::parse(&e.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap()
    }
    fn name(s: &str) -> Host {
        parse_host(s).unwrap()
    }

    #[test]
    fn exact_suffix_case_dot_and_idn() {
        let l = list(&["Example.COM.", "*.docs.rs", "b\u{fc}cher.de", "203.0.113.9"]);
        assert!(l.allows(&name("example.com")));
        assert!(l.allows(&name("EXAMPLE.com.")));
        assert!(!l.allows(&name("www.example.com")));
        assert!(l.allows(&name("a.docs.rs")));
        assert!(l.allows(&name("A.B.Docs.RS.")));
        assert!(
            !l.allows(&name("docs.rs")),
            "*.suffix is strict subdomains only"
        );
        assert!(!l.allows(&name("evildocs.rs")));
        assert!(l.allows(&name("xn--bcher-kva.de")));
        assert!(l.allows(&name("B\u{dc}CHER.de")));
        assert!(l.allows(&name("203.0.113.9")));
        assert!(!l.allows(&name("203.0.113.10")));
        assert!(!l.allows(&name("[2001:db8::1]")));
    }

    #[test]
    fn bad_entries_are_refused() {
        assert!(Allowlist::parse(&["*.1.2.3.4".into()]).is_err());
        assert!(Allowlist::parse(&["".into()]).is_err());
        assert!(Allowlist::parse(&["localhost".into()]).is_err());
        assert!(Allowlist::parse(&["a b.com".into()]).is_err());
    }
}
