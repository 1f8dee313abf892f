//! What a decision must echo: SHA-256 over everything a proposal shows, each field
//! length-prefixed, and a nonce the broker picks for each proposal.

use ipc_schema::ui::{Proposal, ProposalDigest};
use sha2::{Digest, Sha256};

/// The digest of `p` under `nonce`: its id, session, tool, target, arguments, diff, effect,
/// rule, policy revision, times, outside-text findings and the session's mode.
pub fn digest(p: &Proposal, nonce: &[u8; 16]) -> ProposalDigest {
    let mut h = Sha256::new();
    let mut put = |b: &[u8]| {
        h.update((b.len() as u64).to_le_bytes());
        h.update(b);
    };
    put(b"gatehouse-proposal-v1");
    put(nonce);
    put(&p.id.0.to_le_bytes());
    put(p.session.0.as_bytes());
    put(p.tool.name().as_bytes());
    put(p.target.as_bytes());
    put(p.arguments.as_bytes());
    match &p.diff {
        None => put(b"\0none"),
        Some(d) => put(d.as_bytes()),
    }
    put(p.effect.as_bytes());
    put(p.rule.as_bytes());
    put(&p.policy_revision.to_le_bytes());
    put(&p.created_unix_ms.to_le_bytes());
    put(&p.expires_unix_ms.to_le_bytes());
    // postcard's encoding is fixed for a given value: the same findings, the same bytes.
    put(&postcard::to_stdvec(&p.outside_text).expect("plain data encodes"));
    put(p.mode.as_str().as_bytes());
    ProposalDigest(h.finalize().into())
}
