//! The secrets-helper: gatehouse's only process that touches the user's keyring. It keeps
//! credentials (write-only: nothing returns a value as such), makes the header for one request
//! to one of a credential's hosts, and MACs the audit log under a key it never exports. See
//! docs/secrets-helper.md.

#![forbid(unsafe_code)]

pub mod args;
pub mod audit_key;
pub mod credentials;
#[cfg(target_os = "linux")]
pub mod dbus;
pub mod open;
pub mod record;
pub mod service;
pub mod store;
