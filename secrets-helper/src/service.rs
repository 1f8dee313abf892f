//! What the helper does with each request.

use crate::audit_key::AuditKeys;
use crate::credentials;
use crate::store::{Store, StoreError};
use ipc_schema::secrets::{
    SecretsError, SecretsErrorKind, SecretsReply, SecretsRequest, StoreStatus,
};

/// The helper's state: its one store, the namespace of the gatehouse instance it serves, and
/// the audit keys it has opened.
pub struct Service {
    store: Box<dyn Store>,
    namespace: String,
    audit: AuditKeys,
}

/// A store failure as a reply.
impl From<StoreError> for SecretsError {
    fn from(e: StoreError) -> SecretsError {
        let kind = match e {
            StoreError::Locked(_) => SecretsErrorKind::Locked,
            _ => SecretsErrorKind::Store,
        };
        err(kind, e.to_string())
    }
}

/// A failed request's reply.
pub fn err(kind: SecretsErrorKind, message: impl Into<String>) -> SecretsError {
    SecretsError {
        kind,
        message: message.into(),
    }
}

/// A reply, and whether the helper must stop after sending it (its store connection broke;
/// the broker restarts it, which reconnects).
pub struct Answer {
    pub reply: SecretsReply,
    pub stop: bool,
}

impl Service {
    pub fn new(store: Box<dyn Store>, namespace: String) -> Service {
        Service {
            store,
            namespace,
            audit: AuditKeys::default(),
        }
    }

    pub fn status(&mut self) -> StoreStatus {
        let problem = self.store.probe().err().map(|e| e.to_string());
        StoreStatus {
            kind: self.store.kind(),
            location: self.store.location(),
            survives_reboot: self.store.kind() != ipc_schema::secrets::StoreKind::Keyutils,
            namespace: self.namespace.clone(),
            problem,
        }
    }

    pub fn handle(&mut self, req: SecretsRequest) -> Answer {
        let ns = self.namespace.clone();
        let store = self.store.as_mut();
        let result: Result<SecretsReply, SecretsError> = match req {
            SecretsRequest::Status => Ok(SecretsReply::Status(self.status())),
            SecretsRequest::List => credentials::list(store, &ns).map(SecretsReply::Credentials),
            SecretsRequest::Has { name } => {
                credentials::describe(store, &ns, &name).map(SecretsReply::Credential)
            }
            SecretsRequest::Set { spec, value } => {
                credentials::set(store, &ns, spec, value).map(|(info, value_dropped)| {
                    SecretsReply::Saved {
                        info,
                        value_dropped,
                    }
                })
            }
            SecretsRequest::Delete { name } => credentials::delete(store, &ns, &name)
                .map(|existed| SecretsReply::Deleted { existed }),
            SecretsRequest::Attach { name, host } => {
                credentials::attach(store, &ns, &name, &host).map(SecretsReply::Attached)
            }
            SecretsRequest::ServerEnv { name, reach } => {
                credentials::server_env(store, &ns, &name, &reach).map(SecretsReply::ServerEnv)
            }
            SecretsRequest::AuditKey {
                instance,
                may_create,
            } => self
                .audit
                .open(store, &instance, may_create)
                .map(|created| SecretsReply::AuditKey { created }),
            SecretsRequest::AuditMac {
                instance,
                rows,
                head,
            } => self
                .audit
                .mac(store, &instance, &rows, head.as_ref())
                .map(|(rows, head)| SecretsReply::AuditMacs { rows, head }),
        };
        match result {
            Ok(reply) => Answer { reply, stop: false },
            Err(e) => Answer {
                reply: SecretsReply::Failed(e),
                stop: self.store.is_broken(),
            },
        }
    }
}
