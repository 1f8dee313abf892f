//! Messages between the broker and the secrets-helper, and the credential types they carry.
//!
//! The helper offers narrow operations only (DESIGN.md rule 9): define or change a credential,
//! delete it, say which exist, produce the header for one request to one of its hosts, and MAC
//! the audit log's chain under a key it never exports. There is no request that returns a stored
//! value as such: [`SecretsReply::Attached`] returns a header that the broker hands straight to
//! the net-helper for one request to one checked host.
//!
//! Values travel as [`SecretValue`]: zeroized when dropped, `[redacted]` when debug-printed, and
//! never `Display`. The message kinds that can hold one are listed by [`may_carry_secret`]; the
//! route table keeps every one of them off the ui and gateway channels (tested).

use crate::route::Kind;
use serde::{Deserialize, Serialize};
/// Re-exported so that every holder of secret bytes (the broker's CLI included) zeroizes with
/// the same crate.
pub use zeroize::Zeroizing;

/// The longest credential name.
pub const MAX_NAME_LEN: usize = 64;
/// The most hosts one credential may be bound to.
pub const MAX_HOSTS: usize = 32;
/// The shortest and longest secret value, in bytes. Short values are refused because every
/// occurrence of the value in a reply is replaced: a 2-byte "secret" would shred every reply.
pub const MIN_SECRET_LEN: usize = 6;
pub const MAX_SECRET_LEN: usize = 4096;
/// The most audit rows one [`SecretsRequest::AuditMac`] may carry (keeps the frame far below
/// [`crate::MAX_FRAME`]).
pub const MAX_AUDIT_ROWS: usize = 8192;
/// What every exact occurrence of a credential's value in a reply becomes.
pub const REDACTED: &str = "[redacted credential]";

/// Why a value given for a credential field is not accepted; the text says what to change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidValue(pub String);

fn invalid<T>(msg: impl Into<String>) -> Result<T, InvalidValue> {
    Err(InvalidValue(msg.into()))
}

/// A credential's name: 1 to 64 of `A-Z a-z 0-9 . _ -`, starting with a letter or digit.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[serde(try_from = "String", into = "String")]
pub struct CredentialName(String);

