//! Where gatehouse keeps its config, data and sockets.

#[cfg(unix)]
use std::fs;
use std::io;
#[cfg(unix)]
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The three directories of one gatehouse instance.
#[derive(Debug, Clone)]
pub struct Dirs {
    /// `config.toml` and the policy (`$XDG_CONFIG_HOME/gatehouse`).
    pub config: PathBuf,
    /// Audit log, ledger, checkpoints (`$XDG_DATA_HOME/gatehouse`, 0700).
    pub data: PathBuf,
    /// Sockets and the broker lock (`$XDG_RUNTIME_DIR/gatehouse`, 0700). On Windows the
    /// endpoints are named pipes, named after this directory (see [`Dirs::ui_socket`]).
    pub runtime: PathBuf,
    /// Each agent's login and state under `gatehouse run` (see [`Dirs::agents`]).
    agents: PathBuf,
}

/// Root's agents' homes (see [`Dirs::from_env`]).
pub const ROOT_AGENTS: &str = "/var/lib/gatehouse-agents";

impl Dirs {
    /// A private instance under one directory (tests, `demo`).
    pub fn under(root: &Path) -> Dirs {
        Dirs {
            config: root.join("config"),
            data: root.join("data"),
            runtime: root.join("run"),
            agents: root.join("agents"),
        }
    }

    /// A front's instance from its `--data-dir`: the directory made absolute (what it passes on
    /// when it starts the broker) and its dirs; without one, the user's instance.
    pub fn for_data_dir(data_dir: Option<&Path>) -> Result<(Option<PathBuf>, Dirs), String> {
        match data_dir {
            None => Ok((None, Dirs::from_env()?)),
            Some(d) => {
                let d = std::path::absolute(d).map_err(|e| format!("--data-dir: {e}"))?;
                let dirs = Dirs::under(&d);
                Ok((Some(d), dirs))
            }
        }
    }

    /// The user's instance on Windows: config in `%APPDATA%\gatehouse` (roams with the user),
    /// data and the runtime directory (the lock) in `%LOCALAPPDATA%\gatehouse\{data,run}`
    /// (this machine's), agents' state beside it; the front endpoints are pipes named after the
    /// runtime directory.
    #[cfg(windows)]
    pub fn from_env() -> Result<Dirs, String> {
        let var = |name: &str| match std::env::var_os(name) {
            Some(v) if Path::new(&v).is_absolute() => Ok(PathBuf::from(v)),
            _ => Err(format!("{name} is not set to an absolute path")),
        };
        let local = var("LOCALAPPDATA")?;
        Ok(Dirs {
            config: var("APPDATA")?.join("gatehouse"),
            data: local.join("gatehouse").join("data"),
            runtime: local.join("gatehouse").join("run"),
            agents: local.join("gatehouse-agents"),
        })
    }

    /// The user's instance, from the XDG variables (with their documented fallbacks).
    #[cfg(not(windows))]
    pub fn from_env() -> Result<Dirs, String> {
        let home = std::env::var_os("HOME").map(PathBuf::from);
        let xdg = |var: &str, fallback: &str| -> Result<PathBuf, String> {
            match std::env::var_os(var) {
                Some(v) if Path::new(&v).is_absolute() => Ok(PathBuf::from(v)),
                _ => home
                    .as_ref()
                    .map(|h| h.join(fallback))
                    .ok_or_else(|| format!("neither {var} nor HOME is set")),
            }
        };
        let uid = current_uid();
        let runtime = match std::env::var_os("XDG_RUNTIME_DIR") {
            Some(v) if Path::new(&v).is_absolute() => PathBuf::from(v).join("gatehouse"),
            _ => std::env::temp_dir().join(format!("gatehouse-{uid}")),
        };
        // Root's agents run as another uid, which cannot pass root's 0700 home: their homes
        // live where that uid can reach its own (0711 above, 0700 each, owned by the agent).
        let agents = if uid == 0 {
            PathBuf::from(ROOT_AGENTS)
        } else {
            xdg("XDG_DATA_HOME", ".local/share")?.join("gatehouse-agents")
        };
        Ok(Dirs {
            config: xdg("XDG_CONFIG_HOME", ".config")?.join("gatehouse"),
            data: xdg("XDG_DATA_HOME", ".local/share")?.join("gatehouse"),
            runtime,
            agents,
        })
    }

    /// Where `gatehouse run` keeps each agent's login and state (`<this>/<agent>`): beside the
    /// data dir rather than in it (`$XDG_DATA_HOME/gatehouse-agents`, `DIR/agents` for
    /// `--data-dir DIR`, `/var/lib/gatehouse-agents` for root), so that a run can grant an agent
    /// its own directory while the data dir stays whole among the paths every sandbox and file
    /// tool refuses.
    pub fn agents(&self) -> PathBuf {
        self.agents.clone()
    }

