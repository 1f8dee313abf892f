// The spawner on Windows, driven by the router's own end of its channel (issue 19).
#![cfg(windows)]
//! The `gatehouse-spawner` binary started and driven through `spawner::link` as the router does
//! (`Spawner::start`: `sandbox::windows::start_spawner`, its channel and a `PROCESS_DUP_HANDLE`
//! handle to the router as its only inherited handles), asked to start, observe, trace and kill
//! a real helper (the secrets-helper), whose channel it duplicates into this process.
//!
//! Under Wine the spawner and its helpers run degraded (Wine restricts no token and sets no
//! mitigation): the spawner is started with `--allow-degraded` there, and without it it refuses
//! to start, naming what does not hold.

use ipc_schema::codec::{read_frame_async, write_frame_async};
use ipc_schema::secrets::StoreKind;
use ipc_schema::status::LockdownReport;
use ipc_schema::{Body, Envelope, Role, MAX_FRAME};
use sandbox::windows as w;
use sandbox::{wincfg, Profile};
use spawner::link::{Link, Spawner, Started};
use std::ffi::OsString;
use std::io::Read;
use std::os::windows::io::{AsHandle, OwnedHandle};
use std::time::Duration;
use tokio::net::windows::named_pipe::NamedPipeServer;

fn wine() -> bool {
    w::running_under_wine()
}

/// Runs `test` on a runtime, as the router runs the link.
fn on_runtime<F: std::future::Future<Output = ()>>(test: F) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    tokio::task::LocalSet::new().block_on(&rt, test);
}

async fn start_spawner(degraded: bool) -> (Link, tokio::task::JoinHandle<String>, u32) {
    let spawner = Spawner::start(
        &gatehouse_tests::bin("gatehouse-spawner"),
        &gatehouse_tests::bin_dir(),
        degraded,
    )
    .await
    .unwrap_or_else(|e| panic!("start the spawner: {e}"));
    assert_eq!(spawner.lockdown().profile, "spawner");
    assert!(spawner.lockdown().windows.is_some());
    let pid = spawner.pid();
    let (link, serving) = spawner.serve().unwrap();
    (link, tokio::task::spawn_local(serving), pid)
}

/// The secrets-helper through the spawner: its pid, its end to come, its channel adopted, its
/// hello's report.
async fn start_secrets(
    link: &Link,
) -> (
    u32,
    tokio::sync::oneshot::Receiver<String>,
    NamedPipeServer,
    LockdownReport,
) {
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
    let Started {
        pid,
        channel,
        ended,
    } = link
        .start(Role::Secrets, args)
        .await
        .unwrap_or_else(|e| panic!("not started: {e}"));
    // The secrets-helper's channel takes no handles: the router gets no handle to it.
    assert!(channel.process.is_none());
    let mut chan = w::async_server(channel.pipe).unwrap();
    let hello = read_frame_async(&mut chan, MAX_FRAME)
        .await
        .expect("read the hello")
        .expect("the helper closed before its hello");
    let Body::Hello(hello) = hello.body else {
        panic!("not a hello: {:?}", hello.body);
    };
    assert_eq!(hello.role, Role::Secrets);
    assert_eq!(hello.pid, pid);
    (pid, ended, chan, hello.lockdown)
}

async fn ping(chan: &mut NamedPipeServer) {
    let ping = Envelope::new(7, Body::Ping { target: None });
    write_frame_async(chan, &ping).await.unwrap();
    let pong = read_frame_async(chan, MAX_FRAME).await.unwrap().unwrap();
    assert_eq!((pong.id, pong.body), (7, Body::Pong));
}

/// The helper's channel ends within 30 s (its process is gone).
async fn channel_ends(chan: &mut NamedPipeServer) {
    match tokio::time::timeout(Duration::from_secs(30), read_frame_async(chan, MAX_FRAME)).await {
        Err(_) => panic!("the helper's channel is still open after 30 s: the helper still runs"),
        Ok(Ok(None)) => {}
        Ok(Err(ipc_schema::FrameError::Io(e))) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
        Ok(other) => panic!("the channel goes on: {other:?}"),
    }
}

