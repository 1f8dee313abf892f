//! A console's input echo, off while a secret is typed (`gatehouse secret set`): the Windows
//! counterpart of clearing termios' ECHO and ISIG; and the console's stop events, the
//! counterpart of SIGINT, SIGTERM and SIGHUP.

use super::ffi::{invalid, last, raw, WinError};
use std::os::windows::io::BorrowedHandle;
use windows_sys::Win32::System::Console::{
    GetConsoleMode, SetConsoleCtrlHandler, SetConsoleMode, CONSOLE_MODE, CTRL_BREAK_EVENT,
    CTRL_CLOSE_EVENT, CTRL_C_EVENT, ENABLE_ECHO_INPUT, ENABLE_LINE_INPUT, ENABLE_PROCESSED_INPUT,
};

const MECH: &str = "console";

/// Echo and Ctrl-C processing off on a console input handle until dropped, when the mode it had
/// is put back. Lines are still read whole (line input stays on), and Ctrl-C arrives as the byte
/// 3, which the reader takes as "cancel" (the handler would end the process with the echo off).
pub struct ConsoleEchoOff<'a> {
    handle: BorrowedHandle<'a>,
    saved: CONSOLE_MODE,
}

impl<'a> ConsoleEchoOff<'a> {
    pub fn new(handle: BorrowedHandle<'a>) -> Result<ConsoleEchoOff<'a>, WinError> {
        let mut saved: CONSOLE_MODE = 0;
        // SAFETY: a handle borrowed for 'a; `saved` receives the mode.
        if unsafe { GetConsoleMode(raw(handle), &mut saved) } == 0 {
            return Err(last(MECH, "GetConsoleMode"));
        }
        let quiet = (saved & !(ENABLE_ECHO_INPUT | ENABLE_PROCESSED_INPUT)) | ENABLE_LINE_INPUT;
        // SAFETY: as above; the mode is a combination of documented input flags.
        if unsafe { SetConsoleMode(raw(handle), quiet) } == 0 {
            return Err(last(MECH, "SetConsoleMode"));
        }
        Ok(ConsoleEchoOff { handle, saved })
    }
}

impl Drop for ConsoleEchoOff<'_> {
    fn drop(&mut self) {
        // SAFETY: the handle is still borrowed; the mode is the one read at the start.
        unsafe { SetConsoleMode(raw(self.handle), self.saved) };
    }
}

/// A console event that would end this process: Ctrl-C, Ctrl-Break, or the console window
/// closing (the others, logoff and shutdown, reach services only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConsoleStop {
    CtrlC,
    CtrlBreak,
    Close,
}

static STOPS: std::sync::OnceLock<std::sync::Mutex<std::sync::mpsc::Sender<ConsoleStop>>> =
    std::sync::OnceLock::new();

/// The console's stop events, each sent on the returned channel instead of ending this process:
/// the counterpart of blocking SIGINT, SIGTERM and SIGHUP and reading them from a signalfd
/// (`gatehouse sandbox` asks the broker to stop its command). Once per process. A closing
/// window still ends the process when the handler returns (Windows allows no more); what
/// depended on it must not need this process (the broker stops the command of a connection
/// that closes).
pub fn console_stops() -> Result<std::sync::mpsc::Receiver<ConsoleStop>, WinError> {
    let (tx, rx) = std::sync::mpsc::channel();
    if STOPS.set(std::sync::Mutex::new(tx)).is_err() {
        return Err(invalid(MECH, "the console's stop events are already taken"));
    }
    // SAFETY: `on_stop` is a plain function that touches only the static channel, which is set
    // above and never unset; registering a handler has no other effect on this process.
    if unsafe { SetConsoleCtrlHandler(Some(on_stop), 1) } == 0 {
        return Err(last(MECH, "SetConsoleCtrlHandler"));
    }
    Ok(rx)
}

/// Runs on a thread Windows starts for each event. TRUE: handled here, the process goes on.
unsafe extern "system" fn on_stop(event: u32) -> i32 {
    let stop = match event {
        CTRL_C_EVENT => ConsoleStop::CtrlC,
        CTRL_BREAK_EVENT => ConsoleStop::CtrlBreak,
        CTRL_CLOSE_EVENT => ConsoleStop::Close,
        _ => return 0, // the next handler (the default one ends the process)
    };
    if let Some(tx) = STOPS.get() {
        if let Ok(tx) = tx.lock() {
            let _ = tx.send(stop);
        }
    }
    1
}
