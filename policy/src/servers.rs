//! Third-party MCP servers in the policy (`[[mcp_server]]`): their checked form, the rules that
//! name their tools (`NAME__TOOL`, `NAME__*`, with argument matchers), the verdict on a call,
//! and the exec sandbox each server runs in. Pure: the broker starts and pins the servers.

use super::compile::{HostPattern, Policy};
use super::doc::McpServerDoc;
use super::protected::Protected;
use globset::{Glob, GlobMatcher};
use ipc_schema::exec::{
    CommandSpec, GrantAccess, Hide, Limits, NetworkMode, PathGrant, ServerRun, UserCommand,
    LONG_OUTPUT_MAX, LONG_TIMEOUT_MAX_MS,
};
use ipc_schema::secrets::CredentialName;
use ipc_schema::servers::{ServerName, ServerToolName};
use ipc_schema::tool::{Action, Verdict};
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Servers one profile may list.
pub const SERVERS_MAX: usize = 32;
/// The longest a server's tool call may be given, and the default.
pub const CALL_TIMEOUT_MAX: Duration = Duration::from_secs(600);
pub const CALL_TIMEOUT_DEFAULT: Duration = Duration::from_secs(120);

/// One `[[mcp_server]]`, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct McpServer {
    pub name: ServerName,
    /// How gatehouse reaches it: a confined stdio process, or a remote URL.
    pub reach: Reach,
    /// Tools the user marked read-only: they skip the ledger (a repeated call runs again).
    pub read_only: BTreeSet<ServerToolName>,
    pub call_timeout: Duration,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Reach {
    Stdio(StdioServer),
    Remote(RemoteServer),
}

/// A server gatehouse runs, in the exec sandbox, speaking MCP on its stdin and stdout.
#[derive(Debug, Clone, PartialEq)]
pub struct StdioServer {
    /// The command, as written: `argv[0]` is an absolute path or a name the sandbox's `PATH`
    /// resolves (the exec-helper resolves it, and its start row shows the program it found).
    pub argv: Vec<String>,
    /// The only files it may touch (none by default), canonical.
    pub grants: Vec<PathGrant>,
    /// What it may reach itself, through the egress proxy (nothing by default).
    pub network: Vec<HostPattern>,
    /// Variables it gets (plain values; names that look like secrets are dropped by the
    /// sandbox like any command's).
    pub env: Vec<(String, String)>,
    /// Variables whose values the secrets-helper gives it: name -> credential.
    pub secrets: Vec<(String, CredentialName)>,
}

/// A server reached over Streamable HTTP, only through the net-helper.
#[derive(Debug, Clone, PartialEq)]
pub struct RemoteServer {
    /// https, no user info, no fragment: as the WHATWG parser writes it.
    pub url: String,
    pub host: ipc_schema::host::Host,
    /// A gatehouse secret, attached by the secrets-helper for `host` only.
    pub credential: Option<CredentialName>,
}

impl McpServer {
    /// The stdio server's parts (`None` for a remote one).
    pub fn stdio(&self) -> Option<&StdioServer> {
        match &self.reach {
            Reach::Stdio(s) => Some(s),
            Reach::Remote(_) => None,
        }
    }
}

/// `NAME__GLOB` of a rule: the server, and the glob on its tools' names.
pub type ToolPattern = (ServerName, GlobMatcher);

/// A rule's reach into servers' tools: `NAME__GLOB`.
#[derive(Debug, Clone)]
pub struct ServerTools {
    pub patterns: Vec<ToolPattern>,
    /// `arguments = { "/to" = "*@example.com" }`: each JSON pointer must name a string that
    /// matches its glob (a number or boolean is matched as its JSON text).
    pub arguments: Vec<(String, GlobMatcher)>,
}

impl ServerTools {
    fn covers(&self, server: &ServerName, tool: &ServerToolName) -> bool {
        self.patterns
            .iter()
            .any(|(s, g)| s == server && g.is_match(tool.as_str()))
    }

    fn arguments_match(&self, args: &Value) -> bool {
        self.arguments
            .iter()
            .all(|(ptr, g)| match args.pointer(ptr) {
                Some(Value::String(s)) => g.is_match(s),
                Some(v @ (Value::Number(_) | Value::Bool(_))) => g.is_match(v.to_string()),
                _ => false,
            })
    }
}

fn glob(s: &str, what: &str) -> Result<GlobMatcher, String> {
    Glob::new(s)
        .map(|g| g.compile_matcher())
        .map_err(|e| format!("{what}: bad glob {s:?}: {e}"))
}

