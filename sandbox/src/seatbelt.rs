//! macOS Seatbelt profiles (SBPL) generated from the same profile data as the Linux lockdown:
//! [`Profile`] for the helpers, [`CommandSpec`] (grants, protected paths, network) for one
//! command of the exec helper. Pure text generation, compiled and unit-tested on every OS; the
//! applier (`sandbox_init`, `sandbox-exec -p`) is in `macos.rs`, macOS only.
//!
//! Shape, as Codex and sandbox-runtime write theirs: `(version 1)`, `(deny default)`, explicit
//! allows, then the protected paths denied. In SBPL the last rule that matches an operation
//! decides it, so the denies come after every allow they must override (the `deny` after a
//! broader `allow (subpath ...)` wins for paths under both).
//!
//! Paths are taken as given (absolute, already resolved: on macOS `/tmp` and `/var` are links
//! into `/private` and Seatbelt matches resolved paths); the applier resolves them. A path that
//! is not UTF-8, not absolute, or holds a NUL is refused with [`SbplError`].

use crate::{FsProfile, Profile};
use ipc_schema::exec::GrantAccess;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// A profile could not be generated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SbplError {
    #[error("path {0:?} is not UTF-8, and SBPL string literals are UTF-8")]
    NotUtf8(PathBuf),
    #[error("path {0:?} holds a NUL byte")]
    Nul(PathBuf),
    #[error("path {0:?} is not absolute")]
    NotAbsolute(PathBuf),
    #[error("the secrets profile needs the home directory (for ~/Library/Keychains)")]
    NoHome,
    /// A grant's exclude glob that [`exclude_regex`] does not express.
    #[error("the exclude glob {0:?} has a form the profile cannot express")]
    Glob(String),
    /// The exec helper takes no profile: macOS refuses `sandbox_apply` in a sandboxed process
    /// (forbidden-sandbox-reinit), and each command the helper starts needs its own.
    #[error("the exec helper runs without a Seatbelt profile of its own: macOS refuses a sandbox inside a sandbox (forbidden-sandbox-reinit), and each command it starts gets its own through sandbox-exec")]
    NotNestable,
}

/// Where a command's network goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommandNetwork {
    /// No network at all.
    None,
    /// Only the egress proxy on the loopback, at this port.
    LoopbackProxy { port: u16 },
}

/// What one command of the exec helper may do: its grants, the protected paths inside them
/// (the exec sandbox's masks and `.git` internals, computed by the caller), its network.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandSpec {
    pub grants: Vec<(PathBuf, GrantAccess)>,
    /// Never read nor written, even inside a grant.
    pub no_access: Vec<PathBuf>,
    /// Read but never written (a `.git`'s hooks and config in a writable grant).
    pub no_write: Vec<PathBuf>,
    pub network: CommandNetwork,
    /// Files whose names say they hold secrets (`ipc_schema::protected::SENSITIVE`) neither
    /// read nor written, wherever they are (the grant's `hide.sensitive`).
    pub hide_sensitive: bool,
    /// The grant's exclude globs (`ipc_schema::grant_glob`), relative to the first grant's
    /// root: what matches, and everything beneath it, neither read nor written. Each must be one
    /// [`exclude_regex`] expresses (the caller names the others as a gap).
    pub hide_globs: Vec<String>,
    /// The sandbox's own directory (an agent's or a third-party server's state directory):
    /// read and written. It lies inside gatehouse's data directory, which `no_access` denies,
    /// so its allow comes after the denies (the protected table's places inside it stay
    /// protected: their rules come later still).
    pub own_dir: Option<PathBuf>,
    /// Unix sockets the command may connect to, by path (an agent's gateway socket).
    pub sockets: Vec<PathBuf>,
}

/// The system directories a command reads on macOS (its programs, libraries, frameworks and
/// configuration): what `gatehouse run` needs not grant for a program found there.
pub const SYSTEM_DIRS: &[&str] = &[
    "/bin",
    "/usr",
    "/System",
    "/Library/Developer",
    "/opt/homebrew",
    "/private/etc",
];

