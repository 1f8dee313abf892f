//! What the macOS Keychain and Windows Credential Manager stores share: both are reached through
//! the `keyring` crate, which gets, sets and deletes one entry by name but cannot list entries
//! (listing would need the OS search calls directly, and so `unsafe` outside the sandbox crate).
//! Each namespace therefore keeps the names of its credentials in index entries of its own,
//! written before a credential is stored and pruned after one is deleted: the index may name a
//! credential that is gone (a crash in between; listing skips it), but never misses one this
//! helper stored. Honest limit: two helpers adding different names at the same instant can lose
//! one name from the index (setting that credential again puts it back).
//!
//! Compiled on every OS so that naming and the index are unit-tested on Linux; only
//! [`KeyringEntries`], which calls the OS, is built for macOS and Windows.

use super::{CredentialNames, ItemKey, Store, StoreError};
use ipc_schema::secrets::{CredentialName, StoreKind};
use zeroize::Zeroizing;

/// Where one entry lives, in the terms of `keyring::Entry::new` / `new_with_target`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryName {
    pub service: &'static str,
    pub user: String,
    /// `None`: the crate's default place for (service, user).
    pub target: Option<String>,
}

/// Everything the store keeps in the OS keyring.
#[derive(Debug, Clone, Copy)]
pub enum Slot<'a> {
    Item(&'a ItemKey),
    /// One page of the credential index of a namespace.
    Index {
        namespace: &'a str,
        page: usize,
    },
    /// An entry that never exists, read to check that the keyring answers.
    Probe,
}

/// The name of a slot: an item's is its [`ItemKey::description`]
/// (`gatehouse:NAMESPACE:credential:NAME`, `gatehouse:audit-key-INSTANCE`), the keyutils store's
/// name for it, so one item has one name on every OS. No two slots share a name: namespaces,
/// credential names and instances contain no `:`.
pub fn description(slot: &Slot) -> String {
    match slot {
        Slot::Item(key) => key.description(),
        Slot::Index { namespace, page } => format!("gatehouse:{namespace}:credential-index:{page}"),
        Slot::Probe => "gatehouse:probe".into(),
    }
}

/// One OS keyring, entry by entry. No error message ever contains a value.
pub trait Entries {
    fn get(&mut self, name: &EntryName) -> Result<Option<Zeroizing<Vec<u8>>>, StoreError>;
    fn set(&mut self, name: &EntryName, blob: &[u8]) -> Result<(), StoreError>;
    /// Whether the entry existed.
    fn delete(&mut self, name: &EntryName) -> Result<bool, StoreError>;
}

/// A store kept in an OS keyring through the `keyring` crate.
pub struct OsKeyring<E> {
    pub entries: E,
    pub kind: StoreKind,
    pub location: String,
    /// How this OS's store names each slot.
    pub naming: fn(&Slot) -> EntryName,
    /// The most bytes one entry holds.
    pub max_blob: usize,
}

/// First line of every index page; a page of another version is reported, never rewritten.
const INDEX_HEADER: &str = "gatehouse-credential-index 1";
/// Index pages per namespace: with the smallest page (Windows, 2,560 bytes) at least 1,200
/// names of the longest kind.
const MAX_INDEX_PAGES: usize = 32;
/// Pages stay small even where entries may be large.
const MAX_INDEX_PAGE: usize = 4096;

/// An index page: the header, then one name per line.
pub fn encode_index_page(names: &[CredentialName]) -> Vec<u8> {
    let mut s = format!("{INDEX_HEADER}\n");
    for n in names {
        s.push_str(n.as_str());
        s.push('\n');
    }
    s.into_bytes()
}

/// The names on an index page. Lines that are not credential names are skipped (nothing
/// gatehouse wrote); a page of another format is an error.
pub fn decode_index_page(blob: &[u8]) -> Result<Vec<CredentialName>, String> {
    let text = std::str::from_utf8(blob).map_err(|_| "it is not UTF-8 text".to_string())?;
    let mut lines = text.lines();
    if lines.next() != Some(INDEX_HEADER) {
        return Err(format!("it does not start with {INDEX_HEADER:?}"));
    }
    Ok(lines
        .filter_map(|l| CredentialName::parse(l).ok())
        .collect())
}

