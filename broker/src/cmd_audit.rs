//! `gatehouse verify-audit` and `gatehouse audit tail`: read the database directly, so they
//! work with no broker running (and cannot be lied to by one). `verify-audit` gets the MACs
//! from a private secrets-helper it starts itself (the key never leaves that helper).

use crate::head_key::PrivateSeal;
use crate::store::{self, verify};
use crate::{fail, Global, EXIT_FAILURE};
use ipc_schema::ui::AuditEntry;
use rusqlite::params;
use std::process::ExitCode;
use std::time::Duration;

#[derive(clap::Subcommand)]
pub enum AuditCmd {
    /// Print the newest entries.
    Tail {
        /// How many.
        #[arg(short = 'n', long, default_value_t = 20)]
        lines: u32,
        /// Keep printing new entries as they are written.
        #[arg(short = 'f', long)]
        follow: bool,
    },
}

pub fn verify(g: &Global) -> ExitCode {
    let db = store::db_path(&g.dirs.data);
    if !db.exists() {
        return fail(&format!("there is no audit log at {}", db.display()));
    }
    let conn = match store::open_ro(&db) {
        Ok(c) => c,
        Err(e) => return fail(&e.to_string()),
    };
    let instance = match store::read_instance_id(&conn) {
        Ok(Some(i)) => i,
        Ok(None) => String::new(),
        Err(e) => return fail(&e.to_string()),
    };
    let (sealer, no_key) = if instance.is_empty() {
        (None, Some("the log has no instance id".to_string()))
    } else {
        match PrivateSeal::open(&g.dirs, &instance) {
            Ok(s) => (Some(s), None),
            Err(e) => (None, Some(e)),
        }
    };
    let report = match verify::verify(&conn, sealer.as_ref(), no_key) {
        Ok(r) => r,
        Err(e) => return fail(&e.to_string()),
    };
    if g.json {
        println!(
            "{}",
            serde_json::json!({
                "entries": report.entries,
                "intact": report.intact(),
                "broken_at": report.broken_at,
                "reason": report.reason,
                "unsealed": report.unsealed,
                "message": report.line(),
            })
        );
    } else {
        println!("{}", report.line());
    }
    if report.intact() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_FAILURE)
    }
}

/// The rows after `after`, oldest first (the newest `limit` of them).
fn rows_after(
    conn: &rusqlite::Connection,
    after: u64,
    limit: u32,
) -> rusqlite::Result<Vec<AuditEntry>> {
    let mut stmt = conn.prepare(store::AUDIT_AFTER_NEWEST_FIRST)?;
    let after = i64::try_from(after).unwrap_or(i64::MAX);
    let mut rows: Vec<AuditEntry> = stmt
        .query_map(params![after, limit], store::audit_entry)?
        .collect::<Result<_, _>>()?;
    rows.reverse();
    Ok(rows)
}

/// Control characters and bidi overrides from agents are shown escaped, never interpreted.
pub fn inert(s: &str) -> String {
    s.chars()
        .map(|c| {
            if (c.is_control() && c != '\n') || matches!(c, '\u{200e}' | '\u{200f}' | '\u{061c}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}') {
                format!("\\u{{{:04x}}}", c as u32)
            } else {
                c.to_string()
            }
        })
        .collect()
}

fn print_row(r: &AuditEntry, json: bool) {
    if json {
        println!(
            "{}",
            serde_json::json!({"seq": r.seq, "ts_ms": r.ts_unix_ms, "kind": r.kind, "session": r.session, "actor": r.actor,
                "tool": r.tool, "target": r.target, "outcome": r.outcome, "detail": r.detail})
        );
        return;
    }
    let secs = r.ts_unix_ms / 1000;
    let (h, m, s) = ((secs / 3600) % 24, (secs / 60) % 60, secs % 60);
    let session = r
        .session
        .as_deref()
        .map(|s| &s[..s.len().min(8)])
        .unwrap_or("-");
    println!(
        "{:>6} {h:02}:{m:02}:{s:02}Z {:<14} {:<10} {:<9} {session:<8} {} {} {}",
        r.seq,
        r.kind,
        inert(&r.actor),
        inert(&r.outcome),
        r.tool.as_deref().unwrap_or("-"),
        inert(r.target.as_deref().unwrap_or("-")),
        inert(&r.detail).replace('\n', "\\n"),
    );
}

pub fn run(g: &Global, cmd: AuditCmd) -> ExitCode {
    let AuditCmd::Tail { lines, follow } = cmd;
    let db = store::db_path(&g.dirs.data);
    if !db.exists() {
        return fail(&format!("there is no audit log at {}", db.display()));
    }
    let conn = match store::open_ro(&db) {
        Ok(c) => c,
        Err(e) => return fail(&e.to_string()),
    };
    let mut last = 0;
    match rows_after(&conn, 0, lines) {
        Ok(rows) => {
            for r in &rows {
                print_row(r, g.json);
                last = r.seq;
            }
        }
        Err(e) => return fail(&e.to_string()),
    }
    if !follow {
        return ExitCode::SUCCESS;
    }
    loop {
        std::thread::sleep(Duration::from_millis(200));
        match rows_after(&conn, last, 10_000) {
            Ok(rows) => {
                for r in &rows {
                    print_row(r, g.json);
                    last = r.seq;
                }
            }
            Err(e) => {
                eprintln!("gatehouse: {e}");
                return ExitCode::from(EXIT_FAILURE);
            }
        }
    }
}
