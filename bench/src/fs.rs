//! `bench fs`: `read_file` of 4 KiB and of 1 MiB (two 512 KiB pages), measured in one run as
//! (a) a direct `read` of the same file, (b) the floor: a raw two-hop Unix-socket relay
//! (client -> relay -> echo -> relay -> client) carrying the same frame bytes, (c) a front talking
//! to a locked-down fs-helper (release build) over a socketpair, spawned as the broker spawns it,
//! and (d) a front (the agent's gateway socket) through the broker (`gatehouse`, release build:
//! policy, audit) and the fs-helper. Prints p50 and p99 of each, and the overheads (minus
//! direct) against the floor.

use crate::stats::{us, Samples};
use ipc_schema::codec::{encode, read_frame, write_frame, MAX_FRAME};
use ipc_schema::fs::{
    Caps, FsHelperConfig, FsPath, FsReply, FsRequest, GrantConfig, GrantId, READ_CHUNK_MAX,
};
use ipc_schema::tool::{ReadFile, ToolCall, ToolReply, ToolResult};
use ipc_schema::{Body, Envelope};
use std::ffi::OsString;
use std::io::{BufReader, BufWriter, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Instant;

struct Case {
    name: &'static str,
    file: &'static str,
    size: usize,
    iterations: usize,
}

const CASES: [Case; 2] = [
    Case {
        name: "4 KiB",
        file: "small.txt",
        size: 4096,
        iterations: 20_000,
    },
    Case {
        name: "1 MiB",
        file: "big.txt",
        size: 1 << 20,
        iterations: 1_000,
    },
];

/// The read requests one `read_file` of `size` bytes takes (one per 512 KiB page).
fn requests(size: usize, file: &str) -> Vec<FsRequest> {
    (0..size.div_ceil(READ_CHUNK_MAX as usize).max(1))
        .map(|page| FsRequest::ReadFile {
            path: FsPath::InGrant {
                grant: GrantId("b".into()),
                path: file.as_bytes().to_vec(),
            },
            offset: (page * READ_CHUNK_MAX as usize) as u64,
            length: READ_CHUNK_MAX,
        })
        .collect()
}

struct Helper {
    child: std::process::Child,
    r: BufReader<UnixStream>,
    w: BufWriter<UnixStream>,
}

impl Helper {
    fn spawn(bin_dir: &Path, dir: &Path) -> Helper {
        let program = bin_dir.join("fs-helper");
        assert!(
            program.exists(),
            "{} missing: cargo build --release -p fs-helper",
            program.display()
        );
        let bytes = |p: &str| dir.join(p).as_os_str().as_bytes().to_vec();
        let config = FsHelperConfig {
            grants: vec![GrantConfig {
                id: GrantId("b".into()),
                root: bytes("work"),
                caps: Caps {
                    read: true,
                    ..Caps::default()
                },
                recursive: true,
                confirmed: false,
                include: vec![],
                exclude: vec![],
            }],
            checkpoint_dir: bytes("data/checkpoints"),
            protect: vec![bytes("data")],
        };
        let args: Vec<OsString> = vec!["--config".into(), config.to_arg().into()];
        let (ours, theirs) = UnixStream::pair().unwrap();
        let spawned = sandbox::process::spawn_helper(&program, &args, theirs.into(), &[]).unwrap();
        let mut r = BufReader::with_capacity(1 << 20, ours.try_clone().unwrap());
        let hello = read_frame(&mut r, MAX_FRAME).unwrap().expect("hello");
        assert!(
            matches!(hello.body, Body::Hello(_)),
            "{:?}",
            hello.body.kind()
        );
        Helper {
            child: spawned.child,
            r,
            w: BufWriter::with_capacity(1 << 20, ours),
        }
    }

    /// One `read_file` of the whole file; returns the bytes read.
    fn read(&mut self, reqs: &[FsRequest], id: &mut u64) -> usize {
        let mut n = 0;
        for req in reqs {
            *id += 1;
            write_frame(&mut self.w, &Envelope::new(*id, Body::Fs(req.clone()))).unwrap();
            self.w.flush().unwrap();
            let env = read_frame(&mut self.r, MAX_FRAME).unwrap().unwrap();
            match env.body {
                Body::FsReply(FsReply::File(c)) => n += c.data.len(),
                other => panic!("{other:?}"),
            }
        }
        n
    }
}

impl Drop for Helper {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The agent's side of the broker: one gateway connection, one session.
struct Brokered {
    child: std::process::Child,
    r: BufReader<UnixStream>,
    w: BufWriter<UnixStream>,
}

impl Brokered {
    /// `gatehouse --data-dir DIR broker` with a policy that grants `DIR/work` for reading and
    /// allows `read_file`, with rate limits out of the way.
    fn start(bin_dir: &Path, dir: &Path) -> Option<Brokered> {
        let gatehouse = bin_dir.join("gatehouse");
        if !gatehouse.exists() {
            return None;
        }
        std::fs::create_dir_all(dir.join("config")).unwrap();
        let policy = format!(
            "revision = 0\n[tools]\nread_file = \"allow\"\n[limits]\nrequests_per_minute = 100000000\nconcurrent_requests = 64\n\
             [[grant]]\nroot = \"{}\"\ncapabilities = [\"read\"]\n",
            dir.join("work").display()
        );
        std::fs::write(dir.join("config/policy.toml"), policy).unwrap();
        let child = std::process::Command::new(gatehouse)
            .arg("--data-dir")
            .arg(dir)
            .arg("broker")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(dir.join("broker.log")).unwrap())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + std::time::Duration::from_secs(20);
        let s = loop {
            if let Ok(s) = UnixStream::connect(dir.join("run/gateway.sock")) {
                break s;
            }
            assert!(
                Instant::now() < deadline,
                "broker not ready; see {}",
                dir.join("broker.log").display()
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        };
        let mut b = Brokered {
            child,
            r: BufReader::with_capacity(1 << 20, s.try_clone().unwrap()),
            w: BufWriter::with_capacity(1 << 20, s),
        };
        match b.call(ToolCall::OpenSession {
            resume: None,
            profile: None,
        }) {
            ToolReply::Session(_) => Some(b),
            other => panic!("open session: {other:?}"),
        }
    }

    fn call(&mut self, call: ToolCall) -> ToolReply {
        write_frame(&mut self.w, &Envelope::new(1, Body::ToolCall(call))).unwrap();
        self.w.flush().unwrap();
        loop {
            let env = read_frame(&mut self.r, MAX_FRAME)
                .unwrap()
                .expect("broker closed");
            match env.body {
                Body::ToolReply(ToolReply::AwaitingApproval(_)) => continue,
                Body::ToolReply(r) => return r,
                other => panic!("{other:?}"),
            }
        }
    }

    /// One `read_file` of the whole file through the broker; returns the bytes read.
    fn read(&mut self, path: &Path, size: usize) -> usize {
        let mut n = 0;
        while n < size {
            let call = ToolCall::ReadFile(ReadFile {
                path: FsPath::Absolute(path.as_os_str().as_encoded_bytes().to_vec()),
                offset: n as u64,
                length: READ_CHUNK_MAX,
            });
            match self.call(call) {
                ToolReply::Done(d) => match d.result {
                    ToolResult::File(f) => n += f.data.len(),
                    other => panic!("{other:?}"),
                },
                other => panic!("{other:?}"),
            }
        }
        n
    }
}

impl Drop for Brokered {
    fn drop(&mut self) {
        let _ = std::process::Command::new("kill")
            .arg(self.child.id().to_string())
            .status();
        let _ = self.child.wait();
    }
}

/// The client end of relay -> echo threads; the echo answers the i-th request of each round
/// with `replies[i]` bytes.
fn relay(req_lens: Vec<usize>, replies: Vec<usize>) -> UnixStream {
    let (client, relay_front) = UnixStream::pair().unwrap();
    let (relay_back, echo) = UnixStream::pair().unwrap();
    std::thread::spawn(move || {
        let mut r = BufReader::new(echo.try_clone().unwrap());
        let mut w = BufWriter::with_capacity(1 << 20, echo);
        let outs: Vec<Vec<u8>> = replies.iter().map(|&n| vec![7u8; n]).collect();
        let mut bufs: Vec<Vec<u8>> = req_lens.iter().map(|&n| vec![0u8; n]).collect();
        'outer: loop {
            for (buf, out) in bufs.iter_mut().zip(&outs) {
                if r.read_exact(buf).is_err() || w.write_all(out).is_err() || w.flush().is_err() {
                    break 'outer;
                }
            }
        }
    });
    let forward = |mut from: UnixStream, mut to: UnixStream| {
        std::thread::spawn(move || {
            let mut buf = vec![0u8; 256 * 1024];
            loop {
                match from.read(&mut buf) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => {
                        if to.write_all(&buf[..n]).is_err() {
                            return;
                        }
                    }
                }
            }
        })
    };
    forward(
        relay_front.try_clone().unwrap(),
        relay_back.try_clone().unwrap(),
    );
    forward(relay_back, relay_front);
    client
}

