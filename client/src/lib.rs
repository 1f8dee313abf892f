//! What the command line, `gatehouse-mcp` and the broker share, and nothing more: where one
//! gatehouse instance keeps its config, data and sockets ([`Dirs`]), who holds its lock
//! ([`running_broker_pid`]), and how a front reaches the broker ([`Client`]), starting
//! `gatehouse-broker` in the background when none runs. No policy, no database, no sandbox
//! profiles: `gatehouse-mcp` links this and must stay small. (On Windows it links the sandbox
//! crate for two things std lacks: owner-only ACLs and a named pipe client that checks the
//! pipe's server.)

#![forbid(unsafe_code)]

// Unix sockets to the broker; named pipes on Windows.
pub mod client;
pub mod dirs;

pub use client::{Client, ClientError, SideWriter};
pub use dirs::Dirs;

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

/// The broker daemon's binary, looked for beside the running one.
pub const BROKER_BIN: &str = "gatehouse-broker";
/// The MCP front's binary (what an agent's MCP config starts), beside the running one.
pub const MCP_BIN: &str = "gatehouse-mcp";
/// The notifier's binary (`gatehouse notify`), beside the running one.
pub const NOTIFY_BIN: &str = "gatehouse-notify";

/// The variable `gatehouse run` passes a session token in (removed before serving).
pub const TOKEN_ENV: &str = ipc_schema::exec::AGENT_TOKEN_ENV;
/// The variable `gatehouse run` names the gateway socket in (inside its sandbox, where the
/// runtime directory is hidden): connect there and nowhere else, and never start a broker.
pub const SOCKET_ENV: &str = ipc_schema::exec::AGENT_SOCKET_ENV;
/// The variable `gatehouse run` names the agent's MCP config in (inside its sandbox).
pub const MCP_CONFIG_ENV: &str = ipc_schema::exec::AGENT_MCP_CONFIG_ENV;

/// `name` in the directory of the running binary: gatehouse's binaries are installed (and
/// built) side by side, and each finds the others there, never on `PATH`. On Windows the name
/// gets its `.exe`.
pub fn sibling(name: &str) -> Result<PathBuf, String> {
    std::env::current_exe()
        .ok()
        .and_then(|e| {
            e.parent()
                .map(|d| d.join(format!("{name}{}", std::env::consts::EXE_SUFFIX)))
        })
        .ok_or_else(|| "cannot find the directory of this binary".to_string())
}

/// The pid of the broker holding `lock` (a [`Dirs::lock_file`]), if one runs. On Unix the
/// broker writes its pid into the lock file. On Windows a file locked by another process
/// cannot be read (its lock covers every byte: reads fail with ERROR_LOCK_VIOLATION), so the
/// broker writes its pid to [`Dirs::pid_file`] beside it, after taking the lock, and that is
/// read instead. `None` when no broker holds the lock, and when one does but its pid cannot be
/// read (yet).
pub fn running_broker_pid(lock: &Path) -> Option<u32> {
    let f = File::open(lock).ok()?;
    // If we can take the lock, nobody holds it.
    if probe_shared(&f) {
        return None;
    }
    #[cfg(windows)]
    let f = File::open(lock.with_file_name(dirs::PID_FILE)).ok()?;
    let mut s = String::new();
    (&f).read_to_string(&mut s).ok()?;
    s.trim().parse().ok()
}

/// Whether a shared lock on `f` can be had now (kept only as long as this check). std's lock
/// is `flock` on Linux and macOS (what the broker takes there) and `LockFileEx` on Windows.
fn probe_shared(f: &File) -> bool {
    match f.try_lock_shared() {
        Ok(()) => {
            let _ = f.unlock();
            true
        }
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// No lock held: no broker. Another handle of this process holds the broker's exclusive
    /// lock: its pid, and the probe does not disturb it (the holder still holds it after).
    #[cfg(unix)]
    #[test]
    fn running_broker_pid_reads_the_lock_holders_pid() {
        let t = tempfile::tempdir().unwrap();
        let dirs = Dirs::under(t.path());
        dirs.ensure().unwrap();
        let mut holder = dirs.open_lock_file().unwrap();
        write!(holder, "4242").unwrap();
        assert_eq!(running_broker_pid(&dirs.lock_file()), None);
        holder.try_lock().unwrap();
        assert_eq!(running_broker_pid(&dirs.lock_file()), Some(4242));
        assert_eq!(running_broker_pid(&dirs.lock_file()), Some(4242));
        let other = dirs.open_lock_file().unwrap();
        assert!(matches!(
            other.try_lock(),
            Err(std::fs::TryLockError::WouldBlock)
        ));
        holder.unlock().unwrap();
        assert_eq!(running_broker_pid(&dirs.lock_file()), None);
        assert_eq!(running_broker_pid(&t.path().join("absent")), None);
    }

    /// The same on Windows, where the pid is read from `broker.pid`: the locked lock file
    /// cannot be read through another handle (ERROR_LOCK_VIOLATION on Windows; Wine says
    /// what it does).
    #[cfg(windows)]
    #[test]
    fn running_broker_pid_reads_the_pid_file_of_the_lock_holder() {
        use std::io::Read;
        let t = tempfile::tempdir().unwrap();
        let dirs = Dirs::under(t.path());
        dirs.ensure().unwrap();
        let mut holder = dirs.open_lock_file().unwrap();
        write!(holder, "4242").unwrap();
        assert_eq!(running_broker_pid(&dirs.lock_file()), None);
        holder.try_lock().unwrap();
        // Locked, but no pid written yet: nothing to say.
        assert_eq!(running_broker_pid(&dirs.lock_file()), None);
        std::fs::write(dirs.pid_file(), "4242").unwrap();
        assert_eq!(running_broker_pid(&dirs.lock_file()), Some(4242));
        // Why the pid file: the lock file, read through another handle while locked.
        let mut s = String::new();
        let read = File::open(dirs.lock_file()).unwrap().read_to_string(&mut s);
        match read {
            Err(e) => assert_eq!(e.raw_os_error(), Some(33), "{e}"),
            Ok(_) => {
                assert!(sandbox::windows::running_under_wine(), "read {s:?}");
                assert_eq!(s, "4242");
                println!(
                    "wine does not enforce: a locked range refusing reads (not verified here)"
                );
            }
        }
        // std's unlock calls UnlockFile twice (a handle may hold an exclusive and a shared
        // lock); the second finds no lock: ERROR_NOT_LOCKED, which std ignores, on Windows,
        // ERROR_LOCK_VIOLATION under Wine (observed: Wine 8), after the first has unlocked.
        match holder.unlock() {
            Ok(()) => {}
            Err(e) if sandbox::windows::running_under_wine() => {
                assert_eq!(e.raw_os_error(), Some(33), "{e}");
                println!("wine: File::unlock fails with {e} once unlocked");
            }
            Err(e) => panic!("{e}"),
        }
        assert_eq!(running_broker_pid(&dirs.lock_file()), None);
        assert_eq!(running_broker_pid(&t.path().join("absent")), None);
    }
}
