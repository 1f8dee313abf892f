//! gatehouse's one database: the append-only audit chain, the at-most-once ledger, sessions and
//! remembered decisions, in SQLite (WAL).
//!
//! One writer thread owns the write connection ([`writer`]). Audit-only rows are group-committed
//! with `synchronous=NORMAL` (durable against a crash of the broker, which is what matters for
//! them; the next FULL commit makes them durable against power loss too). Every ledger
//! transition is its own savepoint inside a batch committed with `synchronous=FULL`, and its
//! caller hears back only after that commit, so the event loop never waits on an fsync.
//!
//! Every SQL statement gatehouse runs is in this crate: [`ledger`], [`sessions`],
//! [`remembered`] and [`audit`] (reading the log) hold the ones the broker and the command line
//! use, as functions with typed arguments and results.

#![forbid(unsafe_code)]

pub mod audit;
pub mod chain;
pub mod ledger;
pub mod pins;
pub mod remembered;
pub mod replay;
pub mod seal;
pub mod sessions;
pub mod verify;
pub mod writer;

use chain::{AuditEvent, RowFields, Sealer, GENESIS};
use ipc_schema::secrets::{AuditHead, AuditRow};
use rusqlite::{params, Connection, OptionalExtension};
use seal::{mac_eq, macs_all, Seal};
use std::path::{Path, PathBuf};

pub use writer::StoreHandle;

/// The result of one statement (or a few) on a connection the caller holds: inside a writer
/// transaction ([`StoreHandle::txn`]), a read ([`StoreHandle::read`]), or a connection of a
/// command that reads the file directly.
pub type Sql<T> = rusqlite::Result<T>;

/// A column that does not hold what the schema says: the row is refused, not guessed at.
pub(crate) fn bad_column(col: usize, what: &str, got: &str) -> rusqlite::Error {
    let why = format!("{got:?} is not {what}");
    rusqlite::Error::FromSqlConversionFailure(
        col,
        rusqlite::types::Type::Text,
        Box::new(rusqlite::types::FromSqlError::Other(why.into())),
    )
}

