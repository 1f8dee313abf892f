// Drives the Linux binaries (ipc_schema::platform::Missing elsewhere).
#![cfg(target_os = "linux")]
//! The audit log against someone with write access to its file: with the `sqlite3` command-line
//! tool, modify, delete, insert, rewrite (triggers dropped, hashes recomputed) and truncate;
//! `verify-audit` (no broker running) names the entry every time.

#![forbid(unsafe_code)]

mod broker_core_support;

use broker_core_support::*;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Recomputes the unkeyed chain (SHA-256) for rows from `start` on, and prints the SQL that
/// writes it back (what an attacker without the keyring can do).
const REHASH: &str = r#"
import hashlib, sqlite3, sys
db, start = sys.argv[1], int(sys.argv[2])
c = sqlite3.connect(db)
rows = c.execute("SELECT seq, ts_ms, kind, session, actor, tool, target, outcome, detail, degraded, prev_hash, hash, mode FROM audit ORDER BY seq").fetchall()
prev = bytes(32)
out = []
for r in rows:
    seq = r[0]
    if seq < start:
        prev = r[11]
        continue
    h = hashlib.sha256(b"gatehouse-audit-v1")
    h.update(prev)
    h.update(seq.to_bytes(8, "little", signed=True))
    h.update(r[1].to_bytes(8, "little", signed=True))
    for s in r[2:9]:
        if s is None:
            h.update((0xffffffff).to_bytes(4, "little"))
        else:
            b = s.encode()
            h.update(len(b).to_bytes(4, "little"))
            h.update(b)
    h.update(bytes([r[9]]))
    # The session's mode, hashed only when the row has one (rows of no session have none).
    if r[12] is not None:
        b = r[12].encode()
        h.update(len(b).to_bytes(4, "little"))
        h.update(b)
    new = h.digest()
    out.append("UPDATE audit SET prev_hash = X'%s', hash = X'%s' WHERE seq = %d;" % (prev.hex(), new.hex(), seq))
    prev = new
out.append("UPDATE audit_head SET count = %d, head = X'%s';" % (rows[-1][0] if rows else 0, prev.hex()))
print("\n".join(out))
"#;

fn sqlite(db: &Path, sql: &str) -> std::process::Output {
    Command::new("sqlite3")
        .arg(db)
        .arg(sql)
        .output()
        .expect("the sqlite3 command-line tool (apt-get install sqlite3)")
}

fn sqlite_ok(db: &Path, sql: &str) {
    let out = sqlite(db, sql);
    assert!(
        out.status.success(),
        "{sql}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn rehash_sql(db: &Path, from: u64) -> String {
    let out = Command::new("python3")
        .args(["-c", REHASH])
        .arg(db)
        .arg(from.to_string())
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// A copy of the instance's data (same database instance, so the same key).
fn copy(inst: &Instance, name: &str) -> (PathBuf, PathBuf) {
    let root = inst.root().join(name);
    std::fs::create_dir_all(root.join("data")).unwrap();
    for f in std::fs::read_dir(inst.root().join("data")).unwrap() {
        let f = f.unwrap();
        let n = f.file_name().to_string_lossy().into_owned();
        if n.starts_with("gatehouse.db") {
            std::fs::copy(f.path(), root.join("data").join(&n)).unwrap();
        }
    }
    let db = root.join("data/gatehouse.db");
    (root, db)
}

fn verify_at(root: &Path) -> (Option<i32>, serde_json::Value) {
    let out = Command::new(gatehouse_tests::bin("gatehouse"))
        .arg("--data-dir")
        .arg(root)
        .args(["--json", "verify-audit"])
        .output()
        .unwrap();
    (
        out.status.code(),
        serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr))),
    )
}

