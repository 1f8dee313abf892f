//! The database's single writer: a thread that owns the write connection, groups whatever is
//! queued into one transaction (audit-only rows wait up to [`LINGER`] for company), and answers
//! each transactional job after its commit.
//!
//! Audit-only rows are fire-and-forget; a batch holding only those commits with
//! `synchronous=NORMAL`. A batch holding a ledger transaction (or a flush) commits with
//! `synchronous=FULL` before any of its jobs hears back. Each transactional job runs in its own
//! savepoint, so one failing job does not undo its neighbours.
//!
//! Sealing: a batch's rows are hashed into the chain as they come, then [`Chain::seal`] asks
//! the seal (in the broker: the secrets-helper, through broker/src/head_key.rs; this thread
//! waits, the event loop does not) for every row's MAC and the new head's in one call per 8192
//! rows, and only then writes the rows. If no MAC can be had the whole batch is rolled back:
//! its transactional jobs fail with [`StoreError::Seal`] (a ledger step that cannot be audited
//! does not happen), and its audit-only rows are held in memory, oldest first, and retried
//! every [`RETRY_SEAL`] until the seal answers. So every row on disk has its MAC, and
//! `verify-audit` never has to tell a missing MAC from a forged one.

use super::chain::AuditEvent;
use super::seal::Seal;
use super::{now_ms, Chain, StoreError};
use rusqlite::Connection;
use std::collections::VecDeque;
use std::sync::mpsc;
use tokio::sync::oneshot;

/// Told once the batch holding a job has committed (or failed to).
type Completion = Box<dyn FnOnce(Result<(), StoreError>) + Send>;
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
/// While the seal (the secrets-helper) cannot MAC, audit-only rows are held in memory and
/// retried this often.
const RETRY_SEAL: std::time::Duration = std::time::Duration::from_millis(500);
/// The most audit-only rows held while they cannot be sealed; beyond that the oldest are
/// dropped, and a row saying how many is written once sealing works again.
const MAX_HELD: usize = 100_000;

/// A handle to the writer thread. Cheap to clone; usable from any thread.
#[derive(Clone)]
pub struct StoreHandle {
    tx: mpsc::Sender<Job>,
}

/// The receiving end of a [`StoreHandle`] whose writer has not started yet: jobs queue until
/// [`Unstarted::start`] (the broker installs the handle before its chain can be checked, so
/// that helper start rows are kept).
pub struct Unstarted {
    rx: mpsc::Receiver<Job>,
}

fn make_work<T: Send + 'static>(
    f: impl FnOnce(&Connection, &mut Vec<AuditEvent>) -> rusqlite::Result<T> + Send + 'static,
    otx: oneshot::Sender<Result<T, StoreError>>,
) -> Work {
    Box::new(move |tx, audit| {
        let r = f(tx, audit);
        let ok = r.is_ok();
        let done: Completion = Box::new(move |commit| {
            let out = match (commit, r) {
                (Err(e), _) => Err(e),
                (Ok(()), r) => r.map_err(StoreError::Sql),
            };
            let _ = otx.send(out);
        });
        (ok, done)
    })
}

impl Unstarted {
    /// Starts the writer thread: it loads the chain's end from `conn` (checking the sealed
    /// head through `sealer`), then runs `first` as the first transaction (committed with FULL
    /// sync) before any queued job. The receiver hears the load error or `first`'s result.
    pub fn start<S: Seal + 'static, T: Send + 'static>(
        self,
        conn: Connection,
        sealer: S,
        instance: String,
        degraded: bool,
        first: impl FnOnce(&Connection, &mut Vec<AuditEvent>) -> rusqlite::Result<T> + Send + 'static,
    ) -> oneshot::Receiver<Result<T, StoreError>> {
        let (otx, orx) = oneshot::channel();
        let rx = self.rx;
        std::thread::Builder::new()
            .name("gatehouse-db".into())
            .spawn(move || {
                let chain = match Chain::load(&conn, sealer, instance, degraded) {
                    Ok(c) => c,
                    Err(e) => {
                        let _ = otx.send(Err(e));
                        return;
                    }
                };
                let first = Job::Txn {
                    work: make_work(first, otx),
                    durable: true,
                };
                run(conn, chain, rx, Some(first))
            })
            .expect("spawn the database writer thread");
        orx
    }
}

impl StoreHandle {
    /// Starts the writer thread on `conn`, appending to `chain`.
    pub fn spawn<S: Seal + 'static>(conn: Connection, chain: Chain<S>) -> StoreHandle {
        let (tx, rx) = mpsc::channel();
        std::thread::Builder::new()
            .name("gatehouse-db".into())
            .spawn(move || run(conn, chain, rx, None))
            .expect("spawn the database writer thread");
        StoreHandle { tx }
    }

    /// A handle whose writer starts later (see [`Unstarted`]).
    pub fn unstarted() -> (StoreHandle, Unstarted) {
        let (tx, rx) = mpsc::channel();
        (StoreHandle { tx }, Unstarted { rx })
    }

    /// Appends an audit row (group-committed; returns at once).
    pub fn audit(&self, ev: AuditEvent) {
        if self.tx.send(Job::Audit(ev)).is_err() {
            tracing::error!("audit row lost: the database writer has stopped");
        }
    }

    /// Runs `f` in a transaction committed with `synchronous=FULL`, together with the audit rows
    /// it pushes, and returns its result once that commit is on disk. If the rows cannot be
    /// sealed (the secrets-helper is unavailable) nothing of it is committed and the error says
    /// so: no ledger step happens without its sealed audit row.
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
        self.tx
            .send(Job::Txn {
                work: make_work(f, otx),
                durable,
            })
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

