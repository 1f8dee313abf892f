//! The human's console and the broker: proposals, decisions, policy.
//!
//! Only the ui socket may carry these (the route table refuses them from the gateway and kills
//! a gateway that sends one). A decision names the proposal and the digest of exactly what the
//! broker showed; a stale, mismatched or repeated decision is refused.

use crate::mode::SessionMode;
use crate::servers::{ServerName, ServerToolName, ToolDef};
use crate::tool::{ProfileName, ProposalId, SessionId, ToolId};
use serde::{Deserialize, Serialize};

/// SHA-256 over everything a proposal shows (and a nonce): a decision must echo it.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ProposalDigest(pub [u8; 32]);

/// The human's answer to a proposal.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Choice {
    AllowOnce,
    /// This tool on this target, for the rest of the session.
    AllowSession,
    /// This tool on this target, from now on (remembered; `policy show` lists it).
    AlwaysAllow,
    Deny,
    /// This tool on this target, never (remembered).
    AlwaysDeny,
}

impl Choice {
    pub fn allows(self) -> bool {
        matches!(
            self,
            Choice::AllowOnce | Choice::AllowSession | Choice::AlwaysAllow
        )
    }
    pub fn as_str(self) -> &'static str {
        match self {
            Choice::AllowOnce => "allow once",
            Choice::AllowSession => "allow for this session",
            Choice::AlwaysAllow => "always allow",
            Choice::Deny => "deny",
            Choice::AlwaysDeny => "always deny",
        }
    }
}

/// An Ask call waiting for the human: exactly what will happen if allowed.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Proposal {
    pub id: ProposalId,
    pub digest: ProposalDigest,
    pub session: SessionId,
    pub tool: ToolId,
    /// The canonical target: the resolved path (`from -> to` for a move), the URL, or argv and
    /// working directory. Bytes that are not UTF-8 appear as `\xNN`.
    pub target: String,
    /// The canonical arguments as JSON with sorted keys; file contents appear as their length
    /// and SHA-256 (the diff shows the change itself).
    pub arguments: String,
    /// For writes and edits: a unified diff of the change, as computed by the file helper.
    pub diff: Option<String>,
    /// One line on what it will change.
    pub effect: String,
    /// The rule that asked.
    pub rule: String,
    pub policy_revision: u64,
    pub created_unix_ms: u64,
    /// No decision by then means deny.
    pub expires_unix_ms: u64,
    /// Which parts of the arguments appear in outside text this session read (fetched pages,
    /// http replies). Part of what the digest covers.
    pub outside_text: OutsideText,
    /// The session's mode when the card was made (a card exists only in `ask` mode; switching
    /// the mode answers it). Part of what the digest covers.
    pub mode: SessionMode,
}

/// The broker's finding about outside text in a proposal's arguments.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default)]
pub struct OutsideText {
    /// Where the matched text was read; [`OutsideMatch::source`] indexes this list.
    pub sources: Vec<OutsideSource>,
    pub matches: Vec<OutsideMatch>,
    /// Matches found but not listed (the list is capped so a card stays one frame).
    pub matches_not_listed: u32,
    /// Sources this session read that were forgotten to bound memory (oldest first): text
    /// from them is no longer recognised, so "no match" is weaker than it looks.
    pub sources_forgotten: u64,
}

/// One argument of the call that holds text from one source.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct OutsideMatch {
    /// The argument as the card names it: `content`, `new`, `old`, `diff`, `argv[2]`, `url`,
    /// `header x-api`, `body`, `path`, `cwd`, `from`, `to`, ...
    pub argument: String,
    pub part: MatchedPart,
    /// Lines of [`Proposal::diff`] (1-based) that show this text.
    pub diff_lines: Vec<LineRange>,
    /// Index into [`OutsideText::sources`].
    pub source: u32,
}

/// Which part of an argument appears in outside text.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub enum MatchedPart {
    /// The whole value (an argv element, a URL, a path of 8 characters or more).
    WholeValue,
    /// A run of the value (a single-line value).
    PartOfValue,
    /// These lines (1-based) of a multi-line value hold text from the source.
    Lines(Vec<LineRange>),
}

/// Lines `first..=last`, 1-based.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub struct LineRange {
    pub first: u32,
    pub last: u32,
}

