//! `gatehouse secret set|delete|list|status`: write-only credentials.
//!
//! These commands do not go through the broker: a value must never travel on the console's
//! channel (the route table keeps every secret-bearing message off it). Instead the command
//! starts its own secrets-helper, exactly as the broker starts one (locked down, the same store
//! and namespace from the same config), and talks to it over a private socket pair. The value
//! goes from this process straight to that helper and into the store; nothing can read it back.
//!
//! The store comes from `config.toml`:
//!
//! ```toml
//! [secrets]
//! store = "keyutils"        # or "secret-service"
//! ```
//!
//! Without that setting the store is `keyutils` (`doctor` says so, and that it does not survive
//! a reboot). A configured store that does not work is an error, never a reason to use another.
//!
//! Every change (`set`, `delete`) is written to the instance's audit log, chained and MACed
//! like every other row: the credential's name, hosts, how it is sent and whether a value is
//! stored, never the value. When a broker runs it owns the log, so the command asks it over the
//! ui socket ([`UiRequest::CredentialChanged`]) and the broker writes the row from what its own
//! secrets-helper says. When none runs, the command takes the broker's lock file (so none can
//! start meanwhile) and appends the row itself with the store code, the MACs coming from the
//! same private helper. Which of the two, and for the second that the log's sealed head checks
//! out and its key is there, is settled before the credential is touched.

use crate::client::Client;
use crate::dirs::Dirs;
use crate::fronts::Replier;
use crate::head_key::PrivateSeal;
use crate::store::chain::{AuditEvent, AuditKind};
use crate::store::{self, Chain};
use crate::{fail, Ctx, Global, EXIT_FAILURE};
use ipc_schema::codec::{self, HEADER_LEN, MAX_FRAME};
use ipc_schema::secrets::{
    BasicUser, CredentialInfo, CredentialName, CredentialSpec, HeaderName, HostPattern,
    SecretValue, SecretsReply, SecretsRequest, SendAs, StoreKind, Zeroizing, MAX_SECRET_LEN,
};
use ipc_schema::ui::{UiReply, UiRequest};
use ipc_schema::{Body, Envelope, Role};
use ipc_schema::{ErrorCode, ErrorReply};
use std::ffi::OsString;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::rc::Rc;

#[derive(clap::Subcommand)]
pub enum SecretCmd {
    /// Store a credential for the agent's http_request tool. The value is read from the
    /// terminal without echo, or from stdin with --stdin, and can never be read back.
    Set(SetArgs),
    /// Delete a credential.
    Delete { name: String },
    /// Names, hosts, how each is sent, and whether a value is stored; never values.
    List,
    /// Which credential store is configured, and whether it works.
    Status,
}

#[derive(clap::Args)]
pub struct SetArgs {
    /// The credential's name (letters, digits, '.', '_', '-').
    name: String,
    /// A host it may be sent to (exact name or address; `*.example.com` for its subdomains).
    /// Repeat for several.
    #[arg(long = "host", required = true, value_name = "HOST")]
    hosts: Vec<String>,
    /// Send it as this header (e.g. X-Api-Key) instead of `Authorization: Bearer`.
    #[arg(long, value_name = "NAME", conflicts_with = "basic")]
    header: Option<String>,
    /// Send it as the password of basic auth for this user.
    #[arg(long, value_name = "USER")]
    basic: Option<String>,
    /// Read the value from stdin (one trailing line break is removed).
    #[arg(long, conflicts_with = "no_value")]
    stdin: bool,
    /// Change only the hosts or how it is sent; a stored value is then dropped until entered
    /// again.
    #[arg(long)]
    no_value: bool,
}

/// Errors of this command, each a sentence for the user.
type CmdResult<T> = Result<T, String>;

/// The `[secrets]` table of config.toml.
#[derive(serde::Deserialize, Default)]
struct ConfigFile {
    #[serde(default)]
    secrets: SecretsConfig,
}

#[derive(serde::Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct SecretsConfig {
    store: Option<String>,
}

