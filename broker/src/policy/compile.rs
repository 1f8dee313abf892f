//! Checking a policy document and turning it into something fast to evaluate. Any problem makes
//! the whole document invalid (the caller then refuses every request, with this reason).

use super::doc::{ActionDoc, CapabilityDoc, PolicyDoc};
use super::protected::Protected;
use globset::{GlobBuilder, GlobSet, GlobSetBuilder};
use ipc_schema::fs::{Caps, GrantId};
use ipc_schema::tool::{Action, ToolName};
use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

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
}

/// A `hosts` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostPattern {
    Exact(String),
    /// `*.example.com`: any name below `example.com` (not `example.com` itself).
    Suffix(String),
}

impl HostPattern {
    pub fn matches(&self, host: &str) -> bool {
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        match self {
            HostPattern::Exact(h) => host == *h,
            HostPattern::Suffix(s) => {
                host.len() > s.len() + 1
                    && host.ends_with(s.as_str())
                    && host.as_bytes()[host.len() - s.len() - 1] == b'.'
            }
        }
    }
}

#[derive(Debug, Clone)]
pub struct Rule {
    pub name: String,
    /// `None`: every tool.
    pub tools: Option<BTreeSet<ToolName>>,
    pub paths: Option<GlobSet>,
    pub hosts: Vec<HostPattern>,
    pub programs: Vec<String>,
    pub action: Action,
}

#[derive(Debug, Clone)]
pub struct Policy {
    pub revision: u64,
    pub defaults: BTreeMap<ToolName, Action>,
    pub requests_per_minute: u32,
    pub concurrent_requests: u32,
    pub expire_after: std::time::Duration,
    pub grants: Vec<Grant>,
    pub rules: Vec<Rule>,
}

pub fn action(a: ActionDoc) -> Action {
    match a {
        ActionDoc::Allow => Action::Allow,
        ActionDoc::Ask => Action::Ask,
        ActionDoc::Deny => Action::Deny,
    }
}

/// Globs on paths: `*` stays within one component, `**` crosses (as in the fs-helper).
fn globset(patterns: &[String], what: &str) -> Result<GlobSet, String> {
    let mut b = GlobSetBuilder::new();
    for p in patterns {
        let g = GlobBuilder::new(p)
            .literal_separator(true)
            .backslash_escape(true)
            .build()
            .map_err(|e| format!("{what}: bad glob {p:?}: {e}"))?;
        b.add(g);
    }
    b.build().map_err(|e| format!("{what}: {e}"))
}

/// Is `root` `/`, the user's home directory, or a directory containing it?
fn is_broad(root: &Path) -> bool {
    if root == Path::new("/") {
        return true;
    }
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let home = home.and_then(|h| std::fs::canonicalize(&h).ok().or(Some(h)));
    home.is_some_and(|h| h.starts_with(root))
}

/// Validates `doc`. `protected` refuses grants inside protected places.
pub fn compile(doc: &PolicyDoc, protected: &Protected) -> Result<Policy, String> {
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
        if let Some(why) = protected.check(canon.as_os_str().as_bytes()) {
            return Err(format!("{what}: the root lies in a protected place: {why}"));
        }
        if g.capabilities.is_empty() {
            return Err(format!("{what}: no capabilities (give at least \"read\")"));
        }
        let set: BTreeSet<CapabilityDoc> = g.capabilities.iter().copied().collect();
        let caps = Caps {
            read: set.contains(&CapabilityDoc::Read),
            write: set.contains(&CapabilityDoc::Write),
            edit: set.contains(&CapabilityDoc::Edit),
            delete: set.contains(&CapabilityDoc::Delete),
        };
        grants.push(Grant {
            id: GrantId(format!("g{}", i + 1)),
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
        });
    }
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
        let tools = if r.tools.iter().any(|t| t == "*") {
            if r.tools.len() > 1 {
                return Err(format!("{name}: \"*\" cannot be combined with tool names"));
            }
            None
        } else {
            let mut set = BTreeSet::new();
            for t in &r.tools {
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
            let h = h.trim().to_ascii_lowercase();
            let valid = |s: &str| {
                !s.is_empty()
                    && s.split('.').all(|l| {
                        !l.is_empty() && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                    })
            };
            match h.strip_prefix("*.") {
                Some(s) if valid(s) => hosts.push(HostPattern::Suffix(s.to_string())),
                None if valid(&h) => hosts.push(HostPattern::Exact(h)),
                _ => {
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
            action: action(r.action),
        });
    }
    Ok(Policy {
        revision: doc.revision,
        defaults,
        requests_per_minute: doc.limits.requests_per_minute,
        concurrent_requests: doc.limits.concurrent_requests,
        expire_after: std::time::Duration::from_secs(doc.approvals.expire_after_secs),
        grants,
        rules,
    })
}

fn tool_list() -> String {
    ToolName::ALL
        .iter()
        .map(|t| t.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}
