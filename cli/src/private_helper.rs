//! A secrets-helper the command line starts for itself ([`PrivateHelper`]), and the audit seal
//! over it ([`PrivateSeal`]): `gatehouse secret` sets, deletes and lists credentials with it,
//! `verify-audit` and `audit verify-export --with-key` get the audit log's MACs from it. No broker needs
//! to run, and none can lie to it. The helper is started exactly as the broker starts its own
//! (locked down, the same store and namespace: broker::secrets_link::helper_args), but on a
//! private channel that serves Set, Delete and List, never request headers. The broker's own
//! seal is broker/src/head_key.rs; both ask with `audit_store::seal::mac_request`.

use audit_store::seal::{self, mac_reply, mac_request, Mac, Seal, SealError};
use broker::secrets_link::helper_args;
use gatehouse_client::Dirs;
use ipc_schema::codec::{self, HEADER_LEN, MAX_FRAME};
use ipc_schema::secrets::{AuditHead, AuditRow, SecretsReply, SecretsRequest, Zeroizing};
use ipc_schema::{Body, Envelope, Role};
use std::io::{Read, Write};
#[cfg(unix)]
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::Mutex;

/// Errors of these functions, each a sentence for the user.
type CmdResult<T> = Result<T, String>;

/// A secrets-helper started by a command (`gatehouse secret`, `verify-audit`), on a private
/// socket pair (on Windows a private duplex pipe): no broker needs to run, and none can lie
/// to it.
pub struct PrivateHelper {
    #[cfg(unix)]
    sock: UnixStream,
    #[cfg(target_os = "linux")]
    child: std::process::Child,
    /// The helper's pid (reaped on drop).
    #[cfg(target_os = "macos")]
    child: u32,
    #[cfg(windows)]
    sock: std::fs::File,
    /// Owns the helper's job: dropping it ends the helper.
    #[cfg(windows)]
    _child: sandbox::windows::ConfinedChild,
    next_id: u64,
}

impl PrivateHelper {
    /// Starts the secrets-helper that lies beside this binary, with this instance's arguments,
    /// and waits for its hello; strict (a gap of its lockdown refuses it).
    pub fn start(dirs: &Dirs) -> CmdResult<PrivateHelper> {
        PrivateHelper::start_with(dirs, false)
    }

    /// [`PrivateHelper::start`], or with `allow_degraded` run with less than its profile needs,
    /// each gap said on stderr.
    #[cfg(unix)]
    pub fn start_with(dirs: &Dirs, allow_degraded: bool) -> CmdResult<PrivateHelper> {
        let (program, args) = program_and_args(dirs, allow_degraded)?;
        let (ours, theirs) = UnixStream::pair().map_err(|e| format!("socketpair: {e}"))?;
        #[cfg(target_os = "linux")]
        let child = sandbox::process::spawn_helper(&program, &args, theirs.into(), &[])
            .map_err(|e| format!("cannot start {}: {e}", program.display()))?
            .child;
        #[cfg(target_os = "macos")]
        let child = sandbox::process::spawn_helper(&program, &args, theirs.into())
            .map_err(|e| format!("cannot start {}: {e}", program.display()))?;
        ours.set_read_timeout(Some(std::time::Duration::from_secs(60)))
            .map_err(|e| e.to_string())?;
        let mut h = PrivateHelper {
            sock: ours,
            child,
            next_id: 1,
        };
        say_degraded(&h.hello()?);
        Ok(h)
    }

    /// On Windows: spawned confined by the applier with the secrets profile's policy
    /// (restricted token, job, mitigations, process descriptor; strict: a gap refuses), and
    /// its hello checked against what this process reads of it from outside
    /// (`wincfg::verify_observed`), as the broker checks its own.
    #[cfg(windows)]
    pub fn start_with(dirs: &Dirs, allow_degraded: bool) -> CmdResult<PrivateHelper> {
        use sandbox::windows as w;
        use std::os::windows::io::AsHandle;
        let (program, args) = program_and_args(dirs, allow_degraded)?;
        let store = ipc_schema::secrets::StoreKind::CredentialManager;
        let policy = sandbox::wincfg::helper_policy(&sandbox::Profile::Secrets(store))
            .map_err(|e| e.to_string())?;
        let stderr = std::io::stderr();
        let w::SpawnedHelper { child, channel } = w::spawn_helper(
            &policy,
            &program,
            &args,
            w::ChannelIo::Blocking,
            w::ChannelIo::Blocking,
            stderr.as_handle(),
            w::SpawnOptions { allow_degraded },
        )
        .map_err(|e| format!("cannot start {}: {e}", program.display()))?;
        let observed = child.observe(&policy).map_err(|e| e.to_string())?;
        let mut h = PrivateHelper {
            sock: channel,
            _child: child,
            next_id: 1,
        };
        let report = h.hello()?;
        sandbox::wincfg::verify_observed(&policy, &report, &observed, allow_degraded)?;
        say_degraded(&report);
        Ok(h)
    }

