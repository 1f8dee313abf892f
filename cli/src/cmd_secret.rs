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

use crate::private_helper::{PrivateHelper, PrivateSeal};
use crate::{fail, Global, EXIT_FAILURE};
use audit_store::{self as store, Chain};
use broker::secrets_link::{change_event, hosts_text, send_as_word};
use gatehouse_client::{Client, Dirs};
use ipc_schema::secrets::{
    BasicUser, CredentialInfo, CredentialName, CredentialSpec, HeaderName, HostPattern,
    SecretValue, SecretsReply, SecretsRequest, SendAs, Zeroizing, MAX_SECRET_LEN,
};
use ipc_schema::ui::{UiReply, UiRequest};
use ipc_schema::Body;
use std::io::Write;
use std::process::ExitCode;

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
/// the terminal with echo off. Read through a duplicate of stdin as a plain file (`read(2)`,
/// `ReadFile`) into a zeroized buffer, not through std's buffered stdin, so no copy is left
/// behind.
fn read_value(from_stdin: bool, name: &CredentialName) -> CmdResult<SecretValue> {
    use std::io::{IsTerminal, Read};
    let stdin = std::io::stdin();
    let terminal = stdin.is_terminal();
    if !from_stdin && !terminal {
        return Err("stdin is not a terminal: pass --stdin to read the value from it".into());
    }
    let mut input = std::fs::File::from(
        stdin_handle(&stdin)
            .try_clone_to_owned()
            .map_err(|e| format!("stdin: {e}"))?,
    );
    let _echo_off = if terminal && !from_stdin {
        // Echo off first, then the prompt: whatever is typed after the prompt is never shown.
        let off = echo_off(&stdin)?;
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
        let n = match input.read(&mut buf[len..]) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
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

#[cfg(unix)]
fn stdin_handle(stdin: &std::io::Stdin) -> std::os::fd::BorrowedFd<'_> {
    use std::os::fd::AsFd;
    stdin.as_fd()
}

#[cfg(windows)]
fn stdin_handle(stdin: &std::io::Stdin) -> std::os::windows::io::BorrowedHandle<'_> {
    use std::os::windows::io::AsHandle;
    stdin.as_handle()
}

/// Terminal echo (and signal keys, so that ^C cancels here and restores it) off until dropped.
#[cfg(unix)]
fn echo_off(stdin: &std::io::Stdin) -> CmdResult<EchoOff<'_>> {
    EchoOff::new(stdin_handle(stdin))
}

/// Console echo (and Ctrl-C processing, so that ^C cancels here and restores it) off until
/// dropped.
#[cfg(windows)]
fn echo_off(stdin: &std::io::Stdin) -> CmdResult<sandbox::windows::ConsoleEchoOff<'_>> {
    sandbox::windows::ConsoleEchoOff::new(stdin_handle(stdin)).map_err(|e| e.to_string())
}

#[cfg(unix)]
struct EchoOff<'a> {
    fd: std::os::fd::BorrowedFd<'a>,
    saved: nix::sys::termios::Termios,
}

#[cfg(unix)]
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

#[cfg(unix)]
impl Drop for EchoOff<'_> {
    fn drop(&mut self) {
        let _ = nix::sys::termios::tcsetattr(
            self.fd,
            nix::sys::termios::SetArg::TCSAFLUSH,
            &self.saved,
        );
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
        "hosts": i.spec.hosts.iter().map(|h| h.to_string()).collect::<Vec<_>>(),
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

/// How this command's change reaches the audit log.
enum Recorder<'a> {
    /// A broker runs: it writes the row.
    Broker(Client),
    /// None runs: this command holds its lock, and has checked the log's sealed head and key,
    /// until the row is written.
    Direct {
        /// The broker's lock file, locked (released when closed).
        _lock: std::fs::File,
        conn: rusqlite::Connection,
        // Boxed: the chain is far larger than the client of the other variant.
        chain: Box<Chain<&'a PrivateSeal>>,
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
            match file.try_lock() {
                Ok(()) => break file,
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
        let chain = Box::new(chain);
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
