//! Reading frames from an async stream with one reusable buffer (the `tokio` feature; beside
//! [`crate::codec::read_frame_async`], which reads one frame at a time): a read syscall brings
//! in as many frames as are waiting, and each is decoded in place, with no allocation per frame
//! beyond what the message itself holds. The buffer grows only to fit a frame whose header has
//! passed the size limit, so a peer cannot make the reader allocate more than one maximal
//! frame. The broker reads every peer (fronts and helpers) through it.

use crate::codec::{decode_from_slice, parse_header, DecodeError, FrameError, HEADER_LEN};
use crate::Envelope;
use tokio::io::{AsyncRead, AsyncReadExt};
use zeroize::Zeroize;

const INITIAL: usize = 64 * 1024;

pub struct FrameReader<R> {
    inner: R,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    max: usize,
    /// Frames from this peer may carry secrets: each frame's bytes are zeroed once decoded, and
    /// the buffer is never reallocated (a freed buffer would keep a copy) and is zeroed on drop.
    wipe: bool,
}

impl<R: AsyncRead + Unpin> FrameReader<R> {
    pub fn new(inner: R, max: usize) -> Self {
        FrameReader {
            inner,
            buf: vec![0; INITIAL],
            start: 0,
            end: 0,
            max,
            wipe: false,
        }
    }

    /// A reader for a peer whose frames may carry secrets (the secrets-helper's credential
    /// headers): see [`FrameReader::wipe`].
    pub fn wiping(inner: R, max: usize) -> Self {
        FrameReader {
            inner,
            buf: vec![0; HEADER_LEN + max],
            start: 0,
            end: 0,
            max,
            wipe: true,
        }
    }

    /// The next frame; `Ok(None)` at a clean end of stream between frames.
    pub async fn next(&mut self) -> Result<Option<Envelope>, FrameError> {
        loop {
            let pending = &self.buf[self.start..self.end];
            if let Some((env, used)) = decode_from_slice(pending, self.max)? {
                if self.wipe {
                    self.buf[self.start..self.start + used].zeroize();
                }
                self.start += used;
                if self.start == self.end {
                    self.start = 0;
                    self.end = 0;
                }
                return Ok(Some(env));
            }
            // Not a whole frame yet: make room for the rest of it.
            let need = if pending.len() >= HEADER_LEN {
                HEADER_LEN
                    + parse_header(pending[..HEADER_LEN].try_into().expect("4 bytes"), self.max)?
            } else {
                HEADER_LEN
            };
            if self.start > 0 && self.start + need > self.buf.len() {
                self.buf.copy_within(self.start..self.end, 0);
                if self.wipe {
                    let moved = self.end - self.start;
                    self.buf[moved..self.end].zeroize();
                }
                self.end -= self.start;
                self.start = 0;
            }
            if need > self.buf.len() {
                self.buf.resize(need, 0);
            }
            let n = self.inner.read(&mut self.buf[self.end..]).await?;
            if n == 0 {
                let got = self.end - self.start;
                if got == 0 {
                    return Ok(None);
                }
                return Err(DecodeError::Truncated {
                    expected: need,
                    got,
                }
                .into());
            }
            self.end += n;
        }
    }
}

impl<R> Drop for FrameReader<R> {
    fn drop(&mut self) {
        if self.wipe {
            self.buf.zeroize();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{encode, MAX_FRAME};
    use crate::{Body, ErrorCode, ErrorReply};

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
    }

    #[test]
    fn reads_many_frames_from_one_buffer_and_large_ones_across_reads() {
        let mut bytes = Vec::new();
        let mut want = Vec::new();
        for i in 0..1000u64 {
            let env = Envelope::new(i, Body::Pong);
            bytes.extend(encode(&env).unwrap());
            want.push(env);
        }
        let big = Envelope::new(
            5000,
            Body::Error(ErrorReply::new(
                ErrorCode::Internal,
                "y".repeat(MAX_FRAME - 64),
            )),
        );
        bytes.extend(encode(&big).unwrap());
        want.push(big);
        rt().block_on(async {
            let mut r = FrameReader::new(&bytes[..], MAX_FRAME);
            for w in &want {
                assert_eq!(&r.next().await.unwrap().unwrap(), w);
            }
            assert!(r.next().await.unwrap().is_none());
            assert!(r.buf.len() <= HEADER_LEN + MAX_FRAME);
        });
    }

    #[test]
    fn a_wiping_reader_leaves_no_decoded_frame_in_its_buffer() {
        let secret = "s3cret-Header-Value-0123456789";
        let mut bytes = Vec::new();
        for i in 0..3u64 {
            let env = Envelope::new(i, Body::Error(ErrorReply::new(ErrorCode::Internal, secret)));
            bytes.extend(encode(&env).unwrap());
        }
        let contains = |buf: &[u8]| buf.windows(secret.len()).any(|w| w == secret.as_bytes());
        rt().block_on(async {
            // Positive control: a plain reader keeps what it decoded.
            let mut plain = FrameReader::new(&bytes[..], MAX_FRAME);
            plain.next().await.unwrap().unwrap();
            assert!(contains(&plain.buf));
            let mut r = FrameReader::wiping(&bytes[..], MAX_FRAME);
            let cap = r.buf.capacity();
            for _ in 0..3 {
                let env = r.next().await.unwrap().unwrap();
                assert!(format!("{env:?}").contains(secret));
                // Only frames not yet decoded may still be in the buffer.
                assert!(!contains(&r.buf[..r.start]));
            }
            assert!(r.next().await.unwrap().is_none());
            assert!(!contains(&r.buf), "a decoded frame is still in the buffer");
            assert_eq!(r.buf.capacity(), cap, "never reallocated");
        });
    }

    #[test]
    fn oversized_and_truncated_frames_are_errors() {
        rt().block_on(async {
            let over = (u32::MAX).to_le_bytes();
            let mut r = FrameReader::new(&over[..], MAX_FRAME);
            assert!(matches!(
                r.next().await,
                Err(FrameError::Decode(DecodeError::Oversized { .. }))
            ));
            let frame = encode(&Envelope::new(1, Body::Pong)).unwrap();
            let cut = &frame[..frame.len() - 1];
            let mut r = FrameReader::new(cut, MAX_FRAME);
            assert!(matches!(
                r.next().await,
                Err(FrameError::Decode(DecodeError::Truncated { .. }))
            ));
        });
    }
}
