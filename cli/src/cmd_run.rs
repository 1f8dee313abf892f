//! `gatehouse run`: an agent CLI (Claude Code, Codex, any program) inside the exec sandbox, with
//! gatehouse as its way to act on the machine and the egress proxy as its only way out.
//!
//! The agent is one command the broker runs, as `gatehouse sandbox` runs one
//! (`LaunchRequest::Command` on the console's channel, with its `AgentLaunch`): the broker's
//! exec-helper builds the sandbox, the broker's net-helper is its egress proxy, and every record
//! lands in the audit log. This process works out what only it can see and sends it: the
//! working directory (read-only, or read-write with `--own-tools write`), `--allow-read`
//! grants, the agent's program and interpreter (read-only), this binary and `gatehouse-mcp`
//! (read-only: the agent starts `gatehouse mcp` from its MCP config), the agent's own state
//! directory as its `HOME` (made here, so it can be given to the agent's user), the
//! environment, the recipe's provider hosts and `--allow-domain`, and the MCP config.
//!
//! The broker adds the run's token (in the sandbox's private `/tmp` and `GATEHOUSE_SESSION_TOKEN`,
//! never shown to this process) and a Unix socket inside the sandbox whose connections reach it
//! through the command's connector: each that opens its session with the run's token becomes a
//! fresh session of the run's profile, and those sessions are revoked when the agent ends. The
//! runtime directory, and with it `ui.sock` and `gateway.sock`, stays masked.
//!
//! The agent is told where gatehouse is in its own terms (recipe.rs): the MCP config
//! (`$GATEHOUSE_MCP_CONFIG`, passing `gatehouse mcp --gateway-socket ... --token-file ...` as
//! arguments, since clients such as Codex start servers with a filtered environment), Claude
//! Code's and Codex's own flags.
//!
//! A broker that runs as root runs its commands as nobody (never root toward the host), so the
//! agent does too.
//!
//! On Windows (docs/windows.md, "`gatehouse run` on Windows") and macOS there is no private
//! `/tmp`: this process names the run (`RunName`), which names its gateway and files in the
//! agent's state directory; it writes the MCP config there (the broker writes the token file;
//! on Windows it serves the pipe, on macOS the exec-helper listens on the socket for the
//! command), and removes it when the run ends. On Windows the agent runs in the
//! restricted-token tier, on macOS in the Seatbelt tier.

#[cfg(unix)]
mod program;
#[cfg(windows)]
#[path = "cmd_run/program_windows.rs"]
mod program;
mod recipe;

use crate::cmd_sandbox::{self, refused, Stop};
use crate::Global;
use ipc_schema::exec::{GrantAccess, Limits, PathGrant, LONG_OUTPUT_MAX, LONG_TIMEOUT_MAX_MS};
use ipc_schema::tool::ProfileName;
use ipc_schema::ui::{AgentLaunch, CommandLaunch};
use recipe::{Agent, OwnTools};
use sandbox::command_env;
#[cfg(target_os = "linux")]
use sandbox::linux::command::identity;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

const WHO: &str = "gatehouse run";

