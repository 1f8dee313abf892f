//! Starting a helper or a command confined by its [`WindowsPolicy`]: a restricted token, a job
//! object, only the named handles inherited, mitigation and child-process attributes, an
//! environment built from an allowlist. The process is created suspended and runs only once it
//! is in the job, so it never executes a single instruction unconfined.

use super::ffi::{invalid, last, owned, raw, wide, OwnedSid, WinError};
use super::job::Job;
use crate::wincfg::WindowsPolicy;
use std::ffi::{c_void, OsStr, OsString};
use std::os::windows::ffi::OsStrExt;
use std::os::windows::io::{AsHandle, BorrowedHandle, OwnedHandle};
use std::path::Path;
use windows_sys::Win32::Foundation::{
    SetHandleInformation, ERROR_ACCESS_DENIED, HANDLE, HANDLE_FLAG_INHERIT, WAIT_OBJECT_0,
    WAIT_TIMEOUT,
};
use windows_sys::Win32::Security::SECURITY_ATTRIBUTES;
use windows_sys::Win32::System::Threading::{
    CreateProcessAsUserW, CreateProcessW, DeleteProcThreadAttributeList, GetExitCodeProcess,
    InitializeProcThreadAttributeList, OpenProcess, ResumeThread, TerminateProcess,
    UpdateProcThreadAttribute, WaitForSingleObject, CREATE_NO_WINDOW, CREATE_SUSPENDED,
    CREATE_UNICODE_ENVIRONMENT, EXTENDED_STARTUPINFO_PRESENT, PROCESS_INFORMATION,
    PROCESS_QUERY_INFORMATION, PROCESS_QUERY_LIMITED_INFORMATION,
    PROC_THREAD_ATTRIBUTE_CHILD_PROCESS_POLICY, PROC_THREAD_ATTRIBUTE_HANDLE_LIST,
    PROC_THREAD_ATTRIBUTE_MITIGATION_POLICY, STARTF_USESTDHANDLES, STARTUPINFOEXW,
};

const MECH: &str = "confined spawn";

/// What to start. The policy says how it is confined; this says what runs and what it gets.
#[derive(Debug)]
pub struct SpawnSpec<'a> {
    /// The executable, by absolute path (no search path: what runs is what was named).
    pub program: &'a Path,
    /// Arguments after the program name.
    pub args: Vec<OsString>,
    pub cwd: Option<&'a Path>,
    /// The whole environment of the child (nothing is inherited); see [`env_from_allowlist`].
    pub env: Vec<(OsString, OsString)>,
    /// Handles the child inherits besides its stdio: the broker channel, nothing else.
    pub inherit: Vec<BorrowedHandle<'a>>,
    /// The child's stdin, stdout and stderr; `None` gives it none.
    pub stdin: Option<BorrowedHandle<'a>>,
    pub stdout: Option<BorrowedHandle<'a>>,
    pub stderr: Option<BorrowedHandle<'a>>,
}

impl<'a> SpawnSpec<'a> {
    /// Every handle the child inherits: `inherit` and its stdio, each once.
    fn inherited(&self) -> Vec<BorrowedHandle<'a>> {
        let mut handles: Vec<BorrowedHandle<'a>> = self.inherit.clone();
        for h in [self.stdin, self.stdout, self.stderr].into_iter().flatten() {
            if !handles.iter().any(|x| raw(*x) == raw(h)) {
                handles.push(h);
            }
        }
        handles
    }

    /// The application name and the NUL-terminated command line, quoted as the C runtime splits
    /// it back.
    fn command_line(&self) -> Result<(Vec<u16>, Vec<u16>), WinError> {
        let app = wide(MECH, self.program.as_os_str())?;
        let mut cmdline = Vec::new();
        push_arg(&mut cmdline, self.program.as_os_str());
        for a in &self.args {
            push_arg(&mut cmdline, a);
        }
        if cmdline.contains(&0) {
            return Err(invalid(MECH, "an argument contains a NUL"));
        }
        cmdline.push(0);
        Ok((app, cmdline))
    }

    /// The startup info naming the stdio handles and `attrs`.
    fn startup_info(&self, attrs: &mut AttrList) -> STARTUPINFOEXW {
        let mut si = STARTUPINFOEXW::default();
        si.StartupInfo.cb = std::mem::size_of::<STARTUPINFOEXW>() as u32;
        // Always set: a child without a handle here gets none, rather than the console's.
        si.StartupInfo.dwFlags = STARTF_USESTDHANDLES;
        si.StartupInfo.hStdInput = self.stdin.map_or(std::ptr::null_mut(), raw);
        si.StartupInfo.hStdOutput = self.stdout.map_or(std::ptr::null_mut(), raw);
        si.StartupInfo.hStdError = self.stderr.map_or(std::ptr::null_mut(), raw);
        si.lpAttributeList = attrs.ptr();
        si
    }
}

