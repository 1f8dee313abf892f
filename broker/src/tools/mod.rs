//! The tool path: a gateway's [`ToolCall`] through policy, the human's approval, the ledger and
//! the helper, to its [`ToolReply`].
//!
//! Order for an effectful call: the ledger is asked first (the same call again in the session is
//! answered from it), then the target is resolved by the fs-helper, policy decides, the call is
//! recorded (`pending`, or `proposed` while the human is asked), `pending -> executing` is
//! committed, and only then is the helper asked. Reads skip the ledger.

use proposal::{args, effect};
pub(crate) mod exec;
mod fs;
mod http;
mod net;
mod remote;
pub(crate) mod servers;

use crate::approvals::{Draft, Outcome};
use crate::fronts::Replier;
use crate::ledger::{self, CallInfo, Claim, Entry};
use crate::sessions::{self, Attached, SessionRef};
use crate::test_hooks::{crash_point, CrashStep};
use crate::Ctx;
use audit_store::chain::{AuditEvent, AuditKind};
use audit_store::now_ms;
use ipc_schema::mode::{OnAsk, SessionMode};
use ipc_schema::tier::ConfinementTier;
use ipc_schema::tool::{
    Action, AgentInfo, Done, Failure, ProfileName, ProposalId, Refusal, RefusalKind, ResumeToken,
    SessionInfo, ToolCall, ToolId, ToolName, ToolReply, ToolResult, Verdict, Waiting,
};
use ipc_schema::ui::{CallState, Choice, Remembered, RememberedAction};
use ipc_schema::{Body, ErrorCode, ErrorReply};
use policy::eval::{self, Target};
use policy::replay::ReplayCall;
use std::cell::RefCell;
use std::rc::Rc;
use std::time::Instant;

/// One gateway connection's state: the session it is attached to.
#[derive(Default)]
pub struct Conn {
    attached: RefCell<Option<Attached>>,
    /// Set when this connection carried its session on by presenting a token (a gateway
    /// started by `gatehouse run`): the token is revoked when the connection ends.
    presented_token: RefCell<Option<ipc_schema::tool::SessionId>>,
    /// A ui connection: the command it launched (`crate::launch`), while it runs.
    pub launched_run: std::cell::Cell<Option<ipc_schema::exec::RunId>>,
}

/// The agent's client gave up waiting for proposal `p` of its own session: withdrawn.
fn withdraw(ctx: &Rc<Ctx>, conn: &Rc<Conn>, p: ProposalId) -> Body {
    let Some(session) = conn
        .attached
        .borrow()
        .as_ref()
        .map(|a| a.0.borrow().id.clone())
    else {
        return Body::Error(ErrorReply::new(
            ErrorCode::Refused,
            "no session on this connection",
        ));
    };
    let mut approvals = ctx.gate.approvals.borrow_mut();
    if !approvals.open_of(&session).contains(&p) {
        return Body::Error(ErrorReply::new(
            ErrorCode::Refused,
            format!("proposal {p} is not waiting in this session"),
        ));
    }
    approvals.withdraw(p, "the agent's client cancelled the call");
    Body::Pong
}

/// A gateway connection ended: the proposals its session left waiting are withdrawn (no one
/// is there to take the result). A session carried on with a token ends with its gateway: the
/// token is revoked (replaced by a value no token hashes to), so it cannot be used again.
pub fn connection_closed(ctx: &Rc<Ctx>, conn: &Rc<Conn>) {
    if let Some(session) = conn
        .attached
        .borrow()
        .as_ref()
        .map(|a| a.0.borrow().id.clone())
    {
        let mut approvals = ctx.gate.approvals.borrow_mut();
        for p in approvals.open_of(&session) {
            approvals.withdraw(p, "the agent's session ended (its MCP connection closed)");
        }
        drop(approvals);
        // Its third-party servers end with it (a resumed session starts them again).
        servers::session_closed(ctx, &session);
    }
    let Some(id) = conn.presented_token.borrow_mut().take() else {
        return;
    };
    let ctx = ctx.clone();
    tokio::task::spawn_local(async move {
        crate::sessions::revoke(&ctx.gate, id, "gateway", "ended").await;
    });
}

/// Serves one tool call (in its own task: calls on a connection may overlap).
pub fn handle(ctx: &Rc<Ctx>, conn: &Rc<Conn>, id: u64, call: ToolCall, reply: &Replier) {
    let (ctx, conn, reply) = (ctx.clone(), conn.clone(), reply.clone());
    tokio::task::spawn_local(async move {
        let body = match call {
            ToolCall::OpenSession { resume, profile } => {
                open_session(&ctx, &conn, resume, profile).await
            }
            ToolCall::DescribeAgent(agent) => describe_agent(&ctx, &conn, agent),
            ToolCall::Withdraw(p) => withdraw(&ctx, &conn, p),
            ToolCall::ListServerTools => servers::list(&ctx, &conn).await,
            call => Body::ToolReply(run(&ctx, &conn, id, call, &reply).await),
        };
        reply.send(id, body);
    });
}

