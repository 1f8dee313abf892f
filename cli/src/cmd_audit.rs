//! `gatehouse verify-audit` and `gatehouse audit tail`: read the database directly, so they
//! work with no broker running (and cannot be lied to by one). `verify-audit` gets the MACs
//! from a private secrets-helper it starts itself (the key never leaves that helper).

use crate::private_helper::PrivateSeal;
use crate::{fail, Global, EXIT_FAILURE};
use audit_store::{self as store, verify};
use ipc_schema::inert::escaped;
use ipc_schema::ui::AuditEntry;
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
    /// Export every row with its chain position, hash and MAC, and sealed heads (anchors), as
    /// JSON lines or OpenTelemetry logs over OTLP/HTTP; resumes from a cursor per sink.
    Export(crate::cmd_export::ExportArgs),
    /// Check the hash chain from an export alone (JSON lines): a missing, repeated, reordered
    /// or altered record is found and named.
    VerifyExport(crate::cmd_export::VerifyExportArgs),
}

#[derive(clap::Args)]
pub struct VerifyArgs {
    /// Check the seal with a secrets-helper that runs with less than its profile needs when
    /// this system lacks a mechanism (each gap said on stderr); without it such a helper is
    /// refused, and the seal is not checked.
    #[arg(long)]
    allow_degraded: bool,
}

pub fn verify(g: &Global, a: VerifyArgs) -> ExitCode {
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
        match PrivateSeal::open_with(&g.dirs, &instance, a.allow_degraded) {
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

fn print_row(r: &AuditEntry, json: bool) {
    if json {
        println!(
            "{}",
            serde_json::json!({"seq": r.seq, "ts_ms": r.ts_unix_ms, "kind": r.kind.as_str(), "session": r.session, "actor": r.actor,
                "tool": r.tool, "target": r.target, "outcome": r.outcome, "detail": r.detail,
                "mode": r.mode.map(|m| m.as_str()), "tier": r.tier.map(|t| t.name())})
        );
        return;
    }
    print!("{}", row_line(r));
}

/// One audit row as one line of text. Every field an agent, a tool or a remote server could
/// have written (the target and detail above all, but also the tool's name, which a third-party
/// server chooses) is made inert, so the row cannot hold a line break or drive the terminal, and
/// cannot pass for two rows.
fn row_line(r: &AuditEntry) -> String {
    let secs = r.ts_unix_ms / 1000;
    let (h, m, s) = ((secs / 3600) % 24, (secs / 60) % 60, secs % 60);
    let session: String = r
        .session
        .as_deref()
        .map(|s| s.chars().take(8).collect())
        .unwrap_or_else(|| "-".into());
    // A session's row names its mode beside it (rows of no session, and rows from before
    // modes, have none).
    let session = match r.mode {
        Some(m) => format!("{session} [{m}]"),
        None => session,
    };
    // A row about something run in the exec sandbox names its tier beside its tool.
    let tool = r.tool.as_deref().unwrap_or("-");
    let tool = match r.tier {
        Some(t) => format!("{tool} [tier {t}]"),
        None => tool.to_string(),
    };
    format!(
        "{:>6} {h:02}:{m:02}:{s:02}Z {:<14} {:<10} {:<9} {:<8} {} {} {}\n",
        r.seq,
        r.kind,
        escaped(&r.actor),
        escaped(&r.outcome),
        escaped(&session),
        escaped(&tool),
        escaped(r.target.as_deref().unwrap_or("-")),
        escaped(&r.detail),
    )
}

pub fn run(g: &Global, cmd: AuditCmd) -> ExitCode {
    let (lines, follow) = match cmd {
        AuditCmd::Tail { lines, follow } => (lines, follow),
        AuditCmd::Export(a) => return crate::cmd_export::export(g, a),
        AuditCmd::VerifyExport(a) => return crate::cmd_export::verify_export(g, a),
    };
    let db = store::db_path(&g.dirs.data);
    if !db.exists() {
        return fail(&format!("there is no audit log at {}", db.display()));
    }
    let conn = match store::open_ro(&db) {
        Ok(c) => c,
        Err(e) => return fail(&e.to_string()),
    };
    let mut last = 0;
    match store::audit::rows_after(&conn, 0, lines) {
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
        match store::audit::rows_after(&conn, last, 10_000) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hostile_row_is_one_inert_line() {
        let hostile = "x\n    42 12:00:00Z decision ui allowed\x1b[2J\x1b]52;c;aGk=\x07\u{202E}";
        let r = AuditEntry {
            seq: 7,
            ts_unix_ms: 3_600_000 + 61_000,
            kind: ipc_schema::ui::AuditKind::Refusal,
            session: Some("0123456789abcdef".into()),
            actor: "gateway".into(),
            tool: Some(format!("srv__{hostile}")),
            target: Some(hostile.into()),
            outcome: "refused".into(),
            detail: format!("because\r\n{hostile}"),
            mode: None,
            tier: None,
        };
        let line = row_line(&r);
        assert!(line.ends_with('\n'));
        assert_eq!(line.matches('\n').count(), 1, "{line:?}");
        assert!(
            !line.contains(['\x1b', '\x07', '\r', '\u{202E}']),
            "{line:?}"
        );
        assert!(line.starts_with("     7 01:01:01Z refusal"), "{line:?}");
        assert!(line.contains(" 01234567 srv__x\\n    42 12:00:00Z decision ui allowed\\x1b[2J\\x1b]52;c;aGk=\\x07\\u{202E} x\\n"), "{line:?}");
        assert!(line.contains("because\\r\\nx\\n"), "{line:?}");
    }
}
