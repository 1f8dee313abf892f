//! The audit log's HMAC key: made and kept in the store, used here, never sent anywhere.
//!
//! This helper is the only holder of the key: the broker's audit writer and
//! `gatehouse verify-audit` (through a private helper of its own) send `(seq, hash)` pairs and
//! heads and get MACs back (broker/src/head_key.rs): row `HMAC(key, "row" || seq || hash)`, head
//! `HMAC(key, "head" || len(instance) || instance || count || head)`, integers little-endian, the
//! layout audit-store/src/chain.rs documents. The key is kept as 64 hex characters under the
//! name the broker used when it still held the key itself, so logs written then keep theirs.

use crate::service::err;
use crate::store::{ItemKey, Store, StoreError};
use hmac::{Hmac, Mac};
use ipc_schema::secrets::{
    AuditHead, AuditInstance, AuditRow, SecretsError, SecretsErrorKind, MAX_AUDIT_ROWS,
};
use sha2::Sha256;
use std::collections::HashMap;
use zeroize::Zeroizing;

type HmacSha256 = Hmac<Sha256>;

/// The MACs of a batch of rows, and of the head if one was asked for.
pub type Macs = (Vec<[u8; 32]>, Option<[u8; 32]>);

/// The keys of the logs this helper has opened, in memory only.
#[derive(Default)]
pub struct AuditKeys {
    keys: HashMap<AuditInstance, Zeroizing<[u8; 32]>>,
}

fn decode_key(blob: &[u8]) -> Option<Zeroizing<[u8; 32]>> {
    let text = std::str::from_utf8(blob).ok()?.trim();
    let mut key = Zeroizing::new([0u8; 32]);
    hex::decode_to_slice(text, &mut key[..]).ok()?;
    Some(key)
}

/// Reads the key of `instance` from `store`, if it is there.
pub fn read_key(
    store: &mut dyn Store,
    instance: &AuditInstance,
) -> Result<Option<Zeroizing<[u8; 32]>>, StoreError> {
    let Some(blob) = store.get(&ItemKey::AuditKey(instance.clone()))? else {
        return Ok(None);
    };
    decode_key(&blob)
        .map(Some)
        .ok_or_else(|| StoreError::Failed("audit key", "the stored audit key is malformed".into()))
}

impl AuditKeys {
    /// Makes sure the key of `instance` is loaded, creating it if it is missing and
    /// `may_create`. Returns whether it was created.
    pub fn open(
        &mut self,
        store: &mut dyn Store,
        instance: &AuditInstance,
        may_create: bool,
    ) -> Result<bool, SecretsError> {
        if self.keys.contains_key(instance) {
            return Ok(false);
        }
        if let Some(k) = read_key(store, instance)? {
            self.keys.insert(instance.clone(), k);
            return Ok(false);
        }
        if !may_create {
            let (log, kind) = (instance.as_str(), store.kind().as_str());
            let why = format!(
                "the audit key of log {log} is not in the {kind} store, and the log already has entries (the kernel keyutils store forgets keys at reboot); `gatehouse verify-audit` can still check the chain without it, or move the log aside to start a fresh one"
            );
            return Err(err(SecretsErrorKind::AuditKeyMissing, why));
        }
        let key = Zeroizing::new(rand::random::<[u8; 32]>());
        let text = Zeroizing::new(hex::encode(&key[..]));
        let item = ItemKey::AuditKey(instance.clone());
        store.put(&item, text.as_bytes())?;
        // Read it back: a store that accepts writes but loses them must fail now, not at the
        // next start.
        if read_key(store, instance)?.is_none_or(|k| k[..] != key[..]) {
            let why = "the audit key written to the store could not be read back";
            return Err(err(SecretsErrorKind::Store, why));
        }
        self.keys.insert(instance.clone(), key);
        Ok(true)
    }

    /// MACs rows and the head under `instance`'s key (loading it, never creating it).
    pub fn mac(
        &mut self,
        store: &mut dyn Store,
        instance: &AuditInstance,
        rows: &[AuditRow],
        head: Option<&AuditHead>,
    ) -> Result<Macs, SecretsError> {
        if rows.len() > MAX_AUDIT_ROWS {
            let why = format!(
                "{} rows in one request; at most {MAX_AUDIT_ROWS}",
                rows.len()
            );
            return Err(err(SecretsErrorKind::Invalid, why));
        }
        self.open(store, instance, false)?;
        let key = &self.keys[instance];
        let keyed = HmacSha256::new_from_slice(&key[..]).expect("HMAC takes any key length");
        let rows = rows.iter().map(|r| row_mac(&keyed, r)).collect();
        let head = head.map(|h| head_mac(&keyed, instance, h));
        Ok((rows, head))
    }
}

pub fn row_mac(keyed: &HmacSha256, r: &AuditRow) -> [u8; 32] {
    let mut m = keyed.clone();
    m.update(b"row");
    m.update(&r.seq.to_le_bytes());
    m.update(&r.hash);
    m.finalize().into_bytes().into()
}

pub fn head_mac(keyed: &HmacSha256, instance: &AuditInstance, h: &AuditHead) -> [u8; 32] {
    let mut m = keyed.clone();
    m.update(b"head");
    m.update(&(instance.as_str().len() as u32).to_le_bytes());
    m.update(instance.as_str().as_bytes());
    m.update(&h.count.to_le_bytes());
    m.update(&h.head);
    m.finalize().into_bytes().into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn macs_match_the_broker_sealer_layout() {
        // Computed independently: HMAC-SHA256 over the documented byte layout.
        let keyed = HmacSha256::new_from_slice(&[7u8; 32]).unwrap();
        let row = AuditRow {
            seq: 3,
            hash: [9u8; 32],
        };
        let mut expect = HmacSha256::new_from_slice(&[7u8; 32]).unwrap();
        let mut msg = b"row".to_vec();
        msg.extend_from_slice(&3i64.to_le_bytes());
        msg.extend_from_slice(&[9u8; 32]);
        expect.update(&msg);
        assert_eq!(
            row_mac(&keyed, &row)[..],
            expect.finalize().into_bytes()[..]
        );

        let inst = AuditInstance::parse("abc").unwrap();
        let h = AuditHead {
            count: 10,
            head: [1u8; 32],
        };
        let mut msg = b"head".to_vec();
        msg.extend_from_slice(&3u32.to_le_bytes());
        msg.extend_from_slice(b"abc");
        msg.extend_from_slice(&10i64.to_le_bytes());
        msg.extend_from_slice(&[1u8; 32]);
        let mut expect = HmacSha256::new_from_slice(&[7u8; 32]).unwrap();
        expect.update(&msg);
        assert_eq!(
            head_mac(&keyed, &inst, &h)[..],
            expect.finalize().into_bytes()[..]
        );
    }

    #[test]
    fn keys_decode_from_hex_text() {
        assert_eq!(
            decode_key(format!("{}\n", "ab".repeat(32)).as_bytes()).unwrap()[0],
            0xab
        );
        assert!(decode_key(b"abcd").is_none());
        assert!(decode_key(&[0xff; 64]).is_none());
    }
}
