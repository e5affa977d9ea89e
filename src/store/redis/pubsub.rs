//! Subscriptions of the Redis store, as streams of payloads.
//!
//! - **One Redis**: a pub/sub connection per subscription (`SUBSCRIBE`), as any Redis has it.
//! - **A Redis Cluster**: sharded pub/sub. Scripts `SPUBLISH` on channels of their own slot (a
//!   space's live events, an agent's wake signals), so a message goes to the node serving that
//!   slot alone instead of being broadcast to every node. One RESP3 cluster connection per
//!   store carries every `SSUBSCRIBE`; redis's cluster client sends each to the node of its
//!   slot. Its pushes are routed here by channel to the local receivers
//!   ([`Shards::subscribe`]); a channel is unsubscribed when its last receiver goes. When a
//!   node is lost or says a slot moved, the channels are subscribed again where their slots
//!   are served now ([`mend`]).

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::stream::{BoxStream, StreamExt as _};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::{PushInfo, PushKind, Value};
use tokio::sync::{broadcast, mpsc};
use tokio::task::AbortHandle;
use tracing::warn;

use super::keys::AgentKeys;
use super::redis_err;
use crate::identity::AgentKey;
use crate::store::StoreError;
use crate::sync::lock;

/// How many messages a slow local receiver may fall behind before it skips some.
const BACKLOG: usize = 1024;
/// How often a lost subscription is tried again.
const RETRY: Duration = Duration::from_millis(250);

/// Channel → where its messages go locally.
type Routes = Arc<Mutex<HashMap<String, broadcast::Sender<String>>>>;

/// Every sharded subscription of one store on a Redis Cluster.
pub(super) struct Shards {
    conn: ClusterConnection,
    routes: Routes,
    /// Where every agent's wake channel is routed.
    wakes: broadcast::Sender<String>,
    /// The task that subscribes again what a node's loss or a slot's move took away.
    mender: AbortHandle,
}

impl Drop for Shards {
    fn drop(&mut self) {
        self.mender.abort();
    }
}

/// Subscriptions a node lost.
enum Lost {
    /// A connection to a node dropped (the node died, or a failover is under way): any
    /// subscription may have been on it.
    Node,
    /// The node said the channel's slot moved (a resharding or a failover).
    Channel(String),
}

/// Subscribes again, each on the node serving its slot now, every channel still routed that
/// was lost, trying every [`RETRY`] until it holds. The cluster client follows the slot map
/// for commands (and itself resubscribes once it refreshes the map), but a subscription-only
/// connection sends no command that would make it notice a failover.
async fn mend(conn: ClusterConnection, routes: Routes, mut lost: mpsc::UnboundedReceiver<Lost>) {
    while let Some(first) = lost.recv().await {
        let mut channels = std::collections::BTreeSet::new();
        let mut next = Some(first);
        while let Some(l) = next {
            match l {
                Lost::Node => channels.extend(lock(&routes).keys().cloned()),
                Lost::Channel(c) => {
                    channels.insert(c);
                }
            }
            next = lost.try_recv().ok();
        }
        let again = channels.into_iter().map(|channel| {
            let (mut conn, routes) = (conn.clone(), routes.clone());
            async move {
                while lock(&routes).contains_key(&channel) {
                    match conn.ssubscribe(&channel).await {
                        Ok(()) => return,
                        Err(e) => {
                            warn!(%channel, error = %e, "cannot subscribe again yet; retrying");
                            tokio::time::sleep(RETRY).await;
                        }
                    }
                }
            }
        });
        futures::future::join_all(again).await;
    }
}

impl Shards {
    /// Connects with `builder` (the store's seeds and settings), speaking RESP3, which carries
    /// the pushes of subscriptions on an ordinary cluster connection.
    pub(super) async fn connect(builder: ClusterClientBuilder) -> Result<Self, StoreError> {
        let routes = Routes::default();
        let sink = routes.clone();
        let (lost_tx, lost) = mpsc::unbounded_channel();
        let client = builder
            .use_protocol(redis::ProtocolVersion::RESP3)
            .push_sender(move |info: PushInfo| -> Result<(), Infallible> {
                if let Some(lost) = deliver(&sink, info) {
                    let _ = lost_tx.send(lost);
                }
                Ok(())
            })
            .build()
            .map_err(redis_err("connect for subscriptions"))?;
        let conn = client
            .get_async_connection()
            .await
            .map_err(redis_err("connect for subscriptions"))?;
        let mender = tokio::spawn(mend(conn.clone(), routes.clone(), lost));
        Ok(Self {
            conn,
            routes,
            wakes: broadcast::channel(BACKLOG).0,
            mender: mender.abort_handle(),
        })
    }

