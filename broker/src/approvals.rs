//! Proposals waiting for the human, and their decisions.
//!
//! A proposal is bound to a digest over everything it shows (plus a nonce). A decision must name
//! the proposal and echo that digest; it must come before the proposal expires, and only the
//! first decision counts. No decision by the expiry means deny.
//!
//! Who hears of a card: every console that subscribed (`UiRequest::Subscribe`) gets the whole
//! proposal. A notifier that watches (`gatehouse notify`) gets a card's summary only while no
//! console is attached: when the card opens with none, when the last console goes while it
//! waits, or when the notifier starts watching while it waits. It is told to take the card back
//! when the card closes (decided, expired, withdrawn) or a console attaches.

use crate::fronts::Replier;
use ipc_schema::notify::{CardSummary, NotifyEvent, NotifyReply, Settled};
use ipc_schema::tool::{ProposalId, SessionId, ToolId};
use ipc_schema::ui::{Choice, Decision, Proposal, ProposalDigest, UiEvent, UiReply};
use ipc_schema::Body;
use proposal::digest::digest;
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use tokio::sync::watch;

/// How a proposal ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Decided(Choice),
    Expired,
    /// The agent's side gave the call up (its request cancelled, its session closed).
    Withdrawn,
    /// The human switched the session to this mode while the card waited: the card is
    /// answered as that mode answers an Ask ([`ipc_schema::mode::on_ask`]).
    ByMode(ipc_schema::mode::SessionMode),
}

/// Why a decision was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DecideError {
    #[error("there is no proposal {0}")]
    Unknown(ProposalId),
    #[error("the proposal has already been decided ({0})")]
    AlreadyDecided(String),
    #[error("the proposal {0} expired before the decision arrived; no answer means deny")]
    Expired(ProposalId),
    #[error(
        "the digest does not match proposal {0}: the decision is not about what the broker showed"
    )]
    DigestMismatch(ProposalId),
}

struct Open {
    proposal: Proposal,
    /// What the decision's audit row says about outside text (no content).
    outside_note: String,
    /// [`Draft::tier`].
    tier: Option<ipc_schema::tier::ConfinementTier>,
    done: watch::Sender<Option<Outcome>>,
}

/// How many closed proposals are remembered (to answer a late or repeated decision precisely).
const CLOSED_KEPT: usize = 10_000;

#[derive(Default)]
pub struct Approvals {
    next: u64,
    open: BTreeMap<ProposalId, Open>,
    closed: HashMap<ProposalId, String>,
    closed_order: VecDeque<ProposalId>,
    /// Consoles: (their replies, the Subscribe's id, their connection).
    subscribers: Vec<(Replier, u64, ConnKey)>,
    /// Notifiers: (their replies, the Watch's id, their connection).
    watchers: Vec<(Replier, u64, ConnKey)>,
    /// Open cards the notifiers were told of and not yet told to take back.
    notified: BTreeSet<ProposalId>,
}

/// Which front connection a console or notifier listens on (its `Conn`'s address, which
/// outlives its entry here: the entry goes when the connection ends).
pub type ConnKey = usize;

/// What a proposal shows, before it has an id and a digest.
pub struct Draft {
    pub session: ipc_schema::tool::SessionId,
    pub tool: ipc_schema::tool::ToolId,
    pub target: String,
    pub arguments: String,
    pub diff: Option<String>,
    pub effect: String,
    pub rule: String,
    pub policy_revision: u64,
    /// Which arguments hold outside text the session read.
    pub outside_text: ipc_schema::ui::OutsideText,
    pub mode: ipc_schema::mode::SessionMode,
    /// The exec sandbox's tier, for a call that runs in it: the decision's audit row names it.
    pub tier: Option<ipc_schema::tier::ConfinementTier>,
}

