//! The fs-helper on Windows: open the grants, lock down, say hello, serve.
//!
//! The `fs-helper` binary's `main` on Windows is [`main`]. Windows has no openat2, so every
//! path is opened from its grant root's handle one component at a time, each a plain name
//! opened relative to its parent's handle with reparse points refused
//! (`sandbox::windows::beneath`); what the system then says the file's path is must still lie
//! under the root, and is what the protected table and the grant's globs judge. It serves every
//! file tool; changes are made whole, kept in checkpoints and undone as on Unix (`fs-change`).
//!
//! What it can and cannot do: docs/fs-helper.md ("On Windows") and docs/windows.md.

#![forbid(unsafe_code)]

#[cfg(windows)]
mod change;
#[cfg(windows)]
mod config;
#[cfg(windows)]
mod delete;
#[cfg(windows)]
mod moving;
#[cfg(windows)]
mod names;
#[cfg(windows)]
mod search;
#[cfg(windows)]
mod serve;
#[cfg(windows)]
mod store;
#[cfg(windows)]
mod walk;

#[cfg(windows)]
pub use serve::main;