/// Outside text the session read: which tool, from where, when.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct OutsideSource {
    pub tool: ToolId,
    /// The URL the text came from (after redirects), or `mcp:SERVER__TOOL`; a very long one
    /// is cut, and says so.
    pub url: String,
    /// The number, in the session, of the call that read it (1: the session's first call).
    pub call: u64,
    pub read_unix_ms: u64,
    /// Only the first part of the text is remembered (it was larger than the memory cap).
    pub partial: bool,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub proposal: ProposalId,
    /// The digest of the proposal as shown.
    pub digest: ProposalDigest,
    pub choice: Choice,
}

/// The state of an effectful call in the ledger.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CallState {
    /// Waiting for the human.
    Proposed,
    /// Allowed and recorded; not yet handed to its helper.
    Pending,
    /// Handed to its helper.
    Executing,
    Done,
    Failed,
    /// Denied by the human, or expired.
    Rejected,
    /// gatehouse stopped while carrying it out: whether it happened is unknown.
    Uncertain,
    /// gatehouse stopped before carrying it out (it did not happen; calling again starts over).
    Abandoned,
}

impl CallState {
    pub fn as_str(self) -> &'static str {
        match self {
            CallState::Proposed => "proposed",
            CallState::Pending => "pending",
            CallState::Executing => "executing",
            CallState::Done => "done",
            CallState::Failed => "failed",
            CallState::Rejected => "rejected",
            CallState::Uncertain => "uncertain",
            CallState::Abandoned => "abandoned",
        }
    }

    pub fn from_name(s: &str) -> Option<CallState> {
        [
            CallState::Proposed,
            CallState::Pending,
            CallState::Executing,
            CallState::Done,
            CallState::Failed,
            CallState::Rejected,
            CallState::Uncertain,
            CallState::Abandoned,
        ]
        .into_iter()
        .find(|c| c.as_str() == s)
    }
}

/// One ledger entry, as the console shows it (arguments redacted).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct LedgerCall {
    pub id: u64,
    pub session: SessionId,
    pub tool: ToolId,
    pub target: String,
    /// Redacted canonical arguments.
    pub summary: String,
    pub state: CallState,
    pub reason: String,
    pub updated_unix_ms: u64,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct SessionSummary {
    pub session: SessionId,
    /// The profile the session runs under (`default`: the policy's top level).
    pub profile: ProfileName,
    /// The MCP client as it named itself (`name version`; agent-controlled text, capped by the
    /// broker, to be shown inert). `None` until the client said.
    pub agent: Option<String>,
    pub connected: bool,
    pub started_unix_ms: u64,
    pub calls: u64,
    pub pending: u32,
    /// How its Ask calls are answered (set by the human only).
    pub mode: SessionMode,
}

/// A decision remembered from an "always" choice.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Remembered {
    pub id: u64,
    pub tool: ToolId,
    pub target: String,
    pub action: RememberedAction,
    pub created_unix_ms: u64,
    /// The proposal it came from.
    pub origin: ProposalId,
    /// The session profile it was given in: an allow applies only there, a deny in every
    /// profile.
    pub profile: ProfileName,
}

/// What an "always" choice remembers.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RememberedAction {
    /// Always allow: turns an Ask into an Allow, in the profile it was given in only.
    Allow,
    /// Always deny: in every profile.
    Deny,
}

impl RememberedAction {
    /// `allow` or `deny`: how it is shown and stored.
    pub fn as_str(self) -> &'static str {
        match self {
            RememberedAction::Allow => "allow",
            RememberedAction::Deny => "deny",
        }
    }

    pub fn from_name(s: &str) -> Option<RememberedAction> {
        match s {
            "allow" => Some(RememberedAction::Allow),
            "deny" => Some(RememberedAction::Deny),
            _ => None,
        }
    }
}

impl std::fmt::Display for RememberedAction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The policy in force.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct PolicyView {
    pub revision: u64,
    /// The file it was read from, or that it is the built-in default profile.
    pub source: String,
    /// The TOML document (for the default profile: the profile written out).
    pub document: String,
    /// Why the document does not parse or validate (every call is refused meanwhile).
    pub error: Option<String>,
    pub remembered: Vec<Remembered>,
}

