//! What the console knows and what the person's keys do: proposals, sessions, uncertain calls,
//! helper health and the audit tail, kept from the broker's replies and events; decisions and
//! polls queued as frames for the broker.
//!
//! No decision is ever made without a key press on the card it is about: nothing is chosen by
//! default, Enter chooses nothing, a card's keys work only once it has been on screen for
//! [`ARM_DELAY`] (so a key meant for the previous card cannot decide a new one), a card waiting
//! for its answer takes no second decision, and "always allow" needs a second press.

use crate::card::choice_for;
use crate::modes::{self, ModePrompt};
use crate::servers::{Listing, ToolsPane};
use ipc_schema::servers::{ServerName, ServerToolName};
use ipc_schema::status::{DoctorReport, LockdownReport};
use ipc_schema::tool::{ProfileName, ProposalId};
use ipc_schema::ui::{
    AuditEntry, Choice, Decision, LedgerCall, Proposal, SessionSummary, UiEvent, UiReply, UiRequest,
};
use ipc_schema::{Body, Envelope};
use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

/// How long a card must have been on screen before its decision keys work.
pub const ARM_DELAY: Duration = Duration::from_millis(600);
/// How many audit entries the tail keeps.
pub const AUDIT_KEPT: usize = 1000;
/// How many audit entries one poll asks for.
pub const AUDIT_BATCH: u32 = 200;

const POLL_SESSIONS: Duration = Duration::from_secs(1);
const POLL_AUDIT: Duration = Duration::from_millis(700);
const POLL_DOCTOR: Duration = Duration::from_secs(5);
const POLL_UNCERTAIN: Duration = Duration::from_secs(10);

/// A key, as the console model sees it (the terminal layer maps its events to these).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Key {
    Char(char),
    Up,
    Down,
    PageUp,
    PageDown,
    Home,
    End,
    Tab,
    BackTab,
    Esc,
    Enter,
    CtrlC,
}

/// How a status message should look.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tone {
    Info,
    Good,
    Warn,
    Bad,
}

/// What the console asked the broker, to make sense of the reply.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Asked {
    Subscribe,
    Pending,
    Sessions,
    Uncertain,
    Doctor,
    Audit,
    Decide(ProposalId, Choice),
    /// The policy document, for the servers it names (the held-tools pane).
    ServersPolicy,
    ServerTools(ProfileName, ServerName),
    ApproveTools(ProfileName, ServerName, Vec<ServerToolName>),
    SetMode(ipc_schema::tool::SessionId, ipc_schema::mode::SessionMode),
}

/// What fills the console's main area.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum View {
    /// Approval cards (and sessions, health beside them).
    #[default]
    Approvals,
    /// Third-party MCP servers' tools: held ones, their diffs, approving them.
    ServerTools,
}

/// The key that opens the held-tools pane (and, there, goes back).
pub const SERVER_TOOLS_KEY: char = 'm';

/// A decision the person made in this console, shown when the cards are gone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decided {
    pub proposal: ProposalId,
    pub tool: String,
    pub target: String,
    pub choice: Choice,
}

/// Settings of one console.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Shown in the title bar (which broker this console is attached to).
    pub title: String,
    /// Quit after the first decision the broker accepts (`gatehouse demo --interactive`).
    pub exit_after_decision: bool,
    /// This console's own lockdown, shown with the helpers' health.
    pub lockdown: Option<LockdownReport>,
}

