//! What the data plane carries: inbox events and the identities they name.

use serde::{Deserialize, Serialize};

pub use crate::keys::AgentKey;
use crate::store::records::{LoopGuard, Member, MemberKind, Plan, Restored, ToolRecord, V1};
use crate::store::CallKind;

/// What the data plane knows of a space: derived from its Space object and the Agents that
/// name it. A versioned record (see [`records`](super::records)).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SpaceRecord {
    /// The record's format.
    #[serde(default, rename = "v", skip_serializing_if = "V1::implied")]
    pub v: V1,
    /// Name shown to humans and agents.
    pub display_name: String,
    /// Agents, then humans.
    pub members: Vec<Member>,
    /// The most messages its log keeps.
    pub max_messages: u64,
    /// When agents' messages stop waking other agents.
    #[serde(default)]
    pub loop_guard: LoopGuard,
}

impl SpaceRecord {
    /// Whether an agent of this name is a member.
    pub fn has_agent(&self, name: &str) -> bool {
        self.members
            .iter()
            .any(|m| m.kind == MemberKind::Agent && m.id == name)
    }

    /// Whether `sender` may read and post here: a member of the same kind and id (a service or
    /// the system never is). The one admission rule of the gateway, the tools and the stores.
    pub fn admits(&self, sender: &Sender) -> bool {
        self.members
            .iter()
            .any(|m| Some(m.kind) == sender.kind && m.id == sender.id)
    }

    /// Names of the member agents.
    pub fn agents(&self) -> impl Iterator<Item = &str> {
        self.members
            .iter()
            .filter(|m| m.kind == MemberKind::Agent)
            .map(|m| m.id.as_str())
    }
}

/// Who wrote something: an agent, a human or a service.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sender {
    /// Entity id (an Agent's name, a human's id, a service's name).
    pub id: String,
    /// Display name.
    pub name: String,
    /// `Agent`, `Human`, or `None` for a service or the system.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<MemberKind>,
}

impl Sender {
    /// agentfleet itself, the sender of the space's notices (such as the loop guard's).
    pub fn system() -> Self {
        Self {
            id: "agentfleet".into(),
            name: "agentfleet".into(),
            kind: None,
        }
    }
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

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl InboxEvent {
    /// The agent a space message addresses (`mention`), if any.
    pub fn mention(&self) -> Option<&str> {
        self.data.as_ref()?.get("mention")?.as_str()
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

/// A worker's hold on an agent: only the holder of the current token may take events from
/// the inbox or commit a cycle.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lease {
    /// Who holds it (unique per worker process).
    pub holder: String,
    /// Fencing token: grows with every new holder.
    pub token: u64,
}

/// Milliseconds since the Unix epoch, now.
pub fn now_ms() -> i64 {
    k8s_openapi::jiff::Timestamp::now().as_millisecond()
}

/// A message to post in a space.
#[derive(Clone, Debug, PartialEq)]
pub struct NewMessage {
    /// Who posts it; must be a member of the space.
    pub sender: Sender,
    /// The text.
    pub text: String,
    /// An agent member addressed by the message.
    pub mention: Option<String>,
    /// Posting again with the same key returns the first message instead of a second one, so
    /// a retried or re-run post never duplicates; it only completes the first one's delivery
    /// to the member agents, if that was interrupted (see [`Messages`](super::Messages)).
    pub idempotency_key: Option<String>,
    /// Deliver to the member agents as urgent events.
    pub urgent: bool,
    /// Causal depth (see [`InboxEvent::depth`]): 0 for humans and services; for an agent, one
    /// more than the deepest event it is answering.
    pub depth: u32,
}

impl NewMessage {
    /// The idempotency key as stored: scoped to the sender (kind and id), so one sender's keys
    /// can never suppress another's posts — and no client can write in an agent's scope.
    pub fn scoped_idempotency_key(&self) -> Option<String> {
        let key = self.idempotency_key.as_deref()?;
        let kind = match self.sender.kind {
            Some(MemberKind::Agent) => "agent",
            Some(MemberKind::Human) => "human",
            None => "service",
        };
        Some(format!("{kind}:{}:{key}", self.sender.id))
    }

    /// Whether the loop guard watches this post: an agent's message in a space with another
    /// agent it could wake.
    pub fn guarded_by_loop_guard(&self, record: &SpaceRecord) -> bool {
        self.sender.kind == Some(MemberKind::Agent) && record.agents().any(|a| a != self.sender.id)
    }

    /// The loop guard this post trips in `record`, given how many watched agent messages the
    /// space has seen this minute before it (for the rate).
    pub fn loop_guard(
        &self,
        record: &SpaceRecord,
        agent_messages_this_minute: u64,
    ) -> Option<Guard> {
        if !self.guarded_by_loop_guard(record) {
            return None;
        }
        if self.depth > record.loop_guard.max_depth {
            return Some(Guard::Depth);
        }
        (agent_messages_this_minute >= u64::from(record.loop_guard.max_agent_messages_per_minute))
            .then_some(Guard::Rate)
    }
}

/// Why an agent's message woke no other agent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Guard {
    /// The chain of agent messages is longer than the space's `loopGuard.maxDepth`.
    Depth,
    /// The space had more agent messages this minute than `loopGuard.maxAgentMessagesPerMinute`.
    Rate,
}

impl Guard {
    /// A bounded label (metrics, the store's wire).
    pub fn as_str(self) -> &'static str {
        match self {
            Guard::Depth => "depth",
            Guard::Rate => "rate",
        }
    }

