//! One worker per agent: the lease and its fencing token.

use std::time::Duration;

use async_trait::async_trait;

use super::StoreError;
use crate::identity::AgentKey;

/// A worker's hold on an agent. Every fenced step (taking events, acknowledging, committing,
/// writing notes) checks the caller's [`Lease`] first and fails with [`StoreError::Fenced`]
/// when another worker holds the agent.
#[async_trait]
pub trait Leases: Send + Sync {
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
