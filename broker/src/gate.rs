//! The broker core's state: the database (audit chain + ledger), the policy, proposals and
//! sessions. One value in [`crate::Ctx`], opened before the helpers start.

use crate::approvals::Approvals;
use crate::dirs::Dirs;
use crate::head_key::{self, KeyOrigin};
use crate::policy::protected::Protected;
use crate::policy::{policy_path, PolicyState};
use crate::sessions::Sessions;
use crate::store::chain::{AuditEvent, AuditKind, Sealer};
use crate::store::{self, Chain, StoreHandle};
use crate::test_hooks::CrashStep;
use ipc_schema::ui::{LedgerCall, Remembered};
use std::cell::RefCell;
use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::DirBuilderExt;
use std::path::PathBuf;

/// The `broker` command line's core options.
#[derive(clap::Args, Clone, Default, Debug)]
pub struct GateArgs {
    /// The directory the default profile grants (when there is no policy.toml); default: the
    /// directory the broker was started in, unless that is a home directory or /.
    #[arg(long, value_name = "DIR")]
    pub grant_root: Option<PathBuf>,
    /// If the OS keyring cannot be used, keep the audit key in a 0600 file in the data
    /// directory instead of refusing to start (weaker: anyone who can read the data directory
    /// can then rewrite the log undetected).
    #[arg(long)]
    pub audit_key_fallback_file: bool,
    /// Test builds only: SIGKILL the broker at this ledger step (after-pending, after-executing,
    /// in-helper, after-answer).
    #[cfg(feature = "test-hooks")]
    #[arg(long, value_name = "STEP")]
    pub test_crash_at: Option<String>,
}

impl GateArgs {
    pub fn options(&self, allow_degraded: bool) -> Result<GateOptions, String> {
        #[cfg(feature = "test-hooks")]
        let test_crash = self
            .test_crash_at
            .as_deref()
            .map(CrashStep::parse)
            .transpose()?;
        #[cfg(not(feature = "test-hooks"))]
        let test_crash = None;
        let grant_root = match &self.grant_root {
            None => None,
            Some(r) => Some(std::path::absolute(r).map_err(|e| format!("--grant-root: {e}"))?),
        };
        Ok(GateOptions {
            grant_root,
            audit_key_fallback: self.audit_key_fallback_file,
            allow_degraded,
            test_crash,
        })
    }
}

/// How the broker core is set up (from the `broker` command line).
#[derive(Debug, Clone, Default)]
pub struct GateOptions {
    /// The default profile's grant (`--grant-root`; else the directory the broker started in).
    pub grant_root: Option<PathBuf>,
    /// `--audit-key-fallback-file`: if the OS keyring cannot be used, keep the audit key in a
    /// 0600 file in the data dir instead of refusing to start.
    pub audit_key_fallback: bool,
    pub allow_degraded: bool,
    pub test_crash: Option<CrashStep>,
}

pub struct Gate {
    pub store: StoreHandle,
    pub dirs: Dirs,
    pub policy: RefCell<PolicyState>,
    pub approvals: RefCell<Approvals>,
    pub sessions: RefCell<Sessions>,
    pub remembered: RefCell<Vec<Remembered>>,
    pub key_origin: KeyOrigin,
    pub test_crash: Option<CrashStep>,
}

/// The default grant root: as given, else the working directory unless that is `/` or $HOME.
fn default_root(given: Option<&PathBuf>) -> Option<String> {
    if let Some(g) = given {
        return Some(g.display().to_string());
    }
    let cwd = std::env::current_dir().ok()?;
    let cwd = std::fs::canonicalize(&cwd).unwrap_or(cwd);
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let home = home.map(|h| std::fs::canonicalize(&h).unwrap_or(h));
    if cwd == std::path::Path::new("/") || Some(&cwd) == home.as_ref() {
        return None;
    }
    Some(cwd.display().to_string())
}

pub fn load_remembered(conn: &rusqlite::Connection) -> rusqlite::Result<Vec<Remembered>> {
    let mut stmt = conn.prepare(
        "SELECT id, tool, target, action, created_ms, origin FROM remembered ORDER BY id",
    )?;
    let rows = stmt.query_map([], |r| {
        Ok(Remembered {
            id: r.get::<_, i64>(0)? as u64,
            tool: r.get(1)?,
            target: r.get(2)?,
            action: r.get(3)?,
            created_unix_ms: r.get::<_, i64>(4)? as u64,
            origin: r.get(5)?,
        })
    })?;
    rows.collect()
}

