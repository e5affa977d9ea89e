//! The operator's loop over the data plane (leader only): scaling by inbox depth, the Agent
//! status fields that come from the data plane, and plans.
//!
//! - **Wake**: a push into the inbox of an agent without a worker publishes a wake signal;
//!   the loop sets that agent's worker Deployment to 1 replica at once — one API call, no poll.
//! - **Sweep** (every `--sweep-seconds`, and early when a plan is due): one pipelined Redis
//!   round trip reads every agent's inbox depth, in-flight events, activity, counters, latest
//!   checkpoint, plans, model health, tools, and how archiving and restoring went. From it the
//!   loop scales up what has work (the fallback for a missed wake signal; a restore or seed
//!   the spec asks for and the data plane has not applied is work too), scales down what has
//!   been idle for `idleSeconds` with an empty inbox and nothing in flight, fires due plans,
//!   and writes the data-plane status fields (with `status.tools`, `ToolsReady`,
//!   `CheckpointArchived`, `Restored` and `restoredFrom`) — only when they changed, and at
//!   most once per `--status-interval-seconds` per agent.
//!
//! Which status fields are the loop's and which the reconcile's: [`crate::operator::status`].
//! Deciding is pure ([`mod@decide`]); acting goes through [`Cluster`], so the loop is tested
//! without an API server; plans fire in `plans`.

pub mod cluster;
pub mod decide;
pub mod gauges;
mod plans;
pub mod pools;
mod tuning;

pub use tuning::Tuning;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures::stream::BoxStream;
use futures::StreamExt;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::runtime::events::EventType;
use tokio::sync::{watch, Notify};
use tokio::time::Instant;
use tracing::{info, warn};

use self::cluster::{Cluster, Notice};
use self::decide::{decide, has_work, replicas_to_apply, ScaleAction, Trigger};
use self::gauges::Gauges;
use self::plans::Firing;
use self::pools::{PoolKey, PoolLoad, PoolScale, Pools};
use crate::crd::{
    AgentPhase, AgentSpec, AgentStatus, BudgetSpec, ConsciousnessSpec, PlanSpec, ScalingSpec,
};
use crate::identity::AgentKey;
use crate::operator::status::{data_notice, data_part, data_status, find, phase, spent, time_of};
use crate::store::{now_ms, AgentObservation, Store};
use crate::sync::lock;
use crate::telemetry::OperatorMetrics;

/// What the reconcile tells the loop about an agent.
pub struct Tracked<'a> {
    /// The Agent, for Events.
    pub object: ObjectReference,
    /// The Agent's spec, for its scaling, budget and restore settings.
    pub spec: &'a AgentSpec,
    /// The spec or its model configuration cannot run.
    pub failed: bool,
    /// Replicas of the worker Deployment as applied.
    pub replicas: Option<i32>,
    /// Workers available.
    pub available: i32,
    /// The status as the reconcile found it (what was written before).
    pub status: &'a AgentStatus,
    /// The Agent's `metadata.generation`, which the conditions written here observed.
    pub generation: Option<i64>,
}

struct Entry {
    object: ObjectReference,
    scaling: ScalingSpec,
    paused: bool,
    /// What the spec asks of the consciousness (a restore or a seed wakes the worker).
    consciousness: ConsciousnessSpec,
    /// Tokens the agent may spend (`spec.budget`).
    budget: Option<BudgetSpec>,
    /// Its tools (`spec.tools`), whose approval patterns its status checks.
    tools: crate::crd::ToolsSpec,
    /// Until when its budget is spent, as the last look saw it (ms): no wake before.
    spent_until_ms: Option<i64>,
    plans: Vec<PlanSpec>,
    failed: bool,
    /// Replicas asked for (the Deployment's own count with external scaling).
    replicas: Option<i32>,
    available: i32,
    idle_since_ms: Option<i64>,
    written: Option<AgentStatus>,
    written_at: Option<Instant>,
    /// The data-plane conditions last computed (kept when a write fails), whose transition
    /// times the next ones keep until their status flips.
    conditions: Vec<Condition>,
    /// The Agent's generation as last tracked.
    generation: Option<i64>,
    /// The Pool that runs it (`spec.runtime.pool`).
    pool: Option<PoolKey>,
}

