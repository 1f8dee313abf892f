//! A command's connector served from outside the command (the exec-helper on macOS).
//!
//! On Linux the listeners a command's connector serves live inside its own network namespace
//! (`linux::command::child`): the egress proxy's port and an agent's gateway socket, each
//! connection passed out to the broker with its byte. macOS has no such namespace, so the
//! exec-helper, which holds the connector and is outside every command's profile, listens for
//! the command instead: the egress proxy on `127.0.0.1` (a port of
//! [`LOOPBACK_PROXY_PORTS`], the one port the command's profile may reach) and an agent's
//! gateway socket (a path the profile may reach), and passes each connection it accepts out
//! with [`CONNECTOR_PROXY`] or [`CONNECTOR_GATEWAY`], as the namespace's bridge does; a server's
//! stdio socket goes first, with [`CONNECTOR_STDIO`]. The broker's side is Linux's.
//!
//! What the namespace gives and this does not: the proxy's port can be reached by any local
//! process, so the session's token (checked by the net-helper on each `CONNECT`) is what keeps
//! others out; the gateway socket is served only to a process the caller admits by its pid
//! (the command's own, by descent). Built on every Unix, tested on Linux.

use crate::seatbelt::CommandNetwork;
use ipc_schema::exec::{NetworkMode, PathGrant, UserCommand};
use ipc_schema::exec::{CONNECTOR_GATEWAY, CONNECTOR_PROXY, CONNECTOR_STDIO};
use ipc_schema::net::LOOPBACK_PROXY_PORTS;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use std::io;
use std::net::{Ipv4Addr, TcpListener};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::thread::JoinHandle;

/// Who may use an agent's gateway socket, by the pid the kernel names for the peer.
pub type Admit = Box<dyn Fn(u32) -> bool + Send>;

/// What one command's connector carries.
#[derive(Default)]
pub struct Listeners {
    /// The egress proxy's listener ([`proxy_listener`]).
    pub proxy: Option<TcpListener>,
    /// An agent's gateway socket.
    pub gateway: Option<GatewaySocket>,
    /// A third-party server's stdio socket, the broker's end: passed out first, once.
    pub stdio: Option<UnixStream>,
}

/// An agent's gateway socket: its listener, its path (removed when this is dropped, whether the
/// bridge ran or not), and who may connect (nobody until the caller says).
pub struct GatewaySocket {
    listener: UnixListener,
    path: PathBuf,
    pub admit: Admit,
}

impl GatewaySocket {
    /// Listens at `path` (a new socket: a file already there refuses).
    pub fn bind(path: PathBuf) -> io::Result<GatewaySocket> {
        Ok(GatewaySocket {
            listener: UnixListener::bind(&path)?,
            path,
            admit: Box::new(|_| false),
        })
    }
}

