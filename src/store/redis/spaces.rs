//! Space membership and registered Agents on Redis.

use async_trait::async_trait;
use redis::AsyncCommands;

use super::keys::{agents_index, spaces_index, AgentKeys, SpaceKeys};
use super::{from_json, redis_err, to_json, RedisStore};
use crate::identity::AgentKey;
use crate::identity::SpaceKey;
use crate::store::{A2aRecord, AgentFacts, SpaceRecord, Spaces, StoreError};

#[async_trait]
impl Spaces for RedisStore {
    async fn apply_space(
        &self,
        space: &SpaceKey,
        record: &SpaceRecord,
    ) -> Result<bool, StoreError> {
        let keys = SpaceKeys::new(space);
        let json = to_json(|| format!("members of space {space}"), record)?;
        let mut conn = self.conns.shared().await?;
        let current: Option<String> = conn
            .get(keys.info())
            .await
            .map_err(redis_err("get space members"))?;
        let changed = current.as_deref() != Some(json.as_str());
        if changed {
            let agents: Vec<&str> = record.agents().collect();
            let mut tx = redis::pipe();
            tx.atomic()
                .set(keys.info(), &json)
                .ignore()
                .del(keys.agents())
                .ignore();
            if !agents.is_empty() {
                tx.sadd(keys.agents(), agents).ignore();
            }
            tx.query_async::<()>(&mut conn)
                .await
                .map_err(redis_err("set space members"))?;
        }
        // The index lives on another slot; adding to it is idempotent, so it is its own step.
        // A conversation is indexed by its agent (`keep_conversation`), and expires.
        if !space.is_conversation() {
            conn.sadd::<_, _, ()>(spaces_index(), space.to_string())
                .await
                .map_err(redis_err("index space"))?;
        }
        Ok(changed)
    }

    async fn space(&self, space: &SpaceKey) -> Result<Option<SpaceRecord>, StoreError> {
        let mut conn = self.conns.shared().await?;
        let json: Option<String> = conn
            .get(SpaceKeys::new(space).info())
            .await
            .map_err(redis_err("get space members"))?;
        json.map(|j| from_json(|| format!("members of space {space}"), &j))
            .transpose()
    }

    async fn remove_space(&self, space: &SpaceKey) -> Result<bool, StoreError> {
        let keys = SpaceKeys::new(space);
        let mut conn = self.conns.shared().await?;
        let (removed, _): (u64, u64) = redis::pipe()
            .atomic()
            .del(keys.info())
            .del(keys.agents())
            .query_async(&mut conn)
            .await
            .map_err(redis_err("remove space"))?;
        conn.srem::<_, _, ()>(spaces_index(), space.to_string())
            .await
            .map_err(redis_err("unindex space"))?;
        Ok(removed > 0)
    }

    async fn spaces(&self) -> Result<Vec<SpaceKey>, StoreError> {
        let mut conn = self.conns.shared().await?;
        let names: Vec<String> = conn
            .smembers(spaces_index())
            .await
            .map_err(redis_err("list spaces"))?;
        let mut keys: Vec<SpaceKey> = names
            .iter()
            .filter_map(|n| n.split_once('/'))
            .map(|(ns, name)| SpaceKey::new(ns, name))
            .collect();
        keys.sort();
        Ok(keys)
    }

    async fn keep_conversation(
        &self,
        agent: &AgentKey,
        owner: &str,
        space: &SpaceKey,
        until_ms: i64,
        posted: Option<&str>,
    ) -> Result<i64, StoreError> {
        let index = AgentKeys::new(agent).conversations();
        let member = format!("{owner} {}", space.name);
        let mut conn = self.conns.shared().await?;
        // Past ones go first, so a conversation that expired starts again from now.
        let (until,): (Option<f64>,) = redis::pipe()
            .atomic()
            .zrembyscore(&index, "-inf", crate::store::now_ms())
            .ignore()
            .zadd_options(
                &index,
                &member,
                until_ms,
                &redis::SortedSetAddOptions::add_only(),
            )
            .ignore()
            .zscore(&index, &member)
            .query_async(&mut conn)
            .await
            .map_err(redis_err("index conversation"))?;
        let until = until.map_or(until_ms, |u| u as i64);
        let keys = SpaceKeys::new(space);
        let mut expire = redis::pipe();
        expire.atomic();
        let mut all = vec![keys.info(), keys.agents(), keys.log()];
        if let Some(scoped) = posted {
            all.push(keys.idempotency(scoped));
        }
        for key in all {
            expire.pexpire_at(key, until).ignore();
        }
        expire
            .query_async::<()>(&mut conn)
            .await
            .map_err(redis_err("expire conversation"))?;
        Ok(until)
    }

