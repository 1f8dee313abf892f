//! The agent's session: each call goes to `gatehouse mcp`, and while it waits, the approver
//! answers the proposals the broker shows on the ui socket (or the person does, in the console).

use super::agent::Agent;
use super::approver::Approver;
use super::narrate::Narrator;
use super::report::{classify, Asked, CallReport};
use super::{Ev, CALL_WAIT};
use crate::cmd_ui::UiArgs;
use crate::Global;
use ipc_schema::inert::escaped;
use ipc_schema::tool::ProposalId;
use ipc_schema::ui::{Choice, Proposal, UiEvent, UiReply, UiRequest};
use ipc_schema::{Body, Envelope};
use serde_json::{json, Value};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

pub(super) struct Session {
    pub(super) agent: Agent,
    pub(super) approver: Approver,
    pub(super) rx: Receiver<Ev>,
    pub(super) out: Narrator,
    pub(super) interactive: bool,
    /// The scratch instance, for starting the console.
    pub(super) global: Global,
    /// Decisions sent by the approver: request id -> proposal.
    pub(super) decisions: std::collections::HashMap<u64, ProposalId>,
    /// After the console closed: the ListPending request that checks whether it decided.
    pub(super) check_pending: Option<(u64, ProposalId)>,
    pub(super) asked: Vec<Asked>,
    /// The next proposal is the person's to decide (interactive mode).
    pub(super) person_decides: bool,
    /// The scratch HOME, shown as `~`.
    pub(super) home: String,
    /// Events read while waiting for a console's choice that were not ui events: handled by
    /// the next wait, in order.
    pub(super) backlog: std::collections::VecDeque<Ev>,
}