    /// The payloads published on `channel` from now on. The channel is subscribed while at
    /// least one stream of it is alive.
    pub(super) async fn subscribe(
        &self,
        channel: &str,
        op: &'static str,
    ) -> Result<BoxStream<'static, String>, StoreError> {
        let (tx, fresh) = self.claim(channel, || broadcast::channel(BACKLOG).0);
        let held = Held {
            rx: Some(tx.subscribe()),
            channel: channel.to_string(),
            shards: self.handle(),
        };
        if fresh {
            self.ssubscribe(channel, op).await?;
        }
        Ok(futures::stream::unfold(held, |mut held| async move {
            let payload = next(held.rx.as_mut()?).await?;
            Some((payload, held))
        })
        .boxed())
    }

    /// The wake signals of `agents` (their `NS/NAME`), and of every agent [`Shards::watch`]
    /// adds while a stream of them is alive.
    pub(super) async fn wakes(
        &self,
        agents: &[AgentKey],
    ) -> Result<BoxStream<'static, String>, StoreError> {
        let rx = self.wakes.subscribe();
        let subscribing = agents.iter().map(|agent| self.watch(agent));
        for result in futures::future::join_all(subscribing).await {
            result?;
        }
        Ok(received(rx))
    }

    /// Subscribes `agent`'s wake channel when wake signals are listened to; once per channel.
    pub(super) async fn watch(&self, agent: &AgentKey) -> Result<(), StoreError> {
        if self.wakes.receiver_count() == 0 {
            return Ok(());
        }
        let channel = AgentKeys::new(agent).wake();
        if !self.claim(&channel, || self.wakes.clone()).1 {
            return Ok(());
        }
        self.ssubscribe(&channel, "subscribe to wake signals").await
    }

    /// Unsubscribes `agent`'s wake channel.
    pub(super) async fn unwatch(&self, agent: &AgentKey) -> Result<(), StoreError> {
        let channel = AgentKeys::new(agent).wake();
        if lock(&self.routes).remove(&channel).is_none() {
            return Ok(());
        }
        let mut conn = self.conn.clone();
        conn.sunsubscribe(channel)
            .await
            .map_err(redis_err("unsubscribe from wake signals"))
    }

    /// Where `channel`'s messages go, routing it to `make()` when it is not routed yet; and
    /// whether it was not (then it is to be subscribed).
    fn claim(
        &self,
        channel: &str,
        make: impl FnOnce() -> broadcast::Sender<String>,
    ) -> (broadcast::Sender<String>, bool) {
        let mut routes = lock(&self.routes);
        if let Some(tx) = routes.get(channel) {
            return (tx.clone(), false);
        }
        let tx = make();
        routes.insert(channel.to_string(), tx.clone());
        (tx, true)
    }

    async fn ssubscribe(&self, channel: &str, op: &'static str) -> Result<(), StoreError> {
        let mut conn = self.conn.clone();
        if let Err(e) = conn.ssubscribe(channel).await {
            lock(&self.routes).remove(channel);
            return Err(redis_err(op)(e));
        }
        Ok(())
    }

    fn handle(&self) -> (ClusterConnection, Routes) {
        (self.conn.clone(), self.routes.clone())
    }
}

/// A local receiver of one channel; the last one to go unsubscribes the channel.
struct Held {
    rx: Option<broadcast::Receiver<String>>,
    channel: String,
    shards: (ClusterConnection, Routes),
}

impl Drop for Held {
    fn drop(&mut self) {
        drop(self.rx.take());
        let (conn, routes) = &self.shards;
        {
            let mut routes = lock(routes);
            match routes.get(&self.channel) {
                Some(tx) if tx.receiver_count() == 0 => {
                    routes.remove(&self.channel);
                }
                _ => return,
            }
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let mut conn = conn.clone();
        let channel = std::mem::take(&mut self.channel);
        runtime.spawn(async move {
            // Only the server's memory is at stake: messages of an unrouted channel are
            // dropped as they arrive.
            let _ = conn.sunsubscribe(channel).await;
        });
    }
}

/// The next message of `rx`, skipping what a slow reader missed; `None` once closed.
async fn next(rx: &mut broadcast::Receiver<String>) -> Option<String> {
    loop {
        match rx.recv().await {
            Ok(payload) => return Some(payload),
            Err(broadcast::error::RecvError::Lagged(_)) => {}
            Err(broadcast::error::RecvError::Closed) => return None,
        }
    }
}

/// The messages of `rx` as a stream.
fn received(rx: broadcast::Receiver<String>) -> BoxStream<'static, String> {
    futures::stream::unfold(rx, |mut rx| async move {
        let payload = next(&mut rx).await?;
        Some((payload, rx))
    })
    .boxed()
}

/// Hands a pushed message to the receivers of its channel; what was lost, if the push says
/// a subscription went.
fn deliver(routes: &Routes, info: PushInfo) -> Option<Lost> {
    let mut data = info.data.into_iter();
    match info.kind {
        PushKind::SMessage | PushKind::Message => {
            let (channel, payload) = (text(data.next()?)?, text(data.next()?)?);
            if let Some(tx) = lock(routes).get(&channel) {
                let _ = tx.send(payload);
            }
            None
        }
        PushKind::Disconnection => Some(Lost::Node),
        // Ours (a channel no longer routed) or the server's (its slot moved away).
        PushKind::SUnsubscribe => {
            let channel = text(data.next()?)?;
            lock(routes)
                .contains_key(&channel)
                .then_some(Lost::Channel(channel))
        }
        _ => None,
    }
}

fn text(value: Value) -> Option<String> {
    redis::from_redis_value(value).ok()
}
