//! Gateway sessions: one per gateway connection, with a random id the broker picks, its rate
//! limits and its "allow for this session" decisions. A gateway that reconnects (after a broker
//! restart) may carry its session on by presenting the resume token the broker gave it.

use audit_store::chain::{AuditEvent, AuditKind};
use ipc_schema::mode::SessionMode;
use ipc_schema::tool::{AgentInfo, ProfileName, ResumeToken, SessionId, ToolId};
use ipc_schema::ui::ModeSetter;
use policy::rate::RateState;
use sha2::{Digest, Sha256};
use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::rc::Rc;

pub struct Session {
    pub id: SessionId,
    /// The profile it was opened with; every call is judged by this profile alone, for the
    /// session's whole life (a resume cannot change it).
    pub profile: ProfileName,
    /// How its Ask calls are answered; the human's to change (`set_mode`), never the agent's.
    pub mode: SessionMode,
    /// The MCP client, as it named itself (once).
    pub agent: Option<AgentInfo>,
    pub started_ms: i64,
    pub connected: bool,
    pub calls: u64,
    pub rate: RateState,
    /// (tool, target key) allowed for the rest of this session.
    pub allowed: HashSet<(ToolId, String)>,
    /// Outside text this session read (fetched pages, http replies), as fingerprints: a
    /// proposal names the arguments that came from it.
    pub outside: crate::provenance::OutsideText,
}

pub type SessionRef = Rc<RefCell<Session>>;

#[derive(Default)]
pub struct Sessions {
    live: HashMap<SessionId, SessionRef>,
    /// Sessions whose token was revoked by this broker; checked before the database (whose
    /// update follows asynchronously), so a token is dead from the moment its gateway leaves.
    revoked: HashSet<SessionId>,
}

pub fn token_hash(t: &ResumeToken) -> Vec<u8> {
    Sha256::digest(t.0.as_bytes()).to_vec()
}

/// What a revoked session's token hash is replaced with: a value no token hashes to.
pub fn revoked_hash(sid: &str) -> Vec<u8> {
    Sha256::digest(format!("revoked session {sid}").as_bytes()).to_vec()
}

/// Revokes `session`'s token (in memory, and in the store, so no restart brings it back), with
/// the row `actor` / "`why`; token revoked" (or "already revoked" when it was). The one way a
/// token ends: its gateway leaving (`tools::connection_closed`), its run ending
/// (`crate::launch`).
pub async fn revoke(
    gate: &crate::gate::Gate,
    session: SessionId,
    actor: &'static str,
    why: &'static str,
) {
    let had = gate.sessions.borrow().is_revoked(&session);
    gate.sessions.borrow_mut().revoke(&session);
    let sid = session.0.clone();
    let revoked = revoked_hash(&sid);
    let r = gate
        .store
        .txn(move |tx, audit| {
            if audit_store::sessions::set_resume_hash(tx, &SessionId(sid.clone()), &revoked)? {
                let state = if had { "already revoked" } else { "revoked" };
                audit.push(
                    AuditEvent::new(AuditKind::Session, actor, format!("{why}; token {state}"))
                        .session(sid),
                );
            }
            Ok(())
        })
        .await;
    if let Err(e) = r {
        tracing::error!(%session, "revoking the session's token failed: {e}");
    }
}

/// The refusal of a resume that names another profile than the session's.
pub fn profile_mismatch(id: &SessionId, has: &ProfileName, asked: &ProfileName) -> String {
    format!(
        "session {id} was opened with profile {has}; it cannot be carried on with profile {asked} (a session keeps its profile: start a new session for {asked})"
    )
}

/// The mode a new session of `profile` starts in: the profile's `mode` (`ask` while the policy
/// is invalid, when every call is refused anyway).
pub fn profile_mode(gate: &crate::gate::Gate, profile: &ProfileName) -> SessionMode {
    match &gate.policy.borrow().current {
        Ok(all) => all.get(profile).map(|p| p.mode).unwrap_or_default(),
        Err(_) => SessionMode::Ask,
    }
}

/// Makes a new resumable session of `profile`: its id and token (stored hashed), its profile
/// and its mode (`mode`, which only the human's side names, or the profile's), with the audit
/// row `actor`/`outcome`/`detail`. An unknown profile is refused (while the policy file is
/// invalid the session opens, and each of its calls is refused with the reason).
pub async fn create(
    gate: &crate::gate::Gate,
    profile: &ProfileName,
    mode: Option<SessionMode>,
    actor: &'static str,
    outcome: &'static str,
    detail: String,
) -> Result<(SessionId, ResumeToken, SessionMode), (ipc_schema::ErrorCode, String)> {
    if let Ok(all) = &gate.policy.borrow().current {
        if all.get(profile).is_none() {
            return Err((
                ipc_schema::ErrorCode::Refused,
                policy::unknown_profile(profile, all),
            ));
        }
    }
    let mode = mode.unwrap_or_else(|| profile_mode(gate, profile));
    let (id, token) = new_ids();
    let (sid, hash, pname) = (id.0.clone(), token_hash(&token), profile.clone());
    let detail = format!("{detail}; mode {mode}");
    gate.store
        .txn(move |tx, audit| {
            audit_store::sessions::insert(
                tx,
                &SessionId(sid.clone()),
                &hash,
                &pname,
                mode,
                audit_store::now_ms(),
            )?;
            audit.push(
                audit_store::chain::AuditEvent::new(
                    audit_store::chain::AuditKind::Session,
                    actor,
                    outcome,
                )
                .session(sid)
                .mode(mode)
                .detail(detail),
            );
            Ok(())
        })
        .await
        .map_err(|e| (ipc_schema::ErrorCode::Internal, e.to_string()))?;
    Ok((id, token, mode))
}

