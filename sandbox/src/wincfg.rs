//! Windows confinement as data: for each helper [`Profile`] and for one command
//! ([`CommandSpec`], the same input as the Seatbelt generator) the restricted token, the job
//! object, the ACEs on grant roots, the Windows Filtering Platform filters and the process
//! mitigation policies the broker would apply at spawn time, as a typed [`WindowsPolicy`] with a
//! stable text rendering ([`WindowsPolicy::render`], checked as golden files).
//!
//! `windows/` applies it (spawn with the token, job and attributes; ACEs on grant roots; the
//! helper's own check in `lockdown`, which also tries the network on the loopback); the WFP
//! filters are installed once for the machine by `gatehouse setup network-filters`
//! ([`network_filters`]). The numeric values the applier needs (mitigation bits, UI-limit bits,
//! ACE rights) are here too, beside the names they render as, so that the listing and what is
//! applied cannot drift apart. The derivations follow what Windows and the sandboxes that run agents on it
//! (Codex's Windows sandbox) do, and have not been checked on a Windows machine.
//!
//! # The profile's SID
//!
//! A capability SID, derived as `DeriveCapabilitySidsFromName` derives one: SHA-256 of the
//! capability name upper-cased and encoded UTF-16LE, split into eight little-endian `u32`s, as
//! `S-1-15-3-1024-h0-...-h7`. The name is `gatehouse.<profile>` (`gatehouse.cmd` for commands).
//! Being a pure function of the name, the broker and a helper checking its own token compute the
//! same SID without any state. The servers profile's AppContainer SID is derived the same way
//! from the same name ([`app_container_sid`], as `DeriveAppContainerSidFromAppContainerName`).

use crate::seatbelt::{CommandNetwork, CommandSpec};
use crate::{FsProfile, Profile};
use ipc_schema::exec::{CommandSlot, GrantAccess};
use ipc_schema::status::{LockdownReport, OutboundProbe, WindowsConfinement};
use sha2::{Digest, Sha256};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// A SID in its string form (`S-1-...`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sid(pub String);

/// The well-known SID of the RESTRICTED group: system directories grant it read and execute, so
/// a restricted token can load its DLLs.
pub const RESTRICTED: &str = "S-1-5-12";

/// `prefix` followed by the first `words` little-endian `u32`s of SHA-256 over `name` encoded
/// UTF-16LE: how Windows derives capability and AppContainer SIDs from a name (each folds the
/// name's case first, its own way).
fn derived_sid(prefix: &str, name: &str, words: usize) -> Sid {
    let utf16: Vec<u8> = name.encode_utf16().flat_map(u16::to_le_bytes).collect();
    let hash = Sha256::digest(&utf16);
    let mut s = String::from(prefix);
    for chunk in hash.chunks_exact(4).take(words) {
        let v = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        write!(s, "-{v}").expect("String");
    }
    Sid(s)
}

/// The capability SID for `name` (see the module docs).
pub fn capability_sid(name: &str) -> Sid {
    derived_sid("S-1-15-3-1024", &name.to_uppercase(), 8)
}

/// The AppContainer SID for `name`, derived as `DeriveAppContainerSidFromAppContainerName`
/// derives one: SHA-256 of the name lower-cased and encoded UTF-16LE, its first seven
/// little-endian `u32`s, as `S-1-15-2-h0-...-h6`. A pure function of the name, like
/// [`capability_sid`]; no AppContainer profile is registered for it (the lowbox token needs
/// none, and gatehouse keeps nothing in a profile's folder).
pub fn app_container_sid(name: &str) -> Sid {
    derived_sid("S-1-15-2", &name.to_lowercase(), 7)
}

/// The capability every command's token is restricted to (`command_policy`): the SID the
/// network filters name for commands. No ACE names it; a command writes only where its slot's
/// SID ([`slot_sid`]) is granted.
pub const COMMAND_CAPABILITY: &str = "gatehouse.cmd";

/// The SID of command slot `slot` (`gatehouse.cmd.N`), which a command's ACEs name and its
/// token is restricted to beside [`COMMAND_CAPABILITY`]'s.
pub fn slot_sid(slot: CommandSlot) -> Sid {
    capability_sid(&format!("{COMMAND_CAPABILITY}.{slot}"))
}

/// `CreateRestrictedToken`'s arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestrictedToken {
    /// `DISABLE_MAX_PRIVILEGE`: every privilege but SeChangeNotifyPrivilege removed.
    pub disable_max_privilege: bool,
    /// `WRITE_RESTRICTED`: the restricting SIDs are checked for writes only (reads use the
    /// user's own access). Only the exec profile, whose commands read the system as the user.
    pub write_restricted: bool,
    /// Group SIDs made deny-only (`SidsToDisable`).
    pub deny_only: Vec<&'static str>,
    /// The second access check: an access must be granted to one of these as well.
    pub restricting: Vec<Sid>,
    /// The AppContainer the restricted token is put in (a lowbox token made from it, as
    /// Chromium's lowbox does): a third access check, passed only where an ACE names this SID
    /// (or ALL APPLICATION PACKAGES), and no network without a capability, which it has none
    /// of. Only a profile that opens nothing by name once started: the servers-helper.
    pub app_container: Option<Sid>,
}

/// The job object the process is assigned to before it runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobLimits {
    /// `JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE`: the process dies with the broker's handle.
    pub kill_on_close: bool,
    /// `JOB_OBJECT_LIMIT_ACTIVE_PROCESS`, when set.
    pub active_processes: Option<u32>,
    /// `JOB_OBJECT_LIMIT_DIE_ON_UNHANDLED_EXCEPTION`: no WER dialog, no dump.
    pub die_on_unhandled_exception: bool,
    /// `JOB_OBJECT_LIMIT_PROCESS_MEMORY` in bytes, when set: the committed memory of each
    /// process (a command's `Limits::memory`, the counterpart of RLIMIT_AS; set per run by the
    /// exec helper, so no generated profile names one).
    pub process_memory: Option<u64>,
    /// `JOBOBJECT_BASIC_UI_RESTRICTIONS` flags.
    pub ui_restrictions: Vec<&'static str>,
}

/// One explicit ACE on a path, in SDDL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathAce {
    pub path: PathBuf,
    pub sddl: String,
    pub why: &'static str,
}

/// One WFP filter, keyed on the profile's SID (`FWPM_CONDITION_ALE_USER_ID`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WfpFilter {
    pub layer: &'static str,
    pub action: &'static str,
    /// Higher weights are evaluated first within the sublayer.
    pub weight: u8,
    pub conditions: Vec<String>,
}

/// A GUID, kept as its 16 bytes in text order (`xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx` reads
/// them left to right).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Guid(pub [u8; 16]);

impl Guid {
    /// A stable GUID named by `name`: the first 16 bytes of SHA-256 of it, marked as a
    /// name-derived GUID (version 8, RFC 9562 variant). `gatehouse setup` and its removal find
    /// the same objects again by these keys, with no state kept.
    pub fn named(name: &str) -> Guid {
        let h = Sha256::digest(format!("gatehouse wfp {name}").as_bytes());
        let mut b = [0u8; 16];
        b.copy_from_slice(&h[..16]);
        b[6] = (b[6] & 0x0f) | 0x80;
        b[8] = (b[8] & 0x3f) | 0x80;
        Guid(b)
    }
}

impl std::fmt::Display for Guid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, b) in self.0.iter().enumerate() {
            if matches!(i, 4 | 6 | 8 | 10) {
                f.write_str("-")?;
            }
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

/// One filter of the machine-wide set `gatehouse setup network-filters` installs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstalledFilter {
    pub key: Guid,
    pub name: String,
    pub layer: &'static str,
    pub action: &'static str,
    /// Within gatehouse's sublayer, the higher weight is evaluated first.
    pub weight: u8,
    /// `FWPM_CONDITION_ALE_USER_ID`: the filter matches a connecting process whose token passes
    /// an access check (`FWP_ACTRL_MATCH_FILTER`, `CC`, 0x1) against this descriptor.
    pub user_sddl: String,
    /// `FWPM_FILTER_FLAG_CLEAR_ACTION_RIGHT`: a hard block, which a permit in another sublayer
    /// cannot override.
    pub hard: bool,
    /// Matches only connections to `127.0.0.1` on a port of this range (the egress proxy's,
    /// `ipc_schema::net::LOOPBACK_PROXY_PORTS`); `None`: any address.
    pub loopback_ports: Option<(u16, u16)>,
}

/// The filters that refuse outbound network (connect and listen, IPv4 and IPv6) to every
/// process whose token is restricted with the SID of a profile that has filters (every helper
/// but net, and commands), installed once for the machine, in a sublayer of gatehouse's own.
///
/// An ALE user-id condition is an access check of the connecting token against a descriptor,
/// and for a restricted token that check has two passes (its normal SIDs, then its restricting
/// SIDs). So, per layer:
/// - a **permit** (weight 15) whose descriptor grants Everyone only: every unrestricted token
///   passes it, and a token restricted with gatehouse's SIDs fails its second pass. It is not a
///   hard permit, so any other firewall's block still holds for the user's own programs;
/// - a hard **block** (weight 1) whose descriptor grants Everyone and each profile SID: it
///   matches only what reaches it, i.e. a token whose restricting SIDs name one of them;
/// - on the IPv4 connect layer, a **permit** (weight 10) for the command SID to `127.0.0.1` on
///   the egress proxy's ports only (`ipc_schema::net::LOOPBACK_PROXY_PORTS`, where the broker
///   listens for a command given `--allow-domain`), evaluated before the block.
///
/// A token restricted by another program (not naming Everyone among its restricting SIDs)
/// matches neither, so gatehouse's sublayer has no say over it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WfpSet {
    pub provider: Guid,
    pub sublayer: Guid,
    /// The sublayer's weight among the machine's sublayers (higher: evaluated earlier).
    pub sublayer_weight: u16,
    /// The profiles whose SIDs the block names, with the SIDs.
    pub blocked: Vec<(String, Sid)>,
    pub filters: Vec<InstalledFilter>,
}

