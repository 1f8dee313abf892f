//! The protected-path table (DESIGN.md, "Policy"): places refused whatever a grant, a rule or
//! an approval says, and the one matcher every layer applies to it (the broker's policy, the
//! fs-helper's tools and the exec sandbox's masks), so the layers cannot drift apart.
//!
//! A rule matches a path when its components appear consecutively anywhere in it, compared
//! case-insensitively, so a rule protects the named place and everything beneath it. A rule's
//! component may hold one `*` (any run of characters within that component: `settings*.json`).
//!
//! Two guards: [`Guard::NoAccess`] places (keys, credentials, profiles, start-up files) are
//! neither read nor written; [`Guard::NoWrite`] places (files that make the user's own tools run
//! code when the project is merely opened or used: git attributes and modules, agent and editor
//! settings, `.envrc`) may be read but never written, created, moved or deleted.
//!
//! Separately, [`sensitive`] names files that by name usually hold secrets inside a project
//! (`.env`, private keys, keystores, Terraform state): not protected, but a read of one asks by
//! default (a read is a disclosure to the agent's model provider).

/// What a protected place refuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Guard {
    /// Writing, creating, moving and deleting; reading stays allowed.
    NoWrite,
    /// Everything: reading too.
    NoAccess,
}

/// One protected place.
#[derive(Debug, Clone, Copy)]
pub struct Rule {
    /// Consecutive components, lower case; one may hold a `*`.
    pub path: &'static [&'static str],
    pub guard: Guard,
    pub why: &'static str,
}

const fn no(path: &'static [&'static str], why: &'static str) -> Rule {
    Rule {
        path,
        guard: Guard::NoAccess,
        why,
    }
}

const fn ro(path: &'static [&'static str], why: &'static str) -> Rule {
    Rule {
        path,
        guard: Guard::NoWrite,
        why,
    }
}

