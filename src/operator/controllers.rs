//! The controllers (Agents, Spaces, Pools, Models, Rehearsals) wired to what they watch, and the loops that run beside them: the
//! cache-sync gate, the data-plane loop (after the caches synced) and the orphan sweep. A failed
//! reconcile is counted and requeued after its backoff.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::runtime::controller::Action;
use kube::runtime::reflector;
use kube::runtime::{predicates, watcher, Controller, Predicate, WatchStreamExt};
use kube::{Api, Client, Resource, ResourceExt};
use tokio::sync::watch;
use tracing::{debug, info, warn};

use super::context::{Config, Context, Error};
use super::dataplane::cluster::KubeCluster;
use super::dataplane::Deps;
use super::health::Health;
use super::watches::{
    agent_spec_changes, agents_in_pool, agents_naming, agents_with_models, model_spec_changes,
    models_of_namespace, other_models, pool_placement_changes, pools_of_namespace, worker_changes,
    MembershipChanges, PoolChanges,
};
use super::{agent, build, model, pool, rehearsal, space};
use crate::crd::{Agent, ModelResource, Pool, Rehearsal, Space};
use crate::store::Store;
use crate::telemetry::OperatorMetrics;

/// Reconciles run at once, per controller.
const RECONCILERS: u16 = 16;

