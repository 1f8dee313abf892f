//! Checking an export read back (`gatehouse audit verify-export`): the chain recomputed from
//! the records alone, by audit-store's [`ChainWalk`].

use crate::record::ExportRecord;
use audit_store::verify::{ChainWalk, MacCheck};
use serde::Serialize;
use std::io::BufRead;

/// What the check found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ExportReport {
    pub entries: u64,
    pub anchors: u64,
    /// The count of the last anchor (rows after it are not covered by a seal in the export).
    pub anchored: Option<u64>,
    pub broken_at: Option<u64>,
    pub reason: Option<String>,
    /// The log's instance id, as the anchors name it (all must name the same).
    pub instance: Option<String>,
    /// Whether the MACs were checked under the audit key (`--with-key`).
    pub macs_checked: bool,
}

impl ExportReport {
    pub fn intact(&self) -> bool {
        self.broken_at.is_none()
    }

    pub fn line(&self) -> String {
        if let Some(n) = self.broken_at {
            return format!(
                "the export is broken at entry {n}: {}",
                self.reason.as_deref().unwrap_or("")
            );
        }
        let cover = match self.anchored {
            None => "no anchor: a cut tail would not show".to_string(),
            Some(a) if a == self.entries => format!("the last anchor covers all {a}"),
            Some(a) => format!(
                "the last anchor covers {a}; the {} after it are not covered yet",
                self.entries - a
            ),
        };
        let macs = if self.macs_checked {
            "every MAC checked under the audit key"
        } else {
            "the MACs need the audit key and are not checked"
        };
        format!("{} entries, chain intact ({cover}; {macs})", self.entries)
    }
}

/// Reads JSON lines from `input` and walks the chain from entry 1. A line that is not a record
/// breaks the export at the entry it would have been.
pub fn check(input: impl BufRead) -> std::io::Result<ExportReport> {
    check_keeping(input, &mut MacCheck::default())
}

/// [`check`], keeping every row's and anchor's MAC in `macs` for a check under the key.
pub fn check_keeping(input: impl BufRead, macs: &mut MacCheck) -> std::io::Result<ExportReport> {
    let mut walk = ChainWalk::default();
    let mut fail = None;
    let mut instance: Option<String> = None;
    for (i, line) in input.lines().enumerate() {
        let line = line?;
        let step = match serde_json::from_str::<ExportRecord>(&line) {
            Err(e) => Err((
                walk.entries() + 1,
                format!("line {} is not an export record: {e}", i + 1),
            )),
            Ok(ExportRecord::Row(r)) => walk
                .row(&r)
                .map(|_| macs.row(&r))
                .map_err(|b| (b.entry, b.reason)),
            Ok(ExportRecord::Anchor(a)) => match &instance {
                Some(i) if *i != a.instance => Err((
                    walk.entries(),
                    format!(
                        "an anchor names audit log {}, an earlier one {i}",
                        a.instance
                    ),
                )),
                _ => {
                    instance = Some(a.instance.clone());
                    walk.anchor(a.count, &a.head)
                        .map(|_| macs.anchor(a.count, &a.head, &a.mac))
                        .map_err(|b| (b.entry, b.reason))
                }
            },
        };
        if let Err(f) = step {
            fail = Some(f);
            break;
        }
    }
    let (broken_at, reason) = match fail {
        Some((n, why)) => (Some(n), Some(why)),
        None => (None, None),
    };
    Ok(ExportReport {
        entries: walk.entries(),
        anchors: walk.anchors(),
        anchored: walk.anchored(),
        broken_at,
        reason,
        instance,
        macs_checked: false,
    })
}
