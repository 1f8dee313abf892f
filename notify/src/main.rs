//! `gatehouse-notify` (`gatehouse notify`): approvals that find you.
//!
//! A separate, unprivileged process of the user's, so that the broker stays without D-Bus and
//! without exec. It connects to the broker's notifier socket (`notify.sock`), whose route
//! table carries one request, a watch: it cannot decide, change the policy or call a tool
//! (the broker kills a notifier that tries). The broker tells it of a card that waits while no
//! console is attached (a summary: session, tool, target, card number, expiry; never the
//! arguments, the diff or the digest), and when to take it back. For each card it shows a
//! desktop notification with an "open" action (which runs `[notify] open`, by default a
//! terminal with `gatehouse ui`) and hands the summary, as JSON on stdin, to the user's hook
//! (`[notify] command`). The decision is made on the console, as always.
//!
//! Reads top to bottom: settings, the session bus, the broker, then serve.
//!
//! On Windows there is no session bus: desktop notifications are not built there, the config
//! refuses `desktop = true`, and the hook is how the notifier tells the user (the broker's
//! notifier pipe, like its other pipes, admits only this user's processes).

#![forbid(unsafe_code)]

mod config;
#[cfg(unix)]
mod desktop;
mod run;
mod summary;

use clap::Parser;
use config::NotifyConfig;
#[cfg(unix)]
use desktop::Desktop;
use gatehouse_client::{Client, Dirs};
use ipc_schema::notify::{NotifyEvent, NotifyReply, NotifyRequest, Settled};
use ipc_schema::Body;
use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};

#[derive(Parser)]
#[command(
    name = "gatehouse notify",
    about = "Desktop notifications (and a hook) for approval cards that wait while no console is attached"
)]
struct Args {
    /// A private instance: config, data and sockets all under DIR.
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// One JSON object per line on stdout for each thing done (watching, shown, hook, closed,
    /// opened).
    #[arg(long)]
    json: bool,
}

/// No desktop notifications are built on Windows ([`config`] refuses `desktop = true` there): a
/// type with no value, so every use of one is code that cannot run.
#[cfg(windows)]
enum Desktop {}

#[cfg(windows)]
impl Desktop {
    fn connect() -> Result<Desktop, String> {
        Err(config::NO_DESKTOP.into())
    }
    fn show(&self, _title: &str, _body: &str) -> Result<u32, String> {
        match *self {}
    }
    fn close(&self, _id: u32) -> Result<(), String> {
        match *self {}
    }
    fn server(&self) -> String {
        match *self {}
    }
}

#[cfg(unix)]
impl Desktop {
    fn server(&self) -> String {
        self.server.clone()
    }
}

/// Says what the notifier did: JSON lines on stdout, or a line on stderr.
#[derive(Clone)]
struct Report {
    json: bool,
}

impl Report {
    fn say(&self, v: serde_json::Value, text: impl FnOnce() -> String) {
        if self.json {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{v}");
            let _ = out.flush();
        } else {
            eprintln!("gatehouse notify: {}", ipc_schema::inert::escaped(&text()));
        }
    }
}

fn fail(msg: &str) -> ExitCode {
    eprintln!("gatehouse notify: {}", ipc_schema::inert::escaped(msg));
    ExitCode::from(1)
}

/// Which desktop notification shows which card.
#[derive(Default)]
struct Shown {
    by_card: HashMap<u64, u32>,
    by_notification: HashMap<u32, u64>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let (data_dir, dirs) = match Dirs::for_data_dir(args.data_dir.as_deref()) {
        Ok(d) => d,
        Err(e) => return fail(&e),
    };
    let gatehouse = match gatehouse_client::sibling("gatehouse") {
        Ok(g) => g,
        Err(e) => return fail(&e),
    };
    let cfg = match NotifyConfig::load(
        &dirs.config,
        config::default_open(&gatehouse, data_dir.as_deref()),
    ) {
        Ok(c) => c,
        Err(e) => return fail(&e.to_string()),
    };
    let report = Report { json: args.json };