/// The table. Each rule says why it is here.
pub const RULES: &[Rule] = &[
    // Key material and credentials.
    no(&[".ssh"], "SSH keys"),
    no(&[".gnupg"], "GnuPG keys"),
    no(&[".aws"], "AWS credentials"),
    no(&[".azure"], "Azure credentials"),
    no(&[".config", "gcloud"], "Google Cloud credentials"),
    no(&[".kube", "config"], "Kubernetes credentials"),
    no(&[".minikube"], "minikube client keys"),
    no(&[".docker", "config.json"], "Docker registry credentials"),
    no(&[".dockercfg"], "Docker registry credentials (old format)"),
    no(
        &[".config", "containers", "auth.json"],
        "Podman registry credentials",
    ),
    no(&[".netrc"], "netrc credentials"),
    no(&["_netrc"], "netrc credentials"),
    no(&[".git-credentials"], "git credentials"),
    no(&[".config", "git", "credentials"], "git credentials"),
    no(&[".pgpass"], "PostgreSQL passwords"),
    no(&[".my.cnf"], "MySQL passwords"),
    no(&[".mylogin.cnf"], "MySQL login paths"),
    no(&[".cargo", "credentials"], "crates.io token"),
    no(&[".cargo", "credentials.toml"], "crates.io token"),
    no(&[".npmrc"], "npm token"),
    no(&[".yarnrc"], "yarn registry token"),
    no(&[".pypirc"], "PyPI token"),
    no(
        &[".config", "pypoetry", "auth.toml"],
        "Poetry repository credentials",
    ),
    no(&[".gem", "credentials"], "RubyGems token"),
    no(&[".composer", "auth.json"], "Composer credentials"),
    no(
        &[".config", "composer", "auth.json"],
        "Composer credentials",
    ),
    no(&[".m2", "settings.xml"], "Maven repository passwords"),
    no(&[".m2", "settings-security.xml"], "Maven master password"),
    no(
        &[".gradle", "gradle.properties"],
        "Gradle repository credentials",
    ),
    no(
        &[".nuget", "nuget", "nuget.config"],
        "NuGet feed credentials",
    ),
    no(
        &[".config", "nuget", "nuget.config"],
        "NuGet feed credentials",
    ),
    no(
        &[".terraform.d", "credentials.tfrc.json"],
        "Terraform token",
    ),
    no(&[".terraformrc"], "Terraform token"),
    no(&[".vault-token"], "Vault token"),
    no(&[".pulumi", "credentials.json"], "Pulumi token"),
    no(&[".config", "gh", "hosts.yml"], "GitHub CLI token"),
    no(&[".config", "hub"], "hub GitHub token"),
    no(&[".config", "glab-cli"], "GitLab CLI token"),
    no(&[".config", "github-copilot"], "GitHub Copilot token"),
    no(&[".config", "doctl"], "DigitalOcean token"),
    no(&[".config", "hcloud"], "Hetzner Cloud token"),
    no(&[".config", "linode-cli"], "Linode token"),
    no(&[".oci"], "Oracle Cloud keys"),
    no(&[".fly"], "Fly.io token"),
    no(&[".config", "netlify"], "Netlify token"),
    no(&[".local", "share", "com.vercel.cli"], "Vercel token"),
    no(&[".wrangler"], "Cloudflare token"),
    no(&[".databrickscfg"], "Databricks token"),
    no(&[".snowsql"], "Snowflake credentials"),
    no(&[".config", "snowflake"], "Snowflake credentials"),
    no(&[".ngrok2"], "ngrok token"),
    no(&[".config", "ngrok"], "ngrok token"),
    no(
        &[".config", "rclone", "rclone.conf"],
        "rclone remote credentials",
    ),
    no(&[".s3cfg"], "s3cmd credentials"),
    no(&[".boto"], "boto / gsutil credentials"),
    no(&[".tsh"], "Teleport keys"),
    no(&[".config", "sops"], "SOPS / age keys"),
    no(&[".config", "op"], "1Password CLI sessions"),
    no(&[".password-store"], "pass password store"),
    no(&[".local", "share", "keyrings"], "GNOME keyring"),
    no(&[".local", "share", "kwalletd"], "KDE wallet"),
    no(&[".pki"], "NSS certificate store"),
    no(&[".bitcoin"], "Bitcoin wallet"),
    no(&[".ethereum"], "Ethereum keystore"),
    no(&[".electrum"], "Electrum wallet"),
    // The logins of AI agents and model tools.
    no(&[".claude", ".credentials.json"], "Claude Code login"),
    no(&[".claude.json"], "Claude Code account and API key"),
    no(&[".codex", "auth.json"], "Codex login"),
    no(&[".gemini", "oauth_creds.json"], "Gemini CLI login"),
    no(&[".gemini", "google_accounts.json"], "Gemini CLI accounts"),
    no(&[".cache", "huggingface", "token"], "Hugging Face token"),
    no(&[".huggingface", "token"], "Hugging Face token"),
    no(&[".continue", "config.json"], "Continue API keys"),
    // Shell and tool histories: typed passwords and tokens end up there.
    no(&[".bash_history"], "shell history"),
    no(&[".zsh_history"], "shell history"),
    no(&[".zhistory"], "shell history"),
    no(&[".history"], "shell history"),
    no(
        &[".local", "share", "fish", "fish_history"],
        "shell history",
    ),
    no(&[".python_history"], "Python history"),
    no(&[".psql_history"], "psql history"),
    no(&[".mysql_history"], "MySQL history"),
    no(&[".node_repl_history"], "Node history"),
    // Browser and mail profiles.
    no(&[".mozilla"], "Firefox profile"),
    no(&[".thunderbird"], "Thunderbird profile"),
    no(&[".config", "google-chrome"], "Chrome profile"),
    no(&[".config", "chromium"], "Chromium profile"),
    no(&[".config", "bravesoftware"], "Brave profile"),
    no(&[".config", "microsoft-edge"], "Edge profile"),
    no(&[".config", "vivaldi"], "Vivaldi profile"),
    no(&[".config", "slack"], "Slack session"),
    no(&[".config", "evolution"], "Evolution mail"),
    no(&[".local", "share", "evolution"], "Evolution mail"),
    no(
        &["library", "application support", "google", "chrome"],
        "Chrome profile",
    ),
    no(
        &["library", "application support", "firefox"],
        "Firefox profile",
    ),
    no(&["library", "safari"], "Safari profile"),
    no(&["library", "mail"], "Apple Mail"),
    no(&["library", "keychains"], "macOS keychains"),
    no(
        &["appdata", "local", "google", "chrome", "user data"],
        "Chrome profile",
    ),
    no(
        &["appdata", "local", "microsoft", "edge", "user data"],
        "Edge profile",
    ),
    no(&["appdata", "roaming", "mozilla"], "Firefox profile"),
    no(
        &["appdata", "roaming", "thunderbird"],
        "Thunderbird profile",
    ),
    // Windows' own credential stores: Credential Manager blobs, the vault, DPAPI master keys.
    no(
        &["appdata", "roaming", "microsoft", "credentials"],
        "Windows credentials",
    ),
    no(
        &["appdata", "local", "microsoft", "credentials"],
        "Windows credentials",
    ),
    no(&["appdata", "local", "microsoft", "vault"], "Windows vault"),
    no(
        &["appdata", "roaming", "microsoft", "protect"],
        "DPAPI master keys",
    ),
    // Places that run code at login.
    no(&[".config", "autostart"], "autostart entries"),
    no(&[".config", "systemd"], "systemd user units"),
    no(&[".local", "share", "systemd"], "systemd user units"),
    no(&[".config", "environment.d"], "login environment"),
    no(&["library", "launchagents"], "launch agents"),
    no(
        &["microsoft", "windows", "start menu", "programs", "startup"],
        "Windows startup folder",
    ),
    no(&[".pam_environment"], "login environment"),
    no(&[".xprofile"], "X session start-up"),
    no(&[".xinitrc"], "X session start-up"),
    no(&[".xsession"], "X session start-up"),
    no(&[".xsessionrc"], "X session start-up"),
    // Shell start-up files.
    no(&[".bashrc"], "shell start-up file"),
    no(&[".bash_profile"], "shell start-up file"),
    no(&[".bash_login"], "shell start-up file"),
    no(&[".bash_logout"], "shell start-up file"),
    no(&[".profile"], "shell start-up file"),
    no(&[".zshrc"], "shell start-up file"),
    no(&[".zshenv"], "shell start-up file"),
    no(&[".zprofile"], "shell start-up file"),
    no(&[".zlogin"], "shell start-up file"),
    no(&[".zlogout"], "shell start-up file"),
    no(&[".cshrc"], "shell start-up file"),
    no(&[".tcshrc"], "shell start-up file"),
    no(&[".login"], "shell start-up file"),
    no(&[".kshrc"], "shell start-up file"),
    no(&[".inputrc"], "readline start-up file"),
    no(&[".config", "fish"], "shell start-up file"),
    no(&["windowspowershell", "*profile.ps1"], "PowerShell profile"),
    no(&["powershell", "*profile.ps1"], "PowerShell profile"),
    // Files that make the user's own tools run code when the project is opened or used: read,
    // never written.
    ro(&[".gitconfig"], "git config names programs git runs"),
    ro(&[".config", "git"], "git config names programs git runs"),
    ro(&[".gitmodules"], "git submodule commands run on update"),
    ro(
        &[".gitattributes"],
        "git runs the filter and diff drivers these select",
    ),
    ro(
        &[".pre-commit-config.yaml"],
        "pre-commit runs the hooks it names",
    ),
    ro(&["lefthook.yml"], "lefthook runs the hooks it names"),
    ro(&[".lefthook.yml"], "lefthook runs the hooks it names"),
    ro(&[".husky"], "husky's git hooks"),
    ro(&[".mcp.json"], "agents start the MCP servers it names"),
    ro(
        &[".claude"],
        "Claude Code settings, hooks, commands and agents",
    ),
    ro(&[".codex"], "Codex settings and the MCP servers it starts"),
    ro(
        &[".gemini"],
        "Gemini CLI settings and the MCP servers it starts",
    ),
    ro(
        &[".cursor"],
        "Cursor settings and the MCP servers it starts",
    ),
    ro(
        &[".continue"],
        "Continue settings and the MCP servers it starts",
    ),
    ro(&[".vscode"], "editor tasks and settings run programs"),
    ro(
        &[".idea"],
        "IDE run configurations and settings run programs",
    ),
    ro(&[".zed"], "editor tasks run programs"),
    ro(&[".devcontainer"], "dev container commands run on open"),
    ro(&[".envrc"], "direnv runs it on entering the directory"),
];