pub struct Console {
    pub opts: Options,
    /// Proposals waiting for a decision, oldest first.
    pub proposals: Vec<Proposal>,
    selected: Option<ProposalId>,
    shown_since: Option<Instant>,
    /// First line of the selected card's body shown.
    pub scroll: u16,
    /// Set by the view: how many body lines fit, and how many the card has.
    pub viewport: u16,
    pub body_lines: u16,
    /// A decision sent and not yet answered (its card takes no other).
    deciding: Option<ProposalId>,
    /// Tool and target of each proposal decided here (the card may close before the answer).
    sent: HashMap<ProposalId, (String, String)>,
    /// "Always allow" pressed once on this proposal: the next press confirms it.
    confirm: Option<(ProposalId, Choice)>,
    quit_armed: bool,
    quit: bool,
    pub sessions: Vec<SessionSummary>,
    pub uncertain: Vec<LedgerCall>,
    pub doctor: Option<DoctorReport>,
    pub audit: VecDeque<AuditEntry>,
    audit_after: u64,
    pub recent: VecDeque<Decided>,
    pub status: Option<(String, Tone)>,
    /// The broker connection ended (the console cannot reconnect: it may open no socket).
    pub disconnected: Option<String>,
    next_id: u64,
    asked: HashMap<u64, Asked>,
    subscription: Option<u64>,
    outbox: Vec<Envelope>,
    bell: bool,
    last_poll: HashMap<&'static str, Instant>,
    pub view: View,
    pub tools: ToolsPane,
    /// A mode change under way ([`modes`]).
    pub mode_prompt: Option<ModePrompt>,
    /// The session the sessions pane marks: what a mode change acts on when no card is shown.
    pub session_mark: Option<ipc_schema::tool::SessionId>,
}

impl Console {
    pub fn new(opts: Options) -> Console {
        Console {
            opts,
            proposals: Vec::new(),
            selected: None,
            shown_since: None,
            scroll: 0,
            viewport: 0,
            body_lines: 0,
            deciding: None,
            sent: HashMap::new(),
            confirm: None,
            quit_armed: false,
            quit: false,
            sessions: Vec::new(),
            uncertain: Vec::new(),
            doctor: None,
            audit: VecDeque::new(),
            audit_after: 0,
            recent: VecDeque::new(),
            status: None,
            disconnected: None,
            next_id: 1,
            asked: HashMap::new(),
            subscription: None,
            outbox: Vec::new(),
            bell: false,
            last_poll: HashMap::new(),
            view: View::Approvals,
            tools: ToolsPane::default(),
            mode_prompt: None,
            session_mark: None,
        }
    }

    fn ask(&mut self, what: Asked, req: UiRequest) {
        let id = self.next_id;
        self.next_id += 1;
        self.asked.insert(id, what);
        self.outbox.push(Envelope::new(id, Body::Ui(req)));
    }

    fn ask_body(&mut self, what: Asked, body: Body) {
        let id = self.next_id;
        self.next_id += 1;
        self.asked.insert(id, what);
        self.outbox.push(Envelope::new(id, body));
    }

    fn outstanding(&self, what: &Asked) -> bool {
        self.asked.values().any(|a| a == what)
    }

    /// The first requests: subscribe before listing, so no proposal falls between the two.
    pub fn start(&mut self, now: Instant) {
        self.ask(Asked::Subscribe, UiRequest::Subscribe);
        self.ask(Asked::Pending, UiRequest::ListPending);
        self.tick(now);
    }

