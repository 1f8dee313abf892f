//! The Landlock ruleset of a sandboxed command, on top of its mounts.
//!
//! Written against the raw syscalls rather than the `landlock` crate because it is built inside
//! the sandbox's init process, between `clone` and `exec`, where nothing may allocate. The parent
//! computes everything here ([`LandlockPlan`]); the child only opens paths and makes syscalls.
//!
//! What it enforces: reading and executing everywhere the mounts show (they show only what was
//! granted and the read-only system), writing only under the write grants, the private `/tmp`,
//! the sandbox home and `/dev/shm`; device ioctls only under `/dev`; no TCP connect or bind
//! when the command has no network (ABI 4); no connecting to abstract Unix sockets or signalling
//! processes outside the command's own domain (ABI 6).

use std::ffi::CString;

pub(crate) const ACCESS_FS_EXECUTE: u64 = 1 << 0;
pub(crate) const ACCESS_FS_WRITE_FILE: u64 = 1 << 1;
pub(crate) const ACCESS_FS_READ_FILE: u64 = 1 << 2;
pub(crate) const ACCESS_FS_READ_DIR: u64 = 1 << 3;
const ACCESS_FS_REMOVE_DIR: u64 = 1 << 4;
const ACCESS_FS_REMOVE_FILE: u64 = 1 << 5;
const ACCESS_FS_MAKE_CHAR: u64 = 1 << 6;
const ACCESS_FS_MAKE_DIR: u64 = 1 << 7;
const ACCESS_FS_MAKE_REG: u64 = 1 << 8;
const ACCESS_FS_MAKE_SOCK: u64 = 1 << 9;
const ACCESS_FS_MAKE_FIFO: u64 = 1 << 10;
const ACCESS_FS_MAKE_BLOCK: u64 = 1 << 11;
const ACCESS_FS_MAKE_SYM: u64 = 1 << 12;
const ACCESS_FS_REFER: u64 = 1 << 13; // ABI 2
pub(crate) const ACCESS_FS_TRUNCATE: u64 = 1 << 14; // ABI 3
pub(crate) const ACCESS_FS_IOCTL_DEV: u64 = 1 << 15; // ABI 5
const ACCESS_NET_BIND_TCP: u64 = 1 << 0; // ABI 4
const ACCESS_NET_CONNECT_TCP: u64 = 1 << 1; // ABI 4
const SCOPE_ABSTRACT_UNIX_SOCKET: u64 = 1 << 0; // ABI 6
const SCOPE_SIGNAL: u64 = 1 << 1; // ABI 6

/// Rights that apply to a file (not only to directories); a rule on a file may hold only these.
pub(crate) const FILE_RIGHTS: u64 = ACCESS_FS_EXECUTE
    | ACCESS_FS_WRITE_FILE
    | ACCESS_FS_READ_FILE
    | ACCESS_FS_TRUNCATE
    | ACCESS_FS_IOCTL_DEV;

/// The ABI that gives everything the command ruleset asks for.
pub const FULL_ABI: u32 = 6;

/// `struct landlock_ruleset_attr` (ABI 6 layout; older kernels accept it while the fields they
/// do not know are zero).
#[repr(C)]
pub(crate) struct RulesetAttr {
    pub handled_access_fs: u64,
    pub handled_access_net: u64,
    pub scoped: u64,
}

/// `struct landlock_net_port_attr` (ABI 4).
#[repr(C, packed)]
pub(crate) struct NetPortAttr {
    pub allowed_access: u64,
    pub port: u64,
}

/// What the ruleset does with TCP (ABI 4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tcp {
    /// Not handled: the command's own network namespace bounds it (the namespace tier's proxy).
    Open,
    /// Connect and bind handled, no rule: every TCP connect and bind is refused (EACCES).
    Closed,
    /// Connect and bind handled, one rule: connecting to this port only (the landlock tier's
    /// proxy bridge on the host's loopback); no bind.
    ConnectOnly(u16),
}

