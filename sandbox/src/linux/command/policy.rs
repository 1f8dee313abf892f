//! The command policy: Allow / Ask / Deny on the parsed argv, never on a command string.
//!
//! Rules name a program (its resolved path, or the file name of that path) and argument
//! patterns; the first rule that matches decides; no match means Ask. Before any rule, the
//! built-in Deny rules apply and cannot be overridden: privilege escalation (`sudo`, `su`, `doas`,
//! `pkexec`, `run0`), persistence (`crontab`, `at`, `systemctl --user enable` and friends,
//! `systemd-run --user`, `launchctl`), destroying disks (`mkfs*`, `dd of=/dev/*`), and shells
//! given a script on stdin from a pipe (`curl ... | sh`).
//!
//! The kernel sandbox is the boundary; this is the layer that makes a person look first. Shell
//! scripts passed with `-c` are split into their simple commands (quotes respected) and each is
//! held to the built-in rules too; anything the splitter cannot follow is left to the sandbox.

use std::path::Path;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Allow,
    Ask,
    Deny,
}

/// A verdict and the rule that produced it, in words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub verdict: Verdict,
    pub reason: String,
}

/// One rule of a command policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandRule {
    /// An absolute path (compared with the resolved program) or a file name pattern (compared
    /// with the resolved program's file name); `*` matches any run of characters.
    pub program: String,
    /// Patterns for the arguments after the program, position by position; a final `**` matches
    /// any remaining arguments. Empty: any arguments.
    pub args: Vec<String>,
    pub verdict: Verdict,
}

/// Rules in order; the first match wins; no match is Ask.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CommandPolicy {
    pub rules: Vec<CommandRule>,
}

const ESCALATION: &[&str] = &["sudo", "su", "doas", "pkexec", "run0", "sudoedit"];
const PERSISTENCE: &[&str] = &["crontab", "at", "batch", "launchctl"];
const SHELLS: &[&str] = &[
    "sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "fish", "busybox",
];
/// `systemctl --user` verbs that install or start something outside the sandbox.
const SYSTEMCTL_PERSIST: &[&str] = &[
    "enable",
    "reenable",
    "link",
    "preset",
    "preset-all",
    "add-wants",
    "add-requires",
    "edit",
    "set-property",
    "set-environment",
    "import-environment",
    "mask",
    "unmask",
    "revert",
    "start",
    "restart",
];
/// Programs that run their arguments as another command.
const WRAPPERS: &[&str] = &[
    "env", "nohup", "nice", "time", "timeout", "command", "exec", "stdbuf", "ionice", "setsid",
    "xargs", "chronic", "unbuffer",
];

impl CommandPolicy {
    /// Decides on `argv` whose program resolved to `program`.
    pub fn evaluate(&self, argv: &[String], program: &Path) -> Decision {
        if let Some(reason) = builtin_denial(argv, program) {
            return Decision {
                verdict: Verdict::Deny,
                reason,
            };
        }
        for (i, rule) in self.rules.iter().enumerate() {
            if rule.matches(argv, program) {
                return Decision {
                    verdict: rule.verdict,
                    reason: format!(
                        "rule {} ({} {}) says {:?}",
                        i + 1,
                        rule.program,
                        rule.args.join(" "),
                        rule.verdict
                    ),
                };
            }
        }
        Decision {
            verdict: Verdict::Ask,
            reason: "no command rule matches; the default is Ask".into(),
        }
    }
}

impl CommandRule {
    fn matches(&self, argv: &[String], program: &Path) -> bool {
        let prog_ok = if self.program.starts_with('/') {
            glob(&self.program, &program.to_string_lossy())
        } else {
            program
                .file_name()
                .map(|n| glob(&self.program, &n.to_string_lossy()))
                .unwrap_or(false)
        };
        if !prog_ok {
            return false;
        }
        if self.args.is_empty() {
            return true;
        }
        let args = argv.get(1..).unwrap_or(&[]);
        let (pats, rest) = match self.args.split_last() {
            Some((last, init)) if last == "**" => (init, true),
            _ => (&self.args[..], false),
        };
        if args.len() < pats.len() || (!rest && args.len() != pats.len()) {
            return false;
        }
        pats.iter().zip(args).all(|(p, a)| glob(p, a))
    }
}

