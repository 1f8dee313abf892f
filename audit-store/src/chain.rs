//! The audit chain: what one audit row says, how it is hashed, and how the head is sealed.
//!
//! `hash = SHA-256(prev_hash || canonical fields)`. The canonical encoding is length-prefixed
//! binary rather than JSON so that verifying a million rows stays well under the time budget and
//! no field can be confused with its neighbour. Each row also carries `mac = HMAC(key, seq ||
//! hash)` and the head anchor carries `HMAC(key, instance || count || head)`, both computed by
//! the secrets-helper, which alone holds the key: someone who can write the file but not use
//! the keyring can recompute SHA-256 but not the MACs, so a rewritten,
//! inserted or deleted row is found and named, and a cut tail shows as a count below the anchor's.

use super::seal::{Mac, Seal, SealError};
use hmac::{Hmac, Mac as _};
use ipc_schema::mode::SessionMode;
use ipc_schema::secrets::{AuditHead, AuditRow};
use ipc_schema::tier::ConfinementTier;
use sha2::{Digest, Sha256};

pub type HmacSha256 = Hmac<Sha256>;

/// The `prev_hash` of the first row.
pub const GENESIS: [u8; 32] = [0u8; 32];

/// What happened, as recorded in the `kind` column (the type travels to the console too).
pub use ipc_schema::ui::AuditKind;

/// One audit entry before it has a place in the chain. No field may hold a secret or file
/// content: callers pass redacted arguments (the broker's `tools::args` summaries: no file
/// content, secret-looking argv elements and URL userinfo replaced by `<redacted N chars>`).
#[derive(Debug, Clone, PartialEq)]
pub struct AuditEvent {
    pub kind: AuditKind,
    /// The gateway session, if the event belongs to one.
    pub session: Option<String>,
    /// Who caused it: `gateway`, `ui`, `broker`, or a helper's name.
    pub actor: String,
    pub tool: Option<String>,
    /// The canonical target (resolved path, host, argv and cwd), if any.
    pub target: Option<String>,
    /// `allow`, `ask`, `deny`, `refused`, `done`, `failed`, `uncertain`, `started`, ...
    pub outcome: String,
    /// The rule or reason, and redacted arguments.
    pub detail: String,
    /// The session's mode. Left `None` on a row of a session, the chain fills it in with the
    /// mode the session's own rows last named ([`crate::Chain::append`]); a row that names one
    /// (the session's opening, resuming and mode-change rows) sets it.
    pub mode: Option<SessionMode>,
    /// The exec sandbox's confinement tier, set on a row about something run in it (a command,
    /// a `gatehouse run`/`sandbox` launch, a stdio server, their egress); `None` elsewhere.
    pub tier: Option<ConfinementTier>,
    /// What the call this row judged acted on, kept beside the row in `call_targets` so that a
    /// policy change can be tried on history (the policy crate's `ReplayCall`, as JSON: paths,
    /// hosts, program and working directory; never content, command arguments or a server
    /// tool's arguments). Not one of the hashed fields: the row's `target` is the chained form.
    pub call: Option<String>,
}

impl AuditEvent {
    pub fn new(kind: AuditKind, actor: impl Into<String>, outcome: impl Into<String>) -> Self {
        AuditEvent {
            kind,
            session: None,
            actor: actor.into(),
            tool: None,
            target: None,
            outcome: outcome.into(),
            detail: String::new(),
            mode: None,
            tier: None,
            call: None,
        }
    }
    pub fn mode(mut self, m: SessionMode) -> Self {
        self.mode = Some(m);
        self
    }
    /// The exec sandbox's tier (a row about something run in it); `None` leaves it unset.
    pub fn tier(mut self, t: Option<ConfinementTier>) -> Self {
        self.tier = t;
        self
    }
    pub fn session(mut self, s: impl Into<String>) -> Self {
        self.session = Some(s.into());
        self
    }
    pub fn tool(mut self, t: impl Into<String>) -> Self {
        self.tool = Some(t.into());
        self
    }
    pub fn target(mut self, t: impl Into<String>) -> Self {
        self.target = Some(t.into());
        self
    }
    /// The judged call's stored target (see [`AuditEvent::call`]).
    pub fn call(mut self, c: impl Into<String>) -> Self {
        self.call = Some(c.into());
        self
    }
    pub fn detail(mut self, d: impl Into<String>) -> Self {
        self.detail = d.into();
        self
    }
}

