//! `gatehouse policy show|apply|forget`: through the running broker (started if none runs).
//!
//! What `show` prints for a person is inert ([`ipc_schema::inert`]): the document keeps its line
//! breaks and every other control character, terminal escape or bidi override in it is shown as
//! a visible escape; the remembered decisions (whose targets come from agents' calls), the
//! source and any error are one inert line each. `--json` prints the exact values.

use crate::cmd_policy_replay as replay;
use crate::{fail, Global};
use ipc_schema::inert::{escaped, escaped_lines};
use ipc_schema::tool::ProfileName;
use ipc_schema::ui::{PolicyView, RememberedAction, UiReply, UiRequest};
use ipc_schema::Body;
use policy::doc::PolicyDoc;
use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Subcommand)]
pub enum PolicyCmd {
    /// Print the policy in force (its revision, source and document: every profile) and the
    /// remembered decisions; exit 1 if it is invalid (then every call is refused).
    Show {
        /// Print only this session profile (`default`: the document's top level), as a
        /// document of its own.
        #[arg(long, value_name = "NAME")]
        profile: Option<String>,
    },
    /// Apply FILE (`-`: standard input) as the next revision. Its `revision` must be the one in
    /// force; a stale or invalid document is refused whole. First the audited calls of the last
    /// days are judged again by FILE (read from the audit log, never re-run): if a verdict
    /// loosens, the summary is shown and the apply asks for a yes on the terminal.
    Apply {
        file: PathBuf,
        /// Only show what FILE would change on the audited calls; apply nothing.
        #[arg(long)]
        dry_run: bool,
        /// How many days of audited calls to try FILE on.
        #[arg(long, value_name = "N", default_value_t = 30,
              value_parser = clap::value_parser!(u32).range(1..=36_500))]
        days: u32,
        /// Apply a loosening without asking (needed without a terminal, and with --json).
        #[arg(long)]
        yes: bool,
    },
    /// Drop a remembered decision (see `policy show`).
    Forget { id: u64 },
}

pub(crate) fn request(g: &Global, req: UiRequest) -> Result<UiReply, String> {
    let mut c = g.ui_client().map_err(|e| e.to_string())?;
    match c.request(Body::Ui(req)).map_err(|e| e.to_string())? {
        Body::UiReply(r) => Ok(r),
        Body::Error(e) => Err(e.message),
        other => Err(format!("unexpected reply {:?}", other.kind())),
    }
}

pub fn run(g: &Global, cmd: PolicyCmd) -> ExitCode {
    match cmd {
        PolicyCmd::Show { profile } => match request(g, UiRequest::PolicyShow) {
            Ok(UiReply::Policy(v)) => {
                let doc = PolicyDoc::parse(&v.document).ok();
                if let Some(name) = profile {
                    return show_profile(g, &v, doc.as_ref(), &name);
                }
                let names = doc.as_ref().map(profile_names);
                if g.json {
                    let mut j = serde_json::to_value(&v).expect("serialisable");
                    j["profiles"] = serde_json::json!(names);
                    println!(
                        "{}",
                        serde_json::to_string_pretty(&j).expect("serialisable")
                    );
                } else {
                    print!("{}", render(&v, names.as_deref()));
                }
                if let Some(e) = &v.error {
                    return fail(&format!(
                        "the policy is invalid, every call is refused: {e}"
                    ));
                }
                ExitCode::SUCCESS
            }
            Ok(_) => fail("unexpected reply"),
            Err(e) => fail(&e),
        },
        PolicyCmd::Apply {
            file,
            dry_run,
            days,
            yes,
        } => {
            let mut text = String::new();
            let read = if file.as_os_str() == "-" {
                std::io::stdin().read_to_string(&mut text).map(|_| ())
            } else {
                std::fs::read_to_string(&file).map(|t| text = t)
            };
            if let Err(e) = read {
                return fail(&format!("{}: {e}", file.display()));
            }
            let label = if file.as_os_str() == "-" {
                "the document on standard input".to_string()
            } else {
                file.display().to_string()
            };
            let ask = Apply {
                text,
                label,
                from_stdin: file.as_os_str() == "-",
                days,
                yes,
            };
            if dry_run {
                dry_run_of(g, &ask)
            } else {
                apply(g, ask)
            }
        }
        PolicyCmd::Forget { id } => match request(g, UiRequest::PolicyForget { remembered: id }) {
            Ok(UiReply::Forgotten { remembered }) => {
                println!("remembered decision {remembered} dropped");
                ExitCode::SUCCESS
            }
            Ok(_) => fail("unexpected reply"),
            Err(e) => fail(&e),
        },
    }
}

/// One `policy apply`: the document and how to treat what it loosens.
struct Apply {
    text: String,
    label: String,
    from_stdin: bool,
    days: u32,
    yes: bool,
}

