//! The forbidden-address table, from the IANA IPv4 and IPv6 special-purpose address registries,
//! and the judgement of one address against it.
//!
//! The table is data ([`V4_FORBIDDEN`], [`V6_FORBIDDEN`]); each range has a test at both edges.
//! Only 2000::/3 counts as global IPv6 at all. IPv6 addresses that carry an IPv4 address inside
//! (mapped, compatible, SIIT, NAT64, 6to4, Teredo, ISATAP) are also judged by that IPv4 address,
//! extracted here by bit position rather than with std helpers such as `to_ipv4` (which maps `::1`
//! to `0.0.0.1`).

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// One special-purpose range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Range {
    pub base: IpAddr,
    pub len: u8,
    /// What the range is, as a refusal says it: `127.0.0.1 is loopback (127.0.0.0/8)`.
    pub what: &'static str,
}

const fn v4(a: [u8; 4], len: u8, what: &'static str) -> Range {
    let base = IpAddr::V4(Ipv4Addr::new(a[0], a[1], a[2], a[3]));
    Range { base, len, what }
}

const fn v6(s: [u16; 8], len: u8, what: &'static str) -> Range {
    let base = Ipv6Addr::new(s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7]);
    let base = IpAddr::V6(base);
    Range { base, len, what }
}

/// IPv4 ranges no fetch or tunnel may reach. More specific entries come first, so the reason
/// names the narrowest range.
#[rustfmt::skip]
pub const V4_FORBIDDEN: &[Range] = &[
    v4([0, 0, 0, 0], 8, "\"this network\""),
    v4([10, 0, 0, 0], 8, "private-use"),
    v4([100, 64, 0, 0], 10, "shared address space (carrier-grade NAT)"),
    v4([127, 0, 0, 0], 8, "loopback"),
    v4([169, 254, 0, 0], 16, "link-local"),
    v4([172, 16, 0, 0], 12, "private-use"),
    v4([192, 0, 0, 0], 24, "IETF protocol assignments"),
    v4([192, 0, 2, 0], 24, "documentation (TEST-NET-1)"),
    v4([192, 88, 99, 0], 24, "6to4 relay anycast"),
    v4([192, 168, 0, 0], 16, "private-use"),
    v4([198, 18, 0, 0], 15, "benchmarking"),
    v4([198, 51, 100, 0], 24, "documentation (TEST-NET-2)"),
    v4([203, 0, 113, 0], 24, "documentation (TEST-NET-3)"),
    v4([224, 0, 0, 0], 4, "multicast"),
    v4([255, 255, 255, 255], 32, "limited broadcast"),
    v4([240, 0, 0, 0], 4, "reserved"),
];

/// IPv6 ranges no fetch or tunnel may reach, more specific first. Anything outside 2000::/3 is
/// refused as well ([`GLOBAL_V6`]).
#[rustfmt::skip]
pub const V6_FORBIDDEN: &[Range] = &[
    v6([0, 0, 0, 0, 0, 0, 0, 0], 128, "unspecified"),
    v6([0, 0, 0, 0, 0, 0, 0, 1], 128, "loopback"),
    v6([0, 0, 0, 0, 0, 0xffff, 0, 0], 96, "IPv4-mapped"),
    v6([0, 0, 0, 0, 0xffff, 0, 0, 0], 96, "IPv4-translated (SIIT)"),
    v6([0, 0, 0, 0, 0, 0, 0, 0], 96, "IPv4-compatible (deprecated)"),
    v6([0x64, 0xff9b, 0, 0, 0, 0, 0, 0], 96, "NAT64 well-known prefix"),
    v6([0x64, 0xff9b, 1, 0, 0, 0, 0, 0], 48, "local-use NAT64"),
    v6([0x100, 0, 0, 0, 0, 0, 0, 0], 64, "discard-only"),
    v6([0x2001, 0xdb8, 0, 0, 0, 0, 0, 0], 32, "documentation"),
    v6([0x2001, 0, 0, 0, 0, 0, 0, 0], 23, "IETF protocol assignments"),
    v6([0x2002, 0, 0, 0, 0, 0, 0, 0], 16, "6to4"),
    v6([0x3fff, 0, 0, 0, 0, 0, 0, 0], 20, "documentation"),
    v6([0x5f00, 0, 0, 0, 0, 0, 0, 0], 16, "segment routing (SRv6) SIDs"),
    v6([0xfc00, 0, 0, 0, 0, 0, 0, 0], 7, "unique local"),
    v6([0xfe80, 0, 0, 0, 0, 0, 0, 0], 10, "link-local"),
    v6([0xfec0, 0, 0, 0, 0, 0, 0, 0], 10, "site-local (deprecated)"),
    v6([0xff00, 0, 0, 0, 0, 0, 0, 0], 8, "multicast"),
];