    /// Its hello: the secrets-helper's, with its report.
    fn hello(&mut self) -> CmdResult<ipc_schema::status::LockdownReport> {
        match self.recv()? {
            Envelope {
                body: Body::Hello(hello),
                ..
            } if hello.role == Role::Secrets => Ok(hello.lockdown),
            other => Err(format!(
                "the secrets-helper did not say hello (it sent {:?})",
                other.body.kind()
            )),
        }
    }

    fn recv(&mut self) -> CmdResult<Envelope> {
        let closed = || "the secrets-helper stopped (its reason is on stderr above)".to_string();
        let mut header = [0u8; HEADER_LEN];
        self.sock.read_exact(&mut header).map_err(|_| closed())?;
        let len = codec::parse_header(header, MAX_FRAME).map_err(|e| e.to_string())?;
        let mut payload = Zeroizing::new(vec![0u8; len]);
        self.sock.read_exact(&mut payload).map_err(|_| closed())?;
        codec::decode_payload(&payload).map_err(|e| e.to_string())
    }

    /// Sends one request and returns its reply. Frames are built and read in zeroized buffers.
    pub fn request(&mut self, req: SecretsRequest) -> CmdResult<SecretsReply> {
        let id = self.next_id;
        self.next_id += 1;
        let mut buf = Zeroizing::new(Vec::with_capacity(64 * 1024));
        codec::encode_into(&Envelope::new(id, Body::Secrets(req)), &mut buf)
            .map_err(|e| e.to_string())?;
        self.sock
            .write_all(&buf)
            .map_err(|e| format!("writing to the secrets-helper: {e}"))?;
        match self.recv()? {
            Envelope {
                id: got,
                body: Body::SecretsReply(r),
                ..
            } if got == id => Ok(r),
            other => Err(format!("unexpected answer {:?}", other.body.kind())),
        }
    }
}

#[cfg(unix)]
impl Drop for PrivateHelper {
    fn drop(&mut self) {
        // Closing the channel ends the helper; wait so that no zombie is left.
        let _ = self.sock.shutdown(std::net::Shutdown::Both);
        #[cfg(target_os = "linux")]
        let _ = self.child.wait();
        #[cfg(target_os = "macos")]
        let _ = sandbox::process::reap(self.child);
    }
}

/// What a helper started with `--allow-degraded` runs without, said on stderr (never silently).
fn say_degraded(report: &ipc_schema::status::LockdownReport) {
    for gap in &report.degraded {
        eprintln!("gatehouse: the private secrets-helper runs degraded: {gap}");
    }
}

/// The secrets-helper beside this binary, and its arguments for this instance's private
/// channel: Set, Delete and List, never request headers.
fn program_and_args(
    dirs: &Dirs,
    allow_degraded: bool,
) -> CmdResult<(PathBuf, Vec<std::ffi::OsString>)> {
    let mut args = helper_args(dirs)?;
    args.extend(["--channel".into(), "private".into()]);
    if allow_degraded {
        args.push("--allow-degraded".into());
    }
    let program: PathBuf = gatehouse_client::sibling(Role::Secrets.name())?;
    Ok((program, args))
}

/// `verify-audit`'s seal: a private, locked-down secrets-helper started by the command itself,
/// so no broker needs to run (and none can lie to it).
pub struct PrivateSeal {
    helper: Mutex<PrivateHelper>,
}

impl PrivateSeal {
    /// Starts the helper and checks that it holds the key of `instance` (never creating one).
    pub fn open(dirs: &Dirs, instance: &str) -> Result<PrivateSeal, String> {
        PrivateSeal::open_with(dirs, instance, false)
    }

    /// [`PrivateSeal::open`] with the helper started as [`PrivateHelper::start_with`] says.
    pub fn open_with(
        dirs: &Dirs,
        instance: &str,
        allow_degraded: bool,
    ) -> Result<PrivateSeal, String> {
        let seal = PrivateSeal::new(PrivateHelper::start_with(dirs, allow_degraded)?);
        seal.open_key(instance, false)?;
        Ok(seal)
    }

    pub fn new(helper: PrivateHelper) -> PrivateSeal {
        PrivateSeal {
            helper: Mutex::new(helper),
        }
    }

    /// Makes sure the key of `instance` is in the store (creating it only if `may_create`).
    pub fn open_key(&self, instance: &str, may_create: bool) -> Result<(), String> {
        let inst = seal::instance(instance).map_err(|e| e.0)?;
        match self.request(SecretsRequest::AuditKey {
            instance: inst,
            may_create,
        })? {
            SecretsReply::AuditKey { .. } => Ok(()),
            SecretsReply::Failed(e) => Err(e.message),
            other => Err(format!(
                "unexpected answer from the secrets-helper: {other:?}"
            )),
        }
    }

    /// Any other request to the same helper (`gatehouse secret` uses one helper for both).
    pub fn request(&self, req: SecretsRequest) -> Result<SecretsReply, String> {
        self.helper
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .request(req)
    }
}

impl Seal for PrivateSeal {
    fn macs(
        &self,
        instance: &str,
        rows: &[AuditRow],
        head: Option<&AuditHead>,
    ) -> Result<(Vec<Mac>, Option<Mac>), SealError> {
        let req = mac_request(instance, rows, head)?;
        mac_reply(self.request(req).map_err(SealError)?)
    }
}
