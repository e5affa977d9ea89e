//! The one nudge (seed 000 "What Happens Inside": the agent's text is private; only
//! `send_message` reaches a space). A cycle woken by a human's message that is about to end
//! with the model's plain text — no `send_message`, no `skip`, nothing asked — would leave that
//! human with silence, as small real models often do. Once per cycle, while a step remains,
//! the model is told so, with who is waiting and where, and gets one more step to answer or
//! skip; never a loop. Counted in `agentfleet_cycle_nudges_total`.
//!
//! The words are the ones small real models followed in the conformance suite
//! (docs/real-models.md): naming the human and the space, and putting `skip` second, turned
//! "call skip with the nudge's own words as the reason" into an answer; leaving out the text
//! that reached nobody turned "the same prose again, word for word" into one (issue 44).

use super::journal::Entry;
use super::Cycle;
use crate::model::Message;
use crate::store::{EventKind, MemberKind};
use crate::worker::cue::Progress;

/// Tools that answer, or say on purpose that there is nothing to answer.
const ANSWERS: &[&str] = &["send_message", "skip"];

impl Cycle<'_> {
    /// Whether the cycle that is about to end after `step` deserves the nudge; if so, adds
    /// it (journaled, so a resumed cycle sees it too) and counts it.
    pub(super) fn nudged(&mut self, step: u32) -> bool {
        if self.nudged
            || step + 1 >= self.agentlet.agent.spec.cycle.max_steps
            || !self.events.iter().any(from_a_human)
            || self.answered()
        {
            return false;
        }
        self.nudged = true;
        self.recorder
            .note("nudged: its text reached nobody, and it was asked to answer with send_message");
        // The text that reached nobody is not kept: shown its own text again, a small model
        // at temperature 0 wrote it out again word for word (issue 44). The cycle's record
        // keeps it as the step's thought, and a resumed cycle never had it (its journal keeps
        // only turns that called tools).
        if matches!(self.new.last(), Some(Message::Assistant { tool_calls, .. }) if tool_calls.is_empty())
        {
            self.new.pop();
        }
        let message = format!(
            "[agentfleet] {} for your answer: nobody has seen one yet. Answer now with \
             send_message. Call skip only if the message was not for you.",
            waiting(self.events)
        );
        self.journal_later(Entry::Urgent {
            message: message.clone(),
            depth: self.depth,
            events: Vec::new(),
        });
        self.new.push(Message::user(message));
        let key = &self.agentlet.key;
        self.agentlet
            .metrics
            .cycle_nudges
            .with_label_values(&[&key.namespace, &key.name])
            .inc();
        true
    }

    /// Where the cycle stands for its cue: answered, just given results, or neither.
    pub(super) fn progress(&self) -> Progress {
        if self.answered() {
            Progress::Answered
        } else if matches!(self.new.last(), Some(Message::Tool { .. })) {
            Progress::Results
        } else if self.nudged {
            Progress::Nudged
        } else {
            Progress::Fresh
        }
    }

    /// Whether the cycle has called a tool of [`ANSWERS`] that did not fail (a refused
    /// `send_message` reached nobody either). A step's results follow its turn, and call ids
    /// are unique only within a turn (some servers number them from 0 every time).
    fn answered(&self) -> bool {
        self.new.iter().enumerate().any(|(i, m)| {
            let Message::Assistant { tool_calls, .. } = m else {
                return false;
            };
            let results: Vec<(&str, &str)> = self.new[i + 1..]
                .iter()
                .map_while(|r| match r {
                    Message::Tool {
                        tool_call_id,
                        content,
                    } => Some((tool_call_id.as_str(), content.as_str())),
                    _ => None,
                })
                .collect();
            tool_calls.iter().any(|c| {
                ANSWERS.contains(&c.name.as_str())
                    && !results.iter().any(|(id, content)| {
                        *id == c.id && crate::worker::tools::is_error_result(content)
                    })
            })
        })
    }
}

/// Who is waiting for an answer, and where: `Husam is waiting in space "desk"`.
fn waiting(events: &[crate::store::InboxEvent]) -> String {
    let mut who: Vec<(&str, &str)> = Vec::new();
    for e in events.iter().filter(|e| from_a_human(e)) {
        let name = e.sender.as_ref().map_or("", |s| s.name.as_str());
        let space = e.space.as_deref().unwrap_or_default();
        if !who.contains(&(name, space)) {
            who.push((name, space));
        }
    }
    let names = |w: &[(&str, &str)]| {
        let names: Vec<&str> = w.iter().map(|(n, _)| *n).collect();
        match names.split_last() {
            Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
            _ => names.concat(),
        }
    };
    let verb = if who.len() == 1 { "is" } else { "are" };
    match who.first() {
        Some((_, space)) if who.iter().all(|(_, s)| s == space) => {
            format!("{} {verb} waiting in space \"{space}\"", names(&who))
        }
        _ => {
            let each: Vec<String> = who
                .iter()
                .map(|(n, s)| format!("{n} (in space \"{s}\")"))
                .collect();
            format!("{} {verb} waiting", each.join(", "))
        }
    }
}

/// A human's message in a space.
fn from_a_human(e: &crate::store::InboxEvent) -> bool {
    e.kind == EventKind::SpaceMessage
        && e.sender
            .as_ref()
            .is_some_and(|s| s.kind == Some(MemberKind::Human))
}
