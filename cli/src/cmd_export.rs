//! `gatehouse audit export` and `gatehouse audit verify-export`: the audit log into a team's log
//! pipeline (JSON lines or OTLP/HTTP) and the chain checked from an export alone. Both read
//! files only (the database read-only, like `verify-audit`); no broker is needed or touched.

use crate::private_helper::PrivateSeal;
use crate::{fail, Global, EXIT_FAILURE};
use audit_export::cursor::{default_path, CursorFile};
use audit_export::otlp::Collector;
use audit_export::readback::check_keeping;
use audit_export::run::{self, Lines, Options, Otlp, Sink};
use audit_export::source::Source;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

#[derive(clap::Args)]
pub struct ExportArgs {
    /// Keep exporting rows as they are committed (like `tail -f`); stop with Ctrl-C.
    #[arg(short = 'f', long)]
    follow: bool,
    /// Start at this entry (default: after the cursor, or at entry 1).
    #[arg(long, value_name = "SEQ", value_parser = clap::value_parser!(i64).range(1..))]
    from: Option<i64>,
    /// Append JSON lines to FILE instead of printing them.
    #[arg(long, short = 'o', value_name = "FILE", conflicts_with = "otlp")]
    output: Option<PathBuf>,
    /// Send OpenTelemetry logs over OTLP/HTTP (protobuf) to this collector: a base URL
    /// (`http://127.0.0.1:4318`) gets `/v1/logs` appended; a URL ending in `/v1/logs` is used
    /// as it is.
    #[arg(long, value_name = "URL")]
    otlp: Option<String>,
    /// The cursor file: the last entry this sink acknowledged. Default for --otlp:
    /// DATA/export/otlp-DIGEST.cursor; JSON lines keep a cursor only when this is given.
    #[arg(long, value_name = "FILE")]
    state: Option<PathBuf>,
    /// An anchor (the sealed head: count, head hash, HMAC) after this many rows ...
    #[arg(long, default_value_t = 1000, value_name = "N")]
    anchor_every: u64,
    /// ... or this many seconds after the last one when rows came since (and always at the end
    /// of an export without --follow).
    #[arg(long, default_value_t = 60, value_name = "SECS")]
    anchor_secs: u64,
    /// Rows per delivery.
    #[arg(long, default_value_t = 512, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    batch: u32,
    /// Without --follow: tries per delivery before giving up (with --follow: until it goes
    /// through).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..))]
    attempts: u32,
}

pub fn export(g: &Global, a: ExportArgs) -> ExitCode {
    let mut src = match Source::open(&audit_store::db_path(&g.dirs.data)) {
        Ok(s) => s,
        Err(e) => return fail(&e.to_string()),
    };
    let mut sink: Box<dyn Sink> = if let Some(url) = &a.otlp {
        match Collector::new(url) {
            Ok(c) => Box::new(Otlp(c)),
            Err(e) => return fail(&e.to_string()),
        }
    } else if let Some(path) = &a.output {
        let path = std::path::absolute(path).unwrap_or_else(|_| path.clone());
        let file = match std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
        {
            Ok(f) => f,
            Err(e) => return fail(&format!("{}: {e}", path.display())),
        };
        let sync = match file.try_clone() {
            Ok(f) => Some(f),
            Err(e) => return fail(&format!("{}: {e}", path.display())),
        };
        Box::new(Lines {
            out: file,
            name: format!("jsonl {}", path.display()),
            sync,
        })
    } else {
        Box::new(Lines {
            out: std::io::stdout(),
            name: "jsonl stdout".into(),
            sync: None,
        })
    };
    let to_stdout = a.otlp.is_none() && a.output.is_none();
    let state = match (&a.state, &a.otlp) {
        (Some(p), _) => Some(p.clone()),
        (None, Some(_)) => Some(default_path(&g.dirs.data, &sink.name())),
        (None, None) => None,
    };
    let o = Options {
        start_after: a.from.map(|s| s - 1),
        follow: a.follow,
        anchor_every: a.anchor_every,
        anchor_interval: Duration::from_secs(a.anchor_secs),
        batch: a.batch,
        poll: Duration::from_millis(200),
        cursor: state.map(|path| CursorFile { path }),
        attempts: a.attempts,
    };
    let mut note = |m: &str| eprintln!("gatehouse: {}", ipc_schema::inert::escaped(m));
    match run::run(&mut src, sink.as_mut(), &o, &mut note) {
        Ok(s) => {
            let msg = if g.json {
                serde_json::json!({"rows": s.rows, "anchors": s.anchors, "last": s.last, "sink": sink.name()})
                    .to_string()
            } else {
                format!(
                    "exported {} entries and {} anchors to {} (up to entry {})",
                    s.rows,
                    s.anchors,
                    sink.name(),
                    s.last
                )
            };
            if to_stdout {
                eprintln!("{msg}");
            } else {
                println!("{msg}");
            }
            ExitCode::SUCCESS
        }
        Err(e) => fail(&e.to_string()),
    }
}

#[derive(clap::Args)]
pub struct VerifyExportArgs {
    /// The JSON lines an export wrote (`-`: standard input).
    file: PathBuf,
    /// Also check every row's and anchor's MAC under the audit key (only on the machine and
    /// as the user that holds the log's key: a private secrets-helper computes them).
    #[arg(long)]
    with_key: bool,
}

pub fn verify_export(g: &Global, a: VerifyExportArgs) -> ExitCode {
    let mut macs = audit_store::verify::MacCheck::default();
    let report = if a.file.as_os_str() == "-" {
        check_keeping(std::io::stdin().lock(), &mut macs)
    } else {
        match std::fs::File::open(&a.file) {
            Ok(f) => check_keeping(std::io::BufReader::new(f), &mut macs),
            Err(e) => return fail(&format!("{}: {e}", a.file.display())),
        }
    };
    let mut report = match report {
        Ok(r) => r,
        Err(e) => return fail(&format!("{}: {e}", a.file.display())),
    };
    if a.with_key && report.intact() {
        // The key is named by the log's instance id: the anchors carry it.
        let Some(instance) = report.instance.clone() else {
            return fail(
                "the export has no anchor, so it names no audit log whose key could check it",
            );
        };
        let seal = match PrivateSeal::open(&g.dirs, &instance) {
            Ok(s) => s,
            Err(e) => return fail(&format!("the audit key of log {instance}: {e}")),
        };
        match macs.check(&seal, &instance) {
            Ok(None) => report.macs_checked = true,
            Ok(Some(b)) => {
                report.broken_at = Some(b.entry);
                report.reason = Some(b.reason);
            }
            Err(e) => {
                return fail(&format!(
                    "the secrets-helper could not compute the MACs: {e}"
                ))
            }
        }
    }
    if g.json {
        let mut v = serde_json::to_value(&report).expect("serializable");
        v["intact"] = report.intact().into();
        v["message"] = report.line().into();
        println!("{v}");
    } else {
        println!("{}", ipc_schema::inert::escaped(&report.line()));
    }
    if report.intact() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_FAILURE)
    }
}
