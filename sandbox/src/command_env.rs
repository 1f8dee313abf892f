//! The environment a sandboxed command gets.
//!
//! Built from an allowlist: `PATH`, `LANG`, `LC_*`, `TERM` and `TZ` from the caller (the CLI
//! takes them from its own environment, the broker sends them), plus whatever else the caller
//! explicitly asks for, minus three kinds of names that never pass, even when asked for: names
//! that look like secrets ([`looks_secret`], also applied to the inherited names: an
//! `LC_PGPASSWORD` is a password whatever its prefix), `LD_*`, and the names the sandbox sets
//! itself (`HOME`, `USER`, `LOGNAME`, `SHELL`, `TMPDIR`, the proxy variables). A secret-looking
//! variable passes only when the user names it for this one command (`--pass-env NAME`, said on
//! screen and recorded): see `Prepared::pass_named_secret`.

use std::path::Path;

/// Taken from the caller's environment without being asked for.
pub const INHERITED: &[&str] = &["PATH", "LANG", "TERM", "TZ"];
/// Prefixes taken from the caller's environment (`LC_ALL`, `LC_CTYPE`, ...).
pub const INHERITED_PREFIXES: &[&str] = &["LC_"];

/// Whole words (the name split on `_`, compared upper-case) that mark a name as a secret.
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
    // MYSQL_PWD, DB_PWD, LDAP_PW (the shell's own PWD and OLDPWD are exempt, see below).
    "PWD",
    "PW",
    "CREDENTIAL",
    "CREDENTIALS",
    "CREDS",
    "AUTH",
    "PAT",
    "APIKEY",
    "COOKIE",
    "COOKIES",
    "PRIVATE",
    "JWT",
    "BEARER",
    // A DSN names the server and usually the user and password (SENTRY_DSN carries a key).
    "DSN",
    // The URL of a webhook is the credential (SLACK_WEBHOOK_URL).
    "WEBHOOK",
];

/// Marks of a secret found anywhere in the name with its `_` removed, so that run-together
/// names (`PGPASSWORD`, `GH_ACCESSTOKEN`, `OPENAI_APIKEY`, `MY_PRIVATEKEY`) are caught as well
/// as the word-separated ones.
pub const SECRET_SUBSTRINGS: &[&str] = &[
    "PASSWORD",
    "PASSWD",
    "PASSPHRASE",
    // PGPASSFILE, and any other pointer to a password file.
    "PASSFILE",
    "SECRET",
    "CREDENTIAL",
    "APIKEY",
    "ACCESSKEY",
    "PRIVATEKEY",
    "SIGNINGKEY",
    "MASTERKEY",
    "ENCRYPTIONKEY",
    "SESSIONKEY",
    "AUTHKEY",
    "KEYFILE",
    "COOKIE",
    // Frameworks' database URLs (PROD_DATABASE_URL): the login is inside.
    "DATABASEURL",
    "DATABASEURI",
];

/// Names of common tools' secrets (or of where a tool keeps them) that the word rules miss,
/// each with why it is one.
pub const SECRET_NAMES: &[(&str, &str)] = &[
    // The X11 authority cookie: whoever holds it may drive the user's display (keystrokes).
    ("XAUTHORITY", "the X11 cookie file"),
    // The running gpg-agent: it signs and decrypts with the user's keys on request.
    ("GPG_AGENT_INFO", "the gpg-agent socket"),
    // The user's keyring directory (private keys).
    ("GNUPGHOME", "the GnuPG key directory"),
    // The Kerberos ticket cache: a ticket is a login.
    ("KRB5CCNAME", "the Kerberos ticket cache"),
    // kubectl's config holds cluster certificates and tokens.
    ("KUBECONFIG", "kubectl's credentials file"),
    // docker's config.json holds registry logins.
    ("DOCKER_CONFIG", "docker's credentials directory"),
    // rclone's config holds every remote's credentials.
    ("RCLONE_CONFIG", "rclone's credentials file"),
    // boto's config holds AWS and GCS keys.
    ("BOTO_CONFIG", "boto's credentials file"),
    ("BOTO_PATH", "boto's credentials files"),
    // curl's and git's netrc holds passwords per host.
    ("NETRC", "a netrc file (passwords per host)"),
    // A program that hands out passwords on request.
    ("GIT_ASKPASS", "a password helper"),
    ("SSH_ASKPASS", "a password helper"),
    ("SUDO_ASKPASS", "a password helper"),
    // Bitwarden CLI's unlocked session key.
    ("BW_SESSION", "Bitwarden's session key"),
    // The database URL of frameworks (Rails, Django, Prisma): user and password inside.
    ("DATABASE_URL", "a database URL with its login"),
];