fn refused(
    kind: RefusalKind,
    message: impl Into<String>,
    verdict: Option<Verdict>,
    proposal: Option<ProposalId>,
) -> ToolReply {
    ToolReply::Refused(Refusal {
        kind,
        message: message.into(),
        verdict,
        proposal,
    })
}

fn failed(code: ErrorCode, message: impl Into<String>) -> ToolReply {
    ToolReply::Failed(Failure::new(code, message))
}

fn internal(e: impl std::fmt::Display) -> ToolReply {
    failed(
        ErrorCode::Internal,
        format!("gatehouse could not record the call: {e}"),
    )
}

/// Notes the session's MCP client (its `clientInfo`), once; re-capped here, since the gateway
/// is the agent's side.
fn describe_agent(ctx: &Rc<Ctx>, conn: &Rc<Conn>, agent: AgentInfo) -> Body {
    let session = match session_for(ctx, conn) {
        Ok(s) => s,
        Err(r) => {
            return Body::Error(ErrorReply::new(ErrorCode::Internal, r.message()));
        }
    };
    let agent = AgentInfo::capped(&agent.name, &agent.version);
    let mut s = session.borrow_mut();
    if let Some(had) = &s.agent {
        return Body::Error(ErrorReply::new(
            ErrorCode::Refused,
            format!(
                "session {} already named its client ({:?} {:?})",
                s.id, had.name, had.version
            ),
        ));
    }
    crate::audit::record(
        AuditEvent::new(AuditKind::Session, "gateway", "described")
            .session(s.id.0.clone())
            .detail(format!(
                "client {:?} version {:?}",
                agent.name, agent.version
            )),
    );
    s.agent = Some(agent);
    Body::Pong
}

/// The profile a resumable session was opened with (`default` for a session older than
/// profiles).
async fn stored_profile(ctx: &Rc<Ctx>, sid: &str) -> Result<ProfileName, String> {
    let sid = ipc_schema::tool::SessionId(sid.to_string());
    let name = ctx
        .gate
        .store
        .read(move |tx| audit_store::sessions::profile(tx, &sid))
        .await
        .map_err(|e| e.to_string())?;
    Ok(name.unwrap_or_else(ProfileName::default_profile))
}

async fn open_session(
    ctx: &Rc<Ctx>,
    conn: &Rc<Conn>,
    resume: Option<ResumeToken>,
    asked: Option<ProfileName>,
) -> Body {
    let err = |code, m: String| Body::Error(ErrorReply::new(code, m));
    if let Some(a) = conn.attached.borrow().as_ref() {
        return err(
            ErrorCode::Invalid,
            format!("this connection already has session {}", a.0.borrow().id),
        );
    }
    let gate = &ctx.gate;
    let (id, token, resumed) = match resume {
        Some(token) => {
            let hash = sessions::token_hash(&token);
            let found = gate
                .store
                .read(move |tx| {
                    Ok(audit_store::sessions::by_resume_hash(tx, &hash)?
                        .map(|(id, created)| (id.0, created)))
                })
                .await;
            match found {
                Ok(Some((id, _)))
                    if gate
                        .sessions
                        .borrow()
                        .is_revoked(&ipc_schema::tool::SessionId(id.clone())) =>
                {
                    return err(
                        ErrorCode::Refused,
                        format!("the token of session {id} was revoked when its gateway exited"),
                    )
                }
                Ok(Some((id, _))) => (ipc_schema::tool::SessionId(id), token, true),
                Ok(None) => {
                    return err(
                        ErrorCode::Refused,
                        "unknown resume token: no such session".into(),
                    )
                }
                Err(e) => return err(ErrorCode::Internal, e.to_string()),
            }
        }
        None => {
            let profile = asked.clone().unwrap_or_else(ProfileName::default_profile);
            let detail = format!("profile {profile}");
            // The profile names the mode; the agent cannot.
            let (id, token, _) =
                match sessions::create(gate, &profile, None, "gateway", "opened", detail).await {
                    Ok(t) => t,
                    Err((code, why)) => return err(code, why),
                };
            (id, token, false)
        }
    };
    // A resumed session keeps the profile it was opened with; naming another is refused.
    let profile = if resumed {
        let had = match stored_profile(ctx, &id.0).await {
            Ok(p) => p,
            Err(e) => return err(ErrorCode::Internal, e),
        };
        if let Some(asked) = &asked {
            if *asked != had {
                return err(
                    ErrorCode::Refused,
                    sessions::profile_mismatch(&id, &had, asked),
                );
            }
        }
        had
    } else {
        asked.unwrap_or_else(ProfileName::default_profile)
    };
    if conn.attached.borrow().is_some() {
        return err(
            ErrorCode::Invalid,
            "this connection already has a session".into(),
        );
    }
    // A session keeps its stored mode (a new one's was stored by `create`).
    let sid = id.clone();
    let mode = match gate
        .store
        .read(move |tx| audit_store::sessions::mode(tx, &sid))
        .await
    {
        Ok(m) => m.unwrap_or_else(|| sessions::profile_mode(gate, &profile)),
        Err(e) => return err(ErrorCode::Internal, e.to_string()),
    };
    let attached = gate
        .sessions
        .borrow_mut()
        .attach(&id, now_ms(), &profile, mode);
    let mode = match attached {
        Ok(s) => {
            let mode = s.borrow().mode;
            *conn.attached.borrow_mut() = Some(Attached(s));
            mode
        }
        Err(e) => return err(ErrorCode::Refused, e),
    };
    if resumed {
        *conn.presented_token.borrow_mut() = Some(id.clone());
        crate::audit::record(
            AuditEvent::new(AuditKind::Session, "gateway", "resumed")
                .session(id.0.clone())
                .mode(mode)
                .detail(format!("mode {mode}")),
        );
    }
    // The tool view of the session's own profile. With an invalid policy every call is
    // refused with the reason; the tools stay listed so that the agent sees that reason rather
    // than an empty list.
    let tools = match ctx.gate.policy.borrow().profile(&profile) {
        Ok(policy) => ToolName::ALL
            .into_iter()
            .map(|t| policy::eval::standing(&policy, t))
            .collect(),
        Err(_) => Vec::new(),
    };
    Body::ToolReply(ToolReply::Session(SessionInfo {
        session: id,
        resume: token,
        resumed,
        profile,
        tools,
    }))
}

