//! Records as OpenTelemetry logs over OTLP/HTTP (protobuf, `POST .../v1/logs`).
//!
//! Each record is one `LogRecord`. Every field of the record is an attribute `gatehouse.FIELD`
//! (strings, integers and booleans as they are; a field without a value is left out), so a
//! collector holds everything needed to recompute the chain; `gatehouse.record` says `row` or
//! `anchor`. Where the OpenTelemetry semantic conventions (GenAI tool execution, sessions,
//! errors) have a name for what a row says, it is set as well: `gen_ai.operation.name` =
//! `execute_tool` and `gen_ai.tool.name` for rows naming a tool, `session.id` and
//! `gen_ai.conversation.id` for the session, and `error.type` = the outcome for outcomes that
//! mean the call did not go through. The resource is `service.name` = `gatehouse` with
//! `gatehouse.instance`; the scope `gatehouse.audit`.

use crate::record::ExportRecord;
use crate::ExportError;
use opentelemetry_proto::tonic::collector::logs::v1::{
    ExportLogsServiceRequest, ExportLogsServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::Message;
use std::time::Duration;

/// Outcomes that mean the call did not go through; they are the row's `error.type`.
const ERROR_OUTCOMES: &[&str] = &[
    "deny",
    "denied",
    "refused",
    "failed",
    "uncertain",
    "killed",
    "expired",
    "rejected",
    "abandoned",
    "error",
];

fn string(s: impl Into<String>) -> Option<AnyValue> {
    Some(AnyValue {
        value: Some(any_value::Value::StringValue(s.into())),
    })
}

fn kv(key: &str, value: Option<AnyValue>) -> KeyValue {
    KeyValue {
        key: key.to_string(),
        value,
        ..Default::default()
    }
}

fn json_value(v: &serde_json::Value) -> Option<AnyValue> {
    let value = match v {
        serde_json::Value::Null => return None,
        serde_json::Value::Bool(b) => any_value::Value::BoolValue(*b),
        serde_json::Value::Number(n) => match n.as_i64() {
            Some(i) => any_value::Value::IntValue(i),
            None => any_value::Value::StringValue(n.to_string()),
        },
        serde_json::Value::String(s) => any_value::Value::StringValue(s.clone()),
        other => any_value::Value::StringValue(other.to_string()),
    };
    Some(AnyValue { value: Some(value) })
}

/// One record as a log record, observed at `observed_ns`.
pub fn log_record(rec: &ExportRecord, observed_ns: u64) -> LogRecord {
    let mut attributes = vec![kv("gatehouse.record", string(rec.kind()))];
    for (k, v) in rec.fields() {
        if let Some(value) = json_value(&v) {
            attributes.push(kv(&format!("gatehouse.{k}"), Some(value)));
        }
    }
    let (time_unix_nano, event_name, body) = match rec {
        ExportRecord::Row(r) => {
            if let Some(tool) = &r.tool {
                attributes.push(kv("gen_ai.operation.name", string("execute_tool")));
                attributes.push(kv("gen_ai.tool.name", string(tool.clone())));
            }
            if let Some(s) = &r.session {
                attributes.push(kv("session.id", string(s.clone())));
                attributes.push(kv("gen_ai.conversation.id", string(s.clone())));
            }
            if ERROR_OUTCOMES.contains(&r.outcome.as_str()) {
                attributes.push(kv("error.type", string(r.outcome.clone())));
            }
            (
                (r.ts_ms.max(0) as u64).saturating_mul(1_000_000),
                "gatehouse.audit.row",
                format!("{} {}", r.kind, r.outcome),
            )
        }
        ExportRecord::Anchor(a) => (
            observed_ns,
            "gatehouse.audit.anchor",
            format!("sealed head at entry {}", a.count),
        ),
    };
    LogRecord {
        time_unix_nano,
        observed_time_unix_nano: observed_ns,
        body: string(body),
        attributes,
        event_name: event_name.to_string(),
        ..Default::default()
    }
}

/// One export request carrying `records` in order, for log `instance`.
pub fn request(
    instance: &str,
    records: &[ExportRecord],
    observed_ns: u64,
) -> ExportLogsServiceRequest {
    ExportLogsServiceRequest {
        resource_logs: vec![ResourceLogs {
            resource: Some(Resource {
                attributes: vec![
                    kv("service.name", string("gatehouse")),
                    kv("gatehouse.instance", string(instance)),
                ],
                ..Default::default()
            }),
            scope_logs: vec![ScopeLogs {
                scope: Some(InstrumentationScope {
                    name: "gatehouse.audit".into(),
                    version: env!("CARGO_PKG_VERSION").into(),
                    ..Default::default()
                }),
                log_records: records.iter().map(|r| log_record(r, observed_ns)).collect(),
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

/// Where logs are POSTed: a URL ending in `/v1/logs` as given, any other http(s) URL with
/// `/v1/logs` appended to its path (as OTLP exporters treat a base endpoint). No userinfo.
pub fn logs_url(given: &str) -> Result<String, ExportError> {
    let bad = |why: &str| ExportError::Url {
        url: given.to_string(),
        why: why.to_string(),
    };
    let mut u = url::Url::parse(given).map_err(|e| bad(&e.to_string()))?;
    if !matches!(u.scheme(), "http" | "https") {
        return Err(bad("only http and https collectors are supported"));
    }
    if !u.username().is_empty() || u.password().is_some() {
        return Err(bad(
            "credentials in the URL are refused (they would be in the state file and in ps)",
        ));
    }
    if u.host_str().is_none() {
        return Err(bad("no host"));
    }
    if u.query().is_some() || u.fragment().is_some() {
        return Err(bad("a query or fragment is not supported"));
    }
    if !u.path().ends_with("/v1/logs") {
        let p = format!("{}/v1/logs", u.path().trim_end_matches('/'));
        u.set_path(&p);
    }
    Ok(u.to_string())
}

/// A collector that did not take a request; the cursor stays where it was.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SendError {
    /// Not reached, or an answer other than 2xx: sent again later from the same position.
    #[error("{0}")]
    Retry(String),
    /// Cannot go on without losing or duplicating a record: the collector took the request but
    /// rejected records in it (sending again would duplicate the ones it kept, going on would
    /// leave the rejected out of its store), or the output cannot be written. The export stops
    /// with the cursor where it was.
    #[error("{0}")]
    Fatal(String),
}

/// The collector's end: a blocking HTTP client that ignores proxy variables and follows no
/// redirect (the collector is the one the user named).
pub struct Collector {
    agent: ureq::Agent,
    pub url: String,
}

impl Collector {
    pub fn new(given: &str) -> Result<Collector, ExportError> {
        let url = logs_url(given)?;
        let config = ureq::Agent::config_builder()
            .proxy(None)
            // Records go only to the URL the user named: a redirect is an answer like any
            // other non-2xx (retried), never followed with the body.
            .max_redirects(0)
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(20)))
            .build();
        Ok(Collector {
            agent: config.into(),
            url,
        })
    }

    /// POSTs one request; Ok once the collector answered 2xx without rejecting a record.
    pub fn send(&self, req: &ExportLogsServiceRequest) -> Result<(), SendError> {
        let body = req.encode_to_vec();
        let mut resp = self
            .agent
            .post(&self.url)
            .header("Content-Type", "application/x-protobuf")
            .send(&body[..])
            .map_err(|e| SendError::Retry(format!("{}: {e}", self.url)))?;
        let status = resp.status();
        if !status.is_success() {
            return Err(SendError::Retry(format!("{} answered {status}", self.url)));
        }
        let protobuf = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("application/x-protobuf"));
        let bytes = resp
            .body_mut()
            .with_config()
            .limit(1 << 20)
            .read_to_vec()
            .map_err(|e| SendError::Retry(format!("{}: reading the answer: {e}", self.url)))?;
        if protobuf && !bytes.is_empty() {
            let answer = ExportLogsServiceResponse::decode(&bytes[..]).map_err(|e| {
                SendError::Retry(format!(
                    "{}: an answer that is not ExportLogsServiceResponse: {e}",
                    self.url
                ))
            })?;
            if let Some(p) = answer.partial_success {
                if p.rejected_log_records > 0 {
                    return Err(SendError::Fatal(format!(
                        "{} rejected {} of {} records: {}",
                        self.url,
                        p.rejected_log_records,
                        req.resource_logs
                            .iter()
                            .flat_map(|r| &r.scope_logs)
                            .map(|s| s.log_records.len())
                            .sum::<usize>(),
                        p.error_message
                    )));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use audit_store::chain::StoredRow;

    #[test]
    fn a_base_url_gets_the_logs_path_and_a_full_one_is_kept() {
        assert_eq!(
            logs_url("http://127.0.0.1:4318").unwrap(),
            "http://127.0.0.1:4318/v1/logs"
        );
        assert_eq!(
            logs_url("http://127.0.0.1:4318/").unwrap(),
            "http://127.0.0.1:4318/v1/logs"
        );
        assert_eq!(
            logs_url("https://c.example/otlp").unwrap(),
            "https://c.example/otlp/v1/logs"
        );
        assert_eq!(
            logs_url("http://[::1]:9/v1/logs").unwrap(),
            "http://[::1]:9/v1/logs"
        );
        for bad in ["ftp://x/", "http://u:p@x/", "not a url", "http://x/?a=1"] {
            assert!(logs_url(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_row_carries_every_field_and_the_conventions() {
        let r = StoredRow {
            seq: 3,
            ts_ms: 1500,
            kind: "refusal".into(),
            session: Some("s-1".into()),
            actor: "gateway".into(),
            tool: Some("read_file".into()),
            target: None,
            outcome: "refused".into(),
            detail: "outside every grant".into(),
            degraded: false,
            prev_hash: [1; 32],
            hash: [2; 32],
            mac: [3; 32],
            mode: Some("unattended".into()),
            tier: Some("landlock".into()),
        };
        let lr = log_record(&ExportRecord::Row(Box::new(r)), 9);
        let get = |k: &str| {
            lr.attributes
                .iter()
                .find(|a| a.key == k)
                .and_then(|a| a.value.clone())
                .and_then(|v| v.value)
        };
        use any_value::Value::*;
        assert_eq!(get("gatehouse.seq"), Some(IntValue(3)));
        assert_eq!(
            get("gatehouse.hash"),
            Some(StringValue(hex::encode([2; 32])))
        );
        assert_eq!(get("gatehouse.degraded"), Some(BoolValue(false)));
        assert_eq!(
            get("gatehouse.mode"),
            Some(StringValue("unattended".into()))
        );
        assert_eq!(get("gatehouse.tier"), Some(StringValue("landlock".into())));
        assert_eq!(get("gatehouse.target"), None, "no value, no attribute");
        assert_eq!(
            get("gen_ai.tool.name"),
            Some(StringValue("read_file".into()))
        );
        assert_eq!(get("session.id"), Some(StringValue("s-1".into())));
        assert_eq!(get("error.type"), Some(StringValue("refused".into())));
        assert_eq!(lr.time_unix_nano, 1_500_000_000);
        assert_eq!(lr.event_name, "gatehouse.audit.row");
    }
}
