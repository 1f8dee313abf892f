//! Descriptors over Unix stream sockets (`SCM_RIGHTS`), for the two places the exec sandbox
//! passes them: the proxy connector that travels with a `Start` frame, and each proxy client
//! connection the sandbox's bridge hands out.
//!
//! The convention (shared with the net-helper): a message that carries a descriptor is written
//! with one `sendmsg` whose control message holds it; the kernel attaches it to the first byte of
//! that write, so the reader has it no later than the message's last byte. Readers queue
//! descriptors in arrival order and each descriptor-carrying message takes the oldest.

use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

/// The most descriptors one read accepts; more is a protocol error.
pub const MAX_FDS_PER_READ: usize = 8;

/// Writes `bytes` with `fd` attached in one `sendmsg`; returns how many bytes went (the rest, if
/// any, must follow with plain writes).
pub fn send_with_fd(sock: BorrowedFd<'_>, bytes: &[u8], fd: BorrowedFd<'_>) -> io::Result<usize> {
    use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};
    let fds = [fd.as_raw_fd()];
    let cmsg = [ControlMessage::ScmRights(&fds)];
    let iov = [io::IoSlice::new(bytes)];
    loop {
        match sendmsg::<()>(sock.as_raw_fd(), &iov, &cmsg, MsgFlags::MSG_NOSIGNAL, None) {
            Err(nix::errno::Errno::EINTR) => continue,
            r => return r.map_err(io::Error::from),
        }
    }
}

/// One `recvmsg` into `buf`; received descriptors are appended to `fds` (close-on-exec).
/// `Ok(0)` is the end of the stream.
pub fn recv_with_fds(
    sock: BorrowedFd<'_>,
    buf: &mut [u8],
    fds: &mut VecDeque<OwnedFd>,
) -> io::Result<usize> {
    use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags};
    let mut space = nix::cmsg_space!([RawFd; MAX_FDS_PER_READ]);
    let mut iov = [io::IoSliceMut::new(buf)];
    let msg = loop {
        match recvmsg::<()>(
            sock.as_raw_fd(),
            &mut iov,
            Some(&mut space),
            MsgFlags::MSG_CMSG_CLOEXEC,
        ) {
            Err(nix::errno::Errno::EINTR) => continue,
            r => break r.map_err(io::Error::from)?,
        }
    };
    let truncated = msg.flags.contains(MsgFlags::MSG_CTRUNC);
    let n = msg.bytes;
    for c in msg.cmsgs().map_err(io::Error::from)? {
        if let ControlMessageOwned::ScmRights(raw) = c {
            for fd in raw {
                // SAFETY: the kernel just installed this descriptor in our table for this
                // message; nothing else knows its number, so we are its only owner.
                fds.push_back(unsafe { OwnedFd::from_raw_fd(fd) });
            }
        }
    }
    if truncated {
        return Err(io::Error::other(format!(
            "a message carried more than {MAX_FDS_PER_READ} descriptors"
        )));
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;
    use std::os::unix::net::UnixStream;

    #[test]
    fn a_descriptor_travels_with_its_bytes() {
        let (a, b) = UnixStream::pair().unwrap();
        let (p, q) = UnixStream::pair().unwrap();
        assert_eq!(send_with_fd(a.as_fd(), b"C", p.as_fd()).unwrap(), 1);
        let mut buf = [0u8; 8];
        let mut fds = VecDeque::new();
        assert_eq!(recv_with_fds(b.as_fd(), &mut buf, &mut fds).unwrap(), 1);
        assert_eq!(&buf[..1], b"C");
        assert_eq!(fds.len(), 1);
        // The received descriptor is the same socket: writing through it reaches q.
        let got = UnixStream::from(fds.pop_front().unwrap());
        use std::io::{Read, Write};
        (&got).write_all(b"hi").unwrap();
        let mut two = [0u8; 2];
        (&q).read_exact(&mut two).unwrap();
        assert_eq!(&two, b"hi");
        drop(a);
        assert_eq!(recv_with_fds(b.as_fd(), &mut buf, &mut fds).unwrap(), 0);
    }
}