/// The canonical fields of a stored row, borrowed (the verifier reads them straight from SQLite).
#[derive(Debug, Clone, Copy)]
pub struct RowFields<'a> {
    pub seq: i64,
    pub ts_ms: i64,
    pub kind: &'a str,
    pub session: Option<&'a str>,
    pub actor: &'a str,
    pub tool: Option<&'a str>,
    pub target: Option<&'a str>,
    pub outcome: &'a str,
    pub detail: &'a str,
    pub degraded: bool,
    /// The session's mode (`None`: no session, or a row from before modes).
    pub mode: Option<&'a str>,
    /// The exec sandbox's tier (`None`: a row about nothing run in it, or from before tiers).
    pub tier: Option<&'a str>,
}

/// One stored row, owned, with its place in the chain: every canonical field plus `prev_hash`,
/// `hash` and `mac`. What `gatehouse audit export` sends and `verify-export` reads back, so a
/// store that holds only the export can recompute the chain ([`StoredRow::recomputed_hash`]).
/// Its serde form is the export's JSON (hashes and MAC as lowercase hex); a field added to
/// [`RowFields`] is added here and to [`crate::audit::stored_rows_after`], and the export
/// (JSON lines and OTLP attributes alike) carries it with no other change.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoredRow {
    pub seq: i64,
    pub ts_ms: i64,
    pub kind: String,
    pub session: Option<String>,
    pub actor: String,
    pub tool: Option<String>,
    pub target: Option<String>,
    pub outcome: String,
    pub detail: String,
    pub degraded: bool,
    #[serde(with = "hex32")]
    pub prev_hash: [u8; 32],
    #[serde(with = "hex32")]
    pub hash: [u8; 32],
    #[serde(with = "hex32")]
    pub mac: [u8; 32],
    /// The session's mode (`null`: no session, or a row from before modes); hashed when set.
    #[serde(default)]
    pub mode: Option<String>,
    /// The exec sandbox's tier (`null`: a row about nothing run in it, or from before tiers);
    /// hashed when set.
    #[serde(default)]
    pub tier: Option<String>,
}

impl StoredRow {
    pub fn fields(&self) -> RowFields<'_> {
        RowFields {
            seq: self.seq,
            ts_ms: self.ts_ms,
            kind: &self.kind,
            session: self.session.as_deref(),
            actor: &self.actor,
            tool: self.tool.as_deref(),
            target: self.target.as_deref(),
            outcome: &self.outcome,
            detail: &self.detail,
            degraded: self.degraded,
            mode: self.mode.as_deref(),
            tier: self.tier.as_deref(),
        }
    }

    /// The hash this row's fields and `prev_hash` give, by the one function the writer uses.
    pub fn recomputed_hash(&self) -> [u8; 32] {
        row_hash(&self.prev_hash, &self.fields())
    }
}

/// A 32-byte hash or MAC as 64 lowercase hex digits (serde).
pub mod hex32 {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(b: &[u8; 32], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&hex::encode(b))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<[u8; 32], D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        let mut out = [0u8; 32];
        hex::decode_to_slice(s.as_bytes(), &mut out)
            .map_err(|e| serde::de::Error::custom(format!("not 32 bytes of hex: {e}")))?;
        Ok(out)
    }
}

fn put_str(out: &mut Vec<u8>, s: Option<&str>) {
    put_field(out, s.map(str::as_bytes));
}

/// One text field as the hash sees it: its length (or `u32::MAX` for NULL), then its bytes.
pub fn put_field(out: &mut Vec<u8>, b: Option<&[u8]>) {
    match b {
        None => out.extend_from_slice(&u32::MAX.to_le_bytes()),
        Some(b) => {
            out.extend_from_slice(&(b.len() as u32).to_le_bytes());
            out.extend_from_slice(b);
        }
    }
}

/// Appends the canonical encoding of a row's fields (everything the hash covers after the
/// previous hash) to `out`.
///
/// The mode and the tier came later than the other fields: they are encoded after them, and
/// only when the row has them ([`put_later_fields`]), so a row written before them (or without
/// a session, or about nothing run in the exec sandbox) hashes exactly as it did then.
pub fn encode_fields(f: &RowFields<'_>, out: &mut Vec<u8>) {
    out.extend_from_slice(&f.seq.to_le_bytes());
    out.extend_from_slice(&f.ts_ms.to_le_bytes());
    put_str(out, Some(f.kind));
    put_str(out, f.session);
    put_str(out, Some(f.actor));
    put_str(out, f.tool);
    put_str(out, f.target);
    put_str(out, Some(f.outcome));
    put_str(out, Some(f.detail));
    out.push(f.degraded as u8);
    put_later_fields(out, f.mode.map(str::as_bytes), f.tier.map(str::as_bytes));
}

