//! The router ↔ spawner channel.
//!
//! The spawner is the one process of gatehouse that keeps the rights a helper needs at start
//! (it may fork and exec; started as root, it keeps root's capabilities for the helpers to drop
//! themselves). The router (the broker proper, which parses what the agent sends) is locked down
//! and can do none of that: it asks the spawner, over this channel, for three things only.
//!
//! | request | the spawner | reply |
//! |---|---|---|
//! | [`SpawnRequest::Start`] | forks and execs the helper binary of that kind from its own fixed directory, with the channel as fd 3, an empty environment and `PR_SET_PDEATHSIG` | [`SpawnReply::Started`] with the router's end of the helper's channel attached, or [`SpawnReply::NotStarted`] |
//! | [`SpawnRequest::Kill`] | `SIGKILL`s a helper it started and has not yet reported ended (anything else is refused) | none; [`SpawnReply::Ended`] follows |
//! | [`SpawnRequest::Status`] | reads `/proc/PID/status` of a helper it started, of the router or of itself | [`SpawnReply::Status`] |
//! | [`SpawnRequest::Lineage`] | walks `PPid` up from any pid: does it run under the spawner (a helper, or a command a helper started)? | [`SpawnReply::Lineage`] |
//!
//! Unasked, it sends [`SpawnReply::Ended`] when a helper it started has exited and been reaped.
//!
//! The channel is a `SOCK_SEQPACKET` pair: one message per record, so a record is exactly one
//! postcard value, and the descriptor a `Started` carries is attached to that record. A record
//! that does not decode, or one larger than [`MAX_SPAWN_MESSAGE`], ends the channel; the spawner
//! then kills every helper it started and exits.
//!
//! On Windows the channel is a duplex byte pipe, which carries neither records nor handles: each
//! record is preceded by its length ([`frame_record`], [`RecordReader`]); the spawner
//! duplicates the router's end of a helper's channel into the router's process (through a
//! handle to the router that the router gave it at start) and answers
//! [`SpawnReply::StartedDuplicated`] with the handle's value there; and `Status` is answered
//! with [`SpawnReply::Observed`], what the spawner reads of the helper from outside (its token,
//! its job, its mitigations), where Linux answers with `/proc`. Each spawner refuses the other
//! system's variants as a broken protocol.
//!
//! On macOS (which has no `SOCK_SEQPACKET` for Unix sockets) the channel is a `SOCK_STREAM`
//! pair carrying length-prefixed records ([`frame_record`]) as on Windows, and the descriptor a
//! `Started` brings is attached (`SCM_RIGHTS`) to that record's bytes: a stream may deliver it
//! with bytes read before the record is whole, or with the end of the record before it, so the
//! router queues descriptors as they come and gives each `Started` the oldest; a `Started` with
//! none queued, or a descriptor still queued once every byte received has been decoded (no
//! record it could belong to has begun), is a broken protocol. `Status` is answered with
//! [`SpawnReply::ObservedMac`].

use crate::status::{LockdownReport, MacConfinement, ProcStatus, WindowsConfinement};
use crate::{DecodeError, Role, PROTOCOL_VERSION};
use serde::{Deserialize, Serialize};
use std::ffi::OsString;

/// The largest record either side accepts (helper arguments name every grant root).
pub const MAX_SPAWN_MESSAGE: usize = 256 * 1024;

/// Router to spawner.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub enum SpawnRequest {
    /// Start the helper of `kind` (a helper role; anything else is refused) with `args`.
    /// `id` comes back in the reply.
    Start {
        id: u64,
        kind: Role,
        args: Vec<OsString>,
    },
    /// `SIGKILL` the helper with this pid.
    Kill { pid: u32 },
    /// The kernel's view of `pid`: a helper this spawner started, the router, or the spawner
    /// itself.
    Status { id: u64, pid: u32 },
    /// Whether `pid` descends from the spawner (a helper or anything a helper started: the
    /// commands of the exec sandbox). The router asks it of every peer of its listening sockets,
    /// which no process under the spawner may be.
    Lineage { id: u64, pid: u32 },
}

