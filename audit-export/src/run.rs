//! The export loop: read a snapshot after the cursor, hand it to the sink, move the cursor once
//! the sink has it, and add an anchor when the rows reach the sealed head.

use crate::cursor::{Cursor, CursorFile};
use crate::otlp::{Collector, SendError};
use crate::record::{Anchor, ExportRecord};
use crate::source::Source;
use crate::ExportError;
use std::io::Write;
use std::time::{Duration, Instant};

/// Where records go.
pub trait Sink {
    /// What the cursor file is bound to (`jsonl PATH`, `otlp URL`).
    fn name(&self) -> String;
    /// Delivers `records` in order; Ok once the sink has all of them.
    fn deliver(&mut self, instance: &str, records: &[ExportRecord]) -> Result<(), SendError>;
}

/// JSON lines to stdout or a file (appended to; synced before the cursor moves).
pub struct Lines<W: Write> {
    pub out: W,
    pub name: String,
    /// The file to sync before the cursor moves (None for stdout).
    pub sync: Option<std::fs::File>,
}

impl<W: Write> Sink for Lines<W> {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn deliver(&mut self, _: &str, records: &[ExportRecord]) -> Result<(), SendError> {
        let mut text = String::new();
        for r in records {
            text.push_str(&r.json_line());
        }
        let fatal = |e: std::io::Error| SendError::Fatal(format!("{}: {e}", self.name));
        self.out.write_all(text.as_bytes()).map_err(fatal)?;
        self.out.flush().map_err(fatal)?;
        if let Some(f) = &self.sync {
            f.sync_data().map_err(fatal)?;
        }
        Ok(())
    }
}

/// OTLP/HTTP to a collector.
pub struct Otlp(pub Collector);

impl Sink for Otlp {
    fn name(&self) -> String {
        format!("otlp {}", self.0.url)
    }

    fn deliver(&mut self, instance: &str, records: &[ExportRecord]) -> Result<(), SendError> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        self.0.send(&crate::otlp::request(instance, records, now))
    }
}

pub struct Options {
    /// Export rows after this position (`--from SEQ` is SEQ - 1); None: from the cursor, or
    /// from the first row.
    pub start_after: Option<i64>,
    /// Keep going as rows are committed (like `tail -f`).
    pub follow: bool,
    /// An anchor once this many rows went out since the last one ...
    pub anchor_every: u64,
    /// ... or this long after the last one, with rows since; and always at the end of a run
    /// without `follow`.
    pub anchor_interval: Duration,
    /// Rows per delivery.
    pub batch: u32,
    /// How often to look for new rows when caught up.
    pub poll: Duration,
    pub cursor: Option<CursorFile>,
    /// Without `follow`: how many times one delivery is tried before the run gives up (the
    /// cursor keeps what went out). With `follow` a delivery is retried until it goes through.
    pub attempts: u32,
}

/// What a run sent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Summary {
    pub rows: u64,
    pub anchors: u64,
    /// The last row the sink has.
    pub last: i64,
}

const BACKOFF_FIRST: Duration = Duration::from_millis(200);
const BACKOFF_MAX: Duration = Duration::from_secs(5);

/// Runs the export until caught up (or, with `follow`, until the process is stopped).
/// `note` hears about retries (one line per change of state, for stderr).
pub fn run(
    src: &mut Source,
    sink: &mut dyn Sink,
    o: &Options,
    note: &mut dyn FnMut(&str),
) -> Result<Summary, ExportError> {
    let sink_name = sink.name();
    let mut instance = src.instance()?;
    let saved = match &o.cursor {
        Some(c) => c.load_for(&instance, &sink_name)?,
        None => None,
    };
    let mut pos = o
        .start_after
        .or(saved.as_ref().map(|c| c.exported))
        .unwrap_or(0)
        .max(0);
    let mut summary = Summary {
        last: pos,
        ..Summary::default()
    };
    let mut since_anchor: u64 = 0;
    let mut last_anchor = Instant::now();
    let mut anchored_at: Option<i64> = None;
    loop {
        let snap = src.snapshot(pos, o.batch.max(1))?;
        if instance.is_empty() {
            instance = src.instance()?;
        }
        let end = snap.end(pos);
        let caught_up = snap.caught_up(pos);
        let rows = snap.rows.len() as u64;
        let mut records: Vec<ExportRecord> = snap
            .rows
            .into_iter()
            .map(|r| ExportRecord::Row(Box::new(r)))
            .collect();
        let pending = since_anchor + rows;
        let due = pending >= o.anchor_every.max(1)
            || (pending > 0 && last_anchor.elapsed() >= o.anchor_interval)
            || (!o.follow && anchored_at != Some(end));
        let anchor = match (&snap.head, caught_up && due) {
            (Some(h), true) => {
                records.push(ExportRecord::Anchor(Anchor::new(&instance, h)));
                true
            }
            _ => false,
        };
        if !records.is_empty() {
            deliver(sink, &instance, &records, o, pos, note)?;
            pos = end;
            summary.rows += rows;
            summary.last = end;
            since_anchor = pending;
            if anchor {
                summary.anchors += 1;
                since_anchor = 0;
                last_anchor = Instant::now();
                anchored_at = Some(end);
            }
            if let Some(c) = &o.cursor {
                c.store(&Cursor {
                    instance: instance.clone(),
                    sink: sink_name.clone(),
                    exported: pos,
                })?;
            }
        }
        if caught_up {
            if !o.follow {
                return Ok(summary);
            }
            std::thread::sleep(o.poll);
        }
    }
}

/// Delivers one batch, retrying with backoff; never moves on without it.
fn deliver(
    sink: &mut dyn Sink,
    instance: &str,
    records: &[ExportRecord],
    o: &Options,
    pos: i64,
    note: &mut dyn FnMut(&str),
) -> Result<(), ExportError> {
    let mut wait = BACKOFF_FIRST;
    let mut tries = 0u32;
    let mut said: Option<String> = None;
    loop {
        tries += 1;
        match sink.deliver(instance, records) {
            Ok(()) => {
                if said.is_some() {
                    note(&format!(
                        "{}: delivered again from entry {}",
                        sink.name(),
                        pos + 1
                    ));
                }
                return Ok(());
            }
            Err(SendError::Fatal(e)) => {
                return Err(ExportError::Sink(format!(
                    "{e}; stopped with entries up to {pos} exported"
                )))
            }
            Err(SendError::Retry(e)) => {
                if !o.follow && tries >= o.attempts.max(1) {
                    return Err(ExportError::GaveUp(format!(
                        "{e}; gave up after {tries} tries with entries up to {pos} exported (run again to resume{})",
                        if o.cursor.is_some() { " from the cursor" } else { "" }
                    )));
                }
                if said.as_deref() != Some(e.as_str()) {
                    note(&format!("{e}; retrying from entry {}", pos + 1));
                    said = Some(e);
                }
                std::thread::sleep(wait);
                wait = (wait * 2).min(BACKOFF_MAX);
            }
        }
    }
}