/// The human sets `session`'s mode: stored (a resumed session keeps it), the audit row `old ->
/// new` and who, then the session's waiting cards are answered as the new mode would (each
/// waiting call writes its own row). A session this broker does not have live but the store
/// does (e.g. after a restart, before its gateway resumes) gets the stored mode only. Gives the
/// old mode and how many cards were answered.
pub async fn set_mode(
    gate: &crate::gate::Gate,
    session: &SessionId,
    mode: SessionMode,
    by: ModeSetter,
) -> Result<(SessionMode, u32), String> {
    if gate.sessions.borrow().is_revoked(session) {
        return Err(format!(
            "session {session} has ended (its token was revoked); its mode can no longer change"
        ));
    }
    let live = gate.sessions.borrow().live.get(session).cloned();
    let sid = session.clone();
    let stored = gate
        .store
        .read(move |tx| {
            Ok((
                audit_store::sessions::resume_hash(tx, &sid)?,
                audit_store::sessions::mode(tx, &sid)?,
            ))
        })
        .await
        .map_err(|e| e.to_string())?;
    let old = match (&live, &stored) {
        (Some(s), _) => s.borrow().mode,
        (None, (Some(hash), _)) if *hash == revoked_hash(&session.0) => {
            return Err(format!(
                "session {session} has ended (its token was revoked); its mode can no longer change"
            ))
        }
        (None, (Some(_), m)) => m.unwrap_or_default(),
        (None, (None, _)) => return Err(format!("there is no session {session}")),
    };
    // A session opened without a token (not resumable) is not in the store: its mode lives in
    // memory only, like the session.
    let in_store = stored.0.is_some();
    let sid = session.clone();
    gate.store
        .txn(move |tx, audit| {
            if in_store {
                audit_store::sessions::set_mode(tx, &sid, mode)?;
            }
            audit.push(
                AuditEvent::new(AuditKind::Session, "ui", "mode changed")
                    .session(sid.0.clone())
                    .mode(mode)
                    .detail(format!("mode {old} -> {mode}, by {}", by.as_str())),
            );
            Ok(())
        })
        .await
        .map_err(|e| e.to_string())?;
    let Some(s) = live else {
        return Ok((old, 0));
    };
    s.borrow_mut().mode = mode;
    let answered = match ipc_schema::mode::on_ask(mode) {
        ipc_schema::mode::OnAsk::Card => 0,
        _ => gate.approvals.borrow_mut().answer_by_mode(session, mode),
    };
    Ok((old, answered))
}

pub fn new_ids() -> (SessionId, ResumeToken) {
    (
        SessionId(hex::encode(rand::random::<[u8; 16]>())),
        ResumeToken(hex::encode(rand::random::<[u8; 32]>())),
    )
}

impl Sessions {
    /// The session `id`, attached to a connection (made if this broker has not seen it yet,
    /// e.g. resumed after a restart).
    /// A session this broker already has keeps the profile it was made with: asking for
    /// another is refused.
    /// `mode` is the mode of a session it makes (one it has keeps its own).
    pub fn attach(
        &mut self,
        id: &SessionId,
        started_ms: i64,
        profile: &ProfileName,
        mode: SessionMode,
    ) -> Result<SessionRef, String> {
        let s = self
            .live
            .entry(id.clone())
            .or_insert_with(|| {
                Rc::new(RefCell::new(Session {
                    id: id.clone(),
                    profile: profile.clone(),
                    mode,
                    agent: None,
                    started_ms,
                    connected: false,
                    calls: 0,
                    rate: RateState::default(),
                    allowed: HashSet::new(),
                    outside: crate::provenance::OutsideText::new(),
                }))
            })
            .clone();
        if s.borrow().connected {
            return Err(format!("session {id} is in use by another connection"));
        }
        if s.borrow().profile != *profile {
            return Err(profile_mismatch(id, &s.borrow().profile, profile));
        }
        s.borrow_mut().connected = true;
        Ok(s)
    }

    pub fn revoke(&mut self, id: &SessionId) {
        self.revoked.insert(id.clone());
    }

    pub fn is_revoked(&self, id: &SessionId) -> bool {
        self.revoked.contains(id)
    }

    pub fn all(&self) -> Vec<SessionRef> {
        let mut v: Vec<_> = self.live.values().cloned().collect();
        v.sort_by_key(|s| s.borrow().started_ms);
        v
    }
}

/// A gateway connection's hold on its session: detaches on drop (connection closed).
pub struct Attached(pub SessionRef);

impl Drop for Attached {
    fn drop(&mut self) {
        self.0.borrow_mut().connected = false;
    }
}
