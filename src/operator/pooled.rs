//! An Agent that runs in a Pool (`spec.runtime.pool`): it gets no worker Deployment of its
//! own. Its `WorkerAvailable` condition says which pool runs it and whether that pool has a
//! replica ready; a worker Deployment and ConfigMap left from when it ran on its own are
//! removed (its state is in the data plane, so nothing is lost by the move).

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::{Api, Client};

use super::apply::remove;
use super::build;
use super::conditions::WORKER_AVAILABLE;
use super::context::Error;
use super::status::Cond;
use crate::crd::Pool;

/// How a pooled agent's pool looks: the condition, and the replicas ready to run it.
pub struct Placed {
    /// `WorkerAvailable`.
    pub condition: Cond,
    /// Replicas of the pool ready.
    pub ready: i32,
    /// Replicas of the pool asked for.
    pub asked: i32,
}

/// `WorkerAvailable` of an agent in pool `pool` as the Pool shows it (`None`: no such Pool).
pub fn condition(pool: &str, found: Option<&Pool>) -> Placed {
    let Some(found) = found else {
        return Placed {
            condition: Cond::fail(
                WORKER_AVAILABLE,
                "PoolNotFound",
                format!("no Pool {pool} in this namespace; the agent's events wait in its inbox"),
            ),
            ready: 0,
            asked: 0,
        };
    };
    let status = found.status.clone().unwrap_or_default();
    let ready = status.ready_replicas.unwrap_or(0);
    let condition = if ready >= 1 {
        Cond::ok(
            WORKER_AVAILABLE,
            "Pooled",
            format!("runs in Pool {pool} ({ready} replica(s) ready)"),
        )
    } else if found.spec.replicas.min == 0 && status.replicas.unwrap_or(0) == 0 {
        Cond::fail(
            WORKER_AVAILABLE,
            "ScaledToZero",
            format!("Pool {pool} runs no replica; an event wakes it"),
        )
    } else {
        Cond::fail(
            WORKER_AVAILABLE,
            "PoolNotReady",
            format!("Pool {pool} has no replica ready yet"),
        )
    };
    Placed {
        condition,
        ready,
        asked: status.replicas.unwrap_or(0),
    }
}

/// Places the agent `name` in pool `pool`: reads the Pool, and removes the worker Deployment
/// and ConfigMap the agent had when it ran on its own.
pub async fn place(client: &Client, ns: &str, name: &str, pool: &str) -> Result<Placed, Error> {
    let found = Api::<Pool>::namespaced(client.clone(), ns)
        .get_opt(pool)
        .await
        .map_err(Error::Kube)?;
    remove(
        &Api::<Deployment>::namespaced(client.clone(), ns),
        &build::deployment_name(name),
    )
    .await?;
    remove(
        &Api::<ConfigMap>::namespaced(client.clone(), ns),
        &build::configmap_name(name),
    )
    .await?;
    Ok(condition(pool, found.as_ref()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(min: i32, replicas: Option<i32>, ready: Option<i32>) -> Pool {
        let mut p: Pool = serde_yaml::from_str(&format!(
            "apiVersion: agentfleet.dev/v1alpha1\nkind: Pool\nmetadata: {{name: shared, namespace: fam}}\nspec: {{replicas: {{min: {min}, max: 3}}}}\n"
        ))
        .unwrap();
        p.status = Some(crate::crd::PoolStatus {
            replicas,
            ready_replicas: ready,
            ..Default::default()
        });
        p
    }

    #[test]
    fn the_condition_says_which_pool_and_how_it_is() {
        let missing = condition("shared", None);
        assert_eq!(
            (missing.condition.reason, missing.ready),
            ("PoolNotFound", 0)
        );
        let ready = condition("shared", Some(&pool(1, Some(2), Some(2))));
        assert_eq!(ready.condition.status, Some(true));
        assert_eq!(ready.condition.reason, "Pooled");
        assert_eq!(
            ready.condition.message,
            "runs in Pool shared (2 replica(s) ready)"
        );
        assert_eq!(ready.ready, 2);
        let zero = condition("shared", Some(&pool(0, Some(0), None)));
        assert_eq!(zero.condition.reason, "ScaledToZero");
        let starting = condition("shared", Some(&pool(1, Some(1), Some(0))));
        assert_eq!(starting.condition.reason, "PoolNotReady");
    }
}
