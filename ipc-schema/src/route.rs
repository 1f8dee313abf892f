//! The route table: which message kinds each role may send to the broker, and which the broker
//! may send to each role. The broker checks [`may_send_to_broker`] on every frame it reads; a
//! frame outside the table gets its sender killed. Helpers check [`broker_may_send`] on what they
//! receive, so a confused broker cannot make a helper do another helper's job.

use crate::{Body, Role};
use serde::{Deserialize, Serialize};

/// A message's kind: [`Body`] without its payload.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    Ping,
    Pong,
    Hello,
    Error,
    Doctor,
    DoctorReport,
    Ui,
    UiReply,
    ToolCall,
    ToolReply,
    Fs,
    FsReply,
    Net,
    NetReply,
    Exec,
    ExecReply,
    Secrets,
    SecretsReply,
}

impl Body {
    pub fn kind(&self) -> Kind {
        match self {
            Body::Ping { .. } => Kind::Ping,
            Body::Pong => Kind::Pong,
            Body::Hello(_) => Kind::Hello,
            Body::Error(_) => Kind::Error,
            Body::Doctor => Kind::Doctor,
            Body::DoctorReport(_) => Kind::DoctorReport,
            Body::Ui(_) => Kind::Ui,
            Body::UiReply(_) => Kind::UiReply,
            Body::ToolCall(_) => Kind::ToolCall,
            Body::ToolReply(_) => Kind::ToolReply,
            Body::Fs(_) => Kind::Fs,
            Body::FsReply(_) => Kind::FsReply,
            Body::Net(_) => Kind::Net,
            Body::NetReply(_) => Kind::NetReply,
            Body::Exec(_) => Kind::Exec,
            Body::ExecReply(_) => Kind::ExecReply,
            Body::Secrets(_) => Kind::Secrets,
            Body::SecretsReply(_) => Kind::SecretsReply,
        }
    }
}

/// What each role may send to the broker. The gateway (the agent's channel) may send tool calls
/// and pings only: never a decision, never a policy change, never a helper's message.
const TO_BROKER: &[(Role, &[Kind])] = &[
    (Role::Ui, &[Kind::Ping, Kind::Doctor, Kind::Ui]),
    (Role::Gateway, &[Kind::Ping, Kind::ToolCall]),
    (
        Role::Fs,
        &[Kind::Hello, Kind::Pong, Kind::Error, Kind::FsReply],
    ),
    (
        Role::Net,
        &[Kind::Hello, Kind::Pong, Kind::Error, Kind::NetReply],
    ),
    (
        Role::Exec,
        &[Kind::Hello, Kind::Pong, Kind::Error, Kind::ExecReply],
    ),
    (
        Role::Secrets,
        &[Kind::Hello, Kind::Pong, Kind::Error, Kind::SecretsReply],
    ),
];

/// What the broker may send to each role.
const FROM_BROKER: &[(Role, &[Kind])] = &[
    (
        Role::Ui,
        &[Kind::Pong, Kind::Error, Kind::DoctorReport, Kind::UiReply],
    ),
    (Role::Gateway, &[Kind::Pong, Kind::Error, Kind::ToolReply]),
    (Role::Fs, &[Kind::Ping, Kind::Fs]),
    (Role::Net, &[Kind::Ping, Kind::Net]),
    (Role::Exec, &[Kind::Ping, Kind::Exec]),
    (Role::Secrets, &[Kind::Ping, Kind::Secrets]),
];

fn lookup(table: &[(Role, &'static [Kind])], role: Role) -> &'static [Kind] {
    table
        .iter()
        .find(|(r, _)| *r == role)
        .map(|(_, kinds)| *kinds)
        .unwrap_or(&[])
}

/// May a peer in `from` send a message of `kind` to the broker?
pub fn may_send_to_broker(from: Role, kind: Kind) -> bool {
    lookup(TO_BROKER, from).contains(&kind)
}

/// May the broker send a message of `kind` to a peer in `to`?
pub fn broker_may_send(to: Role, kind: Kind) -> bool {
    lookup(FROM_BROKER, to).contains(&kind)
}

/// The kinds `from` may send to the broker (for `doctor` and documentation).
pub fn kinds_to_broker(from: Role) -> &'static [Kind] {
    lookup(TO_BROKER, from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gateway_never_carries_decisions_policy_or_helper_messages() {
        for kind in [
            Kind::Ui,
            Kind::Doctor,
            Kind::Hello,
            Kind::Fs,
            Kind::FsReply,
            Kind::Net,
            Kind::NetReply,
            Kind::Exec,
            Kind::ExecReply,
            Kind::Secrets,
            Kind::SecretsReply,
            Kind::UiReply,
            Kind::ToolReply,
        ] {
            assert!(!may_send_to_broker(Role::Gateway, kind), "{kind:?}");
        }
        assert!(may_send_to_broker(Role::Gateway, Kind::ToolCall));
    }

    #[test]
    fn helpers_send_only_their_own_replies() {
        for helper in Role::HELPERS {
            for kind in [Kind::Ui, Kind::ToolCall, Kind::Doctor, Kind::Ping] {
                assert!(!may_send_to_broker(helper, kind), "{helper} {kind:?}");
            }
        }
        assert!(!may_send_to_broker(Role::Fs, Kind::NetReply));
        assert!(!may_send_to_broker(Role::Net, Kind::SecretsReply));
        assert!(!may_send_to_broker(Role::Exec, Kind::FsReply));
        assert!(!may_send_to_broker(Role::Secrets, Kind::ExecReply));
    }

    #[test]
    fn broker_sends_helpers_only_their_requests() {
        assert!(broker_may_send(Role::Fs, Kind::Fs));
        assert!(!broker_may_send(Role::Fs, Kind::Net));
        assert!(!broker_may_send(Role::Net, Kind::Secrets));
        assert!(!broker_may_send(Role::Gateway, Kind::UiReply));
        assert!(!broker_may_send(Role::Gateway, Kind::DoctorReport));
    }

    #[test]
    fn every_role_has_a_row_in_both_tables() {
        for role in [
            Role::Ui,
            Role::Gateway,
            Role::Fs,
            Role::Net,
            Role::Exec,
            Role::Secrets,
        ] {
            assert!(!kinds_to_broker(role).is_empty(), "{role}");
            assert!(!lookup(FROM_BROKER, role).is_empty(), "{role}");
        }
    }
}
