//! Opening the configured store, before lockdown: the Secret Service is reached through a
//! session bus socket, and after lockdown the helper can create no socket and open no file.

use crate::args::Config;
use crate::store::{Store, Unusable};
use ipc_schema::secrets::StoreKind;
use std::os::fd::RawFd;
use std::time::Duration;

/// How long one D-Bus call may take (a Secret Service started on demand included).
pub const BUS_TIMEOUT: Duration = Duration::from_secs(15);

/// The store, and the descriptors lockdown must keep open for it.
pub struct Opened {
    pub store: Box<dyn Store>,
    pub keep_fds: Vec<RawFd>,
}

/// Opens the store `cfg` names. A store that cannot be opened is not replaced by another:
/// the helper starts with an [`Unusable`] store that gives the reason on every request.
pub fn open(cfg: &Config) -> Opened {
    let unusable = |location: String, reason: String| Opened {
        store: Box::new(Unusable {
            kind: cfg.store,
            location,
            reason,
        }),
        keep_fds: Vec::new(),
    };
    #[cfg(target_os = "linux")]
    match cfg.store {
        StoreKind::Keyutils => match crate::store::keyutils::Keyutils::open() {
            Ok(k) => Opened {
                store: Box::new(k),
                keep_fds: Vec::new(),
            },
            Err(e) => unusable("the kernel user keyring".into(), e.to_string()),
        },
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
    }
    #[cfg(not(target_os = "linux"))]
    unusable(
        cfg.store.as_str().into(),
        "this platform's keyring backend is not built yet (docs/secrets-helper.md)".into(),
    )
}