impl CredentialName {
    pub fn parse(s: &str) -> Result<CredentialName, InvalidValue> {
        let ok_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
        if s.is_empty() || s.len() > MAX_NAME_LEN {
            return invalid(format!(
                "a credential name has 1 to {MAX_NAME_LEN} characters"
            ));
        }
        if !s.chars().all(ok_char) || !s.starts_with(|c: char| c.is_ascii_alphanumeric()) {
            return invalid(format!(
                "credential name {s:?}: use letters, digits, '.', '_' and '-', starting with a letter or digit"
            ));
        }
        Ok(CredentialName(s.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for CredentialName {
    type Error = InvalidValue;
    fn try_from(s: String) -> Result<Self, InvalidValue> {
        CredentialName::parse(&s)
    }
}

impl From<CredentialName> for String {
    fn from(n: CredentialName) -> String {
        n.0
    }
}

impl std::fmt::Display for CredentialName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A host a credential may be sent to: one [`HostPattern`] (ASCII only: an international name
/// is written in punycode, so the user binds exactly the name that is compared).
pub use crate::host::HostPattern;

/// Header names that frame the request or belong to the connection: setting them could
/// smuggle a second request or reroute this one. A credential may not be sent as one, nor may
/// an agent's `http_request` set one (the net-helper also refuses `proxy-authorization`).
pub const FRAMING_HEADERS: &[&str] = &[
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "upgrade",
    "te",
    "trailer",
    "keep-alive",
    "proxy-connection",
    "expect",
];

/// An HTTP header name (an RFC 9110 token), lower-cased, not one of the framing headers.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Hash)]
#[serde(try_from = "String", into = "String")]
pub struct HeaderName(String);

impl HeaderName {
    pub fn parse(s: &str) -> Result<HeaderName, InvalidValue> {
        let tchar = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
        if s.is_empty() || s.len() > 64 || !s.chars().all(tchar) {
            return invalid(format!("{s:?} is not a valid HTTP header name"));
        }
        let lower = s.to_ascii_lowercase();
        if FRAMING_HEADERS.contains(&lower.as_str()) {
            return invalid(format!(
                "a credential cannot be sent as the {s} header (it frames the request)"
            ));
        }
        Ok(HeaderName(lower))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for HeaderName {
    type Error = InvalidValue;
    fn try_from(s: String) -> Result<Self, InvalidValue> {
        HeaderName::parse(&s)
    }
}

impl From<HeaderName> for String {
    fn from(h: HeaderName) -> String {
        h.0
    }
}

/// The user name of a basic-auth credential: printable, no ':' (RFC 7617), at most 128 bytes.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Hash)]
#[serde(try_from = "String", into = "String")]
pub struct BasicUser(String);

impl BasicUser {
    pub fn parse(s: &str) -> Result<BasicUser, InvalidValue> {
        if s.len() > 128 || s.contains(':') || s.chars().any(char::is_control) {
            return invalid(format!(
                "basic-auth user {s:?}: at most 128 printable characters, no ':'"
            ));
        }
        Ok(BasicUser(s.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for BasicUser {
    type Error = InvalidValue;
    fn try_from(s: String) -> Result<Self, InvalidValue> {
        BasicUser::parse(&s)
    }
}

impl From<BasicUser> for String {
    fn from(u: BasicUser) -> String {
        u.0
    }
}

/// How a credential is sent.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Hash)]
pub enum SendAs {
    /// `Authorization: Bearer VALUE`.
    Bearer,
    /// `NAME: VALUE`, e.g. `X-Api-Key`.
    Header(HeaderName),
    /// `Authorization: Basic base64(USER:VALUE)`.
    Basic(BasicUser),
}

impl std::fmt::Display for SendAs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SendAs::Bearer => f.write_str("bearer token (Authorization: Bearer)"),
            SendAs::Header(h) => write!(f, "header {}", h.as_str()),
            SendAs::Basic(u) => write!(f, "basic auth as user {:?}", u.as_str()),
        }
    }
}

/// What a credential is, without its value.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct CredentialSpec {
    pub name: CredentialName,
    /// Never empty; at most [`MAX_HOSTS`].
    pub hosts: Vec<HostPattern>,
    pub send_as: SendAs,
}

impl CredentialSpec {
    /// Checks what the types cannot: the host list's size, duplicates removed and sorted, so
    /// that the same binding always compares equal.
    pub fn normalized(mut self) -> Result<CredentialSpec, InvalidValue> {
        self.hosts.sort();
        self.hosts.dedup();
        if self.hosts.is_empty() {
            return invalid(format!(
                "credential {}: name at least one host it may be sent to",
                self.name
            ));
        }
        if self.hosts.len() > MAX_HOSTS {
            return invalid(format!(
                "credential {}: at most {MAX_HOSTS} hosts",
                self.name
            ));
        }
        Ok(self)
    }

    /// Is `host` one this credential may be sent to?
    pub fn allows_host(&self, host: &crate::host::Host) -> bool {
        crate::host::any_matches(&self.hosts, host)
    }
}

/// What `secret list` shows: everything but the value.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct CredentialInfo {
    pub spec: CredentialSpec,
    /// A value is stored (false after the hosts or the way it is sent changed).
    pub present: bool,
}

/// Secret bytes. Zeroized when dropped; debug-printed as `[redacted]`; no `Display`. Read the
/// bytes only through [`SecretValue::expose`], which says at the call site what is happening.
#[derive(Clone, Default)]
pub struct SecretValue(Zeroizing<Vec<u8>>);

impl SecretValue {
    pub fn new(bytes: Vec<u8>) -> SecretValue {
        SecretValue(Zeroizing::new(bytes))
    }

    pub fn from_slice(bytes: &[u8]) -> SecretValue {
        let mut v = Zeroizing::new(Vec::with_capacity(bytes.len()));
        v.extend_from_slice(bytes);
        SecretValue(v)
    }

    /// The secret bytes, for the one place that must use them.
    pub fn expose(&self) -> &[u8] {
        &self.0
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Checks a credential value: [`MIN_SECRET_LEN`] to [`MAX_SECRET_LEN`] bytes of UTF-8
    /// without control characters (it goes into an HTTP header as it is).
    pub fn check_credential(&self) -> Result<(), InvalidValue> {
        let n = self.0.len();
        if !(MIN_SECRET_LEN..=MAX_SECRET_LEN).contains(&n) {
            return invalid(format!(
                "the value has {n} bytes; a credential value has {MIN_SECRET_LEN} to {MAX_SECRET_LEN}"
            ));
        }
        match std::str::from_utf8(&self.0) {
            Ok(s) if !s.chars().any(char::is_control) => Ok(()),
            Ok(_) => invalid("the value contains a control character (a line break or tab?)"),
            Err(_) => invalid("the value is not UTF-8 text"),
        }
    }
}

impl std::fmt::Debug for SecretValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("[redacted]")
    }
}

impl PartialEq for SecretValue {
    /// Constant time in the contents (the lengths are not secret).
    fn eq(&self, other: &Self) -> bool {
        self.0.len() == other.0.len()
            && self
                .0
                .iter()
                .zip(other.0.iter())
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0
    }
}

impl Eq for SecretValue {}

impl Serialize for SecretValue {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(&self.0)
    }
}

impl<'de> Deserialize<'de> for SecretValue {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = SecretValue;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("secret bytes")
            }
            fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<SecretValue, E> {
                Ok(SecretValue::from_slice(v))
            }
            fn visit_byte_buf<E: serde::de::Error>(self, v: Vec<u8>) -> Result<SecretValue, E> {
                Ok(SecretValue::new(v))
            }
        }
        d.deserialize_bytes(V)
    }
}

/// The header the secrets-helper made for one request: the broker passes it to the net-helper,
/// which sends it only on a TLS connection to `host`, and scrubs every [`Self::scrub`] string
/// from the reply. Debug-printing shows the credential, header name and host, never the value.
#[derive(Serialize, Deserialize, Clone, PartialEq, Eq)]
pub struct CredentialHeader {
    pub credential: CredentialName,
    /// The checked host of the request it was made for: the header goes nowhere else.
    pub host: String,
    /// Lower-case header name (`authorization` for bearer and basic).
    pub name: String,
    pub value: SecretValue,
    /// Every form of the secret that must not reach the agent: the value itself and, for
    /// basic auth, the base64 token.
    pub scrub: Vec<SecretValue>,
}

impl std::fmt::Debug for CredentialHeader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "CredentialHeader({} as {} for {}: [redacted])",
            self.credential, self.name, self.host
        )
    }
}

