//! The exec-helper on Windows (issue 19): lock down, say hello, serve, with each command
//! confined by the restricted-token tier.
//!
//! A command is started by `sandbox::windows::spawn` with the command policy `wincfg` generates
//! (`command_policy`): a write-restricted token restricted to the command SID, the `Start`'s
//! slot's SID and RESTRICTED, a job object of its own (kill on close, the run's process limit,
//! every UI
//! restriction, each process's committed memory at the run's memory limit), only its stdout and
//! stderr pipes inherited, no stdin, an environment built by the same rules as on Linux
//! (`sandbox::command_env`). Before anything starts, the helper reads
//! back the DACL of every grant root and protected path and checks the ACE the policy names is
//! there (`wincfg::dacl_holds`): the broker applies them, the helper does not trust that it did.
//!
//! What the tier cannot give is refused, or with `--allow-degraded` run and named in the
//! report's `degraded`, never silently dropped: outbound network is refused on Windows only by
//! the WFP filters of `gatehouse setup network-filters`, which hold for a command when they
//! held for the helper's own try at lockdown; the file-size and open-file limits have no job
//! limit; reads are not confined (key material included); exclude globs and secret-looking
//! files inside a grant are not masked. An agent's
//! session (`gatehouse run`) gets its state directory as its profile (`USERPROFILE`, `HOME`,
//! `TEMP`, `APPDATA`, ...) and the variables that name its pipe, token and MCP config; the
//! broker serves the pipe. A third-party server gets its state directory as its profile too, and
//! as its stdin and stdout two connections to the pipe the broker serves for it; the egress
//! proxy is the broker's, on a loopback port (`NetworkMode::LoopbackProxy`), named in the proxy
//! variables. Reads are the user's own: a write-restricted token restricts writes only
//! (docs/SECURITY.md). When the command's main process ends its job is closed, which ends
//! everything it left running, as the pid namespace does on Linux.
//!
//! The serving (threads, the run table, `Poll` and `Stop`) and the checks every OS makes are
//! `threads.rs`; this file is what Windows adds: the policy, the ACE read-back, the spawn.

use crate::threads::{pipe, Checked, Config, Launched, Tree};
use ipc_schema::exec::{NetworkMode, RunOutcome, SandboxReport};
use ipc_schema::tier::ConfinementTier;
use ipc_schema::{ErrorCode, ErrorReply};
use sandbox::command_env;
use sandbox::wincfg;
use sandbox::windows as w;
use std::ffi::OsString;
use std::os::windows::io::AsHandle;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// What `CreateProcess` runs directly when `argv[0]` names no extension. A batch file needs
/// `cmd.exe /c`, named as such: nothing here starts a shell that was not asked for.
const RUNNABLE: [&str; 2] = ["exe", "com"];

pub fn main() -> ExitCode {
    crate::threads::main(launch, ConfinementTier::RestrictedToken)
}

impl Tree for w::ConfinedChild {
    fn wait_timeout(&self, ms: u32) -> Result<Option<RunOutcome>, String> {
        // An NTSTATUS (0xC0000005) reads as a negative status, as Windows' own tools show it.
        w::ConfinedChild::wait_timeout(self, ms)
            .map(|code| code.map(|c| RunOutcome::Exited(c as i32)))
            .map_err(|e| e.to_string())
    }

    /// Ends the job: the whole tree.
    fn kill(&self) {
        let _ = w::ConfinedChild::kill(self);
    }
}