/// How strict to be about attributes this system refuses.
#[derive(Debug, Clone, Copy, Default)]
pub struct SpawnOptions {
    /// Start even if the system refuses the mitigation or child-process attribute or the job's
    /// UI restrictions, naming each in [`ConfinedChild::degraded`]. The restricted token, the
    /// job with kill-on-close and the handle list are never optional. The helper's own
    /// `lockdown` checks again what it can see and refuses on its own.
    pub allow_degraded: bool,
}

/// A running confined process. Dropping it closes the job handle, which kills the process and
/// everything it started.
#[derive(Debug)]
pub struct ConfinedChild {
    process: OwnedHandle,
    pid: u32,
    job: Option<Job>,
    degraded: Vec<String>,
}

impl ConfinedChild {
    pub fn pid(&self) -> u32 {
        self.pid
    }

    pub fn process(&self) -> BorrowedHandle<'_> {
        self.process.as_handle()
    }

    /// What was not applied (only with [`SpawnOptions::allow_degraded`]).
    pub fn degraded(&self) -> &[String] {
        &self.degraded
    }

    /// What this process reads of the child from outside, for `policy`'s mitigations: its
    /// token, whether it is in the job made for it and that job's limits, and the mitigations
    /// in force (the counterpart of the spawner's /proc read on Linux). A helper's hello is
    /// checked against it (`wincfg::verify_observed`), so the helper's own report is never the
    /// only evidence.
    pub fn observe(
        &self,
        policy: &WindowsPolicy,
    ) -> Result<ipc_schema::status::WindowsConfinement, WinError> {
        let token = super::token::process_token_facts(self.process.as_handle())?;
        let job = match &self.job {
            Some(job) => job.facts_of(self.process.as_handle())?,
            // Closed (its tree was ended) or never made: it is in no job of ours.
            None => crate::wincfg::JobFacts {
                in_job: false,
                limit_flags: 0,
                active_process_limit: 0,
                ui_restrictions: Ok(0),
            },
        };
        let mut held = Vec::new();
        for &m in &policy.mitigations.0 {
            if super::mitigation::in_force_in(raw(self.process.as_handle()), m)? {
                held.push(crate::wincfg::mitigation_short(m).to_string());
            }
        }
        let mut seen = crate::wincfg::confinement(Some(&token), Some(&job), held);
        seen.process_dacl = super::acl::object_dacl_sddl(raw(self.process.as_handle())).ok();
        Ok(seen)
    }

    /// Whether process `pid` is in this child's job: the child itself or anything it started
    /// (a job holds the whole tree, and a process cannot leave it). `Ok(false)` once the job
    /// was closed or for a child started without one.
    pub fn job_holds(&self, pid: u32) -> Result<bool, WinError> {
        let Some(job) = &self.job else {
            return Ok(false);
        };
        // Windows takes PROCESS_QUERY_LIMITED_INFORMATION for IsProcessInJob; Wine wants the
        // full right, so that is asked for when the limited one is not enough. A process that
        // withholds both reads as an error, which the router counts as under the spawner:
        // refused, not admitted.
        let limited = open_process(pid, PROCESS_QUERY_LIMITED_INFORMATION)?;
        match job.facts_of(limited.as_handle()) {
            Ok(f) => Ok(f.in_job),
            Err(e) if e.code() == Some(ERROR_ACCESS_DENIED) => {
                let full = open_process(pid, PROCESS_QUERY_INFORMATION)?;
                Ok(job.facts_of(full.as_handle())?.in_job)
            }
            Err(e) => Err(e),
        }
    }

    /// Closes the job handle: with kill-on-close, the process tree ends. The process handle
    /// stays, to observe the end.
    pub fn close_job(&mut self) {
        self.job = None;
    }

    /// Ends the process tree now (the job, if still held; else the process).
    pub fn kill(&self) -> Result<(), WinError> {
        match &self.job {
            Some(job) => job.terminate(1),
            None => {
                // SAFETY: a valid process handle with PROCESS_TERMINATE (we created it).
                if unsafe { TerminateProcess(raw(self.process.as_handle()), 1) } == 0 {
                    return Err(last(MECH, "TerminateProcess"));
                }
                Ok(())
            }
        }
    }

    /// Waits up to `ms` milliseconds; `Some(exit code)` once the process has ended.
    pub fn wait_timeout(&self, ms: u32) -> Result<Option<u32>, WinError> {
        // SAFETY: a valid process handle with SYNCHRONIZE.
        match unsafe { WaitForSingleObject(raw(self.process.as_handle()), ms) } {
            WAIT_OBJECT_0 => {
                let mut code = 0;
                // SAFETY: as above; `code` receives the exit code.
                if unsafe { GetExitCodeProcess(raw(self.process.as_handle()), &mut code) } == 0 {
                    return Err(last(MECH, "GetExitCodeProcess"));
                }
                Ok(Some(code))
            }
            WAIT_TIMEOUT => Ok(None),
            _ => Err(last(MECH, "WaitForSingleObject")),
        }
    }
}