impl<E: Entries> OsKeyring<E> {
    fn failed(&self, reason: String) -> StoreError {
        StoreError::Failed(self.kind.as_str(), reason)
    }

    fn index_page(&self, namespace: &str, page: usize) -> EntryName {
        (self.naming)(&Slot::Index { namespace, page })
    }

    /// The index pages of `namespace`, up to the first that does not exist.
    fn read_index(&mut self, namespace: &str) -> Result<Vec<Vec<CredentialName>>, StoreError> {
        let mut pages = Vec::new();
        for page in 0..MAX_INDEX_PAGES {
            let Some(blob) = self.entries.get(&self.index_page(namespace, page))? else {
                break;
            };
            let names = decode_index_page(&blob).map_err(|why| {
                self.failed(format!(
                    "credential index page {page} of namespace {namespace} is unreadable ({why}); was it written by a newer gatehouse?"
                ))
            })?;
            pages.push(names);
        }
        Ok(pages)
    }

    fn index_add(&mut self, namespace: &str, name: &CredentialName) -> Result<(), StoreError> {
        let mut pages = self.read_index(namespace)?;
        if pages.iter().any(|p| p.contains(name)) {
            return Ok(());
        }
        let cap = self.max_blob.min(MAX_INDEX_PAGE);
        // The page as it is, plus the name and its line break.
        let fits = |p: &Vec<CredentialName>| encode_index_page(p).len() + name.as_str().len() < cap;
        let page = match pages.iter().position(fits) {
            Some(i) => i,
            None if pages.len() < MAX_INDEX_PAGES => {
                pages.push(Vec::new());
                pages.len() - 1
            }
            None => {
                return Err(self.failed(format!(
                    "the credential index of namespace {namespace} is full; delete credentials you no longer use"
                )))
            }
        };
        pages[page].push(name.clone());
        let blob = encode_index_page(&pages[page]);
        self.entries.set(&self.index_page(namespace, page), &blob)
    }

    fn index_remove(&mut self, namespace: &str, name: &CredentialName) -> Result<(), StoreError> {
        let pages = self.read_index(namespace)?;
        for (i, mut page) in pages.into_iter().enumerate() {
            if page.contains(name) {
                // Emptied pages stay (header only): the index is read up to the first gap.
                page.retain(|n| n != name);
                let blob = encode_index_page(&page);
                self.entries.set(&self.index_page(namespace, i), &blob)?;
            }
        }
        Ok(())
    }
}

impl<E: Entries> Store for OsKeyring<E> {
    fn kind(&self) -> StoreKind {
        self.kind
    }

    fn location(&self) -> String {
        self.location.clone()
    }

    fn probe(&mut self) -> Result<(), StoreError> {
        let name = (self.naming)(&Slot::Probe);
        self.entries.get(&name).map(|_| ())
    }

    fn get(&mut self, key: &ItemKey) -> Result<Option<Zeroizing<Vec<u8>>>, StoreError> {
        self.entries.get(&(self.naming)(&Slot::Item(key)))
    }

    fn put(&mut self, key: &ItemKey, blob: &[u8]) -> Result<(), StoreError> {
        if blob.len() > self.max_blob {
            return Err(self.failed(format!(
                "{} bytes do not fit one entry, which holds at most {} (fewer hosts or a shorter value would fit)",
                blob.len(),
                self.max_blob
            )));
        }
        if let ItemKey::Credential { namespace, name } = key {
            self.index_add(namespace, name)?;
        }
        self.entries.set(&(self.naming)(&Slot::Item(key)), blob)
    }

