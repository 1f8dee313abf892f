//! Messages between the broker and the exec-helper.
//!
//! A command runs in three steps, each a request with exactly one reply:
//!
//! 1. [`ExecRequest::Start`] with a [`CommandSpec`]: the helper re-checks the built-in command
//!    policy, builds the sandbox and starts the command. Reply: [`ExecReply::Started`] (with a
//!    [`RunId`] and what the sandbox enforces), or [`crate::Body::Error`] with
//!    [`crate::ErrorCode::Refused`] (policy or containment said no), `Invalid` (bad values) or
//!    `Limit` (too many runs at once).
//! 2. [`ExecRequest::Poll`], repeated: answered as soon as the run has output the broker has not
//!    seen, or has ended, or after `wait_ms`, with [`ExecReply::Progress`]. Output arrives in
//!    pieces of at most [`OUTPUT_PIECE_MAX`] bytes per stream, so a reply always fits a frame.
//!    The reply whose `end` is set is the last one for that run; the helper then forgets it.
//! 3. [`ExecRequest::Stop`] (optional): kills the run's whole sandbox at once. The next `Poll`
//!    returns the end ([`RunOutcome::Stopped`]).
//!
//! The helper answers requests concurrently: a `Poll` waiting for output does not hold up a
//! `Start`, a `Stop` or a `Ping`; replies carry the id of their request.
//!
//! File descriptors: a `Start` whose sandbox passes connections out
//! ([`CommandSpec::needs_connector`]: the proxy network, an agent's gateway socket, a
//! server's stdio socket) travels with
//! exactly one descriptor, the command's connector, attached with `SCM_RIGHTS` to the `sendmsg`
//! that writes the frame's bytes (the same rule as `net::NetRequest::ProxyConnection`). No other
//! frame carries descriptors.
//!
//! The connector is one end of a Unix stream socket pair; the broker keeps the other. Inside the
//! sandbox a listener on `127.0.0.1:`[`PROXY_BRIDGE_PORT`] accepts the command's proxy
//! connections, and a listener on [`AgentRun::gateway_socket`] an agent's gateway connections;
//! for each one the sandbox writes one byte ([`CONNECTOR_PROXY`] or [`CONNECTOR_GATEWAY`]) with
//! the accepted socket attached. The broker hands each proxy socket to the net-helper as a
//! `ProxyConnection` for the command's proxy session (the command speaks HTTP `CONNECT` on it
//! with the session's token as proxy password: `HTTPS_PROXY=http://gatehouse:TOKEN@127.0.0.1:PORT`)
//! and serves each gateway socket as a gateway connection bound to the run. For a third-party
//! MCP server ([`UserCommand::server`]) the exec-helper itself writes one [`CONNECTOR_STDIO`]
//! byte, exactly once, with the broker's end of the server's stdin/stdout socket attached,
//! after the sandbox is created and before it answers `Started`; [`CONNECTOR_PROXY`] bytes of
//! the same run may come before or after it (each byte says what its descriptor is).

use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// The port of the proxy bridge inside every sandbox (each sandbox has its own network
/// namespace, so the same port never collides). Profile::Exec's Landlock rules allow TCP bind and
/// connect on this port only.
pub const PROXY_BRIDGE_PORT: u16 = 3128;

/// The most output bytes of one stream in one [`ExecReply::Progress`].
pub const OUTPUT_PIECE_MAX: usize = 256 * 1024;

/// Default and ceiling of the run time.
pub const TIMEOUT_DEFAULT_MS: u64 = 5 * 60 * 1000;
pub const TIMEOUT_MAX_MS: u64 = 10 * 60 * 1000;
/// Default and ceiling of the output kept per stream (what is beyond is counted, not kept).
pub const OUTPUT_DEFAULT_MAX: u64 = 512 * 1024;
pub const OUTPUT_CEILING: u64 = 16 * 1024 * 1024;
/// The ceilings of a [`UserCommand::long_run`]: an agent session runs up to a day; its output
/// is relayed as it comes, this only bounds what is counted as kept.
pub const LONG_TIMEOUT_MAX_MS: u64 = 24 * 3600 * 1000;
pub const LONG_OUTPUT_MAX: u64 = 64 << 20;
/// The longest a `Poll` may wait for something to report.
pub const POLL_WAIT_MAX_MS: u32 = 30_000;