/// What an audit row records: its `kind` column (the audit store writes only these, and
/// refuses to read a row holding anything else).
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AuditKind {
    /// A tool call arrived and policy decided on it.
    ToolCall,
    /// A proposal was made for an Ask decision.
    Proposal,
    /// The human decided a proposal (or it expired).
    Decision,
    /// A ledger transition of an effectful call (pending, executing, done, failed, uncertain).
    Execution,
    /// A read-only call was carried out.
    Read,
    /// A call was refused before it could run (policy invalid, rate limit, containment).
    Refusal,
    /// A helper locked down and became ready.
    HelperStart,
    /// A helper exited or was killed.
    HelperExit,
    /// A helper is being restarted.
    HelperRestart,
    /// A front peer was killed for breaking the protocol.
    PeerKilled,
    /// The policy document or a remembered decision changed.
    Policy,
    /// The broker started or stopped.
    Broker,
    /// A gateway session opened or ended.
    Session,
    /// A credential was set, changed or deleted with `gatehouse secret` (never its value).
    Credential,
    /// A connection through the egress proxy of `gatehouse run` (tunnelled, failed, refused).
    Egress,
}

impl AuditKind {
    pub const ALL: [AuditKind; 15] = [
        AuditKind::ToolCall,
        AuditKind::Proposal,
        AuditKind::Decision,
        AuditKind::Execution,
        AuditKind::Read,
        AuditKind::Refusal,
        AuditKind::HelperStart,
        AuditKind::HelperExit,
        AuditKind::HelperRestart,
        AuditKind::PeerKilled,
        AuditKind::Policy,
        AuditKind::Broker,
        AuditKind::Session,
        AuditKind::Credential,
        AuditKind::Egress,
    ];

    /// The name in the `kind` column (and on screen).
    pub fn as_str(self) -> &'static str {
        match self {
            AuditKind::ToolCall => "tool_call",
            AuditKind::Proposal => "proposal",
            AuditKind::Decision => "decision",
            AuditKind::Execution => "execution",
            AuditKind::Read => "read",
            AuditKind::Refusal => "refusal",
            AuditKind::HelperStart => "helper_start",
            AuditKind::HelperExit => "helper_exit",
            AuditKind::HelperRestart => "helper_restart",
            AuditKind::PeerKilled => "peer_killed",
            AuditKind::Policy => "policy",
            AuditKind::Broker => "broker",
            AuditKind::Session => "session",
            AuditKind::Credential => "credential",
            AuditKind::Egress => "egress",
        }
    }

    pub fn from_name(s: &str) -> Option<AuditKind> {
        AuditKind::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

impl std::fmt::Display for AuditKind {
    /// Honours width and alignment (`{:<14}`), like a `&str`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

/// One audit log entry, as the console's live tail shows it (the broker redacted it when it was
/// written: no secret and no file content).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct AuditEntry {
    pub seq: u64,
    pub ts_unix_ms: u64,
    pub kind: AuditKind,
    pub session: Option<String>,
    pub actor: String,
    pub tool: Option<String>,
    pub target: Option<String>,
    pub outcome: String,
    pub detail: String,
    /// The mode of the row's session when it was written (`None`: no session, or a row from
    /// before session modes).
    pub mode: Option<SessionMode>,
    /// The exec sandbox's confinement tier, on a row about something run in it (a command, a
    /// `gatehouse run`/`sandbox` launch, a stdio server); `None` on every other row.
    pub tier: Option<crate::tier::ConfinementTier>,
}

/// Console to broker.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub enum UiRequest {
    /// Proposals waiting for a decision.
    ListPending,
    /// Stream [`UiReply::Event`]s on this request id until the connection closes.
    Subscribe,
    Decide(Decision),
    /// Calls that were executing when gatehouse stopped.
    ListUncertain,
    ListSessions,
    PolicyShow,
    /// Replace the policy with `document` (TOML). Its `revision` must be the revision in force
    /// (the one `PolicyShow` gave); it is stored as that revision plus one. Refused whole if
    /// stale or invalid.
    PolicyApply {
        document: String,
    },
    /// Drop a remembered decision.
    PolicyForget {
        remembered: u64,
    },
    /// Audit entries with `seq` above `after`, oldest first: the newest `limit` of them (the
    /// console's live tail polls with the last `seq` it has).
    AuditTail {
        after: u64,
        limit: u32,
    },
    /// `gatehouse secret set|delete` changed credential `name` through its own secrets-helper
    /// while this broker runs: the broker writes the audit row, from what its own
    /// secrets-helper says about the credential now (hosts, how it is sent, whether a value is
    /// stored; never a value). Refused if the store disagrees with `deleted`.
    /// [`UiReply::CredentialChangeRecorded`].
    CredentialChanged {
        name: crate::secrets::CredentialName,
        deleted: bool,
    },
    /// `gatehouse sandbox` and `gatehouse run` (the user's own commands, so on the ui channel):
    /// a command, or an agent, through the broker's exec-helper. [`UiReply::Launch`].
    Launch(LaunchRequest),
    /// What a third-party server of a profile lists now, each tool against its pin (the broker
    /// starts the server for the console if no session runs it). [`UiReply::ServerTools`].
    ServerTools {
        profile: ProfileName,
        server: ServerName,
    },
    /// The human approves these definitions, each named by the digest [`UiRequest::ServerTools`]
    /// showed: they are pinned, and offered. A digest that no longer matches what the server
    /// lists is refused whole. [`UiReply::ServerToolsApproved`].
    ApproveServerTools {
        profile: ProfileName,
        server: ServerName,
        tools: Vec<(ServerToolName, [u8; 32])>,
    },
    /// The human sets session `session`'s mode (the console's `m`, `gatehouse session mode`).
    /// Cards of the session that wait are answered as the new mode would: `full-access` runs
    /// them, `unattended` refuses them. [`UiReply::SessionModeSet`].
    SetSessionMode {
        session: SessionId,
        mode: SessionMode,
        /// Who asked, for the audit row.
        by: ModeSetter,
    },
    /// The human stops the broker (`gatehouse stop` on Windows, which has no SIGTERM to send):
    /// the same orderly stop as a signal, answered with [`UiReply::Stopping`] first. The
    /// human's channel only.
    StopBroker,
}