#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// The session profile of the policy (`[profile.NAME]` in policy.toml) the agent's sessions
    /// run under; without it, the default profile.
    #[arg(long, value_name = "NAME")]
    profile: Option<String>,
    /// The mode of the agent's sessions: ask (every Ask waits for a card), full-access (an Ask
    /// runs without a card; Deny, grants and protected paths still hold) or unattended (an Ask
    /// is refused at once: for runs nobody watches). Without it, the profile's (`mode = ...`).
    #[arg(long, value_name = "MODE")]
    mode: Option<ipc_schema::mode::SessionMode>,
    /// A directory (or file) the agent may read besides the working directory; repeatable.
    #[arg(long = "allow-read", value_name = "PATH")]
    read: Vec<PathBuf>,
    #[command(flatten)]
    proxy: cmd_sandbox::ProxyArgs,
    /// Do not allow the recipe's provider hosts (only `--allow-domain` ones).
    #[arg(long)]
    no_recipe_domains: bool,
    /// What the agent's own tools may do with the project: `read` (the default: the project is
    /// read-only inside the sandbox and the agent's own shell and editors are turned off, so
    /// every change goes through gatehouse's tools) or `write` (its own tools may change the
    /// project, inside the sandbox).
    #[arg(long, value_enum, default_value_t = OwnTools::Read)]
    own_tools: OwnTools,
    /// Pass this variable of this process's environment to the agent even though its name
    /// looks like a secret (its API key); repeatable. The recipe's key variables pass when set.
    #[arg(long = "pass-env", value_name = "NAME")]
    pass_env: Vec<String>,
    /// Pass this variable too (NAME takes this process's value); secret-looking names, LD_* and
    /// the sandbox's own variables are refused (use --pass-env for a key).
    #[arg(long = "env", value_name = "NAME[=VALUE]")]
    env: Vec<String>,
    /// Seconds a call waits for the human before the agent is told "proposal N is waiting, call
    /// again" (default: the recipe's, below its client's own timeout).
    #[arg(long, value_name = "SECS", value_parser = clap::value_parser!(u64).range(1..=86_400))]
    approval_wait: Option<u64>,
    /// Pass the agent's output to this terminal byte for byte. Without it, output bound for a
    /// terminal has its control characters and escape sequences shown as visible escapes (what
    /// the agent prints is its model's to choose); output to a pipe or file is never changed.
    #[arg(long)]
    raw_output: bool,
    /// Run with less than the full sandbox if this kernel lacks a mechanism (each gap is printed).
    #[arg(long)]
    allow_degraded: bool,
    /// The agent program and its arguments.
    #[arg(last = true, required = true, value_name = "AGENT")]
    argv: Vec<String>,
}

pub fn run(g: &Global, args: RunArgs) -> ExitCode {
    match run_inner(g, args) {
        Ok(code) => code,
        Err(Stop(msg, code)) => {
            eprintln!("{WHO}: {msg}");
            ExitCode::from(code)
        }
    }
}

/// The agent's state directory in gatehouse's agent-state directory, named after its recipe
/// (or its program), and `-uidN` when it runs as another user (under a root broker).
fn agent_home(g: &Global, agent: Agent, argv0: &str, owner: (u32, u32)) -> Result<PathBuf, Stop> {
    let name = match agent {
        Agent::Generic => Path::new(argv0)
            .file_name()
            .and_then(|n| n.to_str())
            .filter(|n| {
                n.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
                    && !n.starts_with('.')
            })
            .unwrap_or("agent")
            .to_string(),
        a => a.name().to_string(),
    };
    #[cfg(unix)]
    let name = if owner.0 != nix::unistd::geteuid().as_raw() {
        format!("{name}-uid{}", owner.0)
    } else {
        name
    };
    g.dirs
        .ensure_agent_home(&name, owner, g.data_dir.is_some())
        .map_err(refused)
}