/// Runs the controllers until `shutdown` resolves or a controller stops.
pub async fn run_controllers(
    client: Client,
    store: Arc<dyn Store>,
    metrics: OperatorMetrics,
    config: Config,
    health: Arc<Health>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let wc = watcher::Config::default().any_semantic();
    let children = watcher::Config::default()
        .labels(&format!(
            "app.kubernetes.io/managed-by={}",
            build::MANAGED_BY
        ))
        .any_semantic();
    let agents_api = Api::<Agent>::all(client.clone());
    let spaces_api = Api::<Space>::all(client.clone());
    // Agents reconcile on a new generation (spec changes, deletion), finalizer or annotation
    // changes (a rollout's override), not on their own status writes, which the data-plane
    // loop makes often.
    let (agent_cache, agent_writer) = reflector::store();
    let agent_events = watcher(agents_api.clone(), wc.clone())
        .default_backoff()
        .reflect(agent_writer)
        .applied_objects()
        .predicate_filter(
            predicates::generation
                .combine(predicates::finalizers)
                .combine(predicates::annotations),
            Default::default(),
        );
    // Bounded concurrency: a thousand Agents reconciling at once would only queue at the API
    // server, in front of the scale changes that wake agents.
    let reconcilers = kube::runtime::controller::Config::default().concurrency(RECONCILERS);
    let agent_ctl =
        Controller::for_stream(agent_events, agent_cache.clone()).with_config(reconcilers.clone());
    let space_ctl =
        Controller::new(spaces_api.clone(), wc.clone()).with_config(reconcilers.clone());
    let space_cache = space_ctl.store();
    let models_api = Api::<ModelResource>::all(client.clone());
    let model_ctl =
        Controller::new(models_api.clone(), wc.clone()).with_config(reconcilers.clone());
    let model_cache = model_ctl.store();
    let ctx = Arc::new(Context::new(
        client.clone(),
        store.clone(),
        metrics.clone(),
        config,
        agent_cache.clone(),
        space_cache.clone(),
        model_cache.clone(),
    ));

    let (stop_tx, stop_rx) = watch::channel(false);
    let stopped = |mut rx: watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|v| *v).await;
    };
    tokio::spawn(async move {
        shutdown.await;
        let _ = stop_tx.send(true);
    });

    let pools_api = Api::<Pool>::all(client.clone());
    let agents = {
        let spaces_for_agents = agent_cache.clone();
        let pools_for_agents = agent_cache.clone();
        let models_for_agents = agent_cache.clone();
        agent_ctl
            .owns_stream(worker_changes(
                Api::<Deployment>::all(client.clone()),
                children.clone(),
                ctx.scaler.clone(),
            ))
            .owns(Api::<ConfigMap>::all(client.clone()), children)
            // A held change's Rehearsal: its verdict moves the rollout.
            .owns(Api::<Rehearsal>::all(client.clone()), wc.clone())
            .watches(spaces_api, wc.clone(), move |space| {
                agents_naming(&spaces_for_agents, &space)
            })
            .watches_stream(
                pool_placement_changes(pools_api.clone(), wc.clone()),
                move |pool| agents_in_pool(&pools_for_agents, &pool),
            )
            // A Model's change reaches the manifests of the agents of its namespace.
            .watches_stream(
                model_spec_changes(models_api.clone(), wc.clone()),
                move |model| agents_with_models(&models_for_agents, &model),
            )
            .graceful_shutdown_on(stopped(stop_rx.clone()))
            .run(
                |obj, ctx| instrumented("agent", obj, ctx, agent::run),
                error_policy("agent"),
                ctx.clone(),
            )
            .for_each(|res| async move { report("agent", res) })
    };
    let changes = Arc::new(MembershipChanges::default());
    let spaces = {
        let changes = changes.clone();
        let cache = space_cache.clone();
        space_ctl
            .watches(agents_api.clone(), wc.clone(), move |agent| {
                changes.affected(&agent, &cache)
            })
            .graceful_shutdown_on(stopped(stop_rx.clone()))
            .run(
                |obj, ctx| instrumented("space", obj, ctx, space::reconcile),
                error_policy("space"),
                ctx.clone(),
            )
            .for_each(|res| async move { report("space", res) })
    };
    let pool_changes = Arc::new(PoolChanges::default());
    let pool_ctl = Controller::new(pools_api, wc.clone());
    let pool_cache = pool_ctl.store();
    let pools = {
        let changes = pool_changes.clone();
        // Load changes the data-plane loop saw: the Pool's status to write.
        let mut loads = ctx.scaler.pools.changes();
        let load_changes = futures::stream::poll_fn(move |cx| match loads.as_mut() {
            Some(rx) => rx.poll_recv(cx),
            None => std::task::Poll::Ready(None),
        });
        let pools_for_models = pool_cache.clone();
        let pool_children = watcher::Config::default()
            .labels(build::POOL_LABEL)
            .any_semantic();
        pool_ctl
            .with_config(reconcilers.clone())
            .owns(Api::<Deployment>::all(client.clone()), pool_children)
            .watches(agents_api.clone(), wc.clone(), move |agent| {
                changes.affected(&agent)
            })
            .watches_stream(
                model_spec_changes(models_api.clone(), wc.clone()),
                move |model| pools_of_namespace(&pools_for_models, &model),
            )
            .reconcile_on(load_changes)
            .graceful_shutdown_on(stopped(stop_rx.clone()))
            .run(
                |obj, ctx| instrumented("pool", obj, ctx, pool::reconcile),
                error_policy("pool"),
                ctx.clone(),
            )
            .for_each(|res| async move { report("pool", res) })
    };
    let models = {
        let models_of_agents = model_cache.clone();
        let models_of_models = model_cache.clone();
        model_ctl
            .watches_stream(agent_spec_changes(agents_api, wc.clone()), move |agent| {
                models_of_namespace(&models_of_agents, &agent)
            })
            // Another Model's list may now reach this one, or no longer (its agents).
            .watches_stream(model_spec_changes(models_api, wc.clone()), move |model| {
                other_models(&models_of_models, &model)
            })
            .graceful_shutdown_on(stopped(stop_rx.clone()))
            .run(
                |obj, ctx| instrumented("model", obj, ctx, model::reconcile),
                error_policy("model"),
                ctx.clone(),
            )
            .for_each(|res| async move { report("model", res) })
    };
    let rehearsals = {
        let jobs = watcher::Config::default()
            .labels(build::REHEARSAL_LABEL)
            .any_semantic();
        Controller::new(Api::<Rehearsal>::all(client.clone()), wc.clone())
            .owns(
                Api::<k8s_openapi::api::batch::v1::Job>::all(client.clone()),
                jobs,
            )
            .graceful_shutdown_on(stopped(stop_rx.clone()))
            .run(
                |obj, ctx| instrumented("rehearsal", obj, ctx, rehearsal::reconcile),
                error_policy("rehearsal"),
                ctx.clone(),
            )
            .for_each(|res| async move { report("rehearsal", res) })
    };
    let synced = {
        let health = health.clone();
        let ctx = ctx.clone();
        let (a, s, m) = (
            agent_cache.clone(),
            space_cache.clone(),
            model_cache.clone(),
        );
        // The only task that awaits the stores themselves (see `Context::caches_synced`).
        async move {
            if a.wait_until_ready().await.is_ok()
                && s.wait_until_ready().await.is_ok()
                && m.wait_until_ready().await.is_ok()
            {
                ctx.mark_caches_synced();
                health.mark_caches_synced();
                info!("caches synced");
            }
        }
    };
    let data_plane = {
        let deps = Deps {
            store,
            cluster: Arc::new(KubeCluster::new(client.clone(), ctx.recorder.clone())),
            metrics,
        };
        let scaler = ctx.scaler.clone();
        let ctx = ctx.clone();
        let stop = stop_rx.clone();
        async move {
            // Decisions need every Agent known: start after the caches synced.
            if ctx.caches_synced().await.is_ok() {
                scaler.run(deps, stop).await;
            }
        }
    };
    let sweeper = {
        let ctx = ctx.clone();
        let mut stop = stop_rx.clone();
        async move {
            loop {
                changes.retain(&ctx.agents);
                pool_changes.retain(&ctx.agents);
                match space::sweep_orphans(&ctx).await {
                    Ok(0) => {}
                    Ok(n) => info!(removed = n, "orphaned space memberships removed"),
                    Err(e) => warn!(error = %crate::report::chain(&e), "orphan sweep failed"),
                }
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs(300)) => {}
                    _ = stop.wait_for(|v| *v) => return,
                }
            }
        }
    };
    tokio::join!(agents, spaces, pools, models, rehearsals, synced, sweeper, data_plane);
    health.mark_controllers_stopped();
}

