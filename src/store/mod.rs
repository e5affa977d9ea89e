//! The data plane: every key and every command lives behind the [`Store`] trait.
//!
//! Two implementations: [`RedisStore`] (production, one Redis or a Redis Cluster) and
//! [`MemoryStore`] (embedded, for `agentfleet dev` and unit tests). One test suite runs against
//! both.
//!
//! What the store holds so far:
//! - **Space membership**: for every Space, its resolved members (agents and humans), derived
//!   from the manifests by [`crate::membership::derive`] and applied idempotently.
//! - **Inbox** per agent, drained reliably: waiting moves events to an in-flight list, and they
//!   leave it only when the cycle is acknowledged, so a crash mid-cycle loses nothing. An event
//!   id seen before is dropped. Urgent events go to a second queue while the agent thinks.
//! - **Lease** per agent with a fencing token: one worker thinks; a worker whose token is no
//!   longer current cannot take events or acknowledge.
//! - **Space messages**: an append-only log per space with stable ids; posting a message and
//!   pushing it to every other member agent's inbox is one atomic step, idempotent by key.
//! - **Live events** per space on pub/sub (messages, streamed text, activity).
//! - **Consciousness** per agent: an append-only message log with a window (start..end) and
//!   the summary of what was compacted out; each committed cycle appends its messages, records
//!   a checkpoint (cycle, window, digest chained over commits, counts; last N kept) and
//!   acknowledges the inbox in one atomic step, costing O(new messages). Memories and goals.
//! - **Wake**: a push to the inbox of an agent whose lease nobody holds publishes the agent's
//!   `NS/NAME` on [`WAKE_CHANNEL`]; so does a worker that gives its lease up while events
//!   wait (it was scaled down as they arrived).
//! - **Plans** the agent made itself, and per plan the last due time handled: firing a plan
//!   records its due time and pushes its event in one atomic step, so it fires once.

mod memory;
mod redis;
mod types;

pub use self::memory::MemoryStore;
pub use self::redis::{redact_url, RedisStore};
pub use self::types::*;

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use futures::stream::BoxStream;

/// Pub/sub channel of wake signals (payload: the agent's `NS/NAME`).
pub const WAKE_CHANNEL: &str = "agentfleet:wake";

/// How many recent event ids an inbox remembers to drop duplicates.
pub const SEEN_IDS: usize = 10_000;

use crate::crd::PlanSpec;
use crate::keys::SpaceKey;

/// Why a store operation failed. The text never carries credentials.
///
/// The text says the cause (the driver's or the decoder's error) and `source()` does not
/// return it again: `{e}` is the whole story, and a chain printer ([`crate::report::chain`],
/// anyhow's `{:#}`) says the cause once. (thiserror makes a field named `source` the source,
/// hence the hand-written `Display`.)
#[derive(Debug)]
pub enum StoreError {
    /// The store could not be reached or refused the command.
    Redis {
        /// What the store was doing.
        op: &'static str,
        /// The driver's error.
        source: ::redis::RedisError,
    },
    /// The store did not answer in time.
    Timeout {
        /// What the store was doing.
        op: &'static str,
        /// The time limit.
        seconds: u64,
    },
    /// A stored value could not be decoded.
    Decode {
        /// The value being decoded.
        what: String,
        /// The decoder's error.
        source: serde_json::Error,
    },
    /// The store's address is not usable.
    InvalidUrl(String),
    /// A commit that does not fit the stored consciousness (a bug in the caller).
    InvalidCommit {
        /// The agent.
        agent: String,
        /// What does not fit.
        reason: String,
    },
    /// The sender is not a member of the space (or the space does not exist).
    NotMember {
        /// The space.
        space: String,
        /// The sender's id.
        sender: String,
    },
    /// The caller's lease is no longer current: another worker holds the agent.
    Fenced {
        /// The agent.
        agent: String,
    },
}

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreError::Redis { op, source } => write!(f, "redis {op}: {source}"),
            StoreError::Timeout { op, seconds } => {
                write!(f, "redis {op}: no answer within {seconds}s")
            }
            StoreError::Decode { what, source } => write!(f, "decoding {what}: {source}"),
            StoreError::InvalidUrl(url) => write!(f, "invalid redis URL: {url}"),
            StoreError::InvalidCommit { agent, reason } => {
                write!(f, "invalid commit for agent {agent}: {reason}")
            }
            StoreError::NotMember { space, sender } => {
                write!(f, "{sender} is not a member of space {space}")
            }
            StoreError::Fenced { agent } => {
                write!(f, "lease of agent {agent} lost: another worker holds it")
            }
        }
    }
}

impl std::error::Error for StoreError {}

impl StoreError {
    /// A bounded label for metrics.
    pub fn category(&self) -> &'static str {
        match self {
            StoreError::Redis { .. } => "store_unavailable",
            StoreError::Timeout { .. } => "store_timeout",
            StoreError::Decode { .. } => "store_decode",
            StoreError::InvalidUrl(_) => "store_config",
            StoreError::Fenced { .. } => "fenced",
            StoreError::NotMember { .. } => "not_member",
            StoreError::InvalidCommit { .. } => "invalid_commit",
        }
    }

    /// Whether nothing accepted the connection (nothing listens at the store's address).
    pub fn is_connection_refused(&self) -> bool {
        matches!(self, StoreError::Redis { source, .. } if source.is_connection_refusal())
    }
}

