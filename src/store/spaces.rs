//! Space membership and the registry of Agents.

use async_trait::async_trait;

use super::StoreError;
use super::{LoopGuard, Member, MemberKind, Sender, V1};
use crate::identity::AgentKey;
use crate::identity::SpaceKey;
use serde::{Deserialize, Serialize};

/// What the data plane knows of spaces (their members) and of which Agents exist.
#[async_trait]
pub trait Spaces: Send + Sync {
    /// Sets what the data plane knows of a space (members, display name, retention).
    /// Idempotent: returns whether anything changed.
    async fn apply_space(&self, space: &SpaceKey, record: &SpaceRecord)
        -> Result<bool, StoreError>;

    /// What the data plane knows of a space, or `None` when it knows no such space.
    async fn space(&self, space: &SpaceKey) -> Result<Option<SpaceRecord>, StoreError>;

    /// Forgets a space's membership. Returns whether there was any.
    async fn remove_space(&self, space: &SpaceKey) -> Result<bool, StoreError>;

    /// Every space the store holds membership for, sorted (A2A conversations are indexed by
    /// their agent instead: [`Spaces::conversations`]).
    async fn spaces(&self) -> Result<Vec<SpaceKey>, StoreError>;

    /// Keeps A2A conversation `space` of `agent` with `owner` (`KIND:ID`) until `until_ms`,
    /// or until the time it was first kept until (a conversation lasts from its first
    /// message): indexed for its owner, and gone with everything in it at that time — its
    /// record, its log and, when `posted` names the scoped idempotency key of a post just
    /// made in it, that key (so a `messageId` sent again later is a new message). Forgets the
    /// agent's conversations past their time. Returns the time it lasts until. Idempotent.
    async fn keep_conversation(
        &self,
        agent: &AgentKey,
        owner: &str,
        space: &SpaceKey,
        until_ms: i64,
        posted: Option<&str>,
    ) -> Result<i64, StoreError>;

    /// The conversations of `agent` with `owner` that have not expired.
    async fn conversations(
        &self,
        agent: &AgentKey,
        owner: &str,
    ) -> Result<Vec<SpaceKey>, StoreError>;

    /// Records that an Agent exists (the operator does, for every Agent it reconciles), so
    /// producers such as the gateway's webhook can tell a real agent from a typo. Returns
    /// whether it was new.
    async fn register_agent(&self, agent: &AgentKey) -> Result<bool, StoreError>;

    /// Forgets that an Agent exists. Returns whether it was registered.
    async fn unregister_agent(&self, agent: &AgentKey) -> Result<bool, StoreError>;

    /// Whether an Agent is registered.
    async fn agent_registered(&self, agent: &AgentKey) -> Result<bool, StoreError>;

    /// Sets what the gateway serves of an agent over A2A (`None`: nothing). Idempotent:
    /// returns whether anything changed. Forgotten with the agent's data.
    async fn apply_a2a(
        &self,
        agent: &AgentKey,
        record: Option<&A2aRecord>,
    ) -> Result<bool, StoreError>;

    /// What the gateway serves of an agent over A2A, if anything.
    async fn a2a(&self, agent: &AgentKey) -> Result<Option<A2aRecord>, StoreError>;

    /// Sets what the data plane knows of an agent's spec and health that only the control
    /// plane can tell (its model, its budget, why it cannot run). Idempotent: returns whether
    /// anything changed. Forgotten with the agent's data.
    async fn apply_facts(&self, agent: &AgentKey, facts: &AgentFacts) -> Result<bool, StoreError>;

    /// What the data plane knows of an agent's spec, once the operator (or `dev`) wrote it.
    async fn facts(&self, agent: &AgentKey) -> Result<Option<AgentFacts>, StoreError>;
}

/// What the data plane knows of an Agent from its spec and its reconcile, for readers that
/// see only the data plane (the gateway: the console's agent page, A2A's budget check).
/// Applied by the operator and `agentfleet dev`. A versioned record (see
/// [`records`](super::records)).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentFacts {
    /// The record's format.
    #[serde(default, rename = "v", skip_serializing_if = "V1::implied")]
    pub v: V1,
    /// Who serves its model (`openai`, `anthropic`, `scripted`).
    pub model_provider: String,
    /// The model's name as the provider knows it.
    pub model_name: String,
    /// Its budget (`spec.budget`): tokens per UTC day.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_per_day: Option<u64>,
    /// As `tokens_per_day`, per UTC month.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_per_month: Option<u64>,
    /// `spec.paused`: events wait until it is resumed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub suspended: bool,
    /// Why it cannot run (its `Ready` condition's message), when it cannot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
    /// The Pool that runs it (`spec.runtime.pool`), if one does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,
}

