//! The plumbing of the tests that drive the Linux binaries (the broker, the CLI, the helpers
//! over their Unix sockets).

use crate::bin;
use ipc_schema::codec::{read_frame, write_frame, MAX_FRAME};
use ipc_schema::status::Hello;
use ipc_schema::{Body, Envelope, Role};
use std::ffi::OsString;
use std::io::{BufReader, BufWriter, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, UdpSocket};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The machine gatehouse runs on, for the tests that run a second time where user namespaces are
/// refused: where they work, or under `gatehouse-refuse-userns MODE --` (tests/src/bin), which
/// refuses them the way a container's seccomp profile (`container`) or Ubuntu's AppArmor
/// restriction at its mount step (`nomount`) does. Under either the exec-helper locks down in
/// the Landlock tier; the tests' policies then say `require_namespaces = false` ([`Host::policy`]),
/// so that commands run there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Host {
    Namespaces,
    Container,
    NoMount,
}

impl Host {
    /// The exec-helper's confinement tier on this machine.
    pub fn tier(self) -> ipc_schema::tier::ConfinementTier {
        match self {
            Host::Namespaces => ipc_schema::tier::ConfinementTier::Namespaces,
            Host::Container | Host::NoMount => ipc_schema::tier::ConfinementTier::Landlock,
        }
    }

    pub fn landlock(self) -> bool {
        self.tier() == ipc_schema::tier::ConfinementTier::Landlock
    }

    /// `gatehouse-refuse-userns`'s mode.
    pub fn wrapper_mode(self) -> Option<&'static str> {
        match self {
            Host::Namespaces => None,
            Host::Container => Some("container"),
            Host::NoMount => Some("nomount"),
        }
    }

    /// `policy` (a TOML document) as this machine's tests need it: with `require_namespaces =
    /// false` where namespaces are refused.
    pub fn policy(self, policy: &str) -> String {
        if self.landlock() {
            format!("require_namespaces = false\n{policy}")
        } else {
            policy.to_string()
        }
    }

    /// `program` as started on this machine (under the wrapper where namespaces are refused).
    pub fn command(self, program: &Path) -> Command {
        match self.wrapper_mode() {
            None => Command::new(program),
            Some(mode) => {
                let mut c = Command::new(bin("gatehouse-refuse-userns"));
                c.arg(mode).arg("--").arg(program);
                c
            }
        }
    }
}

/// One `#[test]` per machine for each test function `fn(Host)`: `on_hosts! { name: [Namespaces,
/// Container], ... }` gives `name::namespaces` and `name::container` (and `name::nomount` for
/// `NoMount`).
#[macro_export]
macro_rules! on_hosts {
    (@one $name:ident, Namespaces) => {
        #[test]
        fn namespaces() { super::$name($crate::Host::Namespaces) }
    };
    (@one $name:ident, Container) => {
        #[test]
        fn container() { super::$name($crate::Host::Container) }
    };
    (@one $name:ident, NoMount) => {
        #[test]
        fn nomount() { super::$name($crate::Host::NoMount) }
    };
    ($($name:ident : [$($host:ident),+ $(,)?]),+ $(,)?) => {
        $(
            mod $name {
                $( $crate::on_hosts!(@one $name, $host); )+
            }
        )+
    };
}

