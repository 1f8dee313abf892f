//! Step 2: empty the environment, keeping only the variables the caller names.

use crate::LockdownError;
use std::ffi::OsString;

/// Removes every environment variable except those named in `keep` (which keep their values).
///
/// The whole table is dropped with `clearenv(3)` rather than variable by variable, so that a
/// malformed entry (a name containing `=`, which `std::env::remove_var` refuses) cannot survive.
pub(crate) fn clear_env(keep: &[String]) -> Result<(), LockdownError> {
    let kept: Vec<(String, OsString)> = keep
        .iter()
        .filter_map(|name| std::env::var_os(name).map(|v| (name.clone(), v)))
        .collect();
    // SAFETY: clearenv only resets libc's `environ`; it is unsound only if another thread reads
    // the environment at the same time, and lockdown checked that this process has one thread.
    if unsafe { libc::clearenv() } != 0 {
        return Err(LockdownError::Environment("clearenv failed".into()));
    }
    for (name, value) in &kept {
        if name.is_empty() || name.contains(['=', '\0']) {
            return Err(LockdownError::Environment(format!(
                "{name:?} cannot be an environment variable name"
            )));
        }
        std::env::set_var(name, value);
    }
    let left: Vec<OsString> = std::env::vars_os()
        .map(|(k, _)| k)
        .filter(|k| !keep.iter().any(|n| k == n.as_str()))
        .collect();
    if !left.is_empty() {
        return Err(LockdownError::Environment(format!(
            "variables survived clearing: {left:?}"
        )));
    }
    Ok(())
}
