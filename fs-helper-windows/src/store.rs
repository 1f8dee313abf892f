//! Checkpoints on Windows: the Unix helper's layout and records (`fs_change::Record`, postcard)
//! in the checkpoint directory the broker names (a protected directory no grant reaches),
//! opened through its handle as everything else: `<dir>\<id>\record` and `<dir>\<id>\blob-N`.
//! A record is written before the change (unsealed) and again with the seal after it, so a
//! change that did not finish leaves a checkpoint that refuses to undo.

use fs_change::{mark_unrestorable, now_unix, Kept, Record};
use ipc_schema::fs::{
    ChangeKind, CheckpointId, CheckpointInfo, FsError, FsErrorKind, ResolvedTarget,
};
use sandbox::windows::beneath::{self, New, Want};
use std::cell::Cell;
use std::fs::File;
use std::io::Write;
use std::os::windows::fs::FileExt;
use std::os::windows::io::AsHandle;
use std::time::{Duration, Instant};

const RECORD: &str = "record";
/// How often the store looks for expired checkpoints.
const SWEEP_EVERY: Duration = Duration::from_secs(600);

pub struct Store {
    dir: File,
    counter: Cell<u64>,
    last_sweep: Cell<Option<Instant>>,
}

fn err(e: std::io::Error, what: &str) -> FsError {
    FsError {
        kind: FsErrorKind::Io,
        message: format!("checkpoint store: {what}: {e}"),
        errno: e.raw_os_error(),
    }
}

/// The whole contents of an open file.
pub fn read_all(f: &File) -> std::io::Result<Vec<u8>> {
    read_at(f, 0, f.metadata()?.len() as usize)
}

/// The seal of a whole open file, read a MiB at a time (never held whole).
pub fn seal_file(f: &File) -> std::io::Result<ipc_schema::fs::Seal> {
    let mut at = 0u64;
    fs_change::seal_chunks(|| {
        let chunk = read_at(f, at, 1 << 20)?;
        at += chunk.len() as u64;
        Ok(chunk)
    })
}