/// Waits until the exec-helper of the broker behind `ui_socket` has locked down (its hello, as
/// `doctor` shows it), then checks that it did so in `host`'s tier: `Err` says what it did
/// instead.
pub fn check_exec_tier(ui_socket: &Path, host: Host) -> Result<(), String> {
    use ipc_schema::status::ProcessState;
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut ui = Conn::connect(ui_socket).map_err(|e| format!("the console socket: {e}"))?;
    ui.set_timeout(Some(Duration::from_secs(60)));
    loop {
        let report = match ui.request(Body::Doctor) {
            Body::DoctorReport(r) => r,
            other => return Err(format!("doctor answered {other:?}")),
        };
        let exec = report
            .processes
            .iter()
            .find(|p| p.name == Role::Exec.name());
        if let Some(ProcessState::Refused { reason }) = exec.map(|p| &p.state) {
            return Err(format!("the exec-helper was refused: {reason}"));
        }
        if let Some(t) = exec.and_then(|p| p.lockdown.as_ref()?.exec_tier) {
            return if t == host.tier() {
                Ok(())
            } else {
                Err(format!(
                    "{host:?}: the exec-helper locked down in the {t:?} tier"
                ))
            };
        }
        if Instant::now() > deadline {
            return Err(format!("the exec-helper did not name its tier: {report:?}"));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A blocking frame connection (to the broker or, for helper tests, to a helper).
pub struct Conn {
    reader: BufReader<UnixStream>,
    writer: BufWriter<UnixStream>,
    next_id: u64,
}

impl Conn {
    pub fn new(s: UnixStream) -> Conn {
        let w = s.try_clone().expect("clone socket");
        Conn {
            reader: BufReader::new(s),
            writer: BufWriter::new(w),
            next_id: 1,
        }
    }

    pub fn connect(path: &Path) -> std::io::Result<Conn> {
        Ok(Conn::new(UnixStream::connect(path)?))
    }

    pub fn send(&mut self, body: Body) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        write_frame(&mut self.writer, &Envelope::new(id, body)).expect("write frame");
        self.writer.flush().expect("flush");
        id
    }

    pub fn recv(&mut self) -> Option<Envelope> {
        read_frame(&mut self.reader, MAX_FRAME).expect("read frame")
    }

    /// Sends `body` and returns the reply to it.
    pub fn request(&mut self, body: Body) -> Body {
        let id = self.send(body);
        loop {
            let env = self.recv().expect("connection closed before the reply");
            if env.id == id {
                return env.body;
            }
        }
    }

    pub fn set_timeout(&self, t: Option<Duration>) {
        self.reader.get_ref().set_read_timeout(t).expect("timeout");
    }

    /// Raw bytes, for tests that send garbage.
    pub fn send_raw(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.writer.write_all(bytes)?;
        self.writer.flush()
    }
}

/// One helper binary started the way the broker starts it (fd 3, empty env), without a broker.
pub struct HelperUnderTest {
    pub child: Child,
    pub pidfd: OwnedFd,
    pub conn: Conn,
    pub hello: Hello,
}

impl HelperUnderTest {
    /// Starts helper `role` with `args` and waits for its hello.
    pub fn spawn(role: Role, args: &[OsString]) -> HelperUnderTest {
        let (ours, theirs) = UnixStream::pair().expect("socketpair");
        let spawned = sandbox::process::spawn_helper(&bin(role.name()), args, theirs.into(), &[])
            .expect("spawn helper");
        let mut conn = Conn::new(ours);
        conn.set_timeout(Some(Duration::from_secs(20)));
        let env = conn.recv().expect("helper closed before its hello");
        let Body::Hello(hello) = env.body else {
            panic!("first frame was {:?}, not a hello", env.body.kind());
        };
        HelperUnderTest {
            child: spawned.child,
            pidfd: spawned.pidfd,
            conn,
            hello,
        }
    }

    pub fn request(&mut self, body: Body) -> Body {
        self.conn.request(body)
    }
}

impl Drop for HelperUnderTest {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A broker (`gatehouse broker`) on a private data dir, stopped on drop.
pub struct BrokerUnderTest {
    pub child: Child,
    pub dir: tempfile::TempDir,
}

impl BrokerUnderTest {
    /// Starts `gatehouse --data-dir TMP broker EXTRA...` and waits until its sockets answer
    /// and every helper has settled.
    pub fn start(extra: &[&str]) -> BrokerUnderTest {
        let dir = tempfile::Builder::new()
            .prefix("gh-test-")
            .tempdir()
            .expect("tempdir");
        Self::start_in(dir, extra)
    }

    pub fn start_in(dir: tempfile::TempDir, extra: &[&str]) -> BrokerUnderTest {
        let child = Command::new(bin("gatehouse"))
            .arg("--data-dir")
            .arg(dir.path())
            .arg("broker")
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(
                std::fs::File::create(dir.path().join("broker-test.log"))
                    .map(Stdio::from)
                    .unwrap_or(Stdio::inherit()),
            )
            .spawn()
            .expect("start broker");
        let b = BrokerUnderTest { child, dir };
        let deadline = Instant::now() + Duration::from_secs(20);
        while Conn::connect(&b.ui_socket()).is_err() {
            assert!(
                Instant::now() < deadline,
                "broker did not open its socket; log:\n{}",
                b.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        b
    }

    pub fn ui_socket(&self) -> PathBuf {
        self.dir.path().join("run/ui.sock")
    }

    pub fn gateway_socket(&self) -> PathBuf {
        self.dir.path().join("run/gateway.sock")
    }

    /// A connection on the console's socket.
    pub fn ui(&self) -> Conn {
        let c = Conn::connect(&self.ui_socket()).expect("connect ui socket");
        c.set_timeout(Some(Duration::from_secs(30)));
        c
    }

    /// A connection on the gateway socket.
    pub fn gateway(&self) -> Conn {
        let c = Conn::connect(&self.gateway_socket()).expect("connect gateway socket");
        c.set_timeout(Some(Duration::from_secs(30)));
        c
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("broker-test.log")).unwrap_or_default()
    }

    /// `gatehouse --data-dir <this broker's dir> ARGS...`.
    pub fn cli(&self, args: &[&str]) -> std::process::Output {
        Command::new(bin("gatehouse"))
            .arg("--data-dir")
            .arg(self.dir.path())
            .args(args)
            .output()
            .expect("run gatehouse")
    }

    /// Sends SIGTERM and waits for the broker to exit.
    pub fn stop(&mut self) -> std::process::ExitStatus {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        self.child.wait().expect("wait broker")
    }
}

impl Drop for BrokerUnderTest {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.stop();
        }
        forget_audit_key(self.dir.path());
    }
}

/// A `--data-dir` for CLI commands that start a broker of their own in the background
/// (`gatehouse sandbox`, `fetch`, ...): on drop that broker is stopped (with its helpers) and
/// its audit key forgotten, so no test leaves a broker behind.
pub struct DataDir(tempfile::TempDir);

impl DataDir {
    pub fn new() -> DataDir {
        DataDir(
            tempfile::Builder::new()
                .prefix("gh-data-")
                .tempdir()
                .unwrap(),
        )
    }

    pub fn path(&self) -> &Path {
        self.0.path()
    }
}

impl Default for DataDir {
    fn default() -> Self {
        DataDir::new()
    }
}

impl Drop for DataDir {
    fn drop(&mut self) {
        // `stop` waits for the broker to go; with none running it says so and exits.
        let _ = Command::new(bin("gatehouse"))
            .arg("--data-dir")
            .arg(self.0.path())
            .arg("stop")
            .stdin(std::process::Stdio::null())
            .output();
        forget_audit_key(self.0.path());
    }
}

/// `gatehouse --data-dir DIR ARGS...` with `stdin` written to it, waited for.
pub fn gatehouse_cli(dir: &Path, args: &[&str], stdin: Option<&str>) -> std::process::Output {
    let mut cmd = Command::new(bin("gatehouse"));
    cmd.arg("--data-dir").arg(dir).args(args);
    run_with_stdin(cmd, stdin)
}

/// Runs `cmd` with `stdin` written to it, and waits for it.
pub fn run_with_stdin(mut cmd: Command, stdin: Option<&str>) -> std::process::Output {
    let mut c = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the command");
    let mut input = c.stdin.take().unwrap();
    if let Some(s) = stdin {
        // A command that refuses its arguments may exit before reading stdin: the write then
        // meets a closed pipe, and the refusal is what the test checks.
        if let Err(e) = input.write_all(s.as_bytes()) {
            assert_eq!(e.kind(), std::io::ErrorKind::BrokenPipe, "{e}");
        }
    }
    drop(input);
    c.wait_with_output().unwrap()
}

/// A command's stdout and stderr, one after the other, as text.
pub fn output_text(o: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Removes the audit key a test instance under `root` (a `--data-dir`) left in the kernel
/// keyring. Keys outlive processes (the user and persistent keyrings), and an unprivileged
/// user may hold only 20,000 bytes of them (`/proc/sys/kernel/keys/maxbytes`): about 110 audit
/// keys, so a suite that leaked one per broker would fail within the same run. Every harness
/// that owns a `--data-dir` calls this when it goes; `scripts/test.sh` fails a test binary
/// that leaves a key behind.
/// The secrets-helper keeps the key under `gatehouse:audit-key-INSTANCE` and offers no request
/// to drop it (nothing through gatehouse may destroy a log's key); the test, as the same user,
/// invalidates it with keyctl directly.
pub fn forget_audit_key(root: &Path) {
    let db = root.join("data/gatehouse.db");
    if !db.exists() {
        return;
    }
    let Ok(out) = Command::new("sqlite3")
        .arg(&db)
        .arg("SELECT value FROM meta WHERE key = 'instance'")
        .output()
    else {
        return;
    };
    let instance = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if instance.is_empty() {
        return;
    }
    use linux_keyutils::{KeyRing, KeyRingIdentifier};
    if let Ok(user) = KeyRing::from_special_id(KeyRingIdentifier::User, false) {
        if let Ok(key) = user.search(&format!("gatehouse:audit-key-{instance}")) {
            let _ = key.invalidate();
        }
    }
}

/// Child pids of `pid` (from /proc), for orphan checks.
pub fn children_of(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir("/proc") {
        for e in rd.flatten() {
            let Some(p) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            if let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) {
                // The ppid is the 2nd field after the parenthesised command name.
                if let Some(rest) = stat.rsplit(')').next() {
                    let ppid = rest
                        .split_whitespace()
                        .nth(1)
                        .and_then(|s| s.parse::<u32>().ok());
                    if ppid == Some(pid) {
                        out.push(p);
                    }
                }
            }
        }
    }
    out
}

/// The helpers of the broker `pid`: the children of its spawner (the broker's own child), and
/// the spawner itself.
pub fn helpers_of(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for child in children_of(pid) {
        out.extend(children_of(child));
        out.push(child);
    }
    out
}

/// The configuration an fs-helper process was started with: its `--config` argument
/// (`ipc_schema::fs::FsHelperConfig`), read from `/proc/<pid>/cmdline` and decoded as the helper
/// decodes it. `None` for a process without one.
pub fn fs_helper_config(pid: u32) -> Option<ipc_schema::fs::FsHelperConfig> {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let args: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
    let at = args.iter().position(|a| *a == b"--config")?;
    ipc_schema::codec::from_arg(std::str::from_utf8(args.get(at + 1)?).ok()?).ok()
}

/// True while /proc/<pid> exists and is not a zombie.
pub fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            stat.rsplit(')')
                .next()
                .and_then(|r| r.split_whitespace().next())
                != Some("Z")
        }
        Err(_) => false,
    }
}

