//! Where credentials and audit keys are kept: one [`Store`] per helper, chosen by the broker's
//! configuration (`--store`), never swapped for another on failure.
//!
//! Linux: `keyutils`, `secret_service`. macOS: `keychain`; Windows: `credman`, both through the
//! keyring crate (`os_keyring`). Their naming and index code builds everywhere, for the tests.

pub mod credman;
pub mod keychain;
#[cfg(target_os = "linux")]
pub mod keyutils;
pub mod os_keyring;
#[cfg(target_os = "linux")]
pub mod secret_service;

use ipc_schema::secrets::{AuditInstance, CredentialName, StoreKind};
use std::collections::BTreeSet;
use zeroize::Zeroizing;

/// One stored item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ItemKey {
    /// A credential of one gatehouse instance (its namespace).
    Credential {
        namespace: String,
        name: CredentialName,
    },
    /// The audit log key of one database instance (`gatehouse:audit-key-<instance>`; the
    /// tests' and the demo's clean-up find it by that name).
    AuditKey(AuditInstance),
}

impl ItemKey {
    /// The item's name where a store names items (keyutils key descriptions; Keychain and
    /// Credential Manager entries: `os_keyring`), so one item has one name on every OS. The
    /// audit key's is the name the broker used when it still held the key itself, so logs
    /// written then keep their key.
    pub fn description(&self) -> String {
        match self {
            ItemKey::Credential { namespace, name } => {
                format!("gatehouse:{namespace}:credential:{name}")
            }
            ItemKey::AuditKey(instance) => format!("gatehouse:audit-key-{}", instance.as_str()),
        }
    }
}

/// Each but `Locked` carries the store's kind (`keyutils`, ...) and the reason.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The store cannot be reached at all (no bus, no Secret Service, keyring refused, a store
    /// of another OS).
    #[error("the {0} store cannot be used: {1}")]
    Unavailable(&'static str, String),
    /// The Secret Service collection is locked and unlocking it needs the user.
    #[error("{0}")]
    Locked(String),
    /// One operation failed; the store may work for the next.
    #[error("the {0} store failed: {1}")]
    Failed(&'static str, String),
    /// The connection to the store is broken: the helper stops after answering (the broker
    /// restarts it, which reconnects).
    #[error("the connection to the {0} store broke: {1}")]
    Broken(&'static str, String),
}

/// Credential names, sorted, each once.
pub type CredentialNames = BTreeSet<CredentialName>;

/// A keyring backend. Values go in and come out as opaque blobs; what they mean is the
/// caller's business (see `record.rs` and `audit_key.rs`).
pub trait Store {
    fn kind(&self) -> StoreKind;
    /// Where the store is, for `doctor`.
    fn location(&self) -> String;
    /// Checks that the store answers (for `doctor`).
    fn probe(&mut self) -> Result<(), StoreError>;
    fn get(&mut self, key: &ItemKey) -> Result<Option<Zeroizing<Vec<u8>>>, StoreError>;
    /// Creates or replaces the item.
    fn put(&mut self, key: &ItemKey, blob: &[u8]) -> Result<(), StoreError>;
    /// Removes the item; whether it existed.
    fn delete(&mut self, key: &ItemKey) -> Result<bool, StoreError>;
    /// The names of the credentials in `namespace`.
    fn credential_names(&mut self, namespace: &str) -> Result<CredentialNames, StoreError>;
    /// The connection to the store broke ([`StoreError::Broken`]): the helper stops after
    /// answering, and the broker restarts it.
    fn is_broken(&self) -> bool {
        false
    }
}

/// A store that could not be opened: every operation says why. The helper still starts, so
/// that `doctor` and every request show the reason instead of a helper that keeps crashing.
pub struct Unusable {
    pub kind: StoreKind,
    pub location: String,
    pub reason: String,
}

impl Unusable {
    fn err(&self) -> StoreError {
        StoreError::Unavailable(self.kind.as_str(), self.reason.clone())
    }
}

impl Store for Unusable {
    fn kind(&self) -> StoreKind {
        self.kind
    }
    fn location(&self) -> String {
        self.location.clone()
    }
    fn probe(&mut self) -> Result<(), StoreError> {
        Err(self.err())
    }
    fn get(&mut self, _: &ItemKey) -> Result<Option<Zeroizing<Vec<u8>>>, StoreError> {
        Err(self.err())
    }
    fn put(&mut self, _: &ItemKey, _: &[u8]) -> Result<(), StoreError> {
        Err(self.err())
    }
    fn delete(&mut self, _: &ItemKey) -> Result<bool, StoreError> {
        Err(self.err())
    }
    fn credential_names(&mut self, _: &str) -> Result<CredentialNames, StoreError> {
        Err(self.err())
    }
}
