//! The operator's loop over the data plane (leader only): scaling by inbox depth, the Agent
//! status fields that come from the data plane, and plans.
//!
//! - **Wake**: a push into the inbox of an agent without a worker publishes a wake signal;
//!   the loop sets that agent's worker Deployment to 1 replica at once — one API call, no poll.
//! - **Sweep** (every `--sweep-seconds`, and early when a plan is due): one pipelined Redis
//!   round trip reads every agent's inbox depth, in-flight events, activity, counters, latest
//!   checkpoint and plans. From it the loop scales up what has work (the fallback for a missed
//!   wake signal), scales down what has been idle for `idleSeconds` with an empty inbox and
//!   nothing in flight, fires due plans, and writes the data-plane status fields — only when
//!   they changed, and at most once per `--status-interval-seconds` per agent.
//!
//! The reconcile and this loop own disjoint status fields, each under its own server-side
//! apply field manager: the reconcile writes conditions, available replicas and the
//! configuration hash; this loop writes phase, replicas, inbox depth, cycles, tokens, last
//! cycle time and the checkpoint.
//! Deciding is pure ([`decide`], [`phase`]); acting goes through [`Cluster`], so the loop is
//! tested without an API server.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use futures::stream::BoxStream;
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::api::{Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder};
use kube::{Api, Client};
use tokio::sync::{watch, Notify};
use tokio::time::Instant;
use tracing::{info, warn};

use super::agent::MODEL_AVAILABLE;
use super::build;
use crate::crd::{AgentPhase, AgentSpec, AgentStatus, CheckpointStatus, PlanSpec, ScalingSpec};
use crate::plans::{self, Due, Source};
use crate::store::{now_ms, AgentKey, AgentObservation, Store};
use crate::telemetry::OperatorMetrics;

/// Field manager of the status fields this loop writes.
pub const STATUS_MANAGER: &str = "agentfleet-dataplane";
/// Field manager of replica changes.
pub const SCALE_MANAGER: &str = "agentfleet-scaler";

/// Timing of the operator's data-plane work.
#[derive(Clone, Debug)]
pub struct Tuning {
    /// Time between sweeps.
    pub sweep: Duration,
    /// Least time between two status writes of one agent.
    pub status_interval: Duration,
    /// How long a deleted Agent waits for its data-plane state to be removed before it is
    /// deleted anyway (the state is then left behind, and an Event says so).
    pub cleanup_timeout: Duration,
}

impl Default for Tuning {
    fn default() -> Self {
        Self {
            sweep: Duration::from_secs(5),
            status_interval: Duration::from_secs(5),
            cleanup_timeout: Duration::from_secs(60),
        }
    }
}

/// What to do with an agent's replicas.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Leave them.
    Hold,
    /// Start a worker: events wait (or `minReplicas` is 1).
    Up {
        /// Events waiting.
        waiting: u64,
    },
    /// Stop the worker: idle long enough, nothing waiting, nothing in flight.
    Down {
        /// How long it has been idle.
        idle: Duration,
    },
}

impl Decision {
    /// The replicas it sets, if any.
    pub fn replicas(self) -> Option<i32> {
        match self {
            Decision::Hold => None,
            Decision::Up { .. } => Some(1),
            Decision::Down { .. } => Some(0),
        }
    }
}

/// Decides an agent's replicas from its scaling spec, the replicas asked for now, what the
/// data plane shows, and how long it has been idle (`None`: not idle).
pub fn decide(
    scaling: &ScalingSpec,
    paused: bool,
    replicas: i32,
    seen: &AgentObservation,
    idle: Option<Duration>,
) -> Decision {
    if scaling.external || paused {
        return Decision::Hold;
    }
    if replicas < 1 {
        return if seen.busy() || scaling.min_replicas >= 1 {
            Decision::Up {
                waiting: seen.waiting,
            }
        } else {
            Decision::Hold
        };
    }
    match idle {
        Some(idle)
            if scaling.min_replicas == 0
                && !seen.busy()
                && idle >= Duration::from_secs(scaling.idle_seconds.into()) =>
        {
            Decision::Down { idle }
        }
        _ => Decision::Hold,
    }
}

/// The replicas the reconcile applies to the worker Deployment: `None` when someone else owns
/// them (`scaling.external`), 0 when paused, 1 with `minReplicas: 1`, otherwise what the
/// scaler last asked for (`current`; 0 for a new agent — its first event wakes it).
pub fn replicas_to_apply(spec: &AgentSpec, current: Option<i32>) -> Option<i32> {
    if spec.scaling.external {
        None
    } else if spec.paused {
        Some(0)
    } else if spec.scaling.min_replicas >= 1 {
        Some(1)
    } else {
        Some(current.unwrap_or(0).clamp(0, 1))
    }
}

/// The phase: `Failed` when the spec cannot run, `Thinking` during a cycle, `ScaledToZero`
/// with no worker asked for, `Sleeping` when a worker is up, else `Pending`.
pub fn phase(
    failed: bool,
    replicas: Option<i32>,
    available: i32,
    seen: &AgentObservation,
) -> AgentPhase {
    if failed {
        AgentPhase::Failed
    } else if seen.thinking {
        AgentPhase::Thinking
    } else if replicas == Some(0) {
        AgentPhase::ScaledToZero
    } else if seen.worker || available > 0 {
        AgentPhase::Sleeping
    } else {
        AgentPhase::Pending
    }
}

