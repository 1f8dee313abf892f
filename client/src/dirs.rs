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
    /// Sockets and the broker lock (`$XDG_RUNTIME_DIR/gatehouse`, 0700).
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

    /// The user's instance, from the XDG variables (with their documented fallbacks).
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
        #[cfg(not(unix))]
        {
            let _ = (name, owner, instance);
            Err(not_private().to_string())
        }
        #[cfg(unix)]
        self.ensure_agent_home_unix(name, owner, instance)
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

    /// Creates the directories (0700) and checks that each is ours and closed to others.
    pub fn ensure(&self) -> io::Result<()> {
        for d in [&self.config, &self.data, &self.runtime] {
            ensure_private_dir(d)?;
        }
        Ok(())
    }

    pub fn ui_socket(&self) -> PathBuf {
        self.runtime.join("ui.sock")
    }

    pub fn gateway_socket(&self) -> PathBuf {
        self.runtime.join("gateway.sock")
    }

    /// Where `gatehouse notify` watches for cards (its channel carries nothing else).
    pub fn notify_socket(&self) -> PathBuf {
        self.runtime.join("notify.sock")
    }

    pub fn lock_file(&self) -> PathBuf {
        self.runtime.join("broker.lock")
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
fn current_uid() -> u32 {
    #[cfg(unix)]
    return nix::unistd::geteuid().as_raw();
    #[cfg(not(unix))]
    0
}

/// Owner-only directories are checked with Unix modes and owners; elsewhere (owner-only ACLs)
/// they are not built, so nothing is created that would be open to others.
#[cfg(not(unix))]
fn not_private() -> ipc_schema::platform::Unsupported {
    ipc_schema::platform::Unsupported {
        program: "gatehouse",
        missing: &[ipc_schema::platform::Missing::PrivateDirectories],
    }
}

#[cfg(not(unix))]
fn ensure_private_dir(_d: &Path) -> io::Result<()> {
    Err(io::Error::other(not_private().to_string()))
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
