//! A remote MCP server's connection (Streamable HTTP): the servers-helper gets one end of a
//! socket pair (on Windows of a duplex pipe, `sandbox::windows::channel_pair`) and speaks to it
//! exactly as to a stdio server; this relay reads each message it writes and has the
//! net-helper POST it ([`NetRequest::Mcp`]: the same address table, pinned
//! connection and TLS as every fetch, the credential made by the secrets-helper for the URL's
//! host alone, per message, never kept here). What the server answers comes back already framed
//! into one-line messages, which the relay writes to the pair for the servers-helper to parse.
//! The relay reads no JSON.
//!
//! Any answer but a 2xx (a 404 for an expired session included), a refusal by the net-helper,
//! or a message that is not one line ends the connection: the servers-helper sees its end close,
//! fails what was in flight, and the broker starts the server afresh on its next use (a new
//! handshake, a new session). When the connection ends the session is ended with a DELETE.

use super::http::attach;
use crate::helpers::Passed;
use crate::Ctx;
use ipc_schema::net::McpSessionId;
use ipc_schema::net::{McpPost, NetReply, NetRequest, FETCH_TOTAL_MS_CEILING};
use ipc_schema::servers::ServerName;
use ipc_schema::servers::MESSAGE_MAX;
use ipc_schema::tool::SessionId;
use ipc_schema::Body;
use policy::servers::RemoteServer;
use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};

/// Messages in flight to one server at once; the next waits.
const IN_FLIGHT: usize = 16;

/// What the relay and the tool path share.
#[derive(Default)]
pub struct Link {
    /// `MCP-Protocol-Version`, set once the servers-helper reports the handshake.
    pub version: RefCell<Option<String>>,
    session: RefCell<Option<McpSessionId>>,
}

/// Opens the pair and starts the relay; the returned end goes to the servers-helper. `gone`
/// gets why the connection ended, when it is the relay that ends it.
pub fn open(
    ctx: &Rc<Ctx>,
    sid: &SessionId,
    name: &ServerName,
    r: &RemoteServer,
    call_timeout: Duration,
    gone: Rc<RefCell<Option<String>>>,
) -> Result<(Passed, Rc<Link>), String> {
    let (rd, wr, theirs) = pair().map_err(|e| format!("the server's connection: {e}"))?;
    let link = Rc::new(Link::default());
    // A call may take its whole timeout; the exchange gets a little more, within the ceiling.
    let total_ms = (call_timeout + Duration::from_secs(10))
        .as_millis()
        .min(FETCH_TOTAL_MS_CEILING as u128) as u32;
    let (ctx, sid, name, r, l) = (
        ctx.clone(),
        sid.clone(),
        name.clone(),
        r.clone(),
        link.clone(),
    );
    tokio::task::spawn_local(async move {
        relay(ctx, rd, wr, name.clone(), r, total_ms, l, gone.clone()).await;
        let why = gone.borrow().clone().unwrap_or_else(|| "detached".into());
        super::servers::row(&sid, &name, "ended", why, None);
    });
    Ok((theirs, link))
}

/// The relay's halves of a connected pair, and the end for the servers-helper: a socket pair,
/// which reaches no one.
#[cfg(unix)]
pub(crate) fn pair() -> std::io::Result<(
    tokio::net::unix::OwnedReadHalf,
    tokio::net::unix::OwnedWriteHalf,
    Passed,
)> {
    let (ours, theirs) = std::os::unix::net::UnixStream::pair()?;
    ours.set_nonblocking(true)?;
    let (rd, wr) = tokio::net::UnixStream::from_std(ours)?.into_split();
    Ok((rd, wr, theirs.into()))
}

/// Windows: a duplex pipe made as the first and only instance of a fresh name, its client
/// connected before anyone else could (`channel_pair`), both ends overlapped (the
/// servers-helper reads and writes it from tokio).
#[cfg(windows)]
pub(crate) fn pair() -> std::io::Result<(
    tokio::io::ReadHalf<tokio::net::windows::named_pipe::NamedPipeServer>,
    tokio::io::WriteHalf<tokio::net::windows::named_pipe::NamedPipeServer>,
    Passed,
)> {
    use sandbox::windows::{async_server, channel_pair, ChannelIo};
    let (ours, theirs) = channel_pair(ChannelIo::Overlapped, ChannelIo::Overlapped)
        .map_err(std::io::Error::other)?;
    let (rd, wr) = tokio::io::split(async_server(ours)?);
    Ok((rd, wr, Passed::Pipe(theirs)))
}

