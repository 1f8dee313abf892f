//! Test-only crash points on the ledger path (`--test-crash-at STEP`, present only in builds
//! with the `test-hooks` feature; tests check the release binary refuses the flag). At its step
//! the broker SIGKILLs itself, exactly as an outside kill would, so the kill matrix can show
//! that no effect happens twice.

/// A dangerous step of an effectful call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrashStep {
    /// The call is recorded `pending` (committed), the helper not asked.
    AfterPending,
    /// `executing` is committed, the request not yet sent.
    AfterExecuting,
    /// The request is on its way to the helper, which may or may not carry it out.
    InHelper,
    /// The helper answered; `done` is not yet committed.
    AfterAnswer,
}

impl CrashStep {
    pub const ALL: [CrashStep; 4] = [
        CrashStep::AfterPending,
        CrashStep::AfterExecuting,
        CrashStep::InHelper,
        CrashStep::AfterAnswer,
    ];

    pub fn name(self) -> &'static str {
        match self {
            CrashStep::AfterPending => "after-pending",
            CrashStep::AfterExecuting => "after-executing",
            CrashStep::InHelper => "in-helper",
            CrashStep::AfterAnswer => "after-answer",
        }
    }

    pub fn parse(s: &str) -> Result<CrashStep, String> {
        CrashStep::ALL
            .into_iter()
            .find(|c| c.name() == s)
            .ok_or_else(|| {
                format!(
                    "--test-crash-at takes one of: {}",
                    CrashStep::ALL.map(|c| c.name()).join(", ")
                )
            })
    }
}

/// Dies here if told to.
pub fn crash_point(configured: Option<CrashStep>, here: CrashStep) {
    if configured == Some(here) {
        eprintln!("gatehouse: test hook: SIGKILL at {}", here.name());
        // tgkill on its own thread, the one way the router's seccomp filter lets it signal
        // itself; SIGKILL ends the whole process.
        #[cfg(unix)]
        let _ = nix::sys::pthread::pthread_kill(
            nix::sys::pthread::pthread_self(),
            nix::sys::signal::Signal::SIGKILL,
        );
        // SIGKILL cannot be caught; nothing runs after it. On Windows this is the end: a fast
        // fail, which runs no handler either.
        std::process::abort();
    }
}

/// `--test-probe-lockdown`: what the router can still do, one line each (`WHEN: WHAT: ok` or
/// the errno's name). Test builds only; the release binary has no such flag.
#[cfg(unix)]
pub fn probe(dirs: &gatehouse_client::Dirs, when: &str) -> Vec<String> {
    use nix::sys::socket::{socket, AddressFamily, SockFlag, SockType};
    fn outcome<T>(r: std::io::Result<T>) -> String {
        match r {
            Ok(_) => "ok".into(),
            Err(e) => match e.raw_os_error() {
                Some(n) => format!("{:?}", nix::errno::Errno::from_raw(n)),
                None => e.to_string(),
            },
        }
    }
    let own = dirs.data.join(format!("probe-{when}"));
    vec![
        format!(
            "{when}: open /etc/passwd: {}",
            outcome(std::fs::File::open("/etc/passwd"))
        ),
        format!(
            "{when}: create in its data dir: {}",
            outcome(std::fs::write(&own, b"probe"))
        ),
        format!(
            "{when}: socket(AF_INET): {}",
            outcome(
                socket(
                    AddressFamily::Inet,
                    SockType::Stream,
                    SockFlag::empty(),
                    None
                )
                .map_err(std::io::Error::from)
            )
        ),
        format!(
            "{when}: socket(AF_UNIX): {}",
            outcome(
                socket(
                    AddressFamily::Unix,
                    SockType::Stream,
                    SockFlag::empty(),
                    None
                )
                .map_err(std::io::Error::from)
            )
        ),
    ]
}

/// Prints what [`probe`] found before and now finds after the lockdown; with `spawn`, then
/// starts a program, which the filter answers by killing the process (SIGSYS).
#[cfg(unix)]
pub fn after_lockdown(
    what: &str,
    dirs: &gatehouse_client::Dirs,
    before: Vec<String>,
) -> Result<(), String> {
    for line in before.into_iter().chain(probe(dirs, "after")) {
        eprintln!("gatehouse: test probe: {line}");
    }
    match what {
        "report" => Ok(()),
        "spawn" => {
            let r = std::process::Command::new("/bin/true").status();
            Err(format!("test probe: spawning /bin/true returned {r:?}"))
        }
        other => Err(format!("--test-probe-lockdown {other:?}: report or spawn")),
    }
}
