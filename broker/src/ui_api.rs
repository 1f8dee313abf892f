//! The console's requests: proposals and decisions, uncertain calls, sessions, policy.

use crate::fronts::Replier;
use crate::Ctx;
use audit_store::chain::{AuditEvent, AuditKind};
use audit_store::now_ms;
use ipc_schema::tool::{ProfileName, SessionId};
use ipc_schema::ui::{
    CallState, LaunchReply, LaunchRequest, PolicyView, SessionSummary, UiReply, UiRequest,
};
use ipc_schema::{Body, ErrorCode, ErrorReply};
use std::rc::Rc;

fn error(code: ErrorCode, m: impl Into<String>) -> Body {
    Body::Error(ErrorReply::new(code, m))
}

pub fn handle(
    ctx: &Rc<Ctx>,
    conn: &Rc<crate::tools::Conn>,
    id: u64,
    req: UiRequest,
    reply: &Replier,
) {
    let gate = &ctx.gate;
    match req {
        UiRequest::ListPending => reply.send(
            id,
            Body::UiReply(UiReply::Pending(gate.approvals.borrow().pending())),
        ),
        UiRequest::Subscribe => {
            gate.approvals.borrow_mut().subscribe(reply.clone(), id);
            reply.send(id, Body::UiReply(UiReply::Subscribed));
        }
        UiRequest::Decide(d) => {
            let decided = gate.approvals.borrow_mut().decide(&d, now_ms() as u64);
            let (outcome, detail) = match &decided {
                Ok((choice, outside)) => (
                    *choice,
                    format!("proposal {}: {choice}{outside}", d.proposal),
                ),
                Err(e) => (
                    "refused",
                    format!("decision on proposal {} refused: {e}", d.proposal),
                ),
            };
            crate::audit::record(
                AuditEvent::new(AuditKind::Decision, "ui", outcome).detail(detail),
            );
            reply.send(
                id,
                match decided {
                    Ok(_) => Body::UiReply(UiReply::Decided {
                        proposal: d.proposal,
                        choice: d.choice,
                    }),
                    Err(e) => error(ErrorCode::Refused, e.to_string()),
                },
            );
        }
        UiRequest::ListUncertain => {
            let (ctx, reply) = (ctx.clone(), reply.clone());
            tokio::task::spawn_local(async move {
                let r = ctx
                    .gate
                    .store
                    .read(|tx| crate::ledger::list(tx, CallState::Uncertain))
                    .await;
                reply.send(
                    id,
                    match r {
                        Ok(l) => Body::UiReply(UiReply::Uncertain(l)),
                        Err(e) => error(ErrorCode::Internal, e.to_string()),
                    },
                );
            });
        }
        UiRequest::ListSessions => {
            let pending = gate.approvals.borrow().pending();
            let list = gate
                .sessions
                .borrow()
                .all()
                .iter()
                .map(|s| {
                    let s = s.borrow();
                    SessionSummary {
                        session: s.id.clone(),
                        profile: s.profile.clone(),
                        agent: s
                            .agent
                            .as_ref()
                            .map(|a| format!("{} {}", a.name, a.version)),
                        connected: s.connected,
                        started_unix_ms: s.started_ms as u64,
                        calls: s.calls,
                        pending: pending.iter().filter(|p| p.session == s.id).count() as u32,
                    }
                })
                .collect();
            reply.send(id, Body::UiReply(UiReply::Sessions(list)));
        }
        UiRequest::PolicyShow => reply.send(id, Body::UiReply(UiReply::Policy(view(ctx)))),
        UiRequest::PolicyApply { document } => {
            let before = gate.fs_helper_args();
            let applied = gate.policy.borrow_mut().apply(&document);
            match applied {
                Ok(revision) => {
                    crate::audit::record(
                        AuditEvent::new(AuditKind::Policy, "ui", "applied")
                            .detail(format!("policy revision {revision} applied")),
                    );
                    let after = gate.fs_helper_args();
                    if after != before {
                        // Landlock cannot widen: a fresh fs-helper gets the new grants once the
                        // calls in flight have finished.
                        crate::helpers::set_extra_args(&ctx.opts, ipc_schema::Role::Fs, after);
                        if let Some(slot) = ctx.helpers.slot(ipc_schema::Role::Fs) {
                            slot.restart_when_idle("the policy's grants changed");
                        }
                    }
                    reply.send(id, Body::UiReply(UiReply::PolicyApplied { revision }));
                }
                Err(e) => {
                    crate::audit::record(
                        AuditEvent::new(AuditKind::Policy, "ui", "refused").detail(e.to_string()),
                    );
                    reply.send(id, error(ErrorCode::Refused, e.to_string()));
                }
            }
        }
        UiRequest::PolicyForget { remembered } => {
            let (ctx, reply) = (ctx.clone(), reply.clone());
            tokio::task::spawn_local(async move {
                let r = ctx
                    .gate
                    .store
                    .txn(move |tx, audit| {
                        let gone = audit_store::remembered::delete(tx, remembered)?;
                        if gone {
                            audit.push(
                                AuditEvent::new(AuditKind::Policy, "ui", "forgotten")
                                    .detail(format!("remembered decision {remembered} dropped")),
                            );
                        }
                        Ok(gone)
                    })
                    .await;
                reply.send(
                    id,
                    match r {
                        Ok(true) => {
                            ctx.gate
                                .remembered
                                .borrow_mut()
                                .retain(|r| r.id != remembered);
                            Body::UiReply(UiReply::Forgotten { remembered })
                        }
                        Ok(false) => error(
                            ErrorCode::Invalid,
                            format!("there is no remembered decision {remembered}"),
                        ),
                        Err(e) => error(ErrorCode::Internal, e.to_string()),
                    },
                );
            });
        }
        UiRequest::CredentialChanged { name, deleted } => {
            crate::secrets_link::record_for_cli(ctx, id, name, deleted, reply)
        }
        UiRequest::Launch(LaunchRequest::Command(l)) => {
            crate::launch::command(ctx, conn, id, l, reply)
        }
        UiRequest::Launch(LaunchRequest::StopCommand) => {
            crate::launch::stop_command(ctx, conn, id, reply)
        }
        UiRequest::Launch(req) => {
            let (ctx, reply, conn) = (ctx.clone(), reply.clone(), conn.clone());
            tokio::task::spawn_local(async move {
                let body = match req {
                    LaunchRequest::Open {
                        profile,
                        passed_env,
                    } => {
                        let body = launch_open(&ctx, profile, &passed_env).await;
                        if let Body::UiReply(UiReply::Launch(LaunchReply::Opened {
                            session, ..
                        })) = &body
                        {
                            conn.launched.borrow_mut().push(session.clone());
                        }
                        body
                    }
                    LaunchRequest::End { session } => {
                        conn.launched.borrow_mut().retain(|s| *s != session);
                        launch_end(&ctx, session, "run ended").await
                    }
                    LaunchRequest::Egress { session, record } => {
                        if conn.launched.borrow().contains(&session) {
                            egress_row(Some(session), &record);
                            Body::Pong
                        } else {
                            error(
                                ErrorCode::Invalid,
                                format!("session {session} was not launched on this connection"),
                            )
                        }
                    }
                    // Served by crate::launch above.
                    LaunchRequest::Command(_) | LaunchRequest::StopCommand => return,
                };
                reply.send(id, body);
            });
        }
        UiRequest::AuditTail { after, limit } => {
            let (ctx, reply) = (ctx.clone(), reply.clone());
            tokio::task::spawn_local(async move {
                let r = ctx
                    .gate
                    .store
                    .read(move |tx| audit_store::audit::audit_tail(tx, after, limit))
                    .await;
                reply.send(
                    id,
                    match r {
                        Ok(rows) => Body::UiReply(UiReply::Audit(rows)),
                        Err(e) => error(ErrorCode::Internal, e.to_string()),
                    },
                );
            });
        }
    }
}

