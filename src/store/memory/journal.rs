//! The cycle's journal in memory (dropped by the cycle's commit or acknowledgement).

use async_trait::async_trait;

use super::MemoryStore;
use crate::identity::AgentKey;
use crate::store::{Journal, Lease, StoreError};

#[async_trait]
impl Journal for MemoryStore {
    async fn append_journal(
        &self,
        agent: &AgentKey,
        lease: &Lease,
        entries: &[String],
    ) -> Result<(), StoreError> {
        self.agent(agent, |a| {
            a.check(agent, lease)?;
            a.journal.extend(entries.iter().cloned());
            Ok(())
        })
    }

    async fn journal(&self, agent: &AgentKey) -> Result<Vec<String>, StoreError> {
        Ok(self.agent(agent, |a| a.journal.clone()))
    }
}
