//! Test builds only (feature `test-hooks`): run the console without its lockdown (the positive
//! control of the lockdown tests), or try one thing the lockdown forbids right after it and
//! show the outcome in the status line. Release builds have neither.

/// The console's test switches.
#[derive(Debug, Clone, Default)]
pub struct TestHooks {
    pub skip_lockdown: bool,
    /// `open:PATH`, `connect:PATH` (a Unix socket) or `exec:PATH`.
    pub probe: Option<String>,
}

fn outcome(what: &str, r: std::io::Result<()>) -> String {
    match r {
        Ok(()) => format!("probe {what}: ok"),
        Err(e) => format!("probe {what}: refused: {e}"),
    }
}

/// Tries the probe and says what happened. A forbidden system call kills the process instead
/// (seccomp), which is the point of the probes that make one.
pub fn run(probe: &str) -> String {
    let (op, path) = probe.split_once(':').unwrap_or((probe, ""));
    let what = format!("{op} {path}");
    match op {
        "open" => outcome(&what, std::fs::File::open(path).map(drop)),
        "connect" => outcome(
            &what,
            std::os::unix::net::UnixStream::connect(path).map(drop),
        ),
        // Inherited stdio: opening /dev/null would be refused before the process is made.
        "exec" => outcome(&what, std::process::Command::new(path).status().map(drop)),
        _ => format!("unknown probe {probe:?}"),
    }
}