impl Approvals {
    /// Opens a proposal; the receiver sees its outcome. The caller arranges the expiry (it calls
    /// [`Approvals::expire`] at `expires_unix_ms`).
    pub fn propose(
        &mut self,
        d: Draft,
        now_ms: u64,
        ttl_ms: u64,
    ) -> (Proposal, watch::Receiver<Option<Outcome>>) {
        self.next += 1;
        let mut p = Proposal {
            id: ProposalId(self.next),
            digest: ProposalDigest([0; 32]),
            session: d.session,
            tool: d.tool,
            target: d.target,
            arguments: d.arguments,
            diff: d.diff,
            effect: d.effect,
            rule: d.rule,
            policy_revision: d.policy_revision,
            created_unix_ms: now_ms,
            expires_unix_ms: now_ms + ttl_ms,
            outside_text: d.outside_text,
            mode: d.mode,
        };
        p.digest = digest(&p, &rand::random());
        let (tx, rx) = watch::channel(None);
        self.open.insert(
            p.id,
            Open {
                tier: d.tier,
                outside_note: crate::provenance::audit_note(&p.outside_text),
                proposal: p.clone(),
                done: tx,
            },
        );
        self.publish(UiEvent::ProposalAdded(Box::new(p.clone())));
        if self.subscribers.is_empty() {
            self.tell_watchers(&p);
        }
        (p, rx)
    }

    pub fn pending(&self) -> Vec<Proposal> {
        self.open.values().map(|o| o.proposal.clone()).collect()
    }

    fn close(&mut self, id: ProposalId, outcome: Outcome, text: String) {
        if let Some(o) = self.open.remove(&id) {
            let _ = o.done.send(Some(outcome));
            self.closed.insert(id, text.clone());
            self.closed_order.push_back(id);
            while self.closed_order.len() > CLOSED_KEPT {
                if let Some(old) = self.closed_order.pop_front() {
                    self.closed.remove(&old);
                }
            }
            self.publish(UiEvent::ProposalClosed {
                proposal: id,
                outcome: text,
            });
            self.settle(id, Settled::Closed);
        }
    }

    /// Applies a decision from the ui channel. Gives the choice, and what the decision's audit
    /// row should add about outside text in the arguments (empty if none; never content).
    /// The session and tool of an open proposal, and the exec sandbox's tier for a call that
    /// runs in it (the decision's audit row names them).
    pub fn whose(
        &self,
        id: ProposalId,
    ) -> Option<(SessionId, ToolId, Option<ipc_schema::tier::ConfinementTier>)> {
        self.open
            .get(&id)
            .map(|o| (o.proposal.session.clone(), o.proposal.tool.clone(), o.tier))
    }

    pub fn decide(
        &mut self,
        d: &Decision,
        now_ms: u64,
    ) -> Result<(&'static str, String), DecideError> {
        if let Some(how) = self.closed.get(&d.proposal) {
            if how.starts_with("expired") {
                return Err(DecideError::Expired(d.proposal));
            }
            return Err(DecideError::AlreadyDecided(how.clone()));
        }
        let Some(open) = self.open.get(&d.proposal) else {
            return Err(DecideError::Unknown(d.proposal));
        };
        if open.proposal.digest != d.digest {
            return Err(DecideError::DigestMismatch(d.proposal));
        }
        if now_ms >= open.proposal.expires_unix_ms {
            self.expire(d.proposal);
            return Err(DecideError::Expired(d.proposal));
        }
        let note = open.outside_note.clone();
        self.close(
            d.proposal,
            Outcome::Decided(d.choice),
            d.choice.as_str().to_string(),
        );
        Ok((d.choice.as_str(), note))
    }

    /// Closes the proposal as expired (denied), if it is still open.
    pub fn expire(&mut self, id: ProposalId) {
        self.close(id, Outcome::Expired, "expired: no answer means deny".into());
    }

    /// The open proposals of `session`.
    pub fn open_of(&self, session: &ipc_schema::tool::SessionId) -> Vec<ProposalId> {
        self.open
            .values()
            .filter(|o| &o.proposal.session == session)
            .map(|o| o.proposal.id)
            .collect()
    }

    /// Answers every open card of `session` as `mode` would (the human switched it): each
    /// closes, and a decision sent after this is refused. Returns how many were open.
    pub fn answer_by_mode(
        &mut self,
        session: &ipc_schema::tool::SessionId,
        mode: ipc_schema::mode::SessionMode,
    ) -> u32 {
        let ids = self.open_of(session);
        for id in &ids {
            let how = match ipc_schema::mode::on_ask(mode) {
                ipc_schema::mode::OnAsk::RunWithoutCard => "allowed",
                _ => "refused",
            };
            self.close(
                *id,
                Outcome::ByMode(mode),
                format!("{how}: the session was switched to {mode} mode"),
            );
        }
        ids.len() as u32
    }

