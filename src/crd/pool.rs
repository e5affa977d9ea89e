use k8s_openapi::api::networking::v1::NetworkPolicyEgressRule;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::WorkerSpec;

/// Many Agents of this namespace in a few `agentfleet pool` processes: an Agent joins with
/// `spec.runtime.pool` and then has no worker Deployment of its own. An agent asleep costs its
/// pool a few hundred bytes; a woken one is loaded, thinks in one of the replica's cycle slots,
/// and sleeps again. A pool serves only Agents of its own namespace and reads only the Secrets
/// they reference. Choose a dedicated worker instead for an agent that needs its own egress
/// policy or Secrets mount, or whose tools are noisy neighbours.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "agentfleet.dev",
    version = "v1alpha1",
    kind = "Pool",
    namespaced,
    status = "PoolStatus",
    shortname = "agp",
    category = "agentfleet",
    printcolumn = r#"{"name":"Agents","type":"integer","jsonPath":".status.agents"}"#,
    printcolumn = r#"{"name":"Thinking","type":"integer","jsonPath":".status.thinking"}"#,
    printcolumn = r#"{"name":"Waiting","type":"integer","jsonPath":".status.waiting"}"#,
    printcolumn = r#"{"name":"Replicas","type":"integer","jsonPath":".status.replicas"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","priority":1,"jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct PoolSpec {
    /// How many `agentfleet pool` processes run: between `min` (0 allowed: none until an agent
    /// has work) and `max`, by the agents thinking and waiting for a slot.
    #[serde(default)]
    pub replicas: PoolReplicas,

    /// Looks and cycles one replica runs at once; more agents with work wait for a slot, first
    /// come, first served (`agentfleet_pool_slot_wait_seconds`).
    #[serde(default = "default_cycles_at_once")]
    #[schemars(range(min = 1, max = 1024))]
    pub cycles_at_once: u32,

    /// Agents one replica keeps loaded between their cycles (the most recently active); the
    /// others are loaded again from the data plane when they wake.
    #[serde(default = "default_warm_agents")]
    #[schemars(range(min = 1, max = 100000))]
    pub warm_agents: u32,

    /// Seconds an agent's lease lasts without renewal: how long the other replicas wait for
    /// the agents of a replica that died mid-cycle.
    #[serde(default = "default_lease_seconds")]
    #[schemars(range(min = 1, max = 300))]
    pub lease_seconds: u32,

    /// The pool's pods: image, resources, environment, node selector, tolerations.
    #[serde(default)]
    pub worker: WorkerSpec,

    /// Where the pool's agents' models and tools may connect, beyond what the chart's
    /// policy for workers allows: NetworkPolicy egress rules for the pool's pods (at most 32).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub egress: Vec<NetworkPolicyEgressRule>,
}

/// The replicas of a pool.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PoolReplicas {
    /// Replicas kept when no agent has work (0: the first event starts one).
    #[serde(default = "default_min_replicas")]
    #[schemars(range(min = 0, max = 100))]
    pub min: i32,

    /// Replicas at most.
    #[serde(default = "default_max_replicas")]
    #[schemars(range(min = 1, max = 100))]
    pub max: i32,

    /// Seconds the load must have asked for fewer replicas before the pool scales down (a
    /// replica that goes finishes its cycles first and hands its agents on).
    #[serde(default = "default_scale_down_seconds")]
    #[schemars(range(min = 0, max = 3600))]
    pub scale_down_seconds: u32,
}

impl Default for PoolReplicas {
    fn default() -> Self {
        Self {
            min: default_min_replicas(),
            max: default_max_replicas(),
            scale_down_seconds: default_scale_down_seconds(),
        }
    }
}

fn default_min_replicas() -> i32 {
    1
}

fn default_max_replicas() -> i32 {
    3
}

fn default_scale_down_seconds() -> u32 {
    60
}

fn default_cycles_at_once() -> u32 {
    16
}

fn default_warm_agents() -> u32 {
    256
}

fn default_lease_seconds() -> u32 {
    15
}

/// Observed state of a Pool.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PoolStatus {
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// Agents of the namespace that name this pool in `spec.runtime.pool`.
    #[serde(default)]
    pub agents: u32,

    /// Of them, in a cycle now.
    #[serde(default)]
    pub thinking: u32,

    /// Of them, with events waiting (for a slot, or for a replica to start).
    #[serde(default)]
    pub waiting: u32,

    /// Replicas asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,

    /// Replicas ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_replicas: Option<i32>,

    /// `Ready`: the pool's Deployment is applied and has the replicas its load needs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

/// Which runtime runs an agent.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RuntimeSpec {
    /// The Pool (in this namespace) whose processes run the agent; it then has no worker
    /// Deployment of its own (`spec.worker` and `spec.scaling` do not apply). Moving an agent
    /// between a pool and its own worker loses nothing: its state is in the data plane.
    #[schemars(length(min = 1, max = 63))]
    #[schemars(regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"))]
    pub pool: String,
}
