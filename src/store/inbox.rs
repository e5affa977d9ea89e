//! The inbox of an agent: pushing, waiting and draining, urgent events, acknowledging, wake
//! signals, and plans firing into it.

use std::collections::BTreeMap;

use async_trait::async_trait;
use futures::stream::BoxStream;

use super::Sender;
use super::{Lease, StoreError};
use crate::identity::AgentKey;
use serde::{Deserialize, Serialize};

/// Whose wake signals a subscription hears.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WakeScope {
    /// Every agent's (the operator's scaler).
    All,
    /// The agents of one namespace (a pool serves one namespace).
    Namespace(String),
    /// One agent's (a dedicated worker).
    Agent(AgentKey),
}

impl WakeScope {
    /// Whether `agent`'s signals are in scope.
    pub fn covers(&self, agent: &AgentKey) -> bool {
        match self {
            WakeScope::All => true,
            WakeScope::Namespace(ns) => agent.namespace == *ns,
            WakeScope::Agent(a) => a == agent,
        }
    }
}

/// An agent's inbox, drained reliably: waiting moves events in flight, and they leave only
/// when the cycle is acknowledged (or committed), so a crash mid-cycle loses nothing.
#[async_trait]
pub trait Inbox: Send + Sync {
    /// Queues an event in an agent's inbox (the urgent queue when the event is urgent and the
    /// agent is thinking). Idempotent by event id. Publishes a wake signal when no worker
    /// holds the agent.
    async fn push_event(&self, agent: &AgentKey, event: &InboxEvent) -> Result<Pushed, StoreError>;

    /// Moves the urgent queue in flight (acknowledged with the cycle) and returns it. Fenced.
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

    /// Ends a cycle that changed nothing (a `skip`): as [`Inbox::end_cycle`], its events'
    /// receipts saying they were skipped. Fenced.
    async fn ack_cycle(&self, agent: &AgentKey, lease: &Lease) -> Result<(), StoreError> {
        self.end_cycle(
            agent,
            lease,
            &Receipt::new(ReceiptOutcome::Skipped, None, None),
        )
        .await
    }

    /// Ends a cycle without a commit: records `receipt` for its events that ask for one, drops the in-flight events, marks the agent sleeping, and moves urgent events
    /// that arrived late back to the inbox (so they wake the next cycle). Fenced.
    async fn end_cycle(
        &self,
        agent: &AgentKey,
        lease: &Lease,
        receipt: &Receipt,
    ) -> Result<(), StoreError> {
        self.end_cycle_recorded(agent, lease, receipt, None).await
    }

    /// [`Inbox::end_cycle`], keeping the cycle's `record` in the same step. Fenced.
    async fn end_cycle_recorded(
        &self,
        agent: &AgentKey,
        lease: &Lease,
        receipt: &Receipt,
        record: Option<&super::RecordWrite>,
    ) -> Result<(), StoreError>;

    /// Leaves events of the cycle under way for a later cycle (they are another party's, see
    /// [`crate::party::split`]): those in flight with these ids go back to the inbox, merged
    /// by their time with what waits there (each party's events stay in the order they came),
    /// and a pause does not take them for news (see [`Inbox::pause_cycle`]). Returns how many
    /// moved. Fenced.
    async fn defer_events(
        &self,
        agent: &AgentKey,
        lease: &Lease,
        ids: &[String],
    ) -> Result<u64, StoreError>;

    /// A cycle paused for a human: its events stay in flight (and come back with the next
    /// drain), the agent is marked paused rather than thinking — idle for the scaler, and
    /// what arrives meanwhile waits without waking it, until a human's answer ends the pause
    /// (see [`super::Calls::complete_call`]) — and urgent events move back to the inbox.
    /// `false`: not paused, because events arrived since the cycle's drain (an answer may be
    /// among them; events the cycle deferred are not news): the cycle is to go on with them
    /// now. Fenced.
    async fn pause_cycle(&self, agent: &AgentKey, lease: &Lease) -> Result<bool, StoreError> {
        self.pause_cycle_recorded(agent, lease, None).await
    }

    /// [`Inbox::pause_cycle`], keeping the cycle's `record` in the same step once paused.
    /// Fenced.
    async fn pause_cycle_recorded(
        &self,
        agent: &AgentKey,
        lease: &Lease,
        record: Option<&super::RecordWrite>,
    ) -> Result<bool, StoreError>;

    /// Wake signals from now on, of the agents `scope` covers: agents whose inbox got an event
    /// while no worker held them (or whose worker left with events still waiting). Each agent
    /// has its own channel, so a listener hears only what it asked for. On a Redis Cluster
    /// (sharded channels, no patterns) only registered agents' are heard (see
    /// `register_agent`), including agents registered by this store after the call.
    async fn subscribe_wakes(
        &self,
        scope: &WakeScope,
    ) -> Result<BoxStream<'static, AgentKey>, StoreError>;

    /// The events of the next cycle without waiting: those in flight (a cycle that never
    /// finished) with the whole inbox moved behind them, the agent marked thinking when there
    /// are any. Empty when there are none. Fenced. A pool wakes its agents by their wake
    /// signals, not by a blocking wait per agent.
    async fn take_inbox(
        &self,
        agent: &AgentKey,
        lease: &Lease,
    ) -> Result<Vec<InboxEvent>, StoreError>;

