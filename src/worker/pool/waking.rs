//! What wakes a sleeping agent of a pool: its wake signal (one subscription for the pool,
//! subscribed again when it ends), a timer (a paused call's time, a retry), and the sweep of
//! the sleeping agents' inboxes that catches a signal pub/sub lost.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt as _;
use tracing::{debug, info, warn};

use super::Inner;
use crate::identity::AgentKey;
use crate::store::now_ms;
use crate::sync::lock;
use crate::worker::session::Backoff;

impl Inner {
    /// Looks at `key` again at `at_ms` (the earlier of this and a timer already set).
    pub(super) fn set_timer(&self, key: &AgentKey, at_ms: i64) {
        let mut timers = lock(&self.timers);
        let mut map = lock(&self.agents);
        let Some(entry) = map.get_mut(key) else {
            return;
        };
        if let Some(old) = entry.timer {
            if old <= at_ms {
                return;
            }
            timers.remove(&(old, key.clone()));
        }
        entry.timer = Some(at_ms);
        timers.insert((at_ms, key.clone()));
        drop(map);
        drop(timers);
        self.timers_changed.notify_one();
    }

    /// Pokes agents whose timer is due.
    pub(super) async fn fire_timers(self: Arc<Self>) {
        loop {
            let changed = self.timers_changed.notified();
            let now = now_ms();
            let mut due = Vec::new();
            let next = {
                let mut timers = lock(&self.timers);
                while let Some((at, key)) = timers.first().cloned() {
                    if at > now {
                        break;
                    }
                    timers.pop_first();
                    due.push(key);
                }
                timers.first().map(|(at, _)| *at)
            };
            for key in due {
                if let Some(entry) = lock(&self.agents).get_mut(&key) {
                    entry.timer = None;
                }
                self.clone().poke(&key);
            }
            let wait = next.map_or(Duration::from_secs(3600), |at| {
                Duration::from_millis(u64::try_from(at - now).unwrap_or(0))
            });
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = changed => {}
            }
        }
    }

    /// Hears the pool's wake signals, subscribing again when the subscription ends; sweeps
    /// after each subscription (what was signalled meanwhile) and every `sweep_every`.
    pub(super) async fn hear_wakes(self: Arc<Self>) {
        let mut retry = Backoff::new(Duration::from_millis(200), Duration::from_secs(10));
        loop {
            self.health.beat();
            let mut wakes = match self.setting.store.subscribe_wakes(&self.config.scope).await {
                Ok(w) => {
                    retry.reset();
                    self.health.set_serving(true);
                    self.health.clear_problem();
                    w
                }
                Err(e) => {
                    let wait = retry.take();
                    warn!(pool = %self.config.name, error = %e, retry_in = ?wait, "cannot subscribe to wake signals; retrying");
                    self.health.set_problem(format!("data plane: {e}"));
                    self.sweep().await;
                    tokio::time::sleep(wait).await;
                    continue;
                }
            };
            info!(pool = %self.config.name, "listening for wake signals");
            self.sweep().await;
            let mut sweep = tokio::time::interval(self.config.sweep_every);
            sweep.tick().await;
            loop {
                tokio::select! {
                    key = wakes.next() => match key {
                        Some(key) => self.clone().poke(&key),
                        None => break,
                    },
                    _ = sweep.tick() => {
                        // The loop is alive (`/healthz`).
                        self.health.beat();
                        self.sweep().await;
                    }
                }
            }
            self.health.set_serving(false);
            warn!(pool = %self.config.name, "the wake signal subscription ended; subscribing again");
        }
    }

    /// Pokes every sleeping agent with work waiting (or in flight), and every paused one whose
    /// time this process does not know (another process paused it).
    async fn sweep(self: &Arc<Self>) {
        let asleep: Vec<AgentKey> = lock(&self.agents)
            .iter()
            .filter(|(_, e)| !e.running)
            .map(|(k, _)| k.clone())
            .collect();
        // The store reads a large fleet a thousand agents at a time.
        let seen = match self.setting.store.observe_work(&asleep).await {
            Ok(seen) => seen,
            Err(e) => {
                debug!(pool = %self.config.name, error = %e, "sweep failed; the next one tries again");
                return;
            }
        };
        for (key, seen) in asleep.iter().zip(seen) {
            let timer = lock(&self.agents).get(key).and_then(|e| e.timer);
            if seen.busy() || (seen.paused && timer.is_none()) {
                self.clone().poke(key);
            }
        }
    }
}
