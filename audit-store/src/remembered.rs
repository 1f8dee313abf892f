//! The remembered table: "always allow" / "always deny" decisions from approval cards.

use crate::{bad_column as bad, Sql};
use ipc_schema::tool::{ProfileName, ProposalId, ToolId};
use ipc_schema::ui::{Remembered, RememberedAction};
use rusqlite::{params, Connection};

/// A decision about to be remembered.
pub struct NewRemembered<'a> {
    pub tool: &'a ToolId,
    pub target: &'a str,
    pub action: RememberedAction,
    pub origin: ProposalId,
    pub profile: &'a ProfileName,
    pub now_ms: i64,
}

/// `#7` (how a proposal id is written) or `7`.
fn proposal_id(s: &str) -> Option<ProposalId> {
    s.strip_prefix('#')
        .unwrap_or(s)
        .parse()
        .ok()
        .map(ProposalId)
}

/// Every remembered decision, oldest first.
pub fn load(conn: &Connection) -> Sql<Vec<Remembered>> {
    let mut stmt = conn.prepare(
        "SELECT id, tool, target, action, created_ms, origin, profile FROM remembered ORDER BY id",
    )?;
    let rows = stmt.query_map([], |r| {
        let tool: String = r.get(1)?;
        let action: String = r.get(3)?;
        let origin: String = r.get(5)?;
        let profile: String = r.get(6)?;
        Ok(Remembered {
            id: r.get::<_, i64>(0)? as u64,
            tool: ToolId::parse(&tool).ok_or_else(|| bad(1, "a tool name", &tool))?,
            target: r.get(2)?,
            action: RememberedAction::from_name(&action)
                .ok_or_else(|| bad(3, "allow or deny", &action))?,
            created_unix_ms: r.get::<_, i64>(4)? as u64,
            origin: proposal_id(&origin).ok_or_else(|| bad(5, "a proposal id", &origin))?,
            profile: ProfileName::parse(&profile)
                .map_err(|_| bad(6, "a profile name", &profile))?,
        })
    })?;
    rows.collect()
}

/// Stores a decision; its id.
pub fn insert(conn: &Connection, r: &NewRemembered<'_>) -> Sql<u64> {
    conn.execute(
        "INSERT INTO remembered (tool, target, action, created_ms, origin, profile) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        params![
            r.tool.name(),
            r.target,
            r.action.as_str(),
            r.now_ms,
            r.origin.to_string(),
            r.profile.as_str()
        ],
    )?;
    Ok(conn.last_insert_rowid() as u64)
}

/// Drops decision `id`; whether it existed.
pub fn delete(conn: &Connection, id: u64) -> Sql<bool> {
    Ok(conn.execute("DELETE FROM remembered WHERE id = ?1", [id as i64])? == 1)
}
