//! How the Redis store talks to Redis: one shared connection for every command (however many
//! agents a process hosts: nothing blocks a connection, an agent learns of new events by its
//! wake signal), subscriptions (see `pubsub.rs`); and the commit cache, what this process last
//! committed per agent.
//!
//! One setting names one Redis or a Redis Cluster: a comma-separated list of URLs is a
//! cluster's seed nodes, and a single URL is asked (`INFO cluster`) whether it is a cluster
//! node. On a cluster every command goes through the cluster client, which follows the slot
//! map (`MOVED`, `ASK`, failover); every step of the store already stays on one slot.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use futures::stream::{BoxStream, StreamExt as _};
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{AsyncConnectionConfig, Cmd, Pipeline, RedisFuture, TlsCertificates, Value};
use tokio::sync::OnceCell;

use super::keys::{hash_tag, AgentKeys};
use super::pubsub::Shards;
use super::redis_err;
use crate::identity::AgentKey;
use crate::store::consciousness::WindowState;
use crate::store::{Checkpoint, StoreError, WakeScope, WAKE_CHANNEL};
use crate::sync::lock;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);
/// The sharded subscriptions' connections on a cluster: they wait for messages, not answers.
const SUBSCRIPTION_RESPONSE_TIMEOUT: Duration = Duration::from_secs(600);

/// Durable writes are acknowledged only once this many replicas have them, waiting at most
/// `timeout` (`WAIT`).
#[derive(Clone, Copy, Debug)]
pub struct WaitReplicas {
    /// Replicas that must have the write.
    pub replicas: u32,
    /// How long a write waits for them.
    pub timeout: Duration,
}

/// A connection to one Redis or to a Redis Cluster (commands routed by their keys' slot).
#[derive(Clone)]
pub(super) enum Conn {
    /// One Redis.
    Single(ConnectionManager),
    /// A Redis Cluster.
    Cluster(ClusterConnection),
}

impl Conn {
    /// Whether this talks to a Redis Cluster.
    pub(super) fn is_cluster(&self) -> bool {
        matches!(self, Conn::Cluster(_))
    }

    /// How to publish: `SPUBLISH` on a cluster (sharded pub/sub: the message goes to the
    /// channel's slot's node alone, and a script may publish only on its own slot), `PUBLISH`
    /// on one Redis (any version).
    pub(super) fn publish_command(&self) -> &'static str {
        if self.is_cluster() {
            "SPUBLISH"
        } else {
            "PUBLISH"
        }
    }

    /// How a script signals `agent`'s wake, as its three arguments: the agent's `NS/NAME`
    /// (the payload), the channels (space-separated: the agent's own, on its slot; on one
    /// Redis also the fleet's [`WAKE_CHANNEL`]) and [`Conn::publish_command`].
    pub(super) fn wake(&self, agent: &AgentKeys) -> Vec<String> {
        let channels = if self.is_cluster() {
            agent.wake()
        } else {
            format!("{WAKE_CHANNEL} {}", agent.wake())
        };
        vec![
            agent.name().to_string(),
            channels,
            self.publish_command().to_string(),
        ]
    }
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(cmd, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}

/// The connections of one store.
pub(super) struct Connections {
    /// The first (or only) node.
    client: redis::Client,
    /// Every URL given: seed nodes of a cluster when more than one.
    seeds: Vec<redis::ConnectionInfo>,
    /// The certificate authorities to trust for TLS, when not the system's.
    certs: Option<TlsCertificates>,
    /// Acknowledge durable writes only once on replicas.
    wait: Option<WaitReplicas>,
    /// The connection of durable writes when they wait for replicas: `WAIT` holds the
    /// connection it is sent on, so it is not the shared one.
    durable: OnceCell<Conn>,
    /// Set once known: whether it is a cluster.
    cluster: OnceCell<Option<ClusterClient>>,
    shared: OnceCell<Conn>,
    /// Sharded subscriptions on a cluster, made by the first subscription.
    shards: OnceCell<Shards>,
}