/// Checks a profile's `[[mcp_server]]` entries.
pub fn compile(docs: &[McpServerDoc], protected: &Protected) -> Result<Vec<McpServer>, String> {
    if docs.len() > SERVERS_MAX {
        return Err(format!("more than {SERVERS_MAX} [[mcp_server]] entries"));
    }
    let mut out: Vec<McpServer> = Vec::new();
    for d in docs {
        let name =
            ServerName::try_from(d.name.clone()).map_err(|e| format!("[[mcp_server]]: {e}"))?;
        let what = format!("[[mcp_server]] {name}");
        if out.iter().any(|s| s.name == name) {
            return Err(format!("{what}: the name is used twice"));
        }
        let reach = match (&d.command, &d.url) {
            (Some(c), None) => {
                if d.credential.is_some() {
                    return Err(format!(
                        "{what}: credential applies to remote servers (url); give a stdio server its secrets another way"
                    ));
                }
                Reach::Stdio(stdio(d, c, protected).map_err(|e| format!("{what}: {e}"))?)
            }
            (None, Some(u)) => {
                let local = [
                    ("network", !d.network.is_empty()),
                    ("grant", !d.grant.is_empty()),
                    ("read", !d.read.is_empty()),
                    ("env", !d.env.is_empty()),
                    ("secrets", !d.secrets.is_empty()),
                ];
                if let Some((field, _)) = local.iter().find(|(_, set)| *set) {
                    return Err(format!(
                        "{what}: {field} applies to stdio servers (command), which gatehouse runs; a remote server (url) is reached only through the net-helper"
                    ));
                }
                Reach::Remote(
                    remote(u, d.credential.as_deref()).map_err(|e| format!("{what}: {e}"))?,
                )
            }
            _ => return Err(format!("{what}: give exactly one of command and url")),
        };
        let mut read_only = BTreeSet::new();
        for t in &d.read_only {
            read_only.insert(
                ServerToolName::try_from(t.clone())
                    .map_err(|e| format!("{what}: read_only: {e}"))?,
            );
        }
        let call_timeout = match d.timeout_secs {
            None => CALL_TIMEOUT_DEFAULT,
            Some(0) => return Err(format!("{what}: timeout_secs must be at least 1")),
            Some(s) if Duration::from_secs(s) > CALL_TIMEOUT_MAX => {
                return Err(format!(
                    "{what}: timeout_secs is at most {}",
                    CALL_TIMEOUT_MAX.as_secs()
                ))
            }
            Some(s) => Duration::from_secs(s),
        };
        out.push(McpServer {
            name,
            reach,
            read_only,
            call_timeout,
        });
    }
    Ok(out)
}

fn stdio(d: &McpServerDoc, argv: &[String], protected: &Protected) -> Result<StdioServer, String> {
    match argv.first() {
        None => return Err("command is empty".into()),
        Some(p) if p.is_empty() || (p.contains('/') && !p.starts_with('/')) => {
            return Err(format!(
                "command[0] {p:?} must be an absolute path or a program name"
            ))
        }
        _ => {}
    }
    if argv.iter().any(|a| a.contains('\0')) {
        return Err("command holds a NUL byte".into());
    }
    let mut grants = Vec::new();
    for (list, access) in [
        (&d.grant, GrantAccess::ReadWrite),
        (&d.read, GrantAccess::Read),
    ] {
        for g in list {
            grants.push(PathGrant {
                path: server_grant(g, access, protected)?,
                access,
            });
        }
    }
    let mut network = Vec::new();
    for h in &d.network {
        network.push(HostPattern::parse(h).map_err(|e| format!("network entry {h:?}: {e}"))?);
    }
    let mut secrets = Vec::new();
    for (var, c) in &d.secrets {
        let ok = var.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
            && var.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
            && !var.starts_with("LD_")
            && !d.env.contains_key(var);
        if !ok {
            return Err(format!(
                "secrets: {var:?} is not a variable name it may be given (letters, digits, _; not LD_*, not also in env)"
            ));
        }
        let cred = CredentialName::parse(c).map_err(|e| format!("secrets: {var}: {e}"))?;
        secrets.push((var.clone(), cred));
    }
    Ok(StdioServer {
        argv: argv.to_vec(),
        grants,
        network,
        env: d.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        secrets,
    })
}

