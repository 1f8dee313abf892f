//! The `[notify]` table of gatehouse's config.toml.
//!
//! ```toml
//! [notify]
//! desktop = true                                    # freedesktop notifications (default true;
//!                                                   # not built on Windows: false there)
//! command = ["/usr/local/bin/push-to-phone"]        # a hook, given the card's summary on stdin
//! open = ["x-terminal-emulator", "-e", "gatehouse", "ui"]   # what the "open" action runs
//! hook_timeout_secs = 10                            # a hook still running then is killed
//! ```
//!
//! Every command is an argv list, run directly (never through a shell). Other tables of the
//! file belong to other parts of gatehouse and are left alone; an unknown key in `[notify]` is
//! an error, so a misspelt setting is not silently ignored.

use serde::Deserialize;
use std::path::{Path, PathBuf};

/// Whether desktop notifications are built here (the freedesktop ones, over the session bus).
pub const DESKTOP_BUILT: bool = cfg!(unix);
/// Why the notifier cannot show a desktop notification on this OS.
pub const NO_DESKTOP: &str = "desktop notifications are not built on Windows: the hook ([notify] command) is how the notifier tells you there";

/// How long a hook may run by default before it is killed.
pub const DEFAULT_HOOK_TIMEOUT_SECS: u64 = 10;
/// The longest a hook may be given.
pub const MAX_HOOK_TIMEOUT_SECS: u64 = 300;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotifyConfig {
    pub desktop: bool,
    pub command: Option<Vec<String>>,
    pub open: Vec<String>,
    pub hook_timeout: std::time::Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {message} (fix the [notify] table; see docs/notify.md)")]
    Invalid { path: PathBuf, message: String },
}

#[derive(Deserialize)]
struct File {
    notify: Option<Table>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Table {
    desktop: Option<bool>,
    command: Option<Vec<String>>,
    open: Option<Vec<String>>,
    hook_timeout_secs: Option<u64>,
}

/// `open` when the config names none: a terminal (Debian's alternative) running this
/// instance's console, with the `gatehouse` beside this binary (gatehouse's binaries find each
/// other there, never on `PATH`).
pub fn default_open(gatehouse: &Path, data_dir: Option<&Path>) -> Vec<String> {
    let mut v = vec![
        "x-terminal-emulator".to_string(),
        "-e".to_string(),
        gatehouse.display().to_string(),
    ];
    if let Some(d) = data_dir {
        v.push("--data-dir".into());
        v.push(d.display().to_string());
    }
    v.push("ui".into());
    v
}

impl NotifyConfig {
    /// Reads `config_dir/config.toml`; a missing file or table gives the defaults.
    pub fn load(config_dir: &Path, default_open: Vec<String>) -> Result<NotifyConfig, ConfigError> {
        let path = config_dir.join("config.toml");
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(source) => return Err(ConfigError::Read { path, source }),
        };
        Self::parse(&text, default_open).map_err(|message| ConfigError::Invalid { path, message })
    }

