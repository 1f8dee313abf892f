//! Name resolution (A and AAAA asked together, the name made absolute: no search domain is ever
//! appended, no hosts file, no cache, and only the name servers the helper was given), the
//! judgement of every address a host has, and the TCP connection pinned to a judged address.

use crate::error::{failed, refused, FetchError};
use crate::target::Host;
use crate::NetContext;
use hickory_resolver::config::{
    NameServerConfig, ResolveHosts, ResolverConfig as HickoryConfig, ResolverOpts,
};
use hickory_resolver::name_server::TokioConnectionProvider;
use hickory_resolver::proto::rr::{RData, RecordType};
use hickory_resolver::proto::xfer::Protocol;
use hickory_resolver::{Name, TokioResolver};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;
use tokio::net::TcpStream;

/// The helper's resolver.
#[derive(Clone)]
pub struct NetResolver {
    inner: TokioResolver,
}

impl NetResolver {
    /// A resolver that asks `servers` (UDP, with TCP for truncated answers) and nothing else.
    pub fn new(servers: &[SocketAddr], timeout: Duration) -> NetResolver {
        let mut cfg = HickoryConfig::new();
        for s in servers {
            cfg.add_name_server(NameServerConfig::new(*s, Protocol::Udp));
            cfg.add_name_server(NameServerConfig::new(*s, Protocol::Tcp));
        }
        let mut opts = ResolverOpts::default();
        // Absolute names only: never a search domain, never /etc/hosts (the helper has no
        // filesystem after lockdown, and the hosts file is not the network's answer).
        opts.ndots = 0;
        opts.use_hosts_file = ResolveHosts::Never;
        // Every fetch resolves afresh; the connection is pinned to what this lookup returned.
        opts.cache_size = 0;
        opts.timeout = timeout;
        opts.attempts = 2;
        opts.edns0 = true;
        let inner = TokioResolver::builder_with_config(cfg, TokioConnectionProvider::default())
            .with_options(opts)
            .build();
        NetResolver { inner }
    }

    /// Every A and AAAA address of `name` (an ASCII name without trailing dot). Both queries run
    /// concurrently and both must complete: a failure of either is a failure, so an address
    /// never escapes judgement because its query timed out. No such name, or no address at
    /// all, is a refusal of kind `Name`.
    pub async fn lookup(&self, name: &str) -> Result<Vec<IpAddr>, FetchError> {
        let failure = |rtype: &str, e: &dyn std::fmt::Display| {
            failed!("the DNS lookup of {name} ({rtype}) failed: {e}")
        };
        let fqdn = Name::from_ascii(format!("{name}.")).map_err(|e| failure("name", &e))?;
        let (a, aaaa) = tokio::join!(
            self.inner.lookup(fqdn.clone(), RecordType::A),
            self.inner.lookup(fqdn, RecordType::AAAA)
        );
        let (mut out, mut nx) = (Vec::new(), false);
        for (res, rtype) in [(a, "A"), (aaaa, "AAAA")] {
            match res {
                Ok(lookup) => out.extend(lookup.iter().filter_map(|rdata| match rdata {
                    RData::A(a) => Some(IpAddr::V4(a.0)),
                    RData::AAAA(a) => Some(IpAddr::V6(a.0)),
                    _ => None,
                })),
                Err(e) if e.is_nx_domain() => nx = true,
                Err(e) if e.is_no_records_found() => {}
                Err(e) => return Err(failure(rtype, &e)),
            }
        }
        out.sort();
        out.dedup();
        match (out.is_empty(), nx) {
            (false, _) => Ok(out),
            (true, true) => Err(refused!(Name, "{name} does not resolve (no such name)")),
            (true, false) => Err(refused!(Name, "{name} has no A or AAAA records")),
        }
    }
}

impl NetContext {
    /// Every address of `host`, each judged; one forbidden address refuses the host.
    pub async fn judged_addresses(&self, host: &Host) -> Result<Vec<IpAddr>, FetchError> {
        let (addrs, name) = match host {
            Host::Ip(a) => (vec![*a], None),
            Host::Name(n) => (self.resolver.lookup(n).await?, Some(n)),
        };
        let Some(f) = addrs.iter().find_map(|a| self.policy.judge(*a).err()) else {
            return Ok(addrs);
        };
        Err(match name {
            None => refused!(Address, "{f}"),
            Some(n) => refused!(Address, "{n} resolves to a forbidden address: {f}"),
        })
    }
}

/// A TCP connection to the first of `addrs` that answers; only these checked addresses are
/// ever dialled (no second lookup between check and connect).
pub async fn connect_pinned(
    ips: Vec<IpAddr>,
    port: u16,
) -> Result<(TcpStream, IpAddr), FetchError> {
    let mut errors = Vec::new();
    for a in ips {
        match TcpStream::connect(SocketAddr::new(a, port)).await {
            Ok(s) => {
                let _ = s.set_nodelay(true);
                return Ok((s, a));
            }
            Err(e) => errors.push(format!("{}: {e}", SocketAddr::new(a, port))),
        }
    }
    Err(failed!("cannot connect ({})", errors.join("; ")))
}
