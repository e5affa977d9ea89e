//! The data plane: every key and every command lives behind the [`Store`] trait.
//!
//! Two implementations: [`RedisStore`] (production, one Redis or a Redis Cluster) and
//! [`MemoryStore`] (embedded, for `agentfleet dev` and unit tests). One test suite runs against
//! both.
//!
//! What the store holds so far:
//! - **Space membership**: for every Space, its resolved members (agents and humans), derived
//!   from the manifests by [`crate::membership::derive`] and applied idempotently.

mod memory;
mod redis;

pub use self::memory::MemoryStore;
pub use self::redis::{redact_url, RedisStore};

use async_trait::async_trait;

use crate::crd::ResolvedMember;
use crate::membership::SpaceKey;

/// Why a store operation failed. The text never carries credentials.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The store could not be reached or refused the command.
    #[error("redis {op}: {source}")]
    Redis {
        /// What the store was doing.
        op: &'static str,
        /// The driver's error.
        #[source]
        source: ::redis::RedisError,
    },
    /// The store did not answer in time.
    #[error("redis {op}: no answer within {seconds}s")]
    Timeout {
        /// What the store was doing.
        op: &'static str,
        /// The time limit.
        seconds: u64,
    },
    /// A stored value could not be decoded.
    #[error("decoding {what}: {source}")]
    Decode {
        /// The value being decoded.
        what: String,
        /// The decoder's error.
        #[source]
        source: serde_json::Error,
    },
    /// The store's address is not usable.
    #[error("invalid redis URL: {0}")]
    InvalidUrl(String),
}

impl StoreError {
    /// A bounded label for metrics.
    pub fn category(&self) -> &'static str {
        match self {
            StoreError::Redis { .. } => "store_unavailable",
            StoreError::Timeout { .. } => "store_timeout",
            StoreError::Decode { .. } => "store_decode",
            StoreError::InvalidUrl(_) => "store_config",
        }
    }
}

/// The data plane's operations.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// Checks that the store answers.
    async fn ping(&self) -> Result<(), StoreError>;

    /// Sets the members of a space. Idempotent: returns whether anything changed.
    async fn apply_space_members(
        &self,
        space: &SpaceKey,
        members: &[ResolvedMember],
    ) -> Result<bool, StoreError>;

    /// The members of a space, or `None` when the store knows no such space.
    async fn space_members(
        &self,
        space: &SpaceKey,
    ) -> Result<Option<Vec<ResolvedMember>>, StoreError>;

    /// Forgets a space's membership. Returns whether there was any.
    async fn remove_space(&self, space: &SpaceKey) -> Result<bool, StoreError>;

    /// Every space the store holds membership for, sorted.
    async fn spaces(&self) -> Result<Vec<SpaceKey>, StoreError>;
}

#[cfg(test)]
mod suite;
