//! Reading the audit log (writing goes through [`crate::Chain`] and the writer): tails for the
//! console and `gatehouse audit tail`, counts for the demo's report, and the entry a credential
//! change was written as.

use crate::chain::StoredRow;
use crate::{bad_column, Sql};
use ipc_schema::ui::{AuditEntry, AuditKind};
use rusqlite::{params, Connection, OptionalExtension};
use std::collections::BTreeMap;

/// The audit rows after `seq` ?1, newest first, at most ?2 of them; each read by
/// [`audit_entry`].
const AUDIT_AFTER_NEWEST_FIRST: &str =
    "SELECT seq, ts_ms, kind, session, actor, tool, target, outcome, detail, mode, tier FROM audit \
     WHERE seq > ?1 ORDER BY seq DESC LIMIT ?2";

/// One row of [`AUDIT_AFTER_NEWEST_FIRST`].
fn audit_entry(r: &rusqlite::Row) -> rusqlite::Result<AuditEntry> {
    let kind: String = r.get(2)?;
    Ok(AuditEntry {
        seq: r.get::<_, i64>(0)? as u64,
        ts_unix_ms: r.get::<_, i64>(1)? as u64,
        kind: AuditKind::from_name(&kind).ok_or_else(|| bad_column(2, "an audit kind", &kind))?,
        session: r.get(3)?,
        actor: r.get(4)?,
        tool: r.get(5)?,
        target: r.get(6)?,
        outcome: r.get(7)?,
        detail: r.get(8)?,
        mode: mode_column(r, 9)?,
        tier: tier_column(r, 10)?,
    })
}

/// The rows after `after`, oldest first (the newest `limit` of them), every one.
pub fn rows_after(conn: &Connection, after: u64, limit: u32) -> Sql<Vec<AuditEntry>> {
    let mut stmt = conn.prepare(AUDIT_AFTER_NEWEST_FIRST)?;
    let after = i64::try_from(after).unwrap_or(i64::MAX);
    let mut rows: Vec<AuditEntry> = stmt
        .query_map(params![after, limit], audit_entry)?
        .collect::<Result<_, _>>()?;
    rows.reverse();
    Ok(rows)
}

/// The most entries one tail reply carries (each is a redacted summary; this keeps a reply far
/// below the frame limit).
const TAIL_MAX: u32 = 500;
/// Text budget of one reply, so that a few very long details cannot reach the frame limit.
const TAIL_BYTES: usize = 256 * 1024;

/// Audit entries after `after`, oldest first: the newest `limit` of them (at most [`TAIL_MAX`],
/// and at most about [`TAIL_BYTES`] of text). What the broker answers the console's tail with.
pub fn audit_tail(conn: &Connection, after: u64, limit: u32) -> Sql<Vec<AuditEntry>> {
    let mut stmt = conn.prepare(AUDIT_AFTER_NEWEST_FIRST)?;
    let after = i64::try_from(after).unwrap_or(i64::MAX);
    let rows = stmt.query_map(params![after, limit.min(TAIL_MAX)], audit_entry)?;
    let mut out = Vec::new();
    let mut bytes = 0usize;
    for row in rows {
        let e = row?;
        bytes += e.kind.as_str().len()
            + e.actor.len()
            + e.outcome.len()
            + e.detail.len()
            + e.session.as_ref().map_or(0, String::len)
            + e.tool.as_ref().map_or(0, String::len)
            + e.target.as_ref().map_or(0, String::len);
        // Newest first: like LIMIT, the budget keeps the newest entries (a tail; the seq
        // numbers show the gap, and `gatehouse audit tail` prints everything).
        out.push(e);
        if bytes > TAIL_BYTES {
            break;
        }
    }
    out.reverse();
    Ok(out)
}

/// How many rows of each kind the log holds.
pub fn count_by_kind(conn: &Connection) -> Sql<BTreeMap<String, u64>> {
    let mut stmt = conn.prepare("SELECT kind, count(*) FROM audit GROUP BY kind ORDER BY kind")?;
    let rows = stmt.query_map([], |row| {
        Ok((row.get::<_, String>(0)?, row.get::<_, i64>(1)? as u64))
    })?;
    rows.collect()
}

/// The entry number of the latest credential row about `name`.
pub fn latest_credential_row(conn: &Connection, name: &str) -> Sql<i64> {
    conn.query_row(
        "SELECT max(seq) FROM audit WHERE kind = 'credential' AND target = ?1",
        [name],
        |r| r.get::<_, i64>(0),
    )
}

