//! Deciding one call: protected paths and grants first (they only ever refuse), then the rules
//! that apply (the most restrictive wins), then the tool's default, then Ask.

use super::compile::{Grant, Policy};
use super::protected::Protected;
use ipc_schema::fs::Access;
use ipc_schema::host::Host;
use ipc_schema::os_path;
use ipc_schema::tool::{Action, ProfileName, ToolId, ToolName, Verdict};
use ipc_schema::ui::{Remembered, RememberedAction};
use std::path::Path;

/// Policy's verdict `v` on `tool` for target `key`, with the decisions that stand beside the
/// document: the `remembered` "always" choices and the session's "allow for this session"
/// (`allowed_for_session`). A remembered deny applies always, in every profile (the most
/// restrictive answer wins); a remembered allow only in the `profile` it was given in; an allow
/// of either kind only turns an Ask into an Allow (it never overrides a Deny).
pub fn with_standing_decisions(
    v: Verdict,
    remembered: &[Remembered],
    profile: &ProfileName,
    tool: &ToolId,
    key: &str,
    allowed_for_session: bool,
) -> Verdict {
    if v.action == Action::Deny {
        return v;
    }
    let find = |action: RememberedAction| {
        remembered.iter().find(|r| {
            r.tool == *tool
                && r.target == key
                && r.action == action
                && (action == RememberedAction::Deny || &r.profile == profile)
        })
    };
    if let Some(r) = find(RememberedAction::Deny) {
        return Verdict {
            action: Action::Deny,
            rule: format!(
                "remembered decision {} (always deny, from proposal {})",
                r.id, r.origin
            ),
        };
    }
    if v.action == Action::Ask {
        if let Some(r) = find(RememberedAction::Allow) {
            return Verdict {
                action: Action::Allow,
                rule: format!(
                    "remembered decision {} (always allow, from proposal {})",
                    r.id, r.origin
                ),
            };
        }
        if allowed_for_session {
            return Verdict {
                action: Action::Allow,
                rule: format!("allowed for this session ({})", v.rule),
            };
        }
    }
    v
}

/// One path a call touches, resolved, with what it does there.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PathTarget {
    #[serde(with = "path_bytes")]
    pub abs: Vec<u8>,
    pub access: Access,
    pub is_dir: bool,
}

/// A path's bytes as stored: a JSON string when they are UTF-8 (the usual case, and what a
/// person reading the database expects), else the array of bytes; either reads back exactly.
mod path_bytes {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    #[derive(Serialize, Deserialize)]
    #[serde(untagged)]
    enum Stored<'a> {
        Text(std::borrow::Cow<'a, str>),
        Bytes(Vec<u8>),
    }

    pub fn serialize<S: Serializer>(abs: &[u8], s: S) -> Result<S::Ok, S::Error> {
        match std::str::from_utf8(abs) {
            Ok(t) => Stored::Text(t.into()).serialize(s),
            Err(_) => Stored::Bytes(abs.to_vec()).serialize(s),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        Ok(match Stored::deserialize(d)? {
            Stored::Text(t) => t.into_owned().into_bytes(),
            Stored::Bytes(b) => b,
        })
    }
}

/// What a call acts on, in canonical form. Serialisable so the audit database can keep it for
/// [`crate::replay`]: paths, hosts and program + working directory only, never a file's content
/// or a command's arguments; a server tool's arguments are never serialised (see below).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Target {
    Paths(Vec<PathTarget>),
    Url {
        host: Host,
    },
    Command {
        program: String,
        cwd: Vec<u8>,
    },
    /// A third-party server's tool; the policy reads its arguments only through a rule's
    /// argument matchers.
    Server {
        server: ipc_schema::servers::ServerName,
        tool: ipc_schema::servers::ServerToolName,
        /// Not stored: a third-party tool's arguments may hold anything (a message, a token),
        /// and the audit log keeps only their names. A stored target reads back as `null`;
        /// [`crate::replay`] does not judge a call whose verdict would depend on them.
        #[serde(skip)]
        arguments: serde_json::Value,
    },
}