/// The connection's session, opening a fresh one (not resumable) on its first call.
pub(crate) fn session_for(ctx: &Rc<Ctx>, conn: &Rc<Conn>) -> Result<SessionRef, ToolReply> {
    if let Some(a) = conn.attached.borrow().as_ref() {
        return Ok(a.0.clone());
    }
    let (id, _) = sessions::new_ids();
    let profile = ProfileName::default_profile();
    let mode = sessions::profile_mode(&ctx.gate, &profile);
    let s = ctx
        .gate
        .sessions
        .borrow_mut()
        .attach(&id, now_ms(), &profile, mode)
        .map_err(|e| failed(ErrorCode::Internal, e))?;
    crate::audit::record(
        AuditEvent::new(AuditKind::Session, "gateway", "opened")
            .session(id.0.clone())
            .mode(mode)
            .detail(format!("mode {mode}")),
    );
    *conn.attached.borrow_mut() = Some(Attached(s.clone()));
    Ok(s)
}

/// Releases the session's "in progress" slot when the call ends, however it ends.
struct InFlight(SessionRef);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.borrow_mut().rate.finish();
    }
}

/// An audit row about this call.
fn event(kind: AuditKind, sid: &str, tool: &ToolId, outcome: &str) -> AuditEvent {
    AuditEvent::new(kind, "gateway", outcome)
        .session(sid)
        .tool(tool.name())
}

