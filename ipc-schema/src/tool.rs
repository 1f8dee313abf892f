//! Tool calls from an agent's gateway, and the broker's answers.

use serde::{Deserialize, Serialize};

/// An agent's tool call, as typed by its gateway.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub enum ToolCall {}

/// The broker's answer to a [`ToolCall`].
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub enum ToolReply {}
