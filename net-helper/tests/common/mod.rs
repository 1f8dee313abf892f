//! Test plumbing: the locked-down net-helper started as the broker starts it (fd 3, empty env;
//! on Windows through the applier, over an overlapped pipe), a DNS server and HTTP(S) servers on
//! loopback. Nothing here resolves through the system resolver or leaves the loopback range.
#![allow(dead_code)]

use hickory_proto::op::{Message, MessageType, OpCode, ResponseCode};
use hickory_proto::rr::rdata::{A, AAAA, CNAME};
use hickory_proto::rr::{Name, RData, Record, RecordType};
use ipc_schema::codec::encode;
use ipc_schema::codec::{read_frame, write_frame, MAX_FRAME};
use ipc_schema::net::{FetchLimits, FetchRequest, NetReply, NetRequest};
use ipc_schema::status::Hello;
use ipc_schema::{Body, Envelope};
use std::collections::HashMap;
use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
#[cfg(unix)]
use std::os::fd::AsFd;

/// The test's end of the helper's channel, and the helper process.
#[cfg(unix)]
type Chan = std::os::unix::net::UnixStream;
#[cfg(unix)]
type HelperChild = std::process::Child;
#[cfg(windows)]
type Chan = std::fs::File;
#[cfg(windows)]
type HelperChild = sandbox::windows::ConfinedChild;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The loopback address test builds are told to treat as public.
pub const PUBLIC: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);

// ---------------------------------------------------------------------------------------------
// The helper

pub struct NetHelper {
    pub child: HelperChild,
    sock: Chan,
    reader: BufReader<Chan>,
    next_id: u64,
    stash: HashMap<u64, Body>,
    pub hello: Hello,
}

impl NetHelper {
    /// Starts the test build of net-helper (real lockdown) with `args`.
    #[cfg(unix)]
    pub fn spawn(args: &[String]) -> NetHelper {
        Self::spawn_binary(&gatehouse_tests::bin(ipc_schema::Role::Net.name()), args)
    }

    #[cfg(unix)]
    pub fn spawn_binary(program: &std::path::Path, args: &[String]) -> NetHelper {
        let (ours, theirs) = Chan::pair().expect("socketpair");
        let args: Vec<OsString> = args.iter().map(OsString::from).collect();
        let spawned = sandbox::process::spawn_helper(program, &args, theirs.into(), &[])
            .expect("spawn net-helper");
        ours.set_read_timeout(Some(Duration::from_secs(60)))
            .unwrap();
        Self::after_spawn(spawned.child, ours)
    }

    /// Starts the helper beside this test's directory as the Windows spawner does: the net
    /// profile's policy, an overlapped channel; degraded under Wine (which restricts no token),
    /// where `--allow-degraded` is passed too.
    #[cfg(windows)]
    pub fn spawn(args: &[String]) -> NetHelper {
        let program = gatehouse_tests::bin("net-helper");
        let wine = sandbox::windows::running_under_wine();
        let mut args: Vec<OsString> = args.iter().map(OsString::from).collect();
        if wine {
            args.push("--allow-degraded".into());
        }
        let policy = sandbox::wincfg::helper_policy(&sandbox::Profile::Net).unwrap();
        let spawned = sandbox::windows::spawn_helper(
            &policy,
            &program,
            &args,
            sandbox::windows::ChannelIo::Overlapped,
            sandbox::windows::ChannelIo::Blocking,
            std::os::windows::io::AsHandle::as_handle(&std::io::stderr()),
            sandbox::windows::SpawnOptions {
                allow_degraded: wine,
            },
        )
        .expect("spawn net-helper");
        Self::after_spawn(spawned.child, spawned.channel)
    }

