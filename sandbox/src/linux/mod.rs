//! Linux: Landlock, seccomp, capabilities, prctl, rlimits; and process plumbing.

mod lockdown;
pub mod process;

pub use lockdown::{landlock_abi, lockdown};
