//! The cycle's journal (DESIGN "HTTP and MCP tools run through a journal"): before the next
//! step, what the cycle did is in the data plane — the inbox message it started from, urgent
//! events it took in, each model turn that called tools, a mark before each call whose effect
//! must not be repeated, and every result. A cycle redone after a crash (or after a model
//! failure) resumes from it: the turns and results are replayed into the conversation without
//! calling the model or the tools again; a call that was marked but has no result — its
//! outcome is unknown — is made again (with the same idempotency key) only when its tool says
//! repeating it is harmless, otherwise the model is told it was not repeated.
//!
//! Writes cost one round trip per step that called tools, plus two per call of a tool outside
//! the worker (the mark and the result). The journal goes with the cycle's commit or rollback.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};
use tracing::warn;

use super::Cycle;
use crate::model::{Message, ToolCall, Usage};
use crate::store::StoreError;

/// One entry of the journal.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "entry", rename_all = "snake_case")]
pub(super) enum Entry {
    /// The cycle began: its batch id (the root of its idempotency keys), its inbox message,
    /// the depth of what it posts and the ids of the events it handles.
    Begin {
        batch: String,
        inbox: String,
        depth: u32,
        #[serde(default)]
        events: Vec<String>,
    },
    /// Events taken in after the cycle began (urgent ones mid-cycle, or those that arrived
    /// before a resumed cycle went on), as the message they became, the depth of what the
    /// cycle posts from then on and their ids.
    Urgent {
        message: String,
        depth: u32,
        #[serde(default)]
        events: Vec<String>,
    },
    /// A model turn that called tools, and what it cost.
    Turn {
        step: u32,
        message: Message,
        usage: Usage,
    },
    /// A call whose effect must not be repeated is about to be made.
    Started { step: u32, index: usize },
    /// A call waits for a human (an approval, or an interactive tool's answer): registered
    /// as `call`, answered no later than `expires_ms`. The cycle paused here.
    Asked {
        step: u32,
        index: usize,
        call: String,
        #[serde(default)]
        since_ms: i64,
        expires_ms: i64,
    },
    /// A call's result.
    Result {
        step: u32,
        index: usize,
        content: String,
        ok: bool,
    },
}

/// A step whose calls did not all finish before the cycle stopped.
#[derive(Debug, Default, PartialEq)]
pub(super) struct Unfinished {
    /// Which step of the cycle it was (from 1).
    pub step: u32,
    /// Its calls, in order.
    pub calls: Vec<ToolCall>,
    /// Calls with a result.
    pub done: BTreeSet<usize>,
    /// Calls that were marked as started (and have no result: their outcome is unknown).
    pub started: BTreeSet<usize>,
    /// Calls that wait for a human: the registered call's id and when it expires.
    pub asked: std::collections::BTreeMap<usize, Asked>,
}

/// A call asked of a human.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Asked {
    /// The registered call's id.
    pub call: String,
    /// When it was asked (ms since the epoch).
    pub since_ms: i64,
    /// When its answer stops being taken (ms since the epoch).
    pub expires_ms: i64,
}

/// What a journal gives back to the cycle that resumes it.
#[derive(Debug, Default, PartialEq)]
pub(super) struct Resumed {
    /// The batch id the cycle began with.
    pub batch: String,
    /// Its depth (urgent events included).
    pub depth: u32,
    /// The ids of the events it has taken in (at its beginning and since).
    pub events: BTreeSet<String>,
    /// The calls it asked of humans (their answers are read, not shown as new events).
    pub asked_calls: BTreeSet<String>,
    /// The conversation of the cycle so far: inbox message, urgent injections, turns, results.
    pub new: Vec<Message>,
    /// Tokens its turns cost.
    pub used: Usage,
    /// The first step still to run.
    pub next_step: u32,
    /// A step whose calls did not all finish, if any.
    pub unfinished: Option<Unfinished>,
}

/// Reads a journal back; `None` when it holds no cycle (empty, or unreadable).
pub(super) fn resume(raw: &[String]) -> Option<Resumed> {
    let entries: Vec<Entry> = raw
        .iter()
        .filter_map(|j| {
            serde_json::from_str(j)
                .map_err(|e| warn!(error = %e, "unreadable journal entry; ignored"))
                .ok()
        })
        .collect();
    let mut out = match entries.first()? {
        Entry::Begin {
            batch,
            inbox,
            depth,
            events,
        } => Resumed {
            batch: batch.clone(),
            depth: *depth,
            events: events.iter().cloned().collect(),
            new: vec![Message::user(inbox.clone())],
            ..Resumed::default()
        },
        _ => return None,
    };
    let mut step: Option<Unfinished> = None;
    for entry in entries.into_iter().skip(1) {
        match entry {
            Entry::Begin { .. } => {}
            Entry::Urgent {
                message,
                depth,
                events,
            } => {
                out.new.push(Message::user(message));
                out.depth = out.depth.max(depth);
                out.events.extend(events);
            }
            Entry::Turn {
                step: n,
                message,
                usage,
            } => {
                out.used += usage;
                let calls = match &message {
                    Message::Assistant { tool_calls, .. } => tool_calls.clone(),
                    _ => Vec::new(),
                };
                out.new.push(message);
                out.next_step = n + 1;
                step = Some(Unfinished {
                    step: n,
                    calls,
                    ..Unfinished::default()
                });
            }
            Entry::Started { step: n, index } => {
                if let Some(s) = step.as_mut().filter(|s| s.step == n) {
                    s.started.insert(index);
                }
            }
            Entry::Asked {
                step: n,
                index,
                call,
                since_ms,
                expires_ms,
            } => {
                out.asked_calls.insert(call.clone());
                if let Some(s) = step.as_mut().filter(|s| s.step == n) {
                    let asked = Asked {
                        call,
                        since_ms,
                        expires_ms,
                    };
                    s.asked.insert(index, asked);
                }
            }
            Entry::Result {
                step: n,
                index,
                content,
                ..
            } => {
                if let Some(s) = step.as_mut().filter(|s| s.step == n) {
                    if let Some(call) = s.calls.get(index) {
                        out.new.push(Message::Tool {
                            tool_call_id: call.id.clone(),
                            content,
                        });
                        s.done.insert(index);
                        s.started.remove(&index);
                        s.asked.remove(&index);
                    }
                }
            }
        }
    }
    out.unfinished = step.filter(|s| s.done.len() < s.calls.len());
    Some(out)
}

