//! The console's requests: proposals and decisions, uncertain calls, sessions, policy.

use crate::fronts::Replier;
use crate::Ctx;
use audit_store::chain::{AuditEvent, AuditKind};
use audit_store::now_ms;
use ipc_schema::ui::{CallState, LaunchRequest, PolicyView, SessionSummary, UiReply, UiRequest};
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
            gate.approvals
                .borrow_mut()
                .subscribe(reply.clone(), id, conn_key(conn));
            reply.send(id, Body::UiReply(UiReply::Subscribed));
        }
        UiRequest::Decide(d) => {
            let whose = gate.approvals.borrow().whose(d.proposal);
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
            let mut row = AuditEvent::new(AuditKind::Decision, "ui", outcome).detail(detail);
            if let Some((session, tool, tier)) = whose {
                row = row.session(session.0).tool(tool.name()).tier(tier);
            }
            crate::audit::record(row);
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
                        mode: s.mode,
                    }
                })
                .collect();
            reply.send(id, Body::UiReply(UiReply::Sessions(list)));
        }
        UiRequest::PolicyShow => reply.send(id, Body::UiReply(UiReply::Policy(view(ctx)))),
        UiRequest::ServerTools { profile, server } => {
            let (ctx, reply) = (ctx.clone(), reply.clone());
            tokio::task::spawn_local(async move {
                let body = match crate::tools::servers::inspect(&ctx, &profile, &server).await {
                    Ok(list) => Body::UiReply(UiReply::ServerTools(
                        list.into_iter()
                            .map(
                                |(def, digest, held, pinned)| ipc_schema::ui::ServerToolView {
                                    def,
                                    digest,
                                    held,
                                    pinned,
                                },
                            )
                            .collect(),
                    )),
                    Err(e) => error(ErrorCode::Refused, e),
                };
                reply.send(id, body);
            });
        }
        UiRequest::ApproveServerTools {
            profile,
            server,
            tools,
        } => {
            let (ctx, reply) = (ctx.clone(), reply.clone());
            tokio::task::spawn_local(async move {
                let body =
                    match crate::tools::servers::approve(&ctx, &profile, &server, &tools).await {
                        Ok(count) => Body::UiReply(UiReply::ServerToolsApproved { count }),
                        Err(e) => error(ErrorCode::Refused, e),
                    };
                reply.send(id, body);
            });
        }
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
                        #[cfg(windows)]
                        if let Err(e) = gate.grant_fs_aces() {
                            tracing::warn!("the fs-helper's grant roots: {e}");
                        }
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
        UiRequest::SetSessionMode { session, mode, by } => {
            let (ctx, reply) = (ctx.clone(), reply.clone());
            tokio::task::spawn_local(async move {
                let body = match crate::sessions::set_mode(&ctx.gate, &session, mode, by).await {
                    Ok((old, answered)) => Body::UiReply(UiReply::SessionModeSet {
                        session,
                        old,
                        new: mode,
                        answered,
                    }),
                    Err(e) => error(ErrorCode::Refused, e),
                };
                reply.send(id, body);
            });
        }
        UiRequest::StopBroker => {
            reply.send(
                id,
                Body::UiReply(UiReply::Stopping {
                    pid: std::process::id(),
                }),
            );
            // A permit is kept if the loop is not waiting yet: the request is never lost.
            ctx.stop_requested.notify_one();
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

/// A ui connection ended: the command it launched, if one still runs, is stopped (and an
/// agent's sessions end with it).
pub fn connection_closed(ctx: &Rc<Ctx>, conn: &Rc<crate::tools::Conn>) {
    crate::launch::connection_closed(ctx, conn);
    ctx.gate
        .approvals
        .borrow_mut()
        .connection_closed(conn_key(conn));
}

/// Which connection a console or notifier listens on.
pub fn conn_key(conn: &Rc<crate::tools::Conn>) -> crate::approvals::ConnKey {
    Rc::as_ptr(conn) as usize
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
