//! The route tables: per channel, every request kind a peer may send on it, with flags, the way
//! OpenSSH's `mon_dispatch` tables read (request, flags; anything else is fatal).
//!
//! A channel is one direction between two processes ([`Channel`]). Its [`Table`] lists every
//! [`RequestKind`] a peer may send on it, at the level of requests (`SecretsKind::Attach`, not
//! just "a secrets message"), each with [`Flags`]:
//!
//! | flag | meaning |
//! |---|---|
//! | [`Flags::FIRST`] | must be the first message on the channel (and, in a table that has one, nothing else may come first) |
//! | [`Flags::ONCE`] | at most once per channel |
//! | [`Flags::EFFECT`] | changes something outside the receiver's memory (files, the keyring, a remote server, processes) |
//! | [`Flags::FD`] | may bring one descriptor (`SCM_RIGHTS`, see [`crate::fdpass`]); a descriptor with any other message is fatal |
//! | [`Flags::NEEDS_FD`] | [`Flags::FD`], and the message without its descriptor is fatal |
//!
//! The receiver of a channel calls [`check`] (or [`Table::check`]) on every frame with the
//! channel's [`RouteState`]; an `Err` means the peer broke the protocol and ends it. Helpers do
//! this in [`crate::helper`]; a reader answers "what may the broker ask the secrets-helper?"
//! from [`BROKER_TO_SECRETS`] alone.
//!
//! [`kind_of`] maps every variant of every request enum to its kind with exhaustive matches, so
//! a new variant does not compile until it has a kind, and is refused everywhere until a table
//! lists it.
//!
//! The older body-level view ([`Kind`], [`may_send_to_broker`], [`broker_may_send`]) is derived
//! from these tables.

use crate::exec::ExecRequest;
use crate::fs::FsRequest;
use crate::net::NetRequest;
use crate::notify::NotifyRequest;
use crate::secrets::SecretsRequest;
use crate::servers::ServersRequest;
use crate::tool::ToolCall;
use crate::ui::UiRequest;
use crate::{Body, Role};
use serde::{Deserialize, Serialize};

/// A message's kind: [`Body`] without its payload.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    Ping,
    Pong,
    Hello,
    Error,
    Doctor,
    DoctorReport,
    Ui,
    UiReply,
    ToolCall,
    ToolReply,
    Fs,
    FsReply,
    Net,
    NetReply,
    Exec,
    ExecReply,
    Secrets,
    SecretsReply,
    Servers,
    ServersReply,
    Notify,
    NotifyReply,
}

impl Body {
    pub fn kind(&self) -> Kind {
        match self {
            Body::Ping { .. } => Kind::Ping,
            Body::Pong => Kind::Pong,
            Body::Hello(_) => Kind::Hello,
            Body::Error(_) => Kind::Error,
            Body::Doctor => Kind::Doctor,
            Body::DoctorReport(_) => Kind::DoctorReport,
            Body::Ui(_) => Kind::Ui,
            Body::UiReply(_) => Kind::UiReply,
            Body::ToolCall(_) => Kind::ToolCall,
            Body::ToolReply(_) => Kind::ToolReply,
            Body::Fs(_) => Kind::Fs,
            Body::FsReply(_) => Kind::FsReply,
            Body::Net(_) => Kind::Net,
            Body::NetReply(_) => Kind::NetReply,
            Body::Exec(_) => Kind::Exec,
            Body::ExecReply(_) => Kind::ExecReply,
            Body::Secrets(_) => Kind::Secrets,
            Body::SecretsReply(_) => Kind::SecretsReply,
            Body::Servers(_) => Kind::Servers,
            Body::ServersReply(_) => Kind::ServersReply,
            Body::Notify(_) => Kind::Notify,
            Body::NotifyReply(_) => Kind::NotifyReply,
        }
    }

    /// The request-level kind ([`kind_of`]).
    pub fn request_kind(&self) -> RequestKind {
        kind_of(self)
    }
}

// ---------------------------------------------------------------------------------------------
// Request-level kinds

/// [`UiRequest`] without its payload.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UiKind {
    ListPending,
    Subscribe,
    Decide,
    ListUncertain,
    ListSessions,
    PolicyShow,
    PolicyApply,
    PolicyForget,
    AuditTail,
    CredentialChanged,
    /// [`crate::ui::LaunchRequest::Command`]: a command through the broker's exec-helper.
    LaunchCommand,
    /// [`crate::ui::LaunchRequest::StopCommand`].
    StopCommand,
    ServerTools,
    ApproveServerTools,
    /// [`UiRequest::SetSessionMode`]: the human's side only.
    SetSessionMode,
    /// [`UiRequest::StopBroker`]: the human's side only.
    StopBroker,
}

