//! What the person's keys do: nothing is decided without a card's key, a key cannot decide a
//! card that has only just appeared, "always allow" needs a second press, and each decision
//! carries the digest of the card shown.

use ipc_schema::tool::{ProposalId, SessionId, ToolName};
use ipc_schema::ui::{Choice, Decision, Proposal, ProposalDigest, UiEvent, UiReply, UiRequest};
use ipc_schema::{Body, Envelope, ErrorCode, ErrorReply};
use std::time::{Duration, Instant};
use ui::state::{Console, Key, Options, ARM_DELAY};

fn proposal(id: u64) -> Proposal {
    Proposal {
        id: ProposalId(id),
        digest: ProposalDigest([id as u8; 32]),
        session: SessionId("s1".into()),
        tool: ToolName::EditFile.into(),
        target: format!("/p/file{id}"),
        arguments: "{}".into(),
        diff: None,
        effect: "edit".into(),
        rule: "tools.edit_file default".into(),
        policy_revision: 0,
        created_unix_ms: 0,
        expires_unix_ms: u64::MAX,
        outside_text: Default::default(),
        mode: ipc_schema::mode::SessionMode::Ask,
    }
}

struct Fixture {
    c: Console,
    sub: u64,
    t0: Instant,
}

impl Fixture {
    fn new(opts: Options, pending: Vec<Proposal>) -> Fixture {
        let t0 = Instant::now();
        let mut c = Console::new(opts);
        c.start(t0);
        let out = c.take_outbox();
        let sub = out
            .iter()
            .find(|e| matches!(e.body, Body::Ui(UiRequest::Subscribe)))
            .unwrap()
            .id;
        let list = out
            .iter()
            .find(|e| matches!(e.body, Body::Ui(UiRequest::ListPending)))
            .unwrap()
            .id;
        c.on_frame(Envelope::new(sub, Body::UiReply(UiReply::Subscribed)), t0);
        c.on_frame(
            Envelope::new(list, Body::UiReply(UiReply::Pending(pending))),
            t0,
        );
        Fixture { c, sub, t0 }
    }

    fn at(&self, ms: u64) -> Instant {
        self.t0 + Duration::from_millis(ms)
    }

    fn event(&mut self, ev: UiEvent, at: Instant) {
        self.c.on_frame(
            Envelope::new(self.sub, Body::UiReply(UiReply::Event(ev))),
            at,
        );
    }

    /// The decisions queued for the broker since the last call (polls aside).
    fn decisions(&mut self) -> Vec<(u64, Decision)> {
        self.c
            .take_outbox()
            .into_iter()
            .filter_map(|e| match e.body {
                Body::Ui(UiRequest::Decide(d)) => Some((e.id, d)),
                _ => None,
            })
            .collect()
    }
}

const LATER: u64 = 5_000;

#[test]
fn nothing_is_decided_without_a_cards_key_and_the_digest_shown_is_sent() {
    let mut f = Fixture::new(Options::default(), vec![proposal(1)]);
    let later = f.at(LATER);
    for k in [
        Key::Enter,
        Key::Char(' '),
        Key::Char('y'),
        Key::Tab,
        Key::Down,
        Key::Esc,
    ] {
        f.c.on_key(k, later);
    }
    assert!(f.decisions().is_empty(), "no key but a card's decides");
    f.c.on_key(Key::Char('a'), later);
    let d = f.decisions();
    assert_eq!(d.len(), 1);
    assert_eq!(
        d[0].1,
        Decision {
            proposal: ProposalId(1),
            digest: ProposalDigest([1; 32]),
            choice: Choice::AllowOnce
        }
    );
    // A second press while the answer is on its way sends nothing.
    f.c.on_key(Key::Char('d'), later);
    assert!(f.decisions().is_empty());
}

#[test]
fn a_card_that_just_appeared_does_not_take_a_key_yet() {
    let mut f = Fixture::new(Options::default(), vec![]);
    let t = f.at(1000);
    f.event(UiEvent::ProposalAdded(Box::new(proposal(4))), t);
    assert!(f.c.take_bell(), "a new card rings the bell");
    f.c.on_key(Key::Char('a'), t + ARM_DELAY / 2);
    assert!(
        f.decisions().is_empty(),
        "a key meant for something else decides nothing"
    );
    assert!(f
        .c
        .status
        .as_ref()
        .unwrap()
        .0
        .contains("only just appeared"));
    f.c.on_key(Key::Char('a'), t + ARM_DELAY);
    assert_eq!(f.decisions().len(), 1);
}

