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

/// The list (kept in step with the code: a test checks each entry against the escape suite).
pub const WITHOUT_NAMESPACES: &[NotHeld] = &[NotHeld {
    name: "proc_other_processes_visible",
    what: "other processes of the same user are visible in /proc (their command lines and status; not their memory, environment or descriptors, which Landlock's ptrace restriction guards): without a pid namespace there is no private /proc",
}];
