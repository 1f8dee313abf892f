//! `run_command` carried out by the exec-helper: one sandbox per command (namespaces, Landlock,
//! seccomp denylist, no network), started, polled to its end, output capped.
//!
//! The command sees the grant that holds its working directory, at its own path: read-write
//! when the grant has the write capability, read-only otherwise. Other grants stay invisible.
//! It never gets a network here (the default profile's "run_command in the exec sandbox, with
//! no network"); the egress proxy is for `gatehouse run` / `gatehouse sandbox`.

use super::fs::{EffectAnswer, Resolved};
use crate::Ctx;
use ipc_schema::exec::{
    CommandSpec, ExecReply, ExecRequest, GrantAccess, Limits, NetworkMode, PathGrant, RunEnd,
    RunId, RunOutcome, SandboxReport, OUTPUT_PIECE_MAX, POLL_WAIT_MAX_MS,
};
use ipc_schema::tool::{CommandRun, Failure, RunCommand, ToolResult};
use ipc_schema::{Body, ErrorCode, Role};
use policy::eval::shown;
use std::rc::Rc;

/// Output kept per stream: both streams whole must fit one reply frame (MAX_FRAME, 1 MiB).
pub const OUTPUT_CAP: u64 = OUTPUT_PIECE_MAX as u64;

/// What the sandbox enforced, in one line.
fn sandbox_line(s: &SandboxReport) -> String {
    use ipc_schema::tier::ConfinementTier::{Landlock, Namespaces};
    let mut line = match s.tier {
        Namespaces | Landlock => format!(
            "{} as uid {}; tier {}; namespaces {}; Landlock ABI {}; seccomp denylist {}; no network",
            s.program,
            s.uid,
            s.tier,
            if s.namespaces.is_empty() {
                "none".to_string()
            } else {
                s.namespaces.join(" ")
            },
            s.landlock_abi,
            if s.seccomp_denylist { "on" } else { "OFF" }
        ),
        // Windows' and macOS' tiers have no uid, namespaces, Landlock or seccomp to name: the
        // tier is the sandbox, and what it does not hold is listed as DEGRADED below.
        other => format!("{}; tier {other}", s.program),
    };
    if !s.masked.is_empty() {
        let mut names: Vec<String> = s
            .masked
            .iter()
            .take(10)
            .map(|p| p.display().to_string())
            .collect();
        if s.masked.len() > 10 {
            names.push(format!("and {} more", s.masked.len() - 10));
        }
        line.push_str(&format!("; masked: {}", names.join(", ")));
    }
    if !s.env_dropped.is_empty() {
        line.push_str(&format!("; env dropped: {}", s.env_dropped.join(", ")));
    }
    if !s.degraded.is_empty() {
        line.push_str(&format!("; DEGRADED: {}", s.degraded.join("; ")));
    }
    line
}

/// Appends `piece` to `kept` up to the cap; what is beyond is counted in `dropped`.
fn keep(kept: &mut Vec<u8>, dropped: &mut u64, piece: &[u8]) {
    let room = (OUTPUT_CAP as usize).saturating_sub(kept.len());
    let take = room.min(piece.len());
    kept.extend_from_slice(&piece[..take]);
    *dropped += (piece.len() - take) as u64;
}

