//! The Windows Credential Manager store: generic credentials of the logged-on user, through the
//! `keyring` crate's windows-native backend (which saves them with `CRED_PERSIST_ENTERPRISE`:
//! they survive a reboot and roam with a roaming domain profile). Compile-checked for Windows,
//! never run yet (docs/secrets-helper.md says what that leaves open).
//!
//! A generic credential is found by its target name alone: each entry's target (and user name)
//! is the item's description (`gatehouse:NAMESPACE:credential:NAME`,
//! `gatehouse:audit-key-INSTANCE`, index pages `gatehouse:NAMESPACE:credential-index:PAGE`), as
//! the keyutils store names its keys.

use super::os_keyring::{description, EntryName, Slot};

pub const SERVICE: &str = "gatehouse";
/// `CRED_MAX_CREDENTIAL_BLOB_SIZE`: 5 * 512 bytes per credential. A credential record with a
/// long value and many hosts can exceed it and is refused with the sizes.
pub const MAX_BLOB: usize = 5 * 512;

pub fn entry_name(slot: &Slot) -> EntryName {
    let name = description(slot);
    EntryName {
        service: SERVICE,
        user: name.clone(),
        target: Some(name),
    }
}

/// The user's Credential Manager. Nothing is touched until the first request.
#[cfg(target_os = "windows")]
pub fn open() -> super::os_keyring::OsKeyring<super::os_keyring::KeyringEntries> {
    let kind = ipc_schema::secrets::StoreKind::CredentialManager;
    super::os_keyring::OsKeyring {
        entries: super::os_keyring::KeyringEntries { kind },
        kind,
        location: "the Credential Manager of the logged-on Windows user".into(),
        naming: entry_name,
        max_blob: MAX_BLOB,
    }
}