/// Replaces every exact occurrence of a value of `scrub` in `bytes` with [`REDACTED`];
/// returns how many were replaced. Longer values are replaced first, so a value that contains
/// another is removed whole.
pub fn scrub_bytes(scrub: &[SecretValue], bytes: &mut Vec<u8>) -> usize {
    let mut needles: Vec<&[u8]> = scrub
        .iter()
        .map(|s| s.expose())
        .filter(|s| !s.is_empty())
        .collect();
    needles.sort_by_key(|n| std::cmp::Reverse(n.len()));
    let mut count = 0;
    for n in needles {
        count += replace_all(bytes, n, REDACTED.as_bytes());
    }
    count
}

/// [`scrub_bytes`] on text. Replacing a whole UTF-8 string with ASCII keeps the text valid
/// UTF-8.
pub fn scrub_text(scrub: &[SecretValue], text: &mut String) -> usize {
    let mut bytes = std::mem::take(text).into_bytes();
    let n = scrub_bytes(scrub, &mut bytes);
    *text = String::from_utf8(bytes).unwrap_or_else(|e| {
        // Unreachable for valid UTF-8 needles; lossy rather than lose the reply.
        String::from_utf8_lossy(e.as_bytes()).into_owned()
    });
    n
}

impl CredentialHeader {
    /// Replaces every exact occurrence of a scrub string in `bytes` with [`REDACTED`];
    /// returns how many were replaced. Longer strings are replaced first, so a value that
    /// contains another is removed whole.
    pub fn scrub_bytes(&self, bytes: &mut Vec<u8>) -> usize {
        scrub_bytes(&self.scrub, bytes)
    }

