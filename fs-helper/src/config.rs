//! The helper's command line (what the broker grants), checked and opened before lockdown.
//!
//! ```text
//! --grant ID:CAPS:FLAGS:PATH     repeatable
//!     ID     [A-Za-z0-9_.-]{1,64}, unique
//!     CAPS   letters from `rwed` (read, write, edit, delete), at least one
//!     FLAGS  `recursive` or `flat`, optionally `,confirmed` (needed for `/`, a home
//!            directory, or a directory that contains one)
//!     PATH   absolute, canonical (no `.`, `..`, `//`, trailing `/`, or link on the way)
//! --include ID:GLOB / --exclude ID:GLOB    repeatable; globs relative to the grant root
//! --checkpoint-dir PATH          required; an existing directory only the helper uses
//! --protect PATH                 repeatable; gatehouse's own directories (config, data, runtime)
//! ```

use crate::grant::{Grant, Grants};
use crate::kernel::{self, OpenMode};
use crate::protect::{components, Protector};
use ipc_schema::fs::{Caps, GrantId};
use rustix::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use rustix::fs::{Mode, OFlags};
use sandbox::helper_args::HelperArgs;
use std::ffi::OsStr;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::PathBuf;

/// The options the helper accepts besides the common ones.
pub const OPTIONS: &[&str] = &[
    "--grant",
    "--include",
    "--exclude",
    "--checkpoint-dir",
    "--protect",
    // Test builds only: `--test-resolver walk` uses the fallback walk even where openat2 works.
    #[cfg(feature = "test-hooks")]
    "--test-resolver",
];

/// A grant as written on the command line.
#[derive(Debug, Clone, PartialEq)]
pub struct GrantSpec {
    pub id: GrantId,
    pub caps: Caps,
    pub recursive: bool,
    pub confirmed: bool,
    pub root: Vec<u8>,
    pub include: Vec<String>,
    pub exclude: Vec<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub grants: Vec<GrantSpec>,
    pub checkpoint_dir: Vec<u8>,
    pub protect: Vec<Vec<u8>>,
    /// `--test-resolver walk` (test builds only).
    pub force_walk: bool,
}

/// Everything opened: the roots and the checkpoint dir, held as `O_PATH` descriptors.
pub struct Opened {
    pub grants: Grants,
    pub protector: Protector,
    pub checkpoint_fd: OwnedFd,
    pub mode: OpenMode,
    pub mode_note: Option<String>,
    pub profile: sandbox::FsProfile,
    /// Who the helper runs as (read now: seccomp allows no id calls later).
    pub euid: u32,
    pub egid: u32,
}

impl Opened {
    /// The descriptors lockdown must keep open.
    pub fn fds(&self) -> Vec<RawFd> {
        let mut v: Vec<RawFd> = self
            .grants
            .0
            .iter()
            .map(|g| g.root_fd.as_raw_fd())
            .collect();
        v.push(self.checkpoint_fd.as_raw_fd());
        v
    }
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

fn parse_grant(v: &[u8]) -> Result<GrantSpec, String> {
    let shown = String::from_utf8_lossy(v);
    let mut parts = v.splitn(4, |&b| b == b':');
    let (Some(id), Some(caps), Some(flags), Some(root)) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(format!("--grant {shown:?}: expected ID:CAPS:FLAGS:PATH"));
    };
    let id = std::str::from_utf8(id).map_err(|_| format!("--grant {shown:?}: bad id"))?;
    if id.is_empty()
        || id.len() > 64
        || !id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b))
    {
        return Err(format!(
            "--grant {shown:?}: the id must be 1-64 of A-Z a-z 0-9 _ . -"
        ));
    }
    let mut c = Caps::default();
    for &b in caps {
        let slot = match b {
            b'r' => &mut c.read,
            b'w' => &mut c.write,
            b'e' => &mut c.edit,
            b'd' => &mut c.delete,
            _ => {
                return Err(format!(
                    "--grant {shown:?}: capabilities are letters of `rwed`"
                ))
            }
        };
        if *slot {
            return Err(format!(
                "--grant {shown:?}: capability {} given twice",
                b as char
            ));
        }
        *slot = true;
    }
    if caps.is_empty() {
        return Err(format!("--grant {shown:?}: no capabilities"));
    }
    let (mut recursive, mut flat, mut confirmed) = (false, false, false);
    for f in flags.split(|&b| b == b',') {
        match f {
            b"recursive" => recursive = true,
            b"flat" => flat = true,
            b"confirmed" => confirmed = true,
            other => {
                return Err(format!(
                    "--grant {shown:?}: unknown flag {:?} (recursive, flat, confirmed)",
                    String::from_utf8_lossy(other)
                ))
            }
        }
    }
    if recursive == flat {
        return Err(format!(
            "--grant {shown:?}: say exactly one of `recursive` or `flat`"
        ));
    }
    canonical_path(root, &format!("grant {id}: the root"))?;
    Ok(GrantSpec {
        id: GrantId(id.to_string()),
        caps: c,
        recursive,
        confirmed,
        root: root.to_vec(),
        include: Vec::new(),
        exclude: Vec::new(),
    })
}