/// Audit-only rows that could not be sealed yet, oldest first, and how many were dropped.
#[derive(Default)]
struct Held {
    rows: VecDeque<AuditEvent>,
    dropped: u64,
}

impl Held {
    fn hold(&mut self, rows: Vec<AuditEvent>) {
        for ev in rows.into_iter().rev() {
            self.rows.push_front(ev);
        }
        while self.rows.len() > MAX_HELD {
            self.rows.pop_front();
            self.dropped += 1;
        }
    }

    /// The held rows as jobs for the next batch, led by a row counting the dropped ones.
    fn take(&mut self) -> Vec<Job> {
        let mut jobs = Vec::with_capacity(self.rows.len() + 1);
        if self.dropped > 0 {
            jobs.push(Job::Audit(
                AuditEvent::new(super::chain::AuditKind::Broker, "broker", "rows_dropped")
                    .detail(format!(
                        "{} audit rows were dropped while the audit log could not be sealed (more than {MAX_HELD} waited)",
                        self.dropped
                    )),
            ));
            self.dropped = 0;
        }
        jobs.extend(self.rows.drain(..).map(Job::Audit));
        jobs
    }
}

fn run<S: Seal>(
    mut conn: Connection,
    mut chain: Chain<S>,
    rx: mpsc::Receiver<Job>,
    first: Option<Job>,
) {
    let mut sync_full = true;
    let mut held = Held::default();
    let mut first = first;
    loop {
        let mut jobs = held.take();
        let next = match first.take() {
            Some(j) => Some(j),
            None if jobs.is_empty() => match rx.recv() {
                Ok(j) => Some(j),
                Err(_) => return,
            },
            // Rows are waiting for the seal: retry them now and then even if nothing new comes.
            None => match rx.recv_timeout(RETRY_SEAL) {
                Ok(j) => Some(j),
                Err(mpsc::RecvTimeoutError::Timeout) => None,
                Err(mpsc::RecvTimeoutError::Disconnected) => return,
            },
        };
        jobs.extend(next);
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
        let unsealed = commit_batch(&mut conn, &mut chain, jobs, &mut stop);
        if let Some(s) = stop {
            if !unsealed.is_empty() {
                tracing::error!(
                    "{} audit rows are lost: the audit log could not be sealed before the broker stopped",
                    unsealed.len()
                );
            }
            // Fold the WAL into the database so the next reader (verify-audit) reads one file.
            if let Err(e) = conn.pragma_update(None, "wal_checkpoint", "TRUNCATE") {
                tracing::warn!("WAL checkpoint at stop failed: {e}");
            }
            let _ = s.send(());
            return;
        }
        held.hold(unsealed);
    }
}

/// Writes one batch; returns after every completion was told the outcome. If the batch could
/// not be sealed, nothing of it is committed: transactional jobs are told so (their callers
/// refuse to go on), and the audit-only rows are returned to be held and retried.
fn commit_batch<S: Seal>(
    conn: &mut Connection,
    chain: &mut Chain<S>,
    jobs: Vec<Job>,
    stop: &mut Option<oneshot::Sender<()>>,
) -> Vec<AuditEvent> {
    let start = chain.mark();
    let mut completions: Vec<Completion> = Vec::new();
    let mut audit_only: Vec<AuditEvent> = Vec::new();
    let result = (|| -> Result<(), StoreError> {
        let commit_err = |e: rusqlite::Error| StoreError::Commit(e.to_string());
        let mut tx = conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(commit_err)?;
        let ts = now_ms();
        for job in jobs {
            match job {
                Job::Audit(ev) => {
                    let _ = chain.append(&tx, &ev, ts);
                    audit_only.push(ev);
                }
                Job::Stop(s) => *stop = Some(s),
                Job::Txn { work, .. } => {
                    let mark = chain.mark();
                    let sp = tx.savepoint().map_err(commit_err)?;
                    let mut audit = Vec::new();
                    let (ok, done) = work(&sp, &mut audit);
                    if ok {
                        for ev in &audit {
                            let _ = chain.append(&sp, ev, ts);
                        }
                        sp.commit().map_err(commit_err)?;
                    } else {
                        // Dropping the savepoint rolls it back; the chain forgets its rows too.
                        drop(sp);
                        chain.rollback_to(mark);
                    }
                    completions.push(done);
                }
            }
        }
        chain.seal(&tx)?;
        tx.set_drop_behavior(rusqlite::DropBehavior::Commit);
        tx.commit().map_err(commit_err)
    })();
    let mut unsealed = Vec::new();
    if let Err(e) = &result {
        chain.rollback_to(start);
        match e {
            StoreError::Seal(_) => {
                tracing::error!(
                    "{e}; {} audit rows are held until it can be, and ledger steps are refused",
                    audit_only.len()
                );
                unsealed = audit_only;
            }
            _ => tracing::error!("database commit failed: {e}"),
        }
    }
    for done in completions {
        done(match &result {
            Ok(()) => Ok(()),
            Err(StoreError::Seal(s)) => Err(StoreError::Seal(s.clone())),
            Err(e) => Err(StoreError::Commit(e.to_string())),
        });
    }
    unsealed
}