    /// [`Self::scrub_bytes`] on text.
    pub fn scrub_text(&self, text: &mut String) -> usize {
        scrub_text(&self.scrub, text)
    }

    /// Does this reply header echo the credential? Such headers are dropped whole: the
    /// credential's own header name, `authorization`, `proxy-authorization`, and any header
    /// whose value contains a scrub string.
    pub fn echoed_by(&self, name: &str, value: &[u8]) -> bool {
        let name = name.to_ascii_lowercase();
        name == self.name
            || name == "authorization"
            || name == "proxy-authorization"
            || self
                .scrub
                .iter()
                .any(|s| !s.is_empty() && find(value, s.expose()).is_some())
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() || needle.len() > hay.len() {
        return None;
    }
    hay.windows(needle.len()).position(|w| w == needle)
}

fn replace_all(bytes: &mut Vec<u8>, needle: &[u8], with: &[u8]) -> usize {
    let Some(first) = find(bytes, needle) else {
        return 0;
    };
    let mut out = Zeroizing::new(Vec::with_capacity(bytes.len()));
    let mut count = 0;
    let mut rest = 0;
    let mut at = Some(first);
    while let Some(i) = at {
        out.extend_from_slice(&bytes[rest..rest + i]);
        out.extend_from_slice(with);
        rest += i + needle.len();
        count += 1;
        at = find(&bytes[rest..], needle);
    }
    out.extend_from_slice(&bytes[rest..]);
    // The old buffer held the secret: zeroize it before handing back the scrubbed copy.
    let old = std::mem::replace(bytes, std::mem::take(&mut *out));
    drop(Zeroizing::new(old));
    count
}

/// Which keyring backend a secrets-helper uses. Chosen in config.toml (`[secrets] store`),
/// never switched on the helper's own initiative, and refused on an OS that does not have it.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreKind {
    /// The Linux kernel's keyutils user keyring: no daemon, lost at reboot.
    Keyutils,
    /// The freedesktop Secret Service (GNOME Keyring, KWallet) over the D-Bus session bus.
    SecretService,
    /// The macOS login keychain (generic passwords), through the `keyring` crate.
    Keychain,
    /// The Windows Credential Manager (generic credentials), through the `keyring` crate.
    CredentialManager,
}

impl StoreKind {
    /// Every store, in the order the docs list them.
    pub const ALL: [StoreKind; 4] = [
        StoreKind::Keyutils,
        StoreKind::SecretService,
        StoreKind::Keychain,
        StoreKind::CredentialManager,
    ];

    /// The name used in config.toml and on the helper's command line.
    pub fn as_str(self) -> &'static str {
        match self {
            StoreKind::Keyutils => "keyutils",
            StoreKind::SecretService => "secret-service",
            StoreKind::Keychain => "keychain",
            StoreKind::CredentialManager => "credential-manager",
        }
    }

    pub fn from_name(s: &str) -> Option<StoreKind> {
        StoreKind::ALL.into_iter().find(|k| k.as_str() == s)
    }

    /// The operating system the store exists on, spelled as `std::env::consts::OS`.
    pub fn os(self) -> &'static str {
        match self {
            StoreKind::Keyutils | StoreKind::SecretService => "linux",
            StoreKind::Keychain => "macos",
            StoreKind::CredentialManager => "windows",
        }
    }

    /// The store used when config.toml names none: keyutils on Linux (it needs no daemon;
    /// `doctor` says it does not survive a reboot), the OS's own store elsewhere.
    pub fn default_for(os: &str) -> Option<StoreKind> {
        match os {
            "linux" => Some(StoreKind::Keyutils),
            "macos" => Some(StoreKind::Keychain),
            "windows" => Some(StoreKind::CredentialManager),
            _ => None,
        }
    }

    /// The stores of `os`, as a config file names them: `"keyutils" or "secret-service"`
    /// (empty where gatehouse has none).
    pub fn choices_on(os: &str) -> String {
        StoreKind::ALL
            .into_iter()
            .filter(|k| k.os() == os)
            .map(|k| format!("{:?}", k.as_str()))
            .collect::<Vec<_>>()
            .join(" or ")
    }

    /// Refuses a store of another operating system (`os` as `std::env::consts::OS`), naming
    /// the stores that exist there: a store is never replaced by another one.
    pub fn check_os(self, os: &str) -> Result<(), String> {
        if self.os() == os {
            return Ok(());
        }
        let here = StoreKind::choices_on(os);
        let choose = if here.is_empty() {
            format!("gatehouse has no credential store for {os}")
        } else {
            format!("on {os} choose {here} in [secrets] store")
        };
        Err(format!(
            "the {} store exists only on {}, not on {os}; {choose}",
            self.as_str(),
            self.os()
        ))
    }
}

