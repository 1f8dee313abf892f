//! `bench audit`: the audit log's append throughput (one row per transaction with FULL and
//! NORMAL sync, and the broker's real group-committing writer), the latency of a durable ledger
//! transaction, `verify` over 1,000,000 rows, and what audit writing costs the broker's
//! pipelined Ping rate (the foundation benchmark) when another front makes it write rows.
//!
//! The store is the broker's own code (`broker/src/store`), compiled in here, not a copy. The
//! writer and the durable transaction are measured twice: with the audit key in memory
//! (`Sealer`, the floor) and with MACs from a real secrets-helper process, as the broker gets
//! them since the key moved there ([`helper_seal`]).

use crate::stats::{us, Samples};
use helper_seal::SecretsHelper;
use ipc_schema::codec::{read_frame, write_frame, MAX_FRAME};
use ipc_schema::fs::{CreateMode, FsPath};
use ipc_schema::secrets::{AuditHead, AuditRow};
use ipc_schema::tool::{ToolCall, WriteFile};
use ipc_schema::{Body, Envelope, Role};
use std::io::{BufReader, BufWriter, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use audit_store as store;
use store::chain::{AuditEvent, AuditKind, Sealer};
use store::seal::{Mac, Seal, SealError};
use store::{Chain, StoreHandle};

fn event(i: u64) -> AuditEvent {
    AuditEvent::new(AuditKind::ToolCall, "gateway", "allow")
        .session("3f2a9c0d5e7b41a8b6c2d9e0f1a2b3c4")
        .tool("read_file")
        .target(format!("/home/user/project/src/module_{}.rs", i % 97))
        .detail(format!(
            "tools.read_file default (policy revision 3); {{\"length\":0,\"offset\":0,\"path\":\"/home/user/project/src/module_{}.rs\"}}",
            i % 97
        ))
}

/// A new, empty database named `name` in `dir`, and its instance id.
fn fresh_db(dir: &Path, name: &str) -> (rusqlite::Connection, String) {
    let db = dir.join(name);
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", db.display()));
    }
    let conn = store::open_rw(&db).unwrap();
    let instance = store::instance_id(&conn).unwrap();
    (conn, instance)
}

/// A new database whose chain is sealed with a random key in memory.
fn fresh(dir: &Path, name: &str) -> (rusqlite::Connection, Chain) {
    let (conn, instance) = fresh_db(dir, name);
    let chain = Chain::load(
        &conn,
        Sealer::new(&rand::random::<[u8; 32]>()),
        instance,
        false,
    )
    .unwrap();
    (conn, chain)
}

/// What a seal was asked, and how long its answers took (on the writer thread).
#[derive(Default)]
struct SealStats {
    calls: AtomicU64,
    rows: AtomicU64,
    nanos: AtomicU64,
    each: std::sync::Mutex<Vec<Duration>>,
}

impl SealStats {
    fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }
    fn rows(&self) -> u64 {
        self.rows.load(Ordering::Relaxed)
    }
    fn time(&self) -> Duration {
        Duration::from_nanos(self.nanos.load(Ordering::Relaxed))
    }
    /// Each call's time.
    fn samples(&self) -> Samples {
        Samples::new(self.each.lock().unwrap().clone())
    }
}

/// A seal that times each answer. Both keys (memory and helper) go through it, so the dynamic
/// call and the clock cost both the same.
struct Timed {
    seal: Arc<dyn Seal>,
    stats: Arc<SealStats>,
}

impl Seal for Timed {
    fn macs(
        &self,
        instance: &str,
        rows: &[AuditRow],
        head: Option<&AuditHead>,
    ) -> Result<(Vec<Mac>, Option<Mac>), SealError> {
        let t = Instant::now();
        let out = self.seal.macs(instance, rows, head);
        let took = t.elapsed();
        self.stats.calls.fetch_add(1, Ordering::Relaxed);
        self.stats
            .rows
            .fetch_add(rows.len() as u64, Ordering::Relaxed);
        self.stats
            .nanos
            .fetch_add(took.as_nanos() as u64, Ordering::Relaxed);
        self.stats.each.lock().unwrap().push(took);
        out
    }
}

/// Where a measured chain gets its MACs.
#[derive(Clone)]
enum Key {
    /// A random key in this process (`Sealer`): the floor, what the broker did before.
    Memory,
    /// A secrets-helper process holding the key in the kernel keyring: what the broker does.
    Helper(Arc<SecretsHelper>),
}

