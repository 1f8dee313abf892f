//! Tool calls from an agent's gateway, and the broker's answers.
//!
//! One variant per tool, each with typed arguments (file tools reuse the fs-helper's types). The
//! gateway turns the agent's JSON into these; the broker never parses agent JSON. Who is calling
//! is the connection (one gateway connection is one session), never a field of the call.
//!
//! A call gets exactly one final reply ([`ToolReply::Done`], [`ToolReply::Refused`] or
//! [`ToolReply::Failed`]); a call that needs the human's approval first gets
//! [`ToolReply::AwaitingApproval`] with the same request id, then its final reply.

use crate::fs::{
    ChangeReceipt, CheckpointId, CheckpointInfo, CreateMode, Edit, FileChunk, FsError, FsPath,
    GrepLimits, GrepResults, Listing, SearchResults, WalkLimits,
};
use crate::servers::{JsonText, ServerName, ServerToolName, ToolDef};
use crate::ErrorCode;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// Every tool gatehouse offers. Policy is written per tool name ([`ToolName::as_str`]).
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ToolName {
    ReadFile,
    ListDir,
    SearchFiles,
    Grep,
    WriteFile,
    EditFile,
    DeletePath,
    MovePath,
    UndoChange,
    FetchUrl,
    HttpRequest,
    RunCommand,
}

impl ToolName {
    pub const ALL: [ToolName; 12] = [
        ToolName::ReadFile,
        ToolName::ListDir,
        ToolName::SearchFiles,
        ToolName::Grep,
        ToolName::WriteFile,
        ToolName::EditFile,
        ToolName::DeletePath,
        ToolName::MovePath,
        ToolName::UndoChange,
        ToolName::FetchUrl,
        ToolName::HttpRequest,
        ToolName::RunCommand,
    ];

    /// The name agents and policy files use.
    pub fn as_str(self) -> &'static str {
        match self {
            ToolName::ReadFile => "read_file",
            ToolName::ListDir => "list_dir",
            ToolName::SearchFiles => "search_files",
            ToolName::Grep => "grep",
            ToolName::WriteFile => "write_file",
            ToolName::EditFile => "edit_file",
            ToolName::DeletePath => "delete_path",
            ToolName::MovePath => "move_path",
            ToolName::UndoChange => "undo_change",
            ToolName::FetchUrl => "fetch_url",
            ToolName::HttpRequest => "http_request",
            ToolName::RunCommand => "run_command",
        }
    }

    pub fn from_name(s: &str) -> Option<ToolName> {
        ToolName::ALL.into_iter().find(|t| t.as_str() == s)
    }

    /// Tools that change nothing outside gatehouse. They skip the ledger (a repeated read is
    /// simply read again). A fetch is a read: it only GETs. (`http_request` depends on its
    /// method: see [`ToolCall::is_read_only`].)
    pub fn is_read_only(self) -> bool {
        matches!(
            self,
            ToolName::ReadFile
                | ToolName::ListDir
                | ToolName::SearchFiles
                | ToolName::Grep
                | ToolName::FetchUrl
        )
    }

    /// Tools served by the fs-helper.
    pub fn is_file_tool(self) -> bool {
        !matches!(
            self,
            ToolName::FetchUrl | ToolName::HttpRequest | ToolName::RunCommand
        )
    }
}

impl std::fmt::Display for ToolName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A tool that a call, a proposal, a ledger entry or a remembered decision is about: one of
/// gatehouse's own, or a third-party server's (`SERVER__TOOL`). Carried as its name.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[serde(try_from = "String", into = "String")]
pub enum ToolId {
    Builtin(ToolName),
    Server(ServerName, ServerToolName),
}

impl ToolId {
    /// The name agents and policy files use (`read_file`, `notes__create_entities`).
    pub fn name(&self) -> String {
        match self {
            ToolId::Builtin(t) => t.as_str().to_string(),
            ToolId::Server(s, t) => crate::servers::offered_name(s, t),
        }
    }

    /// Reads a stored name back.
    pub fn parse(s: &str) -> Option<ToolId> {
        match ToolName::from_name(s) {
            Some(t) => Some(ToolId::Builtin(t)),
            None => crate::servers::split_offered(s).map(|(a, b)| ToolId::Server(a, b)),
        }
    }