    fn after_spawn(child: HelperChild, ours: Chan) -> NetHelper {
        let mut reader = BufReader::new(ours.try_clone().unwrap());
        let env = read_frame(&mut reader, MAX_FRAME)
            .expect("read hello")
            .expect("net-helper closed before its hello");
        let Body::Hello(hello) = env.body else {
            panic!("first frame was {:?}", env.body.kind());
        };
        NetHelper {
            child,
            sock: ours,
            reader,
            next_id: 1,
            stash: HashMap::new(),
            hello,
        }
    }

    pub fn send(&mut self, body: Body) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        write_frame(&mut &self.sock, &Envelope::new(id, body)).expect("write frame");
        id
    }

    /// Sends a frame with one descriptor attached, as the broker must.
    #[cfg(unix)]
    pub fn send_with_fd(&mut self, body: Body, fd: impl AsFd) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        let frame = encode(&Envelope::new(id, body)).unwrap();
        ipc_schema::fdpass::send_frame_with_fd(&self.sock, &frame, fd.as_fd()).expect("sendmsg");
        id
    }

    /// Windows: sends a frame whose row takes a handle, followed by the handle's value in the
    /// helper (`passed`), as the broker does after duplicating a socket into it.
    #[cfg(windows)]
    pub fn send_with_handle(&mut self, body: Body, passed: ipc_schema::helper::Passed) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        let mut frame = encode(&Envelope::new(id, body)).unwrap();
        frame.extend_from_slice(&passed.0.to_le_bytes());
        (&self.sock).write_all(&frame).expect("write frame");
        id
    }

    /// The reply to request `id` (replies to other requests are kept for later).
    pub fn wait(&mut self, id: u64) -> Body {
        if let Some(b) = self.stash.remove(&id) {
            return b;
        }
        loop {
            let env = read_frame(&mut self.reader, MAX_FRAME)
                .expect("read reply")
                .expect("net-helper closed the channel");
            if env.id == id {
                return env.body;
            }
            self.stash.insert(env.id, env.body);
        }
    }

    pub fn request(&mut self, body: Body) -> Body {
        let id = self.send(body);
        self.wait(id)
    }

    pub fn net(&mut self, req: NetRequest) -> NetReply {
        match self.request(Body::Net(req)) {
            Body::NetReply(r) => r,
            other => panic!("not a NetReply: {other:?}"),
        }
    }

    pub fn fetch(&mut self, url: &str) -> NetReply {
        self.fetch_with(url, FetchLimits::default())
    }

    pub fn fetch_with(&mut self, url: &str, limits: FetchLimits) -> NetReply {
        self.net(NetRequest::Fetch(FetchRequest {
            url: url.into(),
            limits,
            allowed_hosts: None,
        }))
    }

    /// A fetch for a session whose profile allows only `hosts`.
    pub fn fetch_allowing(&mut self, url: &str, hosts: &[&str]) -> NetReply {
        self.net(NetRequest::Fetch(FetchRequest {
            url: url.into(),
            limits: FetchLimits::default(),
            allowed_hosts: Some(
                hosts
                    .iter()
                    .map(|h| ipc_schema::host::HostPattern::parse(h).unwrap())
                    .collect(),
            ),
        }))
    }

    /// The refusal reason of a fetch that must be refused.
    pub fn refusal(&mut self, url: &str) -> String {
        match self.fetch(url) {
            NetReply::Refused(r) => r.reason,
            other => panic!("{url} was not refused: {other:?}"),
        }
    }

    /// Waits for the helper to exit and returns its status.
    #[cfg(unix)]
    pub fn wait_exit(mut self) -> std::process::ExitStatus {
        self.child.wait().unwrap()
    }

    /// Closes the test's end of the channel and returns the helper's exit code.
    #[cfg(windows)]
    pub fn close(self) -> Option<u32> {
        let NetHelper {
            child,
            sock,
            reader,
            ..
        } = self;
        drop(sock);
        drop(reader);
        child.wait_timeout(30_000).expect("wait for net-helper")
    }

    pub fn raw_socket(&self) -> &Chan {
        &self.sock
    }
}

