//! How a credential is kept in the store: one item holding the spec and, when entered, the
//! value, as postcard (its wire format is documented and stable). Encoded into a fixed,
//! zeroized buffer so that no reallocation leaves a copy of the value behind.

use ipc_schema::secrets::{CredentialSpec, HostPattern, SecretValue, SendAs};
use serde::{Deserialize, Serialize};
use zeroize::Zeroizing;

/// The record format; a record of another version is reported, never guessed at.
const VERSION: u8 = 1;
/// Larger than any record: 32 hosts of 255 bytes, a 4 KiB value, and framing.
const MAX_RECORD: usize = 16 * 1024;

#[derive(Serialize, Deserialize)]
struct Record {
    version: u8,
    hosts: Vec<HostPattern>,
    send_as: SendAs,
    value: Option<SecretValue>,
}

/// Why a stored record cannot be read.
#[derive(Debug, thiserror::Error)]
#[error("the stored record of credential {name} is unreadable ({why}); delete it and set it again")]
pub struct CorruptRecord {
    pub name: String,
    pub why: String,
}

pub fn encode(spec: &CredentialSpec, value: Option<&SecretValue>) -> Zeroizing<Vec<u8>> {
    let rec = Record {
        version: VERSION,
        hosts: spec.hosts.clone(),
        send_as: spec.send_as.clone(),
        value: value.cloned(),
    };
    let mut buf = Zeroizing::new(vec![0u8; MAX_RECORD]);
    let n = postcard::to_slice(&rec, &mut buf[..])
        .expect("a record checked by CredentialSpec::normalized fits 16 KiB")
        .len();
    buf.truncate(n);
    buf
}

/// The spec (named `name`) and value stored in `blob`.
pub fn decode(
    name: &ipc_schema::secrets::CredentialName,
    blob: &[u8],
) -> Result<(CredentialSpec, Option<SecretValue>), CorruptRecord> {
    let corrupt = |why: String| CorruptRecord {
        name: name.to_string(),
        why,
    };
    let rec: Record = postcard::from_bytes(blob).map_err(|e| corrupt(e.to_string()))?;
    if rec.version != VERSION {
        return Err(corrupt(format!("record version {}", rec.version)));
    }
    let spec = CredentialSpec {
        name: name.clone(),
        hosts: rec.hosts,
        send_as: rec.send_as,
    }
    .normalized()
    .map_err(|e| corrupt(e.to_string()))?;
    Ok((spec, rec.value))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipc_schema::secrets::{BasicUser, CredentialName, MAX_HOSTS, MAX_SECRET_LEN};

    #[test]
    fn records_round_trip_and_the_largest_fits() {
        let spec = CredentialSpec {
            name: CredentialName::parse("n").unwrap(),
            hosts: (0..MAX_HOSTS)
                .map(|i| HostPattern::parse(&format!("{}{i}.example.com", "a".repeat(60))).unwrap())
                .collect(),
            send_as: SendAs::Basic(BasicUser::parse(&"u".repeat(128)).unwrap()),
        }
        .normalized()
        .unwrap();
        let v = SecretValue::new(vec![b'x'; MAX_SECRET_LEN]);
        let blob = encode(&spec, Some(&v));
        let (s2, v2) = decode(&spec.name, &blob).unwrap();
        assert_eq!(s2, spec);
        assert_eq!(v2, Some(v));
        let (_, none) = decode(&spec.name, &encode(&spec, None)).unwrap();
        assert!(none.is_none());
        let err = decode(&spec.name, b"\x02garbage").unwrap_err();
        assert!(
            err.to_string().contains("delete it and set it again"),
            "{err}"
        );
    }
}
