//! `bench mcp`: `read_file` of a 4 KiB file called through `gatehouse mcp` (JSON-RPC over
//! stdio, the gateway, the broker, the fs-helper and back), beside what the same read costs
//! without the JSON layer (typed `ToolCall` frames on the gateway socket: the broker path), the
//! foundation's floor (a raw two-hop Unix-socket relay carrying the same frame sizes) and a
//! direct `read(2)` of the file, all measured in this run. Sequential latency (p50, p99) and
//! calls per second with 8 calls in flight. Nothing here asserts a timing.
//!
//! `cargo build --release --workspace && cargo run --release -p bench -- mcp`

use crate::stats::{us, Samples};
use ipc_schema::codec::{encode, read_frame, write_frame, MAX_FRAME};
use ipc_schema::fs::FsPath;
use ipc_schema::tool::{ReadFile, ToolCall, ToolReply, ToolResult};
use ipc_schema::{Body, Envelope};
use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

const FILE_SIZE: usize = 4096;
/// Sequential calls per path, taken in rounds that alternate between the paths so that
/// whatever else the machine does falls on all of them alike.
const ROUNDS: usize = 10;
const PER_ROUND: usize = 500;
const SEQUENTIAL: usize = ROUNDS * PER_ROUND;
/// Calls per pipelined run; each path runs `RATE_ROUNDS` times, alternating.
const PIPELINED: usize = 10_000;
const RATE_ROUNDS: usize = 3;
const WINDOW: usize = 8;

/// Times `PER_ROUND` calls of `f` into `v`.
fn sample(v: &mut Vec<Duration>, mut f: impl FnMut()) {
    for _ in 0..PER_ROUND {
        let t = Instant::now();
        f();
        v.push(t.elapsed());
    }
}

/// Calls per second with up to `WINDOW` in flight: `write(i)` sends call `i` (on a thread of
/// its own), `read()` waits for one answer. The writer flushes only before it would wait.
fn pipelined<W, F, R>(mut w: W, write: F, mut read: R) -> (f64, W)
where
    W: Write + Send + 'static,
    F: Fn(&mut W, usize) + Send + 'static,
    R: FnMut(),
{
    let (tx, rx) = std::sync::mpsc::sync_channel::<()>(WINDOW);
    let t = Instant::now();
    let writer = std::thread::spawn(move || {
        for i in 0..PIPELINED {
            if i >= WINDOW && rx.try_recv().is_err() {
                w.flush().unwrap();
                rx.recv().unwrap();
            }
            write(&mut w, i);
        }
        w.flush().unwrap();
        w
    });
    for _ in 0..PIPELINED {
        read();
        let _ = tx.try_send(());
    }
    let w = writer.join().unwrap();
    (PIPELINED as f64 / t.elapsed().as_secs_f64(), w)
}

/// The client end of relay -> echo threads answering each `req`-byte request with `reply` bytes.
fn relay(req: usize, reply: usize) -> UnixStream {
    let (client, front) = UnixStream::pair().unwrap();
    let (back, echo) = UnixStream::pair().unwrap();
    std::thread::spawn(move || {
        let mut r = BufReader::new(echo.try_clone().unwrap());
        let mut w = BufWriter::new(echo);
        let (mut buf, out) = (vec![0u8; req], vec![7u8; reply]);
        while r.read_exact(&mut buf).is_ok() {
            if w.write_all(&out).is_err() || (r.buffer().is_empty() && w.flush().is_err()) {
                return;
            }
        }
    });
    let forward = |mut from: UnixStream, mut to: UnixStream| {
        std::thread::spawn(move || {
            let mut buf = vec![0u8; 64 * 1024];
            while let Ok(n @ 1..) = from.read(&mut buf) {
                if to.write_all(&buf[..n]).is_err() {
                    return;
                }
            }
        })
    };
    forward(front.try_clone().unwrap(), back.try_clone().unwrap());
    forward(back, front);
    client
}

fn start_broker(bins: &Path, dir: &Path, project: &Path) -> Child {
    let gatehouse = bins.join("gatehouse");
    assert!(
        gatehouse.exists(),
        "{} missing: cargo build --release --workspace",
        gatehouse.display()
    );
    std::fs::create_dir_all(dir.join("d/config")).unwrap();
    // Reads allowed, and rate limits out of the benchmark's way.
    std::fs::write(
        dir.join("d/config/policy.toml"),
        format!(
            "revision = 0\n[tools]\nread_file = \"allow\"\n[limits]\nrequests_per_minute = 4000000000\n\
             concurrent_requests = 64\n[[grant]]\nroot = \"{}\"\ncapabilities = [\"read\"]\n",
            project.display()
        ),
    )
    .unwrap();
    spawn_broker(&gatehouse, dir)
}

