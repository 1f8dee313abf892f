//! One message to a remote MCP server over Streamable HTTP ([`McpPost`]): sent as an
//! `http_request` (src/http.rs: checked, resolved, judged, pinned, TLS-verified, the credential
//! only for its own host, the answer scrubbed), never redirected, and the answer framed into
//! messages: a JSON body is one, a `text/event-stream` body gives the `data` of each `message`
//! event. The JSON itself is read by the servers-helper, not here.

use crate::error::{refused, FetchError};
use crate::http;
use crate::NetContext;
use ipc_schema::net::{
    FetchLimits, HttpSend, McpAnswer, McpPost, McpSessionId, NetReply, MCP_REPLY_MAX,
};
use ipc_schema::tool::HttpMethod;

pub async fn serve(ctx: &NetContext, req: McpPost) -> NetReply {
    let cred = req.credential.clone();
    let posted = post(ctx, req).await;
    posted.map_or_else(|e| http::scrubbed(e, cred.as_ref()), NetReply::Mcp)
}

async fn post(ctx: &NetContext, req: McpPost) -> Result<McpAnswer, FetchError> {
    let mut headers = vec![("Accept", "application/json, text/event-stream".to_string())];
    if req.message.is_some() {
        headers.push(("Content-Type", "application/json".into()));
    }
    headers.extend(req.session.map(|s| ("Mcp-Session-Id", s.into())));
    headers.extend(req.protocol_version.map(|v| ("MCP-Protocol-Version", v)));
    let send = HttpSend {
        // Neither is ever redirected: the URL's host is the only one reached.
        method: match req.message {
            Some(_) => HttpMethod::Post,
            None => HttpMethod::Delete,
        },
        url: req.url,
        headers: headers.into_iter().map(|(k, v)| (k.into(), v)).collect(),
        body: req.message.unwrap_or_default(),
        credential: req.credential,
        limits: FetchLimits {
            max_body_bytes: MCP_REPLY_MAX,
            total_ms: req.total_ms,
            connect_ms: req.total_ms.min(FetchLimits::default().connect_ms),
            ..FetchLimits::default()
        },
        allowed_hosts: None,
    };
    let sent = http::send(ctx, send).await?;
    let session = sent
        .headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("mcp-session-id"))
        .map(|(_, v)| McpSessionId::try_from(v.clone()))
        .transpose()
        .map_err(|e| refused!(Invalid, "the server's {e}"))?;
    let body = &sent.body;
    let messages = match body.content_type.as_str() {
        _ if body.text.is_empty() => Vec::new(),
        "application/json" => vec![one_line(&body.text)],
        "text/event-stream" => events(&body.text),
        // An error page of a server that refused the request: its status says why.
        _ if !(200..300).contains(&body.status) => Vec::new(),
        other => {
            let why =
                format!("a remote MCP server answered with {other}, not JSON or an event stream");
            return Err(refused!(Content, "{why}"));
        }
    };
    Ok(McpAnswer {
        status: body.status,
        session,
        messages,
        redactions: sent.redactions,
    })
}

/// A message as one line: CR and LF can stand only between JSON tokens, where a space means the
/// same.
fn one_line(s: &str) -> String {
    s.trim().replace(['\r', '\n'], " ")
}

/// The `data` of each `message` event of a server-sent event stream (WHATWG's parsing rules:
/// lines end at CRLF, LF or CR; `data` lines join with LF; a blank line dispatches; comments,
/// `id` and `retry` are ignored; an event cut off by the end of the stream is dropped).
fn events(stream: &str) -> Vec<String> {
    let (mut out, mut data, mut kind) = (Vec::new(), None::<Vec<&str>>, "");
    for line in stream.split("\r\n").flat_map(|l| l.split(['\r', '\n'])) {
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line, ""),
        };
        match field {
            "" if line.is_empty() => {
                if let Some(d) = data.take().filter(|_| kind.is_empty() || kind == "message") {
                    out.push(one_line(&d.join("\n")));
                }
                kind = "";
            }
            "data" => data.get_or_insert_with(Vec::new).push(value),
            "event" => kind = value,
            _ => {}
        }
    }
    out.retain(|m| !m.is_empty());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_streams_give_the_data_of_each_message_event() {
        let s = ": keep-alive\r\nevent: message\r\nid: 1\r\ndata: {\"a\":\r\ndata: 1}\r\n\r\n\
                 event: ping\ndata: nope\n\ndata: {\"b\":2}\r\rdata: {\"cut\":true}";
        assert_eq!(events(s), vec!["{\"a\": 1}", "{\"b\":2}"]);
        assert!(events("").is_empty());
        assert_eq!(one_line(" {\"x\":\r\n[1,\n2]}\n"), "{\"x\":  [1, 2]}");
    }
}