/// Prefixes of whole families of credential variables, each with why.
pub const SECRET_PREFIXES: &[(&str, &str)] = &[
    // The AWS CLI and SDKs read keys, session tokens, container and web-identity credentials
    // from a growing set of AWS_ variables; the harmless ones (AWS_REGION) pass with --pass-env.
    ("AWS_", "AWS credentials"),
    // Azure's SDKs and CLI: client secrets, certificate passwords, federated token files.
    ("AZURE_", "Azure credentials"),
    // Terraform's azurerm provider: ARM_CLIENT_SECRET, ARM_ACCESS_KEY, ...
    ("ARM_", "Azure credentials (Terraform)"),
    // 1Password CLI's unlocked session: OP_SESSION_<account>.
    ("OP_SESSION_", "1Password's session token"),
];

/// Names that look like secrets by the rules above but are not: the shell's working
/// directories (`PWD` is the word rule's `PWD`).
const NOT_SECRET: &[&str] = &["PWD", "OLDPWD"];

/// The `PATH` used when the caller gives none.
pub const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin";

/// Windows and macOS: the proxy variables of a command whose proxy is the broker's listener at
/// `127.0.0.1:port`: on Windows one spelling each (its names do not differ by case), on macOS
/// both, as on Linux (curl reads only `http_proxy` in lower case). A port outside the egress
/// proxy's range (`ipc_schema::net::LOOPBACK_PROXY_PORTS`) is refused.
pub fn loopback_proxy_vars(token: &str, port: u16) -> Result<Vec<(String, String)>, String> {
    let ports = ipc_schema::net::LOOPBACK_PROXY_PORTS;
    if !ports.contains(&port) {
        return Err(format!(
            "the proxy's port {port} is not one of the egress proxy's ({ports:?})"
        ));
    }
    let url = format!("http://gatehouse:{token}@127.0.0.1:{port}");
    let names = if cfg!(windows) {
        &PROXY_NAMES[..3]
    } else {
        PROXY_NAMES
    };
    Ok(names.iter().map(|n| (n.to_string(), url.clone())).collect())
}

/// A sandbox's state directory (an agent's or a server's `HOME`) must be one of its grants,
/// read-write: the one check Windows' and macOS' launchers make before giving it one.
pub fn state_home_granted(
    home: &std::path::Path,
    grants: &[ipc_schema::exec::PathGrant],
) -> Result<(), String> {
    let rw = ipc_schema::exec::GrantAccess::ReadWrite;
    match grants.iter().any(|g| g.path == home && g.access == rw) {
        true => Ok(()),
        false => Err(format!(
            "the sandbox's state directory {} is not granted read-write",
            home.display()
        )),
    }
}

/// Windows: what the environment of a sandbox with a state directory (a `gatehouse run` agent's
/// or a third-party server's) has beyond a command's: that directory as its profile
/// (`USERPROFILE`, `HOME`), temporary directory and application data (its login and settings
/// live there, never in the user's), then an agent's gatehouse variables. Refused unless
/// `grants` give the directory read-write.
pub fn windows_state_vars(
    agent: Option<&ipc_schema::exec::AgentRun>,
    server: Option<&ipc_schema::exec::ServerRun>,
    grants: &[ipc_schema::exec::PathGrant],
) -> Result<Vec<(String, String)>, String> {
    let home = (agent.map(|a| &a.state_home)).or(server.map(|s| &s.state_home));
    let Some(home) = home else {
        return Ok(Vec::new());
    };
    state_home_granted(home, grants)?;
    let mut vars = windows_profile_vars(home);
    vars.extend(agent.iter().flat_map(|a| a.vars.iter().cloned()));
    Ok(vars)
}

/// Windows: the profile variables of a sandbox whose state directory is `home` (an agent's or
/// a third-party server's): its profile, temp and application-data directories inside it.
pub fn windows_profile_vars(state_home: &std::path::Path) -> Vec<(String, String)> {
    let home = state_home.display().to_string();
    let at = |p: &str| state_home.join(p).display().to_string();
    vec![
        ("USERPROFILE".to_string(), home.clone()),
        ("HOME".to_string(), home),
        ("TEMP".to_string(), at("tmp")),
        ("TMP".to_string(), at("tmp")),
        ("APPDATA".to_string(), at("AppData\\Roaming")),
        ("LOCALAPPDATA".to_string(), at("AppData\\Local")),
    ]
}

