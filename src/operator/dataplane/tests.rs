//! The data-plane loop against a recording [`Cluster`] and the embedded store: wake signals,
//! sweeps, refused scale changes, the status write rate.

use super::pools::PoolKey;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::ObjectReference;
use tokio::sync::watch;
use tokio::time::Instant;

use super::cluster::{Cluster, Notice};
use super::{Deps, Scaler, Tracked, Tuning};
use crate::crd::{AgentPhase, AgentSpec, AgentStatus};
use crate::store::{now_ms, AgentKey, EventKind, InboxEvent, MemoryStore, Store};
use crate::telemetry::OperatorMetrics;

/// What the loop did to the "cluster".
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Call {
    Replicas(AgentKey, i32),
    PoolReplicas(PoolKey, i32),
    Status(AgentKey, Box<AgentStatus>),
    /// A Normal Event: reason, note.
    Event(String, String),
    /// A Warning Event: reason, note.
    Warning(String, String),
}

#[derive(Default)]
pub(super) struct Recording {
    calls: Mutex<Vec<Call>>,
    refuse_scale: std::sync::atomic::AtomicBool,
}

impl Recording {
    pub(super) fn calls(&self) -> Vec<Call> {
        self.calls.lock().unwrap().clone()
    }

    pub(super) fn replicas(&self) -> Vec<(AgentKey, i32)> {
        self.calls()
            .into_iter()
            .filter_map(|c| match c {
                Call::Replicas(k, n) => Some((k, n)),
                _ => None,
            })
            .collect()
    }

    fn pool_replicas(&self) -> Vec<i32> {
        self.calls()
            .into_iter()
            .filter_map(|c| match c {
                Call::PoolReplicas(_, n) => Some(n),
                _ => None,
            })
            .collect()
    }

    pub(super) fn statuses(&self, key: &AgentKey) -> Vec<AgentStatus> {
        self.calls()
            .into_iter()
            .filter_map(|c| match c {
                Call::Status(k, s) if &k == key => Some(*s),
                _ => None,
            })
            .collect()
    }
}

impl Recording {
    /// A 404 for a scale while `refuse_scale` is set (the Deployment is gone).
    fn refused(&self) -> Result<(), kube::Error> {
        if self.refuse_scale.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(kube::Error::Api(
                kube::core::Status::failure("deployments.apps not found", "NotFound")
                    .with_code(404)
                    .boxed(),
            ));
        }
        Ok(())
    }
}

#[async_trait]
impl Cluster for Recording {
    async fn set_replicas(&self, agent: &AgentKey, replicas: i32) -> Result<(), kube::Error> {
        self.refused()?;
        self.calls
            .lock()
            .unwrap()
            .push(Call::Replicas(agent.clone(), replicas));
        Ok(())
    }

