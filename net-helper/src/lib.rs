//! The net-helper: gatehouse's only process that may open inet sockets. It does two jobs, the
//! safe fetch ([`fetch`]) and the CONNECT egress proxy ([`proxy`]), both judged against one
//! forbidden-address table ([`addr`]). See docs/net-helper.md.

#![forbid(unsafe_code)]

pub mod addr;
pub mod allowlist;
pub mod body;
// Adopting the sockets passed over the broker's channel: Unix (SO_TYPE, SO_ACCEPTCONN, the family from getsockname) and
// Windows (a handle the broker duplicated in).
#[cfg(any(unix, windows))]
pub mod client;
pub mod config;
pub mod error;
pub mod fetch;
pub mod http;
pub mod mcp;
pub mod proxy;
pub mod relay;
pub mod resolve;
#[cfg(any(unix, windows))]
pub mod service;
pub mod target;
pub mod tls;

use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncWrite};

/// A byte stream: a TCP, TLS or Unix stream socket.
pub trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// What every fetch and tunnel shares: where names are resolved, how addresses are judged, and
/// whom TLS trusts.
pub struct NetContext {
    pub resolver: resolve::NetResolver,
    pub policy: addr::AddressPolicy,
    pub tls: Arc<rustls::ClientConfig>,
}
