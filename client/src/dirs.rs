//! Where gatehouse keeps its config, data and sockets.

use std::fs;
use std::io;
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
        let uid = nix::unistd::geteuid().as_raw();
        let runtime = match std::env::var_os("XDG_RUNTIME_DIR") {
            Some(v) if Path::new(&v).is_absolute() => PathBuf::from(v).join("gatehouse"),
            _ => PathBuf::from(format!("/tmp/gatehouse-{uid}")),
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
