//! The exec-helper on macOS (issue 19): each command under a Seatbelt profile of its own,
//! generated from its grants (`sandbox::seatbelt::command_profile`) and applied by
//! `/usr/bin/sandbox-exec -p`, as Codex and sandbox-runtime run commands there.
//!
//! The profile denies by default: reads only of the system directories and the grants, writes
//! only in the read-write grants and the temporary directories, and the protected paths
//! (`--protect`: the broker's own directories) neither read nor written; an agent's or a
//! server's state directory, inside the broker's data directory, read and written after that
//! deny. No network, but what meets the broker through the connector the `Start` brought,
//! served from this helper (`sandbox::bridge`), as the command's network namespace does on
//! Linux: the egress proxy on a loopback port (the profile's one `remote ip` rule names it, the
//! proxy variables name it with the session's token), an agent's gateway socket in its state
//! directory (served to the command's own processes only), a server's stdio socket (its stdin
//! and stdout). The open-file and file-size limits are set by `/bin/sh`'s `ulimit` inside the
//! profile, just before the command (no `unsafe` pre-exec hook); the process and memory limits
//! are not (a gap the run names). The command runs in a process group of its own; the time
//! limit, `Stop` and the main process's end kill the group.
//!
//! This helper itself runs without a Seatbelt profile: macOS refuses to apply a sandbox inside a
//! sandboxed process (`sandbox_apply: Operation not permitted`, the kernel's
//! forbidden-sandbox-reinit), so a confined exec helper could start no command at all. Compiled
//! here, never run: there is no Mac (docs/macos.md).

use crate::threads::{pipe, Checked, Config, Launched, Tree};
use ipc_schema::exec::{RunOutcome, SandboxReport};
use ipc_schema::tier::ConfinementTier;
use ipc_schema::{ErrorCode, ErrorReply};
use nix::sys::resource::{getrlimit, Resource};
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use sandbox::bridge::Bridge;
use sandbox::seatbelt::CommandSpec as OsCommand;
use std::ffi::OsString;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Sets the run's open-file and file-size limits, then becomes the command (`"$@"`: its argv,
/// never re-parsed). The numbers are the script's positional parameters, so nothing is spliced
/// into shell text. `ulimit -f` counts 512-byte blocks (POSIX).
const LIMITS: &str = "ulimit -n \"$1\" && ulimit -f \"$2\" || exit 126; shift 2; exec \"$@\"";

pub fn main() -> ExitCode {
    crate::threads::main(launch, ConfinementTier::Seatbelt)
}

/// The command's process group.
struct Group {
    child: Mutex<std::process::Child>,
    pgid: Pid,
    /// The main process was reaped: its group id may be reused once the group is empty, so
    /// after one more kill (the leftovers') the group is not signalled again.
    reaped: AtomicBool,
    swept: AtomicBool,
    /// What serves the command's connector, until its main process is reaped.
    bridge: Mutex<Option<Bridge>>,
}

impl Tree for Group {
    fn wait_timeout(&self, ms: u32) -> Result<Option<RunOutcome>, String> {
        let deadline = Instant::now() + Duration::from_millis(ms.into());
        loop {
            let status = self.child.lock().expect("child").try_wait();
            match status {
                Ok(Some(st)) => {
                    self.reaped.store(true, Ordering::SeqCst);
                    self.bridge.lock().expect("bridge").take();
                    return Ok(Some(match (st.code(), st.signal()) {
                        (Some(c), _) => RunOutcome::Exited(c),
                        (None, Some(s)) => RunOutcome::Signaled(s),
                        (None, None) => RunOutcome::SandboxFailed {
                            message: format!("ended with {st}"),
                        },
                    }));
                }
                Ok(None) => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Ok(None);
                    }
                    std::thread::sleep(left.min(Duration::from_millis(10)));
                }
                Err(e) => return Err(e.to_string()),
            }
        }
    }

    fn kill(&self) {
        if self.swept.load(Ordering::SeqCst) {
            return;
        }
        let _ = killpg(self.pgid, Signal::SIGKILL);
        if self.reaped.load(Ordering::SeqCst) {
            self.swept.store(true, Ordering::SeqCst);
        }
    }
}

