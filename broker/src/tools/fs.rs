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
use ipc_schema::{Body, ErrorCode, Role};
use policy::eval::{shown, PathTarget, Target};
use std::rc::Rc;

/// A call's targets after resolution.
pub struct Resolved {
    /// What policy judges and proposals show.
    pub target: Target,
    /// The fs-helper's resolution of each path, in the call's order.
    pub paths: Vec<ResolvedTarget>,
}

fn in_grant(r: &ResolvedTarget) -> FsPath {
    FsPath::InGrant {
        grant: r.grant.clone(),
        path: r.relative.clone(),
    }
}

fn fs_failure(e: FsError) -> Failure {
    Failure {
        code: e.error_code(),
        message: e.message.clone(),
        fs: Some(e),
        from_ledger: false,
    }
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
        return Err(Failure {
            code: ErrorCode::HelperUnavailable,
            message: "there is no fs-helper".into(),
            fs: None,
            from_ledger: false,
        });
    };
    match slot.call(Body::Fs(req)).await {
        Ok(Body::FsReply(r)) => Ok(r),
        Ok(Body::Error(e)) => Err(Failure {
            code: e.code,
            message: e.message,
            fs: None,
            from_ledger: false,
        }),
        Ok(other) => Err(Failure {
            code: ErrorCode::Internal,
            message: format!("the fs-helper answered {:?}", other.kind()),
            fs: None,
            from_ledger: false,
        }),
        Err(e) => Err(Failure {
            code: crate::call_error_reply(&e).code,
            message: e.to_string(),
            fs: None,
            from_ledger: false,
        }),
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
    let wanted: Vec<(&FsPath, Access)> = match call {
        ToolCall::OpenSession { .. } | ToolCall::DescribeAgent(_) | ToolCall::Withdraw(_) => vec![],
        ToolCall::ReadFile(a) => vec![(&a.path, Access::Read)],
        ToolCall::ListDir(a) => vec![(&a.path, Access::Read)],
        ToolCall::SearchFiles(a) => vec![(&a.path, Access::Read)],
        ToolCall::Grep(a) => vec![(&a.path, Access::Read)],
        ToolCall::WriteFile(a) => vec![(&a.path, Access::Write)],
        ToolCall::EditFile(a) => vec![(&a.path, Access::Edit)],
        ToolCall::DeletePath(a) => vec![(&a.path, Access::Delete)],
        ToolCall::MovePath(a) => vec![(&a.from, Access::Delete), (&a.to, Access::Write)],
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
    let req = match call {
        ToolCall::WriteFile(a) => FsRequest::WriteFile {
            path: in_grant(&r.paths[0]),
            content: a.content.clone(),
            create: a.create,
            create_parents: a.create_parents,
            expected: None,
            dry_run: true,
        },
        ToolCall::EditFile(a) => FsRequest::EditFile {
            path: in_grant(&r.paths[0]),
            edit: a.edit.clone(),
            expected: None,
            dry_run: true,
        },
        _ => return Ok(None),
    };
    match fs_call(ctx, req).await? {
        FsReply::Preview(p) => Ok(Some(p)),
        FsReply::Failed(e) => Err(fs_failure(e)),
        other => Err(Failure {
            code: ErrorCode::Internal,
            message: format!("the fs-helper answered a preview with {other:?}"),
            fs: None,
            from_ledger: false,
        }),
    }
}

/// One line on what the call will do.
pub fn effect(call: &ToolCall, r: &Resolved, preview: Option<&ChangePreview>) -> String {
    let p = |i: usize| {
        r.paths
            .get(i)
            .map(|t| shown(&t.absolute))
            .unwrap_or_default()
    };
    let size = |s: Option<Seal>| {
        s.map(|s| format!("{} bytes", s.len))
            .unwrap_or_else(|| "nothing".into())
    };
    match call {
        ToolCall::ReadFile(_) => format!("read {}", p(0)),
        ToolCall::ListDir(_) => format!("list {}", p(0)),
        ToolCall::SearchFiles(a) => format!("search names matching {:?} under {}", a.glob, p(0)),
        ToolCall::Grep(_) => format!("search contents under {}", p(0)),
        ToolCall::WriteFile(a) => match preview {
            Some(pv) if pv.current.is_some() => format!(
                "replace {} ({} -> {} bytes)",
                p(0),
                size(pv.current),
                a.content.len()
            ),
            _ => format!("create {} ({} bytes)", p(0), a.content.len()),
        },
        ToolCall::EditFile(_) => match preview {
            Some(pv) => format!(
                "edit {} ({} replacement(s); {} -> {} bytes)",
                p(0),
                pv.replacements,
                size(pv.current),
                pv.proposed.len
            ),
            None => format!("edit {}", p(0)),
        },
        ToolCall::DeletePath(a) => format!(
            "delete {}{}",
            p(0),
            if a.recursive {
                " and everything under it"
            } else {
                ""
            }
        ),
        ToolCall::MovePath(a) => format!(
            "move {} to {}{}",
            p(0),
            p(1),
            if a.overwrite {
                " (replacing what is there)"
            } else {
                ""
            }
        ),
        ToolCall::UndoChange(a) => format!("restore {} from checkpoint {}", p(0), a.checkpoint),
        ToolCall::FetchUrl(a) => format!("fetch {}", a.url),
        ToolCall::HttpRequest(a) => format!("{:?} {}", a.method, a.url),
        ToolCall::RunCommand(a) => format!("run {:?} in {}", a.argv, p(0)),
        ToolCall::OpenSession { .. } | ToolCall::DescribeAgent(_) | ToolCall::Withdraw(_) => {
            String::new()
        }
    }
}

fn result_of(reply: FsReply) -> Result<ToolResult, Failure> {
    Ok(match reply {
        FsReply::File(c) => ToolResult::File(c),
        FsReply::Listing(l) => ToolResult::Listing(l),
        FsReply::Search(s) => ToolResult::Search(s),
        FsReply::Grep(g) => ToolResult::Grep(g),
        FsReply::Changed(c) => ToolResult::Changed(c),
        FsReply::Undone(c) => ToolResult::Undone(c),
        FsReply::Failed(e) => return Err(fs_failure(e)),
        other => {
            return Err(Failure {
                code: ErrorCode::Internal,
                message: format!("the fs-helper answered {other:?}"),
                fs: None,
                from_ledger: false,
            })
        }
    })
}

/// The helper request that carries the call out, on the resolved (canonical) paths.
fn request(call: &ToolCall, r: &Resolved, expected: Option<Seal>) -> Option<FsRequest> {
    let p = |i: usize| in_grant(&r.paths[i]);
    Some(match call {
        ToolCall::ReadFile(a) => FsRequest::ReadFile {
            path: p(0),
            offset: a.offset,
            length: a.length,
        },
        ToolCall::ListDir(a) => FsRequest::ListDir {
            path: p(0),
            offset: a.offset,
            limit: a.limit,
        },
        ToolCall::SearchFiles(a) => FsRequest::SearchFiles {
            path: p(0),
            glob: a.glob.clone(),
            limits: a.limits,
        },
        ToolCall::Grep(a) => FsRequest::Grep {
            path: p(0),
            regex: a.regex.clone(),
            glob: a.glob.clone(),
            case_insensitive: a.case_insensitive,
            limits: a.limits,
            grep: a.grep,
        },
        ToolCall::WriteFile(a) => FsRequest::WriteFile {
            path: p(0),
            content: a.content.clone(),
            create: a.create,
            create_parents: a.create_parents,
            expected,
            dry_run: false,
        },
        ToolCall::EditFile(a) => FsRequest::EditFile {
            path: p(0),
            edit: a.edit.clone(),
            expected,
            dry_run: false,
        },
        ToolCall::DeletePath(a) => FsRequest::DeletePath {
            path: p(0),
            recursive: a.recursive,
            expected: None,
        },
        ToolCall::MovePath(a) => FsRequest::MovePath {
            from: p(0),
            to: p(1),
            overwrite: a.overwrite,
        },
        ToolCall::UndoChange(a) => FsRequest::Undo {
            checkpoint: a.checkpoint.clone(),
        },
        _ => return None,
    })
}

/// Carries out a read-only call.
pub async fn execute(
    ctx: &Rc<Ctx>,
    call: &ToolCall,
    r: &Resolved,
    expected: Option<Seal>,
) -> Result<ToolResult, Failure> {
    let Some(req) = request(call, r, expected) else {
        return Err(Failure {
            code: ErrorCode::Internal,
            message: "not a file tool".into(),
            fs: None,
            from_ledger: false,
        });
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
    let Some(req) = request(call, r, expected) else {
        return EffectAnswer::NeverSent(Failure {
            code: ErrorCode::Internal,
            message: "not a file tool".into(),
            fs: None,
            from_ledger: false,
        });
    };
    let Some(slot) = ctx.helpers.slot(Role::Fs) else {
        return EffectAnswer::NeverSent(Failure {
            code: ErrorCode::HelperUnavailable,
            message: "there is no fs-helper".into(),
            fs: None,
            from_ledger: false,
        });
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
        Ok(Body::Error(e)) => EffectAnswer::Failed(Failure {
            code: e.code,
            message: e.message,
            fs: None,
            from_ledger: false,
        }),
        Ok(other) => EffectAnswer::Unknown(format!("the fs-helper answered {:?}", other.kind())),
        Err(e @ crate::helpers::CallError::Unavailable { .. }) => {
            EffectAnswer::NeverSent(Failure {
                code: ErrorCode::HelperUnavailable,
                message: e.to_string(),
                fs: None,
                from_ledger: false,
            })
        }
        Err(e @ crate::helpers::CallError::Crashed { .. }) => EffectAnswer::Unknown(e.to_string()),
    }
}
