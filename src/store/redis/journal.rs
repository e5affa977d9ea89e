//! The cycle's journal on Redis: one list per agent, appended by `journal.lua` (fenced) and
//! dropped by `commit.lua` and `ack.lua`.

use async_trait::async_trait;
use redis::AsyncCommands;

use super::keys::AgentKeys;
use super::scripts;
use super::{redis_err, RedisStore};
use crate::store::{AgentKey, Journal, Lease, StoreError};

#[async_trait]
impl Journal for RedisStore {
    async fn append_journal(
        &self,
        agent: &AgentKey,
        lease: &Lease,
        entries: &[String],
    ) -> Result<(), StoreError> {
        let mut conn = self.conns.shared().await?;
        scripts::journal(&mut conn, &AgentKeys::new(agent), lease, entries).await
    }

    async fn journal(&self, agent: &AgentKey) -> Result<Vec<String>, StoreError> {
        let mut conn = self.conns.shared().await?;
        conn.lrange(AgentKeys::new(agent).journal(), 0, -1)
            .await
            .map_err(redis_err("read the cycle's journal"))
    }
}
