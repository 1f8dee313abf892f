//! Reading committed rows and the sealed head from the database, in one snapshot.

use crate::ExportError;
use audit_store::audit::{sealed_head, stored_rows_after, SealedHead};
use audit_store::chain::StoredRow;
use rusqlite::Connection;
use std::path::Path;

/// A read-only connection of its own to the WAL database: readers never block the writer.
pub struct Source {
    conn: Connection,
    instance: Option<String>,
}

/// Rows after a position and the sealed head, read in one transaction, so that when the head's
/// count is the last row's seq the head is that row's seal (what an anchor says).
pub struct Snapshot {
    pub rows: Vec<StoredRow>,
    pub head: Option<SealedHead>,
}

impl Snapshot {
    /// The last position this snapshot reaches (`after` when it has no rows).
    pub fn end(&self, after: i64) -> i64 {
        self.rows.last().map_or(after, |r| r.seq)
    }

    /// Whether the rows reach the sealed head (everything committed so far is in hand).
    pub fn caught_up(&self, after: i64) -> bool {
        self.head.as_ref().map_or(0, |h| h.count) == self.end(after)
    }
}

impl Source {
    pub fn open(db: &Path) -> Result<Source, ExportError> {
        if !db.exists() {
            return Err(ExportError::Log(format!(
                "there is no audit log at {}",
                db.display()
            )));
        }
        let conn = audit_store::open_ro(db)?;
        Ok(Source {
            conn,
            instance: None,
        })
    }

    /// This log's instance id ("" until the broker has made one, which it does before the
    /// first row).
    pub fn instance(&mut self) -> Result<String, ExportError> {
        if self.instance.is_none() {
            self.instance = audit_store::read_instance_id(&self.conn)?;
        }
        Ok(self.instance.clone().unwrap_or_default())
    }

    /// Up to `limit` rows after `after` and the head, from one snapshot. A log whose rows and
    /// seal disagree is refused: exporting it would hand the pipeline a chain that does not
    /// hold.
    pub fn snapshot(&self, after: i64, limit: u32) -> Result<Snapshot, ExportError> {
        let tx = self.conn.unchecked_transaction()?;
        let rows = stored_rows_after(&tx, after, limit)?;
        let head = sealed_head(&tx)?;
        tx.commit()?;
        let snap = Snapshot { rows, head };
        let count = snap.head.as_ref().map_or(0, |h| h.count);
        let end = snap.end(after);
        if end > count || (snap.rows.is_empty() && after < count) || after > count {
            return Err(ExportError::Log(format!(
                "the audit log does not match its sealed head (the seal covers {count} entries; \
                 reading after entry {after} found rows up to {end}). Run `gatehouse verify-audit`; \
                 a cursor from another log needs another --state file"
            )));
        }
        if let Some((i, r)) = snap
            .rows
            .iter()
            .enumerate()
            .find(|(i, r)| r.seq != after + 1 + *i as i64)
        {
            return Err(ExportError::Log(format!(
                "the audit log has a gap: entry {} is missing (the next row is numbered {}). Run `gatehouse verify-audit`",
                after + 1 + i as i64,
                r.seq
            )));
        }
        Ok(snap)
    }
}