pub fn shown(abs: &[u8]) -> String {
    let mut out = String::new();
    for chunk in abs.utf8_chunks() {
        out.push_str(chunk.valid());
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}

impl Target {
    /// The target as one line: what proposals show and remembered decisions match.
    pub fn key(&self) -> String {
        match self {
            Target::Paths(ps) => ps
                .iter()
                .map(|p| shown(&p.abs))
                .collect::<Vec<_>>()
                .join(" -> "),
            Target::Url { host } => host.to_string(),
            Target::Command { program, cwd } => format!("{program} in {}", shown(cwd)),
            Target::Server { server, tool, .. } => ipc_schema::servers::offered_name(server, tool),
        }
    }
}

fn deny(rule: impl Into<String>) -> Verdict {
    Verdict {
        action: Action::Deny,
        rule: rule.into(),
    }
}

/// The grant whose root contains `abs`, longest root first.
pub fn grant_for<'a>(policy: &'a Policy, abs: &[u8]) -> Option<(&'a Grant, &'a Path, Vec<u8>)> {
    let p = os_path::to_path(abs);
    let found = policy
        .grants
        .iter()
        .filter_map(|g| p.strip_prefix(&g.root).ok().map(|rel| (g, rel)))
        .max_by_key(|(g, _)| g.root.as_os_str().len())
        .map(|(g, rel)| (g, g.root.as_path(), os_path::of(rel).to_vec()));
    found
}

fn check_grant(policy: &Policy, t: &PathTarget) -> Result<(), Verdict> {
    let shown_path = shown(&t.abs);
    let Some((g, root, rel)) = grant_for(policy, &t.abs) else {
        return Err(deny(format!(
            "{shown_path} is outside the grants of profile {}",
            policy.profile
        )));
    };
    let gname = format!("grant {} ({})", g.id, root.display());
    let (cap, has) = match t.access {
        Access::Read => ("read", g.caps.read),
        Access::Write => ("write", g.caps.write),
        Access::Edit => ("edit", g.caps.edit),
        Access::Delete => ("delete", g.caps.delete),
    };
    if !has {
        return Err(deny(format!("{gname} does not give {cap} ({shown_path})")));
    }
    let relp = os_path::to_path(&rel);
    let depth = relp.components().count();
    if !g.recursive && depth > 1 {
        return Err(deny(format!("{gname} is not recursive ({shown_path})")));
    }
    if ipc_schema::grant_glob::excluded(&g.exclude_set, &relp) {
        return Err(deny(format!("{gname} excludes {shown_path}")));
    }
    if let Some(inc) = &g.include_set {
        if !t.is_dir && depth > 0 && !inc.is_match(&*relp) {
            return Err(deny(format!("{gname} does not include {shown_path}")));
        }
    }
    Ok(())
}

fn rule_applies(r: &super::compile::Rule, tool: ToolName, target: &Target) -> bool {
    if let Some(tools) = &r.tools {
        if !tools.contains(&tool) {
            return false;
        }
    }
    if let Some(paths) = &r.paths {
        let hit = match target {
            Target::Paths(ps) => ps
                .iter()
                .any(|p| paths.is_match(&*os_path::to_path(&p.abs))),
            Target::Command { cwd, .. } => paths.is_match(&*os_path::to_path(cwd)),
            Target::Url { .. } | Target::Server { .. } => false,
        };
        if !hit {
            return false;
        }
    }
    if !r.hosts.is_empty() {
        let Target::Url { host } = target else {
            return false;
        };
        if !r.hosts.iter().any(|h| h.matches(host)) {
            return false;
        }
    }
    if !r.programs.is_empty() {
        let Target::Command { program, .. } = target else {
            return false;
        };
        let base = program.rsplit('/').next().unwrap_or(program);
        if !r.programs.iter().any(|p| {
            if p.contains('/') {
                p == program
            } else {
                p == base
            }
        }) {
            return false;
        }
    }
    true
}

/// Why `host` is refused by the profile's network allowlist (`None`: it may be reached, or the
/// profile has no list). Checked before any rule, so an off-list host is never asked about.
pub fn off_network(policy: &Policy, host: &Host) -> Option<String> {
    let list = policy.network.as_ref()?;
    if list.iter().any(|p| p.matches(host)) {
        return None;
    }
    Some(format!(
        "{host} is not in the network allowlist of profile {} (policy revision {})",
        policy.profile, policy.revision
    ))
}

