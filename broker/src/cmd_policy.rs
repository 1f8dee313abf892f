//! `gatehouse policy show|apply|forget`: through the running broker (started if none runs).

use crate::policy::doc::PolicyDoc;
use crate::{fail, Global, EXIT_FAILURE};
use ipc_schema::tool::ProfileName;
use ipc_schema::ui::{PolicyView, UiReply, UiRequest};
use ipc_schema::Body;
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
    /// force; a stale or invalid document is refused whole.
    Apply { file: PathBuf },
    /// Drop a remembered decision (see `policy show`).
    Forget { id: u64 },
}

fn request(g: &Global, req: UiRequest) -> Result<UiReply, String> {
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
                    eprintln!("gatehouse: the policy is invalid, every call is refused: {e}");
                    return ExitCode::from(EXIT_FAILURE);
                }
                ExitCode::SUCCESS
            }
            Ok(_) => fail("unexpected reply"),
            Err(e) => fail(&e),
        },
        PolicyCmd::Apply { file } => {
            let mut text = String::new();
            let read = if file.as_os_str() == "-" {
                std::io::stdin().read_to_string(&mut text).map(|_| ())
            } else {
                std::fs::read_to_string(&file).map(|t| text = t)
            };
            if let Err(e) = read {
                return fail(&format!("{}: {e}", file.display()));
            }
            match request(g, UiRequest::PolicyApply { document: text }) {
                Ok(UiReply::PolicyApplied { revision }) => {
                    if g.json {
                        println!(
                            "{}",
                            serde_json::json!({"applied": true, "revision": revision})
                        );
                    } else {
                        println!("policy revision {revision} applied");
                    }
                    ExitCode::SUCCESS
                }
                Ok(_) => fail("unexpected reply"),
                Err(e) => {
                    if g.json {
                        println!("{}", serde_json::json!({"applied": false, "error": e}));
                    }
                    fail(&e)
                }
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
            "# profile {name} of policy revision {} from {}",
            v.revision, v.source
        );
        if let Some(e) = &v.error {
            println!("# INVALID: {e}\n# every tool call is refused until this is fixed");
        }
        print!("{text}");
    }
    if let Some(e) = &v.error {
        eprintln!("gatehouse: the policy is invalid, every call is refused: {e}");
        return ExitCode::from(EXIT_FAILURE);
    }
    ExitCode::SUCCESS
}

fn render(v: &PolicyView, profiles: Option<&[String]>) -> String {
    let mut out = format!("# policy revision {} from {}\n", v.revision, v.source);
    if let Some(n) = profiles {
        out.push_str(&format!(
            "# profiles: {} (`policy show --profile NAME` prints one)\n",
            n.join(", ")
        ));
    }
    if let Some(e) = &v.error {
        out.push_str(&format!(
            "# INVALID: {e}\n# every tool call is refused until this is fixed\n"
        ));
    }
    out.push_str(&v.document);
    if !v.document.ends_with('\n') {
        out.push('\n');
    }
    if !v.remembered.is_empty() {
        out.push_str("\n# remembered decisions (drop one with `gatehouse policy forget ID`):\n");
        for r in &v.remembered {
            out.push_str(&format!(
                "#   {}: always {} {} on {} (from proposal {} in profile {}{})\n",
                r.id,
                r.action,
                r.tool,
                r.target,
                r.origin,
                r.profile,
                if r.action == "deny" {
                    "; applies in every profile"
                } else {
                    ""
                }
            ));
        }
    }
    out
}
