// Drives the Linux binaries (ipc_schema::platform::Missing elsewhere).
#![cfg(target_os = "linux")]
//! `gatehouse audit export` and `verify-export` against a real broker's audit log: JSON lines
//! checked with jq, OTLP/HTTP decoded by a loopback receiver built on the official protobuf
//! definitions (tests/otlp/receiver.py, `opentelemetry-proto`), a collector that answers 503
//! and then is not there at all, and the chain re-verified from what was exported alone.

#![forbid(unsafe_code)]

mod broker_core_support;

use broker_core_support::*;
use ipc_schema::tool::ToolReply;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const OTLP_VENV: &str = "/opt/gatehouse-test-venv-otlp";

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The number of rows in the audit log (read with sqlite3, not through gatehouse).
fn db_count(inst: &Instance) -> i64 {
    let o = Command::new("sqlite3")
        .arg(inst.db())
        .arg("SELECT count(*) FROM audit")
        .output()
        .expect("sqlite3 (scripts/test-deps.sh installs it)");
    assert!(o.status.success(), "{}", text(&o));
    String::from_utf8_lossy(&o.stdout).trim().parse().unwrap()
}

/// `jq -e FILTER FILE` (-s: the whole file as one array) succeeds.
fn jq(filter: &str, file: &Path, slurp: bool) -> Output {
    let mut c = Command::new("jq");
    c.arg("-e");
    if slurp {
        c.arg("-s");
    }
    c.arg(filter)
        .arg(file)
        .output()
        .expect("jq (scripts/test-deps.sh installs it)")
}

fn assert_jq(filter: &str, file: &Path) {
    let o = jq(filter, file, true);
    assert!(o.status.success(), "jq {filter}: {}", text(&o));
}

/// Makes audited calls: reads inside the grant (allowed) and one outside it (refused).
fn some_calls(inst: &Instance, b: &Broker, reads: usize) {
    let mut gw = b.gateway();
    for _ in 0..reads {
        match gw.call(read_call(&inst.file("hello.txt"))) {
            ToolReply::Done(_) => {}
            other => panic!("{other:?}; log:\n{}", b.log()),
        }
    }
    match gw.call(read_call(Path::new("/etc/hostname"))) {
        ToolReply::Refused(_) => {}
        other => panic!("a read outside the grant: {other:?}"),
    }
}

fn instance_with_file() -> Instance {
    let inst = Instance::new(None);
    std::fs::write(inst.file("hello.txt"), "hello\n").unwrap();
    inst
}

