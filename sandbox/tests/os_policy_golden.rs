//! The macOS Seatbelt profiles and the Windows confinement definitions, generated from the
//! helper profiles and from sample command specs, against their committed text in
//! `sandbox/tests/golden/`: a change that is not in the golden fails here, so every change shows
//! in review. After a deliberate change:
//!
//!     GATEHOUSE_BLESS=1 cargo test -p sandbox --test os_policy_golden
//!
//! The generators are pure data and run on every OS; nothing here applies a profile.

use ipc_schema::exec::GrantAccess;
use ipc_schema::secrets::StoreKind;
use sandbox::seatbelt::{self, CommandNetwork, CommandSpec};
use sandbox::{wincfg, FsProfile, Profile};
use std::path::{Path, PathBuf};

const REGENERATE: &str = "GATEHOUSE_BLESS=1 cargo test -p sandbox --test os_policy_golden";

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

fn helpers(home: &str, sep: &str) -> Vec<Profile> {
    let p = |s: &str| PathBuf::from(format!("{home}{sep}{s}"));
    vec![
        Profile::Fs(FsProfile {
            read_only: vec![p("docs")],
            read_write: vec![p("project"), p(".local/share/gatehouse/checkpoints")],
        }),
        Profile::Net,
        Profile::Exec,
        Profile::Secrets(StoreKind::Keychain),
        Profile::Ui,
        Profile::Gateway,
        Profile::Servers,
    ]
}

/// A command with the home as a read-only root, a writable project, the protected places inside
/// (an SSH directory, a .git's hooks) and the proxy; and one with no network.
fn commands(home: &str, sep: &str) -> Vec<(&'static str, CommandSpec)> {
    let p = |s: &str| PathBuf::from(format!("{home}{sep}{s}"));
    vec![
        (
            "command-home-proxied",
            CommandSpec {
                grants: vec![
                    (PathBuf::from(home), GrantAccess::Read),
                    (p("project"), GrantAccess::ReadWrite),
                ],
                no_access: vec![p(".ssh"), p(".zshrc")],
                no_write: vec![p(&format!("project{sep}.git{sep}hooks"))],
                network: CommandNetwork::LoopbackProxy { port: 38123 },
                hide_sensitive: false,
                hide_globs: Vec::new(),
                own_dir: None,
                sockets: Vec::new(),
            },
        ),
        (
            "command-offline",
            CommandSpec {
                grants: vec![(p("project"), GrantAccess::ReadWrite)],
                no_access: vec![],
                no_write: vec![],
                network: CommandNetwork::None,
                hide_sensitive: true,
                hide_globs: Vec::new(),
                own_dir: None,
                sockets: Vec::new(),
            },
        ),
    ]
}

fn generated() -> Vec<(String, String)> {
    let mut out = Vec::new();
    for h in helpers("/Users/alice", "/") {
        let text = seatbelt::helper_profile(&h, Some(Path::new("/Users/alice")));
        if h == Profile::Exec {
            // No profile: macOS refuses to nest one, and each command gets its own.
            assert_eq!(text, Err(seatbelt::SbplError::NotNestable));
            continue;
        }
        out.push((format!("macos-{}.sb", h.name()), text.unwrap()));
    }
    // The router's own profile (macos::lockdown_router): its config, data and runtime
    // directories and the agents' state directory, read and write; nothing else.
    let own = |s: &str| PathBuf::from(format!("/Users/alice/{s}"));
    let broker = Profile::Broker(FsProfile {
        read_only: Vec::new(),
        read_write: vec![
            own(".config/gatehouse"),
            own(".local/share/gatehouse"),
            own(".local/state/gatehouse/run"),
            own(".local/share/gatehouse/agents"),
        ],
    });
    out.push((
        "macos-broker.sb".into(),
        seatbelt::helper_profile(&broker, None).unwrap(),
    ));
    for (name, spec) in commands("/Users/alice", "/") {
        out.push((
            format!("macos-{name}.sb"),
            seatbelt::command_profile(&spec).unwrap(),
        ));
    }
    // An agent's session (`gatehouse run`, macOS only: elsewhere it has its own tier): its
    // state directory, inside the data directory every command is denied, read and written
    // after that deny; its gateway socket; the proxy.
    let state = own(".local/share/gatehouse/agents/claude");
    let agent = CommandSpec {
        grants: vec![
            (own("project"), GrantAccess::ReadWrite),
            (state.clone(), GrantAccess::ReadWrite),
        ],
        no_access: vec![
            own(".config/gatehouse"),
            own(".local/share/gatehouse"),
            own(".local/state/gatehouse/run"),
        ],
        no_write: Vec::new(),
        network: CommandNetwork::LoopbackProxy { port: 47301 },
        hide_sensitive: true,
        hide_globs: Vec::new(),
        own_dir: Some(state.clone()),
        // Joined with '/' as text: SBPL names macOS paths on whatever OS generates it.
        sockets: vec![own(
            ".local/share/gatehouse/agents/claude/gatehouse-0a1b2c3d4e5f6a7b.sock",
        )],
    };
    out.push((
        "macos-command-agent.sb".into(),
        seatbelt::command_profile(&agent).unwrap(),
    ));
    for h in helpers("C:\\Users\\alice", "\\") {
        let text = wincfg::helper_policy(&h).unwrap().render();
        out.push((format!("windows-{}.txt", h.name()), text));
    }
    for (name, spec) in commands("C:\\Users\\alice", "\\") {
        out.push((
            format!("windows-{name}.txt"),
            wincfg::command_policy(&spec, ipc_schema::exec::CommandSlot::new(2).unwrap())
                .unwrap()
                .render(),
        ));
    }
    out.push((
        "windows-network-filters.txt".into(),
        wincfg::network_filters().render(),
    ));
    out
}

