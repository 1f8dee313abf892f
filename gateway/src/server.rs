//! The serving loop: one thread that waits (`poll`) on stdin and the broker connection, answers
//! every request line, turns tool calls into typed [`ToolCall`]s, follows each call to its final
//! reply, sends progress while a call waits for the human, and gives up waiting (with a tool
//! error naming the proposal) after the configured time. Output to the client and to the broker
//! is buffered while input is being handled, and flushed before the loop waits again.
//!
//! [`ToolCall`]: ipc_schema::tool::ToolCall

use crate::args::{self, PathBase};
use crate::broker::BrokerLink;
use crate::catalog::{self, Standing};
use crate::era::{self, Version};
use crate::jsonrpc::{self, Id, Incoming, RpcError, INVALID_REQUEST, METHOD_NOT_FOUND};
use crate::lines::{LineEvent, LineSplitter, MAX_LINE};
use crate::render::{self, Rendered};
use ipc_schema::route::{RouteState, BROKER_TO_GATEWAY};
use ipc_schema::tool::{ProposalId, ToolCall, ToolName, ToolReply};
use ipc_schema::{Body, Envelope};
#[cfg(unix)]
use nix::poll::{PollFd, PollFlags, PollTimeout};
use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, HashMap};
use std::io::Write;
#[cfg(unix)]
use std::os::fd::BorrowedFd;
use std::time::{Duration, Instant};

/// What the loop reads the client from: stdin's descriptor (polled with the broker's socket);
/// on Windows nothing, since a thread of `crate::pipe` reads stdin.
#[cfg(unix)]
type StdinRef<'a> = BorrowedFd<'a>;
#[cfg(windows)]
type StdinRef<'a> = std::marker::PhantomData<&'a ()>;

/// The most tool calls one session may have in flight in the gateway.
pub const MAX_IN_FLIGHT: usize = 256;

/// How the loop behaves.
#[derive(Debug, Clone)]
pub struct Config {
    /// How long a call waits for the human's decision before it returns a tool error.
    pub approval_wait: Duration,
    /// How often a waiting call sends a progress notification (when the client asked).
    pub progress_every: Duration,
    pub base: PathBase,
}

/// Why serving ended other than by the client closing stdin.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("writing to stdout failed: {0}")]
    Stdout(std::io::Error),
    #[error("reading stdin failed: {0}")]
    Stdin(std::io::Error),
    #[error("waiting for input failed: {0}")]
    Poll(std::io::Error),
    /// The broker sent a frame that does not decode or that the route table does not allow
    /// toward a gateway (`ipc_schema::route::BROKER_TO_GATEWAY`): the session is over.
    #[error("the broker broke the protocol: {0}; the session is closed")]
    BrokerProtocol(String),
}

/// A call waiting for the human.
struct Wait {
    proposal: ProposalId,
    deadline: Instant,
    next_progress: Instant,
}

/// A tool call sent to the broker, not yet answered.
struct Pending {
    rpc_id: Id,
    /// The tool's name as the agent called it.
    tool: String,
    /// Reads are not in the ledger (what a repeated call does differs).
    read_only: bool,
    /// A `tools/list` waiting for the servers' tools: the built-in definitions to list first.
    listing: Option<Vec<Value>>,
    version: Version,
    progress_token: Option<Value>,
    progress: u64,
    wait: Option<Wait>,
}

pub struct Server<W: Write> {
    out: W,
    broker: BrokerLink,
    cfg: Config,
    /// The version `initialize` negotiated (legacy era).
    legacy: Option<Version>,
    /// Broker request id -> the call.
    calls: HashMap<u64, Pending>,
    /// Why the broker connection ended, once it has.
    broker_gone: Option<String>,
    /// What the policy does with each tool, when the broker says. Tools it denies outright are
    /// neither listed nor callable. The broker has no message for it yet (docs/gateway.md,
    /// "Waiting on the broker"): until it has, this stays `None` and every tool is offered, each
    /// call still decided by the broker.
    view: Option<BTreeMap<ToolName, Standing>>,
    /// The third-party tools the last `tools/list` offered or held (`None`: none listed yet, every
    /// `SERVER__TOOL` goes to the broker, which decides).
    server_offered: Option<std::collections::HashSet<String>>,
    /// The broker request that told it the client's `clientInfo`, once sent (it is sent once).
    described: Option<u64>,
    /// What the broker has sent so far, for its route table.
    route: RouteState,
}

