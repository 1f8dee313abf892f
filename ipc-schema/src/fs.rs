//! Messages between the broker and the fs-helper.

use serde::{Deserialize, Serialize};

/// Broker to fs-helper. Liveness is [`crate::Body::Ping`]; the helper's real work is added here.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub enum FsRequest {}

/// fs-helper to broker.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub enum FsReply {}