/// `*` matches any run of characters (including none); everything else literally.
fn glob(pat: &str, s: &str) -> bool {
    let parts: Vec<&str> = pat.split('*').collect();
    if parts.len() == 1 {
        return pat == s;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !s.starts_with(first) || !s[first.len()..].ends_with(last) {
        return false;
    }
    let mut rest = &s[first.len()..s.len() - last.len()];
    for mid in &parts[1..parts.len() - 1] {
        match rest.find(mid) {
            Some(i) => rest = &rest[i + mid.len()..],
            None => return false,
        }
    }
    true
}

fn base(word: &str) -> &str {
    word.rsplit('/').next().unwrap_or(word)
}

/// Why the built-in rules deny `argv` (program resolved to `program`), if they do.
pub fn builtin_denial(argv: &[String], program: &Path) -> Option<String> {
    let name = program
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| base(argv.first().map(String::as_str).unwrap_or("")).to_string());
    let words: Vec<&str> = argv.iter().map(String::as_str).collect();
    deny_simple(&name, &words, 0)
}

/// The built-in rules for one simple command whose program is called `name`.
fn deny_simple(name: &str, argv: &[&str], depth: u32) -> Option<String> {
    if depth > 8 {
        return Some("commands nested more than 8 deep (through wrappers and shells)".into());
    }
    let args = argv.get(1..).unwrap_or(&[]);
    let deny = |what: &str| {
        Some(format!(
            "{name} is denied by the built-in command policy ({what})"
        ))
    };
    if ESCALATION.contains(&name) {
        return deny("privilege escalation");
    }
    if PERSISTENCE.contains(&name) {
        return deny("it schedules or installs programs outside the sandbox");
    }
    if name == "mkfs" || name.starts_with("mkfs.") || name == "mke2fs" {
        return deny("it formats disks");
    }
    if name == "dd" && args.iter().any(|a| a.starts_with("of=/dev/")) {
        return Some(
            "dd of=/dev/... is denied by the built-in command policy (it overwrites devices)"
                .into(),
        );
    }
    if name == "systemctl" && args.contains(&"--user") {
        if let Some(v) = args.iter().find(|a| SYSTEMCTL_PERSIST.contains(a)) {
            return Some(format!("systemctl --user {v} is denied by the built-in command policy (it installs or starts programs outside the sandbox)"));
        }
    }
    if name == "systemd-run" && args.contains(&"--user") {
        return Some("systemd-run --user is denied by the built-in command policy (it runs programs outside the sandbox)".into());
    }
    if name == "busybox" {
        if let Some(applet) = args.first() {
            return deny_simple(base(applet), args, depth + 1);
        }
    }
    if WRAPPERS.contains(&name) {
        if let Some(i) = wrapped_command(name, args) {
            return deny_simple(base(args[i]), &args[i..], depth + 1);
        }
    }
    if SHELLS.contains(&name) {
        if let Some(script) = shell_script(args) {
            return deny_script(script, depth + 1);
        }
    }
    None
}

/// Where the wrapped command starts in a wrapper's arguments (skipping options, `NAME=VALUE`
/// assignments, and the one value `nice -n`, `timeout` and `ionice -c` take).
fn wrapped_command(name: &str, args: &[&str]) -> Option<usize> {
    let mut i = 0;
    let mut positional_values = if name == "timeout" { 1 } else { 0 };
    while i < args.len() {
        let a = args[i];
        if a == "--" {
            i += 1;
            break;
        }
        if a.starts_with('-') && a.len() > 1 {
            // Options with a separate value.
            if matches!(
                (name, a),
                ("nice", "-n")
                    | ("ionice", "-c")
                    | ("ionice", "-n")
                    | ("timeout", "-s")
                    | ("timeout", "-k")
                    | ("env", "-u")
                    | ("env", "-C")
                    | ("xargs", "-I")
                    | ("xargs", "-n")
                    | ("xargs", "-P")
                    | ("stdbuf", "-o")
                    | ("stdbuf", "-e")
                    | ("stdbuf", "-i")
            ) {
                i += 1;
            }
            i += 1;
            continue;
        }
        if name == "env" && a.contains('=') {
            i += 1;
            continue;
        }
        if positional_values > 0 {
            positional_values -= 1;
            i += 1;
            continue;
        }
        break;
    }
    (i < args.len()).then_some(i)
}

