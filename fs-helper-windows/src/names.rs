//! Windows paths as the helper reads them: a drive and its components, and what one component
//! may be.

/// An absolute local path: a drive (`C:`, upper case) and its components.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WinPath {
    pub drive: String,
    pub comps: Vec<String>,
}

impl WinPath {
    /// `C:\a\b`, `C:/a/b` or the verbatim `\\?\C:\a\b` (what `canonicalize` gives, and what
    /// the broker passes). Empty components and `.` are dropped; `..` is kept for the caller.
    /// `None` for anything else: a relative path, a share (`\\server\...`), a device path.
    pub fn parse(s: &str) -> Option<WinPath> {
        let rest = s.strip_prefix(r"\\?\").unwrap_or(s);
        let b = rest.as_bytes();
        if b.len() < 3 || !b[0].is_ascii_alphabetic() || b[1] != b':' || !is_sep(b[2]) {
            return None;
        }
        Some(WinPath {
            drive: rest[..2].to_ascii_uppercase(),
            comps: rest[3..]
                .split(|c: char| c.is_ascii() && is_sep(c as u8))
                .filter(|c| !c.is_empty() && *c != ".")
                .map(String::from)
                .collect(),
        })
    }

    /// The verbatim form, `\\?\C:\a\b`: the form the broker's grant roots have.
    pub fn verbatim(&self) -> String {
        format!(r"\\?\{}\{}", self.drive, self.comps.join(r"\"))
    }

    /// Whether `self` is `root` or lies beneath it, compared as Windows compares names (case
    /// folded); the components after the root if so.
    pub fn under<'a>(&'a self, root: &WinPath) -> Option<&'a [String]> {
        let same = self.drive == root.drive
            && self.comps.len() >= root.comps.len()
            && (self.comps.iter().zip(&root.comps)).all(|(a, b)| fold(a) == fold(b));
        same.then(|| &self.comps[root.comps.len()..])
    }
}

pub fn is_sep(b: u8) -> bool {
    b == b'\\' || b == b'/'
}

pub fn fold(s: &str) -> Vec<u8> {
    ipc_schema::protected::fold(s.as_bytes())
}

/// Why `c` cannot be one component the helper opens, if it cannot: the kernel is given it as
/// written, so it must be one plain name. Refused: `.` and `..` (folded before), a separator, a
/// `:` (an alternate data stream, `file:stream`), the characters Win32 refuses in names,
/// control characters, a trailing dot or space (Win32 strips them, so the name would be
/// another file's to every other program), more than 255 UTF-16 units, a DOS device name
/// (`CON`, `NUL.txt`, `COM1`: a device, not this file, to every Win32 program).
pub fn plain_name(c: &str) -> Result<(), String> {
    const NOT_IN_NAMES: &[char] = &['\\', '/', ':', '*', '?', '"', '<', '>', '|'];
    if c.is_empty() || c == "." || c == ".." {
        return Err(format!("{c:?} is not a name"));
    }
    if let Some(bad) = c
        .chars()
        .find(|ch| NOT_IN_NAMES.contains(ch) || ch.is_control())
    {
        return Err(format!(
            "{c:?}: a Windows name cannot hold {bad:?}{}",
            if bad == ':' {
                " (a `:` names an alternate data stream)"
            } else {
                ""
            }
        ));
    }
    if c.ends_with('.') || c.ends_with(' ') {
        return Err(format!(
            "{c:?}: a name ending in a dot or space is another name to Windows programs"
        ));
    }
    if c.encode_utf16().count() > 255 {
        return Err(format!("{c:?}: longer than 255 UTF-16 units"));
    }
    // `CON`, `nul.txt`, `COM1.log`: a device to every Win32 program, whatever follows the dot.
    let stem = c
        .split('.')
        .next()
        .unwrap_or(c)
        .trim_end()
        .to_ascii_uppercase();
    let numbered = |p: &str| {
        stem.strip_prefix(p)
            .is_some_and(|n| n.len() == 1 && n.as_bytes()[0].is_ascii_digit())
    };
    if ["CON", "PRN", "AUX", "NUL", "CONIN$", "CONOUT$"].contains(&stem.as_str())
        || numbered("COM")
        || numbered("LPT")
    {
        return Err(format!("{c:?}: a Windows device name"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drive_paths_in_every_spelling_and_nothing_else() {
        let p = WinPath::parse(r"\\?\c:\Users\me\proj").unwrap();
        assert_eq!(p.drive, "C:");
        assert_eq!(p.comps, ["Users", "me", "proj"]);
        assert_eq!(p.verbatim(), r"\\?\C:\Users\me\proj");
        assert_eq!(WinPath::parse(r"C:/Users//me/./proj").unwrap(), p);
        assert_eq!(WinPath::parse(r"C:\").unwrap().comps.len(), 0);
        for no in [
            r"\\server\share\x",
            r"Users\me",
            r"\Users",
            r"\\.\C:\x",
            "C:x",
            "",
        ] {
            assert_eq!(WinPath::parse(no), None, "{no}");
        }
        let kept = WinPath::parse(r"C:\a\..\b").unwrap();
        assert_eq!(kept.comps, ["a", "..", "b"]);
    }

    #[test]
    fn under_compares_names_as_windows_does() {
        let root = WinPath::parse(r"C:\Users\Me\Proj").unwrap();
        let p = WinPath::parse(r"\\?\C:\users\me\PROJ\src\a.rs").unwrap();
        assert_eq!(p.under(&root).unwrap(), ["src", "a.rs"]);
        assert_eq!(root.under(&root).unwrap().len(), 0);
        assert!(WinPath::parse(r"C:\Users\Me\Project")
            .unwrap()
            .under(&root)
            .is_none());
        assert!(WinPath::parse(r"D:\Users\Me\Proj")
            .unwrap()
            .under(&root)
            .is_none());
    }

    #[test]
    fn only_plain_names_reach_the_kernel() {
        for ok in ["a.txt", ".env", "naïve", "x y", "CONX"] {
            assert_eq!(plain_name(ok), Ok(()), "{ok}");
        }
        for bad in [
            "",
            ".",
            "..",
            "a\\b",
            "a/b",
            "file:stream",
            "a*",
            "q?",
            "t\u{1}",
            "end.",
            "end ",
        ] {
            assert!(plain_name(bad).is_err(), "{bad:?}");
        }
        assert!(plain_name("f:x")
            .unwrap_err()
            .contains("alternate data stream"));
        assert!(plain_name(&"a".repeat(256)).is_err());
        for device in ["CON", "nul", "nul.txt", "Com1.log", "LPT9", "aux .c"] {
            assert!(
                plain_name(device).unwrap_err().contains("device"),
                "{device}"
            );
        }
        for ok in ["CONSOLE", "com10", "lpt", "null.txt", "con_x"] {
            assert_eq!(plain_name(ok), Ok(()), "{ok}");
        }
    }
}
