//! The lease of an agent on Redis.

use std::time::Duration;

use async_trait::async_trait;

use super::keys::AgentKeys;
use super::{millis, scripts, RedisStore};
use crate::identity::AgentKey;
use crate::store::{Lease, Leases, StoreError};

#[async_trait]
impl Leases for RedisStore {
    async fn acquire_lease(
        &self,
        agent: &AgentKey,
        holder: &str,
        ttl: Duration,
    ) -> Result<Option<Lease>, StoreError> {
        let mut conn = self.conns.shared().await?;
        let token =
            scripts::acquire(&mut conn, &AgentKeys::new(agent), holder, millis(ttl)).await?;
        Ok(token.map(|token| Lease {
            holder: holder.to_string(),
            token,
        }))
    }

    async fn renew_lease(
        &self,
        agent: &AgentKey,
        lease: &Lease,
        ttl: Duration,
    ) -> Result<bool, StoreError> {
        let mut conn = self.conns.shared().await?;
        scripts::renew(&mut conn, &AgentKeys::new(agent), lease, millis(ttl)).await
    }

    async fn release_lease(&self, agent: &AgentKey, lease: &Lease) -> Result<(), StoreError> {
        let mut conn = self.conns.shared().await?;
        scripts::release(&mut conn, &AgentKeys::new(agent), lease).await?;
        Ok(())
    }
}
