//! What an agent keeps for itself across cycles — memories, goals and the plans it made —
//! through one keyed, fenced API.

use std::collections::BTreeMap;

use async_trait::async_trait;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::{Lease, Plan, StoreError};
use crate::identity::AgentKey;

/// One of an agent's keyed note collections.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum NoteKind {
    /// Facts, key → text.
    Memories,
    /// Goals by id, stored as JSON [`Goal`]s.
    Goals,
    /// Plans the agent made, by name, stored as JSON [`Plan`]s.
    Plans,
}

impl NoteKind {
    /// `memories`, `goals` or `plans`.
    pub fn as_str(self) -> &'static str {
        match self {
            NoteKind::Memories => "memories",
            NoteKind::Goals => "goals",
            NoteKind::Plans => "plans",
        }
    }

    /// The kind [`NoteKind::as_str`] names.
    pub fn parse(s: &str) -> Option<Self> {
        [NoteKind::Memories, NoteKind::Goals, NoteKind::Plans]
            .into_iter()
            .find(|k| k.as_str() == s)
    }

    /// What reading the collection is called in errors.
    pub(super) fn read_op(self) -> &'static str {
        match self {
            NoteKind::Memories => "read memories",
            NoteKind::Goals => "read goals",
            NoteKind::Plans => "read plans",
        }
    }

    /// One entry, in errors.
    fn entry(self) -> &'static str {
        match self {
            NoteKind::Memories => "memory",
            NoteKind::Goals => "goal",
            NoteKind::Plans => "plan",
        }
    }
}

/// An agent's notes: per [`NoteKind`], entries by key, each a text (JSON for goals and plans).
/// Writes are fenced: only the lease holder writes.
#[async_trait]
pub trait Notes: Send + Sync {
    /// Stores `entries` (key, text) in the `kind` collection, replacing those of the same
    /// key. Fenced.
    async fn set_notes(
        &self,
        agent: &AgentKey,
        lease: &Lease,
        kind: NoteKind,
        entries: &[(String, String)],
    ) -> Result<(), StoreError>;

    /// Removes entries of the `kind` collection by key; returns how many existed. Fenced.
    async fn delete_notes(
        &self,
        agent: &AgentKey,
        lease: &Lease,
        kind: NoteKind,
        keys: &[String],
    ) -> Result<u64, StoreError>;

    /// The entries of the `kind` collection, by key.
    async fn notes(
        &self,
        agent: &AgentKey,
        kind: NoteKind,
    ) -> Result<BTreeMap<String, String>, StoreError>;

    /// Stores memories (upsert by key). Fenced.
    async fn set_memories(
        &self,
        agent: &AgentKey,
        lease: &Lease,
        memories: &Memories,
    ) -> Result<(), StoreError> {
        let entries: Vec<(String, String)> = memories
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        self.set_notes(agent, lease, NoteKind::Memories, &entries)
            .await
    }

    /// Removes memories by key; returns how many existed. Fenced.
    async fn delete_memories(
        &self,
        agent: &AgentKey,
        lease: &Lease,
        keys: &[String],
    ) -> Result<u64, StoreError> {
        self.delete_notes(agent, lease, NoteKind::Memories, keys)
            .await
    }

    /// The agent's memories.
    async fn memories(&self, agent: &AgentKey) -> Result<Memories, StoreError> {
        self.notes(agent, NoteKind::Memories).await
    }

    /// Stores goals (upsert by id). Fenced.
    async fn set_goals(
        &self,
        agent: &AgentKey,
        lease: &Lease,
        goals: &[Goal],
    ) -> Result<(), StoreError> {
        let entries = encode(NoteKind::Goals, goals, |g| &g.id)?;
        self.set_notes(agent, lease, NoteKind::Goals, &entries)
            .await
    }

    /// The agent's goals, by id.
    async fn goals(&self, agent: &AgentKey) -> Result<Vec<Goal>, StoreError> {
        let raw = self.notes(agent, NoteKind::Goals).await?;
        decode(agent, NoteKind::Goals, &raw)
    }

    /// Stores plans the agent made (upsert by name). Fenced.
    async fn set_plans(
        &self,
        agent: &AgentKey,
        lease: &Lease,
        plans: &[Plan],
    ) -> Result<(), StoreError> {
        let entries = encode(NoteKind::Plans, plans, |p| &p.name)?;
        self.set_notes(agent, lease, NoteKind::Plans, &entries)
            .await
    }

    /// Removes plans the agent made, by name; returns how many existed. Fenced.
    async fn cancel_plans(
        &self,
        agent: &AgentKey,
        lease: &Lease,
        names: &[String],
    ) -> Result<u64, StoreError> {
        self.delete_notes(agent, lease, NoteKind::Plans, names)
            .await
    }

    /// The plans the agent made, by name.
    async fn plans(&self, agent: &AgentKey) -> Result<Vec<Plan>, StoreError> {
        let raw = self.notes(agent, NoteKind::Plans).await?;
        decode(agent, NoteKind::Plans, &raw)
    }
}

/// `(key, JSON)` of each item.
fn encode<T: Serialize>(
    kind: NoteKind,
    items: &[T],
    key: impl Fn(&T) -> &str,
) -> Result<Vec<(String, String)>, StoreError> {
    items
        .iter()
        .map(|item| {
            let json = serde_json::to_string(item).map_err(|source| StoreError::Decode {
                what: format!("{} {}", kind.entry(), key(item)),
                source,
            })?;
            Ok((key(item).to_string(), json))
        })
        .collect()
}

/// The JSON entries of a collection, decoded in key order.
fn decode<T: DeserializeOwned>(
    agent: &AgentKey,
    kind: NoteKind,
    raw: &BTreeMap<String, String>,
) -> Result<Vec<T>, StoreError> {
    raw.values()
        .map(|json| {
            serde_json::from_str(json).map_err(|source| StoreError::Decode {
                what: format!("a {} of agent {agent}", kind.entry()),
                source,
            })
        })
        .collect()
}

/// The plans among `entries` that decode (an entry the store wrote itself but cannot read
/// is left out rather than failing a whole observation).
pub(super) fn readable_plans<'a>(entries: impl IntoIterator<Item = &'a String>) -> Vec<Plan> {
    entries
        .into_iter()
        .filter_map(|p| serde_json::from_str(p).ok())
        .collect()
}

/// A stored memory: a fact the agent keeps across cycles.
pub type Memories = std::collections::BTreeMap<String, String>;

/// A goal the agent works towards.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Goal {
    /// Stable id, chosen by the agent.
    pub id: String,
    /// What the goal is.
    #[serde(default)]
    pub description: String,
    /// `active`, `completed`, `blocked`, … (free text).
    #[serde(default)]
    pub status: String,
}
