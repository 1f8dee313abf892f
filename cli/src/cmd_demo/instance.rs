//! The scratch instance's broker, and its audit log once the broker has stopped.

use super::report::AuditReport;
use super::scratch::Scratch;
use gatehouse_client::Dirs;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub(super) struct Broker {
    pub(super) child: Child,
    pub(super) log: PathBuf,
    /// Its ui socket (Windows: where it is asked to stop).
    #[cfg_attr(unix, allow(dead_code))]
    ui: PathBuf,
}

impl Broker {
    pub(super) fn start(exe: &Path, s: &Scratch, extra: &[&str]) -> Result<Broker, String> {
        let log = s.root.join("broker.log");
        let out = std::fs::File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
        let err = out.try_clone().map_err(|e| e.to_string())?;
        let child = Command::new(exe)
            .arg("--data-dir")
            .arg(&s.data)
            .arg("broker")
            .arg("--grant-root")
            .arg(&s.project)
            .args(extra)
            .current_dir(&s.project)
            .env("HOME", &s.home)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|e| format!("cannot start the broker: {e}"))?;
        let socket = Dirs::under(&s.data).ui_socket();
        let mut b = Broker {
            child,
            log,
            ui: socket.clone(),
        };
        // Windows: the broker starts its spawner and five helpers in processes that take longer.
        let deadline = Instant::now() + Duration::from_secs(if cfg!(windows) { 60 } else { 20 });
        loop {
            if gatehouse_client::Client::connect(&socket).is_ok() {
                return Ok(b);
            }
            if let Ok(Some(status)) = b.child.try_wait() {
                return Err(format!("the broker exited ({status}): {}", b.log_tail()));
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "the broker did not open its socket in time: {}",
                    b.log_tail()
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub(super) fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(5)..].join("\n")
    }

    /// Asks the broker to stop (SIGTERM; on Windows `StopBroker` on the ui channel, as
    /// `gatehouse stop`), then waits: it commits its audit rows before it exits.
    pub(super) fn stop(&mut self) {
        #[cfg(unix)]
        {
            let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        }
        #[cfg(windows)]
        if let Ok(mut c) = gatehouse_client::Client::connect(&self.ui) {
            let _ = c.request(ipc_schema::Body::Ui(ipc_schema::ui::UiRequest::StopBroker));
        }
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.stop();
        }
    }
}

pub(super) fn verify_audit(exe: &Path, s: &Scratch, extra: &[&str]) -> AuditReport {
    let mut r = AuditReport::default();
    match Command::new(exe)
        .arg("--data-dir")
        .arg(&s.data)
        .args(["--json", "verify-audit"])
        .args(extra)
        .env("HOME", &s.home)
        .stdin(Stdio::null())
        .output()
    {
        Ok(out) => match serde_json::from_slice::<Value>(&out.stdout) {
            Ok(v) => {
                r.entries = v["entries"].as_u64().unwrap_or(0);
                r.intact = v["intact"] == json!(true) && out.status.success();
                r.message = v["message"].as_str().unwrap_or("").to_string();
            }
            Err(_) => {
                r.message = format!(
                    "verify-audit said: {}{}",
                    String::from_utf8_lossy(&out.stdout).trim(),
                    String::from_utf8_lossy(&out.stderr).trim()
                )
            }
        },
        Err(e) => r.message = format!("cannot run verify-audit: {e}"),
    }
    let db = audit_store::db_path(&Dirs::under(&s.data).data);
    if let Ok(conn) = audit_store::open_ro(&db) {
        if let Ok(kinds) = audit_store::audit::count_by_kind(&conn) {
            r.kinds.extend(kinds);
        }
    }
    r
}

/// Removes the scratch log's audit key from the kernel keyring (the log is deleted with the
/// scratch directory, so the key would only take room). The entry's name is the one the
/// secrets-helper's keyutils store gives it: `gatehouse:audit-key-<instance>` in the user keyring.
#[cfg(target_os = "linux")]
pub(super) fn forget_audit_key(s: &Scratch) {
    use linux_keyutils::{KeyRing, KeyRingIdentifier};
    let Ok(conn) = audit_store::open_ro(&audit_store::db_path(&Dirs::under(&s.data).data)) else {
        return;
    };
    let Ok(Some(instance)) = audit_store::read_instance_id(&conn) else {
        return;
    };
    if let Ok(ring) = KeyRing::from_special_id(KeyRingIdentifier::User, false) {
        if let Ok(key) = ring.search(&format!("gatehouse:audit-key-{instance}")) {
            let _ = key.invalidate();
        }
    }
}

#[cfg(not(target_os = "linux"))]
pub(super) fn forget_audit_key(_: &Scratch) {}
