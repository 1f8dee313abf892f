//! The export loop against a real database written by audit-store's chain (a key in memory),
//! with a sink that fails on purpose: every row arrives once, in order, and the records alone
//! re-verify.

use audit_export::cursor::CursorFile;
use audit_export::otlp::SendError;
use audit_export::readback;
use audit_export::run::{run, Options, Sink};
use audit_export::source::Source;
use audit_export::ExportRecord;
use audit_store::chain::{AuditEvent, AuditKind, Sealer};
use audit_store::Chain;
use std::time::Duration;

fn write_rows(db: &std::path::Path, n: usize) {
    let conn = audit_store::open_rw(db).unwrap();
    let instance = audit_store::instance_id(&conn).unwrap();
    let mut chain = Chain::load(&conn, Sealer::new(b"test key"), instance, false).unwrap();
    for i in 0..n {
        let tx = conn.unchecked_transaction().unwrap();
        let ev = AuditEvent::new(AuditKind::ToolCall, "gateway", "allow")
            .session("s1")
            .tool("read_file")
            .target(format!("/p/{i}"))
            .detail("line one\nline two");
        chain.append(&tx, &ev, 1000 + i as i64).unwrap();
        chain.seal(&tx).unwrap();
        tx.commit().unwrap();
    }
}

/// Fails the first `fail` deliveries (as a collector that is down), then keeps everything.
struct Flaky {
    fail: usize,
    tries: usize,
    got: Vec<ExportRecord>,
}

impl Sink for Flaky {
    fn name(&self) -> String {
        "test flaky".into()
    }
    fn deliver(&mut self, _: &str, records: &[ExportRecord]) -> Result<(), SendError> {
        self.tries += 1;
        if self.fail > 0 {
            self.fail -= 1;
            return Err(SendError::Retry("down".into()));
        }
        self.got.extend_from_slice(records);
        Ok(())
    }
}

fn options(cursor: Option<CursorFile>, attempts: u32) -> Options {
    Options {
        start_after: None,
        follow: false,
        anchor_every: 4,
        anchor_interval: Duration::from_secs(3600),
        batch: 3,
        poll: Duration::from_millis(10),
        cursor,
        attempts,
    }
}

fn seqs(recs: &[ExportRecord]) -> Vec<i64> {
    recs.iter()
        .filter_map(|r| match r {
            ExportRecord::Row(r) => Some(r.seq),
            _ => None,
        })
        .collect()
}

fn lines(recs: &[ExportRecord]) -> String {
    recs.iter().map(ExportRecord::json_line).collect()
}

#[test]
fn a_sink_that_was_down_gets_every_row_once_from_the_cursor_and_the_chain_verifies() {
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("gatehouse.db");
    write_rows(&db, 7);
    let cursor = || {
        Some(CursorFile {
            path: d.path().join("c.cursor"),
        })
    };
    let mut src = Source::open(&db).unwrap();

    // Down for longer than a run without --follow tries: it gives up, nothing is lost.
    let mut sink = Flaky {
        fail: 2,
        tries: 0,
        got: vec![],
    };
    let e = run(&mut src, &mut sink, &options(cursor(), 2), &mut |_| {}).unwrap_err();
    assert!(
        e.to_string()
            .contains("gave up after 2 tries with entries up to 0 exported"),
        "{e}"
    );
    assert!(sink.got.is_empty());

    // Back up after one more failure: retried from the cursor (still 0), everything in order.
    sink.fail = 1;
    let mut notes = vec![];
    let s = run(&mut src, &mut sink, &options(cursor(), 5), &mut |m| {
        notes.push(m.to_string())
    })
    .unwrap();
    assert_eq!((s.rows, s.last), (7, 7));
    assert_eq!(seqs(&sink.got), (1..=7).collect::<Vec<_>>());
    assert!(
        notes.iter().any(|n| n.contains("retrying from entry 1")),
        "{notes:?}"
    );
    // Batches of 3 reach the head at 7; anchors go only with the row that is the head.
    assert!(matches!(sink.got.last(), Some(ExportRecord::Anchor(a)) if a.count == 7));
    let r = readback::check(lines(&sink.got).as_bytes()).unwrap();
    assert!(r.intact(), "{r:?}");
    assert_eq!((r.entries, r.anchored), (7, Some(7)));

    // More rows: the next run starts after the cursor, nothing twice.
    write_rows(&db, 2);
    let s = run(&mut src, &mut sink, &options(cursor(), 1), &mut |_| {}).unwrap();
    assert_eq!((s.rows, s.last), (2, 9));
    assert_eq!(seqs(&sink.got), (1..=9).collect::<Vec<_>>());
    let r = readback::check(lines(&sink.got).as_bytes()).unwrap();
    assert!(r.intact(), "{r:?}");
    assert_eq!((r.entries, r.anchored, r.anchors), (9, Some(9), 2));
}

