//! A scratch tree and a real, locked-down fs-helper serving it.
#![allow(dead_code)]

use gatehouse_tests::HelperUnderTest;
use ipc_schema::fs::{
    Caps, FsError, FsHelperConfig, FsPath, FsReply, FsRequest, GrantConfig, GrantId,
};
use ipc_schema::{Body, Role};
use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// `<tmp>/work` is granted as `w` (rwed, recursive), `<tmp>/ro` as `ro` (read, recursive),
/// `<tmp>/outside` is in no grant, `<tmp>/data` is gatehouse's (protected) data dir.
pub struct Fixture {
    pub tmp: tempfile::TempDir,
    pub root: PathBuf,
    pub helper: HelperUnderTest,
}

pub fn base_dir() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::Builder::new()
        .prefix("gh-fs-")
        .tempdir()
        .expect("tempdir");
    let root = std::fs::canonicalize(tmp.path()).expect("canonical tempdir");
    for d in ["work", "ro", "outside", "data/checkpoints"] {
        std::fs::create_dir_all(root.join(d)).expect("mkdir");
    }
    std::fs::write(root.join("outside/secret.txt"), b"outside secret\n").unwrap();
    std::fs::write(root.join("ro/readme.txt"), b"read only\n").unwrap();
    // Let an unprivileged run write here too.
    let _ = std::process::Command::new("chmod")
        .args(["-R", "a+rwX"])
        .arg(&root)
        .status();
    (tmp, root)
}

pub const RWED: Caps = Caps {
    read: true,
    write: true,
    edit: true,
    delete: true,
};
pub const R: Caps = Caps {
    read: true,
    write: false,
    edit: false,
    delete: false,
};

/// A recursive, unconfirmed grant without globs.
pub fn grant(id: &str, root: &Path, caps: Caps) -> GrantConfig {
    GrantConfig {
        id: GrantId(id.into()),
        root: root.as_os_str().as_bytes().to_vec(),
        caps,
        recursive: true,
        confirmed: false,
        include: vec![],
        exclude: vec![],
    }
}

pub fn default_config(root: &Path) -> FsHelperConfig {
    FsHelperConfig {
        grants: vec![
            grant("w", &root.join("work"), RWED),
            grant("ro", &root.join("ro"), R),
        ],
        checkpoint_dir: root
            .join("data/checkpoints")
            .as_os_str()
            .as_bytes()
            .to_vec(),
        protect: vec![root.join("data").as_os_str().as_bytes().to_vec()],
    }
}

/// The helper's command line for `c`, as the broker writes it.
pub fn args_of(c: &FsHelperConfig) -> Vec<OsString> {
    vec!["--config".into(), c.to_arg().into()]
}

pub fn default_args(root: &Path) -> Vec<OsString> {
    args_of(&default_config(root))
}

impl Fixture {
    pub fn new() -> Fixture {
        let (tmp, root) = base_dir();
        let args = default_args(&root);
        Self::with_args(tmp, root, &args)
    }

    pub fn with_args(tmp: tempfile::TempDir, root: PathBuf, args: &[OsString]) -> Fixture {
        let helper = HelperUnderTest::spawn(Role::Fs, args);
        Fixture { tmp, root, helper }
    }

    pub fn work(&self) -> PathBuf {
        self.root.join("work")
    }

    pub fn req(&mut self, r: FsRequest) -> FsReply {
        match self.helper.request(Body::Fs(r)) {
            Body::FsReply(reply) => reply,
            other => panic!("not an fs reply: {other:?}"),
        }
    }

    /// The request must fail; returns why.
    pub fn fail(&mut self, r: FsRequest) -> FsError {
        match self.req(r.clone()) {
            FsReply::Failed(e) => e,
            other => panic!("{r:?} succeeded: {other:?}"),
        }
    }
}

/// A path in grant `w`.
pub fn w(p: &str) -> FsPath {
    wb(p.as_bytes())
}

pub fn wb(p: &[u8]) -> FsPath {
    FsPath::InGrant {
        grant: GrantId("w".into()),
        path: p.to_vec(),
    }
}

pub fn abs(p: &Path) -> FsPath {
    FsPath::Absolute(p.as_os_str().as_bytes().to_vec())
}

pub fn read(path: FsPath) -> FsRequest {
    FsRequest::ReadFile {
        path,
        offset: 0,
        length: 0,
    }
}

pub fn shown(p: &Path) -> String {
    p.display().to_string()
}
