//! The Windows applier, end to end: this test binary re-executes itself as the confined child
//! (`--win-child MODE ...`), started through `sandbox::windows::spawn` with a helper policy, and
//! the child reports over its one inherited handle (a pipe) what its token and job say, whether
//! it can open a file outside its grant, and what `lockdown` concludes. Every denial is asserted
//! with its exact Win32 error beside a positive control (the same open by the unconfined
//! parent).
//!
//! Where Wine does not enforce a mechanism, the test detects it (`running_under_wine`, and the
//! child's own report) and prints `wine does not enforce X: not verified here`, asserting only
//! Wine's documented behaviour, so that an unenforced check is never counted as a pass. On
//! Windows every check is asserted.
//!
//! Under Wine 8, run `sandbox/tests/wine/setup.sh` first (Rust's std needs a
//! bcryptprimitives.dll that Wine 8 lacks), then
//! `CARGO_TARGET_X86_64_PC_WINDOWS_GNU_RUNNER=wine cargo test -p sandbox --target x86_64-pc-windows-gnu`.

#[cfg(windows)]
mod runner;

#[cfg(windows)]
fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some(win::CHILD) {
        return win::child(&args[2..]);
    }
    runner::run(win::TESTS)
}

#[cfg(not(windows))]
fn main() {
    println!("the Windows applier tests need Windows (or Wine); nothing to run on this platform");
}

#[cfg(windows)]
mod win {
    use sandbox::wincfg::{self, PathAce, WindowsPolicy};
    use sandbox::windows::{self as w, SpawnOptions, SpawnSpec};
    use sandbox::{FsProfile, LockdownOptions, Profile};
    use std::ffi::OsString;
    use std::io::{BufRead, BufReader, Write};
    use std::os::windows::io::{AsHandle, OwnedHandle};
    use std::path::{Path, PathBuf};
    use std::process::ExitCode;

    pub const CHILD: &str = "--win-child";
    const ACCESS_DENIED: i32 = 5;

    pub const TESTS: &[crate::runner::Test] = &[
        (
            "confined_child_token_job_files_and_kill_on_close",
            confined_child_token_job_files_and_kill_on_close,
        ),
        (
            "a_servers_child_runs_in_its_app_container_and_opens_only_what_names_it",
            a_servers_child_runs_in_its_app_container_and_opens_only_what_names_it,
        ),
        (
            "a_helper_not_spawned_confined_refuses_and_names_what_is_missing",
            a_helper_not_spawned_confined_refuses_and_names_what_is_missing,
        ),
        ("aces_are_applied_and_removed", aces_are_applied_and_removed),
        ("harden_broker_in_a_child", harden_broker_in_a_child),
        (
            "an_exec_child_and_its_grandchild_die_with_the_job",
            an_exec_child_and_its_grandchild_die_with_the_job,
        ),
        (
            "adopting_a_handle_that_was_not_inherited_is_refused",
            adopting_a_handle_that_was_not_inherited_is_refused,
        ),
        (
            "a_command_gets_its_stdio_allowlisted_env_and_cwd",
            a_command_gets_its_stdio_allowlisted_env_and_cwd,
        ),
        (
            "spawn_refuses_a_relative_program",
            spawn_refuses_a_relative_program,
        ),
        (
            "a_helpers_hello_crosses_its_inherited_channel_and_the_broker_checks_it",
            a_helpers_hello_crosses_its_inherited_channel_and_the_broker_checks_it,
        ),
    ];

    fn note_not_verified(what: &str) {
        println!("    wine does not enforce {what}: not verified here");
    }

    fn open_result(p: &Path) -> String {
        match std::fs::File::open(p) {
            Ok(_) => "ok".into(),
            Err(e) => format!("err {}", e.raw_os_error().unwrap_or(-1)),
        }
    }

    fn fs_profile(grant: &Path) -> Profile {
        Profile::Fs(FsProfile {
            read_only: vec![grant.to_path_buf()],
            read_write: vec![],
        })
    }