/// (On Windows the `ConfinedChild` kills the helper when dropped: it owns the job.)
#[cfg(unix)]
impl Drop for NetHelper {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The standard test arguments: our DNS server, 127.0.0.2 as the public address.
pub fn args(dns: &DnsServer) -> Vec<String> {
    vec![
        "--nameserver".into(),
        dns.addr.to_string(),
        "--test-public-addr".into(),
        PUBLIC.to_string(),
        "--dns-timeout-ms".into(),
        "5000".into(),
    ]
}

// ---------------------------------------------------------------------------------------------
// DNS

/// What the test DNS server answers for a name and type.
#[derive(Clone, Debug)]
pub enum Answer {
    Records(Vec<Record>),
    NxDomain,
    /// Never answer (the query is dropped).
    Silent,
}

pub type Zone = Arc<dyn Fn(&str, RecordType, usize) -> Answer + Send + Sync>;

/// A UDP DNS server on 127.0.0.1. The zone function gets the query name (absolute, lower case,
/// with trailing dot), its type, and how many times that name and type were asked before.
pub struct DnsServer {
    pub addr: SocketAddr,
    pub log: Arc<Mutex<Vec<(String, RecordType)>>>,
}

pub fn a(name: &str, ip: &str, ttl: u32) -> Record {
    Record::from_rdata(
        Name::from_ascii(name).unwrap(),
        ttl,
        RData::A(A(ip.parse().unwrap())),
    )
}
pub fn aaaa(name: &str, ip: &str, ttl: u32) -> Record {
    Record::from_rdata(
        Name::from_ascii(name).unwrap(),
        ttl,
        RData::AAAA(AAAA(ip.parse().unwrap())),
    )
}
pub fn cname(name: &str, to: &str) -> Record {
    Record::from_rdata(
        Name::from_ascii(name).unwrap(),
        60,
        RData::CNAME(CNAME(Name::from_ascii(to).unwrap())),
    )
}

impl DnsServer {
    pub fn start(zone: Zone) -> DnsServer {
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        let addr = sock.local_addr().unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let log2 = log.clone();
        std::thread::spawn(move || {
            let mut counts: HashMap<(String, RecordType), usize> = HashMap::new();
            let mut buf = [0u8; 4096];
            loop {
                let Ok((n, from)) = sock.recv_from(&mut buf) else {
                    return;
                };
                let Ok(q) = Message::from_vec(&buf[..n]) else {
                    continue;
                };
                let Some(query) = q.queries().first().cloned() else {
                    continue;
                };
                let name = query.name().to_ascii().to_ascii_lowercase();
                let qtype = query.query_type();
                log2.lock().unwrap().push((name.clone(), qtype));
                let seen = counts.entry((name.clone(), qtype)).or_default();
                let answer = zone(&name, qtype, *seen);
                *seen += 1;
                let mut m = Message::new();
                m.set_id(q.id())
                    .set_message_type(MessageType::Response)
                    .set_op_code(OpCode::Query)
                    .set_recursion_desired(q.recursion_desired())
                    .set_recursion_available(true)
                    .set_authoritative(true)
                    .add_query(query);
                match answer {
                    Answer::Silent => continue,
                    Answer::NxDomain => {
                        m.set_response_code(ResponseCode::NXDomain);
                    }
                    Answer::Records(rs) => {
                        m.add_answers(rs);
                    }
                }
                let _ = sock.send_to(&m.to_vec().unwrap(), from);
            }
        });
        DnsServer { addr, log }
    }

    /// The queries seen for `name` (absolute, with trailing dot).
    pub fn queries_for(&self, name: &str) -> Vec<RecordType> {
        self.log
            .lock()
            .unwrap()
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, t)| *t)
            .collect()
    }

    pub fn all_names(&self) -> Vec<String> {
        self.log
            .lock()
            .unwrap()
            .iter()
            .map(|(n, _)| n.clone())
            .collect()
    }
}

