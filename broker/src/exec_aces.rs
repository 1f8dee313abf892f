//! Windows: the ACEs a command's policy names, applied by the broker before the command's
//! `Start` and taken away when the last run that needs them ends.
//!
//! A command there runs with a write-restricted token whose restricting SID is the command
//! profile's: it writes only where an ACE names that SID (each read-write grant root), and
//! never where a deny ACE does (gatehouse's own directories). Which ACEs is
//! `sandbox::wincfg::command_policy`, the one the exec-helper computes from the same `Start`
//! and reads back from each path's DACL before it starts anything (its `missing_aces`): what
//! this module applies is checked there, and a path whose ACE is not held refuses the command
//! (or, with `--allow-degraded`, is named). Every command shares the profile's SID, so a path
//! keeps its ACEs while any run holds it; `REVOKE_ACCESS` then takes away every ACE naming the
//! SID (gatehouse's own: nothing else names it).
//!
//! On Linux and macOS nothing is applied: each command's view is built by its own sandbox.

use crate::Ctx;
use ipc_schema::exec::CommandSpec;

/// The ACEs a run holds; dropping it lets them go (the last holder of each removes it).
#[must_use]
#[derive(Debug)]
pub struct Held {
    #[cfg(windows)]
    aces: Vec<sandbox::wincfg::PathAce>,
    #[cfg(windows)]
    sid: String,
}

/// Nothing to apply off Windows.
#[cfg(not(windows))]
pub fn hold(_ctx: &Ctx, _spec: &CommandSpec) -> Result<Held, String> {
    Ok(Held {})
}

#[cfg(windows)]
type Holders =
    std::collections::BTreeMap<std::path::PathBuf, std::collections::BTreeMap<String, u32>>;

#[cfg(windows)]
thread_local! {
    /// For each path, how many runs hold each of its ACEs (the broker's event loop is one
    /// thread).
    static HOLDERS: std::cell::RefCell<Holders> = Default::default();
    /// How many runs hold ACEs, and the paths they may write (all the same: see `hold_aces`).
    static RUNNING: std::cell::RefCell<(u32, Vec<std::path::PathBuf>)> = Default::default();
}

/// The paths `aces` let the command SID write (allow ACEs with `FILE_WRITE_DATA`), sorted.
#[cfg(windows)]
fn writable(aces: &[sandbox::wincfg::PathAce]) -> Vec<std::path::PathBuf> {
    const FILE_WRITE_DATA: u32 = 0x2;
    let mut out: Vec<_> = (aces.iter())
        .filter(|a| {
            sandbox::wincfg::parse_ace(&a.sddl)
                .is_ok_and(|s| !s.deny && s.mask & FILE_WRITE_DATA != 0)
        })
        .map(|a| a.path.clone())
        .collect();
    out.sort();
    out.dedup();
    out
}

/// Applies the ACEs `spec`'s command policy names (`wincfg::exec_command_policy`: grants from
/// `spec`, gatehouse's own directories protected, as the exec-helper is told with `--protect`). A path that will not
/// take its ACE refuses the command, naming the path and the error: without it the command
/// could not write its grant, or could write a protected place.
#[cfg(windows)]
pub fn hold(ctx: &Ctx, spec: &CommandSpec) -> Result<Held, String> {
    let policy = sandbox::wincfg::exec_command_policy(&spec.grants, &ctx.dirs.own())
        .map_err(|e| format!("the command's ACEs: {e}"))?;
    hold_aces(policy.aces, policy.sid.0)
}

/// Holds `aces` (each naming `sid`) for one run: applies those no run holds yet.
///
/// Every command carries the same SID, so a command could write wherever any running one may:
/// a command starts only while no other runs, or while those that run may write exactly where
/// it may (the same grants, as an agent's commands in one project). Anything else is refused
/// until they end, rather than let one command write through another's grant.
#[cfg(windows)]
fn hold_aces(mut aces: Vec<sandbox::wincfg::PathAce>, sid: String) -> Result<Held, String> {
    aces.sort_by(|a, b| (&a.path, &a.sddl).cmp(&(&b.path, &b.sddl)));
    aces.dedup_by(|a, b| (&a.path, &a.sddl) == (&b.path, &b.sddl));
    let mine = writable(&aces);
    let shown = |paths: &[std::path::PathBuf]| match paths {
        [] => "nothing".to_string(),
        _ => paths
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", "),
    };
    RUNNING.with_borrow(|(runs, theirs)| match *runs {
        0 => Ok(()),
        _ if *theirs == mine => Ok(()),
        n => Err(format!(
            "{n} other command(s) run, which may write {}; this one may write {}. On Windows every command carries the same SID, so either could write where the other may: start it when they have ended",
            shown(theirs),
            shown(&mine)
        )),
    })?;
    // Only what no run holds yet is applied (adding an ACE merges it into the path's DACL).
    let fresh: Vec<_> = HOLDERS.with_borrow(|h| {
        let held =
            |a: &&sandbox::wincfg::PathAce| h.get(&a.path).is_some_and(|m| m.contains_key(&a.sddl));
        aces.iter().filter(|a| !held(a)).cloned().collect()
    });
    sandbox::windows::apply_aces(&fresh).map_err(|e| format!("the command's ACEs: {e}"))?;
    HOLDERS.with_borrow_mut(|h| {
        for a in &aces {
            *h.entry(a.path.clone())
                .or_default()
                .entry(a.sddl.clone())
                .or_default() += 1;
        }
    });
    RUNNING.with_borrow_mut(|(runs, theirs)| {
        *runs += 1;
        *theirs = mine;
    });
    Ok(Held { aces, sid })
}