/// The configured store: `[secrets] store` in `config.toml`, `keyutils` when absent.
pub fn configured_store(config_dir: &Path) -> CmdResult<StoreKind> {
    let os = std::env::consts::OS;
    let path = config_dir.join("config.toml");
    let default = || {
        StoreKind::default_for(os)
            .ok_or_else(|| format!("gatehouse has no credential store for {os}"))
    };
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return default(),
        Err(e) => return Err(format!("{}: {e}", path.display())),
    };
    let cfg: ConfigFile = toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    let Some(s) = cfg.secrets.store.as_deref() else {
        return default();
    };
    let kind = StoreKind::from_name(s).ok_or_else(|| {
        format!(
            "{}: [secrets] store = {s:?} is not a store; use {}",
            path.display(),
            StoreKind::choices_on(os)
        )
    })?;
    // Another OS's store is refused, never swapped for this one's.
    kind.check_os(os)
        .map_err(|e| format!("{}: [secrets] store = {s:?}: {e}", path.display()))?;
    Ok(kind)
}

/// The namespace of this gatehouse instance's credentials: `default` for the user's own
/// instance, a name derived from the data directory for a `--data-dir` instance (so tests and
/// demos never see or touch the user's credentials).
pub fn namespace(dirs: &Dirs) -> String {
    use sha2::{Digest, Sha256};
    let canon = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    if let Ok(user) = Dirs::from_env() {
        if canon(&user.data) == canon(&dirs.data) {
            return "default".into();
        }
    }
    let digest = Sha256::digest(canon(&dirs.data).as_os_str().as_encoded_bytes());
    format!("d-{}", &hex::encode(digest)[..16])
}

/// The secrets-helper's arguments for this instance (the broker passes the same ones to its
/// own helper): store, namespace, and for the Secret Service the session bus address.
pub fn helper_args(dirs: &Dirs) -> CmdResult<Vec<OsString>> {
    let store = configured_store(&dirs.config)?;
    let mut args: Vec<OsString> = vec![
        "--store".into(),
        store.as_str().into(),
        "--namespace".into(),
        namespace(dirs).into(),
    ];
    if store == StoreKind::SecretService {
        let address = match std::env::var_os("DBUS_SESSION_BUS_ADDRESS") {
            Some(a) if !a.is_empty() => a,
            // Where systemd's user session puts the bus when the variable is not exported.
            _ => match std::env::var_os("XDG_RUNTIME_DIR") {
                Some(r) if Path::new(&r).join("bus").exists() => {
                    let mut a = OsString::from("unix:path=");
                    a.push(Path::new(&r).join("bus"));
                    a
                }
                _ => {
                    return Err("the Secret Service store is configured ([secrets] store = \"secret-service\"), but there is no session bus: DBUS_SESSION_BUS_ADDRESS is not set and $XDG_RUNTIME_DIR/bus does not exist".into())
                }
            },
        };
        args.push("--dbus-address".into());
        args.push(address);
    }
    Ok(args)
}

/// A secrets-helper started by this command, on a private socket pair.
pub struct PrivateHelper {
    sock: UnixStream,
    child: std::process::Child,
    next_id: u64,
}

impl PrivateHelper {
    /// Starts the secrets-helper that lies beside this binary, with this instance's arguments,
    /// and waits for its hello.
    pub fn start(dirs: &Dirs) -> CmdResult<PrivateHelper> {
        let args = helper_args(dirs)?;
        let program: PathBuf = std::env::current_exe()
            .ok()
            .and_then(|e| e.parent().map(|d| d.join(Role::Secrets.name())))
            .ok_or("cannot find the directory of this binary")?;
        let (ours, theirs) = UnixStream::pair().map_err(|e| format!("socketpair: {e}"))?;
        let spawned = sandbox::process::spawn_helper(&program, &args, theirs.into(), &[])
            .map_err(|e| format!("cannot start {}: {e}", program.display()))?;
        ours.set_read_timeout(Some(std::time::Duration::from_secs(60)))
            .map_err(|e| e.to_string())?;
        let mut h = PrivateHelper {
            sock: ours,
            child: spawned.child,
            next_id: 1,
        };
        match h.recv()? {
            Envelope {
                body: Body::Hello(hello),
                ..
            } if hello.role == Role::Secrets => Ok(h),
            other => Err(format!(
                "the secrets-helper did not say hello (it sent {:?})",
                other.body.kind()
            )),
        }
    }

