//! From a server's JSON to typed, bounded values, and the requests gatehouse sends. Nothing here
//! trusts the server: every field is checked, anything out of bounds is dropped with a reason.

use ipc_schema::servers::{
    CallOutput, ContentItem, JsonText, ServerHello, ServerToolName, ToolDef, ToolList,
    RESULT_TEXT_MAX, TEXT_MAX, TOOLS_MAX,
};
use serde_json::{json, Map, Value};

/// The protocol revisions gatehouse speaks to servers, newest first (the first is offered).
pub const VERSIONS: [&str; 4] = ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];

pub fn initialize(id: u64) -> Value {
    json!({
        "jsonrpc": "2.0", "id": id, "method": "initialize",
        "params": {
            "protocolVersion": VERSIONS[0],
            "capabilities": {},
            "clientInfo": {"name": "gatehouse", "version": env!("CARGO_PKG_VERSION")},
        }
    })
}

pub fn initialized() -> Value {
    json!({"jsonrpc": "2.0", "method": "notifications/initialized"})
}

pub fn list_tools(id: u64, cursor: Option<&str>) -> Value {
    match cursor {
        None => json!({"jsonrpc": "2.0", "id": id, "method": "tools/list"}),
        Some(c) => {
            json!({"jsonrpc": "2.0", "id": id, "method": "tools/list", "params": {"cursor": c}})
        }
    }
}

pub fn call_tool(id: u64, tool: &ServerToolName, arguments: &JsonText) -> Value {
    json!({
        "jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": tool.as_str(), "arguments": arguments.value()},
    })
}

pub fn cancelled(id: u64, why: &str) -> Value {
    json!({
        "jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": id, "reason": why},
    })
}

/// The answer to a request a server sent us: `ping` is answered; gatehouse offers servers
/// nothing else (no sampling, no roots, no elicitation).
pub fn answer_server_request(id: &Value, method: &str) -> Value {
    if method == "ping" {
        return json!({"jsonrpc": "2.0", "id": id, "result": {}});
    }
    json!({
        "jsonrpc": "2.0", "id": id,
        "error": {"code": -32601, "message": format!("gatehouse offers servers no {method}")},
    })
}

fn text_field(o: &Map<String, Value>, key: &str) -> Result<Option<String>, String> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.len() <= TEXT_MAX => Ok(Some(s.clone())),
        Some(Value::String(s)) => Err(format!(
            "its {key} is {} bytes, more than {TEXT_MAX}",
            s.len()
        )),
        Some(_) => Err(format!("its {key} is not a string")),
    }
}

fn json_field(o: &Map<String, Value>, key: &str) -> Result<Option<JsonText>, String> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v @ Value::Object(_)) => JsonText::from_value(v)
            .map(Some)
            .map_err(|e| format!("its {key}: {e}")),
        Some(_) => Err(format!("its {key} is not an object")),
    }
}

/// The handshake's result.
pub fn hello(result: &Value) -> Result<ServerHello, String> {
    let o = result
        .as_object()
        .ok_or("the initialize result is not an object")?;
    let version = o
        .get("protocolVersion")
        .and_then(Value::as_str)
        .ok_or("the initialize result has no protocolVersion")?;
    if !VERSIONS.contains(&version) {
        return Err(format!(
            "the server speaks MCP {:?}, which gatehouse does not ({})",
            short(version),
            VERSIONS.join(", ")
        ));
    }
    let info = o.get("serverInfo").and_then(Value::as_object);
    let get = |k: &str| {
        info.and_then(|i| i.get(k))
            .and_then(Value::as_str)
            .map(short)
            .unwrap_or_default()
    };
    let caps = o.get("capabilities").and_then(Value::as_object);
    if caps.and_then(|c| c.get("tools")).is_none() {
        return Err("the server offers no tools (its capabilities have no \"tools\")".into());
    }
    let list_changed = caps
        .and_then(|c| c.get("tools"))
        .and_then(|t| t.get("listChanged"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    Ok(ServerHello {
        protocol_version: version.to_owned(),
        name: get("name"),
        version: get("version"),
        tools_list_changed: list_changed,
    })
}

/// At most 128 characters of a server's string, for messages.
fn short(s: &str) -> String {
    s.chars().take(128).collect()
}

/// One page of `tools/list` added to `list`; the next cursor, if any.
pub fn tools_page(result: &Value, list: &mut ToolList) -> Result<Option<String>, String> {
    let tools = result
        .get("tools")
        .and_then(Value::as_array)
        .ok_or("the tools/list result has no \"tools\" array")?;
    for t in tools {
        if list.tools.len() >= TOOLS_MAX {
            list.dropped.push(format!(
                "more than {TOOLS_MAX} tools: the rest are not offered"
            ));
            return Ok(None);
        }
        match tool_def(t) {
            Ok(d) if list.tools.iter().any(|x| x.name == d.name) => list.dropped.push(format!(
                "{}: listed twice; the later one is dropped",
                d.name
            )),
            Ok(d) => list.tools.push(d),
            Err(e) => list.dropped.push(e),
        }
    }
    match result.get("nextCursor") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(c)) if c.len() <= 1024 => Ok(Some(c.clone())),
        Some(_) => Err("the tools/list nextCursor is not a short string".into()),
    }
}

