//! Test fixtures: a private session bus with a real Secret Service (gnome-keyring-daemon),
//! unique namespaces, and the helper started as the broker starts it.
#![allow(dead_code)]

use gatehouse_tests::HelperUnderTest;
use ipc_schema::secrets::{
    CredentialName, CredentialSpec, HostPattern, SecretValue, SecretsReply, SecretsRequest, SendAs,
};
use ipc_schema::{Body, Role};
use std::ffi::OsString;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A dbus-daemon and a gnome-keyring-daemon (unlocked, secrets component only), both private
/// to this test: their own socket, HOME and XDG dirs in a temporary directory. Killed on drop.
pub struct SecretServiceUnderTest {
    pub dir: tempfile::TempDir,
    pub address: String,
    dbus: Child,
    keyring: Child,
}

fn private_env(cmd: &mut Command, dir: &Path) {
    cmd.env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("HOME", dir)
        .env("XDG_DATA_HOME", dir.join("data"))
        .env("XDG_CONFIG_HOME", dir.join("config"))
        .env("XDG_CACHE_HOME", dir.join("cache"))
        .env("XDG_RUNTIME_DIR", dir.join("run"));
}

impl SecretServiceUnderTest {
    pub fn start() -> SecretServiceUnderTest {
        for tool in ["dbus-daemon", "gnome-keyring-daemon"] {
            assert!(
                Command::new("sh")
                    .args(["-c", &format!("command -v {tool}")])
                    .output()
                    .map(|o| o.status.success())
                    .unwrap_or(false),
                "{tool} is missing: run scripts/test-deps.sh (Debian packages dbus, gnome-keyring)"
            );
        }
        let dir = tempfile::Builder::new().prefix("gh-ss-").tempdir().unwrap();
        for d in ["data", "config", "cache", "run"] {
            std::fs::create_dir_all(dir.path().join(d)).unwrap();
        }
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(
            dir.path().join("run"),
            std::fs::Permissions::from_mode(0o700),
        )
        .unwrap();
        let sock = dir.path().join("bus");
        let mut cmd = Command::new("dbus-daemon");
        private_env(&mut cmd, dir.path());
        let mut dbus = cmd
            .args(["--session", "--nofork", "--nopidfile", "--print-address=1"])
            .arg(format!("--address=unix:path={}", sock.display()))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start dbus-daemon");
        let mut line = String::new();
        BufReader::new(dbus.stdout.take().unwrap())
            .read_line(&mut line)
            .expect("dbus-daemon address");
        let address = line.trim().to_string();
        assert!(address.starts_with("unix:"), "dbus-daemon printed {line:?}");

        let mut cmd = Command::new("gnome-keyring-daemon");
        private_env(&mut cmd, dir.path());
        let mut keyring = cmd
            .args(["--unlock", "--foreground", "--components=secrets"])
            .env("DBUS_SESSION_BUS_ADDRESS", &address)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start gnome-keyring-daemon");
        // The login keyring's password; closing stdin tells the daemon it is complete.
        keyring
            .stdin
            .take()
            .unwrap()
            .write_all(b"test-password")
            .unwrap();
        let ss = SecretServiceUnderTest {
            dir,
            address,
            dbus,
            keyring,
        };
        ss.wait_for_name("org.freedesktop.secrets");
        ss
    }

    fn wait_for_name(&self, name: &str) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let out = Command::new("dbus-send")
                .env("DBUS_SESSION_BUS_ADDRESS", &self.address)
                .args([
                    "--session",
                    "--print-reply",
                    "--dest=org.freedesktop.DBus",
                    "/org/freedesktop/DBus",
                    "org.freedesktop.DBus.NameHasOwner",
                    &format!("string:{name}"),
                ])
                .output()
                .expect("dbus-send");
            if String::from_utf8_lossy(&out.stdout).contains("boolean true") {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{name} never appeared on the test bus"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for SecretServiceUnderTest {
    fn drop(&mut self) {
        for c in [&mut self.keyring, &mut self.dbus] {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A namespace no other test (or the user's own instance) uses.
pub fn namespace(tag: &str) -> String {
    format!("t-{tag}-{}-{:08x}", std::process::id(), rand_u32())
}

fn rand_u32() -> u32 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    t.subsec_nanos() ^ (t.as_secs() as u32).rotate_left(7)
}

/// A CLI command's own helper (`--channel private`) on the keyutils store; tests of the broker's
/// channel replace the channel ([`on_channel`]).
pub fn keyutils_args(ns: &str) -> Vec<OsString> {
    vec![
        "--store".into(),
        "keyutils".into(),
        "--namespace".into(),
        ns.into(),
        "--channel".into(),
        "private".into(),
    ]
}

/// `args` with their `--channel` set to `channel`.
pub fn on_channel(mut args: Vec<OsString>, channel: &str) -> Vec<OsString> {
    if let Some(i) = args.iter().position(|a| a == "--channel") {
        args.drain(i..i + 2);
    }
    args.extend(["--channel".into(), channel.into()]);
    args
}

pub fn ss_args(address: &str, ns: &str) -> Vec<OsString> {
    vec![
        "--store".into(),
        "secret-service".into(),
        "--dbus-address".into(),
        address.into(),
        "--namespace".into(),
        ns.into(),
        "--channel".into(),
        "private".into(),
    ]
}

pub fn spawn(args: &[OsString]) -> HelperUnderTest {
    HelperUnderTest::spawn(Role::Secrets, args)
}

pub fn ask(h: &mut HelperUnderTest, req: SecretsRequest) -> SecretsReply {
    match h.request(Body::Secrets(req)) {
        Body::SecretsReply(r) => r,
        other => panic!("expected a SecretsReply, got {other:?}"),
    }
}

pub fn name(s: &str) -> CredentialName {
    CredentialName::parse(s).unwrap()
}

pub fn spec(n: &str, hosts: &[&str], send_as: SendAs) -> CredentialSpec {
    CredentialSpec {
        name: name(n),
        hosts: hosts
            .iter()
            .map(|h| HostPattern::parse(h).unwrap())
            .collect(),
        send_as,
    }
}

pub fn value(s: &str) -> SecretValue {
    SecretValue::from_slice(s.as_bytes())
}

/// Deletes every credential of a namespace when dropped (keyutils keys outlive the test
/// process otherwise).
pub struct Cleanup(pub Vec<OsString>, pub Vec<CredentialName>);

impl Drop for Cleanup {
    fn drop(&mut self) {
        if self.1.is_empty() {
            return;
        }
        let mut h = spawn(&self.0);
        for n in &self.1 {
            let _ = h.request(Body::Secrets(SecretsRequest::Delete { name: n.clone() }));
        }
    }
}
