//! The broker's link to the secrets store, and what a command that starts its own
//! secrets-helper shares with it: the helper's arguments for an instance (store, namespace,
//! session bus), and the audit row of a credential change, which the broker writes when
//! `gatehouse secret` asks it to ([`record_for_cli`]). The privately started helper itself
//! (`PrivateHelper`, used by `gatehouse secret` and `verify-audit`) is the command line's,
//! cli/src/private_helper.rs; see cli/src/cmd_secret.rs for the commands themselves.

use crate::fronts::Replier;
use crate::Ctx;
use audit_store::chain::{AuditEvent, AuditKind};
use gatehouse_client::Dirs;
use ipc_schema::secrets::{
    CredentialInfo, CredentialName, CredentialSpec, SecretsReply, SecretsRequest, SendAs, StoreKind,
};
use ipc_schema::ui::UiReply;
use ipc_schema::{Body, ErrorCode, ErrorReply, Role};
use std::ffi::OsString;
use std::path::Path;
use std::rc::Rc;

/// Errors of these functions, each a sentence for the user.
type CmdResult<T> = Result<T, String>;

/// The `[secrets]` table of config.toml.
#[derive(serde::Deserialize, Default)]
struct ConfigFile {
    #[serde(default)]
    secrets: SecretsConfig,
}

#[derive(serde::Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct SecretsConfig {
    store: Option<String>,
}

/// The configured store: `[secrets] store` in `config.toml`, `keyutils` when absent.
pub fn configured_store(config_dir: &Path) -> CmdResult<StoreKind> {
    let os = std::env::consts::OS;
    let path = config_dir.join("config.toml");
    let default = || {
        StoreKind::default_for(os)
            .ok_or_else(|| format!("gatehouse has no credential store for {os}"))
    };
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return default(),
        Err(e) => return Err(format!("{}: {e}", path.display())),
    };
    let cfg: ConfigFile = toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    let Some(s) = cfg.secrets.store.as_deref() else {
        return default();
    };
    let kind = StoreKind::from_name(s).ok_or_else(|| {
        format!(
            "{}: [secrets] store = {s:?} is not a store; use {}",
            path.display(),
            StoreKind::choices_on(os)
        )
    })?;
    // Another OS's store is refused, never swapped for this one's.
    kind.check_os(os)
        .map_err(|e| format!("{}: [secrets] store = {s:?}: {e}", path.display()))?;
    Ok(kind)
}

/// The namespace of this gatehouse instance's credentials: `default` for the user's own
/// instance, a name derived from the data directory for a `--data-dir` instance (so tests and
/// demos never see or touch the user's credentials).
pub fn namespace(dirs: &Dirs) -> String {
    use sha2::{Digest, Sha256};
    let canon = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    if let Ok(user) = Dirs::from_env() {
        if canon(&user.data) == canon(&dirs.data) {
            return "default".into();
        }
    }
    let digest = Sha256::digest(canon(&dirs.data).as_os_str().as_encoded_bytes());
    format!("d-{}", &hex::encode(digest)[..16])
}

/// The secrets-helper's arguments for this instance (the broker passes the same ones to its
/// own helper): store, namespace, and for the Secret Service the session bus address.
pub fn helper_args(dirs: &Dirs) -> CmdResult<Vec<OsString>> {
    let store = configured_store(&dirs.config)?;
    let mut args: Vec<OsString> = vec![
        "--store".into(),
        store.as_str().into(),
        "--namespace".into(),
        namespace(dirs).into(),
    ];
    if store == StoreKind::SecretService {
        let address = match std::env::var_os("DBUS_SESSION_BUS_ADDRESS") {
            Some(a) if !a.is_empty() => a,
            // Where systemd's user session puts the bus when the variable is not exported.
            _ => match std::env::var_os("XDG_RUNTIME_DIR") {
                Some(r) if Path::new(&r).join("bus").exists() => {
                    let mut a = OsString::from("unix:path=");
                    a.push(Path::new(&r).join("bus"));
                    a
                }
                _ => {
                    return Err("the Secret Service store is configured ([secrets] store = \"secret-service\"), but there is no session bus: DBUS_SESSION_BUS_ADDRESS is not set and $XDG_RUNTIME_DIR/bus does not exist".into())
                }
            },
        };
        args.push("--dbus-address".into());
        args.push(address);
    }
    Ok(args)
}

