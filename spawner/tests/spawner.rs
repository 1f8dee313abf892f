// Drives the Linux binaries (ipc_schema::platform::Missing elsewhere).
#![cfg(target_os = "linux")]
//! The spawner binary, driven through the router's link: it starts only helpers, from its own
//! directory; kills and reports only what it started; and takes its helpers with it.
#![forbid(unsafe_code)]
#![cfg(feature = "link")]

use ipc_schema::Role;
use spawner::link::Spawner;
use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

/// A stand-in "fs-helper": a shell that writes its pid to the channel (fd 3) and sleeps.
fn helper_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for name in ["fs-helper", "net-helper"] {
        let p = dir.path().join(name);
        std::fs::write(&p, "#!/bin/sh\necho \"$$ $*\" >&3\nexec sleep 600\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    dir
}

fn alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .unwrap_or_default()
            .contains(") Z ")
}

#[test]
fn starts_kills_and_reports_only_its_own_helpers() {
    let dir = helper_dir();
    let sp = Spawner::start(
        std::path::Path::new(env!("CARGO_BIN_EXE_gatehouse-spawner")),
        dir.path(),
        false,
    )
    .expect("spawner starts");
    let spawner_pid = sp.pid();
    let own = sp.lockdown();
    assert!(own.no_new_privs && own.stray_fds_closed && own.env_cleared && own.dumpable_off);
    assert_eq!(own.profile, "spawner");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let (link, drive) = sp.serve().unwrap();
        let driver = tokio::spawn(drive);

        // A helper starts with its arguments and its channel as fd 3.
        let started = link
            .start(Role::Fs, vec!["--grant".into(), "x".into()])
            .await
            .expect("fs-helper starts");
        let mut chan = std::os::unix::net::UnixStream::from(started.channel);
        let mut line = String::new();
        use std::io::BufRead;
        std::io::BufReader::new(&mut chan)
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), format!("{} --grant x", started.pid));

        // The kernel's view: of its helper, of the router (us), of itself; of nothing else.
        let st = link.status(started.pid).await.expect("status of a helper");
        assert_eq!(st.uid, nix::unistd::getuid().as_raw());
        assert!(link.status(std::process::id()).await.is_ok());
        assert!(link.status(spawner_pid).await.is_ok());
        let refused = link.status(1).await.unwrap_err();
        assert!(refused.contains("not a helper"), "{refused}");

        // Not a helper kind: refused, nothing started.
        let e = link
            .start(Role::Ui, vec![])
            .await
            .err()
            .expect("ui is refused");
        assert!(e.contains("not a helper"), "{e}");
        // A helper kind whose binary is missing: refused with the path.
        let e = link
            .start(Role::Exec, vec![])
            .await
            .err()
            .expect("no exec-helper here");
        assert!(e.contains("exec-helper"), "{e}");

        // A helper with less confinement than the broker was started with: refused.
        let e = link
            .start(Role::Net, vec!["--allow-degraded".into()])
            .await
            .err()
            .expect("--allow-degraded is refused");
        assert!(e.contains("not started with it"), "{e}");

        // Kill: the exit comes back, described.
        link.kill(started.pid);
        let how = tokio::time::timeout(Duration::from_secs(10), started.ended)
            .await
            .expect("ended in time")
            .expect("ended reported");
        assert_eq!(how, "killed by SIGKILL");
        assert!(!alive(started.pid));

        // A helper still running when the router lets go is killed with the spawner.
        let second = link
            .start(Role::Net, vec![])
            .await
            .expect("net-helper starts");
        assert!(alive(second.pid));
        drop(link);
        let why = tokio::time::timeout(Duration::from_secs(10), driver)
            .await
            .expect("driver ends")
            .unwrap();
        assert!(why.contains("dropped") || why.contains("exited"), "{why}");
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while alive(second.pid) && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(!alive(second.pid), "the helper outlived its spawner");
    });
}

#[test]
fn a_kill_of_a_process_it_did_not_start_ends_the_spawner() {
    let dir = helper_dir();
    let sp = Spawner::start(
        std::path::Path::new(env!("CARGO_BIN_EXE_gatehouse-spawner")),
        dir.path(),
        false,
    )
    .unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let (link, drive) = sp.serve().unwrap();
        let driver = tokio::spawn(drive);
        let started = link.start(Role::Fs, vec![]).await.unwrap();
        // Positive control: the spawner answers.
        assert!(link.status(started.pid).await.is_ok());
        link.kill(1);
        let why = tokio::time::timeout(Duration::from_secs(10), driver)
            .await
            .expect("the spawner ends")
            .unwrap();
        assert_eq!(why, "the spawner exited");
        let how = started.ended.await.unwrap();
        assert!(how.starts_with("unknown"), "{how}");
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while alive(started.pid) && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(!alive(started.pid));
    });
}