impl AgentFacts {
    /// Its budget.
    pub fn budget(&self) -> crate::crd::BudgetSpec {
        crate::crd::BudgetSpec {
            tokens_per_day: self.tokens_per_day,
            tokens_per_month: self.tokens_per_month,
        }
    }
}

/// What the gateway serves of an agent over A2A: from `spec.a2a` (enabled), applied by the
/// operator and `agentfleet dev`. A versioned record (see [`records`](super::records)).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct A2aRecord {
    /// The record's format.
    #[serde(default, rename = "v", skip_serializing_if = "V1::implied")]
    pub v: V1,
    /// What the agent does.
    pub description: String,
    /// The skills its card lists (at least one).
    pub skills: Vec<A2aSkill>,
    /// Who may send it messages: `human:ID`, `service:ID` or `*`.
    #[serde(default)]
    pub callers: Vec<String>,
    /// The agent's version as its card says (the Agent's generation).
    pub version: String,
    /// `spec.cycle.maxChainDepth`: a message claiming a chain this deep or deeper is refused
    /// ([`crate::party::depth`]).
    #[serde(default = "default_max_chain_depth")]
    pub max_chain_depth: u32,
    /// `spec.a2a.conversationSeconds`: how long a conversation lasts from its first message
    /// (also read by the step that writes receipts, which keeps them at least this long).
    #[serde(default = "default_conversation_seconds")]
    pub conversation_seconds: u64,
}

/// How long an A2A conversation lasts by default (7 days), and its tasks' receipts at least.
pub const CONVERSATION_SECONDS: u64 = 7 * 24 * 3600;

fn default_conversation_seconds() -> u64 {
    CONVERSATION_SECONDS
}

fn default_max_chain_depth() -> u32 {
    crate::crd::CycleSpec::default().max_chain_depth
}

/// A skill of an agent's card.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct A2aSkill {
    /// Unique in the card.
    pub id: String,
    /// For people.
    pub name: String,
    /// What it does.
    pub description: String,
    /// Keywords.
    #[serde(default)]
    pub tags: Vec<String>,
    /// Example requests.
    #[serde(default)]
    pub examples: Vec<String>,
}

impl A2aRecord {
    /// Whether the caller `kind:id` (`human`, `service`) may send the agent messages.
    pub fn admits(&self, kind: &str, id: &str) -> bool {
        self.callers
            .iter()
            .any(|c| c == "*" || c.split_once(':').is_some_and(|(k, i)| k == kind && i == id))
    }
}

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
    /// Groups whose every person is a member (`Space.spec.members` of kind `Group`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
    /// The most messages its log keeps.
    pub max_messages: u64,
    /// The most bytes of text a message posted in it may have.
    #[serde(
        default = "default_max_message_bytes",
        skip_serializing_if = "is_default_max_message_bytes"
    )]
    pub max_message_bytes: u64,
    /// When agents' messages stop waking other agents.
    #[serde(default)]
    pub loop_guard: LoopGuard,
    /// For an A2A conversation's space: the caller's `contextId`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_id: Option<String>,
}

fn default_max_message_bytes() -> u64 {
    super::DEFAULT_MAX_MESSAGE_BYTES
}

/// A record with the default bound is written as the release before wrote it.
fn is_default_max_message_bytes(n: &u64) -> bool {
    *n == super::DEFAULT_MAX_MESSAGE_BYTES
}

impl SpaceRecord {
    /// Whether an agent of this name is a member.
    pub fn has_agent(&self, name: &str) -> bool {
        self.members
            .iter()
            .any(|m| m.kind == MemberKind::Agent && m.id == name)
    }

    /// Whether `sender` may read and post here: a member of the same kind and id, or a person
    /// in one of the space's groups (a service or the system never is). The one admission rule
    /// of the gateway, the tools and the stores.
    pub fn admits(&self, sender: &Sender) -> bool {
        self.members
            .iter()
            .any(|m| Some(m.kind) == sender.kind && m.id == sender.id)
            || (sender.kind == Some(MemberKind::Human)
                && sender.groups.iter().any(|g| self.groups.contains(g)))
    }

    /// Names of the member agents.
    pub fn agents(&self) -> impl Iterator<Item = &str> {
        self.members
            .iter()
            .filter(|m| m.kind == MemberKind::Agent)
            .map(|m| m.id.as_str())
    }
}