    fn recv(&mut self) -> CmdResult<Envelope> {
        let closed = || "the secrets-helper stopped (its reason is on stderr above)".to_string();
        let mut header = [0u8; HEADER_LEN];
        self.sock.read_exact(&mut header).map_err(|_| closed())?;
        let len = codec::parse_header(header, MAX_FRAME).map_err(|e| e.to_string())?;
        let mut payload = Zeroizing::new(vec![0u8; len]);
        self.sock.read_exact(&mut payload).map_err(|_| closed())?;
        codec::decode_payload(&payload).map_err(|e| e.to_string())
    }

    /// Sends one request and returns its reply. Frames are built and read in zeroized buffers.
    pub fn request(&mut self, req: SecretsRequest) -> CmdResult<SecretsReply> {
        let id = self.next_id;
        self.next_id += 1;
        let mut buf = Zeroizing::new(Vec::with_capacity(64 * 1024));
        codec::encode_into(&Envelope::new(id, Body::Secrets(req)), &mut buf)
            .map_err(|e| e.to_string())?;
        self.sock
            .write_all(&buf)
            .map_err(|e| format!("writing to the secrets-helper: {e}"))?;
        match self.recv()? {
            Envelope {
                id: got,
                body: Body::SecretsReply(r),
                ..
            } if got == id => Ok(r),
            other => Err(format!("unexpected answer {:?}", other.body.kind())),
        }
    }
}

impl Drop for PrivateHelper {
    fn drop(&mut self) {
        // Closing the channel ends the helper; wait so that no zombie is left.
        let _ = self.sock.shutdown(std::net::Shutdown::Both);
        let _ = self.child.wait();
    }
}

fn parse_spec(a: &SetArgs) -> CmdResult<CredentialSpec> {
    let name = CredentialName::parse(&a.name).map_err(|e| e.0)?;
    let hosts = a
        .hosts
        .iter()
        .map(|h| HostPattern::parse(h).map_err(|e| e.0))
        .collect::<CmdResult<Vec<_>>>()?;
    let send_as = match (&a.header, &a.basic) {
        (Some(h), _) => SendAs::Header(HeaderName::parse(h).map_err(|e| e.0)?),
        (_, Some(u)) => SendAs::Basic(BasicUser::parse(u).map_err(|e| e.0)?),
        _ => SendAs::Bearer,
    };
    CredentialSpec {
        name,
        hosts,
        send_as,
    }
    .normalized()
    .map_err(|e| e.0)
}

/// Reads the value: from stdin (`--stdin`, up to EOF, one trailing line break removed) or from
/// the terminal with echo off. Read with `read(2)` into a zeroized buffer, not through std's
/// buffered stdin, so no copy is left behind.
fn read_value(from_stdin: bool, name: &CredentialName) -> CmdResult<SecretValue> {
    use std::io::IsTerminal;
    use std::os::fd::AsFd;
    let stdin = std::io::stdin();
    let fd = stdin.as_fd();
    let terminal = stdin.is_terminal();
    if !from_stdin && !terminal {
        return Err("stdin is not a terminal: pass --stdin to read the value from it".into());
    }
    let _echo_off = if terminal && !from_stdin {
        // Echo off first, then the prompt: whatever is typed after the prompt is never shown.
        let off = EchoOff::new(fd)?;
        eprint!("value for credential {name} (input hidden): ");
        let _ = std::io::stderr().flush();
        Some(off)
    } else {
        None
    };
    let mut buf = Zeroizing::new(vec![0u8; MAX_SECRET_LEN + 3]);
    let mut len = 0;
    loop {
        if len == buf.len() {
            return Err(format!("the value is longer than {MAX_SECRET_LEN} bytes"));
        }
        let n = match nix::unistd::read(fd, &mut buf[len..]) {
            Ok(n) => n,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(format!("reading the value: {e}")),
        };
        if n == 0 {
            break;
        }
        if _echo_off.is_some() {
            if buf[len..len + n].contains(&3) {
                eprintln!();
                return Err("cancelled".into());
            }
            if buf[len..len + n].contains(&b'\n') {
                len += n;
                break;
            }
        }
        len += n;
    }
    if _echo_off.is_some() {
        eprintln!();
    }
    let mut end = len;
    if buf[..end].ends_with(b"\n") {
        end -= 1;
        if buf[..end].ends_with(b"\r") {
            end -= 1;
        }
    }
    if _echo_off.is_some() {
        // A terminal line ends at the first line break.
        if let Some(nl) = buf[..end].iter().position(|&b| b == b'\n') {
            end = nl;
        }
    }
    if end == 0 {
        return Err("no value was given".into());
    }
    let value = SecretValue::from_slice(&buf[..end]);
    value.check_credential().map_err(|e| e.0)?;
    Ok(value)
}