/// The variables named in `names` (compared case-insensitively, as Windows does) from this
/// process's environment, and nothing else. `SystemRoot` should be among them: Windows'
/// own DLLs (winsock among them) find the system directory through it.
pub fn env_from_allowlist(names: &[&str]) -> Vec<(OsString, OsString)> {
    std::env::vars_os()
        .filter(|(k, _)| {
            k.to_str()
                .is_some_and(|k| names.iter().any(|n| n.eq_ignore_ascii_case(k)))
        })
        .collect()
}

/// The `CREATE_UNICODE_ENVIRONMENT` block: `NAME=VALUE\0` sorted by upper-cased name (as
/// CreateProcess expects), then a final `\0`.
fn env_block(env: &[(OsString, OsString)]) -> Result<Vec<u16>, WinError> {
    let mut sorted: Vec<&(OsString, OsString)> = env.iter().collect();
    sorted.sort_by_key(|(k, _)| k.to_string_lossy().to_uppercase());
    let mut block = Vec::new();
    for (k, v) in sorted {
        let kw: Vec<u16> = k.encode_wide().collect();
        if kw.is_empty() || kw.contains(&('=' as u16)) || kw.contains(&0) {
            return Err(invalid(
                MECH,
                format!("environment name {k:?} is not valid"),
            ));
        }
        block.extend(kw);
        block.push('=' as u16);
        let vw: Vec<u16> = v.encode_wide().collect();
        if vw.contains(&0) {
            return Err(invalid(
                MECH,
                format!("environment value of {k:?} contains a NUL"),
            ));
        }
        block.extend(vw);
        block.push(0);
    }
    // An empty block still needs its two terminators.
    if block.is_empty() {
        block.push(0);
    }
    block.push(0);
    Ok(block)
}