    /// Polls what has no event stream, each at its own pace, one request of a kind at a time.
    pub fn tick(&mut self, now: Instant) {
        if self.disconnected.is_some() {
            return;
        }
        let polls: [(&'static str, Duration, Asked); 4] = [
            ("sessions", POLL_SESSIONS, Asked::Sessions),
            ("audit", POLL_AUDIT, Asked::Audit),
            ("doctor", POLL_DOCTOR, Asked::Doctor),
            ("uncertain", POLL_UNCERTAIN, Asked::Uncertain),
        ];
        for (name, every, what) in polls {
            let due = self
                .last_poll
                .get(name)
                .is_none_or(|t| now.duration_since(*t) >= every);
            if !due || self.outstanding(&what) {
                continue;
            }
            self.last_poll.insert(name, now);
            match what {
                Asked::Sessions => self.ask(what, UiRequest::ListSessions),
                Asked::Uncertain => self.ask(what, UiRequest::ListUncertain),
                Asked::Doctor => self.ask_body(what, Body::Doctor),
                Asked::Audit => self.ask(
                    what,
                    UiRequest::AuditTail {
                        after: self.audit_after,
                        limit: AUDIT_BATCH,
                    },
                ),
                _ => {}
            }
        }
    }

    /// Frames to send to the broker, in order.
    pub fn take_outbox(&mut self) -> Vec<Envelope> {
        std::mem::take(&mut self.outbox)
    }

    /// Whether a new card arrived since the last call (the terminal rings its bell).
    pub fn take_bell(&mut self) -> bool {
        std::mem::take(&mut self.bell)
    }

    pub fn should_quit(&self) -> bool {
        self.quit
    }

    pub fn selected(&self) -> Option<&Proposal> {
        let id = self.selected?;
        self.proposals.iter().find(|p| p.id == id)
    }

    /// 1-based position of the selected card among the waiting ones.
    pub fn selected_index(&self) -> Option<usize> {
        let id = self.selected?;
        self.proposals
            .iter()
            .position(|p| p.id == id)
            .map(|i| i + 1)
    }

    /// Whether the selected card's keys work now.
    pub fn armed(&self, now: Instant) -> bool {
        self.shown_since
            .is_some_and(|t| now.duration_since(t) >= ARM_DELAY)
            && self.deciding.is_none_or(|d| Some(d) != self.selected)
    }

    /// The choice waiting for its confirming second press on the selected card.
    pub fn confirming(&self) -> Option<Choice> {
        match (self.confirm, self.selected) {
            (Some((p, c)), Some(s)) if p == s => Some(c),
            _ => None,
        }
    }

    pub fn is_deciding(&self) -> bool {
        self.deciding.is_some() && self.deciding == self.selected
    }

    fn say(&mut self, text: impl Into<String>, tone: Tone) {
        self.status = Some((text.into(), tone));
    }

    fn select(&mut self, id: Option<ProposalId>, now: Instant) {
        if self.selected != id {
            self.selected = id;
            self.shown_since = id.map(|_| now);
            self.scroll = 0;
            self.confirm = None;
        }
    }

    /// Keeps a valid selection: the same card if it is still waiting, else the one that took
    /// its place, else the oldest.
    fn reselect(&mut self, old_index: Option<usize>, now: Instant) {
        if self.selected().is_some() {
            return;
        }
        let next = match old_index {
            Some(i) if !self.proposals.is_empty() => {
                Some(self.proposals[i.min(self.proposals.len() - 1)].id)
            }
            _ => self.proposals.first().map(|p| p.id),
        };
        self.selected = None;
        self.select(next, now);
    }

    fn add_proposal(&mut self, p: Proposal, now: Instant) {
        if self.proposals.iter().any(|q| q.id == p.id) {
            return;
        }
        let at = self.proposals.partition_point(|q| q.id < p.id);
        self.proposals.insert(at, p);
        self.bell = true;
        self.reselect(None, now);
    }

    fn remove_proposal(&mut self, id: ProposalId, now: Instant) -> Option<Proposal> {
        let at = self.proposals.iter().position(|p| p.id == id)?;
        let was_selected = self.selected == Some(id);
        let p = self.proposals.remove(at);
        if self.deciding == Some(id) {
            self.deciding = None;
        }
        if was_selected {
            self.selected = None;
            self.reselect(Some(at), now);
        }
        Some(p)
    }

    pub fn on_disconnect(&mut self, why: String) {
        self.say(
            format!(
                "the broker connection ended ({why}); start the console again once the broker runs"
            ),
            Tone::Bad,
        );
        self.disconnected = Some(why);
    }

    /// A frame from the broker.
    pub fn on_frame(&mut self, env: Envelope, now: Instant) {
        let is_event = Some(env.id) == self.subscription;
        let asked = if is_event {
            None
        } else {
            self.asked.remove(&env.id)
        };
        match env.body {
            Body::UiReply(UiReply::Event(ev)) if is_event => self.on_event(ev, now),
            Body::UiReply(UiReply::Subscribed) if asked == Some(Asked::Subscribe) => {
                self.subscription = Some(env.id);
            }
            Body::UiReply(UiReply::Pending(list)) => {
                let old = self
                    .selected
                    .and_then(|s| self.proposals.iter().position(|p| p.id == s));
                self.proposals = list;
                self.proposals.sort_by_key(|p| p.id);
                if !self.proposals.is_empty() {
                    self.bell = true;
                }
                self.reselect(old, now);
            }
            Body::UiReply(UiReply::Sessions(list)) => self.sessions = list,
            Body::UiReply(UiReply::Uncertain(list)) => self.uncertain = list,
            Body::UiReply(UiReply::Audit(rows)) => {
                for r in rows {
                    self.audit_after = self.audit_after.max(r.seq);
                    self.audit.push_back(r);
                }
                while self.audit.len() > AUDIT_KEPT {
                    self.audit.pop_front();
                }
            }
            Body::DoctorReport(r) => self.doctor = Some(r),
            Body::UiReply(UiReply::Policy(v)) if asked == Some(Asked::ServersPolicy) => {
                self.on_servers_policy(v.revision, &v.document, v.error);
            }
            Body::UiReply(UiReply::ServerTools(list)) => {
                if let Some(Asked::ServerTools(p, s)) = asked {
                    if let Some(i) = self.tools.index(&p, &s) {
                        self.tools.set_listing(i, Listing::Tools(list), now);
                    }
                }
            }
            Body::UiReply(UiReply::SessionModeSet {
                session,
                old,
                new,
                answered,
            }) => {
                self.say(
                    format!(
                        "session {}: mode {old} -> {new}{}",
                        modes::short(&session),
                        match answered {
                            0 => String::new(),
                            n => format!("; {n} waiting card(s) answered as {new} mode would"),
                        }
                    ),
                    Tone::Good,
                );
                if let Some(s) = self.sessions.iter_mut().find(|s| s.session == session) {
                    s.mode = new;
                }
            }
            Body::UiReply(UiReply::ServerToolsApproved { count }) => {
                if let Some(Asked::ApproveTools(p, s, names)) = asked {
                    let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
                    let text = format!(
                        "{count} tool definition(s) of {s} approved and pinned: {}",
                        names.join(", ")
                    );
                    self.approval_answered(&p, &s, text, Tone::Good);
                }
            }
            Body::UiReply(UiReply::Decided { proposal, choice }) => {
                let p = self.remove_proposal(proposal, now);
                let (tool, target) = match (self.sent.remove(&proposal), p) {
                    (Some(sent), _) => sent,
                    (None, Some(p)) => (p.tool.name(), p.target),
                    (None, None) => Default::default(),
                };
                self.say(
                    format!("proposal {proposal}: {}", choice.as_str()),
                    if choice.allows() {
                        Tone::Good
                    } else {
                        Tone::Warn
                    },
                );
                self.recent.push_front(Decided {
                    proposal,
                    tool,
                    target,
                    choice,
                });
                self.recent.truncate(8);
                if self.opts.exit_after_decision {
                    self.quit = true;
                }
            }
            Body::Error(e) => {
                let what = match asked {
                    Some(Asked::Decide(p, c)) => {
                        if self.deciding == Some(p) {
                            self.deciding = None;
                        }
                        self.sent.remove(&p);
                        format!("{} on proposal {p} was refused", c.as_str())
                    }
                    Some(Asked::ServersPolicy) => {
                        self.tools.policy = Some(Err(e.message.clone()));
                        "reading the policy for its servers failed".into()
                    }
                    Some(Asked::ServerTools(p, s)) => {
                        if let Some(i) = self.tools.index(&p, &s) {
                            self.tools
                                .set_listing(i, Listing::Failed(e.message.clone()), now);
                        }
                        format!("listing the tools of {s} (profile {p}) failed")
                    }
                    Some(Asked::ApproveTools(p, s, names)) => {
                        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
                        let text = format!(
                            "REFUSED: approving {} of {s} was refused: {}. Nothing was approved; the server's tools are listed again: look at them again",
                            names.join(", "),
                            e.message
                        );
                        // Said whole, in the status line and under the server.
                        self.approval_answered(&p, &s, text, Tone::Bad);
                        return;
                    }
                    Some(Asked::SetMode(s, m)) => {
                        format!("switching session {} to {m} was refused", modes::short(&s))
                    }
                    Some(a) => format!("{a:?} failed"),
                    None => "the broker reported an error".into(),
                };
                self.say(format!("{what}: {}", e.message), Tone::Bad);
            }
            other => {
                self.say(
                    format!("unexpected reply from the broker: {:?}", other.kind()),
                    Tone::Warn,
                );
            }
        }
    }

    fn on_event(&mut self, ev: UiEvent, now: Instant) {
        match ev {
            UiEvent::ProposalAdded(p) => self.add_proposal(*p, now),
            UiEvent::ProposalClosed { proposal, outcome } => {
                let ours = self.sent.contains_key(&proposal);
                if self.remove_proposal(proposal, now).is_some() && !ours {
                    // Decided elsewhere (another console, `gatehouse approve`) or expired.
                    self.say(format!("proposal {proposal} closed: {outcome}"), Tone::Warn);
                }
            }
            UiEvent::CallUncertain(c) => {
                if !self.uncertain.iter().any(|u| u.id == c.id) {
                    self.uncertain.push(c);
                    self.bell = true;
                }
            }
        }
    }

    /// A key press.
    pub fn on_key(&mut self, key: Key, now: Instant) {
        let quit_armed = std::mem::take(&mut self.quit_armed);
        if self.view == View::ServerTools && !matches!(key, Key::Char('q') | Key::CtrlC) {
            self.on_tools_key(key, now);
            return;
        }
        if let Some(p) = self.mode_prompt.take() {
            self.on_mode_key(p, key);
            return;
        }
        match key {
            Key::Char(modes::MODE_KEY) => self.start_mode_change(),
            Key::Char(modes::SESSION_NEXT) => self.mark_session(1),
            Key::Char(modes::SESSION_PREV) => self.mark_session(-1),
            Key::Char(SERVER_TOOLS_KEY) => self.open_tools(),
            Key::Char('q') | Key::CtrlC => {
                let waiting = self.proposals.len();
                if waiting == 0 || quit_armed || self.disconnected.is_some() {
                    self.quit = true;
                } else {
                    self.quit_armed = true;
                    self.say(
                        format!(
                            "{waiting} proposal{} waiting: nobody answering means deny when {} expire{}. Press q again to quit.",
                            if waiting == 1 { " is" } else { "s are" },
                            if waiting == 1 { "it" } else { "they" },
                            if waiting == 1 { "s" } else { "" },
                        ),
                        Tone::Warn,
                    );
                }
            }
            Key::Esc => {
                if self.confirm.take().is_some() {
                    self.say("not remembered; nothing was decided", Tone::Info);
                }
            }
            Key::Tab | Key::Char('n') => self.step(1, now),
            Key::BackTab | Key::Char('p') => self.step(-1, now),
            Key::Up | Key::Char('k') => self.scroll_by(-1),
            Key::Down | Key::Char('j') => self.scroll_by(1),
            Key::PageUp => self.scroll_by(-(self.viewport.max(2) as i32 - 1)),
            Key::PageDown | Key::Char(' ') => self.scroll_by(self.viewport.max(2) as i32 - 1),
            Key::Home | Key::Char('g') => self.scroll = 0,
            Key::End | Key::Char('G') => self.scroll_by(i32::from(u16::MAX)),
            Key::Enter => {
                if self.selected.is_some() {
                    self.say(
                        "Enter chooses nothing: press one of the keys shown on the card",
                        Tone::Info,
                    );
                }
            }
            Key::Char(c) => {
                if let Some(choice) = choice_for(c) {
                    self.choose(choice, now);
                }
            }
        }
    }

    /// The session a mode change acts on: the selected card's, else the marked one, else the
    /// first; with its mode as last heard.
    pub fn mode_target(
        &self,
    ) -> Option<(ipc_schema::tool::SessionId, ipc_schema::mode::SessionMode)> {
        let listed = |id: &ipc_schema::tool::SessionId| {
            self.sessions
                .iter()
                .find(|s| &s.session == id)
                .map(|s| s.mode)
        };
        if let Some(p) = self.selected() {
            return Some((p.session.clone(), listed(&p.session).unwrap_or(p.mode)));
        }
        let s = match &self.session_mark {
            Some(m) => self.sessions.iter().find(|s| &s.session == m),
            None => None,
        }
        .or(self.sessions.first())?;
        Some((s.session.clone(), s.mode))
    }

    fn mark_session(&mut self, by: i32) {
        if self.sessions.is_empty() {
            self.say("no agent sessions yet", Tone::Info);
            return;
        }
        let n = self.sessions.len() as i32;
        let cur = self
            .session_mark
            .as_ref()
            .and_then(|m| self.sessions.iter().position(|s| &s.session == m))
            .map(|i| i as i32)
            .unwrap_or(if by > 0 { -1 } else { 0 });
        let next = (cur + by).rem_euclid(n) as usize;
        self.session_mark = Some(self.sessions[next].session.clone());
    }

    fn start_mode_change(&mut self) {
        if self.disconnected.is_some() {
            self.say("not connected to the broker", Tone::Bad);
            return;
        }
        let Some((session, current)) = self.mode_target() else {
            self.say("no agent sessions yet: no mode to change", Tone::Info);
            return;
        };
        let p = ModePrompt::Choose { session, current };
        self.say(p.text(), Tone::Warn);
        self.mode_prompt = Some(p);
    }

    /// A key while a mode change is under way: the next step, the switch (`y` on the
    /// confirmation), or cancelled (any other key, which then does nothing else).
    fn on_mode_key(&mut self, p: ModePrompt, key: Key) {
        match (p, key) {
            (ModePrompt::Choose { session, current }, Key::Char(c))
                if modes::mode_for(c).is_some() =>
            {
                let to = modes::mode_for(c).expect("checked");
                if to == current {
                    self.say(
                        format!("session {} is already in {to} mode", modes::short(&session)),
                        Tone::Info,
                    );
                    return;
                }
                let next = ModePrompt::Confirm {
                    session,
                    from: current,
                    to,
                };
                self.say(next.text(), Tone::Warn);
                self.mode_prompt = Some(next);
            }
            (ModePrompt::Confirm { session, to, .. }, Key::Char('y')) => {
                self.say(
                    format!("switching session {} to {to}…", modes::short(&session)),
                    Tone::Info,
                );
                self.ask(
                    Asked::SetMode(session.clone(), to),
                    UiRequest::SetSessionMode {
                        session,
                        mode: to,
                        by: ipc_schema::ui::ModeSetter::Console,
                    },
                );
            }
            _ => self.say("mode not changed", Tone::Info),
        }
    }

    /// Opens the held-tools pane and asks the broker for the servers of the policy in force.
    fn open_tools(&mut self) {
        self.view = View::ServerTools;
        self.refresh_tools();
    }

    /// Reads the policy again; its reply asks every server it names for its tools.
    fn refresh_tools(&mut self) {
        if self.disconnected.is_some() {
            self.say("not connected to the broker", Tone::Bad);
            return;
        }
        for e in &mut self.tools.entries {
            e.notice = None;
        }
        if !self.outstanding(&Asked::ServersPolicy) {
            self.ask(Asked::ServersPolicy, UiRequest::PolicyShow);
        }
    }

    fn on_servers_policy(&mut self, revision: u64, document: &str, error: Option<String>) {
        if let Some(e) = error {
            self.tools.policy = Some(Err(format!(
                "the policy file does not apply ({e}); every call is refused meanwhile"
            )));
            return;
        }
        if let Err(e) = self.tools.set_policy(revision, document) {
            self.tools.policy = Some(Err(e));
            return;
        }
        let servers: Vec<(ProfileName, ServerName)> = self
            .tools
            .entries
            .iter()
            .map(|e| (e.profile.clone(), e.server.clone()))
            .collect();
        for (profile, server) in servers {
            let what = Asked::ServerTools(profile.clone(), server.clone());
            if !self.outstanding(&what) {
                self.ask(what, UiRequest::ServerTools { profile, server });
            }
        }
    }

    /// The broker answered an approval: say how, and list that server again (after a refusal
    /// the fresh listing is what the human must look at).
    fn approval_answered(&mut self, p: &ProfileName, s: &ServerName, text: String, tone: Tone) {
        self.say(text.clone(), tone);
        if let Some(i) = self.tools.index(p, s) {
            if self.tools.approving == Some(i) {
                self.tools.approving = None;
            }
            self.tools.entries[i].notice = Some((text, tone));
        }
        let what = Asked::ServerTools(p.clone(), s.clone());
        if !self.outstanding(&what) && self.disconnected.is_none() {
            self.ask(
                what,
                UiRequest::ServerTools {
                    profile: p.clone(),
                    server: s.clone(),
                },
            );
        }
    }

    fn on_tools_key(&mut self, key: Key, now: Instant) {
        match key {
            Key::Esc => {
                if self.tools.confirm_all.take().is_some() {
                    self.say("nothing was approved", Tone::Info);
                } else {
                    self.view = View::Approvals;
                }
            }
            Key::Char(SERVER_TOOLS_KEY) => self.view = View::Approvals,
            Key::Char('r') => self.refresh_tools(),
            Key::Tab | Key::Char('n') => self.tools.step(1, now),
            Key::BackTab | Key::Char('p') => self.tools.step(-1, now),
            Key::Up | Key::Char('k') => self.tools.scroll_by(-1),
            Key::Down | Key::Char('j') => self.tools.scroll_by(1),
            Key::PageUp => self
                .tools
                .scroll_by(-(self.tools.viewport.max(2) as i32 - 1)),
            Key::PageDown | Key::Char(' ') => {
                self.tools.scroll_by(self.tools.viewport.max(2) as i32 - 1)
            }
            Key::Home | Key::Char('g') => self.tools.scroll = 0,
            Key::End | Key::Char('G') => self.tools.scroll_by(i32::from(u16::MAX)),
            Key::Char('a') => self.approve_tool(now),
            Key::Char('A') => self.approve_all(now),
            Key::Enter => self.say(
                "Enter approves nothing: press a (this tool) or A (all held tools of its server)",
                Tone::Info,
            ),
            _ => {}
        }
    }

    /// Checks common to both approvals; the selected server's index when one may be sent.
    fn may_approve(&mut self) -> Option<usize> {
        if self.disconnected.is_some() {
            self.say(
                "not connected to the broker: nothing can be approved here",
                Tone::Bad,
            );
            return None;
        }
        let Some((i, _, _)) = self.tools.selected() else {
            self.say("no tool is selected", Tone::Info);
            return None;
        };
        if self.tools.approving == Some(i) {
            self.say("an approval for this server is on its way", Tone::Info);
            return None;
        }
        Some(i)
    }

    fn send_approval(&mut self, i: usize, tools: Vec<(ServerToolName, [u8; 32])>) {
        let e = &self.tools.entries[i];
        let (profile, server) = (e.profile.clone(), e.server.clone());
        let names: Vec<ServerToolName> = tools.iter().map(|(n, _)| n.clone()).collect();
        self.tools.approving = Some(i);
        self.tools.confirm_all = None;
        self.say(
            format!(
                "approving {} of {server}…",
                names
                    .iter()
                    .map(|n| n.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Tone::Info,
        );
        self.ask(
            Asked::ApproveTools(profile.clone(), server.clone(), names),
            UiRequest::ApproveServerTools {
                profile,
                server,
                tools,
            },
        );
    }

    /// `a`: approve the selected tool's definition, bound to the digest on screen.
    fn approve_tool(&mut self, now: Instant) {
        let Some(i) = self.may_approve() else {
            return;
        };
        let Some((_, _, t)) = self.tools.selected() else {
            return;
        };
        let (name, digest, held) = (t.def.name.clone(), t.digest, t.held.is_some());
        if !held {
            self.say(
                format!("{name} is pinned as listed: it is offered already"),
                Tone::Info,
            );
            return;
        }
        if !self.tools.armed(now) {
            self.say(
                "this definition has only just appeared: read it, then press the key again",
                Tone::Warn,
            );
            return;
        }
        self.send_approval(i, vec![(name, digest)]);
    }

    /// `A`: approve every held tool of the selected tool's server as listed; a second press
    /// confirms (the others' definitions may not have been looked at).
    fn approve_all(&mut self, now: Instant) {
        let Some(i) = self.may_approve() else {
            return;
        };
        let held = self.tools.held_of(i);
        if held.is_empty() {
            self.say(
                format!("{} has no held tools", self.tools.entries[i].server),
                Tone::Info,
            );
            return;
        }
        if !self.tools.armed_all(i, now) {
            self.say(
                "this listing has only just appeared: read it, then press the key again",
                Tone::Warn,
            );
            return;
        }
        if self.tools.confirm_all != Some(i) {
            self.tools.confirm_all = Some(i);
            return;
        }
        self.send_approval(i, held);
    }

    fn step(&mut self, by: isize, now: Instant) {
        if self.proposals.is_empty() {
            return;
        }
        let n = self.proposals.len() as isize;
        let cur = self.selected_index().map(|i| i as isize - 1).unwrap_or(0);
        let next = (cur + by).rem_euclid(n) as usize;
        self.select(Some(self.proposals[next].id), now);
    }

    fn scroll_by(&mut self, by: i32) {
        let max = self.body_lines.saturating_sub(self.viewport);
        let s = (i32::from(self.scroll) + by).clamp(0, i32::from(max));
        self.scroll = s as u16;
    }

    fn choose(&mut self, choice: Choice, now: Instant) {
        let Some(p) = self.selected().cloned() else {
            self.say("no proposal is waiting", Tone::Info);
            return;
        };
        if self.disconnected.is_some() {
            self.say(
                "not connected to the broker: nothing can be decided here",
                Tone::Bad,
            );
            return;
        }
        if self.deciding == Some(p.id) {
            self.say(
                format!("a decision on proposal {} is on its way", p.id),
                Tone::Info,
            );
            return;
        }
        if !self.armed(now) {
            self.say(
                "this card has only just appeared: look at it, then press the key again",
                Tone::Warn,
            );
            return;
        }
        if choice == Choice::AlwaysAllow && self.confirm != Some((p.id, choice)) {
            self.confirm = Some((p.id, choice));
            return;
        }
        self.confirm = None;
        self.deciding = Some(p.id);
        self.sent.insert(p.id, (p.tool.name(), p.target.clone()));
        self.ask(
            Asked::Decide(p.id, choice),
            UiRequest::Decide(Decision {
                proposal: p.id,
                digest: p.digest,
                choice,
            }),
        );
        self.say(
            format!("sending {} for proposal {}…", choice.as_str(), p.id),
            Tone::Info,
        );
    }
}
