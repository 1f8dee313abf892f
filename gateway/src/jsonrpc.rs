//! A strict JSON-RPC 2.0 layer for MCP's stdio transport.
//!
//! Each line is checked before anything acts on it: nesting depth, JSON syntax (duplicate keys
//! refused, so no two parsers can read one message two ways), one object per line (no batches),
//! the `jsonrpc` member, the id's type, a known set of members, and that a notification carries
//! no id. Every refusal is the error the JSON-RPC 2.0 specification names for it, and the session
//! goes on.

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{json, Map, Value};
use std::fmt;

/// The deepest nesting of arrays and objects a message may have.
pub const MAX_DEPTH: usize = 64;

pub const PARSE_ERROR: i64 = -32700;
pub const INVALID_REQUEST: i64 = -32600;
pub const METHOD_NOT_FOUND: i64 = -32601;
pub const INVALID_PARAMS: i64 = -32602;
pub const INTERNAL_ERROR: i64 = -32603;
/// MCP 2026-07-28: the request's protocol version is not one this server speaks.
pub const UNSUPPORTED_PROTOCOL_VERSION: i64 = -32022;

/// An error object.
#[derive(Debug, Clone, PartialEq)]
pub struct RpcError {
    pub code: i64,
    pub message: String,
    pub data: Option<Value>,
}

impl RpcError {
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        RpcError {
            code,
            message: message.into(),
            data: None,
        }
    }

    pub fn invalid_request(message: impl Into<String>) -> Self {
        Self::new(INVALID_REQUEST, message)
    }

    pub fn invalid_params(message: impl Into<String>) -> Self {
        Self::new(INVALID_PARAMS, message)
    }

    pub fn with_data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }

    fn to_json(&self) -> Value {
        let mut e = json!({"code": self.code, "message": self.message});
        if let Some(d) = &self.data {
            e["data"] = d.clone();
        }
        e
    }
}

/// A request id: a string or a number (MCP forbids null).
#[derive(Debug, Clone, PartialEq)]
pub struct Id(pub Value);

/// A message from the client that passed the checks.
#[derive(Debug, Clone, PartialEq)]
pub enum Incoming {
    Request {
        id: Id,
        method: String,
        params: Option<Map<String, Value>>,
    },
    Notification {
        method: String,
        params: Option<Map<String, Value>>,
    },
    /// A response to a request of ours. The gateway sends the client no requests, so these are
    /// only logged.
    Response { id: Id },
}

/// A line that is not a usable message: the error to answer, with the request's id when it
/// could be read (else null).
#[derive(Debug, Clone, PartialEq)]
pub struct Rejected {
    pub id: Value,
    pub error: RpcError,
}

fn reject(id: Value, error: RpcError) -> Rejected {
    Rejected { id, error }
}

/// Reads one line. `Ok(None)`: a blank line, which is skipped.
pub fn parse_line(line: &[u8]) -> Result<Option<Incoming>, Rejected> {
    if line.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    if nesting_exceeds(line, MAX_DEPTH) {
        // Not parsed, but the request's id is still answered when it can be read: a client
        // waiting on that id would otherwise wait forever. The sniffer reads only top-level
        // tokens, in constant memory and without recursion, however deep the rest goes.
        return Err(reject(
            sniff_id(line),
            RpcError::invalid_request(format!(
                "the message nests arrays and objects deeper than {MAX_DEPTH} levels"
            )),
        ));
    }
    let value = match serde_json::from_slice::<StrictValue>(line) {
        Ok(v) => v.0,
        Err(e) => {
            return Err(reject(
                Value::Null,
                RpcError::new(PARSE_ERROR, format!("Parse error: {e}")),
            ))
        }
    };
    let obj = match value {
        Value::Object(o) => o,
        Value::Array(_) => {
            return Err(reject(
                Value::Null,
                RpcError::invalid_request(
                    "batches are not supported: send one JSON-RPC message per line",
                ),
            ))
        }
        _ => {
            return Err(reject(
                Value::Null,
                RpcError::invalid_request("a message must be a JSON object"),
            ))
        }
    };
    classify(obj).map(Some)
}