/// The machine-wide filter set, from the same policies the spawner applies: every profile whose
/// policy lists filters is blocked; net, whose policy lists none, is not.
pub fn network_filters() -> WfpSet {
    let mut policies: Vec<WindowsPolicy> = every_profile()
        .iter()
        .map(|p| helper_policy(p).expect("a profile without paths renders"))
        .collect();
    policies.push(
        command_policy(
            &CommandSpec {
                grants: Vec::new(),
                no_access: Vec::new(),
                no_write: Vec::new(),
                network: CommandNetwork::None,
                hide_sensitive: false,
                hide_globs: Vec::new(),
                own_dir: None,
                sockets: Vec::new(),
            },
            // (The filters name the command SID, which every slot's token carries.)
            CommandSlot::new(0).expect("slot 0"),
        )
        .expect("a command without paths renders"),
    );
    let blocked: Vec<(String, Sid)> = policies
        .iter()
        .filter(|p| p.filters.iter().any(|f| f.action == "FWP_ACTION_BLOCK"))
        .map(|p| (p.capability_name.clone(), p.sid.clone()))
        .collect();
    let everyone = "(A;;CC;;;WD)";
    let block_sddl: String = std::iter::once(format!("D:{everyone}"))
        .chain(blocked.iter().map(|(_, s)| format!("(A;;CC;;;{})", s.0)))
        .collect();
    let mut filters = Vec::new();
    for layer in OUTBOUND_LAYERS {
        for (action, weight, sddl, hard) in [
            ("FWP_ACTION_PERMIT", 15, format!("D:{everyone}"), false),
            ("FWP_ACTION_BLOCK", 1, block_sddl.clone(), true),
        ] {
            let name = format!("{layer} {action}");
            filters.push(InstalledFilter {
                key: Guid::named(&name),
                name,
                layer,
                action,
                weight,
                user_sddl: sddl,
                hard,
                loopback_ports: None,
            });
        }
    }
    let command = policies.last().expect("the command policy was pushed last");
    let ports = ipc_schema::net::LOOPBACK_PROXY_PORTS;
    let name = "FWPM_LAYER_ALE_AUTH_CONNECT_V4 FWP_ACTION_PERMIT the egress proxy".to_string();
    filters.push(InstalledFilter {
        key: Guid::named(&name),
        name,
        layer: "FWPM_LAYER_ALE_AUTH_CONNECT_V4",
        action: "FWP_ACTION_PERMIT",
        weight: 10,
        user_sddl: format!("D:{everyone}(A;;CC;;;{})", command.sid.0),
        hard: false,
        loopback_ports: Some((*ports.start(), *ports.end())),
    });
    WfpSet {
        provider: Guid::named("provider"),
        sublayer: Guid::named("sublayer"),
        sublayer_weight: 0x7fff,
        blocked,
        filters,
    }
}

/// One profile of each kind, without paths (what a policy's SID and filters depend on).
fn every_profile() -> [Profile; 8] {
    [
        Profile::Fs(FsProfile::default()),
        Profile::Net,
        Profile::Exec,
        Profile::Secrets(ipc_schema::secrets::StoreKind::CredentialManager),
        Profile::Ui,
        Profile::Gateway,
        Profile::Servers,
        Profile::Broker(FsProfile::default()),
    ]
}

/// The ALE layers where a process connects out or listens.
const OUTBOUND_LAYERS: [&str; 4] = [
    "FWPM_LAYER_ALE_AUTH_CONNECT_V4",
    "FWPM_LAYER_ALE_AUTH_CONNECT_V6",
    "FWPM_LAYER_ALE_AUTH_LISTEN_V4",
    "FWPM_LAYER_ALE_AUTH_LISTEN_V6",
];

impl WfpSet {
    /// The stable text form, what `gatehouse setup network-filters` prints before it changes
    /// anything (and the golden file).
    pub fn render(&self) -> String {
        let mut s = String::new();
        let w = &mut s;
        let _ = writeln!(
            w,
            "# gatehouse's Windows Filtering Platform filters (persistent)"
        );
        let _ = writeln!(w, "provider {} \"gatehouse\"", self.provider);
        let _ = writeln!(
            w,
            "sublayer {} \"gatehouse\" weight {:#06x}",
            self.sublayer, self.sublayer_weight
        );
        for (name, sid) in &self.blocked {
            let _ = writeln!(w, "blocked: {name} {}", sid.0);
        }
        for f in &self.filters {
            let _ = writeln!(
                w,
                "filter {} {} {} weight {}{}{} user {}",
                f.key,
                f.layer,
                f.action,
                f.weight,
                if f.hard { " hard" } else { "" },
                match f.loopback_ports {
                    Some((lo, hi)) => format!(" to 127.0.0.1 ports {lo}-{hi}"),
                    None => String::new(),
                },
                f.user_sddl
            );
        }
        s
    }
}

/// `PROC_THREAD_ATTRIBUTE_MITIGATION_POLICY` and `..._CHILD_PROCESS_POLICY` flags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mitigations(pub Vec<&'static str>);

/// The whole confinement of one process kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WindowsPolicy {
    pub profile: &'static str,
    pub capability_name: String,
    pub sid: Sid,
    pub token: RestrictedToken,
    pub job: JobLimits,
    /// `PROC_THREAD_ATTRIBUTE_HANDLE_LIST`: the only inherited handles.
    pub inherited_handles: &'static str,
    /// The security descriptor the process object is created with (`lpProcessAttributes`),
    /// in SDDL; `None`: the token's default (the user may open it with full access).
    pub process_sddl: Option<&'static str>,
    pub aces: Vec<PathAce>,
    pub filters: Vec<WfpFilter>,
    pub mitigations: Mitigations,
}

/// A path rendered for the listing and for the ACE: Windows paths are UTF-16, so a path that is
/// not Unicode cannot be named in a policy.
fn path_text(p: &Path) -> Result<&str, crate::seatbelt::SbplError> {
    p.to_str()
        .ok_or_else(|| crate::seatbelt::SbplError::NotUtf8(p.to_path_buf()))
}

/// The security descriptor of a helper's process object, the counterpart of Linux's
/// `PR_SET_DUMPABLE 0`: protected (nothing inherited), full access for SYSTEM only, and for the
/// owner (`OW`, OWNER RIGHTS, which also takes away the owner's implicit right to read and
/// rewrite the DACL) and the user (`{user}`, the spawner's user SID, filled in at spawn: the
/// same grant for systems without OWNER RIGHTS, such as Wine) only waiting on it and its basic
/// query (`SYNCHRONIZE | PROCESS_QUERY_LIMITED_INFORMATION`). So another process of the user
/// cannot open it to read or write its memory, inject a thread, duplicate its handles or debug
/// it. The spawner keeps the full-access handle `CreateProcess` returns.
pub const HELPER_PROCESS_SDDL: &str = "D:P(A;;0x101000;;;OW)(A;;0x101000;;;{user})(A;;GA;;;SY)";

/// [`HELPER_PROCESS_SDDL`] (or any descriptor template) for the spawner's `user` SID.
pub fn process_sddl_for(template: &str, user: &str) -> String {
    template.replace("{user}", user)
}

/// What anyone but SYSTEM may do with a helper's process: wait on it, query its basics.
const PROCESS_OPEN_TO_OTHERS: u32 = 0x0010_1000;

/// The access mask of an SDDL rights field: hex (`0x1fffff`, as Windows renders a stored
/// descriptor), or two-letter codes; `None` for a code this check does not know (counted as
/// too much by the caller).
fn sddl_mask(rights: &str) -> Option<u32> {
    if let Some(hex) = rights
        .strip_prefix("0x")
        .or_else(|| rights.strip_prefix("0X"))
    {
        return u32::from_str_radix(hex, 16).ok();
    }
    if rights.is_empty() || !rights.len().is_multiple_of(2) {
        return None;
    }
    let mut mask = 0u32;
    for code in rights.as_bytes().chunks(2) {
        mask |= match code {
            b"GA" => 0x1000_0000,
            b"GX" => 0x2000_0000,
            b"GW" => 0x4000_0000,
            b"GR" => 0x8000_0000,
            b"SD" => 0x0001_0000,
            b"RC" => 0x0002_0000,
            b"WD" => 0x0004_0000,
            b"WO" => 0x0008_0000,
            _ => return None,
        };
    }
    Some(mask)
}

/// The DACL of a descriptor as Windows renders it (`O:..D:P(A;;FA;;;SY)(...)S:(...)`): its flags
/// (`P`, `AI`, `NO_ACCESS_CONTROL`, ...) and each ACE's text (`type;flags;rights;;;trustee`);
/// `None` when the descriptor has no DACL. The one reader of every DACL check (files, processes,
/// private directories).
pub fn dacl_aces(sddl: &str) -> Option<(&str, Vec<&str>)> {
    let body = sddl.find("D:").map(|i| &sddl[i + 2..])?;
    // The DACL ends where a SACL (`S:`) would begin; ACE bodies hold no parentheses.
    let body = body.split("S:(").next().unwrap_or(body);
    let mut parts = body.split('(');
    let flags = parts.next().unwrap_or("");
    Some((flags, parts.filter_map(|a| a.split(')').next()).collect()))
}

/// What a process's DACL (`sddl`, as read back) lets anyone but SYSTEM do beyond waiting on it
/// and its basic query, one entry per ACE too wide; empty: no other process of the user can
/// open it for more. A DACL that is missing or inherits ACEs is a gap.
pub fn process_dacl_gaps(sddl: &str) -> Vec<String> {
    let Some((flags, aces)) = dacl_aces(sddl) else {
        return vec!["it has no DACL: every process may open it".into()];
    };
    let mut gaps = Vec::new();
    if !flags.contains('P') {
        gaps.push(format!(
            "its DACL is not protected (it inherits ACEs): {sddl}"
        ));
    }
    for ace in aces {
        let f: Vec<&str> = ace.split(';').collect();
        let [kind, _, rights, _, _, sid, ..] = f[..] else {
            gaps.push(format!("an ACE this check cannot read: ({ace})"));
            continue;
        };
        if kind == "D" || sid == "SY" || sid == "S-1-5-18" {
            continue;
        }
        match sddl_mask(rights) {
            Some(m) if kind == "A" && m & !PROCESS_OPEN_TO_OTHERS == 0 => {}
            _ => gaps.push(format!("it grants {sid} {rights} ({ace})")),
        }
    }
    gaps
}

/// Made deny-only: administrators (an elevated user's token). The user's other groups stay: the
/// first access check still needs them to read system directories; the confinement is the
/// second check, against the restricting SIDs.
const DENY_ONLY: &[&str] = &["S-1-5-32-544 (Administrators)"];

const UI: &[&str] = &[
    "JOB_OBJECT_UILIMIT_DESKTOP",
    "JOB_OBJECT_UILIMIT_DISPLAYSETTINGS",
    "JOB_OBJECT_UILIMIT_EXITWINDOWS",
    "JOB_OBJECT_UILIMIT_GLOBALATOMS",
    "JOB_OBJECT_UILIMIT_HANDLES",
    "JOB_OBJECT_UILIMIT_READCLIPBOARD",
    "JOB_OBJECT_UILIMIT_SYSTEMPARAMETERS",
    "JOB_OBJECT_UILIMIT_WRITECLIPBOARD",
];