/// The data plane's operations.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// Checks that the store answers.
    async fn ping(&self) -> Result<(), StoreError>;

    /// Sets what the data plane knows of a space (members, display name, retention).
    /// Idempotent: returns whether anything changed.
    async fn apply_space(&self, space: &SpaceKey, record: &SpaceRecord)
        -> Result<bool, StoreError>;

    /// What the data plane knows of a space, or `None` when it knows no such space.
    async fn space(&self, space: &SpaceKey) -> Result<Option<SpaceRecord>, StoreError>;

    /// Forgets a space's membership. Returns whether there was any.
    async fn remove_space(&self, space: &SpaceKey) -> Result<bool, StoreError>;

    /// Every space the store holds membership for, sorted.
    async fn spaces(&self) -> Result<Vec<SpaceKey>, StoreError>;

    /// Records that an Agent exists (the operator does, for every Agent it reconciles), so
    /// producers such as the gateway's webhook can tell a real agent from a typo. Returns
    /// whether it was new.
    async fn register_agent(&self, agent: &AgentKey) -> Result<bool, StoreError>;

    /// Forgets that an Agent exists. Returns whether it was registered.
    async fn unregister_agent(&self, agent: &AgentKey) -> Result<bool, StoreError>;

    /// Whether an Agent is registered.
    async fn agent_registered(&self, agent: &AgentKey) -> Result<bool, StoreError>;

    /// Queues an event in an agent's inbox (the urgent queue when the event is urgent and the
    /// agent is thinking). Idempotent by event id.
    async fn push_event(&self, agent: &AgentKey, event: &InboxEvent) -> Result<Pushed, StoreError>;

    /// Takes the agent's lease for `holder` if nobody holds it (or `holder` already does).
    /// `None` while another worker holds it.
    async fn acquire_lease(
        &self,
        agent: &AgentKey,
        holder: &str,
        ttl: Duration,
    ) -> Result<Option<Lease>, StoreError>;

    /// Extends the lease. `false` when it is no longer ours.
    async fn renew_lease(
        &self,
        agent: &AgentKey,
        lease: &Lease,
        ttl: Duration,
    ) -> Result<bool, StoreError>;

    /// Gives the lease up (a no-op when it is no longer ours). Publishes a wake signal when
    /// events are left waiting or in flight, so that the operator brings a worker back.
    async fn release_lease(&self, agent: &AgentKey, lease: &Lease) -> Result<(), StoreError>;

    /// The events of the next cycle. Events already in flight (a cycle that never finished)
    /// come back first; otherwise waits, without polling, up to `timeout` for the inbox to
    /// hold an event, then moves the whole inbox in flight and marks the agent thinking.
    /// Empty when the wait timed out.
    async fn wait_inbox(
        &self,
        agent: &AgentKey,
        lease: &Lease,
        timeout: Duration,
    ) -> Result<Vec<InboxEvent>, StoreError>;

    /// Moves the urgent queue in flight (acknowledged with the cycle) and returns it.
    async fn take_urgent(
        &self,
        agent: &AgentKey,
        lease: &Lease,
    ) -> Result<Vec<InboxEvent>, StoreError>;

    /// The first `limit` events waiting in the inbox, left in place (mid-cycle preview).
    async fn peek_inbox(
        &self,
        agent: &AgentKey,
        limit: usize,
    ) -> Result<Vec<InboxEvent>, StoreError>;

    /// Events waiting: inbox plus urgent queue (not counting those in flight).
    async fn inbox_depth(&self, agent: &AgentKey) -> Result<u64, StoreError>;

    /// One look at the inbox between steps: takes the urgent events in flight when
    /// `take_urgent`, then counts what waits and previews up to `preview` inbox events.
    async fn mid_cycle(
        &self,
        agent: &AgentKey,
        lease: &Lease,
        take_urgent: bool,
        preview: usize,
    ) -> Result<MidCycle, StoreError> {
        let urgent = if take_urgent {
            self.take_urgent(agent, lease).await?
        } else {
            Vec::new()
        };
        let waiting = self.inbox_depth(agent).await?;
        let preview = if waiting > 0 && preview > 0 {
            self.peek_inbox(agent, preview).await?
        } else {
            Vec::new()
        };
        Ok(MidCycle {
            urgent,
            waiting,
            preview,
        })
    }

    /// Events in flight: taken by a cycle that has not been acknowledged.
    async fn inflight(&self, agent: &AgentKey) -> Result<u64, StoreError>;

    /// Posts a message as a member of the space and delivers it, in the same atomic step, to
    /// the inbox of every member agent but the sender. Refused with
    /// [`StoreError::NotMember`] when the sender is not a member.
    async fn post_message(
        &self,
        space: &SpaceKey,
        message: &NewMessage,
    ) -> Result<Posted, StoreError>;

    /// Messages of a space's log (see [`ReadQuery`]).
    async fn read_messages(
        &self,
        space: &SpaceKey,
        query: &ReadQuery,
    ) -> Result<Vec<SpaceMessage>, StoreError>;

    /// Publishes a live event of a space (streamed text, activity).
    async fn publish_live(&self, space: &SpaceKey, event: &LiveEvent) -> Result<(), StoreError>;

    /// The live events of a space from now on.
    async fn subscribe_live(
        &self,
        space: &SpaceKey,
    ) -> Result<BoxStream<'static, LiveEvent>, StoreError>;

    /// Commits a cycle: appends its messages, applies its compaction, records the checkpoint
    /// and acknowledges the in-flight events, atomically. Fenced.
    async fn commit_cycle(
        &self,
        agent: &AgentKey,
        lease: &Lease,
        commit: &CycleCommit,
    ) -> Result<Checkpoint, StoreError>;

    /// The agent's consciousness (empty before its first cycle).
    async fn consciousness(&self, agent: &AgentKey) -> Result<Consciousness, StoreError>;

    /// The retained checkpoints, newest first.
    async fn checkpoints(&self, agent: &AgentKey) -> Result<Vec<Checkpoint>, StoreError>;

    /// Makes the consciousness what it was after `cycle` (a retained checkpoint); later
    /// checkpoints and messages are dropped. Fenced: take the lease first. `None` when no
    /// such checkpoint is retained.
    async fn restore_checkpoint(
        &self,
        agent: &AgentKey,
        lease: &Lease,
        cycle: u64,
    ) -> Result<Option<Checkpoint>, StoreError>;

    /// Stores memories (upsert by key). Fenced.
    async fn set_memories(
        &self,
        agent: &AgentKey,
        lease: &Lease,
        memories: &Memories,
    ) -> Result<(), StoreError>;

    /// Removes memories by key; returns how many existed. Fenced.
    async fn delete_memories(
        &self,
        agent: &AgentKey,
        lease: &Lease,
        keys: &[String],
    ) -> Result<u64, StoreError>;

    /// The agent's memories.
    async fn memories(&self, agent: &AgentKey) -> Result<Memories, StoreError>;

    /// Stores goals (upsert by id). Fenced.
    async fn set_goals(
        &self,
        agent: &AgentKey,
        lease: &Lease,
        goals: &[Goal],
    ) -> Result<(), StoreError>;

    /// The agent's goals, by id.
    async fn goals(&self, agent: &AgentKey) -> Result<Vec<Goal>, StoreError>;

    /// Ends a cycle: drops the in-flight events, marks the agent sleeping, and moves urgent
    /// events that arrived late back to the inbox (so they wake the next cycle).
    async fn ack_cycle(&self, agent: &AgentKey, lease: &Lease) -> Result<(), StoreError>;

    /// Stores plans the agent made (upsert by name). Fenced.
    async fn set_plans(
        &self,
        agent: &AgentKey,
        lease: &Lease,
        plans: &[PlanSpec],
    ) -> Result<(), StoreError>;

    /// Removes plans the agent made, by name; returns how many existed. Fenced.
    async fn cancel_plans(
        &self,
        agent: &AgentKey,
        lease: &Lease,
        names: &[String],
    ) -> Result<u64, StoreError>;

    /// The plans the agent made, by name.
    async fn plans(&self, agent: &AgentKey) -> Result<Vec<PlanSpec>, StoreError>;

    /// Per plan id, the last due time handled (ms).
    async fn plan_marks(&self, agent: &AgentKey) -> Result<BTreeMap<String, i64>, StoreError>;

    /// Records `due_ms` as handled for plan `plan_id` and, when `event` is given, pushes it
    /// (with a wake signal like [`Store::push_event`]) — atomically, and only if no due time
    /// at or after `due_ms` was handled before. `None` when it was.
    async fn mark_plan(
        &self,
        agent: &AgentKey,
        plan_id: &str,
        due_ms: i64,
        event: Option<&InboxEvent>,
    ) -> Result<Option<Pushed>, StoreError>;

    /// Records how the agent's model answered lately (the worker writes it when it changes).
    async fn set_model_health(
        &self,
        agent: &AgentKey,
        health: &ModelHealth,
    ) -> Result<(), StoreError>;

    /// What the operator needs of each agent, for all of them in one round trip (the same
    /// order as `agents`).
    async fn observe(&self, agents: &[AgentKey]) -> Result<Vec<AgentObservation>, StoreError>;

    /// Wake signals from now on: agents whose inbox got an event while no worker held them
    /// (or whose worker left with events still waiting).
    async fn subscribe_wakes(&self) -> Result<BoxStream<'static, AgentKey>, StoreError>;

    /// Removes everything the data plane holds of an agent: inbox, queues, consciousness,
    /// checkpoints, memories, goals, plans, lease, registration.
    async fn purge_agent(&self, agent: &AgentKey) -> Result<(), StoreError>;
}

#[cfg(test)]
mod suite;