/// [`ToolCall`] without its payload.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ToolKind {
    OpenSession,
    DescribeAgent,
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
    ListServerTools,
    Server,
    Withdraw,
}

/// [`FsRequest`] without its payload.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FsKind {
    Status,
    Resolve,
    ReadFile,
    ListDir,
    Stat,
    SearchFiles,
    Grep,
    WriteFile,
    EditFile,
    DeletePath,
    MovePath,
    Undo,
    ListCheckpoints,
    TestProbe,
}

/// [`NetRequest`] without its payload.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NetKind {
    Check,
    Fetch,
    FetchPart,
    ProxyOpen,
    ProxyClose,
    ProxyConnection,
    Http,
    Mcp,
}

/// [`ExecRequest`] without its payload. A `Start` is two kinds: one whose sandbox passes
/// connections out (the proxy network, an agent's gateway socket) brings the command's
/// connector with its frame, the other brings nothing.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ExecKind {
    /// `Start` with [`NetworkMode::None`] and no agent run.
    Start,
    /// `Start` with [`NetworkMode::Proxy`] or an agent run
    /// ([`crate::exec::CommandSpec::needs_connector`]).
    StartConnected,
    Poll,
    Stop,
}

/// [`SecretsRequest`] without its payload.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SecretsKind {
    Status,
    List,
    Has,
    Set,
    Delete,
    Attach,
    ServerEnv,
    AuditKey,
    AuditMac,
}

/// [`ServersRequest`] without its payload.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ServersKind {
    Attach,
    ListTools,
    CallTool,
    Watch,
    Detach,
}

impl ServersKind {
    pub fn of(r: &ServersRequest) -> ServersKind {
        match r {
            ServersRequest::Attach { .. } => ServersKind::Attach,
            ServersRequest::ListTools { .. } => ServersKind::ListTools,
            ServersRequest::CallTool { .. } => ServersKind::CallTool,
            ServersRequest::Watch { .. } => ServersKind::Watch,
            ServersRequest::Detach { .. } => ServersKind::Detach,
        }
    }
}

/// [`NotifyRequest`] without its payload.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NotifyKind {
    Watch,
}

impl NotifyKind {
    pub fn of(r: &NotifyRequest) -> NotifyKind {
        match r {
            NotifyRequest::Watch => NotifyKind::Watch,
        }
    }
}

/// A message's kind at the level of requests: [`Kind`], with each request enum's variant.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RequestKind {
    Ping,
    Pong,
    Hello,
    Error,
    Doctor,
    DoctorReport,
    Ui(UiKind),
    UiReply,
    Tool(ToolKind),
    ToolReply,
    Fs(FsKind),
    FsReply,
    Net(NetKind),
    NetReply,
    Exec(ExecKind),
    ExecReply,
    Secrets(SecretsKind),
    SecretsReply,
    Servers(ServersKind),
    ServersReply,
    Notify(NotifyKind),
    NotifyReply,
}

impl RequestKind {
    /// The [`Body`] variant this kind travels in.
    pub const fn body_kind(self) -> Kind {
        match self {
            RequestKind::Ping => Kind::Ping,
            RequestKind::Pong => Kind::Pong,
            RequestKind::Hello => Kind::Hello,
            RequestKind::Error => Kind::Error,
            RequestKind::Doctor => Kind::Doctor,
            RequestKind::DoctorReport => Kind::DoctorReport,
            RequestKind::Ui(_) => Kind::Ui,
            RequestKind::UiReply => Kind::UiReply,
            RequestKind::Tool(_) => Kind::ToolCall,
            RequestKind::ToolReply => Kind::ToolReply,
            RequestKind::Fs(_) => Kind::Fs,
            RequestKind::FsReply => Kind::FsReply,
            RequestKind::Net(_) => Kind::Net,
            RequestKind::NetReply => Kind::NetReply,
            RequestKind::Exec(_) => Kind::Exec,
            RequestKind::ExecReply => Kind::ExecReply,
            RequestKind::Secrets(_) => Kind::Secrets,
            RequestKind::SecretsReply => Kind::SecretsReply,
            RequestKind::Servers(_) => Kind::Servers,
            RequestKind::ServersReply => Kind::ServersReply,
            RequestKind::Notify(_) => Kind::Notify,
            RequestKind::NotifyReply => Kind::NotifyReply,
        }
    }
}

