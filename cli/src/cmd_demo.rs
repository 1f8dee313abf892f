//! `gatehouse demo [--interactive] [--json]`: a scripted agent session that shows every path a
//! call can take, on a scratch project, with no setup.
//!
//! Everything is real and private: a temporary directory holds a HOME (with a planted
//! `.bashrc` and SSH key), a project in it, and a private gatehouse instance (`--data-dir`) on
//! the embedded defaults. The agent is a real `gatehouse mcp` process spoken to in MCP JSON-RPC;
//! Ask calls are decided on the ui socket by a scripted approver (said on screen) or, with
//! `--interactive`, by the person in the console. Each outcome is what the broker answered,
//! checked against what should happen (and against the files on disk); a step whose tool is
//! not in this build says so and counts as not shown. At the end the broker is stopped and
//! `verify-audit` checks the log.

mod agent;
mod approver;
mod instance;
mod narrate;
mod report;
mod scratch;
mod script;
mod session;

use crate::Global;
use agent::Agent;
use approver::Approver;
use gatehouse_client::Dirs;
use instance::{forget_audit_key, verify_audit, Broker};
use ipc_schema::Envelope;
use narrate::Narrator;
use report::Report;
use scratch::Scratch;
use script::Script;
use serde_json::Value;
use session::Session;
use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::mpsc;
use std::time::{Duration, Instant};

#[derive(clap::Args)]
pub struct DemoArgs {
    /// You decide the agent's edit in the console (needs a terminal); without it a scripted
    /// approver decides every card and says so.
    #[arg(long)]
    interactive: bool,
    /// Keep the scratch directory (project, HOME, audit log and its key) afterwards.
    #[arg(long)]
    keep: bool,
    /// Run the scratch instance (its broker, helpers, the agent's front and the audit check)
    /// with less than their profiles need where this system lacks a mechanism, each gap named;
    /// without it they refuse to start.
    #[arg(long)]
    allow_degraded: bool,
}

/// What the demo's threads report.
pub enum Ev {
    Mcp(Value),
    McpClosed(String),
    Ui(Box<Envelope>),
    UiClosed(String),
}

/// How long one call may take before the demo gives up on it.
const CALL_WAIT: Duration = Duration::from_secs(90);

fn fail(msg: &str) -> ExitCode {
    eprintln!("gatehouse demo: {}", ipc_schema::inert::escaped(msg));
    ExitCode::from(crate::EXIT_FAILURE)
}

