//! `policy apply --dry-run` and the check before every apply: the calls of the last days, as the
//! audit database keeps them (read directly, like `audit tail`), judged by the policy in force
//! and by the new document ([`policy::replay`] does the judging; this is the I/O and the text).
//! Nothing is re-run.
//!
//! What is printed for a person is inert ([`ipc_schema::inert`]): targets, tools and sessions
//! come from agents and third-party servers.

use crate::Global;
use audit_store as store;
use ipc_schema::inert::escaped;
use ipc_schema::ui::PolicyView;
use policy::compile::{compile, Policies};
use policy::doc::PolicyDoc;
use policy::protected::Protected;
use policy::replay::{self, Change, Example, Recorded, Replay, ReplayCall};

/// The replay of one new document.
pub struct Tried {
    pub replay: Replay,
    /// Tool rows in the window from before gatehouse kept call targets (not replayed).
    pub before_targets: u64,
    /// Stored targets that do not read (not judged; counted as a possible loosening).
    pub unreadable: u64,
    pub days: u32,
    /// The revision of the policy in force.
    pub revision: u64,
    /// The new document's revision, when it is not the one in force (an apply is refused).
    pub stale: Option<u64>,
}

/// Why a document could not be tried.
pub enum NotTried {
    /// The new document does not parse or validate (the broker refuses it whole, with its
    /// own reason).
    Invalid(String),
    /// Something else: the policy in force cannot be compiled here, the audit log cannot be
    /// read. An apply is refused rather than made without its check.
    Failed(String),
}

impl Tried {
    /// Whether an apply needs the person's yes: a verdict loosens, or cannot be known.
    pub fn needs_confirmation(&self) -> bool {
        self.unreadable > 0 || self.replay.needs_confirmation()
    }

    pub fn json(&self) -> serde_json::Value {
        let mut j = serde_json::to_value(&self.replay).expect("serialisable");
        j["days"] = self.days.into();
        j["revision_in_force"] = self.revision.into();
        j["stale_revision"] = self.stale.into();
        j["not_replayable"] = self.before_targets.into();
        j["unreadable"] = self.unreadable.into();
        j["changed"] = self.replay.changed().into();
        j["loosens"] = self.replay.groups.iter().any(|g| g.loosens()).into();
        j["needs_confirmation"] = self.needs_confirmation().into();
        j
    }
}

fn compiled(text: &str, protected: &Protected) -> Result<Policies, String> {
    let doc = PolicyDoc::parse(text)?;
    compile(&doc, protected)
}

/// Tries `text` on the calls of the last `days` days, against the policy in force (`view`, as
/// the broker shows it, with its remembered decisions).
pub fn try_on_history(
    g: &Global,
    view: &PolicyView,
    text: &str,
    days: u32,
) -> Result<Tried, NotTried> {
    // The same protected places the broker judges by: its own directories and the table.
    let protected = Protected::new(&g.dirs.own());
    // Judged as it would be applied: as the next revision (what its verdicts will name).
    let mut doc = PolicyDoc::parse(text).map_err(NotTried::Invalid)?;
    let stale = (doc.revision != view.revision).then_some(doc.revision);
    doc.revision = view.revision + 1;
    let after = compile(&doc, &protected).map_err(NotTried::Invalid)?;
    let before = match &view.error {
        Some(e) => Err(e.clone()),
        None => Ok(compiled(&view.document, &protected).map_err(|e| {
            NotTried::Failed(format!(
                "the policy in force (revision {}) does not compile here: {e}",
                view.revision
            ))
        })?),
    };
    let db = store::db_path(&g.dirs.data);
    let since = store::now_ms() - i64::from(days) * 86_400_000;
    let history = if db.exists() {
        store::open_ro(&db)
            .and_then(|c| Ok(store::replay::history(&c, since)?))
            .map_err(|e| NotTried::Failed(format!("the audit log cannot be read: {e}")))?
    } else {
        store::replay::History::default()
    };
    let mut unreadable = 0;
    let calls: Vec<Recorded> = history
        .calls
        .into_iter()
        .filter_map(|c| match ReplayCall::from_json(&c.call) {
            Ok(call) => Some(Recorded {
                seq: c.seq,
                ts_ms: c.ts_ms,
                session: c.session,
                call,
            }),
            Err(_) => {
                unreadable += 1;
                None
            }
        })
        .collect();
    let replay = replay::replay(
        before.as_ref().map_err(String::as_str),
        Ok(&after),
        &protected,
        &view.remembered,
        calls,
    );
    Ok(Tried {
        replay,
        before_targets: history.before_targets,
        unreadable,
        days,
        revision: view.revision,
        stale,
    })
}

fn plural(n: u64, one: &str) -> String {
    if n == 1 {
        format!("1 {one}")
    } else {
        format!("{n} {one}s")
    }
}

/// `YYYY-MM-DD HH:MM:SS UTC` of a unix time in milliseconds (`?` outside the calendar's range).
fn utc(ms: i64) -> String {
    match time::OffsetDateTime::from_unix_timestamp(ms.div_euclid(1000)) {
        Ok(t) => format!(
            "{:04}-{:02}-{:02} {:02}:{:02}:{:02} UTC",
            t.year(),
            u8::from(t.month()),
            t.day(),
            t.hour(),
            t.minute(),
            t.second()
        ),
        Err(_) => format!("? ({ms} ms)"),
    }
}