#[allow(clippy::too_many_arguments)]
async fn relay(
    ctx: Rc<Ctx>,
    rd: impl AsyncRead + Unpin,
    wr: impl AsyncWrite + Unpin + 'static,
    name: ServerName,
    r: RemoteServer,
    total_ms: u32,
    link: Rc<Link>,
    gone: Rc<RefCell<Option<String>>>,
) {
    // Taken (and so closed) when the relay ends, whatever exchange still runs.
    let wr = Rc::new(tokio::sync::Mutex::new(Some(wr)));
    let ended = Rc::new(tokio::sync::Notify::new());
    let slots = std::sync::Arc::new(tokio::sync::Semaphore::new(IN_FLIGHT));
    let mut rd = BufReader::new(rd).take(MESSAGE_MAX as u64 + 1);
    loop {
        let mut line = Vec::new();
        rd.set_limit(MESSAGE_MAX as u64 + 1);
        let read = tokio::select! {
            n = rd.read_until(b'\n', &mut line) => n,
            _ = ended.notified() => break,
        };
        match read {
            Ok(0) | Err(_) => break,
            Ok(_) if line.last() != Some(&b'\n') => {
                let why = "the servers-helper wrote a message that is too long";
                gone.borrow_mut().get_or_insert(why.into());
                break;
            }
            Ok(_) => {}
        }
        line.pop();
        let Ok(permit) = slots.clone().acquire_owned().await else {
            break;
        };
        let (ctx, r, link, wr, ended, gone, name) = (
            ctx.clone(),
            r.clone(),
            link.clone(),
            wr.clone(),
            ended.clone(),
            gone.clone(),
            name.clone(),
        );
        tokio::task::spawn_local(async move {
            let _permit = permit;
            let failed = match exchange(&ctx, &r, &link, Some(line), total_ms).await {
                Ok(messages) => {
                    let mut w = wr.lock().await;
                    let mut out = Ok(());
                    for m in messages {
                        out = match w.as_mut() {
                            Some(w) => out.and(w.write_all(format!("{m}\n").as_bytes()).await),
                            None => Err(std::io::ErrorKind::BrokenPipe.into()),
                        };
                    }
                    out.err()
                        .map(|e| format!("writing to the servers-helper: {e}"))
                }
                Err(why) => Some(why),
            };
            if let Some(why) = failed {
                tracing::warn!(server = %name, "remote connection ended: {why}");
                gone.borrow_mut().get_or_insert(why);
                ended.notify_one();
            }
        });
    }
    // The servers-helper sees its end close, and fails what is in flight (on Windows once both
    // halves are gone: a pipe has no half-close).
    drop(rd);
    if let Some(mut w) = wr.lock().await.take() {
        let _ = w.shutdown().await;
    }
    if link.session.borrow().is_some() {
        if let Err(why) = exchange(&ctx, &r, &link, None, 5_000).await {
            tracing::info!(server = %name, "ending the remote session: {why}");
        }
    }
}

/// One message to the server (`None`: the DELETE that ends its session), and the messages its
/// answer carried.
async fn exchange(
    ctx: &Rc<Ctx>,
    r: &RemoteServer,
    link: &Link,
    message: Option<Vec<u8>>,
    total_ms: u32,
) -> Result<Vec<String>, String> {
    let credential = match &r.credential {
        Some(c) => Some(attach(ctx, c, &r.host).await.map_err(|e| e.message())?),
        None => None,
    };
    let post = McpPost {
        url: r.url.clone(),
        message,
        session: link.session.borrow().clone(),
        protocol_version: link.version.borrow().clone(),
        credential,
        total_ms,
    };
    let Some(net) = ctx.helpers.slot(ipc_schema::Role::Net) else {
        return Err("there is no net-helper".into());
    };
    let answer = match net.call(Body::Net(NetRequest::Mcp(post))).await {
        Ok(Body::NetReply(NetReply::Mcp(a))) => a,
        Ok(Body::NetReply(NetReply::Refused(x))) => return Err(format!("refused: {}", x.reason)),
        Ok(Body::NetReply(NetReply::Failed { reason })) => return Err(format!("failed: {reason}")),
        Ok(other) => return Err(format!("the net-helper answered {:?}", other.kind())),
        Err(e) => return Err(e.to_string()),
    };
    if !(200..300).contains(&answer.status) {
        return Err(match (answer.status, link.session.borrow().is_some()) {
            (404, true) => "the server ended its session (404)".to_string(),
            (s, _) => format!("the server answered HTTP {s}"),
        });
    }
    if answer.session.is_some() {
        *link.session.borrow_mut() = answer.session;
    }
    if answer.messages.iter().any(|m| m.contains(['\n', '\r'])) {
        return Err("the net-helper passed a message that is not one line".into());
    }
    Ok(answer.messages)
}
