//! `gatehouse doctor`: what each process really enforces on this kernel.

use crate::Ctx;
use ipc_schema::status::{DoctorReport, LandlockStatus, ProcessReport, ProcessState};

/// Builds the report from the broker's own state and the helpers' verified hellos.
pub fn report(ctx: &Ctx) -> DoctorReport {
    let mut processes = vec![ProcessReport {
        name: "broker".into(),
        pid: std::process::id(),
        state: ProcessState::Ready,
        restarts: 0,
        lockdown: Some(ctx.broker_lockdown.clone()),
        kernel: sandbox::process::read_proc_status(std::process::id()).ok(),
    }];
    processes.extend(ctx.helpers.reports());
    let mut problems = Vec::new();
    let mut notes = vec![
        "broker: no_new_privs, no core dumps, not dumpable; no seccomp filter or Landlock of its own, \
         because helpers inherit both and need rights the broker cannot know in advance (docs/SECURITY.md)"
            .to_string(),
        "ui and gateway fronts lock themselves down when they start (ui profile, gateway profile) and report it on their own: the console in its health pane, `gatehouse mcp` on stderr".to_string(),
    ];
    let b = &ctx.broker_lockdown;
    if !(b.no_new_privs && b.dumpable_off && b.core_dumps_off) {
        problems.push("broker: hardening incomplete".into());
    }
    for p in processes.iter().skip(1) {
        match &p.state {
            ProcessState::Ready => {}
            ProcessState::Starting => problems.push(format!("{}: still starting", p.name)),
            ProcessState::Refused { reason } => {
                problems.push(format!("{}: refused: {reason}", p.name))
            }
        }
        if let Some(l) = &p.lockdown {
            if l.landlock != LandlockStatus::FullyEnforced {
                let line = format!(
                    "{}: Landlock {:?} (kernel ABI {}, profile needs {})",
                    p.name, l.landlock, l.landlock_abi, l.landlock_min_abi
                );
                if ctx.opts.allow_degraded {
                    notes.push(format!("{line}, allowed by --allow-degraded"));
                } else {
                    problems.push(line);
                }
            }
            for d in &l.degraded {
                notes.push(format!("{}: degraded: {d}", p.name));
            }
        }
        if let Some(k) = &p.kernel {
            if k.seccomp != 2 {
                problems.push(format!(
                    "{}: Seccomp {} (filter required)",
                    p.name, k.seccomp
                ));
            }
            if !k.no_new_privs {
                problems.push(format!("{}: NoNewPrivs 0", p.name));
            }
            if k.cap_eff != 0 {
                problems.push(format!("{}: capabilities held ({:x})", p.name, k.cap_eff));
            }
        }
    }
    DoctorReport {
        kernel_release: nix::sys::utsname::uname()
            .map(|u| u.release().to_string_lossy().into_owned())
            .unwrap_or_default(),
        landlock_abi: sandbox::landlock_abi(),
        allow_degraded: ctx.opts.allow_degraded,
        processes,
        problems,
        notes,
    }
}

/// Asks the fs-helper how it resolves paths and notes it: the openat2 fallback is weaker
/// (a walk in user space, each step still refusing links) and must be visible.
pub async fn add_fs_status(ctx: &Ctx, report: &mut DoctorReport) {
    use ipc_schema::fs::{FsReply, FsRequest, Resolver};
    use ipc_schema::{Body, Role};
    let Some(slot) = ctx.helpers.slot(Role::Fs) else {
        return;
    };
    if !slot.is_ready() {
        return;
    }
    match slot.call(Body::Fs(FsRequest::Status)).await {
        Ok(Body::FsReply(FsReply::Status(st))) => match st.resolver {
            Resolver::Openat2 => report.notes.push(
                "fs-helper: paths resolved by the kernel with openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)".into(),
            ),
            Resolver::ComponentWalk { reason } => report.notes.push(format!(
                "fs-helper: openat2 unavailable ({reason}); paths resolved by a component walk with O_NOFOLLOW"
            )),
        },
        Ok(other) => report
            .problems
            .push(format!("fs-helper: unexpected status reply {:?}", other.kind())),
        Err(e) => report.problems.push(format!("fs-helper: status: {e}")),
    }
}

/// Asks the secrets-helper which credential store it uses: whether credentials survive a
/// reboot must be visible, and a store it cannot use is a problem.
pub async fn add_secrets_status(ctx: &Ctx, report: &mut DoctorReport) {
    use ipc_schema::secrets::{SecretsReply, SecretsRequest};
    use ipc_schema::{Body, Role};
    let Some(slot) = ctx.helpers.slot(Role::Secrets) else {
        return;
    };
    if !slot.is_ready() {
        return;
    }
    match slot.call(Body::Secrets(SecretsRequest::Status)).await {
        Ok(Body::SecretsReply(SecretsReply::Status(st))) => {
            let line = st.doctor_line();
            if st.problem.is_some() {
                report.problems.push(line);
            } else {
                report.notes.push(line);
            }
        }
        Ok(other) => report.problems.push(format!(
            "secrets-helper: unexpected status reply {:?}",
            other.kind()
        )),
        Err(e) => report.problems.push(format!("secrets-helper: status: {e}")),
    }
}

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
                if l.profile == "broker" {
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

#[cfg(test)]
mod tests {
    use super::*;

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