    /// The child: `--win-child MODE ARGS`. Modes:
    /// - `confined HANDLE OUTSIDE GRANT [servers]`: report on the inherited pipe, then wait to be
    ///   killed; its lockdown is the fs profile's of GRANT, or the servers profile's.
    /// - `plain GRANT DEGRADED`: run `lockdown` in a process started by std (not confined);
    ///   print the result on stdout.
    /// - `harden`: run `harden_broker`, then try to start a process; print both.
    pub fn child(args: &[String]) -> ExitCode {
        match args.first().map(String::as_str) {
            Some("confined") => confined_child(&args[1..]),
            Some("plain") => {
                let grant = PathBuf::from(&args[1]);
                let opts = LockdownOptions {
                    allow_degraded: args[2] == "degraded",
                    ..Default::default()
                };
                let profile = fs_profile(&grant);
                match sandbox::lockdown(&profile, &opts) {
                    Ok(r) => {
                        println!("lockdown ok degraded={:?}", r.degraded);
                        // What the broker would make of this hello, strict and degraded.
                        let policy = wincfg::helper_policy(&profile).unwrap();
                        for allow in [false, true] {
                            println!(
                                "broker verify allow_degraded={allow}: {:?}",
                                wincfg::verify_report(&policy, &r, allow)
                            );
                        }
                    }
                    Err(e) => println!("lockdown err {e}"),
                }
                ExitCode::SUCCESS
            }
            Some("tree") => tree_child(&args[1..]),
            Some("hello") => hello_child(&args[1..]),
            Some("command") => {
                // What a command sees: its environment (names) and working directory, on stdout.
                let mut names: Vec<String> = std::env::vars_os()
                    .map(|(k, _)| k.to_string_lossy().into_owned())
                    .collect();
                names.sort();
                println!("env {}", names.join(","));
                println!("cwd {}", std::env::current_dir().unwrap().display());
                ExitCode::from(7)
            }
            Some("adopt") => {
                use std::os::windows::io::AsRawHandle;
                // A handle this process opened itself (std opens it non-inheritable), a value
                // naming nothing, then a second adoption after the first failed ones.
                let own = std::fs::File::open(std::env::current_exe().unwrap()).unwrap();
                let value = (own.as_raw_handle() as usize).to_string();
                for v in [value.as_str(), "999999", "x"] {
                    match w::take_inherited_handle(v) {
                        Ok(_) => println!("adopt {v} ok"),
                        Err(e) => println!("adopt err {e}"),
                    }
                }
                ExitCode::SUCCESS
            }
            Some("sleep") => {
                std::thread::sleep(std::time::Duration::from_secs(60));
                ExitCode::from(4)
            }
            Some("harden") => {
                match sandbox::harden_broker(false) {
                    Ok(r) => println!("harden ok {:?}", r.windows),
                    Err(e) => println!("harden err {e}"),
                }
                let exe = std::env::current_exe().unwrap();
                match std::process::Command::new(exe).arg("--list").output() {
                    Ok(_) => println!("child process started"),
                    Err(e) => println!("child process refused {}", e.raw_os_error().unwrap_or(-1)),
                }
                ExitCode::SUCCESS
            }
            _ => ExitCode::from(2),
        }
    }

    fn confined_child(args: &[String]) -> ExitCode {
        let Ok(handle) = w::take_inherited_handle(&args[0]) else {
            return ExitCode::from(3);
        };
        let mut out = std::fs::File::from(handle);
        let outside = PathBuf::from(&args[1]);
        let grant = PathBuf::from(&args[2]);
        let mut say = |line: String| {
            let _ = writeln!(out, "{line}");
        };
        say(format!("pid {}", std::process::id()));
        match w::own_token_facts() {
            Ok(t) => say(format!(
                "token restricted={} sids={} privileges={} admins_usable={} write_restricted={:?}",
                t.restricted,
                t.restricting_sids.join(","),
                t.privileges.join(","),
                t.administrators_usable,
                t.write_restricted
            )),
            Err(e) => say(format!("token error {e}")),
        }
        match w::own_token_facts() {
            Ok(t) => say(format!("container {:?}", t.app_container)),
            Err(e) => say(format!("container error {e}")),
        }
        match w::own_job_facts() {
            Ok(j) => say(format!(
                "job in_job={} flags={} active={} ui={:?}",
                j.in_job, j.limit_flags, j.active_process_limit, j.ui_restrictions
            )),
            Err(e) => say(format!("job error {e}")),
        }
        say(format!("outside {}", open_result(&outside)));
        say(format!("inside {}", open_result(&grant.join("inside.txt"))));
        let profile = match args.get(3).map(String::as_str) {
            Some("servers") => Profile::Servers,
            _ => fs_profile(&grant),
        };
        let policy = wincfg::helper_policy(&profile).unwrap();
        for m in &policy.mitigations.0 {
            let state = match w::mitigation_in_force(m) {
                Ok(b) => b.to_string(),
                Err(e) => format!("error({e})"),
            };
            say(format!("mitigation {m} {state}"));
        }
        match sandbox::lockdown(&profile, &LockdownOptions::default()) {
            Ok(r) => say(format!("lockdown ok {:?}", r.windows)),
            Err(e) => say(format!("lockdown err {e}")),
        }
        say("ready".into());
        // Wait to be killed by the parent closing the job; exit on our own only long after.
        std::thread::sleep(std::time::Duration::from_secs(60));
        ExitCode::from(4)
    }

    /// `tree HANDLE`: start a grandchild (std's spawn, so it runs under this process's token and
    /// job) whose stdout is a copy of the channel, say its pid, then wait to be killed. The
    /// parent sees EOF on the channel only once both are gone.
    fn tree_child(args: &[String]) -> ExitCode {
        let Ok(handle) = w::take_inherited_handle(&args[0]) else {
            return ExitCode::from(3);
        };
        let mut out = std::fs::File::from(handle);
        let copy = out.try_clone().unwrap();
        let exe = std::env::current_exe().unwrap();
        match std::process::Command::new(exe)
            .args([CHILD, "sleep"])
            .stdin(std::process::Stdio::null())
            .stdout(copy)
            .stderr(std::process::Stdio::null())
            .spawn()
        {
            Ok(g) => {
                let _ = writeln!(out, "grandchild {}", g.id());
            }
            Err(e) => {
                let _ = writeln!(out, "grandchild err {e}");
            }
        }
        let _ = writeln!(out, "ready");
        std::thread::sleep(std::time::Duration::from_secs(60));
        ExitCode::from(4)
    }