    /// Creates (or checks) the state directory `name` in [`Dirs::agents`] for a sandbox that
    /// runs as `owner` (uid, gid): an agent's (`gatehouse run`) or a third-party server's. It
    /// is 0700 and `owner`'s; when `owner` is not this process's user (root dropped to another
    /// uid), the agents' root, and with `instance` (a `--data-dir` instance) the instance's
    /// root, get search permission for others (0711: nothing in them can be listed, and the
    /// data, config and runtime dirs inside stay 0700).
    pub fn ensure_agent_home(
        &self,
        name: &str,
        owner: (u32, u32),
        instance: bool,
    ) -> Result<PathBuf, String> {
        #[cfg(not(any(unix, windows)))]
        {
            let _ = (name, owner, instance);
            Err(no_agent_homes().to_string())
        }
        #[cfg(windows)]
        {
            let _ = (owner, instance);
            self.ensure_agent_home_windows(name)
        }
        #[cfg(unix)]
        self.ensure_agent_home_unix(name, owner, instance)
    }

    /// Windows: the agents' root and the agent's directory are private (this user's, a
    /// protected DACL for this user and SYSTEM); the agent's may keep the command SID's ACE,
    /// which the broker adds while a run of it goes on. Inside it, what the run points the
    /// agent's profile variables at (`tmp`, `AppData\Roaming`, `AppData\Local`).
    #[cfg(windows)]
    fn ensure_agent_home_windows(&self, name: &str) -> Result<PathBuf, String> {
        let root = self.agents();
        let dir = root.join(name);
        // A run of this agent in progress holds its slot's ACE here: left in place.
        let slots: Vec<String> = (ipc_schema::exec::CommandSlot::all())
            .map(|s| sandbox::wincfg::slot_sid(s).0)
            .collect();
        let slots: Vec<&str> = slots.iter().map(String::as_str).collect();
        ensure_private_dir(&root).map_err(|e| e.to_string())?;
        sandbox::windows::ensure_private_dir_also(&dir, &slots).map_err(|e| e.to_string())?;
        for sub in ["tmp", r"AppData\Roaming", r"AppData\Local"] {
            let d = dir.join(sub);
            std::fs::create_dir_all(&d).map_err(|e| format!("creating {}: {e}", d.display()))?;
        }
        Ok(dir)
    }

