//! A Pool's objects, all owned by the Pool: the rendered manifests of its Agents in a few
//! ConfigMaps (`POOL-pool-agents-N`, each well under the API server's 1 MiB), the Deployment
//! of `agentfleet pool` (`POOL-pool`) that reads them from one mounted directory, a
//! PodDisruptionBudget, and with `spec.egress` a NetworkPolicy that adds the pool's own
//! destinations to the chart's policy for workers (policies add up).
//!
//! A changed manifest reaches the replicas in place (the kubelet updates the mounted
//! ConfigMaps and the pool reads its directory again): adding, changing or removing an Agent
//! restarts no pod. The pod template changes — and the replicas roll — only with what a
//! running process cannot pick up: the operator's defaults, the Secrets mounted, the number
//! of ConfigMaps.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::apps::v1::{
    Deployment, DeploymentSpec, DeploymentStrategy, RollingUpdateDeployment,
};
use k8s_openapi::api::core::v1::{
    ConfigMap, ConfigMapProjection, HTTPGetAction, PodTemplateSpec, Probe, ProjectedVolumeSource,
    ResourceRequirements, Volume, VolumeMount, VolumeProjection,
};
use k8s_openapi::api::networking::v1::{NetworkPolicy, NetworkPolicySpec};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;
use sha2::{Digest, Sha256};

use super::{
    config_hash, pod, worker_secrets, WorkerDefaults, CONFIG_HASH_ANNOTATION, MANAGED_BY,
    WORKER_METRICS_PORT,
};
use crate::crd::Pool;

/// The label naming the Pool on each of its objects and pods.
pub const POOL_LABEL: &str = "agentfleet.dev/pool";

/// Where a pool's pods find its Agents' manifests.
pub const POOL_AGENTS_DIR: &str = "/etc/agentfleet/agents";

/// What one ConfigMap of manifests holds at most when it is filled (the API server refuses
/// an object over 1 MiB; this leaves room for the metadata).
pub const SHARD_LIMIT: usize = 900 * 1024;

/// What a ConfigMap of manifests is sized for on average: half the limit, so that the
/// unevenness of hashing names into them rarely needs another.
const SHARD_TARGET: usize = 450 * 1024;

/// ConfigMaps of manifests at most (about 29 MiB of manifests: tens of thousands of Agents).
pub const MAX_SHARDS: usize = 32;

/// Name of a Pool's Deployment (and of its PodDisruptionBudget and NetworkPolicy).
pub fn pool_deployment_name(pool: &str) -> String {
    format!("{pool}-pool")
}

/// Name of a Pool's `index`th ConfigMap of manifests.
pub fn pool_configmap_name(pool: &str, index: usize) -> String {
    format!("{pool}-pool-agents-{index}")
}

/// Labels of every object of a Pool, and of its pods (`agentfleet-worker`: the chart's policy
/// for workers applies to them as to every worker).
pub fn pool_labels(pool: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("app.kubernetes.io/name".into(), "agentfleet-worker".into()),
        ("app.kubernetes.io/instance".into(), pool.into()),
        ("app.kubernetes.io/component".into(), "pool".into()),
        ("app.kubernetes.io/part-of".into(), "agentfleet".into()),
        ("app.kubernetes.io/managed-by".into(), MANAGED_BY.into()),
        (POOL_LABEL.into(), pool.into()),
    ])
}

fn pool_selector(pool: &str) -> LabelSelector {
    LabelSelector {
        match_labels: Some(BTreeMap::from([
            ("app.kubernetes.io/name".into(), "agentfleet-worker".into()),
            (POOL_LABEL.into(), pool.into()),
        ])),
        ..LabelSelector::default()
    }
}

/// Metadata of an object of `pool`, owned by it.
pub fn pool_meta(pool: &Pool, name: String, owner: &OwnerReference) -> ObjectMeta {
    ObjectMeta {
        name: Some(name),
        namespace: pool.namespace(),
        labels: Some(pool_labels(&pool.name_any())),
        owner_references: Some(vec![owner.clone()]),
        ..ObjectMeta::default()
    }
}

/// The manifests (agent name → rendered YAML) split into ConfigMap data: each agent in the
/// shard its name hashes to, as `NAME.yaml`, with as few shards (a power of two) as keep every
/// one under [`SHARD_LIMIT`]. An agent stays in its shard while the count stays; `Err` with
/// the bytes when even [`MAX_SHARDS`] are not enough.
pub fn shard(manifests: &BTreeMap<String, String>) -> Result<Vec<BTreeMap<String, String>>, usize> {
    let total: usize = manifests.iter().map(|(n, m)| n.len() + m.len() + 8).sum();
    let mut count = total.div_ceil(SHARD_TARGET).max(1).next_power_of_two();
    while count <= MAX_SHARDS {
        let mut shards = vec![BTreeMap::new(); count];
        let mut sizes = vec![0usize; count];
        for (name, manifest) in manifests {
            let i = shard_of(name, count);
            sizes[i] += name.len() + manifest.len() + 8;
            shards[i].insert(format!("{name}.yaml"), manifest.clone());
        }
        if sizes.iter().all(|s| *s <= SHARD_LIMIT) {
            return Ok(shards);
        }
        count *= 2;
    }
    Err(total)
}