/// The host of `url` as the net-helper's WHATWG parse gives it ([`Host::of_url_str`], the one
/// URL-host parser). `None`: not a URL the net-helper would take anyway (it refuses it with its
/// own reason).
pub fn url_host(url: &str) -> Option<Host> {
    Host::of_url_str(url).ok()
}

/// The network allowlist applied to a URL before anything resolves its name, so that an
/// off-list name is not even looked up (a DNS query can carry data out).
pub fn url_off_network(policy: &Policy, url: &str) -> Option<String> {
    policy.network.as_ref()?;
    off_network(policy, &url_host(url)?)
}

/// The network allowlist applied to where a fetch went (each redirect and the final URL): a
/// page reached through an off-list host is withheld.
pub fn hops_off_network<'a>(
    policy: &Policy,
    hops: impl IntoIterator<Item = &'a str>,
) -> Option<String> {
    policy.network.as_ref()?;
    for hop in hops {
        let Some(host) = url_host(hop) else {
            return Some(format!(
                "the fetch was redirected to {hop:?}, whose host cannot be checked against the network allowlist of profile {}",
                policy.profile
            ));
        };
        if let Some(why) = off_network(policy, &host) {
            return Some(format!(
                "the fetch was redirected: {why}; the page is withheld"
            ));
        }
    }
    None
}

/// Why a command's sandbox could not keep to `g`, if it could not: it shows a directory tree
/// whole (exclude globs and secret files masked), so a grant that admits only some of its
/// files, only its top level, or nothing to read is refused for commands rather than widened.
/// A grant without every one of write, edit and delete is given read-only.
pub fn command_cannot_hold(g: &super::compile::Grant) -> Option<&'static str> {
    if !g.caps.read {
        Some("does not give read")
    } else if !g.recursive {
        Some("is not recursive")
    } else if g.include_set.is_some() {
        Some("admits only the files its include globs name")
    } else {
        None
    }
}

/// Whether a command in `g` may write there: only when the grant gives every kind of change,
/// since a writable tree lets a command write, edit and delete alike.
pub fn command_writes(g: &super::compile::Grant) -> bool {
    g.caps.write && g.caps.edit && g.caps.delete
}

/// The policy's verdict on a call of `tool` (built-in or a server's) acting on `target`.
pub fn evaluate_call(
    policy: &Policy,
    protected: &Protected,
    tool: &ToolId,
    target: &Target,
) -> Verdict {
    match (tool, target) {
        (
            ToolId::Server(..),
            Target::Server {
                server,
                tool,
                arguments,
            },
        ) => crate::servers::verdict(policy, server, tool, arguments),
        (ToolId::Builtin(t), Target::Paths(_) | Target::Url { .. } | Target::Command { .. }) => {
            evaluate(policy, protected, *t, target)
        }
        // Fail closed: a target that is not the tool's own is a bug of the caller.
        _ => deny(format!("{tool} cannot act on {}", target.key())),
    }
}

/// The policy's verdict on `tool` acting on `target`.
pub fn evaluate(
    policy: &Policy,
    protected: &Protected,
    tool: ToolName,
    target: &Target,
) -> Verdict {
    let v = evaluate_rules(policy, protected, tool, target);
    // A read of a file that may hold secrets is a disclosure to the agent's model provider:
    // asked, unless the grant allows secret files or a rule naming the path allows it.
    if v.action != Action::Allow {
        return v;
    }
    let Target::Paths(ps) = target else { return v };
    for p in ps.iter().filter(|p| p.access == Access::Read && !p.is_dir) {
        let Some(why) = ipc_schema::protected::sensitive(&p.abs) else {
            continue;
        };
        if secret_files_opted_in(policy, tool, target, &p.abs) {
            continue;
        }
        return Verdict {
            action: Action::Ask,
            rule: format!(
                "{} may hold secrets ({why}); what the agent reads goes to its model provider (secret_files = \"allow\" on the grant, or an allow rule naming the path, reads it without asking)",
                shown(&p.abs)
            ),
        };
    }
    v
}

