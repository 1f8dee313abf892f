//! How a file tool's call travels to the fs-helper, as pure functions of the two schemas (the
//! broker's tool path links them; no helper does): the paths a call names and the access each
//! needs, the request that carries it out on the paths the helper resolved, and the helper's
//! reply as the tool's result.
//!
//! Every request here names its paths in grant form ([`FsPath::InGrant`], from the helper's own
//! resolution), so what runs is exactly what policy judged and the human saw.

use crate::fs::{Access, ChangePreview, FsError, FsPath, FsReply, FsRequest, ResolvedTarget, Seal};
use crate::tool::{Failure, ToolCall, ToolResult};
use crate::ErrorCode;

/// A resolved path in the form the helper's requests take: its grant and the path under it.
pub fn in_grant(r: &ResolvedTarget) -> FsPath {
    FsPath::InGrant {
        grant: r.grant.clone(),
        path: r.relative.clone(),
    }
}

/// The helper's typed error as the tool's failure.
pub fn failure(e: FsError) -> Failure {
    Failure {
        code: e.error_code(),
        message: e.message.clone(),
        fs: Some(e),
        from_ledger: false,
    }
}

/// The paths a file tool names, each with the access it needs, in the call's order. None for
/// every other call: `undo_change` names a checkpoint (its paths are the checkpoint's),
/// `run_command` a working directory, the web tools a URL, and the session calls nothing.
pub fn named_paths(call: &ToolCall) -> Vec<(&FsPath, Access)> {
    match call {
        ToolCall::ReadFile(a) => vec![(&a.path, Access::Read)],
        ToolCall::ListDir(a) => vec![(&a.path, Access::Read)],
        ToolCall::SearchFiles(a) => vec![(&a.path, Access::Read)],
        ToolCall::Grep(a) => vec![(&a.path, Access::Read)],
        ToolCall::WriteFile(a) => vec![(&a.path, Access::Write)],
        ToolCall::EditFile(a) => vec![(&a.path, Access::Edit)],
        ToolCall::DeletePath(a) => vec![(&a.path, Access::Delete)],
        ToolCall::MovePath(a) => vec![(&a.from, Access::Delete), (&a.to, Access::Write)],
        ToolCall::UndoChange(_)
        | ToolCall::RunCommand(_)
        | ToolCall::FetchUrl(_)
        | ToolCall::HttpRequest(_)
        | ToolCall::OpenSession { .. }
        | ToolCall::DescribeAgent(_)
        | ToolCall::ListServerTools
        | ToolCall::Server(_)
        | ToolCall::Withdraw(_) => vec![],
    }
}

/// The dry run that shows an approval card what a write or edit would change (`None`: the call
/// has no preview). `paths` is the helper's resolution of [`named_paths`].
pub fn preview_request(call: &ToolCall, paths: &[ResolvedTarget]) -> Option<FsRequest> {
    Some(match call {
        ToolCall::WriteFile(a) => FsRequest::WriteFile {
            path: in_grant(paths.first()?),
            content: a.content.clone(),
            create: a.create,
            create_parents: a.create_parents,
            expected: None,
            dry_run: true,
        },
        ToolCall::EditFile(a) => FsRequest::EditFile {
            path: in_grant(paths.first()?),
            edit: a.edit.clone(),
            expected: None,
            dry_run: true,
        },
        _ => return None,
    })
}

/// The helper's answer to a preview request.
pub fn preview_of(reply: FsReply) -> Result<ChangePreview, Failure> {
    match reply {
        FsReply::Preview(p) => Ok(p),
        FsReply::Failed(e) => Err(failure(e)),
        other => Err(Failure::new(
            ErrorCode::Internal,
            format!("the fs-helper answered a preview with {other:?}"),
        )),
    }
}

