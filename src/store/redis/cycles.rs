//! An agent's cycle records on Redis: a hash of records by number and a list of their heads
//! (see `keys.rs`), kept by `lib/records.lua` in the script that ends the cycle.

use async_trait::async_trait;
use redis::AsyncCommands;

use super::keys::AgentKeys;
use super::scripts;
use super::{redis_err, RedisStore};
use crate::cycles::CycleHead;
use crate::identity::AgentKey;
use crate::store::cycles::page;
use crate::store::{CycleRecords, Lease, RecordWrite, StoreError};

#[async_trait]
impl CycleRecords for RedisStore {
    async fn record_cycle(
        &self,
        agent: &AgentKey,
        lease: &Lease,
        record: &RecordWrite,
    ) -> Result<u64, StoreError> {
        let mut conn = self.conns.shared().await?;
        scripts::record(&mut conn, &AgentKeys::new(agent), lease, record).await
    }

    async fn cycle_heads(
        &self,
        agent: &AgentKey,
        before: Option<u64>,
        limit: usize,
    ) -> Result<Vec<CycleHead>, StoreError> {
        let mut conn = self.conns.shared().await?;
        // Heads are small and at most `spec.cycle.records.keep` (1,000): read whole.
        let entries: Vec<String> = conn
            .lrange(AgentKeys::new(agent).record_heads(), 0, -1)
            .await
            .map_err(redis_err("read the cycle records"))?;
        Ok(page(entries.iter().map(String::as_str), before, limit))
    }

    async fn cycle_record(&self, agent: &AgentKey, seq: u64) -> Result<Option<String>, StoreError> {
        let mut conn = self.conns.shared().await?;
        conn.hget(AgentKeys::new(agent).records(), seq)
            .await
            .map_err(redis_err("read a cycle record"))
    }
}