/// Puts each of `set` in `vars`, replacing a variable of the same name in any case (Windows'
/// names do not differ by case).
pub fn set_vars_nocase(vars: &mut Vec<(String, String)>, set: Vec<(String, String)>) {
    vars.retain(|(k, _)| !set.iter().any(|(n, _)| k.eq_ignore_ascii_case(n)));
    vars.extend(set);
}

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

/// Does `name` look like it holds a secret (`GITHUB_TOKEN`, `PGPASSWORD`, `MYSQL_PWD`,
/// `GH_ACCESSTOKEN`, `LC_PGPASSWORD`, `SSH_AUTH_SOCK`, `AWS_SESSION_TOKEN`, `DATABASE_URL`,
/// `npm_config__auth`)? Case does not matter. The rules, in order:
///
/// - a whole `_`-separated word of [`SECRET_WORDS`];
/// - a word that ends with `TOKEN`, `PWD` or `AUTH` (`ACCESSTOKEN`, `DBPWD`, `OAUTH`), or
///   begins with `AUTH` (`AUTHORIZATION`, `AUTHTOKEN`; but not `AUTHOR`, as in
///   `GIT_AUTHOR_NAME`);
/// - one of [`SECRET_SUBSTRINGS`] anywhere in the name with its `_` removed;
/// - a name of [`SECRET_NAMES`] or a prefix of [`SECRET_PREFIXES`].
///
/// `TOKEN` at the start of a word is not a mark (`TOKENIZERS_PARALLELISM`), nor `KEY` inside
/// one (`KEYBOARD`, `MONKEY`); `PWD` and `OLDPWD` are the shell's working directory.
pub fn looks_secret(name: &str) -> bool {
    secret_reason(name).is_some()
}

/// Which rule makes `name` look like a secret, for messages.
pub fn secret_reason(name: &str) -> Option<&'static str> {
    let upper = name.to_ascii_uppercase();
    if NOT_SECRET.contains(&upper.as_str()) {
        return None;
    }
    if let Some((_, why)) = SECRET_NAMES.iter().find(|(n, _)| *n == upper) {
        return Some(why);
    }
    if let Some((_, why)) = SECRET_PREFIXES.iter().find(|(p, _)| upper.starts_with(p)) {
        return Some(why);
    }
    let words: Vec<&str> = upper.split('_').filter(|w| !w.is_empty()).collect();
    if words.iter().any(|w| SECRET_WORDS.contains(w)) {
        return Some("a secret word in its name");
    }
    let marked = |w: &&str| {
        w.ends_with("TOKEN")
            || w.ends_with("PWD")
            || w.ends_with("AUTH")
            || (w.starts_with("AUTH") && !matches!(*w, "AUTHOR" | "AUTHORS"))
    };
    if words.iter().any(marked) {
        return Some("a secret word in its name");
    }
    let joined: String = words.concat();
    if SECRET_SUBSTRINGS.iter().any(|s| joined.contains(s)) {
        return Some("a secret word in its name");
    }
    None
}

/// Does `value` carry a password in a URL (`postgres://app:hunter2@db/prod`), whatever the
/// variable is called (`REDIS_URL`, `MONGODB_URI`, `CELERY_BROKER_URL`)?
pub fn value_has_url_password(value: &str) -> bool {
    let mut rest = value;
    while let Some(i) = rest.find("://") {
        let after = &rest[i + 3..];
        let authority = after.split(['/', '?', '#', ' ']).next().unwrap_or("");
        if let Some((userinfo, _host)) = authority.rsplit_once('@') {
            if userinfo.contains(':') {
                return true;
            }
        }
        rest = after;
    }
    false
}

/// The refusal of a secret-looking name or value (which only an explicit, named pass
/// overrides).
pub const LOOKS_SECRET: &str = "looks like a secret";

/// Why `name=value` may not be passed, if it may not.
pub fn refusal(name: &str, value: &str) -> Option<&'static str> {
    if name.is_empty() || name.contains(['=', '\0']) || value.contains('\0') {
        return Some("not a valid variable");
    }
    if name.starts_with("LD_") {
        return Some("LD_ variables are never passed");
    }
    if looks_secret(name) || value_has_url_password(value) {
        return Some(LOOKS_SECRET);
    }
    if SET_BY_SANDBOX.contains(&name) || PROXY_NAMES.contains(&name) {
        return Some("set by the sandbox");
    }
    None
}