    pub fn parse(text: &str, default_open: Vec<String>) -> Result<NotifyConfig, String> {
        let file: File = toml::from_str(text).map_err(|e| e.message().to_string())?;
        let t = file.notify.unwrap_or(Table {
            desktop: None,
            command: None,
            open: None,
            hook_timeout_secs: None,
        });
        let argv = |name: &str, v: Vec<String>| -> Result<Vec<String>, String> {
            match v.first() {
                None => Err(format!(
                    "[notify] {name} is empty: give a program and its arguments, or leave it out"
                )),
                Some(p) if p.is_empty() => Err(format!("[notify] {name} names an empty program")),
                Some(_) => Ok(v),
            }
        };
        let command = t.command.map(|c| argv("command", c)).transpose()?;
        let open = match t.open {
            Some(o) => argv("open", o)?,
            None => default_open,
        };
        let secs = t.hook_timeout_secs.unwrap_or(DEFAULT_HOOK_TIMEOUT_SECS);
        if secs == 0 || secs > MAX_HOOK_TIMEOUT_SECS {
            return Err(format!(
                "[notify] hook_timeout_secs is {secs}: give 1 to {MAX_HOOK_TIMEOUT_SECS}"
            ));
        }
        let desktop = match t.desktop {
            Some(true) if !DESKTOP_BUILT => {
                return Err(format!("[notify] desktop = true: {NO_DESKTOP}"))
            }
            Some(d) => d,
            None => DESKTOP_BUILT,
        };
        if !desktop && command.is_none() {
            return Err(if DESKTOP_BUILT {
                "[notify] desktop = false and no command: the notifier would tell no one".into()
            } else {
                format!("no [notify] command: {NO_DESKTOP}, and without one it would tell no one")
            });
        }
        Ok(NotifyConfig {
            desktop,
            command,
            open,
            hook_timeout: std::time::Duration::from_secs(secs),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open() -> Vec<String> {
        vec!["term".into()]
    }

    #[cfg(unix)]
    #[test]
    fn defaults_without_a_table_and_other_tables_left_alone() {
        let c = NotifyConfig::parse("[secrets]\nstore = \"keyutils\"\n", open()).unwrap();
        assert_eq!(
            c,
            NotifyConfig {
                desktop: true,
                command: None,
                open: open(),
                hook_timeout: std::time::Duration::from_secs(DEFAULT_HOOK_TIMEOUT_SECS),
            }
        );
    }

    #[test]
    fn a_full_table_reads_back() {
        let c = NotifyConfig::parse(
            "[notify]\ncommand = [\"/bin/hook\", \"-q\"]\nopen = [\"xterm\", \"-e\", \"gatehouse\", \"ui\"]\nhook_timeout_secs = 3\ndesktop = false\n",
            open(),
        )
        .unwrap();
        assert_eq!(c.command, Some(vec!["/bin/hook".into(), "-q".into()]));
        assert_eq!(c.open, ["xterm", "-e", "gatehouse", "ui"]);
        assert_eq!(c.hook_timeout, std::time::Duration::from_secs(3));
        assert!(!c.desktop);
    }

    #[test]
    fn bad_tables_are_refused_with_what_to_fix() {
        for (text, says) in [
            ("[notify]\ncommand = []\n", "[notify] command is empty"),
            ("[notify]\ncommand = [\"\"]\n", "names an empty program"),
            (
                "[notify]\nopen = []\ncommand = [\"x\"]\n",
                "[notify] open is empty",
            ),
            ("[notify]\nhook_timeout_secs = 0\n", "give 1 to 300"),
            ("[notify]\nhook_timeout_secs = 301\n", "give 1 to 300"),
            ("[notify]\ndesktop = false\n", "would tell no one"),
            ("[notify]\ncomand = [\"x\"]\n", "unknown field `comand`"),
            // A shell string is not an argv.
            ("[notify]\ncommand = \"curl x | sh\"\n", "invalid type"),
        ] {
            let e = NotifyConfig::parse(text, open()).unwrap_err();
            assert!(e.contains(says), "{text:?}: {e}");
        }
    }

    #[test]
    fn the_default_open_runs_this_instances_console() {
        assert_eq!(
            default_open(Path::new("/opt/g/gatehouse"), Some(Path::new("/d"))),
            [
                "x-terminal-emulator",
                "-e",
                "/opt/g/gatehouse",
                "--data-dir",
                "/d",
                "ui"
            ]
        );
        assert_eq!(
            default_open(Path::new("/opt/g/gatehouse"), None),
            ["x-terminal-emulator", "-e", "/opt/g/gatehouse", "ui"]
        );
    }

    /// Windows: no desktop notifications, so a hook is required and `desktop = true` refused;
    /// the positive control is a table with a hook.
    #[cfg(windows)]
    #[test]
    fn on_windows_the_hook_is_the_notifier() {
        for (text, says) in [
            (
                "",
                "no [notify] command: desktop notifications are not built on Windows",
            ),
            (
                "[notify]\ndesktop = true\ncommand = [\"x\"]\n",
                "[notify] desktop = true: desktop notifications are not built on Windows",
            ),
        ] {
            let e = NotifyConfig::parse(text, open()).unwrap_err();
            assert!(e.contains(says), "{text:?}: {e}");
        }
        let c = NotifyConfig::parse("[notify]\ncommand = [\"hook.exe\"]\n", open()).unwrap();
        assert!(!c.desktop);
        assert_eq!(c.command, Some(vec!["hook.exe".into()]));
    }
}
