//! `bench audit`: the audit log's append throughput (one row per transaction with FULL and
//! NORMAL sync, and the broker's real group-committing writer), the latency of a durable ledger
//! transaction, `verify` over 1,000,000 rows, and what audit writing costs the broker's
//! pipelined Ping rate (the foundation benchmark) when another front makes it write rows.
//!
//! The store is the broker's own code (`broker/src/store`), compiled in here, not a copy.

use crate::stats::{us, Samples};
use ipc_schema::codec::{read_frame, write_frame, MAX_FRAME};
use ipc_schema::fs::{CreateMode, FsPath};
use ipc_schema::tool::{ToolCall, WriteFile};
use ipc_schema::{Body, Envelope, Role};
use std::io::{BufReader, BufWriter, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[allow(dead_code)]
#[path = "../../broker/src/store/mod.rs"]
mod store;

use store::chain::{AuditEvent, AuditKind, Sealer};
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

fn fresh(dir: &Path, name: &str) -> (rusqlite::Connection, Chain) {
    let db = dir.join(name);
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", db.display()));
    }
    let conn = store::open_rw(&db).unwrap();
    let instance = store::instance_id(&conn).unwrap();
    let chain = Chain::load(
        &conn,
        Sealer::new(&rand::random::<[u8; 32]>()),
        instance,
        false,
    )
    .unwrap();
    (conn, chain)
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

/// The broker's writer: `n` audit-only rows queued as fast as they come, then a flush.
fn batched(dir: &Path, name: &str, n: u64) -> f64 {
    let (conn, chain) = fresh(dir, name);
    let h = StoreHandle::spawn(conn, chain);
    let t = Instant::now();
    for i in 0..n {
        h.audit(event(i));
    }
    runtime().block_on(async {
        h.flush().await.unwrap();
        let rate = n as f64 / t.elapsed().as_secs_f64();
        h.stop().await;
        rate
    })
}

/// Sequential durable transactions (a ledger transition and its audit row, FULL sync).
fn durable_latency(dir: &Path, n: usize) -> Samples {
    let (conn, chain) = fresh(dir, "durable.db");
    conn.execute_batch("CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, state TEXT)")
        .unwrap();
    let h = StoreHandle::spawn(conn, chain);
    runtime().block_on(async {
        let mut v = Vec::with_capacity(n);
        for i in 0..n {
            let t = Instant::now();
            h.txn(move |tx, audit| {
                tx.execute("INSERT INTO t (state) VALUES ('executing')", [])?;
                audit.push(event(i as u64));
                Ok(())
            })
            .await
            .unwrap();
            v.push(t.elapsed());
        }
        h.stop().await;
        Samples::new(v)
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
    let _ = std::fs::remove_dir_all(&dir);
    (alone, with_pings, with_audit, answered)
}

fn bin_dir(args: &[String]) -> PathBuf {
    if let Some(i) = args.iter().position(|a| a == "--bin-dir") {
        return PathBuf::from(&args[i + 1]);
    }
    std::env::current_exe()
        .unwrap()
        .parent()
        .unwrap()
        .to_path_buf()
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
    let full = per_row(&dir, "FULL", 1_000);
    let normal = per_row(&dir, "NORMAL", 20_000);
    let batch = batched(&dir, "batched.db", 200_000);
    let durable = durable_latency(&dir, 300);
    let (entries, verify_took, verify_cpu) = verify_million(&dir);
    let _ = std::fs::remove_dir_all(&dir);
    println!("audit: append throughput (rows/s), WAL, SHA-256 chain + HMAC per row + sealed head per commit");
    println!("  one row per transaction, synchronous=FULL     {full:10.0} rows/s");
    println!("  one row per transaction, synchronous=NORMAL   {normal:10.0} rows/s");
    println!("  broker writer, group commit (audit-only rows) {batch:10.0} rows/s   ({:.0}x FULL per-row)", batch / full);
    println!(
        "  durable ledger transaction + its row (FULL)   p50 {:7.1} us  p99 {:7.1} us",
        us(durable.p50()),
        us(durable.p99())
    );
    println!(
        "  verify {entries} rows                       {:7.3} s   (target < 1.5 s; {:.3} s of CPU on {} threads)",
        verify_took.as_secs_f64(),
        verify_cpu.as_secs_f64(),
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
    );
    let per_sec = 2_000;
    let (alone, with_pings, with_audit, answered) = ping_impact(&bin_dir(args), per_sec);
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
