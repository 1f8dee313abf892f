//! Where the audit chain's MACs come from.
//!
//! The store never holds the audit key. It hands `(seq, hash)` pairs and the head to a [`Seal`]
//! and writes back the MACs it is given. In the broker and in `gatehouse verify-audit` the seal
//! is the secrets-helper (the broker's supervised one, broker/src/head_key.rs; the command
//! line's private one, cli/src/private_helper.rs), which keeps the key in the OS keyring and
//! never exports it; both ask it with [`mac_request`] and read its answer with [`mac_reply`].
//! Unit tests and `bench/` use [`super::chain::Sealer`], a key in memory.

use ipc_schema::secrets::{
    AuditHead, AuditInstance, AuditRow, SecretsReply, SecretsRequest, MAX_AUDIT_ROWS,
};

pub type Mac = [u8; 32];

/// Why MACs could not be had (the secrets-helper is down, refused, or the key is missing).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct SealError(pub String);

/// MACs rows and heads under one audit log's key, without showing the key.
pub trait Seal: Send + Sync {
    /// `HMAC(key, "row" || seq || hash)` for each row, in order (at most
    /// [`MAX_AUDIT_ROWS`]), and `HMAC(key, "head" || len(instance) || instance || count ||
    /// head)` if `head` is given.
    fn macs(
        &self,
        instance: &str,
        rows: &[AuditRow],
        head: Option<&AuditHead>,
    ) -> Result<(Vec<Mac>, Option<Mac>), SealError>;
}

/// [`Seal::macs`] for any number of rows: one call per [`MAX_AUDIT_ROWS`], the head with the
/// last. Checks that the seal answered exactly what was asked.
pub fn macs_all<S: Seal + ?Sized>(
    seal: &S,
    instance: &str,
    rows: &[AuditRow],
    head: Option<&AuditHead>,
) -> Result<(Vec<Mac>, Option<Mac>), SealError> {
    if rows.is_empty() && head.is_none() {
        return Ok((Vec::new(), None));
    }
    let mut out = Vec::with_capacity(rows.len());
    let mut head_mac = None;
    let chunks: Vec<&[AuditRow]> = if rows.is_empty() {
        vec![&[]]
    } else {
        rows.chunks(MAX_AUDIT_ROWS).collect()
    };
    let last = chunks.len() - 1;
    for (i, chunk) in chunks.into_iter().enumerate() {
        let (macs, h) = seal.macs(instance, chunk, if i == last { head } else { None })?;
        if macs.len() != chunk.len() || h.is_some() != (i == last && head.is_some()) {
            return Err(SealError(format!(
                "the seal answered {} MACs for {} rows",
                macs.len(),
                chunk.len()
            )));
        }
        out.extend(macs);
        head_mac = h;
    }
    Ok((out, head_mac))
}

/// Compares two MACs in time independent of where they differ.
pub fn mac_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl<T: Seal + ?Sized> Seal for &T {
    fn macs(
        &self,
        instance: &str,
        rows: &[AuditRow],
        head: Option<&AuditHead>,
    ) -> Result<(Vec<Mac>, Option<Mac>), SealError> {
        (**self).macs(instance, rows, head)
    }
}

/// The instance id as the secrets-helper names it.
pub fn instance(s: &str) -> Result<AuditInstance, SealError> {
    AuditInstance::parse(s).map_err(|e| SealError(e.0))
}

/// The secrets-helper's request for [`Seal::macs`] of `rows` and `head` under `instance`'s key.
pub fn mac_request(
    instance: &str,
    rows: &[AuditRow],
    head: Option<&AuditHead>,
) -> Result<SecretsRequest, SealError> {
    Ok(SecretsRequest::AuditMac {
        instance: self::instance(instance)?,
        rows: rows.to_vec(),
        head: head.copied(),
    })
}

/// The MACs in the secrets-helper's answer to a [`mac_request`].
pub fn mac_reply(reply: SecretsReply) -> Result<(Vec<Mac>, Option<Mac>), SealError> {
    match reply {
        SecretsReply::AuditMacs { rows, head } => Ok((rows, head)),
        SecretsReply::Failed(e) => Err(SealError(format!("the secrets-helper: {}", e.message))),
        other => Err(SealError(format!(
            "unexpected answer from the secrets-helper: {other:?}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::super::chain::Sealer;
    use super::*;
    use std::sync::Mutex;

    /// Records the size of each call and whether it carried the head.
    struct Counting(Sealer, Mutex<Vec<(usize, bool)>>);

    impl Seal for Counting {
        fn macs(
            &self,
            instance: &str,
            rows: &[AuditRow],
            head: Option<&AuditHead>,
        ) -> Result<(Vec<Mac>, Option<Mac>), SealError> {
            self.1.lock().unwrap().push((rows.len(), head.is_some()));
            self.0.macs(instance, rows, head)
        }
    }

    #[test]
    fn rows_go_in_batches_of_the_helper_limit_with_the_head_last() {
        let s = Counting(Sealer::new(b"k"), Mutex::default());
        let rows: Vec<AuditRow> = (1..=MAX_AUDIT_ROWS as i64 * 2 + 1)
            .map(|seq| AuditRow { seq, hash: [1; 32] })
            .collect();
        let head = AuditHead {
            count: 3,
            head: [2; 32],
        };
        let (macs, h) = macs_all(&s, "i", &rows, Some(&head)).unwrap();
        assert_eq!(
            *s.1.lock().unwrap(),
            [(MAX_AUDIT_ROWS, false), (MAX_AUDIT_ROWS, false), (1, true)]
        );
        assert_eq!(macs.len(), rows.len());
        assert_eq!(macs[8192], s.0.row_mac(8193, &[1; 32]));
        assert_eq!(h, Some(s.0.head_mac("i", 3, &[2; 32])));
        // Nothing to do: no call at all.
        let (m, h) = macs_all(&s, "i", &[], None).unwrap();
        assert!(m.is_empty() && h.is_none());
        assert_eq!(s.1.lock().unwrap().len(), 3);
    }

    /// A seal that answers fewer MACs than asked is an error, not a short log.
    struct Short;

    impl Seal for Short {
        fn macs(
            &self,
            _: &str,
            _: &[AuditRow],
            _: Option<&AuditHead>,
        ) -> Result<(Vec<Mac>, Option<Mac>), SealError> {
            Ok((Vec::new(), None))
        }
    }

    #[test]
    fn a_short_answer_is_refused() {
        let rows = [AuditRow {
            seq: 1,
            hash: [0; 32],
        }];
        let e = macs_all(&Short, "i", &rows, None).unwrap_err();
        assert_eq!(e.0, "the seal answered 0 MACs for 1 rows");
        assert!(mac_eq(&[1, 2], &[1, 2]) && !mac_eq(&[1, 2], &[1, 3]) && !mac_eq(&[1], &[1, 2]));
    }
}
