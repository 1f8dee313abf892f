//! `gatehouse fetch URL [--json] [--yes]`: one safe fetch through the broker, as a one-shot agent
//! session on the gateway socket, so the policy, the ledger and the audit log apply exactly as
//! for an agent's `fetch_url`. `--yes` answers this call's own proposal "allow once" (through the
//! console socket, as a human at `gatehouse approve` would).
//!
//! What is printed for a person is inert ([`ipc_schema::inert`]): the page's text keeps its line
//! breaks and tabs, and every other control character, terminal escape (ESC, C1), bidi override
//! and invisible format character is shown as a visible escape such as `\x1b` or `\u{202E}`,
//! whether stdout is a terminal or not (a pager or a later `cat` reads it too). Refusal reasons
//! and errors are one line each. `--json` gives the exact text (JSON escapes every control
//! character), for programs.
//!
//! Exit status: 0 fetched; 3 refused (policy, the human, or the net-helper's rules: URL, address,
//! redirect, content, TLS, limit); 4 failed on the network; 1 anything else.

use crate::Global;
use ipc_schema::codec::{read_frame, write_frame, MAX_FRAME};
use ipc_schema::inert::{escaped, escaped_lines};
use ipc_schema::tool::{Done, FetchUrl, ToolCall, ToolName, ToolReply, ToolResult, Waiting};
use ipc_schema::ui::{Choice, Decision, UiReply, UiRequest};
use ipc_schema::{Body, Envelope};
use std::io::{BufReader, Write};
#[cfg(unix)]
use std::os::unix::net::UnixStream;
use std::process::ExitCode;

pub const EXIT_REFUSED: u8 = 3;
pub const EXIT_FAILED: u8 = 4;
const EXIT_OTHER: u8 = 1;

#[derive(clap::Args, Debug)]
pub struct FetchArgs {
    /// The http or https URL to fetch.
    url: String,
    /// Answer "allow once" if the policy asks (one-shot use by the human at this terminal).
    #[arg(long)]
    yes: bool,
}

pub fn run(g: &Global, a: FetchArgs) -> ExitCode {
    let mut stream = match connect(g) {
        Ok(s) => s,
        Err(e) => return other(g, &e),
    };
    let call = Envelope::new(
        1,
        Body::ToolCall(ToolCall::FetchUrl(FetchUrl { url: a.url.clone() })),
    );
    if let Err(e) = write_frame(&mut stream, &call).and_then(|_| stream.flush().map_err(Into::into))
    {
        return other(g, &format!("cannot send the call: {e}"));
    }
    let mut rd = BufReader::new(stream);
    loop {
        let env = match read_frame(&mut rd, MAX_FRAME) {
            Ok(Some(env)) => env,
            Ok(None) => return other(g, "the broker closed the connection"),
            Err(e) => return other(g, &format!("broker connection: {e}")),
        };
        if env.id != 1 {
            continue;
        }
        let reply = match env.body {
            Body::ToolReply(r) => r,
            Body::Error(e) => return other(g, &e.message),
            b => return other(g, &format!("unexpected reply {:?}", b.kind())),
        };
        match reply {
            ToolReply::AwaitingApproval(w) if a.yes => {
                if let Err(e) = approve(g, &w) {
                    return other(g, &e);
                }
            }
            ToolReply::AwaitingApproval(w) => {
                eprintln!(
                    "gatehouse: waiting for a decision on proposal {} (gatehouse approve, or the console); no answer means deny",
                    w.proposal.0
                );
            }
            ToolReply::Session(_) | ToolReply::ServerTools(_) => {}
            ToolReply::Done(d) => return done(g, &d),
            ToolReply::Refused(r) => return outcome(g, EXIT_REFUSED, "refused", &r.message),
            ToolReply::Failed(f) => return outcome(g, EXIT_FAILED, "failed", &f.message),
        }
    }
}

/// Approves exactly the proposal this call is waiting on, and only if it is a fetch.
fn approve(g: &Global, w: &Waiting) -> Result<(), String> {
    let mut c = g.ui_client().map_err(|e| e.to_string())?;
    let pending = match c
        .request(Body::Ui(UiRequest::ListPending))
        .map_err(|e| e.to_string())?
    {
        Body::UiReply(UiReply::Pending(list)) => list,
        other => return Err(format!("unexpected reply {:?}", other.kind())),
    };
    let p = pending
        .into_iter()
        .find(|p| p.id == w.proposal)
        .ok_or_else(|| format!("proposal {} is no longer pending", w.proposal.0))?;
    if p.tool != ToolName::FetchUrl {
        return Err(format!("proposal {} is not this fetch", p.id.0));
    }
    eprintln!(
        "gatehouse: --yes: allowing proposal {} once ({})",
        p.id.0,
        escaped(&p.target)
    );
    let d = Decision {
        proposal: p.id,
        digest: p.digest,
        choice: Choice::AllowOnce,
    };
    match c
        .request(Body::Ui(UiRequest::Decide(d)))
        .map_err(|e| e.to_string())?
    {
        Body::UiReply(UiReply::Decided { .. }) => Ok(()),
        Body::Error(e) => Err(e.message),
        other => Err(format!("unexpected reply {:?}", other.kind())),
    }
}

