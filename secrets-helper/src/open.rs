//! Opening the configured store, before lockdown: the Secret Service is reached through a
//! session bus socket, and after lockdown the helper can create no socket and open no file.

use crate::args::Config;
use crate::store::{Store, Unusable};
use ipc_schema::secrets::StoreKind;
use std::time::Duration;

/// How long one D-Bus call may take (a Secret Service started on demand included).
pub const BUS_TIMEOUT: Duration = Duration::from_secs(15);

/// The store, and the descriptors lockdown must keep open for it.
pub struct Opened {
    pub store: Box<dyn Store>,
    pub keep_fds: Vec<i32>,
}

fn opened(store: impl Store + 'static) -> Opened {
    Opened {
        store: Box::new(store),
        keep_fds: Vec::new(),
    }
}

/// Opens the store `cfg` names. A store that cannot be opened is not replaced by another:
/// the helper starts with an [`Unusable`] store that gives the reason on every request.
pub fn open(cfg: &Config) -> Opened {
    let unusable = |location: String, reason: String| {
        opened(Unusable {
            kind: cfg.store,
            location,
            reason,
        })
    };
    // Config::from_args refuses this already; checked again so that no path opens a store of
    // another OS (or silently a different one).
    if let Err(reason) = cfg.store.check_os(std::env::consts::OS) {
        return unusable(cfg.store.as_str().into(), reason);
    }
    match cfg.store {
        #[cfg(target_os = "linux")]
        StoreKind::Keyutils => match crate::store::keyutils::Keyutils::open() {
            Ok(k) => opened(k),
            Err(e) => unusable("the kernel user keyring".into(), e.to_string()),
        },
        #[cfg(target_os = "linux")]
        StoreKind::SecretService => {
            let address = cfg.dbus_address.clone().unwrap_or_default();
            match crate::dbus::Bus::connect(&address, BUS_TIMEOUT) {
                Ok(bus) => Opened {
                    keep_fds: vec![bus.fd()],
                    store: Box::new(crate::store::secret_service::SecretService::new(bus)),
                },
                Err(e) => unusable(
                    format!("org.freedesktop.secrets on {address}"),
                    e.to_string(),
                ),
            }
        }
        #[cfg(target_os = "macos")]
        StoreKind::Keychain => opened(crate::store::keychain::open()),
        #[cfg(target_os = "windows")]
        StoreKind::CredentialManager => opened(crate::store::credman::open()),
        other => unusable(
            other.as_str().into(),
            format!("the {} store is not built into this helper", other.as_str()),
        ),
    }
}
