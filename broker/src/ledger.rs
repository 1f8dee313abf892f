//! The at-most-once ledger. Every effectful call is recorded before it runs, keyed by SHA-256
//! of its tool and canonical arguments within its session; `pending -> executing` is a
//! conditional update committed with FULL sync before the helper is asked, so it happens once.
//! A call found `executing` at start becomes `uncertain` and is never retried on its own.

use audit_store::chain::{AuditEvent, AuditKind};
use audit_store::ledger as sql;
use audit_store::{now_ms, StoreError, StoreHandle};
use ipc_schema::tool::{SessionId, ToolId};
use ipc_schema::ui::{CallState, LedgerCall};
use sha2::{Digest, Sha256};

/// The text an uncertain call carries (the wording, shown to agent and human).
pub const UNCERTAIN_TEXT: &str =
    "gatehouse stopped while carrying it out. Check whether it happened.";

/// SHA-256 of the tool and its canonical JSON arguments.
pub fn call_key(tool: &ToolId, canonical_json: &str) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(tool.name().as_bytes());
    h.update([0u8]);
    h.update(canonical_json.as_bytes());
    h.finalize().into()
}

pub use audit_store::ledger::Entry;

/// What claiming a call found.
#[derive(Debug)]
pub enum Claim {
    /// A new row (or an abandoned one taken over) in the requested state.
    New(i64),
    /// The same call exists in this session.
    Existing(Entry),
}

/// The identity and description of a call, for its row and audit rows.
#[derive(Debug, Clone)]
pub struct CallInfo {
    pub session: SessionId,
    pub key: [u8; 32],
    pub tool: ToolId,
    pub target: String,
    /// Redacted canonical arguments.
    pub summary: String,
    /// The exec sandbox's tier, for a call that runs in it (a command, a stdio server's tool):
    /// every ledger row of the call carries it in its `tier` column.
    pub tier: Option<ipc_schema::tier::ConfinementTier>,
}

impl CallInfo {
    fn event(&self, outcome: &str, detail: String) -> AuditEvent {
        AuditEvent::new(AuditKind::Execution, "broker", outcome)
            .session(self.session.0.clone())
            .tool(self.tool.name())
            .target(self.target.clone())
            .detail(detail)
            .tier(self.tier)
    }
}

/// Records the call in `state` (`pending` or `proposed`), unless the same call exists in this
/// session (then that row is returned; an `abandoned` one is taken over).
pub async fn claim(
    store: &StoreHandle,
    call: &CallInfo,
    state: CallState,
    detail: String,
) -> Result<Claim, StoreError> {
    let c = call.clone();
    store
        .txn(move |tx, audit| {
            let now = now_ms();
            match sql::find(tx, &c.session, &c.key)? {
                Some(e) if e.state != CallState::Abandoned => Ok(Claim::Existing(e)),
                Some(Entry { id, .. }) => {
                    sql::retake_abandoned(tx, id, state, &c.summary, now)?;
                    audit.push(c.event(
                        state.as_str(),
                        format!("ledger {id} (again, after it was abandoned); {detail}"),
                    ));
                    Ok(Claim::New(id))
                }
                None => {
                    let id = sql::insert(
                        tx,
                        &sql::NewCall {
                            session: &c.session,
                            key: &c.key,
                            tool: &c.tool,
                            target: &c.target,
                            summary: &c.summary,
                            state,
                            now_ms: now,
                        },
                    )?;
                    audit.push(c.event(state.as_str(), format!("ledger {id}; {detail}")));
                    Ok(Claim::New(id))
                }
            }
        })
        .await
}

/// The same call's row in this session, unless there is none or it was abandoned.
pub async fn lookup(
    store: &StoreHandle,
    session: &SessionId,
    key: [u8; 32],
) -> Result<Option<Entry>, StoreError> {
    let session = session.clone();
    store
        .read(move |tx| {
            Ok(sql::find(tx, &session, &key)?.filter(|e| e.state != CallState::Abandoned))
        })
        .await
}

/// Moves row `id` from `from` to `to` if (and only if) it is in `from`; `false` if it was not.
/// Committed with FULL sync, together with its audit row, before this returns.
pub async fn transition(
    store: &StoreHandle,
    call: &CallInfo,
    id: i64,
    from: CallState,
    to: CallState,
    reason: String,
    result: Option<Vec<u8>>,
) -> Result<bool, StoreError> {
    let c = call.clone();
    store
        .txn(move |tx, audit| {
            let moved = sql::transition(tx, id, from, to, &reason, result.as_deref(), now_ms())?;
            if moved {
                let detail = if reason.is_empty() {
                    format!("ledger {id}: {} -> {}", from.as_str(), to.as_str())
                } else {
                    format!(
                        "ledger {id}: {} -> {}: {reason}",
                        from.as_str(),
                        to.as_str()
                    )
                };
                audit.push(c.event(to.as_str(), detail));
            }
            Ok(moved)
        })
        .await
}