/// One thing a pass decided to do.
enum Action {
    Scale {
        agent: AgentKey,
        from: i32,
        decision: ScaleAction,
        object: ObjectReference,
    },
    Status(AgentKey, Box<AgentStatus>),
    Plan(Firing),
    Event(ObjectReference, Notice),
    ScalePool(PoolScale),
}

/// The loop's state, shared with the reconcile.
pub struct Scaler {
    entries: Mutex<HashMap<AgentKey, Entry>>,
    /// Per agent: held while replicas are written (by a scale change or the reconcile's apply).
    locks: Mutex<HashMap<AgentKey, Arc<tokio::sync::Mutex<()>>>>,
    pending: Mutex<HashSet<AgentKey>>,
    /// The fleet's gauges (set by every pass).
    gauges: Mutex<Gauges>,
    poke: Notify,
    /// The Pools, scaled by their agents' load.
    pub pools: Pools,
    /// Timing.
    tuning: Tuning,
}

/// Replicas to apply, and the scaling lock they were read under (held while this lives).
pub struct Held<R> {
    /// The replicas to apply.
    pub replicas: R,
    _lock: tokio::sync::OwnedMutexGuard<()>,
}

/// What the loop acts with.
pub struct Deps {
    /// The data plane.
    pub store: Arc<dyn Store>,
    /// Where scale changes, statuses and Events go (the API server; a recording in tests).
    pub cluster: Arc<dyn Cluster>,
    /// Operator metrics.
    pub metrics: OperatorMetrics,
}

impl Scaler {
    /// An empty loop state.
    pub fn new(tuning: Tuning) -> Self {
        Self {
            entries: Mutex::new(HashMap::new()),
            locks: Mutex::new(HashMap::new()),
            pending: Mutex::new(HashSet::new()),
            gauges: Mutex::new(Gauges::default()),
            poke: Notify::new(),
            pools: Pools::default(),
            tuning,
        }
    }