impl Connections {
    /// Connections to the Redis (or cluster) of `seeds`, made when first needed.
    pub(super) fn new(
        client: redis::Client,
        seeds: Vec<redis::ConnectionInfo>,
        certs: Option<TlsCertificates>,
        wait: Option<WaitReplicas>,
    ) -> Self {
        Self {
            client,
            seeds,
            certs,
            wait,
            durable: OnceCell::new(),
            cluster: OnceCell::new(),
            shared: OnceCell::new(),
            shards: OnceCell::new(),
        }
    }

    /// The cluster client when the store talks to a Redis Cluster: more than one seed, or a
    /// single node that says it is a cluster node.
    async fn cluster(&self) -> Result<Option<&ClusterClient>, StoreError> {
        let found = self
            .cluster
            .get_or_try_init(|| async {
                // With seeds, the first may be down: the others are asked by the client.
                let first = self.first_node().await;
                let clustered = self.seeds.len() > 1 || matches!(first, Ok((true, _)));
                if !clustered {
                    return first.map(|_| None);
                }
                cluster_version(&first.map(|(_, v)| v).unwrap_or_default())?;
                self.cluster_builder(RESPONSE_TIMEOUT)
                    .build()
                    .map(Some)
                    .map_err(redis_err("connect"))
            })
            .await?;
        Ok(found.as_ref())
    }

    /// A cluster client of the seeds, with the store's timeouts and retries.
    fn cluster_builder(&self, response_timeout: Duration) -> ClusterClientBuilder {
        let builder = ClusterClient::builder(self.seeds.clone())
            .connection_timeout(CONNECT_TIMEOUT)
            .response_timeout(response_timeout)
            .retries(3);
        match &self.certs {
            Some(certs) => builder.certs(certs.clone()),
            None => builder,
        }
    }

