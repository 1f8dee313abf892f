//! `bench ipc`: a Ping from a front through the broker to a locked-down helper and back, against
//! the floor of a raw two-hop Unix-socket relay (client -> relay -> echo -> relay -> client)
//! measured in the same run with the same frame bytes.

use crate::stats::{us, Samples};
use ipc_schema::codec::{encode, read_frame, write_frame, MAX_FRAME};
use ipc_schema::{Body, Envelope, Role};
use std::io::{BufReader, BufWriter, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const ROUND_TRIPS: usize = 20_000;
const PIPELINED: usize = 200_000;
const WINDOW: usize = 64;

pub fn run(args: &[String]) {
    let bin_dir = bin_dir(args);
    let frame = encode(&Envelope::new(1, Body::Ping { target: None })).unwrap();
    let reply = encode(&Envelope::new(1, Body::Pong)).unwrap();

    // (a) the floor: relay and echo threads forwarding the exact frame bytes.
    let floor_lat = {
        let c = relay_pair(frame.len(), reply.len());
        latency(c, &frame, reply.len())
    };
    let floor_rate = {
        let c = relay_pair(frame.len(), reply.len());
        pipelined_raw(c, &frame, reply.len())
    };

    // (b) through the broker (release build) to the fs-helper.
    let dir = tempdir();
    let mut broker = start_broker(&bin_dir, &dir);
    let sock = dir.join("run/ui.sock");
    let lat = broker_latency(&sock);
    let rate = broker_pipelined(&sock);
    stop(&mut broker);
    let _ = std::fs::remove_dir_all(&dir);

    println!(
        "ipc: {ROUND_TRIPS} sequential round trips, {PIPELINED} pipelined ({WINDOW} in flight)"
    );
    println!(
        "  floor  raw two-hop relay      p50 {:7.1} us  p99 {:7.1} us  pipelined {:9.0} rt/s",
        us(floor_lat.p50()),
        us(floor_lat.p99()),
        floor_rate
    );
    println!(
        "  broker ui -> broker -> fs     p50 {:7.1} us  p99 {:7.1} us  pipelined {:9.0} rt/s",
        us(lat.p50()),
        us(lat.p99()),
        rate
    );
    println!(
        "  ratio  p50 {:.2}x  p99 {:.2}x  pipelined rate {:.2}x of the floor   (targets: p50 <= 1.5x, rate >= 0.5x)",
        us(lat.p50()) / us(floor_lat.p50()),
        us(lat.p99()) / us(floor_lat.p99()),
        rate / floor_rate
    );
}

/// Where the binaries under test are: `--bin-dir DIR`, else beside this bench.
pub fn bin_dir(args: &[String]) -> PathBuf {
    if let Some(i) = args.iter().position(|a| a == "--bin-dir") {
        return PathBuf::from(&args[i + 1]);
    }
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().to_path_buf()
}

pub fn tempdir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("gh-bench-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Starts `gatehouse broker` on a private dir and waits until every helper answers.
// The child is returned to the caller, which stops and reaps it with `stop`.
#[allow(clippy::zombie_processes)]
pub fn start_broker(bin_dir: &Path, dir: &Path) -> Child {
    let gatehouse = bin_dir.join("gatehouse");
    assert!(
        gatehouse.exists(),
        "{} missing: cargo build --release --workspace",
        gatehouse.display()
    );
    let mut child = Command::new(gatehouse)
        .arg("--data-dir")
        .arg(dir)
        .arg("broker")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("broker.log")).unwrap())
        .spawn()
        .unwrap();
    let sock = dir.join("run/ui.sock");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(s) = UnixStream::connect(&sock) {
            let mut r = BufReader::new(s.try_clone().unwrap());
            let mut w = BufWriter::new(s);
            write_frame(
                &mut w,
                &Envelope::new(
                    1,
                    Body::Ping {
                        target: Some(Role::Fs),
                    },
                ),
            )
            .unwrap();
            w.flush().unwrap();
            if let Ok(Some(env)) = read_frame(&mut r, MAX_FRAME) {
                if env.body == Body::Pong {
                    return child;
                }
            }
        }
        if Instant::now() >= deadline {
            stop(&mut child);
            panic!("broker not ready; see {}", dir.join("broker.log").display());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

pub fn stop(child: &mut Child) {
    let _ = Command::new("kill").arg(child.id().to_string()).status();
    let _ = child.wait();
}

/// client end of a relay -> echo chain of threads.
fn relay_pair(req_len: usize, reply_len: usize) -> UnixStream {
    let (client, relay_front) = UnixStream::pair().unwrap();
    let (relay_back, echo) = UnixStream::pair().unwrap();
    // echo: read a request, write a reply of the broker's reply size.
    std::thread::spawn(move || {
        let mut r = BufReader::new(echo.try_clone().unwrap());
        let mut w = BufWriter::new(echo);
        let mut buf = vec![0u8; req_len];
        let out = vec![7u8; reply_len];
        while r.read_exact(&mut buf).is_ok() {
            if w.write_all(&out).is_err() {
                return;
            }
            if r.buffer().is_empty() && w.flush().is_err() {
                return;
            }
        }
    });
    let forward = |from: UnixStream, to: UnixStream| {
        std::thread::spawn(move || {
            let mut from = from;
            let mut to = to;
            let mut buf = vec![0u8; 64 * 1024];
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

fn latency(c: UnixStream, frame: &[u8], reply_len: usize) -> Samples {
    let mut r = c.try_clone().unwrap();
    let mut w = c;
    let mut buf = vec![0u8; reply_len];
    let mut v = Vec::with_capacity(ROUND_TRIPS);
    for i in 0..ROUND_TRIPS + 1000 {
        let t = Instant::now();
        w.write_all(frame).unwrap();
        r.read_exact(&mut buf).unwrap();
        if i >= 1000 {
            v.push(t.elapsed());
        }
    }
    Samples::new(v)
}

/// Keeps up to WINDOW requests in flight on `c`; `write` writes request `i`, `read` reads one
/// reply. Writes are flushed only when the writer would wait for a reply, as the broker does.
fn pipelined<W, R>(c: UnixStream, write: W, mut read: R) -> f64
where
    W: Fn(&mut BufWriter<UnixStream>, usize) + Send + 'static,
    R: FnMut(&mut BufReader<UnixStream>),
{
    let mut r = BufReader::new(c.try_clone().unwrap());
    let (tx, rx) = std::sync::mpsc::sync_channel::<()>(WINDOW);
    let t = Instant::now();
    let writer = std::thread::spawn(move || {
        let mut w = BufWriter::new(c);
        for i in 0..PIPELINED {
            if i >= WINDOW && rx.try_recv().is_err() {
                w.flush().unwrap();
                rx.recv().unwrap();
            }
            write(&mut w, i);
        }
        w.flush().unwrap();
    });
    for _ in 0..PIPELINED {
        read(&mut r);
        let _ = tx.try_send(());
    }
    writer.join().unwrap();
    PIPELINED as f64 / t.elapsed().as_secs_f64()
}

fn pipelined_raw(c: UnixStream, frame: &[u8], reply_len: usize) -> f64 {
    let frame = frame.to_vec();
    let mut buf = vec![0u8; reply_len];
    pipelined(
        c,
        move |w, _| w.write_all(&frame).unwrap(),
        move |r| r.read_exact(&mut buf).unwrap(),
    )
}

fn broker_latency(sock: &Path) -> Samples {
    let s = UnixStream::connect(sock).unwrap();
    let mut r = BufReader::new(s.try_clone().unwrap());
    let mut w = BufWriter::new(s);
    let mut v = Vec::with_capacity(ROUND_TRIPS);
    for i in 0..ROUND_TRIPS + 1000 {
        let t = Instant::now();
        write_frame(
            &mut w,
            &Envelope::new(
                i as u64,
                Body::Ping {
                    target: Some(Role::Fs),
                },
            ),
        )
        .unwrap();
        w.flush().unwrap();
        let env = read_frame(&mut r, MAX_FRAME).unwrap().unwrap();
        assert_eq!(env.body, Body::Pong);
        if i >= 1000 {
            v.push(t.elapsed());
        }
    }
    Samples::new(v)
}

fn broker_pipelined(sock: &Path) -> f64 {
    let s = UnixStream::connect(sock).unwrap();
    pipelined(
        s,
        |w, i| {
            write_frame(
                w,
                &Envelope::new(
                    i as u64,
                    Body::Ping {
                        target: Some(Role::Fs),
                    },
                ),
            )
            .unwrap()
        },
        |r| {
            let env = read_frame(r, MAX_FRAME).unwrap().unwrap();
            assert_eq!(env.body, Body::Pong);
        },
    )
}
