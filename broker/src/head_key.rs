//! The audit log's key, as the broker reaches it: only through its supervised secrets-helper,
//! which keeps the key in the OS keyring (on Linux by default the kernel keyutils user keyring,
//! `gatehouse:audit-key-INSTANCE`) and answers MACs, never the key. No key byte is ever in this
//! process. (`verify-audit` and `gatehouse secret` reach the same key through a private helper
//! of their own, cli/src/private_helper.rs; both build the MAC request and read its answer with
//! `audit_store::seal`.)
//!
//! Each database has its own key, named by the database's instance id. A missing key for a log
//! that already has entries is an error, not a reason to make a new key (the helper refuses
//! with `AuditKeyMissing`): a new key would make every old entry fail verification, or worse,
//! let a rewritten log pass.
//!
//! The hand-off. The store's writer is a plain thread; the helper channel lives on the
//! broker's current-thread runtime. [`HelperSeal`] (used by the writer) sends each batch's
//! `(seq, hash)` list and head over an unbounded channel to [`bridge`], a task on the runtime,
//! and blocks (the writer thread, never the runtime) on a oneshot for the answer. The bridge
//! awaits the supervised helper's slot, so a restarting helper is waited for and a helper that
//! died during a call is asked again (a MAC request has no effect, so repeating it is safe).
//! What the writer does when no MAC can be had is in audit-store/src/writer.rs.

use crate::helpers::{CallError, HelperSlot};
use audit_store::seal::{self, mac_reply, mac_request, Mac, Seal, SealError};
use ipc_schema::secrets::{AuditHead, AuditRow, SecretsReply, SecretsRequest};
use ipc_schema::Body;
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot};

/// How often the bridge asks again after the helper died during a MAC call.
const CRASH_RETRIES: u32 = 2;

type Macs = (Vec<Mac>, Option<Mac>);

/// Asks the supervised secrets-helper to make sure the key of `instance` exists (creating it
/// only when `may_create`: the log has no entries yet). Returns whether it was created.
pub async fn open_key(
    slot: &HelperSlot,
    instance: &str,
    may_create: bool,
) -> Result<bool, SealError> {
    let req = SecretsRequest::AuditKey {
        instance: seal::instance(instance)?,
        may_create,
    };
    match slot.call(Body::Secrets(req)).await {
        Ok(Body::SecretsReply(SecretsReply::AuditKey { created })) => Ok(created),
        Ok(Body::SecretsReply(SecretsReply::Failed(e))) => Err(SealError(e.message)),
        Ok(other) => Err(SealError(format!(
            "unexpected answer from the secrets-helper: {:?}",
            other.kind()
        ))),
        Err(e) => Err(SealError(e.to_string())),
    }
}

struct MacJob {
    req: SecretsRequest,
    reply: oneshot::Sender<Result<Macs, SealError>>,
}

/// The writer thread's seal: MACs from the broker's supervised secrets-helper.
pub struct HelperSeal {
    jobs: mpsc::UnboundedSender<MacJob>,
}

/// Starts the bridge task (on the broker's LocalSet) that serves [`HelperSeal`]s.
pub fn bridge(slot: Arc<HelperSlot>) -> HelperSeal {
    let (tx, mut rx) = mpsc::unbounded_channel::<MacJob>();
    tokio::task::spawn_local(async move {
        while let Some(job) = rx.recv().await {
            let mut crashes = 0;
            let answer = loop {
                match slot.call(Body::Secrets(job.req.clone())).await {
                    Ok(Body::SecretsReply(r)) => break mac_reply(r),
                    Ok(other) => {
                        break Err(SealError(format!(
                            "unexpected answer from the secrets-helper: {:?}",
                            other.kind()
                        )))
                    }
                    Err(CallError::Crashed { .. }) if crashes < CRASH_RETRIES => crashes += 1,
                    Err(e) => break Err(SealError(e.to_string())),
                }
            };
            let _ = job.reply.send(answer);
        }
    });
    HelperSeal { jobs: tx }
}

impl Seal for HelperSeal {
    fn macs(
        &self,
        instance: &str,
        rows: &[AuditRow],
        head: Option<&AuditHead>,
    ) -> Result<Macs, SealError> {
        let (reply, answer) = oneshot::channel();
        let req = mac_request(instance, rows, head)?;
        self.jobs
            .send(MacJob { req, reply })
            .map_err(|_| SealError("the broker's event loop has stopped".into()))?;
        // The writer thread waits here; the runtime thread only relays.
        answer
            .blocking_recv()
            .map_err(|_| SealError("the broker's event loop has stopped".into()))?
    }
}
