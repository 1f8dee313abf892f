//! The spawner's loop on Windows: the router's channel (an overlapped pipe, length-prefixed
//! records), the helpers it started, each in a job of its own.
//!
//! The same table as Linux (`ipc_schema::spawn`), with the Windows replies: a helper's channel
//! is duplicated into the router's process (`StartedDuplicated`); `Status` of a helper is
//! answered with what the spawner reads of it from outside (`Observed`); `Lineage` asks whether
//! a process is in one of the helpers' jobs (a job holds everything a helper starts, and
//! nothing leaves it). Anything else on the channel ends the spawner: a record that does not
//! decode, a kill of a process it did not start. When the channel closes or breaks, every
//! helper is killed (its job is closed) before the spawner exits.

use crate::ServeError;
use ipc_schema::secrets::StoreKind;
use ipc_schema::spawn::{self, SpawnReply, SpawnRequest};
use ipc_schema::status::LockdownReport;
use ipc_schema::Role;
use sandbox::wincfg::{self, WindowsPolicy};
use sandbox::windows::{self as w, ChannelIo, ConfinedChild};
use sandbox::{FsProfile, Profile};
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::io;
use std::os::windows::io::{AsHandle, OwnedHandle};
use std::path::PathBuf;
use std::sync::Arc;
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;

/// How the spawner starts each kind on Windows: its profile's policy and how its channel is
/// opened (the blocking helpers serve a synchronous handle; the tokio ones an overlapped one).
/// `Err` says why that kind does not run on Windows.
fn windows_kind(kind: Role) -> Result<(Profile, ChannelIo), String> {
    match kind {
        Role::Net => Ok((Profile::Net, ChannelIo::Overlapped)),
        Role::Exec => Ok((Profile::Exec, ChannelIo::Overlapped)),
        // The policy does not depend on the store; the Credential Manager is Windows' one.
        Role::Secrets => Ok((
            Profile::Secrets(StoreKind::CredentialManager),
            ChannelIo::Blocking,
        )),
        // The grant roots' ACEs are the broker's (it knows the grants); the policy's check of
        // the token and job does not depend on them.
        Role::Fs => Ok((Profile::Fs(FsProfile::default()), ChannelIo::Blocking)),
        // It answers the broker out of order (a call waits on its server), from tokio.
        Role::Servers => Ok((Profile::Servers, ChannelIo::Overlapped)),
        other => Err(format!("{other} is not a helper the spawner starts")),
    }
}

struct Helper {
    child: Arc<ConfinedChild>,
    policy: WindowsPolicy,
}

/// Serves the router on `chan` until it closes. `router` is the handle to the router's
/// process (`PROCESS_DUP_HANDLE`) that helpers' channels are duplicated into.
pub async fn serve(
    chan: tokio::net::windows::named_pipe::NamedPipeClient,
    router: OwnedHandle,
    helper_dir: PathBuf,
    allow_degraded: bool,
    lockdown: LockdownReport,
) -> Result<(), ServeError> {
    let (rd, mut wr) = tokio::io::split(chan);
    // Replies go out through one writer, in order: the loop's answers and the waiters' `Ended`.
    let (out_tx, mut out_rx) = mpsc::unbounded_channel::<SpawnReply>();
    let writer = async move {
        while let Some(reply) = out_rx.recv().await {
            let rec = spawn::encode(&reply)
                .map_err(|e| ServeError::Io("encoding a reply".into(), io::Error::other(e)))?;
            wr.write_all(&spawn::frame_record(&rec))
                .await
                .map_err(|e| ServeError::Io("writing to the router".into(), e))?;
        }
        Ok::<(), ServeError>(())
    };
    let (exit_tx, mut exit_rx) = mpsc::unbounded_channel::<(u32, Result<u32, String>)>();
    let mut s = Spawner {
        out: out_tx,
        exits: exit_tx,
        router,
        helper_dir,
        allow_degraded,
        live: BTreeMap::new(),
        ended: BTreeSet::new(),
        killed: BTreeSet::new(),
    };
    s.send(SpawnReply::Ready {
        pid: std::process::id(),
        lockdown,
    });
    // Records are read by a task of their own (a read cut off half-way would lose bytes), and
    // reach the loop through a channel, which the loop may race against the helpers' exits.
    let (rec_tx, mut rec_rx) = mpsc::unbounded_channel();
    tokio::spawn(spawn::forward_records(rd, rec_tx));
    let serve_loop = async {
        loop {
            tokio::select! {
                got = rec_rx.recv() => {
                    let rec = match got {
                        Some(Ok(Some(rec))) => rec,
                        Some(Ok(None)) | None => return Ok(()),
                        Some(Err(e)) => {
                            return Err(ServeError::Io("reading the router's channel".into(), e))
                        }
                    };
                    let req: SpawnRequest = spawn::decode(&rec)
                        .map_err(|e| ServeError::Protocol(format!("a bad record: {e}")))?;
                    s.handle(req)?;
                }
                Some((pid, code)) = exit_rx.recv() => s.reap(pid, code),
            }
        }
    };
    tokio::pin!(writer);
    let result = tokio::select! {
        r = serve_loop => r,
        r = &mut writer => r.and(Err(ServeError::Protocol("the writer stopped".into()))),
    };
    // Every helper's tree ended now (a waiter thread holds each child too, so dropping ours
    // would not close its job; the process's exit would).
    for h in s.live.values() {
        let _ = h.child.kill();
    }
    s.live.clear();
    result
}

