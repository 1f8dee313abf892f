//! The policy document as a person writes it (`policy.toml`), and the built-in default profile.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// `allow`, `ask` or `deny`.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ActionDoc {
    Allow,
    Ask,
    Deny,
}

#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum CapabilityDoc {
    Read,
    Write,
    Edit,
    Delete,
}

/// The whole document.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PolicyDoc {
    /// Bumped by the broker on every apply; an apply must carry the revision in force.
    #[serde(default)]
    pub revision: u64,
    /// The mode of this profile's sessions (`ask` when absent); the human may change a
    /// session's mode later, the agent never.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<ipc_schema::mode::SessionMode>,
    /// Whether commands (run_command, `gatehouse run`/`sandbox`, stdio MCP servers) may run
    /// only in the namespace tier of the exec sandbox (absent: `true`). Where the machine
    /// refuses user namespaces the exec helper runs in the Landlock tier, which does not hold
    /// everything the namespace tier does (docs/SECURITY.md); `false` lets commands run there.
    /// One setting for the whole broker (the exec helper serves every profile).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub require_namespaces: Option<bool>,
    /// What each tool gets when no rule applies. A tool not named here: `ask`.
    #[serde(default)]
    pub tools: BTreeMap<String, ActionDoc>,
    #[serde(default)]
    pub limits: LimitsDoc,
    #[serde(default)]
    pub approvals: ApprovalsDoc,
    #[serde(default, rename = "grant")]
    pub grants: Vec<GrantDoc>,
    #[serde(default, rename = "rule")]
    pub rules: Vec<RuleDoc>,
    /// The hosts `fetch_url` and `http_request` may reach at all (exact or `*.suffix`); a host
    /// outside it is refused before any rule or question. Absent: no such restriction.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<Vec<String>>,
    /// Third-party MCP servers whose tools sessions of this profile are offered.
    #[serde(default, rename = "mcp_server", skip_serializing_if = "Vec::is_empty")]
    pub mcp_servers: Vec<McpServerDoc>,
    /// Named session profiles (`gatehouse mcp --profile NAME`), each a whole policy of its
    /// own; the top level above is the `default` profile.
    #[serde(
        default,
        rename = "profile",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub profiles: BTreeMap<String, ProfileDoc>,
}

/// One named profile: everything a policy has but the revision (which the document has once).
/// Nothing is inherited from the top level: a profile says all it grants.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct ProfileDoc {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<ipc_schema::mode::SessionMode>,
    #[serde(default)]
    pub tools: BTreeMap<String, ActionDoc>,
    #[serde(default)]
    pub limits: LimitsDoc,
    #[serde(default)]
    pub approvals: ApprovalsDoc,
    #[serde(default, rename = "grant")]
    pub grants: Vec<GrantDoc>,
    #[serde(default, rename = "rule")]
    pub rules: Vec<RuleDoc>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<Vec<String>>,
    #[serde(default, rename = "mcp_server", skip_serializing_if = "Vec::is_empty")]
    pub mcp_servers: Vec<McpServerDoc>,
}

/// One `[[mcp_server]]`: a third-party MCP server, run confined, its tools offered to the
/// agent as `NAME__TOOL` under this profile's rules.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct McpServerDoc {
    /// 1-32 of a-z 0-9 -, starting with a letter: the prefix of its tools.
    pub name: String,
    /// A stdio server: the program and its arguments (never a shell line).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    /// A remote server (Streamable HTTP, https only), reached through the net-helper.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// A remote server's stored credential (`gatehouse secret set`), attached by the
    /// secrets-helper for the URL's host only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credential: Option<String>,
    /// Hosts the server itself may reach, through the egress proxy (default: none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub network: Vec<String>,
    /// Directories it may read and write (default: none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub grant: Vec<String>,
    /// Directories it may only read.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub read: Vec<String>,
    /// Its tools the user marks read-only: they skip the at-most-once ledger.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub read_only: Vec<String>,
    /// Variables it gets.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Variables it gets from the keyring: variable name -> a gatehouse secret, given to it by
    /// the secrets-helper only when everything it may reach (`network`) lies within the
    /// secret's hosts.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub secrets: BTreeMap<String, String>,
    /// How long one of its calls may take (default 120 s, at most 600).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_secs: Option<u64>,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct LimitsDoc {
    /// Tool calls one session may start in any 60 seconds.
    pub requests_per_minute: u32,
    /// Tool calls one session may have in progress at once (waiting for approval included).
    pub concurrent_requests: u32,
}