impl Session {
    pub(super) fn wait_for(&mut self, id: u64) -> Result<Value, String> {
        let deadline = Instant::now() + CALL_WAIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let next = match self.backlog.pop_front() {
                Some(ev) => Ok(ev),
                None => self.rx.recv_timeout(left),
            };
            match next {
                Ok(Ev::Mcp(v)) => {
                    if v.get("id") == Some(&json!(id)) {
                        return Ok(v);
                    }
                }
                Ok(Ev::Ui(env)) => self.on_ui(*env)?,
                Ok(Ev::McpClosed(why)) => return Err(why),
                Ok(Ev::UiClosed(why)) => return Err(why),
                Err(RecvTimeoutError::Timeout) => {
                    return Err(format!("no answer within {} s", CALL_WAIT.as_secs()))
                }
                Err(RecvTimeoutError::Disconnected) => {
                    return Err("the demo's readers stopped".into())
                }
            }
        }
    }

    pub(super) fn call(&mut self, tool: &str, arguments: Value) -> CallReport {
        self.asked.clear();
        let (outcome, text) = match self
            .agent
            .call(tool, &arguments)
            .and_then(|id| self.wait_for(id))
        {
            Ok(reply) => classify(&reply),
            Err(e) => ("no_answer".into(), e),
        };
        // The agent's answer and the console's closing event travel on different sockets:
        // the answer may come first. Wait a little for the event before saying what was chosen.
        let deadline = Instant::now() + Duration::from_secs(5);
        while self
            .asked
            .iter()
            .any(|a| a.decided_by == "you" && a.choice.is_none())
        {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(left) {
                Ok(Ev::Ui(env)) => {
                    if self.on_ui(*env).is_err() {
                        break;
                    }
                }
                Ok(other) => self.backlog.push_back(other),
                Err(_) => break,
            }
        }
        for a in self.asked.iter().filter(|a| a.decided_by == "you") {
            let choice = a.choice.as_deref().unwrap_or("no decision");
            self.out.line(&format!(
                "      {}",
                self.out
                    .cyan(&format!("you chose {} in the console", escaped(choice)))
            ));
        }
        CallReport {
            tool: tool.into(),
            arguments,
            outcome,
            text,
            asked: std::mem::take(&mut self.asked),
        }
    }

    pub(super) fn on_ui(&mut self, env: Envelope) -> Result<(), String> {
        match env.body {
            Body::UiReply(UiReply::Event(UiEvent::ProposalAdded(p)))
                if env.id == self.approver.subscription =>
            {
                self.on_proposal(*p)?;
            }
            Body::UiReply(UiReply::Event(UiEvent::ProposalClosed { proposal, outcome })) => {
                if let Some(a) = self.asked.iter_mut().find(|a| a.proposal == proposal.0) {
                    if a.choice.is_none() {
                        a.choice = Some(outcome);
                    }
                }
            }
            Body::UiReply(UiReply::Decided { proposal, choice }) => {
                if let Some(a) = self.asked.iter_mut().find(|a| a.proposal == proposal.0) {
                    a.choice = Some(choice.as_str().into());
                }
            }
            Body::UiReply(UiReply::Pending(list)) => {
                if let Some((id, p)) = self.check_pending {
                    if id == env.id {
                        self.check_pending = None;
                        if let Some(still) = list.into_iter().find(|q| q.id == p) {
                            self.out.line(&format!(
                                "      {}",
                                self.out.yellow("you closed the console without deciding; no answer means deny, and the demo denies it now rather than wait for the expiry")
                            ));
                            self.decide(&still, Choice::Deny, "scripted approver")?;
                        }
                    }
                }
            }
            Body::Error(e) => {
                if let Some(p) = self.decisions.remove(&env.id) {
                    self.out.line(&format!(
                        "      {}",
                        self.out.red(&format!(
                            "the decision on proposal {p} was refused: {}",
                            escaped(&e.message)
                        ))
                    ));
                }
            }
            _ => {}
        }
        Ok(())
    }

    pub(super) fn decide(&mut self, p: &Proposal, choice: Choice, by: &str) -> Result<(), String> {
        let id = self.approver.decide(p, choice)?;
        self.decisions.insert(id, p.id);
        if let Some(a) = self.asked.iter_mut().find(|a| a.proposal == p.id.0) {
            a.decided_by = by.into();
        }
        Ok(())
    }

    pub(super) fn on_proposal(&mut self, p: Proposal) -> Result<(), String> {
        let person = self.interactive && std::mem::take(&mut self.person_decides);
        let by = if person { "you" } else { "scripted approver" };
        self.asked.push(Asked {
            proposal: p.id.0,
            tool: p.tool.name(),
            target: p.target.clone(),
            rule: p.rule.clone(),
            decided_by: by.into(),
            choice: None,
        });
        let o = &self.out;
        o.line(&format!(
            "      {} {} {} {}",
            o.yellow("asked:"),
            o.bold(&format!("proposal {}", p.id)),
            p.tool,
            escaped(&p.target).replace(&self.home, "~")
        ));
        o.line(&format!(
            "      {}",
            o.dim(&format!("rule: {}", escaped(&p.rule)))
        ));
        if let Some(d) = &p.diff {
            for l in d
                .lines()
                .filter(|l| !l.starts_with("---") && !l.starts_with("+++"))
                .take(8)
            {
                let shown = escaped(l);
                let painted = if l.starts_with('+') {
                    o.green(&shown)
                } else if l.starts_with('-') {
                    o.red(&shown)
                } else {
                    o.dim(&shown)
                };
                o.line(&format!("        {painted}"));
            }
        }
        if person {
            o.line(&format!(
                "      {}",
                o.cyan("the console opens now: the card shows exactly what will change; press a to allow it once or d to deny it (the console closes after your decision)")
            ));
            std::thread::sleep(Duration::from_millis(1500));
            let ui = UiArgs {
                exit_after_decision: true,
                ..UiArgs::default()
            };
            match crate::cmd_up::run_console(&self.global, &ui, false) {
                Ok(s) if s.success() => {}
                Ok(s) => o.line(&format!(
                    "      {}",
                    o.red(&format!("the console ended: {s}"))
                )),
                Err(e) => o.line(&format!("      {}", o.red(&e))),
            }
            let id = self.approver.send(Body::Ui(UiRequest::ListPending))?;
            self.check_pending = Some((id, p.id));
        } else {
            self.decide(&p, Choice::AllowOnce, by)?;
            let o = &self.out;
            o.line(&format!(
                "      {}",
                o.cyan("approved (allow once) by the demo's scripted approver on the ui channel")
            ));
        }
        Ok(())
    }
}
