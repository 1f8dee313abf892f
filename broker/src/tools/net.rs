//! The tool path's side of the net-helper: the canonical target of a URL (what policy judges
//! and an approval card shows), and `fetch_url` carried out.
//!
//! The net-helper's own rules (scheme, address table, redirects, content type, TLS, limits)
//! decide before policy does: a URL it refuses is refused with its reason, word for word, and
//! never reaches the human as a proposal.

use super::fs::Resolved;
use super::{failed, refused};
use crate::sessions::SessionRef;
use crate::Ctx;
use ipc_schema::host::HostPattern;
use ipc_schema::net::{
    CheckedTarget, FetchLimits, FetchRequest, FetchedPage, NetRefusal, NetReply, NetRequest,
};
use ipc_schema::tool::{FetchedText, RefusalKind, ToolCall, ToolName, ToolReply, ToolResult};
use ipc_schema::{Body, ErrorCode, Role};
use policy::eval::Target;
use std::rc::Rc;

/// The most body a tool-path fetch asks for. Lower than the net-helper's 1 MiB default because
/// the whole wrapped text must travel back to the gateway in one reply frame (MAX_FRAME, 1 MiB);
/// a charset conversion can grow the text, which [`TEXT_MAX`] catches.
pub const TOOL_FETCH_MAX_BODY: u32 = 768 * 1024;

/// The most wrapped text one reply carries: a frame, less room for the rest of the reply.
pub const TEXT_MAX: usize = ipc_schema::codec::MAX_FRAME - 64 * 1024;

/// The limits of a fetch or request made for an agent.
pub fn tool_limits() -> FetchLimits {
    FetchLimits {
        max_body_bytes: TOOL_FETCH_MAX_BODY,
        ..FetchLimits::default()
    }
}

/// A refusal by the net-helper's rules: its reason is the message.
pub fn net_refusal(r: NetRefusal) -> ToolReply {
    refused(RefusalKind::Network, r.reason, None, None)
}

/// One request to the net-helper. `Err` is the reply for the agent (the helper missing or
/// crashed, or an answer that makes no sense).
pub async fn net_call(ctx: &Rc<Ctx>, req: NetRequest) -> Result<NetReply, ToolReply> {
    let Some(slot) = ctx.helpers.slot(Role::Net) else {
        return Err(failed(
            ErrorCode::HelperUnavailable,
            "there is no net-helper",
        ));
    };
    match slot.call(Body::Net(req)).await {
        Ok(Body::NetReply(r)) => Ok(r),
        Ok(Body::Error(e)) => Err(failed(e.code, e.message)),
        Ok(other) => Err(failed(
            ErrorCode::Internal,
            format!("the net-helper answered {:?}", other.kind()),
        )),
        Err(e) => Err(failed(crate::call_error_reply(&e).code, e.to_string())),
    }
}

/// Parses, resolves and judges `url` without connecting.
pub async fn check(ctx: &Rc<Ctx>, url: &str) -> Result<CheckedTarget, ToolReply> {
    match net_call(ctx, NetRequest::Check { url: url.into() }).await? {
        NetReply::Checked(t) => Ok(t),
        NetReply::Refused(r) => Err(net_refusal(r)),
        NetReply::Failed { reason } => Err(network_failed(&reason)),
        other => Err(unexpected("a check", &other)),
    }
}

/// The network failed (refused or reset connection, DNS trouble, a broken reply). There is no
/// error code for "the network" in the schema; the message says it.
pub fn network_failed(reason: &str) -> ToolReply {
    failed(ErrorCode::Internal, format!("the network failed: {reason}"))
}

fn unexpected(what: &str, reply: &NetReply) -> ToolReply {
    let kind = format!("{reply:?}");
    let kind = kind
        .split(['(', ' ', '{'])
        .next()
        .unwrap_or("?")
        .to_string();
    failed(
        ErrorCode::Internal,
        format!("the net-helper answered {what} with {kind}"),
    )
}

/// Resolves a call's target: URLs by the net-helper (canonical URL, host, every address),
/// everything else by the fs-helper.
pub async fn resolve(
    ctx: &Rc<Ctx>,
    call: &ToolCall,
) -> Result<(Resolved, Option<CheckedTarget>), ToolReply> {
    let url = match call {
        ToolCall::FetchUrl(a) => &a.url,
        ToolCall::HttpRequest(a) => &a.url,
        _ => return Ok((super::fs::resolve(ctx, call).await?, None)),
    };
    let checked = check(ctx, url).await?;
    let resolved = Resolved {
        target: Target::Url {
            host: checked.host.clone(),
        },
        paths: vec![],
    };
    Ok((resolved, Some(checked)))
}