/// The shard of `name` among `count`: a stable hash, the same in every operator.
fn shard_of(name: &str, count: usize) -> usize {
    let digest = Sha256::digest(name.as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    usize::try_from(u64::from_be_bytes(first) % count as u64).unwrap_or(0)
}

/// The `index`th ConfigMap of manifests.
pub fn pool_configmap(
    pool: &Pool,
    owner: &OwnerReference,
    index: usize,
    data: BTreeMap<String, String>,
) -> ConfigMap {
    let name = pool.name_any();
    ConfigMap {
        metadata: pool_meta(pool, pool_configmap_name(&name, index), owner),
        data: Some(data),
        ..ConfigMap::default()
    }
}

/// The Secrets the operator writes beside the pool's pods (the managed Redis URL, the
/// archive's environment), owned by the Pool.
pub fn pool_secrets(
    pool: &Pool,
    owner: &OwnerReference,
    defaults: &WorkerDefaults,
) -> Vec<k8s_openapi::api::core::v1::Secret> {
    worker_secrets(
        &pool_deployment_name(&pool.name_any()),
        |name| pool_meta(pool, name, owner),
        defaults,
    )
}

/// What a pool's Deployment is made of beside the Pool itself.
pub struct PoolPods<'a> {
    /// ConfigMaps of manifests ([`shard`]).
    pub shards: usize,
    /// The Secrets its agents reference (models' keys, tools' headers), mounted at
    /// `/etc/agentfleet/secrets/NAME`.
    pub secrets: &'a BTreeSet<String>,
    /// Replicas (`None`: left as they are).
    pub replicas: Option<i32>,
}

/// The Deployment of `agentfleet pool`: its agents' manifests in one directory (the shards,
/// projected), the Secrets they reference mounted as a dedicated worker's are but optional (a
/// Secret one agent lacks must not keep its neighbours from starting: that agent says so in
/// its own conditions), a readiness probe on `/readyz` (ready: the process hears its wake
/// signals), and rolling updates that add a replica before one goes.
pub fn pool_deployment(
    pool: &Pool,
    owner: &OwnerReference,
    defaults: &WorkerDefaults,
    pods: &PoolPods<'_>,
) -> Deployment {
    let name = pool.name_any();
    let namespace = pool.namespace().unwrap_or_default();
    let base = pool_deployment_name(&name);
    let config = (
        Volume {
            name: "agents".into(),
            projected: Some(ProjectedVolumeSource {
                sources: Some(
                    (0..pods.shards)
                        .map(|i| VolumeProjection {
                            config_map: Some(ConfigMapProjection {
                                name: pool_configmap_name(&name, i),
                                optional: Some(false),
                                ..ConfigMapProjection::default()
                            }),
                            ..VolumeProjection::default()
                        })
                        .collect(),
                ),
                ..ProjectedVolumeSource::default()
            }),
            ..Volume::default()
        },
        VolumeMount {
            name: "agents".into(),
            mount_path: POOL_AGENTS_DIR.into(),
            read_only: Some(true),
            ..VolumeMount::default()
        },
    );
    let secrets: Vec<&str> = pods.secrets.iter().map(String::as_str).collect();
    let spec = &pool.spec;
    let mut pod = pod::pod_spec(
        pod::Pod {
            base: &base,
            worker: &spec.worker,
            args: vec![
                "pool".into(),
                "--namespace".into(),
                namespace,
                "--name".into(),
                name.clone(),
                "--agents".into(),
                POOL_AGENTS_DIR.into(),
                "--cycles-at-once".into(),
                spec.cycles_at_once.to_string(),
                "--warm-agents".into(),
                spec.warm_agents.to_string(),
                "--lease-seconds".into(),
                spec.lease_seconds.to_string(),
                "--metrics-addr".into(),
                format!("0.0.0.0:{WORKER_METRICS_PORT}"),
            ],
            env: Vec::new(),
            config,
            secrets: secrets.clone(),
            secrets_optional: true,
            optional_secrets: Vec::new(),
            default_resources: pool_resources(),
        },
        defaults,
    );
    for c in &mut pod.containers {
        c.readiness_probe = Some(Probe {
            http_get: Some(HTTPGetAction {
                path: Some("/readyz".into()),
                port: IntOrString::String("metrics".into()),
                scheme: Some("HTTP".into()),
                ..HTTPGetAction::default()
            }),
            period_seconds: Some(5),
            timeout_seconds: Some(1),
            success_threshold: Some(1),
            failure_threshold: Some(3),
            ..Probe::default()
        });
    }
    // What only a new process picks up; never the manifests, which it reads in place.
    let hash = config_hash(&format!("pool shards {}", pods.shards), defaults, &secrets);
    let mut template_meta = pool_meta(pool, String::new(), owner);
    template_meta.name = None;
    template_meta.namespace = None;
    template_meta.owner_references = None;
    template_meta.annotations = Some(BTreeMap::from([(CONFIG_HASH_ANNOTATION.to_string(), hash)]));
    Deployment {
        metadata: pool_meta(pool, base, owner),
        spec: Some(DeploymentSpec {
            replicas: pods.replicas,
            selector: pool_selector(&name),
            strategy: Some(DeploymentStrategy {
                type_: Some("RollingUpdate".into()),
                rolling_update: Some(RollingUpdateDeployment {
                    max_surge: Some(IntOrString::Int(1)),
                    max_unavailable: Some(IntOrString::Int(0)),
                }),
            }),
            template: PodTemplateSpec {
                metadata: Some(template_meta),
                spec: Some(pod),
            },
            ..DeploymentSpec::default()
        }),
        ..Deployment::default()
    }
}

