//! `verify-audit`: walks the whole chain straight from the database file (no broker needed) and
//! checks every link, hash and MAC, then the sealed head.

use super::chain::{hash_encoded, put_field, put_later_fields, StoredRow, GENESIS};
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
    // A database from before session modes (or tiers) has no such column: its rows have none.
    let (mode_col, tier_col) = super::audit::later_columns(conn)?;
    let mut stmt = conn.prepare(&format!(
        "SELECT seq, ts_ms, kind, session, actor, tool, target, outcome, detail, degraded, \
         prev_hash, hash, mac, {mode_col}, {tier_col} FROM audit ORDER BY seq"
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
                        // Only a row with a mode or a tier has those fields
                        // (`chain::encode_fields`).
                        let mode = text_bytes(row.get_ref(13).map_err(e)?)?;
                        let tier = text_bytes(row.get_ref(14).map_err(e)?)?;
                        put_later_fields(&mut batch.enc, mode, tier);
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

/// Where a chain handed over record by record stops holding, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("entry {entry}: {reason}")]
pub struct ChainBreak {
    pub entry: u64,
    pub reason: String,
}

/// Checks a chain given one row at a time, from entry 1, without the database: an export read
/// back (`gatehouse audit verify-export`). Each row's number, its link to the row before and its
/// hash (recomputed by [`StoredRow::recomputed_hash`], the writer's own function); each anchor
/// against the row it says is the head. MACs are not checked here: that needs the audit key.
#[derive(Debug, Clone)]
pub struct ChainWalk {
    seen: u64,
    head: [u8; 32],
    anchored: Option<u64>,
    anchors: u64,
}

impl Default for ChainWalk {
    fn default() -> Self {
        ChainWalk {
            seen: 0,
            head: GENESIS,
            anchored: None,
            anchors: 0,
        }
    }
}

impl ChainWalk {
    /// Rows checked so far.
    pub fn entries(&self) -> u64 {
        self.seen
    }

    /// The count of the last anchor that matched, if any.
    pub fn anchored(&self) -> Option<u64> {
        self.anchored
    }

    /// Anchors that matched.
    pub fn anchors(&self) -> u64 {
        self.anchors
    }

    /// The next row of the chain.
    pub fn row(&mut self, r: &StoredRow) -> Result<(), ChainBreak> {
        let expected = self.seen + 1;
        let brk = |entry: u64, reason: String| Err(ChainBreak { entry, reason });
        let seq = r.seq;
        if seq < expected as i64 {
            let entry = seq.max(0) as u64;
            return if seq == self.seen as i64 && r.hash == self.head {
                brk(entry, format!("entry {seq} appears twice"))
            } else {
                brk(
                    expected,
                    format!(
                        "entry {seq} comes again after entry {} (out of order or repeated)",
                        self.seen
                    ),
                )
            };
        }
        if seq > expected as i64 {
            return brk(
                expected,
                format!("entry {expected} is missing (the next record is entry {seq})"),
            );
        }
        if r.prev_hash != self.head {
            return brk(
                expected,
                format!("its link to entry {} does not match", self.seen),
            );
        }
        if r.recomputed_hash() != r.hash {
            return brk(
                expected,
                "its contents do not match its hash (modified)".into(),
            );
        }
        self.seen = expected;
        self.head = r.hash;
        Ok(())
    }

    /// An anchor (a sealed head) read after the rows it covers: it must name exactly the rows
    /// seen so far and the last one's hash.
    pub fn anchor(&mut self, count: i64, head: &[u8; 32]) -> Result<(), ChainBreak> {
        let seen = self.seen as i64;
        if count > seen {
            return Err(ChainBreak {
                entry: self.seen + 1,
                reason: format!(
                    "an anchor covers {count} entries but only {seen} came before it (entries {} to {count} are missing)",
                    seen + 1
                ),
            });
        }
        if count < seen {
            return Err(ChainBreak {
                entry: count.max(0) as u64 + 1,
                reason: format!(
                    "an anchor covers {count} entries but {seen} came before it (entries after {count} are out of place)"
                ),
            });
        }
        if *head != self.head {
            return Err(ChainBreak {
                entry: self.seen,
                reason: format!("an anchor's head does not match entry {seen}"),
            });
        }
        self.anchored = Some(self.seen);
        self.anchors += 1;
        Ok(())
    }
}

/// The MACs of a chain handed over record by record (an export read back), checked under the
/// log's key once the chain itself held: only a holder of the key (the secrets-helper of the
/// machine that wrote the log) can do this part.
#[derive(Debug, Clone, Default)]
pub struct MacCheck {
    rows: Vec<AuditRow>,
    macs: Vec<[u8; 32]>,
    anchors: Vec<(AuditHead, [u8; 32])>,
}

impl MacCheck {
    pub fn row(&mut self, r: &StoredRow) {
        self.rows.push(AuditRow {
            seq: r.seq,
            hash: r.hash,
        });
        self.macs.push(r.mac);
    }

    pub fn anchor(&mut self, count: i64, head: &[u8; 32], mac: &[u8; 32]) {
        self.anchors.push((AuditHead { count, head: *head }, *mac));
    }

    /// The first row or anchor whose MAC is not the key's, if any.
    pub fn check<S: Seal + ?Sized>(
        &self,
        seal: &S,
        instance: &str,
    ) -> Result<Option<ChainBreak>, SealError> {
        let (expected, _) = macs_all(seal, instance, &self.rows, None)?;
        for ((row, want), got) in self.rows.iter().zip(&expected).zip(&self.macs) {
            if !mac_eq(want, got) {
                return Ok(Some(ChainBreak {
                    entry: row.seq.max(0) as u64,
                    reason: "its MAC does not match under the audit key (rewritten or inserted)"
                        .into(),
                }));
            }
        }
        for (head, got) in &self.anchors {
            match macs_all(seal, instance, &[], Some(head))? {
                (_, Some(want)) if mac_eq(&want, got) => {}
                _ => {
                    return Ok(Some(ChainBreak {
                        entry: head.count.max(0) as u64,
                        reason: format!(
                            "the anchor at entry {}: its MAC does not match under the audit key",
                            head.count
                        ),
                    }))
                }
            }
        }
        Ok(None)
    }
}

#[cfg(test)]
mod walk_tests {
    use super::*;
    use crate::chain::row_hash;

    fn chain(n: i64) -> Vec<StoredRow> {
        let mut prev = GENESIS;
        (1..=n)
            .map(|seq| {
                let mut r = StoredRow {
                    seq,
                    ts_ms: 1000 + seq,
                    kind: "tool_call".into(),
                    session: Some("s1".into()),
                    actor: "gateway".into(),
                    tool: Some("read_file".into()),
                    target: Some(format!("/p/{seq}")),
                    outcome: "allow".into(),
                    detail: String::new(),
                    degraded: false,
                    prev_hash: prev,
                    hash: [0; 32],
                    mac: [9; 32],
                    // Rows with a session mode and rows from before modes, mixed.
                    mode: (seq % 2 == 0).then(|| "full-access".to_string()),
                    // Rows about the exec sandbox, with and without a mode, and others.
                    tier: (seq % 3 == 0).then(|| "landlock".to_string()),
                };
                r.hash = row_hash(&prev, &r.fields());
                prev = r.hash;
                r
            })
            .collect()
    }

    fn walk(rows: &[StoredRow]) -> Result<ChainWalk, ChainBreak> {
        let mut w = ChainWalk::default();
        for r in rows {
            w.row(r)?;
        }
        Ok(w)
    }

    #[test]
    fn an_intact_chain_walks_and_its_anchor_matches() {
        let rows = chain(5);
        let mut w = walk(&rows).unwrap();
        assert_eq!(w.entries(), 5);
        w.anchor(5, &rows[4].hash).unwrap();
        assert_eq!((w.anchored(), w.anchors()), (Some(5), 1));
    }

    #[test]
    fn missing_duplicated_reordered_and_altered_rows_are_named() {
        let rows = chain(5);
        let mut missing = rows.clone();
        missing.remove(2);
        let e = walk(&missing).unwrap_err();
        assert_eq!(e.entry, 3);
        assert!(e.reason.contains("entry 3 is missing"), "{e}");

        let mut twice = rows.clone();
        twice.insert(3, rows[2].clone());
        let e = walk(&twice).unwrap_err();
        assert_eq!((e.entry, e.reason.as_str()), (3, "entry 3 appears twice"));

        let mut swapped = rows.clone();
        swapped.swap(1, 2);
        let e = walk(&swapped).unwrap_err();
        assert_eq!(e.entry, 2, "{e}");

        let mut altered = rows.clone();
        altered[3].target = Some("/elsewhere".into());
        let e = walk(&altered).unwrap_err();
        assert_eq!(e.entry, 4);
        assert!(e.reason.contains("modified"), "{e}");

        // The session mode is hashed: a row's mode changed (or dropped) in the export is named.
        for (i, m) in [(1, Some("ask")), (1, None), (2, Some("unattended"))] {
            let mut moded = rows.clone();
            moded[i].mode = m.map(String::from);
            let e = walk(&moded).unwrap_err();
            assert_eq!(e.entry, i as u64 + 1, "{e}");
            assert!(e.reason.contains("modified"), "{e}");
        }

        // Rewritten consistently (hash recomputed) but not its successor's link.
        let mut relinked = rows.clone();
        relinked[1].detail = "x".into();
        relinked[1].hash = relinked[1].recomputed_hash();
        let e = walk(&relinked).unwrap_err();
        assert_eq!(e.entry, 3);
        assert!(e.reason.contains("link to entry 2"), "{e}");
    }

    #[test]
    fn an_anchor_shows_a_cut_tail_and_a_wrong_head() {
        let rows = chain(5);
        let mut w = walk(&rows[..4]).unwrap();
        let e = w.anchor(5, &rows[4].hash).unwrap_err();
        assert_eq!(e.entry, 5);
        assert!(e.reason.contains("entries 5 to 5 are missing"), "{e}");
        let mut w = walk(&rows).unwrap();
        let e = w.anchor(4, &rows[3].hash).unwrap_err();
        assert_eq!(e.entry, 5, "{e}");
        let e = w.anchor(5, &rows[3].hash).unwrap_err();
        assert!(e.reason.contains("head does not match entry 5"), "{e}");
        assert_eq!(w.anchors(), 0);
    }

    #[test]
    fn macs_of_an_export_are_checked_under_the_key() {
        use crate::chain::Sealer;
        let key = Sealer::new(b"k");
        let mut rows = chain(3);
        for r in &mut rows {
            r.mac = key.row_mac(r.seq, &r.hash);
        }
        let head_mac = key.head_mac("inst", 3, &rows[2].hash);
        let check = |rows: &[StoredRow], head_mac: &[u8; 32], s: &Sealer| {
            let mut m = MacCheck::default();
            rows.iter().for_each(|r| m.row(r));
            m.anchor(3, &rows[2].hash, head_mac);
            m.check(s, "inst").unwrap()
        };
        assert_eq!(check(&rows, &head_mac, &key), None);
        let e = check(&rows, &head_mac, &Sealer::new(b"other")).unwrap();
        assert_eq!(e.entry, 1, "{e}");
        let mut forged = rows.clone();
        forged[1].mac = [0; 32];
        assert_eq!(check(&forged, &head_mac, &key).unwrap().entry, 2);
        let e = check(&rows, &[0; 32], &key).unwrap();
        assert!(e.reason.contains("the anchor at entry 3"), "{e}");
    }
}
