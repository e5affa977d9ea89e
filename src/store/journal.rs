//! The journal of the cycle under way: what the cycle did so far (the model's turns, the
//! results of its tool calls, a mark before each call whose effect must not be repeated),
//! written before the next step, so that a cycle redone after a crash replays what was done
//! instead of doing it again. Entries are opaque to the store (the worker writes and reads
//! them); they go when the cycle ends: with its commit, or its acknowledgement (`skip`).

use async_trait::async_trait;

use super::{Lease, StoreError};
use crate::identity::AgentKey;

/// The journal of an agent's cycle under way.
#[async_trait]
pub trait Journal: Send + Sync {
    /// Appends entries, in order. Fenced.
    async fn append_journal(
        &self,
        agent: &AgentKey,
        lease: &Lease,
        entries: &[String],
    ) -> Result<(), StoreError>;

    /// The journal of the cycle under way, oldest entry first (empty when none is).
    async fn journal(&self, agent: &AgentKey) -> Result<Vec<String>, StoreError>;
}
