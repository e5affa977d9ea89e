//! How the Redis store talks to Redis: one shared connection for every command, one
//! connection per agent for its blocking wait, pub/sub connections for subscriptions; and the
//! commit cache, what this process last committed per agent.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig, MultiplexedConnection, PubSub};
use redis::AsyncConnectionConfig;
use tokio::sync::OnceCell;

use super::redis_err;
use crate::store::consciousness::WindowState;
use crate::store::{AgentKey, Checkpoint, StoreError};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);

/// A poisoned lock only means a panic elsewhere; the maps stay usable (each change is one
/// map operation).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The connections of one store.
pub(super) struct Connections {
    client: redis::Client,
    shared: OnceCell<ConnectionManager>,
    /// One connection per agent for blocking waits, which would stall a shared one.
    blocking: Mutex<HashMap<AgentKey, MultiplexedConnection>>,
}

impl Connections {
    /// Connections to `client`'s Redis, made when first needed.
    pub(super) fn new(client: redis::Client) -> Self {
        Self {
            client,
            shared: OnceCell::new(),
            blocking: Mutex::new(HashMap::new()),
        }
    }

    /// The shared connection (it reconnects by itself), with a response timeout.
    pub(super) async fn shared(&self) -> Result<ConnectionManager, StoreError> {
        let conn = self
            .shared
            .get_or_try_init(|| async {
                let config = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(CONNECT_TIMEOUT))
                    .set_response_timeout(Some(RESPONSE_TIMEOUT))
                    .set_number_of_retries(2);
                ConnectionManager::new_with_config(self.client.clone(), config)
                    .await
                    .map_err(redis_err("connect"))
            })
            .await?;
        Ok(conn.clone())
    }

    /// The agent's connection for blocking waits (no response timeout: the wait has its own).
    pub(super) async fn blocking(
        &self,
        agent: &AgentKey,
    ) -> Result<MultiplexedConnection, StoreError> {
        if let Some(conn) = lock(&self.blocking).get(agent).cloned() {
            return Ok(conn);
        }
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(CONNECT_TIMEOUT))
            .set_response_timeout(None);
        let conn = self
            .client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .map_err(redis_err("connect"))?;
        lock(&self.blocking).insert(agent.clone(), conn.clone());
        Ok(conn)
    }

    /// Drops the agent's blocking connection (it failed, or the agent's worker left).
    pub(super) fn forget_blocking(&self, agent: &AgentKey) {
        lock(&self.blocking).remove(agent);
    }

    /// A new pub/sub connection subscribed to `channel`; `op` names the step in errors.
    pub(super) async fn subscribe(
        &self,
        channel: &str,
        op: &'static str,
    ) -> Result<PubSub, StoreError> {
        let mut pubsub = self
            .client
            .get_async_pubsub()
            .await
            .map_err(redis_err(op))?;
        pubsub.subscribe(channel).await.map_err(redis_err(op))?;
        Ok(pubsub)
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
