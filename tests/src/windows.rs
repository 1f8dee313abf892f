//! The check a Windows helper's hello gets before anything is routed to it, as the spawner and
//! broker will make it: the spawner's view of the process from outside
//! (`ConfinedChild::observe`: its token, its job, its mitigations) against the helper's own
//! report, then the profile's policy (`wincfg::verify_observed`). One implementation for the
//! helpers' Windows tests.

use ipc_schema::status::LockdownReport;
use sandbox::wincfg::{self, WindowsPolicy};
use sandbox::windows::{self as w, running_under_wine, ConfinedChild};

/// Asserts that `report` (a helper's hello) says what the spawner sees of `child` and that the
/// check passes: strict on Windows; under Wine, which restricts no token, refused strict naming
/// the token and passed with `--allow-degraded` (printed as not verified). Then, on the same
/// process, a report that claims more than the process has is refused even degraded, naming
/// the field.
pub fn check_hello(policy: &WindowsPolicy, child: &ConfinedChild, report: &LockdownReport) {
    let helper = &policy.profile;
    let observed = child
        .observe(policy)
        .unwrap_or_else(|e| panic!("the spawner cannot read the {helper} helper: {e}"));
    println!("the spawner sees the {helper} helper's process as: {observed:?}");
    let own = report.windows.as_deref().expect("a Windows report");
    assert_eq!(
        wincfg::differences(own, &observed),
        Vec::<String>::new(),
        "the {helper} helper's report and the spawner's view of it"
    );
    if running_under_wine() {
        println!("wine does not enforce: the {helper} helper's restricted token and job passing the broker's strict check (not verified here)");
        let e = wincfg::verify_observed(policy, report, &observed, false).unwrap_err();
        assert!(e.contains("restricted token"), "{e}");
        assert_eq!(
            wincfg::verify_observed(policy, report, &observed, true),
            Ok(())
        );
    } else {
        assert_eq!(
            wincfg::verify_observed(policy, report, &observed, false),
            Ok(())
        );
    }
    // Another process of the user (this test) may wait on the helper and query its basics
    // (the positive control), not read or write its memory (PROCESS_VM_READ | PROCESS_VM_WRITE
    // | PROCESS_VM_OPERATION): the process descriptor the spawner gave it.
    const WAIT_AND_QUERY: u32 = 0x0010_1000;
    const VM: u32 = 0x0010 | 0x0020 | 0x0008;
    w::open_process(child.pid(), WAIT_AND_QUERY)
        .unwrap_or_else(|e| panic!("waiting on the {helper} helper: {e}"));
    // (Wine checks process descriptors too, so this holds under Wine as on Windows.)
    match w::open_process(child.pid(), VM) {
        Err(e) => assert_eq!(e.code(), Some(5), "{e}"),
        Ok(_) => panic!("another process of the user opened the {helper} helper's memory"),
    }
    // The helper read the same descriptor back on itself and says so.
    assert!(report.dumpable_off, "{report:?}");
    // A report that claims a restricted token the process does not have (under Wine), or
    // denies the one it has (on Windows): refused whatever --allow-degraded says.
    let mut forged = report.clone();
    let claim = !observed.restricted_token;
    forged
        .windows
        .as_mut()
        .expect("a Windows report")
        .restricted_token = claim;
    let e = wincfg::verify_observed(policy, &forged, &observed, true).unwrap_err();
    assert!(
        e.starts_with(&format!(
            "the {helper} helper's report does not match what the spawner reads of its process: restricted token: it says {claim}, the spawner sees {}",
            !claim
        )),
        "{e}"
    );
}

/// A secrets-helper spawned as the Windows spawner spawns it (the secrets profile's policy;
/// degraded under Wine, which restricts no token), its hello checked by [`check_hello`], and
/// the broker's end of its channel: how a test reaches the Credential Manager as gatehouse does
/// (the command line's own private helper is strict, so Wine refuses it).
pub struct SecretsHelper {
    pub child: ConfinedChild,
    chan: std::fs::File,
    stderr: std::io::PipeReader,
    next: u64,
}