fn run_inner(g: &Global, args: RunArgs) -> Result<ExitCode, Stop> {
    // Blocked before any thread starts, so that the signalfd that stops the agent sees them.
    #[cfg(unix)]
    cmd_sandbox::stop_signals()
        .thread_block()
        .map_err(|e| refused(format!("blocking signals: {e}")))?;
    let cwd = std::env::current_dir()
        .and_then(std::fs::canonicalize)
        .map_err(|e| refused(format!("cannot tell the current directory: {e}")))?;
    let profile = match args.profile.as_deref().map(ProfileName::parse) {
        None => None,
        Some(Ok(p)) => Some(p),
        Some(Err(e)) => return Err(refused(format!("--profile: {e}"))),
    };
    let exe = std::env::current_exe()
        .and_then(std::fs::canonicalize)
        .map_err(|e| refused(format!("cannot find this program: {e}")))?;
    let exe_text = exe
        .to_str()
        .ok_or_else(|| refused(format!("{}: the path is not UTF-8", exe.display())))?
        .to_string();
    let argv0 = args.argv[0].clone();
    let agent = Agent::for_program(&argv0);

    // The secret-looking variables passed by name: each `--pass-env NAME`, then the recipe's
    // key variables that are set.
    let mut keys = cmd_sandbox::pass_env_args(&args.pass_env)?;
    for name in agent.key_vars() {
        if let Ok(v) = std::env::var(name) {
            if !keys.iter().any(|(k, _)| k == name) {
                keys.push((name.to_string(), v));
            }
        }
    }

    // Who the agent runs as: this user, or nobody under a root broker (its exec-helper never
    // runs a command as root). On Windows, this user under a restricted token.
    #[cfg(unix)]
    let owner = unix_owner(&cwd, args.own_tools)?;
    #[cfg(windows)]
    let owner = (u32::MAX, u32::MAX);
    let home = ipc_schema::protected::user_home();
    if let Some(why) = ipc_schema::protected::implicit_root_refusal(&cwd, home.as_deref()) {
        return Err(refused(format!(
            "the current directory {} cannot be the agent's working directory: {why}. cd into the project first",
            cwd.display()
        )));
    }
    // The program first: one that is not there makes nothing.
    let path_var = std::env::var("PATH").unwrap_or_else(|_| command_env::DEFAULT_PATH.into());
    let visible = program::resolve(&argv0, &path_var, &cwd)?;
    let state_home = agent_home(g, agent, &argv0, owner)?;
    // Windows and macOS: the run's gateway and files are named after it (RunName::place).
    #[cfg(not(target_os = "linux"))]
    let run_name = ipc_schema::exec::RunName::parse(&hex::encode(rand::random::<[u8; 16]>()))
        .map_err(refused)?;
    #[cfg(not(target_os = "linux"))]
    let place = run_name.place(&state_home);

    let project = match args.own_tools {
        OwnTools::Read => GrantAccess::Read,
        OwnTools::Write => GrantAccess::ReadWrite,
    };
    let mut grants = vec![PathGrant {
        path: cwd.clone(),
        access: project,
    }];
    for p in &args.read {
        let path =
            std::fs::canonicalize(p).map_err(|e| refused(format!("{}: {e}", p.display())))?;
        grants.push(PathGrant {
            path,
            access: GrantAccess::Read,
        });
    }
    // The agent starts `gatehouse mcp` from its MCP config: this very binary, read-only, and
    // `gatehouse-mcp` beside it, which that command execs.
    let mcp_exe = exe
        .parent()
        .map(|d| d.join(gatehouse_client::MCP_BIN))
        .and_then(|m| std::fs::canonicalize(m).ok());
    for bin in std::iter::once(exe.clone()).chain(mcp_exe) {
        if !bin.starts_with(&cwd) {
            grants.push(PathGrant {
                path: bin,
                access: GrantAccess::Read,
            });
        }
    }
    for p in &visible.grants {
        grants.push(PathGrant {
            path: p.clone(),
            access: GrantAccess::Read,
        });
    }

    // The environment: the allowlist, the recipe's settings, --env, the endpoint variables;
    // the keys pass by name (`pass_env`).
    let mut env = command_env::inherited_from_process();
    env.extend(cmd_sandbox::env_args(&args.env)?);
    let mut domains = args.proxy.domains.clone();
    let mut recipe_domains: Vec<String> = Vec::new();
    if !args.no_recipe_domains {
        recipe_domains.extend(agent.domains().iter().map(|d| d.to_string()));
    }
    for name in agent.endpoint_vars() {
        if let Ok(v) = std::env::var(name) {
            if let Some(host) = url::Url::parse(&v)
                .ok()
                .and_then(|u| u.host_str().map(String::from))
            {
                if !args.no_recipe_domains {
                    recipe_domains.push(host);
                }
            }
            env.push((name.to_string(), v));
        }
    }
    for d in &recipe_domains {
        if !domains.contains(d) {
            domains.push(d.clone());
        }
    }

    let approval_wait = args
        .approval_wait
        .unwrap_or(agent.approval_wait().as_secs());
    // Where `gatehouse mcp` finds this run: in the sandbox's private /tmp; on Windows and
    // macOS, the run's own gateway and files.
    #[cfg(target_os = "linux")]
    let (gateway, token_file, config_file) = (
        ipc_schema::exec::AGENT_GATEWAY_SOCKET.to_string(),
        ipc_schema::exec::AGENT_TOKEN_FILE.to_string(),
        ipc_schema::exec::AGENT_MCP_CONFIG.to_string(),
    );
    #[cfg(not(target_os = "linux"))]
    let (gateway, token_file, config_file) = (
        place.gateway.clone(),
        text_path(&place.token_file)?,
        text_path(&place.mcp_config)?,
    );
    let mut mcp_args: Vec<String> = [
        "mcp",
        "--gateway-socket",
        &gateway,
        "--token-file",
        &token_file,
        "--approval-wait",
        &approval_wait.to_string(),
    ]
    .map(String::from)
    .to_vec();
    // Windows: what the human allowed the run (a degraded sandbox) the agent's gateway front
    // is allowed too: it hardens itself (a job, mitigations) and refuses what falls short.
    if cfg!(windows) && args.allow_degraded {
        mcp_args.push("--allow-degraded".into());
    }
    let setup = agent.setup(
        &recipe::Wiring {
            exe: &exe_text,
            mcp_config: &config_file,
            mcp_args: &mcp_args,
        },
        args.own_tools,
    );
    env.extend(setup.env.iter().cloned());
    let mut argv = visible.exec;
    argv.extend(setup.leading.iter().cloned());
    argv.extend(args.argv[1..].iter().cloned());
    argv.extend(setup.trailing.iter().cloned());

    // The sandbox's rlimits are a command's; its time and output limits an agent session's.
    let limits = Limits {
        timeout_ms: LONG_TIMEOUT_MAX_MS,
        stdout_max: LONG_OUTPUT_MAX,
        stderr_max: LONG_OUTPUT_MAX,
        ..Limits::default()
    };
    let mcp_config = mcp_config(&exe_text, &mcp_args);
    // Windows and macOS: the config is the run's own file (it holds no secret), removed when
    // it ends.
    #[cfg(not(target_os = "linux"))]
    let _config = RunFile::write(&place.mcp_config, &mcp_config)?;
    let launch = CommandLaunch {
        argv,
        cwd,
        grants,
        work_root: false,
        env,
        pass_env: keys.clone(),
        domains: domains.clone(),
        limits,
        // What the agent reads goes to its model's provider: secret files stay out of sight.
        hide: ipc_schema::exec::Hide {
            exclude: Vec::new(),
            sensitive: true,
        },
        long_run: true,
        agent: Some(AgentLaunch {
            profile,
            state_home: state_home.clone(),
            mcp_config,
            mode: args.mode,
            #[cfg(target_os = "linux")]
            run_name: None,
            #[cfg(not(target_os = "linux"))]
            run_name: Some(run_name),
        }),
    };
    say_setup(
        agent,
        &state_home,
        &recipe_domains,
        &domains,
        &keys,
        args.own_tools,
    );
    let mut broker_args = args.proxy.broker_args();
    if args.allow_degraded {
        broker_args.push("--allow-degraded".into());
    }
    // The agent's output is escaped on a terminal as a command's is: the sandbox gives the
    // agent pipes, never a terminal, so no agent draws a full-screen interface through
    // `gatehouse run`, and what it prints is its model's to choose (an OSC 52 clipboard
    // write, a screen clear). `--raw-output` passes it byte for byte.
    let how = cmd_sandbox::Relay {
        who: WHO,
        json: g.json,
        raw_output: args.raw_output,
        say_passed: false,
    };
    let outcome = cmd_sandbox::launch_in_broker(g, launch, &broker_args, &keys, how)?;
    Ok(cmd_sandbox::report(WHO, outcome, &limits, g.json))
}

