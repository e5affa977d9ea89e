//! The cycle's journal on Redis: one list per agent, appended by `journal.lua` (fenced) and
//! dropped by `commit.lua` and `ack.lua`. With writes that wait for replicas, an append is
//! acknowledged only once they have it: the journal says which effects are made, and a
//! failover that lost an entry would have the next worker make an effect again.

use async_trait::async_trait;
use redis::AsyncCommands;

use super::keys::AgentKeys;
use super::scripts;
use super::{redis_err, RedisStore};
use crate::identity::AgentKey;
use crate::store::{Journal, Lease, StoreError};

#[async_trait]
impl Journal for RedisStore {
    async fn append_journal(
        &self,
        agent: &AgentKey,
        lease: &Lease,
        entries: &[String],
    ) -> Result<(), StoreError> {
        let keys = AgentKeys::new(agent);
        let mut conn = self.conns.durable().await?;
        scripts::journal(&mut conn, &keys, lease, entries).await?;
        self.conns
            .replicated(&mut conn, &keys.journal(), "journal the cycle")
            .await
    }

    async fn journal(&self, agent: &AgentKey) -> Result<Vec<String>, StoreError> {
        let mut conn = self.conns.shared().await?;
        conn.lrange(AgentKeys::new(agent).journal(), 0, -1)
            .await
            .map_err(redis_err("read the cycle's journal"))
    }
}
