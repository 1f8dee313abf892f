//! What the export sends: rows and anchors, as one JSON object per line (the same objects the
//! OTLP encoding carries as attributes).

use audit_store::audit::SealedHead;
use audit_store::chain::{hex32, StoredRow};
use serde::{Deserialize, Serialize};

/// A sealed head as exported: the log's instance id (the head MAC covers it), how many rows the
/// seal covers, the last row's hash, and `HMAC(key, "head" || instance || count || head)`.
/// Sent only right after the row it names, read in the same snapshot as the rows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Anchor {
    pub instance: String,
    pub count: i64,
    #[serde(with = "hex32")]
    pub head: [u8; 32],
    #[serde(with = "hex32")]
    pub mac: [u8; 32],
}

impl Anchor {
    pub fn new(instance: &str, h: &SealedHead) -> Anchor {
        Anchor {
            instance: instance.to_string(),
            count: h.count,
            head: h.head,
            mac: h.mac,
        }
    }
}

/// One exported record: `{"record":"row",...}` or `{"record":"anchor",...}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "record", rename_all = "snake_case")]
pub enum ExportRecord {
    Row(Box<StoredRow>),
    Anchor(Anchor),
}

impl ExportRecord {
    /// One line of JSON (no line break inside: serde_json escapes them in strings).
    pub fn json_line(&self) -> String {
        let mut s = serde_json::to_string(self).expect("an export record serializes");
        s.push('\n');
        s
    }

    /// The record's fields as a JSON object without the `record` tag (for OTLP attributes).
    pub fn fields(&self) -> serde_json::Map<String, serde_json::Value> {
        let v = match self {
            ExportRecord::Row(r) => serde_json::to_value(r),
            ExportRecord::Anchor(a) => serde_json::to_value(a),
        };
        match v.expect("an export record serializes") {
            serde_json::Value::Object(m) => m,
            _ => unreachable!("records are structs"),
        }
    }

    pub fn kind(&self) -> &'static str {
        match self {
            ExportRecord::Row(_) => "row",
            ExportRecord::Anchor(_) => "anchor",
        }
    }
}