    pub fn builtin(&self) -> Option<ToolName> {
        match self {
            ToolId::Builtin(t) => Some(*t),
            ToolId::Server(..) => None,
        }
    }
}

impl TryFrom<String> for ToolId {
    type Error = String;
    fn try_from(s: String) -> Result<ToolId, String> {
        ToolId::parse(&s).ok_or_else(|| format!("{} is not a tool name", crate::inert::escaped(&s)))
    }
}

impl From<ToolId> for String {
    fn from(t: ToolId) -> String {
        t.name()
    }
}

impl From<ToolName> for ToolId {
    fn from(t: ToolName) -> ToolId {
        ToolId::Builtin(t)
    }
}

impl PartialEq<ToolName> for ToolId {
    fn eq(&self, t: &ToolName) -> bool {
        self.builtin() == Some(*t)
    }
}

impl std::fmt::Display for ToolId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ToolId::Builtin(t) => f.write_str(t.as_str()),
            ToolId::Server(s, t) => write!(f, "{s}__{t}"),
        }
    }
}

/// A session's id (random, chosen by the broker; hex).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SessionId(pub String);

impl std::fmt::Display for SessionId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A named session profile (`[profile.NAME]` in the policy; `default` is the top level of the
/// policy document). 1-32 of `a-z 0-9 _ -`, starting with a letter or digit.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[serde(try_from = "String", into = "String")]
pub struct ProfileName(String);

impl ProfileName {
    /// The longest profile name.
    pub const MAX_LEN: usize = 32;
    /// The profile a session gets when it names none: the policy document's top level.
    pub const DEFAULT: &'static str = "default";

    pub fn parse(s: &str) -> Result<ProfileName, String> {
        let ok_char =
            |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-';
        if s.is_empty() || s.len() > Self::MAX_LEN {
            return Err(format!(
                "profile name {s:?} must be 1 to {} characters long",
                Self::MAX_LEN
            ));
        }
        if !s.bytes().all(ok_char) {
            return Err(format!(
                "profile name {s:?} may hold only a-z, 0-9, _ and -"
            ));
        }
        if !s.as_bytes()[0].is_ascii_alphanumeric() {
            return Err(format!(
                "profile name {s:?} must start with a letter or a digit"
            ));
        }
        Ok(ProfileName(s.to_string()))
    }

    pub fn default_profile() -> ProfileName {
        ProfileName(Self::DEFAULT.to_string())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn is_default(&self) -> bool {
        self.0 == Self::DEFAULT
    }
}

impl TryFrom<String> for ProfileName {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        ProfileName::parse(&s)
    }
}

impl From<ProfileName> for String {
    fn from(p: ProfileName) -> String {
        p.0
    }
}

impl std::fmt::Display for ProfileName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The MCP client of a session, as it named itself (`clientInfo`): agent-controlled text,
/// capped in length by the gateway and again by the broker, shown inert by the console.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct AgentInfo {
    pub name: String,
    pub version: String,
}

impl AgentInfo {
    /// The most characters kept of a client's name.
    pub const MAX_NAME: usize = 64;
    /// The most characters kept of a client's version.
    pub const MAX_VERSION: usize = 32;

    /// `name` and `version` cut to their caps (by characters; a cut is marked with `…`).
    pub fn capped(name: &str, version: &str) -> AgentInfo {
        fn cap(s: &str, n: usize) -> String {
            if s.chars().count() <= n {
                s.to_string()
            } else {
                let mut out: String = s.chars().take(n - 1).collect();
                out.push('\u{2026}');
                out
            }
        }
        AgentInfo {
            name: cap(name, Self::MAX_NAME),
            version: cap(version, Self::MAX_VERSION),
        }
    }
}

/// A secret the broker hands a gateway over its own connection, so that after a reconnect (a
/// broker restart) the gateway can carry on the same session, and repeated calls are answered
/// from that session's ledger. Never logged.
#[derive(Serialize, Deserialize, Clone, PartialEq, Eq)]
pub struct ResumeToken(pub String);