/// Which front of the human's set a mode (the audit row's actor says `ui` either way; this
/// says which).
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModeSetter {
    Console,
    Cli,
}

impl ModeSetter {
    pub fn as_str(self) -> &'static str {
        match self {
            ModeSetter::Console => "the console",
            ModeSetter::Cli => "gatehouse session mode",
        }
    }
}

/// One tool of a server, as the console shows it.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct ServerToolView {
    /// The definition the server gives now (its annotations are its claims).
    pub def: ToolDef,
    /// Its digest: what an approval names.
    pub digest: [u8; 32],
    /// `None`: pinned as listed (offered); else why it is held.
    pub held: Option<String>,
    /// The definition the human approved before, when it differs.
    pub pinned: Option<ToolDef>,
}

/// What `gatehouse sandbox` and `gatehouse run` ask of the broker.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub enum LaunchRequest {
    /// `gatehouse sandbox` and `gatehouse run`: start one command (or agent, with its
    /// [`AgentLaunch`]) through the broker's exec-helper, as `run_command` does, with an audit
    /// row at its start and its end. Answered by [`LaunchReply::CommandStarted`] (or [`LaunchReply::Refused`]),
    /// then any number of [`LaunchReply::Output`] and [`LaunchReply::Egress`] on the same
    /// request id, and a last [`LaunchReply::CommandEnded`]. One command per connection at a
    /// time; the command is stopped when the connection closes. Only the ui channel carries it
    /// (the route tables: fatal from the gateway).
    Command(Box<CommandLaunch>),
    /// Stop the command this connection started (the user pressed Ctrl-C): its whole sandbox is
    /// killed; its [`LaunchReply::CommandEnded`] says [`crate::exec::RunOutcome::Stopped`].
    /// Answered with `Pong`.
    StopCommand,
}

/// One command the human asked for with `gatehouse sandbox` (or `gatehouse run`), in typed values.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct CommandLaunch {
    /// The program and its arguments (never a shell string).
    pub argv: Vec<String>,
    /// Absolute and resolved (by the CLI, which can see it); must lie inside a grant, or be
    /// granted as the working root (`work_root`).
    pub cwd: std::path::PathBuf,
    /// What the user named (`--allow-write`, `--allow-read`), absolute.
    pub grants: Vec<crate::exec::PathGrant>,
    /// No grant holds `cwd`: grant it read-write, unless it is `/` or (holds) a home directory,
    /// which are never granted without being named (the broker refuses).
    pub work_root: bool,
    /// Variables for the command: this process's allowlisted ones and `--env`. The exec-helper
    /// drops secret-looking names, `LD_*` and the sandbox's own (listed in the report).
    pub env: Vec<(String, String)>,
    /// `--pass-env`: variables passed although their names look like secrets, because the user
    /// named them (names only in the audit row, never a value).
    pub pass_env: Vec<(String, String)>,
    /// `--allow-domain`: hosts (or `*.suffix`) the command may reach through the egress proxy of
    /// the broker's net-helper; empty: no network.
    pub domains: Vec<String>,
    pub limits: crate::exec::Limits,
    pub hide: crate::exec::Hide,
    /// `gatehouse run`: an agent session, up to a day and [`crate::exec::LONG_OUTPUT_MAX`] per
    /// stream, not a command's ten minutes.
    pub long_run: bool,
    /// `gatehouse run`: the agent's side (requires `long_run`).
    pub agent: Option<AgentLaunch>,
}

