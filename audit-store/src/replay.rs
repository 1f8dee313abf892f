//! Reading the calls a policy change is tried on (`gatehouse policy apply --dry-run`): each
//! judged call's stored target (`call_targets`, written with its audit row), and how many tool
//! rows in the window are older than that table and so cannot be replayed.

use crate::Sql;
use rusqlite::{params, Connection, OptionalExtension};

/// One judged call: its audit row's place and time, its session, and its stored target (JSON
/// the policy crate reads).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredCall {
    pub seq: i64,
    pub ts_ms: i64,
    pub session: Option<String>,
    pub call: String,
}

/// What the log holds for a replay window.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct History {
    /// Oldest first.
    pub calls: Vec<StoredCall>,
    /// Audit rows of tool calls in the window written before gatehouse kept call targets (or
    /// by a gatehouse that did not): their targets were never stored, and are not guessed.
    pub before_targets: u64,
}

/// The first audit row that can have a call target; `None`: this database has never been
/// opened by a gatehouse that keeps them.
fn targets_since(conn: &Connection) -> Sql<Option<i64>> {
    let has_table: i64 = conn.query_row(
        "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'call_targets'",
        [],
        |r| r.get(0),
    )?;
    if has_table == 0 {
        return Ok(None);
    }
    let v: Option<String> = conn
        .query_row(
            "SELECT value FROM meta WHERE key = 'call_targets_since'",
            [],
            |r| r.get(0),
        )
        .optional()?;
    match v {
        None => Ok(None),
        Some(v) => v
            .parse::<i64>()
            .map(Some)
            .map_err(|_| crate::bad_column(0, "an audit sequence number", &v)),
    }
}

/// The judged calls recorded at or after `since_ms`, and the count of older tool rows in the
/// window that have no stored target.
pub fn history(conn: &Connection, since_ms: i64) -> Sql<History> {
    let since_seq = targets_since(conn)?;
    let before_targets: i64 = conn.query_row(
        "SELECT count(*) FROM audit WHERE ts_ms >= ?1 AND seq < ?2 \
         AND kind IN ('tool_call', 'read') AND tool IS NOT NULL",
        params![since_ms, since_seq.unwrap_or(i64::MAX)],
        |r| r.get(0),
    )?;
    let mut calls = Vec::new();
    if since_seq.is_some() {
        let mut stmt = conn.prepare(
            "SELECT seq, ts_ms, session, call FROM call_targets WHERE ts_ms >= ?1 ORDER BY seq",
        )?;
        let rows = stmt.query_map(params![since_ms], |r| {
            Ok(StoredCall {
                seq: r.get(0)?,
                ts_ms: r.get(1)?,
                session: r.get(2)?,
                call: r.get(3)?,
            })
        })?;
        for row in rows {
            calls.push(row?);
        }
    }
    Ok(History {
        calls,
        before_targets: before_targets as u64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chain::{AuditEvent, AuditKind, Sealer};
    use crate::{instance_id, open_ro, open_rw, Chain};

    fn dir(name: &str) -> std::path::PathBuf {
        // (No tempfile: bench compiles this crate's modules without that dev-dependency.)
        let d = std::env::temp_dir().join(format!(
            "gh-replay-{name}-{}-{}",
            std::process::id(),
            rand::random::<u64>()
        ));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn write(conn: &mut Connection, events: &[AuditEvent], ts: i64) {
        let instance = instance_id(conn).unwrap();
        let mut chain = Chain::load(conn, Sealer::new(b"k"), instance, false).unwrap();
        let tx = conn.transaction().unwrap();
        for ev in events {
            chain.append(&tx, ev, ts).unwrap();
        }
        chain.seal(&tx).unwrap();
        tx.commit().unwrap();
    }

    fn tool_row(outcome: &str) -> AuditEvent {
        AuditEvent::new(AuditKind::ToolCall, "gateway", outcome)
            .session("s1")
            .tool("write_file")
            .target("/w/a")
    }

    #[test]
    fn targets_are_kept_beside_their_rows_and_older_rows_are_counted_not_guessed() {
        let d = dir("since");
        let path = d.join("db");
        // A log from before call targets: its table and its note do not exist yet.
        {
            let mut conn = open_rw(&path).unwrap();
            conn.execute_batch(
                "DROP TABLE call_targets; DELETE FROM meta WHERE key = 'call_targets_since'",
            )
            .unwrap();
            write(&mut conn, &[tool_row("ask"), tool_row("allow")], 1_000);
            assert_eq!(
                history(&conn, 0).unwrap(),
                History {
                    calls: vec![],
                    before_targets: 2
                },
                "a database without the table: every tool row is not replayable"
            );
        }
        // The next gatehouse opens it: rows from now on carry their targets.
        let mut conn = open_rw(&path).unwrap();
        write(
            &mut conn,
            &[
                tool_row("ask").call("{\"x\":1}"),
                AuditEvent::new(AuditKind::Broker, "broker", "started"),
                tool_row("deny").call("{\"x\":2}"),
            ],
            5_000,
        );
        let ro = open_ro(&path).unwrap();
        let h = history(&ro, 0).unwrap();
        assert_eq!(h.before_targets, 2);
        assert_eq!(
            h.calls,
            vec![
                StoredCall {
                    seq: 3,
                    ts_ms: 5_000,
                    session: Some("s1".into()),
                    call: "{\"x\":1}".into()
                },
                StoredCall {
                    seq: 5,
                    ts_ms: 5_000,
                    session: Some("s1".into()),
                    call: "{\"x\":2}".into()
                },
            ]
        );
        // The window leaves older rows out, counted or not.
        let h = history(&ro, 2_000).unwrap();
        assert_eq!((h.calls.len(), h.before_targets), (2, 0));
        assert_eq!(history(&ro, 6_000).unwrap(), History::default());
        // The chain does not cover the stored targets: it verifies as before.
        let report = crate::verify::verify(&ro, Some(&Sealer::new(b"k")), None).unwrap();
        assert_eq!(report.line(), "5 entries, chain intact");
        drop(ro);
        let _ = std::fs::remove_dir_all(&d);
    }
}