impl UiKind {
    pub fn of(r: &UiRequest) -> UiKind {
        match r {
            UiRequest::ListPending => UiKind::ListPending,
            UiRequest::Subscribe => UiKind::Subscribe,
            UiRequest::Decide(_) => UiKind::Decide,
            UiRequest::ListUncertain => UiKind::ListUncertain,
            UiRequest::ListSessions => UiKind::ListSessions,
            UiRequest::PolicyShow => UiKind::PolicyShow,
            UiRequest::PolicyApply { .. } => UiKind::PolicyApply,
            UiRequest::PolicyForget { .. } => UiKind::PolicyForget,
            UiRequest::AuditTail { .. } => UiKind::AuditTail,
            UiRequest::CredentialChanged { .. } => UiKind::CredentialChanged,
            UiRequest::Launch(crate::ui::LaunchRequest::Command(_)) => UiKind::LaunchCommand,
            UiRequest::Launch(crate::ui::LaunchRequest::StopCommand) => UiKind::StopCommand,
            UiRequest::ServerTools { .. } => UiKind::ServerTools,
            UiRequest::ApproveServerTools { .. } => UiKind::ApproveServerTools,
            UiRequest::SetSessionMode { .. } => UiKind::SetSessionMode,
            UiRequest::StopBroker => UiKind::StopBroker,
        }
    }
}

impl ToolKind {
    pub fn of(c: &ToolCall) -> ToolKind {
        match c {
            ToolCall::OpenSession { .. } => ToolKind::OpenSession,
            ToolCall::DescribeAgent(_) => ToolKind::DescribeAgent,
            ToolCall::ReadFile(_) => ToolKind::ReadFile,
            ToolCall::ListDir(_) => ToolKind::ListDir,
            ToolCall::SearchFiles(_) => ToolKind::SearchFiles,
            ToolCall::Grep(_) => ToolKind::Grep,
            ToolCall::WriteFile(_) => ToolKind::WriteFile,
            ToolCall::EditFile(_) => ToolKind::EditFile,
            ToolCall::DeletePath(_) => ToolKind::DeletePath,
            ToolCall::MovePath(_) => ToolKind::MovePath,
            ToolCall::UndoChange(_) => ToolKind::UndoChange,
            ToolCall::FetchUrl(_) => ToolKind::FetchUrl,
            ToolCall::HttpRequest(_) => ToolKind::HttpRequest,
            ToolCall::RunCommand(_) => ToolKind::RunCommand,
            ToolCall::ListServerTools => ToolKind::ListServerTools,
            ToolCall::Server(_) => ToolKind::Server,
            ToolCall::Withdraw(_) => ToolKind::Withdraw,
        }
    }
}

impl FsKind {
    pub fn of(r: &FsRequest) -> FsKind {
        match r {
            FsRequest::Status => FsKind::Status,
            FsRequest::Resolve { .. } => FsKind::Resolve,
            FsRequest::ReadFile { .. } => FsKind::ReadFile,
            FsRequest::ListDir { .. } => FsKind::ListDir,
            FsRequest::Stat { .. } => FsKind::Stat,
            FsRequest::SearchFiles { .. } => FsKind::SearchFiles,
            FsRequest::Grep { .. } => FsKind::Grep,
            FsRequest::WriteFile { .. } => FsKind::WriteFile,
            FsRequest::EditFile { .. } => FsKind::EditFile,
            FsRequest::DeletePath { .. } => FsKind::DeletePath,
            FsRequest::MovePath { .. } => FsKind::MovePath,
            FsRequest::Undo { .. } => FsKind::Undo,
            FsRequest::ListCheckpoints { .. } => FsKind::ListCheckpoints,
            FsRequest::TestProbe(_) => FsKind::TestProbe,
        }
    }
}

impl NetKind {
    pub fn of(r: &NetRequest) -> NetKind {
        match r {
            NetRequest::Check { .. } => NetKind::Check,
            NetRequest::Fetch(_) => NetKind::Fetch,
            NetRequest::FetchPart { .. } => NetKind::FetchPart,
            NetRequest::ProxyOpen(_) => NetKind::ProxyOpen,
            NetRequest::ProxyClose { .. } => NetKind::ProxyClose,
            NetRequest::ProxyConnection { .. } => NetKind::ProxyConnection,
            NetRequest::Http(_) => NetKind::Http,
            NetRequest::Mcp(_) => NetKind::Mcp,
        }
    }
}

impl ExecKind {
    pub fn of(r: &ExecRequest) -> ExecKind {
        match r {
            ExecRequest::Start(spec) if spec.needs_connector() => ExecKind::StartConnected,
            ExecRequest::Start(_) => ExecKind::Start,
            ExecRequest::Poll { .. } => ExecKind::Poll,
            ExecRequest::Stop { .. } => ExecKind::Stop,
        }
    }
}