fn progress_token(params: Option<&Map<String, Value>>) -> Option<Value> {
    let t = params?.get("_meta")?.get("progressToken")?;
    (t.is_string() || t.is_number()).then(|| t.clone())
}

/// The methods this server knows; any other is "method not found" in either era.
const METHODS: &[&str] = &[
    "initialize",
    "ping",
    "server/discover",
    "tools/list",
    "tools/call",
];

impl<W: Write> Server<W> {
    pub fn new(out: W, broker: BrokerLink, cfg: Config) -> Self {
        Server {
            out,
            broker,
            cfg,
            legacy: None,
            calls: HashMap::new(),
            broker_gone: None,
            view: None,
            server_offered: None,
            described: None,
            route: RouteState::default(),
        }
    }

    /// Tells the broker which MCP client this is (`clientInfo`, already validated as an object
    /// with string `name` and `version`), once per session, capped in length: it is the
    /// agent's own text, shown (inert) in the console's sessions pane.
    fn describe_agent(&mut self, info: Option<&Value>) {
        if self.described.is_some() || self.broker_gone.is_some() {
            return;
        }
        let Some(info) = info else { return };
        let (Some(name), Some(version)) = (
            info.get("name").and_then(Value::as_str),
            info.get("version").and_then(Value::as_str),
        ) else {
            return;
        };
        let agent = ipc_schema::tool::AgentInfo::capped(name, version);
        match self
            .broker
            .send(Body::ToolCall(ipc_schema::tool::ToolCall::DescribeAgent(
                agent,
            ))) {
            Ok(id) => self.described = Some(id),
            Err(e) => eprintln!("gatehouse mcp: could not tell the broker the client's name: {e}"),
        }
    }

    /// What the policy does with each tool (from the broker's session reply); an empty map
    /// (an invalid policy) leaves every tool offered, each call refused by the broker.
    pub fn with_view(mut self, view: BTreeMap<ToolName, Standing>) -> Self {
        if !view.is_empty() {
            self.view = Some(view);
        }
        self
    }

    /// Serves until stdin ends (`Ok`) or stdout or stdin fails.
    #[cfg(unix)]
    pub fn serve(self, stdin: BorrowedFd<'_>) -> Result<(), ServeError> {
        self.serve_from(stdin)
    }

    /// Serves until stdin ends (`Ok`) or stdout or stdin fails; stdin is read by a thread of
    /// the broker link's pipe, started now.
    #[cfg(windows)]
    pub fn serve(mut self) -> Result<(), ServeError> {
        self.broker
            .pipe()
            .start_stdin()
            .map_err(ServeError::Stdin)?;
        self.serve_from(std::marker::PhantomData)
    }

