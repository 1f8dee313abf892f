//! What the broker grants ([`FsHelperConfig`], the one `--config` argument), checked again and
//! opened before lockdown.

use crate::checkpoint::CheckpointStore;
use crate::grant::{Grant, Grants};
use crate::kernel::{self, OpenMode};
use crate::ops::Fs;
use crate::protect::{components, Protector};
use ipc_schema::fs::FsHelperConfig;
use rustix::fd::{AsFd, OwnedFd};
use rustix::fs::{Mode, OFlags};
use sandbox::helper_args::HelperArgs;
use std::ffi::OsStr;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::PathBuf;

/// The options the helper accepts besides the common ones.
pub const OPTIONS: &[&str] = &[
    "--config",
    // Test builds only: `--test-resolver walk` uses the fallback walk even where openat2 works.
    #[cfg(feature = "test-hooks")]
    "--test-resolver",
];

#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub fs: FsHelperConfig,
    /// `--test-resolver walk` (test builds only).
    pub force_walk: bool,
}

fn canonical_path(p: &[u8], what: &str) -> Result<(), String> {
    let shown = String::from_utf8_lossy(p);
    if p.first() != Some(&b'/') {
        return Err(format!("{what} {shown:?} is not an absolute path"));
    }
    if p == b"/" {
        return Ok(());
    }
    let parts: Vec<&[u8]> = p[1..].split(|&b| b == b'/').collect();
    if parts
        .iter()
        .any(|c| c.is_empty() || *c == b"." || *c == b".." || c.contains(&0))
    {
        return Err(format!(
            "{what} {shown:?} is not canonical (no `.`, `..`, `//` or trailing `/`)"
        ));
    }
    Ok(())
}

/// What can be checked without the system: ids, capabilities and the shape of every path.
fn check(c: &FsHelperConfig) -> Result<(), String> {
    for (i, g) in c.grants.iter().enumerate() {
        let id = &g.id.0;
        ipc_schema::grant_glob::check_config(g)?;
        if c.grants[..i].iter().any(|o| o.id == g.id) {
            return Err(format!("grant id {id} is given twice"));
        }
        canonical_path(&g.root, &format!("grant {id}: the root"))?;
    }
    canonical_path(&c.checkpoint_dir, "the checkpoint dir")?;
    for p in &c.protect {
        canonical_path(p, "a protected dir")?;
    }
    Ok(())
}

impl Config {
    pub fn from_args(args: &HelperArgs) -> Result<Config, String> {
        let mut given = args.all("--config");
        let fs = match (given.next(), given.next()) {
            (Some(v), None) => {
                let v = v.to_str().ok_or("--config is not UTF-8")?;
                ipc_schema::codec::from_arg(v).map_err(|e| format!("--config: {e}"))?
            }
            (None, _) => return Err("--config is required".into()),
            _ => return Err("--config is given twice".into()),
        };
        check(&fs)?;
        let force_walk = match args.all("--test-resolver").next().map(|v| v.as_bytes()) {
            None => false,
            Some(b"walk") => true,
            Some(_) => return Err("--test-resolver takes `walk`".into()),
        };
        Ok(Config { fs, force_walk })
    }

    /// The user's home directory (from the password database; the environment is empty).
    fn home() -> Option<Vec<u8>> {
        let uid = nix::unistd::geteuid();
        nix::unistd::User::from_uid(uid)
            .ok()
            .flatten()
            .map(|u| u.dir.into_os_string().into_vec())
    }

    /// A root that is `/`, a home directory, or contains the user's home.
    fn is_broad(root: &[u8], home: Option<&[u8]>) -> bool {
        let r = components(root);
        if r.is_empty() || matches!(r.as_slice(), [b"root"] | [b"home", _] | [b"Users", _]) {
            return true;
        }
        home.is_some_and(|h| {
            let h = components(h);
            h.len() >= r.len() && h[..r.len()] == r[..]
        })
    }