impl SecretsKind {
    pub fn of(r: &SecretsRequest) -> SecretsKind {
        match r {
            SecretsRequest::Status => SecretsKind::Status,
            SecretsRequest::List => SecretsKind::List,
            SecretsRequest::Has { .. } => SecretsKind::Has,
            SecretsRequest::Set { .. } => SecretsKind::Set,
            SecretsRequest::Delete { .. } => SecretsKind::Delete,
            SecretsRequest::Attach { .. } => SecretsKind::Attach,
            SecretsRequest::ServerEnv { .. } => SecretsKind::ServerEnv,
            SecretsRequest::AuditKey { .. } => SecretsKind::AuditKey,
            SecretsRequest::AuditMac { .. } => SecretsKind::AuditMac,
        }
    }
}

/// The request-level kind of `body`.
pub fn kind_of(body: &Body) -> RequestKind {
    match body {
        Body::Ping { .. } => RequestKind::Ping,
        Body::Pong => RequestKind::Pong,
        Body::Hello(_) => RequestKind::Hello,
        Body::Error(_) => RequestKind::Error,
        Body::Doctor => RequestKind::Doctor,
        Body::DoctorReport(_) => RequestKind::DoctorReport,
        Body::Ui(r) => RequestKind::Ui(UiKind::of(r)),
        Body::UiReply(_) => RequestKind::UiReply,
        Body::ToolCall(c) => RequestKind::Tool(ToolKind::of(c)),
        Body::ToolReply(_) => RequestKind::ToolReply,
        Body::Fs(r) => RequestKind::Fs(FsKind::of(r)),
        Body::FsReply(_) => RequestKind::FsReply,
        Body::Net(r) => RequestKind::Net(NetKind::of(r)),
        Body::NetReply(_) => RequestKind::NetReply,
        Body::Exec(r) => RequestKind::Exec(ExecKind::of(r)),
        Body::ExecReply(_) => RequestKind::ExecReply,
        Body::Secrets(r) => RequestKind::Secrets(SecretsKind::of(r)),
        Body::SecretsReply(_) => RequestKind::SecretsReply,
        Body::Servers(r) => RequestKind::Servers(ServersKind::of(r)),
        Body::ServersReply(_) => RequestKind::ServersReply,
        Body::Notify(r) => RequestKind::Notify(NotifyKind::of(r)),
        Body::NotifyReply(_) => RequestKind::NotifyReply,
    }
}

// ---------------------------------------------------------------------------------------------
// Flags, rows, tables

/// What a row says about its request, beyond "permitted" (see the module's table).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Flags(u8);

impl Flags {
    pub const NONE: Flags = Flags(0);
    /// At most once per channel.
    pub const ONCE: Flags = Flags(1);
    /// The first message on the channel.
    pub const FIRST: Flags = Flags(2);
    /// Changes something outside the receiver's memory.
    pub const EFFECT: Flags = Flags(4);
    /// May bring one descriptor.
    pub const FD: Flags = Flags(8);
    /// Must bring one descriptor (implies [`Flags::FD`]).
    pub const NEEDS_FD: Flags = Flags(8 | 16);

    pub const fn union(self, other: Flags) -> Flags {
        Flags(self.0 | other.0)
    }

    pub const fn contains(self, other: Flags) -> bool {
        self.0 & other.0 == other.0
    }
}

impl std::ops::BitOr for Flags {
    type Output = Flags;
    fn bitor(self, rhs: Flags) -> Flags {
        self.union(rhs)
    }
}

/// One row: a request kind a peer may send, and its flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route {
    pub kind: RequestKind,
    pub flags: Flags,
}

const fn route(kind: RequestKind, flags: Flags) -> Route {
    Route { kind, flags }
}

/// One direction between two processes.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Channel {
    UiToBroker,
    BrokerToUi,
    GatewayToBroker,
    BrokerToGateway,
    BrokerToFs,
    FsToBroker,
    BrokerToNet,
    NetToBroker,
    BrokerToExec,
    ExecToBroker,
    BrokerToSecrets,
    SecretsToBroker,
    /// The CLI to a secrets-helper of its own (`gatehouse secret set|delete|list`,
    /// `verify-audit` without a broker): the only channel that carries `Set` and `Delete`.
    SecretsPrivate,
    /// That helper's replies to the CLI.
    SecretsPrivateReplies,
    BrokerToServers,
    ServersToBroker,
    /// `gatehouse notify` to the broker: a watch, nothing else.
    NotifierToBroker,
    BrokerToNotifier,
}

