//! The human's console: agent sessions, approval cards, helper health, calls that need
//! checking, and the live audit log, in a terminal (ratatui).
//!
//! It shows exactly what the broker sent and never lets an agent's text disguise it: every
//! string an agent or a tool could have written is made inert ([`inert`]) and wrapped rather than
//! cut ([`wrap`]). A decision is only ever made by a key shown on the card it is about; nothing
//! is chosen by default ([`state`]). The process locks itself down once its terminal and broker
//! connection are open ([`console::run`]).
//!
//! The model ([`state::Console`]) and the drawing ([`view::draw`]) know nothing about the
//! terminal, so tests render them on ratatui's test backend.

#![forbid(unsafe_code)]

pub mod card;
// The terminal and the broker connection: a Unix socket, or on Windows the broker's named pipe
// and a Windows console (crossterm drives both).
#[cfg(any(unix, windows))]
pub mod console;
#[cfg(unix)]
pub mod fds;
pub mod inert;
#[cfg(any(unix, windows))]
pub mod link;
pub mod modes;
#[cfg(all(unix, feature = "test-hooks"))]
pub mod probe;
pub mod servers;
pub mod state;
pub mod theme;
pub mod view;
pub mod wrap;

#[cfg(any(unix, windows))]
pub use console::{run, RunOptions, UiError};
