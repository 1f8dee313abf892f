// Drives the Linux binaries (ipc_schema::platform::Missing elsewhere).
#![cfg(target_os = "linux")]
//! `gatehouse mcp` over stdio, byte for byte: both MCP eras, and the strict JSON-RPC layer
//! (every malformed message gets the error the JSON-RPC specification names, and the session
//! goes on).

#![forbid(unsafe_code)]

mod mcp_support;

use mcp_support::*;
use serde_json::{json, Value};

const TOOLS: [&str; 12] = [
    "read_file",
    "list_dir",
    "search_files",
    "grep",
    "write_file",
    "edit_file",
    "delete_path",
    "move_path",
    "undo_change",
    "fetch_url",
    "http_request",
    "run_command",
];

fn tool_names(list: &Value) -> Vec<String> {
    list["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("{list}"))
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect()
}

fn error_of(r: &Value) -> (i64, String) {
    let e = r
        .get("error")
        .unwrap_or_else(|| panic!("expected an error: {r}"));
    (
        e["code"].as_i64().unwrap(),
        e["message"].as_str().unwrap().to_string(),
    )
}

#[test]
fn each_handshake_version_is_served_with_the_fields_it_knows() {
    let inst = Instance::new(None);
    let _b = inst.broker(&[]);
    for (asked, answered) in [
        ("2024-11-05", "2024-11-05"),
        ("2025-03-26", "2025-03-26"),
        ("2025-06-18", "2025-06-18"),
        ("2025-11-25", "2025-11-25"),
        ("2026-07-28", "2025-11-25"),
        ("1999-01-01", "2025-11-25"),
    ] {
        let mut m = inst.mcp(&[]);
        let init = m.initialize(asked);
        assert_eq!(init["protocolVersion"], answered, "{asked}: {init}");
        assert_eq!(init["serverInfo"]["name"], "gatehouse");
        assert_eq!(
            init["capabilities"],
            json!({"tools": {"listChanged": false}})
        );
        assert!(init["instructions"]
            .as_str()
            .unwrap()
            .contains("held until the human approves"));
        assert!(init.get("resultType").is_none(), "{init}");

        let list = m.request("tools/list", json!({}))["result"].clone();
        assert_eq!(tool_names(&list), TOOLS, "{asked}");
        let read = &list["tools"][0];
        assert_eq!(read["inputSchema"]["required"], json!(["path"]));
        assert_eq!(
            read.get("annotations").is_some(),
            answered >= "2025-03-26",
            "{asked}: {read}"
        );
        assert_eq!(
            read.get("title").is_some(),
            answered >= "2025-06-18",
            "{asked}: {read}"
        );
        assert_eq!(m.request("ping", json!({}))["result"], json!({}));

        let (err, text) = m.call("read_file", json!({"path": "hello.txt"}));
        assert!(!err, "{text}");
        assert_eq!(text, "hello\n");

        let again = m.request(
            "initialize",
            json!({"protocolVersion": asked, "capabilities": {}, "clientInfo": {"name": "x", "version": "1"}}),
        );
        let (code, msg) = error_of(&again);
        assert_eq!(code, -32600);
        assert!(msg.contains("initialize was already done"), "{msg}");

        // The client closing stdin ends the session: the gateway exits cleanly.
        m.close();
        assert!(m.wait().success(), "{}", m.stderr());
        assert!(
            m.stderr().contains("gatehouse mcp: locked down"),
            "{}",
            m.stderr()
        );
    }
}

#[test]
fn the_2026_revision_is_served_per_request_without_a_handshake() {
    let inst = Instance::new(None);
    let _b = inst.broker(&[]);
    let mut m = inst.mcp(&[]);

    let d = m.request("server/discover", json!({"_meta": modern_meta()}))["result"].clone();
    assert_eq!(
        d["supportedVersions"],
        json!([
            "2026-07-28",
            "2025-11-25",
            "2025-06-18",
            "2025-03-26",
            "2024-11-05"
        ])
    );
    assert_eq!(d["resultType"], "complete");
    assert_eq!(d["capabilities"], json!({"tools": {"listChanged": false}}));
    assert_eq!(d["ttlMs"], 0);
    assert_eq!(d["cacheScope"], "private");
    assert_eq!(
        d["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "gatehouse"
    );

    let list = m.request("tools/list", json!({"_meta": modern_meta()}))["result"].clone();
    assert_eq!(tool_names(&list), TOOLS);
    assert_eq!(list["resultType"], "complete");
    assert_eq!(list["ttlMs"], 0);
    assert!(list["tools"][0].get("title").is_some());

    let r = m.request(
        "tools/call",
        json!({"name": "read_file", "arguments": {"path": "hello.txt"}, "_meta": modern_meta()}),
    );
    assert_eq!(r["result"]["resultType"], "complete");
    assert_eq!(tool_text(&r), (false, "hello\n".to_string()));

    // ping was removed in 2026-07-28.
    let (code, _) = error_of(&m.request("ping", json!({"_meta": modern_meta()})));
    assert_eq!(code, -32601);

    // A version the server does not speak per request: the revision's own error, listing what
    // it speaks.
    for v in ["2031-01-01", "2025-11-25"] {
        let mut meta = modern_meta();
        meta["io.modelcontextprotocol/protocolVersion"] = json!(v);
        let r = m.request("tools/list", json!({"_meta": meta}));
        let (code, msg) = error_of(&r);
        assert_eq!(code, -32022, "{v}");
        assert_eq!(msg, "Unsupported protocol version");
        assert_eq!(r["error"]["data"]["requested"], v);
        assert_eq!(r["error"]["data"]["supported"][0], "2026-07-28");
    }
    // The required capabilities missing; no version at all and no handshake.
    let r = m.request(
        "tools/list",
        json!({"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}}),
    );
    let (code, msg) = error_of(&r);
    assert_eq!(code, -32602);
    assert!(msg.contains("clientCapabilities\" is required"), "{msg}");
    let (code, msg) = error_of(&m.request("tools/list", json!({})));
    assert_eq!(code, -32602);
    assert!(msg.contains("send initialize first"), "{msg}");
    let (code, _) = error_of(&m.request("server/discover", json!({})));
    assert_eq!(code, -32602);
    // A legacy ping before any handshake is fine.
    assert_eq!(m.request("ping", json!({}))["result"], json!({}));
}

#[test]
fn malformed_messages_get_the_json_rpc_error_and_the_session_goes_on() {
    let inst = Instance::new(None);
    let _b = inst.broker(&[]);
    let mut m = inst.mcp(&[]);
    m.initialize("2025-06-18");

    let five_mib = "x".repeat(5 << 20);
    let cases: Vec<(Vec<u8>, i64, Value, &str)> = vec![
        (b"{oops".to_vec(), -32700, Value::Null, "Parse error"),
        (b"\xff\xfe{}".to_vec(), -32700, Value::Null, "Parse error"),
        (br#"{"jsonrpc":"2.0","id":1,"method":"tools/list","method":"x"}"#.to_vec(), -32700, Value::Null, "duplicate key"),
        (br#"[{"jsonrpc":"2.0","id":2,"method":"tools/list"}]"#.to_vec(), -32600, Value::Null, "batches are not supported"),
        (br#"{"jsonrpc":"2.0","id":3,"method":"notifications/initialized"}"#.to_vec(), -32600, json!(3), "must not carry an id"),
        (br#"{"jsonrpc":"2.0","id":null,"method":"tools/list"}"#.to_vec(), -32600, Value::Null, "not null"),
        (br#"{"jsonrpc":"1.0","id":4,"method":"tools/list"}"#.to_vec(), -32600, json!(4), "\"2.0\""),
        (br#"{"jsonrpc":"2.0","id":5,"method":"tools/list","extra":true}"#.to_vec(), -32600, json!(5), "unexpected member"),
        (br#"{"jsonrpc":"2.0","id":6,"method":"resources/list"}"#.to_vec(), -32601, json!(6), "Method not found: resources/list"),
        (br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":[1]}"#.to_vec(), -32602, json!(7), "must be an object"),
        (br#"{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{}}"#.to_vec(), -32602, json!(8), "\"name\" is required"),
        (br#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"read_file","arguments":"x"}}"#.to_vec(), -32602, json!(9), "\"arguments\" must be an object"),
        (br#"{"jsonrpc":"2.0","id":10,"method":"tools/list","params":{"cursor":"abc"}}"#.to_vec(), -32602, json!(10), "unknown cursor"),
        (format!("{}{}", "[".repeat(100), "]".repeat(100)).into_bytes(), -32600, Value::Null, "deeper than 64"),
        (
            format!(r#"{{"jsonrpc":"2.0","id":11,"method":"tools/call","params":{{"name":"write_file","arguments":{{"path":"big","content":"{five_mib}"}}}}}}"#).into_bytes(),
            -32600, json!(11), "the limit is 4194304 bytes",
        ),
        (
            format!(r#"{{"method":"tools/call","params":{{"name":"write_file","arguments":{{"path":"big","content":"{five_mib}"}}}},"jsonrpc":"2.0","id":"late-id"}}"#).into_bytes(),
            -32600, json!("late-id"), "the limit is 4194304 bytes",
        ),
        (five_mib.clone().into_bytes(), -32600, Value::Null, "is 5242880 bytes long"),
    ];
    for (line, code, id, text) in cases {
        let mut bytes = line.clone();
        bytes.push(b'\n');
        m.send_raw(&bytes);
        let r = m.recv();
        let shown = String::from_utf8_lossy(&line[..line.len().min(80)]).to_string();
        assert_eq!(r["id"], id, "{shown}: {r}");
        let (c, msg) = error_of(&r);
        assert_eq!(c, code, "{shown}: {msg}");
        assert!(msg.contains(text), "{shown}: {msg}");
        // The session goes on.
        let list = m.request("tools/list", json!({}));
        assert_eq!(tool_names(&list["result"]).len(), 12, "after {shown}");
    }
    // A notification that is not understood, a blank line and a stray response get no answer.
    m.send_raw(b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/whatever\"}\n\n   \n{\"jsonrpc\":\"2.0\",\"id\":99,\"result\":{}}\n");
    let r = m.request("ping", json!({}));
    assert_eq!(
        r["result"],
        json!({}),
        "the next line answered is the ping: {r}"
    );
    assert!(
        m.stderr().contains("ignored a response (id 99)"),
        "{}",
        m.stderr()
    );
    drop(m);
}

/// A `tools/call` nested deeper than the limit is refused unparsed, but on its own id whenever
/// the id stands readable at the top level (before or after the deep part, a number or a
/// string): a client waiting on that id gets its answer. An id that cannot be read (none, only
/// inside the deep part, two of them, the wrong type) still gets null, and the session goes on.
#[test]
fn a_too_deep_tools_call_is_refused_on_its_own_id() {
    let inst = Instance::new(None);
    let _b = inst.broker(&[]);
    let mut m = inst.mcp(&[]);
    m.initialize("2025-06-18");

    let deep = |n: usize| format!("{}\"x\"{}", "[".repeat(n), "]".repeat(n));
    let d = deep(100);
    let call = |args: &str| {
        format!(
            r#""method":"tools/call","params":{{"name":"read_file","arguments":{{"path":"a","x":{args}}}}}"#
        )
    };
    let cases: Vec<(String, Value)> = vec![
        (
            format!(r#"{{"jsonrpc":"2.0","id":21,{}}}"#, call(&d)),
            json!(21),
        ),
        (
            format!(r#"{{"jsonrpc":"2.0",{},"id":22}}"#, call(&d)),
            json!(22),
        ),
        (
            format!(r#"{{"id":"before-deep","jsonrpc":"2.0",{}}}"#, call(&d)),
            json!("before-deep"),
        ),
        (
            format!(r#"{{{},"jsonrpc":"2.0","id":"after-deep"}}"#, call(&d)),
            json!("after-deep"),
        ),
        // 100,000 levels: the same answer, no recursion.
        (
            format!(r#"{{{},"jsonrpc":"2.0","id":23}}"#, call(&deep(100_000))),
            json!(23),
        ),
        // Unreadable ids: none, only nested, two, null, an object.
        (format!(r#"{{"jsonrpc":"2.0",{}}}"#, call(&d)), Value::Null),
        (
            format!(r#"{{"jsonrpc":"2.0","params":{{"id":24,"x":{d}}},"method":"tools/call"}}"#),
            Value::Null,
        ),
        (
            format!(r#"{{"jsonrpc":"2.0","id":25,{},"id":26}}"#, call(&d)),
            Value::Null,
        ),
        (
            format!(r#"{{"jsonrpc":"2.0","id":null,{}}}"#, call(&d)),
            Value::Null,
        ),
        (
            format!(r#"{{"jsonrpc":"2.0","id":{{"n":27}},{}}}"#, call(&d)),
            Value::Null,
        ),
    ];
    for (line, id) in cases {
        m.send_raw(format!("{line}\n").as_bytes());
        let r = m.recv();
        let shown = &line[..line.len().min(80)];
        assert_eq!(r["id"], id, "{shown}: {r}");
        let (c, msg) = error_of(&r);
        assert_eq!(c, -32600, "{shown}: {msg}");
        assert!(msg.contains("deeper than 64"), "{shown}: {msg}");
        // The session goes on, and the next answer is the next request's.
        let list = m.request("tools/list", json!({}));
        assert_eq!(tool_names(&list["result"]).len(), 12, "after {shown}");
    }
    drop(m);
}

#[test]
fn a_call_waiting_for_the_human_reports_progress_then_gives_up_naming_the_proposal() {
    let inst = Instance::new(None);
    let b = inst.broker(&[]);
    let mut m = inst.mcp(&["--approval-wait", "1"]);
    m.initialize("2025-06-18");
    let mut notes = Vec::new();
    let r = m.request_collecting(
        "tools/call",
        json!({"name": "write_file", "arguments": {"path": "later.txt", "content": "x"}, "_meta": {"progressToken": "tok-1"}}),
        &mut notes,
    );
    let (err, text) = tool_text(&r);
    assert!(err, "{text}");
    let pending = b.pending(1);
    assert_eq!(pending.len(), 1);
    let p = &pending[0];
    assert!(
        text.starts_with(&format!(
            "write_file is waiting for the human's approval: proposal {} was not decided within 1 s, so gatehouse stopped waiting. Nothing has been done yet."
        , p.id)),
        "{text}"
    );
    assert!(
        text.contains("Calling again with exactly the same arguments returns the human's decision"),
        "{text}"
    );
    assert!(!notes.is_empty(), "no progress before the result");
    for (i, n) in notes.iter().enumerate() {
        assert_eq!(n["method"], "notifications/progress", "{n}");
        assert_eq!(n["params"]["progressToken"], "tok-1");
        assert_eq!(n["params"]["progress"], json!(i as u64 + 1));
        assert!(
            n["params"]["message"]
                .as_str()
                .unwrap()
                .starts_with(&format!(
                    "waiting for the human to decide proposal {}",
                    p.id
                )),
            "{n}"
        );
    }
    assert!(!inst.file("later.txt").exists());

    // The same call while the proposal still waits: the ledger says so; nothing new is asked.
    let (err, text) = m.call("write_file", json!({"path": "later.txt", "content": "x"}));
    assert!(
        err && text.contains("waiting for the human's decision"),
        "{text}"
    );
    assert_eq!(b.pending(1).len(), 1);

    // Without a progress token, no notification is sent.
    let mut notes = Vec::new();
    let r = m.request_collecting(
        "tools/call",
        json!({"name": "delete_path", "arguments": {"path": "hello.txt"}}),
        &mut notes,
    );
    assert!(tool_text(&r).0);
    assert!(notes.is_empty(), "{notes:?}");
    assert!(inst.file("hello.txt").exists());
}

#[test]
fn stdout_carries_only_protocol_and_a_cancelled_call_gets_no_answer() {
    let inst = Instance::new(None);
    let b = inst.broker(&[]);
    let mut m = inst.mcp(&[]);
    m.initialize("2025-11-25");
    m.send(&json!({"jsonrpc": "2.0", "id": "w1", "method": "tools/call", "params": {"name": "write_file", "arguments": {"path": "c.txt", "content": "c"}}}));
    let p = b.pending(1).remove(0);
    m.send(&json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "w1", "reason": "user"}}));
    // The client gave up: the proposal is withdrawn, and a decision after that does nothing.
    let deadline = std::time::Instant::now() + mcp_support::PATIENCE;
    while !b.pending(0).is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "the proposal was not withdrawn"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let out = b.cli(&["approve", &p.id.0.to_string(), "allow"]);
    assert!(!out.status.success(), "a withdrawn proposal was approved");
    assert!(!inst.file("c.txt").exists());
    // The same call again is a new proposal; approved, it is carried out. The gateway never
    // answers the cancelled "w1" (a response to it would come first and fail the check below).
    m.send(&json!({"jsonrpc": "2.0", "id": "w2", "method": "tools/call", "params": {"name": "write_file", "arguments": {"path": "c.txt", "content": "c"}}}));
    let p2 = b.pending(1).remove(0);
    assert_ne!(p2.id, p.id);
    let out = b.cli(&["approve", &p2.id.0.to_string(), "allow"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r = m.recv();
    assert_eq!(r["id"], "w2", "{r}");
    assert!(!tool_text(&r).0, "{r}");
    assert_eq!(std::fs::read_to_string(inst.file("c.txt")).unwrap(), "c");
    // Every line so far parsed as JSON-RPC in `recv`; the logs went to stderr.
    assert!(
        m.stderr().contains(&format!(
            "the client cancelled write_file (request \"w1\"); proposal {} withdrawn",
            p.id
        )),
        "{}",
        m.stderr()
    );
}

#[test]
fn the_policy_s_rate_limit_comes_back_as_a_tool_error_naming_it() {
    let inst = Instance::new(Some(
        "revision = 0\n[tools]\nread_file = \"allow\"\n[limits]\nrequests_per_minute = 2\nconcurrent_requests = 8\n\
         [[grant]]\nroot = \"{ROOT}\"\ncapabilities = [\"read\"]\n",
    ));
    let _b = inst.broker(&[]);
    let mut m = inst.mcp(&[]);
    m.initialize("2025-11-25");
    for _ in 0..2 {
        assert_eq!(
            m.call("read_file", json!({"path": "hello.txt"})),
            (false, "hello\n".into())
        );
    }
    let (err, text) = m.call("read_file", json!({"path": "hello.txt"}));
    assert!(err, "{text}");
    assert!(
        text.starts_with("Refused: rate limit: this session made 2 calls in the last minute (limits.requests_per_minute = 2)"),
        "{text}"
    );
}
