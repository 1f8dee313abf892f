//! Text from agents and tools, made inert for a terminal: the one implementation in
//! [`ipc_schema::inert`], shared with every command of the `gatehouse` CLI, re-exported here for
//! the console.
//!
//! Everything an agent controls (paths, arguments, diffs, audit details) reaches the screen only
//! through [`pieces`]: control characters, ANSI escape sequences (their ESC byte), bidirectional
//! overrides and other invisible format characters become visible escapes such as `\x1b` or
//! `\u{202E}`, so the terminal never interprets them and the person sees that they are there.
//! Escapes are marked ([`Piece::escape`]) so the console can style them apart from literal text
//! that merely looks like an escape.

pub use ipc_schema::inert::{escaped, escaped_lines, pieces, Piece, StreamEscaper};