/// From a checked command to one running under its profile, or a refusal that says why.
fn launch(mut c: Checked, cfg: &Config) -> Result<Launched, ErrorReply> {
    let invalid = |why: String| ErrorReply::new(ErrorCode::Invalid, why);
    // Seatbelt matches resolved paths (/tmp is /private/tmp here).
    let resolve =
        |p: &Path| std::fs::canonicalize(p).map_err(|e| invalid(format!("{}: {e}", p.display())));
    let mut grants = Vec::new();
    for g in &c.spec.grants {
        grants.push((resolve(&g.path)?, g.access));
    }
    let cwd = resolve(&c.spec.cwd)?;
    let protect: Vec<PathBuf> = cfg
        .protect
        .iter()
        .map(|p| std::fs::canonicalize(p).unwrap_or_else(|_| p.clone()))
        .collect();
    let (hide_globs, unexpressed) = sandbox::seatbelt::expressible_globs(
        grants.first().map(|(p, _)| p.as_path()),
        &c.spec.hide.exclude,
    );
    for g in unexpressed {
        c.gaps.push(format!("the grant's exclude glob {g:?} is not masked (a form the Seatbelt profile cannot express)"));
    }
    // What meets the broker through the connector (threads.rs refused a Start that needs one
    // and brought none): sandbox::bridge.
    let user = std::mem::take(&mut c.user);
    let mut to_broker =
        sandbox::bridge::prepare(&c.spec.network, &c.spec.grants, &user).map_err(invalid)?;
    c.vars.append(&mut to_broker.vars);
    let profile = OsCommand {
        grants,
        no_access: protect,
        no_write: Vec::new(),
        network: to_broker.network,
        hide_sensitive: c.spec.hide.sensitive,
        hide_globs,
        own_dir: to_broker.own_dir,
        sockets: to_broker.sockets,
    };
    c.gaps.push(
        "a process the command moves out of its process group (setsid) is not ended with it".into(),
    );
    c.gaps.push(
        "the process and memory limits are not applied (RLIMIT_NPROC counts every process of the user on macOS, RLIMIT_AS is not enforced there); the open-file and file-size limits are".into(),
    );
    c.refuse_gaps(cfg)?;

    if !c.vars.iter().any(|(k, _)| k == "PATH") {
        c.vars
            .push(("PATH".into(), sandbox::command_env::DEFAULT_PATH.into()));
    }
    let program = find_program(&c.spec.argv[0], &cwd, &c.path_var())?;
    // Never above this helper's own hard limits: `ulimit` may lower them, never raise them.
    let capped = |r: Resource, want: u64| getrlimit(r).map_or(want, |(_, hard)| want.min(hard));
    let l = c.spec.limits;
    let open_files = capped(Resource::RLIMIT_NOFILE, l.open_files);
    let file_blocks = capped(Resource::RLIMIT_FSIZE, l.file_size).div_ceil(512);
    let (out_r, out_w) = pipe("stdout")?;
    let (err_r, err_w) = pipe("stderr")?;
    // sandbox-exec -p PROFILE -- /bin/sh -c LIMITS sh NOFILE FSIZE program args...
    let mut args: Vec<OsString> = vec!["-c".into(), LIMITS.into(), "sh".into()];
    args.extend([
        open_files.to_string().into(),
        file_blocks.to_string().into(),
    ]);
    args.push(program.clone().into());
    args.extend(c.spec.argv[1..].iter().map(OsString::from));
    let argv = sandbox::macos::sandbox_exec_argv(&profile, "/bin/sh".as_ref(), &args)
        .map_err(|e| invalid(e.to_string()))?;
    let (stdin, stdout) = match to_broker.stdio {
        Some((i, o)) => (Stdio::from(i), Stdio::from(o)),
        None => (Stdio::null(), Stdio::from(out_w)),
    };
    let mut child = Command::new(&argv[0])
        .args(&argv[1..])
        .env_clear()
        .envs(c.vars.iter().map(|(k, v)| (k, v)))
        .current_dir(&cwd)
        .stdin(stdin)
        .stdout(stdout)
        .stderr(Stdio::from(err_w))
        .process_group(0)
        .spawn()
        .map_err(|e| {
            ErrorReply::new(
                ErrorCode::Refused,
                format!("starting sandbox-exec for {}: {e}", program.display()),
            )
        })?;
    // The gateway is the command's own: a process that descends from its main one.
    let main = child.id();
    let mut to_broker = to_broker.listeners;
    if let Some(g) = to_broker.gateway.as_mut() {
        g.admit = Box::new(move |pid| sandbox::process::descends_from(pid, main).unwrap_or(false));
    }
    let bridge = match c.connector.take() {
        Some(connector) => match sandbox::bridge::start(connector, to_broker) {
            Ok(b) => Some(b),
            Err(e) => {
                let _ = killpg(Pid::from_raw(main as i32), Signal::SIGKILL);
                let _ = child.wait();
                return Err(invalid(format!("the command's connector: {e}")));
            }
        },
        None => None,
    };
    let report = SandboxReport {
        program: program.display().to_string(),
        tier: ConfinementTier::Seatbelt,
        namespaces: Vec::new(),
        uid: nix::unistd::getuid().as_raw(),
        gid: nix::unistd::getgid().as_raw(),
        landlock_abi: 0,
        seccomp_denylist: false,
        masked: Vec::new(),
        env_dropped: c.env_dropped,
        degraded: c.gaps,
    };
    Ok(Launched {
        tree: Box::new(Group {
            // Its own group (process_group(0)): the group's id is its pid.
            pgid: Pid::from_raw(child.id() as i32),
            child: Mutex::new(child),
            reaped: AtomicBool::new(false),
            swept: AtomicBool::new(false),
            bridge: Mutex::new(bridge),
        }),
        stdout: out_r,
        stderr: err_r,
        report,
    })
}

/// The program `argv[0]` names, as a Unix shell finds it (`sandbox::program_path::which`).
fn find_program(name: &str, cwd: &Path, path_var: &str) -> Result<PathBuf, ErrorReply> {
    sandbox::program_path::which(name, path_var, cwd).ok_or_else(|| {
        let searched = match name.contains('/') {
            true => cwd.join(name).display().to_string(),
            false => path_var.to_string(),
        };
        ErrorReply::new(
            ErrorCode::NotFound,
            format!("{name}: command not found in the sandbox (searched {searched})"),
        )
    })
}