    struct Scratch {
        root: tempfile::TempDir,
    }

    impl Scratch {
        fn new() -> Scratch {
            Scratch {
                root: tempfile::tempdir().unwrap(),
            }
        }
        fn dir(&self, name: &str) -> PathBuf {
            let d = self.root.path().join(name);
            std::fs::create_dir_all(&d).unwrap();
            d
        }
    }

    /// The ACEs a confined child of `policy` needs: the policy's own (the grant roots) and
    /// read/execute on the directory of this test binary, so the restricted token can map it.
    fn child_aces(policy: &WindowsPolicy) -> Vec<PathAce> {
        let exe_dir = std::env::current_exe()
            .unwrap()
            .parent()
            .unwrap()
            .to_path_buf();
        let mut aces = policy.aces.clone();
        aces.push(PathAce {
            path: exe_dir,
            sddl: format!("(A;OICI;FRFX;;;{})", policy.sid.0),
            why: "the test binary",
        });
        aces
    }

    /// This binary as the `confined` child (`--win-child confined HANDLE OUTSIDE GRANT
    /// [PROFILE]`), reporting on `writer`, its one inherited handle.
    fn confined_spec<'a>(
        exe: &'a Path,
        writer: &'a OwnedHandle,
        outside: &Path,
        grant: &Path,
        profile: Option<&str>,
    ) -> SpawnSpec<'a> {
        let mut args: Vec<OsString> = vec![
            CHILD.into(),
            "confined".into(),
            writer.as_handle().as_raw_handle_usize().to_string().into(),
            outside.as_os_str().to_owned(),
            grant.as_os_str().to_owned(),
        ];
        args.extend(profile.map(OsString::from));
        SpawnSpec {
            program: exe,
            args,
            cwd: None,
            env: w::env_from_allowlist(&["SystemRoot", "WINEPREFIX", "WINEDEBUG"]),
            inherit: vec![writer.as_handle()],
            stdin: None,
            stdout: None,
            stderr: None,
        }
    }

    /// ACEs added for a test, removed when it ends, also when it fails (they sit on the directory
    /// of the test binaries).
    struct Granted(Vec<w::AppliedAce>);

    impl Drop for Granted {
        fn drop(&mut self) {
            if let Err(e) = w::remove_aces(&self.0) {
                // Not a panic inside a drop that may run during one; say it loudly instead.
                eprintln!("removing the test's ACEs failed: {e}");
            }
        }
    }

    fn lines_until_ready(reader: std::io::PipeReader) -> Vec<String> {
        let mut lines = Vec::new();
        for line in BufReader::new(reader).lines() {
            let Ok(line) = line else { break };
            let done = line == "ready";
            lines.push(line);
            if done {
                break;
            }
        }
        lines
    }

    fn field<'a>(lines: &'a [String], prefix: &str) -> &'a str {
        lines
            .iter()
            .find_map(|l| l.strip_prefix(prefix))
            .unwrap_or_else(|| panic!("the child said nothing starting {prefix:?}: {lines:#?}"))
    }

    fn confined_child_token_job_files_and_kill_on_close() {
        let wine = w::running_under_wine();
        let s = Scratch::new();
        let grant = s.dir("grant");
        std::fs::write(grant.join("inside.txt"), "in").unwrap();
        let outside = s.dir("outside").join("secret.txt");
        std::fs::write(&outside, "out").unwrap();
        let policy = wincfg::helper_policy(&fs_profile(&grant)).unwrap();

        // Positive control: the same open, by this unconfined process, succeeds.
        assert_eq!(open_result(&outside), "ok");

        let _granted = match w::apply_aces(&child_aces(&policy)) {
            Ok(a) => Granted(a),
            Err(e) if wine => {
                println!("    wine refused the grant ACEs ({e})");
                note_not_verified("file ACEs (the grant is not applied)");
                Granted(Vec::new())
            }
            Err(e) => panic!("applying the grant ACEs: {e}"),
        };

        let (reader, writer) = std::io::pipe().unwrap();
        let exe = std::env::current_exe().unwrap();
        let writer_handle: OwnedHandle = writer.into();
        let spec = confined_spec(&exe, &writer_handle, &outside, &grant, None);
        // Strict first, as the spawner runs it. The spawner reads the token back before use, so
        // a system that hands back an unrestricted token is refused there.
        let mut child = match w::spawn(&policy, &spec, SpawnOptions::default()) {
            Ok(c) => {
                assert!(c.degraded().is_empty(), "{:?}", c.degraded());
                c
            }
            Err(e) if wine => {
                assert!(
                    e.to_string().contains(
                        "CreateRestrictedToken returned a token that is not what the policy asks"
                    ),
                    "{e}"
                );
                note_not_verified(
                    "CreateRestrictedToken (it returns an unrestricted token with every privilege; the strict spawn refuses it)",
                );
                // Degraded, to observe what Wine does do (the job, kill on close, the refusal
                // of the child's own lockdown).
                let c = w::spawn(
                    &policy,
                    &spec,
                    SpawnOptions {
                        allow_degraded: true,
                    },
                )
                .unwrap_or_else(|e| panic!("degraded spawn: {e}"));
                for d in c.degraded() {
                    println!("    degraded spawn under wine, not applied: {d}");
                }
                assert!(
                    c.degraded()
                        .iter()
                        .any(|d| d.contains("CreateRestrictedToken")),
                    "{:?}",
                    c.degraded()
                );
                c
            }
            Err(e) => panic!("spawn: {e}"),
        };
        // Our copy of the write end must go, or the reader never sees the child's end.
        drop(writer_handle);
        let lines = lines_until_ready(reader);
        println!("    child said: {lines:#?}");
        assert_eq!(
            lines.last().map(String::as_str),
            Some("ready"),
            "{lines:#?}"
        );
        assert_eq!(field(&lines, "pid "), child.pid().to_string());

        // The job: the child is in it, with the profile's limits.
        let job = field(&lines, "job ");
        assert!(job.starts_with("in_job=true "), "{job}");
        let flags: u32 = job
            .split_whitespace()
            .find_map(|f| f.strip_prefix("flags="))
            .unwrap()
            .parse()
            .unwrap();
        if flags != 0 || !wine {
            assert_ne!(
                flags & 0x2000,
                0,
                "JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE: {job}"
            );
            assert_ne!(
                flags & 0x400,
                0,
                "JOB_OBJECT_LIMIT_DIE_ON_UNHANDLED_EXCEPTION: {job}"
            );
            assert_ne!(flags & 0x8, 0, "JOB_OBJECT_LIMIT_ACTIVE_PROCESS: {job}");
            assert!(job.contains(" active=1 "), "{job}");
            assert!(job.ends_with(" ui=Ok(255)"), "{job}");
        } else {
            // Wine puts the process in the job but reports no limits from inside; kill-on-close
            // is still checked below by what it does.
            assert!(job.starts_with("in_job=true flags=0 active=0 "), "{job}");
            note_not_verified(
                "job limits as the process reads them (QueryInformationJobObject reports none)",
            );
        }

        // The token.
        let token = field(&lines, "token ");
        let restricted = token.starts_with("restricted=true ");
        if restricted || !wine {
            assert!(restricted, "{token}");
            assert!(
                token.contains(&policy.sid.0),
                "capability SID missing: {token}"
            );
            assert!(token.contains(wincfg::RESTRICTED), "{token}");
            assert!(token.contains("admins_usable=false"), "{token}");
            // The fs profile asks for a fully restricted token.
            assert!(token.ends_with("write_restricted=Ok(false)"), "{token}");
        } else {
            // Wine starts the process with the parent's token, ignoring the one passed.
            assert!(token.starts_with("restricted=false sids= "), "{token}");
            note_not_verified("the restricted token in the child");
        }

        // The file outside the grant.
        let out = field(&lines, "outside ");
        if restricted || !wine {
            assert_eq!(
                out,
                format!("err {ACCESS_DENIED}"),
                "ERROR_ACCESS_DENIED expected"
            );
            assert_eq!(field(&lines, "inside "), "ok", "the grant must be readable");
        } else {
            // Wine checks no file ACL against a token: the open succeeds.
            assert_eq!(out, "ok");
            note_not_verified(
                "file access checks against a restricted token (ERROR_ACCESS_DENIED)",
            );
        }

        // Mitigations set at spawn, as the child sees them before its lockdown.
        let mut all_on = true;
        for m in &policy.mitigations.0 {
            let state = field(&lines, &format!("mitigation {m} "));
            if !wine {
                assert_eq!(state, "true", "{m}");
            } else if state != "true" {
                all_on = false;
            }
        }
        if wine && !all_on {
            note_not_verified(
                "process mitigation policies (GetProcessMitigationPolicy reads them off)",
            );
        }

        // The child's own verdict.
        let verdict = field(&lines, "lockdown ");
        if restricted || !wine {
            assert!(verdict.starts_with("ok "), "{verdict}");
        } else {
            // Fail closed: without the token it refuses, naming what is missing.
            assert!(
                verdict.starts_with("err the fs profile is not confined"),
                "{verdict}"
            );
            assert!(verdict.contains("restricted token"), "{verdict}");
        }

        // Kill on close: alive while the job handle is held (positive control), gone once it
        // is closed.
        assert_eq!(
            child.wait_timeout(300).unwrap(),
            None,
            "the child died early"
        );
        child.close_job();
        let ended = child.wait_timeout(10_000).unwrap();
        if ended.is_none() && wine {
            note_not_verified("JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE");
            child.kill().unwrap();
        } else {
            assert!(
                ended.is_some(),
                "closing the job handle did not end the child"
            );
            assert_ne!(ended, Some(4), "the child exited on its own instead");
        }
    }

    /// The servers profile's AppContainer: the spawner makes a lowbox token from the restricted
    /// one, and the child's token is in the profile's AppContainer. A file whose directory
    /// grants the profile's capability SID but not the container's is refused
    /// (ERROR_ACCESS_DENIED); beside it, one whose directory names both opens, and the same
    /// file opens in this unconfined process (the positive controls). Under Wine, which has no
    /// `CreateAppContainerToken`, the strict spawn refuses, naming it; the degraded spawn names
    /// it, and the child's own lockdown refuses for the missing container.
    fn a_servers_child_runs_in_its_app_container_and_opens_only_what_names_it() {
        let wine = w::running_under_wine();
        let s = Scratch::new();
        let policy = wincfg::helper_policy(&Profile::Servers).unwrap();
        let container = policy.token.app_container.clone().expect("servers has one");
        let both = s.dir("both");
        std::fs::write(both.join("inside.txt"), "in").unwrap();
        let capability_only = s.dir("capability-only");
        let outside = capability_only.join("secret.txt");
        std::fs::write(&outside, "out").unwrap();
        assert_eq!(open_result(&outside), "ok", "positive control");

        let read = |path: &Path, sid: &str, why: &'static str| PathAce {
            path: path.to_path_buf(),
            sddl: format!("(A;OICI;FRFX;;;{sid})"),
            why,
        };
        let mut aces = child_aces(&policy);
        let exe_dir = aces.last().expect("the binary's ACE").path.clone();
        aces.push(read(
            &exe_dir,
            &container.0,
            "the test binary, for the container",
        ));
        aces.push(read(&both, &policy.sid.0, "capability"));
        aces.push(read(&both, &container.0, "container"));
        aces.push(read(&capability_only, &policy.sid.0, "capability only"));
        let _granted = match w::apply_aces(&aces) {
            Ok(a) => Granted(a),
            Err(e) if wine => {
                println!("    wine refused the ACEs ({e})");
                Granted(Vec::new())
            }
            Err(e) => panic!("applying the ACEs: {e}"),
        };

        let (reader, writer) = std::io::pipe().unwrap();
        let exe = std::env::current_exe().unwrap();
        let writer_handle: OwnedHandle = writer.into();
        let spec = confined_spec(&exe, &writer_handle, &outside, &both, Some("servers"));
        let child = match w::spawn(&policy, &spec, SpawnOptions::default()) {
            Ok(c) => {
                assert!(!wine, "wine made an AppContainer token");
                assert!(c.degraded().is_empty(), "{:?}", c.degraded());
                c
            }
            Err(e) if wine => {
                assert_eq!(
                    e.to_string(),
                    "app container: kernelbase.dll has no CreateAppContainerToken (every Windows from 8 on has it)"
                );
                note_not_verified(
                    "AppContainer tokens (kernelbase has no CreateAppContainerToken)",
                );
                let c = w::spawn(
                    &policy,
                    &spec,
                    SpawnOptions {
                        allow_degraded: true,
                    },
                )
                .unwrap_or_else(|e| panic!("degraded spawn: {e}"));
                let said = c.degraded().join(" | ");
                assert!(
                    said.contains("not applied at spawn: app container: kernelbase.dll has no CreateAppContainerToken"),
                    "{said}"
                );
                assert!(
                    said.contains(
                        "CreateRestrictedToken returned a token that is not what the policy asks: "
                    ),
                    "{said}"
                );
                assert!(
                    said.contains(&format!(
                        "app container: the token is in no AppContainer (the profile's is {})",
                        container.0
                    )),
                    "{said}"
                );
                c
            }
            Err(e) => panic!("spawn: {e}"),
        };
        drop(writer_handle);
        let lines = lines_until_ready(reader);
        println!("    child said: {lines:#?}");
        assert_eq!(
            lines.last().map(String::as_str),
            Some("ready"),
            "{lines:#?}"
        );
        let said = field(&lines, "container ");
        let verdict = field(&lines, "lockdown ");
        if wine {
            assert_eq!(said, "Ok(None)");
            assert_eq!(field(&lines, "outside "), "ok");
            assert!(
                verdict.starts_with("err the servers profile is not confined"),
                "{verdict}"
            );
            assert!(
                verdict.contains(&format!(
                    "app container: the token is in no AppContainer (the profile's is {})",
                    container.0
                )),
                "{verdict}"
            );
            note_not_verified("file access checks against an AppContainer token");
        } else {
            assert_eq!(said, format!("Ok(Some({:?}))", container.0));
            assert_eq!(
                field(&lines, "outside "),
                format!("err {ACCESS_DENIED}"),
                "a directory that does not name the container: ERROR_ACCESS_DENIED"
            );
            assert_eq!(field(&lines, "inside "), "ok", "one that names it opens");
            assert!(verdict.starts_with("ok "), "{verdict}");
        }
        // Closing the job ends it on Windows; Wine does not, so it is killed outright.
        child.kill().unwrap();
    }

    /// Exec's policy: write-restricted, no process limit, children allowed. Closing the job
    /// must end the child and the grandchild it started (the whole tree, as killing a namespace
    /// does on Linux).
    fn an_exec_child_and_its_grandchild_die_with_the_job() {
        let wine = w::running_under_wine();
        let policy = wincfg::helper_policy(&Profile::Exec).unwrap();
        let _granted = Granted(w::apply_aces(&child_aces(&policy)).unwrap());
        let (reader, writer) = std::io::pipe().unwrap();
        let exe = std::env::current_exe().unwrap();
        let writer_handle: OwnedHandle = writer.into();
        let spec = SpawnSpec {
            program: &exe,
            args: vec![
                CHILD.into(),
                "tree".into(),
                writer_handle
                    .as_handle()
                    .as_raw_handle_usize()
                    .to_string()
                    .into(),
            ],
            cwd: None,
            env: w::env_from_allowlist(&["SystemRoot", "WINEPREFIX", "WINEDEBUG"]),
            inherit: vec![writer_handle.as_handle()],
            stdin: None,
            stdout: None,
            stderr: None,
        };
        // Strict on Windows; under Wine the token is refused (see the first test), so degraded.
        let mut child = w::spawn(
            &policy,
            &spec,
            SpawnOptions {
                allow_degraded: wine,
            },
        )
        .unwrap_or_else(|e| panic!("spawn: {e}"));
        if !wine {
            assert!(child.degraded().is_empty(), "{:?}", child.degraded());
        }
        drop(writer_handle);
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = Vec::new();
            for line in BufReader::new(reader).lines() {
                match line {
                    Ok(l) => {
                        let ready = l == "ready";
                        lines.push(l);
                        if ready {
                            let _ = tx.send(Some(lines.clone()));
                        }
                    }
                    Err(_) => break,
                }
            }
            // EOF: every holder of the write end (child and grandchild) is gone.
            let _ = tx.send(None);
        });
        let timeout = std::time::Duration::from_secs(20);
        let lines = rx.recv_timeout(timeout).unwrap().expect("EOF before ready");
        println!("    tree child said: {lines:?}");
        let grandchild = field(&lines, "grandchild ");
        assert!(
            grandchild.parse::<u32>().is_ok(),
            "the exec child could not start a child: {grandchild}"
        );
        // Positive control: while the job handle is held, the pipe stays open.
        assert_eq!(child.wait_timeout(300).unwrap(), None);
        assert!(
            rx.try_recv().is_err(),
            "the pipe closed while the job was held"
        );
        child.close_job();
        assert!(
            child.wait_timeout(10_000).unwrap().is_some(),
            "the child outlived its job"
        );
        match rx.recv_timeout(timeout) {
            Ok(None) => {}
            Ok(Some(_)) => unreachable!("ready is sent once"),
            Err(_) => panic!("the grandchild {grandchild} outlived the job (the pipe stayed open)"),
        }
    }

    fn plain_child(grant: &Path, degraded: &str) -> String {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([CHILD, "plain"])
            .arg(grant)
            .arg(degraded)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(out.status.success(), "{text}");
        text
    }

    fn a_helper_not_spawned_confined_refuses_and_names_what_is_missing() {
        let s = Scratch::new();
        let grant = s.dir("grant");
        let refused = plain_child(&grant, "strict");
        assert!(
            refused.starts_with(
                "lockdown err the fs profile is not confined on this system, refusing to run: "
            ),
            "{refused}"
        );
        assert!(
            refused.contains("restricted token: the process token has no restricting SIDs"),
            "{refused}"
        );
        let sid = wincfg::capability_sid("gatehouse.fs").0;
        assert!(
            refused.contains(&sid),
            "names the capability SID: {refused}"
        );
        // This runner itself may run in a job (CI services do); only then can the child be in one.
        if !w::own_job_facts().unwrap().in_job {
            assert!(
                refused.contains("job object: the process is in no job"),
                "{refused}"
            );
        }
        // With --allow-degraded it runs, and the same pieces are listed.
        let degraded = plain_child(&grant, "degraded");
        assert!(degraded.starts_with("lockdown ok degraded="), "{degraded}");
        assert!(
            degraded.contains("restricted token: the process token has no restricting SIDs"),
            "{degraded}"
        );
        // The broker's check of that hello: refused unless the broker allows degraded helpers,
        // and then only because the helper named the same gaps itself.
        assert!(
            degraded.contains("broker verify allow_degraded=false: Err(\"the fs helper is not confined as its profile asks: restricted token: the process token has no restricting SIDs"),
            "{degraded}"
        );
        assert!(
            degraded.contains("broker verify allow_degraded=true: Ok(())"),
            "{degraded}"
        );
    }

    fn aces_are_applied_and_removed() {
        let wine = w::running_under_wine();
        let s = Scratch::new();
        let root = s.dir("project");
        let policy = wincfg::helper_policy(&Profile::Fs(FsProfile {
            read_only: vec![],
            read_write: vec![root.clone()],
        }))
        .unwrap();
        let sid = &policy.sid.0;
        let before = w::dacl_sddl(&root);
        let applied = w::apply_aces(&policy.aces);
        match (&before, &applied) {
            (Ok(before), Ok(applied)) => {
                assert!(!before.contains(sid.as_str()), "{before}");
                assert_eq!(applied.len(), 1);
                let after = w::dacl_sddl(&root).unwrap();
                let present = after.contains(&format!(";{sid})"));
                if present || !wine {
                    // FRFWFXSD as Windows renders it: the mask 0x1301bf, inherited by children.
                    assert!(
                        present && after.to_ascii_lowercase().contains("0x1301bf"),
                        "{after}"
                    );
                    w::remove_aces(applied).unwrap();
                    let removed = w::dacl_sddl(&root).unwrap();
                    assert!(!removed.contains(sid.as_str()), "{removed}");
                } else {
                    // Wine accepts SetNamedSecurityInfoW and keeps the DACL it had.
                    assert_eq!(&after, before);
                    w::remove_aces(applied).unwrap();
                    note_not_verified(
                        "file DACLs (SetNamedSecurityInfoW succeeds, the DACL read back is unchanged)",
                    );
                }
            }
            _ if wine => {
                println!("    wine: reading {before:?}, applying {applied:?}");
                note_not_verified("file DACLs (GetNamedSecurityInfoW/SetNamedSecurityInfoW)");
            }
            _ => panic!("reading {before:?}, applying {applied:?}"),
        }
        // An ACE the generator would never render is refused before anything is touched.
        let bad = [PathAce {
            path: root.clone(),
            sddl: format!("(A;OICI;GA;;;{sid})"),
            why: "test",
        }];
        let e = w::apply_aces(&bad).unwrap_err();
        assert!(e.to_string().contains("not one of FA FR FW FX SD"), "{e}");
    }

    fn harden_broker_in_a_child() {
        let wine = w::running_under_wine();
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([CHILD, "harden"])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        println!("    harden child said: {text}");
        assert!(out.status.success(), "{text}");
        if text.starts_with("harden ok") {
            // Its job's process limit of 1 must refuse a child process (ERROR_NOT_ENOUGH_QUOTA,
            // 1816), the counterpart of the router's no-exec rule.
            assert!(text.contains("child process refused 1816"), "{text}");
        } else if wine {
            // What Wine does not do is named in the refusal; nothing is claimed.
            assert!(text.starts_with("harden err "), "{text}");
            assert!(text.contains("mitigation"), "{text}");
            // harden_broker put the process in its job (limit 1) before failing the checks; Wine
            // starts the child regardless.
            assert!(text.contains("child process started"), "{text}");
            note_not_verified(
                "JOB_OBJECT_LIMIT_ACTIVE_PROCESS (a process in a job limited to 1 started a child)",
            );
            note_not_verified(&format!(
                "the broker's self-hardening ({})",
                text.lines().next().unwrap_or("")
            ));
        } else {
            panic!("harden_broker failed on Windows: {text}");
        }
    }

    fn adopting_a_handle_that_was_not_inherited_is_refused() {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([CHILD, "adopt"])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert!(
            lines[0].starts_with("adopt err confined spawn: handle ")
                && lines[0].ends_with(
                    "was not inherited: helpers are started by the gatehouse spawner, not by hand"
                ),
            "{text}"
        );
        // ERROR_INVALID_HANDLE
        assert!(
            lines[1].contains("GetHandleInformation(inherited channel) failed with Win32 error 6"),
            "{text}"
        );
        assert!(lines[2].contains("\"x\" is not a handle value"), "{text}");
    }

    /// A command (exec's per-command policy): stdout is a pipe the parent reads, the
    /// environment is exactly the allowlist, the working directory is the one given, the exit
    /// code comes back.
    fn a_command_gets_its_stdio_allowlisted_env_and_cwd() {
        let wine = w::running_under_wine();
        let s = Scratch::new();
        let work = s.dir("work");
        let spec_policy = sandbox::seatbelt::CommandSpec {
            grants: vec![(work.clone(), ipc_schema::exec::GrantAccess::ReadWrite)],
            no_access: vec![],
            no_write: vec![],
            network: sandbox::seatbelt::CommandNetwork::None,
            hide_sensitive: false,
            hide_globs: Vec::new(),
            own_dir: None,
            sockets: Vec::new(),
        };
        let policy =
            wincfg::command_policy(&spec_policy, ipc_schema::exec::CommandSlot::new(0).unwrap())
                .unwrap();
        let _granted = Granted(w::apply_aces(&child_aces(&policy)).unwrap());
        // Set in this process: one allowed, one not (as a secret-looking name would be).
        std::env::set_var("GH_WIN_VISIBLE", "1");
        std::env::set_var("GH_WIN_SECRET_TOKEN", "x");
        let (reader, writer) = std::io::pipe().unwrap();
        let writer: OwnedHandle = writer.into();
        let exe = std::env::current_exe().unwrap();
        let spec = SpawnSpec {
            program: &exe,
            args: vec![CHILD.into(), "command".into()],
            cwd: Some(&work),
            env: w::env_from_allowlist(&[
                "SystemRoot",
                "GH_WIN_VISIBLE",
                "WINEPREFIX",
                "WINEDEBUG",
            ]),
            inherit: vec![],
            stdin: None,
            stdout: Some(writer.as_handle()),
            stderr: None,
        };
        let child = w::spawn(
            &policy,
            &spec,
            SpawnOptions {
                allow_degraded: wine,
            },
        )
        .unwrap_or_else(|e| panic!("spawn: {e}"));
        if !wine {
            assert!(child.degraded().is_empty(), "{:?}", child.degraded());
        }
        drop(writer);
        let mut text = String::new();
        std::io::Read::read_to_string(&mut { reader }, &mut text).unwrap();
        assert_eq!(child.wait_timeout(10_000).unwrap(), Some(7), "{text}");
        let lines: Vec<&str> = text.lines().collect();
        let env = lines
            .iter()
            .find_map(|l| l.strip_prefix("env "))
            .unwrap_or_else(|| panic!("{text}"));
        let names: Vec<&str> = env.split(',').collect();
        assert!(names.contains(&"GH_WIN_VISIBLE"), "{env}");
        assert!(!names.iter().any(|n| n.contains("SECRET")), "{env}");
        // Wine's loader adds its own WINE* variables and SystemDrive to every process.
        assert!(
            names.iter().all(|n| [
                "SystemRoot",
                "SYSTEMROOT",
                "GH_WIN_VISIBLE",
                "WINEPREFIX",
                "WINEDEBUG"
            ]
            .contains(n)
                || (wine && (n.starts_with("WINE") || *n == "SystemDrive"))
                || n.starts_with('=')),
            "a variable outside the allowlist: {env}"
        );
        let cwd = lines
            .iter()
            .find_map(|l| l.strip_prefix("cwd "))
            .unwrap_or_else(|| panic!("{text}"));
        assert_eq!(
            std::fs::canonicalize(cwd).unwrap(),
            std::fs::canonicalize(&work).unwrap()
        );
    }

    /// A helper as it starts: adopts its inherited channel, locks down (degraded only where
    /// the parent says the spawn was), and says hello on the channel as one codec frame.
    fn hello_child(args: &[String]) -> ExitCode {
        let Ok(handle) = w::take_inherited_handle(&args[0]) else {
            return ExitCode::from(3);
        };
        let mut chan = std::fs::File::from(handle);
        let opts = LockdownOptions {
            allow_degraded: args[2] == "degraded",
            ..Default::default()
        };
        let report = match sandbox::lockdown(&fs_profile(Path::new(&args[1])), &opts) {
            Ok(r) => r,
            Err(e) => ipc_schema::status::LockdownReport::refused("fs", e.to_string()),
        };
        let hello = ipc_schema::Body::Hello(ipc_schema::status::Hello {
            role: ipc_schema::Role::Fs,
            pid: std::process::id(),
            lockdown: report,
        });
        match ipc_schema::codec::write_frame(&mut chan, &ipc_schema::Envelope::new(0, hello)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(_) => ExitCode::from(4),
        }
    }

    /// The Windows hello path end to end: the spawner's spawn with the channel as the one
    /// inherited handle, the helper's lockdown and report, the frame on the channel, and the
    /// broker's check of the report (`wincfg::verify_report`). On Windows the strict spawn and
    /// the strict check pass; under Wine (no restricted token) the spawn is degraded, and the
    /// broker refuses the hello strict and takes it only degraded.
    fn a_helpers_hello_crosses_its_inherited_channel_and_the_broker_checks_it() {
        let wine = w::running_under_wine();
        let s = Scratch::new();
        let grant = s.dir("grant");
        let policy = wincfg::helper_policy(&fs_profile(&grant)).unwrap();
        let (mut reader, writer) = std::io::pipe().unwrap();
        let exe = std::env::current_exe().unwrap();
        let writer_handle: OwnedHandle = writer.into();
        let spec = SpawnSpec {
            program: &exe,
            args: vec![
                CHILD.into(),
                "hello".into(),
                format!("{}", writer_handle.as_handle().as_raw_handle_usize()).into(),
                grant.clone().into_os_string(),
                if wine { "degraded" } else { "strict" }.into(),
            ],
            cwd: None,
            env: w::env_from_allowlist(&["SystemRoot", "WINEPREFIX", "WINEDEBUG"]),
            inherit: vec![writer_handle.as_handle()],
            stdin: None,
            stdout: None,
            stderr: None,
        };
        let child = w::spawn(
            &policy,
            &spec,
            SpawnOptions {
                allow_degraded: wine,
            },
        )
        .unwrap_or_else(|e| panic!("spawn: {e}"));
        drop(writer_handle);
        let env = ipc_schema::codec::read_frame(&mut reader, ipc_schema::MAX_FRAME)
            .expect("a well-formed frame")
            .expect("a hello before the channel closed");
        assert_eq!(env.id, 0);
        let ipc_schema::Body::Hello(hello) = env.body else {
            panic!("not a hello: {:?}", env.body);
        };
        assert_eq!(hello.role, ipc_schema::Role::Fs);
        assert_eq!(hello.pid, child.pid());
        let report = hello.lockdown;
        assert!(report.windows.is_some(), "{report:?}");
        if wine {
            note_not_verified("a confined helper's hello passing the broker's strict check");
            let e = wincfg::verify_report(&policy, &report, false).unwrap_err();
            assert!(
                e.contains("restricted token: the process token has no restricting SIDs"),
                "{e}"
            );
            assert_eq!(wincfg::verify_report(&policy, &report, true), Ok(()));
        } else {
            assert_eq!(wincfg::verify_report(&policy, &report, false), Ok(()));
        }
    }

    fn spawn_refuses_a_relative_program() {
        let policy = wincfg::helper_policy(&Profile::Net).unwrap();
        let spec = SpawnSpec {
            program: Path::new("helper.exe"),
            args: Vec::<OsString>::new(),
            cwd: None,
            env: Vec::new(),
            inherit: Vec::new(),
            stdin: None,
            stdout: None,
            stderr: None,
        };
        let e = w::spawn(&policy, &spec, SpawnOptions::default()).unwrap_err();
        assert!(e.to_string().contains("is not an absolute path"), "{e}");
    }

    /// The handle's value as the child sees it (a handle in the handle list keeps its value).
    trait RawValue {
        fn as_raw_handle_usize(&self) -> usize;
    }

    impl RawValue for std::os::windows::io::BorrowedHandle<'_> {
        fn as_raw_handle_usize(&self) -> usize {
            use std::os::windows::io::AsRawHandle;
            self.as_raw_handle() as usize
        }
    }
}