fn mitigations(children: bool, win32k: bool) -> Mitigations {
    let mut m = vec![
        "PROCESS_CREATION_MITIGATION_POLICY_PROHIBIT_DYNAMIC_CODE_ALWAYS_ON",
        "PROCESS_CREATION_MITIGATION_POLICY_STRICT_HANDLE_CHECKS_ALWAYS_ON",
        "PROCESS_CREATION_MITIGATION_POLICY_EXTENSION_POINT_DISABLE_ALWAYS_ON",
        "PROCESS_CREATION_MITIGATION_POLICY_IMAGE_LOAD_NO_REMOTE_ALWAYS_ON",
    ];
    if !win32k {
        m.push("PROCESS_CREATION_MITIGATION_POLICY_WIN32K_SYSTEM_CALL_DISABLE_ALWAYS_ON");
    }
    if !children {
        m.push("PROCESS_CREATION_CHILD_PROCESS_RESTRICTED");
    }
    Mitigations(m)
}

fn block_all_outbound() -> Vec<WfpFilter> {
    let mut out = Vec::new();
    for layer in OUTBOUND_LAYERS {
        out.push(WfpFilter {
            layer,
            action: "FWP_ACTION_BLOCK",
            weight: 1,
            conditions: Vec::new(),
        });
    }
    out
}

fn grant_ace(path: &Path, write: bool, sid: &Sid) -> Result<PathAce, crate::seatbelt::SbplError> {
    path_text(path)?;
    Ok(PathAce {
        path: path.to_path_buf(),
        // OICI: inherited by files and subdirectories. FR/FX read and traverse; FW and SD add
        // writing and deleting (no WRITE_DAC, no WRITE_OWNER: the grant cannot be widened).
        sddl: format!(
            "(A;OICI;{};;;{})",
            if write { "FRFWFXSD" } else { "FRFX" },
            sid.0
        ),
        why: if write {
            "grant root, read-write"
        } else {
            "grant root, read-only"
        },
    })
}

fn fs_aces(grants: &FsProfile, sid: &Sid) -> Result<Vec<PathAce>, crate::seatbelt::SbplError> {
    let mut out = Vec::new();
    for p in &grants.read_only {
        out.push(grant_ace(p, false, sid)?);
    }
    for p in &grants.read_write {
        out.push(grant_ace(p, true, sid)?);
    }
    Ok(out)
}

fn token(write_restricted: bool, sid: &Sid) -> RestrictedToken {
    RestrictedToken {
        disable_max_privilege: true,
        write_restricted,
        deny_only: DENY_ONLY.to_vec(),
        restricting: vec![sid.clone(), Sid(RESTRICTED.into())],
        app_container: None,
    }
}

fn base(profile: &'static str, capability_name: String) -> WindowsPolicy {
    let sid = capability_sid(&capability_name);
    WindowsPolicy {
        profile,
        capability_name,
        token: token(false, &sid),
        job: JobLimits {
            kill_on_close: true,
            active_processes: Some(1),
            die_on_unhandled_exception: true,
            process_memory: None,
            ui_restrictions: UI.to_vec(),
        },
        inherited_handles: "the broker channel only",
        process_sddl: Some(HELPER_PROCESS_SDDL),
        aces: Vec::new(),
        filters: block_all_outbound(),
        mitigations: mitigations(false, false),
        sid,
    }
}

/// The policy of a helper `profile`.
pub fn helper_policy(profile: &Profile) -> Result<WindowsPolicy, crate::seatbelt::SbplError> {
    let name = profile.name();
    let mut p = base(name, format!("gatehouse.{name}"));
    match profile {
        Profile::Fs(grants) | Profile::Broker(grants) => p.aces = fs_aces(grants, &p.sid)?,
        // The one helper with network: no filter for its SID.
        Profile::Net => p.filters.clear(),
        Profile::Exec => {
            p.token = token(true, &p.sid);
            // The exec helper makes each command's token from its own, and a restricted token
            // made from a restricted one keeps only the restricting SIDs both lists name
            // (CreateRestrictedToken takes the intersection): without the command SID and
            // every slot's here, a command's token would lose them and the spawner's
            // read-back would refuse it. (So the helper may write where a running command
            // may: its grants; nothing else names these SIDs.)
            let slots = CommandSlot::all().map(slot_sid);
            let command = std::iter::once(capability_sid(COMMAND_CAPABILITY)).chain(slots);
            p.token.restricting.splice(1..1, command);
            p.job.active_processes = None;
            p.mitigations = mitigations(true, false);
        }
        Profile::Ui => p.mitigations = mitigations(false, true),
        // Handles only: the broker passes each server's stdio in, and the helper opens nothing
        // by name, so an AppContainer with no capability costs it nothing. Not the fs-helper,
        // which writes the user's files: an AppContainer runs at low integrity, and the
        // no-write-up rule of a file without a label (medium) would refuse every write whatever
        // its ACEs say, unless the grant roots were relabelled low, which would open them to
        // every low-integrity process of the user.
        Profile::Servers => {
            p.token.app_container = Some(app_container_sid(&p.capability_name));
        }
        Profile::Secrets(_) | Profile::Gateway => {}
    }
    Ok(p)
}

/// The policy of one command of the exec-helper: its `Start`'s grants, gatehouse's own
/// directories (`protect`) that exist never written, no network. The broker applies its ACEs
/// before the start and the exec-helper reads them back: both compute it here, from the same
/// `Start`, so what one applies is what the other checks.
pub fn exec_command_policy(
    grants: &[ipc_schema::exec::PathGrant],
    protect: &[PathBuf],
    slot: CommandSlot,
) -> Result<WindowsPolicy, crate::seatbelt::SbplError> {
    command_policy(
        &crate::seatbelt::CommandSpec {
            grants: grants.iter().map(|g| (g.path.clone(), g.access)).collect(),
            no_access: Vec::new(),
            no_write: present(protect),
            network: crate::seatbelt::CommandNetwork::None,
            hide_sensitive: false,
            hide_globs: Vec::new(),
            own_dir: None,
            sockets: Vec::new(),
        },
        slot,
    )
}

/// Of `paths` (gatehouse's own directories, which commands never write), those that exist: a
/// deny ACE needs a file to sit on. One not there has nothing to protect yet: the broker makes
/// its config, data and runtime directories at start with a protected DACL of the user's and
/// SYSTEM's (which no ACE a grant root passes down reaches), and on Windows it makes no agent
/// directories.
fn present(paths: &[PathBuf]) -> Vec<PathBuf> {
    paths.iter().filter(|p| p.exists()).cloned().collect()
}

/// The policy of one command: write-restricted (it reads the system as the user), writes only
/// where a read-write grant's ACE names its SID, protected paths denied by explicit deny ACEs
/// (explicit ACEs on the protected path are evaluated before the allow it inherits from the
/// grant root), no network or only the proxy's loopback port.
///
/// The token carries the command SID (what the filters name) and `slot`'s SID; the ACEs name
/// only the slot's, so a command writes nothing another slot's grants hold.
pub fn command_policy(
    spec: &CommandSpec,
    slot: CommandSlot,
) -> Result<WindowsPolicy, crate::seatbelt::SbplError> {
    let mut p = base("command", COMMAND_CAPABILITY.into());
    p.token = token(true, &p.sid);
    let slot = slot_sid(slot);
    p.token.restricting.insert(1, slot.clone());
    p.job.active_processes = Some(256);
    p.inherited_handles = "stdin, stdout and stderr pipes only";
    // A command is an arbitrary program, which may open its own process by id (runtimes read
    // their own process information so): it keeps the default, as on Linux, where a command
    // is not made undumpable either.
    p.process_sddl = None;
    // A command is an arbitrary program, as on Linux (DESIGN rule 7: the exec sandbox is a
    // denylist): no dynamic-code ban (node, java, dotnet and PowerShell JIT), no strict handle
    // checks (they crash programs that close a stale handle), no remote-image ban (a grant may
    // sit on a network share). Only legacy extension points (AppInit DLLs and the like, which
    // no program needs) are off. Confinement is the token, ACEs, job and filters.
    p.mitigations = Mitigations(vec![
        "PROCESS_CREATION_MITIGATION_POLICY_EXTENSION_POINT_DISABLE_ALWAYS_ON",
    ]);
    for (path, access) in &spec.grants {
        p.aces
            .push(grant_ace(path, *access == GrantAccess::ReadWrite, &slot)?);
    }
    for (paths, rights, why) in [
        (&spec.no_access, "FA", "protected: no access"),
        (&spec.no_write, "FWSD", "protected: read-only"),
    ] {
        for path in paths {
            path_text(path)?;
            p.aces.push(PathAce {
                path: path.clone(),
                sddl: format!("(D;OICI;{rights};;;{})", slot.0),
                why,
            });
        }
    }
    if let CommandNetwork::LoopbackProxy { port } = spec.network {
        for layer in [
            "FWPM_LAYER_ALE_AUTH_CONNECT_V4",
            "FWPM_LAYER_ALE_AUTH_CONNECT_V6",
        ] {
            let addr = if layer.ends_with("V4") {
                "127.0.0.1"
            } else {
                "::1"
            };
            p.filters.push(WfpFilter {
                layer,
                action: "FWP_ACTION_PERMIT",
                weight: 2,
                conditions: vec![
                    format!("FWPM_CONDITION_IP_REMOTE_ADDRESS == {addr}"),
                    format!("FWPM_CONDITION_IP_REMOTE_PORT == {port}"),
                ],
            });
        }
    }
    Ok(p)
}