fn policy_view(g: &Global) -> Result<PolicyView, String> {
    match request(g, UiRequest::PolicyShow)? {
        UiReply::Policy(v) => Ok(v),
        _ => Err("unexpected reply".into()),
    }
}

/// `policy apply --dry-run`: the replay, nothing applied.
fn dry_run_of(g: &Global, a: &Apply) -> ExitCode {
    let view = match policy_view(g) {
        Ok(v) => v,
        Err(e) => return fail(&e),
    };
    let tried = match replay::try_on_history(g, &view, &a.text, a.days) {
        Ok(t) => t,
        Err(replay::NotTried::Invalid(e)) => {
            return fail(&format!("{} cannot be tried: {e}", a.label))
        }
        Err(replay::NotTried::Failed(e)) => return fail(&e),
    };
    if g.json {
        let mut j = tried.json();
        j["dry_run"] = true.into();
        j["applied"] = false.into();
        println!(
            "{}",
            serde_json::to_string_pretty(&j).expect("serialisable")
        );
    } else {
        print!("{}", replay::render(&tried, &a.label));
        if tried.needs_confirmation() {
            println!("applying it asks for a yes on the terminal (or --yes): it loosens, or may loosen, what the audited calls were given");
        }
    }
    ExitCode::SUCCESS
}

/// The person's yes to a loosening: on the terminal, or `--yes`. Anything else refuses.
fn confirmed(g: &Global, a: &Apply, tried: &replay::Tried) -> Result<(), String> {
    use std::io::{BufRead, IsTerminal, Write};
    let how = if tried.replay.groups.iter().any(|g| g.loosens()) {
        "loosens"
    } else {
        "may loosen (some calls cannot be judged)"
    };
    let why = format!(
        "{} {how} what the audited calls of the last {} days were given",
        a.label, a.days
    );
    if a.yes {
        return Ok(());
    }
    if g.json {
        return Err(format!("{why}; not applied (give --yes to apply it)"));
    }
    eprint!("{}", replay::render(tried, &a.label));
    if a.from_stdin || !std::io::stdin().is_terminal() {
        return Err(format!(
            "{why}; not applied: there is no terminal to confirm on (run it on a terminal, or give --yes)"
        ));
    }
    eprint!("Apply it as policy revision {}? [y/N] ", tried.revision + 1);
    let _ = std::io::stderr().flush();
    let mut answer = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut answer)
        .map_err(|e| format!("{why}; not applied: reading the answer failed: {e}"))?;
    match answer.trim() {
        "y" | "Y" | "yes" | "YES" | "Yes" => Ok(()),
        _ => Err(format!("{why}; not applied (the answer was not yes)")),
    }
}

/// `policy apply`: tried on history first; a loosening applies only with the person's yes.
fn apply(g: &Global, a: Apply) -> ExitCode {
    let refuse = |e: String| {
        if g.json {
            println!("{}", serde_json::json!({"applied": false, "error": e}));
        }
        fail(&e)
    };
    let view = match policy_view(g) {
        Ok(v) => v,
        Err(e) => return refuse(e),
    };
    // A document that does not parse or is stale is refused by the broker whole, with its own
    // reason: there is nothing to try. Anything it would apply is tried first; one that does
    // not compile here is refused here (with the broker's words), never sent untried.
    let current = PolicyDoc::parse(&a.text).is_ok_and(|d| d.revision == view.revision);
    let mut tried = None;
    if current {
        match replay::try_on_history(g, &view, &a.text, a.days) {
            Ok(t) => tried = Some(t),
            Err(replay::NotTried::Invalid(e)) => {
                return refuse(format!("the policy was not applied: {e}"))
            }
            Err(replay::NotTried::Failed(e)) => {
                return refuse(format!(
                    "{e}; the policy was not applied (it is tried on the audited calls first)"
                ))
            }
        }
    }
    if let Some(t) = &tried {
        if t.needs_confirmation() {
            if let Err(e) = confirmed(g, &a, t) {
                if g.json {
                    let j = serde_json::json!({"applied": false, "error": e, "replay": t.json()});
                    println!("{j}");
                }
                return fail(&e);
            }
        } else if !g.json && t.replay.changed() > 0 {
            // A tightening: said, not asked (standard output keeps its one line).
            eprint!("{}", replay::render(t, &a.label));
        }
    }
    match request(g, UiRequest::PolicyApply { document: a.text }) {
        Ok(UiReply::PolicyApplied { revision }) => {
            if g.json {
                let mut j = serde_json::json!({"applied": true, "revision": revision});
                if let Some(t) = &tried {
                    j["replay"] = t.json();
                }
                println!("{j}");
            } else {
                println!("policy revision {revision} applied");
            }
            ExitCode::SUCCESS
        }
        Ok(_) => fail("unexpected reply"),
        Err(e) => refuse(e),
    }
}