/// Inside a git directory, these names run code or redirect git (hooks, `core.hooksPath`,
/// `core.fsmonitor`, ...): protected at any depth below a `.git` component, so nested repositories
/// and submodules (`.git/modules/X/hooks`) are covered.
pub const GIT_INTERNAL: &[&str] = &["hooks", "config", "config.worktree"];

/// Files that by name usually hold secrets inside a project, each with its reason: reads ask by
/// default. Matched on the last component only, case-insensitively; `*` as in [`RULES`].
pub const SENSITIVE: &[(&str, &str)] = &[
    (".env", "environment files hold keys and passwords"),
    (".env.*", "environment files hold keys and passwords"),
    ("*.env", "environment files hold keys and passwords"),
    (".envrc", "environment files hold keys and passwords"),
    (".dev.vars", "Cloudflare local secrets"),
    ("*.pem", "PEM files hold private keys"),
    ("*.key", "key files"),
    ("id_rsa*", "SSH private key"),
    ("id_ecdsa*", "SSH private key"),
    ("id_ed25519*", "SSH private key"),
    ("id_dsa*", "SSH private key"),
    ("*.ppk", "PuTTY private key"),
    ("*.p12", "PKCS#12 keystore"),
    ("*.pfx", "PKCS#12 keystore"),
    ("*.jks", "Java keystore"),
    ("*.keystore", "keystore"),
    ("*.kdbx", "KeePass database"),
    ("*.gpg", "encrypted or key material"),
    ("*.asc", "PGP key or signature"),
    ("*.tfstate", "Terraform state holds resource secrets"),
    ("*.tfstate.backup", "Terraform state holds resource secrets"),
    ("*.tfvars", "Terraform variables often hold secrets"),
    ("credentials", "credential file"),
    ("credentials.json", "credential file"),
    ("credentials.yml", "credential file"),
    ("credentials.yaml", "credential file"),
    ("service-account*.json", "cloud service account key"),
    ("*-service-account.json", "cloud service account key"),
    ("client_secret*.json", "OAuth client secret"),
    ("secrets.yml", "secrets file"),
    ("secrets.yaml", "secrets file"),
    ("secrets.json", "secrets file"),
    ("secrets.toml", "secrets file"),
    (".htpasswd", "password hashes"),
    (".npmrc", "npm token"),
    (".pypirc", "PyPI token"),
    (".netrc", "netrc credentials"),
    (".pgpass", "PostgreSQL passwords"),
    ("master.key", "Rails master key"),
    ("*.mobileprovision", "signing profile"),
];

