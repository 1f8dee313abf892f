//! What `gatehouse run` knows about common agent CLIs, chosen by the name of the program it
//! starts: how to make gatehouse the agent's only MCP server in the agent's own terms, which
//! variables carry its key, which provider hosts it must reach, and how long its MCP client
//! waits for a tool call. Anything else gets the generic recipe: the MCP config in
//! `$GATEHOUSE_MCP_CONFIG` and nothing more.

use std::path::Path;
use std::time::Duration;

/// Which agent a run starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Agent {
    Claude,
    Codex,
    Generic,
}

/// How the agent's own tools (its shell, its editor) may treat the project.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OwnTools {
    /// The project is read-only inside the sandbox; the recipe turns the agent's own shell and
    /// editing tools off, so every change goes through gatehouse's tools (policy, approval,
    /// undo, audit).
    Read,
    /// The project is writable inside the sandbox to the agent's own tools as well (they still
    /// run confined: no network but the provider hosts, protected paths masked).
    Write,
}

/// What the run adds to the agent's command line and environment.
#[derive(Debug, Default, PartialEq)]
pub struct Setup {
    /// Arguments put right after the program name.
    pub leading: Vec<String>,
    /// Arguments put after the user's.
    pub trailing: Vec<String>,
    /// Variables set for the agent (not secrets: those come from `key_vars`).
    pub env: Vec<(String, String)>,
}

/// Where the agent finds gatehouse inside the sandbox.
pub struct Wiring<'a> {
    /// The `gatehouse` binary (visible read-only inside).
    pub exe: &'a str,
    /// The MCP config file (generic JSON, `mcpServers`).
    pub mcp_config: &'a str,
    /// The arguments of `gatehouse mcp` that reach this run.
    pub mcp_args: &'a [String],
}

impl Agent {
    /// The recipe for `argv0`, by the program's file name (on Windows without its `.exe` or
    /// `.cmd`, in any case).
    pub fn for_program(argv0: &str) -> Agent {
        let name = Path::new(argv0).file_name().and_then(|n| n.to_str());
        let mut name = name.unwrap_or_default().to_string();
        if cfg!(windows) {
            name.make_ascii_lowercase();
            for ext in [".exe", ".cmd"] {
                if let Some(stem) = name.strip_suffix(ext) {
                    name = stem.to_string();
                }
            }
        }
        match name.as_str() {
            "claude" => Agent::Claude,
            "codex" => Agent::Codex,
            _ => Agent::Generic,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Agent::Claude => "claude",
            Agent::Codex => "codex",
            Agent::Generic => "generic",
        }
    }