fn lines_of(p: &Path) -> Vec<String> {
    std::fs::read_to_string(p)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

fn verify_export(inst: &Instance, file: &Path) -> Output {
    inst.cli(&["audit", "verify-export", file.to_str().unwrap()])
}

#[test]
fn json_lines_export_is_complete_checked_by_jq_and_verifies_alone_and_tampering_shows() {
    let inst = instance_with_file();
    let root = inst.project.display().to_string();
    let mut b = inst.start(&["--grant-root", &root]);
    some_calls(&inst, &b, 3);
    b.stop();
    let n = db_count(&inst);
    assert!(n >= 6, "{n} rows");

    let out = inst.root().join("export.jsonl");
    let o = inst.cli(&["audit", "export", "--output", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains(&format!("exported {n} entries and 1 anchors")),
        "{}",
        text(&o)
    );

    // Every line is one JSON object (jq reads them one by one).
    let o = Command::new("jq")
        .args(["-c", "."])
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).lines().count() as i64,
        n + 1
    );
    // The rows are entries 1..=n in order, each with every field; the last line is the anchor.
    assert_jq(
        "map(select(.record == \"row\")) | map(.seq) == [range(1; length + 1)]",
        &out,
    );
    assert_jq(
        &format!("map(select(.record == \"row\")) | length == {n}"),
        &out,
    );
    assert_jq(
        "map(select(.record == \"row\")) | all(.[]; (.seq|type) == \"number\" and (.ts_ms|type) == \"number\" \
         and (.kind|type) == \"string\" and (.actor|type) == \"string\" and (.outcome|type) == \"string\" \
         and (.detail|type) == \"string\" and (.degraded|type) == \"boolean\" and has(\"session\") \
         and has(\"tool\") and has(\"target\") and (.prev_hash|test(\"^[0-9a-f]{64}$\")) \
         and (.hash|test(\"^[0-9a-f]{64}$\")) and (.mac|test(\"^[0-9a-f]{64}$\")))",
        &out,
    );
    assert_jq(
        ".[0].prev_hash == (\"0\" * 64) and .[1].prev_hash == .[0].hash",
        &out,
    );
    assert_jq(
        &format!(
            "last | .record == \"anchor\" and .count == {n} and (.mac|test(\"^[0-9a-f]{{64}}$\")) \
             and (.instance|length) > 0"
        ),
        &out,
    );
    assert_jq(&format!("(.[{}].hash) == (last.head)", n - 1), &out);
    // The calls are there: a read of the file, the refusal of one outside the grant.
    assert_jq(
        "any(.[]; .tool == \"read_file\" and (.target // \"\" | endswith(\"hello.txt\")) and .session != null)",
        &out,
    );
    assert_jq(
        "any(.[]; .tool == \"read_file\" and .outcome == \"refused\")",
        &out,
    );

    // The export alone re-verifies.
    let o = verify_export(&inst, &out);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).starts_with(&format!(
            "{n} entries, chain intact (the last anchor covers all {n}"
        )),
        "{}",
        text(&o)
    );

    // On this machine, with the log's key: every MAC checked too.
    let o = inst.cli(&[
        "audit",
        "verify-export",
        "--with-key",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains("every MAC checked under the audit key"),
        "{}",
        text(&o)
    );
    // A forged MAC passes the keyless check (what a central store can do) and fails with the
    // key, for a row and for an anchor.
    for (what, filter, at) in [
        (
            "row",
            "if .seq == 2 then .mac = (\"0\" * 64) else . end",
            "broken at entry 2: its MAC does not match",
        ),
        (
            "anchor",
            "if .record == \"anchor\" then .mac = (\"0\" * 64) else . end",
            "its MAC does not match under the audit key",
        ),
    ] {
        let o = Command::new("jq")
            .args(["-c", filter])
            .arg(&out)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", text(&o));
        let p = inst.root().join(format!("forged-{what}.jsonl"));
        std::fs::write(&p, &o.stdout).unwrap();
        let o = verify_export(&inst, &p);
        assert!(
            o.status.success(),
            "keyless, a forged {what} MAC is not seen: {}",
            text(&o)
        );
        let o = inst.cli(&["audit", "verify-export", "--with-key", p.to_str().unwrap()]);
        assert!(!o.status.success(), "{}", text(&o));
        assert!(text(&o).contains(at), "{what}: {}", text(&o));
    }

    // Each kind of tampering is found and named (the untouched file above is the control).
    let lines = lines_of(&out);
    let tampered = |name: &str, ls: &[String]| -> (bool, String) {
        let p = inst.root().join(name);
        std::fs::write(&p, ls.join("\n") + "\n").unwrap();
        let o = verify_export(&inst, &p);
        (
            o.status.success(),
            String::from_utf8_lossy(&o.stdout).into_owned(),
        )
    };
    let mut missing = lines.clone();
    missing.remove(2);
    let (ok, msg) = tampered("missing.jsonl", &missing);
    assert!(!ok, "{msg}");
    assert!(
        msg.contains("broken at entry 3: entry 3 is missing (the next record is entry 4)"),
        "{msg}"
    );

    let mut cut = lines.clone();
    cut.remove(lines.len() - 2); // the last row, before the anchor
    let (ok, msg) = tampered("cut.jsonl", &cut);
    assert!(!ok, "{msg}");
    assert!(
        msg.contains(&format!("entries {n} to {n} are missing")),
        "{msg}"
    );

    let mut twice = lines.clone();
    twice.insert(3, lines[2].clone());
    let (ok, msg) = tampered("twice.jsonl", &twice);
    assert!(!ok, "{msg}");
    assert!(
        msg.contains("broken at entry 3: entry 3 appears twice"),
        "{msg}"
    );

    let mut swapped = lines.clone();
    swapped.swap(3, 4);
    let (ok, msg) = tampered("swapped.jsonl", &swapped);
    assert!(!ok, "{msg}");
    assert!(
        msg.contains("broken at entry 4: entry 4 is missing (the next record is entry 5)"),
        "{msg}"
    );

    // Altered with jq: one row's target.
    let o = Command::new("jq")
        .args([
            "-c",
            "if .seq == 5 then .target = \"/elsewhere\" else . end",
        ])
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let altered: Vec<String> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    assert_ne!(altered, lines);
    let (ok, msg) = tampered("altered.jsonl", &altered);
    assert!(!ok, "{msg}");
    assert!(
        msg.contains("broken at entry 5: its contents do not match its hash (modified)"),
        "{msg}"
    );

    let mut garbage = lines.clone();
    garbage[1] = "{\"record\":\"row\"".into();
    let (ok, msg) = tampered("garbage.jsonl", &garbage);
    assert!(!ok, "{msg}");
    assert!(msg.contains("line 2 is not an export record"), "{msg}");

    // --from: only the entries from there; with --state, a second run sends nothing again.
    let part = inst.root().join("part.jsonl");
    let state = inst.root().join("part.cursor");
    let o = inst.cli(&[
        "audit",
        "export",
        "--from",
        "4",
        "--output",
        part.to_str().unwrap(),
        "--state",
        state.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    assert_jq(
        &format!(
            "map(select(.record == \"row\")) | map(.seq) == [range(4; {})]",
            n + 1
        ),
        &part,
    );
    let o = inst.cli(&[
        "audit",
        "export",
        "--output",
        part.to_str().unwrap(),
        "--state",
        state.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("exported 0 entries"), "{}", text(&o));
    assert_jq(
        &format!("map(select(.record == \"row\")) | length == {}", n - 3),
        &part,
    );
}

/// The receiver: a Python process serving OTLP/HTTP on loopback.
struct Receiver {
    child: Child,
    port: u16,
}

impl Receiver {
    fn start(dir: &Path, port: u16) -> Receiver {
        let py = PathBuf::from(OTLP_VENV).join("bin/python");
        assert!(
            py.exists(),
            "{} is missing: run scripts/test-deps.sh",
            py.display()
        );
        let script = source_dir().join("tests/otlp/receiver.py");
        let port_file = dir.join("port");
        let _ = std::fs::remove_file(&port_file);
        let child = Command::new(py)
            .arg(script)
            .arg(&port_file)
            .arg(dir)
            .arg(port.to_string())
            .stdin(Stdio::null())
            .stderr(std::fs::File::create(dir.join(format!("receiver-{port}.log"))).unwrap())
            .spawn()
            .expect("start the receiver");
        let deadline = Instant::now() + Duration::from_secs(30);
        let port = loop {
            if let Ok(p) = std::fs::read_to_string(&port_file) {
                break p.trim().parse().unwrap();
            }
            assert!(Instant::now() < deadline, "the receiver did not start");
            std::thread::sleep(Duration::from_millis(20));
        };
        Receiver { child, port }
    }

    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The source tree (a copy of it when the suite runs as the unprivileged user).
fn source_dir() -> PathBuf {
    match std::env::var_os("GATEHOUSE_SOURCE_DIR") {
        Some(d) => PathBuf::from(d),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join(".."),
    }
}

fn received(dir: &Path) -> Vec<Value> {
    lines_of(&dir.join("records.jsonl"))
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn row_seqs(recs: &[Value]) -> Vec<i64> {
    recs.iter()
        .filter(|r| r["record"] == "row")
        .map(|r| r["seq"].as_i64().unwrap())
        .collect()
}

/// Waits until `pred` holds (a generous deadline that only turns a hang into a failure).
fn wait_for(what: &str, mut pred: impl FnMut() -> bool, why: impl Fn() -> String) {
    let deadline = Instant::now() + Duration::from_secs(90);
    while !pred() {
        assert!(Instant::now() < deadline, "{what}: {}", why());
        std::thread::sleep(Duration::from_millis(50));
    }
}

struct Exporter(Child);

impl Drop for Exporter {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn otlp_export_survives_a_collector_down_and_back_up_with_every_row_once_and_the_chain_verifies() {
    let inst = instance_with_file();
    let root = inst.project.display().to_string();
    let mut b = inst.start(&["--grant-root", &root]);
    let rdir = inst.root().join("receiver");
    std::fs::create_dir_all(&rdir).unwrap();
    let mut rx = Receiver::start(&rdir, 0);
    let port = rx.port;
    let url = format!("http://127.0.0.1:{port}");
    let state = inst.root().join("otlp.cursor");
    let exporter_log = inst.root().join("exporter.log");
    let _exporter = Exporter(
        Command::new(gatehouse_tests::bin("gatehouse"))
            .arg("--data-dir")
            .arg(inst.root())
            .args([
                "audit",
                "export",
                "--follow",
                "--anchor-every",
                "3",
                "--otlp",
                &url,
            ])
            .arg("--state")
            .arg(&state)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&exporter_log).unwrap())
            .spawn()
            .unwrap(),
    );
    let log = || {
        format!(
            "exporter: {}\nreceiver errors: {}",
            std::fs::read_to_string(&exporter_log).unwrap_or_default(),
            std::fs::read_to_string(rdir.join("errors")).unwrap_or_default()
        )
    };
    // Caught up: the collector has every committed row and the exporter has its answer (the
    // cursor moved). Stopping the collector before its answer is read would make the exporter
    // send that batch again: delivery is at least once, and that duplicate is not what this
    // test is about (docs/audit-export.md says so; a store keeps one record per seq).
    let cursor_at = || -> Value {
        serde_json::from_str::<Value>(&std::fs::read_to_string(&state).unwrap_or_default())
            .map(|c| c["exported"].clone())
            .unwrap_or(Value::Null)
    };
    let caught_up = |rdir: &Path| {
        let n = db_count(&inst);
        row_seqs(&received(rdir)).last().copied() == Some(n) && cursor_at() == n
    };

    some_calls(&inst, &b, 2);
    wait_for("rows reach the collector", || caught_up(&rdir), log);

    // The collector answers 503: the exporter keeps trying and skips nothing.
    std::fs::write(rdir.join("unavailable"), "").unwrap();
    some_calls(&inst, &b, 2);
    wait_for(
        "the exporter tries the unavailable collector",
        || lines_of(&rdir.join("refused")).len() >= 2,
        log,
    );
    std::fs::remove_file(rdir.join("unavailable")).unwrap();
    wait_for(
        "rows reach the collector after the 503s",
        || caught_up(&rdir),
        log,
    );

    // The collector is not there at all: connections are refused, more calls are made. It is
    // first made to refuse (503) and seen refusing, so that no batch it kept is cut off from its
    // answer by the kill (the server answers one request at a time; rows the broker commits on
    // its own, such as a session's end, may be in flight at any moment).
    let refused_before = lines_of(&rdir.join("refused")).len();
    std::fs::write(rdir.join("unavailable"), "").unwrap();
    some_calls(&inst, &b, 1);
    wait_for(
        "the collector refuses again",
        || lines_of(&rdir.join("refused")).len() > refused_before,
        log,
    );
    rx.stop();
    std::fs::remove_file(rdir.join("unavailable")).unwrap();
    some_calls(&inst, &b, 3);
    wait_for(
        "the exporter finds the collector gone",
        || {
            let l = std::fs::read_to_string(&exporter_log).unwrap_or_default();
            l.lines()
                .any(|l| l.contains("retrying from entry") && !l.contains("answered 503"))
        },
        log,
    );
    // Back up on the same port, and still more calls.
    let _rx2 = Receiver::start(&rdir, port);
    some_calls(&inst, &b, 1);
    b.stop();
    let n = db_count(&inst);
    wait_for("every row reaches the collector", || caught_up(&rdir), log);

    // Every row exactly once, in order.
    let recs = received(&rdir);
    assert_eq!(row_seqs(&recs), (1..=n).collect::<Vec<_>>(), "{}", log());
    assert!(
        std::fs::read_to_string(rdir.join("errors"))
            .unwrap_or_default()
            .is_empty(),
        "{}",
        log()
    );
    let exporter_said = std::fs::read_to_string(&exporter_log).unwrap();
    assert!(exporter_said.contains("answered 503"), "{exporter_said}");
    assert!(
        exporter_said.contains("delivered again from entry"),
        "{exporter_said}"
    );
    // Anchors went along, each right after the row it names.
    let anchors: Vec<&Value> = recs.iter().filter(|r| r["record"] == "anchor").collect();
    assert!(anchors.len() >= 2, "{anchors:?}");
    for (i, r) in recs.iter().enumerate() {
        if r["record"] == "anchor" {
            assert_eq!(recs[i - 1]["seq"], r["count"], "{r}");
            assert_eq!(recs[i - 1]["hash"], r["head"], "{r}");
        }
    }
    // The cursor holds the last acknowledged entry.
    assert_eq!(cursor_at(), n);

    // The chain re-verifies from what the collector received alone.
    let o = verify_export(&inst, &rdir.join("records.jsonl"));
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).starts_with(&format!("{n} entries, chain intact")),
        "{}",
        text(&o)
    );

    // The semantic conventions where they fit, on the records as decoded.
    let logs: Vec<Value> = lines_of(&rdir.join("logs.jsonl"))
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(logs.len(), recs.len());
    for l in &logs {
        assert_eq!(l["resource"]["service.name"], "gatehouse", "{l}");
        assert_eq!(l["scope"]["name"], "gatehouse.audit", "{l}");
        assert!(l["time_unix_nano"].as_u64().unwrap() > 0, "{l}");
    }
    let read_ok = logs
        .iter()
        .find(|l| {
            l["attributes"]["gen_ai.tool.name"] == "read_file"
                && l["attributes"]["gatehouse.outcome"] != "refused"
                && l["attributes"]["session.id"].is_string()
        })
        .unwrap_or_else(|| panic!("no read_file row with a session: {logs:?}"));
    assert_eq!(read_ok["event_name"], "gatehouse.audit.row");
    assert_eq!(
        read_ok["attributes"]["gen_ai.operation.name"],
        "execute_tool"
    );
    assert_eq!(
        read_ok["attributes"]["session.id"],
        read_ok["attributes"]["gatehouse.session"]
    );
    assert_eq!(
        read_ok["time_unix_nano"].as_u64().unwrap(),
        read_ok["attributes"]["gatehouse.ts_ms"].as_u64().unwrap() * 1_000_000
    );
    let refused = logs
        .iter()
        .find(|l| l["attributes"]["gatehouse.outcome"] == "refused")
        .expect("the refused read");
    assert_eq!(refused["attributes"]["error.type"], "refused", "{refused}");
    assert!(
        logs.iter()
            .any(|l| l["event_name"] == "gatehouse.audit.anchor"),
        "{logs:?}"
    );
}

#[test]
fn the_stdout_follower_prints_rows_as_they_are_committed() {
    let inst = instance_with_file();
    let root = inst.project.display().to_string();
    let mut b = inst.start(&["--grant-root", &root]);
    let out = inst.root().join("follow.jsonl");
    let _follower = Exporter(
        Command::new(gatehouse_tests::bin("gatehouse"))
            .arg("--data-dir")
            .arg(inst.root())
            .args(["audit", "export", "--follow", "--anchor-every", "2"])
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&out).unwrap())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let rows_out = || {
        lines_of(&out)
            .iter()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|r| r["record"] == "row")
            .count() as i64
    };
    wait_for(
        "the start rows are printed",
        || rows_out() >= 4,
        || lines_of(&out).join("\n"),
    );
    some_calls(&inst, &b, 2);
    b.stop();
    let n = db_count(&inst);
    wait_for(
        "every row is printed",
        || rows_out() == n,
        || lines_of(&out).join("\n"),
    );
    assert_jq(
        "map(select(.record == \"row\")) | map(.seq) == [range(1; length + 1)]",
        &out,
    );
    assert_jq(
        "any(.[]; .tool == \"read_file\" and .outcome == \"refused\")",
        &out,
    );
    let o = verify_export(&inst, &out);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).starts_with(&format!("{n} entries, chain intact")),
        "{}",
        text(&o)
    );
}

