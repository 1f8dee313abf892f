//! `gatehouse approve`: a console without the console, on the ui socket. Lists the proposals
//! waiting for a decision and decides one. Tests use it as the ui peer.

use crate::cmd_audit::inert;
use crate::{fail, Global, EXIT_FAILURE};
use ipc_schema::tool::ProposalId;
use ipc_schema::ui::{Choice, Decision, Proposal, ProposalDigest, UiReply, UiRequest};
use ipc_schema::Body;
use std::process::ExitCode;
use std::time::{Duration, Instant};

#[derive(clap::Args)]
pub struct ApproveArgs {
    /// The proposal to decide (without it: list the pending proposals).
    id: Option<u64>,
    /// allow-once, allow-session, always-allow, deny or always-deny.
    choice: Option<String>,
    /// The digest shown with the proposal (hex). Without it, the proposal is fetched, printed,
    /// and decided with the digest the broker holds now.
    #[arg(long)]
    digest: Option<String>,
    /// When listing, wait up to this many seconds for at least one proposal.
    #[arg(long, value_name = "SECS")]
    wait: Option<u64>,
}

fn parse_choice(s: &str) -> Option<Choice> {
    Some(match s {
        "allow-once" | "allow" => Choice::AllowOnce,
        "allow-session" => Choice::AllowSession,
        "always-allow" => Choice::AlwaysAllow,
        "deny" => Choice::Deny,
        "always-deny" => Choice::AlwaysDeny,
        _ => return None,
    })
}

fn render(p: &Proposal) -> String {
    let now = crate::store::now_ms() as u64;
    let mut s = format!(
        "proposal {} [{}] {} on {}\n  effect:    {}\n  rule:      {}\n  arguments: {}\n",
        p.id.0,
        p.session.0,
        p.tool,
        inert(&p.target),
        inert(&p.effect),
        inert(&p.rule),
        inert(&p.arguments),
    );
    let o = &p.outside_text;
    if !o.matches.is_empty() || o.matches_not_listed > 0 || o.sources_forgotten > 0 {
        s.push_str("  from outside text this session read:\n");
        for m in &o.matches {
            let from = match o.sources.get(m.source as usize) {
                Some(src) => format!(
                    "from {} {} (call {} of the session{})",
                    src.tool.as_str(),
                    src.url,
                    src.call,
                    if src.partial {
                        "; only its first part is remembered"
                    } else {
                        ""
                    }
                ),
                None => "from a source the broker did not name".into(),
            };
            s.push_str(&format!(
                "    {}: {} {}\n",
                inert(&m.argument),
                crate::provenance::part_text(&m.part),
                inert(&from)
            ));
        }
        if o.matches_not_listed > 0 {
            s.push_str(&format!(
                "    and {} more matches not listed\n",
                o.matches_not_listed
            ));
        }
        if o.sources_forgotten > 0 {
            s.push_str(&format!(
                "    {} earlier sources were forgotten to bound memory: text from them is not recognised\n",
                o.sources_forgotten
            ));
        }
    }
    if let Some(d) = &p.diff {
        s.push_str("  diff:\n");
        for line in d.lines() {
            s.push_str(&format!("    {}\n", inert(line)));
        }
    }
    s.push_str(&format!(
        "  digest:    {}\n  expires in {} s\n",
        hex::encode(p.digest.0),
        p.expires_unix_ms.saturating_sub(now) / 1000
    ));
    s
}

fn pending(c: &mut crate::client::Client) -> Result<Vec<Proposal>, String> {
    match c
        .request(Body::Ui(UiRequest::ListPending))
        .map_err(|e| e.to_string())?
    {
        Body::UiReply(UiReply::Pending(p)) => Ok(p),
        Body::Error(e) => Err(e.message),
        other => Err(format!("unexpected reply {:?}", other.kind())),
    }
}

pub fn run(g: &Global, a: ApproveArgs) -> ExitCode {
    let mut c = match g.ui_client() {
        Ok(c) => c,
        Err(e) => return fail(&e.to_string()),
    };
    let Some(id) = a.id else {
        let deadline = Instant::now() + Duration::from_secs(a.wait.unwrap_or(0));
        let list = loop {
            match pending(&mut c) {
                Ok(l) if !l.is_empty() || Instant::now() >= deadline => break l,
                Ok(_) => std::thread::sleep(Duration::from_millis(50)),
                Err(e) => return fail(&e),
            }
        };
        if g.json {
            println!(
                "{}",
                serde_json::to_string_pretty(&list).expect("serialisable")
            );
        } else if list.is_empty() {
            println!("no proposals are waiting");
        } else {
            for p in &list {
                print!("{}", render(p));
            }
        }
        return ExitCode::SUCCESS;
    };
    let Some(choice) = a.choice.as_deref().and_then(parse_choice) else {
        eprintln!("gatehouse: give a choice: allow-once, allow-session, always-allow, deny or always-deny");
        return ExitCode::from(crate::EXIT_USAGE);
    };
    let digest = match &a.digest {
        Some(h) => match hex::decode(h)
            .ok()
            .and_then(|v| <[u8; 32]>::try_from(v).ok())
        {
            Some(d) => ProposalDigest(d),
            None => return fail("--digest must be 64 hex digits"),
        },
        None => match pending(&mut c) {
            Ok(list) => match list.into_iter().find(|p| p.id.0 == id) {
                Some(p) => {
                    if !g.json {
                        print!("{}", render(&p));
                    }
                    p.digest
                }
                // Not pending: let the broker say why (decided, expired, unknown).
                None => ProposalDigest([0; 32]),
            },
            Err(e) => return fail(&e),
        },
    };
    let d = Decision {
        proposal: ProposalId(id),
        digest,
        choice,
    };
    match c.request(Body::Ui(UiRequest::Decide(d))) {
        Ok(Body::UiReply(UiReply::Decided { proposal, choice })) => {
            if g.json {
                println!(
                    "{}",
                    serde_json::json!({"proposal": proposal.0, "decided": choice.as_str()})
                );
            } else {
                println!("proposal {}: {}", proposal.0, choice.as_str());
            }
            ExitCode::SUCCESS
        }
        Ok(Body::Error(e)) => {
            if g.json {
                println!(
                    "{}",
                    serde_json::json!({"proposal": id, "refused": e.message})
                );
            }
            eprintln!("gatehouse: {}", e.message);
            ExitCode::from(EXIT_FAILURE)
        }
        Ok(other) => fail(&format!("unexpected reply {:?}", other.kind())),
        Err(e) => fail(&e.to_string()),
    }
}
