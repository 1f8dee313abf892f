//! What an approval card shows and binds to, computed from a call and the text a session read,
//! without any broker state: pure functions the broker (and anything that needs the same form)
//! links.
//!
//! - [`args`]: a call's canonical JSON (the ledger key, what a proposal shows and its digest
//!   covers) and its redacted summary (what the audit log keeps).
//! - [`effect`]: one line on what a call will do, from what the helpers resolved.
//! - [`digest`]: what a decision must echo, over everything a proposal shows.
//! - [`provenance`]: fingerprints of outside text (fetched pages, http replies) and which parts
//!   of a proposed call came from it.

#![forbid(unsafe_code)]

pub mod args;
pub mod digest;
pub mod effect;
pub mod provenance;
