//! `gatehouse setup apparmor`: the AppArmor profile that lets gatehouse's exec helper create
//! user namespaces where Ubuntu restricts them (`kernel.apparmor_restrict_unprivileged_userns=1`,
//! the default from 23.10 on). Without `--yes` it only prints what it would write and run.
//!
//! The profile is `unconfined` apart from the `userns` permission: it lifts Ubuntu's
//! restriction for this one binary (attached by its canonical path) and confines nothing else;
//! the exec helper's confinement is its own lockdown (docs/exec-helper.md).

use crate::{Global, EXIT_FAILURE};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Where the profile goes: the directory AppArmor loads at boot.
pub const PROFILE_FILE: &str = "/etc/apparmor.d/gatehouse";
/// Present when AppArmor is enabled in the running kernel.
pub const APPARMOR_FS: &str = "/sys/kernel/security/apparmor";

#[derive(clap::Subcommand)]
pub enum SetupCmd {
    /// Print (and with --yes, as root, write and load) an AppArmor profile that allows the exec
    /// helper to create user namespaces where Ubuntu's AppArmor restriction refuses them.
    Apparmor(AppArmorArgs),
}

#[derive(clap::Args)]
pub struct AppArmorArgs {
    /// Write /etc/apparmor.d/gatehouse and load it with `apparmor_parser -r` (needs root and an
    /// enabled AppArmor). Without it, nothing is written: the profile is printed.
    #[arg(long)]
    yes: bool,
    /// Print only; the default without --yes.
    #[arg(long, conflicts_with = "yes")]
    dry_run: bool,
    /// The directory of gatehouse's helper binaries (default: this binary's directory, which is
    /// where the broker finds them).
    #[arg(long, value_name = "DIR")]
    helper_dir: Option<PathBuf>,
}

/// The binaries that create user namespaces, by profile name: the exec helper (its own network
/// isolation and every command's sandbox). The other helpers create none.
const NEEDS_USERNS: &[(&str, &str)] = &[("gatehouse-exec-helper", "exec-helper")];

/// Why the profile cannot be made or installed.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum SetupError {
    #[error("{0}: not found ({1}); pass --helper-dir DIR where gatehouse's helpers are installed")]
    Missing(PathBuf, String),
    #[error("{0}: the path has a character AppArmor would read as a pattern or cannot quote (one of * ? [ ] {{ }} ^ \" , or a control character); install gatehouse under a plain path")]
    Unquotable(PathBuf),
    #[error("AppArmor is not enabled on this kernel ({APPARMOR_FS} is missing): there is no restriction to lift and nothing to load the profile into; nothing was written")]
    NoAppArmor,
    #[error("writing {PROFILE_FILE} and loading it need root: run `sudo gatehouse setup apparmor --yes`; nothing was written")]
    NotRoot,
}

/// The profile text for the binaries at their canonical `paths` (profile name, path).
pub fn profile_text(paths: &[(&str, PathBuf)]) -> Result<String, SetupError> {
    let mut out = String::from(
        "# Written by `gatehouse setup apparmor`. Lets gatehouse's exec helper create the user\n\
         # namespaces its sandbox needs where kernel.apparmor_restrict_unprivileged_userns=1.\n\
         # Nothing else is allowed or confined by it.\n\
         abi <abi/4.0>,\n\
         include <tunables/global>\n",
    );
    for (name, path) in paths {
        let s = path
            .to_str()
            .ok_or_else(|| SetupError::Unquotable(path.clone()))?;
        if s.chars()
            .any(|c| c.is_control() || "*?[]{}^\",".contains(c))
        {
            return Err(SetupError::Unquotable(path.clone()));
        }
        out.push_str(&format!(
            "\nprofile {name} \"{s}\" flags=(unconfined) {{\n  userns,\n\n  # Site-specific additions and overrides. See local/README for details.\n  include if exists <local/{name}>\n}}\n"
        ));
    }
    Ok(out)
}

/// Whether the profile may be installed here: AppArmor first (without it, root does not help).
pub fn may_install(apparmor_enabled: bool, euid: u32) -> Result<(), SetupError> {
    if !apparmor_enabled {
        return Err(SetupError::NoAppArmor);
    }
    if euid != 0 {
        return Err(SetupError::NotRoot);
    }
    Ok(())
}

fn resolve(dir: &Path) -> Result<Vec<(&'static str, PathBuf)>, SetupError> {
    NEEDS_USERNS
        .iter()
        .map(|(name, bin)| {
            let p = dir.join(bin);
            std::fs::canonicalize(&p)
                .map(|c| (*name, c))
                .map_err(|e| SetupError::Missing(p, e.to_string()))
        })
        .collect()
}