async fn run(
    ctx: &Rc<Ctx>,
    conn: &Rc<Conn>,
    id: u64,
    call: ToolCall,
    reply: &Replier,
) -> ToolReply {
    let tool = &call
        .tool_id()
        .expect("the session calls are handled before");
    let session = match session_for(ctx, conn) {
        Ok(s) => s,
        Err(r) => return r,
    };
    let sid = session.borrow().id.clone();
    let gate = &ctx.gate;
    let summary = args::redacted(&call);

    // The session's own profile, and nothing else, judges its calls.
    let profile = session.borrow().profile.clone();
    let policy = gate.policy.borrow().profile(&profile);
    let policy = match policy {
        Ok(p) => p,
        Err(reason) => {
            crate::audit::record(
                event(AuditKind::Refusal, &sid.0, tool, "refused")
                    .detail(format!("{reason}; {summary}")),
            );
            return refused(RefusalKind::PolicyInvalid, format!("{reason}. Every call is refused until the policy is fixed (`gatehouse policy show`)."), None, None);
        }
    };
    let started = session.borrow_mut().rate.start(
        Instant::now(),
        policy.requests_per_minute,
        policy.concurrent_requests,
    );
    if let Err(msg) = started {
        crate::audit::record(
            event(AuditKind::Refusal, &sid.0, tool, "refused").detail(format!("{msg}; {summary}")),
        );
        return refused(RefusalKind::RateLimited, msg, None, None);
    }
    let _in_flight = InFlight(session.clone());
    // This call's number in the session (what a card names as the call that read outside text).
    let call_number = {
        let mut s = session.borrow_mut();
        s.calls += 1;
        s.calls
    };

    // A server's tool is effectful unless the user marked it read-only in the policy.
    let effectful = match &call {
        ToolCall::Server(c) => !servers::marked_read_only(&policy, c),
        call => !call.is_read_only(),
    };
    if let ToolCall::Server(c) = &call {
        if let Err(r) = servers::check_offered(ctx, &session, &policy, c).await {
            crate::audit::record(
                event(AuditKind::Refusal, &sid.0, tool, "refused")
                    .detail(format!("{}; {summary}", r.message())),
            );
            return r;
        }
    }
    // Commands and stdio servers' tools run in the exec sandbox: their cards and every row of
    // the call (decision, ledger, result) name its tier.
    let in_sandbox = match &call {
        ToolCall::RunCommand(_) => true,
        ToolCall::Server(c) => servers::runs_in_exec_sandbox(&policy, c),
        _ => false,
    };
    let tier = in_sandbox
        .then(|| crate::exec_tier::in_force(ctx))
        .flatten();
    let key = ledger::call_key(tool, &args::canonical(&call));
    if effectful {
        match ledger::lookup(&gate.store, &sid, key).await {
            Ok(Some(e)) => return answer_from_ledger(&sid.0, tool, e, tier),
            Ok(None) => {}
            Err(e) => return internal(e),
        }
    }

    // The profile's network allowlist, before the net-helper resolves anything.
    if let Some((why, host)) = call
        .web_url()
        .and_then(|u| eval::url_off_network(&policy, u).map(|why| (why, eval::url_host(u))))
    {
        let mut row =
            event(AuditKind::ToolCall, &sid.0, tool, "deny").detail(format!("{why}; {summary}"));
        if let Some(host) = host {
            row = row.call(ReplayCall::json_of(&profile, tool, &Target::Url { host }));
        }
        crate::audit::record(row);
        let verdict = Verdict {
            action: Action::Deny,
            rule: why,
        };
        return refused(
            RefusalKind::Denied,
            format!("denied by {}", verdict.rule),
            Some(verdict),
            None,
        );
    }
    let (resolved, checked) = match net::resolve(ctx, &call).await {
        Ok(r) => r,
        Err(reply) => {
            crate::audit::record(
                event(AuditKind::Refusal, &sid.0, tool, "refused")
                    .detail(format!("{}; {summary}", reply.message())),
            );
            return reply;
        }
    };
    let target_key = resolved.target.key();
    let verdict = eval::evaluate_call(
        &policy,
        &gate.policy.borrow().protected,
        tool,
        &resolved.target,
    );
    let verdict = {
        let s = session.borrow();
        let for_session = s.allowed.contains(&(tool.clone(), target_key.clone()));
        let remembered = ctx.gate.remembered.borrow();
        eval::with_standing_decisions(
            verdict,
            &remembered,
            &s.profile,
            tool,
            &target_key,
            for_session,
        )
    };
    // An allowed read gets one row, written when it is done (with this verdict's rule): half
    // the audit work on the hottest path. Everything else records the decision now.
    // What was judged, kept with the call's first row for `policy apply --dry-run`.
    let judged = ReplayCall::json_of(&profile, tool, &resolved.target);
    let decision_row = effectful || verdict.action != Action::Allow;
    if decision_row {
        crate::audit::record(
            event(AuditKind::ToolCall, &sid.0, tool, verdict.action.as_str())
                .target(target_key.clone())
                .detail(format!("{}; {summary}", verdict.rule))
                .tier(tier)
                .call(judged.clone()),
        );
    }
    if verdict.action == Action::Deny {
        return refused(
            RefusalKind::Denied,
            format!("denied by {}", verdict.rule),
            Some(verdict),
            None,
        );
    }
    let ttl = policy.expire_after;
    let revision = policy.revision;
    // A file allowed by name may still hold a key by content: read it first (a read changes
    // nothing) and ask before the agent gets it.
    let sniff = *tool == ToolName::ReadFile
        && verdict.action == Action::Allow
        && resolved.paths.first().is_some_and(|p| {
            !eval::secret_files_opted_in(&policy, ToolName::ReadFile, &resolved.target, &p.absolute)
        });
    drop(policy);

    if !effectful {
        let mut proposal = None;
        let mut verdict = verdict;
        let mut early = None;
        if sniff {
            let out = fs::execute(ctx, &call, &resolved, None).await;
            if let Ok(ToolResult::File(f)) = &out {
                if let Some(why) = ipc_schema::protected::secret_content(&f.data) {
                    verdict = ipc_schema::tool::Verdict {
                        action: Action::Ask,
                        rule: format!(
                            "{} holds {why}; what the agent reads goes to its model provider (secret_files = \"allow\" on the grant, or an allow rule naming the path, reads it without asking)",
                            target_key
                        ),
                    };
                }
            }
            early = Some(out);
        }
        if verdict.action == Action::Ask {
            let draft = draft(
                &session,
                tool,
                &target_key,
                &call,
                None,
                effect::line(&call, &resolved.paths, checked.as_ref(), None, tier),
                &verdict,
                revision,
            );
            match ask(ctx, &session, draft, ttl, &verdict, reply, id, tier).await {
                Ok(p) => proposal = p,
                Err(r) => return r,
            }
        }
        let out = if let Some(out) = early {
            out.map_err(ToolReply::Failed)
        } else if let ToolCall::Server(c) = &call {
            servers::execute(ctx, &session, c).await
        } else if checked.is_some() {
            net::execute_read(ctx, &session, call_number, &call, checked.as_ref())
                .await
                .and_then(|r| stayed_on_network(&profile, ctx, r))
        } else {
            fs::execute(ctx, &call, &resolved, None)
                .await
                .map(|r| without_secret_lines(&profile, ctx, r))
                .map_err(ToolReply::Failed)
        };
        let outcome = match &out {
            Ok(_) => "done",
            Err(ToolReply::Refused(_)) => "refused",
            Err(_) => "failed",
        };
        let mut row = event(AuditKind::Read, &sid.0, tool, outcome)
            .target(target_key)
            .detail(match &out {
                Ok(_) => format!("{}; {summary}", verdict.rule),
                Err(r) => format!("{}; {}; {summary}", verdict.rule, r.message()),
            });
        if !decision_row {
            row = row.call(judged);
        }
        crate::audit::record(row);
        return match out {
            Ok(result) => ToolReply::Done(Box::new(Done {
                result,
                verdict,
                proposal,
                from_ledger: false,
            })),
            Err(r) => r,
        };
    }

    let info = CallInfo {
        session: sid.clone(),
        key,
        tool: tool.clone(),
        target: target_key.clone(),
        summary: summary.clone(),
        tier,
    };
    let first = if verdict.action == Action::Ask {
        CallState::Proposed
    } else {
        CallState::Pending
    };
    let row = match ledger::claim(&gate.store, &info, first, verdict.rule.clone()).await {
        Ok(Claim::New(row)) => row,
        Ok(Claim::Existing(e)) => return answer_from_ledger(&sid.0, tool, e, tier),
        Err(e) => return internal(e),
    };

    let mut expected = None;
    let mut proposal = None;
    if verdict.action == Action::Ask {
        let preview = match (&checked, &call) {
            (Some(_), _) | (None, ToolCall::Server(_)) => Ok(None),
            (None, _) => fs::preview(ctx, &call, &resolved).await,
        };
        let preview = match preview {
            Ok(p) => p,
            Err(f) => return record_failure(ctx, &info, row, CallState::Proposed, f).await,
        };
        if let Some(p) = &preview {
            expected = p.current;
        }
        let diff = preview.as_ref().and_then(|p| p.diff.clone());
        let draft = draft(
            &session,
            tool,
            &target_key,
            &call,
            diff,
            effect::line(
                &call,
                &resolved.paths,
                checked.as_ref(),
                preview.as_ref(),
                tier,
            ),
            &verdict,
            revision,
        );
        match ask(ctx, &session, draft, ttl, &verdict, reply, id, tier).await {
            Ok(p) => {
                proposal = p;
                let why = match p {
                    Some(p) => format!("approved by proposal {p}"),
                    None => ipc_schema::mode::full_access_note(&sid.0),
                };
                match ledger::transition(
                    &gate.store,
                    &info,
                    row,
                    CallState::Proposed,
                    CallState::Pending,
                    why,
                    None,
                )
                .await
                {
                    Ok(true) => {}
                    Ok(false) => {
                        return failed(
                            ErrorCode::Internal,
                            "the ledger entry left `proposed` while the human decided",
                        )
                    }
                    Err(e) => return internal(e),
                }
            }
            Err(r) => {
                let why = r.message();
                // A withdrawn call, or one refused because nobody was there (unattended), did
                // not happen and was not decided: the same call asked again is claimed afresh
                // (a new proposal, once the mode is `ask` again), not answered "rejected
                // earlier".
                let to = match &r {
                    ToolReply::Refused(x)
                        if matches!(x.kind, RefusalKind::Withdrawn | RefusalKind::Unattended) =>
                    {
                        CallState::Abandoned
                    }
                    _ => CallState::Rejected,
                };
                if let Err(e) =
                    ledger::transition(&gate.store, &info, row, CallState::Proposed, to, why, None)
                        .await
                {
                    return internal(e);
                }
                return r;
            }
        }
    }

    crash_point(gate.test_crash, CrashStep::AfterPending);
    match ledger::transition(
        &gate.store,
        &info,
        row,
        CallState::Pending,
        CallState::Executing,
        String::new(),
        None,
    )
    .await
    {
        Ok(true) => {}
        Ok(false) => {
            return failed(
                ErrorCode::Internal,
                "the ledger refused pending -> executing: the call was not pending",
            )
        }
        Err(e) => return internal(e),
    }
    crash_point(gate.test_crash, CrashStep::AfterExecuting);

    let answer = match &call {
        ToolCall::HttpRequest(a) => {
            http::execute_effect(ctx, &session, call_number, a, checked.as_ref()).await
        }
        ToolCall::RunCommand(a) => exec::execute_effect(ctx, a, &resolved, &profile).await,
        ToolCall::Server(c) => servers::execute_effect(ctx, &session, c).await,
        _ => fs::execute_effect(ctx, &call, &resolved, expected, gate.test_crash).await,
    };
    crash_point(gate.test_crash, CrashStep::AfterAnswer);
    match answer {
        fs::EffectAnswer::Done(result) => {
            let result = *result;
            let blob = postcard::to_stdvec(&result).ok();
            if let Err(e) = ledger::transition(
                &gate.store,
                &info,
                row,
                CallState::Executing,
                CallState::Done,
                String::new(),
                blob,
            )
            .await
            {
                return internal(e);
            }
            ToolReply::Done(Box::new(Done {
                result,
                verdict,
                proposal,
                from_ledger: false,
            }))
        }
        fs::EffectAnswer::Failed(f) => {
            record_failure(ctx, &info, row, CallState::Executing, f).await
        }
        fs::EffectAnswer::NeverSent(f) => {
            if let Err(e) = ledger::transition(
                &gate.store,
                &info,
                row,
                CallState::Executing,
                CallState::Abandoned,
                f.message.clone(),
                None,
            )
            .await
            {
                return internal(e);
            }
            ToolReply::Failed(f)
        }
        fs::EffectAnswer::Unknown(why) => {
            let text = format!("{why}. {}", ledger::UNCERTAIN_TEXT);
            if let Err(e) = ledger::transition(
                &gate.store,
                &info,
                row,
                CallState::Executing,
                CallState::Uncertain,
                text.clone(),
                None,
            )
            .await
            {
                return internal(e);
            }
            refused(RefusalKind::Uncertain, text, Some(verdict), proposal)
        }
    }
}

