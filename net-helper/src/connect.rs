//! Which addresses a host may be reached at, and the pinned TCP connection to one of them.

use crate::addr::AddressPolicy;
use crate::error::FetchError;
use crate::resolve::{LookupError, NetResolver};
use crate::target::Host;
use ipc_schema::net::RefusalKind;
use std::net::{IpAddr, SocketAddr};
use tokio::net::TcpStream;

/// Every address of `host`, each judged; one forbidden address refuses the host.
pub async fn judged_addresses(
    resolver: &NetResolver,
    policy: &AddressPolicy,
    host: &Host,
) -> Result<Vec<IpAddr>, FetchError> {
    match host {
        Host::Ip(a) => {
            policy
                .judge(*a)
                .map_err(|f| FetchError::refused(RefusalKind::Address, f.to_string()))?;
            Ok(vec![*a])
        }
        Host::Name(name) => {
            let addrs = resolver.lookup(name).await.map_err(|e| match e {
                LookupError::NoSuchName(_) | LookupError::NoAddresses(_) => {
                    FetchError::refused(RefusalKind::Name, e.to_string())
                }
                LookupError::Failed { .. } => FetchError::failed(e.to_string()),
            })?;
            for a in &addrs {
                if let Err(f) = policy.judge(*a) {
                    return Err(FetchError::refused(
                        RefusalKind::Address,
                        format!("{name} resolves to a forbidden address: {f}"),
                    ));
                }
            }
            Ok(addrs)
        }
    }
}

/// A TCP connection to the first of `addrs` that answers; only these checked addresses are
/// ever dialled (no second lookup between check and connect).
pub async fn connect_pinned(
    addrs: &[IpAddr],
    port: u16,
) -> Result<(TcpStream, IpAddr), FetchError> {
    let mut errors = Vec::new();
    for a in addrs {
        match TcpStream::connect(SocketAddr::new(*a, port)).await {
            Ok(s) => {
                let _ = s.set_nodelay(true);
                return Ok((s, *a));
            }
            Err(e) => errors.push(format!("{}: {e}", SocketAddr::new(*a, port))),
        }
    }
    Err(FetchError::failed(format!(
        "cannot connect ({})",
        errors.join("; ")
    )))
}
