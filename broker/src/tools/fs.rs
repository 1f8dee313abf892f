//! The tool path's side of the fs-helper: resolving a call's paths to canonical targets,
//! previews for approval cards, and carrying the call out.

use super::{failed, refused};
use crate::test_hooks::{crash_point, CrashStep};
use crate::Ctx;
use ipc_schema::fs::{
    Access, ChangePreview, FileKind, FsError, FsErrorKind, FsPath, FsReply, FsRequest,
    ResolvedTarget, Seal,
};
use ipc_schema::tool::{Failure, RefusalKind, ToolCall, ToolReply, ToolResult};
use ipc_schema::tool_fs::{self, failure as fs_failure, result_of};
use ipc_schema::{Body, ErrorCode, Role};
use policy::eval::{PathTarget, Target};
use std::rc::Rc;

/// A call's targets after resolution.
pub struct Resolved {
    /// What policy judges and proposals show.
    pub target: Target,
    /// The fs-helper's resolution of each path, in the call's order.
    pub paths: Vec<ResolvedTarget>,
}

/// A refusal by containment (outside grants, protected, ...) is a refusal; anything else the
/// helper says (not found, not text, ...) is a failure.
fn fs_reply_error(e: FsError) -> ToolReply {
    if e.error_code() == ErrorCode::Refused {
        refused(
            RefusalKind::Contained,
            format!("refused by the file helper: {}", e.message),
            None,
            None,
        )
    } else {
        ToolReply::Failed(fs_failure(e))
    }
}

async fn fs_call(ctx: &Rc<Ctx>, req: FsRequest) -> Result<FsReply, Failure> {
    let Some(slot) = ctx.helpers.slot(Role::Fs) else {
        return Err(Failure::new(
            ErrorCode::HelperUnavailable,
            "there is no fs-helper",
        ));
    };
    match slot.call(Body::Fs(req)).await {
        Ok(Body::FsReply(r)) => Ok(r),
        Ok(Body::Error(e)) => Err(Failure::new(e.code, e.message)),
        Ok(other) => Err(Failure::new(
            ErrorCode::Internal,
            format!("the fs-helper answered {:?}", other.kind()),
        )),
        Err(e) => Err(Failure::new(
            crate::call_error_reply(&e).code,
            e.to_string(),
        )),
    }
}

async fn resolve_path(
    ctx: &Rc<Ctx>,
    path: &FsPath,
    access: Access,
) -> Result<ResolvedTarget, ToolReply> {
    match fs_call(
        ctx,
        FsRequest::Resolve {
            path: path.clone(),
            access,
        },
    )
    .await
    {
        Ok(FsReply::Resolved(r)) => Ok(r),
        Ok(FsReply::Failed(e)) => Err(fs_reply_error(e)),
        Ok(other) => Err(failed(
            ErrorCode::Internal,
            format!("the fs-helper answered a resolve with {other:?}"),
        )),
        Err(f) => Err(ToolReply::Failed(f)),
    }
}

/// Resolves every path the call names (each with the access it needs).
pub async fn resolve(ctx: &Rc<Ctx>, call: &ToolCall) -> Result<Resolved, ToolReply> {
    if let ToolCall::Server(c) = call {
        return Ok(Resolved {
            target: Target::Server {
                server: c.server.clone(),
                tool: c.tool.clone(),
                arguments: c.arguments.value(),
            },
            paths: vec![],
        });
    }
    let wanted = match call {
        ToolCall::UndoChange(a) => {
            let list = match fs_call(ctx, FsRequest::ListCheckpoints { limit: u32::MAX }).await {
                Ok(FsReply::Checkpoints(l)) => l,
                Ok(FsReply::Failed(e)) => return Err(fs_reply_error(e)),
                Ok(other) => {
                    return Err(failed(
                        ErrorCode::Internal,
                        format!("the fs-helper answered {other:?}"),
                    ))
                }
                Err(f) => return Err(ToolReply::Failed(f)),
            };
            let Some(cp) = list.into_iter().find(|c| c.id == a.checkpoint) else {
                return Err(fs_reply_error(FsError::new(
                    FsErrorKind::NoSuchCheckpoint,
                    format!("there is no checkpoint {}", a.checkpoint),
                )));
            };
            let mut paths = vec![cp.target.clone()];
            let mut targets = vec![PathTarget {
                abs: cp.target.absolute.clone(),
                access: Access::Write,
                is_dir: false,
            }];
            if let Some(to) = cp.moved_to {
                targets.push(PathTarget {
                    abs: to.absolute.clone(),
                    access: Access::Delete,
                    is_dir: false,
                });
                paths.push(to);
            }
            return Ok(Resolved {
                target: Target::Paths(targets),
                paths,
            });
        }
        // A URL's target is resolved by the net-helper (`net::resolve`), never here.
        ToolCall::FetchUrl(_) | ToolCall::HttpRequest(_) => {
            return Err(failed(
                ErrorCode::Internal,
                "a URL's target is resolved by the net-helper, not the fs-helper",
            ))
        }
        ToolCall::RunCommand(a) => {
            let Some(program) = a.argv.first().filter(|p| !p.is_empty()) else {
                return Err(failed(
                    ErrorCode::Invalid,
                    "run_command needs a program (argv is empty)",
                ));
            };
            let cwd = resolve_path(ctx, &a.cwd, Access::Read).await?;
            return Ok(Resolved {
                target: Target::Command {
                    program: program.clone(),
                    cwd: cwd.absolute.clone(),
                },
                paths: vec![cwd],
            });
        }
        call => tool_fs::named_paths(call),
    };
    let mut paths = Vec::new();
    let mut targets = Vec::new();
    for (p, access) in wanted {
        let r = resolve_path(ctx, p, access).await?;
        targets.push(PathTarget {
            abs: r.absolute.clone(),
            access,
            is_dir: r.kind == FileKind::Dir,
        });
        paths.push(r);
    }
    Ok(Resolved {
        target: Target::Paths(targets),
        paths,
    })
}