/// The database file inside the data dir.
pub fn db_path(data_dir: &Path) -> PathBuf {
    data_dir.join("gatehouse.db")
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("audit database {path}: {source}")]
    Open {
        path: String,
        source: rusqlite::Error,
    },
    #[error("audit database: {0}")]
    Sql(#[from] rusqlite::Error),
    #[error("the audit log does not match its sealed head ({0}). Run `gatehouse verify-audit` to find the entry; to start a fresh log, move the database aside")]
    HeadMismatch(String),
    #[error("the audit log cannot be sealed: {0}")]
    Seal(#[from] seal::SealError),
    #[error("audit database commit failed: {0}")]
    Commit(String),
    #[error("the audit writer has stopped")]
    WriterGone,
}

const SCHEMA: &str = r#"
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS audit (
    seq INTEGER PRIMARY KEY,
    ts_ms INTEGER NOT NULL,
    kind TEXT NOT NULL,
    session TEXT,
    actor TEXT NOT NULL,
    tool TEXT,
    target TEXT,
    outcome TEXT NOT NULL,
    detail TEXT NOT NULL,
    degraded INTEGER NOT NULL,
    prev_hash BLOB NOT NULL,
    hash BLOB NOT NULL,
    mac BLOB NOT NULL,
    mode TEXT,
    tier TEXT
);
CREATE TRIGGER IF NOT EXISTS audit_no_update BEFORE UPDATE ON audit
    BEGIN SELECT RAISE(ABORT, 'the audit log is append-only: UPDATE refused'); END;
CREATE TRIGGER IF NOT EXISTS audit_no_delete BEFORE DELETE ON audit
    BEGIN SELECT RAISE(ABORT, 'the audit log is append-only: DELETE refused'); END;
CREATE TABLE IF NOT EXISTS audit_head (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    count INTEGER NOT NULL,
    head BLOB NOT NULL,
    mac BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS ledger (
    id INTEGER PRIMARY KEY,
    session TEXT NOT NULL,
    call_key BLOB NOT NULL,
    tool TEXT NOT NULL,
    target TEXT NOT NULL,
    summary TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN
        ('proposed','pending','executing','done','failed','rejected','uncertain','abandoned')),
    reason TEXT NOT NULL DEFAULT '',
    result BLOB,
    created_ms INTEGER NOT NULL,
    updated_ms INTEGER NOT NULL,
    UNIQUE (session, call_key)
);
CREATE INDEX IF NOT EXISTS ledger_state ON ledger (state);
CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY,
    resume_hash BLOB NOT NULL UNIQUE,
    created_ms INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS session_profiles (
    session TEXT PRIMARY KEY,
    profile TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS session_modes (
    session TEXT PRIMARY KEY,
    mode TEXT NOT NULL CHECK (mode IN ('ask','full-access','unattended'))
);
CREATE TABLE IF NOT EXISTS remembered (
    id INTEGER PRIMARY KEY,
    tool TEXT NOT NULL,
    target TEXT NOT NULL,
    action TEXT NOT NULL CHECK (action IN ('allow','deny')),
    created_ms INTEGER NOT NULL,
    origin TEXT NOT NULL,
    profile TEXT NOT NULL DEFAULT 'default'
);
CREATE TABLE IF NOT EXISTS call_targets (
    seq INTEGER PRIMARY KEY REFERENCES audit (seq),
    ts_ms INTEGER NOT NULL,
    session TEXT,
    call TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS call_targets_ts ON call_targets (ts_ms);
CREATE TABLE IF NOT EXISTS mcp_pins (
    profile TEXT NOT NULL,
    server TEXT NOT NULL,
    tool TEXT NOT NULL,
    digest BLOB NOT NULL,
    definition BLOB NOT NULL,
    approved_ms INTEGER NOT NULL,
    PRIMARY KEY (profile, server, tool)
);
"#;

/// Whether table `table` has column `column` (databases made by an earlier gatehouse may not).
pub(crate) fn has_column(conn: &Connection, table: &str, column: &str) -> rusqlite::Result<bool> {
    let n: i64 = conn.query_row(
        "SELECT COUNT(*) FROM pragma_table_info(?1) WHERE name = ?2",
        params![table, column],
        |r| r.get(0),
    )?;
    Ok(n > 0)
}

/// Brings a database made by an earlier gatehouse up to [`SCHEMA`]: `remembered` had no
/// `profile` column before session profiles (its rows were made in the default profile),
/// `audit` had no `mode` column before session modes (its rows keep NULL there, which hashes
/// as they were hashed when written: see [`chain::encode_fields`]), and the first audit row
/// that can have a call target is noted once (`call_targets_since`), so that a replay tells
/// rows from before that (not replayable) from calls that never had one.
fn migrate(conn: &Connection) -> rusqlite::Result<()> {
    if !has_column(conn, "audit", "mode")? {
        conn.execute_batch("ALTER TABLE audit ADD COLUMN mode TEXT")?;
    }
    // Likewise the exec sandbox's tier: older rows keep NULL, hashed as they were.
    if !has_column(conn, "audit", "tier")? {
        conn.execute_batch("ALTER TABLE audit ADD COLUMN tier TEXT")?;
    }
    conn.execute(
        "INSERT OR IGNORE INTO meta (key, value) \
         SELECT 'call_targets_since', CAST(coalesce(max(seq), 0) + 1 AS TEXT) FROM audit",
        [],
    )?;
    let has_profile: i64 = conn.query_row(
        "SELECT COUNT(*) FROM pragma_table_info('remembered') WHERE name = 'profile'",
        [],
        |r| r.get(0),
    )?;
    if has_profile == 0 {
        conn.execute_batch(
            "ALTER TABLE remembered ADD COLUMN profile TEXT NOT NULL DEFAULT 'default'",
        )?;
    }
    Ok(())
}

pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Opens (creating if needed) the database for reading and writing, with the pragmas gatehouse
/// relies on.
pub fn open_rw(path: &Path) -> Result<Connection, StoreError> {
    let conn = Connection::open(path).map_err(|source| StoreError::Open {
        path: path.display().to_string(),
        source,
    })?;
    conn.busy_timeout(std::time::Duration::from_secs(5))?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "FULL")?;
    conn.execute_batch(SCHEMA)?;
    migrate(&conn)?;
    Ok(conn)
}

/// Opens the database read-only (verify-audit, audit tail), without creating it.
pub fn open_ro(path: &Path) -> Result<Connection, StoreError> {
    let conn = Connection::open_with_flags(
        path,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(|source| StoreError::Open {
        path: path.display().to_string(),
        source,
    })?;
    conn.busy_timeout(std::time::Duration::from_secs(5))?;
    // Reading the whole log (verify) through a memory map instead of a read() per page.
    conn.pragma_update(None, "mmap_size", 1i64 << 32)?;
    Ok(conn)
}

/// This database's instance id (names its key in the keyring), created on first use.
pub fn instance_id(conn: &Connection) -> Result<String, StoreError> {
    if let Some(id) = read_instance_id(conn)? {
        return Ok(id);
    }
    let id = hex::encode(rand::random::<[u8; 16]>());
    conn.execute(
        "INSERT OR IGNORE INTO meta (key, value) VALUES ('instance', ?1)",
        params![id],
    )?;
    Ok(read_instance_id(conn)?.unwrap_or(id))
}

pub fn read_instance_id(conn: &Connection) -> Result<Option<String>, StoreError> {
    Ok(conn
        .query_row("SELECT value FROM meta WHERE key = 'instance'", [], |r| {
            r.get(0)
        })
        .optional()?)
}

/// The number of audit rows (for deciding whether a missing key is a first start).
pub fn audit_is_empty(conn: &Connection) -> Result<bool, StoreError> {
    let n: i64 = conn.query_row("SELECT count(*) FROM audit", [], |r| r.get(0))?;
    Ok(n == 0)
}

/// One row appended to the chain but not yet written: its MAC comes with the batch's seal.
#[derive(Debug, Clone)]
pub struct StagedRow {
    pub seq: i64,
    pub ts_ms: i64,
    pub event: AuditEvent,
    pub prev: [u8; 32],
    pub hash: [u8; 32],
}

/// Where the chain stood, to roll back to (a failed savepoint, a batch that could not be
/// sealed).
#[derive(Debug, Clone, Copy)]
pub struct ChainMark {
    seq: i64,
    head: [u8; 32],
    staged: usize,
    modes_undo: usize,
}

/// The chain's writing end: the last seq and hash, the rows waiting for their MACs, and the
/// seal that MACs them (the secrets-helper in the broker; see [`seal`]).
pub struct Chain<S: Seal = Sealer> {
    pub seq: i64,
    pub head: [u8; 32],
    pub sealer: S,
    pub instance: String,
    /// Every row written records that the broker runs with `--allow-degraded`.
    pub degraded: bool,
    /// Rows appended since the last [`Chain::seal`].
    pub staged: Vec<StagedRow>,
    /// Each session's mode as its rows last named it: what a row of the session that names
    /// none is stamped with. Rebuilt after a restart from the rows that follow (a resumed
    /// session's row names its mode).
    pub modes: std::collections::HashMap<String, ipc_schema::mode::SessionMode>,
    /// What `modes` held before each change since the last seal, to undo with a rollback.
    pub modes_undo: Vec<(String, Option<ipc_schema::mode::SessionMode>)>,
}

impl<S: Seal> Chain<S> {
    /// Loads the chain's end and checks it against the sealed head: a mismatch means the log was
    /// changed behind gatehouse's back, and the broker refuses to append to it.
    pub fn load(
        conn: &Connection,
        sealer: S,
        instance: String,
        degraded: bool,
    ) -> Result<Chain<S>, StoreError> {
        let last: Option<(i64, Vec<u8>)> = conn
            .query_row(
                "SELECT seq, hash FROM audit ORDER BY seq DESC LIMIT 1",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()?;
        let head_row: Option<(i64, Vec<u8>, Vec<u8>)> = conn
            .query_row(
                "SELECT count, head, mac FROM audit_head WHERE id = 1",
                [],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .optional()?;
        let (seq, head) = match &last {
            None => (0, GENESIS),
            Some((seq, hash)) => (
                *seq,
                hash.as_slice().try_into().map_err(|_| {
                    StoreError::HeadMismatch(format!("entry {seq} has a malformed hash"))
                })?,
            ),
        };
        match head_row {
            None if last.is_none() => {}
            None => {
                return Err(StoreError::HeadMismatch(
                    "the sealed head is missing".into(),
                ))
            }
            Some((count, h, mac)) => {
                if count != seq || h.as_slice() != head {
                    return Err(StoreError::HeadMismatch(format!(
                        "the seal covers {count} entries, the log ends at entry {seq}"
                    )));
                }
                let (_, expected) =
                    macs_all(&sealer, &instance, &[], Some(&AuditHead { count, head }))?;
                if !expected.is_some_and(|e| mac_eq(&e, &mac)) {
                    return Err(StoreError::HeadMismatch(
                        "the seal's MAC does not match under this instance's key".into(),
                    ));
                }
            }
        }
        Ok(Chain {
            seq,
            head,
            sealer,
            instance,
            degraded,
            staged: Vec::new(),
            modes: Default::default(),
            modes_undo: Vec::new(),
        })
    }

    /// Appends one row to the chain. It is written, with its MAC, by the next [`Chain::seal`]
    /// in the same transaction.
    pub fn append(
        &mut self,
        _tx: &Connection,
        ev: &AuditEvent,
        ts_ms: i64,
    ) -> rusqlite::Result<()> {
        let seq = self.seq + 1;
        let mut ev = ev.clone();
        if let Some(sid) = &ev.session {
            match ev.mode {
                Some(m) => {
                    let before = self.modes.insert(sid.clone(), m);
                    self.modes_undo.push((sid.clone(), before));
                }
                None => ev.mode = self.modes.get(sid).copied(),
            }
        }
        let ev = &ev;
        let f = RowFields {
            seq,
            ts_ms,
            kind: ev.kind.as_str(),
            session: ev.session.as_deref(),
            actor: &ev.actor,
            tool: ev.tool.as_deref(),
            target: ev.target.as_deref(),
            outcome: &ev.outcome,
            detail: &ev.detail,
            degraded: self.degraded,
            mode: ev.mode.map(|m| m.as_str()),
            tier: ev.tier.map(|t| t.name()),
        };
        let hash = chain::row_hash(&self.head, &f);
        self.staged.push(StagedRow {
            seq,
            ts_ms,
            event: ev.clone(),
            prev: self.head,
            hash,
        });
        self.seq = seq;
        self.head = hash;
        Ok(())
    }

    pub fn mark(&self) -> ChainMark {
        ChainMark {
            seq: self.seq,
            head: self.head,
            staged: self.staged.len(),
            modes_undo: self.modes_undo.len(),
        }
    }

    /// Forgets every row appended after `mark` (their transaction was rolled back).
    pub fn rollback_to(&mut self, mark: ChainMark) {
        self.seq = mark.seq;
        self.head = mark.head;
        self.staged.truncate(mark.staged);
        while self.modes_undo.len() > mark.modes_undo {
            if let Some((sid, before)) = self.modes_undo.pop() {
                match before {
                    Some(m) => self.modes.insert(sid, m),
                    None => self.modes.remove(&sid),
                };
            }
        }
    }

    /// Gets the MACs of the staged rows and of the new head (one seal call per
    /// [`ipc_schema::secrets::MAX_AUDIT_ROWS`] rows), then writes the rows and the sealed head
    /// inside `tx`. If the MACs cannot be had nothing is written and the staged rows stay
    /// staged: the caller rolls back or retries.
    pub fn seal(&mut self, tx: &Connection) -> Result<(), StoreError> {
        let rows: Vec<AuditRow> = self
            .staged
            .iter()
            .map(|r| AuditRow {
                seq: r.seq,
                hash: r.hash,
            })
            .collect();
        let head = AuditHead {
            count: self.seq,
            head: self.head,
        };
        let (macs, head_mac) = macs_all(&self.sealer, &self.instance, &rows, Some(&head))?;
        let head_mac = head_mac.ok_or_else(|| seal::SealError("no MAC for the head".into()))?;
        {
            let mut stmt = tx.prepare_cached(
                "INSERT INTO audit (seq, ts_ms, kind, session, actor, tool, target, outcome, detail, \
                 degraded, prev_hash, hash, mac, mode, tier) VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14,?15)",
            )?;
            for (r, mac) in self.staged.iter().zip(&macs) {
                let ev = &r.event;
                stmt.execute(params![
                    r.seq,
                    r.ts_ms,
                    ev.kind.as_str(),
                    ev.session,
                    ev.actor,
                    ev.tool,
                    ev.target,
                    ev.outcome,
                    ev.detail,
                    self.degraded,
                    &r.prev[..],
                    &r.hash[..],
                    &mac[..],
                    ev.mode.map(|m| m.as_str()),
                    ev.tier.map(|t| t.name()),
                ])?;
                // In the same transaction as its row, or not at all.
                if let Some(c) = &ev.call {
                    tx.prepare_cached(
                        "INSERT INTO call_targets (seq, ts_ms, session, call) VALUES (?1,?2,?3,?4)",
                    )?
                    .execute(params![r.seq, r.ts_ms, ev.session, c])?;
                }
            }
        }
        tx.prepare_cached(
            "INSERT INTO audit_head (id, count, head, mac) VALUES (1, ?1, ?2, ?3) \
             ON CONFLICT(id) DO UPDATE SET count = excluded.count, head = excluded.head, mac = excluded.mac",
        )?
        .execute(params![self.seq, &self.head[..], &head_mac[..]])?;
        self.staged.clear();
        self.modes_undo.clear();
        Ok(())
    }
}

#[cfg(test)]
mod migrate_tests {
    use super::*;

    fn temp_db(name: &str) -> (PathBuf, PathBuf) {
        // (No tempfile: bench compiles this module in without that dev-dependency.)
        let dir = std::env::temp_dir().join(format!(
            "gh-{name}-{}-{}",
            std::process::id(),
            rand::random::<u64>()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let db = dir.join("old.db");
        (dir, db)
    }

    /// A log written before session modes (no `mode` column; rows hashed without one) still
    /// verifies, before and after the column is added; rows written after it carry their
    /// session's mode (named or stamped) under the hash, and changing or clearing it is found.
    #[test]
    fn a_log_from_before_modes_verifies_and_new_rows_hash_their_mode() {
        use ipc_schema::mode::SessionMode;
        let (dir, path) = temp_db("modes");
        let key = Sealer::new(b"k");
        {
            let old = Connection::open(&path).unwrap();
            old.execute_batch(&SCHEMA.replace(",\n    mode TEXT,\n    tier TEXT\n", "\n"))
                .unwrap();
            assert!(!has_column(&old, "audit", "mode").unwrap());
            let instance = instance_id(&old).unwrap();
            let mut prev = GENESIS;
            for seq in 1..=2i64 {
                let f = RowFields {
                    seq,
                    ts_ms: 10 + seq,
                    kind: "session",
                    session: Some("s"),
                    actor: "gateway",
                    tool: None,
                    target: None,
                    outcome: "opened",
                    detail: "before modes",
                    degraded: false,
                    mode: None,
                    tier: None,
                };
                let hash = chain::row_hash(&prev, &f);
                old.execute(
                    "INSERT INTO audit (seq, ts_ms, kind, session, actor, tool, target, outcome, \
                     detail, degraded, prev_hash, hash, mac) VALUES (?1,?2,'session','s','gateway',\
                     NULL,NULL,'opened','before modes',0,?3,?4,?5)",
                    params![
                        seq,
                        10 + seq,
                        &prev[..],
                        &hash[..],
                        &key.row_mac(seq, &hash)[..]
                    ],
                )
                .unwrap();
                prev = hash;
            }
            old.execute(
                "INSERT INTO audit_head (id, count, head, mac) VALUES (1, 2, ?1, ?2)",
                params![&prev[..], &key.head_mac(&instance, 2, &prev)[..]],
            )
            .unwrap();
        }
        let check = |want: &str| {
            let ro = open_ro(&path).unwrap();
            assert_eq!(verify::verify(&ro, Some(&key), None).unwrap().line(), want);
        };
        check("2 entries, chain intact");

        let conn = open_rw(&path).unwrap();
        assert!(has_column(&conn, "audit", "mode").unwrap());
        check("2 entries, chain intact");
        let instance = instance_id(&conn).unwrap();
        let mut chain = Chain::load(&conn, key.clone(), instance, false).unwrap();
        let tx = conn.unchecked_transaction().unwrap();
        chain
            .append(
                &tx,
                &AuditEvent::new(chain::AuditKind::Session, "ui", "mode changed")
                    .session("s")
                    .mode(SessionMode::FullAccess),
                20,
            )
            .unwrap();
        chain
            .append(
                &tx,
                &AuditEvent::new(chain::AuditKind::ToolCall, "gateway", "ask").session("s"),
                21,
            )
            .unwrap();
        chain
            .append(
                &tx,
                &AuditEvent::new(chain::AuditKind::Broker, "broker", "x"),
                22,
            )
            .unwrap();
        chain.seal(&tx).unwrap();
        tx.commit().unwrap();
        let modes: Vec<Option<String>> = conn
            .prepare("SELECT mode FROM audit ORDER BY seq")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(
            modes,
            [
                None,
                None,
                Some("full-access".into()),
                Some("full-access".into()),
                None
            ],
            "a row of the session that names no mode is stamped with the one its rows named"
        );
        check("5 entries, chain intact");
        let tail = audit::rows_after(&conn, 0, 10).unwrap();
        assert_eq!(tail[3].mode, Some(SessionMode::FullAccess));
        assert_eq!(tail[0].mode, None);

        conn.execute_batch("DROP TRIGGER audit_no_update").unwrap();
        conn.execute("UPDATE audit SET mode = 'ask' WHERE seq = 4", [])
            .unwrap();
        check("the audit log is broken at entry 4: its contents do not match its hash (modified)");
        conn.execute("UPDATE audit SET mode = NULL WHERE seq = 4", [])
            .unwrap();
        check("the audit log is broken at entry 4: its contents do not match its hash (modified)");
        conn.execute("UPDATE audit SET mode = 'full-access' WHERE seq = 4", [])
            .unwrap();
        check("5 entries, chain intact");
        drop(conn);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A log written before tiers (a `mode` column, no `tier` column; a row with a mode) still
    /// verifies, before and after the column is added; rows written after it carry the exec
    /// sandbox's tier under the hash (with a mode or without), and changing, clearing or
    /// setting it is found.
    #[test]
    fn a_log_from_before_tiers_verifies_and_new_rows_hash_their_tier() {
        use ipc_schema::mode::SessionMode;
        use ipc_schema::tier::ConfinementTier;
        let (dir, path) = temp_db("tiers");
        let key = Sealer::new(b"k");
        {
            let old = Connection::open(&path).unwrap();
            old.execute_batch(&SCHEMA.replace(",\n    tier TEXT\n", "\n"))
                .unwrap();
            assert!(has_column(&old, "audit", "mode").unwrap());
            assert!(!has_column(&old, "audit", "tier").unwrap());
            let instance = instance_id(&old).unwrap();
            let f = RowFields {
                seq: 1,
                ts_ms: 11,
                kind: "session",
                session: Some("s"),
                actor: "gateway",
                tool: None,
                target: None,
                outcome: "opened",
                detail: "before tiers",
                degraded: false,
                mode: Some("ask"),
                tier: None,
            };
            let hash = chain::row_hash(&GENESIS, &f);
            old.execute(
                "INSERT INTO audit (seq, ts_ms, kind, session, actor, tool, target, outcome, \
                 detail, degraded, prev_hash, hash, mac, mode) VALUES (1,11,'session','s','gateway',\
                 NULL,NULL,'opened','before tiers',0,?1,?2,?3,'ask')",
                params![&GENESIS[..], &hash[..], &key.row_mac(1, &hash)[..]],
            )
            .unwrap();
            old.execute(
                "INSERT INTO audit_head (id, count, head, mac) VALUES (1, 1, ?1, ?2)",
                params![&hash[..], &key.head_mac(&instance, 1, &hash)[..]],
            )
            .unwrap();
        }
        let check = |want: &str| {
            let ro = open_ro(&path).unwrap();
            assert_eq!(verify::verify(&ro, Some(&key), None).unwrap().line(), want);
        };
        check("1 entries, chain intact");

        let conn = open_rw(&path).unwrap();
        assert!(has_column(&conn, "audit", "tier").unwrap());
        check("1 entries, chain intact");
        let instance = instance_id(&conn).unwrap();
        let mut chain = Chain::load(&conn, key.clone(), instance, false).unwrap();
        let tx = conn.unchecked_transaction().unwrap();
        // A session's row (its mode stamped on it) about a command, and a launch's row (no
        // session, so no mode), each with its tier; and a row about nothing run.
        let ll = Some(ConfinementTier::Landlock);
        for ev in [
            AuditEvent::new(chain::AuditKind::Execution, "broker", "done")
                .session("s")
                .mode(SessionMode::Ask)
                .tier(ll),
            AuditEvent::new(chain::AuditKind::Execution, "ui", "started").tier(ll),
            AuditEvent::new(chain::AuditKind::Broker, "broker", "x"),
        ] {
            chain.append(&tx, &ev, 20).unwrap();
        }
        chain.seal(&tx).unwrap();
        tx.commit().unwrap();
        check("4 entries, chain intact");
        let tail = audit::rows_after(&conn, 0, 10).unwrap();
        let tiers: Vec<_> = tail.iter().map(|e| e.tier).collect();
        assert_eq!(tiers, [None, ll, ll, None]);
        let stored = audit::stored_rows_after(&conn, 0, 10).unwrap();
        assert_eq!(stored[2].tier.as_deref(), Some("landlock"));
        assert!(stored.iter().all(|r| r.recomputed_hash() == r.hash));

        conn.execute_batch("DROP TRIGGER audit_no_update").unwrap();
        let broken = |seq: i64| {
            format!("the audit log is broken at entry {seq}: its contents do not match its hash (modified)")
        };
        for (seq, sql) in [
            (2, "UPDATE audit SET tier = 'namespaces' WHERE seq = 2"),
            (2, "UPDATE audit SET tier = NULL WHERE seq = 2"),
            (3, "UPDATE audit SET tier = NULL WHERE seq = 3"),
            (4, "UPDATE audit SET tier = 'landlock' WHERE seq = 4"),
            (1, "UPDATE audit SET tier = 'landlock' WHERE seq = 1"),
        ] {
            conn.execute(sql, []).unwrap();
            check(&broken(seq));
            conn.execute_batch(
                "UPDATE audit SET tier = CASE WHEN seq IN (2, 3) THEN 'landlock' ELSE NULL END",
            )
            .unwrap();
            check("4 entries, chain intact");
        }
        drop(conn);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_rolled_back_row_takes_its_mode_back() {
        use ipc_schema::mode::SessionMode;
        let (dir, path) = temp_db("modes-rollback");
        let conn = open_rw(&path).unwrap();
        let instance = instance_id(&conn).unwrap();
        let mut chain = Chain::load(&conn, Sealer::new(b"k"), instance, false).unwrap();
        let ev = |m: Option<SessionMode>| {
            let e = AuditEvent::new(chain::AuditKind::Session, "ui", "x").session("s");
            match m {
                Some(m) => e.mode(m),
                None => e,
            }
        };
        chain.append(&conn, &ev(Some(SessionMode::Ask)), 1).unwrap();
        let mark = chain.mark();
        chain
            .append(&conn, &ev(Some(SessionMode::Unattended)), 2)
            .unwrap();
        chain.rollback_to(mark);
        chain.append(&conn, &ev(None), 3).unwrap();
        assert_eq!(chain.staged[1].event.mode, Some(SessionMode::Ask));
        drop(conn);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_remembered_table_from_before_profiles_gets_its_profile_column() {
        // (No tempfile: bench compiles this module in without that dev-dependency.)
        let dir = std::env::temp_dir().join(format!(
            "gh-migrate-{}-{}",
            std::process::id(),
            rand::random::<u64>()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("old.db");
        let old = Connection::open(&path).unwrap();
        old.execute_batch(
            "CREATE TABLE remembered (id INTEGER PRIMARY KEY, tool TEXT NOT NULL, target TEXT NOT NULL,
                action TEXT NOT NULL CHECK (action IN ('allow','deny')), created_ms INTEGER NOT NULL,
                origin TEXT NOT NULL);
             INSERT INTO remembered (tool, target, action, created_ms, origin)
                VALUES ('write_file', '/p/a', 'allow', 1, '3');",
        )
        .unwrap();
        drop(old);
        let conn = open_rw(&path).unwrap();
        let profile: String = conn
            .query_row("SELECT profile FROM remembered WHERE id = 1", [], |r| {
                r.get(0)
            })
            .unwrap();
        assert_eq!(
            profile, "default",
            "its rows were made in the default profile"
        );
        // Opening again changes nothing (the column is there).
        drop(conn);
        open_rw(&path).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }
}