/// `gatehouse run`: what makes a [`CommandLaunch`] an agent's. The broker adds the rest: a
/// run token (in the sandbox's `/tmp` and `GATEHOUSE_TOKEN`, never shown to this process), and
/// a gateway socket inside whose every connection that opens its session with that token
/// becomes a fresh session of `profile`; the sessions are revoked when the agent ends.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct AgentLaunch {
    /// The profile the agent's sessions run under (`None`: the default); an unknown one refuses
    /// the command.
    pub profile: Option<crate::tool::ProfileName>,
    /// Its login and state directory: a directory of its own in gatehouse's agent-state
    /// directory (`Dirs::agents`), made by the CLI, which can give it to the agent's user.
    pub state_home: std::path::PathBuf,
    /// The MCP config the agent is pointed at ([`crate::exec::AGENT_MCP_CONFIG`] inside; it
    /// holds no secret).
    pub mcp_config: String,
    /// `--mode`: the mode of the agent's sessions (`None`: the profile's).
    pub mode: Option<SessionMode>,
    /// Windows: the run's name, which names its pipe and files
    /// ([`crate::exec::RunName::place`]); the broker refuses a run without one there. `None`
    /// elsewhere (the sandbox's private `/tmp` holds them).
    pub run_name: Option<crate::exec::RunName>,
}

/// Why a [`LaunchRequest::Command`] did not start (the CLI's exit status says which).
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotStarted {
    /// Policy, containment or bad values said no (exit 125).
    Refused,
    /// The program is not there (exit 127).
    NotFound,
}

/// The broker's answer to a [`LaunchRequest`].
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub enum LaunchReply {
    /// The command runs; what its sandbox enforces.
    CommandStarted {
        sandbox: Box<crate::exec::SandboxReport>,
    },
    /// The command did not start.
    Refused { reason: String, why: NotStarted },
    /// Output of the command since the last piece (each at most
    /// [`crate::exec::OUTPUT_PIECE_MAX`] per stream).
    Output { stdout: Vec<u8>, stderr: Vec<u8> },
    /// A connection through the command's egress proxy ended (its audit row is written).
    Egress(crate::net::EgressRecord),
    /// The last reply of a [`LaunchRequest::Command`]; its end row is written.
    CommandEnded(crate::exec::RunEnd),
}

/// Something the console should show now.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub enum UiEvent {
    ProposalAdded(Box<Proposal>),
    /// Decided, expired, or withdrawn; `outcome` says which.
    ProposalClosed {
        proposal: ProposalId,
        outcome: String,
    },
    /// A call found executing at start, now uncertain.
    CallUncertain(LedgerCall),
}

/// Broker to console.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub enum UiReply {
    Pending(Vec<Proposal>),
    Subscribed,
    Event(UiEvent),
    Decided {
        proposal: ProposalId,
        choice: Choice,
    },
    Uncertain(Vec<LedgerCall>),
    Sessions(Vec<SessionSummary>),
    Policy(PolicyView),
    PolicyApplied {
        revision: u64,
    },
    Forgotten {
        remembered: u64,
    },
    Audit(Vec<AuditEntry>),
    /// The audit row of a credential change is written (and sealed); its entry number.
    CredentialChangeRecorded {
        seq: u64,
    },
    Launch(LaunchReply),
    ServerTools(Vec<ServerToolView>),
    ServerToolsApproved {
        count: u32,
    },
    /// The session's mode changed from `old` to `new` (the audit row is written); `answered`
    /// cards that waited were answered as the new mode would.
    SessionModeSet {
        session: SessionId,
        old: SessionMode,
        new: SessionMode,
        answered: u32,
    },
    /// The broker is stopping (its pid): the last audit rows are sealed, the helpers ended.
    Stopping {
        pid: u32,
    },
}

#[cfg(test)]
mod tests {
    use super::AuditKind;

    #[test]
    fn every_audit_kind_reads_back_from_its_column_name() {
        for k in AuditKind::ALL {
            assert_eq!(AuditKind::from_name(k.as_str()), Some(k));
        }
        assert_eq!(AuditKind::from_name("tool-call"), None);
        assert_eq!(format!("[{:<6}]", AuditKind::Read), "[read  ]");
    }
}
