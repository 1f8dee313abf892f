//! Who is at the other end of a local socket, as the OS says (never as the peer says): the one
//! check every listening endpoint of gatehouse makes before it reads a frame (DESIGN rule 1).
//!
//! - Linux: `SO_PEERCRED` (uid and pid, taken by the kernel at connect).
//! - macOS: `getpeereid` (the uid) and `LOCAL_PEERPID` (the pid), the `LOCAL_PEERCRED` family.
//! - Windows: a named pipe's client, `GetNamedPipeClientProcessId`, then that process's token
//!   (`TokenUser`, its SID).
//!
//! [`admit`] is the decision, a pure function: a peer of another user is refused.

use std::fmt;

/// A user as the OS names one: a uid on Unix, a SID (`S-1-5-21-...`) on Windows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UserId {
    Uid(u32),
    Sid(String),
}

impl fmt::Display for UserId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UserId::Uid(u) => write!(f, "uid {u}"),
            UserId::Sid(s) => write!(f, "SID {s}"),
        }
    }
}

/// The OS's word on a connected peer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    /// The peer's process, when the OS gives it (0 is taken as not given).
    pub pid: Option<u32>,
    pub user: UserId,
}

/// Whether `peer` may talk to an endpoint of `me`: only the same user.
pub fn admit(me: &UserId, peer: &Peer) -> Result<(), String> {
    if &peer.user == me {
        return Ok(());
    }
    Err(format!(
        "a peer of {} (the broker serves {me} only)",
        peer.user
    ))
}

/// Whether a front may talk to `server`, the process serving the endpoint `name` it connected
/// to: only one of this user (`me`). Another user's process there took the name first.
pub fn admit_server(name: &str, me: &UserId, server: &Peer) -> Result<(), String> {
    if &server.user == me {
        return Ok(());
    }
    let pid = server.pid.map_or("unknown".to_string(), |p| p.to_string());
    Err(format!(
        "{name} is served by a process of {} (pid {pid}), not of this user ({me}): not connecting",
        server.user
    ))
}

/// This process's effective user.
#[cfg(unix)]
pub fn current_user() -> std::io::Result<UserId> {
    // SAFETY: geteuid takes no arguments and cannot fail.
    Ok(UserId::Uid(unsafe { libc::geteuid() }))
}

/// This process's user, from its own token.
#[cfg(windows)]
pub fn current_user() -> std::io::Result<UserId> {
    crate::windows::pipe_peer::current_user()
        .map(UserId::Sid)
        .map_err(std::io::Error::other)
}

/// The peer of the connected Unix socket `sock`.
#[cfg(target_os = "linux")]
pub fn of_unix_socket(sock: std::os::fd::BorrowedFd<'_>) -> std::io::Result<Peer> {
    let cred = nix::sys::socket::getsockopt(&sock, nix::sys::socket::sockopt::PeerCredentials)?;
    Ok(Peer {
        pid: u32::try_from(cred.pid()).ok().filter(|p| *p != 0),
        user: UserId::Uid(cred.uid()),
    })
}

/// The peer of the connected Unix socket `sock`.
#[cfg(target_os = "macos")]
pub fn of_unix_socket(sock: std::os::fd::BorrowedFd<'_>) -> std::io::Result<Peer> {
    use std::os::fd::AsRawFd;
    let (mut uid, mut gid) = (0, 0);
    // SAFETY: a connected socket we borrow; the call writes only the two integers.
    if unsafe { libc::getpeereid(sock.as_raw_fd(), &mut uid, &mut gid) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut pid: libc::pid_t = 0;
    let mut len = std::mem::size_of::<libc::pid_t>() as libc::socklen_t;
    // SAFETY: LOCAL_PEERPID writes one pid_t into `pid`, `len` its size.
    let got = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::SOL_LOCAL,
            libc::LOCAL_PEERPID,
            (&mut pid as *mut libc::pid_t).cast(),
            &mut len,
        )
    };
    Ok(Peer {
        pid: (got == 0)
            .then(|| u32::try_from(pid).ok())
            .flatten()
            .filter(|p| *p != 0),
        user: UserId::Uid(uid),
    })
}

/// The server of the named pipe `pipe` (a connected client end).
#[cfg(windows)]
pub fn of_pipe_server(pipe: std::os::windows::io::BorrowedHandle<'_>) -> std::io::Result<Peer> {
    crate::windows::pipe_peer::server(pipe)
        .map(|(pid, sid)| Peer {
            pid: Some(pid).filter(|p| *p != 0),
            user: UserId::Sid(sid),
        })
        .map_err(std::io::Error::other)
}

