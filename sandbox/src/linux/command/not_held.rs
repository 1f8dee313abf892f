//! What the namespace-free tier ([`ConfinementTier::Landlock`]) cannot hold, by name: the one
//! list that docs/SECURITY.md and `gatehouse doctor --json` show. Every escape case of the
//! suite either holds in that tier or is named here.
//!
//! [`ConfinementTier::Landlock`]: ipc_schema::tier::ConfinementTier::Landlock

/// One thing a command can do in the namespace-free tier that the namespace tier prevents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotHeld {
    /// A stable name (the escape case's name where one exists).
    pub name: &'static str,
    /// What the command can do, and why the tier cannot stop it.
    pub what: &'static str,
}

/// The list (kept in step with the code: the landlock tier's tests in sandbox/tests/command_tier.rs
/// show what it does hold, each with its exact errno).
pub const WITHOUT_NAMESPACES: &[NotHeld] = &[
    NotHeld {
        name: "proc_other_processes_visible",
        what: "other processes of the same user are visible in /proc (their command lines and status; not their memory, environment or descriptors, which Landlock's ptrace restriction guards): without a pid namespace there is no private /proc",
    },
    NotHeld {
        name: "named_unix_sockets_reachable",
        what: "the command can connect to any Unix socket by path that its user may reach (the session D-Bus, ssh-agent, gpg-agent, X11, a container runtime's socket): Landlock does not restrict connecting to a named Unix socket (up to ABI 7), and without a mount namespace those paths exist for the command; whatever listens there must judge its peer itself (gatehouse's own sockets do: the broker kills a peer that runs under its spawner)",
    },
    NotHeld {
        name: "host_network_state_visible",
        what: "/proc/net shows the host's network: its TCP and UDP connections and listeners, and the paths of its Unix sockets; without a network namespace there is no private one",
    },
    NotHeld {
        name: "host_mounts_visible",
        what: "/proc/self/mountinfo shows the host's mounts (paths only), and the host name is the host's: without mount and UTS namespaces there is no private view",
    },
    NotHeld {
        name: "proxy_port_on_other_addresses",
        what: "TCP to the proxy bridge's port number on any address, not only 127.0.0.1 (another host's service on that port, or the host's own on another address): Landlock's network rules are per port, not per address; the port is one of the exec helper's bridge block (64 ports chosen at random when it starts), one per command",
    },
    NotHeld {
        name: "metadata_outside_grants",
        what: "the existence, type, size, owner and times of any path its user can reach outside the grants (stat, readlink, access) and file events there (inotify): Landlock refuses reading and listing, not looking up a path or watching it",
    },
    NotHeld {
        name: "attributes_changed_outside_grants",
        what: "the mode, group, times and extended attributes of the user's own files outside the grants can be changed (chmod, chgrp, touch, setxattr): Landlock does not restrict changing a file's attributes, and the denylist cannot tell a path outside from one inside",
    },
    NotHeld {
        name: "hidden_directory_names_listable",
        what: "the names of the entries in a hidden directory inside a grant (a protected place such as .ssh, an excluded directory) can be listed, not their contents: its parent keeps the right to list, which Landlock passes on to everything under it",
    },
    NotHeld {
        name: "git_hooks_and_config_cannot_be_created_or_read",
        what: "in a writable grant, git's control files (.git/config, .git/hooks, config.worktree) can be read, and written while the command runs: a grant's root keeps its full rights (Landlock cannot take them out of it); after the run gatehouse sets aside what the command changed or added there and puts the originals back (writes undone afterwards, not prevented); `.git` itself can be renamed away (what then takes its place is swept the same way; the renamed repository is left where the command put it)",
    },
    NotHeld {
        name: "tree_outlives_a_killed_init",
        what: "if the sandbox's init process is killed outright (SIGKILL by another process of the user, or after its grace when a kill is asked), processes of the command it had not ended yet keep running: without a pid namespace (or a delegated cgroup) only init ends the tree",
    },
    NotHeld {
        name: "exec_helper_not_in_an_empty_network",
        what: "the exec helper itself stays in the host's network namespace: its own Landlock rules allow TCP bind and connect only to its proxy bridge block (64 ports chosen at random when it starts) and a second seccomp filter only inet sockets of the stream type and TCP (no UDP, ICMP, raw, SCTP or MPTCP: EACCES), but within that it (and every command, which inherits both) can still reach those 64 port numbers on any address, IPv4 or IPv6: Landlock's network rules are per port, not per address, and the block must hold every command's bridge port because a command inherits the helper's rules",
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_stable_words() {
        let mut names: Vec<&str> = WITHOUT_NAMESPACES.iter().map(|n| n.name).collect();
        for n in &names {
            assert!(
                n.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'),
                "{n}"
            );
        }
        names.sort_unstable();
        let len = names.len();
        names.dedup();
        assert_eq!(names.len(), len, "a name is listed twice");
    }
}
