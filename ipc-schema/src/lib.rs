//! gatehouse's typed IPC.
//!
//! Every message any process of gatehouse exchanges is a value of [`Body`], wrapped in an
//! [`Envelope`] that carries the protocol version and a request id, and written as one
//! length-prefixed postcard frame ([`codec`]). The enums are closed: a frame that does not decode
//! to one of these variants is malformed, and the broker kills the peer that sent it.
//!
//! Who may send what is the [`route`] table, one per channel; the broker checks it on every frame,
//! and each helper re-checks what the broker sends it ([`helper`], the helpers' one channel type).

#![forbid(unsafe_code)]

use serde::{Deserialize, Serialize};

pub mod codec;
pub mod exec;
pub mod exit;
#[cfg(unix)]
pub mod fdpass;
#[cfg(feature = "tokio")]
pub mod framed;
pub mod fs;
pub mod fs_walk;
pub mod grant_glob;
pub mod helper;
pub mod host;
pub mod inert;
pub mod mode;
pub mod net;
pub mod notify;
pub mod os_path;
pub mod outside;
pub mod platform;
pub mod protected;
pub mod route;
pub mod secrets;
pub mod servers;
pub mod spawn;
pub mod status;
pub mod tier;
pub mod tool;
pub mod tool_fs;
pub mod ui;

pub use codec::{DecodeError, EncodeError, FrameError, MAX_FRAME};
pub use route::Kind;

/// The wire protocol version. A frame with another version is refused as malformed: the broker
/// and its helpers are always built together, so a mismatch means a stale or foreign peer.
pub const PROTOCOL_VERSION: u16 = 1;

/// Who is at the other end of a channel. The broker knows this from the kernel (which inherited
/// socket, which listening socket), never from a message field.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Role {
    /// The human's console.
    Ui,
    /// One agent session's MCP gateway.
    Gateway,
    /// The file helper.
    Fs,
    /// The network helper.
    Net,
    /// The command helper.
    Exec,
    /// The keyring helper.
    Secrets,
    /// The helper that speaks JSON-RPC to third-party MCP servers.
    Servers,
    /// `gatehouse notify`: shows cards that wait while no console is attached; may only watch.
    Notifier,
}

impl Role {
    /// The helpers the broker spawns and supervises, in start order.
    pub const HELPERS: [Role; 5] = [
        Role::Fs,
        Role::Net,
        Role::Exec,
        Role::Secrets,
        Role::Servers,
    ];

    pub fn is_helper(self) -> bool {
        Self::HELPERS.contains(&self)
    }

    /// The name used in logs, `doctor` and the audit log; for helpers, their binary name.
    pub fn name(self) -> &'static str {
        match self {
            Role::Ui => "ui",
            Role::Gateway => "gateway",
            Role::Fs => "fs-helper",
            Role::Net => "net-helper",
            Role::Exec => "exec-helper",
            Role::Secrets => "secrets-helper",
            Role::Servers => "servers-helper",
            Role::Notifier => "notifier",
        }
    }

    /// Parses the short names used on command lines: `fs`, `net`, `exec`, `secrets`, `ui`, `gateway`
    /// (the binary names are accepted too).
    pub fn from_short(s: &str) -> Option<Role> {
        Some(match s {
            "ui" => Role::Ui,
            "gateway" => Role::Gateway,
            "notifier" => Role::Notifier,
            "fs" | "fs-helper" => Role::Fs,
            "net" | "net-helper" => Role::Net,
            "exec" | "exec-helper" => Role::Exec,
            "secrets" | "secrets-helper" => Role::Secrets,
            "servers" | "servers-helper" => Role::Servers,
            _ => return None,
        })
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One frame's contents.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct Envelope {
    /// Always [`PROTOCOL_VERSION`]; checked before the body is decoded.
    pub version: u16,
    /// Chosen by the sender of a request; a reply carries the id of its request.
    pub id: u64,
    pub body: Body,
}

impl Envelope {
    pub fn new(id: u64, body: Body) -> Self {
        Envelope {
            version: PROTOCOL_VERSION,
            id,
            body,
        }
    }
}

/// Every message kind of gatehouse. Domain payloads live in their own modules so that each
/// capability owns its own types; this enum only names the channels they travel on.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub enum Body {
    /// Liveness probe. From a front, `target` names the helper to reach through the broker
    /// (`None`: the broker itself answers). The broker sends helpers `Ping { target: None }`.
    Ping { target: Option<Role> },
    /// The answer to [`Body::Ping`].
    Pong,
    /// A helper's first frame, sent once after its lockdown succeeded.
    Hello(status::Hello),
    /// A request failed; the reply to any request kind.
    Error(ErrorReply),
    /// Ask the broker what each process really enforces (`gatehouse doctor`).
    Doctor,
    /// The answer to [`Body::Doctor`].
    DoctorReport(status::DoctorReport),
    /// The human's console to the broker: pending proposals, decisions, policy.
    Ui(ui::UiRequest),
    /// The broker to the console.
    UiReply(ui::UiReply),
    /// An agent's tool call, from its gateway.
    ToolCall(tool::ToolCall),
    /// The broker's answer to a tool call (or progress on it).
    ToolReply(tool::ToolReply),
    /// Broker to fs-helper.
    Fs(fs::FsRequest),
    /// fs-helper to broker.
    FsReply(fs::FsReply),
    /// Broker to net-helper.
    Net(net::NetRequest),
    /// net-helper to broker.
    NetReply(net::NetReply),
    /// Broker to exec-helper.
    Exec(exec::ExecRequest),
    /// exec-helper to broker.
    ExecReply(exec::ExecReply),
    /// Broker to secrets-helper.
    Secrets(secrets::SecretsRequest),
    /// secrets-helper to broker.
    SecretsReply(secrets::SecretsReply),
    /// Broker to servers-helper.
    Servers(servers::ServersRequest),
    /// servers-helper to broker.
    ServersReply(servers::ServersReply),
    /// The notifier to the broker: only a watch ([`notify`]).
    Notify(notify::NotifyRequest),
    /// The broker to the notifier.
    NotifyReply(notify::NotifyReply),
}

/// Why a request failed, in words a user can act on.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct ErrorReply {
    pub code: ErrorCode,
    pub message: String,
}

impl ErrorReply {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ErrorReply {
            code,
            message: message.into(),
        }
    }
}

#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCode {
    /// The helper that would serve this is not running (starting, restarting, or refused).
    HelperUnavailable,
    /// The helper died while this call was in flight; whether it took effect is unknown.
    HelperCrashed,
    /// Policy or containment refused the request.
    Refused,
    /// The request was well-formed but its values are invalid.
    Invalid,
    /// A limit (rate, size, time) was reached.
    Limit,
    /// Something inside gatehouse failed.
    Internal,
    /// What the request names is not there (a command's program, in its sandbox).
    NotFound,
}
