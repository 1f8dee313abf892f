//! The helper's event loop on Windows: one tokio thread. The channel's reader checks every
//! frame against [`BROKER_TO_SERVERS`] and ends the helper on anything unexpected, as on Linux.
//! Each server's pipe (its end of a pipe pair the broker made, duplicated into this process
//! with the `Attach` that names it) has a reader task, which hands what arrives to its
//! [`Conn`], and a writer task, which writes what the connection has to send; a timer answers
//! calls past their deadline. A connection that closes has both tasks aborted, which closes the
//! pipe: the server (or the broker's relay) sees the end. A server's misbehaviour ends only its
//! connection.

use crate::conn::{Conn, Replies, STDOUT_CLOSED};
use crate::requests::Slot;
use ipc_schema::helper::{fatal, HelperChannel, Request};
use ipc_schema::route::BROKER_TO_SERVERS;
use ipc_schema::servers::ConnId;
use ipc_schema::Role;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

/// The longest the timer sleeps when no call waits.
const IDLE: Duration = Duration::from_secs(60);

/// One attached server.
struct Live {
    conn: Conn,
    /// Wakes the writer task: the connection has something to send.
    write: Rc<Notify>,
    tasks: Vec<JoinHandle<()>>,
}

struct State {
    conns: BTreeMap<ConnId, Live>,
    replies: ipc_schema::helper::Replies,
    /// Wakes the timer: a call (and its deadline) was added.
    rearm: Rc<Notify>,
}

type Shared = Rc<RefCell<State>>;

pub fn serve(chan: HelperChannel) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| fatal(Role::Servers, format!("cannot start the runtime: {e}")));
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, async move {
        let (mut reader, replies, writer) =
            chan.into_async(&BROKER_TO_SERVERS, sandbox::windows::async_pipe);
        let writing = tokio::task::spawn_local(async move {
            if let Err(e) = writer.run().await {
                fatal(Role::Servers, format!("writing to the broker: {e}"));
            }
        });
        let state: Shared = Rc::new(RefCell::new(State {
            conns: BTreeMap::new(),
            replies,
            rearm: Rc::new(Notify::new()),
        }));
        let timer = tokio::task::spawn_local(timer(state.clone()));
        while let Some(req) = reader.next().await {
            handle(&state, req);
        }
        // The broker closed the channel: stop, every connection with it.
        timer.abort();
        let conns = std::mem::take(&mut state.borrow_mut().conns);
        drop(conns);
        writing.abort();
    });
}

impl State {
    fn send_all(&self, out: Replies) {
        for (id, body) in out {
            self.replies.send(id, body);
        }
    }

    /// After `id`'s connection acted: its replies go out, its writer is woken, and a closed
    /// connection's tasks end (closing its pipe).
    fn settle(&mut self, id: ConnId, out: Replies) {
        self.send_all(out);
        let Some(live) = self.conns.get_mut(&id) else {
            return;
        };
        let mut more = Replies::new();
        live.conn.check_unread(&mut more);
        if live.conn.is_closed() {
            live.end();
        } else {
            live.write.notify_one();
        }
        self.send_all(more);
    }
}

impl Slot for Live {
    fn conn(&mut self) -> &mut Conn {
        &mut self.conn
    }

    fn end(&mut self) {
        self.tasks.iter().for_each(JoinHandle::abort);
    }
}

/// A slot dropped unused (an `Attach` refused after its pipe was adopted) ends its tasks
/// before they first run (they are spawned on this thread, which has not yielded since), so
/// they never touch a connection of the same id, and the pipe closes with them.
impl Drop for Live {
    fn drop(&mut self) {
        self.end();
    }
}

fn handle(state: &Shared, req: Request) {
    let mut st = state.borrow_mut();
    let (conn, out) = crate::requests::handle(&mut st.conns, req, |conn, server, id, passed| {
        let pipe = sandbox::windows::adopt_passed_pipe(passed)
            .map_err(|e| e.to_string())
            .and_then(|h| {
                sandbox::windows::async_pipe(std::fs::File::from(h))
                    .map_err(|e| format!("the server's pipe: {e}"))
            })?;
        let write = Rc::new(Notify::new());
        let (rd, wr) = tokio::io::split(pipe);
        Ok(Live {
            conn: Conn::attach(server, id),
            tasks: vec![
                tokio::task::spawn_local(read_from(state.clone(), conn, rd)),
                tokio::task::spawn_local(write_to(state.clone(), conn, wr, write.clone())),
            ],
            write,
        })
    });
    // A call's deadline may be the timer's next.
    st.rearm.notify_one();
    st.settle(conn, out);
}

/// Reads what the server writes until its pipe ends or the connection closes.
async fn read_from(
    state: Shared,
    id: ConnId,
    mut rd: tokio::io::ReadHalf<tokio::net::windows::named_pipe::NamedPipeClient>,
) {
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let got = rd.read(&mut buf).await;
        let mut st = state.borrow_mut();
        let Some(live) = st.conns.get_mut(&id) else {
            return;
        };
        let mut out = Replies::new();
        match got {
            Ok(0) => live.conn.close(STDOUT_CLOSED.into(), &mut out),
            // A closed pipe reads as a broken pipe on Windows, not as zero bytes.
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
                live.conn.close(STDOUT_CLOSED.into(), &mut out)
            }
            Err(e) => live
                .conn
                .close(format!("reading from the server: {e}"), &mut out),
            Ok(n) => live.conn.received(&buf[..n], &mut out),
        }
        let closed = live.conn.is_closed();
        st.settle(id, out);
        if closed {
            return;
        }
    }
}

/// Writes what the connection has to send, each time it is woken.
async fn write_to(
    state: Shared,
    id: ConnId,
    mut wr: tokio::io::WriteHalf<tokio::net::windows::named_pipe::NamedPipeClient>,
    wake: Rc<Notify>,
) {
    loop {
        let bytes = match state.borrow_mut().conns.get_mut(&id) {
            Some(live) if !live.conn.is_closed() => live.conn.take_output(),
            _ => return,
        };
        if bytes.is_empty() {
            wake.notified().await;
            continue;
        }
        if let Err(e) = wr.write_all(&bytes).await {
            let mut st = state.borrow_mut();
            let Some(live) = st.conns.get_mut(&id) else {
                return;
            };
            let mut out = Replies::new();
            let why = match e.kind() {
                std::io::ErrorKind::BrokenPipe => "the server closed its stdin".to_string(),
                _ => format!("writing to the server: {e}"),
            };
            live.conn.close(why, &mut out);
            st.settle(id, out);
            return;
        }
    }
}

/// Answers calls past their deadline (the server is told to cancel them).
async fn timer(state: Shared) {
    let rearm = state.borrow().rearm.clone();
    loop {
        let wake = state
            .borrow()
            .conns
            .values()
            .filter_map(|l| l.conn.deadline())
            .min()
            .unwrap_or_else(|| Instant::now() + IDLE);
        tokio::select! {
            _ = tokio::time::sleep_until(wake.into()) => {}
            _ = rearm.notified() => {}
        }
        let now = Instant::now();
        let mut st = state.borrow_mut();
        let ids: Vec<ConnId> = st.conns.keys().copied().collect();
        for id in ids {
            let mut out = Replies::new();
            if let Some(live) = st.conns.get_mut(&id) {
                live.conn.check_time(now, &mut out);
            }
            st.settle(id, out);
        }
    }
}