fn classify(mut obj: Map<String, Value>) -> Result<Incoming, Rejected> {
    // The id first, so that later errors can name it.
    let id = match obj.remove("id") {
        None => None,
        Some(v @ (Value::String(_) | Value::Number(_))) => Some(Id(v)),
        Some(Value::Null) => {
            return Err(reject(
                Value::Null,
                RpcError::invalid_request("the id must be a string or a number, not null"),
            ))
        }
        Some(_) => {
            return Err(reject(
                Value::Null,
                RpcError::invalid_request("the id must be a string or a number"),
            ))
        }
    };
    let id_json = id.as_ref().map(|i| i.0.clone()).unwrap_or(Value::Null);
    let bad = |m: String| reject(id_json.clone(), RpcError::invalid_request(m));

    match obj.remove("jsonrpc") {
        Some(Value::String(v)) if v == "2.0" => {}
        Some(_) => return Err(bad("\"jsonrpc\" must be \"2.0\"".into())),
        None => return Err(bad("the \"jsonrpc\": \"2.0\" member is missing".into())),
    }

    if let Some(method) = obj.remove("method") {
        let Value::String(method) = method else {
            return Err(bad("\"method\" must be a string".into()));
        };
        let params = obj.remove("params");
        if let Some(k) = obj.keys().next() {
            return Err(bad(format!("unexpected member \"{k}\" in a request")));
        }
        let params = match params {
            None => None,
            Some(Value::Object(p)) => Some(p),
            Some(_) => {
                return Err(reject(
                    id_json,
                    RpcError::invalid_params("\"params\" must be an object"),
                ))
            }
        };
        return match id {
            Some(_) if method.starts_with("notifications/") => Err(bad(format!(
                "{method} is a notification and must not carry an id"
            ))),
            Some(id) => Ok(Incoming::Request { id, method, params }),
            None => Ok(Incoming::Notification { method, params }),
        };
    }

    let result = obj.remove("result");
    let error = obj.remove("error");
    if let Some(k) = obj.keys().next() {
        return Err(bad(format!("unexpected member \"{k}\"")));
    }
    match (id, result.is_some(), error.is_some()) {
        (Some(id), true, false) | (Some(id), false, true) => Ok(Incoming::Response { id }),
        (_, false, false) => Err(bad("a request needs a \"method\"".into())),
        _ => Err(bad(
            "a response needs an id and exactly one of \"result\" and \"error\"".into(),
        )),
    }
}

