//! The data plane: every key and every command lives behind the [`Store`] trait.
//!
//! Two implementations: [`RedisStore`] (production, one Redis or a Redis Cluster) and
//! [`MemoryStore`] (embedded, for `agentfleet dev` and unit tests), each laid out by concern
//! (`redis/`, `memory/`: one file per trait below). One test suite runs against both.
//!
//! [`Store`] is every concern together; call sites hold `Arc<dyn Store>` and bring the
//! concerns' methods in with `use crate::store::prelude::*;`:
//! - [`Spaces`] — **space membership**: for every Space, its resolved members (agents and
//!   humans), derived from the manifests by [`crate::membership::derive`] and applied
//!   idempotently; and which Agents exist.
//! - [`Inbox`] — the **inbox** per agent, drained reliably: taking a batch moves events to an
//!   in-flight list, and they leave it only when the cycle is acknowledged, so a crash
//!   mid-cycle loses nothing. An event id seen before is dropped. Urgent events go to a second
//!   queue while the agent thinks. **Wake**: a push to the inbox of an agent whose lease
//!   nobody holds publishes the agent's `NS/NAME` (heard by [`WakeScope`]: every agent, a
//!   namespace, one agent); so does a worker that
//!   gives its lease up while events wait (it was scaled down as they arrived). **Plan
//!   firing**: recording a plan's due time and pushing its event is one atomic step, so it
//!   fires once.
//! - [`Messages`] — **space messages**: an append-only log per space with stable ids, and
//!   **live events** per space on pub/sub (messages, streamed text, activity). Posting writes
//!   the log in one step on the space, then pushes the message into every other member agent's
//!   inbox, one idempotent step per agent (each agent's keys live apart, on a Redis Cluster);
//!   a retried keyed post completes a fan-out that was interrupted (see [`Messages`]).
//! - [`ConsciousnessLog`] — **consciousness** per agent: an append-only message log with a
//!   window (start..end) and the summary of what was compacted out; each committed cycle
//!   appends its messages, records a checkpoint (cycle, window, digest chained over commits,
//!   counts; last N kept) and acknowledges the inbox in one atomic step, costing O(new
//!   messages).
//! - [`Leases`] — one **lease** per agent with a fencing token: one worker thinks; a worker
//!   whose token is no longer current cannot take events, acknowledge or write.
//! - [`Notes`] — what the agent keeps for itself: **memories, goals and plans**, one keyed,
//!   fenced collection each.
//! - [`Observe`] — what the operator reads of every agent in one round trip, the model's
//!   health, and forgetting an agent.
//! - [`CycleRecords`] — **cycle records** per agent ([`crate::cycles`]): what each cycle did,
//!   kept by the step that ends it, the newest within the agent's bounds.
//! - [`Calls`] — **asynchronous tool calls** waiting for their result: registered by the
//!   worker before the request, completed by the gateway when the service posts the result
//!   (marking the call done and pushing its `tool_result` event is one atomic step on the
//!   agent's keys).
//!
//! What the store keeps are its own [`records`], versioned, never the custom resources'
//! types: the operator and the worker convert at their edge.

mod calls;
mod consciousness;
mod cycles;
mod error;
mod inbox;
mod journal;
mod leases;
mod memory;
mod messages;
mod notes;
mod observe;
pub mod records;
mod redis;
mod spaces;
mod tokens;

