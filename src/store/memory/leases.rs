//! The lease of an agent in memory.

use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;

use super::MemoryStore;
use crate::identity::AgentKey;
use crate::store::{Lease, Leases, Pushed, StoreError};

#[async_trait]
impl Leases for MemoryStore {
    async fn acquire_lease(
        &self,
        agent: &AgentKey,
        holder: &str,
        ttl: Duration,
    ) -> Result<Option<Lease>, StoreError> {
        Ok(self.agent(agent, |a| {
            let expires = Instant::now() + ttl;
            match a.lease_holder() {
                Some((h, token)) if h == holder => {
                    a.lease = Some((holder.to_string(), token, expires));
                    Some(Lease {
                        holder: holder.to_string(),
                        token,
                    })
                }
                Some(_) => None,
                None => {
                    a.fence += 1;
                    a.lease = Some((holder.to_string(), a.fence, expires));
                    a.host = Some(holder.to_string());
                    Some(Lease {
                        holder: holder.to_string(),
                        token: a.fence,
                    })
                }
            }
        }))
    }

    async fn renew_lease(
        &self,
        agent: &AgentKey,
        lease: &Lease,
        ttl: Duration,
    ) -> Result<bool, StoreError> {
        Ok(self.agent(agent, |a| {
            if a.check(agent, lease).is_ok() {
                a.lease = Some((lease.holder.clone(), lease.token, Instant::now() + ttl));
                true
            } else {
                false
            }
        }))
    }

    async fn release_lease(&self, agent: &AgentKey, lease: &Lease) -> Result<(), StoreError> {
        let left_work = self.agent(agent, |a| {
            if a.check(agent, lease).is_err() {
                return false;
            }
            a.lease = None;
            // A cycle paused for a human goes on only on its answer, which wakes the agent.
            let left = !(a.inbox.is_empty() && a.urgent.is_empty() && a.inflight.is_empty());
            left && !a.paused
        });
        self.wake(
            agent,
            Pushed {
                queued: false,
                woke: left_work,
            },
        );
        Ok(())
    }
}
