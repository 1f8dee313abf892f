//! Which descriptors the process holds: the console keeps through lockdown exactly those it
//! opened itself (its broker socket, the terminal library's event sources) and closes whatever
//! it inherited besides stdio.

use std::os::fd::RawFd;

/// The open descriptors of this process, from `/proc/self/fd` (without the one used to read it).
pub fn open_fds() -> std::io::Result<Vec<RawFd>> {
    let listed: Vec<RawFd> = std::fs::read_dir("/proc/self/fd")?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    // The directory's own descriptor was in the listing and is closed now: keep only what is
    // still open.
    Ok(listed
        .into_iter()
        .filter(|fd| std::fs::symlink_metadata(format!("/proc/self/fd/{fd}")).is_ok())
        .collect())
}

/// Descriptors in `now` that were not in `before`.
pub fn opened_since(before: &[RawFd], now: &[RawFd]) -> Vec<RawFd> {
    now.iter()
        .copied()
        .filter(|fd| !before.contains(fd))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_descriptor_is_seen_and_a_closed_one_is_not() {
        let before = open_fds().unwrap();
        assert!(before.contains(&0) || before.contains(&1) || before.contains(&2));
        let f = std::fs::File::open("/proc/self/status").unwrap();
        let fd = std::os::fd::AsRawFd::as_raw_fd(&f);
        let now = open_fds().unwrap();
        assert_eq!(opened_since(&before, &now), vec![fd]);
        drop(f);
        assert!(!open_fds().unwrap().contains(&fd));
    }
}
