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
        let now = crate::store::now_ms();
        Ok(self.with(|s| {
            // A conversation past its time is gone: this one starts afresh.
            if s.conversations.get(space).is_some_and(|c| c.2 <= now) {
                s.conversations.remove(space);
                s.spaces.remove(space);
                s.logs.remove(space);
            }
            let changed = s.spaces.get(space) != Some(record);
            if changed {
                s.spaces.insert(space.clone(), record.clone());
            }
            changed
        }))
    }

    async fn space(&self, space: &SpaceKey) -> Result<Option<SpaceRecord>, StoreError> {
        let now = crate::store::now_ms();
        Ok(self.with(|s| {
            let expired = s
                .conversations
                .get(space)
                .is_some_and(|(_, _, until)| *until <= now);
            s.spaces.get(space).filter(|_| !expired).cloned()
        }))
    }

    async fn remove_space(&self, space: &SpaceKey) -> Result<bool, StoreError> {
        Ok(self.with(|s| s.spaces.remove(space).is_some()))
    }

    async fn spaces(&self) -> Result<Vec<SpaceKey>, StoreError> {
        Ok(self.with(|s| {
            s.spaces
                .keys()
                .filter(|k| !k.is_conversation())
                .cloned()
                .collect()
        }))
    }

    async fn keep_conversation(
        &self,
        agent: &AgentKey,
        owner: &str,
        space: &SpaceKey,
        until_ms: i64,
        _posted: Option<&str>,
    ) -> Result<i64, StoreError> {
        let now = crate::store::now_ms();
        Ok(self.with(|s| {
            let past: Vec<SpaceKey> = s
                .conversations
                .iter()
                .filter(|(_, (a, _, until))| a == agent && *until <= now)
                .map(|(k, _)| k.clone())
                .collect();
            for k in past {
                s.conversations.remove(&k);
                s.spaces.remove(&k);
                s.logs.remove(&k);
            }
            s.conversations
                .entry(space.clone())
                .or_insert_with(|| (agent.clone(), owner.to_string(), until_ms))
                .2
        }))
    }

    async fn conversations(
        &self,
        agent: &AgentKey,
        owner: &str,
    ) -> Result<Vec<SpaceKey>, StoreError> {
        let now = crate::store::now_ms();
        Ok(self.with(|s| {
            s.conversations
                .iter()
                .filter(|(_, (a, o, until))| a == agent && o == owner && *until > now)
                .map(|(k, _)| k.clone())
                .collect()
        }))
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