fn measure(iterations: usize, mut f: impl FnMut()) -> Samples {
    let warm = iterations / 10;
    let mut v = Vec::with_capacity(iterations);
    for i in 0..iterations + warm {
        let t = Instant::now();
        f();
        if i >= warm {
            v.push(t.elapsed());
        }
    }
    Samples::new(v)
}

fn line(label: &str, s: &Samples) {
    println!(
        "    {label:<34} p50 {:9.1} us  p99 {:9.1} us",
        us(s.p50()),
        us(s.p99())
    );
}

pub fn run(args: &[String]) {
    let bins = crate::ipc::bin_dir(args);
    let dir = std::env::temp_dir().join(format!("gh-bench-fs-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("work")).unwrap();
    std::fs::create_dir_all(dir.join("data/checkpoints")).unwrap();
    let dir = std::fs::canonicalize(&dir).unwrap();
    for c in &CASES {
        let text: Vec<u8> = (0..c.size).map(|i| b'a' + (i % 26) as u8).collect();
        std::fs::write(dir.join("work").join(c.file), text).unwrap();
    }
    let mut helper = Helper::spawn(&bins, &dir);
    let mut broker = Brokered::start(&bins, &dir);
    let mut id = 0u64;
    println!("fs: read_file, each figure one whole read of the file");
    for c in &CASES {
        let path = dir.join("work").join(c.file);
        let reqs = requests(c.size, c.file);
        // Frame sizes for the floor: the exact request and reply frames of this read.
        let req_frames: Vec<Vec<u8>> = reqs
            .iter()
            .map(|r| encode(&Envelope::new(1, Body::Fs(r.clone()))).unwrap())
            .collect();
        let replies: Vec<Envelope> = reqs
            .iter()
            .map(|r| {
                id += 1;
                write_frame(&mut helper.w, &Envelope::new(id, Body::Fs(r.clone()))).unwrap();
                helper.w.flush().unwrap();
                read_frame(&mut helper.r, MAX_FRAME).unwrap().unwrap()
            })
            .collect();
        let reply_lens: Vec<usize> = replies.iter().map(|e| encode(e).unwrap().len()).collect();
        // What the frames alone cost: encoding and decoding every request and reply in process.
        let codec = measure(c.iterations, || {
            for (rq, rp) in req_frames.iter().zip(&replies) {
                let back = ipc_schema::codec::decode_payload(&rq[4..]).unwrap();
                std::hint::black_box(back);
                let bytes = encode(rp).unwrap();
                let back = ipc_schema::codec::decode_payload(&bytes[4..]).unwrap();
                std::hint::black_box(back);
            }
        });

        let direct = measure(c.iterations, || {
            let d = std::fs::read(&path).unwrap();
            assert_eq!(d.len(), c.size);
        });
        let floor = {
            let mut s = relay(
                req_frames.iter().map(Vec::len).collect(),
                reply_lens.clone(),
            );
            let mut bufs: Vec<Vec<u8>> = reply_lens.iter().map(|&n| vec![0u8; n]).collect();
            measure(c.iterations, || {
                for (f, b) in req_frames.iter().zip(bufs.iter_mut()) {
                    s.write_all(f).unwrap();
                    s.read_exact(b).unwrap();
                }
            })
        };
        let through_helper = measure(c.iterations, || {
            assert_eq!(helper.read(&reqs, &mut id), c.size);
        });
        let through_broker = broker.as_mut().map(|b| {
            measure(c.iterations, || {
                assert_eq!(b.read(&path, c.size), c.size);
            })
        });
        let overhead = us(through_helper.p50()) - us(direct.p50());
        println!(
            "  {} ({} request{} of at most 512 KiB, {} iterations)",
            c.name,
            reqs.len(),
            if reqs.len() == 1 { "" } else { "s" },
            c.iterations
        );
        line("direct read", &direct);
        line("floor: raw two-hop relay", &floor);
        line("front -> fs-helper (locked down)", &through_helper);
        line("  of which frame encode+decode", &codec);
        println!(
            "    overhead (helper - direct) p50 {:9.1} us  p99 {:9.1} us  = {:.2}x the floor p50   (target for 4 KiB: <= 1.5x)",
            overhead,
            us(through_helper.p99()) - us(direct.p99()),
            overhead / us(floor.p50())
        );
        match &through_broker {
            Some(b) => {
                line("gateway -> broker -> fs-helper", b);
                let o = us(b.p50()) - us(direct.p50());
                println!(
                    "    overhead (broker - direct) p50 {:9.1} us  p99 {:9.1} us  = {:.2}x the floor p50   (target for 4 KiB: <= 1.5x)",
                    o,
                    us(b.p99()) - us(direct.p99()),
                    o / us(floor.p50())
                );
            }
            None => println!("    gateway -> broker -> fs-helper      not measured: {} missing (cargo build --release -p broker)", bins.join("gatehouse").display()),
        }
    }
    drop(broker);
    drop(helper);
    let _ = std::fs::remove_dir_all(&dir);
}
