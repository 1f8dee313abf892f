//! Checking a policy document and turning it into something fast to evaluate. Any problem makes
//! the whole document invalid (the caller then refuses every request, with this reason).

use super::doc::{ActionDoc, CapabilityDoc, PolicyDoc, ProfileDoc};
use super::protected::Protected;
use globset::GlobSet;
use ipc_schema::fs::{Caps, GrantId};
use ipc_schema::tool::{Action, ProfileName, ToolName};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::rc::Rc;

/// A directory grant, validated, with its root canonical.
#[derive(Debug, Clone)]
pub struct Grant {
    pub id: GrantId,
    pub root: PathBuf,
    pub recursive: bool,
    /// `confirm_broad_root` was given.
    pub confirmed: bool,
    pub caps: Caps,
    pub include: Vec<String>,
    pub exclude: Vec<String>,
    pub include_set: Option<GlobSet>,
    pub exclude_set: GlobSet,
    /// `secret_files = "allow"`: files that may hold secrets are read without asking.
    pub secret_files_allowed: bool,
}

/// A `hosts` or `network` entry: ipc-schema's one host pattern (`example.com`, `*.example.com`,
/// an IP address; ASCII only, its rules are documented there).
pub use ipc_schema::host::HostPattern;

#[derive(Debug, Clone)]
pub struct Rule {
    pub name: String,
    /// `None`: every tool.
    pub tools: Option<BTreeSet<ToolName>>,
    pub paths: Option<GlobSet>,
    pub hosts: Vec<HostPattern>,
    pub programs: Vec<String>,
    /// The servers' tools it names (`NAME__GLOB`), with its argument matchers; `None`: it
    /// names none (a rule without `tools` of servers never decides a server's tool).
    pub servers: Option<crate::servers::ServerTools>,
    pub action: Action,
}

/// One profile's policy: what a session of that profile is judged by, and nothing else.
#[derive(Debug, Clone)]
pub struct Policy {
    pub profile: ProfileName,
    pub revision: u64,
    /// The mode a new session of this profile starts in.
    pub mode: ipc_schema::mode::SessionMode,
    pub defaults: BTreeMap<ToolName, Action>,
    pub requests_per_minute: u32,
    pub concurrent_requests: u32,
    pub expire_after: std::time::Duration,
    pub grants: Vec<Grant>,
    pub rules: Vec<Rule>,
    /// The hosts web tools may reach at all (`None`: no such restriction).
    pub network: Option<Vec<HostPattern>>,
    /// Its third-party MCP servers.
    pub servers: Vec<crate::servers::McpServer>,
}

/// Every profile of one policy document, validated together.
#[derive(Debug, Clone)]
pub struct Policies {
    pub revision: u64,
    /// Commands run only in the exec sandbox's namespace tier (the document's
    /// `require_namespaces`, `true` when absent).
    pub require_namespaces: bool,
    /// `default` (the document's top level) and every `[profile.NAME]`.
    pub profiles: BTreeMap<ProfileName, Rc<Policy>>,
}

/// A grant as the fs-helper is given it: the union of every profile's grants, one per root
/// (the fs-helper serves every session; the broker judges each call by its session's profile).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FsGrant {
    pub id: GrantId,
    pub root: PathBuf,
    pub recursive: bool,
    pub confirmed: bool,
    pub caps: Caps,
    pub include: Vec<String>,
    pub exclude: Vec<String>,
}

impl Policies {
    pub fn get(&self, name: &ProfileName) -> Option<&Rc<Policy>> {
        self.profiles.get(name)
    }

    pub fn default_profile(&self) -> &Rc<Policy> {
        self.profiles
            .get(&ProfileName::default_profile())
            .expect("compile always makes the default profile")
    }