fn example(e: &Example) -> String {
    format!(
        "{}, session {} (audit entry {})",
        utc(e.ts_ms),
        e.session
            .as_deref()
            .map(escaped)
            .unwrap_or_else(|| "-".into()),
        e.seq
    )
}

/// The replay for a person: what would change, grouped by tool and target, with counts and
/// examples; every value from an agent made inert, one line each.
pub fn render(t: &Tried, new_label: &str) -> String {
    let r = &t.replay;
    let mut out = format!(
        "# {} tried on the calls of the last {} against policy revision {} in force (nothing is re-run)\n",
        escaped(new_label),
        plural(u64::from(t.days), "day"),
        t.revision
    );
    if let Some(rev) = t.stale {
        out.push_str(&format!(
            "its revision {rev} is stale (the policy in force is revision {}): an apply of it would be refused; judged as if it were made on revision {}\n",
            t.revision, t.revision
        ));
    }
    out.push_str(&format!(
        "{} replayed: {} unchanged, {} would change\n",
        plural(r.replayed, "call"),
        r.unchanged,
        r.changed()
    ));
    if t.before_targets > 0 {
        out.push_str(&format!(
            "{} of tool calls in the window are from before gatehouse kept call targets: not replayable\n",
            plural(t.before_targets, "audit row")
        ));
    }
    if t.unreadable > 0 {
        out.push_str(&format!(
            "{} could not be read: not judged\n",
            plural(t.unreadable, "stored call target")
        ));
    }
    if r.undecidable > 0 {
        out.push_str(&format!(
            "{} of third-party server tools cannot be judged: a rule matches their arguments, which the audit log does not keep, and the rules on them change\n",
            plural(r.undecidable, "call")
        ));
        for (tool, e) in &r.undecidable_examples {
            out.push_str(&format!("    e.g. {} {}\n", escaped(tool), example(e)));
        }
    }
    for change in [Change::NowRuns, Change::NowRefused, Change::NowAsks] {
        let groups: Vec<_> = r.groups.iter().filter(|g| g.change == change).collect();
        let n: u64 = groups.iter().map(|g| g.count).sum();
        if groups.is_empty() {
            out.push_str(&format!("{}: none\n", change.heading()));
            continue;
        }
        out.push_str(&format!("{}: {}\n", change.heading(), plural(n, "call")));
        for g in groups {
            out.push_str(&format!(
                "  {} {} (profile {}): {}, {} -> {}\n",
                escaped(&g.tool),
                escaped(&g.target),
                g.profile,
                plural(g.count, "call"),
                g.before.as_str(),
                g.after.as_str()
            ));
            out.push_str(&format!("    was: {}\n", escaped(&g.rule_before)));
            out.push_str(&format!("    now: {}\n", escaped(&g.rule_after)));
            for e in &g.examples {
                out.push_str(&format!("    e.g. {}\n", example(e)));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipc_schema::tool::{Action, ProfileName};
    use policy::replay::Group;

    #[test]
    fn dates_are_civil_utc() {
        assert_eq!(utc(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc(951_782_400_000 + 3_723_000), "2000-02-29 01:02:03 UTC");
        assert_eq!(utc(1_796_300_000_000), "2026-12-03 12:13:20 UTC");
    }

    #[test]
    fn a_hostile_target_and_session_are_one_inert_line_each() {
        let hostile = "/w/a\n  run_command x (profile default): 1 call\x1b[2J\u{202E}";
        let t = Tried {
            replay: Replay {
                replayed: 1,
                groups: vec![Group {
                    change: Change::NowRuns,
                    profile: ProfileName::default_profile(),
                    tool: "srv__x\x07".into(),
                    target: hostile.into(),
                    before: Action::Ask,
                    after: Action::Allow,
                    rule_before: "a".into(),
                    rule_after: format!("remembered {hostile}"),
                    count: 1,
                    examples: vec![Example {
                        seq: 9,
                        ts_ms: 0,
                        session: Some("s\n1".into()),
                    }],
                }],
                ..Replay::default()
            },
            before_targets: 2,
            unreadable: 0,
            days: 30,
            revision: 3,
            stale: None,
        };
        let out = render(&t, "next.toml");
        assert!(!out.contains(['\x1b', '\x07', '\u{202E}']), "{out}");
        assert_eq!(
            out,
            "# next.toml tried on the calls of the last 30 days against policy revision 3 in force (nothing is re-run)\n\
             1 call replayed: 0 unchanged, 1 would change\n\
             2 audit rows of tool calls in the window are from before gatehouse kept call targets: not replayable\n\
             would now run without asking: 1 call\n  \
             srv__x\\x07 /w/a\\n  run_command x (profile default): 1 call\\x1b[2J\\u{202E} (profile default): 1 call, ask -> allow\n    \
             was: a\n    \
             now: remembered /w/a\\n  run_command x (profile default): 1 call\\x1b[2J\\u{202E}\n    \
             e.g. 1970-01-01 00:00:00 UTC, session s\\n1 (audit entry 9)\n\
             would now be refused: none\n\
             would now ask: none\n"
        );
    }
}