/// Who the agent runs as (uid, gid): this user, or nobody under a root broker; refused when a
/// root run with `--own-tools write` could not write the project.
#[cfg(unix)]
fn unix_owner(cwd: &Path, own_tools: OwnTools) -> Result<(u32, u32), Stop> {
    let root = nix::unistd::geteuid().is_root();
    let me = (
        nix::unistd::geteuid().as_raw(),
        nix::unistd::getegid().as_raw(),
    );
    #[cfg(target_os = "linux")]
    let owner = if root { identity::NOBODY } else { me };
    // macOS's exec-helper does not change users: a root broker there would run the agent as
    // root.
    #[cfg(target_os = "macos")]
    let owner = if root {
        return Err(refused(
            "on macOS gatehouse has no other user to run the agent as, and it never runs one as root: run gatehouse as your own user",
        ));
    } else {
        me
    };
    let project_owner = {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(cwd).map(|m| m.uid()).ok()
    };
    if root && own_tools == OwnTools::Write && project_owner != Some(owner.0) {
        // Its own tools could not write the project, and would fail one by one with EACCES.
        let whose = match project_owner {
            Some(0) => "belongs to root".to_string(),
            Some(uid) => format!("belongs to uid {uid}"),
            None => "has no owner this process can read".to_string(),
        };
        return Err(refused(format!(
            "{} {whose} and the agent never runs as root (a root broker runs it as nobody), so with --own-tools write its own tools could not change it. Run without --own-tools write (changes then go through gatehouse's tools, which can), or run gatehouse as the project's user",
            cwd.display()
        )));
    }
    Ok(owner)
}