/// Whether a condition is written by this loop (from the data plane) rather than the reconcile.
fn data_condition(c: &Condition) -> bool {
    c.type_ == MODEL_AVAILABLE
}

/// The status fields the reconcile owns.
pub fn reconcile_part(s: &AgentStatus) -> AgentStatus {
    AgentStatus {
        observed_generation: s.observed_generation,
        conditions: s
            .conditions
            .iter()
            .filter(|c| !data_condition(c))
            .cloned()
            .collect(),
        available_replicas: s.available_replicas,
        config_hash: s.config_hash.clone(),
        ..AgentStatus::default()
    }
}

/// The status fields this loop owns.
pub fn data_part(s: &AgentStatus) -> AgentStatus {
    AgentStatus {
        phase: s.phase,
        replicas: s.replicas,
        inbox_depth: s.inbox_depth,
        cycles: s.cycles,
        last_cycle_time: s.last_cycle_time.clone(),
        tokens_used: s.tokens_used,
        checkpoint: s.checkpoint.clone(),
        conditions: s
            .conditions
            .iter()
            .filter(|c| data_condition(c))
            .cloned()
            .collect(),
        ..AgentStatus::default()
    }
}

/// `ModelAvailable`, from what the worker last reported (none before it reported). Its time
/// is when the model's state changed, so it is the same on every pass.
fn model_condition(seen: &AgentObservation) -> Option<Condition> {
    let m = seen.model.as_ref()?;
    // Written by our worker; anything else is not a valid reason and is not passed on.
    let valid = m.reason == "Available" || crate::model::Failure::from_reason(&m.reason).is_some();
    Some(Condition {
        type_: MODEL_AVAILABLE.into(),
        status: if m.available { "True" } else { "False" }.into(),
        reason: if valid {
            m.reason.clone()
        } else {
            "Unknown".into()
        },
        message: m.message.chars().take(1024).collect(),
        last_transition_time: time(m.since_ms)?,
        observed_generation: None,
    })
}

/// A time in ms as a Kubernetes `Time`, to the second (as the API server keeps it).
fn time(ms: i64) -> Option<Time> {
    jiff::Timestamp::from_second(ms.div_euclid(1000))
        .ok()
        .map(Time)
}

/// Where a checkpoint lives in the data plane.
pub fn checkpoint_ref(agent: &AgentKey, cycle: u64) -> String {
    format!(
        "redis:agentfleet:{{agent:{}/{}}}:checkpoints#cycle={cycle}",
        agent.namespace, agent.name
    )
}

/// The data-plane status of an agent.
pub fn data_status(
    agent: &AgentKey,
    failed: bool,
    replicas: Option<i32>,
    available: i32,
    seen: &AgentObservation,
) -> AgentStatus {
    AgentStatus {
        phase: Some(phase(failed, replicas, available, seen)),
        replicas,
        inbox_depth: Some(i64::try_from(seen.waiting).unwrap_or(i64::MAX)),
        cycles: Some(seen.cycles),
        tokens_used: Some(seen.tokens_used),
        last_cycle_time: seen.last_cycle_ms.and_then(time),
        checkpoint: seen.checkpoint.as_ref().map(|c| CheckpointStatus {
            cycle: c.cycle,
            storage_ref: checkpoint_ref(agent, c.cycle),
            digest: c.digest.clone(),
            messages: c.messages,
            tokens: c.tokens,
            time: time(c.time_ms),
        }),
        conditions: model_condition(seen).into_iter().collect(),
        ..AgentStatus::default()
    }
}

/// What the loop does to the cluster.
#[async_trait]
pub trait Cluster: Send + Sync + 'static {
    /// Sets the replicas of the agent's worker Deployment.
    async fn set_replicas(&self, agent: &AgentKey, replicas: i32) -> Result<(), kube::Error>;
    /// Writes the data-plane status fields of the agent.
    async fn write_status(&self, agent: &AgentKey, status: &AgentStatus)
        -> Result<(), kube::Error>;
    /// Publishes a Normal Event about the agent (failures are logged, never fatal).
    async fn publish(&self, object: &ObjectReference, reason: &str, note: String);
}

/// [`Cluster`] through the Kubernetes API.
pub struct KubeCluster {
    client: Client,
    recorder: Recorder,
}

impl KubeCluster {
    /// Acts through `client`, publishing Events with `recorder`.
    pub fn new(client: Client, recorder: Recorder) -> Self {
        Self { client, recorder }
    }
}

#[async_trait]
impl Cluster for KubeCluster {
    async fn set_replicas(&self, agent: &AgentKey, replicas: i32) -> Result<(), kube::Error> {
        let api: Api<Deployment> = Api::namespaced(self.client.clone(), &agent.namespace);
        let params = PatchParams {
            field_manager: Some(SCALE_MANAGER.into()),
            ..PatchParams::default()
        };
        api.patch_scale(
            &build::deployment_name(&agent.name),
            &params,
            &Patch::Merge(serde_json::json!({"spec": {"replicas": replicas}})),
        )
        .await
        .map(|_| ())
    }

