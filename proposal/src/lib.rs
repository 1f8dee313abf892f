//! What an approval card shows and binds to, computed from a call and the text a session read,
//! without any broker state: pure functions the broker (and anything that needs the same form)
//! links.
//!
//! - [`args`]: a call's canonical JSON (the ledger key, what a proposal shows and its digest
//!   covers), its redacted summary (what the audit log keeps) and one line on what it changes.
//! - [`provenance`]: fingerprints of outside text (fetched pages, http replies) and which parts
//!   of a proposed call came from it.

#![forbid(unsafe_code)]

pub mod args;
pub mod provenance;