/// For an approval card: what a write or edit would change (the fs-helper's dry run).
pub async fn preview(
    ctx: &Rc<Ctx>,
    call: &ToolCall,
    r: &Resolved,
) -> Result<Option<ChangePreview>, Failure> {
    let Some(req) = tool_fs::preview_request(call, &r.paths) else {
        return Ok(None);
    };
    tool_fs::preview_of(fs_call(ctx, req).await?).map(Some)
}

/// Carries out a read-only call.
pub async fn execute(
    ctx: &Rc<Ctx>,
    call: &ToolCall,
    r: &Resolved,
    expected: Option<Seal>,
) -> Result<ToolResult, Failure> {
    let Some(req) = tool_fs::request(call, &r.paths, expected) else {
        return Err(Failure::new(ErrorCode::Internal, "not a file tool"));
    };
    result_of(fs_call(ctx, req).await?)
}

/// What came of handing an effectful call to the helper.
pub enum EffectAnswer {
    Done(Box<ToolResult>),
    /// The helper answered that it did not do it.
    Failed(Failure),
    /// It never reached the helper (none was running).
    NeverSent(Failure),
    /// The helper stopped (or answered nonsense) while it had the request.
    Unknown(String),
}

/// Carries out an effectful call (already `executing` in the ledger).
pub async fn execute_effect(
    ctx: &Rc<Ctx>,
    call: &ToolCall,
    r: &Resolved,
    expected: Option<Seal>,
    crash: Option<crate::test_hooks::CrashStep>,
) -> EffectAnswer {
    let Some(req) = tool_fs::request(call, &r.paths, expected) else {
        return EffectAnswer::NeverSent(Failure::new(ErrorCode::Internal, "not a file tool"));
    };
    let Some(slot) = ctx.helpers.slot(Role::Fs) else {
        return EffectAnswer::NeverSent(Failure::new(
            ErrorCode::HelperUnavailable,
            "there is no fs-helper",
        ));
    };
    let call_fut = slot.call(Body::Fs(req));
    let answer = if crash == Some(CrashStep::InHelper) {
        // Die at a varying moment after the request was queued: sometimes before the helper
        // read it, sometimes while it works, sometimes after it finished.
        let delay = std::time::Duration::from_micros(rand::random::<u64>() % 3000);
        tokio::pin!(call_fut);
        tokio::select! {
            _ = &mut call_fut => {}
            _ = tokio::time::sleep(delay) => {}
        }
        // Either way, die before the answer is recorded.
        crash_point(crash, CrashStep::InHelper);
        unreachable!("the in-helper crash point kills the broker")
    } else {
        call_fut.await
    };
    match answer {
        Ok(Body::FsReply(FsReply::Failed(e))) => EffectAnswer::Failed(fs_failure(e)),
        Ok(Body::FsReply(reply)) => match result_of(reply) {
            Ok(res) => EffectAnswer::Done(Box::new(res)),
            Err(f) => EffectAnswer::Unknown(f.message),
        },
        Ok(Body::Error(e)) => EffectAnswer::Failed(Failure::new(e.code, e.message)),
        Ok(other) => EffectAnswer::Unknown(format!("the fs-helper answered {:?}", other.kind())),
        Err(e @ crate::helpers::CallError::Unavailable { .. }) => {
            EffectAnswer::NeverSent(Failure::new(ErrorCode::HelperUnavailable, e.to_string()))
        }
        Err(e @ crate::helpers::CallError::Crashed { .. }) => EffectAnswer::Unknown(e.to_string()),
    }
}
