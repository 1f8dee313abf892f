//! The credential operations: list, describe, set (with the rule that a changed binding drops
//! the value), delete, and attach (the header for one request to one allowed host).

use crate::record;
use crate::service::err;
use crate::store::{ItemKey, Store};
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use ipc_schema::host::Host;
use ipc_schema::secrets::{
    CredentialHeader, CredentialInfo, CredentialName, CredentialSpec, HostPattern, SecretValue,
    SecretsError, SecretsErrorKind, SendAs,
};
use zeroize::Zeroizing;

fn key(namespace: &str, name: &CredentialName) -> ItemKey {
    ItemKey::Credential {
        namespace: namespace.to_string(),
        name: name.clone(),
    }
}

/// The stored spec and value of `name`, if it exists.
fn load(
    store: &mut dyn Store,
    namespace: &str,
    name: &CredentialName,
) -> Result<Option<(CredentialSpec, Option<SecretValue>)>, SecretsError> {
    let Some(blob) = store.get(&key(namespace, name))? else {
        return Ok(None);
    };
    record::decode(name, &blob)
        .map(Some)
        .map_err(|e| err(SecretsErrorKind::Store, e.to_string()))
}

pub fn describe(
    store: &mut dyn Store,
    namespace: &str,
    name: &CredentialName,
) -> Result<Option<CredentialInfo>, SecretsError> {
    Ok(
        load(store, namespace, name)?.map(|(spec, value)| CredentialInfo {
            spec,
            present: value.is_some(),
        }),
    )
}

pub fn list(store: &mut dyn Store, namespace: &str) -> Result<Vec<CredentialInfo>, SecretsError> {
    let names = store.credential_names(namespace)?;
    let mut out = Vec::with_capacity(names.len());
    for name in names {
        // An item deleted between listing and reading is simply gone.
        if let Some(info) = describe(store, namespace, &name)? {
            out.push(info);
        }
    }
    Ok(out)
}

/// Stores `spec` and, if given, a new value. Without a value, a changed host list or way of
/// sending drops the stored value (a value entered for one host never follows a change of
/// where it goes). Returns what is stored now and whether a value was dropped.
pub fn set(
    store: &mut dyn Store,
    namespace: &str,
    spec: CredentialSpec,
    value: Option<SecretValue>,
) -> Result<(CredentialInfo, bool), SecretsError> {
    let spec = spec
        .normalized()
        .map_err(|e| err(SecretsErrorKind::Invalid, e.0))?;
    if let Some(Err(e)) = value.as_ref().map(SecretValue::check_credential) {
        return Err(err(
            SecretsErrorKind::Invalid,
            format!("credential {}: {e}", spec.name),
        ));
    }
    let existing = load(store, namespace, &spec.name)?;
    let (keep, dropped) = match (&value, existing) {
        (Some(_), _) => (value, false),
        (None, None) => (None, false),
        (None, Some((old, old_value))) => {
            if old.hosts == spec.hosts && old.send_as == spec.send_as {
                // Nothing changes: leave the item as it is.
                let info = CredentialInfo {
                    spec,
                    present: old_value.is_some(),
                };
                return Ok((info, false));
            }
            (None, old_value.is_some())
        }
    };
    let blob = record::encode(&spec, keep.as_ref());
    store.put(&key(namespace, &spec.name), &blob)?;
    Ok((
        CredentialInfo {
            spec,
            present: keep.is_some(),
        },
        dropped,
    ))
}

pub fn delete(
    store: &mut dyn Store,
    namespace: &str,
    name: &CredentialName,
) -> Result<bool, SecretsError> {
    Ok(store.delete(&key(namespace, name))?)
}

/// The value of `name` for a server's environment, when everything the server can reach lies
/// within the credential's hosts.
pub fn server_env(
    store: &mut dyn Store,
    namespace: &str,
    name: &CredentialName,
    reach: &[HostPattern],
) -> Result<SecretValue, SecretsError> {
    let (spec, value) = stored(store, namespace, name)?;
    let outside = reach.iter().find(|p| match p {
        HostPattern::Exact(h) => !spec.allows_host(h),
        HostPattern::Suffix(_) => !spec.hosts.contains(p),
    });
    if let Some(p) = outside {
        let why = format!("credential {name} is not bound to {p}, which the server may reach");
        return Err(err(SecretsErrorKind::HostNotAllowed, why));
    }
    with_value(name, value)
}

/// The stored spec and value of `name`, which must exist.
fn stored(
    store: &mut dyn Store,
    namespace: &str,
    name: &CredentialName,
) -> Result<(CredentialSpec, Option<SecretValue>), SecretsError> {
    load(store, namespace, name)?.ok_or_else(|| {
        err(
            SecretsErrorKind::NotFound,
            format!("there is no credential named {name} (`gatehouse secret list` shows them)"),
        )
    })
}

fn with_value(
    name: &CredentialName,
    value: Option<SecretValue>,
) -> Result<SecretValue, SecretsError> {
    value.ok_or_else(|| err(
        SecretsErrorKind::NoValue,
        format!(
            "credential {name} has no value (its hosts or the way it is sent changed since it was entered); enter it again with `gatehouse secret set {name}`"
        ),
    ))
}

/// The header that sends `name` to `host`, if `host` is one of its hosts and it has a value.
pub fn attach(
    store: &mut dyn Store,
    namespace: &str,
    name: &CredentialName,
    host: &str,
) -> Result<CredentialHeader, SecretsError> {
    let Ok(host) = Host::parse(host) else {
        return Err(err(
            SecretsErrorKind::Invalid,
            format!("{host:?} is not a host name or address"),
        ));
    };
    let (spec, value) = stored(store, namespace, name)?;
    if !spec.allows_host(&host) {
        let hosts: Vec<String> = spec.hosts.iter().map(|h| h.to_string()).collect();
        let why = format!(
            "credential {name} may be sent only to {}, not to {host}",
            hosts.join(", ")
        );
        return Err(err(SecretsErrorKind::HostNotAllowed, why));
    }
    let value = with_value(name, value)?;
    // Every form of the value that must not reach the agent (`scrub`), and what the header
    // carries after its scheme.
    let mut scrub = vec![value.clone()];
    let (header, scheme, secret) = match &spec.send_as {
        SendAs::Bearer => ("authorization", "Bearer ", value),
        SendAs::Header(h) => (h.as_str(), "", value),
        SendAs::Basic(user) => {
            let user = user.as_str().as_bytes();
            let mut plain = Zeroizing::new(Vec::with_capacity(user.len() + 1 + value.len()));
            plain.extend_from_slice(user);
            plain.push(b':');
            plain.extend_from_slice(value.expose());
            // (`encode` fills a buffer of the exact size: no copy is left behind.)
            let token = SecretValue::new(STANDARD.encode(&*plain).into_bytes());
            scrub.push(token.clone());
            ("authorization", "Basic ", token)
        }
    };
    let mut header_value = Zeroizing::new(Vec::with_capacity(scheme.len() + secret.len()));
    header_value.extend_from_slice(scheme.as_bytes());
    header_value.extend_from_slice(secret.expose());
    Ok(CredentialHeader {
        credential: name.clone(),
        host: host.to_string(),
        name: header.to_string(),
        value: SecretValue::from_slice(&header_value),
        scrub,
    })
}
