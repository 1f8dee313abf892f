//! Third-party MCP servers: the broker and the servers-helper, which speaks JSON-RPC to them.
//!
//! A server the policy names (`[[mcp_server]]`) runs in its own exec sandbox; its stdin and
//! stdout are one Unix socket ([`crate::exec::CONNECTOR_STDIO`]), which the broker hands to the
//! servers-helper with [`ServersRequest::Attach`]. The servers-helper is the only process that
//! parses what a server writes: it is locked down like a gateway (no files, no network, no
//! exec, no new sockets) and turns the server's JSON-RPC into the typed values below, each
//! bounded. A server that breaks the protocol (a malformed or oversized message, a flood) loses
//! its connection ([`ServerEvent::Closed`]); the broker then stops its sandbox. Nothing a server
//! says is trusted: its tool definitions are pinned by the broker, its results reach the agent
//! as outside text.

use serde::{Deserialize, Serialize};

/// The longest JSON-RPC message the servers-helper reads from a server (one line).
pub const MESSAGE_MAX: usize = 4 << 20;
/// The most tools one server may list (across pages).
pub const TOOLS_MAX: usize = 256;
/// The longest JSON value carried in a [`JsonText`] (a schema, a call's arguments, structured
/// content).
pub const JSON_TEXT_MAX: usize = 256 << 10;
/// The longest description or title kept from a server.
pub const TEXT_MAX: usize = 16 << 10;
/// The most result text a call brings back (the rest is cut, and the result says so).
pub const RESULT_TEXT_MAX: usize = 1 << 20;

/// A server's name in the policy, and the prefix of its tools (`NAME__TOOL`): 1-32 of
/// `a-z 0-9 -`, starting with a letter. No `_`, so the `__` that separates server and tool is
/// unambiguous.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[serde(try_from = "String", into = "String")]
pub struct ServerName(String);

impl ServerName {
    pub const MAX: usize = 32;

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for ServerName {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        let ok = !s.is_empty()
            && s.len() <= Self::MAX
            && s.starts_with(|c: char| c.is_ascii_lowercase())
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        if ok {
            Ok(ServerName(s))
        } else {
            Err(format!(
                "{s:?} is not a server name: 1-{} of a-z 0-9 -, starting with a letter",
                Self::MAX
            ))
        }
    }
}

impl From<ServerName> for String {
    fn from(n: ServerName) -> String {
        n.0
    }
}

impl std::fmt::Display for ServerName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A tool's name as its server gives it (the MCP specification's rule: 1-128 of
/// `A-Z a-z 0-9 _ - .`). A server that names a tool otherwise has that tool dropped from its
/// list, and the list says so.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[serde(try_from = "String", into = "String")]
pub struct ServerToolName(String);

impl ServerToolName {
    pub const MAX: usize = 128;

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for ServerToolName {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        let ok = !s.is_empty()
            && s.len() <= Self::MAX
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
        if ok {
            Ok(ServerToolName(s))
        } else {
            Err(format!(
                "{} is not a tool name: 1-{} of A-Z a-z 0-9 _ - .",
                crate::inert::escaped(&s),
                Self::MAX
            ))
        }
    }
}

impl From<ServerToolName> for String {
    fn from(n: ServerToolName) -> String {
        n.0
    }
}

impl std::fmt::Display for ServerToolName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// `SERVER__TOOL`, the name an agent sees.
pub fn offered_name(server: &ServerName, tool: &ServerToolName) -> String {
    format!("{server}__{tool}")
}

/// Splits an agent's `SERVER__TOOL` at its first `__`.
pub fn split_offered(name: &str) -> Option<(ServerName, ServerToolName)> {
    let (s, t) = name.split_once("__")?;
    Some((
        ServerName::try_from(s.to_owned()).ok()?,
        ServerToolName::try_from(t.to_owned()).ok()?,
    ))
}

/// One JSON value as text: valid JSON, canonical (object keys sorted, no insignificant
/// whitespace), at most [`JSON_TEXT_MAX`] bytes. Checked again when decoded, so a value that
/// arrives over a channel is always well formed.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Hash)]
#[serde(try_from = "String", into = "String")]
pub struct JsonText(String);

impl JsonText {
    /// The canonical text of `v` (`serde_json` sorts object keys: no `preserve_order`).
    pub fn from_value(v: &serde_json::Value) -> Result<JsonText, String> {
        let s = serde_json::to_string(v).map_err(|e| e.to_string())?;
        if s.len() > JSON_TEXT_MAX {
            return Err(format!(
                "a JSON value of {} bytes is more than the {JSON_TEXT_MAX} gatehouse carries",
                s.len()
            ));
        }
        Ok(JsonText(s))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn value(&self) -> serde_json::Value {
        serde_json::from_str(&self.0).expect("JsonText holds valid JSON")
    }

    /// The empty object `{}`.
    pub fn empty_object() -> JsonText {
        JsonText("{}".into())
    }
}

impl TryFrom<String> for JsonText {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        let v: serde_json::Value =
            serde_json::from_str(&s).map_err(|e| format!("not JSON: {e}"))?;
        let t = JsonText::from_value(&v)?;
        if t.0 != s {
            return Err("JSON text that is not in canonical form".into());
        }
        Ok(t)
    }
}

