//! A minimal blocking D-Bus client: one connection to the session bus, opened and authenticated
//! before lockdown, then used with plain reads and writes on the already connected socket.
//!
//! Why not zbus: it starts threads (or wants an async runtime) and connects by address itself,
//! but the helper must be single-threaded when it locks down and can create no socket after.
//! This client needs only `read`/`write` after lockdown (the base seccomp allowlist), no threads,
//! no file descriptor passing (UNIX_FD is never negotiated), and a receive timeout set on the
//! socket before lockdown instead of `poll`.

pub mod wire;

use std::io::{Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::time::Duration;
use wire::{Reader, Value, WireError, Writer};
use zeroize::Zeroizing;

/// The largest message accepted from the bus.
const MAX_MESSAGE: usize = 4 << 20;

const METHOD_CALL: u8 = 1;
const METHOD_RETURN: u8 = 2;
const ERROR: u8 = 3;
/// The bus itself: its name and interface.
const DBUS: &str = "org.freedesktop.DBus";

#[derive(Debug, thiserror::Error)]
pub enum BusError {
    #[error("D-Bus address {0:?} has no unix:path= or unix:abstract= entry this client can use")]
    Address(String),
    #[error("cannot connect to the D-Bus session bus at {address}: {source}")]
    Connect {
        address: String,
        source: std::io::Error,
    },
    #[error("the D-Bus session bus refused authentication: {0}")]
    Auth(String),
    #[error("D-Bus connection: {0}")]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Wire(#[from] WireError),
    #[error("D-Bus protocol: {0}")]
    Protocol(String),
    /// The other side answered with a D-Bus error.
    #[error("{name}: {message}")]
    Remote { name: String, message: String },
}

impl BusError {
    /// Errors after which the connection cannot be trusted to be in step any more.
    pub fn is_fatal(&self) -> bool {
        !matches!(self, BusError::Remote { .. })
    }
}

/// Where to connect, from a D-Bus address (`unix:path=/run/user/1000/bus`,
/// `unix:abstract=/tmp/dbus-XXXX,guid=...`; several may be given, separated by `;`).
#[derive(Debug, Clone, PartialEq)]
pub enum BusAddress {
    Path(std::path::PathBuf),
    Abstract(Vec<u8>),
}

fn unescape(v: &str) -> Option<Vec<u8>> {
    let b = v.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    Some(out)
}

/// The usable entries of a D-Bus address, in order.
pub fn parse_address(address: &str) -> Result<Vec<BusAddress>, BusError> {
    let mut out = Vec::new();
    for entry in address.split(';').filter(|e| !e.is_empty()) {
        let Some(params) = entry.strip_prefix("unix:") else {
            continue;
        };
        for kv in params.split(',') {
            let Some((k, v)) = kv.split_once('=') else {
                continue;
            };
            let Some(v) = unescape(v) else {
                return Err(BusError::Address(address.to_string()));
            };
            match k {
                "path" => {
                    use std::os::unix::ffi::OsStringExt;
                    out.push(BusAddress::Path(std::ffi::OsString::from_vec(v).into()))
                }
                "abstract" => out.push(BusAddress::Abstract(v)),
                _ => {}
            }
        }
    }
    if out.is_empty() {
        return Err(BusError::Address(address.to_string()));
    }
    Ok(out)
}

fn connect_one(a: &BusAddress) -> std::io::Result<UnixStream> {
    match a {
        BusAddress::Path(p) => UnixStream::connect(p),
        BusAddress::Abstract(name) => {
            use std::os::linux::net::SocketAddrExt;
            let addr = std::os::unix::net::SocketAddr::from_abstract_name(name)?;
            UnixStream::connect_addr(&addr)
        }
    }
}

/// One message read from the bus (header fields this client uses, and the body).
#[derive(Debug)]
pub struct Message {
    pub kind: u8,
    pub reply_serial: Option<u32>,
    pub error_name: Option<String>,
    pub body: Vec<Value>,
}

/// An authenticated connection to the session bus.
pub struct Bus {
    stream: UnixStream,
    serial: u32,
    /// The address given (shown in `doctor`).
    pub address: String,
}

impl Bus {
    /// Connects, authenticates (EXTERNAL, by uid) and says Hello. Must run before lockdown:
    /// it creates a socket and sets the receive timeout every later call relies on.
    pub fn connect(address: &str, timeout: Duration) -> Result<Bus, BusError> {
        // The first entry that connects; the last error if none does.
        let mut stream = Err(std::io::Error::other("no address"));
        for a in parse_address(address)? {
            stream = connect_one(&a);
            if stream.is_ok() {
                break;
            }
        }
        let stream = stream.map_err(|source| BusError::Connect {
            address: address.to_string(),
            source,
        })?;
        stream.set_read_timeout(Some(timeout))?;
        stream.set_write_timeout(Some(timeout))?;
        let mut bus = Bus {
            stream,
            serial: 0,
            address: address.to_string(),
        };
        bus.authenticate(nix::unistd::getuid().as_raw())?;
        let reply = bus.call(DBUS, "/org/freedesktop/DBus", DBUS, "Hello", &[])?;
        // Our unique name on the bus (`:1.42`): nothing uses it, but a bus must give one.
        if reply.first().and_then(Value::as_str).is_none() {
            return Err(BusError::Protocol("Hello returned no name".into()));
        }
        Ok(bus)
    }

    fn authenticate(&mut self, uid: u32) -> Result<(), BusError> {
        let uid_hex = hex::encode(uid.to_string());
        self.stream
            .write_all(format!("\0AUTH EXTERNAL {uid_hex}\r\n").as_bytes())?;
        let line = self.read_line()?;
        if !line.starts_with("OK ") {
            return Err(BusError::Auth(line));
        }
        self.stream.write_all(b"BEGIN\r\n")?;
        Ok(())
    }

    /// One SASL line, read a byte at a time so nothing after it is consumed.
    fn read_line(&mut self) -> Result<String, BusError> {
        let mut line = Vec::new();
        let mut b = [0u8; 1];
        while !line.ends_with(b"\r\n") {
            if line.len() > 512 {
                return Err(BusError::Auth("answer line too long".into()));
            }
            if self.stream.read(&mut b)? == 0 {
                return Err(BusError::Auth("connection closed".into()));
            }
            line.push(b[0]);
        }
        line.truncate(line.len() - 2);
        Ok(String::from_utf8_lossy(&line).into_owned())
    }

    pub fn fd(&self) -> RawFd {
        self.stream.as_raw_fd()
    }

    /// Calls a method and waits for its reply; signals and other traffic are skipped.
    pub fn call(
        &mut self,
        destination: &str,
        path: &str,
        interface: &str,
        member: &str,
        args: &[Value],
    ) -> Result<Vec<Value>, BusError> {
        self.serial = self.serial.wrapping_add(1).max(1);
        let serial = self.serial;
        let msg = encode_call(serial, destination, path, interface, member, args);
        self.stream.write_all(&msg)?;
        loop {
            let m = self.read_message()?;
            if m.reply_serial != Some(serial) {
                continue;
            }
            return match m.kind {
                METHOD_RETURN => Ok(m.body),
                ERROR => Err(BusError::Remote {
                    name: m.error_name.unwrap_or_else(|| "unnamed error".into()),
                    message: m
                        .body
                        .first()
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string(),
                }),
                k => Err(BusError::Protocol(format!(
                    "message type {k} carries a reply serial"
                ))),
            };
        }
    }

    fn read_message(&mut self) -> Result<Message, BusError> {
        let mut fixed = [0u8; 16];
        self.stream.read_exact(&mut fixed)?;
        let big = match fixed[0] {
            b'l' => false,
            b'B' => true,
            e => return Err(BusError::Protocol(format!("endianness byte {e}"))),
        };
        if fixed[3] != 1 {
            return Err(BusError::Protocol(format!("protocol version {}", fixed[3])));
        }
        let mut r = Reader::new(&fixed, big);
        r.pos = 4;
        let body_len = r.u32()? as usize;
        r.pos = 12;
        let fields_len = r.u32()? as usize;
        let header_len = (16 + fields_len).div_ceil(8) * 8;
        if header_len + body_len > MAX_MESSAGE {
            return Err(BusError::Protocol(format!(
                "a {} byte message (limit {MAX_MESSAGE})",
                header_len + body_len
            )));
        }
        let mut buf = Zeroizing::new(vec![0u8; header_len + body_len]);
        buf[..16].copy_from_slice(&fixed);
        self.stream.read_exact(&mut buf[16..])?;
        let mut r = Reader::new(&buf[..header_len], big);
        r.pos = 12;
        let fields = r.read(b"a(yv)")?;
        let mut msg = Message {
            kind: fixed[1],
            reply_serial: None,
            error_name: None,
            body: Vec::new(),
        };
        let mut signature = String::new();
        for f in fields.items().unwrap_or_default() {
            let Value::Struct(pair) = f else { continue };
            let (Some(Value::Byte(code)), Some(Value::Variant(v))) = (pair.first(), pair.get(1))
            else {
                continue;
            };
            match (code, v.as_ref()) {
                (4, Value::Str(s)) => msg.error_name = Some(s.clone()),
                (5, Value::U32(n)) => msg.reply_serial = Some(*n),
                (8, Value::Signature(s)) => signature = s.clone(),
                _ => {}
            }
        }
        if msg.kind == METHOD_RETURN || msg.kind == ERROR {
            let mut body = Reader::new(&buf[header_len..], big);
            msg.body = body.read_all(signature.as_bytes())?;
        }
        Ok(msg)
    }
}

/// A method call message, little-endian.
fn encode_call(
    serial: u32,
    destination: &str,
    path: &str,
    interface: &str,
    member: &str,
    args: &[Value],
) -> Zeroizing<Vec<u8>> {
    let mut body = Writer::with_prefix(&[]);
    let mut sig = String::new();
    for a in args {
        body.put(a);
        sig.push_str(&a.signature());
    }
    // Header fields (code, value): PATH, INTERFACE, MEMBER, DESTINATION, SIGNATURE.
    let field = |code: u8, v: Value| Value::Struct(vec![Value::Byte(code), Value::variant(v)]);
    let mut fields = vec![
        field(1, Value::Path(path.into())),
        field(2, Value::Str(interface.into())),
        field(3, Value::Str(member.into())),
        field(6, Value::Str(destination.into())),
    ];
    if !sig.is_empty() {
        fields.push(field(8, Value::Signature(sig)));
    }
    let mut prefix = vec![b'l', METHOD_CALL, 0, 1];
    prefix.extend_from_slice(&(body.buf.len() as u32).to_le_bytes());
    prefix.extend_from_slice(&serial.to_le_bytes());
    let mut w = Writer::with_prefix(&prefix);
    w.put(&Value::Array {
        elem: "(yv)".into(),
        items: fields,
    });
    w.pad(8);
    w.buf.extend_from_slice(&body.buf);
    w.buf
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses() {
        assert_eq!(
            parse_address("unix:path=/run/user/1000/bus").unwrap(),
            vec![BusAddress::Path("/run/user/1000/bus".into())]
        );
        assert_eq!(
            parse_address("tcp:host=x;unix:abstract=/tmp/dbus-a%2cb,guid=1").unwrap(),
            vec![BusAddress::Abstract(b"/tmp/dbus-a,b".to_vec())]
        );
        assert!(parse_address("tcp:host=127.0.0.1,port=1").is_err());
        assert!(parse_address("unix:path=%zz").is_err());
    }

    #[test]
    fn a_call_decodes_as_a_message() {
        let m = encode_call(
            7,
            "org.freedesktop.secrets",
            "/org/freedesktop/secrets",
            "org.freedesktop.Secret.Service",
            "OpenSession",
            &[
                Value::Str("plain".into()),
                Value::variant(Value::Str(String::new())),
            ],
        );
        assert_eq!(&m[..4], &[b'l', 1, 0, 1]);
        let body_len = u32::from_le_bytes(m[4..8].try_into().unwrap()) as usize;
        let fields_len = u32::from_le_bytes(m[12..16].try_into().unwrap()) as usize;
        let header_len = (16 + fields_len).div_ceil(8) * 8;
        assert_eq!(header_len + body_len, m.len());
        let mut r = Reader::new(&m[header_len..], false);
        let body = r.read_all(b"sv").unwrap();
        assert_eq!(body[0], Value::Str("plain".into()));
    }
}
