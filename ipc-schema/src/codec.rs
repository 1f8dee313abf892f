//! Frames: a 4-byte little-endian payload length, then the postcard encoding of an [`Envelope`].
//!
//! The length is checked against the limit before anything is allocated for the payload, so a
//! peer claiming a 4 GiB frame costs nothing. Payloads larger than [`MAX_FRAME`] do not exist on
//! the wire: such data travels as a stream of chunk messages of its domain.

use crate::{Envelope, PROTOCOL_VERSION};
use std::io::{self, Read, Write};
use thiserror::Error;

/// The largest payload (excluding the 4-byte header) any channel accepts: 1 MiB.
pub const MAX_FRAME: usize = 1 << 20;
/// Bytes in the length prefix.
pub const HEADER_LEN: usize = 4;

/// Why bytes from a peer are not a frame. Each of these gets the peer killed by the broker.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum DecodeError {
    #[error("frame of {len} bytes exceeds the {max}-byte limit")]
    Oversized { len: u64, max: usize },
    #[error("empty frame")]
    Empty,
    #[error("protocol version {got}, expected {expected}")]
    Version { got: u16, expected: u16 },
    #[error("malformed frame: {0}")]
    Malformed(String),
    #[error("{trailing} bytes after the end of the message")]
    Trailing { trailing: usize },
    #[error("connection closed inside a frame ({got} of {expected} bytes)")]
    Truncated { expected: usize, got: usize },
}

#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum EncodeError {
    #[error("message of {len} bytes exceeds the {max}-byte frame limit")]
    Oversized { len: usize, max: usize },
    #[error("cannot encode message: {0}")]
    Postcard(String),
}