/// Runs a separate process (python3) that connects to `socket`, writes `bytes`, then waits;
/// returns how it ended. Tests that expect the broker to kill a peer assert SIGKILL here.
pub fn misbehaving_peer(socket: &Path, bytes: &[u8]) -> std::process::ExitStatus {
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let script = "import socket,sys,time\n\
                  s=socket.socket(socket.AF_UNIX)\n\
                  s.connect(sys.argv[1])\n\
                  s.sendall(bytes.fromhex(sys.argv[2]))\n\
                  time.sleep(20)\n\
                  sys.exit(3)\n";
    let mut child = Command::new("python3")
        .args(["-c", script])
        .arg(socket)
        .arg(hex)
        .stdin(Stdio::null())
        .spawn()
        .expect("python3");
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return st;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the misbehaving peer was not killed");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A DNS server on loopback (UDP, 127.0.0.1) for tests that must resolve names without the
/// host's resolver: it answers each of its names with one IPv4 address (A), a known name's AAAA
/// query with an empty answer, and every other name with NXDOMAIN. It counts the queries it
/// was asked, so a test can show that a name was never looked up.
pub struct LoopbackDns {
    pub addr: SocketAddr,
    queries: Arc<AtomicUsize>,
}

impl LoopbackDns {
    /// Starts a server answering each of `names` (case-insensitive) with `addr`.
    pub fn start(names: &[&str], addr: Ipv4Addr) -> LoopbackDns {
        let sock = UdpSocket::bind("127.0.0.1:0").expect("bind test DNS server");
        let local = sock.local_addr().expect("test DNS server address");
        let queries = Arc::new(AtomicUsize::new(0));
        let counter = queries.clone();
        let names: Vec<String> = names.iter().map(|n| n.to_ascii_lowercase()).collect();
        std::thread::spawn(move || {
            let mut buf = [0u8; 512];
            while let Ok((n, from)) = sock.recv_from(&mut buf) {
                if n < 12 {
                    continue;
                }
                counter.fetch_add(1, Ordering::SeqCst);
                if let Some(reply) = dns_reply(&buf[..n], &names, addr) {
                    let _ = sock.send_to(&reply, from);
                }
            }
        });
        LoopbackDns {
            addr: local,
            queries,
        }
    }

    /// How many queries (of at least a DNS header's length) the server was asked so far.
    pub fn queries(&self) -> usize {
        self.queries.load(Ordering::SeqCst)
    }
}

/// The reply to DNS query `q`, or None for a query too short to hold its question (ignored,
/// as a resolver would ignore garbage).
fn dns_reply(q: &[u8], names: &[String], addr: Ipv4Addr) -> Option<Vec<u8>> {
    // The question: labels up to the root, then type and class.
    let mut i = 12;
    let mut labels = Vec::new();
    while *q.get(i)? != 0 {
        let l = q[i] as usize;
        labels.push(String::from_utf8_lossy(q.get(i + 1..i + 1 + l)?).to_ascii_lowercase());
        i += 1 + l;
    }
    let qtype = u16::from_be_bytes([*q.get(i + 1)?, *q.get(i + 2)?]);
    let question = q.get(12..i + 5)?;
    let known = names.contains(&labels.join("."));
    let answer = known && qtype == 1;
    let mut r = Vec::new();
    r.extend_from_slice(&q[0..2]);
    r.extend_from_slice(if known { &[0x81, 0x80] } else { &[0x81, 0x83] });
    r.extend_from_slice(&[0, 1, 0, answer as u8, 0, 0, 0, 0]);
    r.extend_from_slice(question);
    if answer {
        r.extend_from_slice(&[0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4]);
        r.extend_from_slice(&addr.octets());
    }
    Some(r)
}

/// One request as `TestWebServer` read it: the head, up to and including the blank line.
pub struct TestWebRequest {
    pub head: String,
}

impl TestWebRequest {
    /// The request target of the request line (`/` when the line has none).
    pub fn path(&self) -> &str {
        self.head.split(' ').nth(1).unwrap_or("/")
    }
}

/// A tiny HTTP/1.1 server on `ip` for fetch tests: one connection at a time, it reads the
/// request head and writes what the test's handler returns, then closes. It counts
/// connections, so a test can show that a refused address was never connected to.
pub struct TestWebServer {
    pub addr: SocketAddr,
    hits: Arc<AtomicUsize>,
}

impl TestWebServer {
    /// Listens on `ip` (any free port); `handler` turns each request into the response bytes.
    pub fn start(
        ip: &str,
        handler: impl Fn(&TestWebRequest) -> Vec<u8> + Send + 'static,
    ) -> TestWebServer {
        let l = TcpListener::bind((ip, 0)).expect("bind test server");
        let addr = l.local_addr().expect("test server address");
        let hits = Arc::new(AtomicUsize::new(0));
        let h = hits.clone();
        std::thread::spawn(move || {
            for s in l.incoming() {
                let Ok(mut s) = s else { continue };
                h.fetch_add(1, Ordering::SeqCst);
                let mut req = Vec::new();
                let mut buf = [0u8; 1024];
                while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => req.extend_from_slice(&buf[..n]),
                    }
                }
                let head = String::from_utf8_lossy(&req).into_owned();
                let _ = s.write_all(&handler(&TestWebRequest { head }));
            }
        });
        TestWebServer { addr, hits }
    }

    /// `http://ADDR` followed by `path`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// How many connections the server accepted so far.
    pub fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }
}

