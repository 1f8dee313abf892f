//! `verify-audit`: walks the whole chain straight from the database file (no broker needed) and
//! checks every link, hash and MAC, then the sealed head.

use super::chain::{hash_encoded, put_field, GENESIS};
use super::seal::{mac_eq, macs_all, Seal, SealError};
use super::StoreError;
use ipc_schema::secrets::{AuditHead, AuditRow};
use rusqlite::types::ValueRef;
use rusqlite::{Connection, OptionalExtension};
use serde::Serialize;

/// What verification found.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VerifyReport {
    /// Rows present in the log.
    pub entries: u64,
    /// The first entry that fails, if any.
    pub broken_at: Option<u64>,
    /// Why that entry fails.
    pub reason: Option<String>,
    /// Set when the MACs and the sealed head could not be checked (no key): the chain's hashes
    /// alone do not show a rewrite.
    pub unsealed: Option<String>,
}

impl VerifyReport {
    pub fn intact(&self) -> bool {
        self.broken_at.is_none() && self.unsealed.is_none()
    }

    /// The one-line verdict `gatehouse verify-audit` prints.
    pub fn line(&self) -> String {
        match (&self.broken_at, &self.unsealed) {
            (Some(n), _) => format!(
                "the audit log is broken at entry {n}: {}",
                self.reason.as_deref().unwrap_or("")
            ),
            (None, Some(why)) => format!(
                "{} entries, hashes linked, but the seal could not be checked: {why}",
                self.entries
            ),
            (None, None) => format!("{} entries, chain intact", self.entries),
        }
    }
}

fn text_bytes<'a>(v: ValueRef<'a>) -> Result<Option<&'a [u8]>, String> {
    match v {
        ValueRef::Null => Ok(None),
        ValueRef::Text(t) => Ok(Some(t)),
        _ => Err("a field has the wrong type".into()),
    }
}

fn blob<'a>(v: ValueRef<'a>) -> Option<&'a [u8]> {
    match v {
        ValueRef::Blob(b) => Some(b),
        _ => None,
    }
}

/// Verifies the log in `conn`. `sealer` MACs under the instance's key (the secrets-helper;
/// `None`: checked without it, and the report says so).
pub fn verify<S: Seal + ?Sized>(
    conn: &Connection,
    sealer: Option<&S>,
    no_key_reason: Option<String>,
) -> Result<VerifyReport, StoreError> {
    // One read transaction: a running broker may append meanwhile, and the rows and the head
    // must come from the same snapshot.
    conn.execute_batch("BEGIN")?;
    let r = verify_in_snapshot(conn, sealer, no_key_reason);
    let _ = conn.execute_batch("COMMIT");
    r
}

/// Rows handed to a hashing thread: their encoded fields back to back, with what was stored.
#[derive(Default)]
struct Batch {
    first_entry: u64,
    enc: Vec<u8>,
    ends: Vec<usize>,
    prevs: Vec<[u8; 32]>,
    hashes: Vec<[u8; 32]>,
    macs: Vec<[u8; 32]>,
}

const BATCH_ROWS: usize = 4096;

/// What one batch's check found: the first failing entry, or that its MACs could not be had.
type BatchResult = Result<Option<(u64, String)>, SealError>;

/// Checks each row's hash in `b`, then the MACs of the rows before the first bad hash (one
/// seal call for the batch); the first failing entry, if any.
fn check_batch<S: Seal + ?Sized>(b: &Batch, sealer: Option<(&S, &str)>) -> BatchResult {
    let mut start = 0;
    let mut bad_hash = None;
    for i in 0..b.ends.len() {
        let computed = hash_encoded(&b.prevs[i], &b.enc[start..b.ends[i]]);
        start = b.ends[i];
        if computed != b.hashes[i] {
            bad_hash = Some((
                i,
                (
                    b.first_entry + i as u64,
                    "its contents do not match its hash (modified)".to_string(),
                ),
            ));
            break;
        }
    }
    let checked = bad_hash.as_ref().map(|(i, _)| *i).unwrap_or(b.ends.len());
    if let Some((s, instance)) = sealer {
        // Up to `checked` every stored hash equals the recomputed one.
        let rows: Vec<AuditRow> = (0..checked)
            .map(|i| AuditRow {
                seq: (b.first_entry + i as u64) as i64,
                hash: b.hashes[i],
            })
            .collect();
        let (macs, _) = macs_all(s, instance, &rows, None)?;
        for (i, expected) in macs.iter().enumerate() {
            if !mac_eq(expected, &b.macs[i]) {
                return Ok(Some((
                    b.first_entry + i as u64,
                    "its MAC does not match under the audit key (rewritten or inserted)".into(),
                )));
            }
        }
    }
    Ok(bad_hash.map(|(_, f)| f))
}

