//! Shared by the console and demo tests: a tmux server of the test's own, to run a program in a
//! real terminal, read its screen and press its keys.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// One tmux server of the test's own (its own socket), running one window.
pub struct Tmux {
    socket: PathBuf,
    _dir: tempfile::TempDir,
}

impl Tmux {
    /// Runs `shell_cmd` in a new detached `cols` x `rows` window, started in `cwd`.
    pub fn start(shell_cmd: &str, cwd: &Path, cols: u16, rows: u16) -> Tmux {
        let dir = tempfile::Builder::new()
            .prefix("gh-tmux-")
            .tempdir()
            .unwrap();
        let t = Tmux {
            socket: dir.path().join("tmux.sock"),
            _dir: dir,
        };
        let out = t
            .cmd()
            .args([
                "new-session",
                "-d",
                "-s",
                "t",
                "-x",
                &cols.to_string(),
                "-y",
                &rows.to_string(),
            ])
            .arg("-c")
            .arg(cwd)
            .arg(shell_cmd)
            .output()
            .unwrap_or_else(|e| panic!("cannot run tmux ({e}): scripts/test-deps.sh installs it"));
        assert!(
            out.status.success(),
            "tmux: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        t
    }

    pub fn cmd(&self) -> Command {
        let mut c = Command::new("tmux");
        c.arg("-u")
            .arg("-f")
            .arg("/dev/null")
            .arg("-S")
            .arg(&self.socket)
            .env("TERM", "xterm-256color")
            .env("LC_ALL", "C.UTF-8");
        c
    }

    pub fn screen(&self) -> String {
        let out = self
            .cmd()
            .args(["capture-pane", "-p", "-t", "t"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The screen with up to `lines` lines of scroll-back above it.
    pub fn history(&self, lines: u32) -> String {
        let out = self
            .cmd()
            .args([
                "capture-pane",
                "-p",
                "-J",
                "-t",
                "t",
                "-S",
                &format!("-{lines}"),
            ])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    pub fn keys(&self, keys: &str) {
        let out = self
            .cmd()
            .args(["send-keys", "-t", "t", keys])
            .output()
            .unwrap();
        assert!(out.status.success());
    }

    /// The pid of the pane's shell.
    pub fn pane_pid(&self) -> u32 {
        let out = self
            .cmd()
            .args(["display-message", "-p", "-t", "t", "#{pane_pid}"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
    }

    /// Waits until the screen satisfies `ok`; fails with the screen after `secs`.
    pub fn wait_for(&self, what: &str, secs: u64, ok: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let s = self.screen();
            if ok(&s) {
                return s;
            }
            assert!(
                Instant::now() < deadline,
                "waiting for {what}; the screen:\n{s}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.cmd().arg("kill-server").output();
    }
}

pub fn sh_quote(p: &Path) -> String {
    format!("'{}'", p.display().to_string().replace('\'', "'\\''"))
}