/// The only IPv6 space that is global unicast at all.
pub const GLOBAL_V6: Range = v6([0x2000, 0, 0, 0, 0, 0, 0, 0], 3, "global unicast");

impl Range {
    /// Whether `a` (of the range's family) is in the range: no bit above the prefix differs.
    pub fn contains(&self, a: IpAddr) -> bool {
        let (base, a, bits) = match (self.base, a) {
            (IpAddr::V4(b), IpAddr::V4(a)) => (b.to_bits().into(), a.to_bits().into(), 32),
            (IpAddr::V6(b), IpAddr::V6(a)) => (b.to_bits(), a.to_bits(), 128),
            _ => return false,
        };
        (base ^ a)
            .checked_shr(bits - u32::from(self.len))
            .unwrap_or(0)
            == 0
    }
}

impl fmt::Display for Range {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // std's Display compresses as RFC 5952 says, but prints ::ffff:0:0 as "::ffff:0.0.0.0",
        // which hides the prefix.
        match self.base {
            IpAddr::V6(b) if b.to_ipv4_mapped().is_some() => {
                let v4 = b.to_bits() as u32;
                write!(f, "::ffff:{:x}:{:x}/{}", v4 >> 16, v4 & 0xffff, self.len)
            }
            base => write!(f, "{base}/{}", self.len),
        }
    }
}

/// Why an address is forbidden.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Forbidden {
    /// The address is in one of the ranges of [`V4_FORBIDDEN`] or [`V6_FORBIDDEN`].
    Listed { addr: IpAddr, range: Range },
    /// An IPv6 address whose embedded IPv4 address is forbidden: the address, how it carries
    /// the IPv4 address (`IPv4-mapped`, `6to4`, `Teredo client`, ...), that IPv4 address, and
    /// the range it is in.
    Embedded(Ipv6Addr, &'static str, Ipv4Addr, Range),
    /// IPv6 outside 2000::/3.
    NotGlobal { addr: Ipv6Addr },
}

impl fmt::Display for Forbidden {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Forbidden::Listed { addr, range } => write!(f, "{addr} is {} ({range})", range.what),
            Forbidden::Embedded(addr, how, inner, r) => {
                write!(
                    f,
                    "{addr} embeds {inner} ({how}), which is {} ({r})",
                    r.what
                )
            }
            Forbidden::NotGlobal { addr } => {
                write!(f, "{addr} is not global unicast (outside {GLOBAL_V6})")
            }
        }
    }
}

/// The first range of the table that holds `a`.
fn listed(a: IpAddr) -> Option<Range> {
    let table = V4_FORBIDDEN.iter().chain(V6_FORBIDDEN);
    table.copied().find(|r| r.contains(a))
}

