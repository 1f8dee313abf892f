//! A minimal third-party MCP server over stdio, for the tests that start one through gatehouse
//! where no Python is (Windows, under Wine): one JSON-RPC message a line; `initialize`,
//! `tools/list` (`echo` and `where`) and `tools/call`; notifications are read and ignored;
//! any other request gets "method not found". `where` says the profile directory it runs
//! with (`USERPROFILE`, else `HOME`), so a test sees the sandbox's state directory; `connect`
//! asks the proxy `HTTPS_PROXY` names (`http://gatehouse:TOKEN@ADDR`, as gatehouse sets it)
//! for a tunnel to `target` and sends `GET /` through it: "STATUS BODY".

use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};

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
             "inputSchema": {"type": "object", "properties": {}}},
            {"name": "connect", "description": "GET / from the target through the proxy.",
             "inputSchema": {"type": "object", "properties": {"target": {"type": "string"}}}}
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
                Some("connect") => {
                    let target = params["arguments"]["target"].as_str().unwrap_or("");
                    through_proxy(target).unwrap_or_else(|e| format!("failed: {e}"))
                }
                other => return Err((-32602, format!("no tool {other:?}"))),
            };
            Ok(json!({"content": [{"type": "text", "text": text}], "isError": false}))
        }
        other => Err((-32601, format!("method not found: {other}"))),
    }
}

fn through_proxy(target: &str) -> std::io::Result<String> {
    let url = std::env::var("HTTPS_PROXY").map_err(std::io::Error::other)?;
    let rest = url
        .strip_prefix("http://gatehouse:")
        .ok_or_else(|| std::io::Error::other(url.clone()))?;
    let (token, addr) = rest
        .split_once('@')
        .ok_or_else(|| std::io::Error::other(url.clone()))?;
    let mut s = std::net::TcpStream::connect(addr.trim_end_matches('/'))?;
    s.set_read_timeout(Some(std::time::Duration::from_secs(30)))?;
    write!(
        s,
        "CONNECT {target} HTTP/1.1\r\nHost: {target}\r\nProxy-Authorization: Bearer {token}\r\n\r\n"
    )?;
    let mut r = BufReader::new(s.try_clone()?);
    let mut line = String::new();
    r.read_line(&mut line)?;
    let status = line.split(' ').nth(1).unwrap_or("0").to_string();
    loop {
        let mut h = String::new();
        if r.read_line(&mut h)? == 0 || h == "\r\n" {
            break;
        }
    }
    if status == "200" {
        let host = target.split(':').next().unwrap_or("");
        write!(
            s,
            "GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
        )?;
    }
    let mut body = String::new();
    let _ = r.read_to_string(&mut body);
    Ok(format!("{status} {}", body.replace(['\r', '\n'], " ")))
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