/// The helper's name for one run.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RunId(pub u64);

impl std::fmt::Display for RunId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "run {}", self.0)
    }
}

/// Broker to exec-helper.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub enum ExecRequest {
    /// Start a command in a sandbox of its own (boxed: it is by far the largest request, and
    /// every `Body` would otherwise be as large).
    Start(Box<CommandSpec>),
    /// Output and, once it has ended, the end of a run; waits up to `wait_ms`
    /// (at most [`POLL_WAIT_MAX_MS`]) when there is nothing new. One `Poll` per run at a time.
    Poll { run: RunId, wait_ms: u32 },
    /// Kill the run's sandbox (every process in it).
    Stop { run: RunId },
}

/// exec-helper to broker.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub enum ExecReply {
    /// The command is running.
    Started {
        run: RunId,
        sandbox: Box<SandboxReport>,
    },
    /// New output since the last `Progress`, and the end once the run is over.
    Progress {
        run: RunId,
        stdout: Vec<u8>,
        stderr: Vec<u8>,
        end: Option<RunEnd>,
    },
    /// The sandbox was killed (or had already ended); `Poll` for its end.
    Stopping { run: RunId },
}

/// One command and the sandbox it runs in.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct CommandSpec {
    /// The program and its arguments; `argv[0]` is a path or a name looked up in the sandbox's
    /// `PATH`. Never a shell string: a shell runs only when `argv[0]` names one.
    pub argv: Vec<String>,
    /// Absolute; must lie inside one of `grants`. The broker resolves "no directory given" to
    /// the working root.
    pub cwd: PathBuf,
    /// The directories (or files) the command sees, at their own paths. Everything else of the
    /// host is invisible except the read-only system directories.
    pub grants: Vec<PathGrant>,
    /// Variables the caller asks for. Names that look like secrets, `LD_*`, and the names the
    /// sandbox sets itself are dropped (and listed in [`SandboxReport::env_dropped`]).
    pub env: Vec<(String, String)>,
    pub network: NetworkMode,
    pub limits: Limits,
    /// What the command may not see in its grants (their exclude globs, files that may hold
    /// secrets): masked.
    pub hide: Hide,
    /// Set only for a command the human launched (`gatehouse sandbox`, through the broker's ui
    /// channel); `None` for an agent's `run_command`.
    pub user: Option<Box<UserCommand>>,
    /// Windows: the command slot whose SID the broker gave this command's ACEs (its token is
    /// restricted to it); `None` elsewhere, where each command's view is its own sandbox.
    pub slot: Option<CommandSlot>,
}

impl CommandSpec {
    /// Its limits (against a long run's ceilings for a [`UserCommand::long_run`]), a server's
    /// run name and its slot (each named on Windows and only there), or why the `Start` is
    /// invalid.
    pub fn check_values(&self) -> Result<(), String> {
        let long_run = self.user.as_ref().is_some_and(|u| u.long_run);
        self.limits.check_with(long_run)?;
        let server = self.user.as_ref().and_then(|u| u.server.as_ref());
        if server.is_some_and(|s| s.run_name.is_some() != cfg!(windows)) {
            return Err(
                "a third-party server's run is named on Windows (its stdio pipe) and only there"
                    .into(),
            );
        }
        let os = if cfg!(target_os = "macos") {
            "macOS"
        } else {
            "Linux"
        };
        match (cfg!(windows), self.slot) {
            (true, None) => Err(
                "a Start on Windows names the command slot the broker applied its ACEs for".into(),
            ),
            (false, Some(_)) => Err(format!(
                "a command slot is Windows' (its ACEs' SID); a Start on {os} names none"
            )),
            _ => Ok(()),
        }
    }

    /// Whether the sandbox passes connections out, so the `Start` must bring the command's
    /// connector: the proxy network, an agent's gateway socket, or a server's stdio socket.
    pub fn needs_connector(&self) -> bool {
        // On Windows an agent reaches its gateway on a pipe of its run ([`RunName`]).
        matches!(self.network, NetworkMode::Proxy { .. })
            || self
                .user
                .as_ref()
                .is_some_and(|u| (u.agent.is_some() && cfg!(unix)) || u.server.is_some())
    }
}

