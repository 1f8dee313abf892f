//! The at-most-once ledger. Every effectful call is recorded before it runs, keyed by SHA-256
//! of its tool and canonical arguments within its session; `pending -> executing` is a
//! conditional update committed with FULL sync before the helper is asked, so it happens once.
//! A call found `executing` at start becomes `uncertain` and is never retried on its own.

use crate::store::chain::{AuditEvent, AuditKind};
use crate::store::{now_ms, StoreError, StoreHandle};
use ipc_schema::tool::{SessionId, ToolName};
use ipc_schema::ui::{CallState, LedgerCall};
use rusqlite::{params, OptionalExtension};
use sha2::{Digest, Sha256};

/// The text an uncertain call carries (the wording, shown to agent and human).
pub const UNCERTAIN_TEXT: &str =
    "gatehouse stopped while carrying it out. Check whether it happened.";

/// SHA-256 of the tool and its canonical JSON arguments.
pub fn call_key(tool: ToolName, canonical_json: &str) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(tool.as_str().as_bytes());
    h.update([0u8]);
    h.update(canonical_json.as_bytes());
    h.finalize().into()
}

/// A ledger row as the tool path needs it.
#[derive(Debug, Clone)]
pub struct Entry {
    pub id: i64,
    pub state: CallState,
    pub reason: String,
    pub result: Option<Vec<u8>>,
}

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
    pub tool: ToolName,
    pub target: String,
    /// Redacted canonical arguments.
    pub summary: String,
}

impl CallInfo {
    fn event(&self, outcome: &str, detail: String) -> AuditEvent {
        AuditEvent::new(AuditKind::Execution, "broker", outcome)
            .session(self.session.0.clone())
            .tool(self.tool.as_str())
            .target(self.target.clone())
            .detail(detail)
    }
}

fn state_of(s: &str) -> rusqlite::Result<CallState> {
    CallState::from_name(s).ok_or_else(|| {
        rusqlite::Error::FromSqlConversionFailure(
            0,
            rusqlite::types::Type::Text,
            format!("unknown ledger state {s:?}").into(),
        )
    })
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
            let existing: Option<(i64, String, String, Option<Vec<u8>>)> = tx
                .query_row(
                    "SELECT id, state, reason, result FROM ledger WHERE session = ?1 AND call_key = ?2",
                    params![c.session.0, &c.key[..]],
                    |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
                )
                .optional()?;
            match existing {
                Some((id, st, reason, result)) if st != "abandoned" => Ok(Claim::Existing(Entry {
                    id,
                    state: state_of(&st)?,
                    reason,
                    result,
                })),
                Some((id, _, _, _)) => {
                    tx.execute(
                        "UPDATE ledger SET state = ?1, reason = '', result = NULL, summary = ?2, updated_ms = ?3 WHERE id = ?4 AND state = 'abandoned'",
                        params![state.as_str(), c.summary, now, id],
                    )?;
                    audit.push(c.event(state.as_str(), format!("ledger {id} (again, after it was abandoned); {detail}")));
                    Ok(Claim::New(id))
                }
                None => {
                    tx.execute(
                        "INSERT INTO ledger (session, call_key, tool, target, summary, state, created_ms, updated_ms) VALUES (?1,?2,?3,?4,?5,?6,?7,?7)",
                        params![c.session.0, &c.key[..], c.tool.as_str(), c.target, c.summary, state.as_str(), now],
                    )?;
                    let id = tx.last_insert_rowid();
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
    let session = session.0.clone();
    store
        .read(move |tx| {
            let row: Option<(i64, String, String, Option<Vec<u8>>)> = tx
                .query_row(
                    "SELECT id, state, reason, result FROM ledger WHERE session = ?1 AND call_key = ?2",
                    params![session, &key[..]],
                    |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
                )
                .optional()?;
            match row {
                Some((id, st, reason, result)) if st != "abandoned" => Ok(Some(Entry {
                    id,
                    state: state_of(&st)?,
                    reason,
                    result,
                })),
                _ => Ok(None),
            }
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
            let n = tx.execute(
                "UPDATE ledger SET state = ?1, reason = ?2, result = ?3, updated_ms = ?4 WHERE id = ?5 AND state = ?6",
                params![to.as_str(), reason, result, now_ms(), id, from.as_str()],
            )?;
            if n == 1 {
                let detail = if reason.is_empty() {
                    format!("ledger {id}: {} -> {}", from.as_str(), to.as_str())
                } else {
                    format!("ledger {id}: {} -> {}: {reason}", from.as_str(), to.as_str())
                };
                audit.push(c.event(to.as_str(), detail));
            }
            Ok(n == 1)
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
        conn.execute(
            "UPDATE ledger SET state = ?1, reason = ?2, updated_ms = ?3 WHERE id = ?4",
            params![to.as_str(), why, now, c.id as i64],
        )?;
        audit.push(
            AuditEvent::new(AuditKind::Execution, "broker", to.as_str())
                .session(c.session.0.clone())
                .tool(c.tool.clone())
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
    let mut stmt = conn.prepare(
        "SELECT id, session, tool, target, summary, state, reason, updated_ms FROM ledger WHERE state = ?1 ORDER BY updated_ms DESC, id DESC LIMIT 1000",
    )?;
    let rows = stmt.query_map(params![state.as_str()], |r| {
        Ok(LedgerCall {
            id: r.get::<_, i64>(0)? as u64,
            session: SessionId(r.get(1)?),
            tool: r.get(2)?,
            target: r.get(3)?,
            summary: r.get(4)?,
            state: state_of(&r.get::<_, String>(5)?)?,
            reason: r.get(6)?,
            updated_unix_ms: r.get::<_, i64>(7)? as u64,
        })
    })?;
    rows.collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::chain::Sealer;
    use crate::store::{open_rw, Chain};

    fn store(dir: &std::path::Path) -> StoreHandle {
        let conn = open_rw(&dir.join("db")).unwrap();
        let chain = Chain::load(&conn, Sealer::new(b"k"), "i".into(), false).unwrap();
        StoreHandle::spawn(conn, chain)
    }

    fn info(s: &str) -> CallInfo {
        CallInfo {
            session: SessionId(s.into()),
            key: call_key(ToolName::WriteFile, "{\"path\":\"/a\"}"),
            tool: ToolName::WriteFile,
            target: "/a".into(),
            summary: "{}".into(),
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
