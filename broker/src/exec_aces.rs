//! Windows: the ACEs a command's policy names, applied by the broker before the command's
//! `Start` and taken away when the last running command of its slot ends.
//!
//! A command there runs with a write-restricted token whose restricting SIDs are the command
//! profile's (what the network filters name) and one command slot's
//! ([`ipc_schema::exec::CommandSlot`]): it writes only where an ACE names its slot's SID (each
//! read-write grant root), and never where a deny ACE does (gatehouse's own directories).
//! Which ACEs is `sandbox::wincfg::exec_command_policy`, the one the exec-helper computes from
//! the same `Start` (its grants and the slot named in it) and reads back from each path's DACL
//! before it starts anything (its `missing_aces`): what this module applies is checked there,
//! and a path whose ACE is not held refuses the command (or, with `--allow-degraded`, is named).
//!
//! The commands of one slot share its SID, so one could write wherever another may: a command
//! joins a slot only while that slot is free or while the commands in it may write exactly
//! where it may ([`hold`]); otherwise it takes a free slot, and with all
//! [`CommandSlot::COUNT`] busy it is refused until one is free. So the write ACEs of a slot's
//! running commands are always the same, and what one applied is left until the slot's last
//! command ends (what lingers meanwhile is a read ACE, which a write-restricted token does not
//! need, or a deny); then `REVOKE_ACCESS` takes every ACE naming the slot's SID (gatehouse's
//! own: nothing else names it) from each path.
//!
//! On Linux and macOS nothing is applied: each command's view is built by its own sandbox.

use crate::Ctx;
use ipc_schema::exec::{CommandSlot, CommandSpec};

/// A run's hold on its slot's ACEs; when the slot's last one is dropped they are taken away.
#[must_use]
#[derive(Debug)]
pub struct Held {
    #[cfg(windows)]
    slot: CommandSlot,
}

impl Held {
    /// The slot to name in the `Start` (Windows); `None` elsewhere.
    pub fn slot(&self) -> Option<CommandSlot> {
        #[cfg(windows)]
        return Some(self.slot);
        #[cfg(not(windows))]
        None
    }
}

/// Nothing to apply off Windows.
#[cfg(not(windows))]
pub fn hold(_ctx: &Ctx, _spec: &CommandSpec) -> Result<Held, String> {
    Ok(Held {})
}

/// One slot's running commands: how many, the paths they may write (the same for all), and
/// every ACE applied for them (path, SDDL).
#[cfg(windows)]
#[derive(Default, Debug, Clone, PartialEq)]
struct Running {
    runs: u32,
    writes: Vec<std::path::PathBuf>,
    applied: std::collections::BTreeSet<(std::path::PathBuf, String)>,
}

#[cfg(windows)]
thread_local! {
    /// Each slot's running commands. The broker's event loop is one thread.
    static SLOTS: std::cell::RefCell<[Running; CommandSlot::COUNT as usize]> = Default::default();
}

/// The paths `aces` let their SID write (allow ACEs with `FILE_WRITE_DATA`), sorted.
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

/// Finds `spec`'s slot and applies the ACEs its command policy names there
/// (`wincfg::exec_command_policy`: grants from `spec`, gatehouse's own directories protected,
/// as the exec-helper is told with `--protect`). A path that will not take its ACE refuses the
/// command, naming the path and the error: without it the command could not write its grant,
/// or could write a protected place.
#[cfg(windows)]
pub fn hold(ctx: &Ctx, spec: &CommandSpec) -> Result<Held, String> {
    let own = ctx.dirs.own();
    let policy = |slot| {
        sandbox::wincfg::exec_command_policy(&spec.grants, &own, slot)
            .map_err(|e| format!("the command's ACEs: {e}"))
    };
    // Which paths it writes does not depend on the slot.
    let mine = writable(&policy(CommandSlot::new(0).expect("slot 0"))?.aces);
    let slot = choose(&mine)?;
    hold_aces(&policy(slot)?.aces, slot, mine)
}

