//! Reading frames from a stream with one reusable buffer: a read syscall brings in as many
//! frames as are waiting, and each is decoded in place, with no allocation per frame beyond what
//! the message itself holds. The buffer grows only to fit a frame whose header has passed the
//! size limit, so a peer cannot make the broker allocate more than one maximal frame.

use ipc_schema::codec::{decode_from_slice, parse_header, DecodeError, FrameError, HEADER_LEN};
use ipc_schema::Envelope;
use tokio::io::{AsyncRead, AsyncReadExt};

const INITIAL: usize = 64 * 1024;

pub struct FrameReader<R> {
    inner: R,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    max: usize,
}

impl<R: AsyncRead + Unpin> FrameReader<R> {
    pub fn new(inner: R, max: usize) -> Self {
        FrameReader {
            inner,
            buf: vec![0; INITIAL],
            start: 0,
            end: 0,
            max,
        }
    }

    /// The next frame; `Ok(None)` at a clean end of stream between frames.
    pub async fn next(&mut self) -> Result<Option<Envelope>, FrameError> {
        loop {
            let pending = &self.buf[self.start..self.end];
            if let Some((env, used)) = decode_from_slice(pending, self.max)? {
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

#[cfg(test)]
mod tests {
    use super::*;
    use ipc_schema::codec::{encode, MAX_FRAME};
    use ipc_schema::{Body, ErrorCode, ErrorReply};

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