    fn serve_from(mut self, stdin: StdinRef<'_>) -> Result<(), ServeError> {
        let mut lines = LineSplitter::new(MAX_LINE);
        let mut buf = vec![0u8; 256 * 1024];
        let (mut line_events, mut frames) = (Vec::new(), Vec::new());
        loop {
            self.flush()?;
            let (broker_ready, stdin_read) = self.wait(stdin, &mut buf)?;
            if broker_ready {
                match self.broker.receive(&mut frames) {
                    Ok(open) => {
                        for env in frames.drain(..) {
                            self.on_frame(env)?;
                        }
                        if !open {
                            self.on_broker_gone("the broker closed the connection".into())?;
                        }
                    }
                    // Bytes that are not a frame: the broker is confused, not gone.
                    Err(ipc_schema::FrameError::Decode(e)) => {
                        frames.clear();
                        return self.broker_broke_protocol(format!("it sent a bad frame: {e}"));
                    }
                    Err(e) => {
                        frames.clear();
                        self.on_broker_gone(format!("the broker connection failed: {e}"))?;
                    }
                }
            }
            if let Some(n) = stdin_read {
                if n == 0 {
                    lines.finish(&mut line_events);
                } else {
                    lines.push(&buf[..n], &mut line_events);
                }
                for ev in line_events.drain(..) {
                    match ev {
                        LineEvent::Line(line) => self.on_line(&line)?,
                        LineEvent::TooLong { bytes, id } => self.send(&jsonrpc::error(
                            &id,
                            &RpcError::invalid_request(format!(
                                "the message is {bytes} bytes long; the limit is {MAX_LINE} bytes (4 MiB) per line"
                            )),
                        ))?,
                    }
                }
                if n == 0 {
                    // The client ended the session.
                    return self.flush();
                }
            }
            self.fire_timers()?;
        }
    }

    /// Waits for the broker's connection or stdin to have something, or the next timer:
    /// whether the broker has bytes to receive, and how many bytes of stdin are in `buf`
    /// (`Some(0)`: its end).
    #[cfg(unix)]
    fn wait(
        &mut self,
        stdin: BorrowedFd<'_>,
        buf: &mut [u8],
    ) -> Result<(bool, Option<usize>), ServeError> {
        let timeout = match self.next_timer() {
            None => PollTimeout::NONE,
            Some(at) => {
                let ms = at.saturating_duration_since(Instant::now()).as_millis();
                // Rounded up, so a timer never fires early and spins.
                PollTimeout::try_from(ms.saturating_add(1).min(i32::MAX as u128) as i32)
                    .unwrap_or(PollTimeout::MAX)
            }
        };
        let broker_open = self.broker_gone.is_none();
        let mut fds = vec![PollFd::new(stdin, PollFlags::POLLIN)];
        if broker_open {
            fds.push(PollFd::new(self.broker.as_fd(), PollFlags::POLLIN));
        }
        match nix::poll::poll(&mut fds, timeout) {
            Ok(_) => {}
            Err(nix::errno::Errno::EINTR) => return Ok((false, None)),
            Err(e) => return Err(ServeError::Poll(e.into())),
        }
        let ready = |fd: &PollFd| fd.revents().is_some_and(|r| !r.is_empty());
        let (stdin_ready, broker_ready) = (ready(&fds[0]), fds.get(1).is_some_and(ready));
        drop(fds);
        if !stdin_ready {
            return Ok((broker_ready, None));
        }
        loop {
            match nix::unistd::read(stdin, buf) {
                Ok(n) => return Ok((broker_ready, Some(n))),
                Err(nix::errno::Errno::EINTR) => continue,
                // A client may hand over a non-blocking stdin: nothing there after all.
                Err(nix::errno::Errno::EAGAIN) => return Ok((broker_ready, None)),
                Err(e) => return Err(ServeError::Stdin(e.into())),
            }
        }
    }

    /// The same on Windows, from the pipe's one stream of events.
    #[cfg(windows)]
    fn wait(
        &mut self,
        _stdin: StdinRef<'_>,
        buf: &mut [u8],
    ) -> Result<(bool, Option<usize>), ServeError> {
        use crate::pipe::Wake;
        // Rounded up, so a timer never fires early and spins.
        let timeout = self
            .next_timer()
            .map(|at| at.saturating_duration_since(Instant::now()) + Duration::from_millis(1));
        let broker_open = self.broker_gone.is_none();
        match self.broker.pipe().wait(timeout) {
            None => Ok((false, None)),
            Some(Wake::Broker(chunk)) if broker_open => {
                self.broker.pipe().unread_broker(chunk);
                Ok((true, None))
            }
            // After the broker has gone, whatever else its reader says is not read.
            Some(Wake::Broker(_)) => Ok((false, None)),
            Some(Wake::Stdin(Ok(bytes))) => {
                buf[..bytes.len()].copy_from_slice(&bytes);
                Ok((false, Some(bytes.len())))
            }
            Some(Wake::Stdin(Err(e))) => Err(ServeError::Stdin(e)),
        }
    }

