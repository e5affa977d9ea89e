//! What the data-plane loop does to the cluster, behind [`Cluster`] so that the loop is tested
//! without an API server: set a worker's replicas, write the data-plane status fields, publish
//! an Event. [`KubeCluster`] does it through the Kubernetes API, each write under its own
//! field manager.

use async_trait::async_trait;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder};
use kube::{Api, Client};
use tracing::warn;

use super::pools::PoolKey;
use crate::crd::{Agent, AgentStatus};
use crate::identity::AgentKey;
use crate::operator::build;

/// Field manager of the status fields this loop writes.
pub const STATUS_MANAGER: &str = "agentfleet-dataplane";
/// Field manager of replica changes.
pub const SCALE_MANAGER: &str = "agentfleet-scaler";

/// An Event the loop publishes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Notice {
    /// Normal or Warning.
    pub kind: EventType,
    /// CamelCase reason.
    pub reason: String,
    /// `Scale` or `Observe`.
    pub action: &'static str,
    /// What happened, for humans.
    pub note: String,
}

/// What the loop does to the cluster.
#[async_trait]
pub trait Cluster: Send + Sync + 'static {
    /// Sets the replicas of the agent's worker Deployment.
    async fn set_replicas(&self, agent: &AgentKey, replicas: i32) -> Result<(), kube::Error>;
    /// Sets the replicas of a Pool's Deployment.
    async fn set_pool_replicas(&self, pool: &PoolKey, replicas: i32) -> Result<(), kube::Error>;
    /// Writes the data-plane status fields of the agent.
    async fn write_status(&self, agent: &AgentKey, status: &AgentStatus)
        -> Result<(), kube::Error>;
    /// Publishes an Event about the agent (failures are logged, never fatal); `action` is
    /// what the loop did (`Scale`) or saw (`Observe`).
    async fn publish(&self, object: &ObjectReference, notice: Notice);
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

impl KubeCluster {
    async fn scale(&self, namespace: &str, name: &str, replicas: i32) -> Result<(), kube::Error> {
        let api: Api<Deployment> = Api::namespaced(self.client.clone(), namespace);
        let params = PatchParams {
            field_manager: Some(SCALE_MANAGER.into()),
            ..PatchParams::default()
        };
        api.patch_scale(
            name,
            &params,
            &Patch::Merge(serde_json::json!({"spec": {"replicas": replicas}})),
        )
        .await
        .map(|_| ())
    }
}

#[async_trait]
impl Cluster for KubeCluster {
    async fn set_replicas(&self, agent: &AgentKey, replicas: i32) -> Result<(), kube::Error> {
        self.scale(
            &agent.namespace,
            &build::deployment_name(&agent.name),
            replicas,
        )
        .await
    }

    async fn set_pool_replicas(&self, pool: &PoolKey, replicas: i32) -> Result<(), kube::Error> {
        self.scale(
            &pool.namespace,
            &build::pool_deployment_name(&pool.name),
            replicas,
        )
        .await
    }

    async fn write_status(
        &self,
        agent: &AgentKey,
        status: &AgentStatus,
    ) -> Result<(), kube::Error> {
        let api: Api<Agent> = Api::namespaced(self.client.clone(), &agent.namespace);
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

    async fn publish(&self, object: &ObjectReference, notice: Notice) {
        let ev = Event {
            type_: notice.kind,
            reason: notice.reason.clone(),
            note: Some(notice.note),
            action: notice.action.into(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&ev, object).await {
            warn!(error = %crate::report::chain(&e), reason = %notice.reason, "cannot publish event");
        }
    }
}