    /// Parses [`Guard::as_str`].
    pub fn parse(s: &str) -> Option<Self> {
        [Guard::Depth, Guard::Rate]
            .into_iter()
            .find(|g| g.as_str() == s)
    }

    /// The notice posted in the space when the guard trips for `sender`'s message.
    pub fn notice(
        self,
        space: &str,
        record: &SpaceRecord,
        sender: &Sender,
        depth: u32,
    ) -> SpaceMessage {
        let text = match self {
            Guard::Depth => format!(
                "Loop guard: {}'s message was not delivered to the other agents: it is agent message {depth} in a row since the last human, webhook or plan event (this space allows {}, spec.loopGuard.maxDepth).",
                sender.name, record.loop_guard.max_depth
            ),
            Guard::Rate => format!(
                "Loop guard: agents' messages in this space wake no other agent for the rest of this minute: more than {} agent messages in a minute (spec.loopGuard.maxAgentMessagesPerMinute). {}'s message was not delivered to the other agents.",
                record.loop_guard.max_agent_messages_per_minute, sender.name
            ),
        };
        SpaceMessage {
            id: String::new(),
            space: space.to_string(),
            sender: Sender::system(),
            text,
            time_ms: now_ms(),
            mention: None,
            depth: 0,
        }
    }
}

/// Parses a message id (`MILLIS-SEQ`, as Redis stream ids) into its ordered parts.
pub fn parse_message_id(id: &str) -> Option<(i64, u64)> {
    let (ms, seq) = id.split_once('-')?;
    Some((ms.parse().ok()?, seq.parse().ok()?))
}

/// A message of a space's log.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SpaceMessage {
    /// Stable id, ordered by posting time (`MILLIS-SEQ`).
    #[serde(default)]
    pub id: String,
    /// Name of the space.
    pub space: String,
    /// Who posted it.
    pub sender: Sender,
    /// The text.
    pub text: String,
    /// When it was posted, in milliseconds since the Unix epoch.
    pub time_ms: i64,
    /// An agent member addressed by the message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mention: Option<String>,
    /// Causal depth (see [`InboxEvent::depth`]).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub depth: u32,
}