impl std::fmt::Debug for ResumeToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ResumeToken(..)")
    }
}

/// A proposal's id (unique within one broker run).
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProposalId(pub u64);

impl std::fmt::Display for ProposalId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "#{}", self.0)
    }
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct ReadFile {
    pub path: FsPath,
    pub offset: u64,
    /// 0: as much as one call returns.
    pub length: u32,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct ListDir {
    pub path: FsPath,
    pub offset: u32,
    /// 0: the helper's default page.
    pub limit: u32,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct SearchFiles {
    pub path: FsPath,
    pub glob: String,
    pub limits: WalkLimits,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Grep {
    pub path: FsPath,
    pub regex: String,
    pub glob: Option<String>,
    pub case_insensitive: bool,
    pub limits: WalkLimits,
    pub grep: GrepLimits,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct WriteFile {
    pub path: FsPath,
    pub content: Vec<u8>,
    pub create: CreateMode,
    pub create_parents: bool,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct EditFile {
    pub path: FsPath,
    pub edit: Edit,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct DeletePath {
    pub path: FsPath,
    pub recursive: bool,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct MovePath {
    pub from: FsPath,
    pub to: FsPath,
    pub overwrite: bool,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct UndoChange {
    pub checkpoint: CheckpointId,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct FetchUrl {
    pub url: String,
}

#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub enum HttpMethod {
    Get,
    Head,
    Post,
    Put,
    Patch,
    Delete,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct HttpRequest {
    pub method: HttpMethod,
    pub url: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// The name of a stored credential to add for this host (the secrets helper adds it; the
    /// agent never sees it).
    pub credential: Option<crate::secrets::CredentialName>,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct RunCommand {
    /// Program and arguments (no shell).
    pub argv: Vec<String>,
    /// The working directory; must lie inside a grant.
    pub cwd: FsPath,
    /// 0: the default (5 min); at most 10 min.
    pub timeout_secs: u32,
}

impl RunCommand {
    /// The run time the call asks for, checked: 0 is the default
    /// ([`crate::exec::TIMEOUT_DEFAULT_MS`]), at most [`crate::exec::TIMEOUT_MAX_MS`].
    pub fn timeout_ms(&self) -> Result<u64, String> {
        use crate::exec::{TIMEOUT_DEFAULT_MS, TIMEOUT_MAX_MS};
        match u64::from(self.timeout_secs) * 1000 {
            0 => Ok(TIMEOUT_DEFAULT_MS),
            ms if ms > TIMEOUT_MAX_MS => Err(format!(
                "timeout_secs {} is more than the most a command may run ({} s)",
                self.timeout_secs,
                TIMEOUT_MAX_MS / 1000
            )),
            ms => Ok(ms),
        }
    }
}

/// A call of a third-party server's tool: its arguments are the agent's JSON object, carried
/// canonical and bounded; the broker judges them by the policy and the server's pinned schema
/// is the server's business (it validates its own input).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct ServerCall {
    pub server: ServerName,
    pub tool: ServerToolName,
    pub arguments: JsonText,
}

impl ServerCall {
    /// `SERVER__TOOL`.
    pub fn offered_name(&self) -> String {
        crate::servers::offered_name(&self.server, &self.tool)
    }
}

/// A tool a session may be offered: the definition the human approved, and what the policy
/// does with it when no more specific rule applies.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct OfferedTool {
    pub server: ServerName,
    pub def: ToolDef,
    pub action: Action,
    pub rule: String,
}

/// A tool a server lists that is not offered: new, or described differently from what the
/// human approved. Offered again once the human approves its definition.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct HeldTool {
    pub server: ServerName,
    pub tool: ServerToolName,
    /// `new`, or what changed (`description`, `input schema`, ...).
    pub why: String,
}

/// The answer to [`ToolCall::ListServerTools`].
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default)]
pub struct ServerTools {
    pub offered: Vec<OfferedTool>,
    pub held: Vec<HeldTool>,
    /// Servers that could not be reached, one line each (the agent sees none of their tools).
    pub unavailable: Vec<String>,
}

/// What a third-party tool returned, as the agent gets it.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct ServerOutput {
    /// The server said the call failed (`isError`).
    pub is_error: bool,
    /// The result wrapped as outside text (`<external-NONCE source="mcp:SERVER__TOOL">`),
    /// with a notice that it is not from the user.
    pub text: String,
}

/// An agent's tool call, as typed by its gateway.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub enum ToolCall {
    /// Opens this connection's session, or (with a token from an earlier connection) carries
    /// that session on. Optional: the first tool call on a connection opens a fresh session.
    /// Answered with [`ToolReply::Session`].
    OpenSession {
        resume: Option<ResumeToken>,
        /// The named profile the session runs under (`None`: the default profile; with
        /// `resume`: the profile the session was opened with, which a resume cannot change).
        /// An unknown profile is refused.
        profile: Option<ProfileName>,
    },
    /// The MCP client of this connection's session, as its `clientInfo` names it (sent once,
    /// after the handshake or with the first request that carries it). Answered with `Pong`.
    DescribeAgent(AgentInfo),
    ReadFile(ReadFile),
    ListDir(ListDir),
    SearchFiles(SearchFiles),
    Grep(Grep),
    WriteFile(WriteFile),
    EditFile(EditFile),
    DeletePath(DeletePath),
    MovePath(MovePath),
    UndoChange(UndoChange),
    FetchUrl(FetchUrl),
    HttpRequest(HttpRequest),
    RunCommand(RunCommand),
    /// The tools of the profile's third-party MCP servers this session may be offered now
    /// (their definitions as the human approved them). Answered with
    /// [`ToolReply::ServerTools`]. Starts the session's servers that are not running.
    ListServerTools,
    /// A third-party server's tool (`SERVER__TOOL`).
    Server(ServerCall),
    /// The agent's client gave up on a call that waits for the human (`notifications/cancelled`):
    /// the proposal is withdrawn (on the card and in the audit log) and a decision that comes
    /// later carries nothing out. Only a proposal of this connection's own session. This can
    /// only stop a call, never let one through. Answered with `Pong`.
    Withdraw(ProposalId),
}

impl ToolCall {
    /// The URL a web tool reaches (`fetch_url`, `http_request`).
    pub fn web_url(&self) -> Option<&str> {
        match self {
            ToolCall::FetchUrl(a) => Some(&a.url),
            ToolCall::HttpRequest(a) => Some(&a.url),
            _ => None,
        }
    }

    /// The tool this call is of, built-in or a server's (`None` for the session calls).
    pub fn tool_id(&self) -> Option<ToolId> {
        match self {
            ToolCall::Server(c) => Some(ToolId::Server(c.server.clone(), c.tool.clone())),
            call => call.tool().map(ToolId::Builtin),
        }
    }

    /// The built-in tool this call names (`None` for [`ToolCall::OpenSession`] and
    /// [`ToolCall::DescribeAgent`], and for a server's tool).
    pub fn tool(&self) -> Option<ToolName> {
        Some(match self {
            ToolCall::OpenSession { .. }
            | ToolCall::DescribeAgent(_)
            | ToolCall::Withdraw(_)
            | ToolCall::ListServerTools
            | ToolCall::Server(_) => return None,
            ToolCall::ReadFile(_) => ToolName::ReadFile,
            ToolCall::ListDir(_) => ToolName::ListDir,
            ToolCall::SearchFiles(_) => ToolName::SearchFiles,
            ToolCall::Grep(_) => ToolName::Grep,
            ToolCall::WriteFile(_) => ToolName::WriteFile,
            ToolCall::EditFile(_) => ToolName::EditFile,
            ToolCall::DeletePath(_) => ToolName::DeletePath,
            ToolCall::MovePath(_) => ToolName::MovePath,
            ToolCall::UndoChange(_) => ToolName::UndoChange,
            ToolCall::FetchUrl(_) => ToolName::FetchUrl,
            ToolCall::HttpRequest(_) => ToolName::HttpRequest,
            ToolCall::RunCommand(_) => ToolName::RunCommand,
        })
    }

    /// This call changes nothing outside gatehouse, so it skips the ledger: a read-only tool,
    /// or an `http_request` with GET or HEAD.
    pub fn is_read_only(&self) -> bool {
        match self {
            ToolCall::HttpRequest(h) => matches!(h.method, HttpMethod::Get | HttpMethod::Head),
            call => call.tool().is_some_and(ToolName::is_read_only),
        }
    }
}

/// Allow, Ask or Deny.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Action {
    Allow,
    Ask,
    Deny,
}

impl Action {
    /// The word the audit log and the policy file use.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Allow => "allow",
            Action::Ask => "ask",
            Action::Deny => "deny",
        }
    }
}

