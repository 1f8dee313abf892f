//! The broker core's state: the database (audit chain + ledger), the policy, proposals and
//! sessions. One value in [`crate::Ctx`], opened before the helpers start.

use crate::approvals::Approvals;
use crate::head_key;
use crate::helpers::HelperSlot;
use crate::sessions::Sessions;
use crate::test_hooks::CrashStep;
use audit_store::chain::{AuditEvent, AuditKind};
use audit_store::writer::Unstarted;
use audit_store::{self as store, StoreHandle};
use gatehouse_client::Dirs;
use ipc_schema::fs::{FsHelperConfig, GrantConfig};
use ipc_schema::ui::{LedgerCall, Remembered};
use policy::protected::Protected;
use policy::{policy_path, PolicyState};
use std::cell::RefCell;
use std::ffi::OsString;
#[cfg(unix)]
use std::os::unix::fs::DirBuilderExt;
use std::path::PathBuf;
use std::sync::Arc;

/// The `broker` command line's core options.
#[derive(clap::Args, Clone, Default, Debug)]
pub struct GateArgs {
    /// The directory the default profile grants (when there is no policy.toml); default: the
    /// directory the broker was started in, unless that is a home directory or /.
    #[arg(long, value_name = "DIR")]
    pub grant_root: Option<PathBuf>,
    /// Removed: the audit key is kept only by the secrets-helper, which has no filesystem.
    /// Still parsed so that an old command line gets a clear refusal instead of a usage error.
    #[arg(long, hide = true)]
    pub audit_key_fallback_file: bool,
    /// Test builds only: SIGKILL the broker at this ledger step (after-pending, after-executing,
    /// in-helper, after-answer).
    #[cfg(feature = "test-hooks")]
    #[arg(long, value_name = "STEP")]
    pub test_crash_at: Option<String>,
}

impl GateArgs {
    pub fn options(&self, allow_degraded: bool) -> Result<GateOptions, String> {
        if self.audit_key_fallback_file {
            return Err(FALLBACK_REMOVED.into());
        }
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
            allow_degraded,
            test_crash,
        })
    }
}

/// Why `--audit-key-fallback-file` is refused.
const FALLBACK_REMOVED: &str = "--audit-key-fallback-file was removed: the audit key is kept only by the secrets-helper, in the configured credential store (the kernel keyutils store by default, which every Linux kernel gatehouse supports), never in a file. Start without it; if the store cannot hold the key the broker says why";

/// How the broker core is set up (from the `broker` command line).
#[derive(Debug, Clone, Default)]
pub struct GateOptions {
    /// The default profile's grant (`--grant-root`; else the directory the broker started in).
    pub grant_root: Option<PathBuf>,
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
    pub test_crash: Option<CrashStep>,
    /// The database until [`Gate::open_audit`] hands it to the writer thread.
    unopened: RefCell<Option<UnopenedAudit>>,
}

/// What [`Gate::open_audit`] needs: the write connection and the writer's queue.
struct UnopenedAudit {
    conn: rusqlite::Connection,
    writer: Unstarted,
    instance: String,
    empty: bool,
    degraded: bool,
}

/// The default grant root: as given, else the working directory unless that is `/` (a drive's
/// root) or the user's home.
fn default_root(given: Option<&PathBuf>) -> Option<String> {
    if let Some(g) = given {
        return Some(g.display().to_string());
    }
    let cwd = std::env::current_dir().ok()?;
    let cwd = std::fs::canonicalize(&cwd).unwrap_or(cwd);
    let home = ipc_schema::protected::user_home();
    if cwd.parent().is_none() || Some(&cwd) == home.as_ref() {
        return None;
    }
    Some(cwd.display().to_string())
}

pub fn load_remembered(conn: &rusqlite::Connection) -> rusqlite::Result<Vec<Remembered>> {
    audit_store::remembered::load(conn)
}

impl Gate {
    /// Opens the database and loads the policy. The audit log is not usable until
    /// [`Gate::open_audit`] (its key lives in the secrets-helper, which starts after this);
    /// rows written meanwhile (helper starts) wait in the writer's queue. Any failure refuses
    /// the broker's start, with the reason.
    pub fn open(dirs: &Dirs, opts: &GateOptions) -> Result<Gate, String> {
        let db = store::db_path(&dirs.data);
        let mut checkpoints = std::fs::DirBuilder::new();
        checkpoints.recursive(true);
        // On Windows the data directory's owner-only DACL is inherited.
        #[cfg(unix)]
        checkpoints.mode(0o700);
        checkpoints
            .create(dirs.data.join("checkpoints"))
            .map_err(|e| format!("cannot create the checkpoint directory: {e}"))?;
        let conn = store::open_rw(&db).map_err(|e| e.to_string())?;
        let instance = store::instance_id(&conn).map_err(|e| e.to_string())?;
        let empty = store::audit_is_empty(&conn).map_err(|e| e.to_string())?;
        let remembered = load_remembered(&conn).map_err(|e| e.to_string())?;
        let (store, writer) = StoreHandle::unstarted();
        crate::audit::install(store.clone());

        let protected = Protected::new(&dirs.own());
        let policy = PolicyState::load(
            policy_path(&dirs.config),
            default_root(opts.grant_root.as_ref()),
            protected,
        );
        if let Err(e) = &policy.current {
            tracing::error!("{e}; every tool call will be refused until it is fixed");
        }
        Ok(Gate {
            store,
            dirs: dirs.clone(),
            policy: RefCell::new(policy),
            approvals: RefCell::new(Approvals::default()),
            sessions: RefCell::new(Sessions::default()),
            remembered: RefCell::new(remembered),
            test_crash: opts.test_crash,
            unopened: RefCell::new(Some(UnopenedAudit {
                conn,
                writer,
                instance,
                empty,
                degraded: opts.allow_degraded,
            })),
        })
    }