/// Whether `name` (one component, already lower case) matches `pat` (lower case, at most one
/// `*`).
fn component_matches(pat: &[u8], name: &[u8]) -> bool {
    match pat.iter().position(|&b| b == b'*') {
        None => pat == name,
        Some(star) => {
            let (pre, post) = (&pat[..star], &pat[star + 1..]);
            name.len() >= pre.len() + post.len() && name.starts_with(pre) && name.ends_with(post)
        }
    }
}

/// Lower-cases one component for matching: Unicode-aware when it is UTF-8, ASCII otherwise.
pub fn fold(c: &[u8]) -> Vec<u8> {
    match std::str::from_utf8(c) {
        Ok(s) => s.to_lowercase().into_bytes(),
        Err(_) => c.to_ascii_lowercase(),
    }
}

/// The non-empty components of an absolute path (`.` skipped), folded. Split at this OS's
/// separators (`/`; on Windows `\` too), so a Windows path's places match the same rules.
pub fn folded_components(abs: &[u8]) -> Vec<Vec<u8>> {
    abs.split(|&b| crate::os_path::is_separator(b))
        .filter(|c| !c.is_empty() && *c != b".")
        .map(fold)
        .collect()
}

/// Why a path is protected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Protection {
    /// The protected place, as a path (a rule, `.git/…/NAME`, or one of gatehouse's dirs).
    pub place: String,
    pub why: &'static str,
    pub guard: Guard,
}

impl Protection {
    /// Whether this protection refuses an access that writes (`true`) or reads (`false`).
    pub fn refuses(&self, writes: bool) -> bool {
        writes || self.guard == Guard::NoAccess
    }
}

/// The most restrictive table rule (or git internal) that `comps` (folded) fall under: the
/// rules ending at each component in turn ([`check_last`]), the first of the most restrictive.
pub fn check_components(comps: &[Vec<u8>]) -> Option<Protection> {
    let mut best: Option<Protection> = None;
    for n in 1..=comps.len() {
        if let Some(p) = check_last(&comps[..n - 1], &comps[n - 1]) {
            if best.as_ref().is_none_or(|b| p.guard > b.guard) {
                best = Some(p);
            }
            if best.as_ref().is_some_and(|b| b.guard == Guard::NoAccess) {
                break;
            }
        }
    }
    best
}