/// A policy decision and the rule that produced it (shown to the agent, the console and the
/// audit log).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub action: Action,
    /// e.g. `rule "edits-in-src" (policy revision 3)`, `tools.read_file default`,
    /// `remembered decision 4 (always allow)`, `allowed for this session by proposal #7`.
    pub rule: String,
}

/// What a successful call produced.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub enum ToolResult {
    File(FileChunk),
    Listing(Listing),
    Search(SearchResults),
    Grep(GrepResults),
    Changed(ChangeReceipt),
    Undone(CheckpointInfo),
    /// A `fetch_url` page.
    Fetched(FetchedText),
    /// An `http_request` reply.
    HttpResponse(HttpResponse),
    /// A third-party server's tool ran.
    Server(ServerOutput),
    /// A `run_command` that ran (whatever its exit status).
    CommandRun(CommandRun),
}

/// What a command did in its sandbox.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct CommandRun {
    pub argv: Vec<String>,
    /// The working directory (absolute, resolved).
    pub cwd: PathBuf,
    /// The exit status, when it exited (not killed, not timed out).
    pub exit_code: Option<i32>,
    /// How it ended, for people: `exited with status 3`, `timed out after 300 s; ...`.
    pub outcome: String,
    /// Output kept (the first bytes of each stream, up to the tool path's cap).
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    /// Output bytes beyond the cap, counted and dropped.
    pub stdout_dropped: u64,
    pub stderr_dropped: u64,
    pub elapsed_ms: u64,
    /// What the sandbox enforced, one line (namespaces, Landlock ABI, seccomp, network).
    pub sandbox: String,
    /// What the command planted that the user's own tools would run, set aside after it
    /// ended, one line each (`ipc_schema::exec::HeldPath`).
    pub held: Vec<String>,
}

