//! The helper's end of its broker channel on Unix: the one socket it was spawned with, on fd 3
//! (Linux's spawner puts it there; a macOS spawner would too).

use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};

/// The descriptor number a helper finds its broker channel on.
pub const CHANNEL_FD: RawFd = 3;

static CHANNEL_TAKEN: AtomicBool = AtomicBool::new(false);

/// Adopts the broker channel a helper was spawned with (fd 3). Fails if it was taken already or
/// fd 3 is not a Unix socket (a helper started by hand, not by the broker).
pub fn take_inherited_channel() -> io::Result<UnixStream> {
    if CHANNEL_TAKEN.swap(true, Ordering::SeqCst) {
        return Err(io::Error::other("the broker channel was already taken"));
    }
    // SAFETY: fstat writes into the zeroed stat buffer we own and reads nothing else.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above; an invalid fd makes fstat fail with EBADF, touching nothing.
    if unsafe { libc::fstat(CHANNEL_FD, &mut st) } != 0 {
        return Err(io::Error::other(format!(
            "fd {CHANNEL_FD} is not open ({}): helpers are started by the gatehouse broker, not by hand",
            io::Error::last_os_error()
        )));
    }
    if st.st_mode & libc::S_IFMT != libc::S_IFSOCK {
        return Err(io::Error::other(format!(
            "fd {CHANNEL_FD} is not a socket: helpers are started by the gatehouse broker, not by hand"
        )));
    }
    // SAFETY: fd 3 is open (fstat succeeded) and is a socket; the atomic flag above guarantees
    // this function hands it out once, so exactly one owner exists.
    let fd = unsafe { OwnedFd::from_raw_fd(CHANNEL_FD) };
    let sock = UnixStream::from(fd);
    sock.set_nonblocking(false)?;
    Ok(sock)
}
