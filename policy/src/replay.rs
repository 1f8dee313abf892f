//! A policy tried on history: the calls the audit log recorded, judged again by the policy in
//! force and by a new one, and what would change, grouped by tool and target.
//!
//! Pure: the caller reads the recorded calls (audit-store's `call_targets`) and the two
//! documents; nothing here re-runs a call or touches a file. Both policies are judged with the
//! same protected paths and the same remembered "always" decisions, the way the broker judges a
//! live call ([`crate::eval::evaluate_call`], then [`crate::eval::with_standing_decisions`]).
//! "Allow for this session" choices are not replayed: they ended with their sessions, and they
//! would apply to both policies alike.

use crate::compile::Policies;
use crate::eval::{self, Target};
use crate::protected::Protected;
use ipc_schema::tool::{Action, ProfileName, ToolId, Verdict};
use ipc_schema::ui::Remembered;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// What the broker stores of a call it judged, beside the call's audit row: exactly the
/// evaluation's input. No file content, no command arguments, no server tool's arguments (see
/// [`Target`]).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct ReplayCall {
    pub profile: ProfileName,
    pub tool: ToolId,
    pub target: Target,
}

impl ReplayCall {
    /// The stored form (JSON: a server tool's target has no arguments, which JSON can say).
    pub fn to_json(&self) -> String {
        Self::json_of(&self.profile, &self.tool, &self.target)
    }

    /// The stored form of a call being judged, without copying it (what the broker writes).
    pub fn json_of(profile: &ProfileName, tool: &ToolId, target: &Target) -> String {
        #[derive(Serialize)]
        struct Borrowed<'a> {
            profile: &'a ProfileName,
            tool: &'a ToolId,
            target: &'a Target,
        }
        serde_json::to_string(&Borrowed {
            profile,
            tool,
            target,
        })
        .expect("a replay call always serialises")
    }

    pub fn from_json(text: &str) -> Result<ReplayCall, String> {
        serde_json::from_str(text).map_err(|e| format!("a stored call target does not read: {e}"))
    }
}

/// One call from the log: its audit row and what was judged.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub seq: i64,
    pub ts_ms: i64,
    pub session: Option<String>,
    pub call: ReplayCall,
}

/// The policy a call is judged by: compiled, or why there is none (then every call is refused,
/// as the broker refuses them while its policy is invalid).
pub type Judge<'a> = Result<&'a Policies, &'a str>;

/// How a call's verdict would change.
#[derive(Serialize, Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum Change {
    /// Was asked or refused; would run without asking.
    NowRuns,
    /// Would be refused.
    NowRefused,
    /// Ran without asking, or was refused; would ask.
    NowAsks,
}

impl Change {
    fn of(before: Action, after: Action) -> Option<Change> {
        match (before, after) {
            (b, a) if b == a => None,
            (_, Action::Allow) => Some(Change::NowRuns),
            (_, Action::Deny) => Some(Change::NowRefused),
            (_, Action::Ask) => Some(Change::NowAsks),
        }
    }

    pub fn heading(self) -> &'static str {
        match self {
            Change::NowRuns => "would now run without asking",
            Change::NowRefused => "would now be refused",
            Change::NowAsks => "would now ask",
        }
    }
}

/// Where a call is in the log.
#[derive(Serialize, Debug, Clone, PartialEq, Eq)]
pub struct Example {
    pub seq: i64,
    pub ts_ms: i64,
    pub session: Option<String>,
}

/// How many examples each group keeps (the newest).
pub const EXAMPLES: usize = 3;

/// The calls of one tool on one target (in one profile) whose verdict would change alike.
#[derive(Serialize, Debug, Clone, PartialEq, Eq)]
pub struct Group {
    pub change: Change,
    pub profile: ProfileName,
    pub tool: String,
    /// [`Target::key`]: what cards show and remembered decisions match.
    pub target: String,
    #[serde(serialize_with = "action_word")]
    pub before: Action,
    #[serde(serialize_with = "action_word")]
    pub after: Action,
    /// The rules that decide, in the policy in force and in the new one.
    pub rule_before: String,
    pub rule_after: String,
    pub count: u64,
    /// Newest first, at most [`EXAMPLES`].
    pub examples: Vec<Example>,
}

/// An action as the policy file and the audit log write it (`allow`, `ask`, `deny`).
fn action_word<S: serde::Serializer>(a: &Action, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(a.as_str())
}

impl Group {
    /// Whether it gives calls more than they had: an Ask or Deny becomes an Allow, a Deny an
    /// Ask.
    pub fn loosens(&self) -> bool {
        self.after < self.before
    }
}

