//! Writing audit rows from anywhere in the broker (helper supervision, fronts, the tool path)
//! without threading a handle through code that has no business holding one.

use audit_store::chain::{AuditEvent, AuditKind};
use audit_store::StoreHandle;
use std::sync::OnceLock;

static SINK: OnceLock<StoreHandle> = OnceLock::new();

/// Set once, when the broker has opened its database.
pub fn install(store: StoreHandle) {
    let _ = SINK.set(store);
}

/// Appends a row (group-committed). Before the database is open there is nothing to write to,
/// and the broker is not serving yet, so nothing can be lost that matters.
pub fn record(ev: AuditEvent) {
    match SINK.get() {
        Some(s) => s.audit(ev),
        None => tracing::warn!("audit row before the database was open: {ev:?}"),
    }
}

/// A helper locked down and is ready, exited, or is being restarted.
pub fn helper(kind: AuditKind, helper: &str, outcome: &str, detail: impl Into<String>) {
    record(AuditEvent::new(kind, helper, outcome).detail(detail));
}

/// A front peer was killed for breaking the protocol.
pub fn peer_killed(role: &str, pid: Option<u32>, reason: &str) {
    let pid = pid.map(|p| p.to_string()).unwrap_or_else(|| "?".into());
    record(
        AuditEvent::new(AuditKind::PeerKilled, role, "killed")
            .detail(format!("pid {pid}: {reason}")),
    );
}