/// Spawner to router.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub enum SpawnReply {
    /// The helper runs as `pid`; the record carries the router's end of its channel.
    Started { id: u64, pid: u32 },
    /// It could not be started.
    NotStarted { id: u64, reason: String },
    /// A helper this spawner started has ended and been reaped: how (`exited with status 3`,
    /// `killed by SIGKILL`).
    Ended { pid: u32, how: String },
    /// The answer to [`SpawnRequest::Status`].
    Status {
        id: u64,
        status: Result<ProcStatus, String>,
    },
    /// The answer to [`SpawnRequest::Lineage`]: `Ok(true)` when the pid runs under the
    /// spawner, `Err` when its ancestry could not be read (the router treats that as under).
    Lineage {
        id: u64,
        under: Result<bool, String>,
    },
    /// The spawner's first record, sent once: its pid and what its hardening did (for
    /// `gatehouse doctor`; the router checks the kernel's view with `Status`).
    Ready { pid: u32, lockdown: LockdownReport },
    /// Windows: the helper runs as `pid`; the router's end of its channel was duplicated into
    /// the router's process, where its value is `handle` (a pipe carries no handles). For a
    /// helper whose channel takes handles (the net-helper: the proxy's client sockets),
    /// `process` is a handle to it there with `PROCESS_DUP_HANDLE` only, which the router
    /// duplicates those into.
    StartedDuplicated {
        id: u64,
        pid: u32,
        handle: u64,
        process: Option<u64>,
    },
    /// Windows: the answer to [`SpawnRequest::Status`] for a helper, what the spawner reads of
    /// it from outside (`sandbox::windows::ConfinedChild::observe`), which its hello must match.
    Observed {
        id: u64,
        observed: Result<Box<WindowsConfinement>, String>,
    },
    /// macOS: the answer to [`SpawnRequest::Status`], what the spawner reads of the process
    /// from outside (`sandbox::process::observe`: its Seatbelt confinement and user).
    ObservedMac {
        id: u64,
        observed: Result<MacConfinement, String>,
    },
}

/// A record as it crosses a byte stream (the Windows pipe): its length as a 4-byte
/// little-endian number, then the record.
pub fn frame_record(record: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + record.len());
    out.extend_from_slice(&(record.len() as u32).to_le_bytes());
    out.extend_from_slice(record);
    out
}

/// The length a record's 4-byte prefix ([`frame_record`]) gives, refused when zero or over
/// [`MAX_SPAWN_MESSAGE`]: the one check of it, for a blocking or an async reader.
pub fn record_len(prefix: [u8; 4]) -> std::io::Result<usize> {
    let len = u32::from_le_bytes(prefix) as usize;
    if len == 0 || len > MAX_SPAWN_MESSAGE {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("a record of {len} bytes (1 to {MAX_SPAWN_MESSAGE} allowed)"),
        ));
    }
    Ok(len)
}

/// Reads length-prefixed records ([`frame_record`]) from a byte stream.
pub struct RecordReader<R> {
    inner: R,
}

impl<R: std::io::Read> RecordReader<R> {
    pub fn new(inner: R) -> Self {
        RecordReader { inner }
    }

    /// The next record; `Ok(None)` at a clean end (between records). A length over
    /// [`MAX_SPAWN_MESSAGE`] or zero, or an end inside a record, is an error, and nothing past
    /// it is read.
    pub fn next_record(&mut self) -> std::io::Result<Option<Vec<u8>>> {
        let mut len = [0u8; 4];
        let mut got = 0;
        while got < 4 {
            match self.inner.read(&mut len[got..]) {
                Ok(0) if got == 0 => return Ok(None),
                Ok(0) => {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        "the stream ended inside a record's length",
                    ))
                }
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                // A pipe whose other end closed says so with an error on Windows.
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe && got == 0 => {
                    return Ok(None)
                }
                Err(e) => return Err(e),
            }
        }
        let mut rec = vec![0u8; record_len(len)?];
        self.inner.read_exact(&mut rec)?;
        Ok(Some(rec))
    }
}

