//! What the data plane carries: inbox events and the identities they name.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::crd::MemberKind;

/// An agent, by namespace and name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct AgentKey {
    /// Namespace of the Agent.
    pub namespace: String,
    /// Name of the Agent.
    pub name: String,
}

impl AgentKey {
    /// A key from its parts.
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    /// Parses `NS/NAME`.
    pub fn parse(s: &str) -> Option<Self> {
        let (ns, name) = s.split_once('/')?;
        (!ns.is_empty() && !name.is_empty() && !name.contains('/')).then(|| Self::new(ns, name))
    }
}

impl fmt::Display for AgentKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// What the data plane knows of a space: derived from its Space object and the Agents that
/// name it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SpaceRecord {
    /// Name shown to humans and agents.
    pub display_name: String,
    /// Agents, then humans.
    pub members: Vec<crate::crd::ResolvedMember>,
    /// The most messages its log keeps.
    pub max_messages: u64,
}

impl SpaceRecord {
    /// Whether an agent of this name is a member.
    pub fn has_agent(&self, name: &str) -> bool {
        self.members
            .iter()
            .any(|m| m.kind == MemberKind::Agent && m.id == name)
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
    /// Posting again with the same key returns the first message instead of a second one (and
    /// fans out nothing new), so a retried or re-run post never duplicates.
    pub idempotency_key: Option<String>,
    /// Deliver to the member agents as urgent events.
    pub urgent: bool,
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
}

/// The outcome of a post.
#[derive(Clone, Debug, PartialEq)]
pub struct Posted {
    /// The message (the first one, for a repeated idempotency key).
    pub id: String,
    /// An earlier post had the same idempotency key; nothing new was written.
    pub duplicate: bool,
    /// Agents whose inbox received the message.
    pub delivered: Vec<String>,
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
        /// `thinking`, `tool` or `idle`.
        activity: String,
        /// The tool being run, for `tool`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tool: Option<String>,
    },
}