    async fn write_status(
        &self,
        agent: &AgentKey,
        status: &AgentStatus,
    ) -> Result<(), kube::Error> {
        let api: Api<crate::crd::Agent> = Api::namespaced(self.client.clone(), &agent.namespace);
        let patch = serde_json::json!({
            "apiVersion": "agentfleet.dev/v1alpha1",
            "kind": "Agent",
            "status": status,
        });
        api.patch_status(
            &agent.name,
            &PatchParams::apply(STATUS_MANAGER).force(),
            &Patch::Apply(patch),
        )
        .await
        .map(|_| ())
    }

    async fn publish(&self, object: &ObjectReference, reason: &str, note: String) {
        let ev = Event {
            type_: EventType::Normal,
            reason: reason.into(),
            note: Some(note),
            action: "Scale".into(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&ev, object).await {
            warn!(error = %crate::report::chain(&e), reason, "cannot publish event");
        }
    }
}

/// What the reconcile tells the loop about an agent.
pub struct Tracked<'a> {
    /// The Agent, for Events.
    pub object: ObjectReference,
    /// Its spec.
    pub spec: &'a AgentSpec,
    /// The spec or its model configuration cannot run.
    pub failed: bool,
    /// Replicas of the worker Deployment as applied.
    pub replicas: Option<i32>,
    /// Workers available.
    pub available: i32,
    /// The status as the reconcile found it (what was written before).
    pub status: &'a AgentStatus,
}

struct Entry {
    object: ObjectReference,
    scaling: ScalingSpec,
    paused: bool,
    plans: Vec<PlanSpec>,
    failed: bool,
    /// Replicas asked for (the Deployment's own count with external scaling).
    replicas: Option<i32>,
    available: i32,
    idle_since_ms: Option<i64>,
    written: Option<AgentStatus>,
    written_at: Option<Instant>,
}

/// Why replicas change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Trigger {
    Wake,
    Sweep,
}

impl Trigger {
    fn as_str(self) -> &'static str {
        match self {
            Trigger::Wake => "wake signal",
            Trigger::Sweep => "sweep",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Trigger::Wake => "wake",
            Trigger::Sweep => "sweep",
        }
    }
}

/// One thing a pass decided to do.
enum Action {
    Scale {
        agent: AgentKey,
        from: i32,
        decision: Decision,
        object: ObjectReference,
    },
    Status(AgentKey, AgentStatus),
    Plan {
        agent: AgentKey,
        source: Source,
        plan: PlanSpec,
        due: Due,
    },
}

/// The loop's state, shared with the reconcile.
pub struct Scaler {
    entries: Mutex<HashMap<AgentKey, Entry>>,
    /// Per agent: held while replicas are written (by a scale change or the reconcile's apply).
    locks: Mutex<HashMap<AgentKey, Arc<tokio::sync::Mutex<()>>>>,
    pending: Mutex<HashSet<AgentKey>>,
    poke: Notify,
    /// Timing.
    pub tuning: Tuning,
}

