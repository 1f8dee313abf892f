//! What a notification and the hook say about a waiting card, from the broker's
//! [`CardSummary`] (which holds no argument value, no diff, no digest).
//!
//! The session, tool and target come from the agent's side: each is made inert
//! ([`ipc_schema::inert::escaped`]: control characters, line breaks, bidi overrides become
//! visible escapes) and cut to a length a notification can show. The desktop body is also
//! escaped for the notification server's markup (`<b>`, `<a href>`), so a target cannot
//! format itself or carry a link.

use ipc_schema::notify::CardSummary;
use serde::Serialize;

/// The longest a field may be, in characters, before it is cut (and says so).
pub const FIELD_MAX: usize = 200;

/// One card as the notifier tells it: the hook's stdin is this as JSON (one object, then EOF).
#[derive(Serialize, Debug, Clone, PartialEq, Eq)]
pub struct Shown {
    /// Always `"waiting"`: a card waits for a decision on the console.
    pub event: &'static str,
    /// The card's number, as the console shows it (`#N`).
    pub proposal: u64,
    pub session: String,
    pub tool: String,
    pub target: String,
    pub expires_unix_ms: u64,
    /// Where the decision is made: always the console (`gatehouse ui`).
    pub decide_with: &'static str,
}

/// `s` inert and at most [`FIELD_MAX`] characters.
pub fn field(s: &str) -> String {
    let e = ipc_schema::inert::escaped(s);
    let n = e.chars().count();
    if n <= FIELD_MAX {
        return e;
    }
    let cut: String = e.chars().take(FIELD_MAX).collect();
    format!("{cut}... ({} more characters)", n - FIELD_MAX)
}

impl Shown {
    pub fn of(c: &CardSummary) -> Shown {
        Shown {
            event: "waiting",
            proposal: c.proposal.0,
            session: field(&c.session.0),
            tool: field(&c.tool.name()),
            target: field(&c.target),
            expires_unix_ms: c.expires_unix_ms,
            decide_with: "gatehouse ui",
        }
    }

    pub fn json(&self) -> String {
        serde_json::to_string(self).expect("a summary always serializes")
    }

    /// The notification's title.
    pub fn title(&self) -> String {
        format!("gatehouse: {} waits for you", self.tool)
    }

    /// The notification's body, escaped for the server's markup.
    pub fn body(&self) -> String {
        markup_escaped(&format!(
            "Session {} asks to run {} on {} (card #{}). Decide on the console.",
            self.session, self.tool, self.target, self.proposal
        ))
    }
}

/// `s` with the three characters the notification spec's markup gives meaning escaped.
pub fn markup_escaped(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for ch in s.chars() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipc_schema::tool::{ProposalId, SessionId, ToolName};

    #[test]
    fn agent_text_is_inert_cut_and_markup_escaped() {
        let c = CardSummary {
            proposal: ProposalId(7),
            session: SessionId("s-1\u{202E}gpj.exe".into()),
            tool: ToolName::WriteFile.into(),
            target: format!("/w/<b>a</b>&\x1b[31m\n{}", "x".repeat(300)),
            expires_unix_ms: 5,
        };
        let s = Shown::of(&c);
        assert_eq!(s.session, "s-1\\u{202E}gpj.exe");
        assert!(
            s.target.starts_with("/w/<b>a</b>&\\x1b[31m\\n"),
            "{}",
            s.target
        );
        assert!(
            s.target.ends_with("... (122 more characters)"),
            "{}",
            s.target
        );
        let body = s.body();
        assert!(
            body.contains("/w/&lt;b&gt;a&lt;/b&gt;&amp;\\x1b[31m\\n"),
            "{body}"
        );
        assert!(!body.contains('<') && !body.contains('\n'));
        assert_eq!(s.title(), "gatehouse: write_file waits for you");
        let v: serde_json::Value = serde_json::from_str(&s.json()).unwrap();
        assert_eq!(v["event"], "waiting");
        assert_eq!(v["proposal"], 7);
        assert_eq!(v["tool"], "write_file");
        assert_eq!(v["decide_with"], "gatehouse ui");
        // Exactly these fields: nothing else a hook could forward.
        let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
        assert_eq!(
            keys,
            [
                "decide_with",
                "event",
                "expires_unix_ms",
                "proposal",
                "session",
                "target",
                "tool"
            ]
        );
    }
}
