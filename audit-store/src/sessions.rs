//! The sessions, session_profiles and session_modes tables: a session's id, the hash of its
//! resume token (never the token), the profile it was opened with and its mode.

use crate::{bad_column, Sql};
use ipc_schema::mode::SessionMode;
use ipc_schema::tool::{ProfileName, SessionId};
use rusqlite::{params, Connection, OptionalExtension};

/// Records a new session with its token's hash, its profile and its mode.
pub fn insert(
    conn: &Connection,
    id: &SessionId,
    resume_hash: &[u8],
    profile: &ProfileName,
    mode: SessionMode,
    now_ms: i64,
) -> Sql<()> {
    conn.execute(
        "INSERT INTO sessions (id, resume_hash, created_ms) VALUES (?1, ?2, ?3)",
        params![id.0, resume_hash, now_ms],
    )?;
    conn.execute(
        "INSERT INTO session_profiles (session, profile) VALUES (?1, ?2)",
        params![id.0, profile.as_str()],
    )?;
    set_mode(conn, id, mode)
}

/// Sets session `id`'s mode (a new session's, or the human's change).
pub fn set_mode(conn: &Connection, id: &SessionId, mode: SessionMode) -> Sql<()> {
    conn.execute(
        "INSERT INTO session_modes (session, mode) VALUES (?1, ?2) \
         ON CONFLICT(session) DO UPDATE SET mode = excluded.mode",
        params![id.0, mode.as_str()],
    )?;
    Ok(())
}

/// Session `id`'s mode (`None`: a session from before modes, or none such).
pub fn mode(conn: &Connection, id: &SessionId) -> Sql<Option<SessionMode>> {
    conn.query_row(
        "SELECT mode FROM session_modes WHERE session = ?1",
        [&id.0],
        |r| {
            let m: String = r.get(0)?;
            SessionMode::from_name(&m).ok_or_else(|| bad_column(0, "a session mode", &m))
        },
    )
    .optional()
}

/// Replaces session `id`'s token hash (revoking the token); whether the session exists.
pub fn set_resume_hash(conn: &Connection, id: &SessionId, resume_hash: &[u8]) -> Sql<bool> {
    let n = conn.execute(
        "UPDATE sessions SET resume_hash = ?2 WHERE id = ?1",
        params![id.0, resume_hash],
    )?;
    Ok(n == 1)
}

/// Session `id`'s token hash (`None`: no such session in the store).
pub fn resume_hash(conn: &Connection, id: &SessionId) -> Sql<Option<Vec<u8>>> {
    conn.query_row(
        "SELECT resume_hash FROM sessions WHERE id = ?1",
        [&id.0],
        |r| r.get(0),
    )
    .optional()
}

/// The session whose token has this hash, and when it was created.
pub fn by_resume_hash(conn: &Connection, resume_hash: &[u8]) -> Sql<Option<(SessionId, i64)>> {
    conn.query_row(
        "SELECT id, created_ms FROM sessions WHERE resume_hash = ?1",
        [resume_hash],
        |r| Ok((SessionId(r.get::<_, String>(0)?), r.get::<_, i64>(1)?)),
    )
    .optional()
}

/// The profile session `id` was opened with (`None`: sessions from before profiles).
pub fn profile(conn: &Connection, id: &SessionId) -> Sql<Option<ProfileName>> {
    conn.query_row(
        "SELECT profile FROM session_profiles WHERE session = ?1",
        [&id.0],
        |r| {
            let p: String = r.get(0)?;
            ProfileName::parse(&p).map_err(|_| bad_column(0, "a profile name", &p))
        },
    )
    .optional()
}