    // The session bus first: a notifier that cannot show anything says so before it watches.
    let desktop = if cfg.desktop {
        match Desktop::connect() {
            Ok(d) => Some(Arc::new(d)),
            Err(e) => return fail(&e.to_string()),
        }
    } else {
        None
    };
    let shown = Arc::new(Mutex::new(Shown::default()));
    let runner = run::Runner::default();
    #[cfg(unix)]
    if let Some(d) = &desktop {
        // Subscribed before the watch starts, so no click on a card shown later is missed.
        let actions = match d.proxy.receive_action_invoked() {
            Ok(a) => a,
            Err(e) => return fail(&format!("cannot listen for notification actions: {e}")),
        };
        let (shown, runner, open, report) = (
            shown.clone(),
            runner.clone(),
            cfg.open.clone(),
            report.clone(),
        );
        std::thread::spawn(move || {
            for signal in actions {
                let Ok(a) = signal.args() else { continue };
                let key = a.action_key.as_str();
                if key != desktop::ACTION_OPEN && key != desktop::ACTION_DEFAULT {
                    continue;
                }
                // Only our own notifications open the console.
                let Some(card) = shown.lock().unwrap().by_notification.get(&a.id).copied() else {
                    continue;
                };
                let report = report.clone();
                runner.spawn(&open, None, None, move |ended| {
                    report.say(
                        serde_json::json!({"event": "opened", "proposal": card, "ended": ended.to_string()}),
                        || format!("opened the console for card #{card}: the command {ended}"),
                    )
                });
            }
        });
    }

    let mut broker =
        match Client::connect_or_start(data_dir.as_deref(), &dirs, &dirs.notify_socket(), &[]) {
            Ok(c) => c,
            Err(e) => return fail(&e.to_string()),
        };
    let watch = match broker.send(Body::Notify(NotifyRequest::Watch)) {
        Ok(id) => id,
        Err(e) => return fail(&e.to_string()),
    };

    loop {
        let env = match broker.next_frame() {
            Ok(env) => env,
            Err(e) => {
                return fail(&format!(
                    "{e}; the notifier stops (start it again once the broker runs)"
                ))
            }
        };
        if env.id != watch {
            return fail(&format!(
                "the broker answered a request never sent ({:?})",
                env.body.kind()
            ));
        }
        match env.body {
            Body::NotifyReply(NotifyReply::Watching) => report.say(
                serde_json::json!({
                    "event": "watching",
                    "desktop": desktop.as_ref().map(|d| d.server()),
                    "hook": cfg.command.is_some(),
                }),
                || match &desktop {
                    Some(d) => format!("watching for cards; notifications go to {}", d.server()),
                    None => "watching for cards; only the hook is told".into(),
                },
            ),
            Body::NotifyReply(NotifyReply::Event(NotifyEvent::Waiting(card))) => {
                let s = summary::Shown::of(&card);
                if let Some(d) = &desktop {
                    match d.show(&s.title(), &s.body()) {
                        Ok(n) => {
                            let mut m = shown.lock().unwrap();
                            m.by_card.insert(s.proposal, n);
                            m.by_notification.insert(n, s.proposal);
                            drop(m);
                            report.say(
                                serde_json::json!({"event": "shown", "proposal": s.proposal, "notification": n}),
                                || format!("card #{} shown (notification {n})", s.proposal),
                            );
                        }
                        Err(e) => report.say(
                            serde_json::json!({"event": "not_shown", "proposal": s.proposal, "error": e.to_string()}),
                            || format!("card #{} could not be shown: {e}", s.proposal),
                        ),
                    }
                }
                if let Some(hook) = &cfg.command {
                    let (report, card) = (report.clone(), s.proposal);
                    runner.spawn(hook, Some(s.json().into_bytes()), Some(cfg.hook_timeout), move |ended| {
                        report.say(
                            serde_json::json!({"event": "hook", "proposal": card, "ended": ended.to_string()}),
                            || format!("the hook for card #{card} {ended}"),
                        )
                    });
                }
            }
            Body::NotifyReply(NotifyReply::Event(NotifyEvent::Settled { proposal, why })) => {
                let n = {
                    let mut m = shown.lock().unwrap();
                    let n = m.by_card.remove(&proposal.0);
                    if let Some(n) = n {
                        m.by_notification.remove(&n);
                    }
                    n
                };
                let why = match why {
                    Settled::Closed => "closed",
                    Settled::ConsoleAttached => "console attached",
                };
                if let (Some(d), Some(n)) = (&desktop, n) {
                    if let Err(e) = d.close(n) {
                        report.say(
                            serde_json::json!({"event": "not_closed", "proposal": proposal.0, "error": e.to_string()}),
                            || format!("the notification of card {proposal} could not be closed: {e}"),
                        );
                        continue;
                    }
                }
                report.say(
                    serde_json::json!({"event": "closed", "proposal": proposal.0, "why": why, "notification": n}),
                    || format!("card {proposal} taken back ({why})"),
                );
            }
            Body::Error(e) => return fail(&format!("the broker refused the watch: {}", e.message)),
            other => return fail(&format!("unexpected reply {:?}", other.kind())),
        }
    }
}