#[test]
fn os_policy_golden() {
    let bless = std::env::var_os("GATEHOUSE_BLESS").is_some_and(|v| v == "1");
    let all = generated();
    let mut failures = Vec::new();
    if bless {
        std::fs::create_dir_all(dir()).unwrap();
    }
    for (file, text) in &all {
        let path = dir().join(file);
        if bless {
            std::fs::write(&path, text).unwrap();
            continue;
        }
        match std::fs::read_to_string(&path) {
            Ok(c) if &c == text => {}
            Ok(c) => failures.push(format!(
                "{} differs from the generator:\n--- committed\n{c}\n+++ generated\n{text}",
                path.display()
            )),
            Err(e) => failures.push(format!("{}: {e}", path.display())),
        }
    }
    for entry in std::fs::read_dir(dir()).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        if !all.iter().any(|(f, _)| *f == name) {
            if bless {
                std::fs::remove_file(dir().join(&name)).unwrap();
            } else {
                failures.push(format!("tests/golden/{name} is generated by nothing"));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{}\n\nIf the change is meant, regenerate and commit:\n    {REGENERATE}",
        failures.join("\n\n")
    );
}

/// What the goldens must say, checked on the generated text so a bless cannot lose it.
#[test]
fn the_goldens_say_what_the_profiles_mean() {
    let all = generated();
    let get = |f: &str| &all.iter().find(|(n, _)| n == f).unwrap().1;
    // Seatbelt: exec only in commands (the exec helper has no profile), network only in net (and
    // the proxied command, to the proxy's port only).
    for (file, text) in &all {
        if let Some(name) = file.strip_prefix("macos-") {
            assert!(text.contains("\n(version 1)\n(deny default)\n"), "{file}");
            let execs = name.starts_with("command");
            assert_eq!(text.contains("(allow process-exec"), execs, "{file}");
            let net = text.lines().any(|l| l.contains("network-outbound"));
            assert_eq!(
                net,
                name == "net.sb"
                    || name.starts_with("command-home-proxied")
                    || name == "command-agent.sb",
                "{file}"
            );
            // Listening: net alone (its bind for DNS over UDP); the broker, which parses what
            // the agent sends, neither binds nor accepts (a command's listeners on macOS are
            // the exec-helper's, outside the command: sandbox::bridge).
            let listens = text.lines().any(|l| {
                l.starts_with("(allow network-bind") || l.starts_with("(allow network-inbound")
            });
            assert_eq!(listens, name == "net.sb", "{file}");
        }
    }
    // The agent's way out: the proxy's port and its gateway socket, nothing else; its state
    // directory allowed after the data directory's deny, the protected table after both.
    let agent = get("macos-command-agent.sb");
    let outbound: Vec<&str> = agent
        .lines()
        .filter(|l| l.contains("network-outbound"))
        .collect();
    assert_eq!(
        outbound,
        [
            "(allow network-outbound (remote ip \"localhost:47301\"))",
            "(allow network-outbound (remote unix-socket (path-literal \"/Users/alice/.local/share/gatehouse/agents/claude/gatehouse-0a1b2c3d4e5f6a7b.sock\")))"
        ]
    );
    let at = |needle: &str| {
        agent
            .find(needle)
            .unwrap_or_else(|| panic!("{needle}: {agent}"))
    };
    let data_denied =
        at("(deny file-read* file-write* (subpath \"/Users/alice/.local/share/gatehouse\"))");
    let state_allowed = at("; the sandbox's own directory, inside gatehouse's data directory: after its deny\n(allow file-read* file-write* (subpath \"/Users/alice/.local/share/gatehouse/agents/claude\"))\n(allow process-exec file-map-executable (subpath \"/Users/alice/.local/share/gatehouse/agents/claude\"))\n");
    let table = at("; the protected table");
    assert!(
        data_denied < state_allowed && state_allowed < table,
        "{agent}"
    );
    let cmd = get("macos-command-home-proxied.sb");
    let allow_home = cmd
        .find("(allow file-read* (subpath \"/Users/alice\"))")
        .unwrap();
    let deny_ssh = cmd
        .find("(deny file-read* file-write* (subpath \"/Users/alice/.ssh\"))")
        .unwrap();
    assert!(
        allow_home < deny_ssh,
        "the deny must follow the allow it overrides"
    );
    assert!(cmd.contains("(allow network-outbound (remote ip \"localhost:38123\"))"));
    assert!(!get("macos-command-offline.sb").contains("network-outbound"));
    // Windows: every helper but net blocks outbound for its SID; only exec may start processes.
    for (file, text) in &all {
        if let Some(name) = file
            .strip_prefix("windows-")
            .filter(|n| *n != "network-filters.txt")
        {
            let blocked = text.contains("FWPM_LAYER_ALE_AUTH_CONNECT_V4 FWP_ACTION_BLOCK");
            assert_eq!(!blocked, name == "net.txt", "{file}");
            let children = !text.contains("PROCESS_CREATION_CHILD_PROCESS_RESTRICTED");
            assert_eq!(
                children,
                name == "exec.txt" || name.starts_with("command"),
                "{file}"
            );
        }
    }
    // A command's ACEs name its slot's SID (slot 2 here), which its token carries after the
    // command SID (the filters'); no ACE names the command SID.
    let w = get("windows-command-home-proxied.txt");
    let (cmd_sid, slot) = (
        wincfg::capability_sid("gatehouse.cmd").0,
        wincfg::capability_sid("gatehouse.cmd.2").0,
    );
    assert!(
        w.contains(&format!("C:\\Users\\alice\\.ssh (D;OICI;FA;;;{slot})")),
        "{w}"
    );
    assert!(
        w.contains(&format!("restricting: {cmd_sid}\nrestricting: {slot}\n")),
        "{w}"
    );
    assert!(!w.contains(&format!(";;;{cmd_sid})")), "{w}");
    assert!(w.contains("FWPM_CONDITION_IP_REMOTE_PORT == 38123"), "{w}");
}

/// The machine-wide WFP set: the block names the SID of every profile whose policy blocks
/// (net's is not among them), the permit that keeps the user's own programs out of it grants
/// Everyone only and is evaluated first, and only the block is hard.
#[test]
fn the_network_filters_block_every_sid_but_nets() {
    let set = wincfg::network_filters();
    let sid = |n: &str| wincfg::capability_sid(n).0;
    for blocked in [
        "fs", "exec", "secrets", "ui", "gateway", "servers", "broker", "cmd",
    ] {
        let s = sid(&format!("gatehouse.{blocked}"));
        assert!(set.blocked.iter().any(|(_, b)| b.0 == s), "{blocked}");
    }
    assert!(!set.blocked.iter().any(|(_, b)| b.0 == sid("gatehouse.net")));
    assert_eq!(
        set.filters.len(),
        9,
        "permit and block on four layers, the proxy's permit"
    );
    for pair in set.filters[..8].chunks(2) {
        let (permit, block) = (&pair[0], &pair[1]);
        assert_eq!(permit.layer, block.layer);
        assert_eq!(
            (permit.action, permit.hard, permit.user_sddl.as_str()),
            ("FWP_ACTION_PERMIT", false, "D:(A;;CC;;;WD)")
        );
        assert_eq!((block.action, block.hard), ("FWP_ACTION_BLOCK", true));
        assert!(permit.weight > block.weight);
        assert!(block
            .user_sddl
            .starts_with("D:(A;;CC;;;WD)(A;;CC;;;S-1-15-3-1024-"));
        assert!(!block.user_sddl.contains(&sid("gatehouse.net")));
    }
    // Commands reach the egress proxy's loopback ports, before the block, and nothing else:
    // the permit names the command SID only (an unrestricted token has the first permit).
    let proxy = &set.filters[8];
    let ports = ipc_schema::net::LOOPBACK_PROXY_PORTS;
    assert_eq!(
        (proxy.layer, proxy.action, proxy.hard, proxy.loopback_ports),
        (
            "FWPM_LAYER_ALE_AUTH_CONNECT_V4",
            "FWP_ACTION_PERMIT",
            false,
            Some((*ports.start(), *ports.end()))
        )
    );
    assert_eq!(
        proxy.user_sddl,
        format!("D:(A;;CC;;;WD)(A;;CC;;;{})", sid("gatehouse.cmd"))
    );
    assert!(set.filters[1].weight < proxy.weight && proxy.weight < set.filters[0].weight);
    // Stable keys, all distinct: a second install replaces, removal finds.
    let mut keys: Vec<String> = set.filters.iter().map(|f| f.key.to_string()).collect();
    keys.extend([set.provider.to_string(), set.sublayer.to_string()]);
    let n = keys.len();
    keys.sort();
    keys.dedup();
    assert_eq!(keys.len(), n);
    assert_eq!(wincfg::network_filters(), set);
    assert_eq!(set.provider.to_string().len(), 36);
    assert_eq!(&set.provider.to_string()[14..15], "8", "a version-8 GUID");
}