/// `gatehouse --data-dir DIR/d broker` (its log in `DIR/broker.log`), once its sockets answer.
pub fn spawn_broker(gatehouse: &Path, dir: &Path) -> Child {
    let child = Command::new(gatehouse)
        .arg("--data-dir")
        .arg(dir.join("d"))
        .arg("broker")
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("broker.log")).unwrap())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while UnixStream::connect(dir.join("d/run/gateway.sock")).is_err() {
        assert!(
            Instant::now() < deadline,
            "broker not ready; see {}",
            dir.join("broker.log").display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}

/// One typed read over the gateway socket (the broker path without JSON).
fn broker_call(w: &mut BufWriter<UnixStream>, id: u64, call: &ToolCall) {
    write_frame(w, &Envelope::new(id, Body::ToolCall(call.clone()))).unwrap();
}

fn broker_answer(r: &mut BufReader<UnixStream>) -> Envelope {
    let env = read_frame(r, MAX_FRAME).unwrap().expect("broker closed");
    match &env.body {
        Body::ToolReply(ToolReply::Done(d)) => match &d.result {
            ToolResult::File(f) => assert_eq!(f.data.len(), FILE_SIZE),
            other => panic!("{other:?}"),
        },
        other => panic!("the broker answered {other:?}"),
    }
    env
}

struct Mcp {
    child: Child,
    w: BufWriter<ChildStdin>,
    r: BufReader<ChildStdout>,
    line: String,
}

impl Mcp {
    fn start(bins: &Path, dir: &Path, project: &Path) -> Mcp {
        let mut child = Command::new(bins.join("gatehouse"))
            .arg("--data-dir")
            .arg(dir.join("d"))
            .arg("mcp")
            .current_dir(project)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(dir.join("mcp.log")).unwrap())
            .spawn()
            .unwrap();
        let mut m = Mcp {
            w: BufWriter::new(child.stdin.take().unwrap()),
            r: BufReader::new(child.stdout.take().unwrap()),
            child,
            line: String::new(),
        };
        m.w.write_all(br#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}}"#).unwrap();
        m.w.write_all(b"\n{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n")
            .unwrap();
        m.w.flush().unwrap();
        read_answer(&mut m.r, &mut m.line);
        m
    }
}

fn mcp_call(w: &mut impl Write, id: usize, path: &str) {
    writeln!(
        w,
        r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"read_file","arguments":{{"path":"{path}"}}}}}}"#
    )
    .unwrap();
}

/// Reads one answer line and parses it, as a client does.
fn read_answer(r: &mut BufReader<ChildStdout>, line: &mut String) -> usize {
    line.clear();
    let n = r.read_line(line).unwrap();
    assert!(n > 0, "gatehouse mcp closed stdout");
    let v: serde_json::Value = serde_json::from_str(line).unwrap();
    if let Some(result) = v.get("result") {
        if let Some(content) = result.get("content") {
            assert_eq!(result["isError"], false, "{line}");
            assert_eq!(content[0]["text"].as_str().unwrap().len(), FILE_SIZE);
        }
    } else {
        panic!("gatehouse mcp answered {line}");
    }
    n
}

fn row(label: &str, s: &Samples, rate: Option<f64>) {
    let rate = rate.map(|r| format!("{r:9.0} calls/s")).unwrap_or_default();
    println!(
        "  {label:<44} p50 {:8.1} us  p99 {:8.1} us  {rate}",
        us(s.p50()),
        us(s.p99())
    );
}

