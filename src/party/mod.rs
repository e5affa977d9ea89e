//! Parties (DESIGN "Parties"; [parties](../../docs/parties.md)): who an event comes from, as
//! far as trust goes, and every rule that follows from it, decided here and nowhere else.
//!
//! - **What a party is** ([`Party::of`]): the agent's spaces together are one party, its
//!   **members**; each A2A conversation is a party of its own, its **caller**.
//! - **What a cycle batches** ([`split`]): the events of one party, the first waiting
//!   event's; the others wait for the next cycle, in the order they came.
//! - **What a cycle sees and where it speaks** ([`Party::sees`]): the members' cycle its
//!   spaces, a conversation's cycle that conversation; nothing of one reaches the other.
//! - **Who answers a call asked of people** ([`answers`]): the approvers of the tool, by
//!   default the humans of the space the call was asked in, never an outside caller for a
//!   call its own conversation provoked.
//! - **Who a caller is** ([`Principal`]; reserved forms of ids) and **how deep a chain a
//!   caller may continue** ([`depth`]).
//!
//! | file | what it holds |
//! |---|---|
//! | `mod.rs` | [`Party`], batching, what a party sees, memory across parties; [`Outside`]: an outside caller's conversations |
//! | `answers.rs` | principals, subjects, tool patterns, who may answer a call |
//! | `depth.rs` | the causal depth of what outside callers send |

pub mod answers;
pub mod depth;

pub use answers::{may_answer, tool_matches, NotAllowed, Principal, PrincipalKind, Subject};

use crate::identity::{is_conversation, AgentKey, SpaceKey};
use crate::store::{InboxEvent, Member, MemberKind, Sender, SpaceRecord};

/// Who a cycle answers: the agent's members (its spaces, together) or one outside caller's
/// conversation.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Party {
    /// The people and agents of the spaces the agent's spec names.
    Members,
    /// One A2A conversation (its space's name): its caller, alone.
    Conversation(String),
}

impl Party {
    /// The party `event` comes from: the conversation its space is, else the members (a
    /// space of the spec, a webhook, a plan, or a tool result of a members' cycle; a tool
    /// result of a conversation's cycle names that conversation as its space).
    pub fn of(event: &InboxEvent) -> Party {
        match event.space.as_deref() {
            Some(space) if is_conversation(space) => Party::Conversation(space.to_string()),
            _ => Party::Members,
        }
    }

    /// The party of a batch of events (a cycle's): its first event's (the members' when it
    /// is empty). A batch is one party's (see [`split`]).
    pub fn of_batch(events: &[InboxEvent]) -> Party {
        events.first().map_or(Party::Members, Party::of)
    }

    /// Whether a cycle of this party sees `space`, reads it and may speak in it: the members
    /// see the spec's spaces, a conversation only itself.
    pub fn sees(&self, space: &str) -> bool {
        match self {
            Party::Members => !is_conversation(space),
            Party::Conversation(c) => c == space,
        }
    }

    /// The conversation, for an outside caller's party.
    pub fn conversation(&self) -> Option<&str> {
        match self {
            Party::Members => None,
            Party::Conversation(c) => Some(c),
        }
    }

    /// Whether this is an outside caller's party.
    pub fn is_outside(&self) -> bool {
        matches!(self, Party::Conversation(_))
    }

    /// Whether a cycle of this party reads and extends the agent's long memory (its window,
    /// memories, goals and plans): always for the members; for a conversation only when the
    /// agent shares it (`spec.a2a.memory: shared`).
    pub fn remembers(&self, shared: bool) -> bool {
        match self {
            Party::Members => true,
            Party::Conversation(_) => shared,
        }
    }

    /// How logs and errors name it.
    pub fn label(&self) -> &str {
        match self {
            Party::Members => "members",
            Party::Conversation(c) => c,
        }
    }
}

/// An outside caller of an agent (A2A): which conversations are theirs, and how they are in
/// them. Every check of a caller against a conversation is one of these.
pub struct Outside<'a> {
    /// The agent called.
    pub agent: &'a AgentKey,
    /// Who calls.
    pub caller: &'a Principal,
}