impl WindowsPolicy {
    /// The stable text form: one setting a line, in a fixed order.
    pub fn render(&self) -> String {
        let mut s = String::new();
        let w = &mut s;
        let _ = writeln!(w, "# gatehouse {} confinement (Windows)", self.profile);
        let _ = writeln!(w, "capability name: {}", self.capability_name);
        let _ = writeln!(w, "capability sid: {}", self.sid.0);
        let _ = writeln!(w, "[token]");
        let t = &self.token;
        let _ = writeln!(w, "disable max privilege: {}", t.disable_max_privilege);
        let _ = writeln!(w, "write restricted: {}", t.write_restricted);
        for d in &t.deny_only {
            let _ = writeln!(w, "deny only: {d}");
        }
        for r in &t.restricting {
            let _ = writeln!(w, "restricting: {}", r.0);
        }
        match &t.app_container {
            Some(c) => writeln!(w, "app container: {} (no capability)", c.0),
            None => writeln!(w, "app container: none"),
        }
        .expect("String");
        let _ = writeln!(w, "[job]");
        let j = &self.job;
        let _ = writeln!(w, "kill on close: {}", j.kill_on_close);
        match j.active_processes {
            Some(n) => writeln!(w, "active process limit: {n}"),
            None => writeln!(w, "active process limit: none"),
        }
        .expect("String");
        let _ = writeln!(
            w,
            "die on unhandled exception: {}",
            j.die_on_unhandled_exception
        );
        if let Some(m) = j.process_memory {
            let _ = writeln!(w, "process memory limit: {m}");
        }
        for u in &j.ui_restrictions {
            let _ = writeln!(w, "ui: {u}");
        }
        let _ = writeln!(w, "inherited handles: {}", self.inherited_handles);
        let _ = writeln!(
            w,
            "process security descriptor: {}",
            self.process_sddl.unwrap_or("the token's default")
        );
        let _ = writeln!(w, "[aces]");
        for a in &self.aces {
            let _ = writeln!(w, "{} {} ; {}", a.path.display(), a.sddl, a.why);
        }
        let _ = writeln!(w, "[wfp]");
        if self.filters.is_empty() {
            let _ = writeln!(w, "no filter: outbound network allowed");
        }
        for f in &self.filters {
            let _ = write!(
                w,
                "{} {} weight {} user {}",
                f.layer, f.action, f.weight, self.sid.0
            );
            for c in &f.conditions {
                let _ = write!(w, " && {c}");
            }
            let _ = writeln!(w);
        }
        let _ = writeln!(w, "[mitigations]");
        for m in &self.mitigations.0 {
            let _ = writeln!(w, "{m}");
        }
        s
    }
}

/// The value of a `PROCESS_CREATION_MITIGATION_POLICY_*` flag (winnt.h; they are macros, so
/// `windows-sys` has no constants for them). `None`: a name the applier does not know, which it
/// refuses rather than skips.
pub fn mitigation_creation_bits(name: &str) -> Option<u64> {
    Some(match name {
        "PROCESS_CREATION_MITIGATION_POLICY_STRICT_HANDLE_CHECKS_ALWAYS_ON" => 1 << 24,
        "PROCESS_CREATION_MITIGATION_POLICY_WIN32K_SYSTEM_CALL_DISABLE_ALWAYS_ON" => 1 << 28,
        "PROCESS_CREATION_MITIGATION_POLICY_EXTENSION_POINT_DISABLE_ALWAYS_ON" => 1 << 32,
        "PROCESS_CREATION_MITIGATION_POLICY_PROHIBIT_DYNAMIC_CODE_ALWAYS_ON" => 1 << 36,
        "PROCESS_CREATION_MITIGATION_POLICY_IMAGE_LOAD_NO_REMOTE_ALWAYS_ON" => 1 << 52,
        _ => return None,
    })
}

/// The child-process restriction is its own attribute
/// (`PROC_THREAD_ATTRIBUTE_CHILD_PROCESS_POLICY`), not a mitigation bit.
pub const CHILD_PROCESS_RESTRICTED: &str = "PROCESS_CREATION_CHILD_PROCESS_RESTRICTED";

impl Mitigations {
    /// The `PROC_THREAD_ATTRIBUTE_MITIGATION_POLICY` value; `Err` names an unknown flag.
    pub fn creation_bits(&self) -> Result<u64, String> {
        let mut bits = 0;
        for m in self.0.iter().filter(|m| **m != CHILD_PROCESS_RESTRICTED) {
            bits |= mitigation_creation_bits(m).ok_or_else(|| m.to_string())?;
        }
        Ok(bits)
    }

    /// Whether the process may not create child processes.
    pub fn child_process_restricted(&self) -> bool {
        self.0.contains(&CHILD_PROCESS_RESTRICTED)
    }
}

/// The value of a `JOB_OBJECT_UILIMIT_*` flag (winnt.h).
pub fn ui_limit_bits(name: &str) -> Option<u32> {
    Some(match name {
        "JOB_OBJECT_UILIMIT_HANDLES" => 0x1,
        "JOB_OBJECT_UILIMIT_READCLIPBOARD" => 0x2,
        "JOB_OBJECT_UILIMIT_WRITECLIPBOARD" => 0x4,
        "JOB_OBJECT_UILIMIT_SYSTEMPARAMETERS" => 0x8,
        "JOB_OBJECT_UILIMIT_DISPLAYSETTINGS" => 0x10,
        "JOB_OBJECT_UILIMIT_GLOBALATOMS" => 0x20,
        "JOB_OBJECT_UILIMIT_DESKTOP" => 0x40,
        "JOB_OBJECT_UILIMIT_EXITWINDOWS" => 0x80,
        _ => return None,
    })
}

impl JobLimits {
    /// The `JOBOBJECT_BASIC_UI_RESTRICTIONS` value; `Err` names an unknown flag.
    pub fn ui_bits(&self) -> Result<u32, String> {
        let mut bits = 0;
        for u in &self.ui_restrictions {
            bits |= ui_limit_bits(u).ok_or_else(|| u.to_string())?;
        }
        Ok(bits)
    }
}

/// One of the ACEs [`PathAce::sddl`] renders, as the applier passes it to `SetEntriesInAclW`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AceSpec {
    /// `D` (access denied) rather than `A` (access allowed).
    pub deny: bool,
    /// The access mask (`FILE_GENERIC_READ`, ...).
    pub mask: u32,
    /// `OICI`: inherited by files and subdirectories.
    pub inherit: bool,
    /// The trustee, `S-1-...`.
    pub sid: String,
}

/// Parses the one ACE form this module renders: `(A|D;OICI|;RIGHTS;;;SID)` with RIGHTS a run of
/// `FA` `FR` `FW` `FX` `SD`. Anything else is refused (`Err` says what), never guessed.
pub fn parse_ace(sddl: &str) -> Result<AceSpec, String> {
    let inner = sddl
        .strip_prefix('(')
        .and_then(|s| s.strip_suffix(')'))
        .ok_or_else(|| format!("not a parenthesised ACE: {sddl}"))?;
    let f: Vec<&str> = inner.split(';').collect();
    let [kind, flags, rights, "", "", sid] = f[..] else {
        return Err(format!(
            "not an ACE of the form (A;OICI;RIGHTS;;;SID): {sddl}"
        ));
    };
    let deny = match kind {
        "A" => false,
        "D" => true,
        k => return Err(format!("ACE type {k} is not A or D: {sddl}")),
    };
    let inherit = match flags {
        "OICI" => true,
        "" => false,
        f => return Err(format!("ACE flags {f} are not OICI: {sddl}")),
    };
    if rights.is_empty() || rights.len() % 2 != 0 {
        return Err(format!(
            "ACE rights {rights} are not two-letter codes: {sddl}"
        ));
    }
    let mut mask = 0;
    for code in rights.as_bytes().chunks(2) {
        mask |= match code {
            b"FA" => 0x001F_01FF, // FILE_ALL_ACCESS
            b"FR" => 0x0012_0089, // FILE_GENERIC_READ
            b"FW" => 0x0012_0116, // FILE_GENERIC_WRITE
            b"FX" => 0x0012_00A0, // FILE_GENERIC_EXECUTE
            b"SD" => 0x0001_0000, // DELETE
            other => {
                return Err(format!(
                    "ACE right {} is not one of FA FR FW FX SD: {sddl}",
                    String::from_utf8_lossy(other)
                ))
            }
        };
    }
    if !sid.starts_with("S-1-") {
        return Err(format!("ACE trustee {sid} is not a SID: {sddl}"));
    }
    Ok(AceSpec {
        deny,
        mask,
        inherit,
        sid: sid.to_string(),
    })
}

/// Whether a DACL read back from a path (SDDL, as `ConvertSecurityDescriptorToString...`
/// renders it: `D:P(A;OICI;FR;;;S-1-...)(...)`) holds `want`: an ACE of the same type for the
/// same SID, inherited by files and subdirectories (an inherited copy, `ID`, counts: it came
/// from a parent that holds it), whose mask has every right `want` asks for. Windows renders
/// a mask as the two-letter codes when it is exactly one of them, as `0x...` otherwise; any
/// other form does not count. The exec helper checks each grant's ACE with this before it
/// starts a command (the broker applies them).
pub fn dacl_holds(dacl: &str, want: &AceSpec) -> bool {
    let Some((_, aces)) = dacl_aces(dacl) else {
        return false;
    };
    aces.into_iter().any(|ace| {
        let f: Vec<&str> = ace.split(';').collect();
        let [kind, flags, rights, _, _, sid, ..] = f[..] else {
            return false;
        };
        let mask = match rights
            .strip_prefix("0x")
            .or_else(|| rights.strip_prefix("0X"))
        {
            Some(hex) => u32::from_str_radix(hex, 16).ok(),
            None => parse_ace(&format!("(A;;{rights};;;S-1-0)"))
                .ok()
                .map(|a| a.mask),
        };
        let inherits = flags.contains("OI") && flags.contains("CI");
        kind == if want.deny { "D" } else { "A" }
            && sid.eq_ignore_ascii_case(&want.sid)
            && inherits == want.inherit
            && mask.is_some_and(|m| m & want.mask == want.mask)
    })
}

// ---- What a confined process reads of itself, and the one check of it ----
//
// The helper checks itself with these before its first request (`windows::lockdown`), the
// spawner checks the token it made, and the broker checks the helper's hello
// ([`verify_report`]): one implementation, compiled on every OS so that it is unit-tested
// everywhere.

/// `JOB_OBJECT_LIMIT_ACTIVE_PROCESS` (winnt.h).
pub const JOB_OBJECT_LIMIT_ACTIVE_PROCESS: u32 = 0x0000_0008;
/// `JOB_OBJECT_LIMIT_DIE_ON_UNHANDLED_EXCEPTION` (winnt.h).
pub const JOB_OBJECT_LIMIT_DIE_ON_UNHANDLED_EXCEPTION: u32 = 0x0000_0400;
/// `JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE` (winnt.h).
pub const JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE: u32 = 0x0000_2000;
/// The one privilege `DISABLE_MAX_PRIVILEGE` keeps.
pub const CHANGE_NOTIFY: &str = "SeChangeNotifyPrivilege";

