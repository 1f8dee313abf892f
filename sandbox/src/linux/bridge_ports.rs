//! The exec helper's proxy bridge ports in the Landlock tier: a block of [`POOL_SIZE`] TCP
//! ports chosen once, before its Landlock ruleset, which then allows TCP bind and connect to
//! these ports only (and seccomp allows inet stream sockets only: see
//! `seccomp::install_host_network_guard`). Where the helper has no network namespace of its
//! own, that is what keeps it (and everything it starts) off the host's network: each
//! command's proxy bridge listens on 127.0.0.1 on one of these ports, and the command's own
//! ruleset narrows connect to that one.
//!
//! A Landlock domain is inherited, so the helper's rules bound its commands too: the block is
//! fixed at start because a command's bridge port must be allowed by the helper's layer as well
//! as by the command's own. A process that chose no block (the namespace tier, tests of the
//! sandbox alone) gets a port of the kernel's choosing.

use std::io::Read;
use std::net::TcpListener;
use std::ops::Range;
use std::sync::OnceLock;

/// How many commands with the proxy can run at once in the Landlock tier.
pub const POOL_SIZE: u16 = 64;

/// Where blocks are chosen: inside Linux's default ephemeral range (32768-60999), where no
/// well-known service listens.
const FIRST: u16 = 32768;
const LAST: u16 = 60999;

static POOL: OnceLock<Range<u16>> = OnceLock::new();

/// Chooses this process's block (at random, so that two helpers on one machine rarely share
/// one; a taken port is skipped at bind time either way) and keeps it for [`listen`]. Called
/// once, by the lockdown of the exec helper in the Landlock tier, before its ruleset is made.
pub fn choose() -> std::io::Result<Range<u16>> {
    let mut b = [0u8; 2];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut b)?;
    let span = LAST - FIRST - POOL_SIZE;
    let start = FIRST + u16::from_le_bytes(b) % span;
    let pool = start..start + POOL_SIZE;
    Ok(POOL.get_or_init(|| pool).clone())
}

/// The block [`choose`] kept, if any.
pub fn pool() -> Option<Range<u16>> {
    POOL.get().cloned()
}

/// A listener on 127.0.0.1 for one command's proxy bridge: on the first free port of the
/// block, or a port of the kernel's choosing where no block was chosen. All ports taken is a
/// refusal (EADDRINUSE), not a port outside the block (which the helper's ruleset refuses).
pub fn listen() -> std::io::Result<TcpListener> {
    let Some(pool) = pool() else {
        return TcpListener::bind(("127.0.0.1", 0));
    };
    for port in pool.clone() {
        match TcpListener::bind(("127.0.0.1", port)) {
            Ok(l) => return Ok(l),
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {}
            Err(e) => return Err(e),
        }
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::AddrInUse,
        format!(
            "every port of this exec helper's bridge block ({}-{}) is in use: at most {POOL_SIZE} commands with the proxy run at once in the Landlock tier",
            pool.start,
            pool.end - 1
        ),
    ))
}