    async fn conversations(
        &self,
        agent: &AgentKey,
        owner: &str,
    ) -> Result<Vec<SpaceKey>, StoreError> {
        let mut conn = self.conns.shared().await?;
        let members: Vec<String> = conn
            .zrangebyscore(
                AgentKeys::new(agent).conversations(),
                format!("({}", crate::store::now_ms()),
                "+inf",
            )
            .await
            .map_err(redis_err("list conversations"))?;
        let prefix = format!("{owner} ");
        Ok(members
            .iter()
            .filter_map(|m| m.strip_prefix(&prefix))
            .map(|name| SpaceKey::new(agent.namespace.clone(), name))
            .collect())
    }

    async fn register_agent(&self, agent: &AgentKey) -> Result<bool, StoreError> {
        let mut conn = self.conns.shared().await?;
        let added: u64 = conn
            .sadd(agents_index(), agent.to_string())
            .await
            .map_err(redis_err("register agent"))?;
        // On a cluster, wake signals listened to here include the new agent's channel.
        if let Some(shards) = self.conns.shards_in_use() {
            shards.watch(agent).await?;
        }
        Ok(added > 0)
    }

    async fn unregister_agent(&self, agent: &AgentKey) -> Result<bool, StoreError> {
        let mut conn = self.conns.shared().await?;
        let removed: u64 = conn
            .srem(agents_index(), agent.to_string())
            .await
            .map_err(redis_err("unregister agent"))?;
        if let Some(shards) = self.conns.shards_in_use() {
            shards.unwatch(agent).await?;
        }
        Ok(removed > 0)
    }

    async fn agent_registered(&self, agent: &AgentKey) -> Result<bool, StoreError> {
        let mut conn = self.conns.shared().await?;
        conn.sismember(agents_index(), agent.to_string())
            .await
            .map_err(redis_err("look up agent"))
    }

    async fn apply_a2a(
        &self,
        agent: &AgentKey,
        record: Option<&A2aRecord>,
    ) -> Result<bool, StoreError> {
        let what = || format!("the A2A card of agent {agent}");
        let json = record.map(|r| to_json(what, r)).transpose()?;
        self.apply_json(AgentKeys::new(agent).a2a(), json, "set A2A card")
            .await
    }

    async fn a2a(&self, agent: &AgentKey) -> Result<Option<A2aRecord>, StoreError> {
        let what = || format!("the A2A card of agent {agent}");
        self.read_json(AgentKeys::new(agent).a2a(), what, "get A2A card")
            .await
    }

    async fn apply_facts(&self, agent: &AgentKey, facts: &AgentFacts) -> Result<bool, StoreError> {
        let json = to_json(|| format!("the facts of agent {agent}"), facts)?;
        self.apply_json(AgentKeys::new(agent).facts(), Some(json), "set agent facts")
            .await
    }

    async fn facts(&self, agent: &AgentKey) -> Result<Option<AgentFacts>, StoreError> {
        let what = || format!("the facts of agent {agent}");
        self.read_json(AgentKeys::new(agent).facts(), what, "get agent facts")
            .await
    }
}

impl RedisStore {
    /// Sets `key` to `json` (deletes it for `None`) unless it holds that already: whether it
    /// changed.
    async fn apply_json(
        &self,
        key: String,
        json: Option<String>,
        what: &'static str,
    ) -> Result<bool, StoreError> {
        let mut conn = self.conns.shared().await?;
        let current: Option<String> = conn.get(&key).await.map_err(redis_err(what))?;
        if current == json {
            return Ok(false);
        }
        match json {
            Some(j) => conn.set::<_, _, ()>(&key, j).await,
            None => conn.del::<_, ()>(&key).await,
        }
        .map_err(redis_err(what))?;
        Ok(true)
    }

    /// The record at `key`, if any.
    async fn read_json<T: serde::de::DeserializeOwned>(
        &self,
        key: String,
        what: impl Fn() -> String,
        short: &'static str,
    ) -> Result<Option<T>, StoreError> {
        let mut conn = self.conns.shared().await?;
        let json: Option<String> = conn.get(key).await.map_err(redis_err(short))?;
        json.map(|j| from_json(what, &j)).transpose()
    }
}

impl RedisStore {
    /// Every registered agent.
    pub(super) async fn registered_agents(&self) -> Result<Vec<AgentKey>, StoreError> {
        let mut conn = self.conns.shared().await?;
        let names: Vec<String> = conn
            .smembers(agents_index())
            .await
            .map_err(redis_err("read registered agents"))?;
        Ok(names.iter().filter_map(|n| AgentKey::parse(n)).collect())
    }
}
