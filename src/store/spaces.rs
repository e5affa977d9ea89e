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