    #[cfg(unix)]
    fn ensure_agent_home_unix(
        &self,
        name: &str,
        owner: (u32, u32),
        instance: bool,
    ) -> Result<PathBuf, String> {
        let root = self.agents();
        let dir = root.join(name);
        let uid = nix::unistd::geteuid().as_raw();
        // The group matters only to root's chown (and a locked-down broker may not ask it).
        let me = (uid, if uid == 0 { 0 } else { owner.1 });
        let at = |d: &Path, e: std::io::Error| format!("{}: {e}", d.display());
        for d in [&root, &dir] {
            match std::fs::DirBuilder::new()
                .mode(0o700)
                .recursive(d == &root)
                .create(d)
            {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(format!("creating {}: {e}", d.display())),
            }
            let want = if d == &dir { owner } else { me };
            let meta = std::fs::symlink_metadata(d).map_err(|e| at(d, e))?;
            if !meta.is_dir() {
                return Err(format!("{} is not a directory", d.display()));
            }
            if meta.uid() != want.0 {
                if me.0 == 0 {
                    std::os::unix::fs::lchown(d, Some(want.0), Some(want.1))
                        .map_err(|e| at(d, e))?;
                } else {
                    return Err(format!(
                        "{} belongs to uid {}, not to this user",
                        d.display(),
                        meta.uid()
                    ));
                }
            }
            // Closed to everyone but its owner, whatever an earlier hand left it as.
            if d == &dir && meta.mode() & 0o077 != 0 {
                std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o700))
                    .map_err(|e| at(d, e))?;
            }
        }
        if owner.0 != me.0 {
            let mut passable = vec![root.clone()];
            if instance {
                passable.extend(root.parent().map(Path::to_path_buf));
            }
            for d in passable {
                let meta = std::fs::metadata(&d).map_err(|e| at(&d, e))?;
                if meta.uid() == me.0 {
                    let mode = (meta.mode() & 0o7777) | 0o011;
                    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(mode))
                        .map_err(|e| at(&d, e))?;
                }
            }
        }
        Ok(dir)
    }

    /// gatehouse's own directories: never granted, always masked, refused by the file tools.
    pub fn own(&self) -> [PathBuf; 4] {
        [
            self.config.clone(),
            self.data.clone(),
            self.runtime.clone(),
            self.agents(),
        ]
    }

    /// Creates the directories (0700) and checks that each is ours and closed to others. On
    /// Windows: owned by this user with a protected DACL granting this user and SYSTEM only
    /// (`sandbox::windows::ensure_private_dir`, which says what an existing one may grant).
    pub fn ensure(&self) -> io::Result<()> {
        for d in [&self.config, &self.data, &self.runtime] {
            ensure_private_dir(d)?;
        }
        Ok(())
    }

    /// The human's console endpoint: `ui.sock` in the runtime directory; on Windows the named
    /// pipe `\\.\pipe\gatehouse-<16 hex digits>-ui`, the digits a hash of the runtime
    /// directory's path (FNV-1a 64 over its UTF-16, ASCII letters folded to lower case: Windows
    /// paths ignore case). The client and the broker compute it with this code, so they
    /// agree; two instances (`--data-dir`) get different names. Pipes live in one namespace per
    /// machine, not in a directory: the broker creates its pipe as the first instance of the
    /// name and for its user only, and a client talks only to a pipe served by its own user.
    pub fn ui_socket(&self) -> PathBuf {
        self.endpoint("ui")
    }

    /// The agents' gateway endpoint: `gateway.sock`; on Windows the pipe
    /// `\\.\pipe\gatehouse-<hash>-gateway` (as [`Dirs::ui_socket`]).
    pub fn gateway_socket(&self) -> PathBuf {
        self.endpoint("gateway")
    }

    /// Where `gatehouse notify` watches for cards (its channel carries nothing else):
    /// `notify.sock`; on Windows the pipe `\\.\pipe\gatehouse-<hash>-notify` (as
    /// [`Dirs::ui_socket`]).
    pub fn notify_socket(&self) -> PathBuf {
        self.endpoint("notify")
    }

    #[cfg(not(windows))]
    fn endpoint(&self, kind: &str) -> PathBuf {
        self.runtime.join(format!("{kind}.sock"))
    }

    #[cfg(windows)]
    fn endpoint(&self, kind: &str) -> PathBuf {
        use std::os::windows::ffi::OsStrExt;
        let units = self.runtime.as_os_str().encode_wide().map(|u| match u {
            0x41..=0x5a => u + 0x20,
            u => u,
        });
        let hash = fnv1a64(units.flat_map(u16::to_le_bytes));
        PathBuf::from(format!(r"\\.\pipe\gatehouse-{hash:016x}-{kind}"))
    }

    /// Held (locked) by the running broker, one per instance: `broker.lock`.
    pub fn lock_file(&self) -> PathBuf {
        self.runtime.join("broker.lock")
    }

    /// Where the broker writes its pid on Windows (`broker.pid`), after it has taken the lock:
    /// there the lock file cannot be read by others while it is locked. Not used on Unix, where
    /// the pid is in the lock file.
    pub fn pid_file(&self) -> PathBuf {
        self.runtime.join(PID_FILE)
    }

    /// The lock file, opened (made if missing) to be locked: one broker, or one writer of the
    /// audit log, per instance.
    pub fn open_lock_file(&self) -> Result<std::fs::File, String> {
        std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(self.lock_file())
            .map_err(|e| format!("{}: {e}", self.lock_file().display()))
    }

    pub fn broker_log(&self) -> PathBuf {
        self.data.join("broker.log")
    }
}

/// This process's effective uid (0 where the OS has no uids: it names nothing there but the
/// fallback runtime directory).
#[cfg(not(windows))]
fn current_uid() -> u32 {
    #[cfg(unix)]
    return nix::unistd::geteuid().as_raw();
    #[cfg(not(unix))]
    0
}

/// See [`Dirs::pid_file`].
pub(crate) const PID_FILE: &str = "broker.pid";