impl From<JsonText> for String {
    fn from(t: JsonText) -> String {
        t.0
    }
}

/// A tool as a server describes it: every part the user approves (the broker pins a digest of
/// all of them). Annotations are the server's claims, shown as such, never read by the policy.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct ToolDef {
    pub name: ServerToolName,
    pub title: Option<String>,
    pub description: Option<String>,
    /// A JSON object (the server's `inputSchema`).
    pub input_schema: JsonText,
    pub output_schema: Option<JsonText>,
    pub annotations: Option<JsonText>,
}

/// Which connection of the servers-helper a request is about (chosen by the broker).
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnId(pub u64);

impl std::fmt::Display for ConnId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "c{}", self.0)
    }
}

/// Broker to servers-helper.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub enum ServersRequest {
    /// Takes over the server's stdio socket (the descriptor with this frame) and runs the MCP
    /// handshake. Answered with [`ServersReply::Attached`] once the server initialized.
    Attach { conn: ConnId, server: ServerName },
    /// `tools/list`, every page. Answered with [`ServersReply::Tools`].
    ListTools { conn: ConnId },
    /// `tools/call`. Answered with [`ServersReply::Called`].
    CallTool {
        conn: ConnId,
        tool: ServerToolName,
        arguments: JsonText,
        timeout_ms: u64,
    },
    /// Waits for the connection's next event (one outstanding per connection). Answered with
    /// [`ServersReply::Event`].
    Watch { conn: ConnId },
    /// Closes the connection (the server sees end of file). Answered with `Pong`.
    Detach { conn: ConnId },
}

/// What the server said of itself in its handshake (its claim; shown, never trusted).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct ServerHello {
    pub protocol_version: String,
    pub name: String,
    pub version: String,
    /// It said it sends `notifications/tools/list_changed`.
    pub tools_list_changed: bool,
}

/// What a server listed.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct ToolList {
    pub tools: Vec<ToolDef>,
    /// Entries dropped, one line each (a bad name, a schema that is not an object, a repeated
    /// name, more than [`TOOLS_MAX`]).
    pub dropped: Vec<String>,
}

/// One piece of a call's result.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub enum ContentItem {
    Text(String),
    /// Something gatehouse does not pass on (an image, audio, a blob), described in one line.
    Omitted(String),
}

/// What a `tools/call` brought back.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct CallOutput {
    /// The server said the call failed (`isError`).
    pub is_error: bool,
    pub content: Vec<ContentItem>,
    pub structured: Option<JsonText>,
    /// Text cut to [`RESULT_TEXT_MAX`].
    pub truncated: bool,
}

/// Something a connection reports on its own.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub enum ServerEvent {
    /// `notifications/tools/list_changed`.
    ToolsChanged,
    /// The connection is over (the server closed it, crashed, or broke the protocol: the
    /// reason says which). Every call in flight on it failed.
    Closed(String),
}

/// Servers-helper to broker.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub enum ServersReply {
    Attached(ServerHello),
    Tools(ToolList),
    Called(CallOutput),
    Event(ServerEvent),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_the_separator() {
        assert!(ServerName::try_from("github".to_string()).is_ok());
        assert!(ServerName::try_from("my_srv".to_string()).is_err());
        assert!(ServerName::try_from("9x".to_string()).is_err());
        assert!(ServerName::try_from(String::new()).is_err());
        assert!(ServerToolName::try_from("create_issue".to_string()).is_ok());
        assert!(ServerToolName::try_from("a b".to_string()).is_err());
        assert!(ServerToolName::try_from("x".repeat(129)).is_err());
        let (s, t) = split_offered("notes__read__graph").unwrap();
        assert_eq!((s.as_str(), t.as_str()), ("notes", "read__graph"));
        assert_eq!(offered_name(&s, &t), "notes__read__graph");
        assert!(split_offered("read_file").is_none());
        assert!(split_offered("Bad__x").is_none());
    }

    #[test]
    fn json_text_is_canonical_and_bounded() {
        let v = serde_json::json!({"b": 1, "a": [true, null]});
        let t = JsonText::from_value(&v).unwrap();
        assert_eq!(t.as_str(), r#"{"a":[true,null],"b":1}"#);
        assert!(JsonText::try_from(r#"{"b":1,"a":2}"#.to_string()).is_err());
        assert!(JsonText::try_from("{".to_string()).is_err());
        assert!(JsonText::try_from(t.as_str().to_string()).is_ok());
        let big = serde_json::Value::String("x".repeat(JSON_TEXT_MAX));
        assert!(JsonText::from_value(&big).is_err());
        let bytes = postcard::to_allocvec(&t).unwrap();
        assert_eq!(postcard::from_bytes::<JsonText>(&bytes).unwrap(), t);
    }
}
