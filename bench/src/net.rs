//! `bench net`: the egress proxy's tunnel against the floors measured in the same run.
//!
//! Throughput: 1 GiB over loopback TCP, (a) direct, (b) through the net-helper's tunnel, (c)
//! through `socat -b 262144` (the relay a user would reach for). Latency: opening a connection
//! and one byte's round trip, (a) direct, (b) through a bare relay (accept, connect, copy), (c)
//! through the tunnel (CONNECT to an IP literal, so no DNS). The tunnel is the net-helper
//! library's own proxy code (request parsing, token, allowlist, address table, relay) running on
//! a runtime shaped like the helper's (tokio, 2 workers), fed accepted TCP sockets the way the
//! helper is fed passed descriptors; the address 127.0.0.2 plays the public upstream
//! (`bench-hooks`).

use crate::stats::{us, Samples};
use ipc_schema::net::{ProxyLimits, ProxySession};
use net_helper::addr::AddressPolicy;
use net_helper::proxy::Proxy;
use net_helper::relay::ClientConn;
use net_helper::resolve::NetResolver;
use net_helper::{tls, NetContext};
use std::io::{Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

const PUBLIC: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);
const TRANSFER: u64 = 1 << 30;
const CHUNK: usize = 256 * 1024;
const RUNS: usize = 5;
const OPENS: usize = 2000;
const TOKEN: &str = "bench-token-0123456789";

pub fn run(args: &[String]) {
    if !args.is_empty() {
        eprintln!("usage: bench net");
        std::process::exit(2);
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let sink = sink_server();
    let echo = echo_server();
    let ports = [sink.port(), echo.port()];
    let proxy = start_proxy(&rt, &ports);
    let relay = start_bare_relay(&rt, echo);
    let (mut socat, socat_addr) = start_socat(sink);

    // Every round measures each path once, so load from elsewhere on the machine hits all of
    // them alike; each path keeps its best round.
    let mut t = [Duration::MAX; 3];
    for _ in 0..RUNS {
        let round = [
            transfer(TcpStream::connect(sink).unwrap()),
            transfer(open_tunnel(proxy, sink)),
            transfer(connect_retry(socat_addr)),
        ];
        for (best, got) in t.iter_mut().zip(round) {
            *best = (*best).min(got);
        }
    }
    let [direct_t, tunnel_t, socat_t] = t;
    let _ = socat.kill();
    let _ = socat.wait();

    let (mut direct_l, mut relay_l, mut tunnel_l) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..OPENS {
        direct_l.push(open_once(|| TcpStream::connect(echo).unwrap()));
        relay_l.push(open_once(|| TcpStream::connect(relay).unwrap()));
        tunnel_l.push(open_once(|| open_tunnel(proxy, echo)));
    }
    let (direct_l, relay_l, tunnel_l) = (
        Samples::new(direct_l),
        Samples::new(relay_l),
        Samples::new(tunnel_l),
    );

    let gibs = |d: Duration| TRANSFER as f64 / d.as_secs_f64() / (1u64 << 30) as f64;
    println!(
        "net: {} MiB per transfer, best of {RUNS}; {OPENS} opens each",
        TRANSFER >> 20
    );
    println!(
        "  direct loopback TCP            {:6.2} GiB/s",
        gibs(direct_t)
    );
    println!(
        "  tunnel (net-helper proxy)      {:6.2} GiB/s  {:.2}x direct",
        gibs(tunnel_t),
        gibs(tunnel_t) / gibs(direct_t)
    );
    println!(
        "  socat -b 262144                {:6.2} GiB/s  {:.2}x direct",
        gibs(socat_t),
        gibs(socat_t) / gibs(direct_t)
    );
    println!(
        "  tunnel / socat                 {:.2}x   (targets: tunnel >= 0.6x direct, >= 1.0x socat)",
        gibs(tunnel_t) / gibs(socat_t)
    );
    println!(
        "  open + 1-byte round trip p50   direct {:.1} us, bare relay {:.1} us, tunnel {:.1} us",
        us(direct_l.p50()),
        us(relay_l.p50()),
        us(tunnel_l.p50())
    );
    let relay_added = us(relay_l.p50()) - us(direct_l.p50());
    let tunnel_added = us(tunnel_l.p50()) - us(direct_l.p50());
    println!(
        "  added by the relay {relay_added:.1} us, by the tunnel {tunnel_added:.1} us: {:.2}x   (target: <= 2x)",
        tunnel_added / relay_added
    );
}

/// Accepts connections on 127.0.0.2; reads each to its end and answers the byte count.
fn sink_server() -> SocketAddr {
    let l = TcpListener::bind((PUBLIC, 0)).unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for c in l.incoming().flatten() {
            std::thread::spawn(move || {
                let mut c = c;
                let mut buf = vec![0u8; CHUNK];
                let mut n = 0u64;
                loop {
                    match c.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(k) => n += k as u64,
                    }
                }
                let _ = c.write_all(&n.to_le_bytes());
            });
        }
    });
    addr
}