impl Outside<'_> {
    fn kind(&self) -> &'static str {
        match self.caller.kind {
            PrincipalKind::Human => "human",
            PrincipalKind::Service => "service",
        }
    }

    /// The space of its conversation `context_id` with the agent: another caller's same
    /// `contextId` is another conversation ([`SpaceKey::conversation`]).
    pub fn conversation(&self, context_id: &str) -> SpaceKey {
        SpaceKey::conversation(self.agent, self.kind(), &self.caller.id, context_id)
    }

    /// The caller as the member of its conversations ([`Principal::caller`]).
    pub fn member(&self) -> Sender {
        self.caller.caller()
    }

    /// Whether `record` is one of its conversations with the agent: both are in it.
    pub fn owns(&self, record: &SpaceRecord) -> bool {
        record.admits(&self.member()) && record.has_agent(&self.agent.name)
    }

    /// The record of its new conversation `context_id`: the agent and the caller, no one
    /// else, keeping the last `max_messages`.
    pub fn new_conversation(&self, context_id: &str, max_messages: u64) -> SpaceRecord {
        let member = self.member();
        SpaceRecord {
            v: crate::store::V1,
            display_name: format!("A2A conversation with {}", self.caller.name),
            members: vec![
                Member {
                    kind: MemberKind::Agent,
                    id: self.agent.name.clone(),
                    name: self.agent.name.clone(),
                },
                Member {
                    kind: MemberKind::Human,
                    id: member.id,
                    name: member.name,
                },
            ],
            max_messages,
            groups: Vec::new(),
            max_message_bytes: crate::store::DEFAULT_MAX_MESSAGE_BYTES,
            loop_guard: Default::default(),
            context_id: Some(context_id.to_string()),
        }
    }
}