struct Spawner {
    out: mpsc::UnboundedSender<SpawnReply>,
    exits: mpsc::UnboundedSender<(u32, Result<u32, String>)>,
    router: OwnedHandle,
    helper_dir: PathBuf,
    allow_degraded: bool,
    live: BTreeMap<u32, Helper>,
    /// Helpers that ended already: a kill of one of these crossed its `Ended` on the way.
    ended: BTreeSet<u32>,
    /// Helpers this spawner was asked to kill (their exit says so).
    killed: BTreeSet<u32>,
}

impl Spawner {
    fn send(&self, reply: SpawnReply) {
        // The writer ends only with the loop: a reply that cannot be queued has no reader.
        let _ = self.out.send(reply);
    }

    fn handle(&mut self, req: SpawnRequest) -> Result<(), ServeError> {
        match req {
            SpawnRequest::Start { id, kind, args } => {
                let reply = match self.start(id, kind, args) {
                    Ok(r) => r,
                    Err(reason) => SpawnReply::NotStarted { id, reason },
                };
                self.send(reply);
                Ok(())
            }
            SpawnRequest::Kill { pid } => {
                let live = self.live.get(&pid);
                if crate::rules::kill_target(pid, live.is_some(), self.ended.contains(&pid))? {
                    if let Some(h) = live {
                        // A failure shows when the exit does not come.
                        let _ = h.child.kill();
                        self.killed.insert(pid);
                    }
                }
                Ok(())
            }
            SpawnRequest::Status { id, pid } => {
                let observed = match self.live.get(&pid) {
                    Some(h) => h
                        .child
                        .observe(&h.policy)
                        .map(Box::new)
                        .map_err(|e| format!("reading pid {pid} from outside: {e}")),
                    None => Err(format!(
                        "pid {pid} is not a helper this spawner runs (on Windows only helpers are observed)"
                    )),
                };
                self.send(SpawnReply::Observed { id, observed });
                Ok(())
            }
            SpawnRequest::Lineage { id, pid } => {
                // Any pid may be asked about: the answer says only whether it is one of ours.
                // A helper is known by its pid (its process descriptor lets no other process
                // open it for the query); anything else is looked for in the helpers' jobs.
                let mut under = Ok(false);
                for h in self.live.values() {
                    if h.child.pid() == pid {
                        under = Ok(true);
                        break;
                    }
                    match h.child.job_holds(pid) {
                        Ok(true) => {
                            under = Ok(true);
                            break;
                        }
                        Ok(false) => {}
                        Err(e) => {
                            under = Err(format!("whether pid {pid} is in a helper's job: {e}"))
                        }
                    }
                }
                self.send(SpawnReply::Lineage { id, under });
                Ok(())
            }
        }
    }

    fn start(&mut self, id: u64, kind: Role, args: Vec<OsString>) -> Result<SpawnReply, String> {
        if let Some(reason) = crate::rules::degraded_refusal(self.allow_degraded, kind, &args) {
            return Err(reason);
        }
        let (profile, io) = windows_kind(kind)?;
        let policy =
            wincfg::helper_policy(&profile).map_err(|e| format!("{kind}'s policy: {e}"))?;
        let program = self.helper_dir.join(format!("{}.exe", kind.name()));
        let stderr = std::io::stderr();
        let spawned = w::spawn_helper(
            &policy,
            &program,
            &args,
            io,
            // The router serves every channel with tokio.
            ChannelIo::Overlapped,
            stderr.as_handle(),
            w::SpawnOptions {
                allow_degraded: self.allow_degraded,
            },
        )
        .map_err(|e| format!("cannot start {}: {e}", program.display()))?;
        let child = Arc::new(spawned.child);
        let pid = child.pid();
        // Ours closes when `spawned.channel` drops below; the router's copy is the one end.
        let handle = match w::duplicate_into(self.router.as_handle(), spawned.channel.as_handle()) {
            Ok(h) => h,
            Err(e) => {
                let _ = child.kill();
                return Err(format!("cannot hand {kind}'s channel to the router: {e}"));
            }
        };
        drop(spawned.channel);
        // The net-helper's channel takes the proxy's client sockets, the servers-helper's its
        // servers' pipes, which the router duplicates into it itself: a handle that allows that
        // and nothing more.
        let process = match kind {
            Role::Net | Role::Servers => {
                match w::process_for_handles_into(self.router.as_handle(), &child) {
                    Ok(p) => Some(p),
                    Err(e) => {
                        let _ = child.kill();
                        return Err(format!("cannot hand {kind}'s process to the router: {e}"));
                    }
                }
            }
            _ => None,
        };
        let waiter = Arc::clone(&child);
        let exits = self.exits.clone();
        tokio::task::spawn_blocking(move || {
            let code = loop {
                match waiter.wait_timeout(u32::MAX) {
                    Ok(Some(code)) => break Ok(code),
                    Ok(None) => continue,
                    Err(e) => break Err(e.to_string()),
                }
            };
            let _ = exits.send((pid, code));
        });
        self.live.insert(pid, Helper { child, policy });
        Ok(SpawnReply::StartedDuplicated {
            id,
            pid,
            handle,
            process,
        })
    }

    fn reap(&mut self, pid: u32, code: Result<u32, String>) {
        if self.live.remove(&pid).is_none() {
            return;
        }
        let how = match code {
            _ if self.killed.remove(&pid) => "killed by the spawner".to_string(),
            Ok(code) => format!("exited with status {code}"),
            Err(e) => format!("ended, and its exit status could not be read: {e}"),
        };
        self.ended.insert(pid);
        self.send(SpawnReply::Ended { pid, how });
    }
}
