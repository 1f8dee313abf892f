//! What a command the human launches (`gatehouse sandbox`, `gatehouse run`:
//! `LaunchRequest::Command`) becomes before the exec-helper sees it: the checks the broker makes
//! on the request's values, the exec-helper's `CommandSpec`, and the line of its start row. Pure:
//! the broker (`broker/src/launch.rs`) does the rest (the proxy, the connector, the sessions).

use ipc_schema::exec::{AgentRun, CommandSpec, GrantAccess, NetworkMode, PathGrant, UserCommand};
use ipc_schema::tool::ProfileName;
use ipc_schema::ui::{AgentLaunch, CommandLaunch};
use std::path::{Component, Path};

/// More hosts than any user types; a longer list is a forged request.
pub const MAX_DOMAINS: usize = 256;

/// The exec-helper's spec for `l`, or why it is refused before anything runs. `home` is the
/// broker's `$HOME` (never a working root unless named); `agent` is what the broker adds for
/// `gatehouse run` (the agent's `HOME` is then granted read-write).
pub fn command_spec(
    l: &CommandLaunch,
    home: Option<&Path>,
    agent: Option<AgentRun>,
) -> Result<CommandSpec, String> {
    if l.argv.is_empty() || l.argv[0].is_empty() {
        return Err("no command was given".into());
    }
    if l.domains.len() > MAX_DOMAINS {
        return Err(format!(
            "{} --allow-domain entries: at most {MAX_DOMAINS}",
            l.domains.len()
        ));
    }
    // The checks below are lexical: a `..` would let `/tmp/x/../../root` pass for a directory
    // under /tmp (the CLI sends resolved paths, so only a forged request holds one).
    resolved("the working directory", &l.cwd)?;
    let mut grants = Vec::with_capacity(l.grants.len() + 2);
    for g in &l.grants {
        resolved("the grant", &g.path)?;
        grants.push(g.clone());
    }
    // The CLI resolved the grants to tell whether one holds `cwd` (`work_root` false: one
    // does; the exec-helper checks it again, with links resolved).
    let covered = grants.iter().any(|g| l.cwd.starts_with(&g.path));
    if l.work_root && !covered {
        if let Some(why) = ipc_schema::protected::implicit_root_refusal(&l.cwd, home) {
            return Err(format!(
                "the current directory {} is not granted: {why}. Name what the command may use with --allow-write or --allow-read (and cd into it)",
                l.cwd.display()
            ));
        }
        grants.push(rw(&l.cwd));
    }
    l.limits.check_with(l.long_run)?;
    if let Some(a) = &agent {
        if !grants.iter().any(|g| g.path == a.state_home) {
            grants.push(rw(&a.state_home));
        }
    }
    Ok(CommandSpec {
        argv: l.argv.clone(),
        cwd: l.cwd.clone(),
        grants,
        env: l.env.clone(),
        network: NetworkMode::None,
        limits: l.limits,
        hide: l.hide.clone(),
        user: Some(Box::new(UserCommand {
            pass_env: l.pass_env.clone(),
            long_run: l.long_run,
            agent,
            server: None,
        })),
        slot: None,
    })
}

/// The profile of an agent launch, or why it is refused: it must be a long run, and keep its
/// state in a directory of its own directly in `agents` (gatehouse's agent-state directory).
pub fn agent_profile(
    l: &CommandLaunch,
    a: &AgentLaunch,
    agents: &Path,
) -> Result<ProfileName, String> {
    if !l.long_run {
        return Err("an agent launch must be a long run".into());
    }
    if a.state_home.parent() != Some(agents) || climbs(&a.state_home) {
        return Err(format!(
            "the agent's state directory {} is not one of {}",
            a.state_home.display(),
            agents.display()
        ));
    }
    // Windows and macOS give a sandbox no private /tmp: the run's gateway and files are named
    // after it (RunName::place).
    match (&a.run_name, cfg!(target_os = "linux")) {
        (None, false) => {
            return Err("a run on Windows or macOS must be named: its gateway and files are named after it".into())
        }
        (Some(_), true) => return Err(
            "a run's name is for Windows and macOS: here the sandbox's private /tmp holds its socket and files"
                .into(),
        ),
        _ => {}
    }
    Ok(a.profile
        .clone()
        .unwrap_or_else(ProfileName::default_profile))
}

/// The line of a launched command's start row: argv, where, its network (the hosts and the
/// proxy session), what it was granted, the names passed by name (never a value).
pub fn start_line(
    spec: &CommandSpec,
    passed: &[String],
    proxy: Option<(&[String], &str)>,
    tier: Option<ipc_schema::tier::ConfinementTier>,
) -> String {
    let grants = grants_shown(&spec.grants);
    let network = match proxy {
        None => "no network".to_string(),
        Some((hosts, session)) => format!(
            "egress only to {} through the proxy (session {session})",
            hosts.join(", ")
        ),
    };
    let mut line = format!(
        "run {:?} in {}, in the exec sandbox ({}) with {network}, at most {} s; grants: {}",
        spec.argv,
        spec.cwd.display(),
        ipc_schema::tier::shown(tier),
        spec.limits.timeout_ms / 1000,
        grants.join(", ")
    );
    if !passed.is_empty() {
        line.push_str(&format!("; passed by name: {}", passed.join(", ")));
    }
    line
}

