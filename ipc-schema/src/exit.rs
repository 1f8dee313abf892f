//! How a helper that cannot go on ends: one message on stderr, one exit status.

use crate::Role;
use std::fmt::Display;

/// The exit status of a helper that stopped because its channel broke the protocol (or it could
/// not go on). Usage errors on the command line exit with 64 instead.
pub const FATAL_EXIT: i32 = 70;

/// Ends the helper: `role: why` on stderr, exit status [`FATAL_EXIT`]. Every helper ends this
/// way when it cannot go on.
pub fn fatal(role: Role, why: impl Display) -> ! {
    eprintln!("{}: {why}", role.name());
    std::process::exit(FATAL_EXIT)
}