/// The fields added after the first version, as [`encode_fields`] and the verifier (which
/// reads bytes) encode them: nothing when neither is set; the mode alone when only it is set
/// (as rows were hashed before tiers); the mode (or its NULL marker) and then the tier when
/// the tier is set. Unambiguous: every earlier field is length-prefixed or fixed, so what
/// follows `degraded` is zero, one or two length-prefixed fields, and two means mode and tier.
pub fn put_later_fields(out: &mut Vec<u8>, mode: Option<&[u8]>, tier: Option<&[u8]>) {
    match tier {
        None => {
            if let Some(m) = mode {
                put_field(out, Some(m));
            }
        }
        Some(t) => {
            put_field(out, mode);
            put_field(out, Some(t));
        }
    }
}

/// `SHA-256("gatehouse-audit-v1" || prev || encoded fields)`.
pub fn hash_encoded(prev: &[u8], encoded: &[u8]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(b"gatehouse-audit-v1");
    h.update(prev);
    h.update(encoded);
    h.finalize().into()
}

/// `SHA-256(prev || canonical(fields))`.
pub fn row_hash(prev: &[u8; 32], f: &RowFields<'_>) -> [u8; 32] {
    let mut enc = Vec::with_capacity(256);
    encode_fields(f, &mut enc);
    hash_encoded(prev, &enc)
}

/// An audit key held in memory, for unit tests and `bench/` only: the broker and
/// `verify-audit` get every MAC from the secrets-helper (see [`super::seal`]) and never hold a
/// key. The layout is the one secrets-helper/src/audit_key.rs computes.
#[derive(Clone)]
#[allow(dead_code)] // the gatehouse binary never makes one
pub struct Sealer {
    keyed: HmacSha256,
}

#[allow(dead_code)]
impl Sealer {
    pub fn new(key: &[u8]) -> Sealer {
        Sealer {
            keyed: HmacSha256::new_from_slice(key).expect("HMAC takes any key length"),
        }
    }

    /// `HMAC(key, "row" || seq || hash)`.
    pub fn row_mac(&self, seq: i64, hash: &[u8; 32]) -> [u8; 32] {
        let mut m = self.keyed.clone();
        m.update(b"row");
        m.update(&seq.to_le_bytes());
        m.update(hash);
        m.finalize().into_bytes().into()
    }

    /// `HMAC(key, "head" || instance || count || head)`.
    pub fn head_mac(&self, instance: &str, count: i64, head: &[u8; 32]) -> [u8; 32] {
        let mut m = self.keyed.clone();
        m.update(b"head");
        m.update(&(instance.len() as u32).to_le_bytes());
        m.update(instance.as_bytes());
        m.update(&count.to_le_bytes());
        m.update(head);
        m.finalize().into_bytes().into()
    }
}