/// Runs the command (already `executing` in the ledger).
pub async fn execute_effect(
    ctx: &Rc<Ctx>,
    a: &RunCommand,
    r: &Resolved,
    profile: &ipc_schema::tool::ProfileName,
) -> EffectAnswer {
    let never = |code, m: String| EffectAnswer::NeverSent(Failure::new(code, m));
    let Some(cwd) = r.paths.first() else {
        return never(
            ErrorCode::Internal,
            "the working directory was not resolved".into(),
        );
    };
    let timeout_ms = match a.timeout_ms() {
        Ok(t) => t,
        Err(e) => return never(ErrorCode::Invalid, e),
    };
    // The session's own profile's grant (the fs-helper's grant may be another profile's,
    // nested inside): its root is what the command sees, writable if that grant writes.
    let (writable, root, hide) = {
        let policy = ctx.gate.policy.borrow().profile(profile).ok();
        let grant = policy.as_ref().and_then(|p| {
            policy::eval::grant_for(p, &cwd.absolute).map(|(g, root, _)| {
                (
                    policy::eval::command_writes(g),
                    ipc_schema::os_path::of(root).to_vec(),
                    ipc_schema::exec::Hide {
                        exclude: g.exclude.clone(),
                        sensitive: !g.secret_files_allowed,
                    },
                )
            })
        });
        match grant {
            Some(g) => g,
            None => {
                return never(
                    ErrorCode::Refused,
                    format!(
                        "the grant of {} is no longer in the policy",
                        shown(&cwd.absolute)
                    ),
                )
            }
        }
    };
    let path = |b: &[u8]| ipc_schema::os_path::to_path(b).into_owned();
    let mut spec = CommandSpec {
        argv: a.argv.clone(),
        cwd: path(&cwd.absolute),
        grants: vec![PathGrant {
            path: path(&root),
            access: if writable {
                GrantAccess::ReadWrite
            } else {
                GrantAccess::Read
            },
        }],
        env: vec![],
        hide,
        user: None,
        network: NetworkMode::None,
        slot: None,
        limits: Limits {
            timeout_ms,
            stdout_max: OUTPUT_CAP,
            stderr_max: OUTPUT_CAP,
            ..Limits::default()
        },
    };
    let Some(slot) = ctx.helpers.slot(Role::Exec) else {
        return never(
            ErrorCode::HelperUnavailable,
            "there is no exec-helper".into(),
        );
    };
    if let Some(why) = crate::exec_tier::refusal(ctx).await {
        return never(ErrorCode::Refused, why);
    }
    // Windows: the command's ACEs on its grant (held until it ended); nothing elsewhere.
    let _aces = match crate::exec_aces::hold(ctx, &spec) {
        Ok(held) => held,
        Err(why) => return never(ErrorCode::Refused, why),
    };
    spec.slot = _aces.slot();
    let (run, sandbox) = match slot
        .call(Body::Exec(ExecRequest::Start(Box::new(spec))))
        .await
    {
        Ok(Body::ExecReply(ExecReply::Started { run, sandbox })) => (run, sandbox),
        // The helper said no (its built-in rules, bad values, too many runs): nothing ran.
        Ok(Body::Error(e)) => {
            return EffectAnswer::Failed(Failure::new(
                e.code,
                format!("the exec-helper did not start the command: {}", e.message),
            ))
        }
        Ok(other) => {
            return EffectAnswer::Unknown(format!(
                "the exec-helper answered a start with {:?}",
                other.kind()
            ))
        }
        Err(e @ crate::helpers::CallError::Unavailable { .. }) => {
            return never(ErrorCode::HelperUnavailable, e.to_string())
        }
        Err(e) => return EffectAnswer::Unknown(e.to_string()),
    };
    let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
    let (mut out_dropped, mut err_dropped) = (0u64, 0u64);
    let watched = watch_run(slot, run, |o, e| {
        keep(&mut stdout, &mut out_dropped, &o);
        keep(&mut stderr, &mut err_dropped, &e);
        true
    });
    let end = match watched.await {
        Ok(end) => end,
        Err(why) => return EffectAnswer::Unknown(why),
    };
    let outcome = end.outcome.describe();
    let exit_code = match end.outcome {
        RunOutcome::Exited(c) => Some(c),
        // Nothing ran: a failure, not a result.
        RunOutcome::ExecFailed { .. } | RunOutcome::SandboxFailed { .. } => {
            return EffectAnswer::Failed(Failure::new(ErrorCode::Invalid, outcome))
        }
        _ => None,
    };
    EffectAnswer::Done(Box::new(ToolResult::CommandRun(CommandRun {
        argv: a.argv.clone(),
        cwd: path(&cwd.absolute),
        exit_code,
        outcome,
        stdout,
        stderr,
        stdout_dropped: out_dropped + end.stdout_dropped,
        stderr_dropped: err_dropped + end.stderr_dropped,
        elapsed_ms: end.elapsed_ms,
        sandbox: sandbox_line(&sandbox),
        held: end
            .held
            .iter()
            .map(|h| h.to_string())
            .chain((end.held_more > 0).then(|| format!("and {} more", end.held_more)))
            .collect(),
    })))
}

/// Polls `run` of the exec-helper `slot` until its end, handing each piece of output to
/// `output`; once `output` returns false (nobody watches any more) the run is stopped, and its
/// end still awaited. `Err`: the helper lost the run (whether it finished is unknown). Used by
/// `run_command` and by the commands the human launches (`crate::launch`).
pub(crate) async fn watch_run(
    slot: &crate::helpers::HelperSlot,
    run: RunId,
    mut output: impl FnMut(Vec<u8>, Vec<u8>) -> bool,
) -> Result<RunEnd, String> {
    let mut stopped = false;
    loop {
        let poll = ExecRequest::Poll {
            run,
            wait_ms: POLL_WAIT_MAX_MS,
        };
        match slot.call(Body::Exec(poll)).await {
            Ok(Body::ExecReply(ExecReply::Progress {
                run: r,
                stdout,
                stderr,
                end,
            })) if r == run => {
                if !output(stdout, stderr) && !stopped {
                    stopped = true;
                    stop_run(slot, run).await;
                }
                if let Some(end) = end {
                    return Ok(end);
                }
            }
            Ok(Body::Error(e)) => {
                return Err(format!(
                    "the exec-helper lost {run} while it ran: {}",
                    e.message
                ))
            }
            Ok(other) => {
                return Err(format!(
                    "the exec-helper answered a poll of {run} with {:?}",
                    other.kind()
                ))
            }
            Err(e) => return Err(format!("{e} while {run} was running")),
        }
    }
}

/// Kills `run`'s whole sandbox (its next poll says `Stopped`).
pub(crate) async fn stop_run(slot: &crate::helpers::HelperSlot, run: RunId) {
    let _ = slot.call(Body::Exec(ExecRequest::Stop { run })).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_beyond_the_cap_is_counted_not_kept() {
        let (mut kept, mut dropped) = (Vec::new(), 0);
        keep(
            &mut kept,
            &mut dropped,
            &vec![b'a'; OUTPUT_CAP as usize - 2],
        );
        keep(&mut kept, &mut dropped, b"bcde");
        assert_eq!(kept.len(), OUTPUT_CAP as usize);
        assert!(kept.ends_with(b"abc"));
        assert_eq!(dropped, 2);
    }
}