/// One connection through an egress proxy ended: its audit row (under the agent session of a
/// `gatehouse run`, or none for a `gatehouse sandbox` command, whose proxy session the line
/// names).
pub(crate) fn egress_row(session: Option<SessionId>, record: &ipc_schema::net::EgressRecord) {
    use ipc_schema::net::EgressVerdict;
    let outcome = match &record.verdict {
        EgressVerdict::Refused { status, .. } => format!("refused ({status})"),
        EgressVerdict::Failed { status, .. } => format!("failed ({status})"),
        EgressVerdict::Tunnelled { .. } => "tunnelled".to_string(),
    };
    let mut row = AuditEvent::new(AuditKind::Egress, "ui", outcome)
        .target(record.target.clone())
        .detail(record.audit_line());
    if let Some(session) = session {
        row = row.session(session.0.clone());
    }
    crate::audit::record(row);
}

/// `gatehouse run`: a fresh session of `profile` and its one-use launch token, stored (hashed)
/// like any resumable session, so the agent's gateway carries it on with `OpenSession`.
pub(crate) async fn launch_open(
    ctx: &Rc<Ctx>, profile: Option<ProfileName>, passed_env: &[String]) -> Body {
    let profile = profile.unwrap_or_else(ProfileName::default_profile);
    let is_name = |n: &String| {
        (1..=128).contains(&n.len())
            && !n.starts_with(|c: char| c.is_ascii_digit())
            && n.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
    };
    if passed_env.len() > 64 || !passed_env.iter().all(is_name) {
        return error(
            ErrorCode::Invalid,
            "passed_env must list at most 64 variable names (letters, digits, _)",
        );
    }
    let mut detail = format!("gatehouse run; profile {profile}");
    if !passed_env.is_empty() {
        detail.push_str(&format!(
            "; secret-looking variables passed by name: {}",
            passed_env.join(", ")
        ));
    }
    match crate::sessions::create(&ctx.gate, &profile, "ui", "launch token issued", detail).await {
        Ok((session, token)) => Body::UiReply(UiReply::Launch(LaunchReply::Opened {
            session,
            token,
            profile,
        })),
        Err((code, why)) => error(code, why),
    }
}

