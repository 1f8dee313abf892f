//! The demo's narration: short lines, coloured on a terminal (not with NO_COLOR or --json).

use ipc_schema::inert::escaped;
use std::io::Write;

pub(super) struct Narrator {
    pub(super) on: bool,
    pub(super) color: bool,
}

impl Narrator {
    pub(super) fn paint(&self, code: &str, s: &str) -> String {
        if self.color {
            format!("\x1b[{code}m{s}\x1b[0m")
        } else {
            s.to_string()
        }
    }
    pub(super) fn line(&self, s: &str) {
        if self.on {
            println!("{s}");
            let _ = std::io::stdout().flush();
        }
    }
    pub(super) fn dim(&self, s: &str) -> String {
        self.paint("2", s)
    }
    pub(super) fn bold(&self, s: &str) -> String {
        self.paint("1", s)
    }
    pub(super) fn green(&self, s: &str) -> String {
        self.paint("32", s)
    }
    pub(super) fn red(&self, s: &str) -> String {
        self.paint("31", s)
    }
    pub(super) fn yellow(&self, s: &str) -> String {
        self.paint("33", s)
    }
    pub(super) fn cyan(&self, s: &str) -> String {
        self.paint("36", s)
    }
}

/// The first line of `text`, inert, at most `max` characters.
pub(super) fn first_line(text: &str, max: usize) -> String {
    let l = escaped(text.lines().next().unwrap_or(""));
    if l.chars().count() > max {
        format!("{}…", l.chars().take(max).collect::<String>())
    } else {
        l
    }
}
