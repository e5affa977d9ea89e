//! Liveness and readiness of this replica. `/healthz` fails once the controllers stopped or
//! leader election stalled (the elector's heartbeat is older than two leases); `/readyz` fails
//! while the data plane does not answer, and on the leader until its caches synced. A standby
//! is ready: it serves metrics and waits for the lease.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;

use crate::store::Store;

/// Liveness and readiness of this replica.
#[derive(Default)]
pub struct Health {
    leader: AtomicBool,
    caches_synced: AtomicBool,
    controllers_stopped: AtomicBool,
    elector_heartbeat: AtomicI64,
}

impl Health {
    /// The leader elector is alive (called on each of its turns).
    pub fn beat(&self) {
        self.elector_heartbeat.store(now_secs(), Ordering::Relaxed);
    }

    /// This replica holds (or no longer holds) the leader lease.
    pub fn set_leader(&self, leader: bool) {
        self.leader.store(leader, Ordering::Relaxed);
    }

    /// The controllers' caches have synced.
    pub fn mark_caches_synced(&self) {
        self.caches_synced.store(true, Ordering::Relaxed);
    }

    /// The controllers have stopped.
    pub fn mark_controllers_stopped(&self) {
        self.controllers_stopped.store(true, Ordering::Relaxed);
    }
}

/// `/healthz` and `/readyz` of `health`, pinging `store` for readiness; `lease_seconds` is the
/// leader lease's duration (leader election has stalled after two of them).
pub fn routes(health: Arc<Health>, store: Arc<dyn Store>, lease_seconds: i64) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(HttpState {
            health,
            store,
            lease_seconds,
        })
}

fn now_secs() -> i64 {
    k8s_openapi::jiff::Timestamp::now().as_second()
}

#[derive(Clone)]
struct HttpState {
    health: Arc<Health>,
    store: Arc<dyn Store>,
    lease_seconds: i64,
}

async fn healthz(State(s): State<HttpState>) -> (StatusCode, String) {
    if s.health.controllers_stopped.load(Ordering::Relaxed) {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "controllers stopped\n".into(),
        );
    }
    let age = now_secs() - s.health.elector_heartbeat.load(Ordering::Relaxed);
    if age > 2 * s.lease_seconds + 10 {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("leader election stalled for {age}s\n"),
        );
    }
    (StatusCode::OK, "ok\n".into())
}

async fn readyz(State(s): State<HttpState>) -> (StatusCode, String) {
    match tokio::time::timeout(Duration::from_secs(2), s.store.ping()).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            return (
                StatusCode::SERVICE_UNAVAILABLE,
                format!("data plane: {e}\n"),
            )
        }
        Err(_) => {
            return (
                StatusCode::SERVICE_UNAVAILABLE,
                "data plane: no answer within 2s\n".into(),
            )
        }
    }
    if s.health.leader.load(Ordering::Relaxed) {
        if !s.health.caches_synced.load(Ordering::Relaxed) {
            return (
                StatusCode::SERVICE_UNAVAILABLE,
                "leader: caches not synced yet\n".into(),
            );
        }
        return (StatusCode::OK, "ok: leader\n".into());
    }
    (StatusCode::OK, "ok: standby\n".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::MemoryStore;

    fn state(health: &Arc<Health>) -> State<HttpState> {
        State(HttpState {
            health: health.clone(),
            store: Arc::new(MemoryStore::new()),
            lease_seconds: 15,
        })
    }

    #[tokio::test]
    async fn live_until_the_controllers_stop_or_the_elector_stalls() {
        let health = Arc::new(Health::default());
        assert_eq!(
            healthz(state(&health)).await.0,
            StatusCode::SERVICE_UNAVAILABLE,
            "no heartbeat yet"
        );
        health.beat();
        assert_eq!(
            healthz(state(&health)).await,
            (StatusCode::OK, "ok\n".into())
        );
        health.mark_controllers_stopped();
        assert_eq!(
            healthz(state(&health)).await.0,
            StatusCode::SERVICE_UNAVAILABLE
        );
    }

    #[tokio::test]
    async fn the_leader_is_ready_once_its_caches_synced() {
        let health = Arc::new(Health::default());
        assert_eq!(
            readyz(state(&health)).await,
            (StatusCode::OK, "ok: standby\n".into())
        );
        health.set_leader(true);
        assert_eq!(
            readyz(state(&health)).await.0,
            StatusCode::SERVICE_UNAVAILABLE
        );
        health.mark_caches_synced();
        assert_eq!(
            readyz(state(&health)).await,
            (StatusCode::OK, "ok: leader\n".into())
        );
    }
}
