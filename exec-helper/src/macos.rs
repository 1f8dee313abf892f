//! The exec-helper on macOS (issue 19): each command under a Seatbelt profile of its own,
//! generated from its grants (`sandbox::seatbelt::command_profile`) and applied by
//! `/usr/bin/sandbox-exec -p`, as Codex and sandbox-runtime run commands there.
//!
//! The profile denies by default: reads only of the system directories and the grants, writes
//! only in the read-write grants and the temporary directories, no network but, for a command
//! with `--allow-domain`, the broker's egress proxy on its loopback port
//! (`NetworkMode::LoopbackProxy`: the profile's one `network-outbound` rule names that port, the
//! proxy variables name it with the session's token), and the protected paths (`--protect`: the broker's own directories) neither read
//! nor written. The open-file and file-size limits are set by `/bin/sh`'s `ulimit` inside the
//! profile, just before the command (no `unsafe` pre-exec hook); the process and memory limits
//! are not (a gap the run names). The command runs in a process group of its own; the time
//! limit, `Stop` and the main process's end kill the group.
//!
//! This helper itself runs without a Seatbelt profile: macOS refuses to apply a sandbox inside a
//! sandboxed process (`sandbox_apply: Operation not permitted`, the kernel's
//! forbidden-sandbox-reinit), so a confined exec helper could start no command at all. Compiled
//! here, never run: there is no Mac (docs/macos.md).

use crate::threads::{pipe, Checked, Config, Launched, Tree};
use ipc_schema::exec::{NetworkMode, RunOutcome, SandboxReport};
use ipc_schema::tier::ConfinementTier;
use ipc_schema::{ErrorCode, ErrorReply};
use nix::sys::resource::{getrlimit, Resource};
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use sandbox::seatbelt::{CommandNetwork, CommandSpec as OsCommand};
use std::ffi::OsString;
use std::os::unix::fs::PermissionsExt;
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
}

impl Tree for Group {
    fn wait_timeout(&self, ms: u32) -> Result<Option<RunOutcome>, String> {
        let deadline = Instant::now() + Duration::from_millis(ms.into());
        loop {
            let status = self.child.lock().expect("child").try_wait();
            match status {
                Ok(Some(st)) => {
                    self.reaped.store(true, Ordering::SeqCst);
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
    // The proxy where the broker listens for this command (the caller's own proxy variables
    // were dropped as set by the sandbox; a connector, `NetworkMode::Proxy`, refused in
    // threads.rs).
    let network = match &c.spec.network {
        NetworkMode::LoopbackProxy { token, port } => {
            let vars = sandbox::command_env::loopback_proxy_vars(token, *port).map_err(invalid)?;
            c.vars.extend(vars);
            CommandNetwork::LoopbackProxy { port: *port }
        }
        _ => CommandNetwork::None,
    };
    let profile = OsCommand {
        grants,
        no_access: protect,
        no_write: Vec::new(),
        network,
        hide_sensitive: c.spec.hide.sensitive,
        hide_globs,
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
    let child = Command::new(&argv[0])
        .args(&argv[1..])
        .env_clear()
        .envs(c.vars.iter().map(|(k, v)| (k, v)))
        .current_dir(&cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::from(out_w))
        .stderr(Stdio::from(err_w))
        .process_group(0)
        .spawn()
        .map_err(|e| {
            ErrorReply::new(
                ErrorCode::Refused,
                format!("starting sandbox-exec for {}: {e}", program.display()),
            )
        })?;
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
        }),
        stdout: out_r,
        stderr: err_r,
        report,
    })
}

/// The program `argv[0]` names: a path (relative to `cwd` if not absolute), or a name looked up
/// in the command's `PATH`; an executable file either way.
fn find_program(name: &str, cwd: &Path, path_var: &str) -> Result<PathBuf, ErrorReply> {
    let runnable = |p: &Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    let (found, searched) = if name.contains('/') {
        let p = cwd.join(name);
        (runnable(&p).then(|| p.clone()), p.display().to_string())
    } else {
        let hit = std::env::split_paths(path_var)
            .filter(|d| d.is_absolute())
            .map(|d| d.join(name))
            .find(|p| runnable(p));
        (hit, path_var.to_string())
    };
    found.ok_or_else(|| {
        ErrorReply::new(
            ErrorCode::NotFound,
            format!("{name}: command not found in the sandbox (searched {searched})"),
        )
    })
}