impl Channel {
    pub const ALL: [Channel; 18] = [
        Channel::UiToBroker,
        Channel::BrokerToUi,
        Channel::GatewayToBroker,
        Channel::BrokerToGateway,
        Channel::BrokerToFs,
        Channel::FsToBroker,
        Channel::BrokerToNet,
        Channel::NetToBroker,
        Channel::BrokerToExec,
        Channel::ExecToBroker,
        Channel::BrokerToSecrets,
        Channel::SecretsToBroker,
        Channel::SecretsPrivate,
        Channel::SecretsPrivateReplies,
        Channel::BrokerToServers,
        Channel::ServersToBroker,
        Channel::NotifierToBroker,
        Channel::BrokerToNotifier,
    ];

    /// The channel a peer in `from` sends to the broker on.
    pub fn to_broker(from: Role) -> Channel {
        match from {
            Role::Ui => Channel::UiToBroker,
            Role::Gateway => Channel::GatewayToBroker,
            Role::Fs => Channel::FsToBroker,
            Role::Net => Channel::NetToBroker,
            Role::Exec => Channel::ExecToBroker,
            Role::Secrets => Channel::SecretsToBroker,
            Role::Servers => Channel::ServersToBroker,
            Role::Notifier => Channel::NotifierToBroker,
        }
    }

    /// The channel the broker sends to a peer in `to` on.
    pub fn from_broker(to: Role) -> Channel {
        match to {
            Role::Ui => Channel::BrokerToUi,
            Role::Gateway => Channel::BrokerToGateway,
            Role::Fs => Channel::BrokerToFs,
            Role::Net => Channel::BrokerToNet,
            Role::Exec => Channel::BrokerToExec,
            Role::Secrets => Channel::BrokerToSecrets,
            Role::Servers => Channel::BrokerToServers,
            Role::Notifier => Channel::BrokerToNotifier,
        }
    }

    /// This channel's table.
    pub fn table(self) -> &'static Table {
        match self {
            Channel::UiToBroker => &UI_TO_BROKER,
            Channel::BrokerToUi => &BROKER_TO_UI,
            Channel::GatewayToBroker => &GATEWAY_TO_BROKER,
            Channel::BrokerToGateway => &BROKER_TO_GATEWAY,
            Channel::BrokerToFs => &BROKER_TO_FS,
            Channel::FsToBroker => &FS_TO_BROKER,
            Channel::BrokerToNet => &BROKER_TO_NET,
            Channel::NetToBroker => &NET_TO_BROKER,
            Channel::BrokerToExec => &BROKER_TO_EXEC,
            Channel::ExecToBroker => &EXEC_TO_BROKER,
            Channel::BrokerToSecrets => &BROKER_TO_SECRETS,
            Channel::SecretsToBroker => &SECRETS_TO_BROKER,
            Channel::SecretsPrivate => &SECRETS_PRIVATE,
            Channel::SecretsPrivateReplies => &SECRETS_PRIVATE_REPLIES,
            Channel::BrokerToServers => &BROKER_TO_SERVERS,
            Channel::ServersToBroker => &SERVERS_TO_BROKER,
            Channel::NotifierToBroker => &NOTIFIER_TO_BROKER,
            Channel::BrokerToNotifier => &BROKER_TO_NOTIFIER,
        }
    }
}

/// A channel's table: every request kind a peer may send on it.
#[derive(Debug)]
pub struct Table {
    pub channel: Channel,
    pub routes: &'static [Route],
}

impl Table {
    /// The row of `kind`, if the table has one.
    pub fn lookup(&self, kind: RequestKind) -> Option<&'static Route> {
        self.routes.iter().find(|r| r.kind == kind)
    }

    /// Whether any row is of the body-level `kind`.
    pub fn admits_body_kind(&self, kind: Kind) -> bool {
        self.routes.iter().any(|r| r.kind.body_kind() == kind)
    }

    /// Checks the next frame on this channel against the table and `state` (which it updates):
    /// its row's flags, or why it is refused.
    pub fn check(&self, state: &mut RouteState, body: &Body) -> Result<Flags, RouteError> {
        let kind = kind_of(body);
        let channel = self.channel;
        let Some(index) = self.routes.iter().position(|r| r.kind == kind) else {
            return Err(RouteError::NotPermitted { channel, kind });
        };
        let flags = self.routes[index].flags;
        let first = !state.started;
        if flags.contains(Flags::FIRST) && !first {
            return Err(RouteError::NotFirst { channel, kind });
        }
        if first && !flags.contains(Flags::FIRST) {
            if let Some(want) = self.routes.iter().find(|r| r.flags.contains(Flags::FIRST)) {
                return Err(RouteError::FirstExpected {
                    channel,
                    kind,
                    first: want.kind,
                });
            }
        }
        let bit = 1u64 << index;
        if flags.contains(Flags::ONCE) {
            if state.used & bit != 0 {
                return Err(RouteError::Again { channel, kind });
            }
            state.used |= bit;
        }
        state.started = true;
        Ok(flags)
    }
}