/// What any program needs of the system to start and run under a command profile, each rule
/// with why: the restricted-read defaults Codex ships for macOS (its
/// `seatbelt_platform_defaults.sbpl`, the field's record of what a confined program touches),
/// less what a command here does not get: the shared `/tmp` (its temporary directory is the
/// per-user one), a terminal (stdin is closed, the output goes to pipes), `/Applications`,
/// `master.passwd`, audio, analytics and the other agents a command-line program does not
/// need.
const PLATFORM: &str =
    "; the system, as any program needs it (reads of the system directories are above)
; getcwd and path walks start at the root; /etc, /tmp and /var are symlinks to resolve
(allow file-read* (literal \"/\"))
(allow file-read-metadata (literal \"/etc\") (literal \"/tmp\") (literal \"/var\"))
(allow file-read-metadata (literal \"/dev\"))
; the time zone
(allow file-read* (subpath \"/private/var/db/timezone\"))
; the null and zero devices, randomness, a process's own descriptors as /dev/fd/N
(allow file-read* file-write-data (literal \"/dev/null\") (literal \"/dev/zero\"))
(allow file-ioctl (literal \"/dev/null\"))
(allow file-read* (literal \"/dev/random\") (literal \"/dev/urandom\"))
(allow file-read-data file-write-data (subpath \"/dev/fd\"))
; its own temporary directory and caches (TMPDIR, under /var/folders; each user's is 0700)
(allow file-read* file-write* (subpath \"/private/var/folders\"))
; CoreFoundation's preferences, read only; Python multiprocessing's semaphores
(allow user-preference-read)
(allow ipc-posix-sem)
; power management, which language runtimes query at start
(allow iokit-open (iokit-registry-entry-class \"RootDomainUserClient\"))
(allow mach-lookup
  ; user and group lookups (getpwuid, getgrouplist)
  (global-name \"com.apple.system.opendirectoryd.libinfo\")
  (global-name \"com.apple.system.opendirectoryd.membership\")
  (global-name \"com.apple.system.DirectoryService.libinfo_v1\")
  ; the per-user temporary directory (confstr _CS_DARWIN_USER_TEMP_DIR)
  (global-name \"com.apple.bsd.dirhelper\")
  ; preferences, read through cfprefsd
  (global-name \"com.apple.cfprefsd.agent\")
  (global-name \"com.apple.cfprefsd.daemon\")
  ; os_log and syslog
  (global-name \"com.apple.logd\")
  (global-name \"com.apple.system.logger\")
  (global-name \"com.apple.diagnosticd\")
  ; certificate checks of the Security framework (TLS in curl, git, Python's ssl on macOS)
  (global-name \"com.apple.trustd\")
  (global-name \"com.apple.trustd.agent\")
  ; notify(3), through which libc learns of time zone and resolver configuration changes
  (global-name \"com.apple.system.notification_center\")
  (global-name \"com.apple.PowerManagement.control\"))
(allow ipc-posix-shm-read* (ipc-posix-name \"apple.shm.notification_center\"))
";

/// An SBPL string literal for `path`: double quotes, with `"` and `\` escaped by a backslash.
pub fn sbpl_string(path: &Path) -> Result<String, SbplError> {
    let s = path
        .to_str()
        .ok_or_else(|| SbplError::NotUtf8(path.to_path_buf()))?;
    if s.contains('\0') {
        return Err(SbplError::Nul(path.to_path_buf()));
    }
    if !path.is_absolute() && !s.starts_with('/') {
        return Err(SbplError::NotAbsolute(path.to_path_buf()));
    }
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    Ok(out)
}

/// Every profile starts here: deny everything, then what any running Rust program needs (its
/// own signals, sysctls such as hw.ncpu). I/O on descriptors already held needs no rule.
const COMMON: &str = "(version 1)
(deny default)
(allow signal (target self))
(allow sysctl-read)
";

/// The SBPL of a helper `profile`. `home` is needed by the secrets profile only.
pub fn helper_profile(profile: &Profile, home: Option<&Path>) -> Result<String, SbplError> {
    let mut s = format!("; gatehouse {} profile\n{COMMON}", profile.name());
    match profile {
        Profile::Fs(grants) | Profile::Broker(grants) => fs_rules(&mut s, grants)?,
        Profile::Net => s.push_str(
            "; fetches, the proxy's upstream connections and DNS over UDP: the one profile with network
(allow system-socket)
(allow network-outbound (remote ip))
(allow network-bind (local ip))
",
        ),
        Profile::Exec => return Err(SbplError::NotNestable),
        Profile::Secrets(_) => {
            let home = home.ok_or(SbplError::NoHome)?;
            // Joined as text with '/': SBPL names macOS paths whatever OS generates the profile
            // (the golden tests run this generator on Windows too, where `Path::join` adds '\\').
            let home = home.to_str().ok_or_else(|| SbplError::NotUtf8(home.to_path_buf()))?;
            let keychains = sbpl_string(Path::new(&format!(
                "{}/Library/Keychains",
                home.trim_end_matches('/')
            )))?;
            writeln!(
                s,
                "; the login keychain, through the Security framework's daemons
(allow mach-lookup
  (global-name \"com.apple.SecurityServer\")
  (global-name \"com.apple.securityd.xpc\")
  (global-name \"com.apple.security.agent\"))
(allow file-read* file-write* (subpath {keychains}))
(allow ipc-posix-shm-read-data ipc-posix-shm-write-data
  (ipc-posix-name \"com.apple.AppleDatabaseChanged\"))"
            )
            .expect("writing to a String");
        }
        Profile::Ui => s.push_str(
            "; the terminal the console runs in
(allow file-ioctl (regex #\"^/dev/tty\"))
(allow file-read-data file-write-data (regex #\"^/dev/tty\"))
",
        ),
        Profile::Gateway | Profile::Servers => {
            s.push_str("; nothing beyond the descriptors it holds\n")
        }
    }
    Ok(s)
}

fn fs_rules(s: &mut String, grants: &FsProfile) -> Result<(), SbplError> {
    let mut parents = Vec::new();
    for (roots, rule) in [
        (&grants.read_only, "(allow file-read*"),
        (&grants.read_write, "(allow file-read* file-write*"),
    ] {
        for root in roots {
            writeln!(s, "{rule} (subpath {}))", sbpl_string(root)?).expect("String");
            parents.extend(root.ancestors().skip(1).map(Path::to_path_buf));
        }
    }
    metadata_of(s, parents)
}

/// Resolving a path needs the metadata of every directory above it.
fn metadata_of(s: &mut String, mut parents: Vec<PathBuf>) -> Result<(), SbplError> {
    parents.sort();
    parents.dedup();
    for p in parents {
        writeln!(
            s,
            "(allow file-read-metadata (literal {}))",
            sbpl_string(&p)?
        )
        .expect("String");
    }
    Ok(())
}

/// The SBPL of one command (for `sandbox-exec -p`): the system read-only and executable, the
/// grants, the temporary directories, the network the spec names; then the protected paths
/// denied, last so that they win over the grants containing them.
pub fn command_profile(spec: &CommandSpec) -> Result<String, SbplError> {
    let mut s = format!("; gatehouse command profile\n{COMMON}");
    let system: Vec<String> = SYSTEM_DIRS
        .iter()
        .map(|d| format!("(subpath \"{d}\")"))
        .collect();
    writeln!(
        s,
        "(allow process-fork)
(allow process-exec (subpath \"/bin\") (subpath \"/usr\") (subpath \"/opt/homebrew\"))
(allow process-info* (target same-sandbox))
(allow signal (target same-sandbox))
; the system directories: read, and the loader maps their libraries
(allow file-read* file-map-executable {})",
        system.join(" ")
    )
    .expect("String");
    s.push_str(PLATFORM);
    s.push_str("; grants\n");
    let mut parents = Vec::new();
    for (path, access) in &spec.grants {
        let p = sbpl_string(path)?;
        match access {
            GrantAccess::Read => writeln!(s, "(allow file-read* (subpath {p}))"),
            GrantAccess::ReadWrite => {
                writeln!(s, "(allow file-read* file-write* (subpath {p}))")
            }
        }
        .expect("String");
        // Commands in a granted tree run their own scripts, binaries and libraries.
        writeln!(s, "(allow process-exec file-map-executable (subpath {p}))").expect("String");
        parents.extend(path.ancestors().skip(1).map(Path::to_path_buf));
    }
    metadata_of(&mut s, parents)?;
    match spec.network {
        CommandNetwork::None => s.push_str("; network: none\n"),
        CommandNetwork::LoopbackProxy { port } => writeln!(
            s,
            "; network: only the egress proxy on the loopback
(allow network-outbound (remote ip \"localhost:{port}\"))"
        )
        .expect("String"),
    }
    if !spec.no_access.is_empty() || !spec.no_write.is_empty() {
        s.push_str("; protected paths, after the grants: the last matching rule wins\n");
    }
    for p in &spec.no_access {
        let p = sbpl_string(p)?;
        writeln!(s, "(deny file-read* file-write* (subpath {p}))").expect("String");
        writeln!(s, "(deny process-exec (subpath {p}))").expect("String");
    }
    for p in &spec.no_write {
        writeln!(s, "(deny file-write* (subpath {}))", sbpl_string(p)?).expect("String");
    }
    if let Some(own) = &spec.own_dir {
        let own = sbpl_string(own)?;
        writeln!(
            s,
            "; the sandbox's own directory, inside gatehouse's data directory: after its deny
(allow file-read* file-write* (subpath {own}))
(allow process-exec file-map-executable (subpath {own}))"
        )
        .expect("String");
        let parents = spec.own_dir.iter().flat_map(|d| d.ancestors().skip(1));
        metadata_of(&mut s, parents.map(Path::to_path_buf).collect())?;
    }
    for sock in &spec.sockets {
        let sock = sbpl_string(sock)?;
        writeln!(
            s,
            "(allow network-outbound (remote unix-socket (path-literal {sock})))"
        )
        .expect("String");
    }
    protected_table(&mut s);
    if let (Some((root, _)), false) = (spec.grants.first(), spec.hide_globs.is_empty()) {
        let root = root
            .to_str()
            .ok_or_else(|| SbplError::NotUtf8(root.to_path_buf()))?;
        s.push_str("; the grant's exclude globs, and what is beneath what they match\n");
        for g in &spec.hide_globs {
            let re = exclude_regex(root, g).ok_or_else(|| SbplError::Glob(g.clone()))?;
            writeln!(s, "(deny file-read* file-write* (regex #\"{re}\"))").expect("String");
        }
    }
    if spec.hide_sensitive {
        s.push_str(
            "; files whose names say they hold secrets (ipc_schema::protected::SENSITIVE)\n",
        );
        for (name, why) in ipc_schema::protected::SENSITIVE {
            let re = format!("/{}$", component_regex(name));
            writeln!(s, "(deny file-read* file-write* (regex #\"{re}\")) ; {why}").expect("String");
        }
    }
    Ok(s)
}

/// The protected table (`ipc_schema::protected`) as SBPL, after every allow: each rule's place
/// anywhere on the path (the table's own reading: consecutive components, any depth),
/// case-insensitively (APFS is, by default), with what is under it; a `NoAccess` place neither
/// read, written nor run, a `NoWrite` one not written; and a `.git` directory's hooks and
/// configs at any depth below it (`GIT_INTERNAL`, nested repositories and submodules too) not
/// written (read: the command's own `git` reads its config). So a command cannot plant a hook
/// the user's own `git` runs, in a repository that exists or one it makes (`git init` and
/// `git clone` into a writable grant fail), nor read a key that happens to lie in its grant.
fn protected_table(s: &mut String) {
    use ipc_schema::protected::{Guard, GIT_INTERNAL, RULES};
    s.push_str("; the protected table (ipc_schema::protected), anywhere, case-insensitively\n");
    for r in RULES {
        let re = format!(
            "/{}(/|$)",
            r.path
                .iter()
                .map(|c| component_regex(c))
                .collect::<Vec<_>>()
                .join("/")
        );
        match r.guard {
            Guard::NoAccess => writeln!(
                s,
                "(deny file-read* file-write* (regex #\"{re}\")) ; {}\n(deny process-exec (regex #\"{re}\"))",
                r.why
            ),
            Guard::NoWrite => writeln!(s, "(deny file-write* (regex #\"{re}\")) ; {}", r.why),
        }
        .expect("String");
    }
    let internal: Vec<String> = GIT_INTERNAL.iter().map(|c| component_regex(c)).collect();
    let re = format!(
        "/{}/(.*/)?({})(/|$)",
        component_regex(".git"),
        internal.join("|")
    );
    writeln!(
        s,
        "(deny file-write* (regex #\"{re}\")) ; git hooks and config run code"
    )
    .expect("String");
}

/// A grant's exclude glob (`ipc_schema::grant_glob`'s syntax: `*` and `?` within a component,
/// `**` as a whole component across any number, `[...]` classes, `{a,b}` alternatives, `\`
/// escapes) as a regex matching it relative to `root`, and everything beneath a match (an
/// exclude excludes what lies under it); letters outside classes in any case (APFS is
/// case-insensitive by default; classes are copied as written). `None` for what this does not
/// express (`**` inside a component, an unclosed class or brace, a class with `/` or `\`, a
/// `"` or a control character in the glob or the root).
pub fn exclude_regex(root: &str, glob: &str) -> Option<String> {
    // A `"` would end SBPL's raw string and let the rest be read as rules.
    let unsafe_char = |ch: char| ch == '"' || ch.is_control();
    if root.chars().chain(glob.chars()).any(unsafe_char) {
        return None;
    }
    let c: Vec<char> = glob.chars().collect();
    let mut out = format!("^{}/", literal_regex(root.trim_end_matches('/')));
    let (mut i, mut braces) = (0, 0u32);
    while i < c.len() {
        match c[i] {
            '*' if c.get(i + 1) == Some(&'*') => {
                if i > 0 && c[i - 1] != '/' {
                    return None;
                }
                match c.get(i + 2) {
                    None => out.push_str(".*"),
                    Some('/') => out.push_str("(.*/)?"),
                    Some(_) => return None,
                }
                i += 3;
                continue;
            }
            '*' => out.push_str("[^/]*"),
            '?' => out.push_str("[^/]"),
            '[' => {
                let end = (i + 2..c.len()).find(|&j| c[j] == ']')?;
                let body: String = c[i + 1..end].iter().collect();
                if body.contains('/') || body.contains('\\') {
                    return None;
                }
                let body = body
                    .strip_prefix('!')
                    .map_or(body.clone(), |b| format!("^{b}"));
                write!(out, "[{body}]").expect("String");
                i = end;
            }
            '{' => {
                braces += 1;
                out.push('(');
            }
            ',' if braces > 0 => out.push('|'),
            '}' if braces > 0 => {
                braces -= 1;
                out.push(')');
            }
            '\\' => {
                i += 1;
                out.push_str(&literal_regex(&c.get(i)?.to_string()));
            }
            ch => out.push_str(&literal_regex(&ch.to_string())),
        }
        i += 1;
    }
    (braces == 0).then(|| format!("{out}(/|$)"))
}

/// Of a command's exclude globs, those [`exclude_regex`] expresses relative to `root` (the
/// first grant's), and those it does not (a gap the caller names).
pub fn expressible_globs(root: Option<&Path>, globs: &[String]) -> (Vec<String>, Vec<String>) {
    let root = root.and_then(Path::to_str);
    globs
        .iter()
        .cloned()
        .partition(|g| root.and_then(|r| exclude_regex(r, g)).is_some())
}

/// `text` matched literally, letters in any case.
fn literal_regex(text: &str) -> String {
    text.chars()
        .map(|ch| match ch {
            c if c.is_ascii_alphabetic() => {
                format!("[{}{}]", c.to_ascii_lowercase(), c.to_ascii_uppercase())
            }
            c if c.is_alphanumeric() || matches!(c, '_' | '-' | '/' | ' ') => c.to_string(),
            c => format!("\\{c}"),
        })
        .collect()
}

/// One component of a table rule (lower case; `*` any run of characters but `/`) as a regex
/// that matches it in any case: each letter as `[xX]`, every other character escaped.
fn component_regex(c: &str) -> String {
    c.split('*')
        .map(literal_regex)
        .collect::<Vec<_>>()
        .join("[^/]*")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exclude_globs_become_regexes_under_the_first_grant() {
        let re = |g: &str| exclude_regex("/w/p", g);
        assert_eq!(
            re("secret").unwrap(),
            "^/[wW]/[pP]/[sS][eE][cC][rR][eE][tT](/|$)"
        );
        assert_eq!(
            re("**/*.log").unwrap(),
            "^/[wW]/[pP]/(.*/)?[^/]*\\.[lL][oO][gG](/|$)"
        );
        assert_eq!(re("out/**").unwrap(), "^/[wW]/[pP]/[oO][uU][tT]/.*(/|$)");
        assert_eq!(
            re("{a,b}/x?").unwrap(),
            "^/[wW]/[pP]/([aA]|[bB])/[xX][^/](/|$)"
        );
        assert_eq!(re("[!0-9]\\*").unwrap(), "^/[wW]/[pP]/[^0-9]\\*(/|$)");
        // What it does not express: refused, so the caller names it.
        for bad in [
            "a**",
            "**b",
            "{a,b",
            "[a/b]",
            "[ab",
            "a\")) (allow file-read*",
        ] {
            assert_eq!(re(bad), None, "{bad}");
        }
        let spec = CommandSpec {
            grants: vec![(PathBuf::from("/w/p"), GrantAccess::ReadWrite)],
            no_access: vec![],
            no_write: vec![],
            network: CommandNetwork::None,
            hide_sensitive: false,
            hide_globs: vec!["secret".into()],
            own_dir: None,
            sockets: Vec::new(),
        };
        let p = command_profile(&spec).unwrap();
        let grant = p
            .find("(allow file-read* file-write* (subpath \"/w/p\"))")
            .unwrap();
        let hidden = p
            .find("(deny file-read* file-write* (regex #\"^/[wW]/[pP]/[sS][eE][cC][rR][eE][tT](/|$)\"))")
            .unwrap_or_else(|| panic!("{p}"));
        assert!(hidden > grant);
        let bad = CommandSpec {
            hide_globs: vec!["a**".into()],
            ..spec
        };
        assert_eq!(command_profile(&bad), Err(SbplError::Glob("a**".into())));
    }

    #[test]
    fn the_protected_table_follows_the_grants_in_any_case() {
        let spec = CommandSpec {
            grants: vec![(PathBuf::from("/Users/a/proj"), GrantAccess::ReadWrite)],
            no_access: vec![],
            no_write: vec![],
            network: CommandNetwork::None,
            hide_sensitive: false,
            hide_globs: Vec::new(),
            own_dir: None,
            sockets: Vec::new(),
        };
        let p = command_profile(&spec).unwrap();
        let grant = p
            .find("(allow file-read* file-write* (subpath \"/Users/a/proj\"))")
            .unwrap();
        let ssh = p
            .find("(deny file-read* file-write* (regex #\"/\\.[sS][sS][hH](/|$)\")) ; SSH keys")
            .unwrap_or_else(|| panic!("{p}"));
        assert!(ssh > grant, "the deny after the allow it overrides");
        assert!(p.contains("(deny process-exec (regex #\"/\\.[sS][sS][hH](/|$)\"))"));
        // Read-only places: not written, still read.
        assert!(
            p.contains("(deny file-write* (regex #\"/\\.[eE][nN][vV][rR][cC](/|$)\"))"),
            "{p}"
        );
        // A glob component, and two components in a row.
        assert!(p.contains("/[wW][iI][nN][dD][oO][wW][sS][pP][oO][wW][eE][rR][sS][hH][eE][lL][lL]/[^/]*[pP][rR][oO][fF][iI][lL][eE]\\.[pP][sS]1(/|$)"), "{p}");
        // A .git directory's hooks and config below it at any depth: submodules too.
        assert!(p.contains(
            "(deny file-write* (regex #\"/\\.[gG][iI][tT]/(.*/)?([hH][oO][oO][kK][sS]|[cC][oO][nN][fF][iI][gG]|[cC][oO][nN][fF][iI][gG]\\.[wW][oO][rR][kK][tT][rR][eE][eE])(/|$)\"))"
        ), "{p}");
        // Every rule is there.
        for r in ipc_schema::protected::RULES {
            assert!(p.contains(&format!(" ; {}\n", r.why)), "{}", r.why);
        }
        // Secret-looking files only when the grant hides them: by their last component.
        assert!(!p.contains("[pP][eE][mM]$"), "{p}");
        let hidden = command_profile(&CommandSpec {
            hide_sensitive: true,
            hide_globs: Vec::new(),
            ..spec
        })
        .unwrap();
        assert!(hidden.contains(
            "(deny file-read* file-write* (regex #\"/[^/]*\\.[pP][eE][mM]$\")) ; PEM files hold private keys"
        ), "{hidden}");
        assert!(
            hidden.contains("(regex #\"/\\.[eE][nN][vV]\\.[^/]*$\")"),
            "{hidden}"
        );
    }

    #[test]
    fn strings_are_escaped() {
        assert_eq!(
            sbpl_string(Path::new(r#"/a"b\c"#)).unwrap(),
            r#""/a\"b\\c""#
        );
        assert_eq!(sbpl_string(Path::new("/é x")).unwrap(), "\"/é x\"");
        assert_eq!(
            sbpl_string(Path::new("rel")),
            Err(SbplError::NotAbsolute("rel".into()))
        );
    }

    #[cfg(unix)]
    #[test]
    fn non_utf8_paths_are_refused() {
        use std::os::unix::ffi::OsStrExt;
        let p = Path::new(std::ffi::OsStr::from_bytes(b"/w/\xff"));
        assert_eq!(sbpl_string(p), Err(SbplError::NotUtf8(p.to_path_buf())));
        let spec = CommandSpec {
            grants: vec![(p.to_path_buf(), GrantAccess::Read)],
            no_access: vec![],
            no_write: vec![],
            network: CommandNetwork::None,
            hide_sensitive: false,
            hide_globs: Vec::new(),
            own_dir: None,
            sockets: Vec::new(),
        };
        assert_eq!(
            command_profile(&spec),
            Err(SbplError::NotUtf8(p.to_path_buf()))
        );
    }

    #[test]
    fn a_protected_path_inside_a_grant_is_denied_after_it() {
        let spec = CommandSpec {
            grants: vec![("/Users/a".into(), GrantAccess::ReadWrite)],
            no_access: vec!["/Users/a/.ssh".into()],
            no_write: vec!["/Users/a/p/.git/hooks".into()],
            network: CommandNetwork::None,
            hide_sensitive: false,
            hide_globs: Vec::new(),
            own_dir: None,
            sockets: Vec::new(),
        };
        let s = command_profile(&spec).unwrap();
        let allow = s
            .find("(allow file-read* file-write* (subpath \"/Users/a\"))")
            .unwrap();
        let deny = s
            .find("(deny file-read* file-write* (subpath \"/Users/a/.ssh\"))")
            .unwrap();
        let deny_w = s
            .find("(deny file-write* (subpath \"/Users/a/p/.git/hooks\"))")
            .unwrap();
        assert!(allow < deny && allow < deny_w, "{s}");
        assert!(!s.contains("network-outbound"), "{s}");
    }

    #[test]
    fn a_home_directory_as_a_root_keeps_its_protected_places_denied() {
        let spec = CommandSpec {
            grants: vec![("/Users/a".into(), GrantAccess::Read)],
            no_access: vec!["/Users/a/Library/Keychains".into()],
            no_write: vec![],
            network: CommandNetwork::None,
            hide_sensitive: false,
            hide_globs: Vec::new(),
            own_dir: None,
            sockets: Vec::new(),
        };
        let s = command_profile(&spec).unwrap();
        let lines: Vec<&str> = s.lines().collect();
        let at = |l: &str| {
            lines
                .iter()
                .position(|x| *x == l)
                .unwrap_or_else(|| panic!("{l}: {s}"))
        };
        assert!(
            at("(allow file-read* (subpath \"/Users/a\"))")
                < at("(deny file-read* file-write* (subpath \"/Users/a/Library/Keychains\"))")
        );
        // The parents are reachable for lookups only, not listable.
        at("(allow file-read-metadata (literal \"/Users\"))");
        assert!(
            !s.contains("(allow file-read* (subpath \"/Users\"))"),
            "{s}"
        );
        assert!(
            !s.contains("file-write* (subpath \"/Users/a\")"),
            "a read grant stays read-only: {s}"
        );
    }

    #[test]
    fn proxied_commands_reach_only_the_proxy_port() {
        let spec = CommandSpec {
            grants: vec![],
            no_access: vec![],
            no_write: vec![],
            network: CommandNetwork::LoopbackProxy { port: 38123 },
            hide_sensitive: false,
            hide_globs: Vec::new(),
            own_dir: None,
            sockets: Vec::new(),
        };
        let s = command_profile(&spec).unwrap();
        let outbound: Vec<_> = s.lines().filter(|l| l.contains("network")).collect();
        assert_eq!(
            outbound,
            [
                "; network: only the egress proxy on the loopback",
                "(allow network-outbound (remote ip \"localhost:38123\"))"
            ]
        );
    }

    #[test]
    fn only_net_has_network_no_helper_runs_programs_and_exec_has_no_profile() {
        let fs = Profile::Fs(FsProfile {
            read_only: vec!["/Users/a".into()],
            read_write: vec![],
        });
        for p in [
            fs,
            Profile::Net,
            Profile::Secrets(ipc_schema::secrets::StoreKind::Keychain),
            Profile::Ui,
            Profile::Gateway,
            Profile::Servers,
        ] {
            let s = helper_profile(&p, Some(Path::new("/Users/a"))).unwrap();
            assert!(s.contains("\n(version 1)\n(deny default)\n"), "{s}");
            assert!(!s.contains("(allow process-exec"), "{s}");
            assert_eq!(s.contains("network-outbound"), p == Profile::Net, "{s}");
        }
        // macOS refuses a sandbox inside a sandbox: the exec helper, whose commands each get
        // one, takes none.
        assert_eq!(
            helper_profile(&Profile::Exec, Some(Path::new("/Users/a"))),
            Err(SbplError::NotNestable)
        );
        assert_eq!(
            helper_profile(
                &Profile::Secrets(ipc_schema::secrets::StoreKind::Keychain),
                None
            ),
            Err(SbplError::NoHome)
        );
    }
}