/// What a command the human launched may have beyond an agent's `run_command`.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, Eq)]
pub struct UserCommand {
    /// Variables passed although their names look like secrets, because the user named them
    /// (`--pass-env`). `LD_*` and the sandbox's own names still never pass.
    pub pass_env: Vec<(String, String)>,
    /// An agent session (`gatehouse run`): the time and output ceilings are
    /// [`LONG_TIMEOUT_MAX_MS`] and [`LONG_OUTPUT_MAX`], not a command's.
    pub long_run: bool,
    /// `gatehouse run`: what the agent's sandbox has beyond a command's.
    pub agent: Option<AgentRun>,
    /// A third-party MCP server over stdio; never together with `agent`, and only as a
    /// `long_run` (it lives as long as its connection).
    pub server: Option<ServerRun>,
}

impl UserCommand {
    /// The sandbox's own `HOME` (an agent's or a server's state directory, if either), or why
    /// this command is invalid: an agent and a server in one sandbox, or a server that is not a
    /// `long_run`.
    pub fn state_home(&self) -> Result<Option<&std::path::Path>, String> {
        match (&self.agent, &self.server) {
            (Some(_), Some(_)) => Err(
                "a Start runs an agent or a third-party MCP server, never both in one sandbox"
                    .into(),
            ),
            (None, Some(_)) if !self.long_run => Err(
                "a third-party MCP server lives as long as its connection: it must be a long_run"
                    .into(),
            ),
            (Some(a), None) => Ok(Some(&a.state_home)),
            (None, Some(s)) => Ok(Some(&s.state_home)),
            (None, None) => Ok(None),
        }
    }
}

/// A third-party MCP server's sandbox (one per server connection, for the life of that
/// connection): its own `HOME`, under the same rules as an agent's [`AgentRun::state_home`] (a
/// direct entry of gatehouse's agent-state directory, granted read-write by the caller, its
/// siblings out of sight). Its stdin and stdout are one Unix stream socket whose other end the
/// exec-helper passes out over the connector with one [`CONNECTOR_STDIO`] byte right after the
/// sandbox starts: the broker speaks JSON-RPC on it, closing it is the server's end of input
/// (EOF on stdin), and it reads EOF once every process of the server has closed its stdout.
/// Stderr stays a captured stream (`Progress::stderr`, for the broker's log; never given to the
/// agent); `Progress::stdout` stays empty.
///
/// On Windows there is no connector: the broker serves a pipe named after the run
/// ([`RunName::server_pipe`]) for the exec-helper alone, which connects to it twice before the
/// server starts, the first connection the server's stdin, the second its stdout (two handles:
/// a synchronous pipe handle serves one I/O at a time, so one duplex handle could stall a
/// server that reads and writes from two threads).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct ServerRun {
    pub state_home: PathBuf,
    /// Windows: the run whose pipe carries the server's stdin and stdout; `None` elsewhere.
    pub run_name: Option<RunName>,
}

/// What an agent's sandbox (`gatehouse run`) has beyond a command's: its own state directory
/// as `HOME`, the files and variables that tell it where gatehouse is, and a Unix socket inside
/// whose connections reach the broker's gateway channel through the command's connector.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct AgentRun {
    /// The agent's login and state (`HOME` inside, read-write): a directory of its own in
    /// gatehouse's agent-state directory, whose other entries stay masked.
    pub state_home: PathBuf,
    /// Files created in the sandbox's private `/tmp` before it starts: (path inside, text).
    pub tmp_files: Vec<(PathBuf, String)>,
    /// gatehouse's own variables (`GATEHOUSE_*`), set after the environment filter.
    pub vars: Vec<(String, String)>,
    /// A socket in the private `/tmp`: each connection to it goes out over the connector as
    /// one [`CONNECTOR_GATEWAY`] byte with its descriptor.
    pub gateway_socket: PathBuf,
}