impl Drop for GatewaySocket {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// A listener on `127.0.0.1` on the first free port of the egress proxy's range, and its port.
pub fn proxy_listener() -> io::Result<(TcpListener, u16)> {
    for port in LOOPBACK_PROXY_PORTS {
        match TcpListener::bind((Ipv4Addr::LOCALHOST, port)) {
            Ok(l) => return Ok((l, port)),
            Err(e) if e.kind() == io::ErrorKind::AddrInUse => continue,
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AddrInUse,
        format!(
            "every port of 127.0.0.1:{}-{} is taken",
            LOOPBACK_PROXY_PORTS.start(),
            LOOPBACK_PROXY_PORTS.end()
        ),
    ))
}

/// What a command needs to meet the broker, made before it starts ([`prepare`]).
pub struct Prepared {
    /// For [`start`], with the connector. Dropped unstarted, they close (the socket's path
    /// removed).
    pub listeners: Listeners,
    /// What the command's environment gets after its filter (which dropped the caller's own
    /// proxy variables and `HOME`): the proxy's variables, `HOME`, an agent's variables.
    pub vars: Vec<(String, String)>,
    /// The command profile's network (`seatbelt::CommandSpec::network`).
    pub network: CommandNetwork,
    /// The sandbox's own directory, resolved (`seatbelt::CommandSpec::own_dir`).
    pub own_dir: Option<PathBuf>,
    /// The gateway socket, resolved (`seatbelt::CommandSpec::sockets`).
    pub sockets: Vec<PathBuf>,
    /// A server's end of its stdio socket: its stdin and its stdout (one socket, twice).
    pub stdio: Option<(OwnedFd, OwnedFd)>,
}

/// Makes what `network` and `user` ask for: the egress proxy's listener and variables (the
/// session's token as the proxy password); for an agent or a server, its state directory,
/// which `grants` must give read-write, as `HOME`; for an agent, its gateway socket, which must
/// lie in that directory (`RunName::place`: macOS gives a sandbox no private `/tmp`, so an
/// agent with files there is refused), and its variables; for a server, its stdio socket.
/// Paths are resolved, as Seatbelt matches them.
pub fn prepare(
    network: &NetworkMode,
    grants: &[PathGrant],
    user: &UserCommand,
) -> Result<Prepared, String> {
    let resolve =
        |p: &std::path::Path| std::fs::canonicalize(p).map_err(|e| format!("{}: {e}", p.display()));
    let mut out = Prepared {
        listeners: Listeners::default(),
        vars: Vec::new(),
        network: CommandNetwork::None,
        own_dir: None,
        sockets: Vec::new(),
        stdio: None,
    };
    match network {
        NetworkMode::None => {}
        NetworkMode::Proxy { token } => {
            let (l, port) =
                proxy_listener().map_err(|e| format!("the egress proxy's listener: {e}"))?;
            out.listeners.proxy = Some(l);
            out.vars = crate::command_env::loopback_proxy_vars(token, port)?;
            out.network = CommandNetwork::LoopbackProxy { port };
        }
        NetworkMode::LoopbackProxy { .. } => {
            return Err(
                "a proxy on a loopback port is Windows': here it comes through the connector"
                    .into(),
            )
        }
    }
    let Some(home) = user.state_home()? else {
        return Ok(out);
    };
    crate::command_env::state_home_granted(home, grants)?;
    let own = resolve(home)?;
    out.vars.push(("HOME".into(), home.display().to_string()));
    if let Some(a) = &user.agent {
        let name = (a.gateway_socket.parent() == Some(home) && a.tmp_files.is_empty())
            .then(|| a.gateway_socket.file_name())
            .flatten()
            .ok_or_else(|| format!(
                "the agent's gateway socket {} is not in its state directory, or it asks for files in a private /tmp, which this system does not give it",
                a.gateway_socket.display()
            ))?;
        let path = own.join(name);
        let socket = GatewaySocket::bind(path.clone())
            .map_err(|e| format!("the agent's gateway socket {}: {e}", path.display()))?;
        out.listeners.gateway = Some(socket);
        out.sockets.push(path);
        out.vars.extend(a.vars.iter().cloned());
    }
    if user.server.is_some() {
        let (ours, theirs) =
            UnixStream::pair().map_err(|e| format!("the server's stdio socket: {e}"))?;
        let twin = theirs
            .try_clone()
            .map_err(|e| format!("the server's stdio socket: {e}"))?;
        out.listeners.stdio = Some(ours);
        out.stdio = Some((twin.into(), theirs.into()));
    }
    out.own_dir = Some(own);
    Ok(out)
}

/// A running bridge. Dropping it ends it: its listeners close, the gateway socket's path is
/// removed, and its end of the connector closes.
pub struct Bridge {
    stop: Option<OwnedFd>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for Bridge {
    fn drop(&mut self) {
        // The serving thread sees the pipe's other end close and returns.
        self.stop.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Passes the stdio socket out (before returning: the broker waits for it before anything
/// else), then serves the listeners on a thread of their own until the [`Bridge`] is dropped
/// or the broker closes its end of the connector.
pub fn start(connector: OwnedFd, mut l: Listeners) -> io::Result<Bridge> {
    let connector = UnixStream::from(connector);
    if let Some(stdio) = l.stdio.take() {
        pass(&connector, CONNECTOR_STDIO, stdio.as_fd())?;
    }
    if let Some(p) = &l.proxy {
        p.set_nonblocking(true)?;
    }
    if let Some(g) = &l.gateway {
        g.listener.set_nonblocking(true)?;
    }
    let (stop_r, stop_w) = nix::unistd::pipe()?;
    let thread = std::thread::Builder::new()
        .name("connector-bridge".into())
        .spawn(move || serve(connector, l, stop_r))?;
    Ok(Bridge {
        stop: Some(stop_w),
        thread: Some(thread),
    })
}

/// One byte naming the listener, with the connection attached.
fn pass(connector: &UnixStream, byte: u8, fd: std::os::fd::BorrowedFd<'_>) -> io::Result<()> {
    match ipc_schema::fdpass::send_with_fd(connector, &[byte], fd)? {
        1 => Ok(()),
        _ => Err(io::Error::new(
            io::ErrorKind::WriteZero,
            "the connector took no byte",
        )),
    }
}

fn serve(connector: UnixStream, l: Listeners, stop: OwnedFd) {
    loop {
        let mut fds = vec![
            PollFd::new(stop.as_fd(), PollFlags::POLLIN),
            PollFd::new(connector.as_fd(), PollFlags::empty()),
        ];
        fds.extend(
            l.proxy
                .iter()
                .map(|p| PollFd::new(p.as_fd(), PollFlags::POLLIN)),
        );
        fds.extend(
            l.gateway
                .iter()
                .map(|g| PollFd::new(g.listener.as_fd(), PollFlags::POLLIN)),
        );
        match poll(&mut fds, PollTimeout::NONE) {
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => {
                eprintln!("connector bridge: poll: {e}");
                break;
            }
            Ok(_) => {}
        }
        let ready: Vec<bool> = fds.iter().map(|f| f.any().unwrap_or(true)).collect();
        // Stopped (the command ended), or the broker's end closed: nothing more to pass.
        if ready[0] || ready[1] {
            break;
        }
        let mut next = 2;
        if let Some(p) = &l.proxy {
            if ready[next] {
                if let Ok((conn, _)) = p.accept() {
                    if conn.set_nonblocking(false).is_err()
                        || pass(&connector, CONNECTOR_PROXY, conn.as_fd()).is_err()
                    {
                        break;
                    }
                }
            }
            next += 1;
        }
        if let Some(g) = &l.gateway {
            if ready[next] {
                if let Ok((conn, _)) = g.listener.accept() {
                    let peer = crate::peer::of_unix_socket(conn.as_fd()).ok();
                    match peer.and_then(|p| p.pid) {
                        Some(pid) if (g.admit)(pid) => {
                            if conn.set_nonblocking(false).is_err()
                                || pass(&connector, CONNECTOR_GATEWAY, conn.as_fd()).is_err()
                            {
                                break;
                            }
                        }
                        // Not the command's: closed unanswered.
                        who => eprintln!(
                            "connector bridge: a process ({who:?}) that is not the command's connected to its gateway socket; closed"
                        ),
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipc_schema::exec::GrantAccess;
    use std::collections::VecDeque;
    use std::io::{Read, Write};
    use std::net::TcpStream;
    use std::path::Path;

    /// The tests that take proxy ports run one at a time: a port one test frees and then
    /// expects refused could otherwise be the next one another test binds.
    fn ports() -> std::sync::MutexGuard<'static, ()> {
        static PORTS: std::sync::Mutex<()> = std::sync::Mutex::new(());
        PORTS.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The next byte and descriptor the broker's end of the connector gets.
    fn received(ours: &UnixStream) -> (u8, OwnedFd) {
        let mut b = [0u8; 1];
        let mut fds = VecDeque::new();
        let n = ipc_schema::fdpass::recv_with_fds(ours, &mut b, &mut fds).unwrap();
        assert_eq!((n, fds.len()), (1, 1));
        (b[0], fds.pop_front().unwrap())
    }

    /// Whatever `client` writes comes out of `passed`, and back.
    fn same_connection(client: &mut (impl Read + Write), passed: OwnedFd) {
        let mut passed = std::fs::File::from(passed);
        client.write_all(b"ping").unwrap();
        let mut got = [0u8; 4];
        passed.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"ping");
        passed.write_all(b"pong").unwrap();
        client.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"pong");
    }

    fn user(agent: Option<ipc_schema::exec::AgentRun>, server: bool, home: &Path) -> UserCommand {
        UserCommand {
            long_run: true,
            agent,
            server: server.then(|| ipc_schema::exec::ServerRun {
                state_home: home.into(),
                run_name: None,
            }),
            ..UserCommand::default()
        }
    }

    fn agent_run(home: &Path, socket: PathBuf) -> ipc_schema::exec::AgentRun {
        ipc_schema::exec::AgentRun {
            state_home: home.into(),
            tmp_files: Vec::new(),
            vars: vec![(
                "GATEHOUSE_GATEWAY_SOCKET".into(),
                socket.display().to_string(),
            )],
            gateway_socket: socket,
        }
    }

    fn rw(p: &Path) -> Vec<PathGrant> {
        vec![PathGrant {
            path: p.into(),
            access: GrantAccess::ReadWrite,
        }]
    }

    #[test]
    fn a_proxied_command_gets_the_listener_its_profile_names_and_its_variables() {
        let _ports = ports();
        let token = "0a".repeat(16);
        let p = prepare(
            &NetworkMode::Proxy {
                token: token.clone(),
            },
            &[],
            &UserCommand::default(),
        )
        .unwrap();
        let CommandNetwork::LoopbackProxy { port } = p.network else {
            panic!("no proxy in the profile");
        };
        let bound = p.listeners.proxy.as_ref().unwrap().local_addr().unwrap();
        assert_eq!(
            (bound.ip(), bound.port()),
            (Ipv4Addr::LOCALHOST.into(), port)
        );
        assert_eq!(
            p.vars,
            crate::command_env::loopback_proxy_vars(&token, port).unwrap()
        );
        assert!(p.vars[0]
            .1
            .contains(&format!("gatehouse:{token}@127.0.0.1:{port}")));
        assert_eq!(
            (p.own_dir, p.sockets.len(), p.stdio.is_none()),
            (None, 0, true)
        );
        // Windows' form is refused here.
        let loopback = NetworkMode::LoopbackProxy { token, port };
        assert_eq!(
            prepare(&loopback, &[], &UserCommand::default())
                .err()
                .unwrap(),
            "a proxy on a loopback port is Windows': here it comes through the connector"
        );
    }

    #[test]
    fn an_agent_gets_its_home_its_gateway_socket_and_its_variables() {
        let d = tempfile::tempdir().unwrap();
        let home = d.path().join("agents/claude");
        std::fs::create_dir_all(&home).unwrap();
        let socket = home.join("gatehouse-0a0a0a0a0a0a0a0a.sock");
        let a = agent_run(&home, socket.clone());
        let p = prepare(&NetworkMode::None, &rw(&home), &user(Some(a), false, &home)).unwrap();
        let real = std::fs::canonicalize(&home).unwrap();
        assert_eq!(p.own_dir.as_deref(), Some(real.as_path()));
        assert_eq!(p.sockets, [real.join("gatehouse-0a0a0a0a0a0a0a0a.sock")]);
        assert_eq!(
            p.vars,
            [
                ("HOME".to_string(), home.display().to_string()),
                (
                    "GATEHOUSE_GATEWAY_SOCKET".to_string(),
                    socket.display().to_string()
                ),
            ]
        );
        assert!(matches!(p.network, CommandNetwork::None));
        // The socket listens (its path is a socket), and goes with the listeners.
        UnixStream::connect(&socket).unwrap();
        drop(p);
        assert_eq!(
            std::fs::symlink_metadata(&socket).unwrap_err().kind(),
            io::ErrorKind::NotFound
        );
    }

    #[test]
    fn what_an_agent_or_server_may_not_have_is_refused_with_why() {
        let d = tempfile::tempdir().unwrap();
        let home = d.path().join("agents/claude");
        std::fs::create_dir_all(&home).unwrap();
        let socket = home.join("gatehouse-0a0a0a0a0a0a0a0a.sock");
        let refused = |grants: &[PathGrant], u: UserCommand| {
            prepare(&NetworkMode::None, grants, &u).err().unwrap()
        };
        // Its state directory only read: no HOME of its own.
        let read = [PathGrant {
            path: home.clone(),
            access: GrantAccess::Read,
        }];
        let a = agent_run(&home, socket.clone());
        assert_eq!(
            refused(&read, user(Some(a.clone()), false, &home)),
            format!(
                "the sandbox's state directory {} is not granted read-write",
                home.display()
            )
        );
        assert_eq!(
            refused(&read, user(None, true, &home)),
            format!(
                "the sandbox's state directory {} is not granted read-write",
                home.display()
            )
        );
        // A gateway socket outside the state directory, or files in a private /tmp.
        let outside = d.path().join("gw.sock");
        let elsewhere = format!(
            "the agent's gateway socket {} is not in its state directory, or it asks for files in a private /tmp, which this system does not give it",
            outside.display()
        );
        let a2 = agent_run(&home, outside.clone());
        assert_eq!(refused(&rw(&home), user(Some(a2), false, &home)), elsewhere);
        assert!(!outside.exists());
        let mut a3 = a.clone();
        a3.tmp_files = vec![("/tmp/gatehouse-token".into(), "t".into())];
        assert!(
            refused(&rw(&home), user(Some(a3), false, &home)).starts_with(&format!(
                "the agent's gateway socket {} is not in its state directory",
                socket.display()
            ))
        );
        // An agent and a server in one sandbox.
        assert_eq!(
            refused(&rw(&home), user(Some(a.clone()), true, &home)),
            "a Start runs an agent or a third-party MCP server, never both in one sandbox"
        );
        // The control: the same agent, granted its directory, is prepared.
        assert!(prepare(&NetworkMode::None, &rw(&home), &user(Some(a), false, &home)).is_ok());
    }

    #[test]
    fn a_server_gets_one_socket_as_stdin_and_stdout_and_its_home() {
        let d = tempfile::tempdir().unwrap();
        let home = d.path().join("agents/mcp-x");
        std::fs::create_dir_all(&home).unwrap();
        let mut p = prepare(&NetworkMode::None, &rw(&home), &user(None, true, &home)).unwrap();
        assert_eq!(p.vars, [("HOME".to_string(), home.display().to_string())]);
        assert!(p.sockets.is_empty() && p.listeners.gateway.is_none());
        let (stdin, stdout) = p.stdio.take().unwrap();
        let mut broker = p.listeners.stdio.take().unwrap();
        // What the broker writes, the server reads on its stdin; what it writes on its stdout,
        // the broker reads.
        broker.write_all(b"in").unwrap();
        let mut got = [0u8; 2];
        std::fs::File::from(stdin).read_exact(&mut got).unwrap();
        assert_eq!(&got, b"in");
        std::fs::File::from(stdout).write_all(b"up").unwrap();
        broker.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"up");
    }

    #[test]
    fn the_proxy_port_is_one_of_the_range_and_taken_ports_are_skipped() {
        let _ports = ports();
        let (a, pa) = proxy_listener().unwrap();
        let (_b, pb) = proxy_listener().unwrap();
        assert!(LOOPBACK_PROXY_PORTS.contains(&pa) && LOOPBACK_PROXY_PORTS.contains(&pb));
        assert_ne!(pa, pb);
        assert_eq!(a.local_addr().unwrap().ip(), Ipv4Addr::LOCALHOST);
    }

    #[test]
    fn each_connection_goes_out_with_its_byte_stdio_first() {
        let _ports = ports();
        let dir = tempfile::tempdir().unwrap();
        let (ours, theirs) = UnixStream::pair().unwrap();
        let (proxy, port) = proxy_listener().unwrap();
        let path = dir.path().join("gw.sock");
        let me = std::process::id();
        let mut gateway = GatewaySocket::bind(path.clone()).unwrap();
        gateway.admit = Box::new(move |pid| pid == me);
        let (broker_stdio, mut server_stdio) = UnixStream::pair().unwrap();
        let bridge = start(
            OwnedFd::from(theirs),
            Listeners {
                proxy: Some(proxy),
                gateway: Some(gateway),
                stdio: Some(broker_stdio),
            },
        )
        .unwrap();

        let (byte, stdio) = received(&ours);
        assert_eq!(byte, CONNECTOR_STDIO);
        same_connection(&mut server_stdio, stdio);

        let mut client = TcpStream::connect((Ipv4Addr::LOCALHOST, port)).unwrap();
        let (byte, conn) = received(&ours);
        assert_eq!(byte, CONNECTOR_PROXY);
        same_connection(&mut client, conn);

        let mut agent = UnixStream::connect(&path).unwrap();
        let (byte, conn) = received(&ours);
        assert_eq!(byte, CONNECTOR_GATEWAY);
        same_connection(&mut agent, conn);

        // Ended: the socket's path is gone, the port refuses, the connector is closed.
        drop(bridge);
        assert!(!path.exists());
        let refused = TcpStream::connect((Ipv4Addr::LOCALHOST, port)).unwrap_err();
        assert_eq!(refused.raw_os_error(), Some(libc::ECONNREFUSED));
        let mut b = [0u8; 1];
        let mut fds = VecDeque::new();
        assert_eq!(
            ipc_schema::fdpass::recv_with_fds(&ours, &mut b, &mut fds).unwrap(),
            0
        );
    }

    #[test]
    fn a_gateway_client_the_caller_does_not_admit_is_closed_and_nothing_goes_out() {
        let dir = tempfile::tempdir().unwrap();
        let (ours, theirs) = UnixStream::pair().unwrap();
        let path = dir.path().join("gw.sock");
        let me = std::process::id();
        let admitted = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = admitted.clone();
        let mut gateway = GatewaySocket::bind(path.clone()).unwrap();
        gateway.admit =
            Box::new(move |pid| pid == me && flag.load(std::sync::atomic::Ordering::SeqCst));
        let _bridge = start(
            OwnedFd::from(theirs),
            Listeners {
                gateway: Some(gateway),
                ..Listeners::default()
            },
        )
        .unwrap();
        // Refused: the client's connection ends unanswered ...
        let mut stranger = UnixStream::connect(&path).unwrap();
        // (Passed out instead, it would wait here: the timeout turns that into a failure.)
        stranger
            .set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .unwrap();
        let mut buf = [0u8; 1];
        assert_eq!(stranger.read(&mut buf).unwrap(), 0);
        // ... and nothing reached the broker's end.
        ours.set_nonblocking(true).unwrap();
        let mut fds = VecDeque::new();
        let e = ipc_schema::fdpass::recv_with_fds(&ours, &mut buf, &mut fds).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
        ours.set_nonblocking(false).unwrap();
        // The control: the same process, admitted now, goes out.
        admitted.store(true, std::sync::atomic::Ordering::SeqCst);
        let mut agent = UnixStream::connect(&path).unwrap();
        let (byte, conn) = received(&ours);
        assert_eq!(byte, CONNECTOR_GATEWAY);
        same_connection(&mut agent, conn);
    }

    #[test]
    fn the_bridge_ends_when_the_broker_closes_the_connector() {
        let _ports = ports();
        let (ours, theirs) = UnixStream::pair().unwrap();
        let (proxy, port) = proxy_listener().unwrap();
        let bridge = start(
            OwnedFd::from(theirs),
            Listeners {
                proxy: Some(proxy),
                ..Listeners::default()
            },
        )
        .unwrap();
        drop(ours);
        // The thread returns on its own (the drop only joins it), closing the listener.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            match TcpStream::connect((Ipv4Addr::LOCALHOST, port)) {
                Err(e) => {
                    assert_eq!(e.raw_os_error(), Some(libc::ECONNREFUSED));
                    break;
                }
                Ok(_) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(std::time::Duration::from_millis(10))
                }
                Ok(_) => panic!("the proxy's port still accepts after the connector closed"),
            }
        }
        drop(bridge);
    }
}