#[test]
fn a_cursor_past_the_end_of_the_log_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("gatehouse.db");
    write_rows(&db, 2);
    let mut src = Source::open(&db).unwrap();
    let mut sink = Flaky {
        fail: 0,
        tries: 0,
        got: vec![],
    };
    let mut o = options(None, 1);
    o.start_after = Some(5);
    let e = run(&mut src, &mut sink, &o, &mut |_| {}).unwrap_err();
    assert!(
        e.to_string().contains("does not match its sealed head"),
        "{e}"
    );
    assert_eq!(sink.tries, 0);
}

#[test]
fn a_record_survives_json_with_every_field() {
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("gatehouse.db");
    write_rows(&db, 1);
    let src = Source::open(&db).unwrap();
    let row = src.snapshot(0, 10).unwrap().rows.remove(0);
    assert_eq!(
        row.recomputed_hash(),
        row.hash,
        "the stored row hashes as written"
    );
    let rec = ExportRecord::Row(Box::new(row));
    let line = rec.json_line();
    assert_eq!(line.matches('\n').count(), 1, "{line}");
    assert_eq!(serde_json::from_str::<ExportRecord>(&line).unwrap(), rec);
    let e = serde_json::from_str::<ExportRecord>(&line.replace("\"seq\"", "\"extra\":1,\"seq\""));
    assert!(e.is_err(), "an unknown field is refused");
}

/// A one-connection HTTP server on loopback answering `status` with `headers`; returns its URL
/// and a handle yielding the request head it read.
fn answer_once(status: &str, headers: &str) -> (String, std::thread::JoinHandle<String>) {
    use std::io::{Read, Write};
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    let reply =
        format!("HTTP/1.1 {status}\r\n{headers}Content-Length: 0\r\nConnection: close\r\n\r\n");
    let h = std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        let mut buf = vec![0u8; 65536];
        let mut got = Vec::new();
        // The head and the body (Content-Length) of one request.
        loop {
            let n = s.read(&mut buf).unwrap();
            got.extend_from_slice(&buf[..n]);
            let text = String::from_utf8_lossy(&got).into_owned();
            if let Some(end) = text.find("\r\n\r\n") {
                let len: usize = text
                    .lines()
                    .find_map(|l| {
                        l.to_ascii_lowercase()
                            .strip_prefix("content-length: ")
                            .map(|v| v.trim().parse().unwrap())
                    })
                    .unwrap_or(0);
                if got.len() >= end + 4 + len || n == 0 {
                    s.write_all(reply.as_bytes()).unwrap();
                    return text[..end].to_string();
                }
            }
        }
    });
    (url, h)
}

#[test]
fn a_redirect_is_not_followed_and_a_non_2xx_is_retried() {
    use audit_export::otlp::Collector;
    let elsewhere = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let target = format!("http://{}/v1/logs", elsewhere.local_addr().unwrap());
    let (url, seen) = answer_once("307 Temporary Redirect", &format!("Location: {target}\r\n"));
    let c = Collector::new(&url).unwrap();
    let req = audit_export::otlp::request("i", &[], 1);
    let e = c.send(&req).unwrap_err();
    assert_eq!(
        e,
        SendError::Retry(format!("{url}/v1/logs answered 307 Temporary Redirect"))
    );
    let head = seen.join().unwrap();
    assert!(head.starts_with("POST /v1/logs HTTP/1.1"), "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: application/x-protobuf"),
        "{head}"
    );
    // Nothing reached the redirect's target.
    elsewhere.set_nonblocking(true).unwrap();
    assert_eq!(
        elsewhere.accept().unwrap_err().kind(),
        std::io::ErrorKind::WouldBlock
    );

    // A 2xx without a body is taken.
    let (url, seen) = answer_once("200 OK", "");
    Collector::new(&url).unwrap().send(&req).unwrap();
    seen.join().unwrap();
}