    /// Whether the first node is a cluster node (`cluster_enabled:1`), and its Redis version.
    async fn first_node(&self) -> Result<(bool, String), StoreError> {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(CONNECT_TIMEOUT))
            .set_response_timeout(Some(RESPONSE_TIMEOUT));
        let mut conn = self
            .client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .map_err(redis_err("connect"))?;
        let mut info = String::new();
        for section in ["server", "cluster"] {
            let text: String = redis::cmd("INFO")
                .arg(section)
                .query_async(&mut conn)
                .await
                .map_err(redis_err("connect"))?;
            info.push_str(&text);
        }
        let field = |name: &str| {
            info.lines()
                .find_map(|l| l.trim().strip_prefix(name))
                .unwrap_or_default()
                .to_string()
        };
        Ok((field("cluster_enabled:") == "1", field("redis_version:")))
    }

    /// The shared connection (it reconnects by itself), with a response timeout.
    pub(super) async fn shared(&self) -> Result<Conn, StoreError> {
        let conn = self.shared.get_or_try_init(|| self.connect()).await?;
        Ok(conn.clone())
    }

    /// The connection of a durable write (a post's steps, a commit), to be followed by
    /// [`Connections::replicated`]: the shared one unless writes wait for replicas.
    pub(super) async fn durable(&self) -> Result<Conn, StoreError> {
        if self.wait.is_none() {
            return self.shared().await;
        }
        let conn = self.durable.get_or_try_init(|| self.connect()).await?;
        Ok(conn.clone())
    }

    /// When writes wait for replicas: waits until enough replicas of the node serving `key`
    /// have what `conn` wrote there (`WAIT`); [`StoreError::NotReplicated`] when too few had
    /// it in time.
    pub(super) async fn replicated(
        &self,
        conn: &mut Conn,
        key: &str,
        op: &'static str,
    ) -> Result<(), StoreError> {
        let Some(wait) = self.wait else {
            return Ok(());
        };
        let ms = u64::try_from(wait.timeout.as_millis()).unwrap_or(u64::MAX);
        let mut cmd = redis::cmd("WAIT");
        cmd.arg(wait.replicas).arg(ms);
        let got: u32 = match conn {
            Conn::Cluster(c) => {
                let route = Route::new(slot_of(key), SlotAddr::Master);
                let value = c
                    .route_command(
                        cmd,
                        RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route)),
                    )
                    .await
                    .map_err(redis_err(op))?;
                redis::from_redis_value(value).map_err(|e| redis_err(op)(e.into()))?
            }
            _ => cmd.query_async(conn).await.map_err(redis_err(op))?,
        };
        if got < wait.replicas {
            return Err(StoreError::NotReplicated {
                op,
                wanted: wait.replicas,
                got,
                ms,
            });
        }
        Ok(())
    }

    /// A new connection for commands: to the cluster, or to one Redis (reconnecting by
    /// itself).
    async fn connect(&self) -> Result<Conn, StoreError> {
        if let Some(cluster) = self.cluster().await? {
            return cluster
                .get_async_connection()
                .await
                .map(Conn::Cluster)
                .map_err(redis_err("connect"));
        }
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(CONNECT_TIMEOUT))
            .set_response_timeout(Some(RESPONSE_TIMEOUT))
            .set_number_of_retries(2);
        ConnectionManager::new_with_config(self.client.clone(), config)
            .await
            .map(Conn::Single)
            .map_err(redis_err("connect"))
    }

    /// The payloads published on `channel` from now on; `op` names the step in errors. One
    /// Redis: a pub/sub connection of its own. A cluster: sharded, see [`Shards`].
    pub(super) async fn subscribe(
        &self,
        channel: &str,
        op: &'static str,
    ) -> Result<BoxStream<'static, String>, StoreError> {
        if let Some(shards) = self.shards().await? {
            return shards.subscribe(channel, op).await;
        }
        let mut pubsub = self
            .client
            .get_async_pubsub()
            .await
            .map_err(redis_err(op))?;
        pubsub.subscribe(channel).await.map_err(redis_err(op))?;
        Ok(pubsub
            .into_on_message()
            .filter_map(|msg| async move { msg.get_payload::<String>().ok() })
            .boxed())
    }

    /// The wake signals `scope` covers on one Redis, on a pub/sub connection of its own:
    /// one agent's own channel, else the fleet's [`WAKE_CHANNEL`] (a namespace's are picked
    /// from it by the caller). Patterns would need ACL rules beyond `&agentfleet:*`.
    pub(super) async fn subscribe_wakes(
        &self,
        scope: &WakeScope,
    ) -> Result<BoxStream<'static, String>, StoreError> {
        let channel = match scope {
            WakeScope::Agent(agent) => AgentKeys::new(agent).wake(),
            WakeScope::All | WakeScope::Namespace(_) => WAKE_CHANNEL.to_string(),
        };
        self.subscribe(&channel, "subscribe to wake signals").await
    }

    /// The sharded subscriptions on a cluster (made when first needed); `None` on one Redis.
    pub(super) async fn shards(&self) -> Result<Option<&Shards>, StoreError> {
        if self.cluster().await?.is_none() {
            return Ok(None);
        }
        self.shards
            .get_or_try_init(|| {
                Shards::connect(self.cluster_builder(SUBSCRIPTION_RESPONSE_TIMEOUT))
            })
            .await
            .map(Some)
    }

    /// The sharded subscriptions, if this process has any.
    pub(super) fn shards_in_use(&self) -> Option<&Shards> {
        self.shards.get()
    }
}

/// What this process last committed per agent (window and retained checkpoints), so the next
/// commit of the lease holder needs no reads; the commit script still checks the cycle it
/// builds on, and a mismatch drops the entry and retries from a fresh read.
#[derive(Default)]
pub(super) struct CommitCache(Mutex<HashMap<AgentKey, (WindowState, Vec<Checkpoint>)>>);

impl CommitCache {
    /// Takes the agent's entry out (a commit puts it back when it succeeds).
    pub(super) fn take(&self, agent: &AgentKey) -> Option<(WindowState, Vec<Checkpoint>)> {
        lock(&self.0).remove(agent)
    }

    /// Remembers what was just committed.
    pub(super) fn put(&self, agent: &AgentKey, window: WindowState, retained: Vec<Checkpoint>) {
        lock(&self.0).insert(agent.clone(), (window, retained));
    }
}