pub fn run(g: &Global, a: DemoArgs) -> ExitCode {
    let started = Instant::now();
    if g.data_dir.is_some() {
        eprintln!("gatehouse demo: --data-dir is not used: the demo always runs on a private scratch instance of its own");
        return ExitCode::from(crate::EXIT_USAGE);
    }
    if a.interactive && (!std::io::stdin().is_terminal() || !std::io::stdout().is_terminal()) {
        return fail("--interactive opens the console: run it in a terminal");
    }
    if a.interactive && g.json {
        eprintln!("gatehouse demo: --interactive and --json do not go together (the console needs the terminal)");
        return ExitCode::from(crate::EXIT_USAGE);
    }
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => return fail(&format!("cannot find this binary: {e}")),
    };
    let out = Narrator {
        on: !g.json,
        color: !g.json && std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none(),
    };
    let s = match Scratch::create(a.keep) {
        Ok(s) => s,
        Err(e) => return fail(&e),
    };
    out.line(&out.bold("gatehouse demo: a scripted agent session on a scratch project"));
    out.line(&out.dim(&format!(
        "  scratch     {} (a HOME, a project in it, and a private gatehouse instance)",
        s.root.display()
    )));
    out.line(&out.dim(&format!(
        "  project     {} (the directory the default profile grants)",
        s.project.display()
    )));

    // The audit key is kept by the secrets-helper; a store that cannot hold it refuses the
    // start with the reason (there is no weaker fallback to retry with).
    let degraded: &[&str] = match a.allow_degraded {
        true => &["--allow-degraded"],
        false => &[],
    };
    let mut broker = match Broker::start(&exe, &s, degraded) {
        Ok(b) => b,
        Err(e) => return fail(&e),
    };
    let dirs = Dirs::under(&s.data);
    // Windows: commands run in the restricted-token tier only if the policy chooses it (it
    // confines writes, not reads); the scratch policy does, as a Windows user's must.
    #[cfg(windows)]
    {
        if let Err(e) = choose_restricted_token_tier(&dirs) {
            return fail(&e);
        }
        out.line(&out.dim(
            "  commands    the scratch policy chooses the restricted-token tier (require_namespaces = false): Windows confines a command's writes, not its reads",
        ));
    }
    let approver_note = if a.interactive {
        "you decide the edit in the console; the other cards are decided by a scripted approver"
    } else {
        "a scripted approver decides every card on the ui channel, as a person would in the console"
    };
    out.line(&out.dim(&format!("  approvals   {approver_note}")));
    if a.allow_degraded {
        out.line(&out.yellow(
            "  degraded    --allow-degraded: each process runs without what this system lacks, and names it (the broker's log, a command's DEGRADED, the audit check's stderr)",
        ));
    }
    out.line("");

    let (tx, rx) = mpsc::channel();
    let approver = match Approver::connect(&dirs.ui_socket(), tx.clone()) {
        Ok(a) => a,
        Err(e) => return fail(&e),
    };
    let mut agent = match Agent::start(
        &exe,
        &s.data,
        (&s.project, &s.home),
        degraded,
        &s.root.join("mcp.log"),
        tx,
    ) {
        Ok(a) => a,
        Err(e) => return fail(&e),
    };
    let global = Global {
        dirs: dirs.clone(),
        data_dir: Some(s.data.clone()),
        json: false,
    };
    // The handshake first; a gateway that does not answer it ends the demo.
    let hello = match agent.initialize() {
        Ok(id) => id,
        Err(e) => return fail(&e),
    };
    let mut session = Session {
        agent,
        approver,
        rx,
        out,
        interactive: a.interactive,
        global,
        decisions: Default::default(),
        check_pending: None,
        asked: Vec::new(),
        person_decides: false,
        home: s.home.display().to_string(),
        backlog: Default::default(),
    };
    match session.wait_for(hello) {
        Ok(v) if v.get("result").is_some() => {}
        Ok(v) => return fail(&format!("the gateway refused the handshake: {v}")),
        Err(e) => {
            let log = std::fs::read_to_string(s.root.join("mcp.log")).unwrap_or_default();
            return fail(&format!(
                "the gateway did not answer the handshake: {e}; gatehouse mcp said: {}",
                log.trim()
            ));
        }
    }
    if let Err(e) = session.agent.initialized() {
        return fail(&e);
    }

    let mut script = Script {
        s: &s,
        session,
        steps: Vec::new(),
        degraded: a.allow_degraded,
    };
    script.run();
    let Script { steps, session, .. } = script;
    let out = Narrator {
        on: session.out.on,
        color: session.out.color,
    };
    session.agent.finish();
    drop(session.approver);
    broker.stop();

    let n = steps.len() + 1;
    out.line(&format!(
        "{} verify-audit on the session's log",
        out.bold(&format!("{n:>2}."))
    ));
    let audit = verify_audit(&exe, &s, degraded);
    let audit_ok =
        audit.intact && audit.entries > 0 && audit.kinds.get("decision").copied().unwrap_or(0) > 0;
    let kinds: Vec<String> = audit
        .kinds
        .iter()
        .map(|(k, v)| format!("{v} {k}"))
        .collect();
    out.line(&format!(
        "   {} {}  {}",
        if audit_ok {
            out.green("✓")
        } else {
            out.red("✗")
        },
        if audit.intact {
            out.green(&audit.message)
        } else {
            out.red(&audit.message)
        },
        out.dim(&kinds.join(", "))
    ));

    let mut not_as_expected: Vec<&'static str> =
        steps.iter().filter(|s| !s.ok).map(|s| s.name).collect();
    if !audit_ok {
        not_as_expected.push("verify-audit");
    }
    let ok = not_as_expected.is_empty();
    let elapsed = started.elapsed();
    out.line("");
    if ok {
        out.line(&out.green(&format!(
            "all {} outcomes as expected ({:.1} s)",
            steps.len() + 1,
            elapsed.as_secs_f64()
        )));
    } else {
        out.line(&out.red(&format!(
            "not as expected: {} ({:.1} s)",
            not_as_expected.join(", "),
            elapsed.as_secs_f64()
        )));
    }
    if a.keep {
        out.line(&out.dim(&format!(
            "kept: {} (gatehouse --data-dir {} audit tail -n 50)",
            s.root.display(),
            s.data.display()
        )));
    } else {
        forget_audit_key(&s);
    }
    if g.json {
        let report = Report {
            ok,
            interactive: a.interactive,
            scratch: s.root.display().to_string(),
            kept: a.keep,
            elapsed_ms: elapsed.as_millis() as u64,
            steps,
            audit,
            not_as_expected,
        };
        println!(
            "{}",
            serde_json::to_string_pretty(&report).expect("serialisable")
        );
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(crate::EXIT_FAILURE)
    }
}

/// The scratch policy on Windows: the default profile in force (the project granted), with
/// commands in the restricted-token tier (`require_namespaces = false`), applied on the ui
/// channel as `gatehouse policy apply` applies a revision.
#[cfg(windows)]
fn choose_restricted_token_tier(dirs: &Dirs) -> Result<(), String> {
    use ipc_schema::ui::{UiReply, UiRequest};
    use ipc_schema::Body;
    let mut c = gatehouse_client::Client::connect(&dirs.ui_socket()).map_err(|e| e.to_string())?;
    let mut doc = match c.request(Body::Ui(UiRequest::PolicyShow)) {
        Ok(Body::UiReply(UiReply::Policy(v))) => policy::doc::PolicyDoc::parse(&v.document)?,
        other => return Err(format!("the scratch policy could not be read: {other:?}")),
    };
    doc.require_namespaces = Some(false);
    let document = doc.to_toml();
    match c.request(Body::Ui(UiRequest::PolicyApply { document })) {
        Ok(Body::UiReply(UiReply::PolicyApplied { .. })) => Ok(()),
        other => Err(format!("the scratch policy was not applied: {other:?}")),
    }
}
