//! The broker's requests, served the same way by each OS's loop (`serve.rs` on Linux,
//! `serve_windows.rs` on Windows): each names a connection, and what it asks is the
//! connection's to do ([`Conn`]). A loop keeps beside each connection what its I/O needs
//! ([`Slot`]).

use crate::conn::{Conn, Replies};
use ipc_schema::helper::{fatal, Passed, Request};
use ipc_schema::servers::{ConnId, ServerName, ServersRequest};
use ipc_schema::{Body, ErrorCode, ErrorReply, Role};
use std::collections::BTreeMap;
use std::time::Duration;

/// Connections at once (each is one running server).
const MAX_CONNS: usize = 64;

/// A connection as a loop keeps it.
pub trait Slot {
    fn conn(&mut self) -> &mut Conn;
    /// The connection is gone from the table: stop its I/O.
    fn end(&mut self);
}

/// Serves `req` on `conns`; `attach` makes a slot of the handle an `Attach` brought for a
/// connection (its id, the server, the request's id; `Err`: why not). The connection the
/// request concerned, and the replies.
pub fn handle<S: Slot>(
    conns: &mut BTreeMap<ConnId, S>,
    req: Request,
    attach: impl FnOnce(ConnId, ServerName, u64, Passed) -> Result<S, String>,
) -> (ConnId, Replies) {
    let id = req.id;
    if !matches!(req.body, Body::Servers(_)) {
        req.unserved(Role::Servers);
    }
    let Body::Servers(r) = req.body else {
        unreachable!("checked above")
    };
    let mut out = Replies::new();
    let conn = match r {
        ServersRequest::Attach { conn, server } => {
            let Some(fd) = req.fd else {
                // The route table makes this fatal before it gets here.
                fatal(Role::Servers, "an Attach without the server's stream");
            };
            // Made first, so a refused Attach closes what it brought.
            let slot = attach(conn, server, id, fd);
            let refusal = if conns.contains_key(&conn) {
                Some(format!("{conn} is already attached"))
            } else if conns.len() >= MAX_CONNS {
                Some(format!(
                    "{MAX_CONNS} servers are attached; detach one first"
                ))
            } else {
                match slot {
                    Ok(s) => {
                        conns.insert(conn, s);
                        None
                    }
                    Err(why) => Some(why),
                }
            };
            if let Some(why) = refusal {
                out.push((id, error(ErrorCode::Invalid, why)));
            }
            conn
        }
        ServersRequest::ListTools { conn } => {
            on(conns, conn, id, &mut out, |c, out| c.list(id, out));
            conn
        }
        ServersRequest::CallTool {
            conn,
            tool,
            arguments,
            timeout_ms,
        } => {
            let timeout = Duration::from_millis(timeout_ms);
            on(conns, conn, id, &mut out, |c, out| {
                c.call(id, &tool, &arguments, timeout, out)
            });
            conn
        }
        ServersRequest::Watch { conn } => {
            on(conns, conn, id, &mut out, |c, out| c.watch(id, out));
            conn
        }
        ServersRequest::Detach { conn } => {
            match conns.remove(&conn) {
                Some(mut s) => {
                    s.conn().close("gatehouse detached it".into(), &mut out);
                    s.end();
                    out.push((id, Body::Pong));
                }
                None => out.push((id, unknown(conn))),
            }
            conn
        }
    };
    (conn, out)
}

/// `f` on connection `conn`, or request `id` answered that there is none.
fn on<S: Slot>(
    conns: &mut BTreeMap<ConnId, S>,
    conn: ConnId,
    id: u64,
    out: &mut Replies,
    f: impl FnOnce(&mut Conn, &mut Replies),
) {
    match conns.get_mut(&conn) {
        Some(s) => f(s.conn(), out),
        None => out.push((id, unknown(conn))),
    }
}

fn error(code: ErrorCode, msg: impl Into<String>) -> Body {
    Body::Error(ErrorReply::new(code, msg))
}

fn unknown(conn: ConnId) -> Body {
    error(
        ErrorCode::Invalid,
        format!("no connection {conn}: never attached, or detached"),
    )
}