    /// Withdraws a proposal whose call can no longer go ahead: the card closes as withdrawn,
    /// and a decision sent after this is refused (the proposal is closed), so nothing is
    /// carried out. Returns whether it was still open.
    pub fn withdraw(&mut self, id: ProposalId, why: &str) -> bool {
        if let Some(o) = self.open.remove(&id) {
            let _ = o.done.send(Some(Outcome::Withdrawn));
            self.closed.insert(id, format!("withdrawn: {why}"));
            self.closed_order.push_back(id);
            self.publish(UiEvent::ProposalClosed {
                proposal: id,
                outcome: format!("withdrawn: {why}"),
            });
            self.settle(id, Settled::Closed);
            true
        } else {
            false
        }
    }

    /// A console subscribed: it shows every open card from now on, so the notifiers take back
    /// what they showed.
    pub fn subscribe(&mut self, r: Replier, id: u64, conn: ConnKey) {
        self.subscribers.push((r, id, conn));
        for p in std::mem::take(&mut self.notified) {
            self.send_watchers(NotifyEvent::Settled {
                proposal: p,
                why: Settled::ConsoleAttached,
            });
        }
    }

    /// A notifier watches: told at once of the cards waiting with no console attached.
    pub fn watch(&mut self, r: Replier, id: u64, conn: ConnKey) {
        r.send(id, Body::NotifyReply(NotifyReply::Watching));
        self.watchers.push((r, id, conn));
        if self.subscribers.is_empty() {
            let waiting: Vec<Proposal> = self.pending();
            for p in &waiting {
                self.tell_watchers(p);
            }
        }
    }

    /// A front connection ended: if it was the last console, the cards still waiting go to
    /// the notifiers.
    pub fn connection_closed(&mut self, conn: ConnKey) {
        self.watchers.retain(|w| w.2 != conn);
        let consoles = self.subscribers.len();
        self.subscribers.retain(|s| s.2 != conn);
        self.after_consoles_left(consoles);
    }

    pub fn publish(&mut self, ev: UiEvent) {
        let consoles = self.subscribers.len();
        self.subscribers
            .retain(|(r, id, _)| r.send_checked(*id, Body::UiReply(UiReply::Event(ev.clone()))));
        // A console whose connection already failed is gone too, whichever notices first.
        self.after_consoles_left(consoles);
    }

    /// If the last of `before` consoles has gone, the cards still waiting go to the notifiers.
    fn after_consoles_left(&mut self, before: usize) {
        if before > 0 && self.subscribers.is_empty() {
            let waiting: Vec<Proposal> = self.pending();
            for p in &waiting {
                self.tell_watchers(p);
            }
        }
    }

    /// Tells the notifiers of `p` (a summary: never its arguments, diff or digest).
    fn tell_watchers(&mut self, p: &Proposal) {
        if self.watchers.is_empty() || self.notified.contains(&p.id) {
            return;
        }
        self.notified.insert(p.id);
        self.send_watchers(NotifyEvent::Waiting(CardSummary {
            proposal: p.id,
            session: p.session.clone(),
            tool: p.tool.clone(),
            target: p.target.clone(),
            expires_unix_ms: p.expires_unix_ms,
        }));
    }

    fn settle(&mut self, id: ProposalId, why: Settled) {
        if self.notified.remove(&id) {
            self.send_watchers(NotifyEvent::Settled { proposal: id, why });
        }
    }

