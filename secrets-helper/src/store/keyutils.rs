//! The Linux kernel keyutils store: `user` keys in the user keyring of this uid (shared by all
//! of the user's processes, so the broker's helper, `gatehouse secret` and `verify-audit` see
//! the same items whatever session they run in), also linked into the user's persistent keyring
//! so they outlive a logout for a while. Nothing here survives a reboot; `doctor` says so.
//!
//! Keys are created readable by their owner uid, not only by a possessor: a process of the same
//! user in another session keyring (a background broker, an ssh login) must be able to read
//! them, and the Secret Service gives same-uid processes the same access. The agent's commands
//! run under a seccomp filter that refuses every keyctl call.

use super::{CredentialNames, ItemKey, Store, StoreError};
use ipc_schema::secrets::{CredentialName, StoreKind};
use linux_keyutils::{
    Key, KeyError, KeyPermissionsBuilder, KeyRing, KeyRingIdentifier, KeyType, Permission,
};
use zeroize::Zeroizing;

const KIND: &str = "keyutils";
/// The largest payload of a `user` key.
const MAX_PAYLOAD: usize = 32767;

pub struct Keyutils {
    user: KeyRing,
    uid: u32,
}

fn failed(what: &str, e: KeyError) -> StoreError {
    let reason = match e {
        // EDQUOT: the uid's key quota (kernel.keys.maxbytes, 20,000 bytes for a user) is full.
        // Each link into a keyring keeps 4 bytes of it until that keyring is cleared or the
        // machine reboots, even after the key is gone, so a long uptime alone can fill it.
        KeyError::QuotaExceeded => format!(
            "{what}: the kernel's key quota of uid {} is used up (see /proc/key-users); \
             raise the sysctl kernel.keys.maxbytes (as root), or reboot, or choose \
             store = \"secret-service\" in [secrets]",
            nix::unistd::getuid()
        ),
        e => format!("{what}: {e:?}"),
    };
    StoreError::Failed(KIND, reason)
}

impl Keyutils {
    /// The user keyring of the calling uid.
    pub fn open() -> Result<Keyutils, StoreError> {
        // A process whose session keyring does not link the user keyring (a fresh anonymous
        // session, a system service with KeyringMode=private) neither possesses the user
        // keyring's keys nor may search it: every operation fails with EACCES. pam_keyinit links
        // it for login sessions; do the same (harmless where it is linked already).
        if let Ok(session) = KeyRing::from_special_id(KeyRingIdentifier::Session, false) {
            let _ = session.link_keyring_id(KeyRingIdentifier::User);
        }
        let user = KeyRing::from_special_id(KeyRingIdentifier::User, true).map_err(|e| {
            StoreError::Unavailable(KIND, format!("the kernel refused the user keyring ({e:?})"))
        })?;
        Ok(Keyutils {
            user,
            uid: nix::unistd::getuid().as_raw(),
        })
    }

    fn find(&self, desc: &str) -> Result<Option<Key>, StoreError> {
        match self.user.search(desc) {
            Ok(k) => Ok(Some(k)),
            Err(KeyError::KeyDoesNotExist) => Ok(None),
            // A key that expired or was revoked is as good as absent.
            Err(KeyError::KeyExpired | KeyError::KeyRevoked) => Ok(None),
            Err(e) => Err(failed("searching the user keyring", e)),
        }
    }

    fn owner_perms() -> linux_keyutils::KeyPermissions {
        let user = Permission::VIEW
            | Permission::READ
            | Permission::WRITE
            | Permission::SEARCH
            | Permission::SETATTR;
        KeyPermissionsBuilder::builder()
            .posessor(Permission::ALL)
            .user(user)
            .build()
    }
}

impl Store for Keyutils {
    fn kind(&self) -> StoreKind {
        StoreKind::Keyutils
    }

    fn location(&self) -> String {
        format!("the kernel user keyring of uid {}", self.uid)
    }

    fn probe(&mut self) -> Result<(), StoreError> {
        self.user
            .metadata()
            .map(|_| ())
            .map_err(|e| failed("describing the user keyring", e))
    }

    fn get(&mut self, key: &ItemKey) -> Result<Option<Zeroizing<Vec<u8>>>, StoreError> {
        let Some(k) = self.find(&key.description())? else {
            return Ok(None);
        };
        let mut buf = Zeroizing::new(vec![0u8; MAX_PAYLOAD]);
        let n = k.read(&mut *buf).map_err(|e| failed("reading a key", e))?;
        if n > buf.len() {
            let why = format!("a key holds {n} bytes, more than a user key can");
            return Err(StoreError::Failed(KIND, why));
        }
        Ok(Some(Zeroizing::new(buf[..n].to_vec())))
    }

    fn put(&mut self, key: &ItemKey, blob: &[u8]) -> Result<(), StoreError> {
        if blob.len() > MAX_PAYLOAD {
            let why = format!("{} bytes do not fit a kernel key", blob.len());
            return Err(StoreError::Failed(KIND, why));
        }
        let k = self
            .user
            .add_key(&key.description(), blob)
            .map_err(|e| failed("adding a key", e))?;
        k.set_perms(Self::owner_perms())
            .map_err(|e| failed("setting a key's permissions", e))?;
        // Best effort: the persistent keyring keeps the key over a logout; kernels and
        // containers without it still have the key in the user keyring.
        if let Ok(p) = KeyRing::get_persistent(KeyRingIdentifier::User) {
            let _ = p.link_key(k);
        }
        Ok(())
    }

    fn delete(&mut self, key: &ItemKey) -> Result<bool, StoreError> {
        let mut existed = false;
        // Invalidation removes the key from every keyring it is linked into (user and
        // persistent) at once. Loop: an older copy may still be linked somewhere.
        while let Some(k) = self.find(&key.description())? {
            k.invalidate().map_err(|e| failed("removing a key", e))?;
            existed = true;
        }
        Ok(existed)
    }

    fn credential_names(&mut self, namespace: &str) -> Result<CredentialNames, StoreError> {
        let prefix = format!("gatehouse:{namespace}:credential:");
        let mut names = CredentialNames::new();
        let persistent = KeyRing::get_persistent(KeyRingIdentifier::User).ok();
        for ring in std::iter::once(self.user).chain(persistent) {
            // Generously sized: the crate trusts the kernel's length beyond this capacity.
            let links = ring
                .get_links(1 << 16)
                .map_err(|e| failed("listing the user keyring", e))?;
            for node in links.iter() {
                let Some(k) = node.as_key() else { continue };
                let Ok(meta) = k.metadata() else { continue };
                if meta.get_type() != KeyType::User {
                    continue;
                }
                if let Some(name) = meta.get_description().strip_prefix(&prefix) {
                    if let Ok(n) = CredentialName::parse(name) {
                        names.insert(n);
                    }
                }
            }
        }
        Ok(names)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_key_quota_names_the_quota_and_the_remedies() {
        let e = failed("adding a key", KeyError::QuotaExceeded).to_string();
        let uid = nix::unistd::getuid();
        assert_eq!(
            e,
            format!(
                "the keyutils store failed: adding a key: the kernel's key quota of uid {uid} is \
                 used up (see /proc/key-users); raise the sysctl kernel.keys.maxbytes (as root), \
                 or reboot, or choose store = \"secret-service\" in [secrets]"
            )
        );
        // Any other error keeps the kernel's name for it.
        assert_eq!(
            failed("reading a key", KeyError::AccessDenied).to_string(),
            "the keyutils store failed: reading a key: AccessDenied"
        );
    }
}
