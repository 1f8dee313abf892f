//! The protected-path table (DESIGN.md, "Policy"): places refused whatever a grant, a rule or
//! an approval says. One table for every layer that checks it (the broker's policy and the
//! fs-helper), so the layers cannot drift apart.
//!
//! A rule matches a path when its components appear consecutively anywhere in it, compared
//! case-insensitively, so a rule protects the named place and everything beneath it.

/// Consecutive components that are protected wherever they appear, with why.
pub const RULES: &[(&[&str], &str)] = &[
    // Key material and credentials.
    (&[".ssh"], "SSH keys"),
    (&[".gnupg"], "GnuPG keys"),
    (&[".aws"], "AWS credentials"),
    (&[".azure"], "Azure credentials"),
    (&[".config", "gcloud"], "Google Cloud credentials"),
    (&[".kube", "config"], "Kubernetes credentials"),
    (&[".docker", "config.json"], "Docker registry credentials"),
    (&[".netrc"], "netrc credentials"),
    (&["_netrc"], "netrc credentials"),
    (&[".git-credentials"], "git credentials"),
    (&[".pgpass"], "PostgreSQL passwords"),
    (&[".my.cnf"], "MySQL passwords"),
    (&[".cargo", "credentials"], "crates.io token"),
    (&[".cargo", "credentials.toml"], "crates.io token"),
    (&[".npmrc"], "npm token"),
    (&[".pypirc"], "PyPI token"),
    (&[".gem", "credentials"], "RubyGems token"),
    (
        &[".terraform.d", "credentials.tfrc.json"],
        "Terraform token",
    ),
    (&[".vault-token"], "Vault token"),
    (&[".config", "gh", "hosts.yml"], "GitHub CLI token"),
    (&[".password-store"], "pass password store"),
    (&[".local", "share", "keyrings"], "GNOME keyring"),
    (&[".pki"], "NSS certificate store"),
    // Browser and mail profiles.
    (&[".mozilla"], "Firefox profile"),
    (&[".thunderbird"], "Thunderbird profile"),
    (&[".config", "google-chrome"], "Chrome profile"),
    (&[".config", "chromium"], "Chromium profile"),
    (&[".config", "bravesoftware"], "Brave profile"),
    (&[".config", "microsoft-edge"], "Edge profile"),
    (&[".config", "vivaldi"], "Vivaldi profile"),
    (&[".config", "evolution"], "Evolution mail"),
    (&[".local", "share", "evolution"], "Evolution mail"),
    (
        &["library", "application support", "google", "chrome"],
        "Chrome profile",
    ),
    (
        &["library", "application support", "firefox"],
        "Firefox profile",
    ),
    (&["library", "safari"], "Safari profile"),
    (&["library", "mail"], "Apple Mail"),
    (&["library", "keychains"], "macOS keychains"),
    // Places that run code at login.
    (&[".config", "autostart"], "autostart entries"),
    (&[".config", "systemd"], "systemd user units"),
    (&[".local", "share", "systemd"], "systemd user units"),
    (&[".config", "environment.d"], "login environment"),
    (&["library", "launchagents"], "launch agents"),
    (&[".pam_environment"], "login environment"),
    (&[".xprofile"], "X session start-up"),
    (&[".xinitrc"], "X session start-up"),
    (&[".xsession"], "X session start-up"),
    (&[".xsessionrc"], "X session start-up"),
    // Shell start-up files.
    (&[".bashrc"], "shell start-up file"),
    (&[".bash_profile"], "shell start-up file"),
    (&[".bash_login"], "shell start-up file"),
    (&[".bash_logout"], "shell start-up file"),
    (&[".profile"], "shell start-up file"),
    (&[".zshrc"], "shell start-up file"),
    (&[".zshenv"], "shell start-up file"),
    (&[".zprofile"], "shell start-up file"),
    (&[".zlogin"], "shell start-up file"),
    (&[".zlogout"], "shell start-up file"),
    (&[".cshrc"], "shell start-up file"),
    (&[".tcshrc"], "shell start-up file"),
    (&[".login"], "shell start-up file"),
    (&[".kshrc"], "shell start-up file"),
    (&[".config", "fish"], "shell start-up file"),
];

/// Inside a `.git` directory, these names run code or redirect git (hooks, `core.hooksPath`,
/// `core.fsmonitor`, ...): protected at any depth below a `.git` component, so nested repositories
/// and submodules (`.git/modules/X/hooks`) are covered.
pub const GIT_INTERNAL: &[&str] = &["hooks", "config", "config.worktree"];
