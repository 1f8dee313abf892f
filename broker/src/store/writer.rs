//! The database's single writer: a thread that owns the write connection, groups whatever is
//! queued into one transaction (audit-only rows wait up to [`LINGER`] for company), and answers
//! each transactional job after its commit.
//!
//! Audit-only rows are fire-and-forget; a batch holding only those commits with
//! `synchronous=NORMAL`. A batch holding a ledger transaction (or a flush) commits with
//! `synchronous=FULL` before any of its jobs hears back. Each transactional job runs in its own
//! savepoint, so one failing job does not undo its neighbours.

use super::chain::AuditEvent;
use super::{now_ms, Chain, StoreError};
use rusqlite::Connection;
use std::sync::mpsc;
use tokio::sync::oneshot;

/// Told once the batch holding a job has committed (or failed to).
type Completion = Box<dyn FnOnce(Result<(), String>) + Send>;
/// Runs inside the batch's transaction; `false` means "roll my savepoint back".
type Work = Box<dyn FnOnce(&Connection, &mut Vec<AuditEvent>) -> (bool, Completion) + Send>;

enum Job {
    Audit(AuditEvent),
    Txn { work: Work, durable: bool },
    Stop(oneshot::Sender<()>),
}

/// Largest number of jobs in one transaction (bounds the time a batch holds the write lock).
const MAX_BATCH: usize = 4096;
/// How long audit-only rows may wait to be committed together. A broker killed meanwhile
/// loses at most this much of audit-only rows; rows queued before a ledger transition are
/// committed with it.
const LINGER: std::time::Duration = std::time::Duration::from_millis(2);

/// A handle to the writer thread. Cheap to clone; usable from any thread.
#[derive(Clone)]
pub struct StoreHandle {
    tx: mpsc::Sender<Job>,
}

impl StoreHandle {
    /// Starts the writer thread on `conn`, appending to `chain`.
    pub fn spawn(conn: Connection, chain: Chain) -> StoreHandle {
        let (tx, rx) = mpsc::channel();
        std::thread::Builder::new()
            .name("gatehouse-db".into())
            .spawn(move || run(conn, chain, rx))
            .expect("spawn the database writer thread");
        StoreHandle { tx }
    }

    /// Appends an audit row (group-committed; returns at once).
    pub fn audit(&self, ev: AuditEvent) {
        if self.tx.send(Job::Audit(ev)).is_err() {
            tracing::error!("audit row lost: the database writer has stopped");
        }
    }

    /// Runs `f` in a transaction committed with `synchronous=FULL`, together with the audit rows
    /// it pushes, and returns its result once that commit is on disk.
    pub async fn txn<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Connection, &mut Vec<AuditEvent>) -> rusqlite::Result<T> + Send + 'static,
    ) -> Result<T, StoreError> {
        self.submit(f, true).await
    }

    /// Runs `f` after every queued write (a consistent read, or a write that needs no fsync).
    pub async fn read<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Connection) -> rusqlite::Result<T> + Send + 'static,
    ) -> Result<T, StoreError> {
        self.submit(move |tx, _| f(tx), false).await
    }

    async fn submit<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Connection, &mut Vec<AuditEvent>) -> rusqlite::Result<T> + Send + 'static,
        durable: bool,
    ) -> Result<T, StoreError> {
        let (otx, orx) = oneshot::channel::<Result<T, StoreError>>();
        let work: Work = Box::new(move |tx, audit| {
            let r = f(tx, audit);
            let ok = r.is_ok();
            let done: Completion = Box::new(move |commit| {
                let out = match (commit, r) {
                    (Err(e), _) => Err(StoreError::Commit(e)),
                    (Ok(()), r) => r.map_err(StoreError::Sql),
                };
                let _ = otx.send(out);
            });
            (ok, done)
        });
        self.tx
            .send(Job::Txn { work, durable })
            .map_err(|_| StoreError::WriterGone)?;
        orx.await.map_err(|_| StoreError::WriterGone)?
    }

    /// Commits everything queued with FULL sync and stops the thread.
    pub async fn stop(&self) {
        let (otx, orx) = oneshot::channel();
        if self.tx.send(Job::Stop(otx)).is_ok() {
            let _ = orx.await;
        }
    }

    /// Waits until everything queued so far is committed with FULL sync.
    pub async fn flush(&self) -> Result<(), StoreError> {
        self.txn(|_, _| Ok(())).await
    }
}

