//! Space membership and registered Agents in memory.

use async_trait::async_trait;

use super::MemoryStore;
use crate::identity::AgentKey;
use crate::identity::SpaceKey;
use crate::store::{A2aRecord, AgentFacts, SpaceRecord, Spaces, StoreError};

#[async_trait]
impl Spaces for MemoryStore {
    async fn apply_space(
        &self,
        space: &SpaceKey,
        record: &SpaceRecord,
    ) -> Result<bool, StoreError> {
        Ok(self.with(|s| {
            let changed = s.spaces.get(space) != Some(record);
            if changed {
                s.spaces.insert(space.clone(), record.clone());
            }
            changed
        }))
    }

    async fn space(&self, space: &SpaceKey) -> Result<Option<SpaceRecord>, StoreError> {
        Ok(self.with(|s| s.spaces.get(space).cloned()))
    }

    async fn remove_space(&self, space: &SpaceKey) -> Result<bool, StoreError> {
        Ok(self.with(|s| s.spaces.remove(space).is_some()))
    }

    async fn spaces(&self) -> Result<Vec<SpaceKey>, StoreError> {
        Ok(self.with(|s| s.spaces.keys().cloned().collect()))
    }

    async fn register_agent(&self, agent: &AgentKey) -> Result<bool, StoreError> {
        Ok(self.with(|s| s.registered.insert(agent.clone())))
    }

    async fn unregister_agent(&self, agent: &AgentKey) -> Result<bool, StoreError> {
        Ok(self.with(|s| s.registered.remove(agent)))
    }

    async fn agent_registered(&self, agent: &AgentKey) -> Result<bool, StoreError> {
        Ok(self.with(|s| s.registered.contains(agent)))
    }

    async fn apply_a2a(
        &self,
        agent: &AgentKey,
        record: Option<&A2aRecord>,
    ) -> Result<bool, StoreError> {
        Ok(self.agent(agent, |a| {
            let changed = a.a2a.as_ref() != record;
            a.a2a = record.cloned();
            changed
        }))
    }

    async fn a2a(&self, agent: &AgentKey) -> Result<Option<A2aRecord>, StoreError> {
        Ok(self.agent(agent, |a| a.a2a.clone()))
    }

    async fn apply_facts(&self, agent: &AgentKey, facts: &AgentFacts) -> Result<bool, StoreError> {
        Ok(self.agent(agent, |a| {
            let changed = a.facts.as_ref() != Some(facts);
            a.facts = Some(facts.clone());
            changed
        }))
    }

    async fn facts(&self, agent: &AgentKey) -> Result<Option<AgentFacts>, StoreError> {
        Ok(self.agent(agent, |a| a.facts.clone()))
    }
}
