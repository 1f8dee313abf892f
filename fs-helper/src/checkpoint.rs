//! Checkpoints: what a change replaced, kept in gatehouse's data directory (which no grant can
//! reach: it is a protected directory), with a seal of what the change left behind.
//!
//! Layout: `<dir>/<id>/record` (postcard of [`Record`]) and `<dir>/<id>/blob-N` (old contents).
//! A record is written before the change (unsealed) and rewritten with the seal after it, so a
//! crash in between leaves a checkpoint that refuses to undo rather than guessing.

use crate::kernel::{self, OpenMode};
pub use fs_change::{hex, keep, mark_unrestorable, now_unix, seal_of, Entry, Kept, Record, State};
use ipc_schema::fs::{
    ChangeKind, CheckpointId, CheckpointInfo, FsError, FsErrorKind, ResolvedTarget,
};
use rustix::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use rustix::fs::{AtFlags, Dir, Mode, OFlags};
use rustix::io::Errno;
use std::cell::Cell;
use std::time::{Duration, Instant};

const RECORD: &str = "record";
/// How often the store looks for expired checkpoints.
const SWEEP_EVERY: Duration = Duration::from_secs(600);

/// The helper is single-threaded; the counters are `Cell`s so that every request takes `&Fs`.
pub struct CheckpointStore {
    dir: OwnedFd,
    mode: OpenMode,
    counter: Cell<u64>,
    last_sweep: Cell<Option<Instant>>,
}

fn err(e: Errno, what: &str) -> FsError {
    let mut f = FsError::new(FsErrorKind::Io, format!("checkpoint store: {what}: {e}"));
    f.errno = Some(e.raw_os_error());
    f
}

impl CheckpointStore {
    pub fn new(dir: OwnedFd, mode: OpenMode) -> CheckpointStore {
        CheckpointStore {
            dir,
            mode,
            counter: Cell::new(0),
            last_sweep: Cell::new(None),
        }
    }

    /// The store's directory, which lockdown must keep open.
    pub fn dir_fd(&self) -> RawFd {
        self.dir.as_raw_fd()
    }

    fn open(&self, comps: &[&str], flags: OFlags, mode: Mode) -> Result<OwnedFd, Errno> {
        let comps: Vec<Vec<u8>> = comps.iter().map(|c| c.as_bytes().to_vec()).collect();
        kernel::open_beneath(self.mode, self.dir.as_fd(), &comps, flags, mode)
    }

    /// Starts a checkpoint: a new id, its directory and its blobs. The record is written by
    /// [`CheckpointStore::save`].
    pub fn begin(
        &self,
        change: ChangeKind,
        target: ResolvedTarget,
        moved_to: Option<ResolvedTarget>,
    ) -> Result<Record, FsError> {
        self.sweep_if_due();
        self.counter.set(self.counter.get() + 1);
        let rec = fs_change::new_record(self.counter.get(), change, target, moved_to);
        rustix::fs::mkdirat(
            &self.dir,
            rec.info.id.0.as_str(),
            Mode::from_raw_mode(0o700),
        )
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
        let n = rec
            .entries
            .iter()
            .filter(|e| matches!(e.before, State::File { blob: Some(_), .. }))
            .count() as u32;
        let name = format!("blob-{n}");
        let fd = self
            .open(
                &[&rec.info.id.0, &name],
                OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL,
                Mode::from_raw_mode(0o600),
            )
            .map_err(|e| err(e, "keeping old contents"))?;
        kernel::write_all(fd.as_fd(), &data).map_err(|e| err(e, "keeping old contents"))?;
        rustix::fs::fsync(&fd).map_err(|e| err(e, "keeping old contents"))?;
        Ok(Some(n))
    }

    pub fn blob(&self, id: &CheckpointId, n: u32) -> Result<Vec<u8>, FsError> {
        let name = format!("blob-{n}");
        let fd = self
            .open(&[&id.0, &name], OFlags::RDONLY, Mode::empty())
            .map_err(|e| err(e, "reading kept contents"))?;
        let size = rustix::fs::fstat(&fd)
            .map_err(|e| err(e, "reading kept contents"))?
            .st_size;
        kernel::pread_up_to(fd.as_fd(), 0, size as usize)
            .map_err(|e| err(e, "reading kept contents"))
    }

    /// Writes `rec` (replacing the previous version atomically).
    pub fn save(&self, rec: &Record) -> Result<(), FsError> {
        let bytes = postcard::to_allocvec(rec)
            .map_err(|e| FsError::new(FsErrorKind::Io, format!("checkpoint store: {e}")))?;
        let id = &rec.info.id.0;
        let tmp = format!("{RECORD}.tmp");
        let fd = self
            .open(
                &[id, &tmp],
                OFlags::WRONLY | OFlags::CREATE | OFlags::TRUNC,
                Mode::from_raw_mode(0o600),
            )
            .map_err(|e| err(e, "writing a record"))?;
        kernel::write_all(fd.as_fd(), &bytes).map_err(|e| err(e, "writing a record"))?;
        rustix::fs::fsync(&fd).map_err(|e| err(e, "writing a record"))?;
        let dir = self
            .open(&[id], OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty())
            .map_err(|e| err(e, "writing a record"))?;
        rustix::fs::renameat(&dir, tmp.as_str(), &dir, RECORD)
            .map_err(|e| err(e, "writing a record"))?;
        rustix::fs::fsync(&dir).map_err(|e| err(e, "writing a record"))?;
        Ok(())
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
        let fd = self
            .open(&[id, RECORD], OFlags::RDONLY, Mode::empty())
            .ok()?;
        let size = rustix::fs::fstat(&fd).ok()?.st_size;
        if size > 16 << 20 {
            return None;
        }
        let bytes = kernel::pread_up_to(fd.as_fd(), 0, size as usize).ok()?;
        postcard::from_bytes(&bytes).ok()
    }