    /// Queues one message line for the client.
    fn send(&mut self, msg: &Value) -> Result<(), ServeError> {
        serde_json::to_writer(&mut self.out, msg).map_err(|e| ServeError::Stdout(e.into()))?;
        self.out.write_all(b"\n").map_err(ServeError::Stdout)
    }

    fn flush(&mut self) -> Result<(), ServeError> {
        self.out.flush().map_err(ServeError::Stdout)?;
        if self.broker_gone.is_none() {
            if let Err(e) = self.broker.flush() {
                self.on_broker_gone(format!("writing to it failed: {e}"))?;
                self.out.flush().map_err(ServeError::Stdout)?;
            }
        }
        Ok(())
    }

    fn reply(&mut self, id: &Id, version: Version, result: Value) -> Result<(), ServeError> {
        self.send(&jsonrpc::result(id, era::finish_result(version, result)))
    }

    fn reply_err(&mut self, id: &Id, e: RpcError) -> Result<(), ServeError> {
        self.send(&jsonrpc::error(&id.0, &e))
    }

    fn on_line(&mut self, line: &[u8]) -> Result<(), ServeError> {
        match jsonrpc::parse_line(line) {
            Ok(None) => Ok(()),
            Ok(Some(Incoming::Request { id, method, params })) => {
                self.on_request(id, &method, params)
            }
            Ok(Some(Incoming::Notification { method, params })) => {
                self.on_notification(&method, params.as_ref());
                Ok(())
            }
            Ok(Some(Incoming::Response { id })) => {
                eprintln!(
                    "gatehouse mcp: ignored a response (id {}) to a request this server never sent",
                    id.0
                );
                Ok(())
            }
            Err(r) => self.send(&jsonrpc::error(&r.id, &r.error)),
        }
    }

    /// Notifications are never answered. Only a cancellation needs doing; the handshake's
    /// acknowledgement and the rest have no use here.
    fn on_notification(&mut self, method: &str, params: Option<&Map<String, Value>>) {
        if method != "notifications/cancelled" {
            return;
        }
        let Some(target) = params.and_then(|p| p.get("requestId")) else {
            return;
        };
        // The broker cannot take a call back; its answer is dropped when it comes.
        let found = self
            .calls
            .iter()
            .find(|(_, c)| &c.rpc_id.0 == target)
            .map(|(k, _)| *k);
        if let Some(k) = found {
            let c = self.calls.remove(&k).expect("found above");
            match c.wait.as_ref().map(|w| w.proposal) {
                // Waiting for the human: the proposal is withdrawn, so a decision made after
                // this carries nothing out.
                Some(p) => {
                    if let Err(e) = self
                        .broker
                        .send(Body::ToolCall(ipc_schema::tool::ToolCall::Withdraw(p)))
                    {
                        eprintln!("gatehouse mcp: could not withdraw proposal {p}: {e}");
                    }
                    eprintln!(
                        "gatehouse mcp: the client cancelled {} (request {}); proposal {p} withdrawn",
                        c.tool, c.rpc_id.0
                    );
                }
                None => eprintln!(
                    "gatehouse mcp: the client cancelled {} (request {}); gatehouse may still carry it out",
                    c.tool, c.rpc_id.0
                ),
            }
        }
    }