/// The byte that carries each connection a sandbox passes out over its connector
/// (`SCM_RIGHTS`, one descriptor per byte): a client of the egress proxy (TCP, from the
/// sandbox's loopback bridge) ...
pub const CONNECTOR_PROXY: u8 = b'P';
/// ... or a client of an agent's gateway socket ([`AgentRun::gateway_socket`]) ...
pub const CONNECTOR_GATEWAY: u8 = b'G';
/// ... or, once per run, the broker's end of a server's stdin/stdout socket ([`ServerRun`]).
pub const CONNECTOR_STDIO: u8 = b'S';

/// Inside an agent's sandbox (its private `/tmp`, seen by nothing outside it): the gateway
/// socket, the run's token and the MCP config `gatehouse run` points the agent at.
pub const AGENT_GATEWAY_SOCKET: &str = "/tmp/gatehouse-gateway.sock";
pub const AGENT_TOKEN_FILE: &str = "/tmp/gatehouse-token";
pub const AGENT_MCP_CONFIG: &str = "/tmp/gatehouse-mcp.json";
/// The variables that say the same, for clients that keep their environment (`gatehouse mcp`
/// reads the first two; an agent's wrapper, the third).
pub const AGENT_SOCKET_ENV: &str = "GATEHOUSE_GATEWAY_SOCKET";
pub const AGENT_TOKEN_ENV: &str = "GATEHOUSE_SESSION_TOKEN";
pub const AGENT_MCP_CONFIG_ENV: &str = "GATEHOUSE_MCP_CONFIG";

/// Windows and macOS: the name of one `gatehouse run` (32 lowercase hex digits the CLI draws;
/// not a secret). Neither gives a sandbox a private `/tmp`, so where the run meets gatehouse is
/// named after the run ([`RunName::place`]), and two runs of one agent never share a place.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(try_from = "String", into = "String")]
pub struct RunName(String);

/// Where one run (on Windows or macOS) meets gatehouse: where its gateway connections go (on
/// Windows the pipe the broker serves; on macOS the socket the exec-helper listens on for the
/// command, in the agent's state directory: `sandbox::bridge`), the run's token (written by the
/// broker) and its MCP config (by the CLI), both in the agent's state directory, which the
/// command may read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunPlace {
    pub gateway: String,
    pub token_file: PathBuf,
    pub mcp_config: PathBuf,
}

impl RunName {
    pub const LEN: usize = 32;

    pub fn parse(s: &str) -> Result<RunName, String> {
        if s.len() != Self::LEN || !s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            return Err(format!(
                "a run's name is {} lowercase hex digits, not {s:?}",
                Self::LEN
            ));
        }
        Ok(RunName(s.to_string()))
    }

    /// A third-party server's stdio pipe ([`ServerRun`]).
    pub fn server_pipe(&self) -> String {
        format!(r"\\.\pipe\gatehouse-server-{}", self.0)
    }

    /// The run's gateway and files, for the agent whose state directory is `state_home`. The
    /// socket's name is short: a Unix socket's path has at most 103 bytes on macOS.
    pub fn place(&self, state_home: &std::path::Path) -> RunPlace {
        let n = &self.0;
        RunPlace {
            gateway: match cfg!(windows) {
                true => format!(r"\\.\pipe\gatehouse-run-{n}"),
                false => (state_home.join(format!("gatehouse-{}.sock", &n[..16])))
                    .display()
                    .to_string(),
            },
            token_file: state_home.join(format!("gatehouse-run-{n}.token")),
            mcp_config: state_home.join(format!("gatehouse-run-{n}.mcp.json")),
        }
    }
}

impl TryFrom<String> for RunName {
    type Error = String;
    fn try_from(s: String) -> Result<RunName, String> {
        RunName::parse(&s)
    }
}

impl From<RunName> for String {
    fn from(n: RunName) -> String {
        n.0
    }
}

/// Windows: one of the [`CommandSlot::COUNT`] command slots. Every command's token carries the
/// command profile's SID (the one the network filters name) and its slot's SID, and the ACEs
/// on its grants name only the slot's: commands in different slots cannot write where the
/// other may, so they run side by side. Runs that may write exactly the same places share a
/// slot; the broker hands them out (`broker/src/exec_aces.rs`).
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[serde(try_from = "u8", into = "u8")]
pub struct CommandSlot(u8);