/// Terminal echo (and signal keys, so that ^C cancels here and restores it) off until dropped.
struct EchoOff<'a> {
    fd: std::os::fd::BorrowedFd<'a>,
    saved: nix::sys::termios::Termios,
}

impl<'a> EchoOff<'a> {
    fn new(fd: std::os::fd::BorrowedFd<'a>) -> CmdResult<EchoOff<'a>> {
        use nix::sys::termios::{tcgetattr, tcsetattr, LocalFlags, SetArg};
        let saved = tcgetattr(fd).map_err(|e| format!("terminal: {e}"))?;
        let mut quiet = saved.clone();
        quiet
            .local_flags
            .remove(LocalFlags::ECHO | LocalFlags::ISIG);
        quiet.local_flags.insert(LocalFlags::ICANON);
        tcsetattr(fd, SetArg::TCSAFLUSH, &quiet).map_err(|e| format!("terminal: {e}"))?;
        Ok(EchoOff { fd, saved })
    }
}

impl Drop for EchoOff<'_> {
    fn drop(&mut self) {
        let _ = nix::sys::termios::tcsetattr(
            self.fd,
            nix::sys::termios::SetArg::TCSAFLUSH,
            &self.saved,
        );
    }
}

fn hosts_text(spec: &CredentialSpec) -> String {
    spec.hosts
        .iter()
        .map(|h| h.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

fn send_as_word(s: &SendAs) -> String {
    match s {
        SendAs::Bearer => "bearer".into(),
        SendAs::Header(h) => format!("header {}", h.as_str()),
        SendAs::Basic(u) => format!("basic user {}", u.as_str()),
    }
}

fn info_json(i: &CredentialInfo) -> serde_json::Value {
    let (how, header, user) = match &i.spec.send_as {
        SendAs::Bearer => ("bearer", None, None),
        SendAs::Header(h) => ("header", Some(h.as_str()), None),
        SendAs::Basic(u) => ("basic", None, Some(u.as_str())),
    };
    serde_json::json!({
        "name": i.spec.name.as_str(),
        "hosts": i.spec.hosts.iter().map(|h| h.as_str()).collect::<Vec<_>>(),
        "send_as": how,
        "header": header,
        "user": user,
        "present": i.present,
    })
}

fn failure(r: SecretsReply) -> String {
    match r {
        SecretsReply::Failed(e) => e.message,
        other => format!("unexpected answer from the secrets-helper: {other:?}"),
    }
}

/// The audit row of a change to credential `name`, from what the store says now (`None`: it
/// no longer exists). Never a value: [`CredentialInfo`] holds none.
pub fn change_event(name: &CredentialName, now: Option<&CredentialInfo>) -> AuditEvent {
    let ev = AuditEvent::new(
        AuditKind::Credential,
        "secret-cli",
        if now.is_some() { "saved" } else { "deleted" },
    )
    .target(name.as_str());
    match now {
        None => ev.detail("the credential and any stored value were removed"),
        Some(i) => ev.detail(format!(
            "hosts: {}; sent as: {}; value: {}",
            hosts_text(&i.spec),
            send_as_word(&i.spec.send_as),
            if i.present { "stored" } else { "not stored" }
        )),
    }
}

/// How this command's change reaches the audit log.
enum Recorder<'a> {
    /// A broker runs: it writes the row.
    Broker(Client),
    /// None runs: this command holds its lock, and has checked the log's sealed head and key,
    /// until the row is written.
    Direct {
        _lock: nix::fcntl::Flock<std::fs::File>,
        conn: rusqlite::Connection,
        chain: Chain<&'a PrivateSeal>,
    },
}

impl<'a> Recorder<'a> {
    /// Finds out which, and for a log written here checks it as a starting broker would,
    /// before anything is changed.
    fn prepare(dirs: &Dirs, seal: &'a PrivateSeal) -> CmdResult<Recorder<'a>> {
        dirs.ensure().map_err(|e| e.to_string())?;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
        let lock = loop {
            if let Ok(c) = Client::connect(&dirs.ui_socket()) {
                return Ok(Recorder::Broker(c));
            }
            let file = dirs.open_lock_file()?;
            match nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock) {
                Ok(l) => break l,
                // A broker holds the lock but does not answer yet (it is starting).
                Err(_) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(std::time::Duration::from_millis(50))
                }
                Err(_) => {
                    return Err(format!(
                        "a broker holds {} but does not answer on {}",
                        dirs.lock_file().display(),
                        dirs.ui_socket().display()
                    ))
                }
            }
        };
        let conn = store::open_rw(&store::db_path(&dirs.data)).map_err(|e| e.to_string())?;
        let instance = store::instance_id(&conn).map_err(|e| e.to_string())?;
        let empty = store::audit_is_empty(&conn).map_err(|e| e.to_string())?;
        seal.open_key(&instance, empty)
            .map_err(|e| format!("the audit log cannot be sealed: {e}"))?;
        let chain = Chain::load(&conn, seal, instance, false).map_err(|e| e.to_string())?;
        Ok(Recorder::Direct {
            _lock: lock,
            conn,
            chain,
        })
    }

    /// Writes the row of the change just made; its entry number.
    fn record(self, seal: &PrivateSeal, name: &CredentialName) -> CmdResult<u64> {
        let now = match seal.request(SecretsRequest::Has { name: name.clone() })? {
            SecretsReply::Credential(now) => now,
            other => return Err(failure(other)),
        };
        match self {
            Recorder::Direct {
                _lock,
                mut conn,
                mut chain,
            } => {
                let tx = conn.transaction().map_err(|e| e.to_string())?;
                chain
                    .append(&tx, &change_event(name, now.as_ref()), store::now_ms())
                    .map_err(|e| e.to_string())?;
                chain.seal(&tx).map_err(|e| e.to_string())?;
                tx.commit().map_err(|e| e.to_string())?;
                Ok(chain.seq as u64)
            }
            // The broker asks its own helper; this one's answer only says what was done.
            Recorder::Broker(mut c) => {
                let req = UiRequest::CredentialChanged {
                    name: name.clone(),
                    deleted: now.is_none(),
                };
                match c.request(Body::Ui(req)).map_err(|e| e.to_string())? {
                    Body::UiReply(UiReply::CredentialChangeRecorded { seq }) => Ok(seq),
                    Body::Error(e) => Err(e.message),
                    other => Err(format!("unexpected reply {:?}", other.kind())),
                }
            }
        }
    }
}

