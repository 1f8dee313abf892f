//! The job object a confined process runs in: created and owned by the spawner (closing its
//! handle kills the tree), checked by the helper from inside.

use super::ffi::{invalid, last, owned, raw, WinError};
use crate::wincfg::{JobFacts, JobLimits};
use std::os::windows::io::{AsHandle, BorrowedHandle, OwnedHandle};
use windows_sys::Win32::Foundation::HANDLE;
use windows_sys::Win32::System::JobObjects::{
    AssignProcessToJobObject, CreateJobObjectW, IsProcessInJob, JobObjectBasicUIRestrictions,
    JobObjectExtendedLimitInformation, QueryInformationJobObject, SetInformationJobObject,
    TerminateJobObject, JOBOBJECT_BASIC_UI_RESTRICTIONS, JOBOBJECT_EXTENDED_LIMIT_INFORMATION,
    JOB_OBJECT_LIMIT_ACTIVE_PROCESS, JOB_OBJECT_LIMIT_DIE_ON_UNHANDLED_EXCEPTION,
    JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE, JOB_OBJECT_LIMIT_PROCESS_MEMORY,
};
use windows_sys::Win32::System::Threading::GetCurrentProcess;

const MECH: &str = "job object";

/// A job object. Dropping it closes the last handle, and with `kill_on_close` every process in
/// it dies: the counterpart of PR_SET_PDEATHSIG and of killing a namespace's init.
#[derive(Debug)]
pub struct Job(OwnedHandle);

fn zeroed_limits() -> JOBOBJECT_EXTENDED_LIMIT_INFORMATION {
    // SAFETY: a plain C struct of integers; all-zero is its documented "no limit" value.
    unsafe { std::mem::zeroed() }
}

impl Job {
    /// A job with `limits`. The UI restrictions are the one piece that may be missing with
    /// `allow_degraded` (returned as a degraded note); kill-on-close, the process limit and the
    /// memory limit never are.
    pub fn create(
        limits: &JobLimits,
        allow_degraded: bool,
    ) -> Result<(Job, Vec<String>), WinError> {
        if !limits.kill_on_close {
            return Err(invalid(MECH, "a job without kill-on-close is not built"));
        }
        // SAFETY: no security attributes and no name: an anonymous job whose handle `owned` takes.
        let h = unsafe { CreateJobObjectW(std::ptr::null(), std::ptr::null()) };
        let job = Job(owned(h, MECH, "CreateJobObjectW")?);
        let mut info = zeroed_limits();
        info.BasicLimitInformation.LimitFlags = JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE;
        if limits.die_on_unhandled_exception {
            info.BasicLimitInformation.LimitFlags |= JOB_OBJECT_LIMIT_DIE_ON_UNHANDLED_EXCEPTION;
        }
        if let Some(n) = limits.active_processes {
            info.BasicLimitInformation.LimitFlags |= JOB_OBJECT_LIMIT_ACTIVE_PROCESS;
            info.BasicLimitInformation.ActiveProcessLimit = n;
        }
        if let Some(bytes) = limits.process_memory {
            info.BasicLimitInformation.LimitFlags |= JOB_OBJECT_LIMIT_PROCESS_MEMORY;
            info.ProcessMemoryLimit = usize::try_from(bytes).unwrap_or(usize::MAX);
        }
        // SAFETY: a valid job handle and a struct of the size the class expects.
        let ok = unsafe {
            SetInformationJobObject(
                raw(job.0.as_handle()),
                JobObjectExtendedLimitInformation,
                (&info as *const JOBOBJECT_EXTENDED_LIMIT_INFORMATION).cast(),
                std::mem::size_of::<JOBOBJECT_EXTENDED_LIMIT_INFORMATION>() as u32,
            )
        };
        if ok == 0 {
            return Err(last(MECH, "SetInformationJobObject(extended limits)"));
        }
        let mut degraded = Vec::new();
        let ui = JOBOBJECT_BASIC_UI_RESTRICTIONS {
            UIRestrictionsClass: limits
                .ui_bits()
                .map_err(|n| invalid(MECH, format!("unknown UI limit {n}")))?,
        };
        // SAFETY: as above, with the UI restrictions struct.
        let ok = unsafe {
            SetInformationJobObject(
                raw(job.0.as_handle()),
                JobObjectBasicUIRestrictions,
                (&ui as *const JOBOBJECT_BASIC_UI_RESTRICTIONS).cast(),
                std::mem::size_of::<JOBOBJECT_BASIC_UI_RESTRICTIONS>() as u32,
            )
        };
        if ok == 0 {
            let e = last(MECH, "SetInformationJobObject(UI restrictions)");
            if !allow_degraded {
                return Err(e);
            }
            degraded.push(format!("job UI restrictions not set: {e}"));
        }
        Ok((job, degraded))
    }