/// A new database whose chain is sealed through `key`, timed.
fn fresh_timed(
    dir: &Path,
    name: &str,
    key: &Key,
) -> (rusqlite::Connection, Chain<Timed>, Arc<SealStats>) {
    let (conn, instance) = fresh_db(dir, name);
    let seal: Arc<dyn Seal> = match key {
        Key::Memory => Arc::new(Sealer::new(&rand::random::<[u8; 32]>())),
        Key::Helper(h) => {
            h.open_key(&instance).unwrap();
            h.clone()
        }
    };
    let stats = Arc::new(SealStats::default());
    let timed = Timed {
        seal,
        stats: stats.clone(),
    };
    let chain = Chain::load(&conn, timed, instance, false).unwrap();
    (conn, chain, stats)
}

/// The chain hash alone (SHA-256 over the previous hash and the row's canonical fields), in
/// microseconds per row: the writer's hashing share of a row's cost.
fn chain_hash_us(n: u64) -> f64 {
    let events: Vec<AuditEvent> = (0..n).map(event).collect();
    let ts_ms = store::now_ms();
    let mut head = store::chain::GENESIS;
    let t = Instant::now();
    for (i, ev) in events.iter().enumerate() {
        let f = store::chain::RowFields {
            seq: i as i64 + 1,
            ts_ms,
            kind: ev.kind.as_str(),
            session: ev.session.as_deref(),
            actor: &ev.actor,
            tool: ev.tool.as_deref(),
            target: ev.target.as_deref(),
            outcome: &ev.outcome,
            detail: &ev.detail,
            degraded: false,
            mode: Some("ask"),
            tier: None,
        };
        head = store::chain::row_hash(&head, &f);
    }
    std::hint::black_box(head);
    us(t.elapsed()) / n as f64
}

/// The postcard work of one AuditMac exchange of `rows` rows, both ways (the writer encodes the
/// request and decodes the reply, the helper the reverse), in microseconds per row.
fn audit_mac_codec_us(rows: usize) -> f64 {
    use ipc_schema::codec::{decode_payload, encode_exact, HEADER_LEN};
    use ipc_schema::secrets::{AuditInstance, SecretsReply, SecretsRequest};
    let req = Envelope::new(
        7,
        Body::Secrets(SecretsRequest::AuditMac {
            instance: AuditInstance::parse("0123456789abcdef0123456789abcdef").unwrap(),
            rows: (0..rows as i64)
                .map(|seq| AuditRow {
                    seq: 1_000_000 + seq,
                    hash: rand::random(),
                })
                .collect(),
            head: Some(AuditHead {
                count: 1_000_000 + rows as i64,
                head: rand::random(),
            }),
        }),
    );
    let reply = Envelope::new(
        7,
        Body::SecretsReply(SecretsReply::AuditMacs {
            rows: (0..rows).map(|_| rand::random()).collect(),
            head: Some(rand::random()),
        }),
    );
    let times = 20;
    let t = Instant::now();
    for _ in 0..times {
        for env in [&req, &reply] {
            let frame = encode_exact(std::hint::black_box(env)).unwrap();
            std::hint::black_box(decode_payload(&frame[HEADER_LEN..]).unwrap());
        }
    }
    us(t.elapsed()) / (times * rows) as f64
}