/// What a channel's receiver remembers for [`Flags::FIRST`] and [`Flags::ONCE`]. One per channel,
/// starting at [`RouteState::default`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RouteState {
    started: bool,
    /// One bit per row of the table (tables have at most 64 rows; a test checks).
    used: u64,
}

/// Why a frame is refused. Each ends the peer that sent it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RouteError {
    #[error("{kind:?} may not be sent on the {channel:?} channel")]
    NotPermitted { channel: Channel, kind: RequestKind },
    #[error("{kind:?} may only be the first message on the {channel:?} channel")]
    NotFirst { channel: Channel, kind: RequestKind },
    #[error("{kind:?} came first on the {channel:?} channel, where {first:?} must")]
    FirstExpected {
        channel: Channel,
        kind: RequestKind,
        first: RequestKind,
    },
    #[error("{kind:?} may be sent only once on the {channel:?} channel")]
    Again { channel: Channel, kind: RequestKind },
}

/// Checks the next frame on `channel` ([`Table::check`]).
pub fn check(channel: Channel, state: &mut RouteState, body: &Body) -> Result<Flags, RouteError> {
    channel.table().check(state, body)
}

// ---------------------------------------------------------------------------------------------
// The tables

use ExecKind as X;
use FsKind as F;
use NetKind as N;
use RequestKind as K;
use SecretsKind as S;
use ServersKind as V;
use ToolKind as T;
use UiKind as U;

const NONE: Flags = Flags::NONE;
const ONCE: Flags = Flags::ONCE;
const FIRST: Flags = Flags::FIRST;
const EFFECT: Flags = Flags::EFFECT;
const FD: Flags = Flags::FD;
const NEEDS_FD: Flags = Flags::NEEDS_FD;
/// A helper's hello: its first message, sent once.
const HELLO: Flags = FIRST.union(ONCE);

/// The human's console to the broker: decisions and policy changes travel only here.
pub const UI_TO_BROKER: Table = Table {
    channel: Channel::UiToBroker,
    routes: &[
        route(K::Ping, NONE),
        route(K::Doctor, NONE),
        route(K::Ui(U::ListPending), NONE),
        route(K::Ui(U::Subscribe), NONE),
        route(K::Ui(U::Decide), EFFECT),
        route(K::Ui(U::ListUncertain), NONE),
        route(K::Ui(U::ListSessions), NONE),
        route(K::Ui(U::PolicyShow), NONE),
        route(K::Ui(U::PolicyApply), EFFECT),
        route(K::Ui(U::PolicyForget), EFFECT),
        // Starts the server (in its sandbox) when no session runs it.
        route(K::Ui(U::ServerTools), EFFECT),
        // A policy change: what the agent is offered.
        route(K::Ui(U::ApproveServerTools), EFFECT),
        route(K::Ui(U::AuditTail), NONE),
        route(K::Ui(U::CredentialChanged), EFFECT),
        // `gatehouse sandbox` and `gatehouse run`: a command through the broker's exec-helper (and its net-helper's
        // egress proxy). The human's channel only: the gateway's table has no such row.
        route(K::Ui(U::LaunchCommand), EFFECT),
        route(K::Ui(U::StopCommand), EFFECT),
        // A session's mode (and the cards it answers): set by the human only, so the
        // gateway's table has no such row.
        route(K::Ui(U::SetSessionMode), EFFECT),
        // The broker's orderly stop, as SIGTERM (which Windows has not): the human's channel only.
        route(K::Ui(U::StopBroker), EFFECT),
    ],
};

pub const BROKER_TO_UI: Table = Table {
    channel: Channel::BrokerToUi,
    routes: &[
        route(K::Pong, NONE),
        route(K::Error, NONE),
        route(K::DoctorReport, NONE),
        route(K::UiReply, NONE),
    ],
};

