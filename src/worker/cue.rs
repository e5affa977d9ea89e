//! The cue: the last line of every request, after the fresh context. It says what the cycle
//! woke for and what is due now, and it is rebuilt for every step (it is never stored, and it
//! follows everything a provider's cache holds, so changing it costs nothing).
//!
//! Small real models answer the last thing they read (docs/real-models.md, issue 44). With the
//! context last and no such line, Qwen2.5-Coder 1.5B answered the context ("no relevant
//! messages") instead of the human; with one fixed line for every step ("Reply with
//! send_message where a reply is due; call skip if none is") it answered "What is the weather
//! in Oslo?" with an invented forecast instead of calling `get_weather`, restated its answer
//! after sending it, and answered a message addressed to another agent. So the line says what
//! the step needs:
//! - woken by a person, a plan or a service: do what it asks, with a tool where one fits, and
//!   answer; after tool results, to tell who asked what they answer (told that someone waits,
//!   it sent the question back instead of the count an MCP tool returned); after the nudge,
//!   only to answer (asked to use its tools there, it explained their use again); once
//!   answered, that `skip` ends it;
//! - woken only by messages addressed to other agents: that they are for them;
//! - woken only by other agents: reply where a reply is due (an agent told to answer every
//!   agent would answer the answers).

use crate::store::{EventKind, InboxEvent, MemberKind, SpaceRecord};
use crate::worker::prompt::display;

/// Where the cycle stands when a step's request is built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Progress {
    /// Nothing done yet that answers or informs (the first step).
    Fresh,
    /// The last step's calls returned results and nobody has been answered yet.
    Results,
    /// The model was nudged: its text reached nobody.
    Nudged,
    /// A `send_message` went out.
    Answered,
}

/// Who the cycle's events ask for an answer.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Asked {
    /// No events: no cue.
    Nothing,
    /// A person (named, when one wrote), a plan or a service: the agent is asked to act.
    Act { waiting: Option<String> },
    /// Only messages addressed to other agents (their names).
    Others(Vec<String>),
    /// Only messages of other agents that do not address someone else.
    Agents,
}

/// The cue of one cycle: built once from its events, rendered per step.
#[derive(Clone, Debug)]
pub struct Cue {
    woke: String,
    asked: Asked,
}

impl Cue {
    /// The cue of the cycle of agent `me` woken by `events` in `spaces`.
    pub fn new(me: &str, spaces: &[(String, Option<SpaceRecord>)], events: &[InboxEvent]) -> Cue {
        Cue {
            woke: woke_for(me, spaces, events),
            asked: asked(me, events),
        }
    }

    /// The line that ends the request of a step (with its leading blank line), or nothing.
    pub fn line(&self, progress: Progress) -> String {
        let due = match (&self.asked, progress) {
            (Asked::Nothing, _) => return String::new(),
            (Asked::Others(names), _) => {
                format!("It is for {}, not you: call skip.", names.join(" and "))
            }
            (Asked::Agents, _) => {
                "Reply with send_message where a reply is due; call skip if none is.".to_string()
            }
            (Asked::Act { .. }, Progress::Nudged) => "Answer it with send_message.".to_string(),
            (Asked::Act { .. }, Progress::Fresh) => {
                "Do what it asks, with your tools where one fits, and answer with send_message."
                    .to_string()
            }
            (Asked::Act { waiting }, Progress::Results) => format!(
                "Tell {} with send_message what the result above answers.",
                waiting.as_deref().unwrap_or("the space")
            ),
            (Asked::Act { .. }, Progress::Answered) => {
                "You answered with send_message; if nothing more is asked, call skip.".to_string()
            }
        };
        format!("\n{} {due}\n", self.woke)
    }
}

/// Whom the events ask: a person, plan or service first; else only other agents' addressees;
/// else other agents.
fn asked(me: &str, events: &[InboxEvent]) -> Asked {
    if events.is_empty() {
        return Asked::Nothing;
    }
    let mut others: Vec<String> = Vec::new();
    let mut from_agents = false;
    let mut acts = false;
    let mut waiting = None;
    for e in events {
        if e.kind != EventKind::SpaceMessage {
            acts = true;
            continue;
        }
        match e.mention() {
            Some(m) if m != me => {
                if !others.iter().any(|o| o == m) {
                    others.push(m.to_string());
                }
                continue;
            }
            _ => {}
        }
        match e.sender.as_ref() {
            Some(s) if s.kind == Some(MemberKind::Agent) => from_agents = true,
            sender => {
                acts = true;
                if waiting.is_none() {
                    waiting = sender.map(|s| s.name.clone());
                }
            }
        }
    }
    if acts {
        Asked::Act { waiting }
    } else if from_agents {
        Asked::Agents
    } else {
        Asked::Others(others)
    }
}

