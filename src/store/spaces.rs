//! Space membership and the registry of Agents.

use async_trait::async_trait;

use super::{AgentKey, SpaceRecord, StoreError};
use crate::keys::SpaceKey;

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