/// The agent's channel: tool calls and pings, never a decision, a policy change or a helper's
/// message.
pub const GATEWAY_TO_BROKER: Table = Table {
    channel: Channel::GatewayToBroker,
    routes: &[
        route(K::Ping, NONE),
        // Once, and not necessarily first: a gateway that calls a tool before opening one gets
        // a fresh session of the default profile for the connection, and a later OpenSession
        // is answered with an error by the broker.
        route(K::Tool(T::OpenSession), ONCE),
        route(K::Tool(T::DescribeAgent), ONCE),
        route(K::Tool(T::ReadFile), NONE),
        route(K::Tool(T::ListDir), NONE),
        route(K::Tool(T::SearchFiles), NONE),
        route(K::Tool(T::Grep), NONE),
        route(K::Tool(T::WriteFile), EFFECT),
        route(K::Tool(T::EditFile), EFFECT),
        route(K::Tool(T::DeletePath), EFFECT),
        route(K::Tool(T::MovePath), EFFECT),
        route(K::Tool(T::UndoChange), EFFECT),
        route(K::Tool(T::FetchUrl), NONE),
        route(K::Tool(T::HttpRequest), EFFECT),
        route(K::Tool(T::RunCommand), EFFECT),
        route(K::Tool(T::ListServerTools), NONE),
        route(K::Tool(T::Server), EFFECT),
        route(K::Tool(T::Withdraw), NONE),
    ],
};

pub const BROKER_TO_GATEWAY: Table = Table {
    channel: Channel::BrokerToGateway,
    routes: &[
        route(K::Pong, NONE),
        route(K::Error, NONE),
        route(K::ToolReply, NONE),
    ],
};

pub const BROKER_TO_FS: Table = Table {
    channel: Channel::BrokerToFs,
    routes: &[
        route(K::Ping, NONE),
        route(K::Fs(F::Status), NONE),
        route(K::Fs(F::Resolve), NONE),
        route(K::Fs(F::ReadFile), NONE),
        route(K::Fs(F::ListDir), NONE),
        route(K::Fs(F::Stat), NONE),
        route(K::Fs(F::SearchFiles), NONE),
        route(K::Fs(F::Grep), NONE),
        route(K::Fs(F::WriteFile), EFFECT),
        route(K::Fs(F::EditFile), EFFECT),
        route(K::Fs(F::DeletePath), EFFECT),
        route(K::Fs(F::MovePath), EFFECT),
        route(K::Fs(F::Undo), EFFECT),
        route(K::Fs(F::ListCheckpoints), NONE),
        // Answered only by test builds (`probe.rs`); a release helper says it has no probes.
        route(K::Fs(F::TestProbe), NONE),
    ],
};

pub const FS_TO_BROKER: Table = Table {
    channel: Channel::FsToBroker,
    routes: &[
        route(K::Hello, HELLO),
        route(K::Pong, NONE),
        route(K::Error, NONE),
        route(K::FsReply, NONE),
    ],
};

pub const BROKER_TO_NET: Table = Table {
    channel: Channel::BrokerToNet,
    routes: &[
        route(K::Ping, NONE),
        route(K::Net(N::Check), NONE),
        route(K::Net(N::Fetch), NONE),
        route(K::Net(N::FetchPart), NONE),
        route(K::Net(N::Http), EFFECT),
        // A message to a remote MCP server: a call may send, pay or delete over there.
        route(K::Net(N::Mcp), EFFECT),
        route(K::Net(N::ProxyOpen), NONE),
        route(K::Net(N::ProxyClose), NONE),
        // A sandboxed command's connection to the egress proxy, relayed until it ends.
        route(K::Net(N::ProxyConnection), EFFECT.union(NEEDS_FD)),
    ],
};

pub const NET_TO_BROKER: Table = Table {
    channel: Channel::NetToBroker,
    routes: &[
        route(K::Hello, HELLO),
        route(K::Pong, NONE),
        route(K::Error, NONE),
        route(K::NetReply, NONE),
    ],
};

pub const BROKER_TO_EXEC: Table = Table {
    channel: Channel::BrokerToExec,
    routes: &[
        route(K::Ping, NONE),
        route(K::Exec(X::Start), EFFECT),
        // The command's connector travels with the frame; without it the Start is refused.
        route(K::Exec(X::StartConnected), EFFECT.union(FD)),
        route(K::Exec(X::Poll), NONE),
        route(K::Exec(X::Stop), NONE),
    ],
};

pub const EXEC_TO_BROKER: Table = Table {
    channel: Channel::ExecToBroker,
    routes: &[
        route(K::Hello, HELLO),
        route(K::Pong, NONE),
        route(K::Error, NONE),
        route(K::ExecReply, NONE),
    ],
};