pub fn hosts_text(spec: &CredentialSpec) -> String {
    spec.hosts
        .iter()
        .map(|h| h.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

pub fn send_as_word(s: &SendAs) -> String {
    match s {
        SendAs::Bearer => "bearer".into(),
        SendAs::Header(h) => format!("header {}", h.as_str()),
        SendAs::Basic(u) => format!("basic user {}", u.as_str()),
    }
}

/// The audit row of a change to credential `name`, from what the store says now (`None`: it
/// no longer exists). Never a value: [`CredentialInfo`] holds none.
pub fn change_event(name: &CredentialName, now: Option<&CredentialInfo>) -> AuditEvent {
    let ev = AuditEvent::new(
        AuditKind::Credential,
        "secret-cli",
        if now.is_some() { "saved" } else { "deleted" },
    )
    .target(name.as_str());
    match now {
        None => ev.detail("the credential and any stored value were removed"),
        Some(i) => ev.detail(format!(
            "hosts: {}; sent as: {}; value: {}",
            hosts_text(&i.spec),
            send_as_word(&i.spec.send_as),
            if i.present { "stored" } else { "not stored" }
        )),
    }
}

/// The broker's side of [`UiRequest::CredentialChanged`]: asks its own secrets-helper what the
/// credential is now, refuses a claim the store contradicts, and writes the row (sealed)
/// before answering with its entry number.
pub fn record_for_cli(
    ctx: &Rc<Ctx>,
    id: u64,
    name: CredentialName,
    deleted: bool,
    reply: &Replier,
) {
    let (ctx, reply) = (ctx.clone(), reply.clone());
    tokio::task::spawn_local(async move {
        let error = |code, m: String| Body::Error(ErrorReply::new(code, m));
        let Some(slot) = ctx.helpers.slot(Role::Secrets).cloned() else {
            return reply.send(id, error(ErrorCode::Internal, "no secrets-helper".into()));
        };
        let now = match slot
            .call(Body::Secrets(SecretsRequest::Has { name: name.clone() }))
            .await
        {
            Ok(Body::SecretsReply(SecretsReply::Credential(now))) => now,
            Ok(Body::SecretsReply(SecretsReply::Failed(e))) => {
                return reply.send(id, error(ErrorCode::Internal, e.message))
            }
            Ok(other) => {
                return reply.send(
                    id,
                    error(
                        ErrorCode::Internal,
                        format!("unexpected answer {:?}", other.kind()),
                    ),
                )
            }
            Err(e) => return reply.send(id, error(ErrorCode::Internal, e.to_string())),
        };
        if now.is_none() != deleted {
            return reply.send(
                id,
                error(
                    ErrorCode::Invalid,
                    format!(
                        "credential {name} {} in the store; not recorded",
                        if deleted {
                            "still exists"
                        } else {
                            "does not exist"
                        }
                    ),
                ),
            );
        }
        let ev = change_event(&name, now.as_ref());
        let target = name.as_str().to_string();
        let store = &ctx.gate.store;
        let written = match store
            .txn(move |_, audit| {
                audit.push(ev);
                Ok(())
            })
            .await
        {
            Ok(()) => {
                store
                    .read(move |c| audit_store::audit::latest_credential_row(c, &target))
                    .await
            }
            Err(e) => Err(e),
        };
        reply.send(
            id,
            match written {
                Ok(seq) => Body::UiReply(UiReply::CredentialChangeRecorded { seq: seq as u64 }),
                Err(e) => error(ErrorCode::Internal, e.to_string()),
            },
        );
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(target_os = "linux")]
    #[test]
    fn config_chooses_the_store_explicitly() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(configured_store(d.path()).unwrap(), StoreKind::Keyutils);
        let write = |t: &str| std::fs::write(d.path().join("config.toml"), t).unwrap();
        write("[secrets]\nstore = \"secret-service\"\n");
        assert_eq!(
            configured_store(d.path()).unwrap(),
            StoreKind::SecretService
        );
        write("[other]\nx = 1\n");
        assert_eq!(configured_store(d.path()).unwrap(), StoreKind::Keyutils);
        write("[secrets]\nstore = \"kwallet\"\n");
        let e = configured_store(d.path()).unwrap_err();
        assert!(e.contains("use \"keyutils\" or \"secret-service\""), "{e}");
        write("[secrets]\nstor = \"keyutils\"\n");
        assert!(
            configured_store(d.path()).is_err(),
            "a misspelt key is an error"
        );
    }

    /// Windows has one store: the default, and the one a config may name; another OS's store is
    /// refused, never swapped for it.
    #[cfg(windows)]
    #[test]
    fn config_chooses_the_store_explicitly() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(
            configured_store(d.path()).unwrap(),
            StoreKind::CredentialManager
        );
        let write = |t: &str| std::fs::write(d.path().join("config.toml"), t).unwrap();
        write("[secrets]\nstore = \"credential-manager\"\n");
        assert_eq!(
            configured_store(d.path()).unwrap(),
            StoreKind::CredentialManager
        );
        write("[secrets]\nstore = \"secret-service\"\n");
        let e = configured_store(d.path()).unwrap_err();
        assert!(e.contains("store = \"secret-service\""), "{e}");
        write("[secrets]\nstor = \"credential-manager\"\n");
        assert!(
            configured_store(d.path()).is_err(),
            "a misspelt key is an error"
        );
    }

    #[test]
    fn private_instances_get_their_own_namespace() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        let (na, nb) = (
            namespace(&Dirs::under(a.path())),
            namespace(&Dirs::under(b.path())),
        );
        assert!(na.starts_with("d-") && na.len() == 18, "{na}");
        assert_ne!(na, nb);
        assert_eq!(na, namespace(&Dirs::under(a.path())));
    }
}
