//! What a worker (a pool) can honestly say about itself: whether it hears its agents' wake
//! signals, whether its loop is alive, and why it cannot work right now (the data plane is
//! down, an agent's session is restarting). `/readyz` answers from it, and so does the
//! `agentfleet_agent_ready` gauge.

use crate::sync::lock;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Mutex;

use prometheus::IntGauge;

/// A worker's state as its endpoints see it.
#[derive(Default)]
pub struct Health {
    serving: AtomicBool,
    heartbeat: AtomicI64,
    problem: Mutex<Option<String>>,
    gauge: Option<IntGauge>,
}

impl Health {
    /// Health of one agent, kept in its `agentfleet_agent_ready` gauge too.
    pub fn for_agent(
        metrics: &crate::telemetry::WorkerMetrics,
        agent: &crate::identity::AgentKey,
    ) -> Self {
        let gauge = metrics
            .agent_ready
            .with_label_values(&[agent.namespace.as_str(), agent.name.as_str()]);
        gauge.set(0);
        Self {
            gauge: Some(gauge),
            ..Self::default()
        }
    }

    /// Whether the pool hears its agents' wake signals (it serves them).
    pub fn serving(&self) -> bool {
        self.serving.load(Ordering::Relaxed)
    }

    pub(crate) fn set_serving(&self, serving: bool) {
        self.serving.store(serving, Ordering::Relaxed);
        self.update_gauge();
    }

    /// The loop is alive (see [`Health::stalled_for_ms`]).
    pub fn beat(&self) {
        self.heartbeat
            .store(crate::store::now_ms(), Ordering::Relaxed);
    }

    /// Milliseconds since the loop last showed it is alive.
    pub fn stalled_for_ms(&self) -> i64 {
        crate::store::now_ms() - self.heartbeat.load(Ordering::Relaxed)
    }

    /// Why the agent cannot work right now (`None`: it can).
    pub fn problem(&self) -> Option<String> {
        lock(&self.problem).clone()
    }

    /// Records why the agent cannot work (shown by `/readyz` until cleared).
    pub fn set_problem(&self, problem: impl Into<String>) {
        *lock(&self.problem) = Some(problem.into());
        self.update_gauge();
    }

    /// The agent can work again.
    pub fn clear_problem(&self) {
        let mut p = lock(&self.problem);
        if p.take().is_some() {
            drop(p);
            self.update_gauge();
        }
    }

    /// `Ok` when the pool serves its agents and nothing stops them; else why not.
    pub fn ready(&self) -> Result<(), String> {
        if let Some(p) = self.problem() {
            return Err(p);
        }
        if !self.serving() {
            return Err("not listening for wake signals yet".into());
        }
        Ok(())
    }

    fn update_gauge(&self) {
        if let Some(g) = &self.gauge {
            g.set(i64::from(self.ready().is_ok()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_only_while_serving_without_a_problem() {
        let m = crate::telemetry::WorkerMetrics::new().unwrap();
        let key = crate::identity::AgentKey::new("ns", "a");
        let h = Health::for_agent(&m, &key);
        let gauge = || m.agent_ready.with_label_values(&["ns", "a"]).get();
        assert_eq!(h.ready(), Err("not listening for wake signals yet".into()));
        h.set_serving(true);
        assert_eq!((h.ready(), gauge()), (Ok(()), 1));
        h.set_problem("data plane: connection refused");
        assert_eq!(h.ready(), Err("data plane: connection refused".into()));
        assert_eq!(gauge(), 0);
        h.clear_problem();
        assert_eq!((h.ready(), gauge()), (Ok(()), 1));
    }
}