impl Default for LimitsDoc {
    fn default() -> Self {
        LimitsDoc {
            requests_per_minute: 600,
            concurrent_requests: 16,
        }
    }
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ApprovalsDoc {
    /// Seconds a proposal waits for the human; then it is denied.
    pub expire_after_secs: u64,
}

impl Default for ApprovalsDoc {
    fn default() -> Self {
        ApprovalsDoc {
            expire_after_secs: 600,
        }
    }
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct GrantDoc {
    /// An absolute directory; canonicalised (links resolved) when the policy is loaded.
    pub root: String,
    #[serde(default = "yes")]
    pub recursive: bool,
    /// Globs relative to the root (`*` stays within one directory, `**` crosses); empty: all.
    #[serde(default)]
    pub include: Vec<String>,
    #[serde(default)]
    pub exclude: Vec<String>,
    pub capabilities: Vec<CapabilityDoc>,
    /// Required to grant `/` or a home directory.
    #[serde(default)]
    pub confirm_broad_root: bool,
    /// Files whose names say they hold secrets (`.env`, private keys, keystores, Terraform
    /// state): `ask` (the default) asks before each read and hides them from commands and
    /// searches; `allow` treats them like any other file of the grant.
    #[serde(default, skip_serializing_if = "SecretFilesDoc::is_default")]
    pub secret_files: SecretFilesDoc,
}

#[derive(Serialize, Deserialize, Debug, Clone, Copy, Default, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum SecretFilesDoc {
    #[default]
    Ask,
    Allow,
}

impl SecretFilesDoc {
    fn is_default(&self) -> bool {
        *self == SecretFilesDoc::Ask
    }
}

fn yes() -> bool {
    true
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RuleDoc {
    /// Shown in every decision this rule makes; default `rule N`.
    #[serde(default)]
    pub name: Option<String>,
    /// Tool names, or `["*"]` for every tool.
    pub tools: Vec<String>,
    /// Globs on the resolved absolute path (file tools; both ends of a move; a command's
    /// working directory).
    #[serde(default)]
    pub paths: Vec<String>,
    /// Host names, exact or `*.suffix` (fetch_url, http_request).
    #[serde(default)]
    pub hosts: Vec<String>,
    /// Program names or absolute paths (run_command's argv[0]).
    #[serde(default)]
    pub programs: Vec<String>,
    /// For rules naming only servers' tools: JSON pointer -> glob on that argument's value.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub arguments: BTreeMap<String, String>,
    pub action: ActionDoc,
}

/// The DESIGN default profile: one grant (`root`), reads allowed inside it; writes, edits,
/// moves, deletes, fetches, requests and commands asked.
pub fn default_profile(root: Option<&str>) -> PolicyDoc {
    let mut tools = BTreeMap::new();
    for t in ["read_file", "list_dir", "search_files", "grep"] {
        tools.insert(t.to_string(), ActionDoc::Allow);
    }
    for t in [
        "write_file",
        "edit_file",
        "delete_path",
        "move_path",
        "undo_change",
        "fetch_url",
        "http_request",
        "run_command",
    ] {
        tools.insert(t.to_string(), ActionDoc::Ask);
    }
    PolicyDoc {
        revision: 0,
        mode: None,
        require_namespaces: None,
        tools,
        limits: LimitsDoc::default(),
        approvals: ApprovalsDoc::default(),
        grants: root
            .map(|r| GrantDoc {
                root: r.to_string(),
                recursive: true,
                include: vec![],
                exclude: vec![],
                capabilities: vec![
                    CapabilityDoc::Read,
                    CapabilityDoc::Write,
                    CapabilityDoc::Edit,
                    CapabilityDoc::Delete,
                ],
                confirm_broad_root: false,
                secret_files: SecretFilesDoc::Ask,
            })
            .into_iter()
            .collect(),
        rules: vec![],
        network: None,
        mcp_servers: vec![],
        profiles: BTreeMap::new(),
    }
}

impl PolicyDoc {
    pub fn parse(text: &str) -> Result<PolicyDoc, String> {
        toml::from_str(text).map_err(|e| e.to_string().trim_end().replace('\n', " "))
    }

    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).expect("a policy document always serialises")
    }

    /// The top level as a profile (the `default` profile).
    pub fn default_profile(&self) -> ProfileDoc {
        ProfileDoc {
            mode: self.mode,
            tools: self.tools.clone(),
            limits: self.limits.clone(),
            approvals: self.approvals.clone(),
            grants: self.grants.clone(),
            rules: self.rules.clone(),
            network: self.network.clone(),
            mcp_servers: self.mcp_servers.clone(),
        }
    }

    /// The profile `name` (`default`: the top level), if the document has it.
    pub fn profile(&self, name: &str) -> Option<ProfileDoc> {
        if name == ipc_schema::tool::ProfileName::DEFAULT {
            Some(self.default_profile())
        } else {
            self.profiles.get(name).cloned()
        }
    }
}

impl ProfileDoc {
    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).expect("a profile always serialises")
    }
}
