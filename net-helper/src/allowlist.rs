//! A session's allowlist, matched against the host of a checked URL or CONNECT target. The
//! entries are [`HostPattern`]s (ipc-schema's one host pattern type: its rules are there); this
//! module only matches.

use crate::target::Host;
use ipc_schema::host::{self, HostPattern};

#[derive(Debug, Clone, Default)]
pub struct Allowlist(Vec<HostPattern>);

impl Allowlist {
    pub fn new(patterns: &[HostPattern]) -> Allowlist {
        Allowlist(patterns.to_vec())
    }

    /// The proxy session's entries, still text on the wire (see `ProxySession::allow`).
    pub fn parse(entries: &[String]) -> Result<Allowlist, String> {
        entries
            .iter()
            .map(|e| {
                let e = e.trim();
                HostPattern::parse_international(e).map_err(|why| {
                    let why = why.0;
                    // Name the entry once: the pattern's message names it too.
                    let why = why
                        .strip_prefix(&format!("host {e:?}: "))
                        .unwrap_or(&why)
                        .to_string();
                    format!("allowlist entry {e:?}: {why}")
                })
            })
            .collect::<Result<_, _>>()
            .map(Allowlist)
    }

    pub fn allows(&self, host: &Host) -> bool {
        host::any_matches(&self.0, host)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(e: &[&str]) -> Allowlist {
        Allowlist::parse(&e.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap()
    }
    fn name(s: &str) -> Host {
        Host::parse(s).unwrap()
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
        assert_eq!(
            Allowlist::parse(&["bad domain!".into()]).unwrap_err(),
            "allowlist entry \"bad domain!\": not a host (invalid international domain name)"
        );
    }
}
