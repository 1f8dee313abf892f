//! The environment a sandboxed command gets.
//!
//! Built from an allowlist: `PATH`, `LANG`, `LC_*`, `TERM` and `TZ` from the caller (the CLI
//! takes them from its own environment, the broker sends them), plus whatever else the caller
//! explicitly asks for, minus three kinds of names that never pass, even when asked for: names
//! that look like secrets, `LD_*`, and the names the sandbox sets itself (`HOME`, `USER`,
//! `LOGNAME`, `SHELL`, `TMPDIR`, the proxy variables).

use std::path::Path;

/// Taken from the caller's environment without being asked for.
pub const INHERITED: &[&str] = &["PATH", "LANG", "TERM", "TZ"];
/// Prefixes taken from the caller's environment (`LC_ALL`, `LC_CTYPE`, ...).
pub const INHERITED_PREFIXES: &[&str] = &["LC_"];

/// Whole words (split on `_`, compared upper-case) that mark a name as a secret.
pub const SECRET_WORDS: &[&str] = &[
    "KEY",
    "KEYS",
    "TOKEN",
    "TOKENS",
    "SECRET",
    "SECRETS",
    "PASSWORD",
    "PASSWD",
    "PASS",
    "PASSPHRASE",
    "CREDENTIAL",
    "CREDENTIALS",
    "AUTH",
    "PAT",
    "APIKEY",
    "COOKIE",
];

/// The `PATH` used when the caller gives none.
pub const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin";

const PROXY_NAMES: &[&str] = &[
    "HTTPS_PROXY",
    "HTTP_PROXY",
    "ALL_PROXY",
    "https_proxy",
    "http_proxy",
    "all_proxy",
];
const SET_BY_SANDBOX: &[&str] = &[
    "HOME", "USER", "LOGNAME", "SHELL", "TMPDIR", "NO_PROXY", "no_proxy",
];

/// Does `name` look like it holds a secret (`GITHUB_TOKEN`, `AWS_SECRET_ACCESS_KEY`,
/// `DATABASE_URL`, `npm_config__auth`)?
pub fn looks_secret(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    let words: Vec<&str> = upper.split('_').filter(|w| !w.is_empty()).collect();
    if words.iter().any(|w| SECRET_WORDS.contains(w)) {
        return true;
    }
    words.windows(2).any(|w| w == ["DATABASE", "URL"])
}

/// The refusal of a secret-looking name (which only an explicit, named pass overrides).
pub const LOOKS_SECRET: &str = "looks like a secret";

/// Why `name=value` may not be passed, if it may not.
pub fn refusal(name: &str, value: &str) -> Option<&'static str> {
    if name.is_empty() || name.contains(['=', '\0']) || value.contains('\0') {
        return Some("not a valid variable");
    }
    if name.starts_with("LD_") {
        return Some("LD_ variables are never passed");
    }
    if looks_secret(name) {
        return Some(LOOKS_SECRET);
    }
    if SET_BY_SANDBOX.contains(&name) || PROXY_NAMES.contains(&name) {
        return Some("set by the sandbox");
    }
    None
}

/// The allowlisted variables of the current process (what `gatehouse sandbox` passes on).
pub fn inherited_from_process() -> Vec<(String, String)> {
    std::env::vars()
        .filter(|(k, _)| {
            INHERITED.contains(&k.as_str()) || INHERITED_PREFIXES.iter().any(|p| k.starts_with(p))
        })
        .collect()
}

/// What the sandbox sets itself.
pub struct SandboxEnv<'a> {
    pub home: &'a Path,
    pub user: &'a str,
    /// `http://gatehouse:TOKEN@127.0.0.1:PORT` when the command has the proxy.
    pub proxy_url: Option<String>,
}

/// The final environment, and the names dropped with why (`NAME: reason`).
#[derive(Debug, Clone, PartialEq)]
pub struct Built {
    pub vars: Vec<(String, String)>,
    pub dropped: Vec<String>,
}

