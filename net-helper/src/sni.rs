//! The server name a TLS client asks for, read from its first handshake bytes (rustls's own
//! ClientHello parser, through its `Acceptor`, which never answers anything).

/// What the first bytes of a tunnel say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FirstFlight {
    /// More bytes are needed.
    Incomplete,
    /// A ClientHello, with its SNI (lower case, trailing dot removed) if it sent one.
    Hello(Option<String>),
    /// Not a TLS ClientHello.
    NotTls(String),
}

pub fn parse_first_flight(bytes: &[u8]) -> FirstFlight {
    let mut acceptor = rustls::server::Acceptor::default();
    let mut rd = bytes;
    while !rd.is_empty() {
        match acceptor.read_tls(&mut rd) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) => return FirstFlight::NotTls(e.to_string()),
        }
    }
    match acceptor.accept() {
        Ok(None) => FirstFlight::Incomplete,
        Ok(Some(accepted)) => FirstFlight::Hello(
            accepted
                .client_hello()
                .server_name()
                .map(|s| s.trim_end_matches('.').to_ascii_lowercase()),
        ),
        Err((e, _)) => FirstFlight::NotTls(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn client_hello(name: &str) -> Vec<u8> {
        let cfg = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth();
        let mut conn = rustls::ClientConnection::new(
            Arc::new(cfg),
            rustls::pki_types::ServerName::try_from(name.to_string()).unwrap(),
        )
        .unwrap();
        let mut out = Vec::new();
        conn.write_tls(&mut out).unwrap();
        out
    }

    #[test]
    fn reads_the_sni() {
        let hello = client_hello("Example.com");
        assert_eq!(
            parse_first_flight(&hello),
            FirstFlight::Hello(Some("example.com".into()))
        );
        assert_eq!(parse_first_flight(&hello[..10]), FirstFlight::Incomplete);
        assert!(matches!(
            parse_first_flight(b"GET / HTTP/1.1\r\n\r\n"),
            FirstFlight::NotTls(_)
        ));
    }
}