#[cfg(test)]
mod tests {
    use super::super::chain::{AuditKind, Sealer};
    use super::super::seal::{Mac, SealError};
    use super::super::verify::verify;
    use super::super::{instance_id, open_ro, open_rw};
    use super::*;
    use ipc_schema::secrets::{AuditHead, AuditRow};
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Arc;

    /// A seal that can be switched off, as a crashed secrets-helper is; counts its calls.
    struct Switch {
        key: Sealer,
        up: Arc<AtomicBool>,
        calls: Arc<AtomicUsize>,
    }

    impl Seal for Switch {
        fn macs(
            &self,
            instance: &str,
            rows: &[AuditRow],
            head: Option<&AuditHead>,
        ) -> Result<(Vec<Mac>, Option<Mac>), SealError> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            if !self.up.load(Ordering::SeqCst) {
                return Err(SealError("secrets-helper (test) is down".into()));
            }
            self.key.macs(instance, rows, head)
        }
    }

    fn row(i: u32) -> AuditEvent {
        AuditEvent::new(AuditKind::Read, "gateway", "done").detail(format!("row {i}"))
    }

    fn count(conn: &Connection) -> i64 {
        conn.query_row("SELECT count(*) FROM audit", [], |r| r.get(0))
            .unwrap()
    }

    #[tokio::test(flavor = "current_thread")]
    async fn without_a_seal_nothing_is_committed_and_held_rows_are_written_once_it_is_back() {
        // Not tempfile: bench/ compiles this module too, without that crate.
        let dir = std::env::temp_dir().join(format!("gh-writer-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let db = dir.join("db");
        let conn = open_rw(&db).unwrap();
        let up = Arc::new(AtomicBool::new(true));
        let calls = Arc::new(AtomicUsize::new(0));
        let seal = Switch {
            key: Sealer::new(b"k"),
            up: up.clone(),
            calls: calls.clone(),
        };
        let instance = instance_id(&conn).unwrap();
        let chain = Chain::load(&conn, seal, instance, false).unwrap();
        let h = StoreHandle::spawn(conn, chain);
        h.audit(row(1));
        h.flush().await.unwrap();
        let reader = open_ro(&db).unwrap();
        assert_eq!(
            count(&reader),
            1,
            "positive control: sealed rows are written"
        );

        up.store(false, Ordering::SeqCst);
        h.audit(row(2));
        h.audit(row(3));
        let refused = h
            .txn(|tx, audit| {
                tx.execute_batch("CREATE TABLE effect (x)")?;
                audit.push(row(4));
                Ok(())
            })
            .await;
        match refused {
            Err(StoreError::Seal(e)) => assert_eq!(e.0, "secrets-helper (test) is down"),
            other => panic!("a ledger step without a seal must be refused: {other:?}"),
        }
        assert_eq!(count(&reader), 1, "no row is committed without its MAC");
        let effect: i64 = reader
            .query_row(
                "SELECT count(*) FROM sqlite_master WHERE name = 'effect'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(
            effect, 0,
            "the refused transaction's own writes are rolled back"
        );

        // Held rows are retried on their own, and each retry asks the seal again.
        let before = calls.load(Ordering::SeqCst);
        std::thread::sleep(RETRY_SEAL * 3);
        assert!(calls.load(Ordering::SeqCst) > before);
        up.store(true, Ordering::SeqCst);
        h.flush().await.unwrap();
        assert_eq!(
            count(&reader),
            3,
            "rows 2 and 3 written once the seal is back"
        );
        let details: Vec<String> = reader
            .prepare("SELECT detail FROM audit ORDER BY seq")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(details, ["row 1", "row 2", "row 3"]);
        h.stop().await;
        let report = verify(&reader, Some(&Sealer::new(b"k")), None).unwrap();
        assert_eq!(report.line(), "3 entries, chain intact");
        drop(reader);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn held_rows_are_bounded_and_the_drop_is_recorded() {
        let mut held = Held::default();
        held.hold((0..MAX_HELD as u32 + 5).map(row).collect());
        assert_eq!(held.rows.len(), MAX_HELD);
        assert_eq!(held.dropped, 5);
        let jobs = held.take();
        let Job::Audit(first) = &jobs[0] else {
            panic!("the first job is the drop notice")
        };
        assert_eq!(first.outcome, "rows_dropped");
        assert!(
            first.detail.starts_with("5 audit rows were dropped"),
            "{}",
            first.detail
        );
        let Job::Audit(oldest_kept) = &jobs[1] else {
            panic!()
        };
        assert_eq!(oldest_kept.detail, "row 5");
    }
}
