//! The helper's command line, and everything it reads from the system, all before lockdown
//! (after it, the helper has no filesystem).
//!
//! `net-helper [--allow-degraded] [--nameserver IP[:PORT]]... [--dns-timeout-ms N]
//! [--max-tunnels N]`; test builds add `--test-skip-lockdown`, `--test-public-addr IP` and
//! `--test-extra-root PEM-FILE`. Without `--nameserver`, the name servers of /etc/resolv.conf are
//! used (its search domains and options are not: names are always absolute).

use crate::addr::AddressPolicy;
use rustls::pki_types::CertificateDer;
use sandbox::helper_args::HelperArgs;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

/// The helper's own `--name value` options.
pub const OPTIONS: &[&str] = &[
    "--nameserver",
    "--dns-timeout-ms",
    "--max-tunnels",
    #[cfg(feature = "test-hooks")]
    "--test-public-addr",
    #[cfg(feature = "test-hooks")]
    "--test-extra-root",
];

pub const DEFAULT_DNS_TIMEOUT: Duration = Duration::from_secs(5);
pub const DEFAULT_MAX_TUNNELS: u32 = 256;

#[derive(Debug, Clone)]
pub struct Config {
    pub nameservers: Vec<SocketAddr>,
    pub dns_timeout: Duration,
    pub max_tunnels: u32,
    pub policy: AddressPolicy,
    /// Test builds only: extra trust anchors.
    pub extra_roots: Vec<CertificateDer<'static>>,
}

fn value<'a>(args: &'a HelperArgs, name: &str) -> Result<Option<&'a str>, String> {
    let mut all = args.all(name);
    let v = all.next();
    if all.next().is_some() {
        return Err(format!("{name} given more than once"));
    }
    v.map(|v| v.to_str().ok_or(format!("{name} is not UTF-8")))
        .transpose()
}

fn number<T>(args: &HelperArgs, name: &str, min: T) -> Result<Option<T>, String>
where
    T: std::str::FromStr + PartialOrd + std::fmt::Display + Copy,
{
    match value(args, name)? {
        None => Ok(None),
        Some(v) => match v.parse::<T>() {
            Ok(n) if n >= min => Ok(Some(n)),
            _ => Err(format!(
                "{name} takes a number of at least {min}, not {v:?}"
            )),
        },
    }
}

/// `IP` or `IP:PORT` (`[v6]:PORT`); port 53 by default.
pub fn parse_nameserver(s: &str) -> Result<SocketAddr, String> {
    if let Ok(a) = s.parse::<SocketAddr>() {
        return Ok(a);
    }
    s.parse::<IpAddr>()
        .map(|ip| SocketAddr::new(ip, 53))
        .map_err(|_| format!("--nameserver takes IP or IP:PORT, not {s:?}"))
}

impl Config {
    pub fn from_args(args: &HelperArgs) -> Result<Config, String> {
        let mut nameservers = args
            .all("--nameserver")
            .map(|v| parse_nameserver(v.to_str().ok_or("--nameserver is not UTF-8")?))
            .collect::<Result<Vec<_>, _>>()?;
        if nameservers.is_empty() {
            nameservers = system_nameservers()?;
        }
        let dns_timeout = number::<u64>(args, "--dns-timeout-ms", 1)?;
        let dns_timeout = dns_timeout.map_or(DEFAULT_DNS_TIMEOUT, Duration::from_millis);
        let max_tunnels = number::<u32>(args, "--max-tunnels", 1)?.unwrap_or(DEFAULT_MAX_TUNNELS);
        #[allow(unused_mut)]
        let mut cfg = Config {
            nameservers,
            dns_timeout,
            max_tunnels,
            policy: AddressPolicy::default(),
            extra_roots: Vec::new(),
        };
        #[cfg(feature = "test-hooks")]
        cfg.test_hooks(args)?;
        Ok(cfg)
    }