/// Every IPv4 address `a` carries, by the position each embedding defines (the top bits
/// compared are the embedding's prefix: ::ffff:0:0/96, ::ffff:0:0:0/96, ::/96, 64:ff9b::/96,
/// 64:ff9b:1::/48, 2002::/16, 2001::/32).
pub fn embedded_v4(a: Ipv6Addr) -> Vec<(&'static str, Ipv4Addr)> {
    let bits = a.to_bits();
    let at = |shift: u32| Ipv4Addr::from_bits((bits >> shift) as u32);
    let teredo = bits >> 96 == 0x2001_0000;
    // ISATAP interface identifiers (RFC 5214): 0000:5efe or 0200:5efe (u/l bit), any prefix.
    let isatap = matches!((bits >> 32) as u32, 0x0000_5efe | 0x0200_5efe);
    let carried = [
        (bits >> 32 == 0xffff, "IPv4-mapped", at(0)),
        (bits >> 32 == 0xffff_0000, "IPv4-translated (SIIT)", at(0)),
        // :: and ::1 are the unspecified and loopback addresses, not 0.0.0.0 and 0.0.0.1.
        (bits >> 32 == 0 && bits > 1, "IPv4-compatible", at(0)),
        (bits >> 32 == 0x64_ff9b << 64, "NAT64", at(0)),
        // RFC 8215 leaves the prefix length to the operator; the /96 form is judged here, and
        // the whole /48 is forbidden by the table anyway.
        (bits >> 80 == 0x64_ff9b_0001, "local-use NAT64", at(0)),
        (bits >> 112 == 0x2002, "6to4", at(80)),
        (teredo, "Teredo server", at(64)),
        (teredo, "Teredo client", Ipv4Addr::from_bits(!(bits as u32))),
        (isatap, "ISATAP", at(0)),
    ];
    let carried = carried.into_iter().filter(|(yes, ..)| *yes);
    carried.map(|(_, how, inner)| (how, inner)).collect()
}

/// The table's verdict on an address. An IPv6 address is judged by the IPv4 addresses it
/// carries first (the more telling reason), then by the IPv6 ranges, then by the
/// global-unicast rule.
pub fn judge(a: IpAddr) -> Result<(), Forbidden> {
    if let IpAddr::V6(addr) = a {
        for (how, inner) in embedded_v4(addr) {
            if let Some(range) = listed(inner.into()) {
                return Err(Forbidden::Embedded(addr, how, inner, range));
            }
        }
    }
    match (listed(a), a) {
        (Some(range), _) => Err(Forbidden::Listed { addr: a, range }),
        (None, IpAddr::V6(addr)) if !GLOBAL_V6.contains(a) => Err(Forbidden::NotGlobal { addr }),
        _ => Ok(()),
    }
}

/// The table plus, in test builds only, one loopback address treated as public so that tests
/// have a "public" server to talk to. Release builds of the helper have no such field (the
/// `bench-hooks` feature adds it to the library for bench/, with no switch that sets it).
#[derive(Debug, Clone, Default)]
pub struct AddressPolicy {
    #[cfg(any(feature = "test-hooks", feature = "bench-hooks"))]
    pub test_public: Option<IpAddr>,
}