async fn record_failure(
    ctx: &Rc<Ctx>,
    info: &CallInfo,
    row: i64,
    from: CallState,
    f: Failure,
) -> ToolReply {
    let blob = postcard::to_stdvec(&f).ok();
    if let Err(e) = ledger::transition(
        &ctx.gate.store,
        info,
        row,
        from,
        CallState::Failed,
        f.message.clone(),
        blob,
    )
    .await
    {
        return internal(e);
    }
    ToolReply::Failed(f)
}

/// Content-search lines from files that may hold secrets are withheld (and counted), unless
/// their grant allows secret files: a search must not read what `read_file` would ask for.
fn without_secret_lines(profile: &ProfileName, ctx: &Rc<Ctx>, r: ToolResult) -> ToolResult {
    let ToolResult::Grep(mut g) = r else { return r };
    let policy = ctx.gate.policy.borrow().profile(profile).ok();
    let allowed = |abs: &[u8]| {
        policy.as_ref().is_some_and(|p| {
            policy::eval::grant_for(p, abs).is_some_and(|(g, _, _)| g.secret_files_allowed)
        })
    };
    let mut withheld = std::collections::BTreeSet::new();
    g.matches.retain(|m| {
        let mut abs = g.base.root.clone();
        abs.push(b'/');
        abs.extend_from_slice(&m.relative);
        let hide = ipc_schema::protected::sensitive(&abs).is_some() && !allowed(&abs);
        if hide {
            withheld.insert(m.relative.clone());
        }
        !hide
    });
    g.secret_files_withheld = withheld.len() as u64;
    ToolResult::Grep(g)
}