/// The request that carries the call out on the resolved (canonical) paths (`None`: not a file
/// tool, or fewer paths than it names). `expected` is the seal of the file as the human saw it,
/// for a write or an edit approved on a preview.
pub fn request(
    call: &ToolCall,
    paths: &[ResolvedTarget],
    expected: Option<Seal>,
) -> Option<FsRequest> {
    let p = |i: usize| paths.get(i).map(in_grant);
    Some(match call {
        ToolCall::ReadFile(a) => FsRequest::ReadFile {
            path: p(0)?,
            offset: a.offset,
            length: a.length,
        },
        ToolCall::ListDir(a) => FsRequest::ListDir {
            path: p(0)?,
            offset: a.offset,
            limit: a.limit,
        },
        ToolCall::SearchFiles(a) => FsRequest::SearchFiles {
            path: p(0)?,
            glob: a.glob.clone(),
            limits: a.limits,
        },
        ToolCall::Grep(a) => FsRequest::Grep {
            path: p(0)?,
            regex: a.regex.clone(),
            glob: a.glob.clone(),
            case_insensitive: a.case_insensitive,
            limits: a.limits,
            grep: a.grep,
        },
        ToolCall::WriteFile(a) => FsRequest::WriteFile {
            path: p(0)?,
            content: a.content.clone(),
            create: a.create,
            create_parents: a.create_parents,
            expected,
            dry_run: false,
        },
        ToolCall::EditFile(a) => FsRequest::EditFile {
            path: p(0)?,
            edit: a.edit.clone(),
            expected,
            dry_run: false,
        },
        ToolCall::DeletePath(a) => FsRequest::DeletePath {
            path: p(0)?,
            recursive: a.recursive,
            expected: None,
        },
        ToolCall::MovePath(a) => FsRequest::MovePath {
            from: p(0)?,
            to: p(1)?,
            overwrite: a.overwrite,
        },
        ToolCall::UndoChange(a) => FsRequest::Undo {
            checkpoint: a.checkpoint.clone(),
        },
        _ => return None,
    })
}

/// The helper's reply to a [`request`] as the tool's result (a typed error as its failure;
/// any other answer is the helper's fault).
pub fn result_of(reply: FsReply) -> Result<ToolResult, Failure> {
    Ok(match reply {
        FsReply::File(c) => ToolResult::File(c),
        FsReply::Listing(l) => ToolResult::Listing(l),
        FsReply::Search(s) => ToolResult::Search(s),
        FsReply::Grep(g) => ToolResult::Grep(g),
        FsReply::Changed(c) => ToolResult::Changed(c),
        FsReply::Undone(c) => ToolResult::Undone(c),
        FsReply::Failed(e) => return Err(failure(e)),
        other => {
            return Err(Failure::new(
                ErrorCode::Internal,
                format!("the fs-helper answered {other:?}"),
            ))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::{FileKind, GrantId};
    use crate::tool::{DeletePath, MovePath};

    fn resolved(rel: &[u8]) -> ResolvedTarget {
        ResolvedTarget {
            grant: GrantId("g".into()),
            root: b"/p".to_vec(),
            relative: rel.to_vec(),
            absolute: [b"/p/".as_slice(), rel].concat(),
            kind: FileKind::File,
        }
    }

    #[test]
    fn a_move_names_its_source_for_delete_and_its_target_for_write() {
        let call = ToolCall::MovePath(MovePath {
            from: FsPath::Absolute(b"/p/a".to_vec()),
            to: FsPath::Absolute(b"/p/b".to_vec()),
            overwrite: false,
        });
        let named: Vec<Access> = named_paths(&call).into_iter().map(|(_, a)| a).collect();
        assert_eq!(named, [Access::Delete, Access::Write]);
        // The request runs on the resolved paths, never on what the agent wrote.
        match request(&call, &[resolved(b"a"), resolved(b"b")], None) {
            Some(FsRequest::MovePath { from, to, .. }) => {
                assert_eq!(from, in_grant(&resolved(b"a")));
                assert_eq!(to, in_grant(&resolved(b"b")));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            request(&call, &[resolved(b"a")], None),
            None,
            "a path short"
        );
    }

    #[test]
    fn only_writes_and_edits_have_a_preview() {
        let call = ToolCall::DeletePath(DeletePath {
            path: FsPath::Absolute(b"/p/a".to_vec()),
            recursive: false,
        });
        assert_eq!(preview_request(&call, &[resolved(b"a")]), None);
    }
}
