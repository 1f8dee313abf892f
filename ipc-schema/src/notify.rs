//! The notifier's channel: `gatehouse notify` watches for approval cards that wait while no
//! console is attached, and shows them on the desktop (and to a user's hook).
//!
//! The channel carries one request, [`NotifyRequest::Watch`], and the broker's events on it. It
//! cannot carry a decision, a policy change or a tool call: the notifier's table
//! ([`crate::route::NOTIFIER_TO_BROKER`]) has no such row, and the broker kills a notifier that
//! sends one. A decision still comes only from the ui channel, bound to the digest of what the
//! console showed (the notifier never sees the digest).

use crate::tool::{ProposalId, SessionId, ToolId};
use serde::{Deserialize, Serialize};

/// Notifier to broker.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotifyRequest {
    /// Stream [`NotifyReply::Event`]s on this request id until the connection closes. Answered
    /// first with [`NotifyReply::Watching`]; the cards already waiting while no console is
    /// attached follow at once.
    Watch,
}

/// What a notification may say about a waiting card: who, which tool, on what, until when.
/// Never the arguments (they may hold secrets or file content), never the diff, never the
/// digest (a decision must come from a console that showed the card itself).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct CardSummary {
    pub proposal: ProposalId,
    pub session: SessionId,
    pub tool: ToolId,
    /// The canonical target as the policy keys it (a path, a host, `program in cwd`, a server's
    /// tool): no query string, no argument value. Agent-chosen text: shown inert.
    pub target: String,
    pub expires_unix_ms: u64,
}

/// Why the broker tells the notifier a card no longer needs it.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settled {
    /// Decided on a console, expired (denied) or withdrawn by the agent's side.
    Closed,
    /// A console attached: it shows the card now.
    ConsoleAttached,
}

/// Something the notifier should do now.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub enum NotifyEvent {
    /// A card waits and no console is attached.
    Waiting(CardSummary),
    /// Take back what was shown for this card.
    Settled { proposal: ProposalId, why: Settled },
}

/// Broker to notifier.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub enum NotifyReply {
    Watching,
    Event(NotifyEvent),
}
