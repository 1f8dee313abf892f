//! The audit log in a team's log pipeline: `gatehouse audit export`.
//!
//! Export is a reader of the database file like `verify-audit`, never the broker's writer: it
//! opens its own read-only connection to the WAL database and polls for committed rows, so a
//! slow or absent collector can never hold up a commit, and what it sends is only what was
//! committed. Each record carries every canonical field of its row with `prev_hash`, `hash` and
//! `mac`, so a store holding only the export can recompute the chain ([`readback`]); sealed
//! heads ("anchors": count, head hash, HMAC) go with the rows. A cursor per sink ([`cursor`])
//! records the last row a sink acknowledged, so a collector that was down is sent everything
//! from there on, in order, never skipping a row.

#![forbid(unsafe_code)]

pub mod cursor;
pub mod otlp;
pub mod readback;
pub mod record;
pub mod run;
pub mod source;

pub use record::{Anchor, ExportRecord};

#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error(transparent)]
    Store(#[from] audit_store::StoreError),
    #[error("audit database: {0}")]
    Sql(#[from] rusqlite::Error),
    #[error("export state {path}: {why}")]
    State { path: String, why: String },
    #[error("{0}")]
    Log(String),
    #[error("{0}")]
    Sink(String),
    #[error("collector URL {url:?}: {why}")]
    Url { url: String, why: String },
    #[error("{0}")]
    GaveUp(String),
}
