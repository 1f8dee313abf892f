//! `LaunchRequest::Command`: a command the human started with `gatehouse sandbox`, carried out
//! the way an agent's `run_command` is: this broker checks it, its exec-helper builds the
//! sandbox and runs it, and the audit log gets a row at its start and at its end. Only the ui
//! channel carries the request (ipc_schema::route::UI_TO_BROKER; the gateway's table has no
//! such row, and a gateway that sends one is killed).
//!
//! The output goes to the ui peer as it comes (`LaunchReply::Output`), the end last
//! (`LaunchReply::CommandEnded`). One command per connection at a time; `StopCommand` (Ctrl-C)
//! and the connection closing both kill its sandbox.
//!
//! Nothing here forks, execs or opens a socket: the exec-helper does all of it.

use crate::fronts::Replier;
use crate::tools::Conn;
use crate::Ctx;
use audit_store::chain::{AuditEvent, AuditKind};
use ipc_schema::exec::{
    CommandSpec, ExecReply, ExecRequest, GrantAccess, NetworkMode, PathGrant, RunEnd, RunId,
    UserCommand, POLL_WAIT_MAX_MS,
};
use ipc_schema::ui::{CommandLaunch, LaunchReply, NotStarted, UiReply};
use ipc_schema::{Body, ErrorCode, ErrorReply, Role};
use std::cell::RefCell;
use std::path::{Component, Path, PathBuf};
use std::rc::{Rc, Weak};

/// Who the audit rows name as the actor: the human, through the console's channel.
const ACTOR: &str = "ui";
/// The tool name on the rows, beside the agent's `run_command`.
const TOOL: &str = "gatehouse sandbox";

thread_local! {
    /// The command each ui connection is running (the broker's event loop is one thread).
    static RUNNING: RefCell<Vec<(Weak<Conn>, RunId)>> = const { RefCell::new(Vec::new()) };
}

fn running(conn: &Rc<Conn>) -> Option<RunId> {
    RUNNING.with(|r| {
        r.borrow()
            .iter()
            .find(|(c, _)| c.as_ptr() == Rc::as_ptr(conn))
            .map(|(_, run)| *run)
    })
}

fn set_running(conn: &Rc<Conn>, run: Option<RunId>) {
    RUNNING.with(|r| {
        let mut r = r.borrow_mut();
        r.retain(|(c, _)| c.strong_count() > 0 && c.as_ptr() != Rc::as_ptr(conn));
        if let Some(run) = run {
            r.push((Rc::downgrade(conn), run));
        }
    })
}

fn launch_reply(r: LaunchReply) -> Body {
    Body::UiReply(UiReply::Launch(r))
}

/// `Err`: why the command is refused before anything runs.
fn spec_of(l: &CommandLaunch) -> Result<CommandSpec, String> {
    if l.argv.is_empty() || l.argv[0].is_empty() {
        return Err("no command was given".into());
    }
    if !l.domains.is_empty() {
        // The egress proxy needs the connector descriptor to travel with the exec-helper's
        // Start and each connection to the net-helper, which the broker's helper channels do
        // not carry yet; `gatehouse sandbox --allow-domain` keeps its own proxy until then.
        return Err("--allow-domain is not served through the broker yet".into());
    }
    if !l.cwd.is_absolute() {
        return Err(format!(
            "the working directory {} is not absolute",
            l.cwd.display()
        ));
    }
    // The checks below are lexical: a `..` would let `/tmp/x/../../root` pass for a directory
    // under /tmp (the CLI sends resolved paths, so only a forged request holds one).
    if climbs(&l.cwd) {
        return Err(format!(
            "the working directory {} is not resolved (it holds ..)",
            l.cwd.display()
        ));
    }
    let mut grants = Vec::with_capacity(l.grants.len() + 1);
    for g in &l.grants {
        if !g.path.is_absolute() {
            return Err(format!("the grant {} is not absolute", g.path.display()));
        }
        if climbs(&g.path) {
            return Err(format!(
                "the grant {} is not resolved (it holds ..)",
                g.path.display()
            ));
        }
        grants.push(g.clone());
    }
    // The CLI resolved the grants to tell whether one holds `cwd` (`work_root` false: one
    // does; the exec-helper checks it again, with links resolved).
    let covered = grants.iter().any(|g| l.cwd.starts_with(&g.path));
    if l.work_root && !covered {
        if let Some(why) = implicit_root_refusal(&l.cwd) {
            return Err(format!(
                "the current directory {} is not granted: {why}. Name what the command may use with --allow-write or --allow-read (and cd into it)",
                l.cwd.display()
            ));
        }
        grants.push(PathGrant {
            path: l.cwd.clone(),
            access: GrantAccess::ReadWrite,
        });
    }
    l.limits.check_with(l.long_run)?;
    Ok(CommandSpec {
        argv: l.argv.clone(),
        cwd: l.cwd.clone(),
        grants,
        env: l.env.clone(),
        network: NetworkMode::None,
        limits: l.limits,
        hide: l.hide.clone(),
        user: Some(Box::new(UserCommand {
            pass_env: l.pass_env.clone(),
            long_run: l.long_run,
        })),
    })
}

