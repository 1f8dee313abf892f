//! A minimal third-party MCP server over stdio, for the tests that start one through gatehouse
//! where no Python is (Windows, under Wine): one JSON-RPC message a line; `initialize`,
//! `tools/list` (`echo` and `where`) and `tools/call`; notifications are read and ignored;
//! any other request gets "method not found". `where` says the profile directory it runs
//! with (`USERPROFILE`, else `HOME`), so a test sees the sandbox's state directory.

use serde_json::{json, Value};
use std::io::{BufRead, Write};

fn answer(method: &str, params: &Value) -> Result<Value, (i64, String)> {
    match method {
        "initialize" => Ok(json!({
            "protocolVersion": params["protocolVersion"].as_str().unwrap_or("2025-06-18"),
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "gatehouse-test-mcp-server", "version": "1"}
        })),
        "tools/list" => Ok(json!({"tools": [
            {"name": "echo", "description": "Says the text back.",
             "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}}},
            {"name": "where", "description": "Says the profile directory it runs with.",
             "inputSchema": {"type": "object", "properties": {}}}
        ]})),
        "tools/call" => {
            let text = match params["name"].as_str() {
                Some("echo") => format!(
                    "echo: {}",
                    params["arguments"]["text"].as_str().unwrap_or("")
                ),
                Some("where") => {
                    let home = std::env::var("USERPROFILE").or_else(|_| std::env::var("HOME"));
                    format!("profile {}", home.unwrap_or_default())
                }
                other => return Err((-32602, format!("no tool {other:?}"))),
            };
            Ok(json!({"content": [{"type": "text", "text": text}], "isError": false}))
        }
        other => Err((-32601, format!("method not found: {other}"))),
    }
}

fn main() {
    let stdin = std::io::stdin();
    let mut stdout = std::io::stdout();
    for line in stdin.lock().lines() {
        let Ok(line) = line else { break };
        let Ok(msg) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        let (Some(id), Some(method)) = (msg.get("id"), msg["method"].as_str()) else {
            continue;
        };
        let reply = match answer(method, &msg["params"]) {
            Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
            Err((code, message)) => {
                json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
            }
        };
        if writeln!(stdout, "{reply}")
            .and_then(|()| stdout.flush())
            .is_err()
        {
            break;
        }
    }
}