pub fn run(g: &Global, cmd: SetupCmd) -> ExitCode {
    let SetupCmd::Apparmor(a) = cmd;
    let fail = |e: &dyn std::fmt::Display| {
        eprintln!("gatehouse setup apparmor: {e}");
        ExitCode::from(EXIT_FAILURE)
    };
    let dir = match a.helper_dir.clone().or_else(|| {
        std::env::current_exe()
            .ok()
            .and_then(|e| e.parent().map(PathBuf::from))
    }) {
        Some(d) => d,
        None => return fail(&"cannot find the directory of this binary; pass --helper-dir"),
    };
    let text = match resolve(&dir).and_then(|p| profile_text(&p)) {
        Ok(t) => t,
        Err(e) => return fail(&e),
    };
    let load = format!("apparmor_parser -r {PROFILE_FILE}");
    if !a.yes {
        if g.json {
            let v = serde_json::json!({ "file": PROFILE_FILE, "profile": text, "load": load, "written": false });
            println!("{v}");
        } else {
            println!("# would write {PROFILE_FILE} (run with --yes as root to write it and load it with `{load}`):");
            print!("{text}");
        }
        return ExitCode::SUCCESS;
    }
    if let Err(e) = may_install(
        Path::new(APPARMOR_FS).exists(),
        nix::unistd::geteuid().as_raw(),
    ) {
        return fail(&e);
    }
    let tmp = format!("{PROFILE_FILE}.gatehouse-new");
    if let Err(e) = std::fs::write(&tmp, &text).and_then(|()| std::fs::rename(&tmp, PROFILE_FILE)) {
        let _ = std::fs::remove_file(&tmp);
        return fail(&format!("writing {PROFILE_FILE}: {e}"));
    }
    println!("wrote {PROFILE_FILE}");
    match std::process::Command::new("apparmor_parser")
        .args(["-r", PROFILE_FILE])
        .status()
    {
        Ok(s) if s.success() => {
            println!("loaded it: {load}");
            ExitCode::SUCCESS
        }
        Ok(s) => fail(&format!(
            "`{load}` failed ({s}); the file is written, fix it and run that command"
        )),
        Err(e) => fail(&format!(
            "cannot run `{load}` ({e}); the file is written, run that command"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profile_is_exact() {
        let t = profile_text(&[(
            "gatehouse-exec-helper",
            PathBuf::from("/usr/lib/gatehouse/exec-helper"),
        )])
        .unwrap();
        assert_eq!(
            t,
            "# Written by `gatehouse setup apparmor`. Lets gatehouse's exec helper create the user\n\
             # namespaces its sandbox needs where kernel.apparmor_restrict_unprivileged_userns=1.\n\
             # Nothing else is allowed or confined by it.\n\
             abi <abi/4.0>,\n\
             include <tunables/global>\n\
             \n\
             profile gatehouse-exec-helper \"/usr/lib/gatehouse/exec-helper\" flags=(unconfined) {\n\
             \x20 userns,\n\
             \n\
             \x20 # Site-specific additions and overrides. See local/README for details.\n\
             \x20 include if exists <local/gatehouse-exec-helper>\n\
             }\n"
        );
    }

    #[test]
    fn a_path_that_would_be_a_pattern_is_refused() {
        for bad in [
            "/opt/g*/exec-helper",
            "/opt/a\"b/exec-helper",
            "/opt/x\n/exec-helper",
            "/o/{a,b}/e",
        ] {
            assert_eq!(
                profile_text(&[("p", PathBuf::from(bad))]),
                Err(SetupError::Unquotable(PathBuf::from(bad))),
                "{bad:?}"
            );
        }
        // Spaces are quoted, not refused.
        assert!(
            profile_text(&[("p", PathBuf::from("/opt/my apps/exec-helper"))])
                .unwrap()
                .contains("profile p \"/opt/my apps/exec-helper\" flags=(unconfined)")
        );
    }

    #[test]
    fn install_needs_apparmor_then_root() {
        assert_eq!(may_install(false, 0), Err(SetupError::NoAppArmor));
        assert_eq!(may_install(false, 1000), Err(SetupError::NoAppArmor));
        assert_eq!(may_install(true, 1000), Err(SetupError::NotRoot));
        assert_eq!(may_install(true, 0), Ok(()));
    }
}
