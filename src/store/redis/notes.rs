//! An agent's notes on Redis: one hash per [`NoteKind`], written by `notes.lua` (fenced).

use std::collections::BTreeMap;

use async_trait::async_trait;
use redis::AsyncCommands;

use super::keys::AgentKeys;
use super::scripts::{self, NotesWrite};
use super::{redis_err, RedisStore};
use crate::identity::AgentKey;
use crate::store::{Lease, NoteKind, Notes, StoreError};

#[async_trait]
impl Notes for RedisStore {
    async fn set_notes(
        &self,
        agent: &AgentKey,
        lease: &Lease,
        kind: NoteKind,
        entries: &[(String, String)],
    ) -> Result<(), StoreError> {
        let mut conn = self.conns.shared().await?;
        let keys = AgentKeys::new(agent);
        scripts::notes(&mut conn, &keys, lease, kind, NotesWrite::Set(entries)).await?;
        Ok(())
    }

    async fn delete_notes(
        &self,
        agent: &AgentKey,
        lease: &Lease,
        kind: NoteKind,
        keys: &[String],
    ) -> Result<u64, StoreError> {
        let mut conn = self.conns.shared().await?;
        let agent = AgentKeys::new(agent);
        scripts::notes(&mut conn, &agent, lease, kind, NotesWrite::Delete(keys)).await
    }

    async fn notes(
        &self,
        agent: &AgentKey,
        kind: NoteKind,
    ) -> Result<BTreeMap<String, String>, StoreError> {
        let mut conn = self.conns.shared().await?;
        conn.hgetall(AgentKeys::new(agent).notes(kind))
            .await
            .map_err(redis_err(kind.read_op()))
    }
}
