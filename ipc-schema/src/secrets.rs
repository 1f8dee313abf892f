//! Messages between the broker and the secrets-helper.

use serde::{Deserialize, Serialize};

/// Broker to secrets-helper. Liveness is [`crate::Body::Ping`]; the helper's real work is added here.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub enum SecretsRequest {}

/// secrets-helper to broker.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub enum SecretsReply {}