impl CommandSlot {
    /// How many: the SIDs are in the exec-helper's token (a command's token can only keep
    /// restricting SIDs its maker's has), so the set is fixed when the exec-helper starts.
    pub const COUNT: u8 = 8;

    pub fn new(n: u8) -> Result<CommandSlot, String> {
        match n < Self::COUNT {
            true => Ok(CommandSlot(n)),
            false => Err(format!(
                "a command slot is 0 to {}, not {n}",
                Self::COUNT - 1
            )),
        }
    }

    pub fn all() -> impl Iterator<Item = CommandSlot> {
        (0..Self::COUNT).map(CommandSlot)
    }

    pub fn index(self) -> usize {
        usize::from(self.0)
    }
}

impl std::fmt::Display for CommandSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl TryFrom<u8> for CommandSlot {
    type Error = String;
    fn try_from(n: u8) -> Result<CommandSlot, String> {
        CommandSlot::new(n)
    }
}

impl From<CommandSlot> for u8 {
    fn from(s: CommandSlot) -> u8 {
        s.0
    }
}

/// What is masked inside the grants, beyond the protected places.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq, Eq)]
pub struct Hide {
    /// Globs relative to the first grant's root (`ipc_schema::grant_glob`).
    pub exclude: Vec<String>,
    /// Files whose names say they hold secrets (`ipc_schema::protected::sensitive`).
    pub sensitive: bool,
}

/// One path the command may see, and how.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct PathGrant {
    /// Absolute; symbolic links are resolved by the helper.
    pub path: PathBuf,
    pub access: GrantAccess,
}

#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub enum GrantAccess {
    Read,
    ReadWrite,
}

/// Whether the command reaches any network.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub enum NetworkMode {
    /// No network at all: no inet sockets (seccomp), no TCP connect (Landlock), no route.
    None,
    /// Only through the egress proxy, over the connector that travels with the frame.
    Proxy {
        /// The session's proxy token, put into the proxy variables as the proxy password.
        token: String,
    },
    /// Windows, where no descriptor crosses between processes: only through the egress proxy
    /// the broker listens for at `127.0.0.1:port` (a port of
    /// [`crate::net::LOOPBACK_PROXY_PORTS`]), handing each connection to its net-helper. The
    /// token keeps the user's other processes out.
    LoopbackProxy { token: String, port: u16 },
}

/// What a run may consume. [`Limits::default`] is what the issue calls the defaults.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Wall-clock time from start; at most [`TIMEOUT_MAX_MS`].
    pub timeout_ms: u64,
    /// Output bytes kept per stream; beyond it bytes are counted and dropped.
    pub stdout_max: u64,
    pub stderr_max: u64,
    /// RLIMIT_NPROC: processes and threads of the sandbox's user.
    pub processes: u64,
    /// RLIMIT_FSIZE: the largest file the command may write.
    pub file_size: u64,
    /// RLIMIT_NOFILE.
    pub open_files: u64,
    /// RLIMIT_AS: address space per process.
    pub memory: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            timeout_ms: TIMEOUT_DEFAULT_MS,
            stdout_max: OUTPUT_DEFAULT_MAX,
            stderr_max: OUTPUT_DEFAULT_MAX,
            processes: 1024,
            file_size: 8 << 30,
            open_files: 4096,
            memory: 16 << 30,
        }
    }
}

/// Ceilings for [`Limits`]; a request beyond one is refused as invalid, naming the limit.
pub const LIMIT_CEILINGS: Limits = Limits {
    timeout_ms: TIMEOUT_MAX_MS,
    stdout_max: OUTPUT_CEILING,
    stderr_max: OUTPUT_CEILING,
    processes: 16384,
    file_size: 1 << 40,
    open_files: 65536,
    memory: 1 << 40,
};

impl Limits {
    /// `Err` names the first limit that is zero or above its ceiling.
    pub fn check(&self) -> Result<(), String> {
        self.check_with(false)
    }

