//! Messages between the broker and the exec-helper.

use serde::{Deserialize, Serialize};

/// Broker to exec-helper. Liveness is [`crate::Body::Ping`]; the helper's real work is added here.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub enum ExecRequest {}

/// exec-helper to broker.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub enum ExecReply {}
