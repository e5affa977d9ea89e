//! The embedded in-memory store, for `agentfleet dev` and unit tests.

use std::collections::BTreeMap;
use std::sync::Mutex;

use async_trait::async_trait;

use super::{Store, StoreError};
use crate::crd::ResolvedMember;
use crate::membership::SpaceKey;

/// A [`Store`] held in this process's memory.
#[derive(Default)]
pub struct MemoryStore {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    members: BTreeMap<SpaceKey, Vec<ResolvedMember>>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn with<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        // A panic while holding the lock cannot leave `State` half-updated (every mutation is a
        // single map operation), so a poisoned lock is safe to keep using.
        let mut guard = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        f(&mut guard)
    }
}

#[async_trait]
impl Store for MemoryStore {
    async fn ping(&self) -> Result<(), StoreError> {
        Ok(())
    }

    async fn apply_space_members(
        &self,
        space: &SpaceKey,
        members: &[ResolvedMember],
    ) -> Result<bool, StoreError> {
        Ok(self.with(|s| {
            let changed = s.members.get(space).map(Vec::as_slice) != Some(members);
            if changed {
                s.members.insert(space.clone(), members.to_vec());
            }
            changed
        }))
    }

    async fn space_members(
        &self,
        space: &SpaceKey,
    ) -> Result<Option<Vec<ResolvedMember>>, StoreError> {
        Ok(self.with(|s| s.members.get(space).cloned()))
    }

    async fn remove_space(&self, space: &SpaceKey) -> Result<bool, StoreError> {
        Ok(self.with(|s| s.members.remove(space).is_some()))
    }

    async fn spaces(&self) -> Result<Vec<SpaceKey>, StoreError> {
        Ok(self.with(|s| s.members.keys().cloned().collect()))
    }
}