/// A ui connection ended: the sessions `gatehouse run` opened through it and did not end (it
/// was killed) have their tokens revoked now.
pub fn connection_closed(ctx: &Rc<Ctx>, conn: &Rc<crate::tools::Conn>) {
    crate::launch::connection_closed(ctx, conn);
    for session in conn.launched.take() {
        let ctx = ctx.clone();
        tokio::task::spawn_local(async move {
            launch_end(&ctx, session, "gatehouse run's connection closed").await;
        });
    }
}

/// `gatehouse run` ended: its session's token is revoked (if its gateway has not already done
/// so by disconnecting), with an audit row either way.
pub(crate) async fn launch_end(ctx: &Rc<Ctx>, session: SessionId, why: &'static str) -> Body {
    let had = ctx.gate.sessions.borrow().is_revoked(&session);
    ctx.gate.sessions.borrow_mut().revoke(&session);
    let sid = session.0.clone();
    let revoked = crate::sessions::revoked_hash(&sid);
    let r = ctx
        .gate
        .store
        .txn(move |tx, audit| {
            let found =
                audit_store::sessions::set_resume_hash(tx, &SessionId(sid.clone()), &revoked)?;
            if found {
                let what = if had {
                    format!("{why}; token already revoked")
                } else {
                    format!("{why}; token revoked")
                };
                audit.push(AuditEvent::new(AuditKind::Session, "ui", what).session(sid));
            }
            Ok(found)
        })
        .await;
    match r {
        Ok(true) => Body::UiReply(UiReply::Launch(LaunchReply::Ended { session })),
        Ok(false) => error(ErrorCode::Invalid, format!("there is no session {session}")),
        Err(e) => error(ErrorCode::Internal, e.to_string()),
    }
}

fn view(ctx: &Rc<Ctx>) -> PolicyView {
    let p = ctx.gate.policy.borrow();
    PolicyView {
        revision: p.revision,
        source: p.source.clone(),
        document: p.document.clone(),
        error: p.current.as_ref().err().cloned(),
        remembered: ctx.gate.remembered.borrow().clone(),
    }
}