/// What the helper says about its store (`gatehouse doctor`, `secret list`).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct StoreStatus {
    pub kind: StoreKind,
    /// e.g. `the kernel user keyring of uid 1000`, `org.freedesktop.secrets on unix:path=...`.
    pub location: String,
    /// Whether stored credentials outlive a reboot.
    pub survives_reboot: bool,
    /// Which credentials this instance sees (one gatehouse instance's namespace).
    pub namespace: String,
    /// Why the store cannot be used right now, if it cannot.
    pub problem: Option<String>,
}

impl StoreStatus {
    /// One line for `gatehouse doctor`.
    pub fn doctor_line(&self) -> String {
        let mut s = format!(
            "secrets-helper: credential store {} ({}), namespace {}",
            self.kind.as_str(),
            self.location,
            self.namespace
        );
        if !self.survives_reboot {
            s.push_str("; credentials and the audit key do NOT survive a reboot");
        }
        if let Some(p) = &self.problem {
            s.push_str(&format!("; NOT USABLE: {p}"));
        }
        s
    }
}

/// An audit log's instance id (the database's random id): 1 to 64 of `0-9 a-z A-Z -`.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Hash)]
#[serde(try_from = "String", into = "String")]
pub struct AuditInstance(String);

impl AuditInstance {
    pub fn parse(s: &str) -> Result<AuditInstance, InvalidValue> {
        if s.is_empty() || s.len() > 64 || !s.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        {
            return invalid(format!("{s:?} is not an audit log instance id"));
        }
        Ok(AuditInstance(s.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for AuditInstance {
    type Error = InvalidValue;
    fn try_from(s: String) -> Result<Self, InvalidValue> {
        AuditInstance::parse(&s)
    }
}

impl From<AuditInstance> for String {
    fn from(i: AuditInstance) -> String {
        i.0
    }
}

/// One audit row to MAC: `HMAC(key, "row" || seq as i64 LE || hash)`.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuditRow {
    pub seq: i64,
    pub hash: [u8; 32],
}

/// The chain's head to MAC: `HMAC(key, "head" || len(instance) as u32 LE || instance ||
/// count as i64 LE || head)`.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuditHead {
    pub count: i64,
    pub head: [u8; 32],
}

/// Broker to secrets-helper.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub enum SecretsRequest {
    /// Which store, where, and whether it works. Answered by [`SecretsReply::Status`].
    Status,
    /// Every credential of this namespace, without values. [`SecretsReply::Credentials`].
    List,
    /// One credential, without its value. [`SecretsReply::Credential`].
    Has { name: CredentialName },
    /// Create a credential or change it. With a value, the spec and value are stored together.
    /// Without one, only the spec: if the hosts or the way it is sent differ from what is
    /// stored, the stored value is dropped until it is entered again. [`SecretsReply::Saved`].
    Set {
        spec: CredentialSpec,
        value: Option<SecretValue>,
    },
    /// [`SecretsReply::Deleted`].
    Delete { name: CredentialName },
    /// The header that sends credential `name` to `host` (the checked host of an https URL).
    /// Refused unless `host` is one of the credential's hosts and a value is stored.
    /// [`SecretsReply::Attached`].
    Attach { name: CredentialName, host: String },
    /// The value of credential `name`, for the environment of a third-party stdio server that
    /// can reach `reach` and nothing else (its `network` list, through the egress proxy).
    /// Refused unless each of `reach` lies within the credential's hosts (an exact host one of
    /// them allows, or a `*.suffix` it lists) and a value is stored: the value can then leave
    /// the server only for the hosts it was stored for. [`SecretsReply::ServerEnv`].
    ServerEnv {
        name: CredentialName,
        reach: Vec<HostPattern>,
    },
    /// Make sure the audit key of `instance` exists (creating it if `may_create`: a log with no
    /// entries yet). [`SecretsReply::AuditKey`]. The key never leaves the helper.
    AuditKey {
        instance: AuditInstance,
        may_create: bool,
    },
    /// MAC audit rows and/or the head under `instance`'s key. [`SecretsReply::AuditMacs`].
    AuditMac {
        instance: AuditInstance,
        rows: Vec<AuditRow>,
        head: Option<AuditHead>,
    },
}

/// secrets-helper to broker.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub enum SecretsReply {
    Status(StoreStatus),
    Credentials(Vec<CredentialInfo>),
    Credential(Option<CredentialInfo>),
    Saved {
        info: CredentialInfo,
        /// A stored value was dropped because the hosts or the way it is sent changed.
        value_dropped: bool,
    },
    Deleted {
        existed: bool,
    },
    Attached(CredentialHeader),
    ServerEnv(SecretValue),
    AuditKey {
        created: bool,
    },
    AuditMacs {
        rows: Vec<[u8; 32]>,
        head: Option<[u8; 32]>,
    },
    Failed(SecretsError),
}