    fn on_request(
        &mut self,
        id: Id,
        method: &str,
        params: Option<Map<String, Value>>,
    ) -> Result<(), ServeError> {
        #[cfg(feature = "test-hooks")]
        if method == crate::probe::METHOD {
            let result = crate::probe::run(params.as_ref());
            return self.send(&jsonrpc::result(&id, result));
        }
        if !METHODS.contains(&method) {
            return self.reply_err(
                &id,
                RpcError::new(METHOD_NOT_FOUND, format!("Method not found: {method}")),
            );
        }
        if method == "initialize" {
            return self.initialize(id, params.as_ref());
        }
        let version = match era::modern_version(params.as_ref()) {
            Err(e) => return self.reply_err(&id, e),
            Ok(Some(v)) => {
                // No handshake in this era: the client names itself in `_meta`, if at all.
                let info = params
                    .as_ref()
                    .and_then(|p| p.get("_meta"))
                    .and_then(|m| m.get(era::META_CLIENT_INFO))
                    .cloned();
                self.describe_agent(info.as_ref());
                v
            }
            Ok(None) => match (self.legacy, method) {
                (_, "server/discover") => {
                    return self.reply_err(
                        &id,
                        RpcError::invalid_params(format!(
                            "server/discover needs \"{}\" and \"{}\" in params._meta",
                            era::META_PROTOCOL_VERSION,
                            era::META_CLIENT_CAPABILITIES
                        )),
                    )
                }
                (Some(v), _) => v,
                // A legacy client may ping before the handshake.
                (None, "ping") => Version::LATEST_HANDSHAKE,
                (None, _) => {
                    return self.reply_err(
                        &id,
                        RpcError::invalid_params(format!(
                            "{method}: no protocol version: send initialize first, or (protocol 2026-07-28) give \"{}\" and \"{}\" in params._meta",
                            era::META_PROTOCOL_VERSION,
                            era::META_CLIENT_CAPABILITIES
                        )),
                    )
                }
            },
        };
        match method {
            "ping" if version.is_modern() => self.reply_err(
                &id,
                RpcError::new(
                    METHOD_NOT_FOUND,
                    "Method not found: ping (removed in protocol 2026-07-28)",
                ),
            ),
            "ping" => self.reply(&id, version, json!({})),
            "server/discover" => self.reply(&id, version, era::discover_result()),
            "tools/list" => self.tools_list(id, version, params.as_ref()),
            "tools/call" => self.tools_call(id, version, params),
            _ => unreachable!("every method of METHODS is handled"),
        }
    }

    fn initialize(
        &mut self,
        id: Id,
        params: Option<&Map<String, Value>>,
    ) -> Result<(), ServeError> {
        if let Some(v) = self.legacy {
            return self.reply_err(
                &id,
                RpcError::invalid_request(format!(
                    "initialize was already done for this session (protocol {})",
                    v.as_str()
                )),
            );
        }
        match era::negotiate(params) {
            Ok(v) => {
                self.legacy = Some(v);
                self.describe_agent(params.and_then(|p| p.get("clientInfo")));
                self.reply(&id, v, era::initialize_result(v))
            }
            Err(e) => self.reply_err(&id, e),
        }
    }

    /// Whether `tool` is offered: not denied outright by the policy in force.
    fn offered(&self, tool: ToolName) -> bool {
        self.view
            .as_ref()
            .and_then(|v| v.get(&tool))
            .is_none_or(|s| s.action != ipc_schema::tool::Action::Deny)
    }

    fn tools_list(
        &mut self,
        id: Id,
        version: Version,
        params: Option<&Map<String, Value>>,
    ) -> Result<(), ServeError> {
        if let Some(c) = params.and_then(|p| p.get("cursor")) {
            return self.reply_err(
                &id,
                RpcError::invalid_params(format!(
                    "unknown cursor {c}: this server lists every tool in one page"
                )),
            );
        }
        let tools: Vec<Value> = ToolName::ALL
            .into_iter()
            .filter(|t| self.offered(*t))
            .map(|t| catalog::definition(t, version, self.view.as_ref().and_then(|v| v.get(&t))))
            .collect();
        // The profile's third-party servers' tools come from the broker (which starts the
        // servers and pins their definitions); without a broker, only the built-in tools.
        if self.broker_gone.is_none() {
            if let Ok(broker_id) = self.broker.send(Body::ToolCall(ToolCall::ListServerTools)) {
                self.calls.insert(
                    broker_id,
                    Pending {
                        rpc_id: id,
                        tool: "tools/list".into(),
                        read_only: true,
                        listing: Some(tools),
                        version,
                        progress_token: None,
                        progress: 0,
                        wait: None,
                    },
                );
                return Ok(());
            }
        }
        self.send_tools(id, version, tools)
    }