impl Cycle<'_> {
    /// Journals `entries` (after the cycle's beginning, the first time), before the step
    /// goes on.
    pub(super) async fn journal(&mut self, entries: Vec<Entry>) -> Result<(), StoreError> {
        let mut all = std::mem::take(&mut self.unjournaled);
        if !self.journaled {
            all.insert(
                0,
                Entry::Begin {
                    batch: self.batch.clone(),
                    inbox: match self.new.first() {
                        Some(Message::User { content }) => content.clone(),
                        _ => String::new(),
                    },
                    depth: self.start_depth,
                    events: self.events.iter().map(|e| e.id.clone()).collect(),
                },
            );
        }
        all.extend(entries);
        let encoded = all
            .iter()
            .map(serde_json::to_string)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|source| StoreError::Decode {
                what: "the cycle's journal".into(),
                source,
            })?;
        let agentlet = self.agentlet;
        agentlet
            .store
            .append_journal(&agentlet.key, self.lease, &encoded)
            .await?;
        self.journaled = true;
        Ok(())
    }

    /// Keeps an entry to journal with the next write (urgent events, which only matter once
    /// something else is journaled).
    pub(super) fn journal_later(&mut self, entry: Entry) {
        self.unjournaled.push(entry);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ToolCall;

    fn call(id: &str, name: &str) -> ToolCall {
        ToolCall {
            id: id.into(),
            name: name.into(),
            arguments: "{}".into(),
        }
    }

    fn encode(entries: &[Entry]) -> Vec<String> {
        entries
            .iter()
            .map(|e| serde_json::to_string(e).unwrap())
            .collect()
    }

    fn turn(step: u32, calls: Vec<ToolCall>) -> Entry {
        Entry::Turn {
            step,
            message: Message::Assistant {
                content: None,
                tool_calls: calls,
            },
            usage: Usage {
                input: 100,
                output: 10,
                ..Usage::default()
            },
        }
    }

    fn result(step: u32, index: usize, content: &str) -> Entry {
        Entry::Result {
            step,
            index,
            content: content.into(),
            ok: true,
        }
    }

    #[test]
    fn nothing_journaled_is_nothing_to_resume() {
        assert_eq!(resume(&[]), None);
        assert_eq!(resume(&encode(&[turn(0, vec![])])), None, "no beginning");
        assert_eq!(resume(&["not json".to_string()]), None);
    }

    #[test]
    fn finished_steps_replay_and_the_next_step_follows() {
        let raw = encode(&[
            Entry::Begin {
                batch: "b1".into(),
                inbox: "[Ops] Husam: \"open a ticket\"".into(),
                depth: 1,
                events: vec!["e1".into()],
            },
            turn(
                0,
                vec![call("c0", "create_ticket"), call("c1", "send_message")],
            ),
            Entry::Started { step: 0, index: 0 },
            result(0, 0, "{\"id\":7}"),
            result(0, 1, "{\"status\":\"delivered\"}"),
            Entry::Urgent {
                message: "[URGENT] …".into(),
                depth: 3,
                events: vec!["e2".into()],
            },
        ]);
        let r = resume(&raw).unwrap();
        assert_eq!((r.batch.as_str(), r.depth, r.next_step), ("b1", 3, 1));
        assert_eq!(r.events, ["e1".to_string(), "e2".to_string()].into());
        assert_eq!(
            r.used,
            Usage {
                input: 100,
                output: 10,
                ..Usage::default()
            }
        );
        assert_eq!(
            r.new.len(),
            5,
            "inbox, turn, two results, urgent: {:?}",
            r.new
        );
        assert!(matches!(&r.new[2], Message::Tool { tool_call_id, .. } if tool_call_id == "c0"));
        assert_eq!(r.unfinished, None);
    }

    #[test]
    fn a_call_marked_without_a_result_has_an_unknown_outcome() {
        let raw = encode(&[
            Entry::Begin {
                batch: "b1".into(),
                inbox: "hi".into(),
                depth: 1,
                events: Vec::new(),
            },
            turn(
                2,
                vec![
                    call("c0", "read"),
                    call("c1", "create_ticket"),
                    call("c2", "send_message"),
                ],
            ),
            result(2, 0, "{}"),
            Entry::Started { step: 2, index: 1 },
        ]);
        let r = resume(&raw).unwrap();
        assert_eq!(r.next_step, 3);
        let u = r.unfinished.unwrap();
        assert_eq!(u.step, 2);
        assert_eq!(u.done, BTreeSet::from([0]));
        assert_eq!(u.started, BTreeSet::from([1]));
        assert_eq!(u.calls.len(), 3);
    }
}
