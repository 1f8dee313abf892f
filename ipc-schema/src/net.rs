//! Messages between the broker and the net-helper.

use serde::{Deserialize, Serialize};

/// Broker to net-helper. Liveness is [`crate::Body::Ping`]; the helper's real work is added here.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub enum NetRequest {}

/// net-helper to broker.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub enum NetReply {}