/// From a checked command to a running confined process, or a refusal that says why.
fn launch(mut c: Checked, cfg: &Config) -> Result<Launched, ErrorReply> {
    let invalid = |why: String| ErrorReply::new(ErrorCode::Invalid, why);
    let refused = |why: String| ErrorReply::new(ErrorCode::Refused, why);
    let spec = &c.spec;
    // What the tier cannot give this command: refused, or run and named with --allow-degraded.
    let mut gaps = vec![
        "the file-size and open-file limits are not applied (a job has no limit for them; the process and memory limits are set)".to_string(),
        "reads are not confined (a write-restricted token restricts writes only): the command reads whatever this user can, the protected table's places (key material) included".to_string(),
    ];
    let slot = spec.slot.ok_or_else(|| invalid("no command slot".into()))?;
    let mut policy = wincfg::exec_command_policy(&spec.grants, &cfg.protect, slot)
        .map_err(|e| invalid(e.to_string()))?;
    policy.job.active_processes = Some(u32::try_from(spec.limits.processes).unwrap_or(u32::MAX));
    policy.job.process_memory = Some(spec.limits.memory);
    if let Some(gap) = wincfg::outbound_gap(&policy, cfg.outbound.as_ref()) {
        gaps.insert(0, gap);
    }
    gaps.extend(missing_aces(&policy));
    gaps.append(&mut c.gaps);
    c.gaps = gaps;
    c.refuse_gaps(cfg)?;

    // The environment: the Linux rules (checked), and what Windows' own DLLs need.
    let system_root = std::env::var("SystemRoot").unwrap_or_else(|_| r"C:\Windows".into());
    let mut set = vec![("SystemRoot".to_string(), system_root.clone())];
    if !c.vars.iter().any(|(k, _)| k.eq_ignore_ascii_case("PATH")) {
        set.push((
            "PATH".into(),
            format!(r"{system_root}\System32;{system_root}"),
        ));
    }
    // The egress proxy, where the broker listens for this command (the filters of
    // `gatehouse setup network-filters` let commands reach those ports and nothing else).
    if let NetworkMode::LoopbackProxy { token, port } = &c.spec.network {
        set.extend(command_env::loopback_proxy_vars(token, *port).map_err(invalid)?);
    }
    // `gatehouse run` and a third-party server: the profile is the state directory; an agent's
    // pipe, token and MCP config are named after the filter, as on Linux.
    let (agent, server) = (c.user.agent.as_ref(), c.user.server.as_ref());
    set.extend(command_env::windows_state_vars(agent, server, &spec.grants).map_err(invalid)?);
    command_env::set_vars_nocase(&mut c.vars, set);
    let spec = &c.spec;
    let program = find_program(&spec.argv[0], &spec.cwd, &c.path_var())
        .map_err(|(code, why)| ErrorReply::new(code, why))?;

    let (out_r, out_w) = pipe("stdout")?;
    let (err_r, err_w) = pipe("stderr")?;
    // A third-party server's stdin and stdout: its two connections to the broker's pipe for it.
    let server_io = (c.user.server.as_ref().and_then(|s| s.run_name.as_ref()))
        .map(|run| sandbox::endpoint::connect_twice(&run.server_pipe()))
        .transpose()
        .map_err(|e| refused(format!("the server's stdio pipe: {e}")))?;
    let child = w::spawn(
        &policy,
        &w::SpawnSpec {
            program: &program,
            args: spec.argv[1..].iter().map(OsString::from).collect(),
            cwd: Some(&spec.cwd),
            env: c
                .vars
                .iter()
                .map(|(k, v)| (OsString::from(k), OsString::from(v)))
                .collect(),
            inherit: Vec::new(),
            stdin: server_io.as_ref().map(|(i, _)| i.as_handle()),
            stdout: Some(
                server_io
                    .as_ref()
                    .map_or(out_w.as_handle(), |(_, o)| o.as_handle()),
            ),
            stderr: Some(err_w.as_handle()),
        },
        w::SpawnOptions {
            allow_degraded: cfg.allow_degraded,
        },
    )
    .map_err(|e| refused(format!("starting {}: {e}", program.display())))?;
    // Only the child holds the write ends now: the pipes end when its tree does (a server's
    // stdout is its pipe, so the captured one ends at once).
    drop((out_w, err_w, server_io));
    c.gaps.extend(child.degraded().iter().cloned());
    let report = SandboxReport {
        program: program.display().to_string(),
        tier: ConfinementTier::RestrictedToken,
        namespaces: Vec::new(),
        // Not Unix ids: the command runs as the user, under a restricted token.
        uid: u32::MAX,
        gid: u32::MAX,
        landlock_abi: 0,
        seccomp_denylist: false,
        masked: Vec::new(),
        env_dropped: c.env_dropped,
        degraded: c.gaps,
    };
    Ok(Launched {
        tree: Box::new(child),
        stdout: out_r,
        stderr: err_r,
        report,
    })
}

/// The program `argv[0]` names: a path (absolute, or relative to `cwd`), or a name looked up in
/// the command's `PATH` with the extensions `CreateProcess` runs directly.
fn find_program(name: &str, cwd: &Path, path_var: &str) -> Result<PathBuf, (ErrorCode, String)> {
    let Some(found) = sandbox::program_path::find(name, path_var, cwd, &RUNNABLE) else {
        let searched = match name.contains(['\\', '/']) || Path::new(name).is_absolute() {
            true => cwd.join(name).display().to_string(),
            false => path_var.to_string(),
        };
        return Err((
            ErrorCode::NotFound,
            format!("{name}: command not found in the sandbox (searched {searched})"),
        ));
    };
    if !RUNNABLE.contains(&sandbox::program_path::extension(&found).as_str()) {
        return Err((
            ErrorCode::Refused,
            format!(
                "{} is not a program Windows starts directly; a batch file runs as [\"cmd.exe\", \"/d\", \"/c\", ...]",
                found.display()
            ),
        ));
    }
    Ok(found)
}