/// The script of `sh -c SCRIPT` (also `-ec`, `-lc`, `--login -c`, ...).
fn shell_script<'a>(args: &[&'a str]) -> Option<&'a str> {
    let mut want_script = false;
    for a in args {
        if want_script {
            return Some(a);
        }
        if a.starts_with('-') && !a.starts_with("--") && a.contains('c') {
            want_script = true;
        } else if !a.starts_with('-') {
            return None;
        }
    }
    None
}

/// Splits a shell script into pipelines of simple commands and holds each to the built-in
/// rules; a pipeline that ends in a shell reading its script from stdin is denied.
fn deny_script(script: &str, depth: u32) -> Option<String> {
    for pipeline in split_script(script) {
        for (pos, cmd) in pipeline.iter().enumerate() {
            let words: Vec<&str> = cmd.iter().map(String::as_str).collect();
            // Leading assignments (FOO=bar cmd) are not the program.
            let start = words
                .iter()
                .position(|w| !(w.contains('=') && !w.starts_with('=') && !w.starts_with('-')))
                .unwrap_or(words.len());
            let Some(prog) = words.get(start) else {
                continue;
            };
            let name = base(prog);
            let rest = &words[start..];
            let (inner, inner_args) = unwrap_wrappers(name, rest);
            if pos > 0 && SHELLS.contains(&inner) && reads_script_from_stdin(inner_args) {
                return Some(format!(
                    "piping a script into {inner} is denied by the built-in command policy (the script is not shown before it runs)"
                ));
            }
            if let Some(r) = deny_simple(name, rest, depth) {
                return Some(r);
            }
        }
    }
    None
}

/// The command a chain of wrappers (`env`, `nice`, `busybox`, ...) finally runs, and its
/// arguments (after its name).
fn unwrap_wrappers<'a, 'b>(name: &'a str, argv: &'b [&'a str]) -> (&'a str, &'b [&'a str]) {
    let (mut name, mut argv) = (name, argv);
    for _ in 0..8 {
        let args = argv.get(1..).unwrap_or(&[]);
        let next = if name == "busybox" {
            (!args.is_empty()).then_some(0)
        } else if WRAPPERS.contains(&name) {
            wrapped_command(name, args)
        } else {
            None
        };
        match next {
            Some(i) => {
                name = base(args[i]);
                argv = &args[i..];
            }
            None => break,
        }
    }
    (name, argv.get(1..).unwrap_or(&[]))
}

/// A shell with no script file and no `-c` reads its script from stdin.
fn reads_script_from_stdin(args: &[&str]) -> bool {
    for a in args {
        if *a == "-s" || *a == "-" {
            return true;
        }
        if a.starts_with('-') {
            if !a.starts_with("--") && a.contains('c') {
                return false;
            }
            continue;
        }
        return false;
    }
    true
}