    /// Opens every root and the checkpoint dir (links refused on the way: a root that is, or
    /// passes through, a link is refused), and checks what can only be checked on the system.
    /// Returns the helper's state, its roots held as `O_PATH` descriptors, and the Landlock
    /// rules for them.
    pub fn open(self) -> Result<(Fs, sandbox::FsProfile), String> {
        let slash = rustix::fs::open("/", kernel::PATH_ONLY | OFlags::DIRECTORY, Mode::empty())
            .map_err(|e| format!("opening / failed: {e}"))?;
        let (mode, mode_note) = match kernel::probe_openat2(slash.as_fd()) {
            Ok(_) if self.force_walk => (
                OpenMode::ComponentWalk,
                Some("forced by --test-resolver walk (test build)".into()),
            ),
            Ok(mode) => (mode, None),
            Err(why) => (OpenMode::ComponentWalk, Some(why)),
        };
        let open_dir = |p: &[u8], what: &str| -> Result<OwnedFd, String> {
            let comps: Vec<Vec<u8>> = components(p).into_iter().map(<[u8]>::to_vec).collect();
            kernel::open_beneath(
                mode,
                slash.as_fd(),
                &comps,
                kernel::PATH_ONLY | OFlags::DIRECTORY,
                Mode::empty(),
            )
            .map_err(|e| {
                let shown = String::from_utf8_lossy(p);
                match e {
                    rustix::io::Errno::LOOP => format!(
                        "{what} {shown} is, or passes through, a symbolic link; name the real directory"
                    ),
                    rustix::io::Errno::NOTDIR => format!("{what} {shown} is not a directory"),
                    e => format!("{what} {shown}: {e}"),
                }
            })
        };
        let FsHelperConfig {
            grants: given,
            checkpoint_dir,
            protect: mut dirs,
        } = self.fs;
        let checkpoint_fd = open_dir(&checkpoint_dir, "the checkpoint dir")?;
        dirs.push(checkpoint_dir.clone());
        let protector = Protector::new(dirs);
        let home = Self::home();
        let mut grants = Vec::new();
        let mut profile = sandbox::FsProfile::default();
        for g in given {
            let what = format!("grant {}: the root", g.id);
            let shown = String::from_utf8_lossy(&g.root);
            if !g.confirmed && Self::is_broad(&g.root, home.as_deref()) {
                return Err(format!(
                    "{what} {shown} is / or a home directory (or contains one); such a grant needs the `confirmed` flag"
                ));
            }
            // Read-only grants get a read-only Landlock rule.
            let writes = g.caps.write || g.caps.edit || g.caps.delete;
            if let Some(p) = protector.refuses(&g.root, writes) {
                return Err(format!(
                    "{what} {shown} is protected ({}: {})",
                    p.why, p.place
                ));
            }
            let fd = open_dir(&g.root, &what)?;
            let path = PathBuf::from(OsStr::from_bytes(&g.root));
            match writes {
                true => profile.read_write.push(path),
                false => profile.read_only.push(path),
            }
            grants.push(Grant::new(g, fd)?);
        }
        profile
            .read_write
            .push(PathBuf::from(OsStr::from_bytes(&checkpoint_dir)));
        let fs = Fs {
            store: CheckpointStore::new(checkpoint_fd, mode),
            grants: Grants(grants),
            protector,
            mode,
            mode_note,
            euid: nix::unistd::geteuid().as_raw(),
            egid: nix::unistd::getegid().as_raw(),
        };
        Ok((fs, profile))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipc_schema::fs::{Caps, GrantConfig, GrantId};

    fn args(v: &[&str]) -> HelperArgs {
        HelperArgs::parse(v.iter().map(|s| s.into()), OPTIONS).unwrap()
    }

    fn grant(id: &str, caps: Caps, root: &str) -> GrantConfig {
        GrantConfig {
            id: GrantId(id.into()),
            root: root.as_bytes().to_vec(),
            caps,
            recursive: false,
            confirmed: false,
            include: vec![],
            exclude: vec!["*.key".into()],
        }
    }

    fn config(grants: Vec<GrantConfig>) -> FsHelperConfig {
        FsHelperConfig {
            grants,
            checkpoint_dir: b"/d/ck".to_vec(),
            protect: vec![b"/d".to_vec()],
        }
    }

    fn from(c: &FsHelperConfig) -> Result<Config, String> {
        let arg = ipc_schema::codec::to_arg(c).unwrap();
        Config::from_args(&args(&["--config", &arg]))
    }

    const R: Caps = Caps {
        read: true,
        write: false,
        edit: false,
        delete: false,
    };

    #[test]
    fn the_config_is_checked_on_receipt() {
        let good = config(vec![grant("src", R, "/w/a:b")]);
        assert_eq!(from(&good).unwrap().fs, good);
        for (bad, why) in [
            (grant("s c", R, "/w"), "the id must be"),
            (grant("", R, "/w"), "the id must be"),
            (grant(&"x".repeat(65), R, "/w"), "the id must be"),
            (
                grant("s", Caps::default(), "/w"),
                "grant s: no capabilities",
            ),
            (grant("s", R, "w"), "not an absolute path"),
            (grant("s", R, "/w/../etc"), "not canonical"),
            (grant("s", R, "/w/"), "not canonical"),
            (grant("s", R, "/w//x"), "not canonical"),
            (grant("s", R, "/w/\0"), "not canonical"),
        ] {
            let bad = config(vec![bad]);
            let e = from(&bad).unwrap_err();
            assert!(e.contains(why), "{bad:?}: {e}");
        }
        let twice = config(vec![grant("a", R, "/w"), grant("a", R, "/x")]);
        assert_eq!(from(&twice).unwrap_err(), "grant id a is given twice");
        let mut c = config(vec![]);
        c.checkpoint_dir = b"ck".to_vec();
        assert!(from(&c)
            .unwrap_err()
            .contains("the checkpoint dir \"ck\" is not an absolute path"));
        let mut c = config(vec![]);
        c.protect.push(b"/d/./x".to_vec());
        assert!(from(&c).unwrap_err().contains("not canonical"));
    }

    #[test]
    fn a_bad_encoding_is_refused_with_a_clear_message() {
        assert_eq!(
            Config::from_args(&args(&[])).unwrap_err(),
            "--config is required"
        );
        let arg = ipc_schema::codec::to_arg(&config(vec![])).unwrap();
        let e = Config::from_args(&args(&["--config", &arg, "--config", &arg])).unwrap_err();
        assert_eq!(e, "--config is given twice");
        for bad in ["zz", "0", "", &arg[..arg.len() - 2], &format!("{arg}00")] {
            let e = Config::from_args(&args(&["--config", bad])).unwrap_err();
            assert!(e.starts_with("--config: "), "{bad}: {e}");
        }
    }

    #[test]
    fn broad_roots() {
        let home = Some(&b"/home/u"[..]);
        for r in ["/", "/home", "/home/u", "/home/other", "/root", "/Users/x"] {
            assert!(Config::is_broad(r.as_bytes(), home), "{r}");
        }
        for r in ["/home/u/proj", "/srv/data", "/tmp/x"] {
            assert!(!Config::is_broad(r.as_bytes(), home), "{r}");
        }
    }
}