/// `struct landlock_path_beneath_attr` (packed in the kernel's UAPI).
#[repr(C, packed)]
pub(crate) struct PathBeneathAttr {
    pub allowed_access: u64,
    pub parent_fd: i32,
}

/// The Landlock ABI the running kernel offers (0: none).
pub fn kernel_abi() -> u32 {
    // SAFETY: a null attribute, size 0 and LANDLOCK_CREATE_RULESET_VERSION make the syscall
    // return the ABI number without reading memory or creating a descriptor.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            1u32,
        )
    };
    u32::try_from(v).unwrap_or(0)
}

/// Every filesystem right the kernel of `abi` knows.
fn fs_rights(abi: u32) -> u64 {
    let mut r = READ | WRITE_ABI1 | ACCESS_FS_MAKE_CHAR | ACCESS_FS_MAKE_BLOCK;
    if abi >= 2 {
        r |= ACCESS_FS_REFER;
    }
    if abi >= 3 {
        r |= ACCESS_FS_TRUNCATE;
    }
    if abi >= 5 {
        r |= ACCESS_FS_IOCTL_DEV;
    }
    r
}

/// Reading and executing.
pub(crate) const READ: u64 = ACCESS_FS_EXECUTE | ACCESS_FS_READ_FILE | ACCESS_FS_READ_DIR;

/// Everything a command does in a writable directory, except creating device nodes.
pub(crate) const WRITE: u64 = ACCESS_FS_WRITE_FILE
    | ACCESS_FS_REMOVE_DIR
    | ACCESS_FS_REMOVE_FILE
    | ACCESS_FS_MAKE_DIR
    | ACCESS_FS_MAKE_REG
    | ACCESS_FS_MAKE_SOCK
    | ACCESS_FS_MAKE_FIFO
    | ACCESS_FS_MAKE_SYM
    | ACCESS_FS_REFER
    | ACCESS_FS_TRUNCATE;

/// The write rights of ABI 1 (device nodes, MAKE_CHAR and MAKE_BLOCK, are never granted).
const WRITE_ABI1: u64 = WRITE & !(ACCESS_FS_REFER | ACCESS_FS_TRUNCATE);

/// The ruleset, ready for the child: paths as C strings (in the sandbox's view), rights already
/// cut to what the kernel knows.
pub(crate) struct LandlockPlan {
    pub attr: RulesetAttr,
    pub rules: Vec<(CString, u64)>,
    /// TCP port rules (ABI 4).
    pub ports: Vec<NetPortAttr>,
}

/// What the planner decides for one command.
pub(crate) struct Planned {
    /// `None`: no Landlock at all (kernel without it; only with `allow_degraded`).
    pub plan: Option<LandlockPlan>,
    pub abi: u32,
    /// What is missing against [`FULL_ABI`], one line each.
    pub missing: Vec<String>,
}

/// One rule: a path inside the sandbox, whether it is a directory, and what it grants.
pub(crate) struct Rule {
    pub path: CString,
    pub is_dir: bool,
    pub access: u64,
}