/// One row per transaction, each with its seal, at `sync`.
fn per_row(dir: &Path, sync: &str, n: u64) -> f64 {
    let (mut conn, mut chain) = fresh(dir, &format!("per-row-{sync}.db"));
    conn.pragma_update(None, "synchronous", sync).unwrap();
    let t = Instant::now();
    for i in 0..n {
        let tx = conn.transaction().unwrap();
        chain.append(&tx, &event(i), store::now_ms()).unwrap();
        chain.seal(&tx).unwrap();
        tx.commit().unwrap();
    }
    n as f64 / t.elapsed().as_secs_f64()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// One run of the broker's writer: its rate, and what its seal was asked.
struct GroupCommit {
    rows: u64,
    took: Duration,
    seal_calls: u64,
    sealed_rows: u64,
    seal_time: Duration,
}

impl GroupCommit {
    fn rate(&self) -> f64 {
        self.rows as f64 / self.took.as_secs_f64()
    }
    /// Wall time per row, from the first row queued to the flush.
    fn us_per_row(&self) -> f64 {
        us(self.took) / self.rows as f64
    }
    /// Time the writer thread waited on its seal, per row.
    fn seal_us_per_row(&self) -> f64 {
        us(self.seal_time) / self.sealed_rows.max(1) as f64
    }
    fn rows_per_call(&self) -> f64 {
        self.sealed_rows as f64 / self.seal_calls.max(1) as f64
    }
    fn us_per_call(&self) -> f64 {
        us(self.seal_time) / self.seal_calls.max(1) as f64
    }
}

/// The broker's writer: `n` audit-only rows queued as fast as they come, then a flush.
fn batched(dir: &Path, name: &str, n: u64, key: &Key) -> GroupCommit {
    let (conn, chain, stats) = fresh_timed(dir, name, key);
    let h = StoreHandle::spawn(conn, chain);
    let t = Instant::now();
    for i in 0..n {
        h.audit(event(i));
    }
    let took = runtime().block_on(async {
        h.flush().await.unwrap();
        let took = t.elapsed();
        h.stop().await;
        took
    });
    GroupCommit {
        rows: n,
        took,
        seal_calls: stats.calls(),
        sealed_rows: stats.rows(),
        seal_time: stats.time(),
    }
}

/// `rounds` writer runs with each key, alternating (the machine's load drifts; alternating
/// spreads the drift over both), each kind's runs sorted by rate.
fn batched_rounds(
    dir: &Path,
    n: u64,
    rounds: usize,
    helper: &Arc<SecretsHelper>,
) -> (Vec<GroupCommit>, Vec<GroupCommit>) {
    let (mut memory, mut via_helper) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        memory.push(batched(dir, "batched.db", n, &Key::Memory));
        via_helper.push(batched(
            dir,
            "batched-helper.db",
            n,
            &Key::Helper(helper.clone()),
        ));
    }
    let _ = std::fs::remove_file(dir.join("batched.db"));
    let _ = std::fs::remove_file(dir.join("batched-helper.db"));
    memory.sort_by(|a, b| a.rate().total_cmp(&b.rate()));
    via_helper.sort_by(|a, b| a.rate().total_cmp(&b.rate()));
    (memory, via_helper)
}

/// Sequential durable transactions (a ledger transition and its audit row, FULL sync), `n`
/// with each key, alternating one by one between the two logs so that both meet the same disk
/// (an fsync's time depends on what else the machine has queued for it); also the time of each
/// seal call (one per transaction: one row and the head).
fn durable_latency(dir: &Path, n: usize, helper: &Arc<SecretsHelper>) -> [(Samples, Samples); 2] {
    let keys = [Key::Memory, Key::Helper(helper.clone())];
    let stores = keys.map(|key| {
        let name = match key {
            Key::Memory => "durable.db",
            Key::Helper(_) => "durable-helper.db",
        };
        let (conn, chain, stats) = fresh_timed(dir, name, &key);
        conn.execute_batch("CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, state TEXT)")
            .unwrap();
        (StoreHandle::spawn(conn, chain), stats)
    });
    runtime().block_on(async {
        let mut took = [Vec::with_capacity(n), Vec::with_capacity(n)];
        for i in 0..n {
            // Each goes first every other time: the first fsync after a pause may pay for
            // what the rest of the machine queued meanwhile.
            for which in if i % 2 == 0 { [0, 1] } else { [1, 0] } {
                let h = &stores[which].0;
                let t = Instant::now();
                h.txn(move |tx, audit| {
                    tx.execute("INSERT INTO t (state) VALUES ('executing')", [])?;
                    audit.push(event(i as u64));
                    Ok(())
                })
                .await
                .unwrap();
                took[which].push(t.elapsed());
            }
        }
        for (h, _) in &stores {
            h.stop().await;
        }
        let [mem, hlp] = took;
        [
            (Samples::new(mem), stores[0].1.samples()),
            (Samples::new(hlp), stores[1].1.samples()),
        ]
    })
}

