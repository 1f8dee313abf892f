//! What the broker tells the exec-helper at start, and who it runs as.

use ipc_schema::tier::ConfinementTier;
use sandbox::helper_args::HelperArgs;
use sandbox::linux::command::identity;
use std::path::PathBuf;

/// The helper's own `--name value` options.
pub const OPTIONS: &[&str] = &["--run-as", "--protect"];

/// Settings every command's sandbox gets.
pub struct Config {
    /// The command's `HOME` (the run-as user's home, as a fresh tmpfs unless granted).
    pub home: PathBuf,
    /// Paths masked in, and never granted to, any command (`--protect`, repeatable): the
    /// broker's config, data and runtime directories.
    pub protect: Vec<PathBuf>,
    pub allow_degraded: bool,
    /// The confinement every command runs under: the one this helper's lockdown chose.
    pub tier: ConfinementTier,
}

impl Config {
    /// Reads the options and, when started as root, becomes the unprivileged user commands run
    /// as (`--run-as UID:GID`, default nobody): a sandbox maps its creator's uid, and uid 0 owns
    /// every root-owned file of the host.
    pub fn from_args(args: &HelperArgs) -> Result<Config, String> {
        let run_as = match args.all("--run-as").last() {
            None => None,
            Some(v) => Some(parse_ids(&v.to_string_lossy())?),
        };
        let euid = nix::unistd::geteuid().as_raw();
        if euid == 0 {
            let (uid, gid) = run_as.unwrap_or(identity::NOBODY);
            identity::become_user(uid, gid)
                .map_err(|e| format!("cannot become uid {uid} gid {gid}: {e}"))?;
        } else if let Some((uid, _)) = run_as {
            if uid != euid {
                return Err(format!(
                    "--run-as {uid} needs root; this helper runs as uid {euid}"
                ));
            }
        }
        Ok(Config {
            home: identity::home_of(nix::unistd::geteuid().as_raw()),
            protect: args.absolute_paths("--protect")?,
            allow_degraded: args.allow_degraded,
            tier: ConfinementTier::Namespaces,
        })
    }
}

/// `UID:GID`, both non-zero.
fn parse_ids(s: &str) -> Result<(u32, u32), String> {
    let bad = || format!("--run-as takes UID:GID (both numbers above 0), not {s:?}");
    let (u, g) = s.split_once(':').ok_or_else(bad)?;
    let u: u32 = u.parse().map_err(|_| bad())?;
    let g: u32 = g.parse().map_err(|_| bad())?;
    if u == 0 || g == 0 {
        return Err(bad());
    }
    Ok((u, g))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_as_is_two_nonzero_numbers() {
        assert_eq!(parse_ids("1000:1000"), Ok((1000, 1000)));
        assert!(parse_ids("0:0").is_err());
        assert!(parse_ids("1000").is_err());
        assert!(parse_ids("alice:alice").is_err());
    }
}