/// Whether arrays and objects in `b` nest deeper than `max` (strings skipped). A cheap scan
/// before parsing, so a deeply nested message costs no recursion.
fn nesting_exceeds(b: &[u8], max: usize) -> bool {
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for &c in b {
        if in_string {
            if escaped {
                escaped = false;
            } else if c == b'\\' {
                escaped = true;
            } else if c == b'"' {
                in_string = false;
            }
            continue;
        }
        match c {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > max {
                    return true;
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    false
}

/// Finds the id of a message that is not parsed (too long to keep, or nested too deep), byte by
/// byte as the line streams past: the value of its top-level `"id"` member (a string or a
/// number), wherever in the object it stands. So a client whose request was refused that way gets
/// its error on that request, not a hang.
///
/// Only top-level tokens are looked at: the state is a depth counter and at most one kept token
/// of [`IdSniffer::KEEP`] bytes, so neither memory nor time grows with how deep the rest nests.
/// Keys are compared after JSON unescaping (`"\u0069d"` is `"id"`), and a second top-level id
/// makes the id unreadable (null), as a strict parser refuses the duplicate key.
#[derive(Debug, Default)]
pub struct IdSniffer {
    depth: u32,
    in_string: bool,
    escaped: bool,
    /// What the next top-level token is.
    slot: Slot,
    /// The last top-level key was `"id"`.
    key_is_id: bool,
    /// The token being kept (a key, or the id's value), at most [`IdSniffer::KEEP`] bytes.
    token: Option<Vec<u8>>,
    /// The kept token went over [`IdSniffer::KEEP`] bytes (then it is not `"id"`).
    token_overflow: bool,
    found: Option<Value>,
    /// Not a JSON object, or the id is unusable: give up.
    done: bool,
}

#[derive(Debug, Default, Clone, Copy, PartialEq)]
enum Slot {
    #[default]
    Start,
    Key,
    Colon,
    Value,
    Comma,
}

impl IdSniffer {
    const KEEP: usize = 1024;

    pub fn feed(&mut self, bytes: &[u8]) {
        for &c in bytes {
            if self.done {
                return;
            }
            self.byte(c);
        }
    }

    /// The id, or null if none was found.
    pub fn finish(self) -> Value {
        self.found.unwrap_or(Value::Null)
    }

    fn start_token(&mut self, c: u8) {
        self.token = Some(vec![c]);
        self.token_overflow = false;
    }

    fn keep(&mut self, c: u8) {
        if let Some(t) = self.token.as_mut() {
            if t.len() < Self::KEEP {
                t.push(c);
            } else {
                self.token_overflow = true;
            }
        }
    }

    /// The kept token, unless it was cut off.
    fn take_token(&mut self) -> Option<Vec<u8>> {
        let t = self.token.take();
        if std::mem::take(&mut self.token_overflow) {
            None
        } else {
            t
        }
    }

    fn end_scalar(&mut self) {
        self.slot = Slot::Comma;
        match self.take_token() {
            Some(t) => match serde_json::from_slice::<Value>(&t) {
                Ok(v @ Value::Number(_)) => self.found = Some(v),
                _ => self.give_up(),
            },
            None => self.give_up(),
        }
    }

    /// The id is unusable: answer null.
    fn give_up(&mut self) {
        self.found = None;
        self.done = true;
    }

    fn byte(&mut self, c: u8) {
        if self.in_string {
            self.keep(c);
            if self.escaped {
                self.escaped = false;
            } else if c == b'\\' {
                self.escaped = true;
            } else if c == b'"' {
                self.in_string = false;
                if self.depth == 1 {
                    self.string_ended();
                }
            }
            return;
        }
        if self.depth == 1 && self.slot == Slot::Value && self.token.is_some() {
            // Inside the id's scalar value.
            if c.is_ascii_whitespace() || c == b',' || c == b'}' {
                self.end_scalar();
                if self.done {
                    return;
                }
                // The byte that ended the number is read as itself below.
            } else {
                self.keep(c);
                return;
            }
        }
        match c {
            _ if c.is_ascii_whitespace() => {}
            b'"' => {
                self.in_string = true;
                if self.depth == 1
                    && (self.slot == Slot::Key || (self.slot == Slot::Value && self.key_is_id))
                {
                    self.start_token(c);
                }
            }
            b'{' | b'[' => {
                if self.depth == 0 {
                    if c != b'{' || self.slot != Slot::Start {
                        self.done = true;
                    }
                    self.slot = Slot::Key;
                } else if self.depth == 1 && self.slot == Slot::Value {
                    if self.key_is_id {
                        self.give_up();
                    }
                    self.slot = Slot::Comma;
                }
                self.depth += 1;
            }
            b'}' | b']' => {
                self.depth = self.depth.saturating_sub(1);
                if self.depth == 0 {
                    self.done = true;
                }
            }
            b':' if self.depth == 1 => self.slot = Slot::Value,
            b',' if self.depth == 1 => self.slot = Slot::Key,
            _ if self.depth == 1 && self.slot == Slot::Value => {
                if self.key_is_id {
                    self.start_token(c);
                } else {
                    self.slot = Slot::Comma;
                }
            }
            _ if self.depth == 0 => self.done = true,
            _ => {}
        }
    }

    fn string_ended(&mut self) {
        let token = self.take_token();
        match self.slot {
            Slot::Key => {
                // Compared as JSON reads it; a key too long to keep cannot be "id".
                let key = token.and_then(|t| serde_json::from_slice::<String>(&t).ok());
                self.key_is_id = key.as_deref() == Some("id");
                if self.key_is_id && self.found.is_some() {
                    // Two ids: no reading of the message is the right one.
                    self.give_up();
                }
                self.slot = Slot::Colon;
            }
            Slot::Value => {
                if self.key_is_id {
                    match token.map(|t| serde_json::from_slice::<Value>(&t)) {
                        Some(Ok(v)) => self.found = Some(v),
                        _ => self.give_up(),
                    }
                }
                self.slot = Slot::Comma;
            }
            _ => {}
        }
    }
}

/// The id of a whole (or cut-off) message, as [`IdSniffer`] finds it.
pub fn sniff_id(bytes: &[u8]) -> Value {
    let mut s = IdSniffer::default();
    s.feed(bytes);
    s.finish()
}

/// A JSON value parsed with duplicate object keys refused.
struct StrictValue(Value);

impl<'de> Deserialize<'de> for StrictValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(StrictVisitor).map(StrictValue)
    }
}

struct StrictVisitor;

impl<'de> Visitor<'de> for StrictVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        serde_json::Number::from_f64(v)
            .map(Value::Number)
            .ok_or_else(|| E::custom("a number that is not finite"))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::new();
        while let Some(StrictValue(v)) = seq.next_element()? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let StrictValue(v) = map.next_value()?;
            if out.contains_key(&key) {
                return Err(de::Error::custom(format!("duplicate key \"{key}\"")));
            }
            out.insert(key, v);
        }
        Ok(Value::Object(out))
    }
}

