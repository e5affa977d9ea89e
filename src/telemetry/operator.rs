//! The operator's metrics. The data-plane gauges among them (agents by phase, inbox depth,
//! calls waiting for a human, time thinking, data plane up) are also what `agentfleet dev`
//! serves, set by the same code ([`crate::operator::dataplane::gauges`]).

use prometheus::{
    GaugeVec, Histogram, HistogramOpts, HistogramVec, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry,
};

/// The operator's metrics, all prefixed `agentfleet_`.
#[derive(Clone)]
pub struct OperatorMetrics {
    /// The registry they are registered in.
    pub registry: Registry,
    /// Reconciles run, by controller.
    pub reconciles: IntCounterVec,
    /// Reconcile errors, by controller and bounded error category.
    pub reconcile_errors: IntCounterVec,
    /// Reconcile duration, by controller.
    pub reconcile_duration: HistogramVec,
    /// 1 while this replica holds the leader lease.
    pub leader: IntGauge,
    /// Replica changes the scaler made, by direction (`up`, `down`) and trigger (`wake`,
    /// `sweep`).
    pub scale_decisions: IntCounterVec,
    /// Replica changes that the API server refused or did not answer, by direction.
    pub scale_errors: IntCounterVec,
    /// Wake signal received → worker Deployment replicas set.
    pub wake_to_scale: Histogram,
    /// Wake signals, by outcome (`scaled`, `already_up`, `held`, `unknown`).
    pub wakes: IntCounterVec,
    /// Time one sweep of every agent's data plane took (one round trip plus decisions).
    pub sweep_duration: Histogram,
    /// Agent status writes from the data plane, by result (`ok`, `error`).
    pub status_writes: IntCounterVec,
    /// Plans fired into inboxes, by source (`spec`, `agent`).
    pub plans_fired: IntCounterVec,
    /// Agents by phase, as of the last sweep.
    pub agents: IntGaugeVec,
    /// Calls waiting for a human, by namespace and agent, as of the last sweep.
    pub pending_calls: IntGaugeVec,
    /// Events waiting in each agent's inbox (urgent queue included), as of the last sweep.
    pub inbox_depth: IntGaugeVec,
    /// How long each agent has been thinking without committing a cycle, as of the last
    /// sweep (0 when it is not thinking).
    pub thinking_seconds: GaugeVec,
    /// Committed cycles of each agent whose checkpoint is not in the archive yet (its cycles
    /// minus the newest archived cycle), as of the last sweep; only for agents whose worker
    /// reports archiving.
    pub archive_lag: IntGaugeVec,
    /// 1 while the worker's last attempt to archive a checkpoint failed
    /// (`CheckpointArchived=False`), else 0; only for agents whose worker reports archiving.
    pub archive_failing: IntGaugeVec,
    /// 1 while a token budget of the agent is spent (`BudgetExhausted=True`), else 0; only for
    /// agents with `spec.budget`.
    pub budget_exhausted: IntGaugeVec,
    /// Tokens left in the agent's budget of each `period` (`day`, `month`), as of the last
    /// sweep; only for the periods its `spec.budget` sets.
    pub budget_remaining: IntGaugeVec,
    /// 1 while this process reaches the data plane, else 0 (kept by
    /// [`super::data_plane::watch_data_plane`]).
    pub data_plane_up: IntGauge,
}

/// The controllers, as the `controller` label names them.
pub const CONTROLLERS: [&str; 2] = ["agent", "space"];

impl OperatorMetrics {
    /// Creates and registers the metrics in a fresh registry.
    pub fn new() -> Result<Self, prometheus::Error> {
        Self::register(&Registry::new())
    }