/// The events a cycle takes, and those that wait for a later one: the first event's party
/// takes its own, in order; every other event waits, in order. Events of one party are
/// never split, and the first event (the oldest in flight: a cycle's own, when one was
/// under way) always goes first.
pub fn split(events: Vec<InboxEvent>) -> (Party, Vec<InboxEvent>, Vec<InboxEvent>) {
    let party = Party::of_batch(&events);
    let (mine, later) = events.into_iter().partition(|e| Party::of(e) == party);
    (party, mine, later)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::EventKind;
    use proptest::prelude::*;

    fn event(id: &str, kind: EventKind, space: Option<&str>) -> InboxEvent {
        InboxEvent {
            id: id.into(),
            kind,
            time_ms: 0,
            urgent: false,
            space: space.map(str::to_string),
            sender: None,
            text: Some(id.into()),
            data: None,
            depth: 0,
        }
    }

    #[test]
    fn a_party_is_the_members_or_one_conversation() {
        use EventKind::*;
        let table = [
            (SpaceMessage, Some("team"), Party::Members),
            (SpaceMessage, Some("family"), Party::Members),
            (Service, None, Party::Members),
            (Plan, None, Party::Members),
            (ToolResult, None, Party::Members),
            (
                SpaceMessage,
                Some("a2a_0123"),
                Party::Conversation("a2a_0123".into()),
            ),
            (
                ToolResult,
                Some("a2a_0123"),
                Party::Conversation("a2a_0123".into()),
            ),
            (
                SpaceMessage,
                Some("a2a_ffff"),
                Party::Conversation("a2a_ffff".into()),
            ),
        ];
        for (kind, space, want) in table {
            assert_eq!(
                Party::of(&event("e", kind, space)),
                want,
                "{kind:?} {space:?}"
            );
        }
    }

    #[test]
    fn the_first_events_party_is_batched_and_the_rest_waits_in_order() {
        use EventKind::*;
        type Events<'a> = &'a [(&'a str, EventKind, Option<&'a str>)];
        let table: [(Events, &[&str], &[&str]); 5] = [
            // The seeds' batching across the agent's spaces stays.
            (
                &[
                    ("a", SpaceMessage, Some("team")),
                    ("b", SpaceMessage, Some("family")),
                    ("c", Plan, None),
                ],
                &["a", "b", "c"],
                &[],
            ),
            // Item 1 of issue 40: an outsider's "hi", then a member's request: two cycles.
            (
                &[
                    ("hi", SpaceMessage, Some("a2a_1")),
                    ("refund", SpaceMessage, Some("team")),
                ],
                &["hi"],
                &["refund"],
            ),
            (
                &[
                    ("refund", SpaceMessage, Some("team")),
                    ("hi", SpaceMessage, Some("a2a_1")),
                    ("more", SpaceMessage, Some("team")),
                ],
                &["refund", "more"],
                &["hi"],
            ),
            // Two outside callers are two parties.
            (
                &[
                    ("x", SpaceMessage, Some("a2a_1")),
                    ("y", SpaceMessage, Some("a2a_2")),
                    ("x2", ToolResult, Some("a2a_1")),
                ],
                &["x", "x2"],
                &["y"],
            ),
            (&[], &[], &[]),
        ];
        for (events, mine, later) in table {
            let events: Vec<InboxEvent> =
                events.iter().map(|(id, k, s)| event(id, *k, *s)).collect();
            let (_, got, rest) = split(events);
            let ids = |v: &[InboxEvent]| v.iter().map(|e| e.id.clone()).collect::<Vec<_>>();
            assert_eq!(
                (ids(&got), ids(&rest)),
                (
                    mine.iter().map(|s| s.to_string()).collect(),
                    later.iter().map(|s| s.to_string()).collect()
                )
            );
        }
    }

    #[test]
    fn a_party_sees_its_own_spaces_only() {
        let members = Party::Members;
        let one = Party::Conversation("a2a_1".into());
        assert!(members.sees("team") && !members.sees("a2a_1"));
        assert!(one.sees("a2a_1") && !one.sees("a2a_2") && !one.sees("team"));
        assert!(members.remembers(false) && !one.remembers(false) && one.remembers(true));
    }

    fn any_event() -> impl Strategy<Value = InboxEvent> {
        let spaces = prop_oneof![
            Just(None),
            Just(Some("team")),
            Just(Some("family")),
            Just(Some("a2a_1")),
            Just(Some("a2a_2")),
            Just(Some("a2a_3")),
        ];
        let kinds = prop_oneof![
            Just(EventKind::SpaceMessage),
            Just(EventKind::Service),
            Just(EventKind::Plan),
            Just(EventKind::ToolResult),
        ];
        (0u32..1_000_000, kinds, spaces).prop_map(|(n, k, s)| event(&n.to_string(), k, s))
    }

    proptest! {
        /// Whatever comes in: a cycle's events are of one party, the first event's; nothing is
        /// lost or doubled; both parts keep the order they came in; and draining again what
        /// waits gives each party's events their own cycles in turn.
        #[test]
        fn a_cycle_never_mixes_parties(events in proptest::collection::vec(any_event(), 0..40)) {
            // An inbox holds each event once: ids are unique.
            let events: Vec<InboxEvent> = events
                .into_iter()
                .enumerate()
                .map(|(i, e)| InboxEvent { id: format!("e{i}"), ..e })
                .collect();
            let ids: Vec<String> = events.iter().map(|e| e.id.clone()).collect();
            let (party, mine, later) = split(events.clone());
            prop_assert!(mine.iter().all(|e| Party::of(e) == party));
            prop_assert!(later.iter().all(|e| Party::of(e) != party));
            if let Some(first) = events.first() {
                prop_assert_eq!(&mine[0].id, &first.id);
            }
            let order = |part: &[InboxEvent]| {
                let pos: Vec<usize> = part.iter().map(|e| ids.iter().position(|i| *i == e.id).unwrap_or(usize::MAX)).collect();
                pos.windows(2).all(|w| w[0] <= w[1])
            };
            prop_assert!(order(&mine) && order(&later));
            prop_assert_eq!(mine.len() + later.len(), ids.len());
            // Cycle after cycle until nothing waits: each takes one party, never twice in a row.
            let mut waiting = later;
            let mut last = party;
            let mut cycles = 1;
            while !waiting.is_empty() {
                let (p, took, rest) = split(waiting);
                prop_assert!(p != last);
                prop_assert!(took.iter().all(|e| Party::of(e) == p));
                waiting = rest;
                last = p;
                cycles += 1;
                prop_assert!(cycles <= ids.len() + 1);
            }
        }
    }
}