    fn send_watchers(&mut self, ev: NotifyEvent) {
        self.watchers.retain(|(r, id, _)| {
            r.send_checked(*id, Body::NotifyReply(NotifyReply::Event(ev.clone())))
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ipc_schema::tool::{SessionId, ToolName};

    fn draft() -> Draft {
        Draft {
            session: SessionId("s".into()),
            tool: ToolName::WriteFile.into(),
            target: "/p/a".into(),
            arguments: "{}".into(),
            diff: Some("+x".into()),
            effect: "create /p/a".into(),
            rule: "tools.write_file default".into(),
            policy_revision: 0,
            outside_text: Default::default(),
            mode: ipc_schema::mode::SessionMode::Ask,
            tier: None,
        }
    }

    #[test]
    fn a_mode_switch_answers_only_that_sessions_cards_and_later_decisions_are_refused() {
        use ipc_schema::mode::SessionMode;
        let mut a = Approvals::default();
        let (p1, rx1) = a.propose(draft(), 1000, 5000);
        let mut other = draft();
        other.session = SessionId("t".into());
        let (p2, rx2) = a.propose(other, 1000, 5000);
        assert_eq!(
            a.answer_by_mode(&SessionId("s".into()), SessionMode::Unattended),
            1
        );
        assert_eq!(
            *rx1.borrow(),
            Some(Outcome::ByMode(SessionMode::Unattended))
        );
        assert_eq!(*rx2.borrow(), None, "another session's card still waits");
        let late = Decision {
            proposal: p1.id,
            digest: p1.digest,
            choice: Choice::AllowOnce,
        };
        assert_eq!(
            a.decide(&late, 1001),
            Err(DecideError::AlreadyDecided(
                "refused: the session was switched to unattended mode".into()
            ))
        );
        assert_eq!(a.pending().len(), 1);
        assert_eq!(a.pending()[0].id, p2.id);
    }

    #[test]
    fn decisions_are_bound_to_the_digest_and_counted_once() {
        let mut a = Approvals::default();
        let (p, rx) = a.propose(draft(), 1000, 5000);
        let bad = Decision {
            proposal: p.id,
            digest: ProposalDigest([9; 32]),
            choice: Choice::AllowOnce,
        };
        assert_eq!(a.decide(&bad, 1001), Err(DecideError::DigestMismatch(p.id)));
        assert_eq!(*rx.borrow(), None, "a refused decision decides nothing");
        let good = Decision {
            proposal: p.id,
            digest: p.digest,
            choice: Choice::Deny,
        };
        assert_eq!(a.decide(&good, 1002), Ok(("deny", String::new())));
        assert_eq!(*rx.borrow(), Some(Outcome::Decided(Choice::Deny)));
        let again = Decision {
            choice: Choice::AllowOnce,
            ..good
        };
        let e = a.decide(&again, 1003).unwrap_err();
        assert_eq!(
            e.to_string(),
            "the proposal has already been decided (deny)"
        );
        assert_eq!(
            a.decide(
                &Decision {
                    proposal: ProposalId(99),
                    ..good
                },
                1
            ),
            Err(DecideError::Unknown(ProposalId(99)))
        );
    }

    #[test]
    fn expiry_denies_and_late_decisions_are_refused() {
        let mut a = Approvals::default();
        let (p, rx) = a.propose(draft(), 1000, 5000);
        let d = Decision {
            proposal: p.id,
            digest: p.digest,
            choice: Choice::AllowOnce,
        };
        assert_eq!(a.decide(&d, 6000), Err(DecideError::Expired(p.id)));
        assert_eq!(*rx.borrow(), Some(Outcome::Expired));
        assert_eq!(a.decide(&d, 6001), Err(DecideError::Expired(p.id)));
    }

    #[test]
    fn the_digest_covers_outside_text_and_the_decision_row_names_it() {
        use ipc_schema::ui::{LineRange, MatchedPart, OutsideMatch, OutsideSource};
        let mut a = Approvals::default();
        let (p, _) = a.propose(draft(), 1000, 5000);
        let nonce = [7; 16];
        let mut q = p.clone();
        q.outside_text.sources.push(OutsideSource {
            tool: ipc_schema::tool::ToolName::FetchUrl.into(),
            url: "https://x.example/a?token=s3cr3t".into(),
            call: 2,
            read_unix_ms: 900,
            partial: false,
        });
        q.outside_text.matches.push(OutsideMatch {
            argument: "content".into(),
            part: MatchedPart::Lines(vec![LineRange { first: 2, last: 4 }]),
            diff_lines: vec![],
            source: 0,
        });
        assert_ne!(digest(&p, &nonce), digest(&q, &nonce));
        let mut r = q.clone();
        r.outside_text.sources_forgotten = 1;
        assert_ne!(digest(&q, &nonce), digest(&r, &nonce));

        let mut d = draft();
        d.outside_text = q.outside_text.clone();
        let (p, _) = a.propose(d, 1000, 5000);
        let (choice, note) = a
            .decide(
                &Decision {
                    proposal: p.id,
                    digest: p.digest,
                    choice: Choice::AllowOnce,
                },
                1001,
            )
            .unwrap();
        assert_eq!(choice, "allow once");
        assert_eq!(
            note,
            "; outside text: content lines 2-4 from fetch_url https://x.example/a?<redacted 13 chars> (call 2)"
        );
    }

    /// The notifier's events on `rx` so far.
    fn notified(rx: &mut tokio::sync::mpsc::UnboundedReceiver<Vec<u8>>) -> Vec<NotifyReply> {
        let mut out = Vec::new();
        while let Ok(frame) = rx.try_recv() {
            let env = ipc_schema::codec::decode_payload(&frame[4..]).unwrap();
            match env.body {
                Body::NotifyReply(r) => out.push(r),
                other => panic!("the notifier got {other:?}"),
            }
        }
        out
    }

    #[test]
    fn the_notifier_hears_of_cards_only_while_no_console_is_attached() {
        let mut a = Approvals::default();
        let (watcher, mut wrx) = Replier::for_test();
        a.watch(watcher, 5, 1);
        assert_eq!(notified(&mut wrx), [NotifyReply::Watching]);
        // No console: the card goes to the notifier, as a summary.
        let (p, _) = a.propose(draft(), 1000, 5000);
        let waiting = NotifyReply::Event(NotifyEvent::Waiting(CardSummary {
            proposal: p.id,
            session: p.session.clone(),
            tool: p.tool.clone(),
            target: "/p/a".into(),
            expires_unix_ms: 6000,
        }));
        assert_eq!(notified(&mut wrx), std::slice::from_ref(&waiting));
        // A console attaches: taken back; a card opened now is the console's alone.
        let (console, mut crx) = Replier::for_test();
        a.subscribe(console, 9, 2);
        let settled = |why| {
            NotifyReply::Event(NotifyEvent::Settled {
                proposal: p.id,
                why,
            })
        };
        assert_eq!(notified(&mut wrx), [settled(Settled::ConsoleAttached)]);
        let (q, _) = a.propose(draft(), 1000, 5000);
        assert_eq!(notified(&mut wrx), []);
        assert!(crx.try_recv().is_ok(), "the console got the new card");
        // The console goes: both waiting cards go to the notifier; another connection
        // closing changes nothing.
        a.connection_closed(3);
        assert_eq!(notified(&mut wrx), []);
        a.connection_closed(2);
        let got = notified(&mut wrx);
        assert_eq!(got.len(), 2, "{got:?}");
        assert_eq!(got[0], waiting);
        assert!(
            matches!(&got[1], NotifyReply::Event(NotifyEvent::Waiting(c)) if c.proposal == q.id)
        );
        // Decided, withdrawn: taken back as closed. A card never shown is not taken back.
        a.decide(
            &Decision {
                proposal: p.id,
                digest: p.digest,
                choice: Choice::Deny,
            },
            1001,
        )
        .unwrap();
        assert_eq!(notified(&mut wrx), [settled(Settled::Closed)]);
        assert!(a.withdraw(q.id, "gone"));
        assert_eq!(
            notified(&mut wrx),
            [NotifyReply::Event(NotifyEvent::Settled {
                proposal: q.id,
                why: Settled::Closed
            })]
        );
        // A notifier that starts watching while a card waits with no console hears of it.
        a.connection_closed(1);
        let (r, _) = a.propose(draft(), 1000, 5000);
        let (late, mut lrx) = Replier::for_test();
        a.watch(late, 6, 4);
        let got = notified(&mut lrx);
        assert_eq!(got[0], NotifyReply::Watching);
        assert!(
            matches!(&got[1..], [NotifyReply::Event(NotifyEvent::Waiting(c))] if c.proposal == r.id),
            "{got:?}"
        );
        assert_eq!(
            notified(&mut wrx),
            [],
            "the closed notifier is told nothing more"
        );
    }

    #[test]
    fn digests_differ_for_identical_content() {
        let mut a = Approvals::default();
        let (p1, _) = a.propose(draft(), 1000, 5000);
        let (p2, _) = a.propose(draft(), 1000, 5000);
        assert_ne!(p1.digest, p2.digest);
    }
}