/// A complete HTTP/1.1 response with `body`, its length, and `Connection: close`.
pub fn http_response(status: &str, content_type: &str, body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// A temporary directory the exec sandbox's user owns: when the tests run as root, the sandbox
/// runs commands as nobody (65534), so the directory is handed to nobody.
pub fn sandbox_owned_dir(prefix: &str) -> tempfile::TempDir {
    let d = tempfile::Builder::new().prefix(prefix).tempdir().unwrap();
    if nix::unistd::geteuid().is_root() {
        std::os::unix::fs::chown(d.path(), Some(65534), Some(65534)).unwrap();
    }
    d
}

/// `gatehouse-exec-probe`, copied to a directory any user can enter (the build's target dir may
/// not be readable by the sandbox's user): one copy per user and build, shared by every test
/// process (`/tmp/gatehouse-exec-probe-UID/build-SIZE-MTIME/gatehouse-exec-probe`, written
/// under a temporary name and renamed), so no run leaves a copy behind; older copies are removed.
pub fn exec_probe() -> PathBuf {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    static COPY: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    COPY.get_or_init(|| {
        let src = bin("gatehouse-exec-probe");
        let meta = std::fs::metadata(&src).unwrap();
        let uid = nix::unistd::geteuid().as_raw();
        let dir = std::env::temp_dir().join(format!("gatehouse-exec-probe-{uid}"));
        match std::fs::create_dir(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => panic!("{}: {e}", dir.display()),
        }
        let dm = std::fs::symlink_metadata(&dir).unwrap();
        assert!(
            dm.is_dir() && dm.uid() == uid,
            "{} is not a directory of uid {uid}",
            dir.display()
        );
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        // The file keeps its name (tests find the processes it leaves by their command line).
        let build = format!(
            "build-{}-{}-{}",
            meta.len(),
            meta.mtime(),
            meta.mtime_nsec()
        );
        let p = dir.join(&build).join("gatehouse-exec-probe");
        if !p.exists() {
            let tmp = dir.join(format!(".{build}.{}", std::process::id()));
            std::fs::create_dir_all(&tmp).unwrap();
            std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755)).unwrap();
            let f = tmp.join("gatehouse-exec-probe");
            std::fs::copy(&src, &f).unwrap();
            std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o755)).unwrap();
            // Another test process may have won the race; its copy is the same build.
            if std::fs::rename(&tmp, dir.join(&build)).is_err() {
                let _ = std::fs::remove_dir_all(&tmp);
            }
        }
        // Copies of earlier builds; a test process still running one keeps its open file.
        for e in std::fs::read_dir(&dir).unwrap().flatten() {
            let n = e.file_name();
            let n = n.to_string_lossy();
            if n.starts_with("build-") && n != build.as_str() {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
        p
    })
    .clone()
}
