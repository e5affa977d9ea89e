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
