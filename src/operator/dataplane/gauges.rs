//! The fleet's gauges from a look at every agent's data plane: agents by phase
//! (`agentfleet_agents`), and per agent its inbox depth (`agentfleet_inbox_depth`), the calls
//! waiting for a human (`agentfleet_pending_calls`), how long it has been thinking without
//! committing a cycle (`agentfleet_agent_thinking_seconds`), and, once its worker reports
//! archiving, the cycles not archived yet (`agentfleet_archive_lag_cycles`) and whether
//! archiving fails (`agentfleet_archive_failing`), and with a `spec.budget`, whether it is
//! spent (`agentfleet_budget_exhausted`) and what is left (`agentfleet_budget_remaining_tokens`).
//!
//! One home for both who set them: the operator's sweep ([`super::Scaler`]) and `agentfleet
//! dev` ([`watch_fleet`], the same observations of a fleet that nothing scales).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tracing::warn;

use crate::crd::{AgentPhase, BudgetSpec};
use crate::identity::AgentKey;
use crate::operator::status::{phase, remaining, spent};
use crate::store::{now_ms, AgentObservation, Store};
use crate::telemetry::OperatorMetrics;

/// Since when an agent has been thinking without committing a cycle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Thinking {
    /// When a look first saw it thinking (ms since the epoch).
    pub since_ms: i64,
    /// Its committed cycles then: a commit since starts the count over.
    pub cycles: u64,
}

/// What an agent's thinking is after a look that saw `seen` at `now_ms`, when it was `before`:
/// nothing when it is not thinking; the same start while it thinks with no cycle committed
/// since; else a new start now.
pub fn thinking(
    before: Option<Thinking>,
    seen: &AgentObservation,
    now_ms: i64,
) -> Option<Thinking> {
    if !seen.thinking {
        return None;
    }
    match before {
        Some(t) if t.cycles == seen.cycles => Some(t),
        _ => Some(Thinking {
            since_ms: now_ms,
            cycles: seen.cycles,
        }),
    }
}

/// The gauges, and what they remember between looks.
#[derive(Default)]
pub struct Gauges {
    thinking: HashMap<AgentKey, Thinking>,
    /// The agents whose series exist.
    shown: HashSet<AgentKey>,
}

impl Gauges {
    /// One agent (with its `spec.budget`) seen at `now_ms`.
    pub fn agent(
        &mut self,
        metrics: &OperatorMetrics,
        key: &AgentKey,
        budget: Option<&BudgetSpec>,
        seen: &AgentObservation,
        now_ms: i64,
    ) {
        let labels = [key.namespace.as_str(), key.name.as_str()];
        metrics
            .inbox_depth
            .with_label_values(&labels)
            .set(i64::try_from(seen.waiting).unwrap_or(i64::MAX));
        metrics
            .pending_calls
            .with_label_values(&labels)
            .set(i64::try_from(seen.pending.len()).unwrap_or(i64::MAX));
        let now = thinking(self.thinking.get(key).copied(), seen, now_ms);
        let seconds = now.map_or(0.0, |t| {
            Duration::from_millis(u64::try_from(now_ms - t.since_ms).unwrap_or(0)).as_secs_f64()
        });
        metrics
            .thinking_seconds
            .with_label_values(&labels)
            .set(seconds);
        match now {
            Some(t) => self.thinking.insert(key.clone(), t),
            None => self.thinking.remove(key),
        };
        match &seen.archive {
            Some(a) => {
                let lag = seen.cycles.saturating_sub(a.cycle.unwrap_or(0));
                metrics
                    .archive_lag
                    .with_label_values(&labels)
                    .set(i64::try_from(lag).unwrap_or(i64::MAX));
                metrics
                    .archive_failing
                    .with_label_values(&labels)
                    .set(i64::from(!a.ok));
            }
            None => remove_archive(metrics, &labels),
        }
        budget_gauges(metrics, &labels, budget, seen, now_ms);
        self.shown.insert(key.clone());
    }