fn verify_million(dir: &Path) -> (u64, Duration, Duration) {
    let n = 1_000_000;
    let (conn, chain) = fresh(dir, "million.db");
    let key: [u8; 32] = rand::random();
    let chain = Chain {
        sealer: Sealer::new(&key),
        ..chain
    };
    let h = StoreHandle::spawn(conn, chain);
    for i in 0..n {
        h.audit(event(i));
    }
    runtime().block_on(async { h.stop().await });
    let conn = store::open_ro(&dir.join("million.db")).unwrap();
    let cpu0 = cpu_time();
    let t = Instant::now();
    let report = store::verify::verify(&conn, Some(&Sealer::new(&key)), None).unwrap();
    let took = t.elapsed();
    let cpu = cpu_time() - cpu0;
    assert!(report.intact(), "{}", report.line());
    (report.entries, took, cpu)
}

/// CPU time (user + system) of this process so far, all threads.
fn cpu_time() -> Duration {
    let r = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_SELF).unwrap();
    let tv =
        |t: nix::sys::time::TimeVal| Duration::new(t.tv_sec() as u64, t.tv_usec() as u32 * 1000);
    tv(r.user_time()) + tv(r.system_time())
}

const WINDOW: usize = 64;

/// Pipelined round trips on `sock` for `dur`: returns replies per second.
fn pipelined_for(
    sock: &Path,
    dur: Duration,
    make: impl Fn(u64) -> Body + Send + 'static,
    stop: Arc<AtomicBool>,
) -> f64 {
    let s = UnixStream::connect(sock).unwrap();
    let mut r = BufReader::new(s.try_clone().unwrap());
    let (tx, rx) = std::sync::mpsc::sync_channel::<()>(WINDOW);
    let done = stop.clone();
    let writer = std::thread::spawn(move || {
        let mut w = BufWriter::new(s);
        let mut i = 0u64;
        while !done.load(Ordering::Relaxed) {
            if i as usize >= WINDOW && rx.try_recv().is_err() {
                w.flush().unwrap();
                if rx.recv_timeout(Duration::from_millis(200)).is_err() {
                    continue;
                }
            }
            write_frame(&mut w, &Envelope::new(i, make(i))).unwrap();
            i += 1;
        }
        let _ = w.flush();
        i
    });
    let t = Instant::now();
    let mut got = 0u64;
    r.get_ref()
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    while t.elapsed() < dur {
        // The side load stops sending before its reader's time is up: a timeout ends it.
        match read_frame(&mut r, MAX_FRAME) {
            Ok(Some(_)) => {}
            _ => break,
        }
        got += 1;
        let _ = tx.try_send(());
    }
    let rate = got as f64 / t.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    let _ = writer.join();
    // Read what is still in flight before closing: closing with unread replies resets the
    // connection, and the broker treats a reset read as a bad frame and kills the peer.
    r.get_ref()
        .set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    while let Ok(Some(_)) = read_frame(&mut r, MAX_FRAME) {}
    rate
}