/// The client of the named pipe instance `pipe` (a server end with a connected client).
#[cfg(windows)]
pub fn of_pipe(pipe: std::os::windows::io::BorrowedHandle<'_>) -> std::io::Result<Peer> {
    crate::windows::pipe_peer::client(pipe)
        .map(|(pid, sid)| Peer {
            pid: Some(pid).filter(|p| *p != 0),
            user: UserId::Sid(sid),
        })
        .map_err(std::io::Error::other)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_front_talks_only_to_a_server_of_its_own_user() {
        let me = UserId::Sid("S-1-5-21-1-2-3-1001".into());
        let server = |sid: &str, pid| Peer {
            pid,
            user: UserId::Sid(sid.into()),
        };
        assert_eq!(
            admit_server(r"\\.\pipe\g", &me, &server("S-1-5-21-1-2-3-1001", Some(9))),
            Ok(())
        );
        assert_eq!(
            admit_server(r"\\.\pipe\g", &me, &server("S-1-5-21-1-2-3-1002", Some(9))),
            Err(r"\\.\pipe\g is served by a process of SID S-1-5-21-1-2-3-1002 (pid 9), not of this user (SID S-1-5-21-1-2-3-1001): not connecting".into())
        );
        assert!(admit_server("g", &me, &server("S-1-5-18", None))
            .unwrap_err()
            .contains("(pid unknown)"));
    }

    #[test]
    fn only_the_same_user_is_admitted() {
        let me = UserId::Uid(1000);
        assert_eq!(
            admit(
                &me,
                &Peer {
                    pid: Some(7),
                    user: UserId::Uid(1000)
                }
            ),
            Ok(())
        );
        assert_eq!(
            admit(
                &me,
                &Peer {
                    pid: Some(7),
                    user: UserId::Uid(0)
                }
            ),
            Err("a peer of uid 0 (the broker serves uid 1000 only)".into())
        );
        let me = UserId::Sid("S-1-5-21-1-2-3-1001".into());
        assert!(admit(
            &me,
            &Peer {
                pid: None,
                user: UserId::Sid("S-1-5-21-1-2-3-1001".into())
            }
        )
        .is_ok());
        assert!(admit(
            &me,
            &Peer {
                pid: None,
                user: UserId::Sid("S-1-5-21-1-2-3-1002".into())
            }
        )
        .unwrap_err()
        .contains("SID S-1-5-21-1-2-3-1002"));
        // A uid never passes for a SID.
        assert!(admit(
            &me,
            &Peer {
                pid: None,
                user: UserId::Uid(1001)
            }
        )
        .is_err());
    }

    /// The OS's view of both ends of a socket pair: this process, this user.
    #[cfg(unix)]
    #[test]
    fn a_unix_socket_peer_is_this_process_of_this_user() {
        use std::os::fd::AsFd;
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        let p = of_unix_socket(a.as_fd()).unwrap();
        assert_eq!(p.user, current_user().unwrap());
        assert_eq!(p.pid, Some(std::process::id()));
        assert_eq!(admit(&current_user().unwrap(), &p), Ok(()));
    }

    /// A named pipe's client as Windows reports it: this process, this user (run under Wine
    /// in CI; a client of another user cannot be made there, the refusal is the unit test above).
    #[cfg(windows)]
    #[test]
    fn a_named_pipe_client_is_this_process_of_this_user() {
        use std::os::windows::io::AsHandle;
        use tokio::net::windows::named_pipe::{ClientOptions, ServerOptions};
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let name = format!(r"\\.\pipe\gatehouse-peer-test-{}", std::process::id());
            let server = ServerOptions::new()
                .first_pipe_instance(true)
                .reject_remote_clients(true)
                .create(&name)
                .unwrap();
            let _client = ClientOptions::new().open(&name).unwrap();
            server.connect().await.unwrap();
            let p = of_pipe(server.as_handle()).unwrap();
            let me = current_user().unwrap();
            assert!(
                matches!(&me, UserId::Sid(s) if s.starts_with("S-1-")),
                "{me:?}"
            );
            assert_eq!(p.user, me);
            assert_eq!(p.pid, Some(std::process::id()));
            assert_eq!(admit(&me, &p), Ok(()));
        });
    }
}