impl AddressPolicy {
    pub fn judge(&self, a: IpAddr) -> Result<(), Forbidden> {
        #[cfg(any(feature = "test-hooks", feature = "bench-hooks"))]
        if self.test_public == Some(a) {
            return Ok(());
        }
        judge(a)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (first, last, the address below, the address above, the range as printed)
    type Edge = (
        &'static str,
        &'static str,
        Option<&'static str>,
        Option<&'static str>,
        &'static str,
    );

    fn v4s(s: &str) -> Ipv4Addr {
        s.parse().unwrap()
    }
    fn v6s(s: &str) -> Ipv6Addr {
        s.parse().unwrap()
    }
    fn reason(a: &str) -> String {
        judge(a.parse().unwrap()).unwrap_err().to_string()
    }

    /// Every IPv4 range the issue lists, with its first and last address spelled out by hand
    /// (not computed from the table), the address just outside each edge, and the reason.
    #[test]
    fn every_v4_range_edge() {
        // (first, last, below, above, what, cidr)
        let edges: &[Edge] = &[
            (
                "0.0.0.0",
                "0.255.255.255",
                None,
                Some("1.0.0.0"),
                "0.0.0.0/8",
            ),
            (
                "10.0.0.0",
                "10.255.255.255",
                Some("9.255.255.255"),
                Some("11.0.0.0"),
                "10.0.0.0/8",
            ),
            (
                "100.64.0.0",
                "100.127.255.255",
                Some("100.63.255.255"),
                Some("100.128.0.0"),
                "100.64.0.0/10",
            ),
            (
                "127.0.0.0",
                "127.255.255.255",
                Some("126.255.255.255"),
                Some("128.0.0.0"),
                "127.0.0.0/8",
            ),
            (
                "169.254.0.0",
                "169.254.255.255",
                Some("169.253.255.255"),
                Some("169.255.0.0"),
                "169.254.0.0/16",
            ),
            (
                "172.16.0.0",
                "172.31.255.255",
                Some("172.15.255.255"),
                Some("172.32.0.0"),
                "172.16.0.0/12",
            ),
            (
                "192.0.0.0",
                "192.0.0.255",
                Some("191.255.255.255"),
                Some("192.0.1.0"),
                "192.0.0.0/24",
            ),
            (
                "192.0.2.0",
                "192.0.2.255",
                Some("192.0.1.255"),
                Some("192.0.3.0"),
                "192.0.2.0/24",
            ),
            (
                "192.88.99.0",
                "192.88.99.255",
                Some("192.88.98.255"),
                Some("192.88.100.0"),
                "192.88.99.0/24",
            ),
            (
                "192.168.0.0",
                "192.168.255.255",
                Some("192.167.255.255"),
                Some("192.169.0.0"),
                "192.168.0.0/16",
            ),
            (
                "198.18.0.0",
                "198.19.255.255",
                Some("198.17.255.255"),
                Some("198.20.0.0"),
                "198.18.0.0/15",
            ),
            (
                "198.51.100.0",
                "198.51.100.255",
                Some("198.51.99.255"),
                Some("198.51.101.0"),
                "198.51.100.0/24",
            ),
            (
                "203.0.113.0",
                "203.0.113.255",
                Some("203.0.112.255"),
                Some("203.0.114.0"),
                "203.0.113.0/24",
            ),
            (
                "224.0.0.0",
                "239.255.255.255",
                Some("223.255.255.255"),
                None,
                "224.0.0.0/4",
            ),
            ("240.0.0.0", "255.255.255.254", None, None, "240.0.0.0/4"),
            (
                "255.255.255.255",
                "255.255.255.255",
                None,
                None,
                "255.255.255.255/32",
            ),
        ];
        assert_eq!(
            edges.len(),
            V4_FORBIDDEN.len(),
            "a range without an edge test"
        );
        for (first, last, below, above, cidr) in edges {
            for a in [first, last] {
                let r = reason(a);
                assert!(r.starts_with(&format!("{a} is ")), "{r}");
                assert!(r.ends_with(&format!("({cidr})")), "{a}: {r}");
            }
            for out in [below, above].into_iter().flatten() {
                assert!(
                    judge(v4s(out).into()).is_ok(),
                    "{out} is outside {cidr} and public"
                );
            }
        }
        // Where the neighbour is itself forbidden, it is forbidden by its own range.
        assert!(reason("239.255.255.255").ends_with("(224.0.0.0/4)"));
        assert!(reason("240.0.0.0").ends_with("(240.0.0.0/4)"));
        assert!(reason("255.255.255.254").ends_with("(240.0.0.0/4)"));
        assert_eq!(reason("127.0.0.1"), "127.0.0.1 is loopback (127.0.0.0/8)");
        assert_eq!(reason("0.0.0.0"), "0.0.0.0 is \"this network\" (0.0.0.0/8)");
    }

    #[test]
    fn every_v6_range_edge() {
        // (first, last, below, above, cidr as printed)
        let edges: &[Edge] = &[
            ("::", "::", None, None, "::/128"),
            ("::1", "::1", None, None, "::1/128"),
            (
                "::ffff:0:0",
                "::ffff:ffff:ffff",
                None,
                None,
                "::ffff:0:0/96",
            ),
            (
                "::ffff:0:0:0",
                "::ffff:0:ffff:ffff",
                None,
                None,
                "::ffff:0:0:0/96",
            ),
            ("::2", "::ffff:ffff", None, None, "::/96"),
            (
                "64:ff9b::",
                "64:ff9b::ffff:ffff",
                None,
                None,
                "64:ff9b::/96",
            ),
            (
                "64:ff9b:1::",
                "64:ff9b:1:ffff:ffff:ffff:ffff:ffff",
                None,
                None,
                "64:ff9b:1::/48",
            ),
            ("100::", "100::ffff:ffff:ffff:ffff", None, None, "100::/64"),
            (
                "2001:db8::",
                "2001:db8:ffff:ffff:ffff:ffff:ffff:ffff",
                None,
                None,
                "2001:db8::/32",
            ),
            (
                "2001::",
                "2001:1ff:ffff:ffff:ffff:ffff:ffff:ffff",
                Some("2000:ffff:ffff:ffff:ffff:ffff:ffff:ffff"),
                Some("2001:200::"),
                "2001::/23",
            ),
            (
                "2002::",
                "2002:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
                Some("2001:ffff:ffff:ffff:ffff:ffff:ffff:ffff"),
                Some("2003::"),
                "2002::/16",
            ),
            (
                "3fff::",
                "3fff:fff:ffff:ffff:ffff:ffff:ffff:ffff",
                Some("3ffe:ffff:ffff:ffff:ffff:ffff:ffff:ffff"),
                Some("3fff:1000::"),
                "3fff::/20",
            ),
            (
                "5f00::",
                "5f00:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
                None,
                None,
                "5f00::/16",
            ),
            (
                "fc00::",
                "fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
                None,
                None,
                "fc00::/7",
            ),
            (
                "fe80::",
                "febf:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
                None,
                None,
                "fe80::/10",
            ),
            (
                "fec0::",
                "feff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
                None,
                None,
                "fec0::/10",
            ),
            (
                "ff00::",
                "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
                None,
                None,
                "ff00::/8",
            ),
        ];
        assert_eq!(
            edges.len(),
            V6_FORBIDDEN.len(),
            "a range without an edge test"
        );
        for (first, last, below, above, cidr) in edges {
            for a in [first, last] {
                let got = judge(v6s(a).into()).unwrap_err();
                let range = match &got {
                    Forbidden::Listed { range, .. } => *range,
                    // Compat/mapped/NAT64 edges whose embedded IPv4 is itself forbidden
                    // (0.0.0.0/8, 255.255.255.255) are refused through the embedding.
                    Forbidden::Embedded { .. } => *V6_FORBIDDEN
                        .iter()
                        .find(|r| r.contains(v6s(a).into()))
                        .unwrap(),
                    other => panic!("{a}: {other}"),
                };
                assert_eq!(range.to_string(), *cidr, "{a}: {got}");
            }
            for out in [below, above].into_iter().flatten() {
                assert!(
                    judge(v6s(out).into()).is_ok(),
                    "{out} is outside {cidr} and public"
                );
            }
        }
        // Neighbours that fall outside 2000::/3 are refused by the global-unicast rule.
        for a in [
            "100:0:0:1::",
            "ff::",
            "1fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
            "4000::",
            "fbff::",
        ] {
            assert!(
                matches!(judge(v6s(a).into()), Err(Forbidden::NotGlobal { .. })),
                "{a}"
            );
        }
        assert!(reason("::1").ends_with("is loopback (::1/128)"));
        assert_eq!(
            reason("4000::1"),
            "4000::1 is not global unicast (outside 2000::/3)"
        );
        assert!(judge(v6s("2606:4700::1111").into()).is_ok());
        assert!(judge(v6s("1fff::1").into()).is_err());
        assert!(judge(v6s("2000::").into()).is_ok());
        assert!(judge(v6s("3ffe:ffff::").into()).is_ok());
    }

    #[test]
    fn embedded_ipv4_is_judged_by_position() {
        let cases = [
            ("::ffff:127.0.0.1", "::ffff:127.0.0.1 embeds 127.0.0.1 (IPv4-mapped), which is loopback (127.0.0.0/8)"),
            ("::ffff:0:a00:1", "::ffff:0:a00:1 embeds 10.0.0.1 (IPv4-translated (SIIT)), which is private-use (10.0.0.0/8)"),
            ("::7f00:1", "::7f00:1 embeds 127.0.0.1 (IPv4-compatible), which is loopback (127.0.0.0/8)"),
            ("64:ff9b::a9fe:a9fe", "64:ff9b::a9fe:a9fe embeds 169.254.169.254 (NAT64), which is link-local (169.254.0.0/16)"),
            ("64:ff9b:1::c0a8:1", "64:ff9b:1::c0a8:1 embeds 192.168.0.1 (local-use NAT64), which is private-use (192.168.0.0/16)"),
            ("2002:7f00:1::", "2002:7f00:1:: embeds 127.0.0.1 (6to4), which is loopback (127.0.0.0/8)"),
            ("2001:0:a00:1::", "2001:0:a00:1:: embeds 10.0.0.1 (Teredo server), which is private-use (10.0.0.0/8)"),
            ("2001:0:808:808:0:0:80ff:fffe", "2001:0:808:808::80ff:fffe embeds 127.0.0.1 (Teredo client), which is loopback (127.0.0.0/8)"),
            ("2600::5efe:a9fe:a9fe", "2600::5efe:a9fe:a9fe embeds 169.254.169.254 (ISATAP), which is link-local (169.254.0.0/16)"),
            ("2600::200:5efe:c0a8:101", "2600::200:5efe:c0a8:101 embeds 192.168.1.1 (ISATAP), which is private-use (192.168.0.0/16)"),
        ];
        for (a, want) in cases {
            assert_eq!(reason(a), want);
        }
        // A public IPv4 inside a forbidden embedding is still refused, by the IPv6 range.
        assert_eq!(
            reason("::ffff:8.8.8.8"),
            "::ffff:8.8.8.8 is IPv4-mapped (::ffff:0:0/96)"
        );
        assert_eq!(
            reason("2002:808:808::1"),
            "2002:808:808::1 is 6to4 (2002::/16)"
        );
        assert_eq!(
            reason("64:ff9b::808:808"),
            "64:ff9b::808:808 is NAT64 well-known prefix (64:ff9b::/96)"
        );
        // ISATAP with a public IPv4 in a global prefix is an ordinary global address.
        assert!(judge(v6s("2600::5efe:808:808").into()).is_ok());
        // ::1 is loopback, not "compatible 0.0.0.1"; :: is unspecified.
        assert_eq!(reason("::1"), "::1 is loopback (::1/128)");
        assert_eq!(reason("::"), ":: is unspecified (::/128)");
    }

    #[test]
    fn public_addresses_pass() {
        for a in [
            "1.1.1.1",
            "8.8.8.8",
            "93.184.216.34",
            "100.63.0.1",
            "172.32.0.1",
            "223.255.255.255",
            "2606:4700:4700::1111",
            "2a00:1450::1",
        ] {
            assert!(judge(a.parse().unwrap()).is_ok(), "{a}");
        }
    }

    #[test]
    fn policy_without_test_hooks_is_the_table() {
        let p = AddressPolicy::default();
        assert!(p.judge("127.0.0.2".parse().unwrap()).is_err());
    }

    #[cfg(feature = "test-hooks")]
    #[test]
    fn test_public_address_applies_to_that_address_only() {
        let p = AddressPolicy {
            test_public: Some("127.0.0.2".parse().unwrap()),
        };
        assert!(p.judge("127.0.0.2".parse().unwrap()).is_ok());
        assert!(p.judge("127.0.0.1".parse().unwrap()).is_err());
        assert!(p.judge("::ffff:127.0.0.2".parse().unwrap()).is_err());
    }
}