/// The slot whose commands write exactly `mine`, else the first free one; with none, why.
#[cfg(windows)]
fn choose(mine: &[std::path::PathBuf]) -> Result<CommandSlot, String> {
    SLOTS.with_borrow(|slots| {
        let at = |i: usize| CommandSlot::new(i as u8).expect("an index below COUNT");
        if let Some(i) = slots.iter().position(|r| r.runs > 0 && r.writes == mine) {
            return Ok(at(i));
        }
        match slots.iter().position(|r| r.runs == 0) {
            Some(i) => Ok(at(i)),
            None => Err(format!(
                "all {} command slots are taken by commands that may write elsewhere (on Windows the commands of one slot share a SID, so either could write where the other may): start it when one of them has ended",
                CommandSlot::COUNT
            )),
        }
    })
}

/// Holds `aces` (each naming `slot`'s SID) for one run in `slot`, whose running commands write
/// exactly `mine` (or none runs there): applies what is not applied yet.
#[cfg(windows)]
fn hold_aces(
    aces: &[sandbox::wincfg::PathAce],
    slot: CommandSlot,
    mine: Vec<std::path::PathBuf>,
) -> Result<Held, String> {
    let fresh: Vec<_> = SLOTS.with_borrow(|slots| {
        let r = &slots[slot.index()];
        assert!(r.runs == 0 || r.writes == mine, "choose() picked {slot}");
        let new =
            |a: &&sandbox::wincfg::PathAce| !r.applied.contains(&(a.path.clone(), a.sddl.clone()));
        aces.iter().filter(new).cloned().collect()
    });
    sandbox::windows::apply_aces(&fresh).map_err(|e| format!("the command's ACEs: {e}"))?;
    SLOTS.with_borrow_mut(|slots| {
        let r = &mut slots[slot.index()];
        r.runs += 1;
        r.writes = mine;
        r.applied
            .extend(fresh.into_iter().map(|a| (a.path, a.sddl)));
    });
    Ok(Held { slot })
}

#[cfg(windows)]
impl Drop for Held {
    /// The slot's last running command takes every ACE applied for the slot away.
    fn drop(&mut self) {
        let gone = SLOTS.with_borrow_mut(|slots| {
            let r = &mut slots[self.slot.index()];
            r.runs -= 1;
            match r.runs {
                0 => std::mem::take(r).applied,
                _ => Default::default(),
            }
        });
        let mut paths: Vec<_> = gone.into_iter().map(|(path, _)| path).collect();
        paths.dedup();
        let sid = sandbox::wincfg::slot_sid(self.slot).0;
        let revoke: Vec<_> = (paths.into_iter())
            .map(|path| sandbox::windows::AppliedAce {
                path,
                sid: sid.clone(),
            })
            .collect();
        if let Err(e) = sandbox::windows::remove_aces(&revoke) {
            tracing::warn!("removing the ACEs of command slot {}: {e}", self.slot);
        }
    }
}

#[cfg(all(test, windows))]
mod tests {
    use super::*;
    use sandbox::wincfg::PathAce;
    use std::path::{Path, PathBuf};

    fn slots() -> Vec<Running> {
        SLOTS.with_borrow(|s| s.to_vec())
    }

    /// As `hold` does: the slot, then its ACEs (path, rights), each naming the slot's SID.
    fn take(paths: &[(&Path, &str)]) -> Result<Held, String> {
        let aces = |slot| -> Vec<PathAce> {
            let sid = sandbox::wincfg::slot_sid(slot).0;
            (paths.iter())
                .map(|(path, rights)| PathAce {
                    path: path.to_path_buf(),
                    sddl: format!("(A;OICI;{rights};;;{sid})"),
                    why: "test",
                })
                .collect()
        };
        let mine = writable(&aces(CommandSlot::new(0).unwrap()));
        let slot = choose(&mine)?;
        hold_aces(&aces(slot), slot, mine)
    }