/// On a cluster, `keys` grouped by the primary serving their slot now (`CLUSTER SLOTS`,
/// one round trip): each node's route and the indexes of its keys; `None` while a slot is
/// served by no node.
pub(super) async fn by_node(
    conn: &mut ClusterConnection,
    keys: &[String],
) -> Result<Option<Vec<(SingleNodeRoutingInfo, Vec<usize>)>>, StoreError> {
    let bad = |e: redis::ParsingError| redis_err("read the slot map")(e.into());
    // Each entry: start slot, end slot, then the primary's [host, port, ...], replicas.
    let slots: Vec<Vec<Value>> = redis::cmd("CLUSTER")
        .arg("SLOTS")
        .query_async(conn)
        .await
        .map_err(redis_err("read the slot map"))?;
    let mut ranges: Vec<(u16, u16, String, u16)> = Vec::new();
    for entry in slots {
        let mut e = entry.into_iter();
        let (Some(start), Some(end), Some(primary)) = (e.next(), e.next(), e.next()) else {
            continue;
        };
        let (start, end): (u16, u16) = (
            redis::from_redis_value(start).map_err(bad)?,
            redis::from_redis_value(end).map_err(bad)?,
        );
        let mut primary = redis::from_redis_value::<Vec<Value>>(primary)
            .map_err(bad)?
            .into_iter();
        let (Some(host), Some(port)) = (primary.next(), primary.next()) else {
            return Ok(None);
        };
        let host: String = redis::from_redis_value(host).map_err(bad)?;
        let port: u16 = redis::from_redis_value(port).map_err(bad)?;
        // A node that does not know its own address (a cluster of one) says "".
        if host.is_empty() {
            return Ok(None);
        }
        ranges.push((start, end, host, port));
    }
    let mut groups: HashMap<(String, u16), Vec<usize>> = HashMap::new();
    for (i, key) in keys.iter().enumerate() {
        let slot = slot_of(key);
        let Some((_, _, host, port)) = ranges.iter().find(|r| r.0 <= slot && slot <= r.1) else {
            return Ok(None);
        };
        groups.entry((host.clone(), *port)).or_default().push(i);
    }
    Ok(Some(
        groups
            .into_iter()
            .map(|((host, port), indexes)| {
                (SingleNodeRoutingInfo::ByAddress { host, port }, indexes)
            })
            .collect(),
    ))
}

/// Whether a cluster node of Redis `version` can serve: sharded pub/sub (`SPUBLISH`,
/// `SSUBSCRIBE`) came with Redis 7. An unknown version is let through.
fn cluster_version(version: &str) -> Result<(), StoreError> {
    let major = version
        .split('.')
        .next()
        .and_then(|m| m.parse::<u32>().ok());
    if major.is_some_and(|m| m < 7) {
        return Err(StoreError::Unsupported(format!(
            "a Redis Cluster needs Redis 7 or later (sharded pub/sub); the first node runs {version}"
        )));
    }
    Ok(())
}

/// The cluster slot of `key` (its hash tag's).
fn slot_of(key: &str) -> u16 {
    crc16::State::<crc16::XMODEM>::calculate(hash_tag(key).as_bytes()) % 16384
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_cluster_needs_redis_7() {
        let e = super::cluster_version("6.2.14").unwrap_err().to_string();
        assert_eq!(
            e,
            "unsupported redis: a Redis Cluster needs Redis 7 or later (sharded pub/sub); the first node runs 6.2.14"
        );
        for fine in ["7.0.15", "8.2.1", ""] {
            assert!(super::cluster_version(fine).is_ok(), "{fine}");
        }
    }

    #[test]
    fn slots_are_redis_cluster_slots() {
        // As `CLUSTER KEYSLOT` answers.
        assert_eq!(super::slot_of("foo"), 12182);
        assert_eq!(super::slot_of("agentfleet:{space:fam/family}:live"), 15509);
        assert_eq!(
            super::slot_of("agentfleet:{space:fam/family}:log"),
            super::slot_of("space:fam/family")
        );
        // An empty tag is no tag.
        assert_eq!(super::slot_of("a{}b"), 13694);
    }
}
