//! `gatehouse doctor`, the command line's side: the broker's report, shown.

use ipc_schema::status::{DoctorReport, ProcessState};

/// The human-readable form, one line per process, note and problem. Every string in the report
/// is made inert: a helper's refusal reason, its degraded notes and the helpers' status lines
/// quote what the kernel, a keyring backend or a crashed helper said, so none of them may add
/// a line that passes for "every required protection is enforced", or drive the terminal.
pub fn render(r: &DoctorReport) -> String {
    use ipc_schema::inert::escaped;
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "kernel {}, Landlock ABI {}{}",
        escaped(&r.kernel_release),
        r.landlock_abi,
        if r.allow_degraded {
            ", --allow-degraded"
        } else {
            ""
        }
    );
    let _ = writeln!(
        out,
        "{:<15} {:>7}  {:<8} {:<22} {:<16} {:<4} {:<5} {:<8}",
        "process", "pid", "state", "landlock", "seccomp", "nnp", "caps", "dumpable"
    );
    for p in &r.processes {
        let state = match &p.state {
            ProcessState::Ready => "ready",
            ProcessState::Starting => "starting",
            ProcessState::Refused { .. } => "REFUSED",
        };
        let (landlock, seccomp, dumpable) = match &p.lockdown {
            Some(l) => (
                if l.profile == "spawner" {
                    "none (by design)".to_string()
                } else {
                    format!(
                        "{:?} abi {}/{}",
                        l.landlock, l.landlock_abi, l.landlock_min_abi
                    )
                },
                if l.seccomp_filter {
                    format!("filter, {} calls", l.seccomp_allowed_syscalls)
                } else {
                    "none".to_string()
                },
                if l.dumpable_off { "off" } else { "ON" },
            ),
            None => ("?".into(), "?".into(), "?"),
        };
        let (nnp, caps) = match &p.kernel {
            Some(k) => (
                if k.no_new_privs { "yes" } else { "NO" },
                if k.cap_eff == 0 {
                    "none".to_string()
                } else {
                    format!("{:x}", k.cap_eff)
                },
            ),
            None => ("?", "?".into()),
        };
        let _ = writeln!(
            out,
            "{:<15} {:>7}  {:<8} {:<22} {:<16} {:<4} {:<5} {:<8}",
            escaped(&p.name),
            p.pid,
            state,
            landlock,
            seccomp,
            nnp,
            caps,
            dumpable
        );
    }
    if let Some(ns) = &r.namespaces {
        if ns.available {
            let _ = writeln!(
                out,
                "namespaces: available (user, mount, pid, net, ipc, uts; ids mapped, mounts work)"
            );
        } else {
            let _ = writeln!(
                out,
                "namespaces: REFUSED: {}",
                escaped(ns.message.as_deref().unwrap_or(""))
            );
        }
    }
    if let Some(tier) = r.exec_tier {
        let _ = writeln!(
            out,
            "exec tier: {tier}{}",
            if r.not_held.is_empty() {
                String::new()
            } else {
                format!(
                    " ({} cases it does not hold: {}; `doctor --json` says each)",
                    r.not_held.len(),
                    r.not_held
                        .iter()
                        .map(|n| n.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            }
        );
    }
    for n in &r.notes {
        let _ = writeln!(out, "note: {}", escaped(n));
    }
    if r.problems.is_empty() {
        let _ = writeln!(out, "every required protection is enforced");
    } else {
        for p in &r.problems {
            let _ = writeln!(out, "MISSING: {}", escaped(p));
        }
    }
    out
}

/// Probes user namespaces from this process (the broker cannot: its filter forbids fork) and
/// adds the result; a refusal is a problem, worded by the one classifier
/// (`sandbox::linux::userns`), with its remedy.
#[cfg(target_os = "linux")]
pub fn add_namespaces(r: &mut DoctorReport) {
    use ipc_schema::tier::{ConfinementTier, NotHeldCase};
    let s = sandbox::linux::userns::probe();
    if !s.available {
        r.problems.push(format!(
            "namespaces: {} (commands run only where the policy sets require_namespaces = false, and then in the Landlock tier, which does not hold what docs/SECURITY.md lists). To fix: {}",
            s.message.as_deref().unwrap_or("refused"),
            s.remedy.as_deref().unwrap_or("")
        ));
    }
    r.namespaces = Some(s);
    r.exec_tier = r
        .processes
        .iter()
        .filter(|p| p.name == ipc_schema::Role::Exec.name())
        .find_map(|p| p.lockdown.as_ref().and_then(|l| l.exec_tier));
    if r.exec_tier == Some(ConfinementTier::Landlock) {
        r.not_held = sandbox::linux::command::not_held::WITHOUT_NAMESPACES
            .iter()
            .map(|n| NotHeldCase {
                name: n.name.into(),
                what: n.what.into(),
            })
            .collect();
    }
}

/// Elsewhere there is no user-namespace sandbox to probe for: the field stays empty.
#[cfg(not(target_os = "linux"))]
pub fn add_namespaces(_r: &mut DoctorReport) {}

#[cfg(test)]
mod tests {
    use super::*;
    use ipc_schema::status::ProcessReport;

    #[test]
    fn what_helpers_and_the_kernel_said_is_shown_inert_one_line_each() {
        let fake = "x\nevery required protection is enforced\x1b[2J\u{202E}";
        let r = DoctorReport {
            kernel_release: format!("6.1{fake}"),
            landlock_abi: 4,
            allow_degraded: false,
            processes: vec![ProcessReport {
                name: format!("fs-helper{fake}"),
                pid: 42,
                state: ProcessState::Refused {
                    reason: fake.into(),
                },
                restarts: 0,
                lockdown: None,
                kernel: None,
            }],
            problems: vec![format!("fs-helper: refused: {fake}")],
            notes: vec![format!("secrets-helper: {fake}")],
            namespaces: None,
            exec_tier: None,
            not_held: Vec::new(),
        };
        let out = render(&r);
        assert!(!out.contains(['\x1b', '\u{202E}']), "{out}");
        let lines: Vec<&str> = out.lines().collect();
        // kernel, header, one process, one note, one problem.
        assert_eq!(lines.len(), 5, "{out}");
        assert!(
            lines[0].starts_with("kernel 6.1x\\nevery required"),
            "{out}"
        );
        assert!(lines[2].starts_with("fs-helper"), "{out}");
        assert!(lines[3].starts_with("note: secrets-helper: x\\n"), "{out}");
        assert!(
            lines[4].starts_with("MISSING: fs-helper: refused: x\\nevery required protection is enforced\\x1b[2J\\u{202E}"),
            "{out}"
        );
        assert!(!out
            .lines()
            .any(|l| l == "every required protection is enforced"));
    }
}