/// Wraps a reconciler with metrics and failure bookkeeping.
async fn instrumented<K, F, Fut>(
    controller: &'static str,
    obj: Arc<K>,
    ctx: Arc<Context>,
    f: F,
) -> Result<Action, Error>
where
    K: Resource + ResourceExt,
    F: FnOnce(Arc<K>, Arc<Context>) -> Fut,
    Fut: std::future::Future<Output = Result<Action, Error>>,
{
    let key = backoff_key(controller, obj.as_ref());
    let timer = ctx
        .metrics
        .reconcile_duration
        .with_label_values(&[controller])
        .start_timer();
    ctx.metrics
        .reconciles
        .with_label_values(&[controller])
        .inc();
    let result = f(obj, ctx.clone()).await;
    timer.observe_duration();
    match &result {
        Ok(_) => ctx.succeeded(&key),
        Err(e) => ctx
            .metrics
            .reconcile_errors
            .with_label_values(&[controller, e.category()])
            .inc(),
    }
    result
}

/// Requeues a failed object after its backoff ([`Context::retry_after`]), saying why once: a
/// warning, or a debug line when the object had merely changed since it was read.
fn error_policy<K: ResourceExt>(
    controller: &'static str,
) -> impl Fn(Arc<K>, &Error, Arc<Context>) -> Action {
    move |obj, error, ctx| {
        let delay = ctx.retry_after(backoff_key(controller, obj.as_ref()), error);
        let error_text = crate::report::chain(error);
        if error.is_stale() {
            debug!(%controller, object = %obj.name_any(), error = %error_text, retry_in = ?delay, "object changed since it was read; reconciling again");
        } else {
            warn!(%controller, object = %obj.name_any(), error = %error_text, retry_in = ?delay, "reconcile failed");
        }
        Action::requeue(delay)
    }
}

/// What a controller's run says beyond its reconciles: a failed reconcile was already said by
/// [`error_policy`] (not again here), an object gone before its turn is expected; the
/// controller's own failures are warnings.
fn report<K: Resource, QueueError: std::error::Error + 'static>(
    controller: &'static str,
    result: Result<
        (kube::runtime::reflector::ObjectRef<K>, Action),
        kube::runtime::controller::Error<Error, QueueError>,
    >,
) {
    use kube::runtime::controller::Error as E;
    match result {
        Ok(_) | Err(E::ReconcilerFailed(..)) => {}
        Err(E::ObjectNotFound(object)) => {
            debug!(%controller, %object, "object gone before its reconcile");
        }
        Err(e) => warn!(%controller, error = %crate::report::chain(&e), "controller"),
    }
}

/// The key an object's failures are counted under.
fn backoff_key<K: ResourceExt>(controller: &str, obj: &K) -> String {
    format!(
        "{controller}/{}/{}",
        obj.namespace().unwrap_or_default(),
        obj.name_any()
    )
}
