//! The freedesktop Secret Service store (GNOME Keyring, KWallet, KeePassXC), spoken over the
//! session bus connection the helper opened before lockdown ([`crate::dbus::Bus`]).
//!
//! Items live in the default collection, each found by its attributes (`gatehouse` =
//! `credential` or `audit-key`, plus the namespace and name, or the log instance). The session
//! uses the `plain` algorithm: the bus socket is private to this uid, and any process of the
//! same uid could ask the Secret Service for the item anyway, so transport encryption would
//! add nothing against anyone who can read it. Nothing here ever asks for a prompt: a locked
//! collection is reported as [`StoreError::Locked`] for the user to unlock.

use super::{CredentialNames, ItemKey, Store, StoreError};
use crate::dbus::wire::Value;
use crate::dbus::{Bus, BusError};
use ipc_schema::secrets::{CredentialName, StoreKind};
use zeroize::Zeroizing;

const KIND: &str = "secret-service";
const DEST: &str = "org.freedesktop.secrets";
const SERVICE_PATH: &str = "/org/freedesktop/secrets";
const DEFAULT_COLLECTION: &str = "/org/freedesktop/secrets/aliases/default";
const SERVICE: &str = "org.freedesktop.Secret.Service";
const ITEM: &str = "org.freedesktop.Secret.Item";
const COLLECTION: &str = "org.freedesktop.Secret.Collection";
const NO_PROMPT: &str = "/";

pub struct SecretService {
    bus: Bus,
    /// The Secret Service session, opened on first use (so that a Secret Service that is not
    /// running yet shows up as an error per request, not as a helper that cannot start).
    session: Option<String>,
    broken: bool,
}

/// The attributes that find an item.
fn attributes(key: &ItemKey) -> Vec<(&'static str, String)> {
    match key {
        ItemKey::Credential { namespace, name } => vec![
            ("gatehouse", "credential".into()),
            ("gatehouse-namespace", namespace.clone()),
            ("gatehouse-name", name.as_str().into()),
        ],
        ItemKey::AuditKey(instance) => vec![
            ("gatehouse", "audit-key".into()),
            ("gatehouse-instance", instance.as_str().into()),
        ],
    }
}

fn label(key: &ItemKey) -> String {
    match key {
        ItemKey::Credential { namespace, name } => {
            format!("gatehouse credential {name} ({namespace})")
        }
        ItemKey::AuditKey(instance) => format!("gatehouse audit key {}", instance.as_str()),
    }
}

fn attr_dict(attrs: &[(&str, String)]) -> Value {
    let pairs = attrs
        .iter()
        .map(|(k, v)| (Value::Str((*k).into()), Value::Str(v.clone())));
    Value::dict("s", "s", pairs.collect())
}

fn paths(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::items)
        .unwrap_or_default()
        .iter()
        .filter_map(|p| p.as_str().map(str::to_string))
        .collect()
}

fn store_err(what: &str, e: BusError) -> StoreError {
    if e.is_fatal() {
        return StoreError::Broken(KIND, format!("{what}: {e}"));
    }
    let text = e.to_string();
    if text.contains("ServiceUnknown") || text.contains("NameHasNoOwner") {
        let why = format!(
            "no Secret Service answers on the session bus (is gnome-keyring-daemon or another keyring running?): {text}"
        );
        return StoreError::Unavailable(KIND, why);
    }
    if text.contains("IsLocked") {
        return locked();
    }
    StoreError::Failed(KIND, format!("{what}: {text}"))
}

fn locked() -> StoreError {
    StoreError::Locked(
        "the Secret Service keyring is locked; unlock it (log in to the desktop session, or open your keyring manager) and try again"
            .into(),
    )
}

/// The prompt path a call returned: `/` (none) or a prompt, which would wait for a human at
/// the desktop, so it is refused rather than waited for.
fn no_prompt(prompt: Option<&Value>) -> Result<(), StoreError> {
    match prompt.and_then(Value::as_str) {
        Some(NO_PROMPT) => Ok(()),
        _ => Err(locked()),
    }
}

fn protocol(what: &str) -> StoreError {
    StoreError::Failed(KIND, format!("unexpected answer to {what}"))
}

impl SecretService {
    pub fn new(bus: Bus) -> SecretService {
        SecretService {
            bus,
            session: None,
            broken: false,
        }
    }

    fn call(
        &mut self,
        path: &str,
        iface: &str,
        member: &str,
        args: &[Value],
    ) -> Result<Vec<Value>, StoreError> {
        let out = self.bus.call(DEST, path, iface, member, args);
        out.map_err(|e| self.failed(member, e))
    }

    fn failed(&mut self, what: &str, e: BusError) -> StoreError {
        self.broken |= e.is_fatal();
        store_err(what, e)
    }

    fn session(&mut self) -> Result<String, StoreError> {
        if let Some(s) = &self.session {
            return Ok(s.clone());
        }
        let plain = [
            Value::Str("plain".into()),
            Value::variant(Value::Str(String::new())),
        ];
        let out = self.call(SERVICE_PATH, SERVICE, "OpenSession", &plain)?;
        let Some(path) = out.get(1).and_then(Value::as_str) else {
            return Err(protocol("OpenSession"));
        };
        self.session = Some(path.to_string());
        Ok(path.to_string())
    }

