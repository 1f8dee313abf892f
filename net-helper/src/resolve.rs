//! Name resolution: A and AAAA asked together, the name made absolute (no search domain is ever
//! appended), no hosts file, no cache, and only the name servers the helper was given.

use hickory_resolver::config::{
    NameServerConfig, ResolveHosts, ResolverConfig as HickoryConfig, ResolverOpts,
};
use hickory_resolver::name_server::TokioConnectionProvider;
use hickory_resolver::proto::rr::{RData, RecordType};
use hickory_resolver::proto::xfer::Protocol;
use hickory_resolver::{Name, TokioResolver};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

/// Why a name gave no addresses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LookupError {
    #[error("{0} does not resolve (no such name)")]
    NoSuchName(String),
    #[error("{0} has no A or AAAA records")]
    NoAddresses(String),
    #[error("the DNS lookup of {name} ({rtype}) failed: {reason}")]
    Failed {
        name: String,
        rtype: &'static str,
        reason: String,
    },
}

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
    /// never escapes judgement because its query timed out.
    pub async fn lookup(&self, name: &str) -> Result<Vec<IpAddr>, LookupError> {
        let fqdn = Name::from_ascii(format!("{name}.")).map_err(|e| LookupError::Failed {
            name: name.to_string(),
            rtype: "name",
            reason: e.to_string(),
        })?;
        let (a, aaaa) = tokio::join!(
            self.inner.lookup(fqdn.clone(), RecordType::A),
            self.inner.lookup(fqdn, RecordType::AAAA)
        );
        let mut out = Vec::new();
        let mut nx = 0;
        for (res, rtype) in [(a, "A"), (aaaa, "AAAA")] {
            match res {
                Ok(lookup) => {
                    for rdata in lookup.iter() {
                        match rdata {
                            RData::A(a) => out.push(IpAddr::V4(a.0)),
                            RData::AAAA(a) => out.push(IpAddr::V6(a.0)),
                            _ => {}
                        }
                    }
                }
                Err(e) if e.is_nx_domain() => nx += 1,
                Err(e) if e.is_no_records_found() => {}
                Err(e) => {
                    return Err(LookupError::Failed {
                        name: name.to_string(),
                        rtype,
                        reason: e.to_string(),
                    })
                }
            }
        }
        out.sort();
        out.dedup();
        if out.is_empty() {
            return Err(if nx > 0 {
                LookupError::NoSuchName(name.to_string())
            } else {
                LookupError::NoAddresses(name.to_string())
            });
        }
        Ok(out)
    }
}
