// The servers-helper's Windows loop, driven as the broker drives it (issue 19).
#![cfg(windows)]
//! The servers-helper binary as the Windows spawner starts it (`sandbox::windows::spawn_helper`
//! with the servers profile's policy, its channel overlapped): this test is its router, and for
//! each connection makes a pipe pair, duplicates one end into the helper with the `Attach`
//! (`pipe_into`, as the broker does through the process handle the spawner gives it) and plays
//! the MCP server on the other end itself, one line at a time: the handshake, a listing, a call
//! past its deadline (answered with the limit, the server told to cancel), a server that writes
//! what is not JSON (its connection closed, the watch told why, its pipe ended), a `Detach`
//! (answered, the pipe ended), and the channel's end (the helper exits 0).
//!
//! Under Wine the token is not restricted and the job's limits are not all enforced: the spawn
//! and the helper run degraded there (named in its report, checked by `check_hello`).

use ipc_schema::codec::{read_frame, write_frame};
use ipc_schema::servers::{
    ConnId, JsonText, ServerEvent, ServerName, ServerToolName, ServersReply, ServersRequest,
};
use ipc_schema::{Body, Envelope, ErrorCode, Role, MAX_FRAME};
use sandbox::windows::{self as w, running_under_wine, ChannelIo};
use sandbox::{wincfg, Profile};
use serde_json::{json, Value};
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::windows::io::{AsHandle, OwnedHandle};

struct Helper {
    child: w::ConfinedChild,
    chan: File,
    next: u64,
}

impl Helper {
    fn spawn() -> Helper {
        let policy = wincfg::helper_policy(&Profile::Servers).unwrap();
        let stderr = std::io::stderr();
        let args: Vec<std::ffi::OsString> = match running_under_wine() {
            true => vec!["--allow-degraded".into()],
            false => vec![],
        };
        let w::SpawnedHelper { child, channel } = w::spawn_helper(
            &policy,
            &gatehouse_tests::bin("servers-helper"),
            &args,
            ChannelIo::Overlapped,
            ChannelIo::Blocking,
            stderr.as_handle(),
            w::SpawnOptions {
                allow_degraded: running_under_wine(),
            },
        )
        .unwrap_or_else(|e| panic!("spawn: {e}"));
        let mut chan = channel;
        let hello = read_frame(&mut chan, MAX_FRAME).unwrap().unwrap();
        let Body::Hello(hello) = hello.body else {
            panic!("not a hello: {:?}", hello.body);
        };
        assert_eq!(hello.role, Role::Servers);
        gatehouse_tests::windows::check_hello(&policy, &child, &hello.lockdown);
        Helper {
            child,
            chan,
            next: 1,
        }
    }

    fn send(&mut self, req: ServersRequest) -> u64 {
        let id = self.next;
        self.next += 1;
        write_frame(&mut self.chan, &Envelope::new(id, Body::Servers(req))).unwrap();
        id
    }

    /// An `Attach` for `conn`, with the helper's end of a fresh pipe pair duplicated into it;
    /// the server's end (ours).
    fn attach(&mut self, conn: u64) -> (u64, Server) {
        let (ours, theirs) = w::channel_pair(ChannelIo::Overlapped, ChannelIo::Blocking).unwrap();
        let passed = w::pipe_into(self.child.process(), theirs.as_handle()).unwrap();
        drop(theirs);
        let id = self.next;
        self.next += 1;
        let env = Envelope::new(
            id,
            Body::Servers(ServersRequest::Attach {
                conn: ConnId(conn),
                server: ServerName::try_from("fake".to_string()).unwrap(),
            }),
        );
        write_frame(&mut self.chan, &env).unwrap();
        self.chan.write_all(&passed.0.to_le_bytes()).unwrap();
        (id, Server::new(ours))
    }

    /// The reply to request `id` (replies may come in any order: others are kept).
    fn reply(&mut self, id: u64, kept: &mut Vec<Envelope>) -> Body {
        if let Some(i) = kept.iter().position(|e| e.id == id) {
            return kept.remove(i).body;
        }
        loop {
            let env = read_frame(&mut self.chan, MAX_FRAME).unwrap().unwrap();
            if env.id == id {
                return env.body;
            }
            kept.push(env);
        }
    }
}

/// The MCP server's side of one connection: newline-delimited JSON-RPC.
struct Server {
    rd: BufReader<File>,
    wr: File,
}

impl Server {
    fn new(h: OwnedHandle) -> Server {
        let f = File::from(h);
        Server {
            wr: f.try_clone().unwrap(),
            rd: BufReader::new(f),
        }
    }

    fn read(&mut self) -> Value {
        let mut line = String::new();
        assert!(self.rd.read_line(&mut line).unwrap() > 0, "the pipe ended");
        serde_json::from_str(&line).unwrap()
    }

    fn answer(&mut self, req: &Value, result: Value) {
        let msg = json!({"jsonrpc": "2.0", "id": req["id"], "result": result});
        writeln!(self.wr, "{msg}").unwrap();
    }

    /// The helper closed its end: a read ends (a broken pipe on Windows, or no bytes).
    fn ended(&mut self) -> bool {
        let mut b = [0u8; 1];
        !matches!(self.rd.read(&mut b), Ok(n) if n > 0)
    }

