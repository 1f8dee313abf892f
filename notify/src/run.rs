//! Running the user's commands: the hook (the card's summary on stdin) and the "open" action.
//!
//! Each is an argv run directly, never through a shell, with stdout and stderr discarded (a
//! hook's chatter is not the notifier's output), in a thread of its own: a hook that fails or
//! hangs delays nothing. A hook still running at its timeout is killed; at most
//! [`MAX_RUNNING`] commands run at once, and a card that finds them all busy is reported and
//! not handed to the hook (the notification still shows).

use std::io::Write;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub const MAX_RUNNING: usize = 8;

/// `CREATE_NEW_PROCESS_GROUP` (WinBase.h): the hook gets no Ctrl-C meant for the notifier.
#[cfg(windows)]
const CREATE_NEW_PROCESS_GROUP: u32 = 0x0000_0200;

/// How one run ended, as the notifier reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ended {
    Exited(i32),
    Signalled,
    /// Killed at its timeout.
    TimedOut,
    /// It could not be started (or its stdin not written).
    NotStarted(String),
    /// [`MAX_RUNNING`] commands were running.
    Busy,
}

impl std::fmt::Display for Ended {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Ended::Exited(c) => write!(f, "exited with status {c}"),
            Ended::Signalled => f.write_str("was killed by a signal"),
            Ended::TimedOut => f.write_str("was still running at its timeout and was killed"),
            Ended::NotStarted(e) => write!(f, "could not start: {e}"),
            Ended::Busy => write!(f, "was not run: {MAX_RUNNING} commands were running"),
        }
    }
}

/// Starts and supervises commands.
#[derive(Clone, Default)]
pub struct Runner {
    running: Arc<AtomicUsize>,
}

impl Runner {
    /// Runs `argv` with `stdin` written to it, killing it after `timeout`; `done` gets how it
    /// ended, on the supervising thread. Returns at once.
    pub fn spawn(
        &self,
        argv: &[String],
        stdin: Option<Vec<u8>>,
        timeout: Option<Duration>,
        done: impl FnOnce(Ended) + Send + 'static,
    ) {
        if self.running.fetch_add(1, Ordering::SeqCst) >= MAX_RUNNING {
            self.running.fetch_sub(1, Ordering::SeqCst);
            done(Ended::Busy);
            return;
        }
        let running = self.running.clone();
        let argv = argv.to_vec();
        std::thread::spawn(move || {
            let ended = run(&argv, stdin, timeout);
            running.fetch_sub(1, Ordering::SeqCst);
            done(ended);
        });
    }
}

fn run(argv: &[String], stdin: Option<Vec<u8>>, timeout: Option<Duration>) -> Ended {
    let Some((program, args)) = argv.split_first() else {
        return Ended::NotStarted("no program".into());
    };
    let mut cmd = Command::new(program);
    cmd.args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    // Its own process group: a terminal's Ctrl-C to the notifier is not the hook's.
    #[cfg(unix)]
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    #[cfg(windows)]
    std::os::windows::process::CommandExt::creation_flags(&mut cmd, CREATE_NEW_PROCESS_GROUP);
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => return Ended::NotStarted(format!("{program}: {e}")),
    };
    if let Some(bytes) = stdin {
        let mut pipe = child.stdin.take().expect("stdin was piped");
        // A hook that does not read its stdin, or exits early, must not stop the notifier:
        // a broken pipe here is the hook's business (the notifier ignores SIGPIPE like any
        // Rust program).
        let _ = pipe.write_all(&bytes);
        drop(pipe);
    }
    wait(&mut child, timeout)
}

fn wait(child: &mut Child, timeout: Option<Duration>) -> Ended {
    let deadline = timeout.map(|t| Instant::now() + t);
    loop {
        match child.try_wait() {
            Ok(Some(s)) => {
                return match s.code() {
                    Some(c) => Ended::Exited(c),
                    None => Ended::Signalled,
                }
            }
            Ok(None) => {}
            Err(e) => return Ended::NotStarted(format!("waiting for it: {e}")),
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            let _ = child.kill();
            let _ = child.wait();
            return Ended::TimedOut;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

// (They run sh and sleep; on Windows the hook is driven end to end by
// broker/tests/windows_broker.rs.)
#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::sync::mpsc;

    fn ended(argv: &[&str], stdin: Option<&str>, timeout: Option<Duration>) -> Ended {
        let (tx, rx) = mpsc::channel();
        let argv: Vec<String> = argv.iter().map(|s| s.to_string()).collect();
        Runner::default().spawn(
            &argv,
            stdin.map(|s| s.as_bytes().to_vec()),
            timeout,
            move |e| tx.send(e).unwrap(),
        );
        rx.recv().unwrap()
    }

    #[test]
    fn a_hook_gets_its_stdin_and_its_status_is_reported() {
        let d = tempfile::tempdir().unwrap();
        let out = d.path().join("got");
        let script = format!("cat > '{}'; exit 3", out.display());
        assert_eq!(
            ended(&["sh", "-c", &script], Some("{\"a\":1}"), None),
            Ended::Exited(3)
        );
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "{\"a\":1}");
    }

    #[test]
    fn argv_is_not_a_shell_line() {
        // One argument holding a shell line names a program that does not exist.
        let e = ended(&["true; touch /tmp/x"], None, None);
        assert!(
            matches!(e, Ended::NotStarted(ref m) if m.contains("No such file")),
            "{e:?}"
        );
    }

    #[test]
    fn a_hung_hook_is_killed_at_its_timeout() {
        assert_eq!(
            ended(
                &["sleep", "600"],
                Some(""),
                Some(Duration::from_millis(200))
            ),
            Ended::TimedOut
        );
        // The positive control: the same hook with time to finish exits on its own.
        assert_eq!(
            ended(&["sleep", "0"], Some(""), Some(Duration::from_secs(60))),
            Ended::Exited(0)
        );
    }

    #[test]
    fn a_hook_that_does_not_read_stdin_is_fine() {
        let big = "x".repeat(1 << 20);
        assert_eq!(ended(&["true"], Some(&big), None), Ended::Exited(0));
    }
}
