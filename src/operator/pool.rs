//! The Pool controller: Pool → its agents' manifests in ConfigMaps, the Secrets beside its
//! pods, the Deployment of `agentfleet pool`, a PodDisruptionBudget and its own egress
//! ([`super::build`]'s pool objects), and the Pool's status: agents hosted, thinking, waiting,
//! replicas, and `Ready`.
//!
//! Its agents are the valid Agents of its namespace that name it (`spec.runtime.pool`), read
//! from the operator's cache; an Agent's change reaches the replicas in place through the
//! mounted ConfigMaps. Its replicas are the data-plane loop's to set by load
//! ([`super::dataplane::pools`]); a reconcile applies the loop's count.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use k8s_openapi::jiff::Timestamp;
use kube::api::ListParams;
use kube::runtime::controller::Action;
use kube::{Api, Resource, ResourceExt};
use sha2::{Digest, Sha256};
use tracing::instrument;

use super::agent::{validate, MAX_NAME_LEN, READY};
use super::apply::{apply, apply_status, refused_as, remove};
use super::build;
use super::context::{Context, Error};
use super::dataplane::pools::{PoolKey, PoolTracked};
use super::status::{self, Cond};
use crate::crd::{Agent, Pool, PoolStatus};

/// Reasons that are problems an SRE should see as Warning events.
const WARNING_REASONS: &[&str] = &["InvalidSpec", "PoolRejected", "TooManyAgents"];

/// What the schema cannot say about a Pool.
pub fn validate_pool(name: &str, pool: &Pool) -> Vec<String> {
    let mut problems = Vec::new();
    if name.len() > MAX_NAME_LEN {
        problems.push(format!(
            "name is {} characters; at most {MAX_NAME_LEN} fit in its pods' labels",
            name.len()
        ));
    }
    let r = &pool.spec.replicas;
    if r.min > r.max {
        problems.push(format!(
            "replicas.min ({}) is more than replicas.max ({})",
            r.min, r.max
        ));
    }
    problems
}

/// The Agents `pool` runs: valid, not being deleted, of its namespace and naming it; each
/// as it runs (a held change's running revision, [`super::rollout::running`]) with its Models
/// resolved (one whose Models do not resolve is left out, as an invalid one is).
pub fn members(
    agents: &[Arc<Agent>],
    models: &[Arc<crate::crd::ModelResource>],
    namespace: &str,
    pool: &str,
) -> Vec<Arc<Agent>> {
    let mut out: Vec<Arc<Agent>> = agents
        .iter()
        .filter(|a| {
            a.namespace().as_deref() == Some(namespace)
                && a.spec.runtime.as_ref().is_some_and(|r| r.pool == pool)
                && a.metadata.deletion_timestamp.is_none()
                && validate(&a.name_any(), &a.spec).is_empty()
        })
        .filter_map(|a| {
            let rollout = a.status.as_ref().and_then(|s| s.rollout.as_ref());
            let running = super::rollout::running(a, rollout);
            super::model::resolve(&running, models).ok().map(Arc::new)
        })
        .collect();
    out.sort_by_key(|a| a.name_any());
    out
}

/// The Secrets `agents` (their models resolved) reference: their models' keys and their
/// tools' headers.
pub fn referenced_secrets(agents: &[Arc<Agent>]) -> BTreeSet<String> {
    agents
        .iter()
        .flat_map(|a| {
            build::mounted_secrets(&a.spec)
                .into_iter()
                .map(str::to_string)
        })
        .collect()
}