/// The zone most tests use.
pub fn standard_zone() -> Zone {
    Arc::new(|name, t, seen| {
        use RecordType::{A as TA, AAAA as TAAAA};
        let none = Answer::Records(vec![]);
        match (name, t) {
            ("public.test.", TA) => Answer::Records(vec![a(name, "127.0.0.2", 60)]),
            ("public.test.", TAAAA) => none,
            ("tls.test.", TA) | ("other.test.", TA) => {
                Answer::Records(vec![a(name, "127.0.0.2", 60)])
            }
            ("tls.test.", TAAAA) | ("other.test.", TAAAA) => none,
            ("mixed.test.", TA) => {
                Answer::Records(vec![a(name, "127.0.0.2", 60), a(name, "10.0.0.1", 60)])
            }
            ("mixed.test.", TAAAA) => none,
            ("v6private.test.", TA) => none,
            ("v6private.test.", TAAAA) => Answer::Records(vec![aaaa(name, "fd00::1", 60)]),
            ("v4pub-v6loop.test.", TA) => Answer::Records(vec![a(name, "127.0.0.2", 60)]),
            ("v4pub-v6loop.test.", TAAAA) => Answer::Records(vec![aaaa(name, "::1", 60)]),
            ("alias.test.", TA) => Answer::Records(vec![
                cname(name, "internal.test."),
                a("internal.test.", "192.168.1.10", 60),
            ]),
            ("alias.test.", TAAAA) => Answer::Records(vec![cname(name, "internal.test.")]),
            ("internal.test.", TA) => Answer::Records(vec![a(name, "192.168.1.10", 60)]),
            ("internal.test.", TAAAA) => none,
            // TTL 0, public first, then private.
            ("rebind.test.", TA) => Answer::Records(vec![a(
                name,
                if seen == 0 { "127.0.0.2" } else { "127.0.0.1" },
                0,
            )]),
            ("rebind.test.", TAAAA) => none,
            ("silent.test.", _) => Answer::Silent,
            _ => Answer::NxDomain,
        }
    })
}

// ---------------------------------------------------------------------------------------------
// HTTP

/// One request as the test server saw it.
#[derive(Clone, Debug)]
pub struct SeenRequest {
    pub line: String,
    pub headers: Vec<(String, String)>,
    pub local: SocketAddr,
    /// The body its `Content-Length` announced (at most 1 MiB).
    pub body: Vec<u8>,
}

impl SeenRequest {
    /// The value of header `name` (lower case), if it came.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

pub type Handler = Arc<dyn Fn(&SeenRequest) -> Vec<u8> + Send + Sync>;

/// A threaded HTTP/1.1 server (one request per connection) on `ip`, port chosen by the kernel.
pub struct HttpServer {
    pub addr: SocketAddr,
    pub seen: Arc<Mutex<Vec<SeenRequest>>>,
}

impl HttpServer {
    pub fn start(ip: Ipv4Addr, handler: Handler) -> HttpServer {
        Self::start_with(ip, handler, None)
    }

    pub fn start_tls(ip: Ipv4Addr, handler: Handler, tls: Arc<rustls::ServerConfig>) -> HttpServer {
        Self::start_with(ip, handler, Some(tls))
    }

