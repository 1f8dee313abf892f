//! `http_request` carried out: the secrets-helper makes the credential header for the checked
//! host (the broker passes it on without looking), the net-helper sends the request and scrubs
//! the credential from the reply.
//!
//! GET and HEAD are reads (no ledger); other methods are effectful and come here only once the
//! ledger says `executing`.

use super::fs::EffectAnswer;
use super::net::{fetched_text, net_call, net_refusal, network_failed, tool_limits, whole_text};
use super::{failed, refused};
use crate::sessions::SessionRef;
use crate::Ctx;
use ipc_schema::host::HostPattern;
use ipc_schema::net::{CheckedTarget, HttpSend, NetReply, NetRequest};
use ipc_schema::secrets::{CredentialHeader, CredentialName, SecretsReply, SecretsRequest};
use ipc_schema::tool::{
    Failure, HttpRequest, HttpResponse, RefusalKind, ToolName, ToolReply, ToolResult,
};
use ipc_schema::{Body, ErrorCode, Role};
use std::rc::Rc;

/// The header for credential `name`, made by the secrets-helper for `host` (it refuses a host
/// the credential is not bound to).
pub(super) async fn attach(
    ctx: &Rc<Ctx>,
    name: &CredentialName,
    host: &ipc_schema::host::Host,
) -> Result<CredentialHeader, ToolReply> {
    let Some(slot) = ctx.helpers.slot(Role::Secrets) else {
        return Err(failed(
            ErrorCode::HelperUnavailable,
            "there is no secrets-helper",
        ));
    };
    let req = SecretsRequest::Attach {
        name: name.clone(),
        host: host.to_string(),
    };
    match slot.call(Body::Secrets(req)).await {
        Ok(Body::SecretsReply(SecretsReply::Attached(h))) => Ok(h),
        Ok(Body::SecretsReply(SecretsReply::Failed(e))) => Err(refused(
            RefusalKind::Network,
            format!("credential {name} was not added for {host}: {}", e.message),
            None,
            None,
        )),
        Ok(Body::Error(e)) => Err(failed(e.code, e.message)),
        Ok(other) => Err(failed(
            ErrorCode::Internal,
            format!("the secrets-helper answered {:?}", other.kind()),
        )),
        Err(e) => Err(failed(crate::call_error_reply(&e).code, e.to_string())),
    }
}

/// Where sending got to, for the ledger: a failure before anything left gatehouse is a
/// different thing from one after the request may have reached the server.
enum SendError {
    /// Nothing was sent (the credential was refused, the helper was not running).
    NotSent(ToolReply),
    /// The net-helper had the request: it refused or failed, or the reply was lost.
    Sent(ToolReply),
}

async fn send_inner(
    ctx: &Rc<Ctx>,
    a: &HttpRequest,
    checked: &CheckedTarget,
    allowed_hosts: Option<Vec<HostPattern>>,
) -> Result<ToolResult, SendError> {
    let credential = match &a.credential {
        Some(name) => Some(
            attach(ctx, name, &checked.host)
                .await
                .map_err(SendError::NotSent)?,
        ),
        None => None,
    };
    let send = HttpSend {
        method: a.method,
        // The URL the card showed: the helper checks it all again and pins the connection.
        url: checked.url.clone(),
        headers: a.headers.clone(),
        body: a.body.clone(),
        credential,
        limits: tool_limits(),
        allowed_hosts,
    };
    let reply = match net_call(ctx, NetRequest::Http(send)).await {
        Ok(r) => r,
        // The helper was not there: nothing went out.
        Err(
            r @ ToolReply::Failed(Failure {
                code: ErrorCode::HelperUnavailable,
                ..
            }),
        ) => return Err(SendError::NotSent(r)),
        Err(r) => return Err(SendError::Sent(r)),
    };
    let reply = match reply {
        NetReply::Http(h) => h,
        NetReply::Refused(r) => return Err(SendError::Sent(net_refusal(r))),
        NetReply::Failed { reason } => return Err(SendError::Sent(network_failed(&reason))),
        other => {
            return Err(SendError::Sent(failed(
                ErrorCode::Internal,
                format!("the net-helper answered an http request with {other:?}"),
            )))
        }
    };
    let text = whole_text(ctx, &reply.page)
        .await
        .map_err(SendError::Sent)?;
    Ok(ToolResult::HttpResponse(HttpResponse {
        page: fetched_text(&reply.page, text),
        headers: reply.headers,
        credential_sent: reply.credential_sent,
        redactions: reply.redactions,
    }))
}

/// A GET or HEAD (no ledger).
pub async fn send(
    ctx: &Rc<Ctx>,
    a: &HttpRequest,
    checked: &CheckedTarget,
    allowed_hosts: Option<Vec<HostPattern>>,
) -> Result<ToolResult, ToolReply> {
    send_inner(ctx, a, checked, allowed_hosts)
        .await
        .map_err(|e| match e {
            SendError::NotSent(r) | SendError::Sent(r) => r,
        })
}

fn as_failure(r: ToolReply) -> Failure {
    match r {
        ToolReply::Failed(f) => f,
        ToolReply::Refused(r) => Failure::new(ErrorCode::Refused, r.message),
        other => Failure::new(ErrorCode::Internal, format!("unexpected reply {other:?}")),
    }
}

/// An effectful request (already `executing` in the ledger). The reply is outside text the
/// session receives: it is remembered for its later proposals.
pub async fn execute_effect(
    ctx: &Rc<Ctx>,
    session: &SessionRef,
    call_number: u64,
    a: &HttpRequest,
    checked: Option<&CheckedTarget>,
) -> EffectAnswer {
    let Some(checked) = checked else {
        return EffectAnswer::NeverSent(as_failure(failed(
            ErrorCode::Internal,
            "the request's target was not checked",
        )));
    };
    let hosts = match super::net::allowed_hosts(ctx, session) {
        Ok(h) => h,
        Err(r) => return EffectAnswer::NeverSent(as_failure(r)),
    };
    match send_inner(ctx, a, checked, hosts).await {
        Ok(r) => {
            super::net::remember_outside(session, ToolName::HttpRequest, call_number, &r);
            EffectAnswer::Done(Box::new(r))
        }
        Err(SendError::NotSent(r)) => EffectAnswer::NeverSent(as_failure(r)),
        // The helper dying with the request in hand leaves the effect unknown.
        Err(SendError::Sent(ToolReply::Failed(f))) if f.code == ErrorCode::HelperCrashed => {
            EffectAnswer::Unknown(f.message)
        }
        Err(SendError::Sent(r)) => EffectAnswer::Failed(as_failure(r)),
    }
}