fn earliest(a: Option<(u64, String)>, b: Option<(u64, String)>) -> Option<(u64, String)> {
    match (a, b) {
        (Some(x), Some(y)) => Some(if y.0 < x.0 { y } else { x }),
        (x, None) => x,
        (None, y) => y,
    }
}

fn verify_in_snapshot<S: Seal + ?Sized>(
    conn: &Connection,
    sealer: Option<&S>,
    no_key_reason: Option<String>,
) -> Result<VerifyReport, StoreError> {
    let instance = super::read_instance_id(conn)?.unwrap_or_default();
    // A database from before session modes has no `mode` column: its rows have none.
    let mode_col = if super::has_column(conn, "audit", "mode")? {
        "mode"
    } else {
        "NULL"
    };
    let mut stmt = conn.prepare(&format!(
        "SELECT seq, ts_ms, kind, session, actor, tool, target, outcome, detail, degraded, \
         prev_hash, hash, mac, {mode_col} FROM audit ORDER BY seq"
    ))?;
    let mut rows = stmt.query([])?;
    let broken = |entry: u64, reason: String, entries: u64| VerifyReport {
        entries,
        broken_at: Some(entry),
        reason: Some(reason),
        unsealed: None,
    };
    // This thread reads rows and checks numbering and links (each row's prev_hash against the
    // stored hash before it); hashing threads recompute every hash and MAC. Together they find
    // the first entry that fails, in well under the 1.5 s budget for a million rows.
    let workers = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2)
        .saturating_sub(1)
        .max(1);
    let (tx, rx) = std::sync::mpsc::sync_channel::<Batch>(workers * 2);
    let rx = std::sync::Mutex::new(rx);
    let mut n: u64 = 0;
    let mut prev = GENESIS;
    let mut failure: Option<(u64, String)> = None;
    let keyed = sealer.map(|s| (s, instance.as_str()));
    let mut seal_failed: Option<SealError> = None;
    let worker_failure =
        std::thread::scope(|scope| -> Result<Option<(u64, String)>, StoreError> {
            let handles: Vec<_> = (0..workers)
                .map(|_| {
                    let rx = &rx;
                    scope.spawn(move || {
                        let mut first: Option<(u64, String)> = None;
                        let mut seal_err = None;
                        loop {
                            let batch = match rx.lock().unwrap_or_else(|e| e.into_inner()).recv() {
                                Ok(b) => b,
                                Err(_) => return (first, seal_err),
                            };
                            match check_batch(&batch, keyed) {
                                Ok(f) => first = earliest(first, f),
                                Err(e) => seal_err = Some(e),
                            }
                        }
                    })
                })
                .collect();
            let mut batch = Batch {
                first_entry: 1,
                ..Batch::default()
            };
            let read = (|| -> Result<(), StoreError> {
                while let Some(row) = rows.next()? {
                    n += 1;
                    if failure.is_some() {
                        continue; // keep counting entries
                    }
                    let seq = row.get_ref(0)?.as_i64().unwrap_or(-1);
                    if seq != n as i64 {
                        failure = Some((
                            n,
                            if seq > n as i64 {
                                format!("entry {n} is missing (the next row is numbered {seq})")
                            } else {
                                format!("the row in position {n} is numbered {seq}")
                            },
                        ));
                        continue;
                    }
                    // The fields are hashed as stored (bytes), in the order of `encode_fields`;
                    // checking them for UTF-8 here would only cost time: a changed byte changes
                    // the hash either way.
                    let mark = batch.enc.len();
                    let encoded = (|| -> Result<(), String> {
                        let e = |e: rusqlite::Error| e.to_string();
                        let ts = row
                            .get_ref(1)
                            .map_err(e)?
                            .as_i64()
                            .map_err(|e| e.to_string())?;
                        batch.enc.extend_from_slice(&seq.to_le_bytes());
                        batch.enc.extend_from_slice(&ts.to_le_bytes());
                        for (col, required) in [
                            (2, true),
                            (3, false),
                            (4, true),
                            (5, false),
                            (6, false),
                            (7, true),
                            (8, true),
                        ] {
                            let v = text_bytes(row.get_ref(col).map_err(e)?)?;
                            if required && v.is_none() {
                                return Err(format!("column {col} is empty"));
                            }
                            put_field(&mut batch.enc, v);
                        }
                        let degraded = row
                            .get_ref(9)
                            .map_err(e)?
                            .as_i64()
                            .map_err(|e| e.to_string())?;
                        batch.enc.push((degraded != 0) as u8);
                        // Only a row with a mode has the field (`chain::encode_fields`).
                        if let Some(m) = text_bytes(row.get_ref(13).map_err(e)?)? {
                            put_field(&mut batch.enc, Some(m));
                        }
                        Ok(())
                    })();
                    if let Err(e) = encoded {
                        batch.enc.truncate(mark);
                        failure = Some((n, format!("its fields are malformed: {e}")));
                        continue;
                    }
                    let as32 = |v: Option<&[u8]>| v.and_then(|b| <[u8; 32]>::try_from(b).ok());
                    let (Some(prev_hash), Some(hash), Some(mac)) = (
                        as32(blob(row.get_ref(10)?)),
                        as32(blob(row.get_ref(11)?)),
                        as32(blob(row.get_ref(12)?)),
                    ) else {
                        batch.enc.truncate(mark);
                        failure = Some((n, "its hash columns are malformed".into()));
                        continue;
                    };
                    if prev_hash != prev {
                        batch.enc.truncate(mark);
                        failure = Some((n, format!("its link to entry {} does not match", n - 1)));
                        continue;
                    }
                    batch.ends.push(batch.enc.len());
                    batch.prevs.push(prev_hash);
                    batch.hashes.push(hash);
                    batch.macs.push(mac);
                    prev = hash;
                    if batch.ends.len() == BATCH_ROWS {
                        let next = Batch {
                            first_entry: n + 1,
                            ..Batch::default()
                        };
                        let _ = tx.send(std::mem::replace(&mut batch, next));
                    }
                }
                Ok(())
            })();
            if !batch.ends.is_empty() {
                let _ = tx.send(batch);
            }
            drop(tx);
            let mut first = None;
            for h in handles {
                let (f, e) = h.join().unwrap_or((None, None));
                first = earliest(first, f);
                if e.is_some() {
                    seal_failed = e;
                }
            }
            read.map(|_| first)
        })?;
    if let Some((entry, reason)) = earliest(failure, worker_failure) {
        return Ok(broken(entry, reason, n));
    }
    let head: Option<(i64, Vec<u8>, Vec<u8>)> = conn
        .query_row(
            "SELECT count, head, mac FROM audit_head WHERE id = 1",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .optional()?;
    match head {
        None if n == 0 => {}
        None => {
            return Ok(broken(n, "the sealed head is missing".into(), n));
        }
        Some((count, h, mac)) => {
            let count_u = count.max(0) as u64;
            if count_u > n {
                let reason = if count_u == n + 1 {
                    format!(
                        "entry {} is missing (the log was cut after entry {n})",
                        n + 1
                    )
                } else {
                    format!(
                        "entries {} to {count_u} are missing (the log was cut after entry {n})",
                        n + 1
                    )
                };
                return Ok(broken(n + 1, reason, n));
            }
            if count_u < n {
                return Ok(broken(
                    count_u + 1,
                    format!("entries after {count_u} were added outside gatehouse (the seal covers {count_u})"),
                    n,
                ));
            }
            if h.as_slice() != prev {
                return Ok(broken(
                    n,
                    "the last entry does not match the sealed head".into(),
                    n,
                ));
            }
            if let (Some(s), None) = (sealer, &seal_failed) {
                match macs_all(s, &instance, &[], Some(&AuditHead { count, head: prev })) {
                    Ok((_, Some(expected))) if mac_eq(&expected, &mac) => {}
                    Ok(_) => {
                        return Ok(broken(
                            n,
                            "the sealed head's MAC does not match under the audit key".into(),
                            n,
                        ))
                    }
                    Err(e) => seal_failed = Some(e),
                }
            }
        }
    }
    let unsealed = match (sealer, seal_failed) {
        (None, _) => Some(no_key_reason.unwrap_or_else(|| "no audit key".into())),
        (Some(_), Some(e)) => Some(format!(
            "the secrets-helper could not compute the MACs: {e}"
        )),
        (Some(_), None) => None,
    };
    Ok(VerifyReport {
        entries: n,
        broken_at: None,
        reason: None,
        unsealed,
    })
}
