//! The router's end of the spawner channel on Windows: an overlapped duplex pipe carrying
//! length-prefixed records; a helper's channel arrives as a handle the spawner duplicated into
//! this process (`StartedDuplicated`), adopted here.

use super::{drive, HelperChannel, Link, Transport};
use ipc_schema::spawn::{self, frame_record, SpawnReply, SpawnRequest};
use ipc_schema::status::LockdownReport;
use sandbox::windows as w;
use std::ffi::OsString;
use std::io;
use std::os::windows::io::AsHandle;
use std::path::Path;
use tokio::io::{AsyncWriteExt, ReadHalf, WriteHalf};
use tokio::net::windows::named_pipe::NamedPipeServer;
use tokio::sync::mpsc;

/// The spawner, started and ready, not yet served.
pub struct Spawner {
    rd: ReadHalf<NamedPipeServer>,
    wr: WriteHalf<NamedPipeServer>,
    pid: u32,
    lockdown: LockdownReport,
    /// Its process. It has no job: it ends when its channel closes, ending every helper's job.
    _child: w::ConfinedChild,
}

impl Spawner {
    /// Starts `program --helper-dir DIR [--allow-degraded]` (`sandbox::windows::start_spawner`:
    /// the channel and a handle to this process its only inherited handles) and waits for its
    /// `Ready`. On the router's runtime, before the router hardens itself (its job then admits
    /// no new process).
    pub async fn start(
        program: &Path,
        helper_dir: &Path,
        allow_degraded: bool,
    ) -> io::Result<Spawner> {
        let mut args: Vec<OsString> = vec!["--helper-dir".into(), helper_dir.as_os_str().into()];
        if allow_degraded {
            args.push("--allow-degraded".into());
        }
        let stderr = std::io::stderr();
        let started =
            w::start_spawner(program, &args, stderr.as_handle()).map_err(io::Error::other)?;
        let (mut rd, wr) = tokio::io::split(w::async_server(started.channel)?);
        let Some(first) = spawn::read_record_async(&mut rd).await? else {
            return Err(io::Error::other(format!(
                "{} exited before it was ready",
                program.display()
            )));
        };
        match spawn::decode::<SpawnReply>(&first) {
            Ok(SpawnReply::Ready { pid, lockdown }) if pid == started.child.pid() => Ok(Spawner {
                rd,
                wr,
                pid,
                lockdown,
                _child: started.child,
            }),
            Ok(other) => Err(io::Error::other(format!(
                "its first record was {other:?}, not Ready"
            ))),
            Err(e) => Err(io::Error::other(format!("its first record: {e}"))),
        }
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// What the spawner's hardening did, by its own account.
    pub fn lockdown(&self) -> &LockdownReport {
        &self.lockdown
    }

    /// The handle the router uses, and the future that serves the channel (run it on the
    /// runtime; it ends, with the reason, when the spawner is gone).
    pub fn serve(self) -> io::Result<(Link, impl std::future::Future<Output = String>)> {
        let (link, rx, state) = Link::new(self.pid);
        // Records are read apart from the loop that races them against requests (a read cut
        // off half-way would lose bytes) and reach it through a channel.
        let (rec_tx, records) = mpsc::unbounded_channel();
        let reader = spawn::forward_records(self.rd, rec_tx);
        let driven = drive(
            Pipe {
                records,
                wr: self.wr,
            },
            rx,
            state,
        );
        Ok((link, async move {
            tokio::pin!(driven);
            tokio::pin!(reader);
            tokio::select! {
                why = &mut driven => why,
                // The reader sent its last result; the loop reads it and ends.
                () = &mut reader => driven.await,
            }
        }))
    }
}

/// The Windows channel: records read by the reader above, written here.
struct Pipe {
    records: mpsc::UnboundedReceiver<io::Result<Option<Vec<u8>>>>,
    wr: WriteHalf<NamedPipeServer>,
}

impl Transport for Pipe {
    async fn write(&mut self, req: &SpawnRequest) -> io::Result<()> {
        let rec = spawn::encode(req).map_err(io::Error::other)?;
        self.wr.write_all(&frame_record(&rec)).await
    }

    async fn read(&mut self) -> io::Result<Option<(SpawnReply, Option<HelperChannel>)>> {
        let Some(got) = self.records.recv().await else {
            return Ok(None);
        };
        let Some(rec) = got? else {
            return Ok(None);
        };
        let reply: SpawnReply = spawn::decode(&rec).map_err(io::Error::other)?;
        // The helper's channel, which the spawner duplicated into this process.
        let channel = match &reply {
            SpawnReply::StartedDuplicated {
                handle,
                process,
                pid,
                ..
            } => Some(HelperChannel {
                pipe: w::adopt_duplicated_pipe(*handle).map_err(io::Error::other)?,
                process: match process {
                    Some(p) => Some(w::adopt_helper_process(*p, *pid).map_err(io::Error::other)?),
                    None => None,
                },
            }),
            _ => None,
        };
        Ok(Some((reply, channel)))
    }
}