/// A fetched page, as the agent gets it.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct FetchedText {
    /// The URL the text came from (after redirects).
    pub final_url: String,
    /// Each URL that redirected, in order.
    pub redirects: Vec<String>,
    /// The checked address the final connection was pinned to.
    pub address: std::net::IpAddr,
    pub status: u16,
    /// The media type, lower case, without parameters.
    pub content_type: String,
    /// Decoded body bytes.
    pub body_bytes: u32,
    /// The net-helper's wrapped text, whole and unchanged: a notice, then
    /// `<external-NONCE source="URL">`, the body, `</external-NONCE>`.
    pub text: String,
}

/// An `http_request` reply, as the agent gets it (the credential, if one was added, already
/// scrubbed by the net-helper).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct HttpResponse {
    pub page: FetchedText,
    /// The final reply's headers (hop-by-hop ones and those that echoed the credential dropped).
    pub headers: Vec<(String, String)>,
    /// A stored credential went out on the final hop.
    pub credential_sent: bool,
    /// How many occurrences of the credential were replaced with a placeholder.
    pub redactions: u32,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct Done {
    pub result: ToolResult,
    /// Why it was allowed.
    pub verdict: Verdict,
    /// The proposal the human approved, if one was needed.
    pub proposal: Option<ProposalId>,
    /// Answered from the ledger: the same call was made earlier in this session and carried out
    /// then; it was not carried out again.
    pub from_ledger: bool,
}