    /// Removes a checkpoint whose change failed before it was made.
    pub fn discard(&self, rec: &Record) {
        self.remove(&rec.info.id.0);
    }

    fn remove(&self, id: &str) {
        if let Ok(dir) = self.open(&[id], OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty()) {
            for name in names(dir.as_fd()) {
                let _ = rustix::fs::unlinkat(&dir, name.as_slice(), AtFlags::empty());
            }
        }
        let _ = rustix::fs::unlinkat(&self.dir, id, AtFlags::REMOVEDIR);
    }

    fn ids(&self) -> Vec<String> {
        let Ok(dir) = self.open(&[], OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty()) else {
            return Vec::new();
        };
        names(dir.as_fd())
            .into_iter()
            .filter_map(|n| String::from_utf8(n).ok())
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
        if self
            .last_sweep
            .get()
            .is_none_or(|t| t.elapsed() >= SWEEP_EVERY)
        {
            self.sweep();
        }
    }

    pub fn count(&self) -> u32 {
        self.ids().len() as u32
    }

    /// The newest first.
    pub fn list(&self, limit: u32) -> Result<Vec<CheckpointInfo>, FsError> {
        let infos = (self.ids().iter())
            .filter_map(|id| self.read_record(id))
            .map(|r| r.info)
            .collect();
        Ok(fs_change::newest_first(infos, limit))
    }
}

/// The names in a directory (without `.` and `..`).
pub fn names(dir: BorrowedFd<'_>) -> Vec<Vec<u8>> {
    let Ok(mut d) = Dir::read_from(dir) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    while let Some(Ok(e)) = d.read() {
        let n = e.file_name().to_bytes();
        if n != b"." && n != b".." {
            out.push(n.to_vec());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipc_schema::fs::{GrantId, CHECKPOINT_MAX_BYTES};

    fn store(dir: &std::path::Path) -> CheckpointStore {
        let fd = rustix::fs::open(
            dir,
            crate::kernel::PATH_ONLY | OFlags::DIRECTORY,
            Mode::empty(),
        )
        .unwrap();
        #[cfg(target_os = "linux")]
        let mode = OpenMode::Openat2;
        #[cfg(not(target_os = "linux"))]
        let mode = OpenMode::ComponentWalk;
        CheckpointStore::new(fd, mode)
    }

    fn target() -> ResolvedTarget {
        ResolvedTarget {
            grant: GrantId("g".into()),
            root: b"/r".to_vec(),
            relative: b"f".to_vec(),
            absolute: b"/r/f".to_vec(),
            kind: ipc_schema::fs::FileKind::File,
        }
    }

    #[test]
    fn records_round_trip_and_expire() {
        let t = tempfile::tempdir().unwrap();
        let s = store(t.path());
        let mut rec = s.begin(ChangeKind::Write, target(), None).unwrap();
        let blob = s.add_blob(&mut rec, Kept::Blob(b"old".to_vec())).unwrap();
        assert_eq!(blob, Some(0));
        s.save(&rec).unwrap();
        let back = s.load(&rec.info.id).unwrap();
        assert_eq!(back, rec);
        assert_eq!(s.blob(&rec.info.id, 0).unwrap(), b"old");
        assert_eq!(s.list(0).unwrap().len(), 1);

        let mut old = rec.clone();
        old.info.expires_unix = now_unix() - 1;
        s.save(&old).unwrap();
        let e = s.load(&rec.info.id).unwrap_err();
        assert_eq!(e.kind, FsErrorKind::NoSuchCheckpoint);
        assert!(
            !t.path().join(&rec.info.id.0).exists(),
            "expired checkpoint removed"
        );
    }

    #[test]
    fn large_and_binary_contents_are_not_kept() {
        assert!(
            matches!(keep(None, CHECKPOINT_MAX_BYTES + 1), Kept::Not(r) if r.contains("over the 8 MiB"))
        );
        assert!(matches!(keep(Some(b"a\0b".to_vec()), 3), Kept::Not(r) if r.contains("binary")));
        assert!(matches!(keep(Some(b"text".to_vec()), 4), Kept::Blob(_)));
    }

    #[test]
    fn ids_that_are_not_ours_are_missing_not_paths() {
        let t = tempfile::tempdir().unwrap();
        let s = store(t.path());
        for id in ["../x", "ck-1/../../etc", "record", ""] {
            let e = s.load(&CheckpointId(id.into())).unwrap_err();
            assert_eq!(e.kind, FsErrorKind::NoSuchCheckpoint, "{id}");
        }
    }
}
