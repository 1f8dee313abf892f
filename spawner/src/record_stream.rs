//! The spawner channel as a Unix byte stream (macOS, which has no `SOCK_SEQPACKET` for Unix
//! sockets): length-prefixed records (`ipc_schema::spawn::frame_record`), a `Started`'s
//! descriptor attached by `SCM_RIGHTS` to its record's bytes. A stream may hand a descriptor
//! over with bytes that precede its record (the end of the record before it), so descriptors
//! are queued as they come and each `Started` takes the oldest; what the queue may hold is
//! checked after every record ([`Inbox::no_stray_descriptor`]).
//!
//! Built on every Unix and tested on Linux, where the spawner itself uses `SOCK_SEQPACKET`.

use ipc_schema::fdpass::{recv_with_fds, send_frame_with_fd};
use ipc_schema::spawn::{frame_record, record_len};
use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

/// Writes `record` framed, with `fd` attached to its bytes, on a blocking stream.
pub fn send_record(
    sock: BorrowedFd<'_>,
    record: &[u8],
    fd: Option<BorrowedFd<'_>>,
) -> io::Result<()> {
    let frame = frame_record(record);
    match fd {
        Some(fd) => send_frame_with_fd(sock, &frame, fd),
        None => {
            let mut done = 0;
            while done < frame.len() {
                match rustix::io::write(sock, &frame[done..]) {
                    Err(rustix::io::Errno::INTR) => continue,
                    r => done += r?,
                }
            }
            Ok(())
        }
    }
}

/// What has been read of the stream: bytes not yet decoded, and descriptors not yet given to a
/// record.
#[derive(Default)]
pub struct Inbox {
    buf: Vec<u8>,
    fds: VecDeque<OwnedFd>,
}

impl Inbox {
    /// One `recvmsg` from `sock`. `Ok(0)`: the end of the stream.
    pub fn fill(&mut self, sock: impl AsFd) -> io::Result<usize> {
        let mut chunk = vec![0u8; 64 * 1024];
        let n = recv_with_fds(sock, &mut chunk, &mut self.fds)?;
        self.buf.extend_from_slice(&chunk[..n]);
        Ok(n)
    }

    /// The next whole record, if one has arrived. A length of zero or over
    /// `ipc_schema::spawn::MAX_SPAWN_MESSAGE` is an error, and nothing after it is read.
    pub fn next_record(&mut self) -> io::Result<Option<Vec<u8>>> {
        let Some(prefix) = self.buf.first_chunk::<4>() else {
            return Ok(None);
        };
        let len = record_len(*prefix)?;
        if self.buf.len() < 4 + len {
            return Ok(None);
        }
        let record = self.buf[4..4 + len].to_vec();
        self.buf.drain(..4 + len);
        Ok(Some(record))
    }

    /// The oldest descriptor not yet given to a record (a `Started`'s).
    pub fn take_descriptor(&mut self) -> Option<OwnedFd> {
        self.fds.pop_front()
    }

    /// After a record has been decoded (and a `Started` took its descriptor): with no byte of
    /// another record received, no descriptor may be left, since each comes with its record's
    /// bytes.
    pub fn no_stray_descriptor(&self) -> io::Result<()> {
        if self.buf.is_empty() && !self.fds.is_empty() {
            return Err(io::Error::other(format!(
                "{} descriptor(s) arrived with no record to carry them",
                self.fds.len()
            )));
        }
        Ok(())
    }

    /// Bytes received and not yet decoded: at the end of the stream, a record cut short.
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipc_schema::spawn::MAX_SPAWN_MESSAGE;
    use std::os::unix::net::UnixStream;

    fn inode(fd: impl AsFd) -> u64 {
        rustix::fs::fstat(fd).unwrap().st_ino
    }

    #[test]
    fn records_and_their_descriptors_cross_in_order() {
        let (a, b) = UnixStream::pair().unwrap();
        let file1 = tempfile::tempfile().unwrap();
        let file2 = tempfile::tempfile().unwrap();
        // A plain record, a record with a descriptor, a large one, another with a descriptor.
        send_record(a.as_fd(), b"first", None).unwrap();
        send_record(a.as_fd(), b"second", Some(file1.as_fd())).unwrap();
        let big = vec![7u8; 200 * 1024];
        let writer = std::thread::spawn({
            let a = a.try_clone().unwrap();
            let file2 = file2.try_clone().unwrap();
            move || {
                send_record(a.as_fd(), &big, None).unwrap();
                send_record(a.as_fd(), b"fourth", Some(file2.as_fd())).unwrap();
            }
        });
        let mut inbox = Inbox::default();
        let mut got = Vec::new();
        while got.len() < 4 {
            match inbox.next_record().unwrap() {
                Some(r) => {
                    let fd = (r == b"second" || r == b"fourth").then(|| inbox.take_descriptor());
                    inbox.no_stray_descriptor().unwrap();
                    got.push((r, fd.map(|f| f.expect("its descriptor"))));
                }
                None => assert_ne!(inbox.fill(&b).unwrap(), 0),
            }
        }
        writer.join().unwrap();
        assert_eq!(got[0].0, b"first");
        assert!(got[0].1.is_none());
        assert_eq!(got[1].0, b"second");
        assert_eq!(inode(got[1].1.as_ref().unwrap()), inode(&file1));
        assert_eq!(got[2].0.len(), 200 * 1024);
        assert_eq!(got[3].0, b"fourth");
        assert_eq!(inode(got[3].1.as_ref().unwrap()), inode(&file2));
        drop(a);
        assert_eq!(inbox.fill(&b).unwrap(), 0);
        assert!(inbox.is_empty());
    }

    #[test]
    fn a_descriptor_without_a_record_and_bad_lengths_are_refused() {
        let (a, b) = UnixStream::pair().unwrap();
        let file = tempfile::tempfile().unwrap();
        // A record that claims no descriptor, sent with one: once it is decoded and nothing else
        // has come, the descriptor is stray.
        send_record(a.as_fd(), b"plain", Some(file.as_fd())).unwrap();
        let mut inbox = Inbox::default();
        while inbox.next_record().unwrap().is_none() {
            inbox.fill(&b).unwrap();
        }
        assert_eq!(
            inbox.no_stray_descriptor().unwrap_err().to_string(),
            "1 descriptor(s) arrived with no record to carry them"
        );
        // A zero length and one over the limit.
        for prefix in [0u32, (MAX_SPAWN_MESSAGE + 1) as u32] {
            let (a, b) = UnixStream::pair().unwrap();
            rustix::io::write(&a, &prefix.to_le_bytes()).unwrap();
            let mut inbox = Inbox::default();
            inbox.fill(&b).unwrap();
            let e = inbox.next_record().unwrap_err().to_string();
            assert!(e.starts_with(&format!("a record of {prefix} bytes")), "{e}");
        }
    }
}