/// The next length-prefixed record ([`frame_record`]) from an async byte stream; `None` at a
/// clean end between records (the other side closed; a pipe may say so as a broken pipe). Not
/// cancel-safe: run it where it is not raced (a task of its own feeding a channel).
#[cfg(feature = "tokio")]
pub async fn read_record_async<R: tokio::io::AsyncRead + Unpin>(
    rd: &mut R,
) -> std::io::Result<Option<Vec<u8>>> {
    use tokio::io::AsyncReadExt;
    let mut prefix = [0u8; 4];
    let mut got = 0;
    while got < 4 {
        match rd.read(&mut prefix[got..]).await {
            Ok(0) if got == 0 => return Ok(None),
            Ok(0) => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "the stream ended inside a record's length",
                ))
            }
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe && got == 0 => return Ok(None),
            Err(e) => return Err(e),
        }
    }
    let mut rec = vec![0u8; record_len(prefix)?];
    rd.read_exact(&mut rec).await?;
    Ok(Some(rec))
}

/// Reads records from `rd` into `tx` until the end or an error, which is sent last: the
/// cancel-safe way to race records against anything else (receive from the channel).
#[cfg(feature = "tokio")]
pub async fn forward_records<R: tokio::io::AsyncRead + Unpin>(
    mut rd: R,
    tx: tokio::sync::mpsc::UnboundedSender<std::io::Result<Option<Vec<u8>>>>,
) {
    loop {
        let got = read_record_async(&mut rd).await;
        let last = !matches!(got, Ok(Some(_)));
        if tx.send(got).is_err() || last {
            return;
        }
    }
}

/// One record: the protocol version, then the value.
pub fn encode<T: Serialize>(msg: &T) -> Result<Vec<u8>, crate::EncodeError> {
    let out = postcard::to_stdvec(&(PROTOCOL_VERSION, msg))
        .map_err(|e| crate::EncodeError::Postcard(e.to_string()))?;
    if out.len() > MAX_SPAWN_MESSAGE {
        return Err(crate::EncodeError::Oversized {
            len: out.len(),
            max: MAX_SPAWN_MESSAGE,
        });
    }
    Ok(out)
}