/// A completed call: the page's wrapped text, exactly as the agent would get it.
fn done(g: &Global, d: &Done) -> ExitCode {
    let ToolResult::Fetched(f) = &d.result else {
        let kind = format!("{:?}", d.result);
        let kind = kind.split('(').next().unwrap_or("?").to_string();
        return other(
            g,
            &format!(
                "the broker answered fetch_url with a {kind} result, which is not a fetched page"
            ),
        );
    };
    if g.json {
        println!(
            "{}",
            serde_json::json!({
                "url": f.final_url,
                "redirects": f.redirects,
                "address": f.address.to_string(),
                "status": f.status,
                "content_type": f.content_type,
                "body_bytes": f.body_bytes,
                "text": f.text,
            })
        );
    } else {
        let text = page_text(&f.text);
        let mut out = std::io::stdout().lock();
        let ended = out.write_all(text.as_bytes()).and_then(|_| {
            if text.ends_with('\n') {
                Ok(())
            } else {
                out.write_all(b"\n")
            }
        });
        if let Err(e) = ended.and_then(|_| out.flush()) {
            eprintln!("gatehouse: cannot write the page: {e}");
            return ExitCode::from(EXIT_OTHER);
        }
    }
    ExitCode::SUCCESS
}

/// The fetched page for a person: multi-line, inert.
fn page_text(text: &str) -> String {
    escaped_lines(text)
}

/// A refusal or failure reason (which can quote the URL, a redirect target or a server's words)
/// as one inert line.
fn reason_line(word: &str, msg: &str) -> String {
    format!("{word}: {}", escaped(msg))
}

fn outcome(g: &Global, code: u8, word: &str, msg: &str) -> ExitCode {
    if g.json {
        // One line in the JSON text too; the value itself is exact (JSON escapes controls).
        println!("{}", serde_json::json!({ word: msg }));
    } else {
        eprintln!("{}", reason_line(word, msg));
    }
    ExitCode::from(code)
}

fn other(g: &Global, msg: &str) -> ExitCode {
    if g.json {
        println!("{}", serde_json::json!({ "error": msg }));
    }
    eprintln!("gatehouse: {}", escaped(msg));
    ExitCode::from(EXIT_OTHER)
}

/// A connection on the gateway socket, starting the broker if none answers.
#[cfg(unix)]
fn connect(g: &Global) -> Result<UnixStream, String> {
    let path = g.dirs.gateway_socket();
    if let Ok(s) = UnixStream::connect(&path) {
        return Ok(s);
    }
    gatehouse_client::Client::connect_or_start(g.data_dir.as_deref(), &g.dirs, &path, &[])
        .map_err(|e| e.to_string())?;
    UnixStream::connect(&path)
        .map_err(|e| format!("cannot reach the broker at {}: {e}", path.display()))
}

/// The same on Windows: the broker's gateway pipe (its server checked to be this user's).
#[cfg(windows)]
fn connect(g: &Global) -> Result<std::fs::File, String> {
    let path = g.dirs.gateway_socket();
    if gatehouse_client::Client::connect(&path).is_err() {
        gatehouse_client::Client::connect_or_start(g.data_dir.as_deref(), &g.dirs, &path, &[])
            .map_err(|e| e.to_string())?;
    }
    let name = path.to_str().ok_or("the gateway pipe's name is not text")?;
    sandbox::endpoint::connect(name)
        .map(|(pipe, _server)| pipe)
        .map_err(|e| format!("cannot reach the broker at {name}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_keeps_its_lines_and_nothing_else_reaches_the_terminal() {
        let page = "a\tb\r\n\x1b[2J\x1b]52;c;aGk=\x07\nsafe\rFAKE\n\u{9b}1m\u{202E}z";
        assert_eq!(
            page_text(page),
            "a\tb\r\n\\x1b[2J\\x1b]52;c;aGk=\\x07\nsafe\\rFAKE\n\\u{009B}1m\\u{202E}z"
        );
    }

    #[test]
    fn a_reason_is_one_inert_line() {
        let line = reason_line(
            "refused",
            "redirect to http://x/\n    42 12:00:00Z decision\x1b[2J\u{202E}",
        );
        assert_eq!(
            line,
            "refused: redirect to http://x/\\n    42 12:00:00Z decision\\x1b[2J\\u{202E}"
        );
    }
}
