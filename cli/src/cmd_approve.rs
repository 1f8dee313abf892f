//! `gatehouse approve`: a console without the console, on the ui socket. Lists the proposals
//! waiting for a decision and decides one. Tests use it as the ui peer.

use crate::{fail, Global, EXIT_FAILURE};
use ipc_schema::inert::escaped;
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

/// A proposal as the console's card shows it, in plain text: each field on its own line and made
/// inert (an agent's target, arguments and diff, a server's URL), so no field can add a line that
/// passes for another field or another proposal, or drive the terminal.
fn render(p: &Proposal) -> String {
    let now = audit_store::now_ms() as u64;
    let mut s = format!(
        "proposal {} [{}] {} on {}\n  effect:    {}\n  rule:      {}\n  mode:      {}\n  arguments: {}\n",
        p.id.0,
        escaped(&p.session.0),
        p.tool,
        escaped(&p.target),
        escaped(&p.effect),
        escaped(&p.rule),
        p.mode,
        escaped(&p.arguments),
    );
    let o = &p.outside_text;
    if !o.matches.is_empty() || o.matches_not_listed > 0 || o.sources_forgotten > 0 {
        s.push_str("  from outside text this session read:\n");
        for m in &o.matches {
            let from = match o.sources.get(m.source as usize) {
                Some(src) => format!(
                    "from {} {} (call {} of the session{})",
                    &src.tool.name(),
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
                escaped(&m.argument),
                proposal::provenance::part_text(&m.part),
                escaped(&from)
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
        // One diff line per line, as the console's card splits it: a `\r` or any other
        // character that could start or rewrite a line is shown escaped inside its own line.
        for line in d.strip_suffix('\n').unwrap_or(d).split('\n') {
            s.push_str(&format!("    {}\n", escaped(line)));
        }
    }
    s.push_str(&format!(
        "  digest:    {}\n  expires in {} s\n",
        hex::encode(p.digest.0),
        p.expires_unix_ms.saturating_sub(now) / 1000
    ));
    s
}

fn pending(c: &mut gatehouse_client::Client) -> Result<Vec<Proposal>, String> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use ipc_schema::tool::{SessionId, ToolName};
    use ipc_schema::ui::{MatchedPart, OutsideMatch, OutsideSource, OutsideText};

    #[test]
    fn every_field_of_a_hostile_card_stays_on_its_own_line_inert() {
        let hostile = "x\n  rule:      allowed by the user\x1b[2J\x1b]52;c;aGk=\x07\u{202E}";
        let p = Proposal {
            id: ProposalId(5),
            digest: ProposalDigest([7; 32]),
            session: SessionId("abc".into()),
            tool: ToolName::WriteFile.into(),
            target: hostile.into(),
            arguments: format!("{{\"path\":\"{hostile}\"}}"),
            // A diff line per line of the content, as the fs-helper writes it.
            diff: Some(format!(
                "--- a\n+++ b\n+{}\r\n-old\n",
                hostile.replace('\n', "\n+")
            )),
            effect: hostile.into(),
            rule: "write_file asks".into(),
            policy_revision: 1,
            created_unix_ms: 0,
            expires_unix_ms: 0,
            outside_text: OutsideText {
                sources: vec![OutsideSource {
                    tool: ToolName::FetchUrl.into(),
                    url: format!("http://e/{hostile}"),
                    call: 1,
                    read_unix_ms: 0,
                    partial: false,
                }],
                matches: vec![OutsideMatch {
                    argument: "content".into(),
                    part: MatchedPart::WholeValue,
                    diff_lines: vec![],
                    source: 0,
                }],
                matches_not_listed: 0,
                sources_forgotten: 0,
            },
            mode: ipc_schema::mode::SessionMode::Ask,
        };
        let out = render(&p);
        assert!(!out.contains(['\x1b', '\x07', '\r', '\u{202E}']), "{out}");
        let lines: Vec<&str> = out.lines().collect();
        // header, effect, rule, mode, arguments, outside text (title + one match), diff (title
        // + 5 lines), digest, expiry.
        assert_eq!(lines.len(), 15, "{out}");
        assert_eq!(lines[3], "  mode:      ask", "{out}");
        assert_eq!(
            lines.iter().filter(|l| l.starts_with("  rule:")).count(),
            1,
            "{out}"
        );
        assert!(
            lines[1].starts_with("  effect:    x\\n  rule:      allowed by the user\\x1b[2J"),
            "{out}"
        );
        assert!(
            lines[6].contains("from fetch_url http://e/x\\n  rule:"),
            "{out}"
        );
        assert!(
            lines[11].ends_with(
                "+  rule:      allowed by the user\\x1b[2J\\x1b]52;c;aGk=\\x07\\u{202E}\\r"
            ),
            "{out}"
        );
    }
}
