//! `ExecRequest::Start`: from a [`CommandSpec`] to a running sandbox, or a refusal that says why.

use crate::config::Config;
use ipc_schema::exec::{CommandSpec, NetworkMode, CONNECTOR_STDIO};
use ipc_schema::fdpass;
use ipc_schema::{ErrorCode, ErrorReply};
use sandbox::linux::command::{self, policy, Network, SandboxError, SandboxSpec, Sandboxed};
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

/// Starts `spec` in a new sandbox. `connector` is the descriptor that came with the frame (the
/// caller takes it only when [`CommandSpec::needs_connector`]): the proxy bridge and an agent's
/// gateway socket pass their connections out through it, and a server's stdio socket goes out
/// on it once the sandbox runs.
pub fn start(
    spec: CommandSpec,
    connector: Option<OwnedFd>,
    cfg: &Config,
) -> Result<Sandboxed, ErrorReply> {
    let invalid = |why: String| ErrorReply::new(ErrorCode::Invalid, why);
    let connector = match (spec.needs_connector(), connector) {
        (false, _) => None,
        (true, Some(c)) => Some(c),
        (true, None) => return Err(invalid(
            "a Start whose sandbox passes connections out must carry the connector (SCM_RIGHTS)"
                .into(),
        )),
    };
    // Both bridges write to the same connector, each byte naming its listener.
    let second = |c: &OwnedFd| {
        c.try_clone()
            .map_err(|e| invalid(format!("the connector: {e}")))
    };
    spec.check_values().map_err(invalid)?;
    let user = spec.user.map(|u| *u).unwrap_or_default();
    let state_home = user.state_home().map_err(invalid)?.map(Path::to_path_buf);
    let network = match (spec.network, &connector) {
        (NetworkMode::Proxy { token }, Some(c)) => Network::Proxy {
            connector: second(c)?,
            token,
        },
        (NetworkMode::LoopbackProxy { .. }, _) => return Err(invalid(
            "a proxy on a loopback port is Windows' (here the proxy comes through the connector)"
                .into(),
        )),
        _ => Network::None,
    };
    // The helper re-checks the built-in command policy (the broker checked it first).
    let denial = |program: &Path| policy::builtin_denial(&spec.argv, program);
    let argv0 = spec.argv.first().cloned().unwrap_or_default();
    let hide = spec.hide.clone();
    let prepared = command::prepare(SandboxSpec {
        hide,
        argv: spec.argv.clone(),
        cwd: spec.cwd,
        grants: spec.grants,
        env: spec.env,
        home: cfg.home.clone(),
        state_home,
        network,
        limits: spec.limits,
        long_run: user.long_run,
        protect: cfg.protect.clone(),
        allow_degraded: cfg.allow_degraded,
        tier: cfg.tier,
    })
    .map_err(|e| {
        if let SandboxError::NotFound { .. } = &e {
            if let Some(why) = denial(Path::new(&argv0)) {
                return ErrorReply::new(ErrorCode::Refused, why);
            }
        }
        refusal(e)
    })?;
    if let Some(why) = denial(&prepared.program) {
        return Err(ErrorReply::new(ErrorCode::Refused, why));
    }
    let mut prepared = prepared;
    // Only a command the human launched (the broker sets `user` for the ui channel's requests).
    for (name, value) in &user.pass_env {
        prepared
            .pass_named_secret(name, value)
            .map_err(|e| ErrorReply::new(ErrorCode::Refused, e.to_string()))?;
    }
    if let (Some(agent), Some(c)) = (&user.agent, &connector) {
        prepared
            .bridge_unix_socket(&agent.gateway_socket, second(c)?)
            .map_err(refusal)?;
        for (path, text) in &agent.tmp_files {
            prepared.add_tmp_file(path, text).map_err(refusal)?;
        }
        for (name, value) in &agent.vars {
            prepared.set_gatehouse_var(name, value).map_err(refusal)?;
        }
    }
    let stdio = match user.server {
        Some(_) => Some(prepared.stdio_socket().map_err(refusal)?),
        None => None,
    };
    let sb = prepared.spawn().map_err(refusal)?;
    // A server's stdin and stdout go to the broker; ours (`stdio`) closes on return, so the
    // server's EOF is the broker's close. A server the broker cannot talk to is stopped.
    if let (Some(stdio), Some(c)) = (stdio, connector) {
        if let r @ (Ok(0) | Err(_)) = fdpass::send_with_fd(c, &[CONNECTOR_STDIO], stdio.as_fd()) {
            drop(sb); // kills and reaps the whole sandbox
            let why = format!("passing the server's stdio socket out over the connector: {r:?}");
            return Err(ErrorReply::new(ErrorCode::Internal, why));
        }
    }
    Ok(sb)
}

fn refusal(e: SandboxError) -> ErrorReply {
    let code = match &e {
        SandboxError::NotFound { .. } => ErrorCode::NotFound,
        SandboxError::Invalid(_) | SandboxError::Io { .. } => ErrorCode::Invalid,
        SandboxError::Refused(_) | SandboxError::Kernel(_) | SandboxError::Namespaces(_) => {
            ErrorCode::Refused
        }
    };
    ErrorReply::new(code, e.to_string())
}
