//! The check a Windows helper's hello gets before anything is routed to it, as the spawner and
//! broker will make it: the spawner's view of the process from outside
//! (`ConfinedChild::observe`: its token, its job, its mitigations) against the helper's own
//! report, then the profile's policy (`wincfg::verify_observed`). One implementation for the
//! helpers' Windows tests.

use ipc_schema::status::LockdownReport;
use sandbox::wincfg::{self, WindowsPolicy};
use sandbox::windows::{self as w, running_under_wine, ConfinedChild};

/// Asserts that `report` (a helper's hello) says what the spawner sees of `child` and that the
/// check passes: strict on Windows; under Wine, which restricts no token, refused strict naming
/// the token and passed with `--allow-degraded` (printed as not verified). Then, on the same
/// process, a report that claims more than the process has is refused even degraded, naming
/// the field.
pub fn check_hello(policy: &WindowsPolicy, child: &ConfinedChild, report: &LockdownReport) {
    let helper = &policy.profile;
    let observed = child
        .observe(policy)
        .unwrap_or_else(|e| panic!("the spawner cannot read the {helper} helper: {e}"));
    println!("the spawner sees the {helper} helper's process as: {observed:?}");
    let own = report.windows.as_deref().expect("a Windows report");
    assert_eq!(
        wincfg::differences(own, &observed),
        Vec::<String>::new(),
        "the {helper} helper's report and the spawner's view of it"
    );
    if running_under_wine() {
        println!("wine does not enforce: the {helper} helper's restricted token and job passing the broker's strict check (not verified here)");
        let e = wincfg::verify_observed(policy, report, &observed, false).unwrap_err();
        assert!(e.contains("restricted token"), "{e}");
        assert_eq!(
            wincfg::verify_observed(policy, report, &observed, true),
            Ok(())
        );
    } else {
        assert_eq!(
            wincfg::verify_observed(policy, report, &observed, false),
            Ok(())
        );
    }
    // Another process of the user (this test) may wait on the helper and query its basics
    // (the positive control), not read or write its memory (PROCESS_VM_READ | PROCESS_VM_WRITE
    // | PROCESS_VM_OPERATION): the process descriptor the spawner gave it.
    const WAIT_AND_QUERY: u32 = 0x0010_1000;
    const VM: u32 = 0x0010 | 0x0020 | 0x0008;
    w::open_process(child.pid(), WAIT_AND_QUERY)
        .unwrap_or_else(|e| panic!("waiting on the {helper} helper: {e}"));
    // (Wine checks process descriptors too, so this holds under Wine as on Windows.)
    match w::open_process(child.pid(), VM) {
        Err(e) => assert_eq!(e.code(), Some(5), "{e}"),
        Ok(_) => panic!("another process of the user opened the {helper} helper's memory"),
    }
    // The helper read the same descriptor back on itself and says so.
    assert!(report.dumpable_off, "{report:?}");
    // A report that claims a restricted token the process does not have (under Wine), or
    // denies the one it has (on Windows): refused whatever --allow-degraded says.
    let mut forged = report.clone();
    let claim = !observed.restricted_token;
    forged
        .windows
        .as_mut()
        .expect("a Windows report")
        .restricted_token = claim;
    let e = wincfg::verify_observed(policy, &forged, &observed, true).unwrap_err();
    assert!(
        e.starts_with(&format!(
            "the {helper} helper's report does not match what the spawner reads of its process: restricted token: it says {claim}, the spawner sees {}",
            !claim
        )),
        "{e}"
    );
}