/// Each grant as `PATH (read)` or `PATH (read-write)`, for start rows.
pub fn grants_shown(grants: &[PathGrant]) -> Vec<String> {
    grants
        .iter()
        .map(|g| {
            let access = match g.access {
                GrantAccess::Read => "read",
                GrantAccess::ReadWrite => "read-write",
            };
            format!("{} ({access})", g.path.display())
        })
        .collect()
}

/// What an agent's sandbox gets beyond a command's: the run's `token` and its MCP config in its
/// `/tmp`, the variables that name them, the gateway socket.
pub fn agent_run(a: &AgentLaunch, token: &str) -> AgentRun {
    use ipc_schema::exec::{
        AGENT_GATEWAY_SOCKET, AGENT_MCP_CONFIG, AGENT_MCP_CONFIG_ENV, AGENT_SOCKET_ENV,
        AGENT_TOKEN_ENV, AGENT_TOKEN_FILE,
    };
    let pair = |a: &str, b: &str| (a.into(), b.into());
    AgentRun {
        state_home: a.state_home.clone(),
        tmp_files: vec![
            (AGENT_TOKEN_FILE.into(), token.to_string()),
            (AGENT_MCP_CONFIG.into(), a.mcp_config.clone()),
        ],
        vars: vec![
            pair(AGENT_SOCKET_ENV, AGENT_GATEWAY_SOCKET),
            pair(AGENT_TOKEN_ENV, token),
            pair(AGENT_MCP_CONFIG_ENV, AGENT_MCP_CONFIG),
        ],
        gateway_socket: AGENT_GATEWAY_SOCKET.into(),
    }
}

/// [`agent_run`] on Windows and macOS, where a sandbox has no private `/tmp`: the run's
/// gateway and files are `place` (named after the run, in the agent's state directory: the broker writes the
/// token file, the CLI the config), named by the same variables.
pub fn agent_run_at(a: &AgentLaunch, token: &str, place: &ipc_schema::exec::RunPlace) -> AgentRun {
    use ipc_schema::exec::{AGENT_MCP_CONFIG_ENV, AGENT_SOCKET_ENV, AGENT_TOKEN_ENV};
    AgentRun {
        state_home: a.state_home.clone(),
        tmp_files: Vec::new(),
        vars: vec![
            (AGENT_SOCKET_ENV.into(), place.gateway.clone()),
            (AGENT_TOKEN_ENV.into(), token.into()),
            (
                AGENT_MCP_CONFIG_ENV.into(),
                place.mcp_config.display().to_string(),
            ),
        ],
        gateway_socket: place.gateway.clone().into(),
    }
}

/// The outcome an egress connection's audit row names.
pub fn egress_outcome(record: &ipc_schema::net::EgressRecord) -> String {
    use ipc_schema::net::EgressVerdict;
    match &record.verdict {
        EgressVerdict::Refused { status, .. } => format!("refused ({status})"),
        EgressVerdict::Failed { status, .. } => format!("failed ({status})"),
        EgressVerdict::Tunnelled { .. } => "tunnelled".to_string(),
    }
}