    fn send_tools(
        &mut self,
        id: Id,
        version: Version,
        tools: Vec<Value>,
    ) -> Result<(), ServeError> {
        let mut result = json!({ "tools": tools });
        if version.is_modern() {
            result["ttlMs"] = json!(0);
            result["cacheScope"] = json!("private");
        }
        self.reply(&id, version, result)
    }

    fn tool_error(&mut self, id: &Id, version: Version, text: String) -> Result<(), ServeError> {
        self.reply(id, version, Rendered::error(text).to_json())
    }

    fn tools_call(
        &mut self,
        id: Id,
        version: Version,
        params: Option<Map<String, Value>>,
    ) -> Result<(), ServeError> {
        let params = params.unwrap_or_default();
        let name = match params.get("name") {
            Some(Value::String(n)) => n,
            Some(_) => {
                return self.reply_err(
                    &id,
                    RpcError::invalid_params("tools/call: \"name\" must be a string"),
                )
            }
            None => {
                return self.reply_err(
                    &id,
                    RpcError::invalid_params("tools/call: \"name\" is required"),
                )
            }
        };
        let empty = Map::new();
        let arguments = match params.get("arguments") {
            None | Some(Value::Null) => &empty,
            Some(Value::Object(a)) => a,
            Some(_) => {
                return self.reply_err(
                    &id,
                    RpcError::invalid_params("tools/call: \"arguments\" must be an object"),
                )
            }
        };
        // A tool the policy denies outright is as unknown as one that does not exist.
        let server_call = ipc_schema::servers::split_offered(name).filter(|_| {
            self.server_offered
                .as_ref()
                .is_none_or(|o| o.contains(name.as_str()))
        });
        let builtin = ToolName::from_name(name).filter(|t| self.offered(*t));
        if builtin.is_none() && server_call.is_none() {
            return self.reply_err(
                &id,
                RpcError::invalid_params(format!("Unknown tool: {name}")),
            );
        }
        let tool = name.clone();
        if self.calls.values().any(|c| c.rpc_id == id) {
            return self.reply_err(
                &id,
                RpcError::new(
                    INVALID_REQUEST,
                    format!(
                        "request id {} is already in use by a call in progress",
                        id.0
                    ),
                ),
            );
        }
        if let Some(why) = &self.broker_gone {
            let text = format!(
                "{tool} was not carried out: gatehouse's broker is gone ({why}). This gateway cannot reconnect from inside its sandbox: restart the MCP server."
            );
            return self.tool_error(&id, version, text);
        }
        if self.calls.len() >= MAX_IN_FLIGHT {
            let text = format!("{tool} was not carried out: {MAX_IN_FLIGHT} calls are already in flight in this session; wait for some to finish");
            return self.tool_error(&id, version, text);
        }
        let (call, read_only) = match (builtin, server_call) {
            (Some(t), _) => match args::parse(t, arguments, &self.cfg.base) {
                Ok(c) => (c, t.is_read_only()),
                Err(e) => return self.tool_error(&id, version, e.to_string()),
            },
            (None, Some((server, tool))) => {
                let arguments = match ipc_schema::servers::JsonText::from_value(&Value::Object(
                    arguments.clone(),
                )) {
                    Ok(a) => a,
                    Err(e) => {
                        return self.tool_error(
                            &id,
                            version,
                            format!("{name} was not carried out: its arguments: {e}"),
                        )
                    }
                };
                (
                    ToolCall::Server(ipc_schema::tool::ServerCall {
                        server,
                        tool,
                        arguments,
                    }),
                    false,
                )
            }
            (None, None) => unreachable!("refused above"),
        };
        match self.broker.send(Body::ToolCall(call)) {
            Ok(broker_id) => {
                self.calls.insert(
                    broker_id,
                    Pending {
                        rpc_id: id,
                        tool,
                        read_only,
                        listing: None,
                        version,
                        progress_token: progress_token(Some(&params)),
                        progress: 0,
                        wait: None,
                    },
                );
                Ok(())
            }
            Err(ipc_schema::FrameError::Encode(e)) => {
                let text = format!(
                    "{tool} was not carried out: the call cannot be sent to the broker ({e})"
                );
                self.tool_error(&id, version, text)
            }
            Err(e) => {
                let why = format!("writing to it failed: {e}");
                let text =
                    format!("{tool} was not carried out: gatehouse's broker is gone ({why}).");
                self.broker_gone = Some(why);
                self.tool_error(&id, version, text)
            }
        }
    }