/// Reconciles one Pool.
#[instrument(skip_all, fields(pool = %pool.name_any(), namespace = pool.namespace().unwrap_or_default()))]
pub async fn reconcile(pool: Arc<Pool>, ctx: Arc<Context>) -> Result<Action, Error> {
    let ns = pool
        .namespace()
        .ok_or(Error::MissingField("metadata.namespace"))?;
    let name = pool.name_any();
    let key = PoolKey::new(ns.clone(), name.clone());
    if pool.metadata.deletion_timestamp.is_some() {
        // Its objects go with it (owner references).
        ctx.scaler.pools.forget(&key);
        return Ok(Action::await_change());
    }
    ctx.caches_synced().await?;
    let previous = pool.status.clone().unwrap_or_default();
    let agents = members(&ctx.agents.state(), &ctx.models.state(), &ns, &name);
    let problems = validate_pool(&name, &pool);
    let mut status = PoolStatus {
        observed_generation: pool.metadata.generation,
        agents: u32::try_from(agents.len()).unwrap_or(u32::MAX),
        ..previous.clone()
    };
    let ready = if problems.is_empty() {
        let owner = pool
            .controller_owner_ref(&())
            .ok_or(Error::MissingField("metadata.uid"))?;
        match apply_objects(&ctx, &pool, &key, &owner, &agents).await {
            Ok(Placed::Applied(deploy)) => {
                let asked = deploy.spec.as_ref().and_then(|s| s.replicas).unwrap_or(0);
                let ready = deploy
                    .status
                    .as_ref()
                    .and_then(|s| s.ready_replicas)
                    .unwrap_or(0);
                status.replicas = Some(asked);
                status.ready_replicas = Some(ready);
                ready_condition(asked, ready, agents.len())
            }
            Ok(Placed::TooMany(failed)) => failed,
            Err(Error::Refused(rejected)) => Cond::fail(READY, "PoolRejected", rejected),
            Err(e) => return Err(e),
        }
    } else {
        Cond::fail(READY, "InvalidSpec", problems.join("; "))
    };
    let load = ctx.scaler.pools.load(&key).unwrap_or_default();
    status.thinking = load.thinking;
    status.waiting = load.waiting;
    status.conditions = status::merge(
        &previous.conditions,
        std::slice::from_ref(&ready),
        pool.metadata.generation,
        Timestamp::now(),
    );
    ctx.announce(&*pool, &previous.conditions, &status.conditions, |c| {
        c.status != "True" && WARNING_REASONS.contains(&c.reason.as_str())
    })
    .await;
    if status != previous {
        apply_status(
            &Api::<Pool>::namespaced(ctx.client.clone(), &ns),
            &name,
            &status,
        )
        .await?;
    }
    // The Deployment is watched; this is for what is not (Secrets) and for a drift.
    Ok(Action::requeue(Duration::from_secs(300)))
}

/// `Ready` of a Pool whose objects are applied.
fn ready_condition(asked: i32, ready: i32, agents: usize) -> Cond {
    if asked == 0 {
        Cond::ok(
            READY,
            "ScaledToZero",
            format!("no replica runs; the first event for one of its {agents} agent(s) starts one"),
        )
    } else if ready >= asked {
        Cond::ok(
            READY,
            "ReplicasReady",
            format!("{ready} of {asked} replica(s) ready for {agents} agent(s)"),
        )
    } else {
        Cond::fail(
            READY,
            "ReplicasStarting",
            format!("{ready} of {asked} replica(s) ready"),
        )
    }
}

/// What became of a Pool's objects (short of an error).
enum Placed {
    /// All applied: the Deployment as the API server keeps it.
    Applied(Box<Deployment>),
    /// The agents' manifests do not fit in the ConfigMaps a Pool fills: the condition.
    TooMany(Cond),
}

