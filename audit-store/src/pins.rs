//! The pins of third-party tools: the definition of each tool the human approved, per profile
//! and server (`definition` is the postcard of `ipc_schema::servers::ToolDef`, `digest` its
//! SHA-256 as the broker computes it). A tool whose server describes it otherwise is held
//! until approved again.

use crate::{bad_column as bad, Sql};
use ipc_schema::servers::{ServerName, ToolDef};
use ipc_schema::tool::ProfileName;
use rusqlite::{params, Connection};
use sha2::{Digest, Sha256};

/// The digest a pin holds: SHA-256 over the definition's canonical encoding.
pub fn digest(def: &ToolDef) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(b"gatehouse-tool-definition-v1\0");
    h.update(postcard::to_stdvec(def).expect("a ToolDef always encodes"));
    h.finalize().into()
}

/// Why a listed tool is not offered, against its pin (`None`: it is pinned as listed).
pub fn held_why(pin: Option<&Pin>, def: &ToolDef) -> Option<String> {
    let Some(pin) = pin else {
        return Some("new: not approved yet".into());
    };
    if pin.digest == digest(def) {
        return None;
    }
    let old = &pin.def;
    let what: Vec<&str> = [
        ("title", old.title != def.title),
        ("description", old.description != def.description),
        ("input schema", old.input_schema != def.input_schema),
        ("output schema", old.output_schema != def.output_schema),
        ("annotations", old.annotations != def.annotations),
    ]
    .into_iter()
    .filter_map(|(part, changed)| changed.then_some(part))
    .collect();
    Some(format!(
        "changed since you approved it ({})",
        if what.is_empty() {
            "definition".into()
        } else {
            what.join(", ")
        }
    ))
}

/// One approved definition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pin {
    pub profile: ProfileName,
    pub server: ServerName,
    pub def: ToolDef,
    pub digest: [u8; 32],
    pub approved_ms: i64,
}

pub fn load(conn: &Connection) -> Sql<Vec<Pin>> {
    let mut stmt = conn.prepare(
        "SELECT profile, server, tool, digest, definition, approved_ms FROM mcp_pins ORDER BY profile, server, tool",
    )?;
    let rows = stmt.query_map([], |r| {
        let profile: String = r.get(0)?;
        let server: String = r.get(1)?;
        let digest: Vec<u8> = r.get(3)?;
        let def: Vec<u8> = r.get(4)?;
        Ok(Pin {
            profile: ProfileName::parse(&profile)
                .map_err(|_| bad(0, "a profile name", &profile))?,
            server: ServerName::try_from(server.clone())
                .map_err(|_| bad(1, "a server name", &server))?,
            def: postcard::from_bytes(&def).map_err(|_| bad(4, "a tool definition", "(bytes)"))?,
            digest: digest
                .try_into()
                .map_err(|_| bad(3, "a SHA-256 digest", "(bytes)"))?,
            approved_ms: r.get(5)?,
        })
    })?;
    rows.collect()
}

/// Stores (or replaces) the pin of `p.def.name`.
pub fn put(conn: &Connection, p: &Pin) -> Sql<()> {
    let def = postcard::to_stdvec(&p.def).expect("a ToolDef always encodes");
    conn.execute(
        "INSERT INTO mcp_pins (profile, server, tool, digest, definition, approved_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6)
         ON CONFLICT (profile, server, tool) DO UPDATE SET digest = ?4, definition = ?5, approved_ms = ?6",
        params![p.profile.as_str(), p.server.as_str(), p.def.name.as_str(), &p.digest[..], def, p.approved_ms],
    )?;
    Ok(())
}
