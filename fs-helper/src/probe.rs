//! Test-only probes (the `test-hooks` feature): operations that bypass the helper's own checks,
//! so tests can show what the kernel sandbox alone refuses, beside a positive control.

use ipc_schema::fs::{FsReply, TestProbe};

#[cfg(feature = "test-hooks")]
pub fn run(p: TestProbe) -> FsReply {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    let result = match p {
        TestProbe::OpenAbsolute { path, write } => std::fs::OpenOptions::new()
            .read(!write)
            .append(write)
            .open(OsStr::from_bytes(&path))
            .map(drop),
        TestProbe::CreateSocket => std::os::unix::net::UnixDatagram::unbound().map(drop),
        TestProbe::Exec => std::process::Command::new("/bin/true")
            .env_clear()
            .status()
            .map(drop),
    };
    FsReply::TestProbe {
        errno: result.err().map(|e| e.raw_os_error().unwrap_or(-1)),
    }
}

#[cfg(not(feature = "test-hooks"))]
pub fn run(_: TestProbe) -> FsReply {
    use ipc_schema::fs::{FsError, FsErrorKind};
    FsReply::Failed(FsError::new(
        FsErrorKind::Unsupported,
        "test probes are compiled out of this build",
    ))
}

#[cfg(all(test, not(feature = "test-hooks")))]
mod tests {
    use super::*;
    use ipc_schema::fs::FsErrorKind;

    #[test]
    fn release_builds_refuse_every_probe() {
        for p in [
            TestProbe::OpenAbsolute {
                path: b"/etc/hostname".to_vec(),
                write: false,
            },
            TestProbe::CreateSocket,
            TestProbe::Exec,
        ] {
            let FsReply::Failed(e) = run(p) else {
                panic!("a probe ran in a build without test-hooks");
            };
            assert_eq!(e.kind, FsErrorKind::Unsupported);
        }
    }
}