impl SpaceMessage {
    /// The inbox event this message becomes for the other member agents.
    pub fn event(&self, urgent: bool) -> InboxEvent {
        InboxEvent {
            id: format!("msg:{}:{}", self.space, self.id),
            kind: EventKind::SpaceMessage,
            time_ms: self.time_ms,
            urgent,
            space: Some(self.space.clone()),
            sender: Some(self.sender.clone()),
            text: Some(self.text.clone()),
            data: Some(serde_json::json!({
                "messageId": self.id,
                "mention": self.mention,
            })),
            depth: self.depth,
        }
    }
}

/// The outcome of a post.
#[derive(Clone, Debug, PartialEq)]
pub struct Posted {
    /// The message (the first one, for a repeated idempotency key).
    pub id: String,
    /// An earlier post had the same idempotency key; nothing new was written to the log.
    pub duplicate: bool,
    /// Agents whose inbox received the message (for a duplicate: those an interrupted
    /// delivery had missed, reached now).
    pub delivered: Vec<String>,
    /// The space's loop guard kept the message from the other agents (a notice says so).
    pub guarded: Option<Guard>,
}

/// Which messages of a space to read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReadQuery {
    /// The most messages returned.
    pub limit: usize,
    /// Newest first, older than this id.
    pub before: Option<String>,
    /// Oldest first, newer than this id (takes precedence over `before`).
    pub after: Option<String>,
}

/// What a space's live stream carries.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum LiveEvent {
    /// A message was posted.
    Message {
        /// The message.
        message: SpaceMessage,
    },
    /// Text an agent is generating for the space, as it streams.
    Delta {
        /// Groups the deltas of one message being written.
        stream_id: String,
        /// The writing agent.
        sender: Sender,
        /// The next piece of text.
        delta: String,
    },
    /// What an agent is doing (`thinking`, `tool`, `idle`), for "who is typing".
    Activity {
        /// The agent.
        sender: Sender,
        /// `thinking`, `tool`, `tool_result` (a `visible` tool's arguments and result as JSON
        /// in `detail`), `idle` or `error` (the cycle failed; see `detail`).
        activity: String,
        /// The tool being run, for `tool`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tool: Option<String>,
        /// For `error`: what failed and what happens next (a retry, or giving up); for
        /// `tool_result`: `{"arguments", "result"}` as JSON, secrets masked.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        detail: Option<String>,
    },
    /// An agent asks the space's members about a call (issue 14): to approve or deny it, or
    /// to answer an interactive tool. Answered at `POST /v1/spaces/{ns}/{space}/tool-calls/{call_id}`.
    ToolRequest {
        /// The asking agent.
        sender: Sender,
        /// The call to answer.
        call_id: String,
        /// The tool.
        tool: String,
        /// `approval` or `interactive`.
        kind: CallKind,
        /// The call's arguments, secrets masked.
        arguments: serde_json::Value,
        /// What an interactive answer must match (JSON Schema), if the tool says.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        result_schema: Option<serde_json::Value>,
        /// When it was asked (ms since the epoch).
        since_ms: i64,
        /// When the request times out (ms since the epoch).
        expires_ms: i64,
    },
}

/// An agent's persisted conversation: the summary of what was compacted away, then the
/// messages of the window (model messages as JSON, opaque to the store).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Consciousness {
    /// Committed cycles.
    pub cycle: u64,
    /// Summary of the messages compacted out of the window.
    pub summary: Option<String>,
    /// The window's messages, oldest first.
    pub messages: Vec<String>,
    /// Sequence number of `messages[0]` in the agent's message log.
    pub start: u64,
    /// Estimated tokens of summary + messages.
    pub tokens: u64,
    /// Digest chained over every commit (`sha256:…`); empty before the first.
    pub digest: String,
    /// Model tokens used over the agent's life.
    pub tokens_used: u64,
    /// When the last cycle was committed (ms since the epoch).
    pub last_cycle_ms: Option<i64>,
    /// The last restore request applied (`spec.consciousness.restore`, `seedFrom`), so that
    /// each is applied once.
    pub restored: Option<String>,
}