/// What the loop acts with.
pub struct Deps {
    /// The data plane.
    pub store: Arc<dyn Store>,
    /// The cluster.
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
            poke: Notify::new(),
            tuning,
        }
    }

    fn entries(&self) -> MutexGuard<'_, HashMap<AgentKey, Entry>> {
        self.entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The agent's scaling lock: whoever writes its replicas holds it, so a reconcile's apply
    /// (which reads the replicas to apply first) never undoes a scale change made meanwhile.
    pub async fn lock(&self, agent: &AgentKey) -> tokio::sync::OwnedMutexGuard<()> {
        let lock = self
            .locks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .entry(agent.clone())
            .or_default()
            .clone();
        lock.lock_owned().await
    }

    /// The replicas the reconcile applies for `agent` (see [`replicas_to_apply`]); `last_known`
    /// is the status' replicas, which carry the count across operator restarts.
    pub fn replicas_for(
        &self,
        agent: &AgentKey,
        spec: &AgentSpec,
        last_known: Option<i32>,
    ) -> Option<i32> {
        let current = self
            .entries()
            .get(agent)
            .and_then(|e| e.replicas)
            .or(last_known);
        replicas_to_apply(spec, current)
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
            });
            e.object = t.object;
            e.scaling = spec.scaling.clone();
            e.paused = spec.paused;
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
        self.pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(agent);
        self.poke.notify_one();
    }

    /// Forgets an agent (it was deleted).
    pub fn forget(&self, agent: &AgentKey) {
        self.entries().remove(agent);
        self.locks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(agent);
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
                match deps.store.subscribe_wakes().await {
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
                    let keys: Vec<AgentKey> = self
                        .pending
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
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
                Some(e) if e.scaling.external || e.paused => Err("held"),
                Some(e) if e.replicas.unwrap_or(0) >= 1 => Err("already_up"),
                Some(e) => {
                    e.replicas = Some(1);
                    e.idle_since_ms = None;
                    Ok(e.object.clone())
                }
            }
        };
        let object = match scale {
            Ok(object) => object,
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
                    Decision::Up { waiting: 0 },
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

    /// Sets the replicas; on failure the entry goes back to what it was, so the next sweep
    /// tries again. Returns whether the change landed.
    async fn scale(
        &self,
        deps: &Deps,
        agent: AgentKey,
        from: i32,
        decision: Decision,
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
        let (reason, note) = if let Decision::Down { idle } = decision {
            let idle = idle.as_secs();
            info!(%agent, idle_seconds = idle, "scaled down");
            (
                "ScaledDown",
                format!(
                    "worker scaled {from} → 0 after {idle}s idle: empty inbox, nothing in flight"
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
        deps.cluster.publish(&object, reason, note).await;
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
        let (actions, next_due) = self.plan_actions(&keys, &seen, now, full, &deps.metrics);
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
        metrics: &OperatorMetrics,
    ) -> (Vec<Action>, Option<i64>) {
        let mut actions = Vec::new();
        let mut next_due: Option<i64> = None;
        let mut phases: HashMap<AgentPhase, i64> = HashMap::new();
        let mut entries = self.entries();
        for (key, o) in keys.iter().zip(seen) {
            let Some(e) = entries.get_mut(key) else {
                continue;
            };
            // Idle since the first quiet look, or the last cycle if later.
            if o.busy() {
                e.idle_since_ms = None;
            } else if e.idle_since_ms.is_none() {
                e.idle_since_ms = Some(now);
            }
            let idle = e.idle_since_ms.map(|since| {
                let from = since.max(o.last_cycle_ms.unwrap_or(0));
                Duration::from_millis(u64::try_from(now - from).unwrap_or(0))
            });
            let replicas = e.replicas.unwrap_or(0);
            let decision = decide(&e.scaling, e.paused, replicas, o, idle);
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

            let (todo, next) = plans::pending(&e.plans, o, now);
            if let Some(t) = next {
                next_due = Some(next_due.map_or(t, |n| n.min(t)));
            }
            actions.extend(todo.into_iter().map(|(source, plan, due)| Action::Plan {
                agent: key.clone(),
                source,
                plan,
                due,
            }));

            let status = data_status(key, e.failed, e.replicas, e.available, o);
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
                actions.push(Action::Status(key.clone(), status));
            }
        }
        if full {
            for p in AgentPhase::ALL {
                metrics
                    .agents
                    .with_label_values(&[p.as_str()])
                    .set(phases.get(&p).copied().unwrap_or(0));
            }
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
            Action::Plan {
                agent,
                source,
                plan,
                due,
            } => match plans::fire(deps.store.as_ref(), &agent, source, &plan, due).await {
                Ok(true) => deps
                    .metrics
                    .plans_fired
                    .with_label_values(&[source.as_str()])
                    .inc(),
                Ok(false) => {}
                Err(e) => {
                    warn!(%agent, plan = %plan.name, error = %crate::report::chain(&e), "cannot fire plan; the next sweep retries")
                }
            },
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
mod tests {
    use super::*;
    use crate::store::{EventKind, InboxEvent, MemoryStore};

    fn scaling(yaml: &str) -> ScalingSpec {
        serde_yaml::from_str(yaml).unwrap()
    }

    fn seen(waiting: u64, in_flight: u64, thinking: bool) -> AgentObservation {
        AgentObservation {
            waiting,
            in_flight,
            thinking,
            ..AgentObservation::default()
        }
    }

    const LONG: Option<Duration> = Some(Duration::from_secs(301));

    #[test]
    fn scale_decisions() {
        let zero = scaling("{}");
        let quiet = seen(0, 0, false);
        // Up as soon as something waits; never while nothing does.
        assert_eq!(
            decide(&zero, false, 0, &seen(3, 0, false), None),
            Decision::Up { waiting: 3 }
        );
        assert_eq!(decide(&zero, false, 0, &quiet, LONG), Decision::Hold);
        // A cycle in flight on a scaled-down agent (its pod died mid-cycle) brings it back.
        assert_eq!(
            decide(&zero, false, 0, &seen(0, 2, true), None),
            Decision::Up { waiting: 0 }
        );
        // Down only after idleSeconds with an empty inbox and nothing in flight.
        assert_eq!(
            decide(&zero, false, 1, &quiet, LONG),
            Decision::Down {
                idle: Duration::from_secs(301)
            }
        );
        assert_eq!(
            decide(&zero, false, 1, &quiet, Some(Duration::from_secs(299))),
            Decision::Hold
        );
        assert_eq!(decide(&zero, false, 1, &quiet, None), Decision::Hold);
        assert_eq!(
            decide(&zero, false, 1, &seen(1, 0, false), LONG),
            Decision::Hold
        );
        assert_eq!(
            decide(&zero, false, 1, &seen(0, 1, false), LONG),
            Decision::Hold,
            "a long cycle is never cut off"
        );
        assert_eq!(
            decide(&zero, false, 1, &seen(0, 0, true), LONG),
            Decision::Hold
        );
        let short = scaling("{idleSeconds: 0}");
        assert_eq!(
            decide(&short, false, 1, &quiet, Some(Duration::ZERO)),
            Decision::Down {
                idle: Duration::ZERO
            }
        );
        // Always on, external and paused.
        let always = scaling("{minReplicas: 1}");
        assert_eq!(decide(&always, false, 1, &quiet, LONG), Decision::Hold);
        assert_eq!(
            decide(&always, false, 0, &quiet, None),
            Decision::Up { waiting: 0 }
        );
        let external = scaling("{external: true}");
        assert_eq!(
            decide(&external, false, 0, &seen(5, 0, false), None),
            Decision::Hold
        );
        assert_eq!(decide(&external, false, 1, &quiet, LONG), Decision::Hold);
        assert_eq!(
            decide(&zero, true, 0, &seen(5, 0, false), None),
            Decision::Hold,
            "paused holds at zero"
        );
    }

    #[test]
    fn replicas_applied_follow_the_spec_and_the_scaler() {
        let mut spec: AgentSpec =
            serde_yaml::from_str("{model: {provider: scripted, name: x}}").unwrap();
        assert_eq!(replicas_to_apply(&spec, None), Some(0), "new: asleep");
        assert_eq!(replicas_to_apply(&spec, Some(1)), Some(1));
        spec.scaling.min_replicas = 1;
        assert_eq!(replicas_to_apply(&spec, Some(0)), Some(1));
        spec.paused = true;
        assert_eq!(replicas_to_apply(&spec, Some(1)), Some(0));
        spec.scaling.external = true;
        assert_eq!(replicas_to_apply(&spec, Some(1)), None);
    }

    #[test]
    fn phases() {
        let quiet = seen(0, 0, false);
        let up = AgentObservation {
            worker: true,
            ..quiet.clone()
        };
        assert_eq!(phase(true, Some(1), 1, &up), AgentPhase::Failed);
        assert_eq!(phase(false, Some(0), 0, &quiet), AgentPhase::ScaledToZero);
        assert_eq!(phase(false, Some(1), 0, &quiet), AgentPhase::Pending);
        assert_eq!(phase(false, Some(1), 0, &up), AgentPhase::Sleeping);
        assert_eq!(phase(false, Some(1), 1, &quiet), AgentPhase::Sleeping);
        assert_eq!(
            phase(false, Some(0), 0, &seen(0, 1, true)),
            AgentPhase::Thinking,
            "a worker finishing its cycle after scale-down is still thinking"
        );
        assert_eq!(phase(false, None, 0, &quiet), AgentPhase::Pending);
    }

    #[test]
    fn status_parts_are_disjoint_and_complete() {
        let s: AgentStatus = serde_json::from_value(serde_json::json!({
            "phase": "Sleeping", "observedGeneration": 3, "replicas": 1,
            "conditions": [
                {"type": "Ready", "status": "True", "reason": "Ready", "message": "", "lastTransitionTime": "2026-11-23T10:00:00Z"},
                {"type": "ModelAvailable", "status": "False", "reason": "Unauthorized", "message": "", "lastTransitionTime": "2026-11-23T10:00:00Z"}
            ],
            "availableReplicas": 1, "configHash": "h", "inboxDepth": 2, "cycles": 7,
            "lastCycleTime": "2026-11-23T10:00:00Z", "tokensUsed": 99,
            "checkpoint": {"cycle": 7, "storageRef": "r", "digest": "sha256:x", "messages": 4, "tokens": 50}
        }))
        .unwrap();
        let r = serde_json::to_value(reconcile_part(&s)).unwrap();
        let d = serde_json::to_value(data_part(&s)).unwrap();
        let mut keys: Vec<String> = r
            .as_object()
            .unwrap()
            .keys()
            .chain(d.as_object().unwrap().keys())
            .cloned()
            .collect();
        keys.sort();
        let mut all: Vec<String> = serde_json::to_value(&s)
            .unwrap()
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect();
        all.sort();
        keys.retain(|k| k != "conditions");
        all.retain(|k| k != "conditions");
        assert_eq!(keys, all, "every field has exactly one writer");
        let types = |v: &serde_json::Value| -> Vec<String> {
            v["conditions"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c["type"].as_str().unwrap().to_string())
                .collect()
        };
        assert_eq!(types(&r), ["Ready"], "conditions: one writer per type");
        assert_eq!(types(&d), ["ModelAvailable"]);
    }

    #[test]
    fn the_model_condition_comes_from_what_the_worker_reported() {
        let key = AgentKey::new("fam", "assistant");
        let mut o = AgentObservation::default();
        assert!(
            data_status(&key, false, Some(1), 1, &o)
                .conditions
                .is_empty(),
            "not reported yet"
        );
        o.model = Some(crate::store::ModelHealth {
            available: false,
            reason: "Unauthorized".into(),
            message: "the model refused the credentials: http://m/v1 answered 401: bad key ***"
                .into(),
            since_ms: 1_795_000_000_123,
        });
        let c = data_status(&key, false, Some(1), 1, &o).conditions;
        assert_eq!(c.len(), 1);
        assert_eq!(
            (
                c[0].type_.as_str(),
                c[0].status.as_str(),
                c[0].reason.as_str()
            ),
            ("ModelAvailable", "False", "Unauthorized")
        );
        assert_eq!(
            c[0].last_transition_time.0.to_string(),
            "2026-11-18T11:06:40Z"
        );
        assert_eq!(
            data_status(&key, false, Some(1), 1, &o),
            data_status(&key, false, Some(1), 1, &o),
            "the same on every pass"
        );
        o.model.as_mut().unwrap().reason = "Not a reason!".into();
        assert_eq!(
            data_status(&key, false, Some(1), 1, &o).conditions[0].reason,
            "Unknown"
        );
    }

    #[test]
    fn data_status_carries_the_checkpoint() {
        let key = AgentKey::new("fam", "assistant");
        let o = AgentObservation {
            waiting: 2,
            cycles: 7,
            tokens_used: 1234,
            last_cycle_ms: Some(1_795_000_000_123),
            checkpoint: Some(crate::store::Checkpoint {
                cycle: 7,
                start: 0,
                end: 14,
                summary_cycle: None,
                digest: "sha256:ab".into(),
                messages: 14,
                tokens: 900,
                time_ms: 1_795_000_000_123,
            }),
            ..AgentObservation::default()
        };
        let s = data_status(&key, false, Some(0), 0, &o);
        assert_eq!(s.phase, Some(AgentPhase::ScaledToZero));
        assert_eq!(
            (s.inbox_depth, s.cycles, s.tokens_used),
            (Some(2), Some(7), Some(1234))
        );
        let cp = s.checkpoint.unwrap();
        assert_eq!((cp.cycle, cp.messages, cp.tokens), (7, 14, 900));
        assert_eq!(cp.digest, "sha256:ab");
        assert_eq!(
            cp.storage_ref,
            "redis:agentfleet:{agent:fam/assistant}:checkpoints#cycle=7"
        );
        assert_eq!(
            cp.time.unwrap().0.to_string(),
            "2026-11-18T11:06:40Z",
            "to the second, as the API server keeps it"
        );
    }

    /// What the loop did to the "cluster".
    #[derive(Clone, Debug, PartialEq)]
    enum Call {
        Replicas(AgentKey, i32),
        Status(AgentKey, Box<AgentStatus>),
        Event(String, String),
    }

    #[derive(Default)]
    struct Recording {
        calls: Mutex<Vec<Call>>,
        refuse_scale: std::sync::atomic::AtomicBool,
    }

    impl Recording {
        fn calls(&self) -> Vec<Call> {
            self.calls.lock().unwrap().clone()
        }

        fn replicas(&self) -> Vec<(AgentKey, i32)> {
            self.calls()
                .into_iter()
                .filter_map(|c| match c {
                    Call::Replicas(k, n) => Some((k, n)),
                    _ => None,
                })
                .collect()
        }

        fn statuses(&self, key: &AgentKey) -> Vec<AgentStatus> {
            self.calls()
                .into_iter()
                .filter_map(|c| match c {
                    Call::Status(k, s) if &k == key => Some(*s),
                    _ => None,
                })
                .collect()
        }
    }

    #[async_trait]
    impl Cluster for Recording {
        async fn set_replicas(&self, agent: &AgentKey, replicas: i32) -> Result<(), kube::Error> {
            if self.refuse_scale.load(std::sync::atomic::Ordering::SeqCst) {
                return Err(kube::Error::Api(
                    kube::core::Status::failure("deployments.apps not found", "NotFound")
                        .with_code(404)
                        .boxed(),
                ));
            }
            self.calls
                .lock()
                .unwrap()
                .push(Call::Replicas(agent.clone(), replicas));
            Ok(())
        }

        async fn write_status(
            &self,
            agent: &AgentKey,
            status: &AgentStatus,
        ) -> Result<(), kube::Error> {
            self.calls
                .lock()
                .unwrap()
                .push(Call::Status(agent.clone(), Box::new(status.clone())));
            Ok(())
        }

        async fn publish(&self, _object: &ObjectReference, reason: &str, note: String) {
            self.calls
                .lock()
                .unwrap()
                .push(Call::Event(reason.into(), note));
        }
    }

    struct Running {
        scaler: Arc<Scaler>,
        cluster: Arc<Recording>,
        store: Arc<dyn Store>,
        metrics: OperatorMetrics,
        stop: watch::Sender<bool>,
        task: tokio::task::JoinHandle<()>,
    }

    impl Running {
        async fn stop(self) {
            self.stop.send_replace(true);
            self.task.await.unwrap();
        }
    }

    fn start(store: Arc<dyn Store>, tuning: Tuning) -> Running {
        let scaler = Arc::new(Scaler::new(tuning));
        let cluster = Arc::new(Recording::default());
        let metrics = OperatorMetrics::new().unwrap();
        let (stop, rx) = watch::channel(false);
        let task = tokio::spawn(scaler.clone().run(
            Deps {
                store: store.clone(),
                cluster: cluster.clone(),
                metrics: metrics.clone(),
            },
            rx,
        ));
        Running {
            scaler,
            cluster,
            store,
            metrics,
            stop,
            task,
        }
    }

    fn fast() -> Tuning {
        Tuning {
            sweep: Duration::from_millis(100),
            status_interval: Duration::from_millis(100),
            cleanup_timeout: Duration::from_secs(60),
        }
    }

    fn spec(yaml: &str) -> AgentSpec {
        serde_yaml::from_str(&format!(
            "{{model: {{provider: scripted, name: x}}, {yaml}}}"
        ))
        .unwrap()
    }

    fn track(r: &Running, key: &AgentKey, spec: &AgentSpec, replicas: i32) {
        r.scaler.track(
            key,
            Tracked {
                object: ObjectReference {
                    name: Some(key.name.clone()),
                    namespace: Some(key.namespace.clone()),
                    ..ObjectReference::default()
                },
                spec,
                failed: false,
                replicas: Some(replicas),
                available: 0,
                status: &AgentStatus::default(),
            },
        );
    }

    fn ev(id: &str) -> InboxEvent {
        InboxEvent {
            id: id.into(),
            kind: EventKind::Service,
            time_ms: now_ms(),
            urgent: false,
            space: None,
            sender: None,
            text: Some("hi".into()),
            data: None,
            depth: 0,
        }
    }

    async fn until(what: &str, mut check: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !check() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    #[tokio::test]
    async fn a_wake_signal_scales_up_at_once_and_only_agents_that_may() {
        // A long sweep: only the wake signal can be what scales.
        let tuning = Tuning {
            sweep: Duration::from_secs(3600),
            ..fast()
        };
        let r = start(Arc::new(MemoryStore::new()), tuning);
        let asleep = AgentKey::new("fam", "asleep");
        let paused = AgentKey::new("fam", "paused");
        let external = AgentKey::new("fam", "external");
        track(&r, &asleep, &spec("spaces: []"), 0);
        track(&r, &paused, &spec("paused: true"), 0);
        track(&r, &external, &spec("scaling: {external: true}"), 0);
        tokio::time::sleep(Duration::from_millis(100)).await;
        for k in [
            &paused,
            &external,
            &AgentKey::new("fam", "unknown"),
            &asleep,
        ] {
            r.store.push_event(k, &ev("e1")).await.unwrap();
        }
        until("the asleep agent scaled up", || {
            r.cluster.replicas() == [(asleep.clone(), 1)]
        })
        .await;
        // A second event while its worker starts: no second change.
        r.store.push_event(&asleep, &ev("e2")).await.unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(r.cluster.replicas(), [(asleep.clone(), 1)]);
        until("the ScaledUp event", || {
            r.cluster.calls().iter().any(|c| {
                matches!(c, Call::Event(reason, note) if reason == "ScaledUp" && note.contains("event(s) waiting"))
            })
        })
        .await;
        let wakes = &r.metrics.wakes;
        assert_eq!(wakes.with_label_values(&["scaled"]).get(), 1);
        assert_eq!(wakes.with_label_values(&["held"]).get(), 2);
        assert_eq!(wakes.with_label_values(&["unknown"]).get(), 1);
        assert_eq!(wakes.with_label_values(&["already_up"]).get(), 1);
        assert_eq!(r.metrics.wake_to_scale.get_sample_count(), 1);
        r.stop().await;
    }

    #[tokio::test]
    async fn the_sweep_scales_up_missed_wakes_and_down_idle_agents_only() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        // Events that arrived before the operator listened: only the sweep sees them.
        let missed = AgentKey::new("fam", "missed");
        store.push_event(&missed, &ev("e1")).await.unwrap();
        let r = start(store.clone(), fast());
        track(&r, &missed, &spec("scaling: {idleSeconds: 0}"), 0);
        until("the missed agent scaled up", || {
            r.cluster.replicas().contains(&(missed.clone(), 1))
        })
        .await;

        // A worker takes the event and thinks for a long time: never cut off.
        let lease = store
            .acquire_lease(&missed, "w", Duration::from_secs(30))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            store
                .wait_inbox(&missed, &lease, Duration::from_millis(10))
                .await
                .unwrap()
                .len(),
            1
        );
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert_eq!(
            r.cluster.replicas(),
            [(missed.clone(), 1)],
            "in flight: held"
        );
        until("Thinking in the status", || {
            r.cluster
                .statuses(&missed)
                .last()
                .is_some_and(|s| s.phase == Some(AgentPhase::Thinking))
        })
        .await;

        // The cycle ends; idle (idleSeconds 0) → down.
        store.ack_cycle(&missed, &lease).await.unwrap();
        until("scaled down", || {
            r.cluster.replicas() == [(missed.clone(), 1), (missed.clone(), 0)]
        })
        .await;
        until("the ScaledDown event", || {
            r.cluster.calls().iter().any(|c| {
                matches!(c, Call::Event(reason, note) if reason == "ScaledDown" && note.contains("nothing in flight"))
            })
        })
        .await;
        assert_eq!(
            r.metrics
                .scale_decisions
                .with_label_values(&["up", "sweep"])
                .get(),
            1
        );
        assert_eq!(
            r.metrics
                .scale_decisions
                .with_label_values(&["down", "sweep"])
                .get(),
            1
        );
        r.stop().await;
    }

    #[tokio::test]
    async fn a_refused_scale_is_retried_by_the_next_sweep() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let a = AgentKey::new("fam", "a");
        store.push_event(&a, &ev("e1")).await.unwrap();
        let r = start(store, fast());
        r.cluster
            .refuse_scale
            .store(true, std::sync::atomic::Ordering::SeqCst);
        track(&r, &a, &spec("spaces: []"), 0);
        until("a refused attempt", || {
            r.metrics.scale_errors.with_label_values(&["up"]).get() >= 1
        })
        .await;
        r.cluster
            .refuse_scale
            .store(false, std::sync::atomic::Ordering::SeqCst);
        until("scaled up on a later sweep", || {
            r.cluster.replicas() == [(a.clone(), 1)]
        })
        .await;
        r.stop().await;
    }

    #[tokio::test]
    async fn status_is_written_when_it_changes_and_at_most_once_per_interval() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let tuning = Tuning {
            sweep: Duration::from_millis(50),
            status_interval: Duration::from_millis(600),
            ..fast()
        };
        let r = start(store.clone(), tuning);
        let a = AgentKey::new("fam", "a");
        // minReplicas 1 and a worker holding the lease: no scaling, only status.
        track(&r, &a, &spec("scaling: {minReplicas: 1}"), 1);
        let lease = store
            .acquire_lease(&a, "w", Duration::from_secs(30))
            .await
            .unwrap()
            .unwrap();
        until("a first status", || !r.cluster.statuses(&a).is_empty()).await;
        // Nothing changes: no more writes, though sweeps run every 50 ms.
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(r.cluster.statuses(&a).len(), 1);
        assert_eq!(r.cluster.statuses(&a)[0].phase, Some(AgentPhase::Sleeping));
        // Changes arrive fast; writes stay at the interval, and the last one wins.
        let started = Instant::now();
        for i in 0..20 {
            store
                .push_event(&a, &ev(&format!("burst-{i}")))
                .await
                .unwrap();
            tokio::time::sleep(Duration::from_millis(30)).await;
        }
        until("the final depth", || {
            r.cluster
                .statuses(&a)
                .last()
                .is_some_and(|s| s.inbox_depth == Some(20))
        })
        .await;
        let writes = r.cluster.statuses(&a).len() - 1;
        let allowed = started.elapsed().as_millis() / 600 + 2;
        assert!(
            (writes as u128) <= allowed,
            "{writes} writes in {:?}",
            started.elapsed()
        );
        store.release_lease(&a, &lease).await.unwrap();
        r.stop().await;
    }

    #[tokio::test]
    async fn plans_fire_once_per_due_time_even_with_two_operators() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let a = AgentKey::new("fam", "planner");
        let at = crate::plans::rfc3339(now_ms() + 300);
        let s = spec(&format!(
            "plans: [{{name: soon, at: '{at}', instruction: 'post the report'}}, {{name: daily, schedule: '0 6 * * *', instruction: 'morning'}}]"
        ));
        // Two operators (a leader change with the old one still running) on one data plane.
        let one = start(store.clone(), fast());
        let two = start(store.clone(), fast());
        track(&one, &a, &s, 0);
        track(&two, &a, &s, 0);
        until("the plan's event", || {
            one.metrics.plans_fired.with_label_values(&["spec"]).get()
                + two.metrics.plans_fired.with_label_values(&["spec"]).get()
                >= 1
        })
        .await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        let lease = store
            .acquire_lease(&a, "w", Duration::from_secs(30))
            .await
            .unwrap()
            .unwrap();
        let events = store
            .wait_inbox(&a, &lease, Duration::from_millis(10))
            .await
            .unwrap();
        assert_eq!(events.len(), 1, "{events:?}");
        assert_eq!(events[0].kind, EventKind::Plan);
        assert_eq!(events[0].text.as_deref(), Some("post the report"));
        // The daily plan got its baseline and waits for 06:00.
        let marks = store.plan_marks(&a).await.unwrap();
        assert!(marks.contains_key("spec/daily"), "{marks:?}");
        // The plan's push woke the agent: scaled up (by one of the two).
        until("scaled up", || {
            one.cluster.replicas().len() + two.cluster.replicas().len() >= 1
        })
        .await;
        one.stop().await;
        two.stop().await;
    }

    #[tokio::test]
    async fn plans_the_agent_made_fire_too() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let a = AgentKey::new("fam", "planner");
        let lease = store
            .acquire_lease(&a, "w", Duration::from_secs(30))
            .await
            .unwrap()
            .unwrap();
        let own: PlanSpec = serde_yaml::from_str(&format!(
            "{{name: remind, at: '{}', instruction: 'remind Husam'}}",
            crate::plans::rfc3339(now_ms() + 200)
        ))
        .unwrap();
        store.set_plans(&a, &lease, &[own]).await.unwrap();
        let r = start(store.clone(), fast());
        track(&r, &a, &spec("scaling: {minReplicas: 1}"), 1);
        let events = store
            .wait_inbox(&a, &lease, Duration::from_secs(5))
            .await
            .unwrap();
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].id.split(':').nth(1), Some("agent/remind"));
        assert_eq!(r.metrics.plans_fired.with_label_values(&["agent"]).get(), 1);
        r.stop().await;
    }
}