impl Gate {
    /// Opens the database and its key, checks the sealed head, recovers the ledger, and loads
    /// the policy. Any failure refuses the broker's start, with the reason.
    pub fn open(dirs: &Dirs, opts: &GateOptions) -> Result<(Gate, Vec<LedgerCall>), String> {
        let db = store::db_path(&dirs.data);
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dirs.data.join("checkpoints"))
            .map_err(|e| format!("cannot create the checkpoint directory: {e}"))?;
        let conn = store::open_rw(&db).map_err(|e| e.to_string())?;
        let instance = store::instance_id(&conn).map_err(|e| e.to_string())?;
        let empty = store::audit_is_empty(&conn).map_err(|e| e.to_string())?;
        let fallback = head_key::fallback_file(&dirs.data);
        let (key, key_origin) = head_key::load_or_create(
            &instance,
            empty,
            opts.audit_key_fallback.then_some(fallback.as_path()),
        )
        .map_err(|e| {
            format!(
                "refusing to start: the audit log cannot be sealed: {e}{}",
                if opts.audit_key_fallback {
                    ""
                } else {
                    " (start with --audit-key-fallback-file to keep the key in a 0600 file in the data directory instead; that is weaker)"
                }
            )
        })?;
        let mut chain = Chain::load(&conn, Sealer::new(&key.0), instance, opts.allow_degraded)
            .map_err(|e| format!("refusing to start: {e}"))?;

        // Ledger recovery and the start row, sealed, before anything else is written.
        let mut conn = conn;
        let uncertain = {
            let tx = conn.transaction().map_err(|e| e.to_string())?;
            let mut audit = Vec::new();
            let uncertain = crate::ledger::recover(&tx, &mut audit).map_err(|e| e.to_string())?;
            audit.push(
                AuditEvent::new(AuditKind::Broker, "broker", "started").detail(format!(
                    "pid {}; audit key in the {key_origin}{}",
                    std::process::id(),
                    if opts.allow_degraded {
                        "; --allow-degraded"
                    } else {
                        ""
                    }
                )),
            );
            let ts = store::now_ms();
            for ev in &audit {
                chain.append(&tx, ev, ts).map_err(|e| e.to_string())?;
            }
            chain.seal(&tx).map_err(|e| e.to_string())?;
            tx.commit().map_err(|e| e.to_string())?;
            uncertain
        };
        let remembered = load_remembered(&conn).map_err(|e| e.to_string())?;
        let store = StoreHandle::spawn(conn, chain);
        crate::audit::install(store.clone());

        let protected =
            Protected::new(&[dirs.config.clone(), dirs.data.clone(), dirs.runtime.clone()]);
        let policy = PolicyState::load(
            policy_path(&dirs.config),
            default_root(opts.grant_root.as_ref()),
            protected,
        );
        if let Err(e) = &policy.current {
            tracing::error!("{e}; every tool call will be refused until it is fixed");
        }
        Ok((
            Gate {
                store,
                dirs: dirs.clone(),
                policy: RefCell::new(policy),
                approvals: RefCell::new(Approvals::default()),
                sessions: RefCell::new(Sessions::default()),
                remembered: RefCell::new(remembered),
                key_origin,
                test_crash: opts.test_crash,
            },
            uncertain,
        ))
    }

    /// The fs-helper's arguments for the grants in force (see fs-helper/src/config.rs).
    pub fn fs_helper_args(&self) -> Vec<OsString> {
        let mut args: Vec<OsString> = Vec::new();
        let policy = self.policy.borrow();
        for g in policy.grants() {
            let mut caps = String::new();
            for (on, c) in [
                (g.caps.read, 'r'),
                (g.caps.write, 'w'),
                (g.caps.edit, 'e'),
                (g.caps.delete, 'd'),
            ] {
                if on {
                    caps.push(c);
                }
            }
            let mut flags = if g.recursive { "recursive" } else { "flat" }.to_string();
            if g.confirmed {
                flags.push_str(",confirmed");
            }
            let mut spec = format!("{}:{caps}:{flags}:", g.id).into_bytes();
            spec.extend_from_slice(g.root.as_os_str().as_bytes());
            args.push("--grant".into());
            args.push(OsString::from(std::ffi::OsStr::from_bytes(&spec)));
            for (opt, globs) in [("--include", &g.include), ("--exclude", &g.exclude)] {
                for glob in globs {
                    args.push(opt.into());
                    args.push(format!("{}:{glob}", g.id).into());
                }
            }
        }
        args.push("--checkpoint-dir".into());
        args.push(self.checkpoint_dir().into());
        for d in [&self.dirs.config, &self.dirs.data, &self.dirs.runtime] {
            args.push("--protect".into());
            args.push(std::fs::canonicalize(d).unwrap_or(d.clone()).into());
        }
        args
    }

    pub fn checkpoint_dir(&self) -> PathBuf {
        self.dirs.data.join("checkpoints")
    }

    /// Commits everything queued and records the stop.
    pub async fn shutdown(&self) {
        self.store
            .audit(AuditEvent::new(AuditKind::Broker, "broker", "stopped"));
        self.store.stop().await;
    }
}
