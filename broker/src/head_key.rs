//! The audit log's HMAC key, kept in the OS keyring (on Linux without a Secret Service: the
//! kernel's keyutils store). This is the only place the broker touches the keyring; the secrets
//! helper will take it over.
//!
//! Each database has its own key, named by the database's instance id. A missing key for a log
//! that already has entries is an error, not a reason to make a new key: a new key would make
//! every old entry fail verification, or worse, let a rewritten log pass.

use std::path::{Path, PathBuf};

const SERVICE: &str = "gatehouse";

/// Why the key could not be had.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("the OS keyring cannot be used: {0}")]
    Keyring(String),
    #[error("the audit key for this log (keyring entry {entry:?}) is not in the keyring, and the log already has entries. The kernel keyutils store forgets keys at reboot; the log can still be checked without its key (`gatehouse verify-audit`), or moved aside to start a fresh one")]
    Missing { entry: String },
    #[error("the audit key in the keyring is malformed")]
    Malformed,
    #[error("the audit key file {path}: {reason}")]
    File { path: String, reason: String },
}

/// Where a loaded key came from, for the broker's start row and `verify-audit`.
#[derive(Debug, Clone, PartialEq)]
pub enum KeyOrigin {
    Keyring,
    /// The keyring failed and the broker was told to fall back to a 0600 file in its data dir.
    File {
        path: PathBuf,
        keyring_error: String,
    },
}

impl std::fmt::Display for KeyOrigin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KeyOrigin::Keyring => f.write_str("OS keyring"),
            KeyOrigin::File {
                path,
                keyring_error,
            } => write!(
                f,
                "file {} (weaker: the OS keyring failed: {keyring_error})",
                path.display()
            ),
        }
    }
}

/// 32 key bytes, kept only in the broker's memory and the keyring.
#[derive(Clone)]
pub struct AuditKey(pub [u8; 32]);

impl std::fmt::Debug for AuditKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AuditKey(..)")
    }
}

fn entry_name(instance: &str) -> String {
    format!("audit-key-{instance}")
}

/// The fallback file's path inside the data dir.
pub fn fallback_file(data_dir: &Path) -> PathBuf {
    data_dir.join("audit.key")
}

fn decode(s: &str) -> Option<AuditKey> {
    let v = hex::decode(s.trim()).ok()?;
    Some(AuditKey(v.try_into().ok()?))
}

/// The keyring entry for `instance`.
///
/// On Linux the keyutils store is used with the *user* keyring (shared by every process of
/// this uid) rather than the crate's default, the session keyring: a broker started in the
/// background and a later `gatehouse verify-audit` need not share a session, and a key kept
/// only in the broker's session keyring would be invisible to the verifier. The key is also
/// linked into the persistent keyring, as the crate does.
#[cfg(target_os = "linux")]
fn entry(instance: &str) -> Result<keyring::Entry, KeyError> {
    use linux_keyutils::{KeyRing, KeyRingIdentifier};
    let user = KeyRing::from_special_id(KeyRingIdentifier::User, true)
        .map_err(|e| KeyError::Keyring(format!("the kernel user keyring: {e:?}")))?;
    let cred = keyring::keyutils::KeyutilsCredential {
        session: user,
        persistent: KeyRing::get_persistent(KeyRingIdentifier::User).ok(),
        description: format!("{SERVICE}:{}", entry_name(instance)),
    };
    Ok(keyring::Entry::new_with_credential(Box::new(cred)))
}

#[cfg(not(target_os = "linux"))]
fn entry(instance: &str) -> Result<keyring::Entry, KeyError> {
    keyring::Entry::new(SERVICE, &entry_name(instance))
        .map_err(|e| KeyError::Keyring(e.to_string()))
}

fn keyring_get(instance: &str) -> Result<Option<AuditKey>, KeyError> {
    let entry = entry(instance)?;
    match entry.get_password() {
        Ok(s) => decode(&s).map(Some).ok_or(KeyError::Malformed),
        Err(keyring::Error::NoEntry) => Ok(None),
        Err(e) => Err(KeyError::Keyring(e.to_string())),
    }
}

fn keyring_set(instance: &str, key: &AuditKey) -> Result<(), KeyError> {
    let entry = entry(instance)?;
    entry
        .set_password(&hex::encode(key.0))
        .map_err(|e| KeyError::Keyring(e.to_string()))?;
    // Read it back: a store that accepts writes but loses them must fail here, not at the
    // next start.
    match keyring_get(instance)? {
        Some(k) if k.0 == key.0 => Ok(()),
        _ => Err(KeyError::Keyring(
            "the key written could not be read back".into(),
        )),
    }
}

fn file_get(path: &Path) -> Result<Option<AuditKey>, KeyError> {
    let err = |reason: String| KeyError::File {
        path: path.display().to_string(),
        reason,
    };
    match std::fs::read_to_string(path) {
        Ok(s) => decode(&s).map(Some).ok_or_else(|| err("malformed".into())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(err(e.to_string())),
    }
}

fn file_set(path: &Path, key: &AuditKey) -> Result<(), KeyError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let err = |reason: String| KeyError::File {
        path: path.display().to_string(),
        reason,
    };
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| err(e.to_string()))?;
    f.write_all(hex::encode(key.0).as_bytes())
        .and_then(|_| f.sync_all())
        .map_err(|e| err(e.to_string()))
}

/// The key for `instance`, made if `may_create` (a log with no entries yet). With
/// `fallback` set, a keyring that cannot be used at all falls back to that file (and the origin
/// says so); a key that is merely missing from a working keyring never does.
pub fn load_or_create(
    instance: &str,
    may_create: bool,
    fallback: Option<&Path>,
) -> Result<(AuditKey, KeyOrigin), KeyError> {
    let from_keyring = (|| {
        if let Some(k) = keyring_get(instance)? {
            return Ok(Some(k));
        }
        if !may_create {
            return Ok(None);
        }
        let k = AuditKey(rand::random());
        keyring_set(instance, &k)?;
        Ok(Some(k))
    })();
    match (from_keyring, fallback) {
        (Ok(Some(k)), _) => Ok((k, KeyOrigin::Keyring)),
        (Ok(None), _) => Err(KeyError::Missing {
            entry: format!("{SERVICE}/{}", entry_name(instance)),
        }),
        (Err(KeyError::Keyring(e)), Some(path)) => {
            let origin = KeyOrigin::File {
                path: path.to_path_buf(),
                keyring_error: e.clone(),
            };
            if let Some(k) = file_get(path)? {
                return Ok((k, origin));
            }
            if !may_create {
                return Err(KeyError::Keyring(e));
            }
            let k = AuditKey(rand::random());
            file_set(path, &k)?;
            Ok((k, origin))
        }
        (Err(e), _) => Err(e),
    }
}

/// The key for `instance` for verification only: the keyring first, then the fallback file if
/// one exists (a log written while the keyring failed).
pub fn load_for_verify(instance: &str, fallback: &Path) -> Result<(AuditKey, KeyOrigin), KeyError> {
    let kr = keyring_get(instance);
    if let Ok(Some(k)) = kr {
        return Ok((k, KeyOrigin::Keyring));
    }
    if let Some(k) = file_get(fallback)? {
        return Ok((
            k,
            KeyOrigin::File {
                path: fallback.to_path_buf(),
                keyring_error: match &kr {
                    Err(e) => e.to_string(),
                    _ => "the key is not in the keyring".into(),
                },
            },
        ));
    }
    match kr {
        Err(e) => Err(e),
        Ok(_) => Err(KeyError::Missing {
            entry: format!("{SERVICE}/{}", entry_name(instance)),
        }),
    }
}
