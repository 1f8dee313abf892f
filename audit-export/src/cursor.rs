//! The last position a sink acknowledged, kept in a small JSON file replaced atomically.

use crate::ExportError;
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Rows 1..=`exported` of log `instance` reached sink `sink`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cursor {
    pub instance: String,
    pub sink: String,
    pub exported: i64,
}

pub struct CursorFile {
    pub path: PathBuf,
}

fn err(path: &Path, why: impl std::fmt::Display) -> ExportError {
    ExportError::State {
        path: path.display().to_string(),
        why: why.to_string(),
    }
}

impl CursorFile {
    /// The cursor, if the file exists. A file that exists but does not parse is an error, not
    /// a fresh start (that would send everything again, or skip).
    pub fn load(&self) -> Result<Option<Cursor>, ExportError> {
        match std::fs::read(&self.path) {
            Ok(b) => serde_json::from_slice(&b).map(Some).map_err(|e| {
                err(
                    &self.path,
                    format!("unreadable ({e}); move it aside to start over"),
                )
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(err(&self.path, e)),
        }
    }

    /// Loads the cursor and checks it belongs to this log and this sink.
    pub fn load_for(&self, instance: &str, sink: &str) -> Result<Option<Cursor>, ExportError> {
        let Some(c) = self.load()? else {
            return Ok(None);
        };
        if c.sink != sink {
            return Err(err(
                &self.path,
                format!(
                    "it is the cursor of {:?}, not {sink:?}: give each sink its own --state",
                    c.sink
                ),
            ));
        }
        if !instance.is_empty() && c.instance != instance {
            return Err(err(
                &self.path,
                format!(
                    "it belongs to audit log {}, not this one ({instance}): give another --state",
                    c.instance
                ),
            ));
        }
        Ok(Some(c))
    }

    /// Writes the cursor: a temporary file beside it, synced, renamed over it, the directory
    /// synced. A crash leaves the old cursor or the new one, never half of one.
    pub fn store(&self, c: &Cursor) -> Result<(), ExportError> {
        let dir = match self.path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        };
        std::fs::create_dir_all(&dir).map_err(|e| err(&dir, e))?;
        let name = self
            .path
            .file_name()
            .ok_or_else(|| err(&self.path, "not a file name"))?;
        let tmp = dir.join(format!(".{}.tmp", name.to_string_lossy()));
        let write = || -> std::io::Result<()> {
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .open(&tmp)?;
            f.write_all(serde_json::to_string(c).expect("serializes").as_bytes())?;
            f.sync_all()?;
            std::fs::rename(&tmp, &self.path)?;
            ipc_schema::os_path::sync_dir(&dir)
        };
        write().map_err(|e| err(&self.path, e))
    }
}

/// The cursor file a sink gets when none is named: `DATA/export/NAME.cursor`, NAME from the
/// sink (`otlp` and a short digest of its URL), so two collectors never share one.
pub fn default_path(data_dir: &Path, sink: &str) -> PathBuf {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(sink.as_bytes());
    let kind = sink.split(' ').next().unwrap_or("sink");
    data_dir
        .join("export")
        .join(format!("{kind}-{}.cursor", hex::encode(&digest[..8])))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_is_bound_to_its_log_and_sink() {
        let d = tempfile::tempdir().unwrap();
        let f = CursorFile {
            path: d.path().join("sub/otlp.cursor"),
        };
        assert_eq!(f.load().unwrap(), None);
        let c = Cursor {
            instance: "abc".into(),
            sink: "otlp http://127.0.0.1:1/v1/logs".into(),
            exported: 7,
        };
        f.store(&c).unwrap();
        assert_eq!(f.load_for("abc", &c.sink).unwrap(), Some(c.clone()));
        let e = f.load_for("other", &c.sink).unwrap_err().to_string();
        assert!(e.contains("belongs to audit log abc"), "{e}");
        let e = f.load_for("abc", "jsonl stdout").unwrap_err().to_string();
        assert!(e.contains("give each sink its own --state"), "{e}");
        std::fs::write(&f.path, "{").unwrap();
        let e = f.load().unwrap_err().to_string();
        assert!(e.contains("unreadable"), "{e}");
    }
}
