//! TLS for fetches: rustls with the webpki roots compiled in (plus, in test builds only, a test
//! CA), verifying the certificate for the URL's host name, never for the pinned address.

use crate::error::{failed, refused, FetchError};
use crate::target::Host;
use rustls::pki_types::{CertificateDer, ServerName};
use std::sync::Arc;
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

/// The client configuration every fetch uses: HTTP/1.1 only, TLS 1.2 and 1.3.
pub fn client_config(extra_roots: &[CertificateDer<'static>]) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    for c in extra_roots {
        // Only test builds pass extra roots; a bad one is the test's bug, so it is fatal there.
        roots.add(c.clone()).expect("test CA certificate");
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("ring supports the default protocol versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(cfg)
}

/// The handshake over an already pinned TCP connection; the certificate must be valid for
/// `host` (a name, or an IP literal the URL named).
pub async fn handshake(
    cfg: &Arc<rustls::ClientConfig>,
    host: &Host,
    tcp: TcpStream,
) -> Result<TlsStream<TcpStream>, FetchError> {
    let name = match host {
        Host::Name(n) => ServerName::try_from(n.clone())
            .map_err(|e| refused!(Url, "{n} is not a valid TLS server name ({e})"))?,
        Host::Ip(a) => ServerName::IpAddress((*a).into()),
    };
    let tls = TlsConnector::from(cfg.clone()).connect(name, tcp).await;
    tls.map_err(|e| {
        let cause = e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>());
        match cause {
            Some(rustls::Error::InvalidCertificate(c)) => {
                refused!(Tls, "the certificate of {host} does not verify: {c:?}")
            }
            _ => failed!("the TLS handshake with {host} failed: {e}"),
        }
    })
}
