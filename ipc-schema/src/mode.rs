//! Session modes: how a session's Ask calls are answered. The human alone sets a mode (the
//! console, `gatehouse run --mode`, `gatehouse session mode`, or the profile's `mode = "..."`);
//! no message the gateway may send carries one (the route tables).
//!
//! A mode only changes what happens to a call the policy leaves at Ask. Deny, grants,
//! protected paths, rate limits, the ledger and the audit log hold in every mode; the decision
//! itself is [`on_ask`], the one place that maps a mode to what an Ask becomes.

use serde::{Deserialize, Serialize};

/// A session's mode.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[serde(rename_all = "kebab-case")]
pub enum SessionMode {
    /// Every Ask waits for the human's card (the default).
    #[default]
    Ask,
    /// An Ask runs as if allowed once, without a card (each such run says so in the audit log).
    FullAccess,
    /// Nobody is there to answer: an Ask is refused at once, nothing waits.
    Unattended,
}

impl SessionMode {
    pub const ALL: [SessionMode; 3] = [
        SessionMode::Ask,
        SessionMode::FullAccess,
        SessionMode::Unattended,
    ];

    /// The name used everywhere: CLI, policy, audit column, console.
    pub fn as_str(self) -> &'static str {
        match self {
            SessionMode::Ask => "ask",
            SessionMode::FullAccess => "full-access",
            SessionMode::Unattended => "unattended",
        }
    }

    pub fn from_name(s: &str) -> Option<SessionMode> {
        SessionMode::ALL.into_iter().find(|m| m.as_str() == s)
    }
}

impl std::fmt::Display for SessionMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

impl std::str::FromStr for SessionMode {
    type Err = String;
    fn from_str(s: &str) -> Result<SessionMode, String> {
        SessionMode::from_name(s).ok_or_else(|| {
            format!("unknown session mode {s:?} (the modes are ask, full-access and unattended)")
        })
    }
}

/// What a call the policy leaves at Ask becomes in a mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnAsk {
    /// A card, and the call waits for the human.
    Card,
    /// Runs as if allowed once, without a card.
    RunWithoutCard,
    /// Refused at once.
    Refuse,
}

/// The one mapping from a mode to what an Ask becomes. Only an Ask reaches this: an Allow or a
/// Deny is never looked up here, so no mode can turn a Deny into anything else.
pub fn on_ask(mode: SessionMode) -> OnAsk {
    match mode {
        SessionMode::Ask => OnAsk::Card,
        SessionMode::FullAccess => OnAsk::RunWithoutCard,
        SessionMode::Unattended => OnAsk::Refuse,
    }
}

/// What the agent (and the audit row) is told when an unattended session's Ask is refused.
pub fn unattended_refusal(session: &str, tool: &str, target: &str) -> String {
    format!(
        "refused: session {session} is unattended, and the policy asks before {tool} on {target}; nobody is there to answer (a human can change the mode with `gatehouse session mode {session} ask`)"
    )
}

/// The audit note of a call that ran without a card.
pub fn full_access_note(session: &str) -> String {
    format!("ran without a card: session {session} is in full-access mode")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_names_are_refused() {
        for m in SessionMode::ALL {
            assert_eq!(m.as_str().parse::<SessionMode>(), Ok(m));
            assert_eq!(m.to_string(), m.as_str());
        }
        assert_eq!(
            "full_access".parse::<SessionMode>(),
            Err("unknown session mode \"full_access\" (the modes are ask, full-access and unattended)".into())
        );
        assert_eq!(SessionMode::default(), SessionMode::Ask);
    }

    #[test]
    fn serde_uses_the_same_names() {
        #[derive(Deserialize, Serialize)]
        struct Doc {
            mode: SessionMode,
        }
        let d: Doc = serde_json::from_str(r#"{"mode":"full-access"}"#).unwrap();
        assert_eq!(d.mode, SessionMode::FullAccess);
        assert_eq!(
            serde_json::to_string(&Doc {
                mode: SessionMode::Unattended
            })
            .unwrap(),
            r#"{"mode":"unattended"}"#
        );
        assert!(serde_json::from_str::<Doc>(r#"{"mode":"yolo"}"#).is_err());
    }

    #[test]
    fn each_mode_answers_an_ask_its_own_way() {
        assert_eq!(on_ask(SessionMode::Ask), OnAsk::Card);
        assert_eq!(on_ask(SessionMode::FullAccess), OnAsk::RunWithoutCard);
        assert_eq!(on_ask(SessionMode::Unattended), OnAsk::Refuse);
    }

    #[test]
    fn the_unattended_refusal_names_session_tool_target_and_the_way_out() {
        let m = unattended_refusal("s1", "write_file", "/p/a");
        assert_eq!(
            m,
            "refused: session s1 is unattended, and the policy asks before write_file on /p/a; nobody is there to answer (a human can change the mode with `gatehouse session mode s1 ask`)"
        );
    }
}