    /// Creates the metrics and registers them in `registry`. Every bounded label set of the
    /// counters starts at 0, so a rate or a ratio exists before the first event (a scale-up
    /// rate of 0 is an answer; a missing series is not).
    pub fn register(registry: &Registry) -> Result<Self, prometheus::Error> {
        let counter = |name: &str, help: &str, labels: &[&str]| {
            IntCounterVec::new(Opts::new(name, help), labels)
        };
        let reconciles = counter(
            "agentfleet_reconcile_total",
            "Reconciles run, by controller.",
            &["controller"],
        )?;
        let reconcile_errors = counter(
            "agentfleet_reconcile_errors_total",
            "Reconcile errors, by controller and error category.",
            &["controller", "category"],
        )?;
        let reconcile_duration = HistogramVec::new(
            HistogramOpts::new(
                "agentfleet_reconcile_duration_seconds",
                "Time one reconcile took, by controller.",
            )
            .buckets(vec![
                0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
            ]),
            &["controller"],
        )?;
        let leader = IntGauge::new(
            "agentfleet_operator_leader",
            "1 while this operator replica holds the leader lease.",
        )?;
        let scale_decisions = counter(
            "agentfleet_scale_decisions_total",
            "Worker replica changes the operator made, by direction and trigger.",
            &["direction", "trigger"],
        )?;
        let scale_errors = counter(
            "agentfleet_scale_errors_total",
            "Worker replica changes the API server refused or did not answer, by direction.",
            &["direction"],
        )?;
        let wake_to_scale = Histogram::with_opts(
            HistogramOpts::new(
                "agentfleet_wake_to_scale_seconds",
                "Wake signal received until the worker Deployment's replicas were set.",
            )
            .buckets(vec![
                0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
            ]),
        )?;
        let wakes = counter(
            "agentfleet_wake_signals_total",
            "Wake signals received, by outcome (scaled, already_up, held, unknown).",
            &["outcome"],
        )?;
        let sweep_duration = Histogram::with_opts(
            HistogramOpts::new(
                "agentfleet_sweep_duration_seconds",
                "Time one sweep of every agent's inbox, activity and plans took.",
            )
            .buckets(vec![
                0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
            ]),
        )?;
        let status_writes = counter(
            "agentfleet_status_writes_total",
            "Agent status writes from the data plane (depth, phase, cycles, checkpoint), by result.",
            &["result"],
        )?;
        let plans_fired = counter(
            "agentfleet_plans_fired_total",
            "Plans fired into agents' inboxes, by source (spec, agent).",
            &["source"],
        )?;
        let agents = IntGaugeVec::new(
            Opts::new(
                "agentfleet_agents",
                "Agents by phase, as of the last sweep.",
            ),
            &["phase"],
        )?;
        let pending_calls = IntGaugeVec::new(
            Opts::new(
                "agentfleet_pending_calls",
                "Calls waiting for a human's answer (approvals, interactive tools), by agent.",
            ),
            &["namespace", "agent"],
        )?;
        let inbox_depth = IntGaugeVec::new(
            Opts::new(
                "agentfleet_inbox_depth",
                "Events waiting in the agent's inbox (urgent queue included), as of the last sweep.",
            ),
            &["namespace", "agent"],
        )?;
        let thinking_seconds = GaugeVec::new(
            Opts::new(
                "agentfleet_agent_thinking_seconds",
                "How long the agent has been thinking without committing a cycle, as of the last sweep (0: not thinking).",
            ),
            &["namespace", "agent"],
        )?;
        let archive_lag = IntGaugeVec::new(
            Opts::new(
                "agentfleet_archive_lag_cycles",
                "Committed cycles whose checkpoint is not in the archive yet (object storage), as of the last sweep.",
            ),
            &["namespace", "agent"],
        )?;
        let archive_failing = IntGaugeVec::new(
            Opts::new(
                "agentfleet_archive_failing",
                "1 while the worker's last attempt to archive a checkpoint failed (CheckpointArchived=False), else 0.",
            ),
            &["namespace", "agent"],
        )?;
        let budget_exhausted = IntGaugeVec::new(
            Opts::new(
                "agentfleet_budget_exhausted",
                "1 while a token budget of the agent (spec.budget) is spent and it calls no model, else 0.",
            ),
            &["namespace", "agent"],
        )?;
        let budget_remaining = IntGaugeVec::new(
            Opts::new(
                "agentfleet_budget_remaining_tokens",
                "Tokens left in the agent's budget of the UTC day or month (spec.budget), as of the last sweep.",
            ),
            &["namespace", "agent", "period"],
        )?;
        let data_plane_up = super::data_plane::gauge()?;

        for controller in CONTROLLERS {
            reconciles.with_label_values(&[controller]);
            reconcile_duration.with_label_values(&[controller]);
        }
        for direction in ["up", "down"] {
            scale_errors.with_label_values(&[direction]);
            for trigger in ["wake", "sweep"] {
                scale_decisions.with_label_values(&[direction, trigger]);
            }
        }
        for outcome in ["scaled", "already_up", "held", "budget_spent", "unknown"] {
            wakes.with_label_values(&[outcome]);
        }
        for result in ["ok", "error"] {
            status_writes.with_label_values(&[result]);
        }
        for source in ["spec", "agent"] {
            plans_fired.with_label_values(&[source]);
        }

        registry.register(Box::new(reconciles.clone()))?;
        registry.register(Box::new(reconcile_errors.clone()))?;
        registry.register(Box::new(reconcile_duration.clone()))?;
        registry.register(Box::new(leader.clone()))?;
        registry.register(Box::new(scale_decisions.clone()))?;
        registry.register(Box::new(scale_errors.clone()))?;
        registry.register(Box::new(wake_to_scale.clone()))?;
        registry.register(Box::new(wakes.clone()))?;
        registry.register(Box::new(sweep_duration.clone()))?;
        registry.register(Box::new(status_writes.clone()))?;
        registry.register(Box::new(plans_fired.clone()))?;
        registry.register(Box::new(agents.clone()))?;
        registry.register(Box::new(pending_calls.clone()))?;
        registry.register(Box::new(inbox_depth.clone()))?;
        registry.register(Box::new(thinking_seconds.clone()))?;
        registry.register(Box::new(archive_lag.clone()))?;
        registry.register(Box::new(archive_failing.clone()))?;
        registry.register(Box::new(budget_exhausted.clone()))?;
        registry.register(Box::new(budget_remaining.clone()))?;
        registry.register(Box::new(data_plane_up.clone()))?;
        Ok(Self {
            registry: registry.clone(),
            reconciles,
            reconcile_errors,
            reconcile_duration,
            leader,
            scale_decisions,
            scale_errors,
            wake_to_scale,
            wakes,
            sweep_duration,
            status_writes,
            plans_fired,
            agents,
            pending_calls,
            inbox_depth,
            thinking_seconds,
            archive_lag,
            archive_failing,
            budget_exhausted,
            budget_remaining,
            data_plane_up,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_counters_start_at_zero_and_dev_can_share_a_registry() {
        let registry = Registry::new();
        let m = OperatorMetrics::register(&registry).unwrap();
        let text = {
            let mut buf = Vec::new();
            prometheus::Encoder::encode(
                &prometheus::TextEncoder::new(),
                &registry.gather(),
                &mut buf,
            )
            .unwrap();
            String::from_utf8(buf).unwrap()
        };
        for series in [
            "agentfleet_scale_decisions_total{direction=\"up\",trigger=\"wake\"} 0",
            "agentfleet_scale_decisions_total{direction=\"down\",trigger=\"sweep\"} 0",
            "agentfleet_reconcile_total{controller=\"space\"} 0",
            "agentfleet_wake_signals_total{outcome=\"held\"} 0",
            "agentfleet_data_plane_up 0",
        ] {
            assert!(text.contains(series), "{series}\n{text}");
        }
        // The worker's and the gateway's metrics go in the same registry (as in `dev`).
        crate::telemetry::GatewayMetrics::register(&m.registry).unwrap();
        assert!(
            OperatorMetrics::register(&registry).is_err(),
            "registered once"
        );
    }
}