    fn entries(&self) -> MutexGuard<'_, HashMap<AgentKey, Entry>> {
        lock(&self.entries)
    }

    /// The agent's scaling lock: whoever writes its replicas holds it.
    async fn lock(&self, agent: &AgentKey) -> tokio::sync::OwnedMutexGuard<()> {
        let lock = lock(&self.locks).entry(agent.clone()).or_default().clone();
        lock.lock_owned().await
    }

    /// The replicas the reconcile applies for `agent` (see [`replicas_to_apply`]), read under
    /// its scaling lock, which the returned [`Held`] keeps until it is dropped: an apply made
    /// meanwhile never undoes a scale change of the loop. `last_known` is the status' replicas,
    /// which carry the count across operator restarts.
    pub async fn hold(
        &self,
        agent: &AgentKey,
        spec: &AgentSpec,
        last_known: Option<i32>,
    ) -> Held<Option<i32>> {
        let lock = self.lock(agent).await;
        let current = self
            .entries()
            .get(agent)
            .and_then(|e| e.replicas)
            .or(last_known);
        Held {
            replicas: replicas_to_apply(spec, current),
            _lock: lock,
        }
    }

    /// How long a deleted Agent's state may resist removal before it is left behind.
    pub fn cleanup_timeout(&self) -> Duration {
        self.tuning.cleanup_timeout
    }

    /// Records what the reconcile found and applied, and asks the loop to look at the agent.
    pub fn track(&self, agent: &AgentKey, t: Tracked<'_>) {
        {
            let mut entries = self.entries();
            let spec = t.spec;
            let fixed = spec.scaling.external || spec.paused || spec.scaling.min_replicas >= 1;
            let e = entries.entry(agent.clone()).or_insert_with(|| Entry {
                object: t.object.clone(),
                scaling: spec.scaling.clone(),
                paused: spec.paused,
                consciousness: spec.consciousness.clone(),
                budget: spec.budget.clone(),
                tools: spec.tools.clone(),
                spent_until_ms: None,
                plans: Vec::new(),
                failed: t.failed,
                // First sight: what was applied; afterwards the scaler's own count, unless
                // the spec fixes it.
                replicas: t.replicas,
                available: t.available,
                idle_since_ms: None,
                // What an earlier operator wrote, so an unchanged status is not rewritten.
                written: Some(data_part(t.status)),
                written_at: None,
                conditions: data_part(t.status).conditions,
                generation: t.generation,
                pool: None,
            });
            e.generation = t.generation;
            e.pool = spec
                .runtime
                .as_ref()
                .map(|r| PoolKey::new(agent.namespace.clone(), r.pool.clone()));
            e.object = t.object;
            e.scaling = spec.scaling.clone();
            e.paused = spec.paused;
            e.consciousness = spec.consciousness.clone();
            if e.budget != spec.budget {
                // A raised (or removed) budget: the next look decides again.
                e.spent_until_ms = None;
            }
            e.budget = spec.budget.clone();
            e.tools.clone_from(&spec.tools);
            e.plans = spec.plans.clone();
            e.failed = t.failed;
            e.available = t.available;
            if fixed {
                e.replicas = t.replicas;
            }
        }
        self.refresh(agent.clone());
    }

    /// Asks the loop to look at `agent` soon (its status, scaling and plans).
    fn refresh(&self, agent: AgentKey) {
        lock(&self.pending).insert(agent);
        self.poke.notify_one();
    }

    /// Forgets an agent (it was deleted).
    pub fn forget(&self, agent: &AgentKey) {
        self.entries().remove(agent);
        lock(&self.locks).remove(agent);
    }

    /// The replicas the operator asked for, for a worker it scales (not `scaling.external`).
    pub fn expected_replicas(&self, agent: &AgentKey) -> Option<i32> {
        self.entries()
            .get(agent)
            .filter(|e| !e.scaling.external)
            .and_then(|e| e.replicas)
    }

    /// The phase the loop would write for `agent` if the data plane showed `seen`.
    pub fn phase_of(&self, agent: &AgentKey, seen: &AgentObservation) -> Option<AgentPhase> {
        self.entries()
            .get(agent)
            .map(|e| phase(e.failed, e.replicas, e.available, seen))
    }

    /// Runs the loop until `stop` turns true.
    pub async fn run(self: Arc<Self>, deps: Deps, mut stop: watch::Receiver<bool>) {
        let deps = Arc::new(deps);
        let mut wakes: Option<BoxStream<'static, AgentKey>> = None;
        let mut last_subscribe: Option<Instant> = None;
        let mut next_sweep = Instant::now();
        loop {
            if wakes.is_none()
                && last_subscribe.is_none_or(|t| t.elapsed() >= Duration::from_secs(1))
            {
                last_subscribe = Some(Instant::now());
                match deps
                    .store
                    .subscribe_wakes(&crate::store::WakeScope::All)
                    .await
                {
                    Ok(s) => wakes = Some(s),
                    Err(e) => {
                        warn!(error = %crate::report::chain(&e), "cannot subscribe to wake signals; the sweep still scales up")
                    }
                }
            }
            tokio::select! {
                () = stopped(&mut stop) => return,
                key = next_wake(&mut wakes) => match key {
                    Some(key) => self.on_wake(key, &deps),
                    None => {
                        warn!("wake signal subscription ended; subscribing again");
                        wakes = None;
                    }
                },
                _ = self.poke.notified() => {
                    let keys: Vec<AgentKey> = lock(&self.pending)
                        .drain()
                        .collect();
                    if let Some(due) = self.pass(Some(keys), &deps).await {
                        next_sweep = next_sweep.min(due);
                    }
                }
                _ = tokio::time::sleep_until(next_sweep) => {
                    let timer = deps.metrics.sweep_duration.start_timer();
                    let due = self.pass(None, &deps).await;
                    timer.observe_duration();
                    next_sweep = Instant::now() + self.tuning.sweep;
                    if let Some(due) = due {
                        next_sweep = next_sweep.min(due);
                    }
                }
            }
        }
    }

    /// A wake signal: scale the agent up at once unless it has a worker (or may not get one).
    fn on_wake(self: &Arc<Self>, agent: AgentKey, deps: &Arc<Deps>) {
        let received = Instant::now();
        let scale = {
            let mut entries = self.entries();
            match entries.get_mut(&agent) {
                None => Err("unknown"),
                Some(e) if e.pool.is_some() && !e.paused => Ok(None),
                Some(e) if e.scaling.external || e.paused => Err("held"),
                Some(e) if e.spent_until_ms.is_some_and(|t| t > now_ms()) => Err("budget_spent"),
                Some(e) if e.replicas.unwrap_or(0) >= 1 => Err("already_up"),
                Some(e) => {
                    e.replicas = Some(1);
                    e.idle_since_ms = None;
                    Ok(Some(e.object.clone()))
                }
            }
        };
        let object = match scale {
            Ok(Some(object)) => object,
            Ok(None) => return self.on_pooled_wake(&agent, deps),
            Err(outcome) => {
                deps.metrics.wakes.with_label_values(&[outcome]).inc();
                return;
            }
        };
        deps.metrics.wakes.with_label_values(&["scaled"]).inc();
        let this = self.clone();
        let deps = deps.clone();
        tokio::spawn(async move {
            let scaled = this
                .scale(
                    &deps,
                    agent.clone(),
                    0,
                    ScaleAction::Up {
                        waiting: 0,
                        restore: false,
                    },
                    object,
                    Trigger::Wake,
                )
                .await;
            if scaled {
                deps.metrics
                    .wake_to_scale
                    .observe(received.elapsed().as_secs_f64());
            }
        });
    }

    /// A wake signal for a pooled agent: its Pool gets a replica at once if it runs none.
    fn on_pooled_wake(self: &Arc<Self>, agent: &AgentKey, deps: &Arc<Deps>) {
        let pool = self.entries().get(agent).and_then(|e| e.pool.clone());
        let Some(scale) = pool.and_then(|p| self.pools.wake(&p, &agent.name)) else {
            deps.metrics.wakes.with_label_values(&["already_up"]).inc();
            return;
        };
        deps.metrics.wakes.with_label_values(&["scaled"]).inc();
        let this = self.clone();
        let deps = deps.clone();
        tokio::spawn(async move { this.pools.scale(&deps, scale, Trigger::Wake).await });
    }

    /// Sets the replicas; on failure the entry goes back to what it was, so the next sweep
    /// tries again. Returns whether the change landed.
    async fn scale(
        &self,
        deps: &Deps,
        agent: AgentKey,
        from: i32,
        decision: ScaleAction,
        object: ObjectReference,
        trigger: Trigger,
    ) -> bool {
        let Some(to) = decision.replicas() else {
            return false;
        };
        let direction = if to == 1 { "up" } else { "down" };
        let written = {
            let _scaling = self.lock(&agent).await;
            // Still what this change expects: a newer decision (or a deletion) wins.
            let current = self.entries().get(&agent).and_then(|e| e.replicas);
            if current != Some(to) {
                return false;
            }
            deps.cluster.set_replicas(&agent, to).await
        };
        if let Err(e) = written {
            warn!(%agent, error = %crate::report::chain(&e), to, "cannot set the worker's replicas; the next sweep retries");
            deps.metrics
                .scale_errors
                .with_label_values(&[direction])
                .inc();
            if let Some(entry) = self.entries().get_mut(&agent) {
                if entry.replicas == Some(to) {
                    entry.replicas = Some(from);
                }
            }
            return false;
        }
        deps.metrics
            .scale_decisions
            .with_label_values(&[direction, trigger.label()])
            .inc();
        let (reason, note) = if let ScaleAction::Down { idle } = decision {
            let idle = idle.as_secs();
            info!(%agent, idle_seconds = idle, "scaled down");
            (
                "ScaledDown",
                format!(
                    "worker scaled {from} → 0 after {idle}s idle: empty inbox, nothing in flight"
                ),
            )
        } else if let ScaleAction::Up { restore: true, .. } = decision {
            info!(%agent, trigger = trigger.as_str(), "scaled up to restore");
            (
                "ScaledUp",
                format!(
                    "worker scaled {from} → 1 by the {}: the spec asks for a consciousness restore or seed that is not applied yet",
                    trigger.as_str()
                ),
            )
        } else {
            // Read now: a wake signal does not say how much waits.
            let waiting = deps.store.inbox_depth(&agent).await.unwrap_or(0);
            info!(%agent, waiting, trigger = trigger.as_str(), "scaled up");
            (
                "ScaledUp",
                format!(
                    "worker scaled {from} → 1 by the {}: {waiting} event(s) waiting in the inbox",
                    trigger.as_str()
                ),
            )
        };
        let notice = Notice {
            kind: EventType::Normal,
            reason: reason.into(),
            action: "Scale",
            note,
        };
        deps.cluster.publish(&object, notice).await;
        self.refresh(agent);
        true
    }

    /// One look at `keys` (every agent when `None`): decisions, then actions. Returns the
    /// earliest upcoming plan due time.
    async fn pass(
        self: &Arc<Self>,
        keys: Option<Vec<AgentKey>>,
        deps: &Arc<Deps>,
    ) -> Option<Instant> {
        let full = keys.is_none();
        let keys = keys.unwrap_or_else(|| self.entries().keys().cloned().collect());
        if keys.is_empty() {
            return None;
        }
        let seen = match deps.store.observe(&keys).await {
            Ok(seen) => seen,
            Err(e) => {
                warn!(error = %crate::report::chain(&e), agents = keys.len(), "cannot read the data plane; scaling and status wait");
                return None;
            }
        };
        let now = now_ms();
        let (actions, next_due) = self.plan_actions(&keys, &seen, now, full, deps);
        let next_due = next_due.map(|due| {
            let wait = u64::try_from(due.saturating_sub(now)).unwrap_or(0);
            Instant::now() + Duration::from_millis(wait)
        });
        if !actions.is_empty() {
            let this = self.clone();
            let deps = deps.clone();
            tokio::spawn(async move {
                futures::stream::iter(actions)
                    .for_each_concurrent(16, |a| this.act(a, &deps))
                    .await;
            });
        }
        next_due
    }

    /// The decisions of a pass (entries updated as if they succeed), and the next plan due
    /// time.
    fn plan_actions(
        &self,
        keys: &[AgentKey],
        seen: &[AgentObservation],
        now: i64,
        full: bool,
        deps: &Deps,
    ) -> (Vec<Action>, Option<i64>) {
        let metrics = &deps.metrics;
        let mut actions = Vec::new();
        let mut next_due: Option<i64> = None;
        let mut phases: HashMap<AgentPhase, i64> = HashMap::new();
        let mut loads: HashMap<PoolKey, PoolLoad> = HashMap::new();
        let mut entries = self.entries();
        let mut gauges = lock(&self.gauges);
        for (key, o) in keys.iter().zip(seen) {
            let Some(e) = entries.get_mut(key) else {
                continue;
            };
            gauges.agent(metrics, key, e.budget.as_ref(), o, now);
            let o = &o.at(now);
            let spent = spent(e.budget.as_ref(), o, now);
            // Idle since the first quiet look, or the last cycle if later.
            if has_work(o, spent.is_some()) {
                e.idle_since_ms = None;
            } else if e.idle_since_ms.is_none() {
                e.idle_since_ms = Some(now);
            }
            let idle = e.idle_since_ms.map(|since| {
                let from = since.max(o.last_cycle_ms.unwrap_or(0));
                Duration::from_millis(u64::try_from(now - from).unwrap_or(0))
            });
            if let Some(pool) = e.pool.as_ref().filter(|_| !e.paused && !e.failed) {
                let load = loads.entry(pool.clone()).or_default();
                load.agents += 1;
                load.thinking += u32::from(o.thinking);
                load.waiting += u32::from(!o.thinking && has_work(o, spent.is_some()));
            }
            let replicas = e.replicas.unwrap_or(0);
            e.spent_until_ms = spent.as_ref().map(|s| s.until_ms);
            if let Some(t) = e.spent_until_ms {
                // Looked at again when the budget rolls over.
                next_due = Some(next_due.map_or(t, |n| n.min(t)));
            }
            let decision = decide(
                &e.scaling,
                e.paused,
                &e.consciousness,
                replicas,
                o,
                idle,
                spent.is_some(),
            );
            if let Some(to) = decision.replicas() {
                e.replicas = Some(to);
                if to == 1 {
                    e.idle_since_ms = None;
                }
                actions.push(Action::Scale {
                    agent: key.clone(),
                    from: replicas,
                    decision,
                    object: e.object.clone(),
                });
            }

            let (todo, next) = plans::due(key, &e.plans, o, now);
            if let Some(t) = next {
                next_due = Some(next_due.map_or(t, |n| n.min(t)));
            }
            actions.extend(todo.into_iter().map(Action::Plan));

            let status = data_status(
                e.failed,
                e.replicas,
                e.available,
                e.budget.as_ref(),
                Some(&e.tools),
                e.generation,
                o,
                &e.conditions,
                time_of(now),
                |cycle| deps.store.checkpoint_ref(key, cycle),
            );
            // Events for what the worker reports that changed (a problem is a Warning).
            for c in &status.conditions {
                let before = find(&e.conditions, &c.type_);
                if let Some(kind) = data_notice(before, c) {
                    let notice = Notice {
                        kind,
                        reason: c.reason.clone(),
                        action: "Observe",
                        note: c.message.clone(),
                    };
                    actions.push(Action::Event(e.object.clone(), notice));
                }
            }
            e.conditions.clone_from(&status.conditions);
            if let Some(p) = status.phase {
                *phases.entry(p).or_default() += 1;
            }
            let stale = e.written.as_ref() != Some(&status);
            let allowed = e
                .written_at
                .is_none_or(|t| t.elapsed() >= self.tuning.status_interval);
            if stale && allowed {
                e.written = Some(status.clone());
                e.written_at = Some(Instant::now());
                actions.push(Action::Status(key.clone(), Box::new(status)));
            }
        }
        if full {
            gauges.fleet(metrics, &phases, &entries.keys().collect());
            let scales = self.pools.observe(&loads, Instant::now());
            actions.extend(scales.into_iter().map(Action::ScalePool));
        }
        (actions, next_due)
    }

    async fn act(&self, action: Action, deps: &Deps) {
        match action {
            Action::Scale {
                agent,
                from,
                decision,
                object,
            } => {
                self.scale(deps, agent, from, decision, object, Trigger::Sweep)
                    .await;
            }
            Action::Status(agent, status) => {
                match deps.cluster.write_status(&agent, &status).await {
                    Ok(()) => deps.metrics.status_writes.with_label_values(&["ok"]).inc(),
                    Err(e) => {
                        deps.metrics
                            .status_writes
                            .with_label_values(&["error"])
                            .inc();
                        warn!(%agent, error = %crate::report::chain(&e), "cannot write the agent's status; retrying");
                        if let Some(entry) = self.entries().get_mut(&agent) {
                            entry.written = None;
                            entry.written_at = None;
                        }
                    }
                }
            }
            Action::Plan(firing) => {
                plans::fire(deps.store.as_ref(), &deps.metrics, firing).await;
            }
            Action::Event(object, notice) => deps.cluster.publish(&object, notice).await,
            Action::ScalePool(scale) => self.pools.scale(deps, scale, Trigger::Sweep).await,
        }
    }
}

/// Resolves when `stop` turns true (or its sender is gone).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|v| *v).await;
}

/// The next wake signal; pending forever without a subscription.
async fn next_wake(wakes: &mut Option<BoxStream<'static, AgentKey>>) -> Option<AgentKey> {
    match wakes {
        Some(s) => s.next().await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests;
