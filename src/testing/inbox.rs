//! Waiting for an agent's next batch in tests. The store has no blocking wait: a worker learns
//! of new events by its wake signals and takes them with [`Inbox::take_inbox`]; a test that
//! expects events soon looks until they are there.

use std::time::Duration;

use async_trait::async_trait;

use crate::identity::AgentKey;
use crate::store::{Inbox, InboxEvent, Lease, StoreError};

/// [`Inbox::take_inbox`] until it gives something, for at most `timeout` (then empty).
#[async_trait]
pub trait WaitInbox {
    /// The agent's next batch once there is one (the events in flight first), or empty after
    /// `timeout`. Fenced, as `take_inbox` is.
    async fn wait_inbox(
        &self,
        agent: &AgentKey,
        lease: &Lease,
        timeout: Duration,
    ) -> Result<Vec<InboxEvent>, StoreError>;
}

#[async_trait]
impl<S: Inbox + ?Sized> WaitInbox for S {
    async fn wait_inbox(
        &self,
        agent: &AgentKey,
        lease: &Lease,
        timeout: Duration,
    ) -> Result<Vec<InboxEvent>, StoreError> {
        let until = tokio::time::Instant::now() + timeout;
        loop {
            let events = self.take_inbox(agent, lease).await?;
            if !events.is_empty() || tokio::time::Instant::now() >= until {
                return Ok(events);
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}
