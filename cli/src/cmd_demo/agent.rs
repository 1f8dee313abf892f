//! The demo's scripted agent: a real `gatehouse mcp` process, spoken to in MCP JSON-RPC over
//! its stdin and stdout exactly as an agent's MCP client would (the initialize handshake, then
//! `tools/call`s). Its replies arrive on the demo's event channel from a reader thread.

use super::Ev;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::Sender;

/// The protocol version the demo asks for (one of those the gateway serves).
const PROTOCOL: &str = "2025-06-18";

pub struct Agent {
    child: Child,
    stdin: Option<ChildStdin>,
    next_id: u64,
}

impl Agent {
    /// Starts `gatehouse --data-dir DATA mcp EXTRA...` in `project` with HOME set to `home`.
    pub fn start(
        exe: &Path,
        data: &Path,
        (project, home): (&Path, &Path),
        extra: &[&str],
        log: &Path,
        tx: Sender<Ev>,
    ) -> Result<Agent, String> {
        let log = std::fs::File::create(log).map_err(|e| format!("{}: {e}", log.display()))?;
        let mut child = Command::new(exe)
            .arg("--data-dir")
            .arg(data)
            .arg("mcp")
            .args(extra)
            .current_dir(project)
            .env("HOME", home)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .map_err(|e| format!("cannot start gatehouse mcp: {e}"))?;
        let stdout = child.stdout.take().expect("piped stdout");
        let stdin = child.stdin.take();
        std::thread::Builder::new()
            .name("demo-mcp-reader".into())
            .spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let ev = match line {
                        Ok(l) if l.trim().is_empty() => continue,
                        Ok(l) => match serde_json::from_str::<Value>(&l) {
                            Ok(v) => Ev::Mcp(v),
                            Err(e) => Ev::McpClosed(format!(
                                "gatehouse mcp wrote a line that is not JSON ({e}): {l}"
                            )),
                        },
                        Err(e) => Ev::McpClosed(format!("reading gatehouse mcp: {e}")),
                    };
                    let last = matches!(ev, Ev::McpClosed(_));
                    if tx.send(ev).is_err() || last {
                        return;
                    }
                }
                let _ = tx.send(Ev::McpClosed("gatehouse mcp closed its output".into()));
            })
            .map_err(|e| format!("cannot start a thread: {e}"))?;
        Ok(Agent {
            child,
            stdin,
            next_id: 1,
        })
    }

    fn write(&mut self, msg: &Value) -> Result<(), String> {
        let stdin = self
            .stdin
            .as_mut()
            .ok_or_else(|| "the agent's input is closed".to_string())?;
        let mut line = serde_json::to_vec(msg).expect("serialisable");
        line.push(b'\n');
        stdin
            .write_all(&line)
            .and_then(|_| stdin.flush())
            .map_err(|e| format!("writing to gatehouse mcp: {e}"))
    }

    /// Sends a request; returns its id (the reply comes as an [`Ev::Mcp`] with that id).
    pub fn request(&mut self, method: &str, params: Value) -> Result<u64, String> {
        let id = self.next_id;
        self.next_id += 1;
        self.write(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))?;
        Ok(id)
    }

    pub fn initialize(&mut self) -> Result<u64, String> {
        self.request(
            "initialize",
            json!({
                "protocolVersion": PROTOCOL,
                "capabilities": {},
                "clientInfo": {"name": "gatehouse-demo", "version": env!("CARGO_PKG_VERSION")},
            }),
        )
    }

    pub fn initialized(&mut self) -> Result<(), String> {
        self.write(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
    }

    pub fn call(&mut self, tool: &str, arguments: &Value) -> Result<u64, String> {
        self.request("tools/call", json!({"name": tool, "arguments": arguments}))
    }

    /// Closes the agent's input (its session ends) and waits for the process.
    pub fn finish(mut self) {
        self.stdin = None;
        let _ = self.child.wait();
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        self.stdin = None;
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