#[test]
fn the_next_card_taking_the_place_of_a_closed_one_must_arm_again() {
    let mut f = Fixture::new(Options::default(), vec![proposal(1), proposal(2)]);
    assert_eq!(f.c.selected().unwrap().id, ProposalId(1));
    // A card arriving later does not move the selection.
    f.event(UiEvent::ProposalAdded(Box::new(proposal(3))), f.at(100));
    assert_eq!(f.c.selected().unwrap().id, ProposalId(1));
    // Card 1 is decided elsewhere; card 2 takes its place now.
    let t = f.at(LATER);
    f.event(
        UiEvent::ProposalClosed {
            proposal: ProposalId(1),
            outcome: "allow once".into(),
        },
        t,
    );
    assert_eq!(f.c.selected().unwrap().id, ProposalId(2));
    f.c.on_key(Key::Char('d'), t);
    assert!(f.decisions().is_empty());
    f.c.on_key(Key::Char('d'), t + ARM_DELAY);
    let d = f.decisions();
    assert_eq!(
        (d[0].1.proposal, d[0].1.choice),
        (ProposalId(2), Choice::Deny)
    );
}

#[test]
fn always_allow_needs_a_second_press_and_esc_cancels_it() {
    let mut f = Fixture::new(Options::default(), vec![proposal(5)]);
    let later = f.at(LATER);
    f.c.on_key(Key::Char('A'), later);
    assert!(f.decisions().is_empty());
    assert_eq!(f.c.confirming(), Some(Choice::AlwaysAllow));
    f.c.on_key(Key::Esc, later);
    assert_eq!(f.c.confirming(), None);
    f.c.on_key(Key::Char('A'), later);
    f.c.on_key(Key::Char('A'), later);
    let d = f.decisions();
    assert_eq!(d.len(), 1);
    assert_eq!(d[0].1.choice, Choice::AlwaysAllow);
    // "always deny" takes one press.
    let mut f = Fixture::new(Options::default(), vec![proposal(6)]);
    f.c.on_key(Key::Char('D'), f.at(LATER));
    assert_eq!(f.decisions()[0].1.choice, Choice::AlwaysDeny);
}

#[test]
fn a_refused_decision_is_shown_with_the_brokers_reason_and_the_card_stays() {
    let mut f = Fixture::new(Options::default(), vec![proposal(8)]);
    let later = f.at(LATER);
    f.c.on_key(Key::Char('s'), later);
    let (id, _) = f.decisions()[0].clone();
    f.c.on_frame(
        Envelope::new(
            id,
            Body::Error(ErrorReply::new(
                ErrorCode::Refused,
                "the proposal has already been decided (deny)",
            )),
        ),
        later,
    );
    let (text, _) = f.c.status.clone().unwrap();
    assert_eq!(
        text,
        "allow for this session on proposal #8 was refused: the proposal has already been decided (deny)"
    );
    assert_eq!(f.c.proposals.len(), 1);
    // It can be decided again (the broker will say why not, if so).
    f.c.on_key(Key::Char('d'), later);
    assert_eq!(f.decisions().len(), 1);
}

#[test]
fn an_accepted_decision_removes_the_card_and_can_end_the_console() {
    let mut f = Fixture::new(
        Options {
            exit_after_decision: true,
            ..Options::default()
        },
        vec![proposal(2)],
    );
    let later = f.at(LATER);
    f.c.on_key(Key::Char('a'), later);
    let (id, _) = f.decisions()[0].clone();
    assert!(!f.c.should_quit());
    // The broker closes the proposal (an event) before it answers the decision.
    f.event(
        UiEvent::ProposalClosed {
            proposal: ProposalId(2),
            outcome: "allow once".into(),
        },
        later,
    );
    f.c.on_frame(
        Envelope::new(
            id,
            Body::UiReply(UiReply::Decided {
                proposal: ProposalId(2),
                choice: Choice::AllowOnce,
            }),
        ),
        later,
    );
    assert!(f.c.proposals.is_empty());
    assert_eq!(f.c.recent[0].choice, Choice::AllowOnce);
    assert_eq!(
        (f.c.recent[0].tool.as_str(), f.c.recent[0].target.as_str()),
        ("edit_file", "/p/file2")
    );
    assert_eq!(f.c.status.as_ref().unwrap().0, "proposal #2: allow once");
    assert!(f.c.should_quit());
}

#[test]
fn quitting_with_cards_waiting_asks_first() {
    let mut f = Fixture::new(Options::default(), vec![proposal(1)]);
    f.c.on_key(Key::Char('q'), f.at(LATER));
    assert!(!f.c.should_quit());
    assert!(f.c.status.as_ref().unwrap().0.contains("Press q again"));
    f.c.on_key(Key::Char('q'), f.at(LATER));
    assert!(f.c.should_quit());
    let mut f = Fixture::new(Options::default(), vec![]);
    f.c.on_key(Key::CtrlC, f.at(LATER));
    assert!(f.c.should_quit());
}