/// Decodes one record; the version is checked first and trailing bytes are an error.
pub fn decode<T: for<'de> Deserialize<'de>>(record: &[u8]) -> Result<T, DecodeError> {
    if record.is_empty() {
        return Err(DecodeError::Empty);
    }
    if record.len() > MAX_SPAWN_MESSAGE {
        return Err(DecodeError::Oversized {
            len: record.len() as u64,
            max: MAX_SPAWN_MESSAGE,
        });
    }
    let (version, rest) = postcard::take_from_bytes::<u16>(record)
        .map_err(|e| DecodeError::Malformed(e.to_string()))?;
    if version != PROTOCOL_VERSION {
        return Err(DecodeError::Version {
            got: version,
            expected: PROTOCOL_VERSION,
        });
    }
    let (msg, rest) =
        postcard::take_from_bytes::<T>(rest).map_err(|e| DecodeError::Malformed(e.to_string()))?;
    if !rest.is_empty() {
        return Err(DecodeError::Trailing {
            trailing: rest.len(),
        });
    }
    Ok(msg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_refuse_what_is_not_one() {
        let req = SpawnRequest::Start {
            id: 7,
            kind: Role::Fs,
            args: vec!["--config".into(), "0100".into()],
        };
        let rec = encode(&req).unwrap();
        assert_eq!(decode::<SpawnRequest>(&rec).unwrap(), req);
        let mut longer = rec.clone();
        longer.push(0);
        assert_eq!(
            decode::<SpawnRequest>(&longer),
            Err(DecodeError::Trailing { trailing: 1 })
        );
        assert_eq!(decode::<SpawnRequest>(&[]), Err(DecodeError::Empty));
        let mut other = rec;
        other[0] = 9;
        assert!(matches!(
            decode::<SpawnRequest>(&other),
            Err(DecodeError::Version { got: 9, .. })
        ));
        assert!(matches!(
            decode::<SpawnRequest>(&[1, 0x7f]),
            Err(DecodeError::Malformed(_))
        ));
        for rec in [
            SpawnRequest::Lineage { id: 3, pid: 42 },
            SpawnRequest::Status { id: 4, pid: 1 },
        ] {
            assert_eq!(decode::<SpawnRequest>(&encode(&rec).unwrap()).unwrap(), rec);
        }
        for rep in [
            SpawnReply::Lineage {
                id: 3,
                under: Ok(true),
            },
            SpawnReply::Lineage {
                id: 3,
                under: Err("/proc/42/status: gone".into()),
            },
        ] {
            assert_eq!(decode::<SpawnReply>(&encode(&rep).unwrap()).unwrap(), rep);
        }
        let observed = SpawnReply::Observed {
            id: 5,
            observed: Ok(Box::new(WindowsConfinement {
                in_job: true,
                ..WindowsConfinement::default()
            })),
        };
        let dup = SpawnReply::StartedDuplicated {
            id: 6,
            pid: 7,
            handle: 0x1f4,
            process: Some(0x1f8),
        };
        for rep in [observed, dup] {
            assert_eq!(decode::<SpawnReply>(&encode(&rep).unwrap()).unwrap(), rep);
        }
        let huge = SpawnRequest::Start {
            id: 1,
            kind: Role::Fs,
            args: vec![OsString::from("x".repeat(MAX_SPAWN_MESSAGE))],
        };
        assert!(matches!(
            encode(&huge),
            Err(crate::EncodeError::Oversized { .. })
        ));
    }

    #[cfg(feature = "tokio")]
    #[test]
    fn the_async_record_reader_reads_what_the_blocking_one_does() {
        let a = encode(&SpawnRequest::Kill { pid: 9 }).unwrap();
        let mut stream = frame_record(&a);
        stream.extend(frame_record(&a));
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(async {
            let mut r = &stream[..];
            assert_eq!(read_record_async(&mut r).await.unwrap(), Some(a.clone()));
            assert_eq!(read_record_async(&mut r).await.unwrap(), Some(a.clone()));
            assert_eq!(read_record_async(&mut r).await.unwrap(), None);
            let mut torn = &stream[..2];
            let e = read_record_async(&mut torn).await.unwrap_err();
            assert_eq!(e.kind(), std::io::ErrorKind::UnexpectedEof);
            let huge = (MAX_SPAWN_MESSAGE as u32 + 1).to_le_bytes();
            let e = read_record_async(&mut &huge[..]).await.unwrap_err();
            assert_eq!(e.kind(), std::io::ErrorKind::InvalidData);
        });
    }

    #[test]
    fn records_on_a_byte_stream_are_length_prefixed_and_bounded() {
        let a = encode(&SpawnRequest::Kill { pid: 9 }).unwrap();
        let b = encode(&SpawnRequest::Status { id: 1, pid: 2 }).unwrap();
        let mut stream = frame_record(&a);
        stream.extend(frame_record(&b));
        let mut r = RecordReader::new(&stream[..]);
        assert_eq!(r.next_record().unwrap(), Some(a.clone()));
        assert_eq!(r.next_record().unwrap(), Some(b));
        assert_eq!(r.next_record().unwrap(), None);
        // An end inside a record, in its length or its body, is an error, not an end.
        let whole = frame_record(&a);
        for cut in [2, whole.len() - 1] {
            let e = RecordReader::new(&whole[..cut]).next_record().unwrap_err();
            assert_eq!(e.kind(), std::io::ErrorKind::UnexpectedEof, "cut at {cut}");
        }
        // An empty record and one over the limit are refused before anything is read.
        for len in [0u32, MAX_SPAWN_MESSAGE as u32 + 1] {
            let mut bad = len.to_le_bytes().to_vec();
            bad.extend([0u8; 8]);
            let e = RecordReader::new(&bad[..]).next_record().unwrap_err();
            assert_eq!(e.kind(), std::io::ErrorKind::InvalidData, "{e}");
        }
    }
}
