//! The policy in force: the TOML document (or the built-in default profile), its validation,
//! revisioned atomic apply, and the decisions remembered from approval cards.

#![forbid(unsafe_code)]

pub mod compile;
pub mod doc;
pub mod eval;
pub mod launch;
pub mod protected;
pub mod rate;
pub mod replay;
pub mod servers;

use compile::{Policies, Policy};
use doc::PolicyDoc;
use ipc_schema::tool::ProfileName;
use protected::Protected;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::rc::Rc;

/// The policy file inside the config dir.
pub fn policy_path(config_dir: &Path) -> PathBuf {
    config_dir.join("policy.toml")
}

/// Why an apply was refused.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ApplyError {
    #[error("the policy was not applied: it does not parse: {0}")]
    Parse(String),
    #[error("the policy was not applied: its revision {given} is stale; the policy in force is revision {current}. Run `gatehouse policy show`, make your change on that, and apply again")]
    Stale { given: u64, current: u64 },
    #[error("the policy was not applied: {0}")]
    Invalid(String),
    #[error("the policy was not applied: writing {path} failed: {reason}")]
    Write { path: String, reason: String },
}

/// The policy in force, or why there is none.
pub struct PolicyState {
    path: PathBuf,
    /// The grant root of the default profile (the directory gatehouse was started in).
    default_root: Option<String>,
    pub protected: Protected,
    /// `Err`: the file does not parse or validate, and every call is refused with this reason.
    pub current: Result<Rc<Policies>, String>,
    pub revision: u64,
    pub document: String,
    pub source: String,
}

impl PolicyState {
    /// Loads `path`, or the default profile if it does not exist.
    pub fn load(path: PathBuf, default_root: Option<String>, protected: Protected) -> PolicyState {
        let mut s = PolicyState {
            path,
            default_root,
            protected,
            current: Err("not loaded".into()),
            revision: 0,
            document: String::new(),
            source: String::new(),
        };
        s.reload();
        s
    }

    fn reload(&mut self) {
        match std::fs::read_to_string(&self.path) {
            Ok(text) => {
                self.source = self.path.display().to_string();
                self.revision = lenient_revision(&text);
                self.current = PolicyDoc::parse(&text)
                    .map_err(|e| {
                        format!(
                            "the policy file {} does not parse: {e}",
                            self.path.display()
                        )
                    })
                    .and_then(|d| {
                        compile::compile(&d, &self.protected).map_err(|e| {
                            format!("the policy file {} is invalid: {e}", self.path.display())
                        })
                    })
                    .map(Rc::new);
                self.document = text;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let doc = doc::default_profile(self.default_root.as_deref());
                self.source = match &self.default_root {
                    Some(r) => format!("built-in default profile (grant: {r}; no {} yet)", self.path.display()),
                    None => format!(
                        "built-in default profile without a grant (gatehouse was started in a home directory or /; no {} yet)",
                        self.path.display()
                    ),
                };
                self.revision = 0;
                self.document = format!(
                    "# The built-in default profile. Edit and `gatehouse policy apply` it to change it.\n{}",
                    doc.to_toml()
                );
                self.current = compile::compile(&doc, &self.protected)
                    .map_err(|e| format!("the default profile is invalid: {e}"))
                    .map(Rc::new);
            }
            Err(e) => {
                self.source = self.path.display().to_string();
                self.document = String::new();
                self.current = Err(format!(
                    "the policy file {} cannot be read: {e}",
                    self.path.display()
                ));
            }
        }
    }

    /// Applies `text` whole, or refuses it whole. Returns the new revision.
    pub fn apply(&mut self, text: &str) -> Result<u64, ApplyError> {
        let doc = PolicyDoc::parse(text).map_err(ApplyError::Parse)?;
        if doc.revision != self.revision {
            return Err(ApplyError::Stale {
                given: doc.revision,
                current: self.revision,
            });
        }
        compile::compile(&doc, &self.protected).map_err(ApplyError::Invalid)?;
        let next = self.revision + 1;
        let stored = with_revision(text, next);
        // The stored text must mean the same document with the new revision.
        match PolicyDoc::parse(&stored) {
            Ok(mut d) if d.revision == next => {
                d.revision = doc.revision;
                if d != doc {
                    return Err(ApplyError::Invalid(
                        "internal: rewriting the revision changed the document".into(),
                    ));
                }
            }
            _ => {
                return Err(ApplyError::Invalid(
                    "internal: the revision could not be written".into(),
                ))
            }
        }
        write_atomically(&self.path, stored.as_bytes()).map_err(|e| ApplyError::Write {
            path: self.path.display().to_string(),
            reason: e.to_string(),
        })?;
        self.reload();
        Ok(next)
    }

    /// The union of every profile's grants, for the fs-helper's configuration (empty
    /// while the policy is invalid).
    pub fn fs_grants(&self) -> Vec<compile::FsGrant> {
        match &self.current {
            Ok(p) => p.fs_grants(),
            Err(_) => Vec::new(),
        }
    }

    /// The policy of profile `name`, or why a session of it can do nothing: the document is
    /// invalid, or it has no such profile.
    pub fn profile(&self, name: &ProfileName) -> Result<Rc<Policy>, String> {
        let all = self.current.as_ref().map_err(|e| e.clone())?;
        all.get(name)
            .cloned()
            .ok_or_else(|| unknown_profile(name, all))
    }
}

/// The refusal for a profile the policy does not have.
pub fn unknown_profile(name: &ProfileName, all: &Policies) -> String {
    format!(
        "there is no profile {name} in the policy (revision {}; its profiles: {}). Add [profile.{name}] with `gatehouse policy apply`, or start without --profile",
        all.revision,
        all.names()
    )
}

/// The `revision` of a document that may not validate (0 if it has none).
fn lenient_revision(text: &str) -> u64 {
    text.parse::<toml::Table>()
        .ok()
        .and_then(|t| t.get("revision").and_then(|v| v.as_integer()))
        .and_then(|r| u64::try_from(r).ok())
        .unwrap_or(0)
}

/// `text` with its top-level `revision` set to `rev`, comments and layout kept.
fn with_revision(text: &str, rev: u64) -> String {
    let mut out = String::with_capacity(text.len() + 16);
    let mut done = false;
    let mut in_top = true;
    for line in text.split_inclusive('\n') {
        let t = line.trim_start();
        if t.starts_with('[') {
            in_top = false;
        }
        if in_top && !done {
            if let Some(rest) = t.strip_prefix("revision") {
                if rest.trim_start().starts_with('=') {
                    out.push_str(&format!("revision = {rev}\n"));
                    done = true;
                    continue;
                }
            }
        }
        out.push_str(line);
    }
    if done {
        out
    } else {
        format!("revision = {rev}\n{out}")
    }
}

/// Replaces `path` with `bytes` all at once: a temporary file beside it, fsync, rename, fsync
/// of the directory.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let tmp = dir.join(format!(
        ".{}.{}.tmp",
        path.file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("policy"),
        std::process::id()
    ));
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    // Owner-only on Unix. Elsewhere the file takes the ACL its directory passes on.
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
    let mut f = opts.open(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(&tmp, path)?;
    ipc_schema::os_path::sync_dir(dir)
}

#[cfg(test)]
mod tests;