    fn on_frame(&mut self, env: Envelope) -> Result<(), ServeError> {
        if let Err(e) = BROKER_TO_GATEWAY.check(&mut self.route, &env.body) {
            return self.broker_broke_protocol(e.to_string());
        }
        if !self.broker.sent(env.id) {
            return self.broker_broke_protocol(format!(
                "it answered request {}, which this gateway never sent",
                env.id
            ));
        }
        match env.body {
            Body::ToolReply(ToolReply::AwaitingApproval(w)) => {
                let now = Instant::now();
                let Some(call) = self.calls.get_mut(&env.id) else {
                    return Ok(());
                };
                call.wait = Some(Wait {
                    proposal: w.proposal,
                    deadline: now + self.cfg.approval_wait,
                    next_progress: now,
                });
                Ok(())
            }
            Body::ToolReply(ToolReply::Session(_)) => Ok(()),
            // The broker noted the client's name.
            Body::Pong if Some(env.id) == self.described => Ok(()),
            // A withdrawal taken (its call is already answered).
            Body::Pong => Ok(()),
            Body::Error(e) if Some(env.id) == self.described => {
                eprintln!(
                    "gatehouse mcp: the broker did not take the client's name: {}",
                    e.message
                );
                Ok(())
            }
            Body::ToolReply(ToolReply::ServerTools(st)) => {
                let Some(call) = self.calls.remove(&env.id) else {
                    return Ok(());
                };
                let Some(mut tools) = call.listing else {
                    return self.broker_broke_protocol(
                        "it answered a tool call with a list of tools".into(),
                    );
                };
                for u in &st.unavailable {
                    eprintln!("gatehouse mcp: {u}");
                }
                // Held tools stay callable names: the broker refuses them and says why.
                let mut offered: std::collections::HashSet<String> = st
                    .held
                    .iter()
                    .map(|h| ipc_schema::servers::offered_name(&h.server, &h.tool))
                    .collect();
                for t in &st.offered {
                    offered.insert(ipc_schema::servers::offered_name(&t.server, &t.def.name));
                    tools.push(catalog::server_definition(t, call.version));
                }
                self.server_offered = Some(offered);
                self.send_tools(call.rpc_id, call.version, tools)
            }
            Body::ToolReply(reply) => {
                let Some(call) = self.calls.remove(&env.id) else {
                    return Ok(());
                };
                if let Some(tools) = call.listing {
                    return self.send_tools(call.rpc_id, call.version, tools);
                }
                let r = render::final_reply(call.tool, &reply);
                self.reply(&call.rpc_id, call.version, r.to_json())
            }
            Body::Error(e) => {
                let Some(call) = self.calls.remove(&env.id) else {
                    return Ok(());
                };
                if let Some(tools) = call.listing {
                    eprintln!(
                        "gatehouse mcp: the servers' tools are not listed: {}",
                        e.message
                    );
                    return self.send_tools(call.rpc_id, call.version, tools);
                }
                let text = format!(
                    "{} was not carried out: gatehouse could not take the call ({:?}): {}",
                    call.tool, e.code, e.message
                );
                self.tool_error(&call.rpc_id, call.version, text)
            }
            // The route table above lets nothing else through.
            other => self.broker_broke_protocol(format!(
                "it sent a {:?} message, which a gateway does not take",
                other.kind()
            )),
        }
    }