/// Compares two byte strings in time independent of where they differ (a run's token).
pub fn same_secret(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn rw(p: &Path) -> PathGrant {
    PathGrant {
        path: p.to_path_buf(),
        access: GrantAccess::ReadWrite,
    }
}

fn climbs(p: &Path) -> bool {
    p.components().any(|c| c == Component::ParentDir)
}

/// `Err` unless `p` is absolute and holds no `..`.
fn resolved(what: &str, p: &Path) -> Result<(), String> {
    if !p.is_absolute() {
        return Err(format!("{what} {} is not absolute", p.display()));
    }
    if climbs(p) {
        return Err(format!(
            "{what} {} is not resolved (it holds ..)",
            p.display()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipc_schema::exec::{Hide, Limits, RunName};

    fn launch(cwd: &str, grants: &[&str], work_root: bool) -> CommandLaunch {
        CommandLaunch {
            argv: vec!["/bin/true".into()],
            cwd: cwd.into(),
            grants: grants.iter().map(|g| rw(Path::new(g))).collect(),
            work_root,
            env: vec![],
            pass_env: vec![],
            domains: vec![],
            limits: Limits::default(),
            hide: Hide::default(),
            long_run: false,
            agent: None,
        }
    }

    // Unix paths ("/w", "/home/me"): commands are launched on Linux only (the exec sandbox).
    #[cfg(unix)]
    #[test]
    fn paths_must_be_absolute_and_resolved_and_roots_and_homes_named() {
        let home = Some(Path::new("/home/me"));
        let refused = |l: CommandLaunch| command_spec(&l, home, None).unwrap_err();
        assert_eq!(
            refused(launch("work", &["/w"], false)),
            "the working directory work is not absolute"
        );
        assert_eq!(
            refused(launch("/w", &["/w/../etc"], false)),
            "the grant /w/../etc is not resolved (it holds ..)"
        );
        assert!(
            refused(launch("/", &[], true)).starts_with("the current directory / is not granted")
        );
        assert!(refused(launch("/home/me", &[], true))
            .starts_with("the current directory /home/me is not granted"));
        // Positive control: a project directory becomes the working root, read-write.
        let spec = command_spec(&launch("/home/me/p", &[], true), home, None).unwrap();
        assert_eq!(spec.grants, vec![rw(Path::new("/home/me/p"))]);
        let mut many = launch("/w", &["/w"], false);
        many.domains = vec!["a.test".into(); MAX_DOMAINS + 1];
        assert!(refused(many).contains("at most 256"));
    }

    #[test]
    fn an_agent_keeps_its_state_directly_in_the_agent_state_directory() {
        let agents = Path::new("/data/agents");
        let a = |state: &str| AgentLaunch {
            profile: None,
            state_home: state.into(),
            mcp_config: String::new(),
            mode: None,
            run_name: (!cfg!(target_os = "linux"))
                .then(|| RunName::parse(&"0a".repeat(16)).unwrap()),
        };
        let mut l = launch("/w", &["/w"], false);
        assert_eq!(
            agent_profile(&l, &a("/data/agents/x"), agents).unwrap_err(),
            "an agent launch must be a long run"
        );
        l.long_run = true;
        assert_eq!(
            agent_profile(&l, &a("/data/agents/x"), agents).unwrap(),
            ProfileName::default_profile()
        );
        for bad in [
            "/data/agents",
            "/data/agents/x/y",
            "/data/agents/../agents/x",
            "/w",
        ] {
            assert!(agent_profile(&l, &a(bad), agents).is_err(), "{bad}");
        }
        // A run's name is Windows' and macOS' (its gateway and files); on Linux the sandbox's
        // /tmp holds them. Each OS refuses the other's form.
        let mut other = a("/data/agents/x");
        other.run_name = match other.run_name {
            Some(_) => None,
            None => Some(RunName::parse(&"0a".repeat(16)).unwrap()),
        };
        assert_eq!(
            agent_profile(&l, &other, agents).unwrap_err(),
            if cfg!(target_os = "linux") {
                "a run's name is for Windows and macOS: here the sandbox's private /tmp holds its socket and files"
            } else {
                "a run on Windows or macOS must be named: its gateway and files are named after it"
            }
        );
    }

    #[test]
    fn a_windows_run_is_told_its_own_pipe_token_and_config() {
        use ipc_schema::exec::{AGENT_MCP_CONFIG_ENV, AGENT_SOCKET_ENV, AGENT_TOKEN_ENV};
        for bad in [
            "",
            "0A".repeat(16).as_str(),
            &"0".repeat(31),
            &"g".repeat(32),
        ] {
            assert!(RunName::parse(bad).is_err(), "{bad:?}");
        }
        let name = RunName::parse(&"0a".repeat(16)).unwrap();
        let home = Path::new("/agents/x");
        let place = name.place(home);
        let gateway = match cfg!(windows) {
            true => format!(r"\\.\pipe\gatehouse-run-{}", "0a".repeat(16)),
            false => format!("/agents/x/gatehouse-{}.sock", "0a".repeat(8)),
        };
        assert_eq!(place.gateway, gateway);
        assert_eq!(place.token_file.parent(), Some(home));
        assert_eq!(place.mcp_config.parent(), Some(home));
        let a = AgentLaunch {
            profile: None,
            state_home: home.into(),
            mcp_config: "{}".into(),
            mode: None,
            run_name: Some(name),
        };
        let run = agent_run_at(&a, "TOKEN", &place);
        assert_eq!(run.state_home, home);
        assert!(run.tmp_files.is_empty());
        assert_eq!(run.gateway_socket, Path::new(&place.gateway));
        let var = |k: &str| {
            run.vars
                .iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| v.as_str())
        };
        assert_eq!(var(AGENT_SOCKET_ENV), Some(place.gateway.as_str()));
        assert_eq!(var(AGENT_TOKEN_ENV), Some("TOKEN"));
        assert_eq!(
            var(AGENT_MCP_CONFIG_ENV),
            Some(place.mcp_config.to_str().unwrap())
        );
    }

    #[test]
    fn secrets_compare_whole() {
        assert!(same_secret(b"abc", b"abc"));
        assert!(!same_secret(b"abc", b"abd"));
        assert!(!same_secret(b"abc", b"abcd"));
    }
}
