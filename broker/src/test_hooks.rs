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
        let _ = nix::sys::signal::kill(nix::unistd::getpid(), nix::sys::signal::Signal::SIGKILL);
        // SIGKILL cannot be caught; nothing runs after it.
        std::process::abort();
    }
}