/// Applies the Pool's objects; [`Error::Refused`] when the API server refused one (the
/// objects applied so far stay).
async fn apply_objects(
    ctx: &Context,
    pool: &Pool,
    key: &PoolKey,
    owner: &OwnerReference,
    agents: &[Arc<Agent>],
) -> Result<Placed, Error> {
    let ns = &key.namespace;
    let mut manifests = BTreeMap::new();
    for a in agents {
        manifests.insert(a.name_any(), build::render_manifest(a)?);
    }
    let shards = match build::shard(&manifests) {
        Ok(shards) => shards,
        Err(bytes) => {
            return Ok(Placed::TooMany(Cond::fail(
                READY,
                "TooManyAgents",
                format!(
                    "the manifests of its {} agents take {} KiB, more than the {} ConfigMaps a Pool fills hold; split the agents across more Pools",
                    agents.len(),
                    bytes / 1024,
                    build::MAX_SHARDS
                ),
            )))
        }
    };
    let secrets = referenced_secrets(agents);
    // The objects other than the Deployment change only with the agents or the spec: applied
    // again only then (a reconcile for a load change applies the Deployment alone).
    let mut print = Sha256::new();
    print.update(serde_json::to_vec(&shards).unwrap_or_default());
    print.update(serde_json::to_vec(&pool.spec).unwrap_or_default());
    print.update(format!("{:?}", ctx.worker).as_bytes());
    let print = crate::hex(&print.finalize()[..8]);
    let applied_key = format!("pool/{key}");
    if ctx.applied_hash(&applied_key).as_deref() != Some(print.as_str()) {
        let secrets_api = Api::<Secret>::namespaced(ctx.client.clone(), ns);
        for secret in build::pool_secrets(pool, owner, &ctx.worker) {
            apply(&secrets_api, &secret)
                .await
                .map_err(refused_as(format_args!("Secret {}", secret.name_any())))?;
        }
        let cms = Api::<ConfigMap>::namespaced(ctx.client.clone(), ns);
        for (i, data) in shards.iter().enumerate() {
            let cm = build::pool_configmap(pool, owner, i, data.clone());
            apply(&cms, &cm)
                .await
                .map_err(refused_as(format_args!("ConfigMap {}", cm.name_any())))?;
        }
        remove_stale_shards(&cms, &key.name, shards.len()).await?;
        let pdbs = Api::<PodDisruptionBudget>::namespaced(ctx.client.clone(), ns);
        apply(&pdbs, &build::pool_pdb(pool, owner))
            .await
            .map_err(refused_as("PodDisruptionBudget"))?;
        let policies = Api::<NetworkPolicy>::namespaced(ctx.client.clone(), ns);
        match build::pool_network_policy(pool, owner) {
            Some(np) => {
                apply(&policies, &np)
                    .await
                    .map_err(refused_as("NetworkPolicy"))?;
            }
            None => remove(&policies, &build::pool_deployment_name(&key.name)).await?,
        }
    }
    let r = &pool.spec.replicas;
    let deploy = {
        let last_known = pool.status.as_ref().and_then(|s| s.replicas);
        let held = ctx.scaler.pools.hold(key, r.min, r.max, last_known).await;
        let deploy = build::pool_deployment(
            pool,
            owner,
            &ctx.worker,
            &build::PoolPods {
                shards: shards.len(),
                secrets: &secrets,
                replicas: Some(held.replicas),
            },
        );
        apply(
            &Api::<Deployment>::namespaced(ctx.client.clone(), ns),
            &deploy,
        )
        .await
        .map_err(refused_as("Deployment"))?
    };
    ctx.record_applied_hash(applied_key, &print);
    ctx.scaler.pools.track(
        key,
        PoolTracked {
            object: pool.object_ref(&()),
            min: r.min,
            max: r.max,
            cycles_at_once: pool.spec.cycles_at_once,
            scale_down: Duration::from_secs(u64::from(r.scale_down_seconds)),
            replicas: deploy.spec.as_ref().and_then(|s| s.replicas),
        },
    );
    Ok(Placed::Applied(Box::new(deploy)))
}

/// Deletes the Pool's ConfigMaps of manifests beyond the `count` it fills now.
async fn remove_stale_shards(api: &Api<ConfigMap>, pool: &str, count: usize) -> Result<(), Error> {
    let selector = format!("{}={pool}", build::POOL_LABEL);
    let listed = api
        .list_metadata(&ListParams::default().labels(&selector))
        .await
        .map_err(Error::Kube)?;
    let keep: BTreeSet<String> = (0..count)
        .map(|i| build::pool_configmap_name(pool, i))
        .collect();
    let prefix = format!("{pool}-pool-agents-");
    for cm in listed.items {
        let name = cm.name_any();
        if name.starts_with(&prefix) && !keep.contains(&name) {
            remove(api, &name).await?;
        }
    }
    Ok(())
}