/// The allowlisted variables of the current process (what `gatehouse sandbox` passes on). The
/// secret-looking ones among them are dropped later, by [`build`], which says so.
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
    /// The command's `TMPDIR` and `TMP`.
    pub tmp: &'a Path,
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
    let tmp = sandbox.tmp.to_string_lossy().into_owned();
    vars.push(("TMPDIR".into(), tmp.clone()));
    vars.push(("TMP".into(), tmp));
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
    fn a_loopback_proxy_is_named_in_each_spelling_the_os_reads() {
        let ports = ipc_schema::net::LOOPBACK_PROXY_PORTS;
        let port = *ports.start();
        let url = format!("http://gatehouse:0a1b@127.0.0.1:{port}");
        let want: &[&str] = if cfg!(windows) {
            &["HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY"]
        } else {
            &[
                "HTTPS_PROXY",
                "HTTP_PROXY",
                "ALL_PROXY",
                "https_proxy",
                "http_proxy",
                "all_proxy",
            ]
        };
        let want: Vec<(String, String)> =
            want.iter().map(|n| (n.to_string(), url.clone())).collect();
        assert_eq!(loopback_proxy_vars("0a1b", port).unwrap(), want);
        // A port the broker never listens on is refused, on either side of the range.
        for bad in [port - 1, ports.end() + 1] {
            assert_eq!(
                loopback_proxy_vars("0a1b", bad).unwrap_err(),
                format!("the proxy's port {bad} is not one of the egress proxy's ({ports:?})")
            );
        }
    }

    #[test]
    fn secret_looking_names_are_caught_joined_or_split() {
        for n in [
            // What the issue saw pass.
            "PGPASSWORD",
            "MYSQL_PWD",
            "GH_ACCESSTOKEN",
            "LC_PGPASSWORD",
            // Whole words.
            "GITHUB_TOKEN",
            "AWS_SECRET_ACCESS_KEY",
            "AWS_ACCESS_KEY_ID",
            "SSH_AUTH_SOCK",
            "DB_PASSWORD",
            "MY_PASS",
            "GPG_PASSPHRASE",
            "GOOGLE_APPLICATION_CREDENTIALS",
            "GITHUB_PAT",
            "CR_PAT",
            "DATABASE_URL",
            "PROD_DATABASE_URL",
            "api_key",
            "npm_config__auth",
            "LDAP_BIND_PW",
            "SENTRY_DSN",
            "SLACK_WEBHOOK_URL",
            "GITHUB_APP_PRIVATE_KEY",
            // Common tools' keys.
            "OPENAI_API_KEY",
            "ANTHROPIC_API_KEY",
            "GEMINI_API_KEY",
            "GH_TOKEN",
            "GITLAB_TOKEN",
            "NPM_TOKEN",
            "NODE_AUTH_TOKEN",
            "HF_TOKEN",
            "HUGGING_FACE_HUB_TOKEN",
            "VAULT_TOKEN",
            "CARGO_REGISTRY_TOKEN",
            "TWINE_PASSWORD",
            "DOCKER_AUTH_CONFIG",
            "CLAUDE_CODE_OAUTH_TOKEN",
            "REDISCLI_AUTH",
            "CONSUL_HTTP_TOKEN",
            "GOOGLE_CLOUD_KEYFILE_JSON",
            "HTTP_AUTHORIZATION",
            "PGPASSFILE",
            // Joined together, any case.
            "DBPWD",
            "SMTPPASSWORD",
            "ghAccessToken",
            "MYAPIKEY",
            "OAUTH",
            "AUTHTOKEN",
            "SIGNINGKEY_FILE",
            "X_CLIENTSECRET",
            // The table: names and families.
            "XAUTHORITY",
            "GPG_AGENT_INFO",
            "GNUPGHOME",
            "KRB5CCNAME",
            "KUBECONFIG",
            "DOCKER_CONFIG",
            "RCLONE_CONFIG",
            "BOTO_CONFIG",
            "NETRC",
            "GIT_ASKPASS",
            "SSH_ASKPASS",
            "BW_SESSION",
            "AWS_PROFILE",
            "AWS_SESSION_TOKEN",
            "AWS_CONTAINER_CREDENTIALS_FULL_URI",
            "AZURE_CLIENT_SECRET",
            "AZURE_FEDERATED_TOKEN_FILE",
            "ARM_ACCESS_KEY",
            "OP_SESSION_my",
        ] {
            assert!(looks_secret(n), "{n}");
            assert_eq!(refusal(n, "x"), Some(LOOKS_SECRET), "{n}");
        }
        for (n, _) in SECRET_NAMES {
            assert!(looks_secret(n), "{n}");
        }
        for n in [
            "PATH",
            "LANG",
            "LC_ALL",
            "LC_CTYPE",
            "TERM",
            "TERM_PROGRAM",
            "COLORTERM",
            "TZ",
            "HOSTNAME",
            "EDITOR",
            "VISUAL",
            "PAGER",
            "CARGO_HOME",
            "CARGO_TERM_COLOR",
            "RUSTUP_HOME",
            "RUST_LOG",
            "NODE_ENV",
            "PYTHONPATH",
            "VIRTUAL_ENV",
            "GOPATH",
            "KEYBOARD",
            "PASSAGE",
            "MONKEY",
            "PATH_INFO",
            "AUTHOR_NAME",
            "GIT_AUTHOR_NAME",
            "GIT_AUTHOR_EMAIL",
            "GIT_COMMITTER_NAME",
            "TOKENIZERS_PARALLELISM",
            "PWD",
            "OLDPWD",
            "SHLVL",
            "DEBIAN_FRONTEND",
            "CI",
            "MAKEFLAGS",
            "XDG_SESSION_TYPE",
            "DISPLAY",
        ] {
            assert!(!looks_secret(n), "{n}");
        }
    }

    #[test]
    fn a_url_with_a_password_in_the_value_is_a_secret_whatever_its_name() {
        for v in [
            "postgres://app:hunter2@db.internal/prod",
            "redis://:pw@127.0.0.1:6379/0",
            "see amqp://u:p@mq/ for the broker",
        ] {
            assert!(value_has_url_password(v), "{v}");
            assert_eq!(refusal("BROKER_URL", v), Some(LOOKS_SECRET), "{v}");
        }
        for v in [
            "https://example.com/a@b",
            "https://user@example.com/",
            "ssh://git@github.com/o/r.git",
            "/usr/bin:/bin",
            "a:b@c",
        ] {
            assert!(!value_has_url_password(v), "{v}");
        }
        assert_eq!(refusal("MIRROR", "https://example.com/x"), None);
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
                tmp: Path::new("/tmp"),
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
                tmp: Path::new("/tmp"),
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

    #[test]
    fn a_windows_agent_gets_its_state_directory_as_its_profile_and_names_replace_in_any_case() {
        let agent = ipc_schema::exec::AgentRun {
            state_home: std::path::PathBuf::from("/agents/claude"),
            tmp_files: Vec::new(),
            vars: vec![(
                "GATEHOUSE_MCP_CONFIG".into(),
                "/agents/claude/x.json".into(),
            )],
            gateway_socket: std::path::PathBuf::from(r"\\.\pipe\gatehouse-run-x"),
        };
        let grant = |access| ipc_schema::exec::PathGrant {
            path: agent.state_home.clone(),
            access,
        };
        let read_only = [grant(ipc_schema::exec::GrantAccess::Read)];
        assert_eq!(
            windows_state_vars(Some(&agent), None, &read_only),
            Err("the sandbox's state directory /agents/claude is not granted read-write".into())
        );
        let set = windows_state_vars(
            Some(&agent),
            None,
            &[grant(ipc_schema::exec::GrantAccess::ReadWrite)],
        )
        .unwrap();
        let get = |k: &str| set.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        let home = agent.state_home.display().to_string();
        assert_eq!(get("USERPROFILE"), Some(home.as_str()));
        assert_eq!(get("HOME"), Some(home.as_str()));
        let tmp = agent.state_home.join("tmp").display().to_string();
        assert_eq!(get("TEMP"), Some(tmp.as_str()));
        assert_eq!(get("GATEHOUSE_MCP_CONFIG"), Some("/agents/claude/x.json"));
        // The user's own profile variables, in whatever case, give way to the agent's.
        let mut vars = vec![
            ("UserProfile".to_string(), "C:\\Users\\me".to_string()),
            ("LANG".to_string(), "C".to_string()),
        ];
        set_vars_nocase(&mut vars, set.clone());
        assert!(!vars.iter().any(|(_, v)| v.contains("Users")), "{vars:?}");
        assert_eq!(vars.len(), set.len() + 1);
    }
}