    /// Records `due_ms` as handled for plan `plan_id` and, when `event` is given, pushes it
    /// (with a wake signal like [`Inbox::push_event`]) — atomically, and only if no due time
    /// at or after `due_ms` was handled before. `None` when it was.
    async fn mark_plan(
        &self,
        agent: &AgentKey,
        plan_id: &str,
        due_ms: i64,
        event: Option<&InboxEvent>,
    ) -> Result<Option<Pushed>, StoreError>;

    /// Per plan id, the last due time handled (ms).
    async fn plan_marks(&self, agent: &AgentKey) -> Result<BTreeMap<String, i64>, StoreError>;

    /// What became of an event that asked for a receipt ([`InboxEvent::wants_receipt`]):
    /// written by the step that acknowledged it (a commit or a skip), so a receipt exists
    /// exactly when the event's cycle is over. `None` while it waits or is in flight, or once
    /// forgotten (kept [`RECEIPTS_KEPT_MS`], or as long as the agent's conversations last).
    async fn receipt(
        &self,
        agent: &AgentKey,
        event_id: &str,
    ) -> Result<Option<Receipt>, StoreError>;
}

/// What an inbox event is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    /// A message posted in a space the agent is a member of.
    SpaceMessage,
    /// A service (webhook) triggered the agent.
    Service,
    /// A scheduled plan fired.
    Plan,
    /// The result of an asynchronous tool call.
    ToolResult,
}

/// One event in an agent's inbox.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct InboxEvent {
    /// Unique id; an id the inbox has seen before is dropped, so producers may retry.
    pub id: String,
    /// What the event is about.
    #[serde(rename = "type")]
    pub kind: EventKind,
    /// When it was produced, in milliseconds since the Unix epoch.
    pub time_ms: i64,
    /// Injected mid-cycle in full when the agent is thinking (see `cycle.midCycleInbox`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub urgent: bool,
    /// The space it happened in, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub space: Option<String>,
    /// Who produced it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sender: Option<Sender>,
    /// Text of the message, instruction or result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Extra structured data (service payloads, tool results).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<serde_json::Value>,
    /// Causal depth: how many agent messages in a row led to this event (0 for what humans,
    /// services and plans start).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub depth: u32,
}

pub(super) fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl InboxEvent {
    /// The agent a space message addresses (`mention`), if any.
    pub fn mention(&self) -> Option<&str> {
        self.data.as_ref()?.get("mention")?.as_str()
    }

    /// Whether the step that acknowledges this event records a [`Receipt`] of it (`data`
    /// has `"receipt": true`: a message in an A2A conversation, whose task ends with it).
    pub fn wants_receipt(&self) -> bool {
        self.data
            .as_ref()
            .and_then(|d| d.get("receipt"))
            .and_then(serde_json::Value::as_bool)
            .unwrap_or(false)
    }
}

/// How long an agent keeps receipts at least (ms): as long as its A2A conversations last
/// (`spec.a2a.conversationSeconds`), at least as long as they last by default. A receipt is
/// forgotten only once its task's conversation is gone, so a task's final state is kept as
/// long as the task is readable.
pub const RECEIPTS_KEPT_MS: i64 = super::CONVERSATION_SECONDS as i64 * 1000;

/// What became of an event that asked for a receipt: recorded in the atomic step that
/// acknowledged it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Receipt {
    /// How its cycle ended.
    pub outcome: ReceiptOutcome,
    /// The cycle's number, when it committed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cycle: Option<u64>,
    /// Why it failed, for people.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// When (ms since the epoch).
    pub time_ms: i64,
}

/// How the cycle of an event ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ReceiptOutcome {
    /// The cycle committed: what the agent did is remembered.
    Committed,
    /// The agent chose `skip`: nothing was remembered.
    Skipped,
    /// The model could not process the events; the failure was remembered.
    Failed,
}

impl Receipt {
    /// A receipt of now.
    pub fn new(outcome: ReceiptOutcome, cycle: Option<u64>, reason: Option<String>) -> Self {
        Self {
            outcome,
            cycle,
            reason,
            time_ms: super::now_ms(),
        }
    }

    /// As the data plane keeps it (JSON).
    pub fn to_json(&self) -> String {
        serde_json::json!({
            "outcome": self.outcome,
            "cycle": self.cycle,
            "reason": self.reason,
            "timeMs": self.time_ms,
        })
        .to_string()
    }
}

/// What happened to a pushed event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pushed {
    /// The event was queued (false: its id was seen before and it was dropped).
    pub queued: bool,
    /// No worker held the agent's lease, so a wake signal was published.
    pub woke: bool,
}

/// What a later step of a cycle sees of the inbox (seed 000: preview + urgent injection).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MidCycle {
    /// Urgent events taken in flight (acknowledged with the cycle).
    pub urgent: Vec<InboxEvent>,
    /// Events waiting (inbox and urgent queue), after taking the urgent ones.
    pub waiting: u64,
    /// The first waiting events of the inbox, left in place.
    pub preview: Vec<InboxEvent>,
}