#[cfg(windows)]
impl Drop for Held {
    /// A path whose last holder of some ACE goes loses every ACE naming the SID, and gets back
    /// those other runs still hold: its DACL is always the union of what the running commands
    /// need, never more.
    fn drop(&mut self) {
        RUNNING.with_borrow_mut(|(runs, theirs)| {
            *runs -= 1;
            if *runs == 0 {
                theirs.clear();
            }
        });
        let mut changed: Vec<(std::path::PathBuf, Vec<String>)> = Vec::new();
        HOLDERS.with_borrow_mut(|h| {
            for a in &self.aces {
                let Some(m) = h.get_mut(&a.path) else {
                    continue;
                };
                let Some(n) = m.get_mut(&a.sddl) else {
                    continue;
                };
                *n -= 1;
                if *n == 0 {
                    m.remove(&a.sddl);
                    let rest = m.keys().cloned().collect();
                    if m.is_empty() {
                        h.remove(&a.path);
                    }
                    changed.retain(|(p, _)| p != &a.path);
                    changed.push((a.path.clone(), rest));
                }
            }
        });
        for (path, rest) in changed {
            let revoke = [sandbox::windows::AppliedAce {
                path: path.clone(),
                sid: self.sid.clone(),
            }];
            let again: Vec<_> = rest
                .into_iter()
                .map(|sddl| sandbox::wincfg::PathAce {
                    path: path.clone(),
                    sddl,
                    why: "held by a command still running",
                })
                .collect();
            let r = sandbox::windows::remove_aces(&revoke)
                .and_then(|()| sandbox::windows::apply_aces(&again).map(drop));
            if let Err(e) = r {
                tracing::warn!("the ACEs of {} after a command: {e}", path.display());
            }
        }
    }
}

#[cfg(all(test, windows))]
mod tests {
    use super::*;
    use sandbox::wincfg::PathAce;

    fn held() -> Holders {
        HOLDERS.with_borrow(|h| h.clone())
    }

    /// Runs that may write the same places share their ACEs: each path holds what they need
    /// while any runs, nothing after the last; a run that would write elsewhere (or nowhere,
    /// beside one that writes) is refused while they run, and starts once they ended. (The
    /// DACLs themselves are read back only on Windows: Wine keeps a file's DACL whatever is
    /// set.)
    #[test]
    fn runs_share_aces_only_when_they_may_write_the_same_places() {
        let dir = tempfile::tempdir().unwrap();
        let (p, q) = (dir.path().join("p"), dir.path().join("q"));
        std::fs::create_dir(&p).unwrap();
        std::fs::create_dir(&q).unwrap();
        let sid = "S-1-15-3-1024-1-2-3-4-5-6-7-8".to_string();
        let ace = |path: &std::path::Path, rights: &str| PathAce {
            path: path.to_path_buf(),
            sddl: format!("(A;OICI;{rights};;;{sid})"),
            why: "test",
        };
        let wine = sandbox::windows::running_under_wine();
        let dacl = |path: &std::path::Path| {
            sandbox::windows::dacl_sddl(path)
                .unwrap()
                .to_ascii_lowercase()
        };
        let a = hold_aces(vec![ace(&p, "FRFWFXSD"), ace(&q, "FRFX")], sid.clone()).unwrap();
        let c = hold_aces(vec![ace(&p, "FRFWFXSD"), ace(&p, "FRFWFXSD")], sid.clone()).unwrap();
        let both = held();
        assert_eq!(both[&p][&ace(&p, "FRFWFXSD").sddl], 2, "{both:?}");
        assert_eq!(both[&q][&ace(&q, "FRFX").sddl], 1, "{both:?}");
        if !wine {
            assert!(dacl(&p).contains("0x1301bf"), "{}", dacl(&p));
        }
        // Read-only beside a run that writes p: it could write p through the shared SID.
        let e = hold_aces(vec![ace(&q, "FRFX")], sid.clone()).unwrap_err();
        assert!(
            e.contains("2 other command(s) run, which may write")
                && e.contains("this one may write nothing"),
            "{e}"
        );
        drop(a);
        let after = held();
        assert!(!after.contains_key(&q), "{after:?}");
        assert_eq!(after[&p][&ace(&p, "FRFWFXSD").sddl], 1, "{after:?}");
        drop(c);
        assert!(held().is_empty(), "{:?}", held());
        if !wine {
            assert!(
                !dacl(&p).contains(&sid.to_ascii_lowercase()),
                "{}",
                dacl(&p)
            );
        }
        // Alone now, the read-only run starts (the positive control of the refusal).
        let b = hold_aces(vec![ace(&q, "FRFX")], sid.clone()).unwrap();
        drop(b);
        assert!(held().is_empty(), "{:?}", held());
        if wine {
            println!("wine does not enforce: file DACLs (the ACEs a command holds are counted, not read back)");
        }
    }
}