/// A remote server's URL: https (its credential, if any, goes nowhere else), parsed the WHATWG
/// way, its host read by the one function every process uses.
fn remote(u: &str, credential: Option<&str>) -> Result<RemoteServer, String> {
    let mut url = url::Url::parse(u).map_err(|e| format!("url {u:?} is not a URL ({e})"))?;
    if url.scheme() != "https" {
        return Err(format!(
            "url {u:?}: a remote server is reached over https only"
        ));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(format!(
            "url {u:?}: a user name or password in the URL is refused (name a credential)"
        ));
    }
    url.set_fragment(None);
    let host = ipc_schema::host::Host::of_url(&url).map_err(|e| format!("url {u:?}: {e}"))?;
    let credential = credential
        .map(|c| CredentialName::parse(c).map_err(|e| format!("credential {c:?}: {e}")))
        .transpose()?;
    Ok(RemoteServer {
        url: url.to_string(),
        host,
        credential,
    })
}

/// A server's grant: absolute, there, not `/` or a home directory, not protected.
fn server_grant(g: &str, access: GrantAccess, protected: &Protected) -> Result<PathBuf, String> {
    let p = Path::new(g);
    if !p.is_absolute() {
        return Err(format!("grant {g:?} must be an absolute path"));
    }
    let canon = std::fs::canonicalize(p).map_err(|e| format!("grant {g:?} cannot be used: {e}"))?;
    if super::compile::is_broad(&canon) {
        return Err(format!(
            "grant {} is a home directory or /: give a server a directory of its own",
            canon.display()
        ));
    }
    let writes = access == GrantAccess::ReadWrite;
    if let Some(why) = protected.check(ipc_schema::os_path::of(&canon), writes) {
        return Err(format!(
            "grant {} lies in a protected place: {why}",
            canon.display()
        ));
    }
    Ok(canon)
}

/// Splits a rule's `tools` into built-in names and `NAME__GLOB` patterns of the profile's
/// servers (a name with `__` must be one of them).
pub fn rule_patterns(
    rule: &str,
    tools: &[String],
    servers: &[McpServer],
) -> Result<(Vec<String>, Vec<ToolPattern>), String> {
    let mut builtin = Vec::new();
    let mut patterns = Vec::new();
    for t in tools {
        let Some((s, pat)) = t.split_once("__") else {
            builtin.push(t.clone());
            continue;
        };
        let server =
            ServerName::try_from(s.to_owned()).map_err(|e| format!("{rule}: {t:?}: {e}"))?;
        if !servers.iter().any(|x| x.name == server) {
            return Err(format!(
                "{rule}: {t:?} names the server {server}, which this profile has no [[mcp_server]] for"
            ));
        }
        patterns.push((server, glob(pat, rule)?));
    }
    Ok((builtin, patterns))
}

pub fn argument_matchers(
    rule: &str,
    arguments: &std::collections::BTreeMap<String, String>,
) -> Result<Vec<(String, GlobMatcher)>, String> {
    let mut out = Vec::new();
    for (ptr, g) in arguments {
        if !ptr.starts_with('/') {
            return Err(format!(
                "{rule}: argument {ptr:?} must be a JSON pointer (\"/to\", \"/repo/owner\")"
            ));
        }
        out.push((ptr.clone(), glob(g, rule)?));
    }
    Ok(out)
}

/// The verdict on a call of `server`'s `tool` with `args`: the most restrictive rule that
/// names the tool (and whose argument matchers hold) wins; with none, Ask. Annotations and
/// descriptions the server gives play no part.
pub fn verdict(
    policy: &Policy,
    server: &ServerName,
    tool: &ServerToolName,
    args: &Value,
) -> Verdict {
    let applies = |r: &&super::compile::Rule| {
        r.servers
            .as_ref()
            .is_some_and(|s| s.covers(server, tool) && s.arguments_match(args))
    };
    let winner = policy.rules.iter().filter(applies).map(|r| r.action).max();
    if let Some(action) = winner {
        let first = policy
            .rules
            .iter()
            .filter(applies)
            .find(|r| r.action == action)
            .expect("the winner is one of them");
        return Verdict {
            action,
            rule: format!("{} (policy revision {})", first.name, policy.revision),
        };
    }
    Verdict {
        action: Action::Ask,
        rule: default_rule(policy, server),
    }
}