/// Sends `rate` requests a second on `sock` (replies drained by another thread) until `stop`.
fn paced(
    sock: &Path,
    rate: u32,
    make: fn(u64) -> Body,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<(u64, u64)> {
    let s = UnixStream::connect(sock).unwrap();
    let r = s.try_clone().unwrap();
    r.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let stop2 = stop.clone();
    let reader = std::thread::spawn(move || {
        let mut r = BufReader::new(r);
        let mut got = 0u64;
        loop {
            match read_frame(&mut r, MAX_FRAME) {
                Ok(Some(_)) => got += 1,
                _ if stop2.load(Ordering::Relaxed) => return got,
                _ => {}
            }
        }
    });
    std::thread::spawn(move || {
        let mut w = BufWriter::new(s);
        let period = Duration::from_secs(1) / rate;
        let start = Instant::now();
        let mut i = 0u64;
        while !stop.load(Ordering::Relaxed) {
            write_frame(&mut w, &Envelope::new(i, make(i))).unwrap();
            w.flush().unwrap();
            i += 1;
            let next = start + period * i as u32;
            if let Some(d) = next.checked_duration_since(Instant::now()) {
                std::thread::sleep(d);
            }
        }
        (i, reader.join().unwrap())
    })
}

/// The foundation's pipelined Ping rate (ui -> broker -> fs-helper), alone and while a gateway
/// makes tool calls at a steady rate, each refused by policy and written to the audit log (an
/// invalid policy: nothing else happens for them).
fn ping_impact(bin_dir: &Path, audited_per_sec: u32) -> (f64, f64, f64, u64) {
    let dir = crate::ipc::tempdir().join("audit-ping");
    std::fs::create_dir_all(dir.join("config")).unwrap();
    std::fs::write(
        dir.join("config/policy.toml"),
        "[tools]\nread_file = \"sometimes\"\n",
    )
    .unwrap();
    let mut broker = crate::ipc::start_broker(bin_dir, &dir);
    let ui = dir.join("run/ui.sock");
    let gw = dir.join("run/gateway.sock");
    let dur = Duration::from_secs(3);
    let ping = |_| Body::Ping {
        target: Some(Role::Fs),
    };
    let alone = pipelined_for(&ui, dur, ping, Arc::new(AtomicBool::new(false)));
    let beside = |make: fn(u64) -> Body| {
        let stop = Arc::new(AtomicBool::new(false));
        let side = paced(&gw, audited_per_sec, make, stop.clone());
        std::thread::sleep(Duration::from_millis(300));
        let rate = pipelined_for(&ui, dur, ping, Arc::new(AtomicBool::new(false)));
        stop.store(true, Ordering::Relaxed);
        let (_sent, answered) = side.join().unwrap();
        (rate, answered)
    };
    // Control: the same paced load, of messages that write no audit row.
    let (with_pings, _) = beside(|_| Body::Ping { target: None });
    let (with_audit, answered) = beside(|i| {
        Body::ToolCall(ToolCall::WriteFile(WriteFile {
            path: FsPath::Absolute(format!("/tmp/x{}", i % 1000).into_bytes()),
            content: vec![],
            create: CreateMode::Either,
            create_parents: false,
        }))
    });
    crate::ipc::stop(&mut broker);
    forget_broker_key(&dir);
    let _ = std::fs::remove_dir_all(&dir);
    (alone, with_pings, with_audit, answered)
}

/// The scratch broker's secrets-helper made an audit key for its log (`DIR/data/gatehouse.db`):
/// remove it from the keyring, which keeps keys after the processes are gone.
fn forget_broker_key(dir: &Path) {
    let instance = store::open_ro(&dir.join("data/gatehouse.db"))
        .and_then(|conn| store::read_instance_id(&conn));
    match instance {
        Ok(Some(instance)) => {
            if let Err(e) = helper_seal::forget_key(&instance) {
                eprintln!("bench audit: the scratch broker's audit key: {e}");
            }
        }
        Ok(None) => {}
        Err(e) => eprintln!("bench audit: the scratch broker's log: {e}"),
    }
}

/// Runs of the group-committing writer with each key.
const ROUNDS: usize = 3;

/// The helper's lockdown as it reported it in its hello (what the broker checks).
fn describe_lockdown(l: &ipc_schema::status::LockdownReport) -> String {
    format!(
        "the helper locked down as in the broker: seccomp allowlist {} ({} syscalls), Landlock {:?}, no_new_privs {}{}",
        if l.seccomp_filter { "on" } else { "OFF" },
        l.seccomp_allowed_syscalls,
        l.landlock,
        l.no_new_privs,
        if l.degraded.is_empty() {
            String::new()
        } else {
            format!(", DEGRADED: {}", l.degraded.join("; "))
        }
    )
}

pub fn run(args: &[String]) {
    let dir = crate::ipc::tempdir().join("audit");
    std::fs::create_dir_all(&dir).unwrap();
    if args.iter().any(|a| a == "--verify-only") {
        let (entries, took, cpu) = verify_million(&dir);
        let _ = std::fs::remove_dir_all(&dir);
        println!(
            "  verify {entries} rows {:.3} s ({:.3} s of CPU)",
            took.as_secs_f64(),
            cpu.as_secs_f64()
        );
        return;
    }
    let bins = crate::ipc::bin_dir(args);
    let helper = Arc::new(SecretsHelper::start(&bins).unwrap_or_else(|e| panic!("{e}")));
    let lockdown = describe_lockdown(&helper.lockdown);
    let full = per_row(&dir, "FULL", 1_000);
    let normal = per_row(&dir, "NORMAL", 20_000);
    let (memory, via_helper) = batched_rounds(&dir, 200_000, ROUNDS, &helper);
    let [(durable, one_hmac), (durable_helper, one_mac)] = durable_latency(&dir, 300, &helper);
    drop(helper);
    let sha = chain_hash_us(50_000);
    let (entries, verify_took, verify_cpu) = verify_million(&dir);
    let _ = std::fs::remove_dir_all(&dir);
    let (keys_removed, key_errors) = helper_seal::forget_keys();

    let (mem, hlp) = (&memory[ROUNDS / 2], &via_helper[ROUNDS / 2]);
    let range = |v: &[GroupCommit]| format!("{:.0}-{:.0}", v[0].rate(), v[ROUNDS - 1].rate());
    println!("audit: append throughput (rows/s), WAL, SHA-256 chain + HMAC per row + sealed head per commit");
    println!("  one row per transaction, synchronous=FULL     {full:10.0} rows/s");
    println!("  one row per transaction, synchronous=NORMAL   {normal:10.0} rows/s");
    println!("  broker writer, group commit (audit-only rows), median of {ROUNDS} runs of each, alternating:");
    println!(
        "    audit key in memory (floor)                 {:10.0} rows/s   ({:.0}x FULL per-row; runs {})",
        mem.rate(),
        mem.rate() / full,
        range(&memory)
    );
    println!(
        "    MACs from a secrets-helper process          {:10.0} rows/s   ({:.2}x the floor; runs {})",
        hlp.rate(),
        hlp.rate() / mem.rate(),
        range(&via_helper)
    );
    println!("      ({lockdown})");
    for (name, g) in [("key in memory", mem), ("secrets-helper", hlp)] {
        println!(
            "  per row, {name:<15} {:5.2} us = seal {:4.2} + SHA-256 chain {sha:4.2} + SQLite, queue {:4.2}   ({:.0} rows per seal call, {:.0} us per call)",
            g.us_per_row(),
            g.seal_us_per_row(),
            g.us_per_row() - g.seal_us_per_row() - sha,
            g.rows_per_call(),
            g.us_per_call()
        );
    }
    let codec = audit_mac_codec_us(hlp.rows_per_call().round() as usize);
    println!(
        "  the hand-off costs {:+.2} us per row of wall time, {:+.2} us of the writer's time (the AuditMac round trip less the in-process HMAC)",
        hlp.us_per_row() - mem.us_per_row(),
        hlp.seal_us_per_row() - mem.seal_us_per_row()
    );
    println!(
        "  the round trip per row: HMAC {:.2} (in the helper) + postcard both ways {codec:.2} + socket copies, zeroing, wake-ups {:.2} us",
        mem.seal_us_per_row(),
        hlp.seal_us_per_row() - mem.seal_us_per_row() - codec
    );
    println!(
        "  durable ledger transaction + its row (FULL)   p50 {:7.1} us  p99 {:7.1} us   key in memory (alternating with the next)",
        us(durable.p50()),
        us(durable.p99())
    );
    println!(
        "  the same through the secrets-helper           p50 {:7.1} us  p99 {:7.1} us",
        us(durable_helper.p50()),
        us(durable_helper.p99()),
    );
    println!(
        "  its seal (one row + head): AuditMac round trip p50 {:.1} us p99 {:.1} us; in-process HMAC p50 {:.1} us",
        us(one_mac.p50()),
        us(one_mac.p99()),
        us(one_hmac.p50())
    );
    println!(
        "  verify {entries} rows                       {:7.3} s   (target < 1.5 s; {:.3} s of CPU on {} threads)",
        verify_took.as_secs_f64(),
        verify_cpu.as_secs_f64(),
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
    );
    println!("  audit keys this bench made and removed from the kernel keyring: {keys_removed}");
    for e in &key_errors {
        println!("  NOT REMOVED: {e}");
    }
    let per_sec = 2_000;
    let (alone, with_pings, with_audit, answered) = ping_impact(&bins, per_sec);
    println!("audit: the foundation's pipelined Ping rate (ui -> broker -> fs-helper, {WINDOW} in flight)");
    println!("  alone                                                         {alone:9.0} rt/s");
    println!("  beside a gateway sending {per_sec} unaudited pings/s (control)     {with_pings:9.0} rt/s");
    println!("  beside a gateway making {per_sec} audited tool calls/s ({answered} answered) {with_audit:9.0} rt/s");
    println!(
        "  audited calls cost the Ping rate {:.1}% against the control (target <= 20%); {:.1}% against alone",
        (1.0 - with_audit / with_pings) * 100.0,
        (1.0 - with_audit / alone) * 100.0
    );
}

/// The writer's seal through a real secrets-helper process, started as the broker starts it:
/// the release binary, one socket pair at fd 3, an empty environment, stdin and stdout on
/// /dev/null, `--store keyutils --namespace <a bench-only name>`, its hello read before anything
/// else. It is asked as broker/src/head_key.rs asks (`SecretsRequest::AuditKey`, then one
/// `SecretsRequest::AuditMac` per batch of at most 8192 rows, the head with the last, built and
/// read by the same `audit_store::seal::{mac_request, mac_reply}`), and its
/// frames are handled as the broker handles frames on a channel that carries secrets: encoded
/// in one allocation, written unbuffered and zeroed, replies read into a buffer that is zeroed.
///
/// What the broker has and this has not: the hop from the writer thread to the event loop
/// (`HelperSeal` -> `bridge` -> `HelperSlot::call`) and back, two thread wake-ups per batch.
pub mod helper_seal {
    use audit_store::seal::{Mac, Seal, SealError};
    use ipc_schema::codec::{self, HEADER_LEN, MAX_FRAME};
    use ipc_schema::secrets::{AuditHead, AuditInstance, AuditRow, SecretsReply, SecretsRequest};
    use ipc_schema::status::LockdownReport;
    use ipc_schema::{Body, Envelope, Role};
    use std::ffi::OsString;
    use std::io::{Read, Write};
    use std::os::unix::net::UnixStream;
    use std::path::Path;
    use std::process::Child;
    use std::sync::{Mutex, Once};
    use std::time::Duration;
    use zeroize::{Zeroize, Zeroizing};

    /// Audit keys this bench made in the kernel keyring (instance ids), for [`forget_keys`].
    static MADE: Mutex<Vec<String>> = Mutex::new(Vec::new());

    pub struct SecretsHelper {
        chan: Mutex<Channel>,
        child: Mutex<Child>,
        pub lockdown: LockdownReport,
    }

    struct Channel {
        sock: UnixStream,
        next_id: u64,
    }

    impl Channel {
        fn send(&mut self, body: Body) -> Result<u64, String> {
            let id = self.next_id;
            self.next_id += 1;
            let mut frame =
                codec::encode_exact(&Envelope::new(id, body)).map_err(|e| e.to_string())?;
            let sent = self.sock.write_all(&frame);
            frame.zeroize();
            sent.map_err(|e| format!("writing to the secrets-helper: {e}"))?;
            Ok(id)
        }

        fn recv(&mut self) -> Result<Envelope, String> {
            let closed = |e: std::io::Error| {
                format!("the secrets-helper closed its channel ({e}); its reason is on stderr")
            };
            let mut header = [0u8; HEADER_LEN];
            self.sock.read_exact(&mut header).map_err(closed)?;
            let len = codec::parse_header(header, MAX_FRAME).map_err(|e| e.to_string())?;
            let mut payload = Zeroizing::new(vec![0u8; len]);
            self.sock.read_exact(&mut payload).map_err(closed)?;
            codec::decode_payload(&payload).map_err(|e| e.to_string())
        }

        fn request(&mut self, req: SecretsRequest) -> Result<SecretsReply, String> {
            let id = self.send(Body::Secrets(req))?;
            match self.recv()? {
                Envelope {
                    id: got,
                    body: Body::SecretsReply(r),
                    ..
                } if got == id => Ok(r),
                other => Err(format!(
                    "the secrets-helper answered request {id} with {:?} (id {})",
                    other.body.kind(),
                    other.id
                )),
            }
        }
    }

    impl SecretsHelper {
        /// Starts `bin_dir/secrets-helper` on the kernel keyutils store and waits for its hello.
        pub fn start(bin_dir: &Path) -> Result<SecretsHelper, String> {
            install_panic_cleanup();
            let program = bin_dir.join(Role::Secrets.name());
            if !program.exists() {
                return Err(format!(
                    "{} missing: cargo build --release --workspace",
                    program.display()
                ));
            }
            let args: Vec<OsString> = vec![
                "--store".into(),
                "keyutils".into(),
                "--namespace".into(),
                format!("gatehouse-bench-{}", std::process::id()).into(),
                "--channel".into(),
                "broker".into(),
            ];
            let (ours, theirs) = UnixStream::pair().map_err(|e| format!("socketpair: {e}"))?;
            let spawned = sandbox::process::spawn_helper(&program, &args, theirs.into(), &[])
                .map_err(|e| format!("cannot start {}: {e}", program.display()))?;
            ours.set_read_timeout(Some(Duration::from_secs(30)))
                .map_err(|e| e.to_string())?;
            let mut chan = Channel {
                sock: ours,
                next_id: 1,
            };
            let child = Mutex::new(spawned.child);
            let lockdown = match chan.recv() {
                Ok(Envelope {
                    body: Body::Hello(hello),
                    ..
                }) if hello.role == Role::Secrets => hello.lockdown,
                other => {
                    let mut c = child.into_inner().unwrap();
                    let _ = c.kill();
                    let _ = c.wait();
                    return Err(format!("the secrets-helper did not say hello: {other:?}"));
                }
            };
            Ok(SecretsHelper {
                chan: Mutex::new(chan),
                child,
                lockdown,
            })
        }

        /// Creates the key of the new log `instance` in the keyring (the broker's first start
        /// of a log: `may_create`), remembering it for [`forget_keys`] first.
        pub fn open_key(&self, instance: &str) -> Result<(), String> {
            let inst = AuditInstance::parse(instance).map_err(|e| e.0)?;
            MADE.lock().unwrap().push(instance.to_string());
            match self.request(SecretsRequest::AuditKey {
                instance: inst,
                may_create: true,
            })? {
                SecretsReply::AuditKey { created: true } => Ok(()),
                other => Err(format!(
                    "the secrets-helper did not create the key of a new log: {other:?}"
                )),
            }
        }

        fn request(&self, req: SecretsRequest) -> Result<SecretsReply, String> {
            self.chan
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .request(req)
        }
    }

    impl Seal for SecretsHelper {
        fn macs(
            &self,
            instance: &str,
            rows: &[AuditRow],
            head: Option<&AuditHead>,
        ) -> Result<(Vec<Mac>, Option<Mac>), SealError> {
            let req = audit_store::seal::mac_request(instance, rows, head)?;
            audit_store::seal::mac_reply(self.request(req).map_err(SealError)?)
        }
    }

    impl Drop for SecretsHelper {
        fn drop(&mut self) {
            let child = self.child.get_mut().unwrap_or_else(|e| e.into_inner());
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Invalidates the key `gatehouse:audit-key-INSTANCE` in the user keyring (which also unlinks
    /// it from the persistent keyring), every copy of it. Returns how many there were.
    pub fn forget_key(instance: &str) -> Result<usize, String> {
        use linux_keyutils::{KeyError, KeyRing, KeyRingIdentifier};
        let user = KeyRing::from_special_id(KeyRingIdentifier::User, false)
            .map_err(|e| format!("the user keyring: {e:?}"))?;
        let name = format!("gatehouse:audit-key-{instance}");
        let mut removed = 0;
        loop {
            match user.search(&name) {
                Ok(key) => {
                    key.invalidate()
                        .map_err(|e| format!("invalidating {name}: {e:?}"))?;
                    removed += 1;
                    if removed > 8 {
                        return Err(format!(
                            "{name} is still found after {removed} invalidations"
                        ));
                    }
                }
                Err(KeyError::KeyDoesNotExist | KeyError::KeyExpired | KeyError::KeyRevoked) => {
                    return Ok(removed)
                }
                Err(e) => return Err(format!("searching for {name}: {e:?}")),
            }
        }
    }

    /// Removes every audit key this bench made. Returns how many were removed, and what failed.
    pub fn forget_keys() -> (usize, Vec<String>) {
        let made = std::mem::take(&mut *MADE.lock().unwrap_or_else(|e| e.into_inner()));
        let mut removed = 0;
        let mut failed = Vec::new();
        for instance in made {
            match forget_key(&instance) {
                Ok(n) => removed += n,
                Err(e) => failed.push(e),
            }
        }
        (removed, failed)
    }

    /// Release builds abort on panic (no destructor runs), so a bench that panics after making
    /// keys removes them from the panic hook.
    fn install_panic_cleanup() {
        static ONCE: Once = Once::new();
        ONCE.call_once(|| {
            let previous = std::panic::take_hook();
            std::panic::set_hook(Box::new(move |info| {
                previous(info);
                let (removed, failed) = forget_keys();
                eprintln!(
                    "bench audit: removed {removed} audit keys from the keyring before aborting"
                );
                for e in failed {
                    eprintln!("bench audit: {e}");
                }
            }));
        });
    }
}