    /// [`Limits::check`]; `long_run`: with a long run's time and output ceilings.
    pub fn check_with(&self, long_run: bool) -> Result<(), String> {
        let (time, out) = if long_run {
            (LONG_TIMEOUT_MAX_MS, LONG_OUTPUT_MAX)
        } else {
            (LIMIT_CEILINGS.timeout_ms, LIMIT_CEILINGS.stdout_max)
        };
        let pairs = [
            ("timeout_ms", self.timeout_ms, time),
            ("stdout_max", self.stdout_max, out),
            ("stderr_max", self.stderr_max, out),
            ("processes", self.processes, LIMIT_CEILINGS.processes),
            ("file_size", self.file_size, LIMIT_CEILINGS.file_size),
            ("open_files", self.open_files, LIMIT_CEILINGS.open_files),
            ("memory", self.memory, LIMIT_CEILINGS.memory),
        ];
        for (name, value, max) in pairs {
            if value == 0 || value > max {
                return Err(format!("limit {name} = {value} is outside 1..={max}"));
            }
        }
        Ok(())
    }
}

/// What the sandbox of a run enforces (for approval cards, the audit log and `doctor`).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct SandboxReport {
    /// The program that was resolved for `argv[0]` (inside the sandbox's view).
    pub program: String,
    /// The confinement the command runs under (named on cards, audit rows and results).
    pub tier: crate::tier::ConfinementTier,
    /// Namespaces the command is in: `user`, `mount`, `pid`, `net`, `ipc`, `uts` (none in the
    /// Landlock tier).
    pub namespaces: Vec<String>,
    /// The host uid and gid the command acts as.
    pub uid: u32,
    pub gid: u32,
    /// The Landlock ABI used for the command's ruleset (0: none, only with `--allow-degraded`).
    pub landlock_abi: u32,
    /// The seccomp denylist is installed.
    pub seccomp_denylist: bool,
    /// Paths masked (unreadable, unwritable) inside the granted directories.
    pub masked: Vec<PathBuf>,
    /// Variables asked for and dropped, each with why.
    pub env_dropped: Vec<String>,
    /// What is weaker than asked, and why (only with `--allow-degraded`).
    pub degraded: Vec<String>,
}

/// How a run ended.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct RunEnd {
    pub outcome: RunOutcome,
    /// Output bytes beyond the per-stream limits, counted and dropped.
    pub stdout_dropped: u64,
    pub stderr_dropped: u64,
    pub elapsed_ms: u64,
    /// What the command planted in its writable grants that the user's own tools would run
    /// (a new repository's hooks and config, editor or agent settings), set aside after it
    /// ended: at most [`HELD_SHOWN_MAX`], the rest counted.
    pub held: Vec<HeldPath>,
    pub held_more: u64,
}

/// The most [`HeldPath`]s one [`RunEnd`] lists (so an end always fits a frame).
pub const HELD_SHOWN_MAX: usize = 32;

/// One thing a command planted that the sandbox set aside.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct HeldPath {
    #[serde(with = "serde_bytes")]
    pub path: Vec<u8>,
    /// Where it is now; `None`: it could not be moved (`why` says what to do).
    pub moved_to: Option<serde_bytes::ByteBuf>,
    pub why: String,
}

impl std::fmt::Display for HeldPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let show = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        match &self.moved_to {
            Some(to) => write!(
                f,
                "{} ({}) set aside as {}",
                show(&self.path),
                self.why,
                show(to)
            ),
            None => write!(f, "{} ({})", show(&self.path), self.why),
        }
    }
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub enum RunOutcome {
    /// The command exited with this status.
    Exited(i32),
    /// The command was killed by this signal.
    Signaled(i32),
    /// The time limit ended it (the whole sandbox was killed).
    TimedOut { after_ms: u64 },
    /// A `Stop` ended it.
    Stopped,
    /// The program could not be executed (`errno` of `execve`, e.g. 2: not found).
    ExecFailed { errno: i32, message: String },
    /// The sandbox could not be built; nothing ran.
    SandboxFailed { message: String },
}

