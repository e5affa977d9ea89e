//! The Redis store, one file per concern (the traits of [`crate::store`]):
//!
//! | file | holds |
//! |---|---|
//! | `args.rs` | the flags that name the data plane, shared by every command that reaches it |
//! | `keys.rs` | every key and channel, and the table of what each holds |
//! | `scripts.rs`, `lua/` | every Lua script, each with the one typed function that runs it |
//! | `conn.rs` | the shared connection, one Redis or a cluster; the commit cache |
//! | `pubsub.rs` | subscriptions: classic on one Redis, sharded on a cluster |
//! | `spaces.rs` | membership records, registered agents |
//! | `inbox.rs` | push, wait and drain, urgent events, acknowledge, wake signals, plan firing |
//! | `messages.rs` | posting (log step, then fan-out steps), reading, live events |
//! | `consciousness.rs` | commits, the window, checkpoints, restore |
//! | `leases.rs` | the lease and its fencing token |
//! | `notes.rs` | memories, goals and plans: one keyed, fenced hash each |
//! | `observe.rs` | the operator's observation, model health, purge |
//! | `calls.rs` | asynchronous tool calls: registering, forgetting, accepting a result |

mod args;
mod calls;
mod conn;
mod consciousness;
mod cycles;
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

pub use self::args::{RedisArgs, REDIS_CA_ENV};
pub use self::conn::WaitReplicas;
use self::conn::{CommitCache, Connections};
use super::{InboxEvent, StoreError};

/// A [`Store`](super::Store) on Redis. Connects lazily and reconnects by itself, so a process
/// can start (and report not ready) while Redis is down.
pub struct RedisStore {
    conns: Connections,
    committed: CommitCache,
}

/// How to reach Redis beyond its URL: what a URL cannot carry.
#[derive(Clone, Debug, Default)]
pub struct RedisOptions {
    /// PEM of the certificate authorities that sign the servers' certificates (`rediss://`),
    /// trusted instead of the system's.
    pub ca: Option<Vec<u8>>,
    /// Acknowledge posts and commits only once replicas have them (`WAIT`); none: as soon as
    /// the primary has them (Redis's asynchronous replication may then lose an acknowledged
    /// write in a failover).
    pub wait: Option<WaitReplicas>,
}

impl RedisStore {
    /// A store for the Redis at `url` (`redis://[[user]:password@]host:port[/db]`,
    /// `rediss://` for TLS), or for a Redis Cluster: any one node's URL (the node says it is a
    /// cluster node), or a comma-separated list of seed nodes, where a seed after the first
    /// may be just `host:port` and then reaches its node as the first does (scheme, user,
    /// password). Nothing is contacted until the first command.
    pub fn new(url: &str) -> Result<Self, StoreError> {
        Self::with_options(url, &RedisOptions::default())
    }

    /// [`RedisStore::new`] with `options` (the TLS roots).
    pub fn with_options(url: &str, options: &RedisOptions) -> Result<Self, StoreError> {
        let seeds = seeds(url)?;
        let certs = options.ca.as_ref().map(|pem| redis::TlsCertificates {
            client_tls: None,
            root_cert: Some(pem.clone()),
        });
        let invalid =
            |e: redis::RedisError| StoreError::InvalidUrl(format!("{} ({e})", redact_url(url)));
        let first = seeds[0].clone();
        let client = match &certs {
            Some(certs) => redis::Client::build_with_tls(first, certs.clone()),
            None => redis::Client::open(first),
        }
        .map_err(invalid)?;
        Ok(Self {
            conns: Connections::new(client, seeds, certs, options.wait),
            committed: CommitCache::default(),
        })
    }
}

/// The nodes `url` names (see [`RedisStore::new`]); never empty.
fn seeds(url: &str) -> Result<Vec<redis::ConnectionInfo>, StoreError> {
    let invalid = |why: String| StoreError::InvalidUrl(format!("{} ({why})", redact_url(url)));
    let mut parts = url.split(',').map(str::trim).filter(|u| !u.is_empty());
    let first = parts
        .next()
        .ok_or_else(|| StoreError::InvalidUrl("no Redis URL given".into()))?;
    let first = redis::IntoConnectionInfo::into_connection_info(first)
        .map_err(|e| invalid(format!("{:?}", e.kind())))?;
    let mut seeds = vec![first.clone()];
    for part in parts {
        let seed = if part.contains("://") {
            redis::IntoConnectionInfo::into_connection_info(part)
                .map_err(|e| invalid(format!("{:?}", e.kind())))?
        } else {
            let (host, port) = part
                .rsplit_once(':')
                .and_then(|(h, p)| Some((h.to_string(), p.parse::<u16>().ok()?)))
                .ok_or_else(|| invalid(format!("seed {part} is not host:port")))?;
            let addr = match first.addr() {
                redis::ConnectionAddr::TcpTls {
                    insecure,
                    tls_params,
                    ..
                } => redis::ConnectionAddr::TcpTls {
                    host,
                    port,
                    insecure: *insecure,
                    tls_params: tls_params.clone(),
                },
                _ => redis::ConnectionAddr::Tcp(host, port),
            };
            first.clone().set_addr(addr)
        };
        seeds.push(seed);
    }
    Ok(seeds)
}

/// `url` with any password replaced by `***`, for messages (each URL of a seed list).
pub fn redact_url(url: &str) -> String {
    url.split(',').map(redact_one).collect::<Vec<_>>().join(",")
}

fn redact_one(url: &str) -> String {
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
    fn seeds_after_the_first_may_be_host_and_port_and_reach_their_node_as_the_first() {
        let seeds = seeds("rediss://fleet:s3cret@r0:7000/, r1:7001,redis://r2:7002").unwrap();
        let addrs: Vec<String> = seeds.iter().map(|s| s.addr().to_string()).collect();
        assert_eq!(addrs, ["r0:7000", "r1:7001", "r2:7002"]);
        assert!(matches!(
            seeds[1].addr(),
            redis::ConnectionAddr::TcpTls { .. }
        ));
        assert_eq!(
            (
                seeds[1].redis_settings().username(),
                seeds[1].redis_settings().password()
            ),
            (Some("fleet"), Some("s3cret"))
        );
        assert!(matches!(seeds[2].addr(), redis::ConnectionAddr::Tcp(..)));
        let Err(e) = super::seeds("redis://:s3cret@r0:7000,r1") else {
            panic!("accepted a seed without a port")
        };
        assert!(e.to_string().contains("seed r1 is not host:port"), "{e}");
        assert!(!e.to_string().contains("s3cret"), "{e}");
        assert_eq!(
            redact_url("redis://:a@r0:1,redis://:b@r1:2,r2:3"),
            "redis://:***@r0:1,redis://:***@r1:2,r2:3"
        );
    }

    #[test]
    fn invalid_url_is_refused_without_echoing_secrets() {
        let Err(e) = RedisStore::new("http://:topsecret@x") else {
            panic!("accepted a non-redis URL")
        };
        assert!(!e.to_string().contains("topsecret"), "{e}");
    }
}