pub fn build(requested: &[(String, String)], sandbox: &SandboxEnv<'_>) -> Built {
    let mut vars: Vec<(String, String)> = Vec::new();
    let mut dropped = Vec::new();
    for (k, v) in requested {
        match refusal(k, v) {
            Some(why) => dropped.push(format!("{k}: {why}")),
            None => {
                vars.retain(|(n, _)| n != k);
                vars.push((k.clone(), v.clone()));
            }
        }
    }
    if !vars.iter().any(|(k, _)| k == "PATH") {
        vars.push(("PATH".into(), DEFAULT_PATH.into()));
    }
    let home = sandbox.home.to_string_lossy().into_owned();
    vars.push(("HOME".into(), home));
    vars.push(("USER".into(), sandbox.user.into()));
    vars.push(("LOGNAME".into(), sandbox.user.into()));
    vars.push(("SHELL".into(), "/bin/sh".into()));
    vars.push(("TMPDIR".into(), "/tmp".into()));
    if let Some(url) = &sandbox.proxy_url {
        for n in PROXY_NAMES {
            vars.push(((*n).into(), url.clone()));
        }
    }
    vars.sort();
    Built { vars, dropped }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_looking_names_are_whole_words() {
        for n in [
            "GITHUB_TOKEN",
            "AWS_SECRET_ACCESS_KEY",
            "AWS_ACCESS_KEY_ID",
            "SSH_AUTH_SOCK",
            "DB_PASSWORD",
            "MY_PASS",
            "GPG_PASSPHRASE",
            "GOOGLE_APPLICATION_CREDENTIALS",
            "GITHUB_PAT",
            "DATABASE_URL",
            "PROD_DATABASE_URL",
            "api_key",
            "npm_config__auth",
        ] {
            assert!(looks_secret(n), "{n}");
        }
        for n in [
            "PATH",
            "KEYBOARD",
            "PASSAGE",
            "MONKEY",
            "PATH_INFO",
            "TERM",
            "AUTHOR_NAME",
        ] {
            assert!(!looks_secret(n), "{n}");
        }
    }

    #[test]
    fn build_drops_what_never_passes_and_sets_its_own() {
        let req: Vec<(String, String)> = [
            ("LANG", "C.UTF-8"),
            ("GITHUB_TOKEN", "ghp_x"),
            ("LD_PRELOAD", "/x.so"),
            ("HOME", "/root"),
            ("HTTPS_PROXY", "http://evil"),
            ("CARGO_TERM_COLOR", "always"),
            ("BAD=NAME", "x"),
        ]
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
        let b = build(
            &req,
            &SandboxEnv {
                home: Path::new("/home/u"),
                user: "u",
                proxy_url: None,
            },
        );
        let get = |n: &str| b.vars.iter().find(|(k, _)| k == n).map(|(_, v)| v.as_str());
        assert_eq!(get("LANG"), Some("C.UTF-8"));
        assert_eq!(get("CARGO_TERM_COLOR"), Some("always"));
        assert_eq!(get("HOME"), Some("/home/u"));
        assert_eq!(get("PATH"), Some(DEFAULT_PATH));
        assert_eq!(get("GITHUB_TOKEN"), None);
        assert_eq!(get("LD_PRELOAD"), None);
        assert_eq!(get("HTTPS_PROXY"), None);
        assert_eq!(
            b.dropped,
            vec![
                "GITHUB_TOKEN: looks like a secret",
                "LD_PRELOAD: LD_ variables are never passed",
                "HOME: set by the sandbox",
                "HTTPS_PROXY: set by the sandbox",
                "BAD=NAME: not a valid variable",
            ]
        );
        let p = build(
            &[],
            &SandboxEnv {
                home: Path::new("/h"),
                user: "u",
                proxy_url: Some("http://gatehouse:t@127.0.0.1:3128".into()),
            },
        );
        assert_eq!(
            p.vars
                .iter()
                .filter(|(k, _)| k.to_ascii_uppercase().ends_with("_PROXY"))
                .count(),
            6
        );
    }
}
