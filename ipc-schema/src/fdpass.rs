//! Passing descriptors with frames over a Unix stream socket (`SCM_RIGHTS`): gatehouse's one
//! implementation, used by every channel that carries descriptors (the broker to the net-helper
//! and the exec-helper, the exec sandbox's proxy bridge, `gatehouse run`).
//!
//! The rule both sides keep: a frame that carries a descriptor is written with one `sendmsg`
//! whose data is the whole frame (or its first part) and whose control message holds the
//! descriptor. On a stream socket the kernel attaches the descriptor to the first byte of that
//! write, so the receiver, reading with `recvmsg` only, has the descriptor in hand no later than
//! the frame's last byte. The receiver queues descriptors in arrival order and each
//! descriptor-carrying frame takes the oldest one; a descriptor left over once every buffered
//! byte is consumed is a protocol error.
//!
//! Uses rustix's safe wrappers, which hand back received descriptors as `OwnedFd` (no `unsafe`).

use std::collections::VecDeque;
use std::io::{self, IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::io::Errno;
use rustix::net::{
    recvmsg, sendmsg, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, ReturnFlags,
    SendAncillaryBuffer, SendAncillaryMessage, SendFlags,
};

/// No SIGPIPE on a closed peer where the flag exists. Apple systems have no MSG_NOSIGNAL; there
/// Rust's runtime ignores SIGPIPE from the start, so a closed peer is EPIPE on every system.
#[cfg(not(target_vendor = "apple"))]
const SEND_FLAGS: SendFlags = SendFlags::NOSIGNAL;
#[cfg(target_vendor = "apple")]
const SEND_FLAGS: SendFlags = SendFlags::empty();

/// Received descriptors are close-on-exec from the moment they arrive where the flag exists.
/// Apple systems have no MSG_CMSG_CLOEXEC: there each one is made close-on-exec right after
/// `recvmsg` (a thread of this process that execs in between would pass it on).
#[cfg(not(target_vendor = "apple"))]
const RECV_FLAGS: RecvFlags = RecvFlags::CMSG_CLOEXEC;
#[cfg(target_vendor = "apple")]
const RECV_FLAGS: RecvFlags = RecvFlags::empty();

/// The most descriptors one `recvmsg` accepts; more are a protocol error (`MSG_CTRUNC`).
pub const MAX_FDS_PER_READ: usize = 8;

/// Writes `bytes` with `fd` attached, in one `sendmsg`. Returns the bytes written: on a
/// non-blocking socket that may be fewer than `bytes.len()`; the rest must then be written with
/// plain writes (the descriptor went with the first byte).
pub fn send_with_fd(sock: impl AsFd, bytes: &[u8], fd: BorrowedFd<'_>) -> io::Result<usize> {
    let fds = [fd];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !control.push(SendAncillaryMessage::ScmRights(&fds)) {
        return Err(io::Error::other(
            "control buffer too small for one descriptor",
        ));
    }
    loop {
        match sendmsg(
            sock.as_fd(),
            &[IoSlice::new(bytes)],
            &mut control,
            SEND_FLAGS,
        ) {
            Err(Errno::INTR) => continue,
            r => return Ok(r?),
        }
    }
}

/// Writes a whole frame with `fd` attached on a blocking socket.
pub fn send_frame_with_fd(sock: impl AsFd, frame: &[u8], fd: BorrowedFd<'_>) -> io::Result<()> {
    let sock = sock.as_fd();
    let mut done = send_with_fd(sock, frame, fd)?;
    while done < frame.len() {
        match rustix::io::write(sock, &frame[done..]) {
            Err(Errno::INTR) => continue,
            r => done += r?,
        }
    }
    Ok(())
}

/// One `recvmsg` into `buf`: received descriptors are appended to `fds` (close-on-exec).
/// `Ok(0)` is the end of the stream. More descriptors than [`MAX_FDS_PER_READ`] in one read is
/// an error (the kernel would have closed the ones that did not fit).
pub fn recv_with_fds(
    sock: impl AsFd,
    buf: &mut [u8],
    fds: &mut VecDeque<OwnedFd>,
) -> io::Result<usize> {
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS_PER_READ))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let got = loop {
        match recvmsg(
            sock.as_fd(),
            &mut [IoSliceMut::new(buf)],
            &mut control,
            RECV_FLAGS,
        ) {
            Err(Errno::INTR) => continue,
            r => break r?,
        }
    };
    for msg in control.drain() {
        if let RecvAncillaryMessage::ScmRights(received) = msg {
            for fd in received {
                #[cfg(target_vendor = "apple")]
                rustix::io::fcntl_setfd(&fd, rustix::io::FdFlags::CLOEXEC)?;
                fds.push_back(fd);
            }
        }
    }
    if got.flags.contains(ReturnFlags::CTRUNC) {
        return Err(io::Error::other(format!(
            "more than {MAX_FDS_PER_READ} descriptors arrived in one read"
        )));
    }
    Ok(got.bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::unix::net::UnixStream;

    #[test]
    fn descriptor_arrives_with_its_frame_and_in_order() {
        let (a, b) = UnixStream::pair().unwrap();
        let (p1, _q1) = UnixStream::pair().unwrap();
        let (p2, _q2) = UnixStream::pair().unwrap();
        (&a).write_all(b"plain").unwrap();
        send_frame_with_fd(&a, b"first", p1.as_fd()).unwrap();
        send_frame_with_fd(&a, b"second", p2.as_fd()).unwrap();
        drop(a);
        let mut fds = VecDeque::new();
        let mut all = Vec::new();
        let mut buf = [0u8; 64];
        loop {
            let n = recv_with_fds(&b, &mut buf, &mut fds).unwrap();
            if n == 0 {
                break;
            }
            all.extend_from_slice(&buf[..n]);
        }
        assert_eq!(all, b"plainfirstsecond");
        assert_eq!(fds.len(), 2);
        // The received descriptors are the same sockets (same inode).
        let ino = |fd: &dyn AsFd| rustix::fs::fstat(fd).unwrap().st_ino;
        assert_eq!(ino(&fds[0]), ino(&p1));
        assert_eq!(ino(&fds[1]), ino(&p2));
        // And close-on-exec.
        let flags = rustix::io::fcntl_getfd(&fds[0]).unwrap();
        assert!(flags.contains(rustix::io::FdFlags::CLOEXEC));
    }

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
        (&got).write_all(b"hi").unwrap();
        let mut two = [0u8; 2];
        (&q).read_exact(&mut two).unwrap();
        assert_eq!(&two, b"hi");
        drop(a);
        assert_eq!(recv_with_fds(b.as_fd(), &mut buf, &mut fds).unwrap(), 0);
    }
}
