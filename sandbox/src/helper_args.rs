//! The command line every helper accepts from the broker, and the one call that locks it down.
//!
//! Helpers take no environment (it is cleared) and no config file; what the broker tells them
//! comes as arguments, parsed strictly: an unknown argument is fatal, so a switch compiled out of
//! a release build cannot be passed to it by mistake and silently ignored.

use crate::{LockdownError, LockdownOptions, LockdownReport, Profile};
use std::ffi::OsString;

/// The channel's descriptor, kept open by lockdown. None on Windows: the channel is a handle
/// named by `--channel-handle`, and lockdown closes no handles.
#[cfg(unix)]
const CHANNEL_FD: Option<i32> = Some(crate::unix_channel::CHANNEL_FD);
#[cfg(windows)]
const CHANNEL_FD: Option<i32> = None;

/// Arguments common to every helper, plus the helper's own `--name value` pairs.
#[derive(Debug, Clone, Default)]
pub struct HelperArgs {
    /// `--allow-degraded`: the broker was started with it.
    pub allow_degraded: bool,
    /// `--test-skip-lockdown`: exists only in builds with the `test-hooks` feature.
    pub skip_lockdown: bool,
    /// `--channel-handle N` (Windows): the value of the broker channel's inherited handle.
    pub channel_handle: Option<String>,
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
                #[cfg(windows)]
                CHANNEL_HANDLE => {
                    let v = it.next().ok_or(format!("{CHANNEL_HANDLE} needs a value"))?;
                    let v = v.to_str().ok_or("a handle value is not UTF-8")?.to_string();
                    if out.channel_handle.replace(v).is_some() {
                        return Err(format!("{CHANNEL_HANDLE} given more than once"));
                    }
                }
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

    /// All values given for `--name`, each an absolute path (a relative one is refused).
    pub fn absolute_paths(&self, name: &str) -> Result<Vec<std::path::PathBuf>, String> {
        self.all(name)
            .map(|v| {
                let p = std::path::PathBuf::from(v);
                match p.is_absolute() {
                    true => Ok(p),
                    false => Err(format!("{name} {} is not an absolute path", p.display())),
                }
            })
            .collect()
    }
}

/// On Windows, the option by which the spawner names the channel's handle (a handle in the
/// spawn's handle list keeps its value in the child, but that value is not fixed as fd 3 is).
#[cfg(windows)]
pub const CHANNEL_HANDLE: &str = "--channel-handle";

/// Adopts the broker channel the helper was spawned with: fd 3 on Unix; on Windows the
/// inherited handle `--channel-handle` names. Fails for a helper started by hand.
pub fn take_channel(args: &HelperArgs) -> Result<ipc_schema::helper::Stream, String> {
    #[cfg(unix)]
    {
        let _ = args;
        crate::unix_channel::take_inherited_channel().map_err(|e| e.to_string())
    }
    #[cfg(windows)]
    {
        let value = args.channel_handle.as_deref().ok_or(
            "no --channel-handle: helpers are started by the gatehouse spawner, not by hand",
        )?;
        crate::windows::take_inherited_handle(value)
            .map(std::fs::File::from)
            .map_err(|e| e.to_string())
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
        keep_fds: CHANNEL_FD
            .into_iter()
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

    #[test]
    fn path_options_are_absolute_or_refused() {
        let abs = std::env::temp_dir();
        let a = HelperArgs::parse(
            ["--protect".into(), abs.clone().into_os_string()],
            &["--protect"],
        )
        .unwrap();
        assert_eq!(a.absolute_paths("--protect"), Ok(vec![abs]));
        let a = HelperArgs::parse(["--protect".into(), "rel/dir".into()], &["--protect"]).unwrap();
        assert_eq!(
            a.absolute_paths("--protect"),
            Err("--protect rel/dir is not an absolute path".into())
        );
    }

    #[test]
    fn the_channel_handle_is_an_option_on_windows_only() {
        let a = HelperArgs::parse(["--channel-handle".into(), "728".into()], &[]);
        #[cfg(windows)]
        {
            assert_eq!(a.unwrap().channel_handle.as_deref(), Some("728"));
            let twice = ["--channel-handle", "1", "--channel-handle", "2"].map(OsString::from);
            assert_eq!(
                HelperArgs::parse(twice, &[]).unwrap_err(),
                "--channel-handle given more than once"
            );
        }
        #[cfg(not(windows))]
        assert_eq!(a.unwrap_err(), "unknown argument \"--channel-handle\"");
    }

    #[cfg(not(feature = "test-hooks"))]
    #[test]
    fn skip_lockdown_does_not_exist_without_test_hooks() {
        let err = HelperArgs::parse(["--test-skip-lockdown".into()], &[]).unwrap_err();
        assert!(err.contains("unknown argument"), "{err}");
    }
}