    #[cfg(feature = "test-hooks")]
    fn test_hooks(&mut self, args: &HelperArgs) -> Result<(), String> {
        if let Some(a) = value(args, "--test-public-addr")? {
            let ip: IpAddr = a
                .parse()
                .map_err(|_| format!("--test-public-addr takes an IP address, not {a:?}"))?;
            // Only a loopback address may be made "public": tests never reach anything else.
            if !ip.is_loopback() {
                return Err(format!(
                    "--test-public-addr must be a loopback address, not {ip}"
                ));
            }
            self.policy.test_public = Some(ip);
        }
        // The certificates of a PEM file (test CA), parsed by rustls's own PEM reader.
        if let Some(path) = value(args, "--test-extra-root")? {
            use rustls::pki_types::pem::PemObject;
            let pem = std::fs::read(path).map_err(|e| format!("--test-extra-root {path}: {e}"))?;
            let certs: Result<Vec<_>, _> = CertificateDer::pem_slice_iter(&pem).collect();
            self.extra_roots = certs.map_err(|e| format!("--test-extra-root: {e}"))?;
            if self.extra_roots.is_empty() {
                return Err("--test-extra-root: no certificate in the file".into());
            }
        }
        Ok(())
    }
}

/// The name servers of /etc/resolv.conf (production only; tests always pass `--nameserver`).
fn system_nameservers() -> Result<Vec<SocketAddr>, String> {
    let (cfg, _opts) = hickory_resolver::system_conf::read_system_conf().map_err(|e| {
        format!("cannot read the system resolver configuration ({e}); pass --nameserver")
    })?;
    let mut out: Vec<SocketAddr> = cfg.name_servers().iter().map(|n| n.socket_addr).collect();
    out.dedup();
    if out.is_empty() {
        return Err("/etc/resolv.conf names no name server; pass --nameserver".into());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(a: &[&str]) -> Result<Config, String> {
        let args = HelperArgs::parse(a.iter().map(|s| s.into()), OPTIONS)?;
        Config::from_args(&args)
    }

    #[test]
    fn options() {
        let c = parse(&[
            "--nameserver",
            "127.0.0.1:5353",
            "--nameserver",
            "::1",
            "--max-tunnels",
            "3",
        ])
        .unwrap();
        assert_eq!(
            c.nameservers,
            vec![
                "127.0.0.1:5353".parse().unwrap(),
                "[::1]:53".parse().unwrap()
            ]
        );
        assert_eq!(c.max_tunnels, 3);
        assert!(parse(&["--nameserver", "dns.example"])
            .unwrap_err()
            .contains("IP or IP:PORT"));
        assert!(parse(&["--nameserver", "127.0.0.1", "--max-tunnels", "0"]).is_err());
        assert!(parse(&[
            "--nameserver",
            "127.0.0.1",
            "--dns-timeout-ms",
            "1",
            "--dns-timeout-ms",
            "2"
        ])
        .unwrap_err()
        .contains("more than once"));
    }

    #[cfg(feature = "test-hooks")]
    #[test]
    fn test_public_addr_must_be_loopback() {
        assert!(
            parse(&["--nameserver", "127.0.0.1", "--test-public-addr", "8.8.8.8"])
                .unwrap_err()
                .contains("loopback")
        );
        let c = parse(&[
            "--nameserver",
            "127.0.0.1",
            "--test-public-addr",
            "127.0.0.2",
        ])
        .unwrap();
        assert_eq!(c.policy.test_public, Some("127.0.0.2".parse().unwrap()));
    }

    #[cfg(not(feature = "test-hooks"))]
    #[test]
    fn test_switches_do_not_exist_without_test_hooks() {
        for sw in ["--test-public-addr", "--test-extra-root"] {
            let err = HelperArgs::parse([sw.into(), "x".into()], OPTIONS).unwrap_err();
            assert!(err.contains("unknown argument"), "{err}");
        }
    }
}
