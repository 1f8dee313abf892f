//! `gatehouse session`: the broker's sessions (with their modes), and the human's way to set a
//! session's mode from a shell. On the ui socket, like the console: the agent's channel cannot
//! carry a mode (the route tables).

use crate::{fail, Global, EXIT_FAILURE};
use ipc_schema::inert::escaped;
use ipc_schema::mode::SessionMode;
use ipc_schema::tool::SessionId;
use ipc_schema::ui::{ModeSetter, SessionSummary, UiReply, UiRequest};
use ipc_schema::Body;
use std::process::ExitCode;

#[derive(clap::Subcommand)]
pub enum SessionCmd {
    /// The sessions this broker has: id, profile, mode, whether connected, calls, waiting cards.
    List,
    /// Set session ID's mode: ask (every Ask waits for a card), full-access (an Ask runs without
    /// a card; Deny, grants and protected paths still hold) or unattended (an Ask is refused at
    /// once). Cards of the session that wait are answered as the new mode would.
    Mode {
        /// The session (as `gatehouse session list` shows it).
        id: String,
        /// ask, full-access or unattended.
        mode: SessionMode,
    },
}

pub fn run(g: &Global, cmd: SessionCmd) -> ExitCode {
    let mut c = match g.ui_client() {
        Ok(c) => c,
        Err(e) => return fail(&e.to_string()),
    };
    match cmd {
        SessionCmd::List => match c.request(Body::Ui(UiRequest::ListSessions)) {
            Ok(Body::UiReply(UiReply::Sessions(list))) => {
                if g.json {
                    println!(
                        "{}",
                        serde_json::to_string_pretty(&list).expect("serialisable")
                    );
                } else if list.is_empty() {
                    println!("no sessions");
                } else {
                    for s in &list {
                        println!("{}", line(s));
                    }
                }
                ExitCode::SUCCESS
            }
            Ok(Body::Error(e)) => fail(&e.message),
            Ok(other) => fail(&format!("unexpected reply {:?}", other.kind())),
            Err(e) => fail(&e.to_string()),
        },
        SessionCmd::Mode { id, mode } => {
            let req = UiRequest::SetSessionMode {
                session: SessionId(id.clone()),
                mode,
                by: ModeSetter::Cli,
            };
            match c.request(Body::Ui(req)) {
                Ok(Body::UiReply(UiReply::SessionModeSet {
                    session,
                    old,
                    new,
                    answered,
                })) => {
                    if g.json {
                        println!(
                            "{}",
                            serde_json::json!({"session": session.0, "old": old, "new": new, "answered": answered})
                        );
                    } else {
                        println!(
                            "session {}: mode {old} -> {new}{}",
                            escaped(&session.0),
                            match answered {
                                0 => String::new(),
                                n => format!("; {n} waiting card(s) answered as {new} mode would"),
                            }
                        );
                    }
                    ExitCode::SUCCESS
                }
                Ok(Body::Error(e)) => {
                    if g.json {
                        println!(
                            "{}",
                            serde_json::json!({"session": id, "refused": e.message})
                        );
                    }
                    eprintln!("gatehouse: {}", e.message);
                    ExitCode::from(EXIT_FAILURE)
                }
                Ok(other) => fail(&format!("unexpected reply {:?}", other.kind())),
                Err(e) => fail(&e.to_string()),
            }
        }
    }
}

/// One session as a line; the agent's self-description is agent-controlled text, shown inert.
fn line(s: &SessionSummary) -> String {
    format!(
        "{} profile {} mode {} {} calls {} waiting {}{}",
        s.session,
        s.profile,
        s.mode,
        if s.connected { "connected" } else { "detached" },
        s.calls,
        s.pending,
        s.agent
            .as_deref()
            .map(|a| format!(" agent {}", escaped(a)))
            .unwrap_or_default()
    )
}
