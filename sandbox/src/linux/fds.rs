//! Step 1: close every inherited descriptor except stdio and the ones the caller keeps.

use crate::LockdownError;
use std::io;
use std::os::fd::RawFd;

/// Closes every descriptor except 0, 1, 2 and `keep`, with `close_range(2)` over the gaps
/// between the kept ones. Descriptors the process opened itself are closed too: the point is
/// that after lockdown the process holds exactly what it was meant to hold.
pub(crate) fn close_stray_fds(keep: &[RawFd]) -> Result<(), LockdownError> {
    for (first, last) in gaps(keep)? {
        close_range(first, last).map_err(LockdownError::CloseFds)?;
    }
    Ok(())
}

/// The inclusive ranges of descriptor numbers to close: everything from 3 up that is not kept.
fn gaps(keep: &[RawFd]) -> Result<Vec<(u32, u32)>, LockdownError> {
    let mut kept: Vec<u32> = Vec::with_capacity(keep.len() + 3);
    kept.extend([0, 1, 2]);
    for &fd in keep {
        let fd = u32::try_from(fd).map_err(|_| {
            LockdownError::CloseFds(io::Error::other(format!(
                "{fd} is not a file descriptor number"
            )))
        })?;
        kept.push(fd);
    }
    kept.sort_unstable();
    kept.dedup();
    let mut out = Vec::new();
    let mut next = 0u32;
    for fd in kept {
        if fd > next {
            out.push((next, fd - 1));
        }
        next = fd + 1;
    }
    out.push((next, u32::MAX));
    Ok(out)
}

fn close_range(first: u32, last: u32) -> io::Result<()> {
    // SAFETY: close_range takes two descriptor numbers and flags and only closes descriptors in
    // the range. The caller checked that the process is single-threaded, so no other thread can
    // be holding (and later reuse the number of) a descriptor we close here; Rust objects owning
    // descriptors in the range are the caller's problem by design: lockdown runs first in main.
    let r = unsafe {
        libc::syscall(
            libc::SYS_close_range,
            first as libc::c_uint,
            last as libc::c_uint,
            0 as libc::c_uint,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::gaps;

    #[test]
    fn gaps_skip_stdio_and_kept_fds() {
        assert_eq!(gaps(&[]).unwrap(), vec![(3, u32::MAX)]);
        assert_eq!(gaps(&[3]).unwrap(), vec![(4, u32::MAX)]);
        assert_eq!(gaps(&[5, 3, 5]).unwrap(), vec![(4, 4), (6, u32::MAX)]);
        assert_eq!(gaps(&[9, 4]).unwrap(), vec![(3, 3), (5, 8), (10, u32::MAX)]);
        assert_eq!(gaps(&[1]).unwrap(), vec![(3, u32::MAX)]);
        assert!(gaps(&[-1]).is_err());
    }
}