/// [`check_components`] for a walk that has judged every parent already: `last` (folded) in
/// the directory whose folded components are `parent`; only the rules that end at `last`, and
/// a git internal name as `last`. Some exactly when `check_components` would find a place that
/// the parent is not in.
pub fn check_last(parent: &[Vec<u8>], last: &[u8]) -> Option<Protection> {
    let mut best: Option<Protection> = None;
    for r in RULES {
        let n = r.path.len();
        if n > parent.len() + 1 || !component_matches(r.path[n - 1].as_bytes(), last) {
            continue;
        }
        if parent[parent.len() + 1 - n..]
            .iter()
            .zip(r.path.iter())
            .all(|(c, p)| component_matches(p.as_bytes(), c))
            && best.as_ref().is_none_or(|b| r.guard > b.guard)
        {
            best = Some(Protection {
                place: r.path.join("/"),
                why: r.why,
                guard: r.guard,
            });
        }
    }
    if best.as_ref().is_some_and(|b| b.guard == Guard::NoAccess) {
        return best;
    }
    if GIT_INTERNAL.iter().any(|g| last == g.as_bytes()) && parent.iter().any(|c| c == b".git") {
        return Some(Protection {
            place: format!(".git/…/{}", String::from_utf8_lossy(last)),
            why: "git hooks and config run code",
            guard: Guard::NoAccess,
        });
    }
    best
}

/// gatehouse's own directories plus the fixed table: what the broker and the fs-helper check.
#[derive(Debug, Clone, Default)]
pub struct Protector {
    dirs: Vec<(Vec<Vec<u8>>, Vec<u8>)>,
}

impl Protector {
    /// `dirs`: absolute directories (as given and canonical, where they differ).
    pub fn new(dirs: Vec<Vec<u8>>) -> Protector {
        Protector {
            dirs: dirs
                .into_iter()
                .map(|d| (folded_components(&d), d))
                .filter(|(c, _)| !c.is_empty())
                .collect(),
        }
    }

    /// The directories as given.
    pub fn dirs(&self) -> Vec<Vec<u8>> {
        self.dirs.iter().map(|(_, raw)| raw.clone()).collect()
    }

    /// Why `abs` (an absolute, resolved path) is protected, if it is, whatever the access.
    pub fn check(&self, abs: &[u8]) -> Option<Protection> {
        let comps = folded_components(abs);
        for (dir, raw) in &self.dirs {
            if comps.len() >= dir.len() && comps[..dir.len()] == dir[..] {
                return Some(Protection {
                    place: String::from_utf8_lossy(raw).into_owned(),
                    why: "gatehouse's own directory",
                    guard: Guard::NoAccess,
                });
            }
        }
        check_components(&comps)
    }

    /// Why an access to `abs` is refused, if it is: every protection refuses a write, only
    /// [`Guard::NoAccess`] a read.
    pub fn refuses(&self, abs: &[u8], writes: bool) -> Option<Protection> {
        self.check(abs).filter(|p| p.refuses(writes))
    }

    /// Like a write check, and also refuses creating a non-directory named `.git`: a `.git`
    /// file (`gitdir: ...`) points git at a directory whose hooks would then run.
    pub fn check_new_file(&self, abs: &[u8]) -> Option<Protection> {
        if let Some(p) = self.refuses(abs, true) {
            return Some(p);
        }
        let last = folded_components(abs).pop();
        (last.as_deref() == Some(b".git")).then(|| Protection {
            place: ".git".into(),
            why: "a .git file redirects git to another directory",
            guard: Guard::NoAccess,
        })
    }
}

/// What a write under a git-shaped directory may not create: the names git runs or reads
/// programs from, and `HEAD`, which makes a directory holding them a git directory.
const GIT_SHAPE: &[&str] = &["config", "config.worktree", "hooks", "commondir"];

/// Why writing `comps` (relative to a grant root) would make git run something, judged by
/// what already exists (`exists(dir components, name)`): a `config`, `hooks/...` or
/// `commondir` in a directory that has a `HEAD`, or a `HEAD` beside any of those.
pub fn git_shape(
    comps: &[Vec<u8>],
    exists: impl Fn(&[Vec<u8>], &str) -> bool,
) -> Option<Protection> {
    let folded: Vec<Vec<u8>> = comps.iter().map(|c| fold(c)).collect();
    let refuse = |dir: &[Vec<u8>], name: &str| Protection {
        place: format!(
            "{}{}",
            String::from_utf8_lossy(&dir.join(&b'/')),
            if dir.is_empty() { "" } else { "/" }
        ) + name,
        why: "a git directory's config and hooks run code (the directory has HEAD)",
        guard: Guard::NoAccess,
    };
    for (i, c) in folded.iter().enumerate() {
        let dir = &comps[..i];
        let is_last = i + 1 == folded.len();
        let named = GIT_SHAPE.iter().any(|g| c.as_slice() == g.as_bytes());
        // `hooks/...` below a HEAD; `config` itself as the last name.
        if named && (c.as_slice() == b"hooks" || is_last) && exists(dir, "HEAD") {
            return Some(refuse(dir, &String::from_utf8_lossy(c)));
        }
        if is_last && c.as_slice() == b"head" {
            if let Some(g) = GIT_SHAPE.iter().find(|g| exists(dir, g)) {
                return Some(refuse(dir, g));
            }
        }
    }
    None
}