/// Whether some rule of `policy` on `server`'s `tool` matches its arguments: then a call's
/// verdict depends on values the audit log never keeps, and a replay cannot judge it.
pub fn depends_on_arguments(policy: &Policy, server: &ServerName, tool: &ServerToolName) -> bool {
    policy.rules.iter().any(|r| {
        r.servers
            .as_ref()
            .is_some_and(|s| !s.arguments.is_empty() && s.covers(server, tool))
    })
}

/// What decides a call of `server`'s `tool` in `policy`, whatever its arguments: each rule
/// naming the tool, as its action and argument matchers (sorted). Two policies with the same
/// give the same action on every call of the tool ([`verdict`] reads nothing else).
pub fn deciding_rules(
    policy: &Policy,
    server: &ServerName,
    tool: &ServerToolName,
) -> Vec<(Action, Vec<(String, String)>)> {
    let mut out: Vec<_> = policy
        .rules
        .iter()
        .filter_map(|r| {
            let s = r.servers.as_ref().filter(|s| s.covers(server, tool))?;
            let args = s
                .arguments
                .iter()
                .map(|(p, g)| (p.clone(), g.glob().glob().to_string()))
                .collect();
            Some((r.action, args))
        })
        .collect();
    out.sort();
    out
}

fn default_rule(policy: &Policy, server: &ServerName) -> String {
    format!(
        "no rule for the tools of server {server}: ask (policy revision {})",
        policy.revision
    )
}

/// What the policy does with a server's tool as a whole: Deny (then it is not offered) only
/// when a Deny rule without argument matchers names it; otherwise the verdict of the rules
/// without argument matchers, or Ask.
pub fn standing(policy: &Policy, server: &ServerName, tool: &ServerToolName) -> Verdict {
    let unconditional = |r: &&super::compile::Rule| {
        r.servers
            .as_ref()
            .is_some_and(|s| s.arguments.is_empty() && s.covers(server, tool))
    };
    let conditional = policy.rules.iter().any(|r| {
        r.servers
            .as_ref()
            .is_some_and(|s| !s.arguments.is_empty() && s.covers(server, tool))
    });
    match policy
        .rules
        .iter()
        .filter(unconditional)
        .max_by_key(|r| r.action)
    {
        Some(r) if r.action == Action::Deny || !conditional => Verdict {
            action: r.action,
            rule: format!("{} (policy revision {})", r.name, policy.revision),
        },
        // A rule with argument matchers may still decide a call otherwise: Ask.
        _ => Verdict {
            action: Action::Ask,
            rule: default_rule(policy, server),
        },
    }
}

/// The exec-helper's spec for one connection of `s`: its grants, its own state directory
/// (`state_home`, also its working directory), the proxy when it has a network list, its
/// stdio on a socket. It runs as long as its connection (the long-run ceilings).
pub fn spec(s: &StdioServer, state_home: &Path, proxy_token: Option<String>) -> CommandSpec {
    let mut grants = s.grants.clone();
    grants.push(PathGrant {
        path: state_home.to_path_buf(),
        access: GrantAccess::ReadWrite,
    });
    CommandSpec {
        argv: s.argv.clone(),
        cwd: state_home.to_path_buf(),
        grants,
        env: s.env.clone(),
        network: match proxy_token {
            Some(token) => NetworkMode::Proxy { token },
            None => NetworkMode::None,
        },
        limits: Limits {
            timeout_ms: LONG_TIMEOUT_MAX_MS,
            stdout_max: LONG_OUTPUT_MAX,
            stderr_max: LONG_OUTPUT_MAX,
            ..Limits::default()
        },
        hide: Hide::default(),
        slot: None,
        user: Some(Box::new(UserCommand {
            long_run: true,
            server: Some(ServerRun {
                state_home: state_home.to_path_buf(),
                run_name: None,
            }),
            ..UserCommand::default()
        })),
    }
}

/// How a server is confined, as `doctor` says it (`root`: the broker runs as root).
pub fn confinement(s: &McpServer, root: bool) -> String {
    match &s.reach {
        Reach::Remote(r) => format!(
            "remote {} through the net-helper, credential {}",
            r.url,
            r.credential
                .as_ref()
                .map_or("none".into(), |c| c.to_string())
        ),
        Reach::Stdio(_) if root => {
            "not started: a broker running as root does not run third-party stdio servers".into()
        }
        Reach::Stdio(x) => format!(
            "exec sandbox, {} grant(s), network {}",
            x.grants.len(),
            if x.network.is_empty() {
                "none".to_string()
            } else {
                let hosts: Vec<String> = x.network.iter().map(|h| h.to_string()).collect();
                format!("through the proxy to {}", hosts.join(", "))
            }
        ),
    }
}

