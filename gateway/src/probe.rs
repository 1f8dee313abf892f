//! Test builds only (feature `test-hooks`): the `gatehouse.test/probe` method tries one thing the
//! gateway's lockdown forbids, so tests can show what the kernel refuses (with a positive control
//! run under `--test-skip-lockdown`). Release builds do not have the method.

use serde_json::{json, Map, Value};

pub const METHOD: &str = "gatehouse.test/probe";

fn outcome(r: std::io::Result<()>) -> Value {
    match r {
        Ok(()) => json!({"ok": true}),
        Err(e) => json!({"ok": false, "errno": e.raw_os_error(), "error": e.to_string()}),
    }
}

/// `{"op": "open", "path": P}`: open a file for reading. `{"op": "connect_unix", "path": P}`,
/// `{"op": "connect_tcp", "addr": "127.0.0.1:9"}`: make a new socket. `{"op": "exec", "path": P}`:
/// run a program.
pub fn run(params: Option<&Map<String, Value>>) -> Value {
    let get = |k: &str| {
        params
            .and_then(|p| p.get(k))
            .and_then(Value::as_str)
            .unwrap_or("")
    };
    match get("op") {
        "open" => outcome(std::fs::File::open(get("path")).map(drop)),
        #[cfg(unix)]
        "connect_unix" => outcome(std::os::unix::net::UnixStream::connect(get("path")).map(drop)),
        "connect_tcp" => outcome(std::net::TcpStream::connect(get("addr")).map(drop)),
        // stdio inherited: opening /dev/null would be refused first (no filesystem), and
        // that would hide what exec itself meets.
        "exec" => outcome(std::process::Command::new(get("path")).status().map(drop)),
        other => json!({"ok": false, "error": format!("unknown probe {other:?}")}),
    }
}
