//! secrets-helper: open the configured store, lock down, say hello, serve.
//!
//! It serves on the channel it was spawned with: fd 3 on Unix, on Windows the pipe handle
//! `--channel-handle` names (`sandbox::helper_args::take_channel`). Lockdown is the sandbox
//! crate's for the OS (on macOS Seatbelt, where no spawner starts it yet).

#![forbid(unsafe_code)]

use ipc_schema::exit::fatal;
use ipc_schema::status::LockdownReport;
use ipc_schema::Role;
use sandbox::{LockdownError, Profile};
use secrets_helper::args::{single, Config, HelperArgs, OPTIONS};
use std::process::ExitCode;

fn main() -> ExitCode {
    let options: Vec<&str> = OPTIONS.iter().copied().chain(["--channel"]).collect();
    let args = HelperArgs::from_env_with(&options);
    let cfg = Config::from_args(&args).unwrap_or_else(|e| fatal(Role::Secrets, e));
    run(&args, cfg)
}

fn run(args: &HelperArgs, cfg: Config) -> ExitCode {
    use ipc_schema::helper::{Answer, HelperChannel, Request};
    use ipc_schema::Body;
    use secrets_helper::service::Service;

    let table = served_table(args).unwrap_or_else(|e| fatal(Role::Secrets, e));
    let channel = sandbox::helper_args::take_channel(args)
        .unwrap_or_else(|e| fatal(Role::Secrets, format!("no broker channel: {e}")));
    // Before lockdown: the Secret Service's bus socket cannot be created after it.
    let opened = secrets_helper::open::open(&cfg);

    // Lock down: the secrets profile of the configured store (only the kernel keyring backend
    // may make keyring calls). On Linux the store's descriptors (the session bus socket) stay
    // open. Elsewhere it is the sandbox crate's for the OS: Seatbelt on macOS; on Windows the
    // check of the restricted token and job the spawner made (it refuses a helper started any
    // other way, naming what is missing), so only `--allow-degraded` runs without it, and the
    // report says so (DESIGN.md rule 8). The stores there keep no descriptor open.
    let profile = Profile::Secrets(cfg.store);
    #[cfg(target_os = "linux")]
    let locked = sandbox::helper_args::lock_down_keeping(args, &profile, &opened.keep_fds);
    #[cfg(not(target_os = "linux"))]
    let locked = degrade_unsupported(
        sandbox::helper_args::lock_down(args, &profile),
        args.allow_degraded,
    );
    let report = locked.unwrap_or_else(|e| fatal(Role::Secrets, format!("lockdown failed: {e}")));

    // Hello; from here on every frame is read and written in wiping buffers.
    let chan = HelperChannel::hello(Role::Secrets, channel, report).wiping();

    // Serve what this channel's peer may ask (`served_table`).
    let mut service = Service::new(opened.store, cfg.namespace);
    chan.serve(table, |req: Request| match req.body {
        Body::Secrets(r) => {
            let a = service.handle(r);
            let reply = Body::SecretsReply(a.reply);
            match a.stop {
                false => Answer::reply(reply),
                true => Answer::reply_then_stop(
                    reply,
                    "the credential store's connection broke; stopping so that the broker restarts the helper",
                ),
            }
        }
        _ => req.unserved(Role::Secrets),
    });
    ExitCode::SUCCESS
}

/// The table of the channel this helper serves, from `--channel`: `broker` (the broker's own
/// helper, which never sets, deletes or lists: `ipc_schema::route::BROKER_TO_SECRETS`) or
/// `private` (a helper a CLI command started for itself: `SECRETS_PRIVATE`). Required: a
/// helper that does not know whose channel it serves serves nothing.
fn served_table(args: &HelperArgs) -> Result<&'static ipc_schema::route::Table, String> {
    use ipc_schema::route::{BROKER_TO_SECRETS, SECRETS_PRIVATE};
    match single(args, "--channel")?.as_deref() {
        Some("broker") => Ok(&BROKER_TO_SECRETS),
        Some("private") => Ok(&SECRETS_PRIVATE),
        Some(other) => Err(format!(
            "--channel {other:?}: the channels are \"broker\" and \"private\""
        )),
        None => Err(
            "--channel broker|private is required (the broker and gatehouse's own commands pass it)"
                .into(),
        ),
    }
}

/// An OS without lockdown for this profile: refused, unless `allow_degraded`, when the
/// process runs unconfined and every field of the report says so.
#[cfg_attr(target_os = "linux", allow(dead_code))]
fn degrade_unsupported(
    result: Result<LockdownReport, LockdownError>,
    allow_degraded: bool,
) -> Result<LockdownReport, LockdownError> {
    match result {
        Err(e @ LockdownError::Unsupported(profile)) if allow_degraded => {
            Ok(LockdownReport::unconfined(
                profile,
                format!("no OS lockdown at all ({e}); running only because of --allow-degraded"),
            ))
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_os_without_lockdown_is_refused_unless_degraded_is_allowed() {
        let refused = degrade_unsupported(Err(LockdownError::Unsupported("secrets")), false);
        assert_eq!(
            refused.unwrap_err().to_string(),
            "this platform has no lockdown for the secrets profile yet"
        );
        let report = degrade_unsupported(Err(LockdownError::Unsupported("secrets")), true).unwrap();
        assert_eq!(
            report.degraded,
            vec!["no OS lockdown at all (this platform has no lockdown for the secrets profile yet); running only because of --allow-degraded"]
        );
        assert!(!report.seccomp_filter && !report.no_new_privs && !report.env_cleared);
        // Any other lockdown failure stays fatal even with --allow-degraded.
        let other = degrade_unsupported(Err(LockdownError::MultiThreaded(2)), true);
        assert!(matches!(other, Err(LockdownError::MultiThreaded(2))));
    }
}