fn climbs(p: &Path) -> bool {
    p.components().any(|c| c == Component::ParentDir)
}

/// Why `cwd` is not made the working root without being named (the one check, in
/// `ipc_schema::protected`; this process's `$HOME` counts too).
pub fn implicit_root_refusal(cwd: &Path) -> Option<String> {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    ipc_schema::protected::implicit_root_refusal(cwd, home.as_deref())
}

/// The one line of the start row: argv, where, what the user granted.
fn start_line(spec: &CommandSpec, passed: &[String]) -> String {
    let grants: Vec<String> = spec
        .grants
        .iter()
        .map(|g| {
            format!(
                "{} ({})",
                g.path.display(),
                match g.access {
                    GrantAccess::Read => "read",
                    GrantAccess::ReadWrite => "read-write",
                }
            )
        })
        .collect();
    let mut line = format!(
        "run {:?} in {}, in the exec sandbox with no network, at most {} s; grants: {}",
        spec.argv,
        spec.cwd.display(),
        spec.limits.timeout_ms / 1000,
        grants.join(", ")
    );
    if !passed.is_empty() {
        line.push_str(&format!("; passed by name: {}", passed.join(", ")));
    }
    line
}

fn refusal_row(argv: &[String], why: &str) {
    crate::audit::record(
        AuditEvent::new(AuditKind::Refusal, ACTOR, "refused")
            .tool(TOOL)
            .target(format!("{argv:?}"))
            .detail(why.to_string()),
    );
}