/// The one line of a server's start row.
/// `tier`: the exec sandbox's, which a stdio server runs in (unused for a remote server).
pub fn start_line(
    s: &McpServer,
    profile: &str,
    tier: Option<ipc_schema::tier::ConfinementTier>,
) -> String {
    let shown = |v: Vec<String>| {
        if v.is_empty() {
            "none".to_string()
        } else {
            v.join(", ")
        }
    };
    match &s.reach {
        Reach::Stdio(x) => format!(
            "server {} of profile {profile}: {:?} in the exec sandbox ({}); grants: {}; network: {}; secrets: {}",
            s.name,
            x.argv,
            ipc_schema::tier::shown(tier),
            shown(crate::launch::grants_shown(&x.grants)),
            shown(x.network.iter().map(|h| h.to_string()).collect()),
            shown(x.secrets.iter().map(|(v, c)| format!("{v} from {c}")).collect()),
        ),
        Reach::Remote(r) => format!(
            "server {} of profile {profile}: {} through the net-helper; credential: {}",
            s.name,
            r.url,
            r.credential
                .as_ref()
                .map_or("none".into(), |c| c.to_string()),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(d: McpServerDoc) -> Result<McpServer, String> {
        compile(&[d], &Protected::new(&[])).map(|mut v| v.remove(0))
    }

    fn remote_doc(url: &str) -> McpServerDoc {
        McpServerDoc {
            name: "gh".into(),
            url: Some(url.into()),
            credential: Some("gh-pat".into()),
            ..McpServerDoc::default()
        }
    }

    #[test]
    fn a_remote_server_is_https_with_its_host_read_the_whatwg_way() {
        let s = one(remote_doc("https://MCP.Example.com./mcp#frag")).unwrap();
        let Reach::Remote(r) = &s.reach else {
            panic!("{s:?}")
        };
        assert_eq!(r.url, "https://mcp.example.com./mcp");
        assert_eq!(r.host.to_string(), "mcp.example.com");
        assert_eq!(r.credential.as_ref().unwrap().to_string(), "gh-pat");
        assert!(s.stdio().is_none());
        assert_eq!(
            start_line(&s, "default", None),
            "server gh of profile default: https://mcp.example.com./mcp through the net-helper; credential: gh-pat"
        );
        for (url, want) in [
            ("http://mcp.example.com/", "over https only"),
            ("https://u:p@mcp.example.com/", "user name or password"),
            ("https://localhost/mcp", "reserved for loopback"),
            ("not a url", "is not a URL"),
        ] {
            let e = one(remote_doc(url)).unwrap_err();
            assert!(e.contains(want), "{url}: {e}");
        }
        let mut bad = remote_doc("https://mcp.example.com/");
        bad.credential = Some("no spaces".into());
        assert!(one(bad).unwrap_err().contains("credential \"no spaces\""));
    }

    #[test]
    fn what_applies_to_one_kind_is_refused_on_the_other() {
        for (field, d) in [
            (
                "network",
                McpServerDoc {
                    network: vec!["api.example.com".into()],
                    ..remote_doc("https://mcp.example.com/")
                },
            ),
            (
                "grant",
                McpServerDoc {
                    grant: vec!["/srv".into()],
                    ..remote_doc("https://mcp.example.com/")
                },
            ),
            (
                "env",
                McpServerDoc {
                    env: [("A".to_string(), "b".to_string())].into(),
                    ..remote_doc("https://mcp.example.com/")
                },
            ),
        ] {
            let e = one(d).unwrap_err();
            assert!(
                e.contains(&format!("{field} applies to stdio servers")),
                "{field}: {e}"
            );
        }
        let stdio = McpServerDoc {
            name: "notes".into(),
            command: Some(vec!["/usr/bin/true".into()]),
            credential: Some("x-key".into()),
            ..McpServerDoc::default()
        };
        assert!(one(stdio.clone())
            .unwrap_err()
            .contains("credential applies to remote servers"));
        let both = McpServerDoc {
            url: Some("https://mcp.example.com/".into()),
            credential: None,
            ..stdio.clone()
        };
        assert!(one(both)
            .unwrap_err()
            .contains("exactly one of command and url"));
        let s = one(McpServerDoc {
            credential: None,
            ..stdio
        })
        .unwrap();
        assert_eq!(s.stdio().unwrap().argv, vec!["/usr/bin/true".to_string()]);
    }
}