#[test]
fn a_collector_that_rejects_records_or_is_gone_stops_a_one_shot_export_with_the_cursor_unmoved() {
    let inst = instance_with_file();
    let root = inst.project.display().to_string();
    let mut b = inst.start(&["--grant-root", &root]);
    some_calls(&inst, &b, 1);
    b.stop();
    let n = db_count(&inst);
    let rdir = inst.root().join("receiver");
    std::fs::create_dir_all(&rdir).unwrap();
    std::fs::write(rdir.join("partial"), "").unwrap();
    let rx = Receiver::start(&rdir, 0);
    let url = format!("http://127.0.0.1:{}", rx.port);
    let state = inst.root().join("otlp.cursor");
    let export = |url: &str| {
        inst.cli(&[
            "audit",
            "export",
            "--otlp",
            url,
            "--attempts",
            "2",
            "--state",
            state.to_str().unwrap(),
        ])
    };

    // partial_success rejecting a record: stop, do not resend, do not move on.
    let o = export(&url);
    assert!(!o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains("rejected 1 of") && text(&o).contains("test rejects one"),
        "{}",
        text(&o)
    );
    assert!(
        text(&o).contains("stopped with entries up to 0 exported"),
        "{}",
        text(&o)
    );
    assert_eq!(
        lines_of(&rdir.join("refused")),
        ["partial"],
        "sent once, not retried"
    );
    assert!(!state.exists(), "the cursor did not move");

    // Nobody listening: tried --attempts times, then exit 1 saying how far it got.
    let gone = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let o = export(&format!("http://127.0.0.1:{gone}"));
    assert!(!o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains("gave up after 2 tries with entries up to 0 exported"),
        "{}",
        text(&o)
    );

    // Taking records again: everything, once.
    std::fs::remove_file(rdir.join("partial")).unwrap();
    let o = export(&url);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(row_seqs(&received(&rdir)), (1..=n).collect::<Vec<_>>());
    let c: Value = serde_json::from_str(&std::fs::read_to_string(&state).unwrap()).unwrap();
    assert_eq!(c["exported"], n);
    // A cursor of another sink is refused, not reused.
    let o = export(&format!("http://127.0.0.1:{gone}/other"));
    assert!(!o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains("give each sink its own --state"),
        "{}",
        text(&o)
    );
}