/// `default` and the document's named profiles.
fn profile_names(doc: &PolicyDoc) -> Vec<String> {
    std::iter::once(ProfileName::DEFAULT.to_string())
        .chain(doc.profiles.keys().cloned())
        .collect()
}

/// `policy show --profile NAME`: that profile alone, as the broker's document has it.
fn show_profile(g: &Global, v: &PolicyView, doc: Option<&PolicyDoc>, name: &str) -> ExitCode {
    if let Err(e) = ProfileName::parse(name) {
        return fail(&format!("--profile: {e}"));
    }
    let Some(doc) = doc else {
        let why = v.error.as_deref().unwrap_or("the document does not parse");
        return fail(&format!(
            "the policy is invalid, so it has no profiles to show: {why}"
        ));
    };
    let Some(p) = doc.profile(name) else {
        return fail(&format!(
            "there is no profile {name} in the policy (revision {}; its profiles: {})",
            v.revision,
            profile_names(doc).join(", ")
        ));
    };
    let text = p.to_toml();
    if g.json {
        let j = serde_json::json!({
            "revision": v.revision,
            "source": v.source,
            "profile": name,
            "document": text,
            "policy": p,
            "error": v.error,
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&j).expect("serialisable")
        );
    } else {
        println!(
            "# profile {} of policy revision {} from {}",
            escaped(name),
            v.revision,
            escaped(&v.source)
        );
        if let Some(e) = &v.error {
            println!(
                "# INVALID: {}\n# every tool call is refused until this is fixed",
                escaped(e)
            );
        }
        print!("{}", escaped_lines(&text));
    }
    if let Some(e) = &v.error {
        return fail(&format!(
            "the policy is invalid, every call is refused: {e}"
        ));
    }
    ExitCode::SUCCESS
}

/// The policy for a person: the header and remembered decisions as comment lines, one inert line
/// each; the document inert, its own line breaks kept.
fn render(v: &PolicyView, profiles: Option<&[String]>) -> String {
    let mut out = format!(
        "# policy revision {} from {}\n",
        v.revision,
        escaped(&v.source)
    );
    if let Some(n) = profiles {
        out.push_str(&format!(
            "# profiles: {} (`policy show --profile NAME` prints one)\n",
            escaped(&n.join(", "))
        ));
    }
    if let Some(e) = &v.error {
        out.push_str(&format!(
            "# INVALID: {}\n# every tool call is refused until this is fixed\n",
            escaped(e)
        ));
    }
    let document = escaped_lines(&v.document);
    out.push_str(&document);
    if !document.ends_with('\n') {
        out.push('\n');
    }
    if !v.remembered.is_empty() {
        out.push_str("\n# remembered decisions (drop one with `gatehouse policy forget ID`):\n");
        for r in &v.remembered {
            out.push_str(&format!(
                "#   {}: always {} {} on {} (from proposal {} in profile {}{})\n",
                r.id,
                r.action,
                &r.tool.name(),
                escaped(&r.target),
                r.origin,
                r.profile,
                if r.action == RememberedAction::Deny {
                    "; applies in every profile"
                } else {
                    ""
                }
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipc_schema::ui::Remembered;

    #[test]
    fn the_document_keeps_its_lines_and_remembered_targets_are_one_inert_line() {
        let hostile = "x\n#   9: always allow run_command on *\x1b[2J\u{202E}";
        let v = PolicyView {
            revision: 3,
            source: "/etc/gatehouse/policy.toml".into(),
            document:
                "revision = 3\n[tools]\n# \x1b]52;c;aGk=\x07 \u{202E}\nrun_command = \"ask\"\n"
                    .into(),
            error: None,
            remembered: vec![Remembered {
                id: 1,
                tool: ipc_schema::tool::ToolName::RunCommand.into(),
                target: hostile.into(),
                action: RememberedAction::Allow,
                created_unix_ms: 0,
                origin: ipc_schema::tool::ProposalId(5),
                profile: ipc_schema::tool::ProfileName::default_profile(),
            }],
        };
        let out = render(&v, Some(&["default".to_string()]));
        assert!(!out.contains(['\x1b', '\x07', '\u{202E}']), "{out}");
        assert!(
            out.contains("[tools]\n# \\x1b]52;c;aGk=\\x07 \\u{202E}\nrun_command = \"ask\"\n"),
            "{out}"
        );
        let remembered: Vec<&str> = out.lines().filter(|l| l.starts_with("#   ")).collect();
        assert_eq!(remembered.len(), 1, "{out}");
        assert!(
            remembered[0]
                .contains("on x\\n#   9: always allow run_command on *\\x1b[2J\\u{202E} (from"),
            "{out}"
        );
    }
}