/// Windows and macOS: a path the MCP config names, as text.
#[cfg(not(target_os = "linux"))]
fn text_path(p: &Path) -> Result<String, Stop> {
    p.to_str()
        .map(str::to_string)
        .ok_or_else(|| refused(format!("{}: the path is not valid Unicode", p.display())))
}

/// Windows and macOS: a file of the run's (its MCP config), made new and removed when the run
/// ends.
#[cfg(not(target_os = "linux"))]
struct RunFile(PathBuf);

#[cfg(not(target_os = "linux"))]
impl RunFile {
    fn write(path: &Path, text: &str) -> Result<RunFile, Stop> {
        use std::io::Write as _;
        let at = |e: std::io::Error| refused(format!("{}: {e}", path.display()));
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(path)
            .map_err(at)?;
        let file = RunFile(path.to_path_buf());
        f.write_all(text.as_bytes()).map_err(at)?;
        Ok(file)
    }
}

#[cfg(not(target_os = "linux"))]
impl Drop for RunFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// What the run set up, on stderr before the agent starts (names only, never a value).
fn say_setup(
    agent: Agent,
    home: &Path,
    recipe_domains: &[String],
    domains: &[String],
    keys: &[(String, String)],
    own: OwnTools,
) {
    eprintln!(
        "{WHO}: {} recipe; its login and state: {}",
        agent.name(),
        home.display()
    );
    if domains.is_empty() {
        eprintln!("{WHO}: no network (add hosts with --allow-domain)");
    } else {
        eprintln!(
            "{WHO}: egress allowed to {}{}",
            domains.join(", "),
            if recipe_domains.is_empty() {
                String::new()
            } else {
                " (the recipe's hosts: drop them with --no-recipe-domains)".to_string()
            }
        );
    }
    if !keys.is_empty() {
        let names: Vec<&str> = keys.iter().map(|(k, _)| k.as_str()).collect();
        eprintln!("{WHO}: passing {} to the agent", names.join(", "));
    }
    eprintln!(
        "{WHO}: {}",
        match own {
            OwnTools::Read => "the project is read-only to the agent's own tools; changes go through gatehouse (--own-tools write to change that)",
            OwnTools::Write => "the agent's own tools may change the project (--own-tools write)",
        }
    );
}

/// The MCP config the agent is pointed at: gatehouse as its one server, reached through the
/// run's socket and token file (passed as arguments: a client may filter the environment).
/// The file holds no secret.
fn mcp_config(exe: &str, args: &[String]) -> String {
    serde_json::json!({
        "mcpServers": {
            "gatehouse": {
                "command": exe,
                "args": args,
            }
        }
    })
    .to_string()
}