    /// Runs that may write the same places share a slot and its ACEs, applied once; a run that
    /// writes elsewhere (or nowhere, beside one that writes) takes a slot of its own and runs
    /// beside them; with every slot taken a run is refused, and starts once one is free; after
    /// a slot's last run nothing is held there. (The DACLs themselves are read back only on
    /// Windows: Wine keeps a file's DACL whatever is set.)
    #[test]
    fn runs_share_a_slot_only_when_they_may_write_the_same_places() {
        let dir = tempfile::tempdir().unwrap();
        let dirs: Vec<PathBuf> = (0..10)
            .map(|i| {
                let p = dir.path().join(format!("d{i}"));
                std::fs::create_dir(&p).unwrap();
                p
            })
            .collect();
        let (p, q) = (&dirs[0], &dirs[1]);
        let wine = sandbox::windows::running_under_wine();
        let dacl = |path: &Path| {
            sandbox::windows::dacl_sddl(path)
                .unwrap()
                .to_ascii_lowercase()
        };
        let sid = |n| sandbox::wincfg::slot_sid(CommandSlot::new(n).unwrap()).0;
        let a = take(&[(p, "FRFWFXSD"), (q, "FRFX")]).unwrap();
        let c = take(&[(p, "FRFWFXSD")]).unwrap();
        assert_eq!((a.slot(), c.slot()), (CommandSlot::new(0).ok(), a.slot()));
        let now = slots();
        assert_eq!(
            (now[0].runs, &now[0].writes[..]),
            (2, std::slice::from_ref(p))
        );
        assert_eq!(
            now[0].applied.iter().cloned().collect::<Vec<_>>(),
            [
                (p.clone(), format!("(A;OICI;FRFWFXSD;;;{})", sid(0))),
                (q.clone(), format!("(A;OICI;FRFX;;;{})", sid(0)))
            ]
        );
        if !wine {
            assert!(
                dacl(p).contains(&sid(0).to_ascii_lowercase()),
                "{}",
                dacl(p)
            );
        }
        // Read-only beside runs that write p: a slot of its own, its ACE naming that slot.
        let b = take(&[(q, "FRFX")]).unwrap();
        assert_eq!(b.slot(), CommandSlot::new(1).ok());
        assert_eq!(
            slots()[1].applied.iter().cloned().collect::<Vec<_>>(),
            [(q.clone(), format!("(A;OICI;FRFX;;;{})", sid(1)))]
        );
        // Six more, each writing a place of its own: the slots fill up.
        let mut more: Vec<Held> = (2..8)
            .map(|i| take(&[(&dirs[i], "FRFWFXSD")]).unwrap())
            .collect();
        assert_eq!(more.last().unwrap().slot(), CommandSlot::new(7).ok());
        // A ninth place: refused, nothing applied for it, while every slot is taken.
        let e = take(&[(&dirs[8], "FRFWFXSD")]).unwrap_err();
        assert!(
            e.starts_with("all 8 command slots are taken by commands that may write elsewhere"),
            "{e}"
        );
        assert!(!slots().iter().any(|r| r.writes.contains(&dirs[8])));
        // But one that writes what a slot's commands write joins it.
        let joined = take(&[(&dirs[4], "FRFWFXSD")]).unwrap();
        assert_eq!(joined.slot(), CommandSlot::new(4).ok());
        // A slot freed: the ninth starts there (the positive control of the refusal).
        drop(more.remove(0));
        assert_eq!(slots()[2], Running::default());
        let ninth = take(&[(&dirs[8], "FRFWFXSD")]).unwrap();
        assert_eq!(ninth.slot(), CommandSlot::new(2).ok());
        drop(a);
        assert_eq!(slots()[0].runs, 1);
        drop((c, b, more, joined, ninth));
        assert!(
            slots().iter().all(|r| *r == Running::default()),
            "{:?}",
            slots()
        );
        if !wine {
            for (i, path) in dirs.iter().enumerate() {
                for n in 0..CommandSlot::COUNT {
                    assert!(
                        !dacl(path).contains(&sid(n).to_ascii_lowercase()),
                        "{i}: {}",
                        dacl(path)
                    );
                }
            }
        }
        if wine {
            println!("wine does not enforce: file DACLs (the ACEs a command holds are counted, not read back)");
        }
    }
}