/// Whether the policy opts in to reading secret files at `abs` without asking: its grant says
/// `secret_files = "allow"`, or an allow rule naming paths applies to this call.
pub fn secret_files_opted_in(policy: &Policy, tool: ToolName, target: &Target, abs: &[u8]) -> bool {
    grant_for(policy, abs).is_some_and(|(g, _, _)| g.secret_files_allowed)
        || policy.rules.iter().any(|r| {
            r.action == Action::Allow && r.paths.is_some() && rule_applies(r, tool, target)
        })
}

fn evaluate_rules(
    policy: &Policy,
    protected: &Protected,
    tool: ToolName,
    target: &Target,
) -> Verdict {
    match target {
        Target::Paths(ps) => {
            for p in ps {
                if let Some(why) = protected.check(&p.abs, p.access != Access::Read) {
                    return deny(format!("protected path: {why}"));
                }
                if let Err(v) = check_grant(policy, p) {
                    return v;
                }
            }
        }
        Target::Command { cwd, .. } => {
            if let Some(why) = protected.check(cwd, false) {
                return deny(format!("protected path: {why}"));
            }
            let Some((g, root, _)) = grant_for(policy, cwd) else {
                return deny(format!(
                    "the working directory {} is outside the grants of profile {}",
                    shown(cwd),
                    policy.profile
                ));
            };
            if let Some(why) = command_cannot_hold(g) {
                return deny(format!(
                    "grant {} ({}) {why}, which a command's sandbox cannot hold to; give commands a grant without it",
                    g.id,
                    root.display()
                ));
            }
        }
        Target::Url { host } => {
            if let Some(why) = off_network(policy, host) {
                return deny(why);
            }
        }
        Target::Server {
            server,
            tool,
            arguments,
        } => return crate::servers::verdict(policy, server, tool, arguments),
    }
    let applicable = policy
        .rules
        .iter()
        .filter(|r| rule_applies(r, tool, target))
        .max_by_key(|r| r.action);
    // `max_by_key` keeps the last of equals; report the first rule with the winning action.
    if let Some(winner) = applicable {
        let first = policy
            .rules
            .iter()
            .find(|r| r.action == winner.action && rule_applies(r, tool, target))
            .unwrap_or(winner);
        return Verdict {
            action: first.action,
            rule: format!("{} (policy revision {})", first.name, policy.revision),
        };
    }
    match policy.defaults.get(&tool) {
        Some(a) => Verdict {
            action: *a,
            rule: format!("tools.{tool} default (policy revision {})", policy.revision),
        },
        None => Verdict {
            action: Action::Ask,
            rule: format!(
                "no rule for {tool}: ask (policy revision {})",
                policy.revision
            ),
        },
    }
}

/// What `policy` does with `tool` as a whole, for the gateway's tool list: `Deny` only when
/// every call is refused whatever its target (an unrestricted Deny rule for the tool, or a
/// Deny default with no rule that could decide otherwise); otherwise the tool's default.
pub fn standing(policy: &Policy, tool: ToolName) -> ipc_schema::tool::ToolStanding {
    let covers = |r: &crate::compile::Rule| r.tools.as_ref().is_none_or(|t| t.contains(&tool));
    let unrestricted =
        |r: &crate::compile::Rule| r.paths.is_none() && r.hosts.is_empty() && r.programs.is_empty();
    let revision = policy.revision;
    if let Some(r) = policy
        .rules
        .iter()
        .find(|r| r.action == Action::Deny && covers(r) && unrestricted(r))
    {
        return ipc_schema::tool::ToolStanding {
            tool,
            action: Action::Deny,
            rule: format!("{} (policy revision {revision})", r.name),
        };
    }
    let default = policy.defaults.get(&tool).copied().unwrap_or(Action::Ask);
    let weaker_rule = policy
        .rules
        .iter()
        .any(|r| covers(r) && r.action < Action::Deny);
    let action = if default == Action::Deny && weaker_rule {
        // Some targets may be allowed or asked by a rule: the tool stays listed.
        Action::Ask
    } else {
        default
    };
    ipc_schema::tool::ToolStanding {
        tool,
        action,
        rule: format!("tools.{tool} default (policy revision {revision})"),
    }
}