/// FNV-1a, 64 bits: small, and the same in every build and process (unlike std's
/// `DefaultHasher`, which promises neither).
#[cfg(any(windows, test))]
fn fnv1a64(bytes: impl IntoIterator<Item = u8>) -> u64 {
    bytes.into_iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// Agents' and third-party servers' homes: made on Unix and Windows only (no sandbox for them
/// is built elsewhere).
#[cfg(not(any(unix, windows)))]
fn no_agent_homes() -> ipc_schema::platform::Unsupported {
    ipc_schema::platform::Unsupported {
        program: "gatehouse",
        missing: &[ipc_schema::platform::Missing::CommandSandbox],
    }
}

#[cfg(windows)]
fn ensure_private_dir(d: &Path) -> io::Result<()> {
    sandbox::windows::ensure_private_dir(d)
}

#[cfg(unix)]
fn ensure_private_dir(d: &Path) -> io::Result<()> {
    match fs::DirBuilder::new().recursive(true).mode(0o700).create(d) {
        Ok(()) => {}
        Err(e) => {
            return Err(io::Error::new(
                e.kind(),
                format!("cannot create {}: {e}", d.display()),
            ))
        }
    }
    let md = fs::symlink_metadata(d)?;
    if !md.is_dir() {
        return Err(io::Error::other(format!(
            "{} is not a directory",
            d.display()
        )));
    }
    let uid = nix::unistd::geteuid().as_raw();
    if md.uid() != uid {
        return Err(io::Error::other(format!(
            "{} belongs to uid {}, not to us (uid {uid}); refusing to use it",
            d.display(),
            md.uid()
        )));
    }
    if md.mode() & 0o077 != 0 {
        fs::set_permissions(d, fs::Permissions::from_mode(0o700))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// FNV-1a 64's published values: the pipe names depend on them staying so.
    #[test]
    fn fnv1a64_is_the_published_function() {
        assert_eq!(fnv1a64(*b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(*b"a"), 0xaf63_dc4c_8601_ec8c);
    }

    #[cfg(unix)]
    #[test]
    fn unix_endpoints_are_sockets_in_the_runtime_dir() {
        let d = Dirs::under(Path::new("/x"));
        assert_eq!(d.ui_socket(), Path::new("/x/run/ui.sock"));
        assert_eq!(d.gateway_socket(), Path::new("/x/run/gateway.sock"));
        assert_eq!(d.notify_socket(), Path::new("/x/run/notify.sock"));
        assert_eq!(d.lock_file(), Path::new("/x/run/broker.lock"));
    }

    /// The pipe names: stable (a fixed value, so a client and a broker of another build
    /// agree), the same for two spellings of one path that differ in ASCII case, different for
    /// another instance and for each endpoint.
    #[cfg(windows)]
    #[test]
    fn windows_endpoints_are_pipes_named_after_the_runtime_dir() {
        let d = Dirs::under(Path::new(r"C:\gh"));
        assert_eq!(
            d.ui_socket(),
            Path::new(r"\\.\pipe\gatehouse-9f95ed14ac213d9a-ui")
        );
        assert_eq!(
            d.gateway_socket(),
            Path::new(r"\\.\pipe\gatehouse-9f95ed14ac213d9a-gateway")
        );
        assert_eq!(
            d.notify_socket(),
            Path::new(r"\\.\pipe\gatehouse-9f95ed14ac213d9a-notify")
        );
        assert_eq!(Dirs::under(Path::new(r"c:\GH")).ui_socket(), d.ui_socket());
        let other = Dirs::under(Path::new(r"C:\gh2"));
        assert_eq!(
            other.ui_socket(),
            Path::new(r"\\.\pipe\gatehouse-e81532f1b5a256f0-ui")
        );
        // The lock file stays a file in the runtime directory.
        assert_eq!(d.lock_file(), Path::new(r"C:\gh\run\broker.lock"));
        assert_eq!(d.pid_file(), Path::new(r"C:\gh\run\broker.pid"));
    }

    /// `ensure` makes the three directories private (the DACL is the sandbox crate's test); an
    /// agent's home is private too, made again without complaint, with what its profile
    /// variables point at inside.
    #[cfg(windows)]
    #[test]
    fn windows_ensure_makes_the_dirs_and_agent_homes() {
        let t = tempfile::tempdir().unwrap();
        let d = Dirs::under(t.path());
        d.ensure().unwrap();
        for p in [&d.config, &d.data, &d.runtime] {
            assert!(p.is_dir(), "{}", p.display());
            let dacl = sandbox::windows::dacl_sddl(p).unwrap();
            assert!(!dacl.contains(";WD)") && !dacl.contains(";BU)"), "{dacl}");
        }
        d.ensure().unwrap();
        let home = d.ensure_agent_home("a", (1, 1), false).unwrap();
        assert_eq!(home, d.agents().join("a"));
        for p in [d.agents(), home.clone()] {
            let dacl = sandbox::windows::dacl_sddl(&p).unwrap();
            assert!(!dacl.contains(";WD)") && !dacl.contains(";BU)"), "{dacl}");
        }
        for sub in ["tmp", r"AppData\Roaming", r"AppData\Local"] {
            assert!(home.join(sub).is_dir(), "{sub}");
        }
        assert_eq!(d.ensure_agent_home("a", (1, 1), false).unwrap(), home);
    }
}
