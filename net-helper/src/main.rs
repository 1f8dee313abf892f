//! net-helper: lock down, say hello, serve.

use ipc_schema::helper::HelperChannel;
use ipc_schema::status::Hello;
use ipc_schema::{Body, ErrorCode, ErrorReply, Role};
use std::process::ExitCode;

fn main() -> ExitCode {
    let args = sandbox::helper_args::HelperArgs::from_env();
    let channel = match sandbox::process::take_inherited_channel() {
        Ok(c) => c,
        Err(e) => return fatal(&format!("no broker channel: {e}")),
    };
    let report = match sandbox::helper_args::lock_down(&args, &sandbox::Profile::Net) {
        Ok(r) => r,
        Err(e) => return fatal(&format!("lockdown failed: {e}")),
    };
    let mut chan = match HelperChannel::new(Role::Net, channel) {
        Ok(c) => c,
        Err(e) => return fatal(&format!("broker channel: {e}")),
    };
    let hello = Hello {
        role: Role::Net,
        pid: std::process::id(),
        lockdown: report,
    };
    if let Err(e) = chan.hello(hello) {
        return fatal(&e.to_string());
    }
    match chan.serve(|body| {
        Body::Error(ErrorReply::new(
            ErrorCode::Invalid,
            format!("net-helper does not serve {:?} yet", body.kind()),
        ))
    }) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fatal(&e.to_string()),
    }
}

fn fatal(msg: &str) -> ExitCode {
    eprintln!("net-helper: {msg}");
    ExitCode::from(70)
}