/// Pipelines (`|`) of simple commands (words), separated by `;`, `&`, `&&`, `||`, newlines and
/// parentheses. Quotes and backslashes are honoured; redirections are dropped with their target.
fn split_script(s: &str) -> Vec<Vec<Vec<String>>> {
    let mut pipelines: Vec<Vec<Vec<String>>> = vec![vec![vec![]]];
    let mut word = String::new();
    let mut in_word = false;
    let mut skip_next_word = false;
    let mut chars = s.chars().peekable();
    let end_word = |word: &mut String,
                    in_word: &mut bool,
                    skip: &mut bool,
                    pipelines: &mut Vec<Vec<Vec<String>>>| {
        if *in_word {
            if *skip {
                *skip = false;
            } else {
                let p = pipelines.last_mut().expect("one pipeline");
                p.last_mut()
                    .expect("one command")
                    .push(std::mem::take(word));
            }
            word.clear();
            *in_word = false;
        }
    };
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                for d in chars.by_ref() {
                    if d == '\'' {
                        break;
                    }
                    word.push(d);
                }
            }
            '"' => {
                in_word = true;
                while let Some(d) = chars.next() {
                    match d {
                        '"' => break,
                        '\\' => {
                            if let Some(e) = chars.next() {
                                word.push(e);
                            }
                        }
                        _ => word.push(d),
                    }
                }
            }
            '\\' => {
                in_word = true;
                if let Some(e) = chars.next() {
                    if e != '\n' {
                        word.push(e);
                    }
                }
            }
            '|' | ';' | '&' | '\n' | '(' | ')' | '`' => {
                end_word(&mut word, &mut in_word, &mut skip_next_word, &mut pipelines);
                let pipe = c == '|' && chars.peek() != Some(&'|');
                if (c == '|' || c == '&')
                    && (chars.peek() == Some(&c) || (c == '|' && chars.peek() == Some(&'&')))
                {
                    chars.next();
                }
                if pipe {
                    pipelines.last_mut().expect("one pipeline").push(vec![]);
                } else {
                    pipelines.push(vec![vec![]]);
                }
            }
            '<' | '>' => {
                end_word(&mut word, &mut in_word, &mut skip_next_word, &mut pipelines);
                while matches!(chars.peek(), Some('>') | Some('&') | Some('<')) {
                    chars.next();
                }
                // `2>&1`: a descriptor, not a file; otherwise the next word is the target.
                if chars.peek().is_some_and(|d| d.is_ascii_digit()) {
                    while chars
                        .peek()
                        .is_some_and(|d| d.is_ascii_digit() || *d == '-')
                    {
                        chars.next();
                    }
                } else {
                    skip_next_word = true;
                }
            }
            '$' if chars.peek() == Some(&'(') => {
                // A command substitution: its commands are separate commands.
                end_word(&mut word, &mut in_word, &mut skip_next_word, &mut pipelines);
                chars.next();
                pipelines.push(vec![vec![]]);
            }
            c if c.is_whitespace() => {
                end_word(&mut word, &mut in_word, &mut skip_next_word, &mut pipelines);
            }
            '#' if !in_word => {
                for d in chars.by_ref() {
                    if d == '\n' {
                        break;
                    }
                }
                pipelines.push(vec![vec![]]);
            }
            _ => {
                in_word = true;
                word.push(c);
            }
        }
    }
    end_word(&mut word, &mut in_word, &mut skip_next_word, &mut pipelines);
    // A trailing digit before a redirection (`2>`) ends up as a word; harmless for matching.
    pipelines
        .into_iter()
        .map(|p| p.into_iter().filter(|c| !c.is_empty()).collect::<Vec<_>>())
        .filter(|p: &Vec<Vec<String>>| !p.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deny(argv: &[&str]) -> Option<String> {
        let v: Vec<String> = argv.iter().map(|s| s.to_string()).collect();
        let prog = format!("/usr/bin/{}", base(argv[0]));
        builtin_denial(&v, Path::new(&prog))
    }

    #[test]
    fn builtin_denies_escalation_persistence_and_disks() {
        for argv in [
            &["sudo", "ls"][..],
            &["su", "-"],
            &["doas", "true"],
            &["pkexec", "id"],
            &["crontab", "-e"],
            &["at", "now"],
            &["launchctl", "load", "x"],
            &["mkfs.ext4", "/dev/sda1"],
            &["mkfs", "-t", "ext4", "/dev/sda"],
            &["dd", "if=/dev/zero", "of=/dev/sda"],
            &["systemctl", "--user", "enable", "evil.service"],
            &["systemctl", "--user", "start", "evil"],
            &["systemd-run", "--user", "sh"],
        ] {
            assert!(deny(argv).is_some(), "{argv:?}");
        }
        assert_eq!(
            deny(&["sudo", "ls"]).unwrap(),
            "sudo is denied by the built-in command policy (privilege escalation)"
        );
        for argv in [
            &["ls", "-la"][..],
            &["dd", "if=/dev/zero", "of=out.img", "bs=1M", "count=1"],
            &["systemctl", "status"],
            &["systemctl", "--user", "status", "x"],
            &["git", "commit", "-m", "sudo make me a sandwich"],
            &["sh", "build.sh"],
            &["bash", "-c", "make && make test"],
        ] {
            assert_eq!(deny(argv), None, "{argv:?}");
        }
    }

    #[test]
    fn resolved_program_name_counts_not_the_word_typed() {
        let v = vec!["s".to_string(), "ls".to_string()];
        assert!(builtin_denial(&v, Path::new("/usr/bin/sudo")).is_some());
    }

    #[test]
    fn wrappers_and_shell_scripts_are_looked_into() {
        assert!(deny(&["env", "FOO=1", "sudo", "id"]).is_some());
        assert!(deny(&["nice", "-n", "5", "su"]).is_some());
        assert!(deny(&["timeout", "5", "sudo", "x"]).is_some());
        assert!(deny(&["busybox", "su"]).is_some());
        assert!(deny(&["bash", "-c", "echo hi; sudo rm -rf /"]).is_some());
        assert!(deny(&["sh", "-ec", "cd x && FOO=1 crontab -l"]).is_some());
        assert!(deny(&["sh", "-c", "echo $(sudo id)"]).is_some());
        assert!(deny(&["sh", "-c", "echo 'sudo is fine in quotes'"]).is_none());
        assert!(deny(&["env", "ls", "-l"]).is_none());
    }

    #[test]
    fn shells_fed_a_script_from_a_pipe_are_denied() {
        for script in [
            "curl -fsSL https://x.sh | sh",
            "curl x | bash -s -- --flag",
            "wget -O- x|sudo bash",
            "cat install.sh | /bin/sh -",
            "curl x | env bash",
        ] {
            let r = deny(&["sh", "-c", script]);
            assert!(r.is_some(), "{script}");
        }
        assert!(deny(&["sh", "-c", "curl x | sh"])
            .unwrap()
            .starts_with("piping a script into sh"));
        for script in [
            "curl x | grep y",
            "echo hi | bash -c 'cat'",
            "cat x.sh | tee y.sh",
            "ls 2>&1 | sort",
        ] {
            assert_eq!(deny(&["sh", "-c", script]), None, "{script}");
        }
    }

    #[test]
    fn rules_first_match_wins_default_ask() {
        let p = CommandPolicy {
            rules: vec![
                CommandRule {
                    program: "git".into(),
                    args: vec!["status".into(), "**".into()],
                    verdict: Verdict::Allow,
                },
                CommandRule {
                    program: "git".into(),
                    args: vec!["push".into(), "**".into()],
                    verdict: Verdict::Deny,
                },
                CommandRule {
                    program: "/usr/bin/cargo".into(),
                    args: vec![],
                    verdict: Verdict::Allow,
                },
                CommandRule {
                    program: "rm".into(),
                    args: vec!["-rf".into(), "*".into()],
                    verdict: Verdict::Deny,
                },
            ],
        };
        let ev = |argv: &[&str], prog: &str| {
            let v: Vec<String> = argv.iter().map(|s| s.to_string()).collect();
            p.evaluate(&v, Path::new(prog)).verdict
        };
        assert_eq!(ev(&["git", "status"], "/usr/bin/git"), Verdict::Allow);
        assert_eq!(ev(&["git", "status", "-s"], "/usr/bin/git"), Verdict::Allow);
        assert_eq!(
            ev(&["git", "push", "origin"], "/usr/bin/git"),
            Verdict::Deny
        );
        assert_eq!(ev(&["git", "log"], "/usr/bin/git"), Verdict::Ask);
        assert_eq!(ev(&["cargo", "build"], "/usr/bin/cargo"), Verdict::Allow);
        assert_eq!(
            ev(&["cargo", "build"], "/home/u/.cargo/bin/cargo"),
            Verdict::Ask
        );
        assert_eq!(ev(&["rm", "-rf", "x"], "/bin/rm"), Verdict::Deny);
        assert_eq!(ev(&["rm", "-rf", "x", "y"], "/bin/rm"), Verdict::Ask);
        // Built-ins come first and cannot be allowed by a rule.
        let allow_all = CommandPolicy {
            rules: vec![CommandRule {
                program: "*".into(),
                args: vec![],
                verdict: Verdict::Allow,
            }],
        };
        let d = allow_all.evaluate(&["sudo".to_string()], Path::new("/usr/bin/sudo"));
        assert_eq!(d.verdict, Verdict::Deny);
    }

    #[test]
    fn glob_matches_stars() {
        assert!(glob("mkfs*", "mkfs.ext4"));
        assert!(glob("*", ""));
        assert!(glob("a*b*c", "aXXbYYc"));
        assert!(!glob("a*b*c", "aXXc"));
        assert!(!glob("abc", "abcd"));
    }
}