    /// The hosts the agent needs to work (its model API and its login), allowed through the
    /// egress proxy unless `--no-recipe-domains`.
    pub fn domains(self) -> &'static [&'static str] {
        match self {
            Agent::Claude => &["api.anthropic.com", "console.anthropic.com", "claude.ai"],
            Agent::Codex => &["api.openai.com", "auth.openai.com", "chatgpt.com"],
            Agent::Generic => &[],
        }
    }

    /// Variables that hold the agent's key: passed to the agent (and nothing else) when set in
    /// the caller's environment, as `--pass-env NAME` does for any name.
    pub fn key_vars(self) -> &'static [&'static str] {
        match self {
            Agent::Claude => &[
                "ANTHROPIC_API_KEY",
                "ANTHROPIC_AUTH_TOKEN",
                "CLAUDE_CODE_OAUTH_TOKEN",
            ],
            Agent::Codex => &["OPENAI_API_KEY", "CODEX_API_KEY"],
            Agent::Generic => &[],
        }
    }

    /// Variables that point the agent at its provider (not secrets), passed when set. Their
    /// URL's host is allowed through the proxy like the recipe's own hosts.
    pub fn endpoint_vars(self) -> &'static [&'static str] {
        match self {
            Agent::Claude => &["ANTHROPIC_BASE_URL"],
            Agent::Codex => &["OPENAI_BASE_URL"],
            Agent::Generic => &[],
        }
    }

    /// How long gatehouse keeps a call waiting for the human before answering "proposal N is
    /// waiting; call again": below the agent's MCP client's own timeout for a tool call, which
    /// the recipe sets where the agent lets it (else the 60 s that common clients use).
    pub fn approval_wait(self) -> Duration {
        match self {
            Agent::Claude | Agent::Codex => Duration::from_secs(270),
            Agent::Generic => Duration::from_secs(50),
        }
    }

    /// The agent's own tool-call timeout as the recipe sets it.
    fn client_timeout(self) -> Duration {
        match self {
            Agent::Claude | Agent::Codex => Duration::from_secs(300),
            Agent::Generic => Duration::from_secs(60),
        }
    }

    /// The agent's command-line and environment additions.
    pub fn setup(self, w: &Wiring<'_>, own: OwnTools) -> Setup {
        let mut s = Setup::default();
        match self {
            Agent::Claude => {
                // --mcp-config and --allowedTools take several values: they go last, each
                // ended by the next option, so the user's prompt is never read as one.
                s.trailing.extend(
                    [
                        "--strict-mcp-config",
                        "--allowedTools",
                        "mcp__gatehouse",
                        "--mcp-config",
                        w.mcp_config,
                    ]
                    .map(String::from),
                );
                if own == OwnTools::Read {
                    // Its shell and editors: the project is read-only to them anyway.
                    s.trailing.splice(
                        0..0,
                        [
                            "--disallowedTools",
                            "Bash,Edit,Write,MultiEdit,NotebookEdit",
                        ]
                        .map(String::from),
                    );
                }
                for (k, v) in [
                    ("DISABLE_AUTOUPDATER", "1".to_string()),
                    // Only the model API: no telemetry, error reporting or update checks, so
                    // the provider hosts are all it needs.
                    ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1".to_string()),
                    // gatehouse's tools are the agent's whole toolset: offered up front, not
                    // deferred behind a tool search.
                    ("ENABLE_TOOL_SEARCH", "false".to_string()),
                    (
                        "MCP_TOOL_TIMEOUT",
                        self.client_timeout().as_millis().to_string(),
                    ),
                ] {
                    s.env.push((k.into(), v));
                }
            }
            Agent::Codex => {
                let args = serde_json::to_string(w.mcp_args).expect("strings serialise");
                let exe = serde_json::to_string(w.exe).expect("strings serialise");
                for c in [
                    format!("mcp_servers.gatehouse.command={exe}"),
                    format!("mcp_servers.gatehouse.args={args}"),
                    format!(
                        "mcp_servers.gatehouse.tool_timeout_sec={}",
                        self.client_timeout().as_secs()
                    ),
                    // gatehouse asks the human itself; Codex's own gate would refuse its
                    // effectful tools in `codex exec` before they reach gatehouse.
                    "mcp_servers.gatehouse.default_tools_approval_mode=\"approve\"".into(),
                    // Wait for gatehouse at start (a cold broker takes a moment) instead of
                    // starting without its tools.
                    "mcp_servers.gatehouse.required=true".into(),
                    // Its plugin and analytics features reach hosts that are not the model's
                    // (github.com, chatgpt.com): the proxy would refuse them one by one.
                    "features.plugins=false".into(),
                    "features.remote_plugin=false".into(),
                    "analytics.enabled=false".into(),
                ] {
                    s.leading.push("-c".into());
                    s.leading.push(c);
                }
                if own == OwnTools::Read {
                    for f in ["shell_tool", "unified_exec"] {
                        s.leading.push("--disable".into());
                        s.leading.push(f.into());
                    }
                }
            }
            Agent::Generic => {}
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wiring() -> (Vec<String>, Wiring<'static>) {
        (
            Vec::new(),
            Wiring {
                exe: "/opt/gh/gatehouse",
                mcp_config: "/tmp/gatehouse-mcp.json",
                mcp_args: &[],
            },
        )
    }

    #[test]
    fn recipes_are_chosen_by_the_program_name() {
        assert_eq!(Agent::for_program("claude"), Agent::Claude);
        assert_eq!(
            Agent::for_program("/home/u/.local/bin/claude"),
            Agent::Claude
        );
        assert_eq!(Agent::for_program("codex"), Agent::Codex);
        assert_eq!(Agent::for_program("python3"), Agent::Generic);
        assert_eq!(Agent::for_program("claude-wrapper"), Agent::Generic);
    }

    #[test]
    fn claude_gets_gatehouse_as_its_only_server_with_the_options_last() {
        let (_, w) = wiring();
        let s = Agent::Claude.setup(&w, OwnTools::Read);
        assert!(s.leading.is_empty());
        assert_eq!(
            s.trailing,
            [
                "--disallowedTools",
                "Bash,Edit,Write,MultiEdit,NotebookEdit",
                "--strict-mcp-config",
                "--allowedTools",
                "mcp__gatehouse",
                "--mcp-config",
                "/tmp/gatehouse-mcp.json"
            ]
        );
        let s = Agent::Claude.setup(&w, OwnTools::Write);
        assert_eq!(s.trailing[0], "--strict-mcp-config");
    }

    #[test]
    fn codex_gets_its_server_through_config_overrides() {
        let args = vec![
            "mcp".to_string(),
            "--gateway-socket".into(),
            "/tmp/s".into(),
        ];
        let w = Wiring {
            exe: "/opt/gh/gatehouse",
            mcp_config: "/tmp/gatehouse-mcp.json",
            mcp_args: &args,
        };
        let s = Agent::Codex.setup(&w, OwnTools::Read);
        assert!(s.leading.contains(
            &r#"mcp_servers.gatehouse.args=["mcp","--gateway-socket","/tmp/s"]"#.to_string()
        ));
        assert!(s
            .leading
            .contains(&r#"mcp_servers.gatehouse.command="/opt/gh/gatehouse""#.to_string()));
        assert!(s
            .leading
            .windows(2)
            .any(|w| w == ["--disable", "shell_tool"]));
        let s = Agent::Codex.setup(&w, OwnTools::Write);
        assert!(!s.leading.contains(&"--disable".to_string()));
    }

    #[test]
    fn each_approval_wait_ends_before_its_client_gives_up() {
        for a in [Agent::Claude, Agent::Codex, Agent::Generic] {
            assert!(a.approval_wait() + Duration::from_secs(10) <= a.client_timeout());
        }
    }
}