/// A page fetched for a profile with a network allowlist, refused if a redirect took it off
/// the list (the net-helper follows redirects of reads itself).
fn stayed_on_network(
    profile: &ProfileName,
    ctx: &Rc<Ctx>,
    r: ToolResult,
) -> Result<ToolResult, ToolReply> {
    let page = match &r {
        ToolResult::Fetched(p) => p,
        ToolResult::HttpResponse(h) => &h.page,
        _ => return Ok(r),
    };
    // A profile removed meanwhile: fail closed (nothing is known about its list any more).
    let policy = ctx
        .gate
        .policy
        .borrow()
        .profile(profile)
        .map_err(|why| refused(RefusalKind::Denied, why, None, None))?;
    let hops = page
        .redirects
        .iter()
        .map(String::as_str)
        .chain(std::iter::once(page.final_url.as_str()));
    match eval::hops_off_network(&policy, hops) {
        None => Ok(r),
        Some(why) => Err(refused(RefusalKind::Denied, why, None, None)),
    }
}

/// The answer for a call the ledger already has in this session.
fn answer_from_ledger(
    sid: &str,
    tool: &ToolId,
    e: Entry,
    tier: Option<ConfinementTier>,
) -> ToolReply {
    crate::audit::record(
        event(AuditKind::ToolCall, sid, tool, "from_ledger")
            .detail(format!("ledger {} is {}", e.id, e.state.as_str()))
            .tier(tier),
    );
    let ledger_verdict = || {
        Verdict {
        action: Action::Allow,
        rule: format!("answered from the ledger (entry {}): the same call was carried out earlier in this session", e.id),
    }
    };
    match e.state {
        CallState::Done => match e.result.as_deref().map(postcard::from_bytes::<ToolResult>) {
            Some(Ok(result)) => ToolReply::Done(Box::new(Done {
                result,
                verdict: ledger_verdict(),
                proposal: None,
                from_ledger: true,
            })),
            _ => failed(ErrorCode::Internal, format!("ledger entry {} is done but its result cannot be read; it was not carried out again", e.id)),
        },
        CallState::Failed => match e.result.as_deref().map(postcard::from_bytes::<Failure>) {
            Some(Ok(mut f)) => {
                f.from_ledger = true;
                ToolReply::Failed(f)
            }
            _ => failed(ErrorCode::Internal, format!("the same call failed earlier in this session: {}", e.reason)),
        },
        CallState::Rejected => refused(RefusalKind::RejectedEarlier, format!("the same call was rejected earlier in this session: {}", e.reason), None, None),
        CallState::Uncertain => refused(RefusalKind::Uncertain, ledger::UNCERTAIN_TEXT, None, None),
        CallState::Proposed => refused(RefusalKind::StillRunning, "the same call is waiting for the human's decision; calling again after the decision returns it", None, None),
        CallState::Pending | CallState::Executing => refused(RefusalKind::StillRunning, "the same call is still running in this session", None, None),
        CallState::Abandoned => failed(ErrorCode::Internal, "an abandoned ledger entry was returned"),
    }
}

