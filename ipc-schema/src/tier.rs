//! Which confinement the exec sandbox runs commands under (issue 18 on Linux, 19 on Windows).
//!
//! The full tier needs unprivileged user namespaces. Where the machine refuses them (Ubuntu's
//! AppArmor restriction, a container runtime's default seccomp profile, a sysctl), the exec
//! helper runs commands in the namespace-free tier instead: Landlock for the filesystem and TCP,
//! Landlock scopes for signals and abstract sockets, a wider seccomp denylist, rlimits and a
//! process-tree kill that does not need a pid namespace. The tier in force is chosen once, when
//! the exec helper locks itself down, and is named on every card, audit row and result. A policy
//! with `require_namespaces = true` refuses the namespace-free tier.

use serde::{Deserialize, Serialize};

/// The confinement a command runs under.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[serde(rename_all = "snake_case")]
pub enum ConfinementTier {
    /// New user, mount, pid, network, IPC and UTS namespaces, a filesystem view of the grants,
    /// Landlock on top and the seccomp denylist (DESIGN.md, "The exec sandbox").
    Namespaces,
    /// No namespaces (the machine refuses them): Landlock decides what the command may read,
    /// write and connect to, a wider seccomp denylist stands in for what the network
    /// namespace gave, and the command's process tree is killed without a pid namespace.
    Landlock,
    /// Windows (issue 19): a write-restricted token carrying the command SID, a job object
    /// (kill on close, a process limit, UI restrictions), explicit ACEs on the grants that the
    /// exec helper reads back before it starts anything. Reads are the user's own (the token
    /// restricts writes only) and network is refused only by the WFP filters `gatehouse setup
    /// network-filters` installs (unverified on Windows): docs/SECURITY.md lists what it does
    /// not hold.
    #[serde(rename = "restricted-token")]
    RestrictedToken,
    /// macOS (issue 19): a Seatbelt profile per command from its grants (`sandbox-exec -p`),
    /// reads and writes confined to the system and the grants, no network, a process group
    /// killed at the end. Compiled, never run (no Mac here).
    Seatbelt,
}

impl ConfinementTier {
    /// The name shown on cards, audit rows, results and in `doctor`.
    pub fn name(self) -> &'static str {
        match self {
            ConfinementTier::Namespaces => "namespaces",
            ConfinementTier::Landlock => "landlock",
            ConfinementTier::RestrictedToken => "restricted-token",
            ConfinementTier::Seatbelt => "seatbelt",
        }
    }

    /// The tier [`ConfinementTier::name`] names (an audit row's `tier` column).
    pub fn from_name(name: &str) -> Option<ConfinementTier> {
        [
            ConfinementTier::Namespaces,
            ConfinementTier::Landlock,
            ConfinementTier::RestrictedToken,
            ConfinementTier::Seatbelt,
        ]
        .into_iter()
        .find(|t| t.name() == name)
    }
}

/// The tier as a card, a start row or a result's sandbox line words it (`None`: the exec
/// helper has not reported one yet).
pub fn shown(tier: Option<ConfinementTier>) -> &'static str {
    match tier {
        Some(ConfinementTier::Namespaces) => "namespace tier",
        Some(ConfinementTier::Landlock) => {
            "Landlock tier (no namespaces: docs/SECURITY.md lists what it does not hold)"
        }
        Some(ConfinementTier::RestrictedToken) => {
            "restricted-token tier (Windows: reads are the user's; docs/SECURITY.md lists what it does not hold)"
        }
        Some(ConfinementTier::Seatbelt) => {
            "Seatbelt tier (macOS: compiled, never run; docs/SECURITY.md lists what it does not hold)"
        }
        None => "tier not reported yet",
    }
}

impl std::fmt::Display for ConfinementTier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Why the exec helper runs in the Landlock tier: which check refused user namespaces, and
/// what the person can do (the classifier's words, `sandbox::linux::userns`). Carried in the
/// exec helper's hello, so only what postcard can encode (the doctor's typed
/// `NamespaceStatus` has an internally tagged enum, which postcard cannot).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct TierReason {
    pub message: String,
    pub remedy: String,
}

/// One thing the Landlock tier cannot hold (`gatehouse doctor --json`; the list itself is
/// `sandbox::linux::command::not_held`).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct NotHeldCase {
    pub name: String,
    pub what: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_stable_and_match_serde() {
        for (t, n) in [
            (ConfinementTier::Namespaces, "namespaces"),
            (ConfinementTier::Landlock, "landlock"),
            (ConfinementTier::RestrictedToken, "restricted-token"),
            (ConfinementTier::Seatbelt, "seatbelt"),
        ] {
            assert_eq!(t.name(), n);
            assert_eq!(t.to_string(), n);
            assert_eq!(serde_json::to_string(&t).unwrap(), format!("\"{n}\""));
        }
    }
}