/// What this process's own token says, read by the process itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenFacts {
    /// `IsTokenRestricted`: the token has restricting SIDs.
    pub restricted: bool,
    /// `TokenRestrictedSids`, as strings.
    pub restricting_sids: Vec<String>,
    /// Privileges still in the token (whether enabled or not), by name.
    pub privileges: Vec<String>,
    /// The Administrators group is in the token and not deny-only.
    pub administrators_usable: bool,
    /// The restricting SIDs are checked for writes only (`WRITE_RESTRICTED`), or why that could
    /// not be read. `Ok(false)` for an unrestricted token.
    pub write_restricted: Result<bool, String>,
    /// The AppContainer SID when the token is in one (`TokenIsAppContainer`,
    /// `TokenAppContainerSid`), or why that could not be read.
    pub app_container: Result<Option<String>, String>,
}

/// What is missing from `facts` for a process that should run under `spec` with `capability`,
/// one entry per missing piece (empty: the token is what the profile asks).
pub fn missing_from_token(
    facts: &TokenFacts,
    spec: &RestrictedToken,
    capability: &str,
) -> Vec<String> {
    let mut missing = Vec::new();
    if !facts.restricted {
        missing.push("restricted token: the process token has no restricting SIDs (it was not started through the restricted-token spawn)".to_string());
    }
    for want in &spec.restricting {
        if !facts
            .restricting_sids
            .iter()
            .any(|s| s.eq_ignore_ascii_case(&want.0))
        {
            let what = if want.0 == capability {
                "the profile's capability SID"
            } else {
                "restricting SID"
            };
            missing.push(format!(
                "restricted token: {what} {} is not among its restricting SIDs",
                want.0
            ));
        }
    }
    let extra: Vec<&String> = facts
        .privileges
        .iter()
        .filter(|p| *p != CHANGE_NOTIFY)
        .collect();
    if spec.disable_max_privilege && !extra.is_empty() {
        missing.push(format!(
            "restricted token: privileges not stripped: {}",
            extra
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    // Only the weaker kind is a gap: a write-restricted token where the profile asks for a
    // fully restricted one (every read also checked against the restricting SIDs).
    if facts.restricted && !spec.write_restricted {
        match &facts.write_restricted {
            Ok(false) => {}
            Ok(true) => missing.push("restricted token: it is write-restricted, but the profile asks for a fully restricted one (reads unconfined)".to_string()),
            Err(e) => missing.push(format!("restricted token: cannot tell whether it is write-restricted: {e}")),
        }
    }
    if facts.administrators_usable {
        missing.push("restricted token: Administrators is not deny-only".to_string());
    }
    if let Some(want) = &spec.app_container {
        match &facts.app_container {
            Ok(Some(have)) if have.eq_ignore_ascii_case(&want.0) => {}
            Ok(Some(have)) => missing.push(format!(
                "app container: the token is in {have}, not in the profile's {}",
                want.0
            )),
            Ok(None) => missing.push(format!(
                "app container: the token is in no AppContainer (the profile's is {})",
                want.0
            )),
            Err(e) => missing.push(format!(
                "app container: cannot tell whether the token is in one: {e}"
            )),
        }
    }
    missing
}

/// What this process can see of the job it runs in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobFacts {
    pub in_job: bool,
    /// `JOB_OBJECT_LIMIT_*` flags of the job this process is directly in.
    pub limit_flags: u32,
    pub active_process_limit: u32,
    /// `JOB_OBJECT_UILIMIT_*` flags, or why they could not be read.
    pub ui_restrictions: Result<u32, String>,
}

/// What is missing from `facts` for a process that should run under `limits`.
pub fn missing_from_job(facts: &JobFacts, limits: &JobLimits) -> Vec<String> {
    if !facts.in_job {
        return vec![
            "job object: the process is in no job (it was not started through the confined spawn)"
                .into(),
        ];
    }
    let mut missing = Vec::new();
    if limits.kill_on_close && facts.limit_flags & JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE == 0 {
        missing.push("job object: kill-on-close is not set".into());
    }
    if limits.die_on_unhandled_exception
        && facts.limit_flags & JOB_OBJECT_LIMIT_DIE_ON_UNHANDLED_EXCEPTION == 0
    {
        missing.push("job object: die-on-unhandled-exception is not set".into());
    }
    if let Some(n) = limits.active_processes {
        if facts.limit_flags & JOB_OBJECT_LIMIT_ACTIVE_PROCESS == 0
            || facts.active_process_limit > n
        {
            missing.push(format!(
                "job object: active process limit is not {n} (flags {:#x}, limit {})",
                facts.limit_flags, facts.active_process_limit
            ));
        }
    }
    match (limits.ui_bits(), &facts.ui_restrictions) {
        (Ok(0), _) => {}
        (Ok(want), Ok(have)) if have & want != want => missing.push(format!(
            "job object: UI restrictions {have:#x} lack {:#x}",
            want & !have
        )),
        (Ok(_), Ok(_)) => {}
        (Ok(_), Err(e)) => missing.push(format!("job object: UI restrictions cannot be read: {e}")),
        (Err(n), _) => missing.push(format!("job object: unknown UI limit {n}")),
    }
    missing
}

/// The short name of a mitigation (`PROHIBIT_DYNAMIC_CODE_ALWAYS_ON`), as reports carry it.
pub fn mitigation_short(m: &str) -> &str {
    m.trim_start_matches("PROCESS_CREATION_MITIGATION_POLICY_")
        .trim_start_matches("PROCESS_CREATION_")
}

/// The report a helper sends in its hello: what it read of its token and job, and the
/// mitigations it read back in force.
pub fn confinement(
    token: Option<&TokenFacts>,
    job: Option<&JobFacts>,
    mitigations: Vec<String>,
) -> WindowsConfinement {
    let mut c = WindowsConfinement {
        mitigations,
        ..WindowsConfinement::default()
    };
    if let Some(t) = token {
        c.restricted_token = t.restricted;
        c.write_restricted = t.write_restricted.clone().ok();
        c.restricting_sids = t.restricting_sids.clone();
        c.privileges = t.privileges.clone();
        c.administrators_usable = t.administrators_usable;
        c.app_container = t.app_container.clone().ok().flatten();
    }
    if let Some(j) = job {
        c.in_job = j.in_job;
        c.job_limit_flags = j.limit_flags;
        c.job_active_processes = j.active_process_limit;
        c.job_ui_restrictions = j.ui_restrictions.clone().ok();
    }
    c
}

/// What is missing from a helper's report for its profile's `policy`: its token, its job and
/// the mitigations the policy asks for (one entry per missing piece; empty: confined as asked).
pub fn missing(policy: &WindowsPolicy, c: &WindowsConfinement) -> Vec<String> {
    let token = TokenFacts {
        restricted: c.restricted_token,
        restricting_sids: c.restricting_sids.clone(),
        privileges: c.privileges.clone(),
        administrators_usable: c.administrators_usable,
        write_restricted: c
            .write_restricted
            .ok_or_else(|| "the helper could not read it".to_string()),
        app_container: Ok(c.app_container.clone()),
    };
    let job = JobFacts {
        in_job: c.in_job,
        limit_flags: c.job_limit_flags,
        active_process_limit: c.job_active_processes,
        ui_restrictions: c
            .job_ui_restrictions
            .ok_or_else(|| "the helper could not read them".to_string()),
    };
    let mut out = missing_from_token(&token, &policy.token, &policy.sid.0);
    out.extend(missing_from_job(&job, &policy.job));
    if policy.process_sddl.is_some() {
        match &c.process_dacl {
            None => out.push("process DACL: it could not be read".into()),
            Some(d) => out.extend(
                process_dacl_gaps(d)
                    .into_iter()
                    .map(|g| format!("process DACL: {g}")),
            ),
        }
    }
    for m in &policy.mitigations.0 {
        let short = mitigation_short(m);
        if !c.mitigations.iter().any(|h| h == short) {
            out.push(format!("mitigation {short} is not in force"));
        }
    }
    if let Some(gap) = outbound_gap(policy, c.outbound.as_ref()) {
        out.push(gap);
    }
    out
}

/// Whether `policy` asks for outbound network to be refused (every profile but net's).
pub fn refuses_outbound(policy: &WindowsPolicy) -> bool {
    policy
        .filters
        .iter()
        .any(|f| f.action == "FWP_ACTION_BLOCK")
}

/// The gap when `policy` refuses outbound network and the process's own try (`probe`) was not
/// refused: the WFP filters are not installed, or do not match its token.
pub fn outbound_gap(policy: &WindowsPolicy, probe: Option<&OutboundProbe>) -> Option<String> {
    if !refuses_outbound(policy) {
        return None;
    }
    let seen = match probe {
        Some(OutboundProbe::Refused) => return None,
        Some(OutboundProbe::NotRefused(what)) => what.as_str(),
        None => "it did not try",
    };
    Some(format!(
        "outbound network is not refused ({seen}): the WFP filters of `gatehouse setup network-filters` are not in force"
    ))
}

/// The broker's check of a helper's hello on Windows (the counterpart of
/// `LockdownReport::verify` with /proc on Linux): a report without its Windows part, or one
/// that falls short of `policy`, is refused, naming what is missing. With `allow_degraded` a
/// short report passes only if the helper named the same gaps itself (`degraded`).
pub fn verify_report(
    policy: &WindowsPolicy,
    report: &LockdownReport,
    allow_degraded: bool,
) -> Result<(), String> {
    let Some(c) = report.windows.as_deref() else {
        return Err(format!(
            "the {} helper's report says nothing of its token, job or mitigations",
            policy.profile
        ));
    };
    let gaps = missing(policy, c);
    if gaps.is_empty() {
        return Ok(());
    }
    if allow_degraded && gaps.iter().all(|g| report.degraded.iter().any(|d| d == g)) {
        return Ok(());
    }
    Err(format!(
        "the {} helper is not confined as its profile asks: {}",
        policy.profile,
        gaps.join("; ")
    ))
}

/// Where a helper's report of its confinement differs from what the spawner reads of the
/// process from outside ([`crate::windows::ConfinedChild::observe`]), one entry per field. A
/// field one side could not read (`None`) is not a difference; the policy check names it.
/// Lists are compared as sets (SIDs case-insensitively).
pub fn differences(report: &WindowsConfinement, observed: &WindowsConfinement) -> Vec<String> {
    fn set(v: &[String]) -> std::collections::BTreeSet<String> {
        v.iter().map(|s| s.to_ascii_uppercase()).collect()
    }
    let mut out = Vec::new();
    let mut field = |name: &str, said: String, seen: String| {
        if said != seen {
            out.push(format!("{name}: it says {said}, the spawner sees {seen}"));
        }
    };
    field(
        "restricted token",
        report.restricted_token.to_string(),
        observed.restricted_token.to_string(),
    );
    if let (Some(a), Some(b)) = (report.write_restricted, observed.write_restricted) {
        field("write-restricted", a.to_string(), b.to_string());
    }
    let lists = [
        (
            "restricting SIDs",
            &report.restricting_sids,
            &observed.restricting_sids,
        ),
        ("privileges", &report.privileges, &observed.privileges),
        ("mitigations", &report.mitigations, &observed.mitigations),
    ];
    for (name, a, b) in lists {
        let (a, b) = (set(a), set(b));
        if a != b {
            field(name, format!("{a:?}"), format!("{b:?}"));
        }
    }
    field(
        "AppContainer",
        format!(
            "{:?}",
            report.app_container.as_deref().map(str::to_ascii_uppercase)
        ),
        format!(
            "{:?}",
            observed
                .app_container
                .as_deref()
                .map(str::to_ascii_uppercase)
        ),
    );
    field(
        "Administrators usable",
        report.administrators_usable.to_string(),
        observed.administrators_usable.to_string(),
    );
    field(
        "in the spawner's job",
        report.in_job.to_string(),
        observed.in_job.to_string(),
    );
    field(
        "job limit flags",
        format!("{:#x}", report.job_limit_flags),
        format!("{:#x}", observed.job_limit_flags),
    );
    field(
        "job process limit",
        report.job_active_processes.to_string(),
        observed.job_active_processes.to_string(),
    );
    if let (Some(a), Some(b)) = (report.job_ui_restrictions, observed.job_ui_restrictions) {
        field("job UI restrictions", format!("{a:#x}"), format!("{b:#x}"));
    }
    if let (Some(a), Some(b)) = (&report.process_dacl, &observed.process_dacl) {
        field("process DACL", a.clone(), b.clone());
    }
    out
}

/// The whole check of a Windows helper's hello, as the broker makes it before routing anything
/// to it (the counterpart of `LockdownReport::verify` with the spawner's /proc read): the
/// report must say what the spawner sees of the process from outside (`observed`), so a helper
/// cannot talk its way past the check, and then be confined as `policy` asks
/// ([`verify_report`], with its rule for `allow_degraded`). A difference is refused even
/// degraded: it means the report is false, or the process changed under the spawner.
pub fn verify_observed(
    policy: &WindowsPolicy,
    report: &LockdownReport,
    observed: &WindowsConfinement,
    allow_degraded: bool,
) -> Result<(), String> {
    if let Some(c) = report.windows.as_deref() {
        let diff = differences(c, observed);
        if !diff.is_empty() {
            return Err(format!(
                "the {} helper's report does not match what the spawner reads of its process: {}",
                policy.profile,
                diff.join("; ")
            ));
        }
    }
    verify_report(policy, report, allow_degraded)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(n: u8) -> CommandSlot {
        CommandSlot::new(n).unwrap()
    }

    /// A command with no grants and no network.
    pub(super) fn offline() -> CommandSpec {
        CommandSpec {
            grants: vec![],
            no_access: vec![],
            no_write: vec![],
            network: CommandNetwork::None,
            hide_sensitive: false,
            hide_globs: Vec::new(),
            own_dir: None,
            sockets: Vec::new(),
        }
    }

    #[test]
    fn a_dacl_read_back_holds_an_ace_only_as_rendered_or_wider() {
        let sid = "S-1-15-3-1024-1-2-3-4-5-6-7-8";
        let rw = parse_ace(&format!("(A;OICI;FRFWFXSD;;;{sid})")).unwrap();
        let ro = parse_ace(&format!("(A;OICI;FRFX;;;{sid})")).unwrap();
        let deny = parse_ace(&format!("(D;OICI;FA;;;{sid})")).unwrap();
        let owner = "(A;OICI;FA;;;S-1-5-21-1-2-3-1001)";
        // As Windows renders what `apply_aces` wrote: the read-write mask in hex.
        let read_back = format!("D:AI{owner}(A;OICI;0x1301bf;;;{sid})");
        assert!(dacl_holds(&read_back, &rw));
        assert!(
            dacl_holds(&read_back, &ro),
            "a wider grant holds the narrower"
        );
        assert!(!dacl_holds(&read_back, &deny), "an allow is not a deny");
        // The read-only ACE, rendered as letters, does not hold the read-write one.
        let ro_back = format!("D:(A;OICI;FR;;;S-1-1-0)(A;OICI;0x1200a9;;;{sid})");
        assert!(dacl_holds(&ro_back, &ro));
        assert!(!dacl_holds(&ro_back, &rw));
        // Inherited from a parent (ID): it still names the SID with OICI.
        assert!(dacl_holds(&format!("D:(D;OICIID;FA;;;{sid})"), &deny));
        // Not inherited by children, another SID, a SACL's ACE, no DACL: none holds.
        assert!(!dacl_holds(&format!("D:(A;;0x1301bf;;;{sid})"), &rw));
        assert!(!dacl_holds(&format!("D:(A;OICI;0x1301bf;;;{sid}9)"), &rw));
        assert!(!dacl_holds(
            &format!("D:{owner}S:(A;OICI;0x1301bf;;;{sid})"),
            &rw
        ));
        assert!(!dacl_holds("O:BAG:SY", &rw));
        assert!(!dacl_holds(&format!("D:(A;OICI;GA;;;{sid})"), &rw));
    }

    #[test]
    fn every_generated_setting_has_a_value_the_applier_knows() {
        let spec = CommandSpec {
            grants: vec![("C:\\w".into(), GrantAccess::ReadWrite)],
            no_access: vec!["C:\\w\\.ssh".into()],
            no_write: vec!["C:\\w\\.git\\hooks".into()],
            network: CommandNetwork::LoopbackProxy { port: 1 },
            hide_sensitive: false,
            hide_globs: Vec::new(),
            own_dir: None,
            sockets: Vec::new(),
        };
        let mut all = vec![command_policy(&spec, slot(0)).unwrap()];
        for p in [
            Profile::Fs(FsProfile {
                read_only: vec!["C:\\r".into()],
                read_write: vec!["C:\\w".into()],
            }),
            Profile::Net,
            Profile::Exec,
            Profile::Secrets(ipc_schema::secrets::StoreKind::CredentialManager),
            Profile::Ui,
            Profile::Gateway,
            Profile::Servers,
        ] {
            all.push(helper_policy(&p).unwrap());
        }
        for w in &all {
            let bits = w.mitigations.creation_bits().unwrap();
            // Dynamic code and strict handle checks are in every helper profile, and in no
            // command (JIT runtimes must run there).
            let helper = w.profile != "command";
            assert_eq!(bits & (1 << 36) != 0, helper, "{}", w.profile);
            assert_eq!(bits & (1 << 24) != 0, helper, "{}", w.profile);
            assert_ne!(bits & (1 << 32), 0, "{}", w.profile);
            assert_eq!(w.job.ui_bits().unwrap(), 0xFF, "{}", w.profile);
            // A command's ACEs name its slot's SID, never the command SID every slot's token
            // carries (else every command could write there); a helper's its own.
            let named = match w.profile {
                "command" => slot_sid(slot(0)),
                _ => w.sid.clone(),
            };
            for a in &w.aces {
                let ace = parse_ace(&a.sddl).unwrap();
                assert_eq!(ace.sid, named.0);
                assert!(ace.inherit);
            }
        }
    }

    #[test]
    fn the_exec_token_keeps_the_command_and_slot_sids_so_commands_made_from_it_do_too() {
        let exec = helper_policy(&Profile::Exec).unwrap();
        for n in 0..CommandSlot::COUNT {
            let cmd = command_policy(&offline(), slot(n)).unwrap();
            // The command SID (the filters'), the slot's, RESTRICTED: every one among the
            // exec helper's (the intersection CreateRestrictedToken keeps is then the
            // command's whole list).
            assert_eq!(
                cmd.token.restricting,
                [
                    capability_sid("gatehouse.cmd"),
                    capability_sid(&format!("gatehouse.cmd.{n}")),
                    Sid(RESTRICTED.into())
                ]
            );
            for sid in &cmd.token.restricting {
                assert!(exec.token.restricting.contains(sid), "{}", sid.0);
            }
            // And no other helper carries either.
            for p in [
                Profile::Net,
                Profile::Ui,
                Profile::Gateway,
                Profile::Servers,
            ] {
                let other = helper_policy(&p).unwrap().token.restricting;
                assert!(!other.contains(&cmd.sid));
                assert!(!other.contains(&cmd.token.restricting[1]));
            }
        }
        // The slots' SIDs differ from each other and from the command SID.
        let mut sids: Vec<_> = CommandSlot::all().map(|s| slot_sid(s).0).collect();
        sids.push(capability_sid(COMMAND_CAPABILITY).0);
        sids.sort();
        sids.dedup();
        assert_eq!(sids.len(), usize::from(CommandSlot::COUNT) + 1);
    }

    #[test]
    fn aces_parse_to_the_rights_they_name_and_nothing_else_parses() {
        let sid = capability_sid("gatehouse.fs").0;
        let ro = parse_ace(&format!("(A;OICI;FRFX;;;{sid})")).unwrap();
        assert_eq!((ro.deny, ro.mask), (false, 0x0012_00A9));
        // Read-write adds writing and deleting, and never WRITE_DAC (0x40000) or WRITE_OWNER.
        let rw = parse_ace(&format!("(A;OICI;FRFWFXSD;;;{sid})")).unwrap();
        assert_eq!(rw.mask, 0x0013_01BF);
        assert_eq!(rw.mask & 0x000C_0000, 0);
        assert_eq!(
            parse_ace(&format!("(D;OICI;FA;;;{sid})")).unwrap().mask,
            0x001F_01FF
        );
        for bad in [
            "A;OICI;FR;;;S-1-1-0",
            "(A;OICI;GA;;;S-1-1-0)",
            "(OA;OICI;FR;;;S-1-1-0)",
            "(A;OI;FR;;;S-1-1-0)",
            "(A;OICI;FR;;;WD)",
            "(A;OICI;F;;;S-1-1-0)",
            "(A;OICI;FR;x;;S-1-1-0)",
        ] {
            assert!(parse_ace(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn capability_sids_are_per_name_and_stable() {
        let fs = capability_sid("gatehouse.fs");
        assert_eq!(
            fs,
            capability_sid("GATEHOUSE.FS"),
            "the name is upper-cased"
        );
        assert_ne!(fs, capability_sid("gatehouse.net"));
        assert!(fs.0.starts_with("S-1-15-3-1024-"));
        assert_eq!(fs.0.split('-').count(), 4 + 1 + 8);
    }

    #[test]
    fn app_container_sids_are_derived_as_windows_derives_them() {
        // The package SID of the legacy Edge AppContainer, as Windows names it in ACLs and
        // firewall rules: a vector computed by Windows, not by this function.
        let edge =
            "S-1-15-2-3624051433-2125758914-1423191267-1740899205-1073925389-3782572162-737981194";
        assert_eq!(
            app_container_sid("Microsoft.MicrosoftEdge_8wekyb3d8bbwe").0,
            edge
        );
        assert_eq!(
            app_container_sid("MICROSOFT.MICROSOFTEDGE_8WEKYB3D8BBWE").0,
            edge,
            "the name is lower-cased"
        );
        let servers = app_container_sid("gatehouse.servers");
        assert!(servers.0.starts_with("S-1-15-2-"));
        assert_eq!(servers.0.split('-').count(), 4 + 7);
        assert_ne!(servers, app_container_sid("gatehouse.fs"));
    }

    #[test]
    fn only_net_has_no_outbound_block_and_only_exec_may_start_processes() {
        for p in every_profile() {
            let w = helper_policy(&p).unwrap();
            assert_eq!(w.filters.is_empty(), p == Profile::Net, "{}", w.render());
            assert_eq!(
                w.mitigations
                    .0
                    .contains(&"PROCESS_CREATION_CHILD_PROCESS_RESTRICTED"),
                p != Profile::Exec
            );
            assert!(w.job.kill_on_close);
        }
    }

    #[test]
    fn a_protected_path_gets_a_deny_ace_for_the_command_sid() {
        let spec = CommandSpec {
            grants: vec![("C:\\Users\\a".into(), GrantAccess::ReadWrite)],
            no_access: vec!["C:\\Users\\a\\.ssh".into()],
            no_write: vec![],
            network: CommandNetwork::LoopbackProxy { port: 4000 },
            hide_sensitive: false,
            hide_globs: Vec::new(),
            own_dir: None,
            sockets: Vec::new(),
        };
        let w = command_policy(&spec, slot(5)).unwrap();
        let sid = capability_sid("gatehouse.cmd.5").0;
        assert_eq!(w.aces[1].sddl, format!("(D;OICI;FA;;;{sid})"));
        assert!(w.filters.iter().any(|f| f.action == "FWP_ACTION_PERMIT"
            && f.conditions
                .contains(&"FWPM_CONDITION_IP_REMOTE_PORT == 4000".to_string())));
    }

    /// What the broker applies and the exec-helper checks: the grant's ACE, and a deny for each
    /// of gatehouse's directories that exists (one not made yet has nothing to carry it).
    #[test]
    fn an_exec_commands_policy_denies_writes_only_to_own_directories_that_exist() {
        let d = tempfile::tempdir().unwrap();
        let (made, not_made) = (d.path().join("data"), d.path().join("agents"));
        std::fs::create_dir(&made).unwrap();
        let grant = ipc_schema::exec::PathGrant {
            path: d.path().join("project"),
            access: GrantAccess::ReadWrite,
        };
        let w = exec_command_policy(
            std::slice::from_ref(&grant),
            &[made.clone(), not_made],
            slot(3),
        )
        .unwrap();
        let sid = capability_sid("gatehouse.cmd.3").0;
        let aces: Vec<_> = w
            .aces
            .iter()
            .map(|a| (a.path.clone(), a.sddl.clone()))
            .collect();
        assert_eq!(
            aces,
            [
                (
                    grant.path.clone(),
                    grant_ace(&grant.path, true, &Sid(sid.clone()))
                        .unwrap()
                        .sddl
                ),
                (made, format!("(D;OICI;FWSD;;;{sid})")),
            ]
        );
    }
}

#[cfg(test)]
mod verdict_tests {
    use super::*;
    use crate::Profile;

    fn fs_policy() -> WindowsPolicy {
        helper_policy(&Profile::Fs(crate::FsProfile::default())).unwrap()
    }

    fn good_token(p: &WindowsPolicy) -> TokenFacts {
        TokenFacts {
            restricted: true,
            restricting_sids: p.token.restricting.iter().map(|s| s.0.clone()).collect(),
            privileges: vec!["SeChangeNotifyPrivilege".into()],
            administrators_usable: false,
            write_restricted: Ok(false),
            app_container: Ok(p.token.app_container.as_ref().map(|s| s.0.clone())),
        }
    }

    fn good_job() -> JobFacts {
        JobFacts {
            in_job: true,
            limit_flags: 0x2000 | 0x400 | 0x8,
            active_process_limit: 1,
            ui_restrictions: Ok(0xFF),
        }
    }

    #[test]
    fn a_token_and_job_as_the_policy_asks_miss_nothing_and_each_gap_is_named() {
        let p = fs_policy();
        assert_eq!(
            missing_from_token(&good_token(&p), &p.token, &p.sid.0),
            Vec::<String>::new()
        );
        assert_eq!(missing_from_job(&good_job(), &p.job), Vec::<String>::new());

        let mut t = good_token(&p);
        t.restricting_sids.retain(|s| s != &p.sid.0);
        let m = missing_from_token(&t, &p.token, &p.sid.0);
        assert_eq!(m.len(), 1);
        assert!(
            m[0].contains("the profile's capability SID") && m[0].contains(&p.sid.0),
            "{m:?}"
        );

        let mut t = good_token(&p);
        t.privileges.push("SeDebugPrivilege".into());
        t.administrators_usable = true;
        t.write_restricted = Ok(true);
        let m = missing_from_token(&t, &p.token, &p.sid.0).join("; ");
        assert!(
            m.contains("privileges not stripped: SeDebugPrivilege"),
            "{m}"
        );
        assert!(m.contains("Administrators is not deny-only"), "{m}");
        assert!(
            m.contains("it is write-restricted, but the profile asks for a fully restricted one"),
            "{m}"
        );
        // Exec asks for write-restricted: a write-restricted token is what it wants, and a
        // token whose kind cannot be read is not held against it.
        let exec = helper_policy(&Profile::Exec).unwrap();
        let mut t = good_token(&exec);
        t.write_restricted = Err("no".into());
        assert_eq!(
            missing_from_token(&t, &exec.token, &exec.sid.0),
            Vec::<String>::new()
        );
        let mut t = good_token(&p);
        t.write_restricted = Err("no".into());
        assert!(missing_from_token(&t, &p.token, &p.sid.0)[0]
            .contains("cannot tell whether it is write-restricted: no"));

        for (flags, limit, ui, want) in [
            (0x400 | 0x8, 1, Ok(0xFF), "kill-on-close is not set"),
            (
                0x2000 | 0x8,
                1,
                Ok(0xFF),
                "die-on-unhandled-exception is not set",
            ),
            (0x2000 | 0x400, 0, Ok(0xFF), "active process limit is not 1"),
            (
                0x2000 | 0x400 | 0x8,
                2,
                Ok(0xFF),
                "active process limit is not 1",
            ),
            (
                0x2000 | 0x400 | 0x8,
                1,
                Ok(0x7F),
                "UI restrictions 0x7f lack 0x80",
            ),
            (
                0x2000 | 0x400 | 0x8,
                1,
                Err("no".into()),
                "UI restrictions cannot be read: no",
            ),
        ] {
            let j = JobFacts {
                in_job: true,
                limit_flags: flags,
                active_process_limit: limit,
                ui_restrictions: ui,
            };
            let m = missing_from_job(&j, &p.job);
            assert_eq!(m.len(), 1, "{m:?}");
            assert!(m[0].contains(want), "{m:?} lacks {want}");
        }
        let outside = JobFacts {
            in_job: false,
            ..good_job()
        };
        assert!(missing_from_job(&outside, &p.job)[0].contains("in no job"));
        // Exec has no process limit: any is fine.
        let exec = helper_policy(&Profile::Exec).unwrap();
        let j = JobFacts {
            limit_flags: 0x2000 | 0x400,
            active_process_limit: 0,
            ..good_job()
        };
        assert_eq!(missing_from_job(&j, &exec.job), Vec::<String>::new());
    }

    #[test]
    fn only_the_servers_helper_runs_in_an_app_container_and_it_must_be_that_one() {
        for p in every_profile() {
            let w = helper_policy(&p).unwrap();
            let want = (p == Profile::Servers).then(|| app_container_sid("gatehouse.servers"));
            assert_eq!(w.token.app_container, want, "{}", w.render());
        }
        let p = helper_policy(&Profile::Servers).unwrap();
        let sid = p.token.app_container.clone().unwrap().0;
        assert!(
            p.render()
                .contains(&format!("app container: {sid} (no capability)\n")),
            "{}",
            p.render()
        );
        assert_eq!(
            missing_from_token(&good_token(&p), &p.token, &p.sid.0),
            Vec::<String>::new()
        );
        let mut t = good_token(&p);
        t.app_container = Ok(Some(sid.to_lowercase()));
        assert_eq!(
            missing_from_token(&t, &p.token, &p.sid.0),
            Vec::<String>::new(),
            "SIDs compare case-insensitively"
        );
        for (have, want) in [
            (
                Ok(None),
                format!("app container: the token is in no AppContainer (the profile's is {sid})"),
            ),
            (
                Ok(Some("S-1-15-2-1-2-3-4-5-6-7".to_string())),
                format!("app container: the token is in S-1-15-2-1-2-3-4-5-6-7, not in the profile's {sid}"),
            ),
            (
                Err("err 87".to_string()),
                "app container: cannot tell whether the token is in one: err 87".to_string(),
            ),
        ] {
            let mut t = good_token(&p);
            t.app_container = have;
            assert_eq!(missing_from_token(&t, &p.token, &p.sid.0), vec![want]);
        }
        // A profile without one does not care what the token is in.
        let fs = fs_policy();
        let mut t = good_token(&fs);
        t.app_container = Ok(Some(sid.clone()));
        assert_eq!(
            missing_from_token(&t, &fs.token, &fs.sid.0),
            Vec::<String>::new()
        );
        // The broker's check: a report without the container is refused, naming it, and the
        // report must match the spawner's view of the token.
        let good = confinement(Some(&good_token(&p)), Some(&good_job()), Vec::new());
        assert_eq!(good.app_container.as_deref(), Some(sid.as_str()));
        let outside = WindowsConfinement {
            app_container: None,
            ..good.clone()
        };
        assert!(missing(&p, &outside).contains(&format!(
            "app container: the token is in no AppContainer (the profile's is {sid})"
        )));
        assert_eq!(
            differences(&good, &outside),
            vec![format!(
                "AppContainer: it says Some(\"{sid}\"), the spawner sees None"
            )]
        );
    }

    #[test]
    fn the_broker_refuses_a_report_short_of_the_policy_naming_each_gap() {
        let p = fs_policy();
        let held: Vec<String> = p
            .mitigations
            .0
            .iter()
            .map(|m| mitigation_short(m).to_string())
            .collect();
        let mut good = confinement(Some(&good_token(&p)), Some(&good_job()), held.clone());
        good.process_dacl = Some(process_sddl_for(HELPER_PROCESS_SDDL, "S-1-5-21-1-2-3-1001"));
        good.outbound = Some(OutboundProbe::Refused);
        let report = |c: Option<WindowsConfinement>, degraded: Vec<String>| LockdownReport {
            windows: c.map(Box::new),
            degraded,
            ..LockdownReport::nothing_yet("fs")
        };
        // Positive control: the report of a helper confined as asked passes.
        assert_eq!(
            verify_report(&p, &report(Some(good.clone()), vec![]), false),
            Ok(())
        );
        // No Windows part at all.
        let e = verify_report(&p, &report(None, vec![]), true).unwrap_err();
        assert!(e.contains("says nothing of its token"), "{e}");
        // A process started without the confined spawn (Wine's view): every gap named.
        let bare = confinement(
            Some(&TokenFacts {
                restricted: false,
                restricting_sids: vec![],
                privileges: vec![CHANGE_NOTIFY.into(), "SeDebugPrivilege".into()],
                administrators_usable: false,
                write_restricted: Ok(false),
                app_container: Ok(None),
            }),
            Some(&JobFacts {
                in_job: false,
                limit_flags: 0,
                active_process_limit: 0,
                ui_restrictions: Ok(0),
            }),
            vec![],
        );
        let e = verify_report(&p, &report(Some(bare.clone()), vec![]), false).unwrap_err();
        for want in [
            "has no restricting SIDs",
            "the profile's capability SID",
            "privileges not stripped: SeDebugPrivilege",
            "in no job",
            "is not in force",
        ] {
            assert!(e.contains(want), "{e} lacks {want}");
        }
        // Degraded passes only when the helper named the same gaps itself.
        let gaps = missing(&p, &bare);
        assert_eq!(
            verify_report(&p, &report(Some(bare.clone()), gaps.clone()), true),
            Ok(())
        );
        assert!(verify_report(&p, &report(Some(bare.clone()), gaps[1..].to_vec()), true).is_err());
        assert!(verify_report(&p, &report(Some(bare), gaps), false).is_err());
        // The network not refused (the filters not installed), or not tried: named with what
        // the helper saw. Net's policy refuses nothing, so nothing is asked of its report.
        for (probe, want) in [
            (
                Some(OutboundProbe::NotRefused("IPv4 connect allowed".into())),
                "outbound network is not refused (IPv4 connect allowed): the WFP filters of `gatehouse setup network-filters` are not in force",
            ),
            (None, "outbound network is not refused (it did not try)"),
        ] {
            let open = WindowsConfinement {
                outbound: probe,
                ..good.clone()
            };
            let e = verify_report(&p, &report(Some(open.clone()), vec![]), false).unwrap_err();
            assert!(e.contains(want), "{e} lacks {want}");
            assert!(!e.contains("mitigation"), "only the network is short: {e}");
            let net = helper_policy(&Profile::Net).unwrap();
            assert_eq!(outbound_gap(&net, open.outbound.as_ref()), None);
        }
        // One mitigation missing from an otherwise good report.
        let mut one_short = good;
        one_short.mitigations.pop();
        let e = verify_report(&p, &report(Some(one_short), vec![]), false).unwrap_err();
        assert!(
            e.contains(&format!("{} is not in force", held[held.len() - 1])),
            "{e}"
        );
    }

    #[test]
    fn a_report_that_differs_from_the_spawners_view_is_refused_even_degraded() {
        let p = fs_policy();
        let held: Vec<String> = p
            .mitigations
            .0
            .iter()
            .map(|m| mitigation_short(m).to_string())
            .collect();
        let mut good = confinement(Some(&good_token(&p)), Some(&good_job()), held);
        good.process_dacl = Some(process_sddl_for(HELPER_PROCESS_SDDL, "S-1-5-21-1-2-3-1001"));
        good.outbound = Some(OutboundProbe::Refused);
        let report = |c: &WindowsConfinement| LockdownReport {
            windows: Some(Box::new(c.clone())),
            ..LockdownReport::nothing_yet("fs")
        };
        // Positive control: the same facts from inside and outside; SIDs in another case and
        // lists in another order are the same.
        let mut seen = good.clone();
        seen.restricting_sids.reverse();
        seen.restricting_sids[0] = seen.restricting_sids[0].to_ascii_lowercase();
        seen.mitigations.reverse();
        assert_eq!(differences(&good, &seen), Vec::<String>::new());
        assert_eq!(verify_observed(&p, &report(&good), &seen, false), Ok(()));
        // What one side could not read is not a difference.
        let mut unread = good.clone();
        unread.write_restricted = None;
        unread.job_ui_restrictions = None;
        assert_eq!(differences(&unread, &good), Vec::<String>::new());

        // A helper that is not confined and says it is: each false field named, refused even
        // with --allow-degraded (its own gaps listed would not help: the report is false).
        let bare = WindowsConfinement {
            privileges: vec![CHANGE_NOTIFY.into(), "SeDebugPrivilege".into()],
            ..WindowsConfinement::default()
        };
        let e = verify_observed(&p, &report(&good), &bare, true).unwrap_err();
        assert!(
            e.starts_with("the fs helper's report does not match what the spawner reads of its process: restricted token: it says true, the spawner sees false; "),
            "{e}"
        );
        for want in [
            "restricting SIDs: it says {",
            "privileges: it says {\"SECHANGENOTIFYPRIVILEGE\"}, the spawner sees {\"SECHANGENOTIFYPRIVILEGE\", \"SEDEBUGPRIVILEGE\"}",
            "mitigations: it says {",
            "in the spawner's job: it says true, the spawner sees false",
            "job limit flags: it says 0x2408, the spawner sees 0x0",
            "job process limit: it says 1, the spawner sees 0",
        ] {
            assert!(e.contains(want), "{e} lacks {want}");
        }
        // One field is enough: a process in another job (its own, nested) than the one the
        // spawner made for it.
        let mut elsewhere = good.clone();
        elsewhere.in_job = false;
        let e = verify_observed(&p, &report(&good), &elsewhere, false).unwrap_err();
        assert!(
            e.ends_with(": in the spawner's job: it says true, the spawner sees false"),
            "{e}"
        );
        // The outside view matching a report that falls short is still refused by the policy.
        let e = verify_observed(&p, &report(&bare), &bare, false).unwrap_err();
        assert!(e.contains("is not confined as its profile asks"), "{e}");
    }

    #[test]
    fn a_helpers_process_dacl_lets_no_other_process_of_the_user_in() {
        // Positive controls: the descriptor as written, and as Windows renders it read back
        // (generic rights mapped to the process's specific ones).
        let ours = process_sddl_for(HELPER_PROCESS_SDDL, "S-1-5-21-1-2-3-1001");
        assert_eq!(
            ours,
            "D:P(A;;0x101000;;;OW)(A;;0x101000;;;S-1-5-21-1-2-3-1001)(A;;GA;;;SY)"
        );
        assert_eq!(process_dacl_gaps(&ours), Vec::<String>::new());
        let read_back = "O:S-1-5-21-1-2-3-1001D:P(A;;0x101000;;;OW)(A;;0x101000;;;S-1-5-21-1-2-3-1001)(A;;0x1fffff;;;SY)";
        assert_eq!(process_dacl_gaps(read_back), Vec::<String>::new());
        // A token's default DACL: the user and SYSTEM with full access, not protected.
        let default = "D:(A;;0x1fffff;;;S-1-5-21-1-2-3-1001)(A;;0x1fffff;;;SY)";
        let g = process_dacl_gaps(default);
        assert_eq!(g.len(), 2, "{g:?}");
        assert!(g[0].starts_with("its DACL is not protected"), "{g:?}");
        assert_eq!(
            g[1],
            "it grants S-1-5-21-1-2-3-1001 0x1fffff (A;;0x1fffff;;;S-1-5-21-1-2-3-1001)"
        );
        // One right too many for the owner (PROCESS_VM_READ), a generic right, an unknown code.
        for (ace, what) in [
            ("(A;;0x101010;;;OW)", "it grants OW 0x101010"),
            ("(A;;GR;;;WD)", "it grants WD GR"),
            ("(A;;CCDC;;;AU)", "it grants AU CCDC"),
        ] {
            let g = process_dacl_gaps(&format!("D:P{ace}(A;;GA;;;SY)"));
            assert_eq!(g.len(), 1, "{g:?}");
            assert!(g[0].starts_with(what), "{g:?}");
        }
        // No DACL at all: everyone.
        assert_eq!(
            process_dacl_gaps("O:SY"),
            vec!["it has no DACL: every process may open it".to_string()]
        );
        // A deny ACE narrows, never widens; an empty protected DACL lets nobody in.
        assert_eq!(
            process_dacl_gaps("D:P(D;;GA;;;WD)(A;;GA;;;SY)"),
            Vec::<String>::new()
        );
        assert_eq!(process_dacl_gaps("D:P"), Vec::<String>::new());
        // The broker's check names it: a report whose process any user process may open.
        let p = helper_policy(&Profile::Net).unwrap();
        let mut c = confinement(
            Some(&good_token(&p)),
            Some(&good_job()),
            p.mitigations
                .0
                .iter()
                .map(|m| mitigation_short(m).to_string())
                .collect(),
        );
        c.process_dacl = Some(default.into());
        let m = missing(&p, &c);
        assert!(
            m.iter()
                .any(|g| g.starts_with("process DACL: it grants S-1-5-21-1-2-3-1001")),
            "{m:?}"
        );
        c.process_dacl = None;
        assert_eq!(missing(&p, &c), vec!["process DACL: it could not be read"]);
        // A command keeps the default descriptor: nothing is asked of it.
        let cmd = command_policy(&tests::offline(), CommandSlot::new(0).unwrap()).unwrap();
        assert_eq!(cmd.process_sddl, None);
    }
}
