//! One line on what a call will do, for its approval card and the audit log: the resolved
//! paths a file tool touches, the command, working directory and time a `run_command` gets,
//! and the host, port and addresses the net-helper resolved for a web call.

use crate::args::redact_url;
use ipc_schema::fs::{ChangePreview, ResolvedTarget, Seal};
use ipc_schema::net::CheckedTarget;
use ipc_schema::tier::ConfinementTier;
use ipc_schema::tool::{HttpMethod, RunCommand, ToolCall};
use policy::eval::shown;

/// The line for `call`: `paths` is the fs-helper's resolution of what it names (for
/// `run_command`, its working directory), `checked` the net-helper's check of a web call's URL,
/// `preview` the dry run of a write or an edit, `tier` the exec sandbox's confinement tier in
/// force (a command's line names it; `None` while the exec helper has not reported one; for a
/// server's tool, given only when the server is a stdio server, which runs in that sandbox).
pub fn line(
    call: &ToolCall,
    paths: &[ResolvedTarget],
    checked: Option<&CheckedTarget>,
    preview: Option<&ChangePreview>,
    tier: Option<ConfinementTier>,
) -> String {
    match (call, checked) {
        (_, Some(c)) => network(call, c),
        (ToolCall::RunCommand(a), None) => command(a, paths, tier),
        // A stdio server's tool runs in the exec sandbox (the broker passes a tier for those
        // only); a remote server's line stays as `files` words it.
        (ToolCall::Server(c), None) if tier.is_some() => format!(
            "call {} on the server {}, which runs in the exec sandbox ({})",
            c.tool,
            c.server,
            ipc_schema::tier::shown(tier)
        ),
        _ => files(call, paths, preview),
    }
}

/// The method as HTTP spells it.
pub fn method_word(m: HttpMethod) -> &'static str {
    match m {
        HttpMethod::Get => "GET",
        HttpMethod::Head => "HEAD",
        HttpMethod::Post => "POST",
        HttpMethod::Put => "PUT",
        HttpMethod::Patch => "PATCH",
        HttpMethod::Delete => "DELETE",
    }
}

/// A file tool (or, without a check, any other call): what it reads or changes.
pub fn files(call: &ToolCall, paths: &[ResolvedTarget], preview: Option<&ChangePreview>) -> String {
    let p = |i: usize| paths.get(i).map(|t| shown(&t.absolute)).unwrap_or_default();
    let size = |s: Option<Seal>| {
        s.map(|s| format!("{} bytes", s.len))
            .unwrap_or_else(|| "nothing".into())
    };
    match call {
        ToolCall::ReadFile(_) => format!("read {}", p(0)),
        ToolCall::ListDir(_) => format!("list {}", p(0)),
        ToolCall::SearchFiles(a) => format!("search names matching {:?} under {}", a.glob, p(0)),
        ToolCall::Grep(_) => format!("search contents under {}", p(0)),
        ToolCall::WriteFile(a) => match preview {
            Some(pv) if pv.current.is_some() => format!(
                "replace {} ({} -> {} bytes)",
                p(0),
                size(pv.current),
                a.content.len()
            ),
            _ => format!("create {} ({} bytes)", p(0), a.content.len()),
        },
        ToolCall::EditFile(_) => match preview {
            Some(pv) => format!(
                "edit {} ({} replacement(s); {} -> {} bytes)",
                p(0),
                pv.replacements,
                size(pv.current),
                pv.proposed.len
            ),
            None => format!("edit {}", p(0)),
        },
        ToolCall::DeletePath(a) => format!(
            "delete {}{}",
            p(0),
            if a.recursive {
                " and everything under it"
            } else {
                ""
            }
        ),
        ToolCall::MovePath(a) => format!(
            "move {} to {}{}",
            p(0),
            p(1),
            if a.overwrite {
                " (replacing what is there)"
            } else {
                ""
            }
        ),
        ToolCall::UndoChange(a) => format!("restore {} from checkpoint {}", p(0), a.checkpoint),
        ToolCall::FetchUrl(a) => format!("fetch {}", a.url),
        ToolCall::HttpRequest(a) => format!("{:?} {}", a.method, a.url),
        ToolCall::RunCommand(a) => format!("run {:?} in {}", a.argv, p(0)),
        ToolCall::Server(c) => format!("call {} on the server {}", c.tool, c.server),
        ToolCall::OpenSession { .. }
        | ToolCall::DescribeAgent(_)
        | ToolCall::Withdraw(_)
        | ToolCall::ListServerTools => String::new(),
    }
}