/// At start: calls that were executing become uncertain; calls recorded but not yet handed to
/// a helper (pending) or still waiting for a human (proposed) did not happen and are abandoned.
/// Runs inside a store transaction; pushes one audit row per call it changes.
pub fn recover(
    conn: &rusqlite::Connection,
    audit: &mut Vec<AuditEvent>,
) -> rusqlite::Result<Vec<LedgerCall>> {
    let now = now_ms();
    let abandoned_text = "gatehouse stopped before carrying it out; it did not happen";
    let mut found = Vec::new();
    for st in [
        CallState::Executing,
        CallState::Pending,
        CallState::Proposed,
    ] {
        found.extend(list(conn, st)?);
    }
    for c in &found {
        let (to, why) = if c.state == CallState::Executing {
            (CallState::Uncertain, UNCERTAIN_TEXT)
        } else {
            (CallState::Abandoned, abandoned_text)
        };
        sql::set_state(conn, c.id, to, why, now)?;
        audit.push(
            AuditEvent::new(AuditKind::Execution, "broker", to.as_str())
                .session(c.session.0.clone())
                .tool(c.tool.name())
                .target(c.target.clone())
                .detail(format!(
                    "ledger {}: {} -> {} at start: {why}",
                    c.id,
                    c.state.as_str(),
                    to.as_str()
                )),
        );
    }
    list(conn, CallState::Uncertain)
}

/// Rows in `state`, newest first.
pub fn list(conn: &rusqlite::Connection, state: CallState) -> rusqlite::Result<Vec<LedgerCall>> {
    sql::list(conn, state)
}

#[cfg(test)]
mod tests {
    use super::*;
    use audit_store::chain::Sealer;
    use audit_store::{open_rw, Chain};

    fn store(dir: &std::path::Path) -> StoreHandle {
        let conn = open_rw(&dir.join("db")).unwrap();
        let chain = Chain::load(&conn, Sealer::new(b"k"), "i".into(), false).unwrap();
        StoreHandle::spawn(conn, chain)
    }

    use ipc_schema::tool::ToolName;

    fn info(s: &str) -> CallInfo {
        CallInfo {
            session: SessionId(s.into()),
            key: call_key(&ToolName::WriteFile.into(), "{\"path\":\"/a\"}"),
            tool: ToolName::WriteFile.into(),
            target: "/a".into(),
            summary: "{}".into(),
            tier: None,
        }
    }

    #[tokio::test(flavor = "current_thread")]
    async fn pending_to_executing_happens_once() {
        let dir = tempfile::tempdir().unwrap();
        let s = store(dir.path());
        let c = info("s1");
        let Claim::New(id) = claim(&s, &c, CallState::Pending, String::new())
            .await
            .unwrap()
        else {
            panic!()
        };
        // The same call in the same session finds the row; in another session it is new.
        assert!(matches!(
            claim(&s, &c, CallState::Pending, String::new())
                .await
                .unwrap(),
            Claim::Existing(Entry {
                state: CallState::Pending,
                ..
            })
        ));
        assert!(matches!(
            claim(&s, &info("s2"), CallState::Pending, String::new())
                .await
                .unwrap(),
            Claim::New(_)
        ));
        assert!(transition(
            &s,
            &c,
            id,
            CallState::Pending,
            CallState::Executing,
            String::new(),
            None
        )
        .await
        .unwrap());
        assert!(
            !transition(
                &s,
                &c,
                id,
                CallState::Pending,
                CallState::Executing,
                String::new(),
                None
            )
            .await
            .unwrap(),
            "only once"
        );
        assert!(transition(
            &s,
            &c,
            id,
            CallState::Executing,
            CallState::Done,
            String::new(),
            Some(vec![1, 2])
        )
        .await
        .unwrap());
        let Claim::Existing(e) = claim(&s, &c, CallState::Pending, String::new())
            .await
            .unwrap()
        else {
            panic!()
        };
        assert_eq!((e.state, e.result), (CallState::Done, Some(vec![1, 2])));
        s.stop().await;
    }

    #[tokio::test(flavor = "current_thread")]
    async fn recovery_marks_executing_uncertain_and_pending_abandoned() {
        let dir = tempfile::tempdir().unwrap();
        let s = store(dir.path());
        let (a, b) = (info("a"), info("b"));
        let Claim::New(ia) = claim(&s, &a, CallState::Pending, String::new())
            .await
            .unwrap()
        else {
            panic!()
        };
        transition(
            &s,
            &a,
            ia,
            CallState::Pending,
            CallState::Executing,
            String::new(),
            None,
        )
        .await
        .unwrap();
        claim(&s, &b, CallState::Pending, String::new())
            .await
            .unwrap();
        s.stop().await;
        let s = store(dir.path());
        let unc = s.txn(recover).await.unwrap();
        assert_eq!(unc.len(), 1);
        assert_eq!(
            (unc[0].session.0.as_str(), unc[0].reason.as_str()),
            ("a", UNCERTAIN_TEXT)
        );
        // The abandoned call can be claimed afresh.
        assert!(matches!(
            claim(&s, &b, CallState::Pending, String::new())
                .await
                .unwrap(),
            Claim::New(_)
        ));
        assert!(matches!(
            claim(&s, &a, CallState::Pending, String::new())
                .await
                .unwrap(),
            Claim::Existing(Entry {
                state: CallState::Uncertain,
                ..
            })
        ));
        s.stop().await;
    }
}