    /// The broker sent what it may not: every call in flight is answered with a tool error that
    /// says so, and serving ends with [`ServeError::BrokerProtocol`] (the process exits
    /// non-zero; the client sees its server close).
    fn broker_broke_protocol(&mut self, why: String) -> Result<(), ServeError> {
        eprintln!("gatehouse mcp: the broker broke the protocol: {why}; closing the session");
        let calls: Vec<Pending> = self.calls.drain().map(|(_, c)| c).collect();
        for c in calls {
            let text = format!(
                "gatehouse's broker sent a message this gateway does not accept while {} was in flight ({why}): whether it took effect is unknown. The session is closed; restart the MCP server.",
                c.tool
            );
            self.tool_error(&c.rpc_id, c.version, text)?;
        }
        self.out.flush().map_err(ServeError::Stdout)?;
        Err(ServeError::BrokerProtocol(why))
    }

    fn on_broker_gone(&mut self, why: String) -> Result<(), ServeError> {
        eprintln!("gatehouse mcp: {why}; tool calls will fail until the MCP server is restarted");
        let calls: Vec<Pending> = self.calls.drain().map(|(_, c)| c).collect();
        for c in calls {
            let text = format!(
                "The connection to gatehouse's broker ended while {} was in flight ({why}): whether it took effect is unknown. Look before calling again; this gateway cannot reconnect, restart the MCP server.",
                c.tool
            );
            self.tool_error(&c.rpc_id, c.version, text)?;
        }
        self.broker_gone = Some(why);
        Ok(())
    }

    /// The next moment a waiting call needs attention.
    fn next_timer(&self) -> Option<Instant> {
        self.calls
            .values()
            .filter_map(|c| {
                let w = c.wait.as_ref()?;
                Some(if c.progress_token.is_some() {
                    w.deadline.min(w.next_progress)
                } else {
                    w.deadline
                })
            })
            .min()
    }

    fn fire_timers(&mut self) -> Result<(), ServeError> {
        let now = Instant::now();
        let mut expired = Vec::new();
        let mut notes = Vec::new();
        for (k, c) in self.calls.iter_mut() {
            let Some(w) = c.wait.as_mut() else { continue };
            if now >= w.deadline {
                expired.push(*k);
                continue;
            }
            if let Some(token) = &c.progress_token {
                if now >= w.next_progress {
                    c.progress += 1;
                    w.next_progress = now + self.cfg.progress_every;
                    let left = w.deadline.saturating_duration_since(now).as_secs();
                    notes.push(jsonrpc::notification(
                        "notifications/progress",
                        json!({
                            "progressToken": token,
                            "progress": c.progress,
                            "message": format!(
                                "waiting for the human to decide proposal {} in the gatehouse console (giving up in {left} s)",
                                w.proposal
                            ),
                        }),
                    ));
                }
            }
        }
        for n in notes {
            self.send(&n)?;
        }
        for k in expired {
            let c = self.calls.remove(&k).expect("collected above");
            let p = c
                .wait
                .as_ref()
                .map(|w| w.proposal)
                .expect("only waiting calls expire");
            let again = if c.read_only {
                "Reads are not kept in gatehouse's ledger: calling again asks the human again, unless they allowed it for this session meanwhile."
            } else {
                "Calling again with exactly the same arguments returns the human's decision once it is made (gatehouse's ledger answers a repeated call; it is never carried out twice)."
            };
            let text = format!(
                "{} is waiting for the human's approval: proposal {p} was not decided within {} s, so gatehouse stopped waiting. Nothing has been done yet. {again}",
                c.tool,
                self.cfg.approval_wait.as_secs()
            );
            self.tool_error(&c.rpc_id, c.version, text)?;
        }
        Ok(())
    }
}
