//! Linux: Landlock, seccomp, capabilities, prctl, rlimits; and process plumbing.
//!
//! [`lockdown`] runs the steps of DESIGN.md rule 6 in order, one module per step:
//! `fds` → `env` → `limits` (rlimits, dumpable, no_new_privs) → `caps` → [`landlock`] →
//! [`seccomp`]; the exec profile also enters an empty network namespace (`namespaces`) before
//! it stops being dumpable. The [`landlock`] and [`seccomp`] modules are public so that
//! `doctor` can show what each profile enforces and so that tests can apply one layer alone; a
//! process that wants to be locked down calls [`lockdown`], never a single layer.

pub mod bridge_ports;
mod caps;
pub mod command;
mod env;
mod fds;
pub mod landlock;
mod limits;
mod lockdown;
mod namespaces;
pub mod process;
pub mod seccomp;
pub mod userns;

pub use lockdown::{landlock_abi, lockdown, lockdown_router, lockdown_spawner};