/// Errors reading or writing frames on a stream.
#[derive(Debug, Error)]
pub enum FrameError {
    #[error(transparent)]
    Decode(#[from] DecodeError),
    #[error(transparent)]
    Encode(#[from] EncodeError),
    #[error("i/o: {0}")]
    Io(#[from] io::Error),
}

/// Encodes `env` as one frame (header and payload) appended to `out`.
pub fn encode_into(env: &Envelope, out: &mut Vec<u8>) -> Result<(), EncodeError> {
    let start = out.len();
    out.extend_from_slice(&[0u8; HEADER_LEN]);
    let buf = std::mem::take(out);
    let mut buf =
        postcard::to_extend(env, buf).map_err(|e| EncodeError::Postcard(e.to_string()))?;
    let len = buf.len() - start - HEADER_LEN;
    if len > MAX_FRAME {
        buf.truncate(start);
        *out = buf;
        return Err(EncodeError::Oversized {
            len,
            max: MAX_FRAME,
        });
    }
    buf[start..start + HEADER_LEN].copy_from_slice(&(len as u32).to_le_bytes());
    *out = buf;
    Ok(())
}

/// Encodes `env` into a buffer allocated once at its exact size, so that no reallocation
/// leaves a copy of the frame in freed memory: for frames that carry a secret, which the caller
/// wipes once it is written.
pub fn encode_exact(env: &Envelope) -> Result<Vec<u8>, EncodeError> {
    let size = postcard::serialize_with_flavor(env, postcard::ser_flavors::Size::default())
        .map_err(|e| EncodeError::Postcard(e.to_string()))?;
    let mut out = Vec::with_capacity(HEADER_LEN + size);
    encode_into(env, &mut out)?;
    Ok(out)
}

/// Encodes `env` as one frame (header and payload).
pub fn encode(env: &Envelope) -> Result<Vec<u8>, EncodeError> {
    let mut out = Vec::new();
    encode_into(env, &mut out)?;
    Ok(out)
}

/// Reads a header and returns the payload length, refusing lengths over `max` or zero.
pub fn parse_header(header: [u8; HEADER_LEN], max: usize) -> Result<usize, DecodeError> {
    let len = u32::from_le_bytes(header) as u64;
    if len == 0 {
        return Err(DecodeError::Empty);
    }
    if len > max as u64 {
        return Err(DecodeError::Oversized { len, max });
    }
    Ok(len as usize)
}

/// Decodes one payload (without its header). The version is checked before the body is
/// decoded; trailing bytes are an error, so one payload is exactly one message.
pub fn decode_payload(payload: &[u8]) -> Result<Envelope, DecodeError> {
    let (version, _) = postcard::take_from_bytes::<u16>(payload)
        .map_err(|e| DecodeError::Malformed(e.to_string()))?;
    if version != PROTOCOL_VERSION {
        return Err(DecodeError::Version {
            got: version,
            expected: PROTOCOL_VERSION,
        });
    }
    let (env, rest) = postcard::take_from_bytes::<Envelope>(payload)
        .map_err(|e| DecodeError::Malformed(e.to_string()))?;
    if !rest.is_empty() {
        return Err(DecodeError::Trailing {
            trailing: rest.len(),
        });
    }
    Ok(env)
}

/// Decodes the first frame in `buf`, if a whole one is there: `Ok(Some((envelope, consumed)))`,
/// `Ok(None)` when more bytes are needed. Never allocates for a payload before its length passed
/// the limit.
pub fn decode_from_slice(buf: &[u8], max: usize) -> Result<Option<(Envelope, usize)>, DecodeError> {
    if buf.len() < HEADER_LEN {
        return Ok(None);
    }
    let len = parse_header(buf[..HEADER_LEN].try_into().expect("4 bytes"), max)?;
    if buf.len() < HEADER_LEN + len {
        return Ok(None);
    }
    let env = decode_payload(&buf[HEADER_LEN..HEADER_LEN + len])?;
    Ok(Some((env, HEADER_LEN + len)))
}

/// Reads exactly `buf.len()` bytes; `Ok(n < len)` only at end of stream.
fn read_full<R: Read>(r: &mut R, buf: &mut [u8]) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

/// Reads one frame from a blocking stream. `Ok(None)` at a clean end of stream (between frames);
/// an end of stream inside a frame is [`DecodeError::Truncated`].
pub fn read_frame<R: Read>(r: &mut R, max: usize) -> Result<Option<Envelope>, FrameError> {
    let mut header = [0u8; HEADER_LEN];
    let got = read_full(r, &mut header)?;
    if got == 0 {
        return Ok(None);
    }
    if got < HEADER_LEN {
        return Err(DecodeError::Truncated {
            expected: HEADER_LEN,
            got,
        }
        .into());
    }
    let len = parse_header(header, max)?;
    let mut payload = vec![0u8; len];
    let got = read_full(r, &mut payload)?;
    if got < len {
        return Err(DecodeError::Truncated { expected: len, got }.into());
    }
    Ok(Some(decode_payload(&payload)?))
}

/// Writes one frame to a blocking stream (not flushed: callers batch and flush).
pub fn write_frame<W: Write>(w: &mut W, env: &Envelope) -> Result<(), FrameError> {
    let frame = encode(env)?;
    w.write_all(&frame)?;
    Ok(())
}

/// Encodes `value` as one command-line argument, for what the broker tells a helper at start
/// (helpers take no environment and no config file): the protocol version, then the postcard
/// encoding of `value`, written as lowercase hex.
pub fn to_arg<T: serde::Serialize>(value: &T) -> Result<String, EncodeError> {
    let bytes = postcard::to_allocvec(&(PROTOCOL_VERSION, value))
        .map_err(|e| EncodeError::Postcard(e.to_string()))?;
    Ok(hex::encode(bytes))
}

/// Decodes an argument [`to_arg`] wrote: lowercase hex digits only, the version checked before
/// the value is decoded, and trailing bytes an error.
pub fn from_arg<T: serde::de::DeserializeOwned>(arg: &str) -> Result<T, DecodeError> {
    let malformed = || DecodeError::Malformed("not an even number of lowercase hex digits".into());
    if arg.bytes().any(|b| b.is_ascii_uppercase()) {
        return Err(malformed());
    }
    let bytes = hex::decode(arg).map_err(|_| malformed())?;
    let (version, _) = postcard::take_from_bytes::<u16>(&bytes)
        .map_err(|e| DecodeError::Malformed(e.to_string()))?;
    if version != PROTOCOL_VERSION {
        return Err(DecodeError::Version {
            got: version,
            expected: PROTOCOL_VERSION,
        });
    }
    let ((_, value), rest) = postcard::take_from_bytes::<(u16, T)>(&bytes)
        .map_err(|e| DecodeError::Malformed(e.to_string()))?;
    if !rest.is_empty() {
        return Err(DecodeError::Trailing {
            trailing: rest.len(),
        });
    }
    Ok(value)
}

#[cfg(feature = "tokio")]
mod async_io {
    use super::*;
    use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

    /// Reads one frame from an async stream; `Ok(None)` at a clean end of stream.
    pub async fn read_frame_async<R: AsyncRead + Unpin>(
        r: &mut R,
        max: usize,
    ) -> Result<Option<Envelope>, FrameError> {
        let mut header = [0u8; HEADER_LEN];
        let mut got = 0;
        while got < HEADER_LEN {
            let n = r.read(&mut header[got..]).await?;
            if n == 0 {
                if got == 0 {
                    return Ok(None);
                }
                return Err(DecodeError::Truncated {
                    expected: HEADER_LEN,
                    got,
                }
                .into());
            }
            got += n;
        }
        let len = parse_header(header, max)?;
        let mut payload = vec![0u8; len];
        let mut got = 0;
        while got < len {
            let n = r.read(&mut payload[got..]).await?;
            if n == 0 {
                return Err(DecodeError::Truncated { expected: len, got }.into());
            }
            got += n;
        }
        Ok(Some(decode_payload(&payload)?))
    }

    /// Writes one frame to an async stream (not flushed).
    pub async fn write_frame_async<W: AsyncWrite + Unpin>(
        w: &mut W,
        env: &Envelope,
    ) -> Result<(), FrameError> {
        let frame = encode(env)?;
        w.write_all(&frame).await?;
        Ok(())
    }
}

#[cfg(feature = "tokio")]
pub use async_io::{read_frame_async, write_frame_async};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Body, ErrorCode, ErrorReply, Role};

    #[test]
    fn round_trip_and_exact_length() {
        let env = Envelope::new(
            7,
            Body::Ping {
                target: Some(Role::Fs),
            },
        );
        let frame = encode(&env).unwrap();
        let len = u32::from_le_bytes(frame[..4].try_into().unwrap()) as usize;
        assert_eq!(len, frame.len() - HEADER_LEN);
        let (back, used) = decode_from_slice(&frame, MAX_FRAME).unwrap().unwrap();
        assert_eq!(back, env);
        assert_eq!(used, frame.len());
    }

    #[test]
    fn exact_encoding_is_the_same_frame_in_one_allocation() {
        let env = Envelope::new(
            9,
            Body::Error(ErrorReply::new(ErrorCode::Internal, "x".repeat(100_000))),
        );
        let exact = encode_exact(&env).unwrap();
        assert_eq!(exact, encode(&env).unwrap());
        assert_eq!(
            exact.capacity(),
            exact.len(),
            "allocated once, at its size: no reallocation left a copy behind"
        );
    }

    #[test]
    fn oversized_header_refused_before_reading_payload() {
        let mut frame = (u32::MAX).to_le_bytes().to_vec();
        frame.extend_from_slice(&[0u8; 16]);
        assert_eq!(
            decode_from_slice(&frame, MAX_FRAME).unwrap_err(),
            DecodeError::Oversized {
                len: u32::MAX as u64,
                max: MAX_FRAME
            }
        );
        let err = read_frame(&mut &frame[..], MAX_FRAME).unwrap_err();
        assert!(matches!(
            err,
            FrameError::Decode(DecodeError::Oversized { .. })
        ));
    }

    #[test]
    fn wrong_version_refused() {
        let mut env = Envelope::new(1, Body::Pong);
        env.version = 99;
        let frame = encode(&env).unwrap();
        assert_eq!(
            decode_from_slice(&frame, MAX_FRAME).unwrap_err(),
            DecodeError::Version {
                got: 99,
                expected: PROTOCOL_VERSION
            }
        );
    }

    #[test]
    fn trailing_bytes_refused() {
        let mut frame = encode(&Envelope::new(1, Body::Pong)).unwrap();
        frame.push(0);
        let len = (frame.len() - HEADER_LEN) as u32;
        frame[..4].copy_from_slice(&len.to_le_bytes());
        assert_eq!(
            decode_from_slice(&frame, MAX_FRAME).unwrap_err(),
            DecodeError::Trailing { trailing: 1 }
        );
    }

    #[test]
    fn arguments_round_trip_and_anything_else_is_refused() {
        let value = (String::from("g1"), vec![0u8, 0xff], true);
        let arg = to_arg(&value).unwrap();
        assert_eq!(&arg[..2], "01", "the version comes first");
        assert!(arg
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
        assert_eq!(from_arg::<(String, Vec<u8>, bool)>(&arg), Ok(value));
        let malformed = |a: &str| {
            matches!(
                from_arg::<(String, Vec<u8>, bool)>(a),
                Err(DecodeError::Malformed(_))
            )
        };
        for bad in ["", "0", "0g", &arg.to_uppercase(), &arg[..arg.len() - 2]] {
            assert!(malformed(bad), "{bad:?}");
        }
        assert_eq!(
            from_arg::<(String, Vec<u8>, bool)>(&format!("{arg}00")),
            Err(DecodeError::Trailing { trailing: 1 })
        );
        assert_eq!(
            from_arg::<bool>(&format!("02{}", &arg[2..])),
            Err(DecodeError::Version {
                got: 2,
                expected: PROTOCOL_VERSION
            })
        );
    }

    #[test]
    fn truncated_stream_is_an_error_not_a_clean_end() {
        let frame = encode(&Envelope::new(3, Body::Pong)).unwrap();
        assert!(read_frame(&mut &frame[..0], MAX_FRAME).unwrap().is_none());
        for cut in 1..frame.len() {
            let err = read_frame(&mut &frame[..cut], MAX_FRAME).unwrap_err();
            assert!(
                matches!(err, FrameError::Decode(DecodeError::Truncated { .. })),
                "cut at {cut}: {err}"
            );
        }
    }

    #[test]
    fn encoder_refuses_oversized_message_and_keeps_buffer() {
        let big = Envelope::new(
            1,
            Body::Error(ErrorReply::new(
                ErrorCode::Internal,
                "x".repeat(MAX_FRAME + 1),
            )),
        );
        let mut out = vec![1, 2, 3];
        assert!(matches!(
            encode_into(&big, &mut out),
            Err(EncodeError::Oversized { .. })
        ));
        assert_eq!(out, vec![1, 2, 3]);
    }

    #[test]
    fn zero_length_frame_refused() {
        assert_eq!(
            decode_from_slice(&[0, 0, 0, 0], MAX_FRAME).unwrap_err(),
            DecodeError::Empty
        );
    }
}
