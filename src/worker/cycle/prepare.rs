//! Before the first step (seed 000; DESIGN "The think cycle" 1–2): the consciousness (from
//! the cache when it is this lease's), the fresh context read from the data plane (spaces,
//! memories, goals, plans) and the stable system prompt, and the drained events as one inbox
//! message.

use std::time::Instant;

use sha2::{Digest, Sha256};
use tracing::{info, warn};

use super::{journal, Agentlet, Cycle};
use crate::crd::{A2aMemory, PlanSpec};
use crate::identity::SpaceKey;
use crate::model::{Message, Usage};
use crate::party::Party;
use crate::store::{
    Consciousness, Goal, InboxEvent, Lease, Memories, Plan, SpaceRecord, StoreError,
};
use crate::worker::prompt::{self, PromptInput};
use crate::worker::slot::Slot;

impl<'a> Cycle<'a> {
    /// A cycle over `events` (in flight, all of one party: see [`crate::party::split`]),
    /// ready for its first step.
    pub(super) async fn prepare(
        agentlet: &'a Agentlet,
        lease: &'a Lease,
        events: &'a [InboxEvent],
        started: Instant,
        slot: Option<&'a Slot>,
    ) -> Result<Cycle<'a>, StoreError> {
        let party = Party::of_batch(events);
        let remembers = party.remembers(agentlet.shares_memory());
        // A conversation with a memory of its own never touches the agent's: neither its
        // window (so the cache stays as it is) nor its notes.
        let (consciousness, history) = if remembers {
            agentlet.load(lease).await?
        } else {
            (
                Consciousness::default(),
                agentlet.transcript(&party, events).await?,
            )
        };
        super::trace::numbered(consciousness.cycle + 1);
        let key = &agentlet.key;
        let store = &agentlet.store;
        let (spaces, (memories, goals, plans), plan_marks, journaled) = tokio::try_join!(
            agentlet.spaces(&party),
            agentlet.notes(remembers),
            store.plan_marks(key),
            store.journal(key)
        )?;
        let plans: Vec<PlanSpec> = plans.iter().map(PlanSpec::from).collect();
        let context = prompt::context(&PromptInput {
            spec_plans: if remembers {
                &agentlet.agent.spec.plans
            } else {
                &[]
            },
            spaces: &spaces,
            memories: &memories,
            goals: &goals,
            plans: &plans,
            plan_marks: &plan_marks,
            now_ms: k8s_openapi::jiff::Timestamp::now().as_millisecond(),
        });
        let summary = consciousness
            .summary
            .as_ref()
            .map(|s| Message::user(format!("[SUMMARY of the earlier conversation]\n{s}")));
        let inbox = Message::user(agentlet.inbox_text(&spaces, events));
        // The space of the first event that has one the party sees (a space of the spec, or
        // the conversation).
        let active = events
            .iter()
            .find_map(|e| e.space.clone())
            .filter(|s| spaces.iter().any(|(name, _)| name == s));
        let offer = super::offer::offer(agentlet, &spaces, remembers, summary.is_some());
        let cue = crate::worker::cue::Cue::new(&agentlet.key.name, &spaces, events);
        let mut recorder = super::record::Recorder::new(agentlet.toolbox().masks(), &party, events);
        if remembers {
            recorder.began_from(consciousness.cycle);
        }
        let mut cycle = Cycle {
            agentlet,
            slot,
            lease,
            events,
            started,
            consciousness,
            history,
            spaces,
            system: offer.system,
            context,
            cue,
            summary,
            tools: offer.tools,
            builtin: offer.builtin,
            party,
            remembers,
            batch: batch_id(events),
            new: vec![inbox],
            active,
            depth: reply_depth(events),
            used: Usage::default(),
            start_depth: reply_depth(events),
            journaled: false,
            unjournaled: Vec::new(),
            first_step: 0,
            unfinished: None,
            late: None,
            stops: Vec::new(),
            nudged: false,
            recorder,
            notes_at_start: None,
        };
        // A cycle that stopped before its end (a crash, a model failure) goes on from its
        // journal: what it did is replayed, not done again.
        if let Some(r) = journal::resume(&journaled) {
            info!(batch = %r.batch, step = r.next_step, "resuming the cycle from its journal");
            cycle.batch = r.batch;
            cycle.new = r.new;
            cycle.used = r.used;
            cycle.start_depth = r.depth;
            cycle.depth = r.depth;
            cycle.first_step = r.next_step;
            cycle.unfinished = r.unfinished;
            cycle.journaled = true;
            cycle.recorder.resumed();
            // A journal that names no events (written before it named them) cannot tell.
            // The answers to its calls asked of humans are read as those calls' results.
            let answer = |e: &InboxEvent| {
                e.kind == crate::store::EventKind::ToolResult
                    && e.data
                        .as_ref()
                        .and_then(|d| d["callId"].as_str())
                        .is_some_and(|c| r.asked_calls.contains(c))
            };
            let late: Vec<InboxEvent> = events
                .iter()
                .filter(|e| !r.events.is_empty() && !r.events.contains(&e.id) && !answer(e))
                .cloned()
                .collect();
            cycle.late = (!late.is_empty()).then_some(late);
        }
        Ok(cycle)
    }
}

