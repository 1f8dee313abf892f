// The spawner on Windows, driven as the router drives it (issue 19).
#![cfg(windows)]
//! The `gatehouse-spawner` binary started as the router starts it
//! (`sandbox::windows::start_spawner`: its channel and a `PROCESS_DUP_HANDLE` handle to the
//! router as its only inherited handles), asked over its channel to start, observe, trace and
//! kill a real helper (the secrets-helper), whose channel it duplicates into this process.
//!
//! Under Wine the spawner and its helpers run degraded (Wine restricts no token and sets no
//! mitigation): the spawner must be started with `--allow-degraded` there, and without it it
//! refuses to start, naming what does not hold.

use ipc_schema::codec::{read_frame, write_frame};
use ipc_schema::secrets::StoreKind;
use ipc_schema::spawn::{self, frame_record, RecordReader, SpawnReply, SpawnRequest};
use ipc_schema::{Body, Envelope, Role, MAX_FRAME};
use sandbox::windows as w;
use sandbox::{wincfg, Profile};
use std::ffi::OsString;
use std::fs::File;
use std::io::{Read, Write};
use std::os::windows::io::{AsHandle, OwnedHandle};

fn wine() -> bool {
    w::running_under_wine()
}

/// This test as the router: the spawner it started and their channel.
struct Router {
    child: w::ConfinedChild,
    writer: File,
    reader: RecordReader<File>,
}

impl Router {
    fn start(degraded: bool, stderr: std::os::windows::io::BorrowedHandle<'_>) -> Router {
        let mut args: Vec<OsString> = vec![
            "--helper-dir".into(),
            gatehouse_tests::bin_dir().into_os_string(),
        ];
        if degraded {
            args.push("--allow-degraded".into());
        }
        let started = w::start_spawner(&gatehouse_tests::bin("gatehouse-spawner"), &args, stderr)
            .unwrap_or_else(|e| panic!("start the spawner: {e}"));
        Router {
            writer: started.channel.try_clone().unwrap(),
            reader: RecordReader::new(started.channel),
            child: started.child,
        }
    }

    fn send(&mut self, req: &SpawnRequest) {
        let rec = spawn::encode(req).unwrap();
        self.writer.write_all(&frame_record(&rec)).unwrap();
    }

    /// The next record, or `None` once the spawner closed the channel.
    fn next(&mut self) -> Option<SpawnReply> {
        match self.reader.next_record() {
            Ok(Some(rec)) => Some(spawn::decode(&rec).unwrap()),
            Ok(None) => None,
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => None,
            Err(e) => panic!("reading the spawner: {e}"),
        }
    }

    fn ready(&mut self) {
        match self.next() {
            Some(SpawnReply::Ready { pid, lockdown }) => {
                assert_eq!(pid, self.child.pid());
                assert_eq!(lockdown.profile, "spawner");
                assert!(lockdown.windows.is_some(), "{lockdown:?}");
            }
            other => panic!("not Ready: {other:?}"),
        }
    }

    /// Starts the secrets-helper through the spawner; its pid, its channel (duplicated into
    /// this process) and its hello's report.
    fn start_secrets(&mut self, id: u64) -> (u32, File, ipc_schema::status::LockdownReport) {
        let mut args: Vec<OsString> = vec![
            "--channel".into(),
            "broker".into(),
            "--store".into(),
            "credential-manager".into(),
            "--namespace".into(),
            format!("spawnertest-{}", std::process::id()).into(),
        ];
        if wine() {
            args.push("--allow-degraded".into());
        }
        self.send(&SpawnRequest::Start {
            id,
            kind: Role::Secrets,
            args,
        });
        let (pid, handle) = match self.next() {
            Some(SpawnReply::StartedDuplicated {
                id: got,
                pid,
                handle,
            }) if got == id => (pid, handle),
            other => panic!("not started: {other:?}"),
        };
        let mut chan = File::from(
            w::adopt_duplicated_pipe(handle).unwrap_or_else(|e| panic!("adopt {handle:#x}: {e}")),
        );
        let hello = read_frame(&mut chan, MAX_FRAME)
            .expect("read the hello")
            .expect("the helper closed before its hello");
        let Body::Hello(hello) = hello.body else {
            panic!("not a hello: {:?}", hello.body);
        };
        assert_eq!(hello.role, Role::Secrets);
        assert_eq!(hello.pid, pid);
        (pid, chan, hello.lockdown)
    }
}

/// The helper's channel ends within 30 s (its process is gone); a read still waiting then
/// fails the test rather than hanging it.
fn ended(chan: &File) -> bool {
    let mut chan = chan.try_clone().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(match read_frame(&mut chan, MAX_FRAME) {
            Ok(None) => Ok(()),
            Err(ipc_schema::FrameError::Io(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => {
                Ok(())
            }
            other => Err(format!("{other:?}")),
        });
    });
    match rx.recv_timeout(std::time::Duration::from_secs(30)) {
        Ok(Ok(())) => true,
        Ok(Err(e)) => panic!("the channel goes on: {e}"),
        Err(_) => panic!("the helper's channel is still open after 30 s: the helper still runs"),
    }
}