#[allow(clippy::too_many_arguments)]
fn draft(
    session: &SessionRef,
    tool: &ToolId,
    target: &str,
    call: &ToolCall,
    diff: Option<String>,
    effect: String,
    v: &Verdict,
    revision: u64,
) -> Draft {
    let session = session.borrow();
    Draft {
        session: session.id.clone(),
        tool: tool.clone(),
        target: target.to_string(),
        arguments: args::canonical(call),
        outside_text: session.outside.check(call, diff.as_deref()),
        diff,
        effect,
        rule: v.rule.clone(),
        policy_revision: revision,
        mode: session.mode,
        tier: None,
    }
}

/// What the session's mode makes of an Ask (`card`: the proposal that waited when the human
/// switched the mode): `None` for a card, `Ok(None)` to run without one, `Err` refused.
fn by_mode(
    mode: SessionMode,
    sid: &str,
    tool: &ToolId,
    target: &str,
    v: &Verdict,
    card: Option<ProposalId>,
    tier: Option<ConfinementTier>,
) -> Option<Result<Option<ProposalId>, ToolReply>> {
    let on = match card {
        None => ipc_schema::mode::on_ask(mode),
        // A waiting card answered by a switch; only a switch away from `ask` answers one, and
        // anything else would refuse (fail closed).
        Some(_) => match ipc_schema::mode::on_ask(mode) {
            OnAsk::RunWithoutCard => OnAsk::RunWithoutCard,
            _ => OnAsk::Refuse,
        },
    };
    let card_note = card
        .map(|p| format!("proposal {p} answered by the switch to {mode} mode; "))
        .unwrap_or_default();
    match on {
        OnAsk::Card => None,
        OnAsk::RunWithoutCard => {
            crate::audit::record(
                event(AuditKind::Decision, sid, tool, "allowed by mode")
                    .target(target)
                    .tier(tier)
                    .detail(format!(
                        "{card_note}{}; {}",
                        ipc_schema::mode::full_access_note(sid),
                        v.rule
                    )),
            );
            // No proposal to name: the human did not approve this call, the mode ran it (the
            // row above says which card, if one waited).
            Some(Ok(None))
        }
        OnAsk::Refuse => {
            let msg = ipc_schema::mode::unattended_refusal(sid, &tool.name(), target);
            crate::audit::record(
                event(AuditKind::Refusal, sid, tool, "refused")
                    .target(target)
                    .tier(tier)
                    .detail(format!("{card_note}{msg}; {}", v.rule)),
            );
            Some(Err(refused(
                RefusalKind::Unattended,
                msg,
                Some(v.clone()),
                card,
            )))
        }
    }
}