impl Agentlet {
    /// Events as the model reads them (one line each), with every secret of the agent's tools
    /// masked: an async tool's service may echo one back in its result.
    pub(super) fn inbox_text(
        &self,
        spaces: &[(String, Option<SpaceRecord>)],
        events: &[InboxEvent],
    ) -> String {
        self.toolbox()
            .masks()
            .redact(&prompt::inbox_message(spaces, events))
    }

    /// The consciousness and its parsed messages: from the cache when it is this lease's,
    /// else read from the store.
    async fn load(&self, lease: &Lease) -> Result<(Consciousness, Vec<Message>), StoreError> {
        if let Some(c) = self
            .cache
            .lock()
            .await
            .take()
            .filter(|c| c.token == lease.token)
        {
            return Ok((c.consciousness, c.history));
        }
        let c = self.store.consciousness(&self.key).await?;
        let history = c
            .messages
            .iter()
            .map(|j| {
                serde_json::from_str(j).unwrap_or_else(|e| {
                    warn!(error = %e, "unreadable message in consciousness; kept as a placeholder");
                    Message::user("[unreadable message]")
                })
            })
            .collect();
        Ok((c, history))
    }

    /// The spaces `party` sees and what the data plane knows of each (`None`: nothing): the
    /// members those the spec names; a conversation itself, while the agent is in it.
    pub(super) async fn spaces(
        &self,
        party: &Party,
    ) -> Result<Vec<(String, Option<SpaceRecord>)>, StoreError> {
        let names: Vec<&String> = match party {
            Party::Members => self.agent.spec.spaces.iter().collect(),
            Party::Conversation(c) => vec![c],
        };
        let reads = names.into_iter().map(|s| async move {
            let record = self
                .store
                .space(&SpaceKey::new(self.key.namespace.clone(), s.clone()))
                .await?;
            Ok::<_, StoreError>((s.clone(), record))
        });
        let mut spaces = futures::future::try_join_all(reads).await?;
        let me = &self.key.name;
        spaces.retain(|(name, record)| {
            !crate::identity::is_conversation(name)
                || record.as_ref().is_some_and(|r| r.has_agent(me))
        });
        Ok(spaces)
    }

    /// Whether A2A conversations share the agent's long memory (`spec.a2a.memory: shared`).
    pub(crate) fn shares_memory(&self) -> bool {
        self.agent
            .spec
            .a2a
            .as_ref()
            .is_some_and(|a| a.memory == A2aMemory::Shared)
    }

    /// The agent's memories, goals and plans, for a cycle that `remembers` (else none).
    async fn notes(&self, remembers: bool) -> Result<(Memories, Vec<Goal>, Vec<Plan>), StoreError> {
        if !remembers {
            return Ok(Default::default());
        }
        let key = &self.key;
        tokio::try_join!(
            self.store.memories(key),
            self.store.goals(key),
            self.store.plans(key)
        )
    }
}

/// The causal depth of what an agent posts in answer to `events`: one more than the deepest
/// of them (a human's message, a webhook or a plan is 0, so the answer is 1).
pub(super) fn reply_depth(events: &[InboxEvent]) -> u32 {
    events
        .iter()
        .map(|e| e.depth)
        .max()
        .unwrap_or(0)
        .saturating_add(1)
}

/// A stable id of a batch of events (the same batch redelivered after a crash has the same
/// id, so the tool calls of its re-run are deduplicated).
fn batch_id(events: &[InboxEvent]) -> String {
    let mut h = Sha256::new();
    for e in events {
        h.update(e.id.as_bytes());
        h.update(b"\n");
    }
    crate::hex(&h.finalize()[..8])
}