impl Config {
    pub fn from_args(args: &HelperArgs) -> Result<Config, String> {
        let mut grants: Vec<GrantSpec> = Vec::new();
        for v in args.all("--grant") {
            let g = parse_grant(v.as_bytes())?;
            if grants.iter().any(|o| o.id == g.id) {
                return Err(format!("grant id {} is given twice", g.id));
            }
            grants.push(g);
        }
        for (opt, is_include) in [("--include", true), ("--exclude", false)] {
            for v in args.all(opt) {
                let s = v
                    .to_str()
                    .ok_or_else(|| format!("{opt}: globs must be UTF-8"))?;
                let (id, glob) = s
                    .split_once(':')
                    .ok_or_else(|| format!("{opt} {s:?}: expected ID:GLOB"))?;
                crate::grant::glob(glob).map_err(|e| format!("{opt} {s:?}: {e}"))?;
                let g = grants
                    .iter_mut()
                    .find(|g| g.id.0 == id)
                    .ok_or_else(|| format!("{opt} {s:?}: no grant {id}"))?;
                let list = if is_include {
                    &mut g.include
                } else {
                    &mut g.exclude
                };
                list.push(glob.to_string());
            }
        }
        let mut dirs = args.all("--checkpoint-dir");
        let checkpoint_dir = match (dirs.next(), dirs.next()) {
            (Some(d), None) => d.clone().into_vec(),
            (None, _) => return Err("--checkpoint-dir is required".into()),
            _ => return Err("--checkpoint-dir is given twice".into()),
        };
        canonical_path(&checkpoint_dir, "--checkpoint-dir")?;
        let mut protect = Vec::new();
        for p in args.all("--protect") {
            let p = p.clone().into_vec();
            canonical_path(&p, "--protect")?;
            protect.push(p);
        }
        let force_walk = match args.all("--test-resolver").next().map(|v| v.as_bytes()) {
            None => false,
            Some(b"walk") => true,
            Some(_) => return Err("--test-resolver takes `walk`".into()),
        };
        Ok(Config {
            grants,
            checkpoint_dir,
            protect,
            force_walk,
        })
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
    pub fn open(&self) -> Result<Opened, String> {
        let slash = rustix::fs::open("/", OFlags::PATH | OFlags::DIRECTORY, Mode::empty())
            .map_err(|e| format!("opening / failed: {e}"))?;
        let (mode, mode_note) = match kernel::probe_openat2(slash.as_fd()) {
            Ok(()) if self.force_walk => (
                OpenMode::ComponentWalk,
                Some("forced by --test-resolver walk (test build)".into()),
            ),
            Ok(()) => (OpenMode::Openat2, None),
            Err(why) => (OpenMode::ComponentWalk, Some(why)),
        };
        let open_dir = |p: &[u8], what: &str| -> Result<OwnedFd, String> {
            let comps: Vec<Vec<u8>> = components(p).into_iter().map(<[u8]>::to_vec).collect();
            kernel::open_beneath(
                mode,
                slash.as_fd(),
                &comps,
                OFlags::PATH | OFlags::DIRECTORY,
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
        let checkpoint_fd = open_dir(&self.checkpoint_dir, "the checkpoint dir")?;
        let mut dirs = self.protect.clone();
        dirs.push(self.checkpoint_dir.clone());
        let protector = Protector::new(dirs);
        let home = Self::home();
        let mut grants = Vec::new();
        let mut profile = sandbox::FsProfile::default();
        for g in &self.grants {
            let what = format!("grant {}: the root", g.id);
            let shown = String::from_utf8_lossy(&g.root);
            if !g.confirmed && Self::is_broad(&g.root, home.as_deref()) {
                return Err(format!(
                    "{what} {shown} is / or a home directory (or contains one); such a grant needs the `confirmed` flag"
                ));
            }
            let writes = g.caps.write || g.caps.edit || g.caps.delete;
            if let Some(p) = protector.refuses(&g.root, writes) {
                return Err(format!(
                    "{what} {shown} is protected ({}: {})",
                    p.why, p.place
                ));
            }
            let fd = open_dir(&g.root, &what)?;
            let grant = Grant::new(
                g.id.clone(),
                g.root.clone(),
                fd,
                g.caps,
                g.recursive,
                g.include.clone(),
                g.exclude.clone(),
            )?;
            let path = PathBuf::from(OsStr::from_bytes(&g.root));
            if grant.writes() {
                profile.read_write.push(path);
            } else {
                profile.read_only.push(path);
            }
            grants.push(grant);
        }
        profile
            .read_write
            .push(PathBuf::from(OsStr::from_bytes(&self.checkpoint_dir)));
        Ok(Opened {
            grants: Grants(grants),
            protector,
            checkpoint_fd,
            mode,
            mode_note,
            profile,
            euid: nix::unistd::geteuid().as_raw(),
            egid: nix::unistd::getegid().as_raw(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: &[&str]) -> HelperArgs {
        HelperArgs::parse(v.iter().map(|s| s.into()), OPTIONS).unwrap()
    }

    #[test]
    fn grant_specs() {
        let g = parse_grant(b"src:rwe:recursive:/w/a:b").unwrap();
        assert_eq!(g.id.0, "src");
        assert_eq!(g.root, b"/w/a:b");
        assert!(g.caps.read && g.caps.write && g.caps.edit && !g.caps.delete);
        assert!(g.recursive && !g.confirmed);
        for (bad, why) in [
            ("src:r:recursive", "expected ID:CAPS:FLAGS:PATH"),
            ("s c:r:flat:/w", "the id must be"),
            ("s:rx:flat:/w", "letters of `rwed`"),
            ("s:rr:flat:/w", "given twice"),
            ("s::flat:/w", "no capabilities"),
            ("s:r:flat,recursive:/w", "exactly one"),
            ("s:r:deep:/w", "unknown flag"),
            ("s:r:flat:w", "not an absolute path"),
            ("s:r:flat:/w/../etc", "not canonical"),
            ("s:r:flat:/w/", "not canonical"),
        ] {
            let e = parse_grant(bad.as_bytes()).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn config_from_args() {
        let c = Config::from_args(&args(&[
            "--grant",
            "a:r:flat:/w",
            "--exclude",
            "a:*.key",
            "--checkpoint-dir",
            "/d/ck",
            "--protect",
            "/d",
        ]))
        .unwrap();
        assert_eq!(c.grants[0].exclude, vec!["*.key".to_string()]);
        let e = Config::from_args(&args(&["--grant", "a:r:flat:/w"])).unwrap_err();
        assert_eq!(e, "--checkpoint-dir is required");
        let e = Config::from_args(&args(&[
            "--grant",
            "a:r:flat:/w",
            "--grant",
            "a:r:flat:/x",
            "--checkpoint-dir",
            "/d",
        ]))
        .unwrap_err();
        assert_eq!(e, "grant id a is given twice");
        let e =
            Config::from_args(&args(&["--include", "b:*", "--checkpoint-dir", "/d"])).unwrap_err();
        assert!(e.contains("no grant b"), "{e}");
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
