//! The Redis store, one file per concern (the traits of [`crate::store`]):
//!
//! | file | holds |
//! |---|---|
//! | `keys.rs` | every key and channel, and the table of what each holds |
//! | `scripts.rs`, `lua/` | every Lua script, each with the one typed function that runs it |
//! | `conn.rs` | the shared and the blocking connections, one Redis or a cluster; the commit cache |
//! | `pubsub.rs` | subscriptions: classic on one Redis, sharded on a cluster |
//! | `spaces.rs` | membership records, registered agents |
//! | `inbox.rs` | push, wait and drain, urgent events, acknowledge, wake signals, plan firing |
//! | `messages.rs` | posting (log step, then fan-out steps), reading, live events |
//! | `consciousness.rs` | commits, the window, checkpoints, restore |
//! | `leases.rs` | the lease and its fencing token |
//! | `notes.rs` | memories, goals and plans: one keyed, fenced hash each |
//! | `observe.rs` | the operator's observation, model health, purge |
//! | `calls.rs` | asynchronous tool calls: registering, forgetting, accepting a result |

mod calls;
mod conn;
mod consciousness;
mod inbox;
mod journal;
mod keys;
mod leases;
mod messages;
mod notes;
mod observe;
mod pubsub;
mod scripts;
mod spaces;

use std::time::Duration;

use self::conn::{CommitCache, Connections};
use super::{InboxEvent, StoreError};

/// A [`Store`](super::Store) on Redis. Connects lazily and reconnects by itself, so a process
/// can start (and report not ready) while Redis is down.
pub struct RedisStore {
    conns: Connections,
    committed: CommitCache,
}

impl RedisStore {
    /// A store for the Redis at `url` (`redis://[:password@]host:port[/db]`, `rediss://` for
    /// TLS), or for a Redis Cluster: any one node's URL (the node says it is a cluster node),
    /// or a comma-separated list of seed nodes. Nothing is contacted until the first command.
    pub fn new(url: &str) -> Result<Self, StoreError> {
        let invalid = |e: redis::RedisError| {
            StoreError::InvalidUrl(format!("{} ({:?})", redact_url(url), e.kind()))
        };
        let seeds = url
            .split(',')
            .map(str::trim)
            .filter(|u| !u.is_empty())
            .map(|u| redis::IntoConnectionInfo::into_connection_info(u).map_err(invalid))
            .collect::<Result<Vec<_>, _>>()?;
        let first = seeds
            .first()
            .cloned()
            .ok_or_else(|| StoreError::InvalidUrl("no Redis URL given".into()))?;
        let client = redis::Client::open(first).map_err(invalid)?;
        Ok(Self {
            conns: Connections::new(client, seeds),
            committed: CommitCache::default(),
        })
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

/// A driver error while doing `op`.
fn redis_err(op: &'static str) -> impl FnOnce(redis::RedisError) -> StoreError {
    move |source| StoreError::Redis { op, source }
}

/// Like [`redis_err`], but a `FENCED` script error becomes [`StoreError::Fenced`] for `agent`
/// (`NS/NAME`).
fn fenced<'a>(
    agent: &'a str,
    op: &'static str,
) -> impl FnOnce(redis::RedisError) -> StoreError + 'a {
    move |source| {
        if source.code() == Some("FENCED") {
            StoreError::Fenced {
                agent: agent.to_string(),
            }
        } else {
            StoreError::Redis { op, source }
        }
    }
}

/// `value` as JSON; `what` names it in the error.
fn to_json<T: serde::Serialize + ?Sized>(
    what: impl FnOnce() -> String,
    value: &T,
) -> Result<String, StoreError> {
    serde_json::to_string(value).map_err(|source| StoreError::Decode {
        what: what(),
        source,
    })
}

/// A stored JSON value; `what` names it in the error.
fn from_json<T: serde::de::DeserializeOwned>(
    what: impl FnOnce() -> String,
    json: &str,
) -> Result<T, StoreError> {
    serde_json::from_str(json).map_err(|source| StoreError::Decode {
        what: what(),
        source,
    })
}

/// Inbox events of `agent` (`NS/NAME`) as stored.
fn decode_events(agent: &str, raw: Vec<String>) -> Result<Vec<InboxEvent>, StoreError> {
    raw.iter()
        .map(|j| from_json(|| format!("an inbox event of agent {agent}"), j))
        .collect()
}

/// A duration in whole milliseconds, at least one.
fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
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
}