#[test]
fn verify_audit_names_the_entry_for_every_kind_of_tampering() {
    let inst = Instance::new(Some(&policy_with("write_file = \"allow\"", "")));
    std::fs::write(inst.file("a.txt"), "a").unwrap();
    {
        let b = inst.start(&[]);
        let mut gw = b.gateway();
        for i in 0..5 {
            gw.call(read_call(&inst.file("a.txt")));
            gw.call(write_call(&inst.file(&format!("w{i}.txt")), "w"));
        }
    }
    // Positive control: untouched, with no broker running.
    let (code, v) = verify(&inst);
    assert!(code.success(), "{v}");
    let n = v["entries"].as_u64().unwrap();
    assert!(n >= 20, "{v}");
    assert_eq!(v["message"], format!("{n} entries, chain intact"));
    let text = inst.cli(&["verify-audit"]);
    assert_eq!(
        String::from_utf8_lossy(&text.stdout),
        format!("{n} entries, chain intact\n")
    );

    // The triggers refuse changes outright.
    let (root, db) = copy(&inst, "triggers");
    let out = sqlite(&db, "UPDATE audit SET outcome = 'deny' WHERE seq = 5;");
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("the audit log is append-only: UPDATE refused"),
        "{out:?}"
    );
    let out = sqlite(&db, "DELETE FROM audit WHERE seq = 5;");
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("the audit log is append-only: DELETE refused"),
        "{out:?}"
    );
    assert_eq!(verify_at(&root).0, Some(0));

    let k = 7u64;
    let cases: Vec<(&str, String, u64, &str)> = vec![
        (
            "modify a row",
            format!(
                "DROP TRIGGER audit_no_update; UPDATE audit SET outcome = 'deny' WHERE seq = {k};"
            ),
            k,
            "its contents do not match its hash (modified)",
        ),
        (
            "delete a row",
            format!("DROP TRIGGER audit_no_delete; DELETE FROM audit WHERE seq = {k};"),
            k,
            "is missing (the next row is numbered",
        ),
        (
            "truncate the tail",
            format!(
                "DROP TRIGGER audit_no_delete; DELETE FROM audit WHERE seq > {};",
                n - 3
            ),
            n - 2,
            "missing (the log was cut after entry",
        ),
    ];
    for (name, sql, entry, why) in cases {
        let (root, db) = copy(&inst, &name.replace(' ', "-"));
        sqlite_ok(&db, &sql);
        let (code, v) = verify_at(&root);
        assert_eq!(code, Some(1), "{name}: {v}");
        assert_eq!(v["broken_at"], entry, "{name}: {v}");
        assert!(v["reason"].as_str().unwrap().contains(why), "{name}: {v}");
        assert!(
            v["message"]
                .as_str()
                .unwrap()
                .starts_with(&format!("the audit log is broken at entry {entry}: ")),
            "{name}: {v}"
        );
    }

    // Insert a well-formed row at the end, with a correct SHA-256 link (but no key for its MAC).
    let (root, db) = copy(&inst, "insert");
    sqlite_ok(&db, &format!(
        "DROP TRIGGER audit_no_update; INSERT INTO audit (seq, ts_ms, kind, session, actor, tool, target, outcome, detail, degraded, prev_hash, hash, mac) \
         SELECT {}, ts_ms, 'decision', NULL, 'ui', NULL, NULL, 'allow once', 'forged', 0, hash, hash, zeroblob(32) FROM audit WHERE seq = {n};",
        n + 1
    ));
    sqlite_ok(&db, &rehash_sql(&db, n + 1));
    let (code, v) = verify_at(&root);
    assert_eq!(
        (code, v["broken_at"].as_u64()),
        (Some(1), Some(n + 1)),
        "{v}"
    );
    assert!(
        v["reason"]
            .as_str()
            .unwrap()
            .contains("its MAC does not match under the audit key"),
        "{v}"
    );

    // Drop the triggers, change a row, and rewrite the whole chain after it and the head: the
    // hashes all link, the MACs give it away, at the changed entry.
    let (root, db) = copy(&inst, "rewrite");
    sqlite_ok(&db, &format!("DROP TRIGGER audit_no_update; DROP TRIGGER audit_no_delete; UPDATE audit SET detail = 'nothing happened' WHERE seq = {k};"));
    sqlite_ok(&db, &rehash_sql(&db, k));
    let (code, v) = verify_at(&root);
    assert_eq!((code, v["broken_at"].as_u64()), (Some(1), Some(k)), "{v}");
    assert!(
        v["reason"]
            .as_str()
            .unwrap()
            .contains("its MAC does not match under the audit key (rewritten or inserted)"),
        "{v}"
    );

    // Cut the tail and move the head back to match: the head's MAC gives it away.
    let (root, db) = copy(&inst, "cut-and-reseal");
    sqlite_ok(
        &db,
        &format!(
            "DROP TRIGGER audit_no_delete; DELETE FROM audit WHERE seq > {};",
            n - 3
        ),
    );
    sqlite_ok(&db, &rehash_sql(&db, n));
    let (code, v) = verify_at(&root);
    assert_eq!(
        (code, v["broken_at"].as_u64()),
        (Some(1), Some(n - 3)),
        "{v}"
    );
    assert!(
        v["reason"]
            .as_str()
            .unwrap()
            .contains("the sealed head's MAC does not match"),
        "{v}"
    );

    // A tampered log refuses the broker's start rather than being appended to.
    let (root, db) = copy(&inst, "no-start");
    sqlite_ok(
        &db,
        &format!(
            "DROP TRIGGER audit_no_delete; DELETE FROM audit WHERE seq > {};",
            n - 1
        ),
    );
    std::fs::create_dir_all(root.join("config")).unwrap();
    let out = Command::new(gatehouse_tests::bin("gatehouse"))
        .arg("--data-dir")
        .arg(&root)
        .arg("broker")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("the audit log does not match its sealed head"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