/// Up to `n` bytes of an open file from `offset` (fewer at its end).
pub fn read_at(f: &File, offset: u64, n: usize) -> std::io::Result<Vec<u8>> {
    let (mut data, mut got) = (vec![0u8; n], 0);
    while got < n {
        match f.seek_read(&mut data[got..], offset + got as u64) {
            Ok(0) => break,
            Ok(k) => got += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    data.truncate(got);
    Ok(data)
}

/// Creates `name` in `dir` with `data`, flushed.
pub fn create_with(dir: &File, name: &str, data: &[u8]) -> std::io::Result<File> {
    let mut f = beneath::create_beneath(dir.as_handle(), name, New::File)?;
    f.write_all(data)?;
    f.sync_all()?;
    Ok(f)
}

impl Store {
    pub fn new(dir: File) -> Store {
        Store {
            dir,
            counter: Cell::new(0),
            last_sweep: Cell::new(None),
        }
    }

    fn id_dir(&self, id: &str) -> std::io::Result<File> {
        beneath::open_beneath(self.dir.as_handle(), id, Want::Dir)
    }

    /// Starts a checkpoint: a new id and its directory. The record is written by `save`.
    pub fn begin(&self, change: ChangeKind, target: ResolvedTarget) -> Result<Record, FsError> {
        self.sweep_if_due();
        self.counter.set(self.counter.get() + 1);
        let rec = fs_change::new_record(self.counter.get(), change, target, None);
        beneath::create_beneath(self.dir.as_handle(), &rec.info.id.0, New::Dir)
            .map_err(|e| err(e, "creating a checkpoint"))?;
        Ok(rec)
    }

    /// Keeps `kept` for `rec`, returning the blob number, or marks `rec` unrestorable.
    pub fn add_blob(&self, rec: &mut Record, kept: Kept) -> Result<Option<u32>, FsError> {
        let data = match kept {
            Kept::Blob(d) => d,
            Kept::Not(reason) => {
                mark_unrestorable(rec, reason);
                return Ok(None);
            }
        };
        let n = rec.entries.len() as u32;
        let dir = self
            .id_dir(&rec.info.id.0)
            .map_err(|e| err(e, "keeping old contents"))?;
        create_with(&dir, &format!("blob-{n}"), &data)
            .map_err(|e| err(e, "keeping old contents"))?;
        Ok(Some(n))
    }

    pub fn blob(&self, id: &CheckpointId, n: u32) -> Result<Vec<u8>, FsError> {
        let what = "reading kept contents";
        let dir = self.id_dir(&id.0).map_err(|e| err(e, what))?;
        let f = beneath::open_beneath(dir.as_handle(), &format!("blob-{n}"), Want::Any)
            .map_err(|e| err(e, what))?;
        read_all(&f).map_err(|e| err(e, what))
    }

    /// Writes `rec`, replacing the previous version whole (a new file renamed over it).
    pub fn save(&self, rec: &Record) -> Result<(), FsError> {
        let what = "writing a record";
        let bytes = postcard::to_allocvec(rec)
            .map_err(|e| FsError::new(FsErrorKind::Io, format!("checkpoint store: {e}")))?;
        let dir = self.id_dir(&rec.info.id.0).map_err(|e| err(e, what))?;
        self.counter.set(self.counter.get() + 1);
        let tmp = format!("{RECORD}.{}.tmp", self.counter.get());
        let f = create_with(&dir, &tmp, &bytes).map_err(|e| err(e, what))?;
        beneath::rename_into(&f, dir.as_handle(), RECORD, true).map_err(|e| {
            let _ = beneath::delete_on_close(&f);
            err(e, what)
        })
    }

    /// Reads a checkpoint; expired ones are removed and reported as missing.
    pub fn load(&self, id: &CheckpointId) -> Result<Record, FsError> {
        fs_change::checkpoint_named(id)?;
        let rec = (self.read_record(&id.0)).ok_or_else(|| fs_change::no_such_checkpoint(id))?;
        if rec.info.expires_unix <= now_unix() {
            self.remove(&id.0);
            return Err(fs_change::no_such_checkpoint(id));
        }
        Ok(rec)
    }

    fn read_record(&self, id: &str) -> Option<Record> {
        let dir = self.id_dir(id).ok()?;
        let f = beneath::open_beneath(dir.as_handle(), RECORD, Want::Any).ok()?;
        if f.metadata().ok()?.len() > 16 << 20 {
            return None;
        }
        postcard::from_bytes(&read_all(&f).ok()?).ok()
    }

    /// Removes a checkpoint whose change failed before it was made.
    pub fn discard(&self, rec: &Record) {
        self.remove(&rec.info.id.0);
    }

    fn remove(&self, id: &str) {
        let Ok(dir) = beneath::open_to_change(self.dir.as_handle(), id) else {
            return;
        };
        for l in beneath::list_dir(&dir).unwrap_or_default() {
            let name = String::from_utf16_lossy(&l.name);
            if let Ok(f) = beneath::open_to_change(dir.as_handle(), &name) {
                let _ = beneath::delete_on_close(&f);
            }
        }
        let _ = beneath::delete_on_close(&dir);
    }

    fn ids(&self) -> Vec<String> {
        let Ok(dir) = beneath::open_beneath(self.dir.as_handle(), "", Want::Dir) else {
            return Vec::new();
        };
        (beneath::list_dir(&dir).unwrap_or_default().iter())
            .filter_map(|l| String::from_utf16(&l.name).ok())
            .filter(|n| n.starts_with("ck-"))
            .collect()
    }

    /// Removes checkpoints past their expiry.
    pub fn sweep(&self) {
        self.last_sweep.set(Some(Instant::now()));
        let now = now_unix();
        for id in self.ids() {
            let expired = fs_change::expired(&id, self.read_record(&id).as_ref(), now);
            if expired {
                self.remove(&id);
            }
        }
    }

    fn sweep_if_due(&self) {
        if (self.last_sweep.get()).is_none_or(|t| t.elapsed() >= SWEEP_EVERY) {
            self.sweep();
        }
    }

    pub fn count(&self) -> u32 {
        self.ids().len() as u32
    }

    /// The newest first.
    pub fn list(&self, limit: u32) -> Vec<CheckpointInfo> {
        let infos = (self.ids().iter())
            .filter_map(|id| self.read_record(id))
            .map(|r| r.info)
            .collect();
        fs_change::newest_first(infos, limit)
    }
}