/// Why a call was not carried out.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusalKind {
    /// A policy rule (or a protected path, or containment) says Deny.
    Denied,
    /// The policy file does not parse or validate: every call is refused until it is fixed.
    PolicyInvalid,
    /// A per-session rate limit; the message names it.
    RateLimited,
    /// The human chose deny (or always deny).
    HumanDenied,
    /// Nobody decided within the proposal's time: no answer means deny.
    Expired,
    /// The same call in this session was rejected earlier (answered from the ledger).
    RejectedEarlier,
    /// The same call in this session is still running.
    StillRunning,
    /// The same call was executing when gatehouse stopped; it is never retried on its own.
    Uncertain,
    /// The tool's helper does not exist in this build yet.
    NotAvailable,
    /// The file helper refused the path (outside every grant, protected, excluded, ...).
    Contained,
    /// The net-helper refused the URL by its own rules (scheme, address table, redirect,
    /// content type, TLS, a limit), or the secrets-helper refused the credential for it.
    Network,
    /// A third-party tool is held: new, or described differently since the human approved it.
    Held,
    /// The call was given up (its request cancelled, its session closed) before the human
    /// decided: nothing was done, and the same call asked again is a new proposal.
    Withdrawn,
    /// The policy asks, and the session is unattended (or was switched to it while the card
    /// waited): nobody is there to answer.
    Unattended,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub kind: RefusalKind,
    /// A sentence for the agent and the human.
    pub message: String,
    /// The policy decision behind it, when there was one.
    pub verdict: Option<Verdict>,
    pub proposal: Option<ProposalId>,
}

/// The call was allowed and tried, and failed (nothing was changed unless the message says so).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub code: ErrorCode,
    pub message: String,
    /// The file helper's typed error, for file tools.
    pub fs: Option<FsError>,
    /// Answered from the ledger (the same call failed earlier in this session).
    pub from_ledger: bool,
}

impl Failure {
    /// A failure with no typed fs error, not from the ledger.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Failure {
        Failure {
            code,
            message: message.into(),
            fs: None,
            from_ledger: false,
        }
    }
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct SessionInfo {
    pub session: SessionId,
    /// Present this with [`ToolCall::OpenSession`] on a new connection to carry on.
    pub resume: ResumeToken,
    /// An earlier session was carried on.
    pub resumed: bool,
    /// The profile the session runs under.
    pub profile: ProfileName,
    /// What the session's profile, as in force when the session opened, does with each tool. The gateway
    /// neither lists nor accepts a tool whose action here is `Deny`; the broker still decides
    /// every call itself.
    pub tools: Vec<ToolStanding>,
}

/// A tool's standing under the policy: `Deny` only when every call of it is refused whatever
/// its target; otherwise the tool's default action (a rule may still decide a given target
/// otherwise).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct ToolStanding {
    pub tool: ToolName,
    pub action: Action,
    /// The rule behind it, e.g. `tools.write_file default (policy revision 3)`.
    pub rule: String,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Waiting {
    pub proposal: ProposalId,
    /// The rule that asked.
    pub verdict: Verdict,
    /// When no answer becomes a deny.
    pub expires_unix_ms: u64,
}

impl ToolReply {
    /// A refusal's or failure's message (for the ledger and the audit log); empty otherwise.
    pub fn message(&self) -> String {
        match self {
            ToolReply::Refused(x) => x.message.clone(),
            ToolReply::Failed(x) => x.message.clone(),
            _ => String::new(),
        }
    }
}

/// The broker's answer to a [`ToolCall`].
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub enum ToolReply {
    Session(SessionInfo),
    /// The answer to [`ToolCall::ListServerTools`].
    ServerTools(ServerTools),
    /// Progress: the call waits for the human (its final reply follows with the same id).
    AwaitingApproval(Waiting),
    Done(Box<Done>),
    Refused(Refusal),
    Failed(Failure),
}

#[cfg(test)]
mod tests {
    use super::RunCommand;
    use crate::exec::TIMEOUT_DEFAULT_MS;

    #[test]
    fn timeouts_default_and_are_capped() {
        let call = |s| RunCommand {
            argv: vec!["true".into()],
            cwd: crate::fs::FsPath::Absolute(b"/".to_vec()),
            timeout_secs: s,
        };
        assert_eq!(call(0).timeout_ms(), Ok(TIMEOUT_DEFAULT_MS));
        assert_eq!(call(600).timeout_ms(), Ok(600_000));
        assert_eq!(
            call(601).timeout_ms().unwrap_err(),
            "timeout_secs 601 is more than the most a command may run (600 s)"
        );
    }
}
