//! A pool's metrics (`agentfleet pool`, a dedicated worker — a pool of one — and `dev`), all
//! prefixed `agentfleet_pool_`, labelled by namespace and pool.

use prometheus::{HistogramOpts, HistogramVec, IntGaugeVec, Opts, Registry};

/// How a pool's agents are doing.
#[derive(Clone)]
pub struct PoolMetrics {
    /// Agents hosted (asleep or not).
    pub hosted: IntGaugeVec,
    /// Agents loaded in memory (their consciousness cached, their tools connected).
    pub warm: IntGaugeVec,
    /// Agents in a cycle now.
    pub thinking: IntGaugeVec,
    /// Agents waiting for a slot (`cycles at once` are busy).
    pub waiting: IntGaugeVec,
    /// How long an agent with work waited for a slot.
    pub slot_wait: HistogramVec,
    /// Agents whose cycle waits on its model, its slot given to another.
    pub awaiting_model: IntGaugeVec,
}

impl PoolMetrics {
    /// The metrics, registered in `registry`.
    pub fn register(registry: &Registry) -> prometheus::Result<Self> {
        let labels = ["namespace", "pool"];
        let gauge = |name: &str, help: &str| IntGaugeVec::new(Opts::new(name, help), &labels);
        let this = Self {
            hosted: gauge(
                "agentfleet_pool_agents_hosted",
                "Agents this process hosts, asleep or not.",
            )?,
            warm: gauge(
                "agentfleet_pool_agents_warm",
                "Agents loaded in this process's memory (consciousness cached, tools connected).",
            )?,
            thinking: gauge(
                "agentfleet_pool_agents_thinking",
                "Agents in a cycle in this process now.",
            )?,
            waiting: gauge(
                "agentfleet_pool_agents_waiting_for_slot",
                "Agents with work waiting for one of this process's cycle slots.",
            )?,
            slot_wait: HistogramVec::new(
                HistogramOpts::new(
                    "agentfleet_pool_slot_wait_seconds",
                    "How long an agent with work waited for a cycle slot.",
                )
                .buckets(vec![
                    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
                ]),
                &labels,
            )?,
            awaiting_model: gauge(
                "agentfleet_pool_agents_awaiting_model",
                "Agents whose cycle waits on its model's answer, having given its slot to another.",
            )?,
        };
        registry.register(Box::new(this.hosted.clone()))?;
        registry.register(Box::new(this.warm.clone()))?;
        registry.register(Box::new(this.thinking.clone()))?;
        registry.register(Box::new(this.waiting.clone()))?;
        registry.register(Box::new(this.slot_wait.clone()))?;
        registry.register(Box::new(this.awaiting_model.clone()))?;
        Ok(this)
    }
}