#[test]
fn the_spawner_starts_observes_traces_and_kills_a_helper_for_the_router() {
    let mut r = Router::start(wine(), std::io::stderr().as_handle());
    r.ready();
    let (pid, mut chan, report) = r.start_secrets(1);

    // The router's end works: a ping over the duplicated channel.
    write_frame(&mut chan, &Envelope::new(1, Body::Ping { target: None })).unwrap();
    let pong = read_frame(&mut chan, MAX_FRAME).unwrap().unwrap();
    assert_eq!((pong.id, pong.body), (1, Body::Pong));

    // Status: what the spawner reads of the helper from outside, which its hello must match.
    r.send(&SpawnRequest::Status { id: 2, pid });
    let observed = match r.next() {
        Some(SpawnReply::Observed {
            id: 2,
            observed: Ok(o),
        }) => *o,
        other => panic!("not observed: {other:?}"),
    };
    let policy = wincfg::helper_policy(&Profile::Secrets(StoreKind::CredentialManager)).unwrap();
    let own = report.windows.as_deref().unwrap();
    assert_eq!(wincfg::differences(own, &observed), Vec::<String>::new());
    assert!(observed.in_job, "{observed:?}");
    assert_eq!(
        wincfg::verify_observed(&policy, &report, &observed, wine()),
        Ok(())
    );
    // Status of anything but a helper it runs is an answer, not an observation.
    r.send(&SpawnRequest::Status {
        id: 3,
        pid: std::process::id(),
    });
    match r.next() {
        Some(SpawnReply::Observed {
            id: 3,
            observed: Err(e),
        }) => assert!(e.contains("is not a helper this spawner runs"), "{e}"),
        other => panic!("{other:?}"),
    }

    // Lineage: the helper is in one of the spawner's jobs; this process is not.
    r.send(&SpawnRequest::Lineage { id: 4, pid });
    assert_eq!(
        r.next(),
        Some(SpawnReply::Lineage {
            id: 4,
            under: Ok(true)
        })
    );
    r.send(&SpawnRequest::Lineage {
        id: 5,
        pid: std::process::id(),
    });
    assert_eq!(
        r.next(),
        Some(SpawnReply::Lineage {
            id: 5,
            under: Ok(false)
        })
    );

    // A kind that does not run on Windows is refused with the reason; the spawner serves on.
    r.send(&SpawnRequest::Start {
        id: 6,
        kind: Role::Fs,
        args: vec![],
    });
    match r.next() {
        Some(SpawnReply::NotStarted { id: 6, reason }) => assert!(
            reason.starts_with("the fs-helper does not run on Windows yet"),
            "{reason}"
        ),
        other => panic!("{other:?}"),
    }

    // Kill: the helper's tree ends, the spawner says so, the channel ends.
    r.send(&SpawnRequest::Kill { pid });
    assert_eq!(
        r.next(),
        Some(SpawnReply::Ended {
            pid,
            how: "killed by the spawner".into()
        })
    );
    assert!(ended(&chan));
    // A kill of a helper that has ended crossed its Ended: not an error.
    r.send(&SpawnRequest::Kill { pid });
    r.send(&SpawnRequest::Lineage { id: 7, pid });
    assert_eq!(
        r.next(),
        Some(SpawnReply::Lineage {
            id: 7,
            under: Ok(false)
        })
    );

    // The router closing the channel ends the spawner cleanly.
    let Router {
        child,
        writer,
        reader,
    } = r;
    drop(writer);
    drop(reader);
    assert_eq!(child.wait_timeout(30_000).unwrap(), Some(0));
}

#[test]
fn a_kill_of_a_process_it_did_not_start_ends_the_spawner_and_every_helper() {
    let mut r = Router::start(wine(), std::io::stderr().as_handle());
    r.ready();
    let (_pid, mut chan, _) = r.start_secrets(1);
    // Positive control: the helper answers while the spawner serves.
    write_frame(&mut chan, &Envelope::new(1, Body::Ping { target: None })).unwrap();
    assert_eq!(
        read_frame(&mut chan, MAX_FRAME).unwrap().unwrap().body,
        Body::Pong
    );
    r.send(&SpawnRequest::Kill {
        pid: std::process::id(),
    });
    assert_eq!(r.next(), None, "the spawner closes the channel");
    assert_eq!(r.child.wait_timeout(30_000).unwrap(), Some(2));
    assert!(ended(&chan), "its helper ended with it");
}

#[test]
fn degraded_is_fixed_when_the_spawner_starts() {
    let (mut err_r, err_w) = std::io::pipe().unwrap();
    let err_w: OwnedHandle = err_w.into();
    let mut r = Router::start(false, err_w.as_handle());
    drop(err_w);
    if wine() {
        // Wine sets no mitigation: a spawner not allowed to run degraded refuses to start.
        println!("wine does not enforce: the spawner's own mitigations (not verified here)");
        assert_eq!(r.next(), None);
        assert_eq!(r.child.wait_timeout(30_000).unwrap(), Some(2));
        let mut text = String::new();
        err_r.read_to_string(&mut text).unwrap();
        assert!(
            text.starts_with("gatehouse-spawner: lockdown failed: ")
                && text.contains("mitigation PROHIBIT_DYNAMIC_CODE_ALWAYS_ON"),
            "{text}"
        );
        return;
    }
    r.ready();
    r.send(&SpawnRequest::Start {
        id: 1,
        kind: Role::Secrets,
        args: vec!["--allow-degraded".into()],
    });
    match r.next() {
        Some(SpawnReply::NotStarted { id: 1, reason }) => assert_eq!(
            reason,
            "--allow-degraded was asked for secrets-helper, but the broker was not started with it"
        ),
        other => panic!("{other:?}"),
    }
}