impl SecretsHelper {
    /// With the helper's own arguments (`--channel`, `--store`, `--namespace`, ...).
    pub fn spawn(mut args: Vec<std::ffi::OsString>) -> SecretsHelper {
        use ipc_schema::codec::read_frame;
        use ipc_schema::secrets::StoreKind;
        use ipc_schema::{Body, Role, MAX_FRAME};
        use sandbox::Profile;
        use std::io::Read;
        use std::os::windows::io::{AsHandle, OwnedHandle};
        let policy = wincfg::helper_policy(&Profile::Secrets(StoreKind::CredentialManager))
            .expect("the secrets profile's Windows policy");
        let (mut stderr, stderr_w) = std::io::pipe().unwrap();
        let stderr_w: OwnedHandle = stderr_w.into();
        if running_under_wine() {
            args.push("--allow-degraded".into());
        }
        let w::SpawnedHelper { child, channel } = w::spawn_helper(
            &policy,
            &crate::bin("secrets-helper"),
            &args,
            w::ChannelIo::Blocking,
            w::ChannelIo::Blocking,
            stderr_w.as_handle(),
            w::SpawnOptions {
                allow_degraded: running_under_wine(),
            },
        )
        .unwrap_or_else(|e| panic!("spawn: {e}"));
        // Ours would keep the pipe open after the helper exits.
        drop(stderr_w);
        let mut chan = channel;
        let hello = match read_frame(&mut chan, MAX_FRAME) {
            Ok(Some(env)) => env,
            other => {
                let code = child.wait_timeout(30_000);
                let mut text = String::new();
                let _ = stderr.read_to_string(&mut text);
                panic!("no hello ({other:?}); the helper ended with {code:?}: {text}");
            }
        };
        assert_eq!(hello.id, 0);
        let Body::Hello(hello) = hello.body else {
            panic!("not a hello: {:?}", hello.body);
        };
        assert_eq!(hello.role, Role::Secrets);
        assert_eq!(hello.pid, child.pid());
        let report = hello.lockdown;
        assert!(report.windows.is_some(), "{report:?}");
        // The spawner's view of the process against its report, then the broker's check.
        check_hello(&policy, &child, &report);
        SecretsHelper {
            child,
            chan,
            stderr,
            next: 1,
        }
    }

    pub fn send(&mut self, body: ipc_schema::Body) -> u64 {
        let id = self.next;
        self.next += 1;
        ipc_schema::codec::write_frame(&mut self.chan, &ipc_schema::Envelope::new(id, body))
            .expect("write a request");
        id
    }

    pub fn ask(
        &mut self,
        req: ipc_schema::secrets::SecretsRequest,
    ) -> ipc_schema::secrets::SecretsReply {
        use ipc_schema::Body;
        use std::io::Read;
        let id = self.send(Body::Secrets(req));
        let env = match ipc_schema::codec::read_frame(&mut self.chan, ipc_schema::MAX_FRAME) {
            Ok(Some(env)) => env,
            other => {
                let code = self.child.wait_timeout(30_000);
                let mut text = String::new();
                let _ = self.stderr.read_to_string(&mut text);
                panic!("no reply ({other:?}); the helper ended with {code:?}: {text}");
            }
        };
        assert_eq!(env.id, id);
        match env.body {
            Body::SecretsReply(r) => r,
            other => panic!("expected a SecretsReply, got {other:?}"),
        }
    }

    /// Closes the broker's end; returns the helper's exit code and what it wrote on stderr.
    pub fn close(self) -> (u32, String) {
        self.end(true)
    }

    /// Waits for the helper to end on its own (the channel stays open meanwhile).
    pub fn wait_exit(self) -> (u32, String) {
        self.end(false)
    }

    fn end(self, close_first: bool) -> (u32, String) {
        use std::io::Read;
        let SecretsHelper {
            child,
            chan,
            mut stderr,
            ..
        } = self;
        let chan = if close_first {
            drop(chan);
            None
        } else {
            Some(chan)
        };
        let code = child
            .wait_timeout(30_000)
            .expect("wait for the helper")
            .expect("the helper exits once its channel is closed");
        drop(chan);
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        (code, text)
    }
}