fn run(mut conn: Connection, mut chain: Chain, rx: mpsc::Receiver<Job>) {
    let mut sync_full = true;
    while let Ok(first) = rx.recv() {
        let mut jobs = vec![first];
        // Audit-only rows wait up to LINGER for company, so that a steady trickle costs one
        // commit per few milliseconds rather than one per row; anything a caller waits for
        // (a transaction, a read, a stop) ends the wait at once.
        let deadline = std::time::Instant::now() + LINGER;
        while jobs.len() < MAX_BATCH {
            if jobs.iter().any(|j| !matches!(j, Job::Audit(_))) {
                while jobs.len() < MAX_BATCH {
                    match rx.try_recv() {
                        Ok(j) => jobs.push(j),
                        Err(_) => break,
                    }
                }
                break;
            }
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match rx.recv_timeout(left) {
                Ok(j) => jobs.push(j),
                Err(_) => break,
            }
        }
        let mut stop = None;
        let durable = jobs.iter().any(|j| match j {
            Job::Txn { durable, .. } => *durable,
            Job::Stop(_) => true,
            Job::Audit(_) => false,
        });
        if durable != sync_full {
            let mode = if durable { "FULL" } else { "NORMAL" };
            if let Err(e) = conn.pragma_update(None, "synchronous", mode) {
                tracing::error!("cannot set synchronous={mode}: {e}");
            } else {
                sync_full = durable;
            }
        }
        commit_batch(&mut conn, &mut chain, jobs, &mut stop);
        if let Some(s) = stop {
            // Fold the WAL into the database so the next reader (verify-audit) reads one file.
            if let Err(e) = conn.pragma_update(None, "wal_checkpoint", "TRUNCATE") {
                tracing::warn!("WAL checkpoint at stop failed: {e}");
            }
            let _ = s.send(());
            return;
        }
    }
}

/// Writes one batch; returns after every completion was told the outcome.
fn commit_batch(
    conn: &mut Connection,
    chain: &mut Chain,
    jobs: Vec<Job>,
    stop: &mut Option<oneshot::Sender<()>>,
) {
    let (seq0, head0) = (chain.seq, chain.head);
    let mut completions: Vec<Completion> = Vec::new();
    let result = (|| -> Result<(), String> {
        let mut tx = conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(|e| e.to_string())?;
        let ts = now_ms();
        for job in jobs {
            match job {
                Job::Audit(ev) => {
                    if let Err(e) = chain.append(&tx, &ev, ts) {
                        tracing::error!("audit row could not be written: {e}");
                    }
                }
                Job::Stop(s) => *stop = Some(s),
                Job::Txn { work, .. } => {
                    let (seq, head) = (chain.seq, chain.head);
                    let sp = tx.savepoint().map_err(|e| e.to_string())?;
                    let mut audit = Vec::new();
                    let (ok, done) = work(&sp, &mut audit);
                    let mut ok = ok;
                    if ok {
                        for ev in &audit {
                            if let Err(e) = chain.append(&sp, ev, ts) {
                                tracing::error!("audit row could not be written: {e}");
                                ok = false;
                                break;
                            }
                        }
                    }
                    if ok {
                        sp.commit().map_err(|e| e.to_string())?;
                    } else {
                        // Dropping the savepoint rolls it back; the chain forgets its rows too.
                        drop(sp);
                        chain.seq = seq;
                        chain.head = head;
                    }
                    completions.push(done);
                }
            }
        }
        chain.seal(&tx).map_err(|e| e.to_string())?;
        tx.set_drop_behavior(rusqlite::DropBehavior::Commit);
        tx.commit().map_err(|e| e.to_string())
    })();
    if let Err(e) = &result {
        tracing::error!("database commit failed: {e}");
        chain.seq = seq0;
        chain.head = head0;
    }
    for done in completions {
        done(result.clone());
    }
}