    fn delete(&mut self, key: &ItemKey) -> Result<bool, StoreError> {
        let existed = self.entries.delete(&(self.naming)(&Slot::Item(key)))?;
        if let ItemKey::Credential { namespace, name } = key {
            self.index_remove(namespace, name)?;
        }
        Ok(existed)
    }

    /// The names in the index; a name whose item is gone is skipped by the caller's read.
    fn credential_names(&mut self, namespace: &str) -> Result<CredentialNames, StoreError> {
        Ok(self.read_index(namespace)?.into_iter().flatten().collect())
    }
}

/// The OS keyring through the `keyring` crate (its apple-native or windows-native store).
#[cfg(any(target_os = "macos", target_os = "windows"))]
pub struct KeyringEntries {
    pub kind: StoreKind,
}

#[cfg(any(target_os = "macos", target_os = "windows"))]
impl KeyringEntries {
    fn entry(&self, n: &EntryName) -> Result<keyring::Entry, StoreError> {
        match &n.target {
            Some(t) => keyring::Entry::new_with_target(t, n.service, &n.user),
            None => keyring::Entry::new(n.service, &n.user),
        }
        .map_err(|e| self.error(e))
    }

    /// Never formats a value: `BadEncoding` carries the bytes it could not decode (zeroized
    /// here), and `Ambiguous` is reported by count only.
    fn error(&self, e: keyring::Error) -> StoreError {
        let kind = self.kind.as_str();
        let failed = |reason: String| StoreError::Failed(kind, reason);
        match e {
            keyring::Error::NoStorageAccess(err) => {
                StoreError::Unavailable(kind, format!("the OS refused access: {err}"))
            }
            keyring::Error::BadEncoding(bytes) => {
                drop(Zeroizing::new(bytes));
                failed("an entry is not UTF-8 text".into())
            }
            keyring::Error::Ambiguous(items) => failed(format!(
                "{} entries match one name (another program wrote one)",
                items.len()
            )),
            other => failed(other.to_string()),
        }
    }
}

#[cfg(any(target_os = "macos", target_os = "windows"))]
impl Entries for KeyringEntries {
    /// Raw bytes (the crate's secret calls, not its password calls, which would store UTF-16
    /// on Windows); the crate zeroizes its own copies on Windows, and the value comes back
    /// in a buffer that is zeroized here.
    fn get(&mut self, name: &EntryName) -> Result<Option<Zeroizing<Vec<u8>>>, StoreError> {
        match self.entry(name)?.get_secret() {
            Ok(v) => Ok(Some(Zeroizing::new(v))),
            Err(keyring::Error::NoEntry) => Ok(None),
            Err(e) => Err(self.error(e)),
        }
    }

    fn set(&mut self, name: &EntryName, blob: &[u8]) -> Result<(), StoreError> {
        self.entry(name)?
            .set_secret(blob)
            .map_err(|e| self.error(e))
    }

    fn delete(&mut self, name: &EntryName) -> Result<bool, StoreError> {
        match self.entry(name)?.delete_credential() {
            Ok(()) => Ok(true),
            Err(keyring::Error::NoEntry) => Ok(false),
            Err(e) => Err(self.error(e)),
        }
    }
}

