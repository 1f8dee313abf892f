//! A console's input echo, off while a secret is typed (`gatehouse secret set`): the Windows
//! counterpart of clearing termios' ECHO and ISIG.

use super::ffi::{last, raw, WinError};
use std::os::windows::io::BorrowedHandle;
use windows_sys::Win32::System::Console::{
    GetConsoleMode, SetConsoleMode, CONSOLE_MODE, ENABLE_ECHO_INPUT, ENABLE_LINE_INPUT,
    ENABLE_PROCESSED_INPUT,
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
