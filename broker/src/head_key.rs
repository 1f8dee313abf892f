//! The audit log's key, as the broker and `verify-audit` reach it: only through a
//! secrets-helper, which keeps the key in the OS keyring (on Linux by default the kernel
//! keyutils user keyring, `gatehouse:audit-key-INSTANCE`) and answers MACs, never the key. No
//! key byte is ever in this process.
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
//! What the writer does when no MAC can be had is in broker/src/store/writer.rs.

use crate::helpers::{CallError, HelperSlot};
use crate::secrets_link::PrivateHelper;
use audit_store::seal::{Mac, Seal, SealError};
use gatehouse_client::Dirs;
use ipc_schema::secrets::{AuditHead, AuditInstance, AuditRow, SecretsReply, SecretsRequest};
use ipc_schema::Body;
use std::sync::{Arc, Mutex};
use tokio::sync::{mpsc, oneshot};

/// How often the bridge asks again after the helper died during a MAC call.
const CRASH_RETRIES: u32 = 2;

type Macs = (Vec<Mac>, Option<Mac>);

/// The instance id as the secrets-helper names it.
pub fn instance(s: &str) -> Result<AuditInstance, SealError> {
    AuditInstance::parse(s).map_err(|e| SealError(e.0))
}

fn mac_request(
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

fn mac_reply(reply: SecretsReply) -> Result<Macs, SealError> {
    match reply {
        SecretsReply::AuditMacs { rows, head } => Ok((rows, head)),
        SecretsReply::Failed(e) => Err(SealError(format!("the secrets-helper: {}", e.message))),
        other => Err(SealError(format!(
            "unexpected answer from the secrets-helper: {other:?}"
        ))),
    }
}

/// Asks the supervised secrets-helper to make sure the key of `instance` exists (creating it
/// only when `may_create`: the log has no entries yet). Returns whether it was created.
pub async fn open_key(
    slot: &HelperSlot,
    instance: &str,
    may_create: bool,
) -> Result<bool, SealError> {
    let req = SecretsRequest::AuditKey {
        instance: self::instance(instance)?,
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

/// `verify-audit`'s seal: a private, locked-down secrets-helper started by the command itself,
/// so no broker needs to run (and none can lie to it).
pub struct PrivateSeal {
    helper: Mutex<PrivateHelper>,
}

impl PrivateSeal {
    /// Starts the helper and checks that it holds the key of `instance` (never creating one).
    pub fn open(dirs: &Dirs, instance: &str) -> Result<PrivateSeal, String> {
        let seal = PrivateSeal::new(PrivateHelper::start(dirs)?);
        seal.open_key(instance, false)?;
        Ok(seal)
    }

    pub fn new(helper: PrivateHelper) -> PrivateSeal {
        PrivateSeal {
            helper: Mutex::new(helper),
        }
    }

    /// Makes sure the key of `instance` is in the store (creating it only if `may_create`).
    pub fn open_key(&self, instance: &str, may_create: bool) -> Result<(), String> {
        let inst = self::instance(instance).map_err(|e| e.0)?;
        match self.request(SecretsRequest::AuditKey {
            instance: inst,
            may_create,
        })? {
            SecretsReply::AuditKey { .. } => Ok(()),
            SecretsReply::Failed(e) => Err(e.message),
            other => Err(format!(
                "unexpected answer from the secrets-helper: {other:?}"
            )),
        }
    }

    /// Any other request to the same helper (`gatehouse secret` uses one helper for both).
    pub fn request(&self, req: SecretsRequest) -> Result<SecretsReply, String> {
        self.helper
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .request(req)
    }
}

impl Seal for PrivateSeal {
    fn macs(
        &self,
        instance: &str,
        rows: &[AuditRow],
        head: Option<&AuditHead>,
    ) -> Result<Macs, SealError> {
        let req = mac_request(instance, rows, head)?;
        mac_reply(self.request(req).map_err(SealError)?)
    }
}