    fn start_with(
        ip: Ipv4Addr,
        handler: Handler,
        tls: Option<Arc<rustls::ServerConfig>>,
    ) -> HttpServer {
        let l = TcpListener::bind((ip, 0)).unwrap();
        let addr = l.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let seen2 = seen.clone();
        std::thread::spawn(move || {
            for conn in l.incoming() {
                let Ok(conn) = conn else { return };
                let (handler, seen, tls) = (handler.clone(), seen2.clone(), tls.clone());
                std::thread::spawn(move || {
                    let _ = conn.set_read_timeout(Some(Duration::from_secs(20)));
                    let local = conn.local_addr().unwrap();
                    match tls {
                        None => serve_one(conn, local, &handler, &seen),
                        Some(cfg) => {
                            let Ok(sc) = rustls::ServerConnection::new(cfg) else {
                                return;
                            };
                            let stream = rustls::StreamOwned::new(sc, conn);
                            serve_one(stream, local, &handler, &seen)
                        }
                    }
                });
            }
        });
        HttpServer { addr, seen }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub fn requests(&self) -> Vec<SeenRequest> {
        self.seen.lock().unwrap().clone()
    }
}

fn serve_one<S: Read + Write>(
    s: S,
    local: SocketAddr,
    handler: &Handler,
    seen: &Mutex<Vec<SeenRequest>>,
) {
    let mut r = BufReader::new(s);
    let mut line = String::new();
    if r.read_line(&mut line).unwrap_or(0) == 0 {
        return;
    }
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        if r.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
            break;
        }
        if let Some((k, v)) = h.trim_end().split_once(':') {
            headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
        }
    }
    let len = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .and_then(|(_, v)| v.parse::<usize>().ok())
        .unwrap_or(0)
        .min(1 << 20);
    let mut body = vec![0u8; len];
    if r.read_exact(&mut body).is_err() {
        return;
    }
    let req = SeenRequest {
        line: line.trim_end().to_string(),
        headers,
        local,
        body,
    };
    seen.lock().unwrap().push(req.clone());
    let resp = handler(&req);
    let mut s = r.into_inner();
    let _ = s.write_all(&resp);
    let _ = s.flush();
}

/// A complete response with `Content-Length`.
pub fn response(status: &str, headers: &[(&str, &str)], body: &[u8]) -> Vec<u8> {
    let mut out = format!("HTTP/1.1 {status}\r\n");
    for (k, v) in headers {
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    out.push_str(&format!(
        "Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    ));
    let mut out = out.into_bytes();
    out.extend_from_slice(body);
    out
}

pub fn text(body: &str) -> Vec<u8> {
    response(
        "200 OK",
        &[("Content-Type", "text/plain; charset=utf-8")],
        body.as_bytes(),
    )
}

pub fn redirect(status: &str, location: &str) -> Vec<u8> {
    response(
        status,
        &[("Location", location), ("Content-Type", "text/plain")],
        b"moved",
    )
}

// ---------------------------------------------------------------------------------------------
// TLS

/// A test CA and a leaf certificate for `names`, signed by it.
pub struct TestPki {
    pub ca_pem: String,
    pub ca_file: tempfile::NamedTempFile,
}

pub fn test_pki() -> (TestPki, rcgen::Certificate, rcgen::KeyPair) {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(rcgen::DnType::CommonName, "gatehouse test CA");
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let pem = ca_cert.pem();
    let mut f = tempfile::NamedTempFile::new().unwrap();
    f.write_all(pem.as_bytes()).unwrap();
    // The helper runs as whoever runs the tests; make sure it can read the file.
    (
        TestPki {
            ca_pem: pem,
            ca_file: f,
        },
        ca_cert,
        ca_key,
    )
}

/// A server config whose certificate names `names`, signed by the test CA.
pub fn server_config(
    names: &[&str],
    ca: &rcgen::Certificate,
    ca_key: &rcgen::KeyPair,
) -> Arc<rustls::ServerConfig> {
    let key = rcgen::KeyPair::generate().unwrap();
    let params =
        rcgen::CertificateParams::new(names.iter().map(|s| s.to_string()).collect::<Vec<_>>())
            .unwrap();
    let cert = params.signed_by(&key, ca, ca_key).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![cert.der().clone()],
            rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
        )
        .unwrap();
    Arc::new(cfg)
}

/// Connects to `addr` and returns the stream (for proxy tests).
pub fn tcp(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s
}

pub fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}
