//! An agent's notes in memory: one map per [`NoteKind`].

use std::collections::BTreeMap;

use async_trait::async_trait;

use super::MemoryStore;
use crate::identity::AgentKey;
use crate::store::{Lease, NoteKind, Notes, StoreError};

#[async_trait]
impl Notes for MemoryStore {
    async fn set_notes(
        &self,
        agent: &AgentKey,
        lease: &Lease,
        kind: NoteKind,
        entries: &[(String, String)],
    ) -> Result<(), StoreError> {
        self.agent(agent, |a| {
            a.check(agent, lease)?;
            a.notes
                .entry(kind)
                .or_default()
                .extend(entries.iter().cloned());
            Ok(())
        })
    }

    async fn delete_notes(
        &self,
        agent: &AgentKey,
        lease: &Lease,
        kind: NoteKind,
        keys: &[String],
    ) -> Result<u64, StoreError> {
        self.agent(agent, |a| {
            a.check(agent, lease)?;
            let notes = a.notes.entry(kind).or_default();
            Ok(keys.iter().filter(|k| notes.remove(*k).is_some()).count() as u64)
        })
    }

    async fn notes(
        &self,
        agent: &AgentKey,
        kind: NoteKind,
    ) -> Result<BTreeMap<String, String>, StoreError> {
        Ok(self.agent(agent, |a| a.notes.get(&kind).cloned().unwrap_or_default()))
    }
}
