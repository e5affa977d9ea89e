//! The data-plane loop against a recording [`Cluster`] and the embedded store: the rig here;
//! scaling (wake signals, sweeps, pools, refused scale changes) in `scaling.rs`, the status
//! (write rate, tools, waiting calls, budgets) in `status.rs`, what the worker reports of
//! archiving and restoring in `consciousness.rs`.

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
use crate::identity::AgentKey;
use crate::store::{now_ms, EventKind, InboxEvent, MemoryStore, Store};
use crate::telemetry::OperatorMetrics;
use crate::testing::WaitInbox;

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

pub(super) fn ev(id: &str) -> InboxEvent {
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

mod consciousness;
mod scaling;
mod status;
