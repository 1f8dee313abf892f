//! Changing a session's mode from the console: `M` on the selected card's session (or, with no
//! card, the session marked in the sessions pane, moved with `,` and `.`), then `a`, `f` or `u`
//! for ask, full-access or unattended, then `y` to confirm. Any other key cancels; nothing is
//! sent before the `y`. The broker answers the session's waiting cards as the new mode would.

use ipc_schema::mode::SessionMode;
use ipc_schema::tool::SessionId;

/// The key that starts a mode change.
pub const MODE_KEY: char = 'M';
/// Keys that move the sessions pane's mark (the session `M` acts on when no card is shown).
pub const SESSION_PREV: char = ',';
pub const SESSION_NEXT: char = '.';

/// A mode change under way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModePrompt {
    /// Which mode for `session` (now `current`)?
    Choose {
        session: SessionId,
        current: SessionMode,
    },
    /// Switch `session` from `from` to `to`? (`y` sends it.)
    Confirm {
        session: SessionId,
        from: SessionMode,
        to: SessionMode,
    },
}

/// The mode a key names in the prompt.
pub fn mode_for(key: char) -> Option<SessionMode> {
    match key {
        'a' => Some(SessionMode::Ask),
        'f' => Some(SessionMode::FullAccess),
        'u' => Some(SessionMode::Unattended),
        _ => None,
    }
}

/// What a switch to `to` does, said before it is confirmed.
pub fn consequence(to: SessionMode) -> &'static str {
    match to {
        SessionMode::Ask => "every Ask waits for a card again",
        SessionMode::FullAccess => {
            "what the policy asks about runs without a card, and its waiting cards run now (Deny, grants and protected paths still hold)"
        }
        SessionMode::Unattended => {
            "what the policy asks about is refused at once, and its waiting cards are refused now"
        }
    }
}

impl ModePrompt {
    /// The status line while the prompt is open.
    pub fn text(&self) -> String {
        match self {
            ModePrompt::Choose { session, current } => format!(
                "mode of session {} (now {current}): a ask · f full-access · u unattended · any other key cancels",
                short(session)
            ),
            ModePrompt::Confirm { session, from, to } => format!(
                "switch session {} from {from} to {to}? y switches, any other key cancels. Then {}",
                short(session),
                consequence(*to)
            ),
        }
    }
}

pub fn short(s: &SessionId) -> String {
    ipc_schema::inert::escaped(&s.0).chars().take(8).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prompt_names_the_session_the_modes_and_what_a_switch_does() {
        let s = SessionId("0123456789abcdef".into());
        let p = ModePrompt::Choose {
            session: s.clone(),
            current: SessionMode::Ask,
        };
        assert_eq!(
            p.text(),
            "mode of session 01234567 (now ask): a ask · f full-access · u unattended · any other key cancels"
        );
        let c = ModePrompt::Confirm {
            session: s,
            from: SessionMode::Ask,
            to: SessionMode::Unattended,
        };
        assert!(c.text().starts_with(
            "switch session 01234567 from ask to unattended? y switches, any other key cancels. Then what the policy asks about is refused at once"
        ));
        assert_eq!(mode_for('f'), Some(SessionMode::FullAccess));
        assert_eq!(mode_for('y'), None);
    }
}