/// Appends `arg` quoted the way `CommandLineToArgvW` and the C runtime split it back.
fn push_arg(out: &mut Vec<u16>, arg: &OsStr) {
    let w: Vec<u16> = arg.encode_wide().collect();
    let plain = !w.is_empty()
        && !w
            .iter()
            .any(|&c| c == ' ' as u16 || c == '\t' as u16 || c == '\n' as u16 || c == '"' as u16);
    if !out.is_empty() {
        out.push(' ' as u16);
    }
    if plain {
        out.extend(w);
        return;
    }
    out.push('"' as u16);
    let mut backslashes = 0;
    for c in w {
        if c == '\\' as u16 {
            backslashes += 1;
            continue;
        }
        if c == '"' as u16 {
            // Backslashes before a quote are doubled, and the quote escaped.
            out.extend(std::iter::repeat_n('\\' as u16, backslashes * 2 + 1));
        } else {
            out.extend(std::iter::repeat_n('\\' as u16, backslashes));
        }
        backslashes = 0;
        out.push(c);
    }
    // Backslashes before the closing quote are doubled.
    out.extend(std::iter::repeat_n('\\' as u16, backslashes * 2));
    out.push('"' as u16);
}

/// A `PROC_THREAD_ATTRIBUTE_LIST` that owns the values it points to, so they outlive every use;
/// deleted before they are freed.
struct AttrList {
    buf: Vec<u64>,
    handles: Box<[HANDLE]>,
    mitigation: Box<u64>,
    child_policy: Box<u32>,
}

impl AttrList {
    fn new(
        count: u32,
        handles: Vec<HANDLE>,
        mitigation: u64,
        child_policy: u32,
    ) -> Result<AttrList, WinError> {
        let mut size = 0usize;
        // SAFETY: a size query (null list); writes only `size`.
        unsafe { InitializeProcThreadAttributeList(std::ptr::null_mut(), count, 0, &mut size) };
        if size == 0 {
            return Err(last(MECH, "InitializeProcThreadAttributeList(size)"));
        }
        let mut list = AttrList {
            buf: vec![0u64; size.div_ceil(8)],
            handles: handles.into_boxed_slice(),
            mitigation: Box::new(mitigation),
            child_policy: Box::new(child_policy),
        };
        // SAFETY: `buf` holds `size` bytes, 8-aligned, as the size query asked.
        if unsafe { InitializeProcThreadAttributeList(list.ptr(), count, 0, &mut size) } == 0 {
            // Not initialised: make Drop skip the delete.
            list.buf.clear();
            return Err(last(MECH, "InitializeProcThreadAttributeList"));
        }
        Ok(list)
    }

    fn ptr(&mut self) -> *mut c_void {
        self.buf.as_mut_ptr().cast()
    }

    fn update(
        &mut self,
        attribute: u32,
        value: *const c_void,
        size: usize,
        call: &'static str,
    ) -> Result<(), WinError> {
        let list = self.ptr();
        // SAFETY: `list` is initialised; `value` points into a Box owned by `self`, which lives
        // (unmoved on the heap) until after the list is deleted in Drop.
        if unsafe {
            UpdateProcThreadAttribute(
                list,
                0,
                attribute as usize,
                value,
                size,
                std::ptr::null_mut(),
                std::ptr::null(),
            )
        } == 0
        {
            return Err(last(MECH, call));
        }
        Ok(())
    }
}

impl Drop for AttrList {
    fn drop(&mut self) {
        if !self.buf.is_empty() {
            let list = self.ptr();
            // SAFETY: initialised in `new` and deleted once, before the values it names are
            // freed (fields drop after this body).
            unsafe { DeleteProcThreadAttributeList(list) };
        }
    }
}

/// Marks the handles inheritable for the one CreateProcess call and clears the flag again on
/// drop, so no later spawn elsewhere (which may inherit every inheritable handle) leaks them.
struct InheritFor<'a>(Vec<BorrowedHandle<'a>>);