/// Why the file at `abs` usually holds a secret, if its name says so.
pub fn sensitive(abs: &[u8]) -> Option<&'static str> {
    let last = abs
        .rsplit(|&b| crate::os_path::is_separator(b))
        .find(|c| !c.is_empty())?;
    let name = fold(last);
    SENSITIVE
        .iter()
        .find(|(pat, _)| component_matches(pat.as_bytes(), &name))
        .map(|(_, why)| *why)
}

/// Markers of private key material in a file's first bytes, each with what it is.
const SECRET_CONTENT: &[(&[u8], &str)] = &[
    (b"PRIVATE KEY-----", "a private key"),
    (
        b"-----BEGIN PGP PRIVATE KEY BLOCK-----",
        "a PGP private key",
    ),
    (b"PuTTY-User-Key-File-", "a PuTTY private key"),
    (b"aws_secret_access_key", "an AWS secret key"),
];

/// What secret `data` (a file's content) holds by its content, if it says so: private keys
/// (PEM, OpenSSH, PGP, PuTTY) and AWS secret keys, looked for in the first 64 KiB.
pub fn secret_content(data: &[u8]) -> Option<&'static str> {
    let head = &data[..data.len().min(64 << 10)];
    SECRET_CONTENT
        .iter()
        .find(|(m, _)| head.windows(m.len()).any(|w| w.eq_ignore_ascii_case(m)))
        .map(|(_, why)| *why)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p() -> Protector {
        Protector::new(vec![b"/home/u/.local/share/gatehouse".to_vec()])
    }

    #[test]
    fn windows_places_are_refused_by_their_rules() {
        // The Windows rules, with forward slashes: the same on every OS.
        for path in [
            "/c/Users/u/AppData/Roaming/Microsoft/Windows/Start Menu/Programs/Startup/x.lnk",
            "/c/Users/u/AppData/Local/Google/Chrome/User Data/Default/Cookies",
            "/c/Users/u/AppData/Roaming/Microsoft/Protect/S-1-5-21/key",
            "/c/Users/u/AppData/Local/Microsoft/Credentials/ABCDEF",
            "/c/Users/u/Documents/WindowsPowerShell/Microsoft.PowerShell_profile.ps1",
            "/c/Users/u/Documents/PowerShell/profile.ps1",
        ] {
            let got = p().refuses(path.as_bytes(), false);
            assert!(got.is_some(), "{path}");
        }
        // Positive control: a project file beside them.
        assert_eq!(p().check(b"/c/Users/u/Documents/proj/src/main.rs"), None);
        assert_eq!(
            p().check(b"/c/Users/u/Documents/PowerShell/notes.ps1"),
            None
        );
    }

    /// Windows separates components with `\` too: `C:\Users\u\.ssh\id_rsa` is the `.ssh`
    /// rule's, whatever the case; elsewhere `\` is an ordinary byte of a name.
    #[test]
    fn backslashes_separate_components_on_windows_only() {
        let ssh = br"C:\Users\u\.SSH\id_rsa";
        let startup =
            br"C:\Users\u\AppData\Roaming\Microsoft\Windows\Start Menu\Programs\Startup\a.lnk";
        if cfg!(windows) {
            assert_eq!(p().check(ssh).map(|g| g.guard), Some(Guard::NoAccess));
            assert_eq!(p().check(startup).map(|g| g.guard), Some(Guard::NoAccess));
            assert_eq!(sensitive(br"C:\p\deploy\id_rsa"), Some("SSH private key"));
            assert_eq!(p().check(br"C:\Users\u\proj\src\main.rs"), None);
        } else {
            // One component named `C:\Users\u\.SSH\id_rsa`: no rule's.
            assert_eq!(p().check(ssh), None);
            assert_eq!(p().check(startup), None);
            assert_eq!(folded_components(br"/w/a\b").len(), 2);
        }
    }

    #[test]
    fn credential_stores_of_agents_and_tools_are_never_read() {
        for path in [
            "/home/u/.codex/auth.json",
            "/home/u/.claude/.credentials.json",
            "/home/u/.gemini/oauth_creds.json",
            "/home/u/.config/github-copilot/hosts.json",
            "/home/u/.cache/huggingface/token",
            "/home/u/.config/rclone/rclone.conf",
            "/home/u/.s3cfg",
            "/home/u/.boto",
            "/home/u/.dockercfg",
            "/home/u/.SSH/id_rsa",
            "/home/u/.zsh_history",
        ] {
            let got = p()
                .check(path.as_bytes())
                .unwrap_or_else(|| panic!("{path}"));
            assert_eq!(got.guard, Guard::NoAccess, "{path}");
            assert!(p().refuses(path.as_bytes(), false).is_some(), "{path}");
        }
    }

    #[test]
    fn files_that_run_code_are_readable_but_never_written() {
        for path in [
            "/w/p/.gitmodules",
            "/w/p/.gitattributes",
            "/w/p/.claude/settings.json",
            "/w/p/.claude/settings.local.json",
            "/w/p/.claude/commands/x.md",
            "/w/p/.claude/agents/x.md",
            "/w/p/.mcp.json",
            "/w/p/.codex/config.toml",
            "/w/p/.gemini/settings.json",
            "/w/p/.vscode/tasks.json",
            "/w/p/.idea/workspace.xml",
            "/w/p/.envrc",
            "/w/p/sub/.VSCode/settings.json",
        ] {
            let got = p()
                .check(path.as_bytes())
                .unwrap_or_else(|| panic!("{path}"));
            assert_eq!(got.guard, Guard::NoWrite, "{path}");
            assert!(p().refuses(path.as_bytes(), false).is_none(), "{path}");
            assert!(p().refuses(path.as_bytes(), true).is_some(), "{path}");
        }
        // The most restrictive rule wins: a login inside a read-only settings dir stays unread.
        let got = p().check(b"/w/.codex/auth.json").unwrap();
        assert_eq!((got.guard, got.why), (Guard::NoAccess, "Codex login"));
        assert!(p().check(b"/w/p/src/main.rs").is_none());
        assert!(p().check(b"/w/p/claude/settings.json").is_none());
    }

    #[test]
    fn git_internals_and_own_dirs() {
        for path in [
            "/w/.git/hooks/pre-commit",
            "/w/a/b/.git/modules/sub/config",
            "/w/.GIT/Hooks",
            "/home/u/.local/share/gatehouse/gatehouse.db",
        ] {
            assert_eq!(
                p().check(path.as_bytes()).map(|p| p.guard),
                Some(Guard::NoAccess),
                "{path}"
            );
        }
        assert!(p().check(b"/w/.git/HEAD").is_none());
        assert!(p().check(b"/home/u/.local/share/gatehousex").is_none());
        assert!(p().check(b"/w/\xff/.SsH/key").is_some());
    }

    #[test]
    fn secret_looking_names() {
        for path in [
            "/p/.env",
            "/p/.env.local",
            "/p/prod.env",
            "/p/tls/server.PEM",
            "/p/k/signing.key",
            "/p/infra/terraform.tfstate",
            "/p/app/release.jks",
            "/p/gcp/service-account-prod.json",
        ] {
            assert!(sensitive(path.as_bytes()).is_some(), "{path}");
        }
        for path in [
            "/p/src/env.rs",
            "/p/.environment/x",
            "/p/README.md",
            "/p/keys.rs",
        ] {
            assert_eq!(sensitive(path.as_bytes()), None, "{path}");
        }
    }

    #[test]
    fn the_walks_check_agrees_with_the_whole_path_check() {
        let mut paths: Vec<String> = RULES
            .iter()
            .flat_map(|r| {
                let p = r.path.join("/").replace('*', "x");
                [
                    format!("/w/{p}"),
                    format!("/w/a/{p}/inner"),
                    format!("/{p}/b/c"),
                ]
            })
            .collect();
        paths.extend(
            [
                "/w/src/main.rs",
                "/w/.git/hooks/x",
                "/w/a/.git/modules/s/config",
            ]
            .map(String::from),
        );
        for path in paths {
            let comps = folded_components(path.as_bytes());
            let whole = check_components(&comps).is_some();
            let walked =
                (1..=comps.len()).any(|n| check_last(&comps[..n - 1], &comps[n - 1]).is_some());
            assert_eq!(whole, walked, "{path}");
        }
    }

    #[test]
    fn key_material_is_recognised_by_content() {
        assert_eq!(
            secret_content(b"x\n-----BEGIN OPENSSH PRIVATE KEY-----\nb3Bl\n"),
            Some("a private key")
        );
        assert_eq!(
            secret_content(b"-----BEGIN RSA PRIVATE KEY-----"),
            Some("a private key")
        );
        assert_eq!(
            secret_content(b"[default]\nAWS_SECRET_ACCESS_KEY = x"),
            Some("an AWS secret key")
        );
        assert_eq!(secret_content(b"-----BEGIN PUBLIC KEY-----\n"), None);
        assert_eq!(secret_content(b"fn main() {}\n"), None);
    }

    #[test]
    fn stars_match_within_one_component_only() {
        assert!(component_matches(b"settings*.json", b"settings.json"));
        assert!(component_matches(b"settings*.json", b"settings.local.json"));
        assert!(!component_matches(b"settings*.json", b"settings.jso"));
        assert!(!component_matches(b"*.pem", b".pe"));
    }
}