    async fn set_pool_replicas(&self, pool: &PoolKey, replicas: i32) -> Result<(), kube::Error> {
        self.refused()?;
        self.calls
            .lock()
            .unwrap()
            .push(Call::PoolReplicas(pool.clone(), replicas));
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

    async fn publish(&self, _object: &ObjectReference, notice: Notice) {
        self.calls.lock().unwrap().push(match notice.kind {
            kube::runtime::events::EventType::Warning => Call::Warning(notice.reason, notice.note),
            _ => Call::Event(notice.reason, notice.note),
        });
    }
}

pub(super) struct Running {
    pub(super) scaler: Arc<Scaler>,
    pub(super) cluster: Arc<Recording>,
    pub(super) store: Arc<dyn Store>,
    pub(super) metrics: OperatorMetrics,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Running {
    pub(super) async fn stop(self) {
        self.stop.send_replace(true);
        self.task.await.unwrap();
    }
}

pub(super) fn start(store: Arc<dyn Store>, tuning: Tuning) -> Running {
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

pub(super) fn fast() -> Tuning {
    Tuning {
        sweep: Duration::from_millis(100),
        status_interval: Duration::from_millis(100),
        cleanup_timeout: Duration::from_secs(60),
    }
}

pub(super) fn spec(yaml: &str) -> AgentSpec {
    serde_yaml::from_str(&format!(
        "{{model: {{provider: scripted, name: x}}, {yaml}}}"
    ))
    .unwrap()
}

pub(super) fn track(r: &Running, key: &AgentKey, spec: &AgentSpec, replicas: i32) {
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
            generation: Some(3),
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

pub(super) async fn until(what: &str, mut check: impl FnMut() -> bool) {
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

fn track_pool(r: &Running, min: i32, max: i32) -> PoolKey {
    let key = PoolKey::new("fam", "shared");
    r.scaler.pools.track(
        &key,
        super::pools::PoolTracked {
            object: ObjectReference::default(),
            min,
            max,
            cycles_at_once: 1,
            scale_down: Duration::ZERO,
            replicas: Some(0),
        },
    );
    key
}

#[tokio::test]
async fn a_pooled_agent_wakes_its_pool_and_the_sweep_sizes_it_by_load() {
    let pooled = spec("runtime: {pool: shared}, scaling: {external: true}");
    // Only the wake signal can scale here.
    let r = start(
        Arc::new(MemoryStore::new()),
        Tuning {
            sweep: Duration::from_secs(3600),
            ..fast()
        },
    );
    track_pool(&r, 0, 3);
    let a = AgentKey::new("fam", "a");
    track(&r, &a, &pooled, 0);
    tokio::time::sleep(Duration::from_millis(100)).await;
    r.store.push_event(&a, &ev("e1")).await.unwrap();
    until("the pool started a replica", || {
        r.cluster.pool_replicas() == [1]
    })
    .await;
    r.store.push_event(&a, &ev("e2")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(r.cluster.pool_replicas(), [1], "one wake, one replica");
    assert!(r.cluster.replicas().is_empty(), "no worker of its own");
    r.stop().await;

    // The sweep: a replica per agent with work (one slot each here), at most max; none once
    // every inbox is empty.
    let r = start(Arc::new(MemoryStore::new()), fast());
    let pool = track_pool(&r, 0, 2);
    let keys: Vec<AgentKey> = (0..3)
        .map(|i| AgentKey::new("fam", format!("a{i}")))
        .collect();
    for k in &keys {
        track(&r, k, &pooled, 0);
        r.store.push_event(k, &ev("e1")).await.unwrap();
    }
    until("the pool at its max", || {
        r.cluster.pool_replicas().last() == Some(&2)
    })
    .await;
    assert_eq!(
        r.scaler.pools.load(&pool).map(|l| (l.agents, l.waiting)),
        Some((3, 3))
    );
    for k in &keys {
        r.store.purge_agent(k).await.unwrap();
    }
    until("the pool back at zero", || {
        r.cluster.pool_replicas().last() == Some(&0)
    })
    .await;
    assert!(r.cluster.calls().iter().any(
        |c| matches!(c, Call::Event(reason, note) if reason == "ScaledDown" && note.contains("0 waiting"))
    ));
    // Its Deployment gone (the Pool deleted): forgotten, not retried every sweep.
    r.cluster
        .refuse_scale
        .store(true, std::sync::atomic::Ordering::SeqCst);
    r.store.push_event(&keys[0], &ev("e2")).await.unwrap();
    until("the pool forgotten", || {
        r.scaler.pools.load(&pool).is_none()
    })
    .await;
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
    let gauge = |g: &prometheus::IntGaugeVec| g.with_label_values(&["fam", "missed"]).get();
    let thinking = || {
        r.metrics
            .thinking_seconds
            .with_label_values(&["fam", "missed"])
            .get()
    };
    until("the inbox depth in its gauge", || {
        gauge(&r.metrics.inbox_depth) == 1
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
    until(
        "thinking for a while, the inbox empty, counted by phase",
        || {
            thinking() > 0.0
                && gauge(&r.metrics.inbox_depth) == 0
                && r.metrics.agents.with_label_values(&["Thinking"]).get() == 1
        },
    )
    .await;

    // The cycle ends; idle (idleSeconds 0) → down.
    store.ack_cycle(&missed, &lease).await.unwrap();
    until("scaled down", || {
        r.cluster.replicas() == [(missed.clone(), 1), (missed.clone(), 0)]
    })
    .await;
    until("no longer thinking", || thinking() == 0.0).await;
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
async fn the_tools_a_worker_reports_reach_the_status_once() {
    use crate::crd::ToolStatus;
    use crate::operator::status::{find, TOOLS_READY};
    use crate::store::prelude::*;
    use crate::store::ToolRecord;
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let r = start(store.clone(), fast());
    let a = AgentKey::new("fam", "a");
    track(&r, &a, &spec("scaling: {minReplicas: 1}"), 1);
    until("a first status", || !r.cluster.statuses(&a).is_empty()).await;
    let first = r.cluster.statuses(&a)[0].clone();
    assert!(first.tools.is_empty());
    let unknown = find(&first.conditions, TOOLS_READY).unwrap();
    assert_eq!(
        (unknown.status.as_str(), unknown.reason.as_str()),
        ("Unknown", "NotReported")
    );
    let events = || {
        r.cluster
            .calls()
            .into_iter()
            .filter(|c| matches!(c, Call::Event(..) | Call::Warning(..)))
            .collect::<Vec<_>>()
    };
    assert!(events().is_empty(), "nothing reported, nothing to say");

    let tool = |name: &str, source: &str, error: Option<&str>| {
        ToolRecord::from(&ToolStatus {
            name: name.into(),
            source: source.into(),
            ready: error.is_none(),
            last_error: error.map(str::to_string),
            note: None,
        })
    };
    store
        .set_tools(
            &a,
            &[
                tool("send_message", "builtin", None),
                tool("open_ticket", "http", None),
                tool(
                    "grafana__*",
                    "mcp:grafana",
                    Some("cannot connect: connection refused"),
                ),
            ],
        )
        .await
        .unwrap();
    let down = |s: &AgentStatus| {
        find(&s.conditions, TOOLS_READY).is_some_and(|c| c.reason == "McpUnreachable")
    };
    until("ToolsReady False (McpUnreachable)", || {
        r.cluster.statuses(&a).last().is_some_and(down)
    })
    .await;
    let written = r.cluster.statuses(&a);
    let s = written.last().unwrap();
    assert_eq!(s.tools.len(), 3);
    let c = find(&s.conditions, TOOLS_READY).unwrap();
    assert_eq!(c.status, "False");
    // Observed at the Agent's generation, as the reconcile's conditions are (kstatus reads
    // it); the build before issue 26 wrote none.
    assert!(
        s.conditions
            .iter()
            .all(|c| c.observed_generation == Some(3)),
        "{:?}",
        s.conditions
    );
    assert!(
        c.message.contains("MCP server grafana unreachable"),
        "{}",
        c.message
    );
    let since = c.last_transition_time.clone();
    // Nothing changes: nothing is written again, the transition time holds.
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(r.cluster.statuses(&a).len(), written.len());
    assert_eq!(
        events(),
        [Call::Warning(
            "McpUnreachable".into(),
            "1 of 3 tool(s) unavailable: MCP server grafana unreachable: cannot connect: connection refused".into()
        )],
        "one Warning for the transition"
    );

    // The server comes up: its tools replace the placeholder, ToolsReady flips.
    store
        .set_tools(
            &a,
            &[
                tool("send_message", "builtin", None),
                tool("open_ticket", "http", None),
                tool("grafana__query", "mcp:grafana", None),
            ],
        )
        .await
        .unwrap();
    until("ToolsReady True", || {
        r.cluster
            .statuses(&a)
            .last()
            .is_some_and(|s| find(&s.conditions, TOOLS_READY).is_some_and(|c| c.status == "True"))
    })
    .await;
    let s = r.cluster.statuses(&a).last().cloned().unwrap();
    assert_eq!(s.tools[2].name, "grafana__query");
    let c = find(&s.conditions, TOOLS_READY).unwrap();
    assert_eq!(c.reason, "AllReady");
    assert!(c.last_transition_time.0 >= since.0);
    assert_eq!(
        events().last(),
        Some(&Call::Event("AllReady".into(), "3 tool(s) ready".into())),
        "the recovery is a Normal Event"
    );
    assert_eq!(events().len(), 2);
    r.stop().await;
}

#[tokio::test]
async fn what_an_agent_waits_on_a_human_for_is_in_its_status_and_a_gauge() {
    use crate::store::prelude::*;
    use crate::store::{CallKind, HumanCall};
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let r = start(store.clone(), fast());
    let a = AgentKey::new("fam", "a");
    track(&r, &a, &spec("scaling: {minReplicas: 1}"), 1);
    let call = HumanCall::new(
        &a,
        "restart_deployment",
        CallKind::Approval,
        "family",
        serde_json::json!({"deployment": "api"}),
        None,
        3_600_000,
    )
    .unwrap();
    store.register_human_call(&call).await.unwrap();
    until("the pending call in status", || {
        r.cluster
            .statuses(&a)
            .last()
            .is_some_and(|s| !s.pending_calls.is_empty())
    })
    .await;
    let status = r.cluster.statuses(&a).last().cloned().unwrap();
    let pending = &status.pending_calls[0];
    assert_eq!(
        (
            pending.tool.as_str(),
            pending.call_id.as_str(),
            pending.kind.as_str()
        ),
        ("restart_deployment", call.id.as_str(), "approval")
    );
    assert_eq!(pending.space.as_deref(), Some("family"));
    assert!(pending.since.is_some() && pending.expires > pending.since);
    assert_eq!(
        r.metrics
            .pending_calls
            .with_label_values(&["fam", "a"])
            .get(),
        1
    );
}

mod consciousness;

/// `spec.budget`: the tokens the worker counted show in `status.tokens`; a spent budget is
/// `BudgetExhausted=True` with one Warning Event, and its waiting events wake no worker (by
/// wake signal or sweep); a raised budget makes them work again at once.
#[tokio::test]
async fn a_spent_budget_holds_the_worker_and_says_so() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let key = AgentKey::new("fam", "spender");
    let periods = crate::crd::Periods::at(now_ms());
    let used = crate::model::Usage {
        input: 900,
        output: 200,
        cache_read: 600,
        cache_write: 100,
    };
    store.record_tokens(&key, &periods, &used).await.unwrap();
    let r = start(store.clone(), fast());
    let small = spec("budget: {tokensPerDay: 1000, tokensPerMonth: 100000}");
    track(&r, &key, &small, 0);
    until("BudgetExhausted in the status", || {
        r.cluster.statuses(&key).last().is_some_and(|s| {
            s.conditions
                .iter()
                .any(|c| c.type_ == "BudgetExhausted" && c.status == "True")
        })
    })
    .await;
    let status = r.cluster.statuses(&key).pop().unwrap();
    let tokens = status.tokens.clone().unwrap();
    assert_eq!(
        (
            tokens.input,
            tokens.cache_read,
            tokens.cache_write,
            tokens.output
        ),
        (200, 600, 100, 200)
    );
    assert_eq!((tokens.today, tokens.this_month), (1100, 1100));
    let c = status
        .conditions
        .iter()
        .find(|c| c.type_ == "BudgetExhausted")
        .unwrap();
    assert_eq!(c.reason, "DailyBudgetSpent");
    assert!(c
        .message
        .starts_with("1100 of the daily budget of 1000 tokens spent"));
    // Events arrive: no wake, no sweep scales it up.
    r.store.push_event(&key, &ev("e1")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(r.cluster.replicas().is_empty(), "{:?}", r.cluster.calls());
    assert_eq!(
        r.metrics.wakes.with_label_values(&["budget_spent"]).get(),
        1
    );
    let warnings: Vec<Call> = r
        .cluster
        .calls()
        .into_iter()
        .filter(|c| matches!(c, Call::Warning(reason, _) if reason == "DailyBudgetSpent"))
        .collect();
    assert_eq!(warnings.len(), 1, "one Warning Event: {warnings:?}");
    let gauge = |g: &prometheus::IntGaugeVec, labels: &[&str]| g.with_label_values(labels).get();
    assert_eq!(gauge(&r.metrics.budget_exhausted, &["fam", "spender"]), 1);
    assert_eq!(
        gauge(&r.metrics.budget_remaining, &["fam", "spender", "month"]),
        98_900
    );

    // Raised: the waiting event is work again, and the condition says what is left.
    track(&r, &key, &spec("budget: {tokensPerDay: 5000}"), 0);
    until("scaled up", || r.cluster.replicas() == [(key.clone(), 1)]).await;
    until("WithinBudget", || {
        r.cluster.statuses(&key).last().is_some_and(|s| {
            s.conditions.iter().any(|c| {
                c.type_ == "BudgetExhausted"
                    && c.status == "False"
                    && c.message == "3900 tokens left today"
            })
        })
    })
    .await;
    until("a Normal Event for the change back", || {
        r.cluster
            .calls()
            .iter()
            .any(|c| matches!(c, Call::Event(reason, _) if reason == "WithinBudget"))
    })
    .await;
    assert_eq!(gauge(&r.metrics.budget_exhausted, &["fam", "spender"]), 0);
    r.stop().await;
}