impl Seal for Sealer {
    fn macs(
        &self,
        instance: &str,
        rows: &[AuditRow],
        head: Option<&AuditHead>,
    ) -> Result<(Vec<Mac>, Option<Mac>), SealError> {
        Ok((
            rows.iter().map(|r| self.row_mac(r.seq, &r.hash)).collect(),
            head.map(|h| self.head_mac(instance, h.count, &h.head)),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(detail: &str) -> RowFields<'_> {
        RowFields {
            seq: 1,
            ts_ms: 5,
            kind: "tool_call",
            session: Some("s"),
            actor: "gateway",
            tool: Some("write_file"),
            target: Some("/p/a"),
            outcome: "allow",
            detail,
            degraded: false,
            mode: None,
            tier: None,
        }
    }

    #[test]
    fn a_row_without_a_mode_hashes_as_before_modes_and_a_mode_changes_the_hash() {
        // The encoding of a row without a mode, written out by hand as it was before modes.
        let f = fields("x");
        let mut old = Vec::new();
        old.extend_from_slice(&1i64.to_le_bytes());
        old.extend_from_slice(&5i64.to_le_bytes());
        for s in [
            "tool_call",
            "s",
            "gateway",
            "write_file",
            "/p/a",
            "allow",
            "x",
        ] {
            old.extend_from_slice(&(s.len() as u32).to_le_bytes());
            old.extend_from_slice(s.as_bytes());
        }
        old.push(0);
        let mut enc = Vec::new();
        encode_fields(&f, &mut enc);
        assert_eq!(enc, old);
        assert_eq!(row_hash(&GENESIS, &f), hash_encoded(&GENESIS, &old));
        let mut ask = fields("x");
        ask.mode = Some("ask");
        let mut full = fields("x");
        full.mode = Some("full-access");
        assert_ne!(row_hash(&GENESIS, &ask), row_hash(&GENESIS, &f));
        assert_ne!(row_hash(&GENESIS, &ask), row_hash(&GENESIS, &full));
    }

    /// A row without a tier hashes as before tiers (with or without a mode); a tier changes
    /// the hash, and a tier without a mode cannot pass for a mode (nor the other way round).
    #[test]
    fn a_tier_is_hashed_only_when_set_and_cannot_pass_for_a_mode() {
        let plain = fields("x");
        let mut moded = fields("x");
        moded.mode = Some("ask");
        let (mut enc_plain, mut enc_moded) = (Vec::new(), Vec::new());
        encode_fields(&plain, &mut enc_plain);
        encode_fields(&moded, &mut enc_moded);
        // Before tiers: the mode field after `degraded`, or nothing.
        let mut want = enc_plain.clone();
        put_field(&mut want, Some(b"ask"));
        assert_eq!(enc_moded, want);

        let mut tiered = fields("x");
        tiered.tier = Some("landlock");
        let mut both = moded;
        both.tier = Some("landlock");
        let mut other = fields("x");
        other.tier = Some("namespaces");
        let mut as_mode = fields("x");
        as_mode.mode = Some("landlock");
        let hashes = [
            row_hash(&GENESIS, &plain),
            row_hash(&GENESIS, &moded),
            row_hash(&GENESIS, &tiered),
            row_hash(&GENESIS, &both),
            row_hash(&GENESIS, &other),
            row_hash(&GENESIS, &as_mode),
        ];
        for (i, a) in hashes.iter().enumerate() {
            for b in &hashes[i + 1..] {
                assert_ne!(a, b, "{i}");
            }
        }
        // The tier alone: the mode's NULL marker, then the tier.
        let mut enc = Vec::new();
        encode_fields(&tiered, &mut enc);
        let mut want = enc_plain;
        want.extend_from_slice(&u32::MAX.to_le_bytes());
        put_field(&mut want, Some(b"landlock"));
        assert_eq!(enc, want);
    }

    #[test]
    fn every_field_changes_the_hash() {
        let base = row_hash(&GENESIS, &fields("x"));
        assert_ne!(base, row_hash(&GENESIS, &fields("y")));
        assert_ne!(base, row_hash(&[1; 32], &fields("x")));
        let mut f = fields("x");
        f.session = None;
        assert_ne!(base, row_hash(&GENESIS, &f));
        let mut f = fields("x");
        f.session = Some("");
        let empty = row_hash(&GENESIS, &f);
        f.session = None;
        assert_ne!(empty, row_hash(&GENESIS, &f), "None and empty differ");
        let mut f = fields("x");
        f.degraded = true;
        assert_ne!(base, row_hash(&GENESIS, &f));
    }

    #[test]
    fn field_boundaries_cannot_be_shifted() {
        let mut a = fields("x");
        a.actor = "ab";
        a.tool = Some("c");
        let mut b = fields("x");
        b.actor = "a";
        b.tool = Some("bc");
        assert_ne!(row_hash(&GENESIS, &a), row_hash(&GENESIS, &b));
    }

    #[test]
    fn macs_depend_on_the_key() {
        let h = [7u8; 32];
        let s1 = Sealer::new(b"key one");
        let s2 = Sealer::new(b"key two");
        let m = s1.row_mac(3, &h);
        assert_eq!(m, s1.row_mac(3, &h));
        assert_ne!(m, s2.row_mac(3, &h));
        assert_ne!(m, s1.row_mac(4, &h));
        let hm = s1.head_mac("inst", 10, &h);
        assert_ne!(hm, s1.head_mac("inst", 9, &h));
        assert_ne!(hm, s1.head_mac("other", 10, &h));
        assert_ne!(hm, s2.head_mac("inst", 10, &h));
    }
}