/// The outcome of a replay.
#[derive(Serialize, Debug, Clone, Default, PartialEq, Eq)]
pub struct Replay {
    /// Calls judged by both policies.
    pub replayed: u64,
    /// Of those, the ones whose verdict stays.
    pub unchanged: u64,
    /// Calls of third-party server tools that a rule matches by argument, in either policy,
    /// where the two policies' rules on that tool differ: their arguments are not kept, so
    /// they cannot be judged. A loosening cannot be ruled out for them.
    pub undecidable: u64,
    pub undecidable_examples: Vec<(String, Example)>,
    /// Ordered by change, then by count (most first), then tool and target.
    pub groups: Vec<Group>,
}

impl Replay {
    /// Whether an apply must be confirmed: something loosens, or may (undecidable calls).
    pub fn needs_confirmation(&self) -> bool {
        self.undecidable > 0 || self.groups.iter().any(Group::loosens)
    }

    /// The number of calls whose verdict changes.
    pub fn changed(&self) -> u64 {
        self.groups.iter().map(|g| g.count).sum()
    }
}

/// The verdict of `judge` on `call`, as the broker would give it now.
fn verdict_of(
    judge: Judge,
    protected: &Protected,
    remembered: &[Remembered],
    call: &ReplayCall,
) -> Verdict {
    let policy = match judge {
        Err(why) => return deny(format!("the policy is invalid: {why}")),
        Ok(all) => match all.get(&call.profile) {
            Some(p) => p,
            None => return deny(crate::unknown_profile(&call.profile, all)),
        },
    };
    let v = eval::evaluate_call(policy, protected, &call.tool, &call.target);
    eval::with_standing_decisions(
        v,
        remembered,
        &call.profile,
        &call.tool,
        &call.target.key(),
        false,
    )
}

fn deny(rule: String) -> Verdict {
    Verdict {
        action: Action::Deny,
        rule,
    }
}

/// Whether the two policies might judge a server tool's call differently by its arguments
/// (which are not kept): a rule matches arguments, and the rules on that tool differ.
fn undecidable(before: Judge, after: Judge, call: &ReplayCall) -> bool {
    let Target::Server { server, tool, .. } = &call.target else {
        return false;
    };
    let rules = |j: Judge| {
        let p = j.ok()?.get(&call.profile)?;
        Some((
            crate::servers::depends_on_arguments(p, server, tool),
            crate::servers::deciding_rules(p, server, tool),
        ))
    };
    match (rules(before), rules(after)) {
        (Some((db, rb)), Some((da, ra))) => (db || da) && rb != ra,
        // One side refuses every call of the profile: that verdict needs no arguments.
        _ => false,
    }
}

/// Judges every recorded call by `before` (the policy in force) and `after` (the new one).
pub fn replay(
    before: Judge,
    after: Judge,
    protected: &Protected,
    remembered: &[Remembered],
    calls: impl IntoIterator<Item = Recorded>,
) -> Replay {
    type Key = (Change, ProfileName, String, String, Action, Action);
    let mut out = Replay::default();
    let mut groups: BTreeMap<Key, Group> = BTreeMap::new();
    for rec in calls {
        let example = Example {
            seq: rec.seq,
            ts_ms: rec.ts_ms,
            session: rec.session.clone(),
        };
        if undecidable(before, after, &rec.call) {
            out.undecidable += 1;
            out.undecidable_examples
                .push((rec.call.tool.name(), example));
            continue;
        }
        out.replayed += 1;
        let b = verdict_of(before, protected, remembered, &rec.call);
        let a = verdict_of(after, protected, remembered, &rec.call);
        let Some(change) = Change::of(b.action, a.action) else {
            out.unchanged += 1;
            continue;
        };
        let (tool, target) = (rec.call.tool.name(), rec.call.target.key());
        let key = (
            change,
            rec.call.profile.clone(),
            tool.clone(),
            target.clone(),
            b.action,
            a.action,
        );
        let g = groups.entry(key).or_insert_with(|| Group {
            change,
            profile: rec.call.profile.clone(),
            tool,
            target,
            before: b.action,
            after: a.action,
            rule_before: String::new(),
            rule_after: String::new(),
            count: 0,
            examples: Vec::new(),
        });
        g.count += 1;
        // The newest call's rules and the newest examples, whatever order the calls came in.
        if g.examples.first().is_none_or(|e| e.seq < example.seq) {
            g.rule_before = b.rule;
            g.rule_after = a.rule;
        }
        g.examples.push(example);
        g.examples.sort_by_key(|e| std::cmp::Reverse(e.seq));
        g.examples.truncate(EXAMPLES);
    }
    out.undecidable_examples
        .sort_by_key(|(_, e)| std::cmp::Reverse(e.seq));
    out.undecidable_examples.truncate(EXAMPLES);
    out.groups = groups.into_values().collect();
    out.groups.sort_by(|x, y| {
        (x.change, std::cmp::Reverse(x.count), &x.tool, &x.target).cmp(&(
            y.change,
            std::cmp::Reverse(y.count),
            &y.tool,
            &y.target,
        ))
    });
    out
}

#[cfg(test)]
mod tests;