/// What the broker may ask the secrets-helper. `Set`, `Delete` and `List` are absent: only the
/// CLI's own helper serves them ([`SECRETS_PRIVATE`]).
pub const BROKER_TO_SECRETS: Table = Table {
    channel: Channel::BrokerToSecrets,
    routes: &[
        route(K::Ping, NONE),
        route(K::Secrets(S::Status), NONE),
        route(K::Secrets(S::Has), NONE),
        route(K::Secrets(S::Attach), NONE),
        // A third-party stdio server's secret, for its sandbox's environment.
        route(K::Secrets(S::ServerEnv), NONE),
        route(K::Secrets(S::AuditKey), EFFECT),
        route(K::Secrets(S::AuditMac), NONE),
    ],
};

pub const SECRETS_TO_BROKER: Table = Table {
    channel: Channel::SecretsToBroker,
    routes: &[
        route(K::Hello, HELLO),
        route(K::Pong, NONE),
        route(K::Error, NONE),
        route(K::SecretsReply, NONE),
    ],
};

/// What the CLI may ask a secrets-helper it started itself: keep credentials, and seal the audit
/// log when no broker runs. No `Attach`: only the broker's tool path makes request headers.
pub const SECRETS_PRIVATE: Table = Table {
    channel: Channel::SecretsPrivate,
    routes: &[
        route(K::Ping, NONE),
        route(K::Secrets(S::Status), NONE),
        route(K::Secrets(S::List), NONE),
        route(K::Secrets(S::Has), NONE),
        route(K::Secrets(S::Set), EFFECT),
        route(K::Secrets(S::Delete), EFFECT),
        route(K::Secrets(S::AuditKey), EFFECT),
        route(K::Secrets(S::AuditMac), NONE),
    ],
};

pub const SECRETS_PRIVATE_REPLIES: Table = Table {
    channel: Channel::SecretsPrivateReplies,
    routes: &[
        route(K::Hello, HELLO),
        route(K::Pong, NONE),
        route(K::Error, NONE),
        route(K::SecretsReply, NONE),
    ],
};

/// What the broker may ask the servers-helper. Only `Attach` brings a descriptor: the server's
/// stdio socket, which that connection then owns.
pub const BROKER_TO_SERVERS: Table = Table {
    channel: Channel::BrokerToServers,
    routes: &[
        route(K::Ping, NONE),
        route(K::Servers(V::Attach), NEEDS_FD),
        route(K::Servers(V::ListTools), NONE),
        // A third-party tool's effect is whatever the server does.
        route(K::Servers(V::CallTool), EFFECT),
        route(K::Servers(V::Watch), NONE),
        route(K::Servers(V::Detach), NONE),
    ],
};

pub const SERVERS_TO_BROKER: Table = Table {
    channel: Channel::ServersToBroker,
    routes: &[
        route(K::Hello, HELLO),
        route(K::Pong, NONE),
        route(K::Error, NONE),
        route(K::ServersReply, NONE),
    ],
};

/// `gatehouse notify`: it may watch for waiting cards, once, and nothing else. No decision, no
/// policy read or change, no tool call, no doctor: a notifier that sends any of them is killed.
/// Its events carry a card's summary, never its digest.
pub const NOTIFIER_TO_BROKER: Table = Table {
    channel: Channel::NotifierToBroker,
    routes: &[
        route(K::Ping, NONE),
        route(K::Notify(NotifyKind::Watch), ONCE),
    ],
};

pub const BROKER_TO_NOTIFIER: Table = Table {
    channel: Channel::BrokerToNotifier,
    routes: &[
        route(K::Pong, NONE),
        route(K::Error, NONE),
        route(K::NotifyReply, NONE),
    ],
};

// ---------------------------------------------------------------------------------------------
// The body-level view, derived from the tables

/// May a peer in `from` send a message of `kind` to the broker? (Some message of that body kind
/// is in its table; [`check`] decides about the request itself.)
pub fn may_send_to_broker(from: Role, kind: Kind) -> bool {
    Channel::to_broker(from).table().admits_body_kind(kind)
}

/// May the broker send a message of `kind` to a peer in `to`?
pub fn broker_may_send(to: Role, kind: Kind) -> bool {
    Channel::from_broker(to).table().admits_body_kind(kind)
}

/// The body kinds `from` may send to the broker (for `doctor` and documentation).
pub fn kinds_to_broker(from: Role) -> Vec<Kind> {
    let mut kinds: Vec<Kind> = Vec::new();
    for r in Channel::to_broker(from).table().routes {
        let k = r.kind.body_kind();
        if !kinds.contains(&k) {
            kinds.push(k);
        }
    }
    kinds
}

#[cfg(test)]
mod tests;
