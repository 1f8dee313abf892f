//! What the demo reports (`--json` prints it), and how an agent's answer is classified.

use serde::Serialize;
use serde_json::{json, Value};

#[derive(Serialize, Debug, Clone)]
pub(super) struct Asked {
    pub(super) proposal: u64,
    pub(super) tool: String,
    pub(super) target: String,
    pub(super) rule: String,
    pub(super) decided_by: String,
    pub(super) choice: Option<String>,
}

#[derive(Serialize, Debug, Clone)]
pub(super) struct CallReport {
    pub(super) tool: String,
    pub(super) arguments: Value,
    /// done, from_ledger, refused, human_denied, expired, unavailable, failed, protocol_error,
    /// no_answer.
    pub(super) outcome: String,
    pub(super) text: String,
    pub(super) asked: Vec<Asked>,
}

#[derive(Serialize, Debug)]
pub(super) struct Check {
    pub(super) what: String,
    pub(super) ok: bool,
}

#[derive(Serialize, Debug)]
pub(super) struct StepReport {
    pub(super) step: usize,
    pub(super) name: &'static str,
    pub(super) what: String,
    pub(super) expected: String,
    pub(super) calls: Vec<CallReport>,
    pub(super) checks: Vec<Check>,
    pub(super) ok: bool,
    pub(super) summary: String,
}

#[derive(Serialize, Debug, Default)]
pub(super) struct AuditReport {
    pub(super) entries: u64,
    pub(super) intact: bool,
    pub(super) message: String,
    /// Entries by kind (tool_call, proposal, decision, execution, ...).
    pub(super) kinds: std::collections::BTreeMap<String, u64>,
}

#[derive(Serialize, Debug)]
pub(super) struct Report {
    pub(super) ok: bool,
    pub(super) interactive: bool,
    pub(super) scratch: String,
    pub(super) kept: bool,
    pub(super) elapsed_ms: u64,
    pub(super) steps: Vec<StepReport>,
    pub(super) audit: AuditReport,
    /// Steps whose outcome was not the expected one, by name.
    pub(super) not_as_expected: Vec<&'static str>,
}

/// The classification of a `tools/call` answer, from what the gateway sends the agent.
pub(super) fn classify(reply: &Value) -> (String, String) {
    if let Some(err) = reply.get("error") {
        return ("protocol_error".into(), err.to_string());
    }
    let result = &reply["result"];
    let text = result["content"]
        .as_array()
        .map(|blocks| {
            blocks
                .iter()
                .filter_map(|b| b["text"].as_str())
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default();
    let outcome = if result["isError"] != json!(true) {
        if text.contains("was not carried out again") {
            "from_ledger"
        } else {
            "done"
        }
    } else if text.starts_with("Refused") {
        "refused"
    } else if text.starts_with("The human refused") {
        "human_denied"
    } else if text.starts_with("Not approved in time") {
        "expired"
    } else if text.starts_with("Not available") {
        "unavailable"
    } else {
        "failed"
    };
    (outcome.into(), text)
}