/// The user's home directory as the OS names it: `HOME` on Unix, `USERPROFILE` on Windows
/// (where `HOME` is usually unset: reading it there would leave the home unguarded), resolved
/// as the paths it is compared with are (links followed; on Windows the `\\?\` form
/// `canonicalize` gives, without which `C:\Users\me` would not contain `\\?\C:\Users\me`).
pub fn user_home() -> Option<std::path::PathBuf> {
    let var = if cfg!(windows) { "USERPROFILE" } else { "HOME" };
    let home = std::path::PathBuf::from(std::env::var_os(var).filter(|h| !h.is_empty())?);
    Some(std::fs::canonicalize(&home).unwrap_or(home))
}

/// Why `cwd` may not become a command's working root without the user naming it: it is `/` (or
/// a drive's root), a home directory (`home`, `/root`, or any directory right under `/home`: a
/// broker run as root has `HOME=/root`; on Windows any directory beside `home`, the other users'
/// profiles), or holds one. Lexical: callers pass resolved paths. The one check `gatehouse
/// sandbox`, `gatehouse run` and the broker's launch path all use.
pub fn implicit_root_refusal(
    cwd: &std::path::Path,
    home: Option<&std::path::Path>,
) -> Option<String> {
    use std::path::Path;
    if cwd == Path::new("/") {
        return Some("it is /".into());
    }
    if cwd.parent().is_none() {
        return Some("it is the root of a drive".into());
    }
    let homes = [Some(Path::new("/root")), Some(Path::new("/home")), home];
    let mut under_home = cwd.parent() == Some(Path::new("/home"));
    if cfg!(windows) {
        let profiles = home.and_then(Path::parent);
        under_home |= profiles.is_some_and(|p| cwd.parent() == Some(p));
    }
    if under_home || homes.into_iter().flatten().any(|h| h.starts_with(cwd)) {
        return Some("it is (or contains) a home directory".into());
    }
    None
}