    /// The items with exactly these attributes, unlocking them if that needs no prompt.
    fn search(&mut self, attrs: &[(&str, String)]) -> Result<Vec<String>, StoreError> {
        let out = self.call(SERVICE_PATH, SERVICE, "SearchItems", &[attr_dict(attrs)])?;
        let mut unlocked = paths(out.first());
        let locked_items = paths(out.get(1));
        if !locked_items.is_empty() {
            self.unlock(locked_items.clone())?;
            unlocked.extend(locked_items);
        }
        Ok(unlocked)
    }

    fn unlock(&mut self, objects: Vec<String>) -> Result<(), StoreError> {
        let objects = Value::Array {
            elem: "o".into(),
            items: objects.into_iter().map(Value::Path).collect(),
        };
        let out = self.call(SERVICE_PATH, SERVICE, "Unlock", &[objects])?;
        no_prompt(out.get(1))
    }

    fn secret_of(&mut self, item: &str) -> Result<Zeroizing<Vec<u8>>, StoreError> {
        let session = self.session()?;
        let mut out = self.call(item, ITEM, "GetSecret", &[Value::Path(session)])?;
        // (oayays): session, parameters, value, content type.
        match out.pop() {
            Some(Value::Struct(mut fields)) if fields.len() == 4 => match fields.swap_remove(2) {
                Value::Bytes(b) => Ok(b),
                _ => Err(protocol("GetSecret")),
            },
            _ => Err(protocol("GetSecret")),
        }
    }

    fn attribute(&mut self, item: &str, name: &str) -> Result<Option<String>, StoreError> {
        let args = [Value::Str(ITEM.into()), Value::Str("Attributes".into())];
        let out = self.call(item, "org.freedesktop.DBus.Properties", "Get", &args)?;
        let Some(Value::Variant(dict)) = out.first() else {
            return Err(protocol("Properties.Get(Attributes)"));
        };
        let entry = dict
            .items()
            .unwrap_or_default()
            .iter()
            .find_map(|e| match e {
                Value::DictEntry(k, v) if k.as_str() == Some(name) => Some(v.as_str()),
                _ => None,
            });
        Ok(entry.flatten().map(str::to_string))
    }
}

impl Store for SecretService {
    fn kind(&self) -> StoreKind {
        StoreKind::SecretService
    }

    fn location(&self) -> String {
        format!("org.freedesktop.secrets on {}", self.bus.address)
    }

    fn probe(&mut self) -> Result<(), StoreError> {
        self.session().map(|_| ())
    }

    fn is_broken(&self) -> bool {
        self.broken
    }

    fn get(&mut self, key: &ItemKey) -> Result<Option<Zeroizing<Vec<u8>>>, StoreError> {
        match self.search(&attributes(key))?.first() {
            None => Ok(None),
            Some(item) => self.secret_of(item).map(Some),
        }
    }

    fn put(&mut self, key: &ItemKey, blob: &[u8]) -> Result<(), StoreError> {
        let session = self.session()?;
        // The item's properties: `org.freedesktop.Secret.Item.Label` and `.Attributes`.
        let (label, attrs) = (Value::Str(label(key)), attr_dict(&attributes(key)));
        let props = [("Label", label), ("Attributes", attrs)];
        let props = props.map(|(p, v)| (Value::Str(format!("{ITEM}.{p}")), Value::variant(v)));
        let props = Value::dict("s", "v", props.into());
        let secret = Value::Struct(vec![
            Value::Path(session),
            Value::Bytes(Zeroizing::new(Vec::new())),
            Value::Bytes(Zeroizing::new(blob.to_vec())),
            Value::Str("application/octet-stream".into()),
        ]);
        let args = [props, secret, Value::Bool(true)];
        let created = self
            .bus
            .call(DEST, DEFAULT_COLLECTION, COLLECTION, "CreateItem", &args);
        let out = match created {
            Ok(out) => out,
            Err(BusError::Remote { name, .. }) if name.ends_with("IsLocked") => {
                self.unlock(vec![DEFAULT_COLLECTION.into()])?;
                self.call(DEFAULT_COLLECTION, COLLECTION, "CreateItem", &args)?
            }
            Err(BusError::Remote { name, message })
                if name.ends_with("NoSuchObject") || name.ends_with("UnknownObject") =>
            {
                let why = format!(
                    "the Secret Service has no default collection ({name}: {message}); create one in your keyring manager"
                );
                return Err(StoreError::Unavailable(KIND, why));
            }
            Err(e) => return Err(self.failed("CreateItem", e)),
        };
        no_prompt(out.get(1))
    }

    fn delete(&mut self, key: &ItemKey) -> Result<bool, StoreError> {
        let items = self.search(&attributes(key))?;
        for item in &items {
            let out = self.call(item, ITEM, "Delete", &[])?;
            no_prompt(out.first())?;
        }
        Ok(!items.is_empty())
    }

    fn credential_names(&mut self, namespace: &str) -> Result<CredentialNames, StoreError> {
        let items = self.search(&[
            ("gatehouse", "credential".into()),
            ("gatehouse-namespace", namespace.into()),
        ])?;
        let mut names = CredentialNames::new();
        for item in items {
            let name = self.attribute(&item, "gatehouse-name")?;
            if let Some(Ok(n)) = name.map(|n| CredentialName::parse(&n)) {
                names.insert(n);
            }
        }
        Ok(names)
    }
}