/// The whole wrapped text of a page: part 0, then parts 1.. read at once (the helper keeps
/// them only a short while).
pub async fn whole_text(ctx: &Rc<Ctx>, page: &FetchedPage) -> Result<String, ToolReply> {
    let mut text = page.text.clone();
    for index in 1..page.parts {
        match net_call(
            ctx,
            NetRequest::FetchPart {
                fetch: page.fetch,
                index,
            },
        )
        .await?
        {
            NetReply::FetchPart { text: t } => text.push_str(&t),
            NetReply::Failed { reason } => {
                return Err(failed(
                    ErrorCode::Internal,
                    format!("part {index} of the page is gone: {reason}"),
                ))
            }
            NetReply::Refused(r) => return Err(net_refusal(r)),
            other => return Err(unexpected("a part", &other)),
        }
        if text.len() > TEXT_MAX {
            return Err(too_long(text.len()));
        }
    }
    if text.len() > TEXT_MAX {
        return Err(too_long(text.len()));
    }
    Ok(text)
}

fn too_long(n: usize) -> ToolReply {
    refused(
        RefusalKind::Network,
        format!(
            "the page's text is over {TEXT_MAX} bytes (at least {n}), more than one tool reply carries"
        ),
        None,
        None,
    )
}

/// The agent's view of a page.
pub fn fetched_text(page: &FetchedPage, text: String) -> FetchedText {
    FetchedText {
        final_url: page.final_url.clone(),
        redirects: page.redirects.clone(),
        address: page.address,
        status: page.status,
        content_type: page.content_type.clone(),
        body_bytes: page.body_bytes,
        text,
    }
}

/// The session profile's network allowlist, for the net-helper to apply to every hop
/// (`None`: the profile has no list). A profile that is no longer in the policy refuses.
pub fn allowed_hosts(
    ctx: &Rc<Ctx>,
    session: &SessionRef,
) -> Result<Option<Vec<HostPattern>>, ToolReply> {
    let profile = session.borrow().profile.clone();
    let policy = ctx
        .gate
        .policy
        .borrow()
        .profile(&profile)
        .map_err(|why| refused(RefusalKind::Denied, why, None, None))?;
    Ok(policy.network.clone())
}

/// Carries out a `fetch_url`: the helper checks everything again (each hop's host against the
/// session's allowlist too) and pins the connection.
pub async fn fetch(
    ctx: &Rc<Ctx>,
    url: &str,
    allowed_hosts: Option<Vec<HostPattern>>,
) -> Result<ToolResult, ToolReply> {
    let req = FetchRequest {
        url: url.into(),
        limits: tool_limits(),
        allowed_hosts,
    };
    let page = match net_call(ctx, NetRequest::Fetch(req)).await? {
        NetReply::Fetched(p) => p,
        NetReply::Refused(r) => return Err(net_refusal(r)),
        NetReply::Failed { reason } => return Err(network_failed(&reason)),
        other => return Err(unexpected("a fetch", &other)),
    };
    let text = whole_text(ctx, &page).await?;
    Ok(ToolResult::Fetched(fetched_text(&page, text)))
}

/// Carries out a read-only network call (`fetch_url`, or `http_request` with GET or HEAD).
/// What the session receives is outside text: it is remembered for its later proposals.
pub async fn execute_read(
    ctx: &Rc<Ctx>,
    session: &SessionRef,
    call_number: u64,
    call: &ToolCall,
    checked: Option<&CheckedTarget>,
) -> Result<ToolResult, ToolReply> {
    let hosts = allowed_hosts(ctx, session)?;
    let r = match (call, checked) {
        (ToolCall::FetchUrl(a), _) => fetch(ctx, &a.url, hosts).await,
        (ToolCall::HttpRequest(a), Some(c)) => super::http::send(ctx, a, c, hosts).await,
        _ => Err(failed(ErrorCode::Internal, "not a read-only network call")),
    }?;
    if let Some(tool) = call.tool() {
        remember_outside(session, tool, call_number, &r);
    }
    Ok(r)
}

/// Remembers a page or reply the session is about to receive as outside text, with where it
/// came from and the number of the call that read it.
pub fn remember_outside(session: &SessionRef, tool: ToolName, call_number: u64, r: &ToolResult) {
    session.borrow_mut().outside.remember_result(
        tool,
        call_number,
        audit_store::now_ms() as u64,
        r,
    );
}
