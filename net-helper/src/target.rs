//! What a URL points at, parsed the WHATWG way (the `url` crate, as browsers parse), and the
//! checks that need no network: scheme, user info, host.

use url::Url;

/// URLs longer than this are refused before parsing.
pub const MAX_URL_LEN: usize = 8 * 1024;

/// The host of a checked URL: the one typed host every process uses.
pub use ipc_schema::host::{Host, HostRefusal};

/// A URL that passed the checks that need no network.
#[derive(Debug, Clone)]
pub struct Target {
    /// The parsed URL, fragment removed (it is never sent).
    pub url: Url,
    pub host: Host,
    pub port: u16,
    pub https: bool,
}

/// Why a URL is refused before any lookup.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UrlRefusal {
    #[error("the URL is longer than {MAX_URL_LEN} bytes")]
    TooLong,
    #[error("not a valid URL ({0})")]
    Invalid(String),
    #[error("scheme {0}: is not allowed (only http and https)")]
    Scheme(String),
    #[error("a URL with a user name or password is refused")]
    UserInfo,
    /// An empty host, `localhost`, or a host that is not valid.
    #[error(transparent)]
    Host(#[from] HostRefusal),
}

/// Parses `s` and applies the checks that need no network.
pub fn parse_target(s: &str) -> Result<Target, UrlRefusal> {
    if s.len() > MAX_URL_LEN {
        return Err(UrlRefusal::TooLong);
    }
    let mut url = Url::parse(s).map_err(|e| UrlRefusal::Invalid(e.to_string()))?;
    check_url(&mut url)
}

/// The same checks on an already parsed URL (a redirect's Location, resolved against the
/// previous URL).
pub fn check_url(url: &mut Url) -> Result<Target, UrlRefusal> {
    let https = match url.scheme() {
        "http" => false,
        "https" => true,
        other => return Err(UrlRefusal::Scheme(other.to_string())),
    };
    if !url.username().is_empty() || url.password().is_some() {
        return Err(UrlRefusal::UserInfo);
    }
    url.set_fragment(None);
    let host = Host::of_url(url)?;
    let port = url
        .port_or_known_default()
        .ok_or_else(|| UrlRefusal::Invalid("no port".into()))?;
    Ok(Target {
        url: url.clone(),
        host,
        port,
        https,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literal_forms_parse_to_the_address() {
        for (u, ip) in [
            ("http://2130706433/", "127.0.0.1"),
            ("http://0177.0.0.1/", "127.0.0.1"),
            ("http://0x7f.1/", "127.0.0.1"),
            ("http://127.1/", "127.0.0.1"),
            ("http://127.0.0.1./", "127.0.0.1"),
            ("http://%31%32%37.0.0.1/", "127.0.0.1"),
            ("http://127\u{3002}0\u{3002}0\u{3002}1/", "127.0.0.1"),
            ("http://\u{ff11}\u{ff12}\u{ff17}.0.0.1/", "127.0.0.1"),
            ("http://\u{2460}\u{2461}\u{2466}.0.0.1/", "127.0.0.1"),
            ("http://127.0.0.1#@a.com/", "127.0.0.1"),
            ("http://127.0.0.1\\@a.com/", "127.0.0.1"),
            ("http://[::ffff:127.0.0.1]/", "::ffff:127.0.0.1"),
        ] {
            let t = parse_target(u).unwrap_or_else(|e| panic!("{u}: {e}"));
            assert_eq!(t.host, Host::Ip(ip.parse().unwrap()), "{u}");
        }
    }

    #[test]
    fn names_come_out_ascii_lower_case_without_trailing_dot() {
        let t = parse_target("https://B\u{fc}cher.EXAMPLE./x#frag").unwrap();
        assert_eq!(t.host, Host::Name("xn--bcher-kva.example".into()));
        assert_eq!(t.port, 443);
        assert!(t.https);
        assert_eq!(t.url.as_str(), "https://xn--bcher-kva.example./x");
    }

    #[test]
    fn refusals() {
        assert_eq!(
            parse_target("ftp://a.com/").unwrap_err(),
            UrlRefusal::Scheme("ftp".into())
        );
        assert_eq!(
            parse_target("http://a@b.com/").unwrap_err(),
            UrlRefusal::UserInfo
        );
        assert_eq!(
            parse_target("http://:p@b.com/").unwrap_err(),
            UrlRefusal::UserInfo
        );
        assert_eq!(
            parse_target("http://LocalHost./").unwrap_err(),
            UrlRefusal::Host(HostRefusal::Localhost("localhost".into()))
        );
        assert!(matches!(
            parse_target("http://").unwrap_err(),
            UrlRefusal::Invalid(_)
        ));
        assert_eq!(
            parse_target("http://./").unwrap_err(),
            UrlRefusal::Host(HostRefusal::Empty)
        );
        assert_eq!(
            parse_target(&format!("http://a.com/{}", "a".repeat(MAX_URL_LEN))).unwrap_err(),
            UrlRefusal::TooLong
        );
    }
}