    /// The profile names for messages: `default` first, then the others in order.
    pub fn names(&self) -> String {
        std::iter::once(ProfileName::DEFAULT)
            .chain(
                self.profiles
                    .keys()
                    .filter(|n| !n.is_default())
                    .map(|n| n.as_str()),
            )
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The union of every profile's grants, merged per root so that the fs-helper (which picks
    /// the longest root) never lacks what any profile grants there: capabilities and
    /// recursion are or-ed, an include list stays only if every grant of the root has one (then
    /// their union), an exclude only if every grant of the root excludes it. The broker still
    /// judges each call against its own profile's grants.
    pub fn fs_grants(&self) -> Vec<FsGrant> {
        let mut out: Vec<FsGrant> = Vec::new();
        // The default profile first, so that without named profiles the ids stay g1, g2, ...
        let default = ProfileName::default_profile();
        let order = std::iter::once(self.default_profile()).chain(
            self.profiles
                .iter()
                .filter(|(n, _)| **n != default)
                .map(|(_, p)| p),
        );
        for p in order {
            for g in &p.grants {
                match out.iter_mut().find(|f| f.root == g.root) {
                    None => out.push(FsGrant {
                        id: g.id.clone(),
                        root: g.root.clone(),
                        recursive: g.recursive,
                        confirmed: g.confirmed,
                        caps: g.caps,
                        include: g.include.clone(),
                        exclude: g.exclude.clone(),
                    }),
                    Some(f) => {
                        f.recursive |= g.recursive;
                        f.confirmed |= g.confirmed;
                        f.caps = Caps {
                            read: f.caps.read || g.caps.read,
                            write: f.caps.write || g.caps.write,
                            edit: f.caps.edit || g.caps.edit,
                            delete: f.caps.delete || g.caps.delete,
                        };
                        if f.include.is_empty() || g.include.is_empty() {
                            f.include.clear();
                        } else {
                            for i in &g.include {
                                if !f.include.contains(i) {
                                    f.include.push(i.clone());
                                }
                            }
                        }
                        f.exclude.retain(|e| g.exclude.contains(e));
                    }
                }
            }
        }
        out
    }
}

pub fn action(a: ActionDoc) -> Action {
    match a {
        ActionDoc::Allow => Action::Allow,
        ActionDoc::Ask => Action::Ask,
        ActionDoc::Deny => Action::Deny,
    }
}

/// Globs on paths: the grants' one implementation (`ipc_schema::grant_glob`).
fn globset(patterns: &[String], what: &str) -> Result<GlobSet, String> {
    ipc_schema::grant_glob::set(patterns, what)
}

/// Is `root` a filesystem root (`/`; a drive's root on Windows), the user's home directory, or
/// a directory containing it?
pub(crate) fn is_broad(root: &Path) -> bool {
    if root.parent().is_none() {
        return true;
    }
    let home = ipc_schema::protected::user_home();
    home.is_some_and(|h| h.starts_with(root))
}

/// A `hosts` or `network` entry, as every process parses one.
fn host_pattern(h: &str) -> Option<HostPattern> {
    HostPattern::parse(h).ok()
}

/// Validates every profile of `doc` (any problem refuses the whole document, naming the
/// profile). `protected` refuses grants inside protected places.
pub fn compile(doc: &PolicyDoc, protected: &Protected) -> Result<Policies, String> {
    let mut profiles = BTreeMap::new();
    let default = ProfileName::default_profile();
    let top = compile_profile(&default, &doc.default_profile(), doc.revision, protected)?;
    profiles.insert(default, Rc::new(top));
    for (name, p) in &doc.profiles {
        let parsed = ProfileName::parse(name).map_err(|e| format!("[profile.{name}]: {e}"))?;
        if parsed.is_default() {
            return Err(format!(
                "[profile.{name}]: \"{name}\" is the name of the document's top level; give this profile another name"
            ));
        }
        let compiled = compile_profile(&parsed, p, doc.revision, protected)
            .map_err(|e| format!("[profile.{name}] {e}"))?;
        profiles.insert(parsed, Rc::new(compiled));
    }
    let policies = Policies {
        revision: doc.revision,
        require_namespaces: doc.require_namespaces.unwrap_or(true),
        profiles,
    };
    let bytes: usize = (policies.fs_grants().iter())
        .map(|g| {
            let globs = g.include.iter().chain(&g.exclude);
            16 + g.root.as_os_str().len() + globs.map(|s| s.len() + 4).sum::<usize>()
        })
        .sum();
    let max = ipc_schema::fs::CONFIG_GRANTS_MAX_BYTES;
    if bytes > max {
        return Err(format!(
            "the grants' roots and globs take {bytes} bytes together; the file helper is given at most {max} (one command-line argument): use fewer or shorter globs"
        ));
    }
    Ok(policies)
}

/// Validates one profile.
pub fn compile_profile(
    name: &ProfileName,
    doc: &ProfileDoc,
    revision: u64,
    protected: &Protected,
) -> Result<Policy, String> {
    let mut defaults = BTreeMap::new();
    for (name, a) in &doc.tools {
        let t = ToolName::from_name(name)
            .ok_or_else(|| format!("[tools]: unknown tool {name:?} (known: {})", tool_list()))?;
        defaults.insert(t, action(*a));
    }
    if doc.limits.requests_per_minute == 0 || doc.limits.concurrent_requests == 0 {
        return Err(
            "[limits]: requests_per_minute and concurrent_requests must be at least 1".into(),
        );
    }
    if doc.approvals.expire_after_secs == 0 || doc.approvals.expire_after_secs > 86_400 {
        return Err("[approvals]: expire_after_secs must be between 1 and 86400".into());
    }
    let mut grants = Vec::new();
    for (i, g) in doc.grants.iter().enumerate() {
        let what = format!("grant {} ({})", i + 1, g.root);
        let root = Path::new(&g.root);
        if !root.is_absolute() {
            return Err(format!("{what}: the root must be an absolute path"));
        }
        let canon = std::fs::canonicalize(root)
            .map_err(|e| format!("{what}: the root cannot be used: {e}"))?;
        if !canon.is_dir() {
            return Err(format!("{what}: the root is not a directory"));
        }
        if is_broad(&canon) && !g.confirm_broad_root {
            return Err(format!(
                "{what}: granting {} (a home directory or /) needs confirm_broad_root = true",
                canon.display()
            ));
        }
        if g.capabilities.is_empty() {
            return Err(format!("{what}: no capabilities (give at least \"read\")"));
        }
        let writes = g.capabilities.iter().any(|c| *c != CapabilityDoc::Read);
        if let Some(why) = protected.check(ipc_schema::os_path::of(&canon), writes) {
            return Err(format!("{what}: the root lies in a protected place: {why}"));
        }
        let set: BTreeSet<CapabilityDoc> = g.capabilities.iter().copied().collect();
        let caps = Caps {
            read: set.contains(&CapabilityDoc::Read),
            write: set.contains(&CapabilityDoc::Write),
            edit: set.contains(&CapabilityDoc::Edit),
            delete: set.contains(&CapabilityDoc::Delete),
        };
        // Ids are unique across profiles: the fs-helper gets every profile's grants.
        let id = if name.is_default() {
            format!("g{}", i + 1)
        } else {
            format!("{name}.g{}", i + 1)
        };
        grants.push(Grant {
            id: GrantId(id),
            root: canon,
            recursive: g.recursive,
            confirmed: g.confirm_broad_root,
            caps,
            include: g.include.clone(),
            exclude: g.exclude.clone(),
            include_set: if g.include.is_empty() {
                None
            } else {
                Some(globset(&g.include, &what)?)
            },
            exclude_set: globset(&g.exclude, &what)?,
            secret_files_allowed: g.secret_files == super::doc::SecretFilesDoc::Allow,
        });
    }
    let servers = crate::servers::compile(&doc.mcp_servers, protected)?;
    let mut rules = Vec::new();
    for (i, r) in doc.rules.iter().enumerate() {
        let name = match &r.name {
            Some(n) if !n.trim().is_empty() => format!("rule {n:?}"),
            _ => format!("rule {}", i + 1),
        };
        if r.tools.is_empty() {
            return Err(format!(
                "{name}: `tools` is empty (name tools, or [\"*\"] for all)"
            ));
        }
        let (builtin, patterns) = crate::servers::rule_patterns(&name, &r.tools, &servers)?;
        let server_tools = if patterns.is_empty() {
            if !r.arguments.is_empty() {
                return Err(format!(
                    "{name}: `arguments` apply only to servers' tools (NAME__TOOL); name only those"
                ));
            }
            None
        } else {
            if !builtin.is_empty() {
                return Err(format!(
                    "{name}: name either gatehouse's tools or servers' tools (NAME__TOOL) in one rule, not both"
                ));
            }
            if !r.paths.is_empty() || !r.hosts.is_empty() || !r.programs.is_empty() {
                return Err(format!(
                    "{name}: `paths`, `hosts` and `programs` do not apply to servers' tools; use `arguments`"
                ));
            }
            Some(crate::servers::ServerTools {
                patterns,
                arguments: crate::servers::argument_matchers(&name, &r.arguments)?,
            })
        };
        let tools = if server_tools.is_some() {
            Some(BTreeSet::new())
        } else if builtin.iter().any(|t| t == "*") {
            if builtin.len() > 1 {
                return Err(format!("{name}: \"*\" cannot be combined with tool names"));
            }
            None
        } else {
            let mut set = BTreeSet::new();
            for t in &builtin {
                set.insert(ToolName::from_name(t).ok_or_else(|| {
                    format!("{name}: unknown tool {t:?} (known: {})", tool_list())
                })?);
            }
            Some(set)
        };
        let named = |pred: fn(ToolName) -> bool| match &tools {
            None => true,
            Some(s) => s.iter().any(|t| pred(*t)),
        };
        let all_named = |pred: fn(ToolName) -> bool| match &tools {
            None => false,
            Some(s) => s.iter().all(|t| pred(*t)),
        };
        if !r.paths.is_empty() {
            for p in &r.paths {
                if !p.starts_with('/') && !p.starts_with("**") {
                    return Err(format!(
                        "{name}: path glob {p:?} must be absolute or start with ** (it is matched against resolved absolute paths)"
                    ));
                }
            }
            if !named(|t| t.is_file_tool() || t == ToolName::RunCommand) {
                return Err(format!(
                    "{name}: `paths` apply only to file tools and run_command"
                ));
            }
        }
        let web = |t: ToolName| matches!(t, ToolName::FetchUrl | ToolName::HttpRequest);
        if !r.hosts.is_empty() && !all_named(web) {
            return Err(format!(
                "{name}: `hosts` apply only to fetch_url and http_request; name only those tools"
            ));
        }
        if !r.programs.is_empty() && !all_named(|t| t == ToolName::RunCommand) {
            return Err(format!(
                "{name}: `programs` apply only to run_command; name only it"
            ));
        }
        let mut hosts = Vec::new();
        for h in &r.hosts {
            match host_pattern(h) {
                Some(p) => hosts.push(p),
                None => {
                    return Err(format!(
                        "{name}: bad host pattern {h:?} (use example.com or *.example.com)"
                    ))
                }
            }
        }
        for p in &r.programs {
            if p.is_empty() || p.contains('\0') {
                return Err(format!("{name}: empty program name"));
            }
        }
        rules.push(Rule {
            name,
            tools,
            paths: if r.paths.is_empty() {
                None
            } else {
                Some(globset(&r.paths, "rule paths")?)
            },
            hosts,
            programs: r.programs.clone(),
            servers: server_tools,
            action: action(r.action),
        });
    }
    let network = match &doc.network {
        None => None,
        Some(list) => {
            let mut pats = Vec::new();
            for h in list {
                match host_pattern(h) {
                    Some(p) => pats.push(p),
                    None => {
                        return Err(format!(
                            "network: bad host {h:?} (use example.com or *.example.com)"
                        ))
                    }
                }
            }
            Some(pats)
        }
    };
    Ok(Policy {
        profile: name.clone(),
        mode: doc.mode.unwrap_or_default(),
        network,
        revision,
        defaults,
        requests_per_minute: doc.limits.requests_per_minute,
        concurrent_requests: doc.limits.concurrent_requests,
        expire_after: std::time::Duration::from_secs(doc.approvals.expire_after_secs),
        grants,
        rules,
        servers,
    })
}

fn tool_list() -> String {
    ToolName::ALL
        .iter()
        .map(|t| t.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}