    /// After a look at every agent: the agents by phase, and the series of agents that are
    /// gone (deleted) removed, so that a deleted agent leaves no gauge behind.
    pub fn fleet(
        &mut self,
        metrics: &OperatorMetrics,
        phases: &HashMap<AgentPhase, i64>,
        agents: &HashSet<&AgentKey>,
    ) {
        for p in AgentPhase::ALL {
            metrics
                .agents
                .with_label_values(&[p.as_str()])
                .set(phases.get(&p).copied().unwrap_or(0));
        }
        let gone: Vec<AgentKey> = self
            .shown
            .iter()
            .filter(|k| !agents.contains(k))
            .cloned()
            .collect();
        for key in gone {
            let labels = [key.namespace.as_str(), key.name.as_str()];
            let _ = metrics.inbox_depth.remove_label_values(&labels);
            let _ = metrics.pending_calls.remove_label_values(&labels);
            let _ = metrics.thinking_seconds.remove_label_values(&labels);
            remove_archive(metrics, &labels);
            budget_gauges(metrics, &labels, None, &AgentObservation::default(), 0);
            self.thinking.remove(&key);
            self.shown.remove(&key);
        }
    }
}

/// Removes an agent's archive gauges (its worker reports no archiving, or it is gone).
fn remove_archive(metrics: &OperatorMetrics, labels: &[&str; 2]) {
    let _ = metrics.archive_lag.remove_label_values(labels);
    let _ = metrics.archive_failing.remove_label_values(labels);
}

/// An agent's budget gauges: set for the periods its budget sets, removed for the others
/// (and all of them without a budget).
fn budget_gauges(
    metrics: &OperatorMetrics,
    labels: &[&str; 2],
    budget: Option<&BudgetSpec>,
    seen: &AgentObservation,
    now_ms: i64,
) {
    let [ns, agent] = *labels;
    let Some(budget) = budget.filter(|b| b.is_set()) else {
        let _ = metrics.budget_exhausted.remove_label_values(labels);
        for period in ["day", "month"] {
            let _ = metrics
                .budget_remaining
                .remove_label_values(&[ns, agent, period]);
        }
        return;
    };
    metrics
        .budget_exhausted
        .with_label_values(labels)
        .set(i64::from(spent(Some(budget), seen, now_ms).is_some()));
    for (period, left) in ["day", "month"]
        .into_iter()
        .zip(remaining(budget, seen, now_ms))
    {
        match left {
            Some(n) => metrics
                .budget_remaining
                .with_label_values(&[ns, agent, period])
                .set(i64::try_from(n).unwrap_or(i64::MAX)),
            None => {
                let _ = metrics
                    .budget_remaining
                    .remove_label_values(&[ns, agent, period]);
            }
        }
    }
}

/// Agents read in one `observe` by [`watch_fleet`].
const OBSERVE_AT_ONCE: usize = 1_000;