/// The broker's side of [`UiRequest::CredentialChanged`]: asks its own secrets-helper what the
/// credential is now, refuses a claim the store contradicts, and writes the row (sealed)
/// before answering with its entry number.
pub fn record_for_cli(
    ctx: &Rc<Ctx>,
    id: u64,
    name: CredentialName,
    deleted: bool,
    reply: &Replier,
) {
    let (ctx, reply) = (ctx.clone(), reply.clone());
    tokio::task::spawn_local(async move {
        let error = |code, m: String| Body::Error(ErrorReply::new(code, m));
        let Some(slot) = ctx.helpers.slot(Role::Secrets).cloned() else {
            return reply.send(id, error(ErrorCode::Internal, "no secrets-helper".into()));
        };
        let now = match slot
            .call(Body::Secrets(SecretsRequest::Has { name: name.clone() }))
            .await
        {
            Ok(Body::SecretsReply(SecretsReply::Credential(now))) => now,
            Ok(Body::SecretsReply(SecretsReply::Failed(e))) => {
                return reply.send(id, error(ErrorCode::Internal, e.message))
            }
            Ok(other) => {
                return reply.send(
                    id,
                    error(
                        ErrorCode::Internal,
                        format!("unexpected answer {:?}", other.kind()),
                    ),
                )
            }
            Err(e) => return reply.send(id, error(ErrorCode::Internal, e.to_string())),
        };
        if now.is_none() != deleted {
            return reply.send(
                id,
                error(
                    ErrorCode::Invalid,
                    format!(
                        "credential {name} {} in the store; not recorded",
                        if deleted {
                            "still exists"
                        } else {
                            "does not exist"
                        }
                    ),
                ),
            );
        }
        let ev = change_event(&name, now.as_ref());
        let target = name.as_str().to_string();
        let store = &ctx.gate.store;
        let written = match store
            .txn(move |_, audit| {
                audit.push(ev);
                Ok(())
            })
            .await
        {
            Ok(()) => {
                store
                    .read(move |c| {
                        c.query_row(
                            "SELECT max(seq) FROM audit WHERE kind = 'credential' AND target = ?1",
                            [target],
                            |r| r.get::<_, i64>(0),
                        )
                    })
                    .await
            }
            Err(e) => Err(e),
        };
        reply.send(
            id,
            match written {
                Ok(seq) => Body::UiReply(UiReply::CredentialChangeRecorded { seq: seq as u64 }),
                Err(e) => error(ErrorCode::Internal, e.to_string()),
            },
        );
    });
}