/// The rows after `seq` ?1, oldest first, at most ?2 of them, with every canonical field and the
/// chain columns; each read by [`stored_row`]. `mode` and `tier` are the columns, or `NULL` on
/// a log no gatehouse with session modes (or tiers) has opened yet: every row of it was
/// written without one ([`later_columns`]).
fn stored_rows_after_query(mode: &str, tier: &str) -> String {
    format!(
        "SELECT seq, ts_ms, kind, session, actor, tool, target, outcome, detail, degraded, \
         prev_hash, hash, mac, {mode}, {tier} FROM audit WHERE seq > ?1 ORDER BY seq LIMIT ?2"
    )
}

/// The `mode` and `tier` columns to read, each `NULL` where the log does not have it yet.
pub(crate) fn later_columns(conn: &Connection) -> Sql<(&'static str, &'static str)> {
    Ok((
        if crate::has_column(conn, "audit", "mode")? {
            "mode"
        } else {
            "NULL"
        },
        if crate::has_column(conn, "audit", "tier")? {
            "tier"
        } else {
            "NULL"
        },
    ))
}

fn hash_column(r: &rusqlite::Row, col: usize) -> rusqlite::Result<[u8; 32]> {
    let b: Vec<u8> = r.get(col)?;
    <[u8; 32]>::try_from(b.as_slice())
        .map_err(|_| bad_column(col, "32 bytes", &format!("{} bytes", b.len())))
}

/// A row's `mode` column: none, or a session mode by its name (anything else is refused).
fn mode_column(
    r: &rusqlite::Row,
    col: usize,
) -> rusqlite::Result<Option<ipc_schema::mode::SessionMode>> {
    match r.get::<_, Option<String>>(col)? {
        None => Ok(None),
        Some(m) => ipc_schema::mode::SessionMode::from_name(&m)
            .map(Some)
            .ok_or_else(|| bad_column(col, "a session mode", &m)),
    }
}

/// A row's `tier` column: none, or a confinement tier by its name (anything else is refused).
fn tier_column(
    r: &rusqlite::Row,
    col: usize,
) -> rusqlite::Result<Option<ipc_schema::tier::ConfinementTier>> {
    match r.get::<_, Option<String>>(col)? {
        None => Ok(None),
        Some(t) => ipc_schema::tier::ConfinementTier::from_name(&t)
            .map(Some)
            .ok_or_else(|| bad_column(col, "a confinement tier", &t)),
    }
}

/// One row of [`stored_rows_after_query`].
fn stored_row(r: &rusqlite::Row) -> rusqlite::Result<StoredRow> {
    Ok(StoredRow {
        seq: r.get(0)?,
        ts_ms: r.get(1)?,
        kind: r.get(2)?,
        session: r.get(3)?,
        actor: r.get(4)?,
        tool: r.get(5)?,
        target: r.get(6)?,
        outcome: r.get(7)?,
        detail: r.get(8)?,
        degraded: r.get::<_, i64>(9)? != 0,
        prev_hash: hash_column(r, 10)?,
        hash: hash_column(r, 11)?,
        mac: hash_column(r, 12)?,
        mode: mode_column(r, 13)?.map(|m| m.as_str().to_string()),
        tier: tier_column(r, 14)?.map(|t| t.name().to_string()),
    })
}

/// The stored rows after `after`, oldest first, at most `limit` (what the export sends).
pub fn stored_rows_after(conn: &Connection, after: i64, limit: u32) -> Sql<Vec<StoredRow>> {
    let (mode, tier) = later_columns(conn)?;
    let mut stmt = conn.prepare_cached(&stored_rows_after_query(mode, tier))?;
    let rows = stmt.query_map(params![after, limit], stored_row)?;
    rows.collect()
}

/// The sealed head: how many rows the seal covers, the last row's hash, and the seal's MAC
/// (`HMAC(key, "head" || instance || count || head)`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SealedHead {
    pub count: i64,
    #[serde(with = "crate::chain::hex32")]
    pub head: [u8; 32],
    #[serde(with = "crate::chain::hex32")]
    pub mac: [u8; 32],
}

/// The sealed head, if the log has one yet.
pub fn sealed_head(conn: &Connection) -> Sql<Option<SealedHead>> {
    conn.query_row(
        "SELECT count, head, mac FROM audit_head WHERE id = 1",
        [],
        |r| {
            Ok(SealedHead {
                count: r.get(0)?,
                head: hash_column(r, 1)?,
                mac: hash_column(r, 2)?,
            })
        },
    )
    .optional()
}