fn tool_def(t: &Value) -> Result<ToolDef, String> {
    let o = t.as_object().ok_or("a tool that is not an object")?;
    let name = match o.get("name") {
        Some(Value::String(n)) => ServerToolName::try_from(n.clone())?,
        _ => return Err("a tool without a name".into()),
    };
    let why = |e: String| format!("{name}: {e}");
    let input_schema = json_field(o, "inputSchema")
        .map_err(why)?
        .ok_or_else(|| format!("{name}: it has no inputSchema object"))?;
    Ok(ToolDef {
        title: text_field(o, "title").map_err(why)?,
        description: text_field(o, "description").map_err(why)?,
        input_schema,
        output_schema: json_field(o, "outputSchema").map_err(why)?,
        annotations: json_field(o, "annotations").map_err(why)?,
        name,
    })
}

/// A `tools/call` result.
pub fn call_output(result: &Value) -> Result<CallOutput, String> {
    let o = result
        .as_object()
        .ok_or("the tools/call result is not an object")?;
    let mut out = CallOutput {
        is_error: o.get("isError").and_then(Value::as_bool).unwrap_or(false),
        content: Vec::new(),
        structured: None,
        truncated: false,
    };
    let mut budget = RESULT_TEXT_MAX;
    fn push_text(out: &mut CallOutput, budget: &mut usize, text: String) {
        if text.len() > *budget {
            let mut cut = *budget;
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            out.truncated = true;
            out.content.push(ContentItem::Text(text[..cut].to_owned()));
            *budget = 0;
        } else {
            *budget -= text.len();
            out.content.push(ContentItem::Text(text));
        }
    }
    let push =
        |out: &mut CallOutput, budget: &mut usize, text: String| push_text(out, budget, text);
    let items = match o.get("content") {
        None | Some(Value::Null) => &Vec::new(),
        Some(Value::Array(a)) => a,
        Some(_) => return Err("the tools/call result's content is not an array".into()),
    };
    for item in items {
        if budget == 0 {
            out.truncated = true;
            break;
        }
        let kind = item.get("type").and_then(Value::as_str).unwrap_or("");
        let s = |k: &str| item.get(k).and_then(Value::as_str);
        match kind {
            "text" => push(
                &mut out,
                &mut budget,
                s("text").unwrap_or_default().to_owned(),
            ),
            "resource" => {
                let r = item.get("resource");
                let uri = r.and_then(|r| r.get("uri")).and_then(Value::as_str);
                match r.and_then(|r| r.get("text")).and_then(Value::as_str) {
                    Some(t) => push(
                        &mut out,
                        &mut budget,
                        format!("[resource {}]\n{t}", short(uri.unwrap_or(""))),
                    ),
                    None => out.content.push(ContentItem::Omitted(format!(
                        "a binary resource {}, not passed on",
                        short(uri.unwrap_or(""))
                    ))),
                }
            }
            "resource_link" => push(
                &mut out,
                &mut budget,
                format!(
                    "[link {}: {}]",
                    short(s("name").unwrap_or("")),
                    short(s("uri").unwrap_or(""))
                ),
            ),
            "image" | "audio" => out.content.push(ContentItem::Omitted(format!(
                "{kind} ({}, {} base64 characters), not passed on",
                short(s("mimeType").unwrap_or("?")),
                s("data").map_or(0, str::len)
            ))),
            other => out.content.push(ContentItem::Omitted(format!(
                "content of type {:?}, not passed on",
                short(other)
            ))),
        }
    }
    if let Some(v @ Value::Object(_)) = o.get("structuredContent") {
        match JsonText::from_value(v) {
            Ok(t) => out.structured = Some(t),
            Err(_) => out.truncated = true,
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tools_page_keeps_what_is_well_formed() {
        let page = json!({"tools": [
            {"name": "echo", "description": "Echo", "inputSchema": {"type": "object"},
             "annotations": {"readOnlyHint": true}},
            {"name": "bad name", "inputSchema": {}},
            {"name": "noschema"},
            {"name": "echo", "inputSchema": {"type": "object"}},
            {"name": "long", "description": "x".repeat(TEXT_MAX + 1), "inputSchema": {}},
        ], "nextCursor": "p2"});
        let mut list = ToolList {
            tools: vec![],
            dropped: vec![],
        };
        assert_eq!(tools_page(&page, &mut list).unwrap().as_deref(), Some("p2"));
        assert_eq!(list.tools.len(), 1);
        assert_eq!(list.tools[0].name.as_str(), "echo");
        assert_eq!(
            list.tools[0].annotations.as_ref().unwrap().as_str(),
            r#"{"readOnlyHint":true}"#
        );
        assert_eq!(list.dropped.len(), 4, "{:?}", list.dropped);
        assert!(list.dropped[0].contains("is not a tool name"));
        assert!(list.dropped[1].contains("no inputSchema"));
        assert!(list.dropped[2].contains("listed twice"));
        assert!(list.dropped[3].contains("more than"));
    }

    #[test]
    fn call_output_passes_text_and_describes_the_rest() {
        let r = json!({"content": [
            {"type": "text", "text": "hello"},
            {"type": "image", "mimeType": "image/png", "data": "AAAA"},
            {"type": "resource", "resource": {"uri": "file:///x", "text": "body"}},
        ], "isError": true, "structuredContent": {"b": 1, "a": 2}});
        let out = call_output(&r).unwrap();
        assert!(out.is_error);
        assert_eq!(out.content[0], ContentItem::Text("hello".into()));
        assert!(matches!(&out.content[1], ContentItem::Omitted(s) if s.contains("image/png")));
        assert_eq!(
            out.content[2],
            ContentItem::Text("[resource file:///x]\nbody".into())
        );
        assert_eq!(out.structured.unwrap().as_str(), r#"{"a":2,"b":1}"#);
        let big = json!({"content": [{"type": "text", "text": "é".repeat(RESULT_TEXT_MAX)}]});
        let out = call_output(&big).unwrap();
        assert!(out.truncated);
        assert!(matches!(&out.content[0], ContentItem::Text(t) if t.len() <= RESULT_TEXT_MAX));
    }

    #[test]
    fn the_handshake_is_checked() {
        let ok = json!({"protocolVersion": "2025-06-18", "capabilities": {"tools": {"listChanged": true}},
                        "serverInfo": {"name": "s", "version": "1"}});
        let h = hello(&ok).unwrap();
        assert!(h.tools_list_changed);
        assert_eq!(h.name, "s");
        let old = json!({"protocolVersion": "1999-01-01", "capabilities": {"tools": {}}});
        assert!(hello(&old).unwrap_err().contains("does not"));
        let no_tools = json!({"protocolVersion": "2025-06-18", "capabilities": {}});
        assert!(hello(&no_tools).unwrap_err().contains("no tools"));
    }

    #[test]
    fn only_ping_is_answered() {
        let id = json!(7);
        assert_eq!(answer_server_request(&id, "ping")["result"], json!({}));
        assert_eq!(
            answer_server_request(&id, "sampling/createMessage")["error"]["code"],
            json!(-32601)
        );
    }
}