/// An agent's whole consciousness after one cycle, with its notes: what an archived
/// checkpoint holds, and what a restore writes back.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// The consciousness.
    pub consciousness: Consciousness,
    /// Notes by kind: entries as stored (key → text; JSON for goals and plans).
    pub notes:
        std::collections::BTreeMap<super::NoteKind, std::collections::BTreeMap<String, String>>,
}

/// How archiving an agent's checkpoints goes, as its worker reports it (the operator writes
/// `status.checkpoint.archivedCycle`, `storageRef` and `CheckpointArchived` from it).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ArchiveReport {
    /// The newest archived cycle.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cycle: Option<u64>,
    /// Its object's URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Whether the last attempt succeeded.
    pub ok: bool,
    /// CamelCase: `Archived`, or why not (`StoreUnreachable`, …).
    pub reason: String,
    /// For people.
    pub message: String,
    /// Since when it is so (ms since the epoch).
    pub since_ms: i64,
}

/// The last restore, fork or recovery of an agent's consciousness, and how the last attempt
/// went, as its worker reports it (`status.restoredFrom`, the `Restored` condition). A
/// versioned record (see [`records`](super::records)).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RestoreReport {
    /// The record's format.
    #[serde(default, rename = "v", skip_serializing_if = "V1::implied")]
    pub v: V1,
    /// Whether the last attempt succeeded.
    pub ok: bool,
    /// CamelCase: `Restored`, `Seeded`, `Recovered`, or why not.
    pub reason: String,
    /// For people.
    pub message: String,
    /// When (ms since the epoch).
    pub since_ms: i64,
    /// The request last attempted (`cycle:40`, `seed:sre@latest`; none for a recovery).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<String>,
    /// What was last applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied: Option<Restored>,
}

/// A versioned checkpoint: the consciousness as it was after one cycle.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Checkpoint {
    /// The cycle it was taken after.
    pub cycle: u64,
    /// Sequence number of the window's first message.
    pub start: u64,
    /// Sequence number after the window's last message.
    pub end: u64,
    /// Cycle whose compaction wrote the summary in force, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary_cycle: Option<u64>,
    /// Content digest (`sha256:…`).
    pub digest: String,
    /// Messages in the window.
    pub messages: u64,
    /// Estimated tokens of summary + window.
    pub tokens: u64,
    /// When it was written (ms since the epoch).
    pub time_ms: i64,
}

/// What one committed cycle adds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CycleCommit {
    /// Messages the cycle appends (model messages as JSON).
    pub new_messages: Vec<String>,
    /// Compaction done at this commit: the window now starts at sequence `start` (counting
    /// the new messages), with `summary` covering what dropped out.
    pub compaction: Option<Compacted>,
    /// Estimated tokens of summary + window after the commit.
    pub tokens: u64,
    /// Model tokens the cycle used.
    pub cycle_tokens: u64,
    /// Checkpoints to keep (the oldest beyond are dropped, and so are log entries no
    /// retained checkpoint needs).
    pub checkpoints_retained: u32,
}

/// A compaction recorded by a commit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Compacted {
    /// New first sequence number of the window.
    pub start: u64,
    /// Summary of everything before `start`.
    pub summary: Option<String>,
}

/// A stored memory: a fact the agent keeps across cycles.
pub type Memories = std::collections::BTreeMap<String, String>;

/// A goal the agent works towards.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Goal {
    /// Stable id, chosen by the agent.
    pub id: String,
    /// What the goal is.
    #[serde(default)]
    pub description: String,
    /// `active`, `completed`, `blocked`, … (free text).
    #[serde(default)]
    pub status: String,
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