    pub fn assign(&self, process: BorrowedHandle<'_>) -> Result<(), WinError> {
        // SAFETY: valid job and process handles.
        if unsafe { AssignProcessToJobObject(raw(self.0.as_handle()), raw(process)) } == 0 {
            return Err(last(MECH, "AssignProcessToJobObject"));
        }
        Ok(())
    }

    /// Ends every process in the job now.
    pub fn terminate(&self, exit_code: u32) -> Result<(), WinError> {
        // SAFETY: a valid job handle.
        if unsafe { TerminateJobObject(raw(self.0.as_handle()), exit_code) } == 0 {
            return Err(last(MECH, "TerminateJobObject"));
        }
        Ok(())
    }

    /// Puts this process into a new job (the broker hardening itself).
    pub(crate) fn assign_self(&self) -> Result<(), WinError> {
        // SAFETY: GetCurrentProcess is a pseudo-handle valid for the call.
        if unsafe { AssignProcessToJobObject(raw(self.0.as_handle()), GetCurrentProcess()) } == 0 {
            return Err(last(MECH, "AssignProcessToJobObject(self)"));
        }
        Ok(())
    }
}

/// Reads the job this process runs in (for a nested job, the innermost: the one the spawner
/// made).
pub fn own_job_facts() -> Result<JobFacts, WinError> {
    // The current-process pseudo-handle and a null job: "any job", then the caller's own.
    // SAFETY: GetCurrentProcess returns a pseudo-handle that needs no close.
    job_facts(unsafe { GetCurrentProcess() }, std::ptr::null_mut())
}

impl Job {
    /// What the spawner reads of a process it put in this job, from outside (the counterpart
    /// of /proc's view on Linux): whether `process` is in this very job, and this job's limits.
    pub fn facts_of(&self, process: BorrowedHandle<'_>) -> Result<JobFacts, WinError> {
        job_facts(raw(process), raw(self.0.as_handle()))
    }
}

/// `process` in `job` (null: in any job, and the caller's own job's limits).
fn job_facts(process: HANDLE, job: HANDLE) -> Result<JobFacts, WinError> {
    let mut in_job = 0;
    // SAFETY: a process handle with PROCESS_QUERY_(LIMITED_)INFORMATION (or the pseudo-handle)
    // and a job handle with JOB_OBJECT_QUERY, or null for "any job".
    if unsafe { IsProcessInJob(process, job, &mut in_job) } == 0 {
        return Err(last(MECH, "IsProcessInJob"));
    }
    if in_job == 0 {
        return Ok(JobFacts {
            in_job: false,
            limit_flags: 0,
            active_process_limit: 0,
            ui_restrictions: Ok(0),
        });
    }
    let mut info = zeroed_limits();
    // SAFETY: a job handle (null names the calling process's job); the buffer is the struct the
    // class fills, with its size.
    let ok = unsafe {
        QueryInformationJobObject(
            job,
            JobObjectExtendedLimitInformation,
            (&mut info as *mut JOBOBJECT_EXTENDED_LIMIT_INFORMATION).cast(),
            std::mem::size_of::<JOBOBJECT_EXTENDED_LIMIT_INFORMATION>() as u32,
            std::ptr::null_mut(),
        )
    };
    if ok == 0 {
        return Err(last(MECH, "QueryInformationJobObject(extended limits)"));
    }
    let mut ui = JOBOBJECT_BASIC_UI_RESTRICTIONS {
        UIRestrictionsClass: 0,
    };
    // SAFETY: as above, with the UI restrictions struct.
    let ok = unsafe {
        QueryInformationJobObject(
            job,
            JobObjectBasicUIRestrictions,
            (&mut ui as *mut JOBOBJECT_BASIC_UI_RESTRICTIONS).cast(),
            std::mem::size_of::<JOBOBJECT_BASIC_UI_RESTRICTIONS>() as u32,
            std::ptr::null_mut(),
        )
    };
    // Kept apart from the limits: a system that cannot report UI restrictions (Wine) still
    // shows whether the process is in a kill-on-close job.
    let ui_restrictions = if ok == 0 {
        Err(last(MECH, "QueryInformationJobObject(UI restrictions)").to_string())
    } else {
        Ok(ui.UIRestrictionsClass)
    };
    Ok(JobFacts {
        in_job: true,
        limit_flags: info.BasicLimitInformation.LimitFlags,
        active_process_limit: info.BasicLimitInformation.ActiveProcessLimit,
        ui_restrictions,
    })
}
