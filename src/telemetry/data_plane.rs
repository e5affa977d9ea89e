//! `agentfleet_data_plane_up`: whether this process reaches the data plane, from a ping every
//! few seconds — the operator's (every replica, leader or not; among [`super::OperatorMetrics`]),
//! the gateway's, and `dev`'s.

use std::sync::Arc;
use std::time::Duration;

use prometheus::{IntGauge, Registry};
use tokio::sync::watch;

use crate::store::Store;

/// How often the data plane is pinged.
pub const EVERY: Duration = Duration::from_secs(5);

/// The gauge, unregistered.
pub fn gauge() -> Result<IntGauge, prometheus::Error> {
    IntGauge::new(
        "agentfleet_data_plane_up",
        "1 while this process reaches the data plane (Redis answers a ping within 2s), else 0.",
    )
}

/// Registers the gauge in `registry` and keeps it with [`watch_data_plane`] until `stop`
/// turns true (the gateway's).
pub fn register(
    registry: &Registry,
    store: Arc<dyn Store>,
    stop: watch::Receiver<bool>,
) -> Result<(), prometheus::Error> {
    let up = gauge()?;
    registry.register(Box::new(up.clone()))?;
    tokio::spawn(watch_data_plane(store, up, EVERY, stop));
    Ok(())
}

/// Sets `up` to whether `store` answers a ping within 2 s, now and every `every` until `stop`
/// turns true.
pub async fn watch_data_plane(
    store: Arc<dyn Store>,
    up: IntGauge,
    every: Duration,
    mut stop: watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.wait_for(|v| *v) => return,
            _ = tick.tick() => {}
        }
        let answered = tokio::time::timeout(Duration::from_secs(2), store.ping())
            .await
            .is_ok_and(|r| r.is_ok());
        up.set(i64::from(answered));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{MemoryStore, RedisStore};

    async fn until(check: impl Fn() -> bool) {
        tokio::time::timeout(Duration::from_secs(10), async {
            while !check() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .unwrap();
    }

    async fn watched(store: Arc<dyn Store>, up: &IntGauge, want: i64) {
        let (stop, rx) = watch::channel(false);
        let task = tokio::spawn(watch_data_plane(
            store,
            up.clone(),
            Duration::from_millis(20),
            rx,
        ));
        until(|| up.get() == want).await;
        stop.send_replace(true);
        task.await.unwrap();
    }

    #[tokio::test]
    async fn up_follows_the_ping() {
        let up = gauge().unwrap();
        watched(Arc::new(MemoryStore::new()), &up, 1).await;
        // Nothing listens on port 1: the ping fails at once.
        let down = RedisStore::new("redis://127.0.0.1:1/").unwrap();
        watched(Arc::new(down), &up, 0).await;
    }
}