/// Why a secrets request failed. The message never contains a value.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct SecretsError {
    pub kind: SecretsErrorKind,
    pub message: String,
}

#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub enum SecretsErrorKind {
    /// The request's values are invalid (a bad name, host, value, too many rows).
    Invalid,
    /// No credential of that name.
    NotFound,
    /// The credential exists but has no value (never entered, or dropped by a change).
    NoValue,
    /// The request's host is not one of the credential's hosts.
    HostNotAllowed,
    /// The store is locked (Secret Service) and unlocking it needs the user.
    Locked,
    /// The audit key for a log that has entries is not in the store.
    AuditKeyMissing,
    /// The store failed (the daemon went away, the kernel refused, a record is corrupt).
    Store,
}

/// Can a message of this kind hold a [`SecretValue`]? Written without a wildcard so that a new
/// kind must be decided here; the route-table test keeps every `true` kind off the ui and
/// gateway channels in both directions.
pub fn may_carry_secret(kind: Kind) -> bool {
    match kind {
        // Set carries a value in; Attached carries a header out.
        Kind::Secrets | Kind::SecretsReply => true,
        // The broker hands an attached header to the net-helper for one request.
        Kind::Net => true,
        // A third-party stdio server's secrets, for its sandbox's environment
        // (`UserCommand::pass_env` of its `Start`).
        Kind::Exec => true,
        Kind::Ping
        | Kind::Pong
        | Kind::Hello
        | Kind::Error
        | Kind::Doctor
        | Kind::DoctorReport
        | Kind::Ui
        | Kind::UiReply
        | Kind::ToolCall
        | Kind::ToolReply
        | Kind::Fs
        | Kind::FsReply
        | Kind::NetReply
        | Kind::ExecReply
        | Kind::Servers
        | Kind::ServersReply
        // A card's summary: session, tool, target, never an argument.
        | Kind::Notify
        | Kind::NotifyReply => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(scrub: &[&str]) -> CredentialHeader {
        CredentialHeader {
            credential: CredentialName::parse("api").unwrap(),
            host: "api.example.com".into(),
            name: "x-api-key".into(),
            value: SecretValue::from_slice(b"tok-123456"),
            scrub: scrub
                .iter()
                .map(|s| SecretValue::from_slice(s.as_bytes()))
                .collect(),
        }
    }

    #[test]
    fn names_are_checked() {
        assert!(CredentialName::parse("github-token_1.x").is_ok());
        for bad in ["", "-a", "a b", "a/b", "é", &"a".repeat(65)] {
            assert!(CredentialName::parse(bad).is_err(), "{bad:?}");
        }
        let e = postcard::to_stdvec(&"bad name".to_string()).unwrap();
        assert!(postcard::from_bytes::<CredentialName>(&e).is_err());
    }

    #[test]
    fn hosts_normalize_and_match_exactly() {
        let h = HostPattern::parse("API.Example.COM.").unwrap();
        assert_eq!(h.to_string(), "api.example.com");
        assert!(h.matches_str("api.example.com"));
        assert!(h.matches_str("API.example.com."));
        assert!(!h.matches_str("evil.api.example.com"));
        assert!(!h.matches_str("api.example.com.evil.net"));
        assert!(!h.matches_str("example.com"));
        let v6 = HostPattern::parse("[::1]").unwrap();
        assert_eq!(v6.to_string(), "::1");
        assert!(v6.matches_str("::1") && v6.matches_str("[0:0::1]"));
        let w = HostPattern::parse("*.example.com").unwrap();
        assert!(w.matches_str("a.example.com") && w.matches_str("b.a.example.com"));
        assert!(!w.matches_str("example.com") && !w.matches_str("aexample.com"));
        for bad in [
            "https://a.com",
            "a.com:443",
            "a.com/x",
            "bücher.de",
            "*",
            "*.com",
            "a.*.com",
            "",
            "a..b",
            "*.1.2.3.4",
        ] {
            assert!(HostPattern::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn header_names_refuse_framing_headers() {
        assert_eq!(
            HeaderName::parse("X-Api-Key").unwrap().as_str(),
            "x-api-key"
        );
        for bad in [
            "Host",
            "content-length",
            "Transfer-Encoding",
            "a b",
            "x:y",
            "",
        ] {
            assert!(HeaderName::parse(bad).is_err(), "{bad:?}");
        }
        assert!(BasicUser::parse("a:b").is_err());
    }

    #[test]
    fn values_are_checked_and_never_printed() {
        let v = SecretValue::from_slice(b"hunter2-secret");
        assert!(v.check_credential().is_ok());
        assert_eq!(format!("{v:?}"), "[redacted]");
        let h = header(&["hunter2-secret"]);
        let dbg = format!("{h:?}");
        assert!(
            !dbg.contains("tok-123456") && !dbg.contains("hunter2"),
            "{dbg}"
        );
        assert!(SecretValue::from_slice(b"short")
            .check_credential()
            .is_err());
        assert!(SecretValue::from_slice(b"line\nbreak")
            .check_credential()
            .is_err());
        assert!(SecretValue::from_slice(&[0xff; 10])
            .check_credential()
            .is_err());
        let req = SecretsRequest::Set {
            spec: CredentialSpec {
                name: CredentialName::parse("n").unwrap(),
                hosts: vec![HostPattern::parse("a.com").unwrap()],
                send_as: SendAs::Bearer,
            },
            value: Some(v.clone()),
        };
        assert!(!format!("{req:?}").contains("hunter2"));
        let back: SecretsRequest =
            postcard::from_bytes(&postcard::to_stdvec(&req).unwrap()).unwrap();
        assert_eq!(back, req);
    }

    #[test]
    fn scrubbing_replaces_every_exact_occurrence() {
        let h = header(&["tok-123456", "dG9rLTEyMzQ1Ng=="]);
        let mut body = b"a tok-123456 b tok-123456tok-123456 dG9rLTEyMzQ1Ng== tok-12345".to_vec();
        assert_eq!(h.scrub_bytes(&mut body), 4);
        let s = String::from_utf8(body).unwrap();
        assert!(!s.contains("tok-123456"), "{s}");
        assert!(s.ends_with("tok-12345"), "a near miss is left alone: {s}");
        let mut text = "é tok-123456 ü".to_string();
        assert_eq!(h.scrub_text(&mut text), 1);
        assert_eq!(text, format!("é {REDACTED} ü"));
        assert!(h.echoed_by("X-API-KEY", b"anything"));
        assert!(h.echoed_by("Authorization", b"x"));
        assert!(h.echoed_by("x-echo", b"you sent tok-123456"));
        assert!(!h.echoed_by("content-type", b"text/plain"));
    }

    #[test]
    fn no_secret_bearing_kind_travels_on_the_ui_or_gateway_channels() {
        use crate::route::{broker_may_send, may_send_to_broker};
        use crate::Role;
        let all = [
            Kind::Ping,
            Kind::Pong,
            Kind::Hello,
            Kind::Error,
            Kind::Doctor,
            Kind::DoctorReport,
            Kind::Ui,
            Kind::UiReply,
            Kind::ToolCall,
            Kind::ToolReply,
            Kind::Fs,
            Kind::FsReply,
            Kind::Net,
            Kind::NetReply,
            Kind::Exec,
            Kind::ExecReply,
            Kind::Secrets,
            Kind::SecretsReply,
            Kind::Servers,
            Kind::ServersReply,
            Kind::Notify,
            Kind::NotifyReply,
        ];
        let bearing: Vec<Kind> = all.into_iter().filter(|k| may_carry_secret(*k)).collect();
        assert_eq!(
            bearing,
            [Kind::Net, Kind::Exec, Kind::Secrets, Kind::SecretsReply]
        );
        for role in [Role::Ui, Role::Gateway, Role::Notifier] {
            for k in &bearing {
                assert!(!may_send_to_broker(role, *k), "{role} may send {k:?}");
                assert!(!broker_may_send(role, *k), "{role} may receive {k:?}");
            }
        }
        // Only the broker talks to the secrets-helper, and it hears only its own replies.
        assert!(broker_may_send(Role::Secrets, Kind::Secrets));
        for role in [Role::Fs, Role::Net, Role::Exec, Role::Ui, Role::Gateway] {
            assert!(!may_send_to_broker(role, Kind::SecretsReply), "{role}");
            assert!(!broker_may_send(role, Kind::SecretsReply), "{role}");
        }
    }

    #[test]
    fn spec_normalizes_hosts() {
        let spec = CredentialSpec {
            name: CredentialName::parse("n").unwrap(),
            hosts: vec![
                HostPattern::parse("b.com").unwrap(),
                HostPattern::parse("a.com").unwrap(),
                HostPattern::parse("B.com").unwrap(),
            ],
            send_as: SendAs::Bearer,
        }
        .normalized()
        .unwrap();
        assert_eq!(spec.hosts.len(), 2);
        let host = |h: &str| crate::host::Host::parse(h).unwrap();
        assert!(spec.allows_host(&host("a.com")) && !spec.allows_host(&host("c.com")));
        let empty = CredentialSpec {
            hosts: vec![],
            ..spec
        };
        assert!(empty.normalized().is_err());
    }

    #[test]
    fn stores_are_named_and_refused_on_other_systems() {
        for k in StoreKind::ALL {
            assert_eq!(StoreKind::from_name(k.as_str()), Some(k));
            assert_eq!(k.check_os(k.os()), Ok(()));
            let default = StoreKind::default_for(k.os()).unwrap();
            assert_eq!(default.check_os(k.os()), Ok(()));
        }
        assert_eq!(StoreKind::default_for("linux"), Some(StoreKind::Keyutils));
        assert_eq!(StoreKind::from_name("Keychain"), None);
        assert_eq!(
            StoreKind::Keychain.check_os("linux").unwrap_err(),
            "the keychain store exists only on macos, not on linux; on linux choose \"keyutils\" or \"secret-service\" in [secrets] store"
        );
        assert_eq!(
            StoreKind::Keyutils.check_os("windows").unwrap_err(),
            "the keyutils store exists only on linux, not on windows; on windows choose \"credential-manager\" in [secrets] store"
        );
        assert!(StoreKind::CredentialManager
            .check_os("freebsd")
            .unwrap_err()
            .ends_with("not on freebsd; gatehouse has no credential store for freebsd"));
    }
}