/// `LaunchRequest::Command` from the ui connection `conn`.
pub fn command(
    ctx: &Rc<Ctx>,
    conn: &Rc<Conn>,
    id: u64,
    launch: Box<CommandLaunch>,
    reply: &Replier,
) {
    let refuse = |reason: String, why: NotStarted| {
        reply.send(id, launch_reply(LaunchReply::Refused { reason, why }))
    };
    if running(conn).is_some() {
        let why = "this connection already runs a command";
        refusal_row(&launch.argv, why);
        return refuse(why.into(), NotStarted::Refused);
    }
    let spec = match spec_of(&launch) {
        Ok(s) => s,
        Err(why) => {
            refusal_row(&launch.argv, &why);
            return refuse(why, NotStarted::Refused);
        }
    };
    let Some(slot) = ctx.helpers.slot(Role::Exec).cloned() else {
        let why = "there is no exec-helper";
        refusal_row(&launch.argv, why);
        return refuse(why.into(), NotStarted::Refused);
    };
    let passed: Vec<String> = launch.pass_env.iter().map(|(k, _)| k.clone()).collect();
    let (conn, reply) = (conn.clone(), reply.clone());
    // Held until the start is answered, so that a second Command cannot race this one.
    set_running(&conn, Some(RunId(u64::MAX)));
    tokio::task::spawn_local(async move {
        let argv = spec.argv.clone();
        let line = start_line(&spec, &passed);
        let started = slot
            .call(Body::Exec(ExecRequest::Start(Box::new(spec))))
            .await;
        let (run, sandbox) = match started {
            Ok(Body::ExecReply(ExecReply::Started { run, sandbox })) => (run, sandbox),
            other => {
                set_running(&conn, None);
                let (reason, why) = match other {
                    Ok(Body::Error(e)) => not_started(e),
                    Ok(other) => (
                        format!("the exec-helper answered a start with {:?}", other.kind()),
                        NotStarted::Refused,
                    ),
                    Err(e) => (e.to_string(), NotStarted::Refused),
                };
                refusal_row(&argv, &reason);
                reply.send(id, launch_reply(LaunchReply::Refused { reason, why }));
                return;
            }
        };
        set_running(&conn, Some(run));
        crate::audit::record(
            AuditEvent::new(AuditKind::Execution, ACTOR, "started")
                .tool(TOOL)
                .target(format!("{argv:?}"))
                .detail(format!("{run}: {line}; as uid {}", sandbox.uid)),
        );
        let mut gone =
            !reply.send_checked(id, launch_reply(LaunchReply::CommandStarted { sandbox }));
        if gone {
            stop(&slot, run).await;
        }
        let end: Result<RunEnd, String> = loop {
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
                    let any = !stdout.is_empty() || !stderr.is_empty();
                    if any && !gone {
                        let out = launch_reply(LaunchReply::Output { stdout, stderr });
                        if !reply.send_checked(id, out) {
                            // The ui peer is gone: nobody watches the command any more.
                            gone = true;
                            stop(&slot, run).await;
                        }
                    }
                    if let Some(end) = end {
                        break Ok(end);
                    }
                }
                Ok(Body::Error(e)) => {
                    break Err(format!(
                        "the exec-helper lost {run} while it ran: {}",
                        e.message
                    ))
                }
                Ok(other) => {
                    break Err(format!(
                        "the exec-helper answered a poll of {run} with {:?}",
                        other.kind()
                    ))
                }
                Err(e) => break Err(format!("{e} while {run} was running")),
            }
        };
        set_running(&conn, None);
        match end {
            Ok(end) => {
                crate::audit::record(
                    AuditEvent::new(AuditKind::Execution, ACTOR, "ended")
                        .tool(TOOL)
                        .target(format!("{argv:?}"))
                        .detail(format!(
                            "{run}: {}; {} ms; output dropped {} + {} bytes; {} set aside",
                            end.outcome.describe(),
                            end.elapsed_ms,
                            end.stdout_dropped,
                            end.stderr_dropped,
                            end.held.len() as u64 + end.held_more
                        )),
                );
                reply.send(id, launch_reply(LaunchReply::CommandEnded(end)));
            }
            Err(why) => {
                crate::audit::record(
                    AuditEvent::new(AuditKind::Execution, ACTOR, "uncertain")
                        .tool(TOOL)
                        .target(format!("{argv:?}"))
                        .detail(why.clone()),
                );
                reply.send(
                    id,
                    Body::Error(ErrorReply::new(ErrorCode::HelperCrashed, why)),
                );
            }
        }
    });
}

/// The exec-helper's refusal, and whether it was "not found" (the CLI exits 127 for that).
fn not_started(e: ErrorReply) -> (String, NotStarted) {
    let why = if e.code == ErrorCode::Invalid
        && e.message.contains(": command not found in the sandbox")
    {
        NotStarted::NotFound
    } else {
        NotStarted::Refused
    };
    (e.message, why)
}

async fn stop(slot: &crate::helpers::HelperSlot, run: RunId) {
    let _ = slot.call(Body::Exec(ExecRequest::Stop { run })).await;
}

/// `LaunchRequest::StopCommand`: kills the sandbox of this connection's command.
pub fn stop_command(ctx: &Rc<Ctx>, conn: &Rc<Conn>, id: u64, reply: &Replier) {
    let run = running(conn).filter(|r| r.0 != u64::MAX);
    let (Some(run), Some(slot)) = (run, ctx.helpers.slot(Role::Exec).cloned()) else {
        return reply.send(
            id,
            Body::Error(ErrorReply::new(
                ErrorCode::Invalid,
                "this connection runs no command",
            )),
        );
    };
    let reply = reply.clone();
    tokio::task::spawn_local(async move {
        stop(&slot, run).await;
        reply.send(id, Body::Pong);
    });
}

/// The ui connection closed: its command, if it runs one, is stopped.
pub fn connection_closed(ctx: &Rc<Ctx>, conn: &Rc<Conn>) {
    let Some(run) = running(conn).filter(|r| r.0 != u64::MAX) else {
        return;
    };
    if let Some(slot) = ctx.helpers.slot(Role::Exec).cloned() {
        tokio::task::spawn_local(async move { stop(&slot, run).await });
    }
}