/// How the agent's model answered lately, as its worker reports it (written only when it
/// changes). The operator turns it into the Agent's `ModelAvailable` condition.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelHealth {
    /// The last model call succeeded.
    pub available: bool,
    /// CamelCase reason: `Available`, or what failed (`Unauthorized`, `Unreachable`, …).
    pub reason: String,
    /// What happened, without secrets.
    pub message: String,
    /// When it became so (ms since the epoch).
    pub since_ms: i64,
}

/// What the operator reads of one agent on every sweep (one round trip for all agents).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AgentObservation {
    /// Events waiting: inbox plus urgent queue.
    pub waiting: u64,
    /// Events taken by a cycle that has not been acknowledged.
    pub in_flight: u64,
    /// A cycle is under way.
    pub thinking: bool,
    /// A cycle waits for a human (its events in flight); idle for the scaler.
    pub paused: bool,
    /// A worker holds the agent's lease.
    pub worker: bool,
    /// The process that took the agent's lease last (a pod name in a cluster).
    pub host: Option<String>,
    /// Committed cycles.
    pub cycles: u64,
    /// Model tokens used over the agent's life.
    pub tokens_used: u64,
    /// When the last cycle was committed (ms since the epoch).
    pub last_cycle_ms: Option<i64>,
    /// The latest checkpoint.
    pub checkpoint: Option<Checkpoint>,
    /// The restore request last applied (see [`crate::crd::ConsciousnessSpec::pending`]).
    pub restored: Option<String>,
    /// Plans the agent made itself (`set_plans`), by name.
    pub plans: Vec<Plan>,
    /// Per plan id (`spec/NAME`, `agent/NAME`): the last due time handled (ms).
    pub plan_marks: std::collections::BTreeMap<String, i64>,
    /// How the model answered lately, once a worker has reported it.
    pub model: Option<ModelHealth>,
    /// The tools the worker has, once it has reported them.
    pub tools: Option<Vec<ToolRecord>>,
    /// Calls that wait for a human (approvals, interactive tools), oldest first.
    pub pending: Vec<super::RegisteredCall>,
    /// How archiving goes, once a worker has archived (or tried).
    pub archive: Option<ArchiveReport>,
    /// The last restore, fork or recovery, once a worker has done one (or tried).
    pub restore: Option<RestoreReport>,
    /// The tokens spent, once a model was called.
    pub tokens: Option<super::TokenSpend>,
}

/// Whether work waits for an agent: the part of [`AgentObservation`] a pool's sweep reads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AgentWork {
    /// Events waiting: inbox plus urgent queue.
    pub waiting: u64,
    /// Events taken by a cycle that has not been acknowledged.
    pub in_flight: u64,
    /// A cycle is under way.
    pub thinking: bool,
    /// A cycle waits for a human.
    pub paused: bool,
}

impl AgentWork {
    /// Something waits or is being worked on. Not while a cycle is paused for a human: until
    /// the answer (or the time to answer runs out, see [`AgentObservation::at`]) nothing can
    /// go on, and what arrives meanwhile waits, so its worker may go.
    pub fn busy(&self) -> bool {
        self.thinking || (!self.paused && (self.waiting > 0 || self.in_flight > 0))
    }
}

impl AgentObservation {
    /// Its [`AgentWork`].
    pub fn work(&self) -> AgentWork {
        AgentWork {
            waiting: self.waiting,
            in_flight: self.in_flight,
            thinking: self.thinking,
            paused: self.paused,
        }
    }

    /// See [`AgentWork::busy`].
    pub fn busy(&self) -> bool {
        self.work().busy()
    }

    /// The observation as the scaler weighs it at `now_ms`: a cycle paused for a human whose
    /// wait has ended (a call's time is up) is no longer just waiting: its worker must come
    /// back to tell the model.
    pub fn at(&self, now_ms: i64) -> AgentObservation {
        let mut o = self.clone();
        if o.paused && o.pending.iter().any(|c| c.record.expires_ms <= now_ms) {
            o.paused = false;
        }
        o
    }
}