/// "This cycle you woke for …: the inbox message above." — what came, from whom, where, and to
/// whom when it is said (to the agent itself when it is the only agent of the space: a small
/// model read "[desk] Husam:" as a message to Husam, and skipped it).
fn woke_for(me: &str, spaces: &[(String, Option<SpaceRecord>)], events: &[InboxEvent]) -> String {
    // (what, where from) → how many, in the order they came.
    let mut kinds: Vec<((&str, String), usize)> = Vec::new();
    for e in events {
        let kind = match (e.kind, &e.space) {
            (EventKind::SpaceMessage, Some(space)) => {
                let sender = e.sender.as_ref().map_or("someone", |s| s.name.as_str());
                let to = match e.mention() {
                    Some(m) if m == me => " to you".to_string(),
                    Some(m) => format!(" to {m}"),
                    None if only_agent(me, spaces, space) => " to you".to_string(),
                    None => String::new(),
                };
                (
                    "message",
                    format!(" {sender} wrote in {}{to}", display(spaces, space)),
                )
            }
            (EventKind::Plan, _) => ("plan reminder", String::new()),
            (EventKind::ToolResult, _) => ("tool result", String::new()),
            _ => ("service event", String::new()),
        };
        match kinds.iter_mut().find(|(k, _)| *k == kind) {
            Some((_, n)) => *n += 1,
            None => kinds.push((kind, 1)),
        }
    }
    let list: Vec<String> = kinds
        .iter()
        .map(|((what, from), n)| match n {
            1 => format!("1 {what}{from}"),
            n => format!("{n} {what}s{from}"),
        })
        .collect();
    format!(
        "This cycle you woke for {}: the inbox message above.",
        list.join(", ")
    )
}

/// Whether `me` is the only agent of `space` (as far as the agent knows its members).
fn only_agent(me: &str, spaces: &[(String, Option<SpaceRecord>)], space: &str) -> bool {
    spaces
        .iter()
        .find(|(n, _)| n == space)
        .and_then(|(_, r)| r.as_ref())
        .is_some_and(|r| r.agents().all(|a| a == me))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(sender: &str, kind: MemberKind, mention: Option<&str>) -> InboxEvent {
        let mut e = crate::testing::human_event(&format!("desk-{sender}"), "hi");
        e.space = Some("desk".into());
        e.data = mention.map(|m| serde_json::json!({"mention": m}));
        if let Some(s) = e.sender.as_mut() {
            s.id = sender.to_lowercase();
            s.name = sender.into();
            s.kind = Some(kind);
        }
        e
    }

    fn human(name: &str) -> InboxEvent {
        message(name, MemberKind::Human, None)
    }

    #[test]
    fn the_cue_says_what_the_cycle_woke_for() {
        let mut plan = human("Husam");
        plan.kind = EventKind::Plan;
        plan.space = None;
        let events = [
            human("Husam"),
            human("Lena"),
            human("Husam"),
            message("Lena", MemberKind::Human, Some("bob")),
            plan,
        ];
        let cue = Cue::new("alice", &[], &events);
        assert_eq!(
            cue.line(Progress::Fresh),
            "\nThis cycle you woke for 2 messages Husam wrote in desk, 1 message Lena wrote in \
             desk, 1 message Lena wrote in desk to bob, 1 plan reminder: the inbox message above. \
             Do what it asks, with your tools where one fits, and answer with send_message.\n"
        );
        assert!(Cue::new("bob", &[], &events)
            .line(Progress::Fresh)
            .contains("Lena wrote in desk to you,"));
        // The only agent of a space is who its messages are for.
        let alone = [(
            "desk".to_string(),
            Some(crate::testing::space_record("Desk", &["alice"], &["Husam"])),
        )];
        assert!(Cue::new("alice", &alone, &events[..1])
            .line(Progress::Fresh)
            .contains("1 message Husam wrote in Desk to you:"));
        assert_eq!(Cue::new("alice", &[], &[]).line(Progress::Fresh), "");
    }

    #[test]
    fn the_cue_follows_the_cycle() {
        let cue = Cue::new("alice", &[], &[human("Husam")]);
        assert!(cue
            .line(Progress::Results)
            .ends_with(" Tell Husam with send_message what the result above answers.\n"));
        assert!(cue
            .line(Progress::Nudged)
            .ends_with(" the inbox message above. Answer it with send_message.\n"));
        assert!(cue
            .line(Progress::Answered)
            .ends_with(" You answered with send_message; if nothing more is asked, call skip.\n"));
        // A plan or a service asks too, with nobody named.
        let mut plan = human("Husam");
        plan.kind = EventKind::Plan;
        plan.sender = None;
        assert!(Cue::new("alice", &[], &[plan])
            .line(Progress::Results)
            .contains(" Tell the space with send_message "));
    }

    #[test]
    fn messages_for_other_agents_and_from_agents_are_not_orders() {
        let to_bob = message("Husam", MemberKind::Human, Some("bob"));
        let to_carl = message("Lena", MemberKind::Human, Some("carl"));
        let line = Cue::new("alice", &[], &[to_bob.clone(), to_carl]).line(Progress::Fresh);
        assert!(
            line.ends_with(" It is for bob and carl, not you: call skip.\n"),
            "{line}"
        );
        // Addressed to it, it is asked.
        assert!(Cue::new("bob", &[], std::slice::from_ref(&to_bob))
            .line(Progress::Fresh)
            .ends_with(
                " Do what it asks, with your tools where one fits, and answer with send_message.\n"
            ));
        // Only other agents wrote: a reply where one is due, never an order to answer them.
        let agent = message("researcher", MemberKind::Agent, None);
        for progress in [Progress::Fresh, Progress::Results, Progress::Answered] {
            assert!(Cue::new("planner", &[], std::slice::from_ref(&agent))
                .line(progress)
                .ends_with(
                    " Reply with send_message where a reply is due; call skip if none is.\n"
                ));
        }
        // A person among them asks.
        assert!(Cue::new("planner", &[], &[agent, human("Husam"), to_bob])
            .line(Progress::Fresh)
            .contains("Do what it asks"));
    }
}
