//! The helper's event loop: one thread, one `poll(2)` over the broker channel and every server
//! socket. The channel ([`PolledChannel`]) checks every frame against [`BROKER_TO_SERVERS`] and
//! ends the helper on anything unexpected; a server's misbehaviour ends only its connection.

use crate::conn::{Conn, Replies};
use crate::requests::Slot;
use ipc_schema::helper::{fatal, HelperChannel, PolledChannel, Request};
use ipc_schema::route::BROKER_TO_SERVERS;
use ipc_schema::servers::ConnId;
use ipc_schema::Role;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use std::collections::BTreeMap;
use std::os::unix::net::UnixStream;
use std::time::Instant;

struct Server {
    chan: PolledChannel,
    conns: BTreeMap<ConnId, Conn>,
}

pub fn serve(chan: HelperChannel) {
    let mut s = Server {
        chan: chan.into_polled(&BROKER_TO_SERVERS),
        conns: BTreeMap::new(),
    };
    while s.step() {}
}

impl Server {
    fn send_all(&mut self, out: Replies) {
        for (id, body) in out {
            self.chan.reply(id, body);
        }
    }

    /// One poll round. `false`: the broker closed the channel.
    fn step(&mut self) -> bool {
        let now = Instant::now();
        let mut out = Replies::new();
        for c in self.conns.values_mut() {
            c.check_time(now, &mut out);
        }
        self.send_all(out);
        let wake = self.conns.values().filter_map(Conn::deadline).min();
        let timeout = match wake {
            None => PollTimeout::NONE,
            Some(t) => PollTimeout::from(
                t.saturating_duration_since(now)
                    .as_millis()
                    .clamp(1, 60_000) as u16,
            ),
        };
        let ids: Vec<ConnId> = self.conns.keys().copied().collect();
        let (chan_ev, conn_ev) = {
            let mut chan_flags = PollFlags::POLLIN;
            if self.chan.wants_write() {
                chan_flags |= PollFlags::POLLOUT;
            }
            let mut fds = vec![PollFd::new(self.chan.as_fd(), chan_flags)];
            for c in self.conns.values() {
                let mut f = PollFlags::POLLIN;
                if c.wants_write() {
                    f |= PollFlags::POLLOUT;
                }
                if c.is_closed() {
                    f = PollFlags::empty();
                }
                fds.push(PollFd::new(c.as_fd(), f));
            }
            match poll(&mut fds, timeout) {
                Err(nix::errno::Errno::EINTR) => return true,
                Err(e) => fatal(Role::Servers, format!("poll: {e}")),
                Ok(_) => {}
            }
            let ev: Vec<PollFlags> = fds
                .iter()
                .map(|f| f.revents().unwrap_or(PollFlags::empty()))
                .collect();
            (ev[0], ev[1..].to_vec())
        };
        let mut out = Replies::new();
        for (id, ev) in ids.iter().zip(conn_ev) {
            let Some(c) = self.conns.get_mut(id) else {
                continue;
            };
            if ev.intersects(PollFlags::POLLOUT) {
                c.writable(&mut out);
            }
            if ev.intersects(PollFlags::POLLIN | PollFlags::POLLHUP | PollFlags::POLLERR) {
                c.readable(&mut out);
            }
            // Replies to the server (pings, `initialized`) go out in the same round.
            if c.wants_write() {
                c.writable(&mut out);
            }
        }
        self.send_all(out);
        if chan_ev.intersects(PollFlags::POLLIN | PollFlags::POLLHUP | PollFlags::POLLERR) {
            if !self.chan.read_ready() {
                return false;
            }
            while let Some(req) = self.chan.next_request() {
                self.handle(req);
            }
        }
        let mut out = Replies::new();
        for c in self.conns.values_mut() {
            if c.wants_write() {
                c.writable(&mut out);
            }
        }
        self.send_all(out);
        self.chan.flush();
        true
    }

    fn handle(&mut self, req: Request) {
        let (_, out) = crate::requests::handle(&mut self.conns, req, |_, server, id, fd| {
            Conn::attach(server, UnixStream::from(fd), id)
                .map_err(|e| format!("the server's socket: {e}"))
        });
        self.send_all(out);
    }
}

/// On Linux a connection's I/O is its socket, which closing it shuts down.
impl Slot for Conn {
    fn conn(&mut self) -> &mut Conn {
        self
    }

    fn end(&mut self) {}
}