#[test]
fn the_spawner_starts_observes_traces_and_kills_a_helper_for_the_router() {
    on_runtime(async {
        let (link, serving, _) = start_spawner(wine()).await;
        let (pid, ended, mut chan, report) = start_secrets(&link).await;

        // The router's end works: a ping over the duplicated channel.
        ping(&mut chan).await;

        // Status: what the spawner reads of the helper from outside, which its hello must match.
        let observed = link.status(pid).await.unwrap();
        let policy =
            wincfg::helper_policy(&Profile::Secrets(StoreKind::CredentialManager)).unwrap();
        let own = report.windows.as_deref().unwrap();
        assert_eq!(wincfg::differences(own, &observed), Vec::<String>::new());
        assert!(observed.in_job, "{observed:?}");
        assert_eq!(
            wincfg::verify_observed(&policy, &report, &observed, wine()),
            Ok(())
        );
        // Status of anything but a helper it runs is an answer, not an observation.
        let e = link.status(std::process::id()).await.unwrap_err();
        assert!(e.contains("is not a helper this spawner runs"), "{e}");

        // Lineage: the helper is in one of the spawner's jobs; this process is not.
        assert_eq!(link.lineage(pid).await, Ok(true));
        assert_eq!(link.lineage(std::process::id()).await, Ok(false));

        // A kind that is not a helper is refused with the reason; the spawner serves on.
        let e = link.start(Role::Gateway, vec![]).await.err().unwrap();
        assert!(e.ends_with("is not a helper the spawner starts"), "{e}");

        // Kill: the helper's tree ends, the spawner says so, the channel ends.
        link.kill(pid);
        assert_eq!(ended.await.unwrap(), "killed by the spawner");
        channel_ends(&mut chan).await;
        // A kill of a helper that has ended crossed its Ended: not an error.
        link.kill(pid);
        assert_eq!(link.lineage(pid).await, Ok(false));

        // The router dropping its link ends the serving, and the spawner with it.
        drop(link);
        assert_eq!(
            serving.await.unwrap(),
            "the router dropped the spawner link"
        );
    });
}

#[test]
fn a_kill_of_a_process_it_did_not_start_ends_the_spawner_and_every_helper() {
    on_runtime(async {
        let (link, serving, _) = start_spawner(wine()).await;
        let (_, ended, mut chan, _) = start_secrets(&link).await;
        // Positive control: the helper answers while the spawner serves.
        ping(&mut chan).await;
        link.kill(std::process::id());
        assert_eq!(serving.await.unwrap(), "the spawner exited");
        assert_eq!(
            ended.await.unwrap(),
            "unknown: the spawner exited",
            "the helper's end cannot be told once the spawner is gone"
        );
        channel_ends(&mut chan).await;
        let e = link.lineage(1).await.unwrap_err();
        assert_eq!(e, "the spawner exited");
    });
}

#[test]
fn degraded_is_fixed_when_the_spawner_starts() {
    on_runtime(async {
        if wine() {
            // Wine sets no mitigation: a spawner not allowed to run degraded refuses to start.
            println!("wine does not enforce: the spawner's own mitigations (not verified here)");
            let e = Spawner::start(
                &gatehouse_tests::bin("gatehouse-spawner"),
                &gatehouse_tests::bin_dir(),
                false,
            )
            .await
            .err()
            .expect("refused");
            assert!(e.to_string().ends_with("exited before it was ready"), "{e}");
            // Why, from its stderr (started as `Spawner::start` does, stderr to a pipe).
            let (mut err_r, err_w) = std::io::pipe().unwrap();
            let err_w: OwnedHandle = err_w.into();
            let args: Vec<OsString> = vec![
                "--helper-dir".into(),
                gatehouse_tests::bin_dir().into_os_string(),
            ];
            let started = w::start_spawner(
                &gatehouse_tests::bin("gatehouse-spawner"),
                &args,
                err_w.as_handle(),
            )
            .unwrap();
            drop(err_w);
            assert_eq!(started.child.wait_timeout(30_000).unwrap(), Some(2));
            let mut text = String::new();
            err_r.read_to_string(&mut text).unwrap();
            assert!(
                text.starts_with("gatehouse-spawner: lockdown failed: ")
                    && text.contains("mitigation PROHIBIT_DYNAMIC_CODE_ALWAYS_ON"),
                "{text}"
            );
            return;
        }
        let (link, _serving, _) = start_spawner(false).await;
        let e = link
            .start(Role::Secrets, vec!["--allow-degraded".into()])
            .await
            .err()
            .unwrap();
        assert_eq!(
            e,
            "--allow-degraded was asked for secrets-helper, but the broker was not started with it"
        );
    });
}