    /// Opens the audit log through the supervised secrets-helper: makes sure its key exists
    /// (created only for a log with no entries), starts the writer thread, which checks the
    /// sealed head, then recovers the ledger and writes the start row, sealed, before anything
    /// else. Returns the calls found executing (now uncertain). Any failure refuses the start.
    pub async fn open_audit(&self, secrets: &Arc<HelperSlot>) -> Result<Vec<LedgerCall>, String> {
        let UnopenedAudit {
            conn,
            writer,
            instance,
            empty,
            degraded,
        } = self
            .unopened
            .borrow_mut()
            .take()
            .ok_or("the audit log is already open")?;
        let refuse = |e: String| format!("refusing to start: the audit log cannot be sealed: {e}");
        head_key::open_key(secrets, &instance, empty)
            .await
            .map_err(|e| refuse(e.0))?;
        let seal = head_key::bridge(secrets.clone());
        let opened = writer.start(conn, seal, instance, degraded, move |tx, audit| {
            let uncertain = crate::ledger::recover(tx, audit)?;
            audit.push(
                AuditEvent::new(AuditKind::Broker, "broker", "started").detail(format!(
                    "pid {}; audit key held by the secrets-helper{}",
                    std::process::id(),
                    if degraded { "; --allow-degraded" } else { "" }
                )),
            );
            Ok(uncertain)
        });
        match opened.await {
            Ok(Ok(uncertain)) => Ok(uncertain),
            Ok(Err(e)) => Err(format!("refusing to start: {e}")),
            Err(_) => Err("refusing to start: the audit writer stopped".into()),
        }
    }

    /// The fs-helper's arguments for the grants in force: one `--config`
    /// (`ipc_schema::fs::FsHelperConfig`, which the helper checks again).
    pub fn fs_helper_args(&self) -> Vec<OsString> {
        let bytes = |p: &std::path::Path| ipc_schema::os_path::of(p).to_vec();
        let grants = self.policy.borrow().fs_grants().into_iter();
        let config = FsHelperConfig {
            grants: grants
                .map(|g| GrantConfig {
                    root: bytes(&g.root),
                    id: g.id,
                    caps: g.caps,
                    recursive: g.recursive,
                    confirmed: g.confirmed,
                    include: g.include,
                    exclude: g.exclude,
                })
                .collect(),
            checkpoint_dir: bytes(
                &std::fs::canonicalize(self.checkpoint_dir()).unwrap_or(self.checkpoint_dir()),
            ),
            protect: (self.dirs.own().into_iter())
                .map(|d| bytes(&std::fs::canonicalize(&d).unwrap_or(d)))
                .collect(),
        };
        vec!["--config".into(), config.to_arg().into()]
    }

    /// Windows: ACEs for the fs profile's SID on every grant root of the policy (read, or read
    /// and write for a grant that may change files) and on the checkpoint directory (read and
    /// write), applied before the fs-helper starts: its restricted token opens only what an
    /// ACE names that SID for (`sandbox::wincfg`'s `fs_aces`). Each ACE names only gatehouse's
    /// SID, so one left on a root whose grant went gives nothing to any other program (the
    /// helper checks its grants itself); they are not taken away.
    #[cfg(windows)]
    pub fn grant_fs_aces(&self) -> Result<(), String> {
        let mut grants = sandbox::FsProfile::default();
        for g in self.policy.borrow().fs_grants() {
            match g.caps.write || g.caps.edit || g.caps.delete {
                true => grants.read_write.push(g.root),
                false => grants.read_only.push(g.root),
            }
        }
        grants.read_write.push(self.checkpoint_dir());
        let policy = sandbox::wincfg::helper_policy(&sandbox::Profile::Fs(grants))
            .map_err(|e| e.to_string())?;
        sandbox::windows::apply_aces(&policy.aces)
            .map(drop)
            .map_err(|e| e.to_string())
    }

    pub fn checkpoint_dir(&self) -> PathBuf {
        self.dirs.data.join("checkpoints")
    }

    /// Records the stop and commits everything queued. Runs while the secrets-helper still
    /// runs (it MACs these last rows): the other helpers are stopped first so that their exit
    /// rows are sealed too; the secrets-helper's own exit row comes after the writer stopped
    /// and is not written.
    pub async fn shutdown(&self, helpers: &crate::helpers::Helpers) {
        let others: Vec<_> = ipc_schema::Role::HELPERS
            .iter()
            .filter(|r| **r != ipc_schema::Role::Secrets)
            .filter_map(|r| helpers.slot(*r))
            .collect();
        for slot in &others {
            slot.kill();
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while std::time::Instant::now() < deadline && others.iter().any(|s| s.is_ready()) {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        self.store
            .audit(AuditEvent::new(AuditKind::Broker, "broker", "stopped"));
        self.store.stop().await;
    }
}
