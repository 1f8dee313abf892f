//! The macOS Keychain store: generic passwords in the user's default (login) keychain, through
//! the `keyring` crate's apple-native backend. Compile-checked for macOS, never run yet
//! (docs/secrets-helper.md says what that leaves open).
//!
//! Each entry: service `gatehouse`, account the item's description
//! (`gatehouse:NAMESPACE:credential:NAME`, `gatehouse:audit-key-INSTANCE`, index pages
//! `gatehouse:NAMESPACE:credential-index:PAGE`), as the keyutils store names its keys.

use super::os_keyring::{description, EntryName, Slot};

pub const SERVICE: &str = "gatehouse";
/// The Keychain sets no limit that matters here; this bounds what one entry may take.
pub const MAX_BLOB: usize = 64 * 1024;

pub fn entry_name(slot: &Slot) -> EntryName {
    // A target would name another keychain domain (System, Common); none means the user's.
    EntryName {
        service: SERVICE,
        user: description(slot),
        target: None,
    }
}

/// The user's keychain. Nothing is touched until the first request, as with the other
/// stores: a locked or missing keychain shows up in `doctor` and in each reply.
#[cfg(target_os = "macos")]
pub fn open() -> super::os_keyring::OsKeyring<super::os_keyring::KeyringEntries> {
    let kind = ipc_schema::secrets::StoreKind::Keychain;
    super::os_keyring::OsKeyring {
        entries: super::os_keyring::KeyringEntries { kind },
        kind,
        location: format!("the login keychain, service {SERVICE:?}"),
        naming: entry_name,
        max_blob: MAX_BLOB,
    }
}
