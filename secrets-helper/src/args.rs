//! The helper's command line: `secrets-helper [--allow-degraded]
//! [--store keyutils|secret-service|keychain|credential-manager] [--dbus-address ADDRESS]
//! [--namespace NAME]`. The broker builds it from config.toml (see docs/secrets-helper.md); the
//! helper has no environment and no filesystem to look for itself.

use ipc_schema::secrets::StoreKind;
pub use sandbox::helper_args::HelperArgs;

pub const OPTIONS: &[&str] = &["--store", "--dbus-address", "--namespace"];

/// The namespace used when none is given: the user's own gatehouse instance.
pub const DEFAULT_NAMESPACE: &str = "default";

#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub store: StoreKind,
    /// The session bus address (Secret Service store only).
    pub dbus_address: Option<String>,
    pub namespace: String,
}

/// The value of `name`, given at most once.
pub fn single(args: &HelperArgs, name: &str) -> Result<Option<String>, String> {
    let mut all = args.all(name);
    let v = all.next();
    if all.next().is_some() {
        return Err(format!("{name} given more than once"));
    }
    v.map(|v| {
        v.to_str()
            .map(str::to_string)
            .ok_or(format!("{name} is not UTF-8"))
    })
    .transpose()
}

/// A namespace: 1 to 64 of `a-z A-Z 0-9 . _ -`.
pub fn check_namespace(ns: &str) -> Result<(), String> {
    let ok = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if ns.is_empty() || ns.len() > 64 || !ns.chars().all(ok) {
        return Err(format!(
            "--namespace {ns:?}: 1 to 64 letters, digits, '.', '_' or '-'"
        ));
    }
    Ok(())
}

impl Config {
    pub fn from_args(args: &HelperArgs) -> Result<Config, String> {
        let os = std::env::consts::OS;
        let store = match single(args, "--store")? {
            None => StoreKind::default_for(os)
                .ok_or(format!("gatehouse has no credential store for {os}"))?,
            Some(s) => StoreKind::from_name(&s).ok_or(format!(
                "--store {s:?}: the stores are keyutils, secret-service (Linux), keychain (macOS) and credential-manager (Windows)"
            ))?,
        };
        store
            .check_os(os)
            .map_err(|e| format!("--store {}: {e}", store.as_str()))?;
        let dbus_address = single(args, "--dbus-address")?;
        match (store, &dbus_address) {
            (StoreKind::SecretService, None) => {
                return Err("--store secret-service needs --dbus-address (the session bus)".into())
            }
            (StoreKind::SecretService, Some(_)) | (_, None) => {}
            (_, Some(_)) => return Err("--dbus-address is for --store secret-service only".into()),
        }
        let namespace = single(args, "--namespace")?.unwrap_or_else(|| DEFAULT_NAMESPACE.into());
        check_namespace(&namespace)?;
        Ok(Config {
            store,
            dbus_address,
            namespace,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(a: &[&str]) -> Result<Config, String> {
        Config::from_args(&HelperArgs::parse(a.iter().map(|s| s.into()), OPTIONS)?)
    }

    #[test]
    fn options() {
        let os = std::env::consts::OS;
        let c = parse(&[]).unwrap();
        assert_eq!(
            (Some(c.store), c.namespace.as_str()),
            (StoreKind::default_for(os), "default")
        );
        if cfg!(target_os = "linux") {
            let c = parse(&[
                "--store",
                "secret-service",
                "--dbus-address",
                "unix:path=/b",
            ])
            .unwrap();
            assert_eq!(c.dbus_address.as_deref(), Some("unix:path=/b"));
            assert!(parse(&["--store", "secret-service"])
                .unwrap_err()
                .contains("--dbus-address"));
        } else {
            // The session bus's store is Linux's: refused here, never swapped for another.
            let e = parse(&["--store", "secret-service", "--dbus-address", "x"]).unwrap_err();
            assert!(
                e.contains(&format!("exists only on linux, not on {os}")),
                "{e}"
            );
        }
        assert!(parse(&["--store", "kwallet"])
            .unwrap_err()
            .contains("keyutils, secret-service (Linux), keychain (macOS) and credential-manager"));
        assert!(parse(&["--dbus-address", "x"]).is_err());
        assert!(parse(&["--namespace", "a/b"]).is_err());
        assert!(parse(&["--namespace", "a", "--namespace", "b"]).is_err());
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn stores_of_other_systems_are_refused_not_swapped() {
        assert_eq!(
            parse(&["--store", "keychain"]).unwrap_err(),
            "--store keychain: the keychain store exists only on macos, not on linux; on linux choose \"keyutils\" or \"secret-service\" in [secrets] store"
        );
        assert!(parse(&["--store", "credential-manager"])
            .unwrap_err()
            .starts_with("--store credential-manager: the credential-manager store exists only on windows, not on linux"));
        // Positive control: the same parser accepts this OS's stores.
        assert_eq!(
            parse(&["--store", "keyutils"]).unwrap().store,
            StoreKind::Keyutils
        );
    }
}