impl<'a> InheritFor<'a> {
    fn set(handles: &[BorrowedHandle<'a>]) -> Result<InheritFor<'a>, WinError> {
        let mut done = InheritFor(Vec::new());
        for h in handles {
            // SAFETY: a valid handle borrowed for the guard's lifetime.
            if unsafe { SetHandleInformation(raw(*h), HANDLE_FLAG_INHERIT, HANDLE_FLAG_INHERIT) }
                == 0
            {
                return Err(last(MECH, "SetHandleInformation(inherit)"));
            }
            done.0.push(*h);
        }
        Ok(done)
    }
}

impl Drop for InheritFor<'_> {
    fn drop(&mut self) {
        for h in &self.0 {
            // SAFETY: as in `set`; the borrow keeps the handle open.
            unsafe { SetHandleInformation(raw(*h), HANDLE_FLAG_INHERIT, 0) };
        }
    }
}

/// `OpenProcess(access, pid)`: what another process of the user gets when it asks for
/// `access` (the tests ask it of a helper, whose process descriptor should refuse it).
pub fn open_process(pid: u32, access: u32) -> Result<OwnedHandle, WinError> {
    // SAFETY: no handle is passed in; the returned one (or null) is taken by `owned`.
    let h = unsafe { OpenProcess(access, 0, pid) };
    owned(h, MECH, "OpenProcess")
}

/// A process the broker may end: a front it accepted, opened at accept (as a pidfd on Linux) so
/// a later kill cannot reach another process that took the pid.
pub struct PeerProcess(OwnedHandle);

impl PeerProcess {
    /// Opens `pid` to wait on and end it (`SYNCHRONIZE | PROCESS_TERMINATE`).
    pub fn open(pid: u32) -> Result<PeerProcess, WinError> {
        use windows_sys::Win32::System::Threading::{PROCESS_SYNCHRONIZE, PROCESS_TERMINATE};
        open_process(pid, PROCESS_SYNCHRONIZE | PROCESS_TERMINATE).map(PeerProcess)
    }

    /// Opens `pid` to wait on it only (`SYNCHRONIZE`: what a helper's descriptor grants the
    /// user's other processes); [`PeerProcess::kill`] then fails.
    pub fn watch(pid: u32) -> Result<PeerProcess, WinError> {
        use windows_sys::Win32::System::Threading::PROCESS_SYNCHRONIZE;
        open_process(pid, PROCESS_SYNCHRONIZE).map(PeerProcess)
    }

    /// Whether it still runs.
    pub fn running(&self) -> bool {
        // SAFETY: a valid process handle held by self; a zero timeout only polls.
        unsafe { WaitForSingleObject(raw(self.0.as_handle()), 0) == WAIT_TIMEOUT }
    }