/// A `run_command`: argv, working directory (`paths[0]`), the sandbox's tier, network, time.
pub fn command(a: &RunCommand, paths: &[ResolvedTarget], tier: Option<ConfinementTier>) -> String {
    let cwd = paths
        .first()
        .map(|t| shown(&t.absolute))
        .unwrap_or_default();
    let time = match a.timeout_ms() {
        Ok(ms) => format!("at most {} s", ms / 1000),
        Err(e) => e,
    };
    let tier = ipc_schema::tier::shown(tier);
    format!(
        "run {:?} in {cwd}, in the exec sandbox ({tier}) with no network, {time}",
        a.argv
    )
}

/// A network call, naming what the net-helper resolved. The query is left out (it may hold a
/// token, and this line goes to the audit log); the card shows the exact arguments beside it.
pub fn network(call: &ToolCall, checked: &CheckedTarget) -> String {
    let url = redact_url(&checked.url);
    let addresses = checked
        .addresses
        .iter()
        .map(|a| a.to_string())
        .collect::<Vec<_>>()
        .join(", ");
    let what = match call {
        ToolCall::HttpRequest(a) => {
            let mut w = format!("{} {}", method_word(a.method), url);
            if !a.body.is_empty() {
                w.push_str(&format!(" with a {}-byte body", a.body.len()));
            }
            if let Some(c) = &a.credential {
                w.push_str(&format!(", adding stored credential {:?}", c.as_str()));
            }
            w
        }
        _ => format!("fetch {url}"),
    };
    format!(
        "{what} (host {}, port {}, addresses {addresses})",
        checked.host, checked.port
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_card_names_url_host_and_every_address() {
        let c = CheckedTarget {
            url: "https://example.org/a".into(),
            host: ipc_schema::host::Host::parse("example.org").unwrap(),
            port: 443,
            addresses: vec![
                "93.184.215.14".parse().unwrap(),
                "2606:2800::1".parse().unwrap(),
            ],
        };
        let call = ToolCall::FetchUrl(ipc_schema::tool::FetchUrl {
            url: "HTTPS://Example.org/a#frag".into(),
        });
        assert_eq!(
            network(&call, &c),
            "fetch https://example.org/a (host example.org, port 443, addresses 93.184.215.14, 2606:2800::1)"
        );
        let call = ToolCall::HttpRequest(ipc_schema::tool::HttpRequest {
            method: ipc_schema::tool::HttpMethod::Post,
            url: "https://example.org/a".into(),
            headers: vec![],
            body: b"{}".to_vec(),
            credential: Some(ipc_schema::secrets::CredentialName::parse("gh").unwrap()),
        });
        assert_eq!(
            network(&call, &c),
            "POST https://example.org/a with a 2-byte body, adding stored credential \"gh\" (host example.org, port 443, addresses 93.184.215.14, 2606:2800::1)"
        );
        let c = CheckedTarget {
            url: "https://example.org/a?token=abc".into(),
            ..c
        };
        let call = ToolCall::FetchUrl(ipc_schema::tool::FetchUrl {
            url: "https://example.org/a?token=abc".into(),
        });
        assert_eq!(
            network(&call, &c),
            "fetch https://example.org/a?<redacted 10 chars> (host example.org, port 443, addresses 93.184.215.14, 2606:2800::1)"
        );
    }
}
