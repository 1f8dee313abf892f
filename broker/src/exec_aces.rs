//! Windows: the ACEs a command's policy names, applied by the broker before the command's
//! `Start` and taken away when the last running command ends.
//!
//! A command there runs with a write-restricted token whose restricting SID is the command
//! profile's: it writes only where an ACE names that SID (each read-write grant root), and
//! never where a deny ACE does (gatehouse's own directories). Which ACEs is
//! `sandbox::wincfg::exec_command_policy`, the one the exec-helper computes from the same
//! `Start` and reads back from each path's DACL before it starts anything (its `missing_aces`):
//! what this module applies is checked there, and a path whose ACE is not held refuses the
//! command (or, with `--allow-degraded`, is named).
//!
//! Every command shares the profile's SID, so a command could write wherever any running one
//! may: a command starts only while none runs or while those running may write exactly where it
//! may ([`hold`]). So the write ACEs of the running commands are always the same, and what a
//! command applied is left until the last running one ends (what lingers meanwhile is a read
//! ACE, which a write-restricted token does not need, or a deny); then `REVOKE_ACCESS` takes
//! every ACE naming the SID (gatehouse's own: nothing else names it) from each path.
//!
//! On Linux and macOS nothing is applied: each command's view is built by its own sandbox.

use crate::Ctx;
use ipc_schema::exec::CommandSpec;

/// A run's hold on the ACEs; when the last one is dropped they are taken away.
#[must_use]
#[derive(Debug)]
pub struct Held {
    #[cfg(windows)]
    sid: String,
}

/// Nothing to apply off Windows.
#[cfg(not(windows))]
pub fn hold(_ctx: &Ctx, _spec: &CommandSpec) -> Result<Held, String> {
    Ok(Held {})
}

/// The running commands: how many, the paths they may write (the same for all), and every
/// ACE applied for them (path, SDDL).
#[cfg(windows)]
#[derive(Default, Debug, Clone, PartialEq)]
struct Running {
    runs: u32,
    writes: Vec<std::path::PathBuf>,
    applied: std::collections::BTreeSet<(std::path::PathBuf, String)>,
}

#[cfg(windows)]
thread_local! {
    /// The broker's event loop is one thread.
    static RUNNING: std::cell::RefCell<Running> = Default::default();
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
/// `spec`, gatehouse's own directories protected, as the exec-helper is told with `--protect`).
/// A path that will not take its ACE refuses the command, naming the path and the error:
/// without it the command could not write its grant, or could write a protected place.
#[cfg(windows)]
pub fn hold(ctx: &Ctx, spec: &CommandSpec) -> Result<Held, String> {
    let policy = sandbox::wincfg::exec_command_policy(&spec.grants, &ctx.dirs.own())
        .map_err(|e| format!("the command's ACEs: {e}"))?;
    hold_aces(&policy.aces, policy.sid.0)
}

/// Holds `aces` (each naming `sid`) for one run: refused while other commands run that may
/// write elsewhere (or while this one would write where they may not), else applies what is not
/// applied yet.
#[cfg(windows)]
fn hold_aces(aces: &[sandbox::wincfg::PathAce], sid: String) -> Result<Held, String> {
    let mine = writable(aces);
    let shown = |paths: &[std::path::PathBuf]| match paths {
        [] => "nothing".to_string(),
        _ => (paths.iter().map(|p| p.display().to_string()))
            .collect::<Vec<_>>()
            .join(", "),
    };
    let fresh: Vec<_> = RUNNING.with_borrow(|r| {
        if r.runs > 0 && r.writes != mine {
            return Err(format!(
                "{} other command(s) run, which may write {}; this one may write {}. On Windows every command carries the same SID, so either could write where the other may: start it when they have ended",
                r.runs,
                shown(&r.writes),
                shown(&mine)
            ));
        }
        let new = |a: &&sandbox::wincfg::PathAce| {
            !r.applied.contains(&(a.path.clone(), a.sddl.clone()))
        };
        Ok(aces.iter().filter(new).cloned().collect())
    })?;
    sandbox::windows::apply_aces(&fresh).map_err(|e| format!("the command's ACEs: {e}"))?;
    RUNNING.with_borrow_mut(|r| {
        r.runs += 1;
        r.writes = mine;
        r.applied
            .extend(fresh.into_iter().map(|a| (a.path, a.sddl)));
    });
    Ok(Held { sid })
}

#[cfg(windows)]
impl Drop for Held {
    /// The last running command takes every ACE applied for the running ones away.
    fn drop(&mut self) {
        let gone = RUNNING.with_borrow_mut(|r| {
            r.runs -= 1;
            match r.runs {
                0 => std::mem::take(r).applied,
                _ => Default::default(),
            }
        });
        let mut paths: Vec<_> = gone.into_iter().map(|(path, _)| path).collect();
        paths.dedup();
        let revoke: Vec<_> = (paths.into_iter())
            .map(|path| sandbox::windows::AppliedAce {
                path,
                sid: self.sid.clone(),
            })
            .collect();
        if let Err(e) = sandbox::windows::remove_aces(&revoke) {
            tracing::warn!("removing the commands' ACEs: {e}");
        }
    }
}

#[cfg(all(test, windows))]
mod tests {
    use super::*;
    use sandbox::wincfg::PathAce;

    fn running() -> Running {
        RUNNING.with_borrow(|r| r.clone())
    }

    /// Runs that may write the same places share their ACEs, applied once; a run that would
    /// write elsewhere (or nowhere, beside one that writes) is refused while they run, and
    /// starts once they ended; after the last one nothing is held. (The DACLs themselves are
    /// read back only on Windows: Wine keeps a file's DACL whatever is set.)
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
        let (rw_p, ro_q) = (ace(&p, "FRFWFXSD"), ace(&q, "FRFX"));
        let a = hold_aces(&[rw_p.clone(), ro_q.clone()], sid.clone()).unwrap();
        let c = hold_aces(std::slice::from_ref(&rw_p), sid.clone()).unwrap();
        let both = running();
        assert_eq!(both.runs, 2);
        assert_eq!(both.writes, std::slice::from_ref(&p));
        assert_eq!(
            both.applied.into_iter().collect::<Vec<_>>(),
            [
                (p.clone(), rw_p.sddl.clone()),
                (q.clone(), ro_q.sddl.clone())
            ]
        );
        if !wine {
            assert!(dacl(&p).contains("0x1301bf"), "{}", dacl(&p));
        }
        // Read-only beside runs that write p: it could write p through the shared SID.
        let e = hold_aces(std::slice::from_ref(&ro_q), sid.clone()).unwrap_err();
        assert!(
            e.contains("2 other command(s) run, which may write")
                && e.contains("this one may write nothing"),
            "{e}"
        );
        drop(a);
        assert_eq!(running().runs, 1);
        drop(c);
        assert_eq!(running(), Running::default());
        if !wine {
            for path in [&p, &q] {
                assert!(
                    !dacl(path).contains(&sid.to_ascii_lowercase()),
                    "{}",
                    dacl(path)
                );
            }
        }
        // Alone now, the read-only run starts (the positive control of the refusal).
        let b = hold_aces(&[ro_q], sid.clone()).unwrap();
        drop(b);
        assert_eq!(running(), Running::default());
        if wine {
            println!("wine does not enforce: file DACLs (the ACEs a command holds are counted, not read back)");
        }
    }
}