/// Keeps the gauges of a fleet that nothing scales (`agentfleet dev`): looks at `agents`
/// every `every` until `stop` turns true. Each agent comes with its replicas (1 running, 0
/// paused) and its `spec.budget`; `up` says whether the process running them (dev's pool) can
/// work now, as a Deployment's available replicas say it for the operator. The phase is the
/// operator's [`phase`] of that; a look that fails leaves the gauges as they were
/// (`agentfleet_data_plane_up` says why).
pub async fn watch_fleet(
    store: Arc<dyn Store>,
    agents: Vec<(AgentKey, i32, Option<BudgetSpec>)>,
    up: Arc<dyn Fn() -> bool + Send + Sync>,
    metrics: OperatorMetrics,
    every: Duration,
    mut stop: watch::Receiver<bool>,
) {
    let keys: Vec<AgentKey> = agents.iter().map(|(k, _, _)| k.clone()).collect();
    let mut gauges = Gauges::default();
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.wait_for(|v| *v) => return,
            _ = tick.tick() => {}
        }
        let now = now_ms();
        let available = i32::from(up());
        let mut phases: HashMap<AgentPhase, i64> = HashMap::new();
        let mut complete = true;
        // A thousand agents at a time: one read's answer stays small however large the fleet.
        for (chunk, watched) in keys
            .chunks(OBSERVE_AT_ONCE)
            .zip(agents.chunks(OBSERVE_AT_ONCE))
        {
            let seen = match store.observe(chunk).await {
                Ok(seen) => seen,
                Err(e) => {
                    warn!(error = %crate::report::chain(&e), "cannot read the data plane; the fleet's gauges wait");
                    complete = false;
                    break;
                }
            };
            for ((key, replicas, budget), o) in watched.iter().zip(&seen) {
                gauges.agent(&metrics, key, budget.as_ref(), o, now);
                *phases
                    .entry(phase(false, Some(*replicas), available.min(*replicas), o))
                    .or_default() += 1;
            }
        }
        if complete {
            gauges.fleet(&metrics, &phases, &keys.iter().collect());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(thinking: bool, cycles: u64) -> AgentObservation {
        AgentObservation {
            thinking,
            cycles,
            ..AgentObservation::default()
        }
    }

    #[test]
    fn thinking_counts_from_the_first_look_until_a_commit_or_a_rest() {
        let t0 = thinking(None, &seen(true, 3), 1_000);
        assert_eq!(
            t0,
            Some(Thinking {
                since_ms: 1_000,
                cycles: 3
            })
        );
        assert_eq!(
            thinking(t0, &seen(true, 3), 9_000),
            t0,
            "still the same cycle"
        );
        assert_eq!(
            thinking(t0, &seen(true, 4), 9_000),
            Some(Thinking {
                since_ms: 9_000,
                cycles: 4
            }),
            "a cycle committed in between: the next one counts from now"
        );
        assert_eq!(thinking(t0, &seen(false, 3), 9_000), None);
    }

    fn value(m: &OperatorMetrics, name: &str) -> Vec<String> {
        m.registry
            .gather()
            .iter()
            .filter(|f| f.name() == name)
            .flat_map(|f| f.get_metric().to_vec())
            .map(|s| {
                let labels: Vec<String> = s
                    .get_label()
                    .iter()
                    .map(|l| format!("{}={}", l.name(), l.value()))
                    .collect();
                format!("{} {}", labels.join(","), s.get_gauge().get_value())
            })
            .collect()
    }

    #[test]
    fn gauges_per_agent_and_by_phase_and_a_deleted_agent_leaves_none() {
        let m = OperatorMetrics::new().unwrap();
        let mut g = Gauges::default();
        let a = AgentKey::new("ns", "a");
        let b = AgentKey::new("ns", "b");
        let mut busy = seen(true, 1);
        busy.waiting = 7;
        busy.tokens = Some(crate::store::TokenSpend {
            day: "1970-01-01".into(),
            day_tokens: 150,
            month: "1970-01".into(),
            month_tokens: 150,
            ..Default::default()
        });
        let budget = BudgetSpec {
            tokens_per_day: Some(100),
            tokens_per_month: None,
        };
        g.agent(&m, &a, Some(&budget), &busy, 1_000);
        g.agent(&m, &a, Some(&budget), &busy, 31_000);
        g.agent(&m, &b, None, &seen(false, 0), 31_000);
        assert_eq!(
            value(&m, "agentfleet_budget_exhausted"),
            ["agent=a,namespace=ns 1"],
            "only for an agent with a budget"
        );
        assert_eq!(
            value(&m, "agentfleet_budget_remaining_tokens"),
            ["agent=a,namespace=ns,period=day 0"],
            "only the periods it sets"
        );
        let phases = HashMap::from([(AgentPhase::Thinking, 1), (AgentPhase::Sleeping, 1)]);
        g.fleet(&m, &phases, &HashSet::from([&a, &b]));
        assert_eq!(
            value(&m, "agentfleet_inbox_depth"),
            ["agent=a,namespace=ns 7", "agent=b,namespace=ns 0"]
        );
        assert_eq!(
            value(&m, "agentfleet_agent_thinking_seconds"),
            ["agent=a,namespace=ns 30", "agent=b,namespace=ns 0"]
        );
        assert_eq!(
            value(&m, "agentfleet_agents"),
            [
                "phase=Failed 0",
                "phase=Pending 0",
                "phase=ScaledToZero 0",
                "phase=Sleeping 1",
                "phase=Thinking 1"
            ]
        );

        // `b` is deleted: the next full look does not see it; `a` loses its budget.
        g.agent(&m, &a, None, &busy, 31_000);
        assert!(value(&m, "agentfleet_budget_exhausted").is_empty());
        assert!(value(&m, "agentfleet_budget_remaining_tokens").is_empty());
        g.fleet(&m, &HashMap::new(), &HashSet::from([&a]));
        assert_eq!(
            value(&m, "agentfleet_inbox_depth"),
            ["agent=a,namespace=ns 7"]
        );
        assert_eq!(
            value(&m, "agentfleet_pending_calls"),
            ["agent=a,namespace=ns 0"]
        );
    }

    #[test]
    fn archive_lag_once_the_worker_reports_archiving() {
        let m = OperatorMetrics::new().unwrap();
        let mut g = Gauges::default();
        let a = AgentKey::new("ns", "a");
        let b = AgentKey::new("ns", "b");
        let mut archiving = seen(false, 12);
        archiving.archive = Some(crate::store::ArchiveReport {
            cycle: Some(9),
            url: Some("s3://fleet/ns/a/9".into()),
            ok: true,
            reason: "Archived".into(),
            message: String::new(),
            since_ms: 0,
        });
        g.agent(&m, &a, None, &archiving, 1_000);
        g.agent(&m, &b, None, &seen(false, 30), 1_000);
        assert_eq!(
            value(&m, "agentfleet_archive_lag_cycles"),
            ["agent=a,namespace=ns 3"],
            "b reports no archiving: no series"
        );
        assert_eq!(
            value(&m, "agentfleet_archive_failing"),
            ["agent=a,namespace=ns 0"]
        );
        // The store is away: nothing archived yet, and failing.
        let report = archiving.archive.as_mut().unwrap();
        report.cycle = None;
        report.ok = false;
        report.reason = "StoreUnreachable".into();
        g.agent(&m, &a, None, &archiving, 2_000);
        assert_eq!(
            value(&m, "agentfleet_archive_lag_cycles"),
            ["agent=a,namespace=ns 12"]
        );
        assert_eq!(
            value(&m, "agentfleet_archive_failing"),
            ["agent=a,namespace=ns 1"]
        );
        // A restore to an older cycle than the newest archived one is no negative lag.
        let report = archiving.archive.as_mut().unwrap();
        report.cycle = Some(40);
        g.agent(&m, &a, None, &archiving, 3_000);
        assert_eq!(
            value(&m, "agentfleet_archive_lag_cycles"),
            ["agent=a,namespace=ns 0"]
        );
        // The report goes (or the agent): so do its series.
        g.agent(&m, &a, None, &seen(false, 12), 4_000);
        assert!(value(&m, "agentfleet_archive_lag_cycles").is_empty());
        g.agent(&m, &a, None, &archiving, 5_000);
        g.fleet(&m, &HashMap::new(), &HashSet::from([&b]));
        assert!(value(&m, "agentfleet_archive_lag_cycles").is_empty());
        assert!(value(&m, "agentfleet_archive_failing").is_empty());
    }

    #[tokio::test]
    async fn dev_watches_its_fleet_with_the_operators_phases() {
        let store: Arc<dyn Store> = Arc::new(crate::store::MemoryStore::new());
        let running = AgentKey::new("ns", "running");
        let paused = AgentKey::new("ns", "paused");
        for k in [&running, &paused] {
            store.register_agent(k).await.unwrap();
        }
        let m = OperatorMetrics::new().unwrap();
        let (stop, rx) = watch::channel(false);
        let up = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let pool_up = up.clone();
        let task = tokio::spawn(watch_fleet(
            store,
            vec![(running, 1, None), (paused, 0, None)],
            Arc::new(move || pool_up.load(std::sync::atomic::Ordering::SeqCst)),
            m.clone(),
            Duration::from_millis(10),
            rx,
        ));
        let phase = |p: &str| m.agents.with_label_values(&[p]).get();
        let until = |want: &'static str| async move {
            tokio::time::timeout(Duration::from_secs(10), async {
                while phase(want) != 1 {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            })
            .await
            .unwrap_or_else(|_| panic!("never {want}"));
        };
        until("ScaledToZero").await;
        // No lease is held between sessions, but the pool that runs the agent is up: it
        // sleeps there, as the operator says of an agent whose worker is available.
        until("Sleeping").await;
        assert_eq!(phase("Pending"), 0);
        // The pool cannot work (its Redis is away): Pending, as with no worker available.
        up.store(false, std::sync::atomic::Ordering::SeqCst);
        until("Pending").await;
        assert_eq!(phase("Sleeping"), 0);
        assert_eq!(
            value(&m, "agentfleet_inbox_depth"),
            [
                "agent=paused,namespace=ns 0",
                "agent=running,namespace=ns 0"
            ]
        );
        stop.send_replace(true);
        task.await.unwrap();
    }
}
