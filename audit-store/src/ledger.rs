//! The ledger table's statements: one row per effectful call, keyed by session and call key.
//! What the states mean and when each transition happens is the broker's (broker/src/ledger.rs);
//! here is only how a row is found, written and moved.

use crate::{bad_column, Sql};
use ipc_schema::tool::{SessionId, ToolId};
use ipc_schema::ui::{CallState, LedgerCall};
use rusqlite::{params, Connection, OptionalExtension};

/// A call's row as the tool path needs it.
#[derive(Debug, Clone)]
pub struct Entry {
    pub id: i64,
    pub state: CallState,
    pub reason: String,
    pub result: Option<Vec<u8>>,
}

/// A call about to be recorded.
pub struct NewCall<'a> {
    pub session: &'a SessionId,
    pub key: &'a [u8; 32],
    pub tool: &'a ToolId,
    pub target: &'a str,
    /// Redacted canonical arguments.
    pub summary: &'a str,
    pub state: CallState,
    pub now_ms: i64,
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

/// The row of this call in this session, whatever its state (`abandoned` included).
pub fn find(conn: &Connection, session: &SessionId, key: &[u8; 32]) -> Sql<Option<Entry>> {
    let row: Option<(i64, String, String, Option<Vec<u8>>)> = conn
        .query_row(
            "SELECT id, state, reason, result FROM ledger WHERE session = ?1 AND call_key = ?2",
            params![session.0, &key[..]],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
        )
        .optional()?;
    row.map(|(id, st, reason, result)| {
        Ok(Entry {
            id,
            state: state_of(&st)?,
            reason,
            result,
        })
    })
    .transpose()
}

/// Takes over abandoned row `id` for the same call again, now in `state`.
pub fn retake_abandoned(
    conn: &Connection,
    id: i64,
    state: CallState,
    summary: &str,
    now_ms: i64,
) -> Sql<()> {
    conn.execute(
        "UPDATE ledger SET state = ?1, reason = '', result = NULL, summary = ?2, updated_ms = ?3 WHERE id = ?4 AND state = 'abandoned'",
        params![state.as_str(), summary, now_ms, id],
    )?;
    Ok(())
}

/// Records a new call; its row id.
pub fn insert(conn: &Connection, c: &NewCall<'_>) -> Sql<i64> {
    conn.execute(
        "INSERT INTO ledger (session, call_key, tool, target, summary, state, created_ms, updated_ms) VALUES (?1,?2,?3,?4,?5,?6,?7,?7)",
        params![c.session.0, &c.key[..], c.tool.name(), c.target, c.summary, c.state.as_str(), c.now_ms],
    )?;
    Ok(conn.last_insert_rowid())
}

/// Moves row `id` from `from` to `to` if (and only if) it is in `from`; whether it was.
pub fn transition(
    conn: &Connection,
    id: i64,
    from: CallState,
    to: CallState,
    reason: &str,
    result: Option<&[u8]>,
    now_ms: i64,
) -> Sql<bool> {
    let n = conn.execute(
        "UPDATE ledger SET state = ?1, reason = ?2, result = ?3, updated_ms = ?4 WHERE id = ?5 AND state = ?6",
        params![to.as_str(), reason, result, now_ms, id, from.as_str()],
    )?;
    Ok(n == 1)
}

/// Moves row `id` to `to`, whatever its state (recovery at start).
pub fn set_state(conn: &Connection, id: u64, to: CallState, reason: &str, now_ms: i64) -> Sql<()> {
    conn.execute(
        "UPDATE ledger SET state = ?1, reason = ?2, updated_ms = ?3 WHERE id = ?4",
        params![to.as_str(), reason, now_ms, id as i64],
    )?;
    Ok(())
}

/// Rows in `state`, newest first (at most 1000).
pub fn list(conn: &Connection, state: CallState) -> Sql<Vec<LedgerCall>> {
    let mut stmt = conn.prepare(
        "SELECT id, session, tool, target, summary, state, reason, updated_ms FROM ledger WHERE state = ?1 ORDER BY updated_ms DESC, id DESC LIMIT 1000",
    )?;
    let rows = stmt.query_map(params![state.as_str()], |r| {
        let tool: String = r.get(2)?;
        Ok(LedgerCall {
            id: r.get::<_, i64>(0)? as u64,
            session: SessionId(r.get(1)?),
            tool: ToolId::parse(&tool).ok_or_else(|| bad_column(2, "a tool name", &tool))?,
            target: r.get(3)?,
            summary: r.get(4)?,
            state: state_of(&r.get::<_, String>(5)?)?,
            reason: r.get(6)?,
            updated_unix_ms: r.get::<_, i64>(7)? as u64,
        })
    })?;
    rows.collect()
}