/// Each ACE the policy names that the path's DACL, read back, does not hold.
fn missing_aces(policy: &wincfg::WindowsPolicy) -> Vec<String> {
    let mut missing = Vec::new();
    for ace in &policy.aces {
        let held = match (wincfg::parse_ace(&ace.sddl), w::dacl_sddl(&ace.path)) {
            (Ok(want), Ok(dacl)) => wincfg::dacl_holds(&dacl, &want),
            _ => false,
        };
        if !held {
            missing.push(format!(
                "{} has no ACE {} ({}): the broker applies it before a Start",
                ace.path.display(),
                ace.sddl,
                ace.why
            ));
        }
    }
    missing
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipc_schema::exec::{CommandSpec, GrantAccess, Hide, Limits, NetworkMode, PathGrant};

    fn spec(dir: &Path) -> CommandSpec {
        CommandSpec {
            argv: vec!["cmd.exe".into(), "/d".into(), "/c".into(), "echo x".into()],
            cwd: dir.to_path_buf(),
            grants: vec![PathGrant {
                path: dir.to_path_buf(),
                access: GrantAccess::ReadWrite,
            }],
            env: Vec::new(),
            network: NetworkMode::None,
            limits: Limits::default(),
            hide: Hide::default(),
            slot: Some(ipc_schema::exec::CommandSlot::new(0).unwrap()),
            user: None,
        }
    }

    #[test]
    fn without_allow_degraded_a_gap_refuses_before_anything_starts() {
        let dir = tempfile::tempdir().unwrap();
        let strict = Config {
            protect: Vec::new(),
            allow_degraded: false,
            outbound: None,
        };
        let checked = |s| Checked::new(s, None).expect("checked");
        let e = launch(checked(spec(dir.path())), &strict)
            .err()
            .expect("refused");
        assert_eq!(e.code, ErrorCode::Refused);
        assert!(
            e.message.starts_with(
                "this command's confinement on Windows falls short of its policy, so nothing ran: outbound network is not refused"
            ),
            "{}",
            e.message
        );
        // No ACE was applied for the grant here (the broker does that): named by path.
        assert!(
            e.message.contains(&format!(
                "{} has no ACE (A;OICI;FRFWFXSD;;;",
                dir.path().display()
            )),
            "{}",
            e.message
        );
        // Positive control: the same command with --allow-degraded starts, naming the gaps.
        let degraded = Config {
            protect: Vec::new(),
            allow_degraded: true,
            outbound: None,
        };
        let started = launch(checked(spec(dir.path())), &degraded).expect("started");
        assert!(started.report.degraded[0]
            .starts_with("outbound network is not refused (it did not try)"));
        // When the helper's own try was refused (the filters hold for the command SID its
        // token carries), the network is no gap of the command's; the rest still are.
        let filtered = Config {
            outbound: Some(ipc_schema::status::OutboundProbe::Refused),
            ..degraded
        };
        let started = launch(checked(spec(dir.path())), &filtered).expect("started");
        assert!(
            !started
                .report
                .degraded
                .iter()
                .any(|g| g.contains("outbound")),
            "{:?}",
            started.report.degraded
        );
        assert!(started.report.degraded[0].starts_with("the file-size"));
        assert!(started.report.degraded[1].starts_with("reads are not confined"));
        assert_eq!(
            started.tree.wait_timeout(30_000),
            Ok(Some(RunOutcome::Exited(0)))
        );
        assert_eq!(
            started.tree.wait_timeout(30_000),
            Ok(Some(RunOutcome::Exited(0)))
        );
    }

    /// The token is restricted to the slot whose SID the broker's ACEs name: a Start that
    /// names none is refused before anything starts (beside it, the same one with a slot
    /// starts: `without_allow_degraded_a_gap_refuses_before_anything_starts`).
    #[test]
    fn a_start_without_a_command_slot_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = spec(dir.path());
        s.slot = None;
        let e = Checked::new(s, None).err().expect("refused");
        assert_eq!(
            (e.code, e.message.as_str()),
            (
                ErrorCode::Invalid,
                "a Start on Windows names the command slot the broker applied its ACEs for"
            )
        );
    }

    #[test]
    fn programs_are_found_as_createprocess_runs_them() {
        let root = std::env::var("SystemRoot").unwrap();
        let path = format!(r"{root}\System32");
        let dir = tempfile::tempdir().unwrap();
        let cmd = find_program("cmd", dir.path(), &path).unwrap();
        assert!(
            cmd.to_string_lossy()
                .to_ascii_lowercase()
                .ends_with(r"\cmd.exe"),
            "{cmd:?}"
        );
        assert_eq!(find_program("cmd.exe", dir.path(), &path).unwrap(), cmd);
        let (code, why) = find_program("nope", dir.path(), &path).unwrap_err();
        assert_eq!(code, ErrorCode::NotFound);
        assert_eq!(
            why,
            format!("nope: command not found in the sandbox (searched {path})")
        );
        // A relative PATH entry is never searched (it would depend on the working directory).
        std::fs::write(dir.path().join("tool.exe"), b"MZ").unwrap();
        assert!(find_program("tool", dir.path(), ".").is_err());
        assert_eq!(
            find_program(r".\tool", dir.path(), &path).unwrap(),
            dir.path().join("tool.exe")
        );
        std::fs::write(dir.path().join("go.bat"), b"@echo").unwrap();
        let (code, why) =
            find_program("go.bat", dir.path(), &dir.path().to_string_lossy()).unwrap_err();
        assert_eq!(code, ErrorCode::Refused);
        assert!(why.contains("cmd.exe"), "{why}");
    }
}