    /// Ends it (exit code 1).
    pub fn kill(&self) -> Result<(), WinError> {
        // SAFETY: a valid process handle held by self, opened with PROCESS_TERMINATE.
        if unsafe { TerminateProcess(raw(self.0.as_handle()), 1) } == 0 {
            return Err(last(MECH, "TerminateProcess"));
        }
        Ok(())
    }
}

/// Starts `spec` with this process's own token and no job: the one process gatehouse starts
/// unconfined, the spawner, which needs the user's rights to make each helper's restricted
/// token and job (a restricted token only yields tokens restricted further). Only `spec`'s
/// handles are inherited. Returned with no job: it ends when its channel closes.
pub fn spawn_unconfined(spec: &SpawnSpec<'_>) -> Result<ConfinedChild, WinError> {
    if !spec.program.is_absolute() {
        return Err(invalid(
            MECH,
            format!("{} is not an absolute path", spec.program.display()),
        ));
    }
    let handles = spec.inherited();
    if handles.is_empty() {
        return Err(invalid(MECH, "a spawner with no channel is not started"));
    }
    let mut attrs = AttrList::new(1, handles.iter().map(|h| raw(*h)).collect(), 0, 0)?;
    let (p, n) = (
        attrs.handles.as_ptr().cast(),
        std::mem::size_of_val(&*attrs.handles),
    );
    attrs.update(
        PROC_THREAD_ATTRIBUTE_HANDLE_LIST,
        p,
        n,
        "UpdateProcThreadAttribute(HANDLE_LIST)",
    )?;
    let (app, mut cmdline) = spec.command_line()?;
    let env = env_block(&spec.env)?;
    let si = spec.startup_info(&mut attrs);
    let mut pi = PROCESS_INFORMATION::default();
    let inheritable = InheritFor::set(&handles)?;
    // SAFETY: as in `spawn`: every pointer is to a live, NUL-terminated buffer of this frame,
    // `si` and its attribute list outlive the call, `pi` receives two handles `owned` takes.
    let ok = unsafe {
        CreateProcessW(
            app.as_ptr(),
            cmdline.as_mut_ptr(),
            std::ptr::null(),
            std::ptr::null(),
            1,
            CREATE_UNICODE_ENVIRONMENT | EXTENDED_STARTUPINFO_PRESENT | CREATE_NO_WINDOW,
            env.as_ptr().cast(),
            std::ptr::null(),
            &si.StartupInfo,
            &mut pi,
        )
    };
    let created = if ok == 0 {
        Err(last(MECH, "CreateProcessW"))
    } else {
        Ok(())
    };
    drop(inheritable);
    drop(attrs);
    created?;
    let process = owned(pi.hProcess, MECH, "CreateProcessW(process)")?;
    drop(owned(pi.hThread, MECH, "CreateProcessW(thread)")?);
    Ok(ConfinedChild {
        process,
        pid: pi.dwProcessId,
        job: None,
        degraded: Vec::new(),
    })
}

/// Starts `spec` confined by `policy`. See the module docs for the order.
pub fn spawn(
    policy: &WindowsPolicy,
    spec: &SpawnSpec<'_>,
    opts: SpawnOptions,
) -> Result<ConfinedChild, WinError> {
    if !spec.program.is_absolute() {
        return Err(invalid(
            MECH,
            format!("{} is not an absolute path", spec.program.display()),
        ));
    }
    let capability = OwnedSid::parse(&policy.sid.0)?;
    let mut degraded_token = None;
    let mut token = super::token::create(&policy.token, &capability)?;
    let mut maker = "CreateRestrictedToken";
    // The profile's AppContainer, if it has one: a lowbox token made from the restricted one.
    let mut degraded_lowbox = None;
    if let Some(container) = &policy.token.app_container {
        let container = OwnedSid::parse(&container.0)?;
        match super::token::lowbox(token.as_handle(), &container, &capability) {
            Ok(lowbox) => (token, maker) = (lowbox, "CreateAppContainerToken"),
            Err(e) if opts.allow_degraded => {
                degraded_lowbox = Some(format!("not applied at spawn: {e}"))
            }
            Err(e) => return Err(e),
        }
    }
    // The token is read back before it is used: a system that hands back something other than
    // what was asked (Wine returns an unrestricted token) is caught here, not trusted.
    let built = super::token::token_facts(token.as_handle())?;
    let short = crate::wincfg::missing_from_token(&built, &policy.token, &policy.sid.0);
    if !short.is_empty() {
        let e = invalid(
            "restricted token",
            format!(
                "{maker} returned a token that is not what the policy asks: {}",
                short.join("; ")
            ),
        );
        if !opts.allow_degraded {
            return Err(e);
        }
        degraded_token = Some(format!("{e}"));
    }
    let (job, mut degraded) = Job::create(&policy.job, opts.allow_degraded)?;
    degraded.extend(degraded_lowbox);
    degraded.extend(degraded_token);

    let handles = spec.inherited();
    let mitigation = policy
        .mitigations
        .creation_bits()
        .map_err(|m| invalid("process mitigations", format!("unknown mitigation {m}")))?;
    // PROCESS_CREATION_CHILD_PROCESS_RESTRICTED
    let child_policy = if policy.mitigations.child_process_restricted() {
        1u32
    } else {
        0
    };
    let count = 1 + u32::from(!handles.is_empty()) + u32::from(child_policy != 0);
    let mut attrs = AttrList::new(
        count,
        handles.iter().map(|h| raw(*h)).collect(),
        mitigation,
        child_policy,
    )?;
    if !handles.is_empty() {
        let (p, n) = (
            attrs.handles.as_ptr().cast(),
            std::mem::size_of_val(&*attrs.handles),
        );
        attrs.update(
            PROC_THREAD_ATTRIBUTE_HANDLE_LIST,
            p,
            n,
            "UpdateProcThreadAttribute(HANDLE_LIST)",
        )?;
    }
    for (attr, value, size, call) in [
        (
            PROC_THREAD_ATTRIBUTE_MITIGATION_POLICY,
            (&*attrs.mitigation as *const u64).cast::<c_void>(),
            std::mem::size_of::<u64>(),
            "UpdateProcThreadAttribute(MITIGATION_POLICY)",
        ),
        (
            PROC_THREAD_ATTRIBUTE_CHILD_PROCESS_POLICY,
            (&*attrs.child_policy as *const u32).cast::<c_void>(),
            std::mem::size_of::<u32>(),
            "UpdateProcThreadAttribute(CHILD_PROCESS_POLICY)",
        ),
    ] {
        if attr == PROC_THREAD_ATTRIBUTE_CHILD_PROCESS_POLICY && child_policy == 0 {
            continue;
        }
        if let Err(e) = attrs.update(attr, value, size, call) {
            if !opts.allow_degraded {
                return Err(e);
            }
            degraded.push(format!("not applied at spawn: {e}"));
        }
    }

    let (app, mut cmdline) = spec.command_line()?;
    let env = env_block(&spec.env)?;
    let cwd = spec.cwd.map(|c| wide(MECH, c.as_os_str())).transpose()?;

    let si = spec.startup_info(&mut attrs);
    let mut pi = PROCESS_INFORMATION::default();
    // The process object's descriptor (who else may open it), when the policy names one.
    let sd = match policy.process_sddl {
        Some(template) => {
            let user = super::pipe_peer::current_user()?;
            Some(super::acl::OwnedSd::from_sddl(
                &crate::wincfg::process_sddl_for(template, &user),
            )?)
        }
        None => None,
    };
    let process_attrs = sd.as_ref().map(|sd| SECURITY_ATTRIBUTES {
        nLength: std::mem::size_of::<SECURITY_ATTRIBUTES>() as u32,
        lpSecurityDescriptor: sd.as_ptr(),
        bInheritHandle: 0,
    });
    let inheritable = InheritFor::set(&handles)?;
    // SAFETY: every pointer is to a live, NUL-terminated buffer owned by this frame (`app`,
    // `cmdline` which CreateProcess may modify in place, `env`, `cwd`), `si` and its attribute
    // list and `process_attrs` with the descriptor it points to outlive the call, and `pi`
    // receives two new handles that `owned` takes below.
    let ok = unsafe {
        CreateProcessAsUserW(
            raw(token.as_handle()),
            app.as_ptr(),
            cmdline.as_mut_ptr(),
            process_attrs
                .as_ref()
                .map_or(std::ptr::null(), |a| a as *const SECURITY_ATTRIBUTES),
            std::ptr::null(),
            i32::from(!handles.is_empty()),
            CREATE_SUSPENDED
                | CREATE_UNICODE_ENVIRONMENT
                | EXTENDED_STARTUPINFO_PRESENT
                | CREATE_NO_WINDOW,
            env.as_ptr().cast(),
            cwd.as_ref().map_or(std::ptr::null(), |c| c.as_ptr()),
            &si.StartupInfo,
            &mut pi,
        )
    };
    let created = if ok == 0 {
        Err(last(MECH, "CreateProcessAsUserW"))
    } else {
        Ok(())
    };
    drop(inheritable);
    drop(attrs);
    created?;
    let process = owned(pi.hProcess, MECH, "CreateProcessAsUserW(process)")?;
    let thread = owned(pi.hThread, MECH, "CreateProcessAsUserW(thread)")?;
    let abort = |e: WinError| {
        // SAFETY: the suspended process we just created; it has run nothing.
        unsafe { TerminateProcess(raw(process.as_handle()), 1) };
        e
    };
    job.assign(process.as_handle()).map_err(abort)?;
    // SAFETY: the suspended main thread of the process we created.
    if unsafe { ResumeThread(raw(thread.as_handle())) } == u32::MAX {
        return Err(abort(last(MECH, "ResumeThread")));
    }
    Ok(ConfinedChild {
        process,
        pid: pi.dwProcessId,
        job: Some(job),
        degraded,
    })
}

static CHANNEL_TAKEN: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
static ROUTER_TAKEN: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Adopts the channel handle a confined process was spawned with, whose value the spawner
/// passed on its command line (a handle in the handle list keeps its value in the child). Fails
/// if it was taken already or the value names no open handle (a helper started by hand).
pub fn take_inherited_handle(value: &str) -> Result<OwnedHandle, WinError> {
    adopt_inherited(value, &CHANNEL_TAKEN, "the inherited channel")
}

/// The spawner's handle to the router's process (`PROCESS_DUP_HANDLE` only), inherited as
/// [`spawn_unconfined`] passes it; adopted once, like the channel.
pub fn take_inherited_router(value: &str) -> Result<OwnedHandle, WinError> {
    adopt_inherited(value, &ROUTER_TAKEN, "the inherited router handle")
}

fn adopt_inherited(
    value: &str,
    taken: &std::sync::atomic::AtomicBool,
    what: &str,
) -> Result<OwnedHandle, WinError> {
    use windows_sys::Win32::Foundation::GetHandleInformation;
    let v: usize = value
        .parse()
        .map_err(|_| invalid(MECH, format!("{value:?} is not a handle value")))?;
    let h = v as HANDLE;
    let mut flags = 0;
    // SAFETY: GetHandleInformation only reads the handle table; an invalid value fails with
    // ERROR_INVALID_HANDLE and touches nothing.
    if unsafe { GetHandleInformation(h, &mut flags) } == 0 {
        return Err(last(MECH, "GetHandleInformation(inherited channel)"));
    }
    // An inherited handle keeps its inherit flag in the child; a value naming one of this
    // process's own handles (a helper started by hand with a guessed number) most likely lacks
    // it, and is refused rather than adopted twice.
    if flags & HANDLE_FLAG_INHERIT == 0 {
        return Err(invalid(
            MECH,
            format!("handle {value} was not inherited: helpers are started by the gatehouse spawner, not by hand"),
        ));
    }
    // Checked after the refusals above, so a wrong value does not use up the one adoption.
    if taken.swap(true, std::sync::atomic::Ordering::SeqCst) {
        return Err(invalid(MECH, format!("{what} was already taken")));
    }
    // Not passed on: whatever this process starts later (the exec helper's commands) must not
    // inherit the broker channel.
    // SAFETY: as above, on the same open handle; only its inherit flag changes.
    if unsafe { SetHandleInformation(h, HANDLE_FLAG_INHERIT, 0) } == 0 {
        return Err(last(MECH, "SetHandleInformation(channel not inheritable)"));
    }
    // SAFETY: the value names an open handle (checked above) that this process inherited and
    // nothing else in it owns; the flag above hands it out once.
    Ok(unsafe { std::os::windows::io::FromRawHandle::from_raw_handle(h) })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quoted(args: &[&str]) -> String {
        let mut out = Vec::new();
        for a in args {
            push_arg(&mut out, OsStr::new(a));
        }
        String::from_utf16(&out).unwrap()
    }

    #[test]
    fn arguments_are_quoted_as_the_c_runtime_splits_them() {
        assert_eq!(
            quoted(&["C:\\a b\\x.exe", "plain"]),
            "\"C:\\a b\\x.exe\" plain"
        );
        assert_eq!(quoted(&["", "a\"b"]), "\"\" \"a\\\"b\"");
        assert_eq!(quoted(&["tail\\ x\\"]), "\"tail\\ x\\\\\"");
        assert_eq!(quoted(&["a\\\\\"b"]), "\"a\\\\\\\\\\\"b\"");
    }

    #[test]
    fn the_environment_block_is_sorted_terminated_and_refuses_bad_names() {
        let e = |k: &str, v: &str| (OsString::from(k), OsString::from(v));
        let b = env_block(&[e("b", "2"), e("A", "1")]).unwrap();
        assert_eq!(String::from_utf16(&b).unwrap(), "A=1\0b=2\0\0");
        assert_eq!(env_block(&[]).unwrap(), vec![0, 0]);
        assert!(env_block(&[e("A=B", "1")]).is_err());
        assert!(env_block(&[e("", "1")]).is_err());
    }
}