/// Makes a proposal, tells the gateway, and waits for the decision or the expiry; in a
/// session whose mode answers an Ask without a card ([`ipc_schema::mode::on_ask`]), answers
/// at once (`Ok(None)`: run without a card). `tier`: the exec sandbox's, for a call that runs
/// in it (its rows carry it).
#[allow(clippy::too_many_arguments)]
async fn ask(
    ctx: &Rc<Ctx>,
    session: &SessionRef,
    mut d: Draft,
    ttl: std::time::Duration,
    v: &Verdict,
    reply: &Replier,
    id: u64,
    tier: Option<ConfinementTier>,
) -> Result<Option<ProposalId>, ToolReply> {
    let (tool, target, sid) = (d.tool.clone(), d.target.clone(), d.session.0.clone());
    let tool = &tool;
    if let Some(r) = by_mode(d.mode, &sid, tool, &target, v, None, tier) {
        return r;
    }
    d.tier = tier;
    let (p, mut rx) =
        ctx.gate
            .approvals
            .borrow_mut()
            .propose(d, now_ms() as u64, ttl.as_millis() as u64);
    crate::audit::record(
        event(AuditKind::Proposal, &sid, tool, "asked")
            .target(target.clone())
            .tier(tier)
            .detail(format!(
                "proposal {}; {}; {}{}",
                p.id,
                p.effect,
                v.rule,
                crate::provenance::audit_note(&p.outside_text)
            )),
    );
    reply.send(
        id,
        Body::ToolReply(ToolReply::AwaitingApproval(Waiting {
            proposal: p.id,
            verdict: v.clone(),
            expires_unix_ms: p.expires_unix_ms,
        })),
    );
    tokio::select! {
        _ = rx.wait_for(|o| o.is_some()) => {}
        _ = tokio::time::sleep(ttl) => ctx.gate.approvals.borrow_mut().expire(p.id),
    }
    let outcome = (*rx.borrow()).unwrap_or(Outcome::Expired);
    match outcome {
        Outcome::Decided(c) => {
            match c {
                Choice::AllowSession => {
                    session
                        .borrow_mut()
                        .allowed
                        .insert((tool.clone(), target.clone()));
                }
                Choice::AlwaysAllow | Choice::AlwaysDeny => {
                    let action = if c == Choice::AlwaysAllow {
                        RememberedAction::Allow
                    } else {
                        RememberedAction::Deny
                    };
                    let profile = session.borrow().profile.clone();
                    if let Err(e) = remember(ctx, tool, &target, action, p.id, &profile).await {
                        tracing::error!("remembering a decision failed: {e}");
                    }
                }
                Choice::AllowOnce | Choice::Deny => {}
            }
            if c.allows() {
                Ok(Some(p.id))
            } else {
                Err(refused(
                    RefusalKind::HumanDenied,
                    format!("the human chose {} for proposal {}", c.as_str(), p.id),
                    Some(v.clone()),
                    Some(p.id),
                ))
            }
        }
        Outcome::ByMode(mode) => by_mode(mode, &sid, tool, &target, v, Some(p.id), tier)
            .unwrap_or_else(|| unreachable!("a card answered by a mode either runs or is refused")),
        Outcome::Withdrawn => {
            crate::audit::record(
                event(AuditKind::Decision, &sid, tool, "withdrawn")
                    .target(target)
                    .tier(tier)
                    .detail(format!(
                        "proposal {}: the agent gave the call up before a decision; nothing was carried out",
                        p.id
                    )),
            );
            Err(refused(
                RefusalKind::Withdrawn,
                format!(
                    "proposal {} was withdrawn: the call was cancelled before the human decided; nothing was done",
                    p.id
                ),
                Some(v.clone()),
                Some(p.id),
            ))
        }
        Outcome::Expired => {
            crate::audit::record(
                event(AuditKind::Decision, &sid, tool, "expired")
                    .target(target)
                    .tier(tier)
                    .detail(format!(
                        "proposal {}: no answer within {} s means deny",
                        p.id,
                        ttl.as_secs()
                    )),
            );
            Err(refused(
                RefusalKind::Expired,
                format!(
                    "nobody decided proposal {} within {} s; no answer means deny",
                    p.id,
                    ttl.as_secs()
                ),
                Some(v.clone()),
                Some(p.id),
            ))
        }
    }
}

/// Persists an "always" decision and applies it at once.
pub async fn remember(
    ctx: &Rc<Ctx>,
    tool: &ToolId,
    target: &str,
    action: RememberedAction,
    origin: ProposalId,
    profile: &ProfileName,
) -> Result<(), audit_store::StoreError> {
    let t = target.to_string();
    let tool = tool.clone();
    let prof = profile.clone();
    let now = now_ms();
    let row = ctx
        .gate
        .store
        .txn(move |tx, audit| {
            let id = audit_store::remembered::insert(
                tx,
                &audit_store::remembered::NewRemembered {
                    tool: &tool,
                    target: &t,
                    action,
                    origin,
                    profile: &prof,
                    now_ms: now,
                },
            )?;
            audit.push(
                AuditEvent::new(AuditKind::Policy, "ui", "remembered")
                    .tool(tool.name())
                    .target(t.clone())
                    .detail(format!(
                        "remembered decision {id}: always {action}, from proposal {origin} in profile {prof}"
                    )),
            );
            Ok(Remembered {
                id: id as u64,
                tool,
                target: t,
                action,
                created_unix_ms: now as u64,
                origin,
                profile: prof,
            })
        })
        .await?;
    ctx.gate.remembered.borrow_mut().push(row);
    Ok(())
}