    /// The handshake, as a server answers it.
    fn handshake(&mut self) {
        let init = self.read();
        assert_eq!(init["method"], "initialize", "{init}");
        self.answer(
            &init,
            json!({"protocolVersion": "2025-06-18", "capabilities": {"tools": {}},
                   "serverInfo": {"name": "fake", "version": "1"}}),
        );
        let note = self.read();
        assert_eq!(note["method"], "notifications/initialized", "{note}");
    }
}

#[test]
fn the_windows_loop_serves_its_servers_pipes_as_the_linux_one_its_sockets() {
    let mut h = Helper::spawn();
    let mut kept = Vec::new();

    // The handshake: answered once the server initialized.
    let (attach, mut s) = h.attach(1);
    s.handshake();
    match h.reply(attach, &mut kept) {
        Body::ServersReply(ServersReply::Attached(hello)) => {
            assert_eq!(hello.name, "fake");
            assert_eq!(hello.protocol_version, "2025-06-18");
        }
        other => panic!("{other:?}"),
    }

    // A listing, its answer written in two pieces (the message is whole only with the second:
    // the reader task keeps the first until then).
    let list = h.send(ServersRequest::ListTools { conn: ConnId(1) });
    let req = s.read();
    assert_eq!(req["method"], "tools/list", "{req}");
    let answer = json!({"jsonrpc": "2.0", "id": req["id"],
        "result": {"tools": [{"name": "echo", "inputSchema": {"type": "object"}}]}})
    .to_string();
    let (first, rest) = answer.split_at(answer.len() / 2);
    s.wr.write_all(first.as_bytes()).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(200));
    writeln!(s.wr, "{rest}").unwrap();
    match h.reply(list, &mut kept) {
        Body::ServersReply(ServersReply::Tools(t)) => {
            assert_eq!(t.tools.len(), 1, "{t:?}");
            assert_eq!(t.tools[0].name.as_str(), "echo");
        }
        other => panic!("{other:?}"),
    }

    // A call the server never answers: the limit after its timeout, and the server is told to
    // cancel it (the timer's work).
    let call = h.send(ServersRequest::CallTool {
        conn: ConnId(1),
        tool: ServerToolName::try_from("echo".to_string()).unwrap(),
        arguments: JsonText::from_value(&json!({"text": "x"})).unwrap(),
        timeout_ms: 300,
    });
    let req = s.read();
    assert_eq!(req["method"], "tools/call", "{req}");
    match h.reply(call, &mut kept) {
        Body::Error(e) => {
            assert_eq!(e.code, ErrorCode::Limit, "{e:?}");
            assert!(e.message.contains("did not answer in time"), "{e:?}");
        }
        other => panic!("{other:?}"),
    }
    let cancel = s.read();
    assert_eq!(cancel["method"], "notifications/cancelled", "{cancel}");
    assert_eq!(cancel["params"]["requestId"], req["id"], "{cancel}");

    // The server writes what is not JSON: its connection closes, the watch says why, and its
    // pipe ends.
    let watch = h.send(ServersRequest::Watch { conn: ConnId(1) });
    writeln!(s.wr, "this is not JSON").unwrap();
    match h.reply(watch, &mut kept) {
        Body::ServersReply(ServersReply::Event(ServerEvent::Closed(why))) => {
            assert!(why.contains("malformed message"), "{why}")
        }
        other => panic!("{other:?}"),
    }
    assert!(s.ended());
    // A request on the closed connection is answered with the reason.
    let list = h.send(ServersRequest::ListTools { conn: ConnId(1) });
    match h.reply(list, &mut kept) {
        Body::Error(e) => assert!(e.message.contains("is gone"), "{e:?}"),
        other => panic!("{other:?}"),
    }

    // A server that writes a message longer than gatehouse takes: closed saying so.
    let (attach, mut s3) = h.attach(3);
    s3.handshake();
    assert!(matches!(
        h.reply(attach, &mut kept),
        Body::ServersReply(ServersReply::Attached(_))
    ));
    let watch = h.send(ServersRequest::Watch { conn: ConnId(3) });
    let long = vec![b'x'; ipc_schema::servers::MESSAGE_MAX + 1];
    // The helper may close the pipe before it has read it all.
    let _ = s3.wr.write_all(&long);
    match h.reply(watch, &mut kept) {
        Body::ServersReply(ServersReply::Event(ServerEvent::Closed(why))) => {
            assert!(why.contains("longer than"), "{why}")
        }
        other => panic!("{other:?}"),
    }
    assert!(s3.ended());

    // A second connection, detached: answered, and its pipe ends (the control for the end
    // above: a server that keeps to the protocol).
    let (attach, mut s2) = h.attach(2);
    s2.handshake();
    assert!(matches!(
        h.reply(attach, &mut kept),
        Body::ServersReply(ServersReply::Attached(_))
    ));
    let detach = h.send(ServersRequest::Detach { conn: ConnId(2) });
    assert_eq!(h.reply(detach, &mut kept), Body::Pong);
    assert!(s2.ended());
    assert!(kept.is_empty(), "{kept:?}");

    // The channel's end: the helper exits 0.
    let Helper { child, chan, .. } = h;
    drop(chan);
    assert_eq!(child.wait_timeout(30_000).unwrap(), Some(0));
}
