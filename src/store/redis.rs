//! The Redis store.
//!
//! # Keys
//!
//! Every key starts with `agentfleet:`. Keys of one space share the hash tag `{space:NS/NAME}`
//! (and, with later work, keys of one agent share `{agent:NS/NAME}`), so each per-space or
//! per-agent atomic step stays on one Redis Cluster slot.
//!
//! | key | type | holds |
//! |---|---|---|
//! | `agentfleet:{space:NS/NAME}:members` | string | the resolved members, JSON `[{kind, id, name}]` |
//! | `agentfleet:{space:NS/NAME}:agents` | set | names of the member agents (for fan-out) |
//! | `agentfleet:spaces` | set | `NS/NAME` of every space with membership |

use std::time::Duration;

use async_trait::async_trait;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::AsyncCommands;
use tokio::sync::OnceCell;

use super::{Store, StoreError};
use crate::crd::{MemberKind, ResolvedMember};
use crate::membership::SpaceKey;

const PREFIX: &str = "agentfleet:";
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);

fn space_tag(space: &SpaceKey) -> String {
    format!("{PREFIX}{{space:{}/{}}}", space.namespace, space.name)
}

fn members_key(space: &SpaceKey) -> String {
    format!("{}:members", space_tag(space))
}

fn agents_key(space: &SpaceKey) -> String {
    format!("{}:agents", space_tag(space))
}

fn spaces_index_key() -> String {
    format!("{PREFIX}spaces")
}

/// A [`Store`] on Redis. Connects lazily and reconnects by itself, so a process can start
/// (and report not ready) while Redis is down.
pub struct RedisStore {
    client: redis::Client,
    conn: OnceCell<ConnectionManager>,
}

impl RedisStore {
    /// A store for the Redis at `url` (`redis://[:password@]host:port[/db]`). Nothing is
    /// contacted until the first command.
    pub fn new(url: &str) -> Result<Self, StoreError> {
        let client = redis::Client::open(url)
            .map_err(|e| StoreError::InvalidUrl(format!("{} ({:?})", redact_url(url), e.kind())))?;
        Ok(Self {
            client,
            conn: OnceCell::new(),
        })
    }

    async fn conn(&self) -> Result<ConnectionManager, StoreError> {
        let conn = self
            .conn
            .get_or_try_init(|| async {
                let config = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(CONNECT_TIMEOUT))
                    .set_response_timeout(Some(RESPONSE_TIMEOUT))
                    .set_number_of_retries(2);
                ConnectionManager::new_with_config(self.client.clone(), config)
                    .await
                    .map_err(|source| StoreError::Redis {
                        op: "connect",
                        source,
                    })
            })
            .await?;
        Ok(conn.clone())
    }
}

/// `url` with any password replaced by `***`, for messages.
pub fn redact_url(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme_end), Some(at)) if at > scheme_end => {
            let userinfo = &url[scheme_end + 3..at];
            let user = userinfo.split(':').next().unwrap_or("");
            format!("{}{}:***{}", &url[..scheme_end + 3], user, &url[at..])
        }
        _ => url.to_string(),
    }
}

fn redis_err(op: &'static str) -> impl FnOnce(redis::RedisError) -> StoreError {
    move |source| StoreError::Redis { op, source }
}

#[async_trait]
impl Store for RedisStore {
    async fn ping(&self) -> Result<(), StoreError> {
        let mut conn = self.conn().await?;
        redis::cmd("PING")
            .query_async::<String>(&mut conn)
            .await
            .map_err(redis_err("ping"))?;
        Ok(())
    }

    async fn apply_space_members(
        &self,
        space: &SpaceKey,
        members: &[ResolvedMember],
    ) -> Result<bool, StoreError> {
        let json = serde_json::to_string(members).map_err(|source| StoreError::Decode {
            what: format!("members of space {space}"),
            source,
        })?;
        let mut conn = self.conn().await?;
        let current: Option<String> = conn
            .get(members_key(space))
            .await
            .map_err(redis_err("get space members"))?;
        let changed = current.as_deref() != Some(json.as_str());
        if changed {
            let agents: Vec<&str> = members
                .iter()
                .filter(|m| m.kind == MemberKind::Agent)
                .map(|m| m.id.as_str())
                .collect();
            let mut tx = redis::pipe();
            tx.atomic()
                .set(members_key(space), &json)
                .ignore()
                .del(agents_key(space))
                .ignore();
            if !agents.is_empty() {
                tx.sadd(agents_key(space), agents).ignore();
            }
            tx.query_async::<()>(&mut conn)
                .await
                .map_err(redis_err("set space members"))?;
        }
        // The index lives on another slot; adding to it is idempotent, so it is its own step.
        conn.sadd::<_, _, ()>(spaces_index_key(), space.to_string())
            .await
            .map_err(redis_err("index space"))?;
        Ok(changed)
    }

    async fn space_members(
        &self,
        space: &SpaceKey,
    ) -> Result<Option<Vec<ResolvedMember>>, StoreError> {
        let mut conn = self.conn().await?;
        let json: Option<String> = conn
            .get(members_key(space))
            .await
            .map_err(redis_err("get space members"))?;
        json.map(|j| {
            serde_json::from_str(&j).map_err(|source| StoreError::Decode {
                what: format!("members of space {space}"),
                source,
            })
        })
        .transpose()
    }

    async fn remove_space(&self, space: &SpaceKey) -> Result<bool, StoreError> {
        let mut conn = self.conn().await?;
        let (removed, _): (u64, u64) = redis::pipe()
            .atomic()
            .del(members_key(space))
            .del(agents_key(space))
            .query_async(&mut conn)
            .await
            .map_err(redis_err("remove space"))?;
        conn.srem::<_, _, ()>(spaces_index_key(), space.to_string())
            .await
            .map_err(redis_err("unindex space"))?;
        Ok(removed > 0)
    }

    async fn spaces(&self) -> Result<Vec<SpaceKey>, StoreError> {
        let mut conn = self.conn().await?;
        let names: Vec<String> = conn
            .smembers(spaces_index_key())
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(
            redact_url("redis://:s3cret@r:6379/0"),
            "redis://:***@r:6379/0"
        );
        assert_eq!(
            redact_url("redis://u:s3cret@r:6379"),
            "redis://u:***@r:6379"
        );
        assert_eq!(redact_url("redis://r:6379"), "redis://r:6379");
    }

    #[test]
    fn invalid_url_is_refused_without_echoing_secrets() {
        let Err(e) = RedisStore::new("http://:topsecret@x") else {
            panic!("accepted a non-redis URL")
        };
        assert!(!e.to_string().contains("topsecret"), "{e}");
    }

    #[test]
    fn keys_of_one_space_share_a_hash_tag() {
        let s = SpaceKey::new("ns", "family");
        assert_eq!(members_key(&s), "agentfleet:{space:ns/family}:members");
        assert_eq!(agents_key(&s), "agentfleet:{space:ns/family}:agents");
    }
}
