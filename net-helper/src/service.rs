//! What the net-helper does with each request: the dispatcher between the channel and the fetch
//! and proxy modules.

use crate::error::{refused, FetchError};
use crate::fetch;
use crate::NetContext;
use ipc_schema::helper::{AsyncReader, Passed, Replies};
use ipc_schema::net::{FetchedPage, NetReply, NetRequest, FETCH_PART_MAX};
use ipc_schema::{Body, Role};
use rand::Rng;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Pages whose later parts wait for [`NetRequest::FetchPart`]; the oldest is dropped first.
const HELD_PAGES: usize = 8;

pub struct NetService {
    ctx: Arc<NetContext>,
    proxy: crate::proxy::Proxy,
    next_fetch: AtomicU64,
    held: Mutex<VecDeque<(u64, Vec<String>)>>,
}

impl NetService {
    pub fn new(ctx: Arc<NetContext>, max_tunnels: u32) -> Arc<NetService> {
        Arc::new(NetService {
            proxy: crate::proxy::Proxy::new(ctx.clone(), max_tunnels),
            ctx,
            next_fetch: AtomicU64::new(1),
            held: Mutex::new(VecDeque::new()),
        })
    }

    /// Reads requests until the broker closes the channel; each is answered by its own task.
    pub async fn serve(self: Arc<Self>, mut reader: AsyncReader, replies: Replies) {
        while let Some(req) = reader.next().await {
            let (me, replies) = (self.clone(), replies.clone());
            tokio::spawn(async move {
                let id = req.id;
                let reply = match req.body {
                    Body::Net(r) => Body::NetReply(me.handle(r, req.fd).await),
                    _ => req.unserved(Role::Net),
                };
                replies.send(id, reply);
            });
        }
    }

    pub async fn handle(&self, req: NetRequest, fd: Option<Passed>) -> NetReply {
        match req {
            NetRequest::Check { url } => {
                let checked = fetch::check(&self.ctx, &url).await;
                checked.map_or_else(FetchError::into_reply, NetReply::Checked)
            }
            NetRequest::Fetch(req) => {
                let fetched = fetch::fetch(&self.ctx, &req).await;
                fetched.map_or_else(FetchError::into_reply, |b| NetReply::Fetched(self.page(b)))
            }
            NetRequest::FetchPart { fetch, index } => self.part(fetch, index),
            NetRequest::ProxyOpen(cfg) => {
                let session = cfg.session.clone();
                self.proxy
                    .open(cfg)
                    .map_or_else(invalid, |()| NetReply::ProxyOpened { session })
            }
            NetRequest::ProxyClose { session } => match self.proxy.close(&session) {
                Some(tunnels_closed) => NetReply::ProxyClosed {
                    session,
                    tunnels_closed,
                },
                None => invalid(format!("no proxy session {session}")),
            },
            // issue 7: http_request with a stored credential (src/http.rs).
            NetRequest::Http(req) => crate::http::serve(&self.ctx, req, |b| self.page(b)).await,
            // issue 16: a message to a remote MCP server (src/mcp.rs).
            NetRequest::Mcp(req) => crate::mcp::serve(&self.ctx, req).await,
            NetRequest::ProxyConnection { session } => {
                // The channel ends the helper on a ProxyConnection without its descriptor
                // (its row says NEEDS_FD; on Windows, the handle's value after the frame).
                let fd = fd.expect("ProxyConnection comes with its descriptor");
                NetReply::ProxyDone(crate::client::serve_client(&self.proxy, &session, fd).await)
            }
        }
    }

    fn page(&self, body: fetch::FetchedBody) -> FetchedPage {
        // The outside-text wrapper (`ipc_schema::outside`), with the OS's random nonces.
        let nonce = || rand::rngs::OsRng.gen::<[u8; 16]>();
        let (nonce, text) = ipc_schema::outside::wrap(&body.final_url, &body.text, nonce);
        let mut parts = split_parts(text, FETCH_PART_MAX);
        let id = self.next_fetch.fetch_add(1, Ordering::Relaxed);
        let first = parts.remove(0);
        let count = parts.len() as u32 + 1;
        if !parts.is_empty() {
            let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
            if held.len() >= HELD_PAGES {
                held.pop_front();
            }
            held.push_back((id, parts));
        }
        FetchedPage {
            fetch: id,
            final_url: body.final_url,
            redirects: body.redirects,
            address: body.address,
            status: body.status,
            content_type: body.content_type,
            body_bytes: body.body_bytes as u32,
            nonce,
            parts: count,
            text: first,
        }
    }

    fn part(&self, fetch: u64, index: u32) -> NetReply {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        let Some(pos) = held.iter().position(|(id, _)| *id == fetch) else {
            let why = format!("fetch {fetch} has no parts held (read them right after the fetch)");
            return invalid(why);
        };
        let parts = &mut held[pos].1;
        // (Parts are numbered from 1; part 0 wraps to an index no page has.)
        let Some(text) = parts.get_mut((index as usize).wrapping_sub(1)) else {
            return invalid(format!("fetch {fetch} has no part {index}"));
        };
        let text = std::mem::take(text);
        if index as usize == parts.len() {
            held.remove(pos);
        }
        NetReply::FetchPart { text }
    }
}

fn invalid(reason: String) -> NetReply {
    refused!(Invalid, "{reason}").into_reply()
}

/// Splits `text` into pieces of at most `max` bytes, on character boundaries.
pub fn split_parts(text: String, max: usize) -> Vec<String> {
    let (mut out, mut rest) = (Vec::new(), text.as_str());
    loop {
        let mut cut = rest.len().min(max);
        while !rest.is_char_boundary(cut) {
            cut -= 1;
        }
        out.push(rest[..cut].to_string());
        rest = &rest[cut..];
        if rest.is_empty() {
            return out;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_split_on_char_boundaries_and_join_back() {
        let text = "é".repeat(10) + "abc";
        let parts = split_parts(text.clone(), 3);
        assert!(parts.iter().all(|p| p.len() <= 3 && !p.is_empty()));
        assert_eq!(parts.concat(), text);
        assert_eq!(split_parts("short".into(), 10), vec!["short".to_string()]);
    }
}
