//! The remembered table: "always allow" / "always deny" decisions from approval cards.

use crate::Sql;
use ipc_schema::ui::Remembered;
use rusqlite::{params, Connection};

/// A decision about to be remembered.
pub struct NewRemembered<'a> {
    pub tool: &'a str,
    pub target: &'a str,
    pub action: &'a str,
    pub origin: &'a str,
    pub profile: &'a str,
    pub now_ms: i64,
}

/// Every remembered decision, oldest first.
pub fn load(conn: &Connection) -> Sql<Vec<Remembered>> {
    let mut stmt = conn.prepare(
        "SELECT id, tool, target, action, created_ms, origin, profile FROM remembered ORDER BY id",
    )?;
    let rows = stmt.query_map([], |r| {
        Ok(Remembered {
            id: r.get::<_, i64>(0)? as u64,
            tool: r.get(1)?,
            target: r.get(2)?,
            action: r.get(3)?,
            created_unix_ms: r.get::<_, i64>(4)? as u64,
            origin: r.get(5)?,
            profile: r.get(6)?,
        })
    })?;
    rows.collect()
}

/// Stores a decision; its id.
pub fn insert(conn: &Connection, r: &NewRemembered<'_>) -> Sql<u64> {
    conn.execute(
        "INSERT INTO remembered (tool, target, action, created_ms, origin, profile) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        params![r.tool, r.target, r.action, r.now_ms, r.origin, r.profile],
    )?;
    Ok(conn.last_insert_rowid() as u64)
}

/// Drops decision `id`; whether it existed.
pub fn delete(conn: &Connection, id: u64) -> Sql<bool> {
    Ok(conn.execute("DELETE FROM remembered WHERE id = ?1", [id as i64])? == 1)
}