pub use self::calls::{
    outbound_member, outbound_member_depth, presented_hash, token_hash, Answer, CallId, CallKind,
    CallRecord, CallResult, Calls, Completion, HumanCall, NewCall, NoRandom, RegisteredCall,
    RemoteTask, Verdict, FORGET_AFTER_MS, OUTBOUND_NOTES,
};
pub use self::consciousness::{
    next_digest, ArchiveReport, Checkpoint, Compacted, Consciousness, ConsciousnessLog,
    CycleCommit, RestoreReport, Snapshot,
};
pub use self::cycles::{CycleRecords, RecordWrite};
pub use self::error::StoreError;
pub use self::inbox::{
    EventKind, Inbox, InboxEvent, MidCycle, Pushed, Receipt, ReceiptOutcome, WakeScope,
    RECEIPTS_KEPT_MS,
};
pub use self::journal::Journal;
pub use self::leases::{Lease, Leases};
pub use self::memory::MemoryStore;
pub use self::messages::{
    parse_message_id, Guard, LiveEvent, Messages, NewMessage, Page, Posted, ReadQuery, Sender,
    SpaceMessage, DEFAULT_MAX_MESSAGE_BYTES, PAGE_BYTES,
};
pub use self::notes::{Goal, Memories, NoteKind, Notes};
pub use self::observe::{
    checkpoint_ref_cycle, AgentObservation, AgentWork, ModelHealth, Observe, REHEARSALS_KEPT,
    REHEARSAL_REPORT_BYTES, TOOL_SPECS_BYTES,
};
pub use self::records::{LoopGuard, Member, MemberKind, Plan, Restored, ToolRecord, V1};
pub use self::redis::{
    redact_url, RedisArgs, RedisOptions, RedisStore, WaitReplicas, REDIS_CA_ENV,
};
pub use self::spaces::{
    A2aRecord, A2aSkill, AgentFacts, SpaceRecord, Spaces, CONVERSATION_SECONDS,
};
pub use self::tokens::TokenSpend;
use crate::identity::AgentKey;

/// Milliseconds since the Unix epoch, now.
pub fn now_ms() -> i64 {
    k8s_openapi::jiff::Timestamp::now().as_millisecond()
}

/// The channel of every agent's wake signals on one Redis (payload: the agent's `NS/NAME`);
/// each agent's are also on its own channel (see [`WakeScope`]).
pub const WAKE_CHANNEL: &str = "agentfleet:wake";

/// How many recent event ids an inbox remembers to drop duplicates.
pub const SEEN_IDS: usize = 10_000;

/// The data plane's operations: every concern's trait. Implemented for any type that
/// implements them all; hold it as `Arc<dyn Store>`.
pub trait Store:
    Spaces
    + Inbox
    + Journal
    + Messages
    + ConsciousnessLog
    + CycleRecords
    + Leases
    + Notes
    + Observe
    + Calls
    + Send
    + Sync
    + 'static
{
}

impl<T> Store for T where
    T: Spaces
        + Inbox
        + Journal
        + Messages
        + ConsciousnessLog
        + CycleRecords
        + Leases
        + Notes
        + Observe
        + Calls
        + Send
        + Sync
        + 'static
{
}

/// An agent's consciousness and notes as they are now (the consciousness and each note
/// collection read in turn: take it between cycles).
pub async fn snapshot(store: &dyn Store, agent: &AgentKey) -> Result<Snapshot, StoreError> {
    Ok(Snapshot {
        consciousness: store.consciousness(agent).await?,
        notes: all_notes(store, agent).await?,
        highest: 0,
    })
}

/// Every note collection of an agent that has entries, by kind.
pub async fn all_notes(
    store: &dyn Store,
    agent: &AgentKey,
) -> Result<
    std::collections::BTreeMap<NoteKind, std::collections::BTreeMap<String, String>>,
    StoreError,
> {
    // The three reads go out together (one round trip on a multiplexed connection).
    let (memories, goals, plans) = futures::join!(
        store.notes(agent, NoteKind::Memories),
        store.notes(agent, NoteKind::Goals),
        store.notes(agent, NoteKind::Plans),
    );
    Ok([
        (NoteKind::Memories, memories?),
        (NoteKind::Goals, goals?),
        (NoteKind::Plans, plans?),
    ]
    .into_iter()
    .filter(|(_, entries)| !entries.is_empty())
    .collect())
}

/// The store's traits, so that one `use crate::store::prelude::*;` brings every method of a
/// [`Store`] into scope.
pub mod prelude {
    pub use super::{
        Calls, ConsciousnessLog, CycleRecords, Inbox, Journal, Leases, Messages, Notes, Observe,
        Spaces, Store,
    };
}

#[cfg(test)]
mod suite;