impl RunOutcome {
    /// One line for people, e.g. `exited with status 3`.
    pub fn describe(&self) -> String {
        match self {
            RunOutcome::Exited(c) => format!("exited with status {c}"),
            RunOutcome::Signaled(s) => format!("killed by signal {s}"),
            RunOutcome::TimedOut { after_ms } => {
                format!(
                    "timed out after {} s; the sandbox was killed",
                    after_ms / 1000
                )
            }
            RunOutcome::Stopped => "stopped; the sandbox was killed".into(),
            RunOutcome::ExecFailed { message, .. } => format!("could not run: {message}"),
            RunOutcome::SandboxFailed { message } => format!("sandbox failed: {message}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Body, Envelope};

    #[test]
    fn a_full_progress_reply_fits_a_frame() {
        let env = Envelope::new(
            u64::MAX,
            Body::ExecReply(ExecReply::Progress {
                run: RunId(u64::MAX),
                stdout: vec![0xff; OUTPUT_PIECE_MAX],
                stderr: vec![0xff; OUTPUT_PIECE_MAX],
                end: Some(RunEnd {
                    outcome: RunOutcome::SandboxFailed {
                        message: "x".repeat(4096),
                    },
                    stdout_dropped: u64::MAX,
                    stderr_dropped: u64::MAX,
                    elapsed_ms: u64::MAX,
                    held: vec![
                        HeldPath {
                            path: vec![0xff; 1024],
                            moved_to: Some(serde_bytes::ByteBuf::from(vec![0xff; 1040])),
                            why: "x".repeat(300),
                        };
                        HELD_SHOWN_MAX
                    ],
                    held_more: u64::MAX,
                }),
            }),
        );
        assert!(crate::codec::encode(&env).is_ok());
    }

    #[test]
    fn exec_messages_do_not_make_every_body_large() {
        assert!(
            std::mem::size_of::<ExecRequest>() <= 32,
            "{}",
            std::mem::size_of::<ExecRequest>()
        );
        assert!(
            std::mem::size_of::<ExecReply>() <= 160,
            "{}",
            std::mem::size_of::<ExecReply>()
        );
    }

    #[test]
    fn a_state_home_belongs_to_an_agent_or_a_long_running_server_never_both() {
        let agent = AgentRun {
            state_home: "/agents/a".into(),
            tmp_files: vec![],
            vars: vec![],
            gateway_socket: AGENT_GATEWAY_SOCKET.into(),
        };
        let server = ServerRun {
            state_home: "/agents/s".into(),
            run_name: None,
        };
        let user = |agent, server, long_run| UserCommand {
            agent,
            server,
            long_run,
            ..Default::default()
        };
        assert_eq!(UserCommand::default().state_home(), Ok(None));
        assert_eq!(
            user(Some(agent.clone()), None, true).state_home(),
            Ok(Some(std::path::Path::new("/agents/a")))
        );
        assert_eq!(
            user(None, Some(server.clone()), true).state_home(),
            Ok(Some(std::path::Path::new("/agents/s")))
        );
        assert!(user(None, Some(server.clone()), false)
            .state_home()
            .unwrap_err()
            .contains("must be a long_run"));
        assert!(user(Some(agent), Some(server), true)
            .state_home()
            .unwrap_err()
            .contains("never both"));
    }

    /// A slot off the end of the fixed set is no slot: refused when made and when decoded.
    #[test]
    fn a_command_slot_is_one_of_the_fixed_set() {
        assert_eq!(CommandSlot::all().count(), 8);
        assert_eq!(CommandSlot::new(7).map(u8::from), Ok(7));
        assert_eq!(
            CommandSlot::new(8),
            Err("a command slot is 0 to 7, not 8".to_string())
        );
        let wire = postcard::to_allocvec(&Some(7u8)).unwrap();
        let back: Option<CommandSlot> = postcard::from_bytes(&wire).unwrap();
        assert_eq!(back, CommandSlot::new(7).ok());
        let wire = postcard::to_allocvec(&Some(8u8)).unwrap();
        assert!(postcard::from_bytes::<Option<CommandSlot>>(&wire).is_err());
    }

    #[test]
    fn limits_are_checked_against_ceilings() {
        assert_eq!(Limits::default().check(), Ok(()));
        let l = Limits {
            timeout_ms: TIMEOUT_MAX_MS + 1,
            ..Limits::default()
        };
        assert_eq!(
            l.check().unwrap_err(),
            "limit timeout_ms = 600001 is outside 1..=600000"
        );
        let l = Limits {
            processes: 0,
            ..Limits::default()
        };
        assert!(l.check().unwrap_err().starts_with("limit processes = 0"));
    }
}
