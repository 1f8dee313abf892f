//! Windows: not implemented yet. [`lockdown`] refuses with [`LockdownError::Unsupported`], so a
//! helper on Windows fails closed (DESIGN.md rule 8) instead of running unconfined.
//!
//! What the broker would apply is generated as data by [`crate::wincfg`] (restricted token,
//! capability SID, job object, ACEs, WFP filters, mitigations; golden-tested on Linux). None of
//! it is applied: there are no `windows-sys` calls yet. The text below is the older AppContainer
//! design; where they differ, `wincfg` is the current plan (a restricted token with a
//! per-profile capability SID, as Codex's Windows sandbox does, AppContainer only where it fits
//! a network-free helper). See docs/windows.md.
//!
//! # Intended design: AppContainer + restricted token + job object
//!
//! A process cannot move itself into an AppContainer, so on Windows the lockdown happens at
//! spawn time, in the broker, and `lockdown` in the helper only verifies it:
//!
//! - **AppContainer per profile.** The broker creates (once, `CreateAppContainerProfile`) one
//!   AppContainer SID per helper kind, `gatehouse.fs`, `gatehouse.net`, ..., and starts each
//!   helper with `PROC_THREAD_ATTRIBUTE_SECURITY_CAPABILITIES` naming it. An AppContainer token
//!   has no access to anything whose DACL does not name its SID (or `ALL APPLICATION PACKAGES`),
//!   no network unless it holds a network capability, and no access to other processes.
//! - **Filesystem.** fs: the broker adds an ACE for `gatehouse.fs` to each grant root (read, or
//!   read/write), and removes it when the grant goes. net, secrets, ui, gateway: nothing.
//!   exec: read/execute through `ALL APPLICATION PACKAGES` on the system, write on the
//!   command's working root only.
//! - **Network.** Only `gatehouse.net` gets `internetClient`; no profile gets
//!   `internetClientServer` or `privateNetworkClientServer`, so nothing listens.
//! - **Secrets.** The Credential Manager (`CredRead`/`CredWrite`) is not reachable from an
//!   AppContainer; the secrets helper runs as a normal low-box-free process under a restricted
//!   token (`CreateRestrictedToken` with `DISABLE_MAX_PRIVILEGE`, all groups deny-only but the
//!   user) instead, which is the one documented exception.
//! - **Process mitigations** (`PROC_THREAD_ATTRIBUTE_MITIGATION_POLICY`): no child processes
//!   (`PROCESS_CREATION_CHILD_PROCESS_RESTRICTED`) for every helper but exec, no dynamic code,
//!   no Win32k system calls (non-ui helpers), only Microsoft-signed or same-signer images, strict
//!   handle checks.
//! - **Job object** per helper: kill-on-close (the counterpart of PR_SET_PDEATHSIG), active
//!   process limit 1 for every helper but exec, UI restrictions.
//! - **Handles.** Only the channel handle is inherited
//!   (`PROC_THREAD_ATTRIBUTE_HANDLE_LIST`), the counterpart of closing stray descriptors; the
//!   environment block is built from the allowlist.
//!
//! `lockdown` would then check its own token (`GetTokenInformation(TokenIsAppContainer)`, the
//! AppContainer SID, the mitigation policies in force) and report them, failing if any is
//! missing: the helper trusts what it can observe, not what the broker says it did.

use crate::{LockdownError, LockdownOptions, LockdownReport, Profile};

/// No Landlock on Windows.
pub fn landlock_abi() -> u32 {
    0
}

/// Not implemented on Windows yet: always [`LockdownError::Unsupported`] (see the module docs
/// for the AppContainer design).
pub fn lockdown(
    profile: &Profile,
    _opts: &LockdownOptions,
) -> Result<LockdownReport, LockdownError> {
    Err(LockdownError::Unsupported(profile.name()))
}

/// Not implemented on Windows yet: always [`LockdownError::Unsupported`].
pub fn harden_broker() -> Result<LockdownReport, LockdownError> {
    Err(LockdownError::Unsupported("broker"))
}
