//! Placeholder until the lockdown lands.
use crate::{LockdownError, LockdownOptions, LockdownReport, Profile};

pub fn landlock_abi() -> u32 {
    0
}

pub fn lockdown(
    profile: &Profile,
    _opts: &LockdownOptions,
) -> Result<LockdownReport, LockdownError> {
    Err(LockdownError::Unsupported(profile.name()))
}
