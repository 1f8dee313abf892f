//! The command line every helper accepts from the broker, and the one call that locks it down.
//!
//! Helpers take no environment (it is cleared) and no config file; what the broker tells them
//! comes as arguments, parsed strictly: an unknown argument is fatal, so a switch compiled out of
//! a release build cannot be passed to it by mistake and silently ignored.

use crate::{LockdownError, LockdownOptions, LockdownReport, Profile};
use std::ffi::OsString;

#[cfg(target_os = "linux")]
use crate::process::CHANNEL_FD;
/// The broker channel's descriptor, as on Linux (`process::CHANNEL_FD`).
#[cfg(not(target_os = "linux"))]
const CHANNEL_FD: i32 = 3;

/// Arguments common to every helper, plus the helper's own `--name value` pairs.
#[derive(Debug, Clone, Default)]
pub struct HelperArgs {
    /// `--allow-degraded`: the broker was started with it.
    pub allow_degraded: bool,
    /// `--test-skip-lockdown`: exists only in builds with the `test-hooks` feature.
    pub skip_lockdown: bool,
    /// The helper's own `--name value` pairs, in order.
    pub values: Vec<(String, OsString)>,
}

impl HelperArgs {
    /// Parses `std::env::args_os()`, accepting `valued` as the helper's own `--name value`
    /// options. Exits the process with a message on anything else.
    pub fn from_env_with(valued: &[&str]) -> HelperArgs {
        match Self::parse(std::env::args_os().skip(1), valued) {
            Ok(a) => a,
            Err(e) => {
                eprintln!("{}: {e}", program_name());
                std::process::exit(64);
            }
        }
    }

    /// [`HelperArgs::from_env_with`] with no options of the helper's own.
    pub fn from_env() -> HelperArgs {
        Self::from_env_with(&[])
    }

    pub fn parse(
        args: impl IntoIterator<Item = OsString>,
        valued: &[&str],
    ) -> Result<HelperArgs, String> {
        let mut out = HelperArgs::default();
        let mut it = args.into_iter();
        while let Some(arg) = it.next() {
            let s = arg.to_str().ok_or("an argument is not UTF-8")?.to_string();
            match s.as_str() {
                "--allow-degraded" => out.allow_degraded = true,
                #[cfg(feature = "test-hooks")]
                "--test-skip-lockdown" => out.skip_lockdown = true,
                name if valued.contains(&name) => {
                    let v = it.next().ok_or(format!("{name} needs a value"))?;
                    out.values.push((name.to_string(), v));
                }
                other => return Err(format!("unknown argument {other:?}")),
            }
        }
        Ok(out)
    }

    /// All values given for `--name`.
    pub fn all(&self, name: &str) -> impl Iterator<Item = &OsString> {
        let name = name.to_string();
        self.values
            .iter()
            .filter(move |(n, _)| *n == name)
            .map(|(_, v)| v)
    }
}

fn program_name() -> String {
    std::env::args()
        .next()
        .and_then(|a| a.rsplit('/').next().map(str::to_string))
        .unwrap_or_else(|| "helper".into())
}

/// Locks the process down with `profile`, keeping the broker channel (fd 3) and stdio.
pub fn lock_down(args: &HelperArgs, profile: &Profile) -> Result<LockdownReport, LockdownError> {
    lock_down_keeping(args, profile, &[])
}

/// [`lock_down`], also keeping `extra_fds`: descriptors the helper opened before lockdown
/// because afterwards it can no longer open them (the fs-helper's grant roots).
pub fn lock_down_keeping(
    args: &HelperArgs,
    profile: &Profile,
    extra_fds: &[i32],
) -> Result<LockdownReport, LockdownError> {
    #[cfg(feature = "test-hooks")]
    if args.skip_lockdown {
        // Test-only: pretend. The broker must catch this from /proc/<pid>/status.
        return Ok(LockdownReport {
            stray_fds_closed: true,
            env_cleared: true,
            core_dumps_off: true,
            dumpable_off: true,
            no_new_privs: true,
            capabilities_dropped: true,
            landlock_abi: 7,
            landlock_min_abi: 1,
            landlock: crate::LandlockStatus::FullyEnforced,
            seccomp_filter: true,
            seccomp_allowed_syscalls: 1,
            ..LockdownReport::nothing_yet(profile.name())
        });
    }
    let opts = LockdownOptions {
        allow_degraded: args.allow_degraded,
        keep_fds: std::iter::once(CHANNEL_FD)
            .chain(extra_fds.iter().copied())
            .collect(),
        keep_env: vec![],
    };
    crate::lockdown(profile, &opts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_arguments_are_refused() {
        let err = HelperArgs::parse(["--frobnicate".into()], &[]).unwrap_err();
        assert!(err.contains("unknown argument"), "{err}");
        let a = HelperArgs::parse(
            ["--allow-degraded".into(), "--grant".into(), "/x".into()],
            &["--grant"],
        )
        .unwrap();
        assert!(a.allow_degraded);
        assert_eq!(a.all("--grant").count(), 1);
        assert!(HelperArgs::parse(["--grant".into()], &["--grant"]).is_err());
    }

    #[cfg(not(feature = "test-hooks"))]
    #[test]
    fn skip_lockdown_does_not_exist_without_test_hooks() {
        let err = HelperArgs::parse(["--test-skip-lockdown".into()], &[]).unwrap_err();
        assert!(err.contains("unknown argument"), "{err}");
    }
}