pub fn run(args: &[String]) {
    let bins = crate::ipc::bin_dir(args);
    let dir = std::env::temp_dir().join(format!("gh-bench-mcp-{}", std::process::id()));
    let project = dir.join("project");
    std::fs::create_dir_all(&project).unwrap();
    let project = std::fs::canonicalize(&project).unwrap();
    let file = project.join("four-k.txt");
    let text: Vec<u8> = (0..FILE_SIZE).map(|i| b'a' + (i % 26) as u8).collect();
    std::fs::write(&file, &text).unwrap();
    let path = file.display().to_string();

    let mut broker = start_broker(&bins, &dir, &project);
    let call = ToolCall::ReadFile(ReadFile {
        path: FsPath::Absolute(path.clone().into_bytes()),
        offset: 0,
        length: 0,
    });

    // The broker path: typed ToolCall frames on the gateway socket (its own session).
    let s = UnixStream::connect(dir.join("d/run/gateway.sock")).unwrap();
    let mut br = BufReader::new(s.try_clone().unwrap());
    let mut bw = BufWriter::new(s);
    let mut id = 0u64;
    let mut broker_once = |bw: &mut BufWriter<UnixStream>, br: &mut BufReader<UnixStream>| {
        id += 1;
        broker_call(bw, id, &call);
        bw.flush().unwrap();
        broker_answer(br)
    };
    let env = broker_once(&mut bw, &mut br);
    let req_len = encode(&Envelope::new(1, Body::ToolCall(call.clone())))
        .unwrap()
        .len();
    let reply_len = encode(&env).unwrap().len();

    // The floor: a raw two-hop relay with the broker path's frame sizes.
    let c = relay(req_len, reply_len);
    let (mut fr, fw) = (c.try_clone().unwrap(), c);
    let mut fw = BufWriter::new(fw);
    let req = vec![1u8; req_len];
    let mut buf = vec![0u8; reply_len];

    // Through `gatehouse mcp`: JSON-RPC lines on its stdio (a session of its own).
    let Mcp {
        mut child,
        w: mut mw,
        r: mut mr,
        mut line,
    } = Mcp::start(&bins, &dir, &project);
    let mut n = 0usize;
    let mut sizes = (0, 0);
    let mut mcp_once =
        |mw: &mut BufWriter<ChildStdin>, mr: &mut BufReader<ChildStdout>, line: &mut String| {
            n += 1;
            let mut req = Vec::new();
            mcp_call(&mut req, n, &path);
            mw.write_all(&req).unwrap();
            mw.flush().unwrap();
            sizes = (req.len(), read_answer(mr, line));
        };

    // Warm-up, then sequential rounds, alternating.
    for _ in 0..PER_ROUND {
        broker_once(&mut bw, &mut br);
        mcp_once(&mut mw, &mut mr, &mut line);
    }
    let (mut direct, mut floor, mut brok, mut mcp) = (vec![], vec![], vec![], vec![]);
    for _ in 0..ROUNDS {
        sample(&mut direct, || {
            std::hint::black_box(std::fs::read(&file).unwrap());
        });
        sample(&mut floor, || {
            fw.write_all(&req).unwrap();
            fw.flush().unwrap();
            fr.read_exact(&mut buf).unwrap();
        });
        sample(&mut brok, || {
            broker_once(&mut bw, &mut br);
        });
        sample(&mut mcp, || mcp_once(&mut mw, &mut mr, &mut line));
    }
    let (direct, floor_lat, broker_lat, mcp_lat) = (
        Samples::new(direct),
        Samples::new(floor),
        Samples::new(brok),
        Samples::new(mcp),
    );

    // Calls per second with WINDOW in flight, alternating; the best run of each.
    let (mut floor_rate, mut broker_rate, mut mcp_rate) = (0f64, 0f64, 0f64);
    let mut next = 10_000_000usize;
    for _ in 0..RATE_ROUNDS {
        let req2 = req.clone();
        let (r, w) = pipelined(
            fw,
            move |w, _| w.write_all(&req2).unwrap(),
            || fr.read_exact(&mut buf).unwrap(),
        );
        (floor_rate, fw) = (floor_rate.max(r), w);
        let c2 = call.clone();
        let base = next as u64;
        let (r, w) = pipelined(
            bw,
            move |w, i| broker_call(w, base + i as u64, &c2),
            || {
                broker_answer(&mut br);
            },
        );
        (broker_rate, bw) = (broker_rate.max(r), w);
        let p2 = path.clone();
        let (r, w) = pipelined(
            mw,
            move |w, i| mcp_call(w, next + i, &p2),
            || {
                read_answer(&mut mr, &mut line);
            },
        );
        (mcp_rate, mw) = (mcp_rate.max(r), w);
        next += PIPELINED;
    }
    drop(mw);
    let _ = child.wait();
    let _ = Command::new("kill").arg(broker.id().to_string()).status();
    let _ = broker.wait();
    // The broker's secrets-helper made an audit key for this scratch log: forget it.
    gatehouse_tests::forget_audit_key(&dir.join("d"));
    let _ = std::fs::remove_dir_all(&dir);

    println!(
        "mcp: read_file of {FILE_SIZE} bytes; {SEQUENTIAL} sequential calls per path ({ROUNDS} alternating rounds), \
         {PIPELINED} calls with {WINDOW} in flight (best of {RATE_ROUNDS})"
    );
    println!(
        "  (frames: ToolCall {req_len} B, reply {reply_len} B; JSON-RPC request {} B, response {} B)",
        sizes.0, sizes.1
    );
    row("direct read(2) of the file", &direct, None);
    row(
        "floor: raw two-hop relay, same frame sizes",
        &floor_lat,
        Some(floor_rate),
    );
    row(
        "broker path: ToolCall on gateway.sock",
        &broker_lat,
        Some(broker_rate),
    );
    row(
        "gatehouse mcp: JSON-RPC over stdio",
        &mcp_lat,
        Some(mcp_rate),
    );
    let broker_path = us(broker_lat.p50());
    let json_layer = us(mcp_lat.p50()) - broker_path;
    println!(
        "  split at p50: broker path {broker_path:.1} us ({:.1} us above the floor); JSON layer (mcp - broker path) {json_layer:.1} us",
        broker_path - us(floor_lat.p50())
    );
    println!(
        "  ratio: JSON layer / broker path {:.2} at p50 (target <= 1.00); rate through mcp {:.2}x of the broker path, {:.2}x of the floor",
        json_layer / broker_path,
        mcp_rate / broker_rate,
        mcp_rate / floor_rate
    );
}