/// A pool replica's resources unless the Pool sets them: more than a dedicated worker's, as it
/// holds many agents.
fn pool_resources() -> ResourceRequirements {
    ResourceRequirements {
        requests: Some(BTreeMap::from([
            ("cpu".into(), Quantity("100m".into())),
            ("memory".into(), Quantity("128Mi".into())),
        ])),
        limits: Some(BTreeMap::from([("memory".into(), Quantity("1Gi".into()))])),
        ..ResourceRequirements::default()
    }
}

/// A voluntary eviction (a node drain) takes one replica at a time; the one that goes
/// finishes its cycles and its agents wake elsewhere.
pub fn pool_pdb(pool: &Pool, owner: &OwnerReference) -> PodDisruptionBudget {
    let name = pool.name_any();
    PodDisruptionBudget {
        metadata: pool_meta(pool, pool_deployment_name(&name), owner),
        spec: Some(PodDisruptionBudgetSpec {
            max_unavailable: Some(IntOrString::Int(1)),
            selector: Some(pool_selector(&name)),
            ..PodDisruptionBudgetSpec::default()
        }),
        ..PodDisruptionBudget::default()
    }
}

/// The pool's own egress (`spec.egress`) for its pods, beside the chart's policy for workers;
/// `None` when the Pool adds none.
pub fn pool_network_policy(pool: &Pool, owner: &OwnerReference) -> Option<NetworkPolicy> {
    if pool.spec.egress.is_empty() {
        return None;
    }
    let name = pool.name_any();
    Some(NetworkPolicy {
        metadata: pool_meta(pool, pool_deployment_name(&name), owner),
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(pool_selector(&name)),
            policy_types: Some(vec!["Egress".into()]),
            egress: Some(pool.spec.egress.clone()),
            ..NetworkPolicySpec::default()
        }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operator::build::tests::defaults;

    fn pool(yaml_spec: &str) -> Pool {
        let mut p: Pool = serde_yaml::from_str(&format!(
            "apiVersion: agentfleet.dev/v1alpha1\nkind: Pool\nmetadata: {{name: shared, namespace: fam, uid: pool-uid}}\nspec: {yaml_spec}\n"
        ))
        .unwrap();
        p.metadata.uid = Some("pool-uid".into());
        p
    }

    fn owner(p: &Pool) -> OwnerReference {
        use kube::Resource;
        p.controller_owner_ref(&()).unwrap()
    }

    #[test]
    fn manifests_are_sharded_by_name_under_the_limit() {
        let small: BTreeMap<String, String> = (0..10)
            .map(|i| (format!("a{i}"), "x".repeat(1000)))
            .collect();
        let shards = shard(&small).unwrap();
        assert_eq!(shards.len(), 1);
        assert_eq!(shards[0].len(), 10);
        assert!(shards[0].contains_key("a3.yaml"));
        // 3,000 agents of 3 KiB: 9 MiB in a power of two of shards, each under the limit.
        let many: BTreeMap<String, String> = (0..3000)
            .map(|i| (format!("agent-{i}"), "y".repeat(3 * 1024)))
            .collect();
        let shards = shard(&many).unwrap();
        assert!(
            shards.len().is_power_of_two() && shards.len() >= 16,
            "{}",
            shards.len()
        );
        assert_eq!(shards.iter().map(BTreeMap::len).sum::<usize>(), 3000);
        for s in &shards {
            let bytes: usize = s.iter().map(|(k, v)| k.len() + v.len()).sum();
            assert!(bytes <= SHARD_LIMIT, "{bytes}");
        }
        // One more agent leaves the others where they were.
        let mut more = many.clone();
        more.insert("agent-new".into(), "z".repeat(100));
        let again = shard(&more).unwrap();
        assert_eq!(again.len(), shards.len());
        for (a, b) in shards.iter().zip(&again) {
            assert!(a.keys().all(|k| b.contains_key(k)));
        }
        // Beyond what 32 ConfigMaps hold: refused with the size.
        let huge: BTreeMap<String, String> = (0..40)
            .map(|i| (format!("big-{i}"), "w".repeat(800 * 1024)))
            .collect();
        assert!(shard(&huge).is_err());
    }

    #[test]
    fn the_pool_deployment_runs_the_pool_with_its_agents_and_secrets() {
        let p = pool("{cyclesAtOnce: 8, warmAgents: 100, leaseSeconds: 20}");
        let secrets = BTreeSet::from(["model-key".to_string(), "tool-token".to_string()]);
        let d = pool_deployment(
            &p,
            &owner(&p),
            &defaults(),
            &PoolPods {
                shards: 2,
                secrets: &secrets,
                replicas: Some(2),
            },
        );
        assert_eq!(d.metadata.name.as_deref(), Some("shared-pool"));
        let spec = d.spec.as_ref().unwrap();
        assert_eq!(spec.replicas, Some(2));
        let pod = spec.template.spec.as_ref().unwrap();
        let c = &pod.containers[0];
        let args = c.args.as_ref().unwrap().join(" ");
        assert!(
            args.starts_with("pool --namespace fam --name shared --agents /etc/agentfleet/agents --cycles-at-once 8 --warm-agents 100 --lease-seconds 20"),
            "{args}"
        );
        let volumes = pod.volumes.as_ref().unwrap();
        let agents = volumes.iter().find(|v| v.name == "agents").unwrap();
        let sources: Vec<&str> = agents
            .projected
            .as_ref()
            .unwrap()
            .sources
            .iter()
            .flatten()
            .map(|s| s.config_map.as_ref().unwrap().name.as_str())
            .collect();
        assert_eq!(sources, ["shared-pool-agents-0", "shared-pool-agents-1"]);
        let mounted: Vec<(&str, Option<bool>)> = volumes
            .iter()
            .filter_map(|v| v.secret.as_ref())
            .map(|s| (s.secret_name.as_deref().unwrap(), s.optional))
            .collect();
        assert_eq!(
            mounted,
            [("model-key", Some(true)), ("tool-token", Some(true))],
            "only the Secrets its agents reference, none required"
        );
        assert_eq!(pod.automount_service_account_token, Some(false));
        assert!(c.readiness_probe.is_some());
        let labels = spec
            .template
            .metadata
            .as_ref()
            .unwrap()
            .labels
            .as_ref()
            .unwrap();
        assert_eq!(labels["app.kubernetes.io/name"], "agentfleet-worker");
        assert_eq!(labels[POOL_LABEL], "shared");
        // The template moves with what a process reads once, not with the manifests.
        let hash = |shards, secrets: &BTreeSet<String>| {
            pool_deployment(
                &p,
                &owner(&p),
                &defaults(),
                &PoolPods {
                    shards,
                    secrets,
                    replicas: None,
                },
            )
            .spec
            .unwrap()
            .template
            .metadata
            .unwrap()
            .annotations
            .unwrap()[CONFIG_HASH_ANNOTATION]
                .clone()
        };
        assert_eq!(hash(2, &secrets), hash(2, &secrets));
        assert_ne!(hash(2, &secrets), hash(4, &secrets));
        assert_ne!(hash(2, &secrets), hash(2, &BTreeSet::new()));
    }

    #[test]
    fn egress_only_when_the_pool_adds_some_and_one_eviction_at_a_time() {
        let p = pool("{}");
        assert!(pool_network_policy(&p, &owner(&p)).is_none());
        let p = pool("{egress: [{to: [{ipBlock: {cidr: 10.9.0.0/16}}], ports: [{port: 443}]}]}");
        let np = pool_network_policy(&p, &owner(&p)).unwrap();
        let spec = np.spec.unwrap();
        assert_eq!(spec.policy_types, Some(vec!["Egress".into()]));
        assert_eq!(spec.egress.unwrap().len(), 1);
        assert_eq!(
            spec.pod_selector.unwrap().match_labels.unwrap()[POOL_LABEL],
            "shared"
        );
        let pdb = pool_pdb(&p, &owner(&p));
        assert_eq!(pdb.spec.unwrap().max_unavailable, Some(IntOrString::Int(1)));
        assert_eq!(pdb.metadata.owner_references.unwrap()[0].kind, "Pool");
    }
}