/// These test the naming and the credential index shared by the Keychain and Credential
/// Manager stores, over an in-memory map standing in for `keyring::Entry`; they say nothing
/// about the OS stores themselves, which have never been run.
#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{credman, keychain};
    use ipc_schema::secrets::AuditInstance;
    use std::collections::BTreeMap;

    #[derive(Default)]
    struct Map(BTreeMap<(String, Option<String>), Vec<u8>>);

    fn k(n: &EntryName) -> (String, Option<String>) {
        (format!("{}/{}", n.service, n.user), n.target.clone())
    }

    impl Entries for Map {
        fn get(&mut self, n: &EntryName) -> Result<Option<Zeroizing<Vec<u8>>>, StoreError> {
            Ok(self.0.get(&k(n)).cloned().map(Zeroizing::new))
        }
        fn set(&mut self, n: &EntryName, blob: &[u8]) -> Result<(), StoreError> {
            self.0.insert(k(n), blob.to_vec());
            Ok(())
        }
        fn delete(&mut self, n: &EntryName) -> Result<bool, StoreError> {
            Ok(self.0.remove(&k(n)).is_some())
        }
    }

    fn store(max_blob: usize) -> OsKeyring<Map> {
        OsKeyring {
            entries: Map::default(),
            kind: StoreKind::CredentialManager,
            location: "memory".into(),
            naming: credman::entry_name,
            max_blob,
        }
    }

    fn cred(ns: &str, name: &str) -> ItemKey {
        ItemKey::Credential {
            namespace: ns.into(),
            name: CredentialName::parse(name).unwrap(),
        }
    }

    fn names(s: &mut OsKeyring<Map>, ns: &str) -> Vec<String> {
        let names = s.credential_names(ns).unwrap();
        names.iter().map(|n| n.as_str().to_string()).collect()
    }

    #[test]
    fn entries_are_named_as_keyutils_names_its_keys() {
        let audit = ItemKey::AuditKey(AuditInstance::parse("abc-1").unwrap());
        let github = cred("default", "github");
        assert_eq!(
            description(&Slot::Item(&github)),
            "gatehouse:default:credential:github"
        );
        assert_eq!(
            description(&Slot::Item(&audit)),
            "gatehouse:audit-key-abc-1"
        );
        let mac = keychain::entry_name(&Slot::Item(&github));
        assert_eq!(
            (mac.service, mac.user.as_str(), mac.target),
            ("gatehouse", "gatehouse:default:credential:github", None)
        );
        let win = credman::entry_name(&Slot::Index {
            namespace: "d-1",
            page: 2,
        });
        assert_eq!(
            win.target.as_deref(),
            Some("gatehouse:d-1:credential-index:2")
        );
    }

    #[test]
    fn no_two_slots_share_a_name() {
        // Namespaces and instances that look like other slots' parts.
        let a = ItemKey::AuditKey(AuditInstance::parse("x").unwrap());
        let b = cred("audit-key-x", "probe");
        let c = cred("x", "credential-index");
        let slots = [
            Slot::Item(&a),
            Slot::Item(&b),
            Slot::Item(&c),
            Slot::Index {
                namespace: "x",
                page: 0,
            },
            Slot::Index {
                namespace: "audit-key-x",
                page: 0,
            },
            Slot::Probe,
        ];
        let mut all: Vec<String> = slots.iter().map(description).collect();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), slots.len(), "{all:?}");
    }

    #[test]
    fn the_index_follows_puts_and_deletes_per_namespace() {
        let mut s = store(credman::MAX_BLOB);
        s.put(&cred("a", "one"), b"r1").unwrap();
        s.put(&cred("a", "two"), b"r2").unwrap();
        s.put(&cred("a", "one"), b"r1b").unwrap();
        s.put(&cred("b", "three"), b"r3").unwrap();
        assert_eq!(names(&mut s, "a"), ["one", "two"]);
        assert_eq!(names(&mut s, "b"), ["three"]);
        assert_eq!(&s.get(&cred("a", "one")).unwrap().unwrap()[..], b"r1b");
        assert!(s.delete(&cred("a", "one")).unwrap());
        assert!(!s.delete(&cred("a", "one")).unwrap());
        assert_eq!(names(&mut s, "a"), ["two"]);
        assert_eq!(s.get(&cred("a", "one")).unwrap(), None);
        // Audit keys are items, not credentials: never in an index.
        let audit = ItemKey::AuditKey(AuditInstance::parse("i").unwrap());
        s.put(&audit, b"ab".repeat(32).as_slice()).unwrap();
        assert_eq!(names(&mut s, "a"), ["two"]);
        assert_eq!(s.get(&audit).unwrap().unwrap().len(), 64);
    }

    #[test]
    fn the_index_spreads_over_pages_and_keeps_its_order_of_writes() {
        let mut s = store(credman::MAX_BLOB);
        let all: Vec<String> = (0..100).map(|i| format!("{i:0>60}")).collect();
        for n in &all {
            s.put(&cred("ns", n), b"x").unwrap();
        }
        assert_eq!(names(&mut s, "ns"), all);
        let pages = s.read_index("ns").unwrap();
        assert!(pages.len() >= 3, "{} pages", pages.len());
        for page in 0..pages.len() {
            let blob = s.entries.get(&credman::entry_name(&Slot::Index {
                namespace: "ns",
                page,
            }));
            assert!(blob.unwrap().unwrap().len() <= credman::MAX_BLOB);
        }
        // Emptying the first page leaves it in place, so later pages are still read.
        for n in &pages[0] {
            s.delete(&cred("ns", n.as_str())).unwrap();
        }
        assert_eq!(names(&mut s, "ns").len(), 100 - pages[0].len());
        // A name added now reuses the room on the first page.
        s.put(&cred("ns", "late"), b"x").unwrap();
        assert_eq!(s.read_index("ns").unwrap()[0].len(), 1);
    }

    #[test]
    fn a_name_is_indexed_before_its_item_is_written() {
        // An item write that fails leaves an extra index name (listing skips it), never an
        // item the index does not name.
        struct FailItems(Map);
        impl Entries for FailItems {
            fn get(&mut self, n: &EntryName) -> Result<Option<Zeroizing<Vec<u8>>>, StoreError> {
                self.0.get(n)
            }
            fn set(&mut self, n: &EntryName, blob: &[u8]) -> Result<(), StoreError> {
                if n.user.contains(":credential:") {
                    return Err(StoreError::Failed("test", "refused".into()));
                }
                self.0.set(n, blob)
            }
            fn delete(&mut self, n: &EntryName) -> Result<bool, StoreError> {
                self.0.delete(n)
            }
        }
        let mut s = OsKeyring {
            entries: FailItems(Map::default()),
            kind: StoreKind::Keychain,
            location: "memory".into(),
            naming: keychain::entry_name,
            max_blob: keychain::MAX_BLOB,
        };
        assert!(s.put(&cred("a", "one"), b"r").is_err());
        assert_eq!(s.credential_names("a").unwrap().len(), 1);
        assert_eq!(s.get(&cred("a", "one")).unwrap(), None);
    }

    #[test]
    fn oversized_items_and_foreign_index_pages_are_refused() {
        let mut s = store(credman::MAX_BLOB);
        let err = s
            .put(&cred("a", "big"), &[0u8; credman::MAX_BLOB + 1])
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "the credential-manager store failed: 2561 bytes do not fit one entry, which holds at most 2560 (fewer hosts or a shorter value would fit)"
        );
        // Refused before anything is written: no index entry either.
        assert!(s.entries.0.is_empty());
        let page0 = credman::entry_name(&Slot::Index {
            namespace: "a",
            page: 0,
        });
        s.entries
            .set(&page0, b"gatehouse-credential-index 2\none\n")
            .unwrap();
        let err = s.credential_names("a").unwrap_err().to_string();
        assert!(err.contains("credential index page 0 of namespace a is unreadable (it does not start with \"gatehouse-credential-index 1\")"), "{err}");
        // ... and is not overwritten by a put.
        assert!(s.put(&cred("a", "two"), b"r").is_err());
        assert_eq!(
            &s.entries.get(&page0).unwrap().unwrap()[..],
            b"gatehouse-credential-index 2\none\n"
        );
    }

    #[test]
    fn index_pages_round_trip_and_skip_what_is_not_a_name() {
        let names = vec![
            CredentialName::parse("a").unwrap(),
            CredentialName::parse("b.c").unwrap(),
        ];
        assert_eq!(
            decode_index_page(&encode_index_page(&names)).unwrap(),
            names
        );
        let page = b"gatehouse-credential-index 1\na\nnot a name\n\nb.c\n";
        assert_eq!(decode_index_page(page).unwrap(), names);
        assert!(decode_index_page(&[0xff]).is_err());
    }
}