fn echo_server() -> SocketAddr {
    let l = TcpListener::bind((PUBLIC, 0)).unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for c in l.incoming().flatten() {
            std::thread::spawn(move || {
                let mut c = c;
                let _ = c.set_nodelay(true);
                let mut buf = [0u8; 4096];
                while let Ok(n) = c.read(&mut buf) {
                    if n == 0 || c.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            });
        }
    });
    addr
}

/// The proxy on its own runtime, fed accepted TCP connections (as the helper is fed descriptors).
fn start_proxy(rt: &tokio::runtime::Runtime, ports: &[u16]) -> SocketAddr {
    let ctx = Arc::new(NetContext {
        // No name is looked up: targets are IP literals.
        resolver: NetResolver::new(&["127.0.0.1:9".parse().unwrap()], Duration::from_secs(1)),
        policy: AddressPolicy {
            test_public: Some(PUBLIC.into()),
        },
        tls: tls::client_config(&[]),
    });
    let proxy = Arc::new(Proxy::new(ctx, 1024));
    proxy
        .open(ProxySession {
            session: "bench".into(),
            token: TOKEN.into(),
            allow: vec![PUBLIC.to_string()],
            ports: ports.to_vec(),
            sni_check: false,
            limits: ProxyLimits {
                max_tunnels: 1024,
                idle_ms: 60_000,
                max_tunnel_bytes: 1 << 40,
            },
        })
        .unwrap();
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    l.set_nonblocking(true).unwrap();
    rt.spawn(async move {
        let l = tokio::net::TcpListener::from_std(l).unwrap();
        while let Ok((c, _)) = l.accept().await {
            let _ = c.set_nodelay(true);
            let proxy = proxy.clone();
            tokio::spawn(async move { proxy.serve("bench", ClientConn::Tcp(c)).await });
        }
    });
    addr
}

/// The floor for open latency: accept, connect upstream, copy both ways, nothing else.
fn start_bare_relay(rt: &tokio::runtime::Runtime, to: SocketAddr) -> SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    l.set_nonblocking(true).unwrap();
    rt.spawn(async move {
        let l = tokio::net::TcpListener::from_std(l).unwrap();
        while let Ok((mut c, _)) = l.accept().await {
            tokio::spawn(async move {
                let _ = c.set_nodelay(true);
                let Ok(mut u) = tokio::net::TcpStream::connect(to).await else {
                    return;
                };
                let _ = u.set_nodelay(true);
                let _ = tokio::io::copy_bidirectional(&mut c, &mut u).await;
            });
        }
    });
    addr
}

fn start_socat(to: SocketAddr) -> (Child, SocketAddr) {
    let port = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let child = Command::new("socat")
        .args(["-b", "262144"])
        .arg(format!("TCP-LISTEN:{port},bind=127.0.0.1,reuseaddr,fork"))
        .arg(format!("TCP:{to}"))
        .stdin(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("socat is required (apt-get install socat): {e}"));
    (child, SocketAddr::from(([127, 0, 0, 1], port)))
}

fn connect_retry(addr: SocketAddr) -> TcpStream {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match TcpStream::connect(addr) {
            Ok(s) => return s,
            Err(e) if Instant::now() > deadline => panic!("{addr}: {e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
}

/// CONNECT through the proxy; returns the stream once `200` arrived.
fn open_tunnel(proxy: SocketAddr, target: SocketAddr) -> TcpStream {
    let mut s = TcpStream::connect(proxy).unwrap();
    let _ = s.set_nodelay(true);
    // One write, as real clients send their request head (write! would send it in pieces).
    let head =
        format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\nProxy-Authorization: Bearer {TOKEN}\r\n\r\n");
    s.write_all(head.as_bytes()).unwrap();
    // The proxy sends nothing after its response head until the client speaks, so reading into
    // a buffer cannot swallow tunnel bytes.
    let mut head = Vec::new();
    let mut b = [0u8; 256];
    while !head.ends_with(b"\r\n\r\n") {
        let n = s.read(&mut b).unwrap();
        assert!(n > 0, "proxy closed: {}", String::from_utf8_lossy(&head));
        head.extend_from_slice(&b[..n]);
    }
    assert!(
        head.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&head)
    );
    s
}

/// Sends [`TRANSFER`] bytes and waits for the sink's count.
fn transfer(mut s: TcpStream) -> Duration {
    let buf = vec![0x5au8; CHUNK];
    let start = Instant::now();
    let mut sent = 0u64;
    while sent < TRANSFER {
        s.write_all(&buf).unwrap();
        sent += CHUNK as u64;
    }
    s.shutdown(Shutdown::Write).unwrap();
    let mut n = [0u8; 8];
    s.read_exact(&mut n).unwrap();
    let took = start.elapsed();
    assert_eq!(u64::from_le_bytes(n), TRANSFER, "bytes lost on the way");
    took
}

/// Opening a connection (with its handshake, for the tunnel) and one byte's round trip on it.
fn open_once(connect: impl FnOnce() -> TcpStream) -> Duration {
    let t = Instant::now();
    let mut s = connect();
    let _ = s.set_nodelay(true);
    s.write_all(b"x").unwrap();
    let mut b = [0u8; 1];
    s.read_exact(&mut b).unwrap();
    t.elapsed()
}
