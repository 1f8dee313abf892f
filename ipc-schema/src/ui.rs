//! The human's console and the broker: proposals, decisions, policy.

use serde::{Deserialize, Serialize};

/// Console to broker.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub enum UiRequest {}

/// Broker to console.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub enum UiReply {}