/// Builds the ruleset for a kernel offering `abi`. `namespaces`: the command also has its own
/// namespaces (only for the words of what is missing).
pub(crate) fn plan(abi: u32, tcp: Tcp, namespaces: bool, rules: Vec<Rule>) -> Planned {
    let deny_tcp = tcp != Tcp::Open;
    let mut missing = Vec::new();
    if abi == 0 {
        missing.push("Landlock is not available: writes are bounded by read-only mounts only, and abstract sockets and signals by namespaces only".to_string());
        return Planned {
            plan: None,
            abi,
            missing,
        };
    }
    if abi < 3 {
        missing.push(format!(
            "Landlock ABI {abi}: truncation is not controlled (ABI 3)"
        ));
    }
    if abi < 4 && deny_tcp {
        missing.push(format!(
            "Landlock ABI {abi}: TCP connect is not refused by Landlock (ABI 4); the seccomp filter still refuses inet sockets"
        ));
    }
    if abi < 6 {
        missing.push(if namespaces {
            format!("Landlock ABI {abi}: abstract Unix sockets and signals are not scoped (ABI 6); the network and pid namespaces still separate them")
        } else {
            format!("Landlock ABI {abi}: abstract Unix sockets and signals are not scoped (ABI 6): the command can signal other processes of its user and connect to their abstract sockets")
        });
    }
    let handled = fs_rights(abi);
    let attr = RulesetAttr {
        handled_access_fs: handled,
        handled_access_net: if deny_tcp && abi >= 4 {
            ACCESS_NET_BIND_TCP | ACCESS_NET_CONNECT_TCP
        } else {
            0
        },
        scoped: if abi >= 6 {
            SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL
        } else {
            0
        },
    };
    let rules = rules
        .into_iter()
        .map(|r| {
            let mut a = r.access & handled;
            if !r.is_dir {
                a &= FILE_RIGHTS;
            }
            (r.path, a)
        })
        .filter(|(_, a)| *a != 0)
        .collect();
    let ports = match tcp {
        Tcp::ConnectOnly(port) if abi >= 4 => vec![NetPortAttr {
            allowed_access: ACCESS_NET_CONNECT_TCP,
            port: u64::from(port),
        }],
        _ => Vec::new(),
    };
    Planned {
        plan: Some(LandlockPlan { attr, rules, ports }),
        abi,
        missing,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(p: &str, is_dir: bool, access: u64) -> Rule {
        Rule {
            path: CString::new(p).unwrap(),
            is_dir,
            access,
        }
    }

    #[test]
    fn abi_1_rights_are_the_first_thirteen_bits() {
        assert_eq!(fs_rights(1), (1 << 13) - 1);
        assert_eq!(fs_rights(5), (1 << 16) - 1);
        assert_eq!(WRITE & (ACCESS_FS_MAKE_CHAR | ACCESS_FS_MAKE_BLOCK), 0);
    }

    #[test]
    fn rights_are_cut_to_the_kernel_abi_and_to_files() {
        let p = plan(
            3,
            Tcp::Closed,
            true,
            vec![rule("/", true, READ), rule("/w/f", false, READ | WRITE)],
        );
        let lp = p.plan.unwrap();
        assert_eq!(lp.attr.handled_access_net, 0, "ABI 3 has no TCP rights");
        assert_eq!(lp.attr.scoped, 0);
        assert_eq!(lp.attr.handled_access_fs & ACCESS_FS_IOCTL_DEV, 0);
        assert_eq!(lp.rules[1].1 & !FILE_RIGHTS, 0);
        assert!(p.missing.iter().any(|m| m.contains("ABI 4")));
        assert!(p.missing.iter().any(|m| m.contains("ABI 6")));
    }

    #[test]
    fn full_abi_handles_tcp_and_scopes_only_without_network() {
        let none = plan(6, Tcp::Closed, true, vec![rule("/", true, READ)]);
        let a = none.plan.unwrap().attr;
        assert_eq!(
            a.handled_access_net,
            ACCESS_NET_BIND_TCP | ACCESS_NET_CONNECT_TCP
        );
        assert_eq!(a.scoped, SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL);
        assert!(none.missing.is_empty());
        let proxy = plan(6, Tcp::Open, true, vec![]);
        assert_eq!(proxy.plan.unwrap().attr.handled_access_net, 0);
        assert!(plan(0, Tcp::Closed, true, vec![]).plan.is_none());
        let flat = plan(6, Tcp::ConnectOnly(4242), false, vec![]).plan.unwrap();
        assert_eq!(
            flat.attr.handled_access_net,
            ACCESS_NET_BIND_TCP | ACCESS_NET_CONNECT_TCP
        );
        assert_eq!(flat.ports.len(), 1);
        let (access, port) = (flat.ports[0].allowed_access, flat.ports[0].port);
        assert_eq!((access, port), (ACCESS_NET_CONNECT_TCP, 4242));
    }
}