#[cfg(test)]
mod implicit_root_tests {
    use super::implicit_root_refusal;
    use std::path::Path;

    #[test]
    fn slash_and_homes_are_refused_their_insides_are_not() {
        let me = Some(Path::new("/srv/me"));
        for refused in ["/", "/root", "/home", "/home/alice", "/srv", "/srv/me"] {
            assert!(
                implicit_root_refusal(Path::new(refused), me).is_some(),
                "{refused}"
            );
        }
        for allowed in ["/home/alice/project", "/srv/me/work", "/tmp/x", "/root/src"] {
            assert_eq!(
                implicit_root_refusal(Path::new(allowed), me),
                None,
                "{allowed}"
            );
        }
    }

    #[cfg(windows)]
    #[test]
    fn drive_roots_profiles_and_other_users_are_refused_on_windows() {
        let me = Some(Path::new(r"C:\Users\me"));
        for refused in [
            r"C:\",
            r"D:\",
            r"C:\Users",
            r"C:\Users\me",
            r"C:\Users\alice",
        ] {
            assert!(
                implicit_root_refusal(Path::new(refused), me).is_some(),
                "{refused}"
            );
        }
        for allowed in [r"C:\Users\me\project", r"C:\src\x", r"D:\work"] {
            assert_eq!(
                implicit_root_refusal(Path::new(allowed), me),
                None,
                "{allowed}"
            );
        }
    }
}