/// `{"jsonrpc":"2.0","id":..,"result":..}`.
pub fn result(id: &Id, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id.0, "result": result})
}

/// `{"jsonrpc":"2.0","id":..,"error":..}` (`id` null when the request's id could not be read).
pub fn error(id: &Value, e: &RpcError) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": e.to_json()})
}

/// `{"jsonrpc":"2.0","method":..,"params":..}`.
pub fn notification(method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "method": method, "params": params})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rejected(line: &str) -> Rejected {
        parse_line(line.as_bytes()).expect_err(line)
    }

    #[test]
    fn requests_notifications_and_responses_are_told_apart() {
        match parse_line(br#"{"jsonrpc":"2.0","id":7,"method":"tools/list","params":{}}"#) {
            Ok(Some(Incoming::Request { id, method, params })) => {
                assert_eq!(id, Id(json!(7)));
                assert_eq!(method, "tools/list");
                assert_eq!(params, Some(Map::new()));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            parse_line(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#),
            Ok(Some(Incoming::Notification {
                method: "notifications/initialized".into(),
                params: None
            }))
        );
        assert_eq!(
            parse_line(br#"{"jsonrpc":"2.0","id":"a","result":{}}"#),
            Ok(Some(Incoming::Response { id: Id(json!("a")) }))
        );
        assert_eq!(parse_line(b"  \r"), Ok(None));
    }

    #[test]
    fn each_malformed_message_gets_the_error_the_spec_names() {
        for (line, code, id, text) in [
            ("{not json", PARSE_ERROR, Value::Null, "Parse error"),
            ("\"\\ud800\"", PARSE_ERROR, Value::Null, "Parse error"),
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"a","method":"b"}"#,
                PARSE_ERROR,
                Value::Null,
                "duplicate key \"method\"",
            ),
            (
                r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#,
                INVALID_REQUEST,
                Value::Null,
                "batches are not supported",
            ),
            ("[]", INVALID_REQUEST, Value::Null, "batches"),
            ("42", INVALID_REQUEST, Value::Null, "must be a JSON object"),
            (
                r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#,
                INVALID_REQUEST,
                Value::Null,
                "not null",
            ),
            (
                r#"{"jsonrpc":"2.0","id":{},"method":"ping"}"#,
                INVALID_REQUEST,
                Value::Null,
                "string or a number",
            ),
            (
                r#"{"jsonrpc":"1.0","id":3,"method":"ping"}"#,
                INVALID_REQUEST,
                json!(3),
                "must be \"2.0\"",
            ),
            (
                r#"{"id":3,"method":"ping"}"#,
                INVALID_REQUEST,
                json!(3),
                "is missing",
            ),
            (
                r#"{"jsonrpc":"2.0","id":3,"method":7}"#,
                INVALID_REQUEST,
                json!(3),
                "must be a string",
            ),
            (
                r#"{"jsonrpc":"2.0","id":3,"method":"ping","extra":1}"#,
                INVALID_REQUEST,
                json!(3),
                "unexpected member \"extra\"",
            ),
            (
                r#"{"jsonrpc":"2.0","id":3,"method":"ping","params":[1]}"#,
                INVALID_PARAMS,
                json!(3),
                "must be an object",
            ),
            (
                r#"{"jsonrpc":"2.0","id":"n","method":"notifications/initialized"}"#,
                INVALID_REQUEST,
                json!("n"),
                "must not carry an id",
            ),
            (
                r#"{"jsonrpc":"2.0","id":4}"#,
                INVALID_REQUEST,
                json!(4),
                "needs a \"method\"",
            ),
            (
                r#"{"jsonrpc":"2.0","id":4,"result":1,"error":{}}"#,
                INVALID_REQUEST,
                json!(4),
                "exactly one",
            ),
        ] {
            let r = rejected(line);
            assert_eq!(r.error.code, code, "{line}: {r:?}");
            assert_eq!(r.id, id, "{line}");
            assert!(
                r.error.message.contains(text),
                "{line}: {}",
                r.error.message
            );
        }
    }

    #[test]
    fn nesting_is_limited_before_parsing_and_brackets_in_strings_do_not_count() {
        let deep = format!("{}{}", "[".repeat(MAX_DEPTH + 1), "]".repeat(MAX_DEPTH + 1));
        let r = rejected(&deep);
        assert_eq!(r.error.code, INVALID_REQUEST);
        assert!(r.error.message.contains("deeper than 64"), "{r:?}");
        // 10,000 levels: refused the same way, no stack overflow.
        let r = rejected(&"{\"a\":".repeat(10_000));
        assert_eq!(r.error.code, INVALID_REQUEST);

        let ok_depth = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"x","params":{{"a":{}1{}, "s":"[[[[{{{{\"]]"}}}}"#,
            "[".repeat(MAX_DEPTH - 3),
            "]".repeat(MAX_DEPTH - 3)
        );
        assert!(matches!(
            parse_line(ok_depth.as_bytes()),
            Ok(Some(Incoming::Request { .. }))
        ));
    }

    /// A message nested too deep is not parsed, but its error carries its id when the id can be
    /// read at the top level, before or after the deep part, so the client is not left waiting.
    #[test]
    fn a_too_deep_message_is_answered_with_its_id_when_the_id_can_be_read() {
        let deep = |n: usize| format!("{}1{}", "[".repeat(n), "]".repeat(n));
        let d = deep(MAX_DEPTH + 1);
        for (line, want) in [
            (
                format!(
                    r#"{{"jsonrpc":"2.0","id":41,"method":"tools/call","params":{{"name":"x","arguments":{{"a":{d}}}}}}}"#
                ),
                json!(41),
            ),
            (
                format!(
                    r#"{{"jsonrpc":"2.0","method":"tools/call","params":{{"arguments":{{"a":{d}}}}},"id":"after-1"}}"#
                ),
                json!("after-1"),
            ),
            (
                format!(r#"{{"id":-2.5e3,"params":{d},"jsonrpc":"2.0","method":"m"}}"#),
                json!(-2.5e3),
            ),
            (
                format!(r#"{{"params":{d},"id":"q\"{{[","method":"m"}}"#),
                json!("q\"{["),
            ),
            // A key spelled with escapes is still "id", as a parser reads it.
            (format!(r#"{{"\u0069d":9,"params":{d}}}"#), json!(9)),
        ] {
            let r = rejected(&line);
            assert_eq!(r.error.code, INVALID_REQUEST, "{line}");
            assert!(r.error.message.contains("deeper than 64"), "{r:?}");
            assert_eq!(r.id, want, "{line}");
        }
        // Very deep (200,000 levels, also inside the id's neighbour): no recursion, id found.
        let huge = format!(
            r#"{{"jsonrpc":"2.0","params":{{"a":{}}},"id":77,"method":"tools/call"}}"#,
            deep(200_000)
        );
        assert_eq!(rejected(&huge).id, json!(77));
        let open_only = format!(r#"{{"id":"open","params":{}"#, "[".repeat(200_000));
        assert_eq!(rejected(&open_only).id, json!("open"));
    }

    #[test]
    fn a_too_deep_message_whose_id_cannot_be_read_is_answered_with_null() {
        let d = format!("{}{}", "[".repeat(MAX_DEPTH + 1), "]".repeat(MAX_DEPTH + 1));
        for line in [
            // No id; an id only inside the deep part or inside params.
            format!(r#"{{"jsonrpc":"2.0","method":"m","params":{d}}}"#),
            format!(r#"{{"params":{{"id":3,"a":{d}}},"method":"m"}}"#),
            format!(r#"{{"params":[{{"id":3}},{d}]}}"#),
            // An id that is null, an object, an array, a boolean, or deep itself.
            format!(r#"{{"id":null,"params":{d}}}"#),
            format!(r#"{{"id":{{"a":1}},"params":{d}}}"#),
            format!(r#"{{"id":{d}}}"#),
            format!(r#"{{"id":true,"params":{d}}}"#),
            // Two ids: a strict parser refuses the duplicate key, so neither is the id.
            format!(r#"{{"id":1,"params":{d},"id":2}}"#),
            format!(r#"{{"id":"a","params":{d},"\u0069d":"b"}}"#),
            // Not an object at all, or the id cut off at the end of the line.
            d.clone(),
            format!(r#"[{{"id":5}},{d}]"#),
            format!(r#"{{"params":{d},"id":12"#),
        ] {
            let r = rejected(&line);
            assert_eq!(r.error.code, INVALID_REQUEST, "{line}");
            assert_eq!(r.id, Value::Null, "{line}");
        }
    }

    #[test]
    fn the_id_of_an_oversized_message_is_found_wherever_it_stands() {
        let pad = "a".repeat(100);
        let first =
            format!(r#"{{"jsonrpc":"2.0","id":12,"method":"tools/call","params":{{"x":"{pad}"#);
        assert_eq!(sniff_id(first.as_bytes()), json!(12));
        // The Python SDK 1.x puts the id last.
        let last = format!(
            r#"{{"method":"tools/call","params":{{"id":1,"x":"{pad}\"}}"}},"jsonrpc":"2.0","id":"r-1"}}"#
        );
        assert_eq!(sniff_id(last.as_bytes()), json!("r-1"));
        for split in [1, 7, 50, last.len() - 3] {
            let mut s = IdSniffer::default();
            s.feed(&last.as_bytes()[..split]);
            s.feed(&last.as_bytes()[split..]);
            assert_eq!(s.finish(), json!("r-1"), "split at {split}");
        }
        assert_eq!(
            sniff_id(br#" { "id" : 7 , "x" : [1,{"id":2}] } "#),
            json!(7)
        );
        // The id cut off, only nested ids, no id, not an object, an id of the wrong type.
        assert_eq!(sniff_id(br#"{"jsonrpc":"2.0","id":123"#), Value::Null);
        assert_eq!(sniff_id(br#"{"params":{"id":5},"method":"#), Value::Null);
        assert_eq!(sniff_id(b"[1,2"), Value::Null);
        assert_eq!(sniff_id(br#"{"id":{"a":1},"x":1"#), Value::Null);
        assert_eq!(sniff_id(br#"{"id":null,"x":1}"#), Value::Null);
        assert_eq!(sniff_id(br#"{"id":"x\"y","x":1"#), json!("x\"y"));
    }

    #[test]
    fn replies_are_shaped_as_json_rpc() {
        assert_eq!(
            error(&Value::Null, &RpcError::new(PARSE_ERROR, "x")).to_string(),
            r#"{"error":{"code":-32700,"message":"x"},"id":null,"jsonrpc":"2.0"}"#
        );
        assert_eq!(
            result(&Id(json!("q")), json!({})).to_string(),
            r#"{"id":"q","jsonrpc":"2.0","result":{}}"#
        );
    }
}