pub fn run(g: &Global, cmd: SecretCmd) -> ExitCode {
    match run_inner(g, cmd) {
        Ok(code) => code,
        Err(e) => fail(&e),
    }
}

fn run_inner(g: &Global, cmd: SecretCmd) -> CmdResult<ExitCode> {
    match cmd {
        SecretCmd::Set(a) => {
            let spec = parse_spec(&a)?;
            let value = if a.no_value {
                None
            } else {
                Some(read_value(a.stdin, &spec.name)?)
            };
            let h = PrivateSeal::new(PrivateHelper::start(&g.dirs)?);
            let recorder =
                Recorder::prepare(&g.dirs, &h).map_err(|e| format!("nothing was changed: {e}"))?;
            let name = spec.name.clone();
            match h.request(SecretsRequest::Set { spec, value })? {
                SecretsReply::Saved {
                    info,
                    value_dropped,
                } => {
                    let seq = recorder.record(&h, &name).map_err(|e| {
                        format!("credential {name} was saved, but the change could not be written to the audit log: {e}")
                    })?;
                    if g.json {
                        let mut j = info_json(&info);
                        j["value_dropped"] = value_dropped.into();
                        j["audit_entry"] = seq.into();
                        println!("{j}");
                    } else {
                        println!(
                            "credential {} saved: sent to {} as {}; {}",
                            info.spec.name,
                            hosts_text(&info.spec),
                            send_as_word(&info.spec.send_as),
                            match (info.present, value_dropped) {
                                (true, _) => "value stored",
                                (false, true) => "its value was dropped because the hosts or the way it is sent changed; enter it again with `gatehouse secret set`",
                                (false, false) => "no value stored yet",
                            }
                        );
                    }
                    Ok(ExitCode::SUCCESS)
                }
                other => Err(failure(other)),
            }
        }
        SecretCmd::Delete { name } => {
            let name = CredentialName::parse(&name).map_err(|e| e.0)?;
            let h = PrivateSeal::new(PrivateHelper::start(&g.dirs)?);
            let recorder =
                Recorder::prepare(&g.dirs, &h).map_err(|e| format!("nothing was changed: {e}"))?;
            match h.request(SecretsRequest::Delete { name: name.clone() })? {
                SecretsReply::Deleted { existed } => {
                    // Deleting nothing changes nothing: no row.
                    if existed {
                        recorder.record(&h, &name).map_err(|e| {
                            format!("credential {name} was deleted, but the change could not be written to the audit log: {e}")
                        })?;
                    }
                    if g.json {
                        println!(
                            "{}",
                            serde_json::json!({"name": name.as_str(), "deleted": existed})
                        );
                    } else if existed {
                        println!("credential {name} deleted");
                    } else {
                        eprintln!("gatehouse: there is no credential named {name}");
                    }
                    Ok(if existed {
                        ExitCode::SUCCESS
                    } else {
                        ExitCode::from(EXIT_FAILURE)
                    })
                }
                other => Err(failure(other)),
            }
        }
        SecretCmd::List => {
            let mut h = PrivateHelper::start(&g.dirs)?;
            let list = match h.request(SecretsRequest::List)? {
                SecretsReply::Credentials(l) => l,
                other => return Err(failure(other)),
            };
            if g.json {
                let items: Vec<_> = list.iter().map(info_json).collect();
                println!("{}", serde_json::Value::Array(items));
                return Ok(ExitCode::SUCCESS);
            }
            if list.is_empty() {
                println!("no credentials (add one with `gatehouse secret set NAME --host HOST`)");
            }
            for i in &list {
                println!(
                    "{}\thosts: {}\tsent as: {}\tvalue: {}",
                    i.spec.name,
                    hosts_text(&i.spec),
                    send_as_word(&i.spec.send_as),
                    if i.present {
                        "stored"
                    } else {
                        "MISSING (enter it with `gatehouse secret set`)"
                    }
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        SecretCmd::Status => {
            let mut h = PrivateHelper::start(&g.dirs)?;
            match h.request(SecretsRequest::Status)? {
                SecretsReply::Status(s) => {
                    if g.json {
                        println!(
                            "{}",
                            serde_json::json!({
                                "store": s.kind.as_str(),
                                "location": s.location,
                                "namespace": s.namespace,
                                "survives_reboot": s.survives_reboot,
                                "problem": s.problem,
                            })
                        );
                    } else {
                        println!("{}", s.doctor_line());
                    }
                    Ok(if s.problem.is_none() {
                        ExitCode::SUCCESS
                    } else {
                        ExitCode::from(EXIT_FAILURE)
                    })
                }
                other => Err(failure(other)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_chooses_the_store_explicitly() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(configured_store(d.path()).unwrap(), StoreKind::Keyutils);
        let write = |t: &str| std::fs::write(d.path().join("config.toml"), t).unwrap();
        write("[secrets]\nstore = \"secret-service\"\n");
        assert_eq!(
            configured_store(d.path()).unwrap(),
            StoreKind::SecretService
        );
        write("[other]\nx = 1\n");
        assert_eq!(configured_store(d.path()).unwrap(), StoreKind::Keyutils);
        write("[secrets]\nstore = \"kwallet\"\n");
        let e = configured_store(d.path()).unwrap_err();
        assert!(e.contains("use \"keyutils\" or \"secret-service\""), "{e}");
        write("[secrets]\nstor = \"keyutils\"\n");
        assert!(
            configured_store(d.path()).is_err(),
            "a misspelt key is an error"
        );
    }

    #[test]
    fn private_instances_get_their_own_namespace() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        let (na, nb) = (
            namespace(&Dirs::under(a.path())),
            namespace(&Dirs::under(b.path())),
        );
        assert!(na.starts_with("d-") && na.len() == 18, "{na}");
        assert_ne!(na, nb);
        assert_eq!(na, namespace(&Dirs::under(a.path())));
    }
}
